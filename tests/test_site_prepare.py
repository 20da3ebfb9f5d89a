"""site/prepare.py's learner's version, without Sphinx: a page shows no output that the exercise
stub could not have produced (issue 32). One chapter, read from solutions/, never executed."""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import nbformat
import pytest

from course_utils import checks

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "site"))
import prepare  # noqa: E402  (site/prepare.py)

CHAPTER = "ch03_scaled_dot_product"
SOLVED = ("checks passed", "use your implementation")


@pytest.fixture(scope="module")
def notebooks():
    src = nbformat.read(ROOT / "solutions" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    return src, prepare.learner_version(copy.deepcopy(src))


def _text(cell) -> str:
    return json.dumps(cell.get("outputs", []), ensure_ascii=False)


def test_the_solution_run_shows_what_the_site_must_not(notebooks):
    """The check below has something to find: the stored outputs say the solution passed."""
    src, _ = notebooks
    stored = "".join(_text(c) for c in src.cells)
    assert all(s in stored for s in SOLVED), f"{CHAPTER}'s stored outputs no longer hold {SOLVED}"


def test_no_test_cell_keeps_an_output_and_no_verdict_says_the_learner_passed(notebooks):
    src, site = notebooks
    tests = [i for i, c in enumerate(site.cells) if prepare.is_test_cell(c)]
    assert tests, f"{CHAPTER}: no nbgrader test cell found"
    for i in tests:
        assert not site.cells[i].outputs, f"cell {i}, a test cell, keeps the solution run's output"
        assert site.cells[i].execution_count is None
    for i, cell in enumerate(site.cells):
        for phrase in SOLVED:
            assert phrase not in _text(cell), f"cell {i} shows {phrase!r}, which only a solution prints"


def test_each_probe_says_what_the_stub_says_and_keeps_the_rest(notebooks, capsys):
    src, site = notebooks
    # What checks.learner_or_reference prints for an exercise left as the stub.
    def stub(*args):
        raise NotImplementedError()
    checks.learner_or_reference(stub, lambda *a: 0, lambda f: f(), name="sdp_attention")
    printed = capsys.readouterr().out.strip()
    assert printed == prepare.STUB_VERDICT.replace(r"[\1]", "[sdp_attention]")

    probes = [i for i, c in enumerate(src.cells) if c.cell_type == "code" and "learner_or_reference" in c.source]
    assert probes, f"{CHAPTER}: no probe cell"
    for i in probes:
        before, after = _text(src.cells[i]), _text(site.cells[i])
        assert before.count("use your implementation") == after.count("not implemented yet") > 0, i
        assert (before.replace("agrees with the reference on a probe", "")
                .replace("use your implementation", "")) == (
            after.replace("not implemented yet", "").replace("use the course_utils reference", "")), \
            f"cell {i}: more than the verdict changed"
    # Cells that are neither test cells nor held a solution keep their outputs.
    kept = [i for i, c in enumerate(src.cells) if c.cell_type == "code" and c.outputs
            and not prepare.is_test_cell(c) and prepare.SOLUTION_BEGIN not in c.source]
    assert kept and all(site.cells[i].outputs for i in kept)
