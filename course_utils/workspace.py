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
* before a notebook is changed, its old version is kept in ``.course/backups/``;
* a notebook open in a running Jupyter server is not touched: JupyterLab would offer to overwrite the
  update with the open copy at its next save (its "File Changed" dialog, Overwrite focused), so the
  update of that chapter waits, and says so, until the learner has closed it.

"Edited" is decided against every release the workspace has taken (``.course/base/``, the last one,
and ``.course/history/``, the text of each cell in every release seen), so a course update that changes
an exercise's stub does not overwrite the answer the learner wrote there, and a cell that holds an
*older* release's text (written back by an Overwrite, or restored from a backup) still counts as
untouched and takes the new text. Outputs stay the learner's where the cell's text did not change and
they ran it (test cells included); a cell they never ran shows the new release's stored run.
``git pull`` never conflicts with any of this, since git does not track the workspace.

    python -m course_utils.workspace update [WORKSPACE] [--release notebooks]
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import time
import urllib.request
from pathlib import Path

import nbformat

from course_utils import messages

__all__ = ["merge_notebook", "open_notebooks", "update"]

STATE = ".course"   # inside the workspace: base/ (the release last taken), history/, backups/
ASK_S = 3           # how long a running Jupyter server may take to say what it has open


def _key(cell, i: int) -> str:
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    return f"grade:{grade_id}" if grade_id else f"id:{cell.get('id') or i}"


def _locked(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("locked")) and not meta.get("solution")


def _keyed(nb) -> dict[str, object]:
    return {_key(c, i): c for i, c in enumerate(nb.cells)}


# nbgrader's written answer placeholder, and its form in each translated release (stored_run.stubs).
_TEXT_STUBS = messages.everywhere("YOUR ANSWER HERE")


def _is_stub(cell) -> bool:
    """An answer cell as nbgrader releases it: code that still raises ``NotImplementedError``, or
    the written answer's placeholder."""
    return "raise NotImplementedError()" in cell.source or cell.source.strip() in _TEXT_STUBS


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


def merge_notebook(base, ours, theirs, seen: dict[str, list[str]] | None = None):
    """``ours`` (the learner's notebook) brought up to ``theirs`` (the new release) since ``base``.

    ``seen``: for each cell key, its text in every earlier release the workspace took (see
    :func:`history`); a learner's cell holding one of them is untouched, as one holding ``base``'s.
    Returns a new notebook; none of the inputs is changed. See the module docstring for the rules.
    """
    b, o = _keyed(base), _keyed(ours)
    seen = seen or {}
    merged = []
    for i, cell in enumerate(theirs.cells):
        k = _key(cell, i)
        new = _merged_cell(cell, o.get(k), b.get(k), seen.get(k, ()))
        if new is not None:
            merged.append(new)
    out = copy.deepcopy(theirs)
    out.cells = _with_learner_cells(merged, ours, theirs, b, seen)
    return out


def _untouched(mine, old, seen) -> bool:
    """The learner's cell holds a release's text: the last one's (``old``) or an earlier one's (``seen``)."""
    return (old is not None and mine.source == old.source) or mine.source in seen


def _taken(cell, mine, old):
    """The release's ``cell``, with the learner's outputs where its text is the one they ran and they
    did run it (outputs other than the old release's stored ones)."""
    new = copy.deepcopy(cell)
    if cell.cell_type == "code" and mine.get("cell_type") == "code" and cell.source == mine.source \
            and mine.get("outputs") and not (old is not None and mine.get("outputs") == old.get("outputs")):
        new.outputs, new.execution_count = copy.deepcopy(mine.outputs), mine.get("execution_count")
    return new


def _merged_cell(cell, mine, old, seen=()):
    """One cell of the release (``cell``) merged with the learner's (``mine``) since the base (``old``;
    ``seen``: the cell's texts in earlier releases); ``None`` where the learner deleted a cell the
    release did not change."""
    if mine is None:
        if old is None or _locked(cell) or cell.source != old.source:
            return copy.deepcopy(cell)   # new in the release, or changed there: take it
        return None                      # the learner deleted an unchanged cell
    if _locked(cell) or _untouched(mine, old, seen):
        return _taken(cell, mine, old)
    return copy.deepcopy(mine)       # the learner's edit wins


def _with_learner_cells(merged: list, ours, theirs, b: dict, seen: dict | None = None) -> list:
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
        if _untouched(cell, b.get(k), (seen or {}).get(k, ())):
            continue                                 # dropped by the release, never edited: drop it
        extras.setdefault(anchor, []).append(copy.deepcopy(cell))
    cells = list(extras.get(None, []))
    for i, cell in enumerate(merged):
        cells.append(cell)
        cells += extras.get(_key(cell, i), [])
    return cells


