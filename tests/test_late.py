"""The course's late policy (grader/course_grading/late.py): 10 % of the earned score per started day."""

from pathlib import Path

import pytest
from nbgrader.preprocessors import AssignLatePenalties
from traitlets.config import Config

from course_grading.late import DAY_S, PerDayPenalty, penalty


@pytest.mark.parametrize("seconds, expected", [(-5, 0.0), (0, 0.0), (1, 2.0), (DAY_S, 2.0), (DAY_S + 1, 4.0),
                                               (9.5 * DAY_S, 20.0), (30 * DAY_S, 20.0)])
def test_each_started_day_costs_ten_percent_never_more_than_the_score(seconds, expected):
    assert penalty(20.0, seconds, 10.0) == pytest.approx(expected)


def test_no_penalty_without_points_or_with_the_policy_off():
    assert penalty(0.0, 3 * DAY_S, 10.0) == 0.0
    assert penalty(20.0, 3 * DAY_S, 0.0) == 0.0


def test_nbgrader_config_selects_the_plugin():
    cfg = Config()
    path = Path(__file__).resolve().parent.parent / "nbgrader_config.py"
    exec(compile(path.read_text(), str(path), "exec"), {"get_config": lambda: cfg, "__file__": str(path)})
    pre = AssignLatePenalties(config=cfg)
    plugin = pre.plugin_class(parent=pre)     # what AssignLatePenalties.preprocess makes
    assert isinstance(plugin, PerDayPenalty) and plugin.percent_per_day == 10.0
    assert plugin.late_submission_penalty("s", 12.0, 2 * DAY_S + 5) == pytest.approx(3.6)


def test_the_lms_file_leaves_a_chapter_awaiting_marks_empty_or_marks_it_provisional(tmp_path):
    # Issue 49: an early upload of grades_lms.csv must not pass a chapter awaiting hand marks for a grade.
    import csv

    from course_grading import gradebook
    maxima = {"ch01": 20.0, "ch02": 25.0}
    provisional = {"ann": ["ch02: 4 points to be marked"]}
    for lms, total in (({"ann": {"ch01": 18.0, "ch02": 20.0}, "ben": {"ch01": 10.0, "ch02": 0.0}}, "38"),
                       ({"ann": {"ch01": 18.0, "ch02": None}, "ben": {"ch01": 10.0, "ch02": 0.0}}, "")):
        rows = list(csv.DictReader(gradebook._write_lms(tmp_path / "lms.csv", lms, maxima, provisional).open()))
        ann, ben = rows
        assert ann["ch02 (25)"] == ("20" if total else "") and ann["total (45)"] == total
        assert ann["provisional"] == "ch02: 4 points to be marked" and ben["provisional"] == ""
        assert ben["total (45)"] == "10"
    with pytest.raises(ValueError, match="lms_pending='maybe'"):
        gradebook.write_grades_csv(tmp_path, {}, lms_pending="maybe")
