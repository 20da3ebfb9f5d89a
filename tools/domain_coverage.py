"""Which declared kinds each exercise's hidden test draws (issue 54; ``tests/test_domains.py`` runs it).

The chapter's solution runs cell by cell in-process (``tools/exercise_runner.py``'s shell), in grading
mode (``NBGRADER_EXECUTION``: the experiments shrink, the tests are the same), with
:data:`course_utils.domains.RECORDER` set: every call that ``checks.call`` makes while an exercise's
hidden test cell runs is classified against that exercise's declaration
(:func:`course_utils.domains.kinds_drawn`). Calls made by other cells (visible tests, experiments) do
not count: a kind must be drawn where the points are.

Usage::

    python tools/domain_coverage.py ch05           # prints JSON: {exercise: {"missing": [...], "error": ...}}

Exit status 1 when a declared kind or raise is never drawn, or a hidden test cell fails.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import exercise_runner as runner  # noqa: E402

from course_utils import domains  # noqa: E402


def coverage(chapter: str) -> dict[str, dict]:
    """``{exercise: {"missing": ["arg:kind" or "raises:kind", ...], "error": str | None}}`` for ``chapter``."""
    os.environ["NBGRADER_EXECUTION"] = "autograde"
    os.environ.setdefault("MPLBACKEND", "Agg")
    name = runner.find_chapter(chapter)
    declared = {e.exercise: e for e in domains.exercises(name)}
    calls: dict[str, list[domains.Call]] = {ex: [] for ex in declared}
    errors: dict[str, str | None] = dict.fromkeys(declared)
    current = [None]

    def recorder(call: domains.Call) -> None:
        if current[0] is not None:
            calls[current[0]].append(call)

    shell = runner._shell()
    domains.RECORDER = recorder
    try:
        for cell in runner.chapter_cells(name):
            if cell.cell_type != "code":
                continue
            gid = cell.metadata.get("nbgrader", {}).get("grade_id", "")
            stem = gid.removesuffix("-hidden")
            current[0] = stem if gid.endswith("-hidden") and stem in declared else None
            with contextlib.redirect_stdout(io.StringIO()):
                err = runner._run(shell, cell.source)
            runner._close_figures()
            if err is not None and current[0] is not None:
                errors[current[0]] = err
    finally:
        domains.RECORDER = None
    out = {}
    for ex, decl in declared.items():
        drawn = domains.kinds_drawn(decl, calls[ex])
        want = [(a.name, k.name) for a in decl.args for k in a.kinds] + [("raises", k.name) for k in decl.raises]
        out[ex] = {"missing": [f"{a}:{k}" for a, k in want if k not in drawn.get(a, set())], "error": errors[ex],
                   "calls": len(calls[ex])}
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        raise SystemExit("usage: python tools/domain_coverage.py CHAPTER")
    result = coverage(argv[0])
    print(json.dumps(result, indent=1))
    return int(any(r["missing"] or r["error"] for r in result.values()))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
