"""`make correct-notebooks`: every correct answer of ``tests/correct_answers/`` run inside its whole chapter.

``tests/test_answers.py`` grades each correct answer against its exercise's tests, and the real grader
(``tests/test_grading.py``) runs the first alternative of every exercise through the whole notebook.
The other alternatives feed the chapter's experiments too: ``checks.learner_or_reference`` hands the
learner's function to them once it agrees with the reference on a probe (to 1e-4), and an experiment
that asks more of it stops a correct learner's notebook. (It happened: ch08 asserted RMSNorm against
LayerNorm to 1e-9, and Hugging Face's RMSNorm, which computes in float32, raised there.)

Round ``k`` runs the solution notebook with the ``k``-th correct alternative of every exercise that
has one, in grading mode (``NBGRADER_EXECUTION=autograde``, as nbgrader runs it: the experiments
shrink), each notebook in a kernel of its own, and reports every error: in a test cell (the answer
lost points) or anywhere else (the answer broke the chapter), with the last answer before it. Exits 1
on any error.

Usage::

    python tools/correct_in_chapter.py               # every chapter (about 3 min on 2 cores)
    python tools/correct_in_chapter.py ch08 --jobs 1
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
import exercise_runner as runner  # noqa: E402
import mutants  # noqa: E402


def rounds(chapter: str) -> list[tuple[int, dict[str, str]]]:
    """``[(k, {exercise: name of its k-th correct alternative})]`` for every round with at least one."""
    alternatives = mutants.correct_answers(chapter)
    deepest = max((len(alts) for alts in alternatives.values()), default=0)
    return [(k, {ex: alts[k][0] for ex, alts in alternatives.items() if k < len(alts)}) for k in range(deepest)]


def answered(chapter: str, k: int):
    """The solution notebook with the ``k``-th correct alternative in every answer cell that has one
    (outputs cleared), and ``{cell index: (exercise, alternative's name)}`` of those answer cells."""
    alternatives = mutants.correct_answers(chapter)
    nb = nbformat.read(runner.ROOT / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
    answers = {}
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        options = alternatives.get(meta.get("grade_id"), [])
        if cell.cell_type == "code" and meta.get("solution") and k < len(options):
            answers[i] = meta["grade_id"], options[k][0]
            cell.source = options[k][1]
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb, answers


def run_round(chapter: str, k: int) -> list[str]:
    """Execute round ``k`` of ``chapter``; one line per cell that raised."""
    from nbclient import NotebookClient

    nb, answers = answered(chapter, k)
    os.environ.update(NBGRADER_EXECUTION="autograde", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(runner.ROOT / "solutions" / chapter)}}).execute()
    problems = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") != "error":
                continue
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            before = max((j for j in answers if j <= i), default=None)
            last = "{} ({!r})".format(*answers[before]) if before is not None else "none"
            where = f"test cell {grade_id}" if grade_id else f"cell {i}"
            problems.append(f"{where}, after the answer {last}: {out['ename']}: {str(out['evalue'])[:300]}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="chapters (ch03 or its folder name); default: all")
    parser.add_argument("--jobs", type=int, default=2, help="notebooks run at a time")
    args = parser.parse_args(argv)
    chapters = [runner.find_chapter(c) for c in args.chapters] or sorted(
        p.name for p in (runner.ROOT / "solutions").glob("ch*") if p.is_dir())
    todo = [(ch, k, names) for ch in chapters for k, names in rounds(ch)]
    bad = 0
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for (ch, k, names), problems in zip(todo, pool.map(run_round, *zip(*[(ch, k) for ch, k, _ in todo]))):
            print(f"{'BAD' if problems else 'ok '} {ch} round {k}: {', '.join(f'{e}={n!r}' for e, n in names.items())}")
            for line in problems:
                print(f"    {line}")
            bad += bool(problems)
    print(f"{len(todo) - bad} of {len(todo)} rounds ran without an error")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
