"""A learner's feedback page in headless Chromium: offline, math rendered, each exercise named.

Chapter 3, cut to its graded cells (``tests/notebook_helpers.lean``), is graded by the course's grader
with one wrong answer and a written answer that holds math; its feedback HTML is served from a
local folder and opened. The page must fetch nothing (MathJax travels inside it, under a
Content-Security-Policy that a stray script or a blocked fetch would break with a console error),
render the math (MathJax's ``mjx-container`` elements, no raw TeX left), and name each graded cell by
its exercise in the contents list. Screenshot: site/_build/screenshots/feedback.png.
"""
from __future__ import annotations

import functools
import shutil
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from notebook_helpers import lean, meta  # noqa: E402

import course_grading as grading  # noqa: E402

CHAPTER = "ch03_scaled_dot_product"
MATH = r"The scale is $1/\sqrt{d_k}$, so that $q \cdot k$ keeps unit variance."
WRONG = "def scaled_scores(q, k):\n    return q @ k.transpose(-2, -1)\n"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


@pytest.fixture(scope="module")
def feedback_url(tmp_path_factory, chromium_path):
    tmp = tmp_path_factory.mktemp("feedback")
    course = grading.new_course([CHAPTER], ROOT)
    try:
        nb = lean(grading.chapter_notebook(CHAPTER, course))
        for cell in nb.cells:
            m = meta(cell)
            if m.get("grade_id") == "ex1_scores":
                cell.source = WRONG
            elif m.get("solution") and m.get("grade") and cell.cell_type == "markdown":
                cell.source = MATH
        path = tmp / f"{CHAPTER}.ipynb"
        nbformat.write(nb, path)
        graded = grading.autograde_in(course, CHAPTER, {"learner": path}, feedback=True)["learner"]
        assert graded.feedback is not None and graded.feedback.exists(), graded.table()
        served = tmp / "served"
        served.mkdir()
        shutil.copy(graded.feedback, served / "feedback.html")
    finally:
        shutil.rmtree(course, ignore_errors=True)
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(served)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/feedback.html"
    server.shutdown()
    server.server_close()


def test_feedback_page_is_offline_renders_math_and_names_exercises(feedback_url, watch, screenshots):
    page = watch.page
    page.goto(feedback_url, wait_until="load")
    page.locator("mjx-container").first.wait_for(timeout=60_000)
    body = page.locator("body").inner_text()
    assert r"\sqrt{d_k}" not in body, "raw TeX left in the feedback: MathJax did not run"
    toc = page.locator("#toc").inner_text()
    assert "ex1_scores: visible tests" in toc and "ex1_scores: hidden tests" in toc, toc
    assert "Test cell" not in toc, toc
    assert "scaled_scores" in body and "checks failed" in body, "the wrong answer's failing checks are not shown"
    page.screenshot(path=str(screenshots / "feedback.png"), full_page=False)
    watch.assert_clean("the feedback page")
