"""One mistake costs one exercise (issue 54): chapter 5's exercise 3 (``head_attention_map``) calls the
learner's ``relative_offsets`` (exercise 1); a wrong exercise 1 must cost exercise 1's points only.

Graded with the course's own grader: the solution notebook with exercise 1's answer replaced by a wrong
one that passes its visible tests (``HIDDEN_ONLY["ex1_offsets"]``: row and column taken with the height
where the width belongs). Only ``ex1_offsets-hidden`` may lose points: while exercise 3's function runs,
``checks.call`` puts the reference in place of every other exercise's function the notebook defines
(:func:`course_utils.domains.isolated`).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import nbformat

import course_grading as grading

REPO = Path(__file__).resolve().parent.parent
CHAPTER = "ch05_attention_as_convolution"


def _wrong_ex1() -> str:
    spec = importlib.util.spec_from_file_location("wrong_ch05", REPO / "tests" / "wrong_answers" / f"{CHAPTER}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.HIDDEN_ONLY["ex1_offsets"]


def test_a_wrong_exercise_1_costs_exercise_1_only(tmp_path):
    src = grading.chapter_notebook(CHAPTER, REPO)
    nb = nbformat.read(src, as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "ex1_offsets":
            cell.source = _wrong_ex1()
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    sub = tmp_path / src.name
    nbformat.write(nb, sub)
    course = grading.new_course([CHAPTER], REPO)
    try:
        res = grading.autograde_in(course, CHAPTER, {"ci-wrong-ex1": sub}, feedback=False)["ci-wrong-ex1"]
    finally:
        shutil.rmtree(course, ignore_errors=True)
    lost = sorted(c.grade_id for c in res.cells if not c.manual and c.score < c.max_score)
    assert lost == ["ex1_offsets-hidden"], res.table()
