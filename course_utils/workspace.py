"""The learner's own copy of the course: filled once from the release, never overwritten, updated by merging.

``notebooks/`` is the release the repository ships; ``make test`` compares it with a fresh release,
and ``make release`` rewrites it. A learner's answers therefore never live there: ``make lab`` opens
the workspace (``workspace/`` by default, ignored by git), which this module keeps:

* a chapter the workspace does not have yet is copied in;
* a chapter it has is *merged* with the new release, cell by cell, the way nbgitpuller merges a
  learner's repository on a hub (the learner's changes win): a cell the learner edited stays as they
  wrote it; a cell they did not touch takes the new release's text (keeping its outputs when the text
  did not change); cells the learner added stay where they were; new cells of the release come in at
  their place; test cells (locked) always take the release's text, as nbgrader restores them anyway;
* before a notebook is changed, its old version is kept in ``.course/backups/``.

"Edited" is decided against the release the workspace last took (``.course/base/``), so a course
update that changes an exercise's stub does not overwrite the answer the learner wrote there.
``git pull`` never conflicts with any of this, since git does not track the workspace.

    python -m course_utils.workspace update [WORKSPACE] [--release notebooks]
"""

from __future__ import annotations

import argparse
import copy
import shutil
import time
from pathlib import Path

import nbformat

__all__ = ["merge_notebook", "update"]

STATE = ".course"   # inside the workspace: base/ (the release last taken), backups/


def _key(cell, i: int) -> str:
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    return f"grade:{grade_id}" if grade_id else f"id:{cell.get('id') or i}"


def _locked(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("locked")) and not meta.get("solution")


def _keyed(nb) -> dict[str, object]:
    return {_key(c, i): c for i, c in enumerate(nb.cells)}


def _is_stub(cell) -> bool:
    """An answer cell as nbgrader releases it: code that still raises ``NotImplementedError``, or
    the written answer's placeholder."""
    return "raise NotImplementedError()" in cell.source or cell.source.strip() == "YOUR ANSWER HERE"


def _pristine(nb):
    """``nb`` as the base of a newly filled notebook: an answer cell that is not a stub was answered
    before the workspace existed (a learner who worked in ``notebooks/`` with an older ``make lab``),
    so its base is empty and the answer counts as the learner's edit from then on."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and not _is_stub(cell):
            cell.source = ""
    return nb


def merge_notebook(base, ours, theirs):
    """``ours`` (the learner's notebook) brought up to ``theirs`` (the new release) since ``base``.

    Returns a new notebook; none of the three is changed. See the module docstring for the rules.
    """
    b, o = _keyed(base), _keyed(ours)
    merged = []
    for i, cell in enumerate(theirs.cells):
        k = _key(cell, i)
        new = _merged_cell(cell, o.get(k), b.get(k))
        if new is not None:
            merged.append(new)
    out = copy.deepcopy(theirs)
    out.cells = _with_learner_cells(merged, ours, theirs, b)
    return out


def _merged_cell(cell, mine, old):
    """One cell of the release (``cell``) merged with the learner's (``mine``) since the base (``old``);
    ``None`` where the learner deleted a cell the release did not change."""
    if mine is None:
        if old is None or _locked(cell) or cell.source != old.source:
            return copy.deepcopy(cell)   # new in the release, or changed there: take it
        return None                      # the learner deleted an unchanged cell
    if _locked(cell):
        return copy.deepcopy(cell)
    if old is not None and mine.source == old.source:       # untouched by the learner
        new = copy.deepcopy(cell)
        if cell.cell_type == "code" and mine.get("cell_type") == "code" and cell.source == mine.source:
            new.outputs, new.execution_count = copy.deepcopy(mine.outputs), mine.get("execution_count")
        return new
    return copy.deepcopy(mine)       # the learner's edit wins


def _with_learner_cells(merged: list, ours, theirs, b: dict) -> list:
    """``merged`` with the cells only the learner has: their own, or ones the release dropped that they
    edited. Each goes after the cell that precedes it in the learner's notebook (its anchor)."""
    placed = {_key(c, i) for i, c in enumerate(theirs.cells)}
    extras: dict[str | None, list] = {}
    anchor = None
    for i, cell in enumerate(ours.cells):
        k = _key(cell, i)
        if k in placed:
            anchor = k
            continue
        old = b.get(k)
        if old is not None and cell.source == old.source:
            continue                                 # dropped by the release, never edited: drop it
        extras.setdefault(anchor, []).append(copy.deepcopy(cell))
    cells = list(extras.get(None, []))
    for i, cell in enumerate(merged):
        cells.append(cell)
        cells += extras.get(_key(cell, i), [])
    return cells


def _same(a: Path, b: Path) -> bool:
    return a.exists() and b.exists() and a.read_bytes() == b.read_bytes()


def update(workspace: Path, release: Path, log=print) -> list[Path]:
    """Bring ``workspace`` up to ``release`` (``notebooks/``); returns the notebooks it wrote."""
    workspace, release = Path(workspace), Path(release)
    base_dir, backups = workspace / STATE / "base", workspace / STATE / "backups"
    written: list[Path] = []
    for theirs_path in sorted(release.glob("ch*/*.ipynb")):
        rel = theirs_path.relative_to(release)
        ours_path, base_path = workspace / rel, base_dir / rel
        base_path.parent.mkdir(parents=True, exist_ok=True)
        if not ours_path.exists():
            ours_path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(theirs_path, ours_path)
            nbformat.write(_pristine(nbformat.read(theirs_path, as_version=4)), base_path)
            log(f"new: {rel}")
            written.append(ours_path)
            continue
        if _same(theirs_path, base_path):
            continue                                   # the release did not change since the last update
        try:
            ours = nbformat.read(ours_path, as_version=4)
        except Exception as err:  # noqa: BLE001 (a notebook the learner broke is left alone, and said so)
            log(f"NOT updated: {rel} cannot be read ({type(err).__name__}: {err}); fix or rename it, then run again")
            continue
        theirs = nbformat.read(theirs_path, as_version=4)
        base = nbformat.read(base_path, as_version=4) if base_path.exists() else theirs
        merged = merge_notebook(base, ours, theirs)
        backup = backups / f"{rel.stem}-{time.strftime('%Y%m%d-%H%M%S')}.ipynb"
        backup.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ours_path, backup)
        nbformat.write(merged, ours_path)
        shutil.copy2(theirs_path, base_path)
        log(f"updated: {rel} (your edits kept; the version before is in {backup.relative_to(workspace)})")
        written.append(ours_path)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m course_utils.workspace", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    u = sub.add_parser("update", help="copy new chapters into the workspace and merge updated ones")
    u.add_argument("workspace", type=Path, nargs="?", default=Path("workspace"))
    u.add_argument("--release", type=Path, default=Path("notebooks"))
    args = p.parse_args(argv)
    if not args.release.is_dir():
        raise SystemExit(f"no release folder {args.release}: run this from the course root")
    update(args.workspace, args.release)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
