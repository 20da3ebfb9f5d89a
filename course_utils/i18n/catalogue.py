"""The translation catalogues: what each one holds, how it is brought up to date, what is wrong in it.

``locale/<lang>/LC_MESSAGES/<domain>.po`` holds one *domain*: a chapter (``ch03_scaled_dot_product``),
the learner's part of the README (``readme``) or the site's front page (``site``). Its entries come
from the English sources (:mod:`course_utils.i18n.segments`); :func:`update` merges a fresh
extraction into the catalogue the way ``msgmerge`` does (Babel's ``Catalog.update``): a new English
text is a new, empty entry, a changed one keeps its old translation marked *fuzzy* with the old
English beside it (``#| msgid``), and one that is gone is dropped. A fuzzy or empty entry is not
used; :func:`problems` lists them with every other fault a test fails on.

Locations are ``<domain>.ipynb:<cell number, from 1>`` for a chapter and ``<file>:<line>`` for a
markdown file; each entry's ``#.`` comments say what it is (a markdown block, a docstring, a
visible test's message) and the values of its quoted numbers.
"""
from __future__ import annotations

import ast
import datetime as _dt
import io
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from babel.messages.catalog import Catalog
from babel.messages.pofile import denormalize, normalize, read_po, write_po

from course_utils.i18n import segments, terms
from course_utils.i18n.segments import CODE_SPAN, INLINE_MATH, LINK_TARGET

__all__ = ["LANGUAGES", "LOCALE_DIR", "Entry", "Stats", "po_path", "is_visible_test", "is_exercise", "is_model_answer", "cell_strings", "add_entry", "notebook_entries", "markdown_entries", "template", "read", "write", "update", "translations", "stats", "kept", "bold_faults", "italic_faults", "QUESTION", "QUESTION_LABEL", "question_faults", "entry_faults", "is_code", "awaiting", "problems"]

LANGUAGES = ("zh_CN",)
LOCALE_DIR = "locale"
# Fixed, so that bringing a catalogue up to date rewrites nothing when no English text changed.
TEMPLATE_DATE = _dt.datetime(2026, 1, 1, tzinfo=_dt.timezone.utc)


HEADER = """\
# The course's text in one language: one entry per English paragraph, docstring or test message.
# Edit msgstr only. After the English changes, `make translations` adds new entries (empty) and marks
# changed ones fuzzy (the old English as #| msgid); fix those and remove the fuzzy flag.
# Keep formulas, code spans, link targets, numbers and the placeholders ⟨q1⟩ exactly as they are
# (python -m course_utils.i18n check lists what differs). MIT licence, as the course."""


def po_path(root: Path, lang: str, domain: str) -> Path:
    return root / LOCALE_DIR / lang / "LC_MESSAGES" / f"{domain}.po"


# ------------------------------------------------------------------------------------ extraction
def is_visible_test(cell) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and meta.get("grade") and not meta.get("solution") \
        and meta.get("grade_id", "").endswith("-visible")


def is_exercise(cell) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("solution"))


def is_model_answer(cell) -> bool:
    """A written answer's cell: its model answer, for instructors (the release replaces it with the
    answer stub; ``solutions/model_answers.<lang>.md`` carries it translated)."""
    return cell.cell_type == "markdown" and bool(cell.metadata.get("nbgrader", {}).get("solution"))


SOLUTION_LINE = re.compile(r"^[ \t]*### (?:BEGIN|END) SOLUTION[ \t]*$\n?", re.M)


def model_answer_text(source: str) -> str:
    """A model answer's cell without nbgrader's ``### BEGIN SOLUTION`` / ``### END SOLUTION`` lines."""
    return SOLUTION_LINE.sub("", source).strip("\n")


def cell_strings(cell) -> list[segments.CodeString]:
    """The entries of a code cell: a visible test's prose strings, an exercise's docstrings."""
    if is_visible_test(cell):
        return segments.code_strings(cell.source, docstrings_only=False)
    if is_exercise(cell):
        return segments.code_strings(cell.source, docstrings_only=True)
    return []


@dataclass
class Entry:
    msgid: str
    locations: list[tuple[str, int]] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)


def add_entry(entries: dict[str, Entry], msgid: str, location: tuple[str, int], comment: str) -> None:
    """Add ``msgid`` (or one more location and comment of it) to ``entries``."""
    entry = entries.setdefault(msgid, Entry(msgid))
    entry.locations.append(location)
    if comment not in entry.comments:
        entry.comments.append(comment)


