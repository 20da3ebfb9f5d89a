"""nbgrader configuration for the course (see README, "For instructors").

solutions/<chapter>/ is the nbgrader *source* (with solutions and hidden tests),
notebooks/<chapter>/ the *release* that learners open. The gradebook is never committed.
"""
import os
import tempfile

import nbformat
from nbconvert.preprocessors import (
    ClearMetadataPreprocessor,
    CSSHTMLHeaderPreprocessor,
    Preprocessor,
)
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearHiddenTests,
    GetGrades,
    IgnorePattern,
    LimitOutput,
    SaveAutoGrades,
)
from traitlets import Bool

from course_utils.grading import META, SandboxedExecute

c = get_config()  # noqa: F821 (provided by traitlets when the file is loaded)

ROOT = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "attention-course"
c.CourseDirectory.root = ROOT
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(ROOT, "gradebook.db")
# A chapter's text source (solutions/chNN/chNN.py, jupytext) holds the solutions and hidden tests:
# it never goes into the release or a submission's copy (tests/test_sources.py checks the release).
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.py", "*.md",
                            "jupytext.toml"]
c.Exchange.root = os.path.join(tempfile.gettempdir(), "attention-course-exchange")

# Each submission runs in its own sandbox (course_utils.sandbox): no network, limits on time per
# notebook and per cell, memory and processes (course_utils.sandbox.Limits, GRADING_* variables),
# the course's own Python whatever kernelspec the notebook names, and the tamper guard.
c.Autograde.autograde_preprocessors = [SandboxedExecute, IgnorePattern, ClearMetadataPreprocessor,
                                       LimitOutput, SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
# A submission that deleted a test cell is graded with the test put back (course_utils.grading.intake).


class ShortTracebacks(Preprocessor):
    """Replace tracebacks in graded cells by one line, so feedback never shows hidden tests."""

    enabled = Bool(True)  # nbconvert preprocessors are disabled by default

    def preprocess_cell(self, cell, resources, index):
        if cell.metadata.get("nbgrader", {}).get("grade"):
            for output in cell.get("outputs", []):
                if output.output_type == "error":
                    output.traceback = [f"{output.ename}: {output.evalue}"]
        return cell, resources


class FaultNote(Preprocessor):
    """Put the submission's faults (hang, dead kernel, tampering, ...) at the top of its feedback."""

    enabled = Bool(True)

    def preprocess(self, nb, resources):
        report = nb.metadata.get(META, {})
        lines = list(report.get("faults", []))
        for test, what in report.get("tampering", {}).items():
            lines.append(f"{test}: the notebook changed what the tests rely on ({'; '.join(what)[:300]}); "
                         "this exercise gets 0")
        if lines:
            text = "**Grading note.** " + " ".join(f"{ln}." if not ln.endswith(".") else ln for ln in lines)
            nb.cells.insert(0, nbformat.v4.new_markdown_cell(text))
        return nb, resources


c.GenerateFeedback.preprocessors = [
    GetGrades,
    ClearHiddenTests,
    ShortTracebacks,
    FaultNote,
    CSSHTMLHeaderPreprocessor,
]
