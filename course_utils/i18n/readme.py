"""``README.<lang>.md``: the README in another language, written from the ``readme`` catalogue.

``README.md`` is translated block by block; its commands and paths are pointed at the translated
course (``make lab LANG=zh_CN``, the ``notebooks-zh_CN/`` release, the ``workspace-zh_CN/`` copy).
The documents its last section points to (for instructors and contributors) are English, and the
translation says so beside each link. ``tests/test_i18n.py`` checks that the
committed file equals a fresh one; ``make translations`` rewrites it.
"""
from __future__ import annotations

import re
from pathlib import Path

from course_utils.i18n import catalogue, sources
from course_utils.i18n.notebooks import translate_markdown

__all__ = ["COMMANDS", "readme_path", "for_language", "translated_readme", "write"]

# What a command or a path of the English README becomes in the translated one.
COMMANDS = [
    (re.compile(r"\bmake (lab|update)\b(?! LANG=)"), r"make \1 LANG={lang}"),
    (re.compile(r"(?<![\w-])notebooks/"), "notebooks-{lang}/"),
    (re.compile(r"(?<![\w-])workspace/"), "workspace-{lang}/"),
]


def readme_path(root: Path, lang: str) -> Path:
    return root / f"README.{lang}.md"


def for_language(text: str, lang: str) -> str:
    """``text`` with the commands and paths of the English course pointed at the ``lang`` one."""
    for pattern, replacement in COMMANDS:
        text = pattern.sub(replacement.format(lang=lang), text)
    return text


def translated_readme(root: Path, lang: str) -> str:
    """The README in ``lang``."""
    table = catalogue.translations(catalogue.read(catalogue.po_path(root, lang, "readme")))
    missing: list[str] = []
    return for_language(translate_markdown(sources.readme_text(root), table, missing, fences=True, lang=lang), lang)


def write(root: Path, lang: str) -> Path:
    path = readme_path(root, lang)
    path.write_text(translated_readme(root, lang), encoding="utf-8")
    return path