def _markdown_entries(entries: dict[str, Entry], text: str, where, what: str) -> None:
    for block in segments.markdown_blocks(text):
        if not block.translatable:
            continue
        _, body, _ = segments.split_block(block.text)
        msgid, quotes = segments.to_msgid(body)
        values = "; ".join(f"⟨q{i}⟩ = {segments.QUOTE.match(q).group('value')}" for i, q in enumerate(quotes, 1))
        add_entry(entries, msgid, where(block), what + (f" (quoted numbers: {values})" if values else ""))


def notebook_entries(nb: nbformat.NotebookNode, domain: str) -> dict[str, Entry]:
    """The entries of a chapter, in the order they appear."""
    entries: dict[str, Entry] = {}
    for number, cell in enumerate(nb.cells, 1):
        where = (f"{domain}.ipynb", number)
        if is_model_answer(cell):
            _markdown_entries(entries, model_answer_text(cell.source), lambda _b, w=where: w,
                              "a model answer, for instructors (the release shows the answer stub instead)")
        elif cell.cell_type == "markdown":
            _markdown_entries(entries, cell.source, lambda _b, w=where: w, "markdown")
        for s in cell_strings(cell):
            grade_id = cell.metadata["nbgrader"]["grade_id"]
            kind = "a visible test's message" if is_visible_test(cell) else "an exercise's docstring"
            extra = " (f-string: keep every {field} as it is)" if isinstance(s.node, ast.JoinedStr) else ""
            add_entry(entries, s.msgid, where, f"{kind}, {grade_id}{extra}")
    return entries


def markdown_entries(text: str, filename: str, fences: bool = False) -> dict[str, Entry]:
    """The entries of a markdown file; each located at the line its block starts on."""
    entries: dict[str, Entry] = {}
    line = 1
    for block in segments.markdown_blocks(text, fences):
        lead, body, _ = segments.split_block(block.text)
        if block.translatable:
            msgid, quotes = segments.to_msgid(body)
            kind = "commands: translate the comments only" if segments.fence_code(msgid) else "markdown"
            add_entry(entries, msgid, (filename, line + lead.count("\n")), kind)
        line += block.text.count("\n")
    return entries


def template(entries: dict[str, Entry], domain: str) -> Catalog:
    cat = Catalog(project=f"Attention, from Seq2Seq to Transformers: {domain}", creation_date=TEMPLATE_DATE,
                  revision_date=TEMPLATE_DATE, fuzzy=False)
    for e in entries.values():
        cat.add(e.msgid, locations=e.locations, auto_comments=e.comments)
        cat[e.msgid].flags.discard("python-format")
        cat[e.msgid].flags.discard("python-brace-format")   # Babel's guess; these are not format strings
    return cat


# ----------------------------------------------------------------------------------- catalogues
def read(path: Path) -> Catalog:
    """The catalogue at ``path``, with each fuzzy entry's old English (``#| msgid``) as its ``previous_id``."""
    with open(path, "rb") as f:
        cat = read_po(f, abort_invalid=True)
    for message in cat:
        _take_previous(message)
    return cat


def _take_previous(message) -> None:
    """Babel (2.19) reads ``#| msgid`` lines as translator comments starting with ``|``: move them back
    to ``previous_id``. Lines that do not parse (what older writes wrapped) are dropped."""
    start = next((i for i, c in enumerate(message.user_comments) if c.startswith("| msgid ")), None)
    if start is None:
        return
    lines, message.user_comments = message.user_comments[start:], message.user_comments[:start]
    if not all(c.startswith("| ") for c in lines):
        return
    quoted = [lines[0][len("| msgid "):]] + [c[2:] for c in lines[1:]]
    if all(q.startswith('"') and q.endswith('"') for q in quoted):
        message.previous_id = (denormalize("\n".join(quoted)),)


