"""A chapter in another language: the English notebook with its catalogue's translations put in.

:func:`translate` changes only what :mod:`course_utils.i18n.catalogue` extracts: markdown blocks,
an exercise's docstrings and a visible test's messages. Code, outputs, metadata and grade ids are
the English notebook's own, so a translated notebook is graded by the same tests. An entry with no
translation (or a fuzzy one: its English changed) shows the English, marked as awaiting translation
(:data:`AWAITING`: a small note after a markdown block, one line at the end of a docstring; a visible
test's message stays English unmarked, inside a report that the checks library frames in English).

Headings change their anchors with their words: :func:`anchors` pairs each English heading's
anchor with the translated one, and :func:`relink` points links (``#5-why-scale``,
``chNN_x.ipynb#...``) at the translated anchors.
"""
from __future__ import annotations

import copy
import re

import nbformat

from course_utils.i18n import catalogue, segments, sources

__all__ = ["AWAITING", "awaiting_note", "LINK", "slug", "slugs", "heading_titles", "headings", "translate_markdown", "translate", "titles", "anchors", "relink", "relink_notebook", "translated_chapters"]

# What marks an English block of a translated page as awaiting its translation, per language.
AWAITING = {"zh_CN": "待翻译：上文仍是英文原文，译文随后补上（awaiting translation）"}


def awaiting_note(lang: str | None) -> str:
    """The note after an English markdown block of a page in ``lang``: small, grey, its own paragraph."""
    return f'<small style="color: gray">⏳ {AWAITING.get(lang or "zh_CN", AWAITING["zh_CN"])}</small>'


def _awaiting_docstring(msgid: str, lang: str | None) -> str:
    """An exercise's English docstring with the note as its last line, indented as its last line is."""
    last = msgid.rstrip("\n").rsplit("\n", 1)[-1]
    indent = last[:len(last) - len(last.lstrip())] if "\n" in msgid else ""
    note = f"⏳ {AWAITING.get(lang or 'zh_CN', AWAITING['zh_CN'])}"
    end = msgid[len(msgid.rstrip()):]
    return msgid.rstrip() + ("\n\n" + indent + note if "\n" in msgid else "  " + note) + end


LINK = re.compile(r"(\]\()([^)\s#]*)#([^)\s]+)(\))")
HEADING_LINE = re.compile(r"^#{1,6} +(.+?)\s*#*\s*$", re.M)


