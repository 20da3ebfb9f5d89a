"""The learner-facing words of ``course_utils`` in the learner's language (stdlib ``gettext``).

What a learner reads from the course's own code (the checks' reports, ``NotImplementedYet``, the
``make grade`` table, the grader's notes and the feedback page's own words) goes through
:func:`tr`: the English text is the message id, and its translation comes from the catalogue
``course_utils/locale/<lang>/LC_MESSAGES/course_utils.po``, compiled to the ``.mo`` beside it
(both shipped as package data, pyproject.toml). The language is ``COURSE_LANG`` (``zh_CN``):
unset, empty or ``en``, the English is returned as it is, byte for byte. ``make lab LANG=zh_CN``
passes it to the kernels; the grader takes it from the notebook (:func:`notebook_language`).

Adding a message (docs/translating.md): write ``tr("English with {field}", field=value)``, add the
entry to the ``.po`` with its translation (every ``{field}`` kept), then
``.venv/bin/python -m course_utils.messages compile`` (``make translations`` runs it too).
``tests/test_course_messages.py`` fails on a message missing from the catalogue, an entry not
translated, a placeholder lost, or a ``.mo`` older than its ``.po``.
"""

from __future__ import annotations

import contextlib
import functools
import gettext
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["DOMAIN", "ENV", "LOCALE_DIR", "compile_catalogue", "everywhere", "language", "out_of_date", "languages", "notebook_language",
           "speaking", "tr"]

DOMAIN = "course_utils"
ENV = "COURSE_LANG"
LOCALE_DIR = Path(__file__).parent / "locale"
_LANG = re.compile(r"^[a-z]{2,3}(_[A-Z]{2})?$")
_spoken: list[str | None] = []   # languages set by speaking(), innermost last


def _clean(lang: str | None) -> str | None:
    """``lang`` as a catalogue's name (``zh_CN``), or None for English (unset, empty, ``en``, ``C``)."""
    lang = (lang or "").split(".")[0].replace("-", "_")
    if not _LANG.match(lang) or lang.split("_")[0] == "en":
        return None
    return lang


def language() -> str | None:
    """The language of the messages now: the innermost :func:`speaking` that names one, else
    ``$COURSE_LANG``; None for English."""
    return _clean(next((lang for lang in reversed(_spoken) if lang is not None), os.environ.get(ENV)))


def languages() -> list[str]:
    """The languages with a compiled catalogue."""
    return sorted(p.parent.parent.name for p in LOCALE_DIR.glob(f"*/LC_MESSAGES/{DOMAIN}.mo"))


@contextlib.contextmanager
def speaking(lang: str | None) -> Iterator[None]:
    """Messages in ``lang`` inside the block (``en`` or ``""``: English), whatever ``$COURSE_LANG`` says;
    None leaves the language as it was (``with speaking(notebook_language(nb))``: the notebook's, else
    ``$COURSE_LANG``)."""
    _spoken.append(lang)
    try:
        yield
    finally:
        _spoken.pop()


@functools.lru_cache(maxsize=8)
def _catalogue(lang: str) -> gettext.NullTranslations:
    return gettext.translation(DOMAIN, str(LOCALE_DIR), languages=[lang], fallback=True)


def tr(message: str, /, **fields: object) -> str:
    """``message`` in the learner's language, with ``fields`` put into its ``{placeholders}``.

    Without fields the text is returned as it is (no ``str.format``: braces stay braces)."""
    lang = language()
    text = message if lang is None else _catalogue(lang).gettext(message)
    return text.format(**fields) if fields else text


def everywhere(message: str) -> set[str]:
    """``message`` in English and in every language with a catalogue (e.g. every form of a stub)."""
    return {message} | {_catalogue(lang).gettext(message) for lang in languages()}


_RELEASE_DIR = re.compile(r"^(?:notebooks|workspace)-([A-Za-z_]+)$")


def notebook_language(nb: object = None, path: Path | str | None = None) -> str | None:
    """The language a notebook is in: its metadata's ``course.language`` (the translated release writes
    it), else a folder of its path named ``notebooks-<lang>`` or ``workspace-<lang>``; None for
    English. Only a language the package has a catalogue for counts (the notebook is the learner's:
    its metadata is not trusted further)."""
    meta = nb.get("metadata", {}) if isinstance(nb, dict) else {}
    course = meta.get("course") if isinstance(meta, dict) else None
    lang = course.get("language") if isinstance(course, dict) else None
    if not isinstance(lang, str) and path is not None:
        found = [m.group(1) for part in Path(path).parts if (m := _RELEASE_DIR.match(part))]
        lang = found[-1] if found else None
    lang = _clean(lang) if isinstance(lang, str) else None
    return lang if lang in languages() else None


# --- the catalogue's compiled form ---------------------------------------------------------------

def po_path(lang: str) -> Path:
    return LOCALE_DIR / lang / "LC_MESSAGES" / f"{DOMAIN}.po"


def compile_catalogue(po: Path, mo: Path) -> None:
    """Write ``mo``, the compiled form of the catalogue ``po`` (Babel, as ``msgfmt`` does; fuzzy
    entries left out). Babel is a development dependency: only people who change a message need it."""
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    with po.open("rb") as f:
        catalog = read_po(f, domain=DOMAIN)   # its language: the catalogue's own header
    with mo.open("wb") as f:
        write_mo(f, catalog)


COMPILE = ".venv/bin/python -m course_utils.messages compile"


def out_of_date(po: Path, mo: Path) -> list[str]:
    """The messages whose translation in the compiled ``mo`` is not the one in ``po`` (missing from
    either side, or different): empty when ``mo`` is ``po`` compiled (``COMPILE`` makes it so)."""
    from babel.messages.pofile import read_po

    with po.open("rb") as f:
        want = {m.id: m.string for m in read_po(f) if m.id and m.string and not m.fuzzy}
    try:
        with mo.open("rb") as f:
            have = {k: v for k, v in gettext.GNUTranslations(f)._catalog.items() if k}
    except OSError:
        have = {}
    return sorted(k for k in want.keys() | have.keys() if want.get(k) != have.get(k))


def main(argv: list[str]) -> int:
    """``python -m course_utils.messages compile``: every ``.po`` of the package compiled to its ``.mo``."""
    if argv != ["compile"]:
        print("usage: python -m course_utils.messages compile", file=sys.stderr)
        return 2
    for po in sorted(LOCALE_DIR.glob(f"*/LC_MESSAGES/{DOMAIN}.po")):
        compile_catalogue(po, po.with_suffix(".mo"))
        print(f"wrote {po.with_suffix('.mo').relative_to(LOCALE_DIR.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
