"""nbgrader configuration for the course (see README, "For instructors").

solutions/<chapter>/ is the nbgrader *source* (with solutions and hidden tests),
notebooks/<chapter>/ the *release* that learners open. The gradebook is never committed.
"""
import os
import tempfile

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor, Preprocessor
from nbgrader.preprocessors import ClearHiddenTests, GetGrades
from traitlets import Bool

c = get_config()  # noqa: F821 (provided by traitlets when the file is loaded)

ROOT = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "attention-course"
c.CourseDirectory.root = ROOT
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(ROOT, "gradebook.db")
c.Exchange.root = os.path.join(tempfile.gettempdir(), "attention-course-exchange")

c.Execute.timeout = 300            # per cell; the default 30 s is too short for training cells
c.Execute.kernel_name = "python3"  # ignore the kernelspec stored in a learner's notebook


class ShortTracebacks(Preprocessor):
    """Replace tracebacks in graded cells by one line, so feedback never shows hidden tests."""

    enabled = Bool(True)  # nbconvert preprocessors are disabled by default

    def preprocess_cell(self, cell, resources, index):
        if cell.metadata.get("nbgrader", {}).get("grade"):
            for output in cell.get("outputs", []):
                if output.output_type == "error":
                    output.traceback = [f"{output.ename}: {output.evalue}"]
        return cell, resources


c.GenerateFeedback.preprocessors = [
    GetGrades,
    ClearHiddenTests,
    ShortTracebacks,
    CSSHTMLHeaderPreprocessor,
]
