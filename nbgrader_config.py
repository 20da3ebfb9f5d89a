"""nbgrader configuration for the course (see README, "For instructors"): configuration only.

solutions/<chapter>/ is the nbgrader *source* (with solutions and hidden tests),
notebooks/<chapter>/ the *release* that learners open. The gradebook is never committed.
The grader's steps named here live in grader/course_grading/ (execution.py, feedback.py).
"""
import os

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import (
                                    AssignLatePenalties,
                                    CheckCellMetadata,
                                    ClearHiddenTests,
                                    ClearOutput,
                                    DeduplicateIds,
                                    GetGrades,
                                    IgnorePattern,
                                    LimitOutput,
                                    OverwriteKernelspec,
                                    SaveAutoGrades,
)

from course_grading.exchange import COURSE_ID, exchange_root
from course_grading.execution import SandboxedExecute
from course_grading.feedback import (
                                    FaultNote,
                                    ScrubHidden,
                                    ShortTracebacks,
                                    WithholdAfterHidden,
)
from course_grading.overwrite import ReleaseAwareOverwriteCells
from course_grading.rubric import RubricMarks

c = get_config()  # noqa: F821 (provided by traitlets when the file is loaded)

ROOT = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = COURSE_ID
c.CourseDirectory.root = ROOT
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(ROOT, "gradebook.db")
# A chapter's text source (solutions/chNN/chNN.py, jupytext) holds the solutions and hidden tests:
# it never goes into the release or a submission's copy (tests/test_grading.py checks the release).
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.py", "*.md",
                            "jupytext.toml"]
# nbgrader's exchange: $COURSE_EXCHANGE, else <TMPDIR>/attention-course-exchange (docs/jupyterhub.md).
c.Exchange.root = exchange_root()
# Collect checks who submitted (the folder's owner is the student it names), refuses links, hard
# links, special files and oversize trees, and copies without following links (grader/course_grading/
# collect.py). Where every student is one Unix account, see docs/jupyterhub.md (trust_names, ngshare).
c.ExchangeFactory.collect = "course_grading.collect.CourseCollect"
# All students: a student configuration read system-wide on a hub sets the student id to the hub
# user (grader/course_grading/exchange.py); in the course root the instructor's commands see everyone.
c.CourseDirectory.student_id = "*"

# Each submission runs in its own sandbox (grader/course_grading/sandbox.py: bubblewrap, cgroups,
# limits in Limits / GRADING_* variables), the course's own Python whatever kernelspec the notebook
# names, output caps, the tamper guard, and test results decided by the grader (execution.py).
# nbgrader's first step, with its tampering warning ("checksum has changed") only for a read-only cell
# the learner changed, not for every test cell whose hidden tests the release left out (overwrite.py).
c.Autograde.sanitize_preprocessors = [ClearOutput, DeduplicateIds, OverwriteKernelspec, ReleaseAwareOverwriteCells,
                                      CheckCellMetadata]
c.Autograde.autograde_preprocessors = [SandboxedExecute, IgnorePattern, ClearMetadataPreprocessor,
                                       LimitOutput, SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]

# The late policy (docs: the instructor's guide): a due date per chapter in the gradebook
# (`nbgrader db assignment add chNN --duedate "..."`), and 10 % of the earned score per started day late.
c.AssignLatePenalties.plugin_class = "course_grading.late.PerDayPenalty"
c.PerDayPenalty.percent_per_day = 10.0

# RubricMarks: each written answer's rubric (inserted by the grader beside it for formgrader) becomes
# its marks by part once it is marked, and stays out of the feedback until then (grader/course_grading/rubric.py).
c.GenerateFeedback.preprocessors = [
    GetGrades,
    RubricMarks,
    WithholdAfterHidden,
    ScrubHidden,
    ClearHiddenTests,
    ShortTracebacks,
    FaultNote,
    CSSHTMLHeaderPreprocessor,
]
