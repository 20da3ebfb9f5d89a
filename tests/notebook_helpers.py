"""Small helpers the grading tests share: a cell's nbgrader metadata, a chapter cut to its graded cells."""

from __future__ import annotations

from pathlib import Path

import nbformat


def meta(cell) -> dict:
    """A cell's nbgrader metadata (``{}`` when it is missing or not a dict)."""
    m = cell.metadata.get("nbgrader", {})
    return m if isinstance(m, dict) else {}


def lean(nb_path: Path):
    """The notebook with its first (setup) code cell and its graded cells only, outputs cleared:
    a chapter that grades in seconds."""
    nb = nbformat.read(nb_path, as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells = [c for i, c in enumerate(nb.cells) if i == first or meta(c).get("grade_id")]
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    return nb


def heading_slugs(headings) -> set[str]:
    """The anchors of markdown headings (their text, without the ``#``), slugged as GitHub and MyST do
    (``course_utils.i18n.notebooks.slugs``: lower case, punctuation dropped, spaces turned into ``-``, a
    repeated slug numbered ``-1``, ``-2`` ...)."""
    from course_utils.i18n.notebooks import slugs

    return set(slugs(headings))


def chapter_slugs(source: str) -> set[str]:
    """The anchors of a chapter's headings, from its text source (markdown cells: ``# ## Heading``)."""
    import re

    return heading_slugs(m.group(1) for m in re.finditer(r"^# #+ (.+)$", source, flags=re.M))
