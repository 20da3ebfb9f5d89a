"""Every correct answer gets full marks and every wrong answer loses points (in-process, fast).

``tests/correct_answers/<chapter>.py`` holds, for every autograded exercise, at least two correct
answers written differently from the solution (another precision, einsum for matmul, a loop for a
vectorised form, Hugging Face's way of writing it); ``tests/wrong_answers/<chapter>.py`` holds the
plausible wrong ones (``SOURCE``, ``HIDDEN_ONLY``, ``MORE_WRONG``, and ``REVIEWED``: those reviewers
wrote). Each is graded by ``tools/mutants.py --correct``: the chapter runs once in grading mode and
every answer is tried in a forked child against its exercise's visible and hidden tests. The real
grader grades the first alternative of every exercise too (``tests/test_grading.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import exercise_runner as runner  # noqa: E402
import mutants  # noqa: E402

CHAPTERS = [d.name for d in sorted((ROOT / "solutions").glob("ch*")) if d.is_dir()]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_exercise_has_two_correct_alternatives_and_a_wrong_answer(chapter):
    exs = set(runner.exercises(runner.chapter_cells(chapter)))
    good = mutants.correct_answers(chapter)
    assert set(good) <= exs, f"tests/correct_answers/{chapter}.py names unknown exercises {sorted(set(good) - exs)}"
    few = sorted(ex for ex in exs if len(good.get(ex, [])) < 2)
    assert not few, f"tests/correct_answers/{chapter}.py needs at least two correct answers for {few}"
    bad = mutants.wrong_answers(chapter)
    missing = sorted(exs - set(bad))
    assert not missing, f"tests/wrong_answers/{chapter}.py has no wrong answer for {missing}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_correct_answers_get_full_marks_and_wrong_ones_lose_points(chapter):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.pop("NBGRADER_EXECUTION", None)
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "mutants.py"), chapter, "--correct", "--jobs", "1"],
                          capture_output=True, text=True, env=env, timeout=600)
    bad = [ln for ln in proc.stdout.splitlines() if ln.startswith("BAD")]
    assert proc.returncode == 0 and not bad, (
        f"{chapter}: answers graded against what they should get:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}")
    assert proc.stdout.count("\nok ") + proc.stdout.startswith("ok ") >= 2, proc.stdout
    # A HIDDEN_ONLY answer must lose its hidden tests only: it passes the visible ones (the real grader
    # checks the same on one submission per chapter, tests/test_grading.py).
    hidden_only = [ln.split() for ln in proc.stdout.splitlines() if "wrong HIDDEN_ONLY" in ln]
    assert hidden_only, f"{chapter}: no HIDDEN_ONLY answer was graded:\n{proc.stdout[-3000:]}"
    for _, ex, _, _, verdict, *lost in hidden_only:
        lost = [cell.rstrip(",") for cell in lost]
        assert verdict == "loses" and f"{ex}-visible" not in lost and f"{ex}-hidden" in lost, (
            f"{chapter} {ex}: the HIDDEN_ONLY answer must pass the visible tests and fail the hidden ones, "
            f"but it {verdict} {' '.join(lost)}")


def test_correct_notebooks_install_every_alternative_once():
    """``make correct-notebooks`` (tools/correct_in_chapter.py): over its rounds, every correct alternative
    sits in its exercise's answer cell exactly once, and nothing else of the solution changes."""
    import correct_in_chapter as tool
    import nbformat

    chapter = CHAPTERS[-1]
    alternatives = mutants.correct_answers(chapter)
    solution = nbformat.read(ROOT / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
    seen = {ex: [] for ex in alternatives}
    for k, names in tool.rounds(chapter):
        nb, answers = tool.answered(chapter, k)
        assert sorted(answers.values()) == sorted(names.items()), (k, names)
        for i, (cell, original) in enumerate(zip(nb.cells, solution.cells)):
            if i in answers:
                seen[answers[i][0]].append(cell.source)
            else:
                assert cell.source == original.source, f"round {k} changed cell {i}"
            assert not cell.get("outputs"), f"round {k} kept the outputs of cell {i}"
    assert seen == {ex: [src for _, src in alts] for ex, alts in alternatives.items()}
