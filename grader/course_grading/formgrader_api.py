"""formgrader's Autograde and Generate Feedback buttons, done as ``make autograde`` does them.

nbgrader's formgrader calls its ``NbGraderAPI`` in the instructor's Jupyter server. Left as it is,
its Autograde ran ``nbgrader autograde`` on the raw submission in that process (no intake, no
grading record: it deleted ``autograded/<student>/<chapter>/``, so the next ``make autograde``
graded it again and sent every hand-marked answer back to "needs manual grading"), and its Generate
Feedback wrote nbgrader's own page over the course's (MathJax from a CDN, raw TeX offline, no
Content-Security-Policy, contents named "Test cell"). :class:`CourseAPI` keeps nbgrader's API and
answers in its form (``success``, ``log``, ``error``), but:

* **Autograde** regrades that one submission through the course's grader
  (:func:`~course_grading.autograde.autograde_submission`, what ``make autograde FORCE=1``
  does for it: sandbox, intake, grading record, hand marks kept where the answer is unchanged,
  feedback); the log names its score and every fault;
* **Generate Feedback** writes the course's feedback
  (:func:`~course_grading.autograde.make_feedback`, ``make autograde``'s own);
* **Release Feedback** stays nbgrader's: it copies ``feedback/`` into the exchange, and what is
  there is now always the course's page.

Both print what they do into the log the button shows. The exports (``grades*.csv``) stay
``make autograde``'s; the log says so. ``formgrader_guard`` installs this class as formgrader's API.
"""

from __future__ import annotations

import contextlib
import io
import traceback
from pathlib import Path

from nbgrader.apps.api import NbGraderAPI

__all__ = ["CourseAPI", "run_logged"]

EXPORTS_NOTE = "the exports (grades.csv, grades_by_exercise.csv, grades_lms.csv) are written by `make autograde`"


def run_logged(step) -> dict:
    """``step()``, with what it prints as the log, in the form of nbgrader's ``capture_log``:
    ``{"success": bool, "log": str, "error": str}`` (the error a one-line reason, or a traceback for a bug)."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            step()
    except SystemExit as e:          # the grader's refusals: their message is the reason
        return {"success": False, "log": out.getvalue(), "error": str(e.code)}
    except Exception:
        return {"success": False, "log": out.getvalue(), "error": traceback.format_exc()}
    return {"success": True, "log": out.getvalue()}


class CourseAPI(NbGraderAPI):
    """nbgrader's API with the course's Autograde and Generate Feedback (see the module's docstring)."""

    @property
    def _root(self) -> Path:
        return Path(self.coursedir.root)

    def autograde(self, assignment_id, student_id, force=True, create=True):
        from course_grading.autograde import autograde_submission

        def step():
            result = autograde_submission(self._root, assignment_id, student_id)
            print(result.table())
            print(f"faults: {result.reason}" if result.reason else "faults: none")
            if result.feedback:
                print(f"feedback: {result.feedback.relative_to(self._root)}")
            print(f"note: {EXPORTS_NOTE}")
        return run_logged(step)

    def generate_feedback(self, assignment_id, student_id=None, force=True):
        from course_grading.autograde import make_feedback

        def step():
            for page in make_feedback(self._root, assignment_id, student_id):
                print(f"wrote {page.relative_to(self._root)}")
        return run_logged(step)
