"""What of a chapter is translated, cut into catalogue entries, and put back.

A translation catalogue (gettext ``.po``) holds *entries*: an English ``msgid`` and its Chinese
``msgstr``. This module decides what an entry is and how a translated entry goes back in place:

* **Markdown**: a cell is cut into blocks at blank lines (a paragraph, a list, a heading, a
  table); fenced code and display math that stand alone are never entries, so formulas and code
  stay shared. Inside a block, each quoted number (``<!-- q:SOURCE#KEY -->VALUE<!-- /q -->``,
  tied to a stored output by ``tests/test_quotes.py``) becomes a placeholder ``⟨q1⟩``: the
  translation never retypes the number, and a re-execution that moves it does not touch the
  catalogue.
* **Code** (the learner's prompts in code cells): the docstrings of an exercise cell and the
  prose strings of a visible test cell (check names, failure messages and hints). An f-string's
  entry is its template, replacement fields included (``"got {got.shape}, expected (2, 3)"``);
  the translation keeps every field, and is put back as a literal of the same kind.

Everything else of a cell (code, outputs, metadata) is the English notebook's own.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

__all__ = ["Block", "CodeString", "QUOTE", "PLACEHOLDER", "INLINE_MATH", "CODE_SPAN", "LINK_TARGET", "VALUE_WORDS", "markdown_blocks", "fence_code", "to_msgid", "from_msgstr", "quote_in", "split_block", "fields", "code_strings", "replace_strings"]

QUOTE = re.compile(r"<!-- q:(?P<key>[^>]*?) -->(?P<value>.*?)<!-- /q -->", re.S)
PLACEHOLDER = re.compile(r"⟨q(\d+)⟩")
INLINE_MATH = re.compile(r"\$\$.+?\$\$|(?<![\\$])\$(?!\$)(?:\\.|[^$\\])+?\$", re.S)
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
LINK_TARGET = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
# Prose (a check name, a message): two plain words or more (not parts of an identifier or a call), or,
# however short, one word that is not a name, a keyword argument or -inf ("step 1", "rotated x",
# "shape (batch, S)": a learner reads them beside their translated siblings).
WORD = re.compile(r"(?<![\w.(])[A-Za-z]{2,}(?![\w(])")
PROSE_WORD = re.compile(r"(?<![\w.(\-])[A-Za-z]{2,}(?![\w(=\[])")


@dataclass
class Block:
    """A piece of a markdown cell: ``text`` as written, and whether it is an entry."""
    text: str
    translatable: bool


def _is_shared(lines: list[str], fences: bool) -> bool:
    """A block that stays as it is: display math alone, fenced code (unless ``fences``: then its
    comments are translated), an image, a rule or a comment."""
    text = "\n".join(lines).strip()
    if not re.search(r"[A-Za-z]", QUOTE.sub("", text)):
        return True
    if text.startswith("$$") and text.endswith("$$"):
        return True
    if FENCE.match(lines[0]):
        return not fences or "#" not in text
    if re.fullmatch(r"(!\[[^\]]*\]\([^)]*\)\s*)+", text) or re.fullmatch(r"<!--.*?-->", text, re.S):
        return True
    return False


def markdown_blocks(source: str, fences: bool = False) -> list[Block]:
    """``source`` cut into blocks; ``"".join(b.text for b in blocks) == source``.

    With ``fences``, a fenced block that holds a comment (``#``) is an entry too (a README's
    commands, whose comments say what they do); its code must stay as it is.
    Separators (the blank lines between blocks) are blocks of their own that are never entries.
    A fence (```` ``` ````) or a display formula that spans lines keeps its blank lines inside it.
    """
    lines = source.splitlines(keepends=True)
    blocks: list[Block] = []
    current: list[str] = []
    fence = None
    math_open = False

    def close() -> None:
        if current:
            blocks.append(Block("".join(current), not _is_shared([s.rstrip("\n") for s in current], fences)))
            current.clear()

    for line in lines:
        stripped = line.strip()
        if fence is None and not math_open and not stripped:
            close()
            if blocks and not blocks[-1].translatable and not blocks[-1].text.strip():
                blocks[-1].text += line
            else:
                blocks.append(Block(line, False))
            continue
        current.append(line)
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
        elif FENCE.match(line):
            fence = stripped[:3]
        elif stripped.count("$$") % 2 == 1:
            math_open = not math_open
    close()
    return blocks


def fence_code(text: str) -> list[str] | None:
    """A fenced block's code without its comments (what a translation must keep), or None for prose."""
    if not FENCE.match(text):
        return None
    return [line.split("#", 1)[0].rstrip() for line in text.splitlines()]


def to_msgid(block: str) -> tuple[str, list[str]]:
    """The entry of a block (without its line end) and its quoted numbers, in order.

    Each ``<!-- q:KEY -->VALUE<!-- /q -->`` becomes ``⟨qN⟩``; the list holds the markers as written.
    """
    quotes: list[str] = []

    def place(m: re.Match) -> str:
        quotes.append(m.group(0))
        return f"⟨q{len(quotes)}⟩"
    return QUOTE.sub(place, block), quotes


# The few English words a quoted value holds between its numbers ("0.29 to 0.46", "28 of 29"), by language.
VALUE_WORDS = {"zh_CN": ((" to ", " 至 "), (" and ", " 和 "), (" of ", " / "))}


def quote_in(quote: str, lang: str | None) -> str:
    """A quote with the English words between its numbers in ``lang`` (its key and numbers unchanged)."""
    m = QUOTE.fullmatch(quote)
    value = m.group("value")
    for en, other in VALUE_WORDS.get(lang, ()):
        value = value.replace(en, other)
    return f"<!-- q:{m.group('key')} -->{value}<!-- /q -->"


def from_msgstr(msgstr: str, quotes: list[str], lang: str | None = None) -> str:
    """The translated block: each ``⟨qN⟩`` of ``msgstr`` replaced by the English block's N-th quote."""
    def put(m: re.Match) -> str:
        n = int(m.group(1))
        if not 1 <= n <= len(quotes):
            raise ValueError(f"the translation names ⟨q{n}⟩, but the English block has {len(quotes)} quoted numbers")
        return quote_in(quotes[n - 1], lang)
    return PLACEHOLDER.sub(put, msgstr)


def split_block(block: str) -> tuple[str, str, str]:
    """``block`` as (leading whitespace, entry text, trailing whitespace)."""
    m = re.fullmatch(r"(\s*)(.*?)(\s*)", block, re.S)
    return m.group(1), m.group(2), m.group(3)


# ----------------------------------------------------------------------------------------- code
@dataclass
class CodeString:
    """A string of a code cell that is an entry: where it is, its entry text, how to rebuild it."""
    start: int          # offsets into the cell's source
    end: int
    msgid: str
    node: ast.expr      # the ast.Constant or ast.JoinedStr

    def literal(self, msgstr: str, source: str) -> str:
        """Python source of a literal like the original (its quotes; a docstring stays triple-quoted),
        holding ``msgstr``; an f-string keeps its fields as written."""
        opening = re.match(r"[rRbBuUfF]*('\'\'|\"\"\"|'|\")", source[self.start:self.end])
        quote = opening.group(1) if opening else '"'
        if isinstance(self.node, ast.Constant):
            return _quoted(msgstr, quote)
        known = fields(self.node, source)
        pattern = re.compile("|".join(re.escape(f) for f in sorted(known, key=len, reverse=True)) or r"(?!)")
        out, pos = [], 0
        for m in pattern.finditer(msgstr):
            out.append(_escaped(msgstr[pos:m.start()], quote) + m.group(0))
            pos = m.end()
        out.append(_escaped(msgstr[pos:], quote))
        return "f" + quote + "".join(out) + quote


def _field_text(value: ast.FormattedValue, source: str) -> str:
    """``{expr!r:spec}`` of one replacement field, as written in the source."""
    text = "{" + ast.get_source_segment(source, value.value)
    if value.conversion != -1:
        text += "!" + chr(value.conversion)
    if value.format_spec is not None:
        text += ":" + "".join(p.value if isinstance(p, ast.Constant) else _field_text(p, source)
                              for p in value.format_spec.values)
    return text + "}"


def fields(node: ast.JoinedStr, source: str) -> dict[str, ast.FormattedValue]:
    """The replacement fields of an f-string, by their text."""
    return {_field_text(v, source): v for v in node.values if isinstance(v, ast.FormattedValue)}


def _template(node: ast.JoinedStr, source: str) -> str:
    out = []
    for v in node.values:
        if isinstance(v, ast.Constant):
            out.append(v.value.replace("{", "{{").replace("}", "}}"))
        else:
            out.append(_field_text(v, source))
    return "".join(out)


def _escaped(text: str, quote: str) -> str:
    """``text`` as the inside of a literal delimited by ``quote`` (not raw)."""
    text = text.replace("\\", "\\\\")
    if len(quote) == 3:
        text = text.replace(quote[0] * 3, "\\" + quote[0] * 3)
        return text[:-1] + "\\" + text[-1] if text.endswith(quote[0]) else text
    return text.replace(quote, "\\" + quote).replace("\n", "\\n").replace("\r", "\\r")


def _quoted(text: str, quote: str) -> str:
    return quote + _escaped(text, quote) + quote


def _offsets(source: str) -> list[int]:
    starts, total = [], 0
    for line in source.splitlines(keepends=True):
        starts.append(total)
        total += len(line.encode("utf-8"))
    return starts


def _span(node: ast.expr, source: str, starts: list[int]) -> tuple[int, int]:
    """Character offsets of ``node`` in ``source`` (ast gives UTF-8 byte columns)."""
    data = source.encode("utf-8")
    b0 = starts[node.lineno - 1] + node.col_offset
    b1 = starts[node.end_lineno - 1] + node.end_col_offset
    return len(data[:b0].decode("utf-8")), len(data[:b1].decode("utf-8"))


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of every function and class in ``tree``."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def code_strings(source: str, docstrings_only: bool) -> list[CodeString]:
    """The entries of a code cell: its docstrings, and (unless ``docstrings_only``) its prose strings.

    Strings inside an f-string's fields, format specs and ``### BEGIN HIDDEN TESTS`` regions (which
    the release removes) are never entries. A cell that is not valid Python has none.
    """
    hidden = source.find("### BEGIN HIDDEN TESTS")
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    docs = _docstrings(tree)
    starts = _offsets(source)
    inner = {id(n) for j in ast.walk(tree) if isinstance(j, ast.JoinedStr) for n in ast.walk(j) if n is not j}
    found = []
    for node in ast.walk(tree):
        if id(node) in inner:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            msgid = node.value
        elif isinstance(node, ast.JoinedStr):
            msgid = _template(node, source)
        else:
            continue
        if docstrings_only and id(node) not in docs:
            continue
        if id(node) not in docs and not (" " in msgid and (len(WORD.findall(msgid)) >= 2 or PROSE_WORD.search(msgid))):
            continue
        start, end = _span(node, source, starts)
        if 0 <= hidden < end:
            continue
        found.append(CodeString(start, end, msgid, node))
    return sorted(found, key=lambda s: s.start)


def replace_strings(source: str, strings: list[CodeString], translations: dict[str, str]) -> str:
    """``source`` with each entry in ``strings`` that has a translation put back as a literal."""
    out, pos = [], 0
    for s in strings:
        if s.msgid not in translations:
            continue
        out.append(source[pos:s.start])
        out.append(s.literal(translations[s.msgid], source))
        pos = s.end
    out.append(source[pos:])
    return "".join(out)
