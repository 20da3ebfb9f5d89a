"""A regrade keeps a grader's mark while what was marked did not change (``parallel.hand_grade_stands``);
nbgrader's own rule sends every hand-marked cell back to "needs manual grading" on every run."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from course_grading.parallel import hand_grade_stands

BEFORE = {"ex1_scores": "def f(): return 1", "ex1_scores-visible": "check()", "ex1_scores-hidden": "check()",
          "ex2_softmax": "def g(): return 2", "q1_scale": "Because $\\sqrt{d_k}$.", "q1_scale-prompt": "Why?"}


def _grade(name, *, manual=2.0, pending=False, auto=None, kind="markdown"):
    return SimpleNamespace(name=name, manual_score=manual, needs_manual_grade=pending, auto_score=auto, cell_type=kind)


def _with(**changes):
    return {**BEFORE, **changes}


@pytest.mark.parametrize("grade, new_auto, after, stands", [
    (_grade("q1_scale"), None, _with(), True),                                    # the same written answer
    (_grade("q1_scale"), None, _with(q1_scale="Another answer."), False),          # a new answer: look again
    (_grade("q1_scale"), None, _with(ex2_softmax="changed"), True),                # another exercise changed
    (_grade("q1_scale", manual=None, pending=True), None, _with(), False),          # never marked
    (_grade("q1_scale", pending=True), None, _with(), False),                      # marked, then sent back
    (_grade("ex1_scores-visible", auto=1.0, kind="code"), 1.0, _with(), True),     # an override of a test
    (_grade("ex1_scores-visible", auto=1.0, kind="code"), 0.0, _with(), False),    # the test's result changed
    (_grade("ex1_scores-visible", auto=1.0, kind="code"), 1.0, _with(ex1_scores="def f(): return 3"), False),
    (_grade("ex1_scores-visible", auto=1.0, kind="code"), 1.0, _with(ex2_softmax="changed"), True),
])
def test_a_mark_stands_only_on_what_was_marked(grade, new_auto, after, stands):
    assert hand_grade_stands(grade, new_auto, BEFORE, after) is stands


def test_without_the_earlier_autograded_notebook_nbgraders_rule_holds():
    assert hand_grade_stands(_grade("q1_scale"), None, None, BEFORE) is False
    assert hand_grade_stands(_grade("q1_scale"), None, {}, BEFORE) is False
