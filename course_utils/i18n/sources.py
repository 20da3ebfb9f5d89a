"""The English sources of the catalogues, by domain, and their fresh extractions.

* ``chNN_x``: the chapter's solution notebook ``solutions/chNN_x/chNN_x.ipynb`` (its text source
  ``chNN_x.py`` is what people edit; ``make sync`` keeps the two equal).
* ``readme``: the whole of ``README.md`` (a Chinese learner reads its last section too: the
  documents it points to are English, which the translation says).
* ``site``: the site's front page, ``site/index.md``, and the glossary's title and introduction
  (``GLOSSARY.md`` above its first term; the terms are already in both languages).
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
from babel.messages.catalog import Catalog

from course_utils.i18n import catalogue

__all__ = ["CAPTION", "chapter_names", "chapter_notebook", "readme_text", "glossary_intro", "domains", "fresh"]

# A table of contents' caption in site/index.md (```{toctree} ... :caption: Chapters): the navigation's headings.
CAPTION = re.compile(r"^:caption: (.+)$", re.M)


def chapter_names(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "solutions").glob("ch*") if (p / f"{p.name}.ipynb").is_file())


def chapter_notebook(root: Path, chapter: str) -> nbformat.NotebookNode:
    return nbformat.read(root / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)


def readme_text(root: Path) -> str:
    return (root / "README.md").read_text(encoding="utf-8")


def glossary_intro(root: Path) -> str:
    """GLOSSARY.md above its first term (``## ``): the part of the glossary that is in English only."""
    text = (root / "GLOSSARY.md").read_text(encoding="utf-8")
    return text[:text.index("\n## ") + 1]


def domains(root: Path) -> list[str]:
    return chapter_names(root) + ["readme", "site"]


def fresh(root: Path, domain: str) -> Catalog:
    """A catalogue template of ``domain`` extracted from its English source now."""
    if domain == "readme":
        entries = catalogue.markdown_entries(readme_text(root), "README.md", fences=True)
    elif domain == "site":
        index = (root / "site" / "index.md").read_text(encoding="utf-8")
        entries = catalogue.markdown_entries(index, "site/index.md")
        for m in CAPTION.finditer(index):
            catalogue.add_entry(entries, m.group(1), ("site/index.md", index.count("\n", 0, m.start()) + 1),
                                "the caption of a table of contents in the site's navigation")
        entries.update(catalogue.markdown_entries(glossary_intro(root), "GLOSSARY.md"))
    else:
        entries = catalogue.notebook_entries(chapter_notebook(root, domain), domain)
    return catalogue.template(entries, domain)
