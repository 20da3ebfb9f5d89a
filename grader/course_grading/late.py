"""The course's late policy: a share of the points per day late, for nbgrader's ``AssignLatePenalties``.

nbgrader compares each submission's ``timestamp.txt`` (written by ``nbgrader submit``) with the
chapter's due date (``nbgrader db assignment add chNN --duedate "2026-12-04 17:00:00 UTC"``) and asks
the configured plugin for the penalty in points. ``nbgrader_config.py`` sets this one::

    c.AssignLatePenalties.plugin_class = "course_grading.late.PerDayPenalty"
    c.PerDayPenalty.percent_per_day = 10      # 10 % of the earned score per started day, at most all of it

A chapter without a due date is never late. ``percent_per_day = 0`` switches the penalty off.
"""

from __future__ import annotations

import math

from nbgrader.plugins.latesubmission import LateSubmissionPlugin
from traitlets import Float

__all__ = ["PerDayPenalty", "configured_percent", "penalty", "refresh_penalties"]

DAY_S = 24 * 3600


def penalty(score: float, seconds_late: float, percent_per_day: float) -> float:
    """Points taken from ``score`` for a submission ``seconds_late`` late: each started day costs
    ``percent_per_day`` % of the earned score, never more than the score itself."""
    if seconds_late <= 0 or score <= 0 or percent_per_day <= 0:
        return 0.0
    days = math.ceil(seconds_late / DAY_S)
    return min(score, score * percent_per_day / 100 * days)


class PerDayPenalty(LateSubmissionPlugin):
    """``percent_per_day`` % of the earned score per started day late (see the module docstring)."""

    percent_per_day = Float(10.0, help="percent of the earned score taken per started day late").tag(config=True)

    def late_submission_penalty(self, student_id: str, score: float, total_seconds_late: float) -> float:
        p = penalty(score, total_seconds_late, self.percent_per_day)
        self.log.info("late penalty for %s: %.2f points (%.0f s late, %g %% per day)", student_id, p,
                      total_seconds_late, self.percent_per_day)
        return p


def configured_percent(root) -> float:
    """``PerDayPenalty.percent_per_day`` as the course's ``nbgrader_config.py`` sets it (0: no penalty
    plugin configured)."""
    from pathlib import Path

    from traitlets.config.loader import PyFileConfigLoader
    config = PyFileConfigLoader("nbgrader_config.py", path=str(Path(root))).load_config()
    if "PerDayPenalty" not in str(config.get("AssignLatePenalties", {}).get("plugin_class", "")):
        return 0.0
    return PerDayPenalty(config=config).percent_per_day


def refresh_penalties(db: str, percent_per_day: float) -> list[tuple[str, str, float, float]]:
    """Each submission's late penalty recomputed from what the gradebook holds now: its due date (a
    changed one, or an extension), its timestamp and its score (hand marks given since it was graded
    included), stored back so that the feedback, ``nbgrader export`` and the course's CSVs all read it.
    Returns ``(chapter, student, old, new)`` for every penalty that changed."""
    from nbgrader.api import Gradebook

    changed = []
    with Gradebook(db) as gb:
        for assignment in gb.assignments:
            for sub in assignment.submissions:
                seconds = sub.total_seconds_late
                for nb in sub.notebooks:
                    new = penalty(nb.score, seconds, percent_per_day)
                    old = nb.late_submission_penalty or 0.0
                    if not math.isclose(old, new, abs_tol=1e-9):
                        nb.late_submission_penalty = new
                        changed.append((assignment.name, sub.student.id, old, new))
        gb.db.commit()
    return changed
