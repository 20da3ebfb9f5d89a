"""The grader's reference run (grader/course_grading/reference.py): a run of the real grader, so it is
part of ``make test``, not of ``make unit``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def test_a_solution_that_fails_its_own_tests_cannot_be_the_reference(tmp_path):
    """No submission is held to a wrong answer: the reference run stops the chapter with the reason."""
    import nbformat

    import course_grading as grading
    from course_grading import reference, sandbox

    repo = Path(__file__).resolve().parent.parent
    chapter = "ch03_scaled_dot_product"
    course = grading.new_course([chapter], repo)
    try:
        src = grading.chapter_notebook(chapter, course)
        nb = nbformat.read(src, as_version=4)
        first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
        nb.cells = [c for i, c in enumerate(nb.cells)
                    if i == first or c.metadata.get("nbgrader", {}).get("grade_id", "").startswith("ex1_")]
        answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
        answer.source = "def scaled_scores(q, k):\n    return q @ k.transpose(-2, -1)\n"   # not scaled
        nbformat.write(nb, src)
        limits = sandbox.Limits(notebook_s=120, cell_s=60, memory_mb=2048, processes=64, children=8, file_mb=64)
        with pytest.raises(RuntimeError, match="cannot be the grader's reference: its test ex1_scores-visible fails"):
            reference.ensure(course, chapter, limits)
        assert not reference.reference_path(course, chapter, limits).exists()
    finally:
        shutil.rmtree(course, ignore_errors=True)
