"""The release shows the stored run (issue 47): until the learner runs a cell, its output is the one the
text quotes as "the stored run", and nothing a stub could not have printed (course_utils/stored_run.py)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import nbformat
import pytest

from course_grading import course
from course_utils import stored_run

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = course.chapters(ROOT)
SOLVED = ("checks passed", "use your implementation")


def _outputs(cell) -> str:
    return json.dumps(cell.get("outputs", []), ensure_ascii=False, sort_keys=True)


@pytest.mark.parametrize("release", ["notebooks", "notebooks-zh_CN"])
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_release_shows_the_stored_run_and_nothing_a_stub_cannot_print(chapter, release):
    solution = nbformat.read(ROOT / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
    released = nbformat.read(ROOT / release / chapter / f"{chapter}.ipynb", as_version=4)
    learner = stored_run.learner_version(copy.deepcopy(solution))
    shown = 0
    for i, (mine, stored, solved) in enumerate(zip(released.cells, learner.cells, solution.cells, strict=True)):
        if mine.cell_type != "code":
            continue
        assert _outputs(mine) == _outputs(stored), f"{release}/{chapter} cell {i}: not the stored run's output"
        held = stored_run.is_test_cell(solved) or stored_run.SOLUTION_BEGIN in solved.source
        assert not (held and mine.outputs), f"{release}/{chapter} cell {i} (a test or answer cell) shows an output"
        assert not any(s in _outputs(mine) for s in SOLVED), f"{release}/{chapter} cell {i} shows the solution's verdict"
        shown += bool(mine.outputs)
    plain = sum(1 for c in solution.cells if c.cell_type == "code" and c.outputs
                and not stored_run.is_test_cell(c) and stored_run.SOLUTION_BEGIN not in c.source)
    assert shown == plain > 0, f"{release}/{chapter}: {shown} cells show the stored run, {plain} should"


def test_outputs_never_land_under_other_code():
    solution = nbformat.read(ROOT / "solutions" / CHAPTERS[0] / f"{CHAPTERS[0]}.ipynb", as_version=4)
    released = nbformat.read(ROOT / "notebooks" / CHAPTERS[0] / f"{CHAPTERS[0]}.ipynb", as_version=4)
    moved = copy.deepcopy(released)
    moved.cells.insert(1, moved.cells.pop(2))
    with pytest.raises(ValueError, match="ids differ"):
        stored_run.add_stored_outputs(moved, solution)
    edited = copy.deepcopy(released)
    code = next(c for c in edited.cells if c.cell_type == "code")
    code.source += "\nprint('another line')"
    with pytest.raises(ValueError, match="differs from the solution"):
        stored_run.add_stored_outputs(edited, solution)
    fresh = copy.deepcopy(released)
    for c in fresh.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    assert stored_run.add_stored_outputs(fresh, solution) > 0
    assert fresh == released
