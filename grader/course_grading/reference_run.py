"""The reference run itself: a chapter's solution executed by the grader, its checks written out.

``python -m course_grading.reference_run CHAPTER OUT.json``, started in the course folder
by :func:`course_grading.reference.ensure` (which caches the result and says where it is):
the solution notebook runs under :class:`~course_grading.execution.SandboxedExecute` in
reference mode (each test cell twice, the second time with the answers nudged and every global
seed shifted), and ``OUT.json`` gets, for every test cell, the checks it made (kind, name,
tolerance, expected value, whether that value is *fixed*). A solution whose own tests fail is no
reference: the run stops with the reason and writes nothing.

It is a module of its own so that ``reference.py``, which the executor reads the reference
through, never imports the executor.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat

from course_grading.course import chapter_notebook
from course_grading.execution import SandboxedExecute
from course_grading.results import META
from course_grading.verdict import same_bytes

__all__ = ["ReferenceExecute", "main"]


class ReferenceExecute(SandboxedExecute):
    """The grader's executor in reference mode: the solution's own run, every test cell made twice."""

    reference_mode = True


def _run(chapter: str, out: Path) -> None:
    """Run the solution of ``chapter`` (the current folder is the course) and write its reference."""
    nb = nbformat.read(chapter_notebook(chapter, Path.cwd()), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    ex = ReferenceExecute()
    ex.preprocess(nb, {"nbgrader": {"assignment": chapter}})
    problems = list(nb.metadata.get(META, {}).get("faults", []))
    cells: dict[str, list[dict]] = {}
    for index, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        failed = [o for o in cell.outputs if o.get("output_type") == "error"]
        if failed:
            first_line = (str(failed[0].get('evalue')).splitlines() or [""])[0]   # a check's message has one per check
            problems.append(f"its test {meta.get('grade_id')} fails: {failed[0].get('ename')}: {first_line[:200]}")
        first, again = ex._records.get((0, index), []), ex._records.get((1, index), [])
        cells[meta["grade_id"]] = [
            {"kind": r["kind"], "what": r["what"], "atol": r.get("atol"), "rtol": r.get("rtol"),
             "expected": r["expected"],
             "fixed": i < len(again) and again[i].get("what") == r["what"]
                      and same_bytes(again[i].get("expected"), r["expected"])}
            for i, r in enumerate(first)]
    if problems:
        raise SystemExit(f"{chapter}'s solution cannot be the grader's reference: {'; '.join(problems)}")
    out.write_text(json.dumps({"chapter": chapter, "cells": cells}))


def main(argv: list[str]) -> int:
    """The command line: ``CHAPTER OUT.json``."""
    if len(argv) != 2:
        raise SystemExit("usage: python -m course_grading.reference_run CHAPTER OUT.json")
    _run(argv[0], Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