def history(path: Path) -> dict[str, list[str]]:
    """``{cell key: [its text in each release the workspace took]}`` from ``.course/history/``."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _remember(path: Path, nb, seen: dict[str, list[str]]) -> None:
    """Add the text of every cell of ``nb`` (a release) to the history at ``path``."""
    for i, cell in enumerate(nb.cells):
        texts = seen.setdefault(_key(cell, i), [])
        if cell.source not in texts:
            texts.append(cell.source)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(seen, ensure_ascii=False, indent=0), encoding="utf-8")


def _holds_older_text(ours_path: Path, base_path: Path, seen: dict[str, list[str]]) -> bool:
    """Whether a cell of the learner's notebook holds an earlier release's text instead of the last
    one's (JupyterLab's Overwrite after an update wrote it back): then an update restores it."""
    try:
        ours, base = _keyed(nbformat.read(ours_path, as_version=4)), _keyed(nbformat.read(base_path, as_version=4))
    except Exception:  # noqa: BLE001 (unreadable: the merge below says so)
        return True
    return any(k in base and cell.source != base[k].source and cell.source in seen.get(k, ())
               for k, cell in ours.items())


def _ask(url: str, token: str):
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=ASK_S) as response:
        return json.loads(response.read().decode())


def open_notebooks() -> tuple[dict[Path, str], list[str]]:
    """The notebooks open in this user's running Jupyter servers: ``({path: server URL}, [servers that
    could not be asked, with why])``. Open means a kernel session (``api/sessions``), which JupyterLab
    starts for every notebook it opens (one opened with no kernel is not seen; the merge's history
    still restores what an Overwrite of it would undo). JupyterLab's saved layout
    (``lab/api/workspaces``) is not asked: it lists tabs long after they were closed."""
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return {}, []
    found: dict[Path, str] = {}
    silent: list[str] = []
    for info in list_running_servers():
        url, token = info.get("url", ""), info.get("token", "")
        root = Path(info.get("root_dir") or info.get("notebook_dir") or ".")
        try:
            paths = [s.get("path") or s.get("notebook", {}).get("path", "") for s in _ask(f"{url}api/sessions", token)]
        except (OSError, ValueError) as err:
            silent.append(f"{url} ({type(err).__name__}: {err})")
            continue
        for p in filter(None, paths):
            found[(root / p).resolve()] = url
    return found, silent


def _same(a: Path, b: Path) -> bool:
    return a.exists() and b.exists() and a.read_bytes() == b.read_bytes()


def update(workspace: Path, release: Path, log=print, is_open=open_notebooks) -> list[Path]:
    """Bring ``workspace`` up to ``release`` (``notebooks/``); returns the notebooks it wrote.

    A notebook that ``is_open()`` (default :func:`open_notebooks`) finds open in a running Jupyter
    server is left as it is, and the message says what to do."""
    workspace, release = Path(workspace), Path(release)
    base_dir, backups = workspace / STATE / "base", workspace / STATE / "backups"
    written: list[Path] = []
    opened: dict[Path, str] | None = None
    for theirs_path in sorted(release.glob("ch*/*.ipynb")):
        rel = theirs_path.relative_to(release)
        ours_path, base_path = workspace / rel, base_dir / rel
        history_path = workspace / STATE / "history" / rel.with_suffix(".json")
        base_path.parent.mkdir(parents=True, exist_ok=True)
        if not ours_path.exists():
            ours_path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(theirs_path, ours_path)
            pristine = _pristine(nbformat.read(theirs_path, as_version=4))
            nbformat.write(pristine, base_path)
            _remember(history_path, pristine, {})
            log(f"new: {rel}")
            written.append(ours_path)
            continue
        if _same(theirs_path, base_path) and not _holds_older_text(ours_path, base_path, history(history_path)):
            continue                                   # nothing new, and no cell holds an older release's text
        if opened is None:
            opened, silent = is_open()
            for server in silent:
                log(f"note: a running Jupyter server did not say which notebooks it has open: {server}. "
                    "If a chapter is open there, close it before updating: an update written under an open "
                    "notebook is lost when JupyterLab saves the open copy over it.")
        if ours_path.resolve() in opened:
            log(f"NOT updated: {rel} is open in Jupyter ({opened[ours_path.resolve()]}). JupyterLab would "
                "write the open copy over the update at its next save. Save your work, close the notebook "
                "(File > Close and Shut Down Notebook), then run `make update` again.")
            continue
        try:
            ours = nbformat.read(ours_path, as_version=4)
        except Exception as err:  # noqa: BLE001 (a notebook the learner broke is left alone, and said so)
            log(f"NOT updated: {rel} cannot be read ({type(err).__name__}: {err}); fix or rename it, then run again")
            continue
        theirs = nbformat.read(theirs_path, as_version=4)
        base = nbformat.read(base_path, as_version=4) if base_path.exists() else theirs
        seen = history(history_path)
        merged = merge_notebook(base, ours, theirs, seen)
        backup = backups / f"{rel.stem}-{time.strftime('%Y%m%d-%H%M%S')}.ipynb"
        backup.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ours_path, backup)
        nbformat.write(merged, ours_path)
        shutil.copy2(theirs_path, base_path)
        _remember(history_path, base, seen)
        _remember(history_path, theirs, seen)
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