def slug(title: str) -> str:
    """A heading's anchor as the site (myst-parser) and GitHub make it: lower case, punctuation
    removed (CJK characters are word characters and stay), spaces turned into hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def heading_titles(text: str) -> list[str]:
    """The headings of a markdown text (their words, without the #s), in order; code fences skipped."""
    out = []
    fence = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        m = None if fence else HEADING_LINE.match(line)
        if m:
            out.append(m.group(1))
    return out


def slugs(titles) -> list[str]:
    """The anchors of headings in order, as the site makes them: a repeated one gets ``-1``, ``-2`` ..."""
    seen: dict[str, int] = {}
    out = []
    for title in titles:
        base = slug(title)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.append(base if n == 0 else f"{base}-{n}")
    return out


def headings(text: str) -> list[str]:
    """The anchors of the headings in a markdown text, in order."""
    return slugs(heading_titles(text))


def translate_markdown(text: str, table: dict[str, str], missing: list[str], fences: bool = False,
                       lang: str | None = None, mark: bool = True) -> str:
    """``text`` with every block that has a translation replaced; the others kept in English (and
    listed), each followed by the note that it awaits its translation unless ``mark`` is false."""
    out = []
    for block in segments.markdown_blocks(text, fences):
        if not block.translatable:
            out.append(block.text)
            continue
        lead, body, trail = segments.split_block(block.text)
        msgid, quotes = segments.to_msgid(body)
        if msgid in table:
            body = segments.from_msgstr(table[msgid], quotes, lang)
        else:
            missing.append(msgid)
            if mark:
                body = body + "\n\n" + awaiting_note(lang)
        out.append(lead + body + trail)
    return "".join(out)


def translate(nb: nbformat.NotebookNode, table: dict[str, str], lang: str) -> tuple[nbformat.NotebookNode, list[str]]:
    """A copy of ``nb`` in ``lang`` from ``table`` (msgid -> msgstr); and the entries left in English."""
    out = copy.deepcopy(nb)
    missing: list[str] = []
    for cell in out.cells:
        if catalogue.is_model_answer(cell):
            answer = translate_markdown(catalogue.model_answer_text(cell.source), table, missing, lang=lang)
            cell.source = f"### BEGIN SOLUTION\n{answer}\n### END SOLUTION"
        elif cell.cell_type == "markdown":
            cell.source = translate_markdown(cell.source, table, missing, lang=lang)
        strings = catalogue.cell_strings(cell)
        if strings:
            left = [s for s in strings if s.msgid not in table]
            missing.extend(s.msgid for s in left)
            marked = {s.msgid: _awaiting_docstring(s.msgid, lang) for s in left if catalogue.is_exercise(cell)}
            cell.source = segments.replace_strings(cell.source, strings, {**table, **marked})
    out.metadata.setdefault("course", {})["language"] = lang
    return out, missing


def titles(english: nbformat.NotebookNode, translated: nbformat.NotebookNode) -> dict[str, str]:
    """English anchor -> translated heading, heading by heading (cells line up one to one)."""
    en_titles, zh_titles = [], []
    for en, zh in zip(english.cells, translated.cells):
        if en.cell_type == "markdown":
            a, b = heading_titles(en.source), heading_titles(zh.source)
            en_titles += a[:len(b)]
            zh_titles += b[:len(a)]
    return dict(zip(slugs(en_titles), zh_titles))


def anchors(english: nbformat.NotebookNode, translated: nbformat.NotebookNode) -> dict[str, str]:
    """English anchor -> translated anchor (the site's, repeated headings numbered)."""
    pairs = titles(english, translated)
    return dict(zip(pairs, slugs(pairs.values())))


def relink(text: str, here: str, maps: dict[str, dict[str, str]]) -> str:
    """``text`` with each link to an anchor of a chapter (this one, ``here``, when the link names no file)
    pointed at the translated anchor. ``maps``: chapter -> (English anchor -> translated anchor)."""
    def fix(m: re.Match) -> str:
        target, anchor = m.group(2), m.group(3)
        chapter = here if not target else next((c for c in maps if re.search(rf"(^|/){re.escape(c)}(\.ipynb|\.html|/|$)", target)), None)
        new = maps.get(chapter, {}).get(anchor) if chapter else None
        return m.group(0) if new is None else f"{m.group(1)}{target}#{new}{m.group(4)}"
    return LINK.sub(fix, text)


def relink_notebook(nb: nbformat.NotebookNode, here: str, maps: dict[str, dict[str, str]]) -> None:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = relink(cell.source, here, maps)


def translated_chapters(root, lang: str, names: list[str] | None = None,
                        strict: bool = False) -> dict[str, nbformat.NotebookNode]:
    """Every chapter (or ``names``) of the course at ``root`` in ``lang``, links pointed at the
    translated anchors. An entry with no usable translation stays English; ``strict`` makes that an error."""
    names = names or sources.chapter_names(root)
    done, maps, missing = {}, {}, {}
    for ch in names:
        english = sources.chapter_notebook(root, ch)
        table = catalogue.translations(catalogue.read(catalogue.po_path(root, lang, ch)))
        done[ch], missing[ch] = translate(english, table, lang)
        maps[ch] = anchors(english, done[ch])
    for ch, nb in done.items():
        relink_notebook(nb, ch, maps)
    left = {ch: len(m) for ch, m in missing.items() if m}
    if left and strict:
        raise ValueError(f"entries without a translation in {lang}: {left} (python -m course_utils.i18n check)")
    return done