def write(cat: Catalog, path: Path) -> None:
    """Write ``cat`` to ``path``: gettext's layout, fuzzy entries with their old English as ``#| msgid``
    lines, one per line of the English (Babel's own writer wraps them into lines it cannot read back)."""
    buffer = io.BytesIO()
    write_po(buffer, cat, width=0, omit_header=False, include_previous=False, ignore_obsolete=True, sort_output=False)
    blocks = buffer.getvalue().decode("utf-8").split("\n\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes("\n\n".join(_with_previous(block, cat) for block in blocks).encode("utf-8"))


def _with_previous(block: str, cat: Catalog) -> str:
    """One entry of a written catalogue, with ``#| msgid`` lines before its ``msgid`` if it has a previous id."""
    lines = block.split("\n")
    at = next((i for i, line in enumerate(lines) if line.startswith("msgid ")), None)
    if at is None:
        return block
    end = next(i for i in range(at + 1, len(lines) + 1) if i == len(lines) or not lines[i].startswith('"'))
    message = cat.get(denormalize("\n".join([lines[at][len("msgid "):], *lines[at + 1:end]])))
    if message is None or not message.previous_id or not message.fuzzy:
        return block
    old = normalize(message.previous_id[0], width=0).split("\n")
    return "\n".join([*lines[:at], f"#| msgid {old[0]}", *(f"#| {q}" for q in old[1:]), *lines[at:]])


def update(path: Path, fresh: Catalog, lang: str) -> Catalog:
    """The catalogue at ``path`` brought up to date with ``fresh`` (written back); a new one if missing."""
    if path.is_file():
        cat = read(path)
        cat.update(fresh, update_creation_date=True)
    else:
        cat = Catalog(locale=lang, project=fresh.project, creation_date=TEMPLATE_DATE,
                      revision_date=TEMPLATE_DATE, fuzzy=False, last_translator="the course's translators",
                      language_team=f"{lang} <the course's repository>", header_comment=HEADER)
        cat.update(fresh)
    cat.fuzzy = False
    write(cat, path)
    return cat


def translations(cat: Catalog) -> dict[str, str]:
    """msgid -> msgstr for every entry that is translated and not fuzzy."""
    return {m.id: m.string for m in cat if m.id and m.string and not m.fuzzy}


@dataclass
class Stats:
    entries: int
    translated: int
    fuzzy: int
    untranslated: int


def stats(cat: Catalog) -> Stats:
    msgs = [m for m in cat if m.id]
    fuzzy = sum(1 for m in msgs if m.fuzzy)
    done = sum(1 for m in msgs if m.string and not m.fuzzy)
    return Stats(len(msgs), done, fuzzy, len(msgs) - done - fuzzy)


# ------------------------------------------------------------------------------------ the checks
HTML_TAG = re.compile(r"</?[a-zA-Z][^>]*>")
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")
FIELD = re.compile(r"\{\{|\}\}|\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}")
HEADING = re.compile(r"^(#{1,6}) ")


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "PS"


def bold_faults(text: str) -> list[str]:
    """Where a ``**`` pair will not render as bold under CommonMark's flanking rules, which Chinese text
    runs into: an opening ``**`` must be followed by a non-space and, if that is punctuation, preceded by
    a space or punctuation; a closing one the other way round. ``**注意：**后面`` fails (write
    ``**注意**：后面``); ``。**注意**`` is fine. Code spans and formulas are left out."""
    text = CODE_SPAN.sub("x", INLINE_MATH.sub("x", text))
    runs = [m.start() for m in re.finditer(r"(?<!\*)\*\*(?!\*)", text)]
    faults = []
    for i, at in enumerate(runs):
        before = text[at - 1] if at > 0 else " "
        after = text[at + 2] if at + 2 < len(text) else " "
        if i % 2 == 0:
            ok = not after.isspace() and (not _is_punct(after) or before.isspace() or _is_punct(before))
        else:
            ok = not before.isspace() and (not _is_punct(before) or after.isspace() or _is_punct(after))
        if not ok:
            faults.append(f"the {'opening' if i % 2 == 0 else 'closing'} ** at …{text[max(0, at - 8):at + 10]}… does "
                          "not render as bold (CommonMark): move the punctuation outside the ** or add a space")
    return faults


# An emphasis span of single asterisks or underscores (not a list bullet, not half of a ``**`` pair).
ITALIC = re.compile(r"(?<![*\\])\*(?![*\s])(.+?)(?<![\s*\\])\*(?!\*)|(?<![\w\\])_(?![_\s])(.+?)(?<![\s_\\])_(?!\w)")
HAN = re.compile(r"[\u3400-\u9fff]")


def italic_faults(text: str) -> list[str]:
    """Italic spans holding Han characters: Chinese typesetting does not slant Han characters (the site
    and JupyterLab would), it emphasises with bold: ``*只*`` becomes ``**只**``. Code spans, formulas and
    link targets are left out; Latin italics (a paper's title) stay as they are."""
    text = LINK_TARGET.sub("]", CODE_SPAN.sub("x", INLINE_MATH.sub("x", text)))
    text = re.sub(r"(?<!\*)\*\*(?!\*)", "\0", text)        # bold markers out of the way
    spans = [m.group(1) or m.group(2) for m in ITALIC.finditer(text)]
    return [f"italic Chinese *{span}*: emphasise Chinese with bold (**{span}**)" for span in spans if HAN.search(span)]


# A written question's label (the chapters: "**Question 2 (2 points).**"), one form per language.
QUESTION = re.compile(r"^\*\*Question (\d+) \((?:written, )?(\d+) points?\)\.\*\*")
QUESTION_LABEL = {"zh_CN": "**简答题 {n}（{points} 分）**："}


def question_faults(msgid: str, msgstr: str, lang: str = "zh_CN") -> list[str]:
    """A written question's translation starts with the language's one label for written questions."""
    m = QUESTION.match(msgid)
    if not m:
        return []
    label = QUESTION_LABEL[lang].format(n=m.group(1), points=m.group(2))
    return [] if msgstr.startswith(label) else [f"a written question starts with the label {label!r}"]


def kept(text: str, code: bool) -> Counter:
    """What a translation must keep exactly as the English has it: formulas, code spans, link targets,
    HTML tags, quoted-number placeholders, replacement fields (code) and numbers."""
    found: Counter = Counter()
    rest = text
    patterns = [("field", FIELD)] if code else []
    patterns += [("math", INLINE_MATH), ("code", CODE_SPAN), ("link", LINK_TARGET), ("html", HTML_TAG),
                 ("quote", segments.PLACEHOLDER)]
    for kind, pattern in patterns:
        for m in pattern.finditer(rest):
            if kind == "field" and m.group(0) in ("{{", "}}"):
                continue
            found[(kind, m.group(1) if kind == "link" else m.group(0))] += 1
        rest = pattern.sub(" ", rest)
    for m in NUMBER.finditer(rest):
        found[("number", m.group(0).replace(",", ""))] += 1
    return found


def entry_faults(msgid: str, msgstr: str, code: bool) -> list[str]:
    """What is wrong with one translated entry (nothing for a good one)."""
    faults = []
    if segments.fence_code(msgid) is not None:
        return [] if segments.fence_code(msgid) == segments.fence_code(msgstr) else \
            ["a command block's code must stay as it is (translate the comments after # only)"]
    want, got = kept(msgid, code), kept(msgstr, code)
    if want != got:
        missing = want - got
        extra = got - want
        if missing:
            faults.append("missing or changed: " + ", ".join(f"{k} {v!r}" for k, v in missing))
        if extra:
            faults.append("not in the English: " + ", ".join(f"{k} {v!r}" for k, v in extra))
    h_en, h_zh = HEADING.match(msgid), HEADING.match(msgstr)
    if bool(h_en) != bool(h_zh) or (h_en and h_en.group(1) != h_zh.group(1)):
        faults.append("a heading must stay a heading of the same level")
    if not code:
        faults.extend(bold_faults(msgstr))
        faults.extend(italic_faults(msgstr))
        faults.extend(question_faults(msgid, msgstr))
    if msgid.endswith("\n") != msgstr.endswith("\n") and code:
        faults.append("keep the trailing line end")
    return faults


CODE_KINDS = ("a visible test's message", "an exercise's docstring")


def is_code(message) -> bool:
    """Whether an entry of a fresh extraction comes from a code cell (a string literal)."""
    return any(c.startswith(CODE_KINDS) for c in message.auto_comments)


def awaiting(cat: Catalog, fresh: Catalog) -> list[str]:
    """The entries of a catalogue that await a translation: new (empty) or fuzzy (the English changed).
    The translated pages show their English, marked (:data:`course_utils.i18n.notebooks.AWAITING`)."""
    return [m.id for m in cat if m.id and m.id in fresh and (m.fuzzy or not m.string)]


def problems(cat: Catalog, fresh: Catalog, pending: bool = True) -> list[str]:
    """Every fault of a catalogue against a fresh extraction of its English source. With ``pending``
    false, the entries that only await a translation (:func:`awaiting`) are left out: an English edit
    lands before its translation (``make test``), ``make test-translations`` lists them all."""
    out = []
    for m in fresh:
        if m.id and m.id not in cat:
            out.append(f"not in the catalogue (run make translations): {m.id[:70]!r}")
    for m in cat:
        if not m.id:
            continue
        if m.id not in fresh:
            out.append(f"no longer in the English source (run make translations): {m.id[:70]!r}")
        elif m.fuzzy:
            if pending:
                out.append(f"fuzzy (the English changed; check the translation, then remove the flag): {m.id[:70]!r}")
        elif not m.string:
            if pending:
                out.append(f"untranslated: {m.id[:70]!r}")
        else:
            faults = entry_faults(m.id, m.string, is_code(fresh[m.id]))
            faults += [f"uses '{t}' but not the glossary's Chinese for it (or say why: # term: {t} -- reason)"
                       for t in terms.missing_terms(m.id, m.string, m.user_comments)]
            faults += [f"names '{t}' {v!r}, not as the glossary does (one Chinese term per idea: "
                       f"GLOSSARY.md, course_utils/i18n/terms.py; or say why: # term: {t} -- reason)"
                       for t, v in terms.variant_faults(m.id, m.string, m.user_comments)]
            out.extend(f"{m.id[:60]!r}: {f}" for f in faults)
    return out
