"""Write the course site's source folder: the learner's version of every executed chapter.

``make site`` runs ``python site/prepare.py`` and then Sphinx (site/conf.py) on what it wrote.
For each chapter it reads the *executed* solution notebook ``solutions/chNN_*/chNN_*.ipynb``
(never re-executed) and applies nbgrader's own ``ClearSolutions`` and ``ClearHiddenTests``, the
steps that make the student release, but keeps the stored outputs: a page shows the exercise
stubs a learner gets, with the figures and numbers of the solution run. Outputs of the cells that
held a solution or hidden tests are dropped too (they come from the solution, not from the stub).
It also copies the index page and the glossary (GLOSSARY.md, its links rewritten from the
repository's notebooks to the site's chapters).

Usage: ``python site/prepare.py [--root ROOT] [--out OUT]`` (default out: site/_build/src).
"""
from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

import nbformat
from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions

ROOT = Path(__file__).resolve().parent.parent
HIDDEN_BEGIN = "### BEGIN HIDDEN TESTS"
SOLUTION_BEGIN = "### BEGIN SOLUTION"
# GLOSSARY.md links a term to a chapter section in the repository's student notebook
# (notebooks/chNN_x/chNN_x.ipynb#anchor); on the site the same section is chapters/chNN_x.ipynb.
REPO_LINK = re.compile(r"\]\((?:\./)?notebooks/(ch\d\d_\w+)/\1\.ipynb(#[^)\s]*)?\)")
# The chapters point to the last `make bench` tables in the repository; the site carries them as a page.
BENCH = Path("benchmarks") / "results" / "latest.md"
BENCH_LINK = re.compile(r"\]\((?:\.\./\.\./)?benchmarks/results/latest\.md\)")


def chapters(root: Path) -> list[Path]:
    """The executed solution notebooks, in chapter order."""
    found = sorted(p for p in (root / "solutions").glob("ch*/ch*.ipynb")
                   if p.parent.name == p.stem and ".ipynb_checkpoints" not in p.parts)
    if not found:
        raise SystemExit(f"no executed chapters under {root / 'solutions'}")
    return found


def learner_version(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` with nbgrader's ClearSolutions and ClearHiddenTests applied, outputs kept.

    The outputs of cells that held a solution or hidden tests are cleared: they were made by the
    solution. Raises ValueError if a marker survives (nbgrader's markers changed or were mistyped).
    """
    held = set()
    for i, cell in enumerate(nb.cells):
        if SOLUTION_BEGIN in cell.source or HIDDEN_BEGIN in cell.source:
            held.add(i)
    ClearSolutions().preprocess(nb, {})
    ClearHiddenTests().preprocess(nb, {})
    for i, cell in enumerate(nb.cells):
        if i in held and cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
            if marker in cell.source:
                raise ValueError(f"cell {i} still holds {marker!r} after nbgrader's preprocessors")
    return nb


def glossary_for_site(text: str) -> str:
    """GLOSSARY.md with its links to the repository's notebooks pointed at the site's chapters."""
    return REPO_LINK.sub(lambda m: f"](chapters/{m.group(1)}.ipynb{m.group(2) or ''})", text)


def prepare(root: Path, out: Path) -> list[Path]:
    """Write the site's source folder ``out`` from the course at ``root``; return the chapters."""
    if out.exists():
        shutil.rmtree(out)
    (out / "chapters").mkdir(parents=True)
    written = []
    for src in chapters(root):
        nb = learner_version(nbformat.read(src, as_version=4))
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                cell.source = BENCH_LINK.sub("](../performance.md)", cell.source)
        target = out / "chapters" / src.name
        nbformat.write(nb, target)
        written.append(target)
    shutil.copy(root / "site" / "index.md", out / "index.md")
    (out / "glossary.md").write_text(glossary_for_site((root / "GLOSSARY.md").read_text()))
    shutil.copy(root / BENCH, out / "performance.md")
    return written


def main() -> None:
    """Command line: see the module's docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--out", type=Path, default=ROOT / "site" / "_build" / "src")
    args = parser.parse_args()
    written = prepare(args.root.resolve(), args.out.resolve())
    print(f"site/prepare.py: {len(written)} chapters (learner's version, stored outputs) -> {args.out}")


if __name__ == "__main__":
    main()
