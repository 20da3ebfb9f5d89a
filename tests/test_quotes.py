"""Every number the chapters quote from an output or a table is checked against it (issue 33).

In a chapter's Markdown (the text and the model answers of written questions), a number or range
taken from a source is written

    <!-- q:SOURCE#KEY -->VALUE<!-- /q -->

(the comments are invisible once rendered, the value stays in its sentence). SOURCE is ``out``,
the chapter's own stored outputs (the text/plain and stream outputs of the code cells of its
executed solution notebook), or a path in the repository such as ``tools/claim_spread.md``.
KEY is a piece of text that picks the line(s) of the source: in a file exactly one line must
contain it, in ``out`` at least one. Every number of VALUE (``0.48``, ``-3.1``, ``1.31×``, ``1e-4``,
the two ends of ``0.43–0.54``, ``7 %`` as 0.07) must appear as a number on a picked line, as printed or rounded to
the precision the text quotes. A re-execution or a re-measurement that moves a quoted number so
fails here, not in a review.

The second half: every ``claims.check`` of the chapter sources has its row in a spread table
written by a tool (``tools/claim_spread.py``), and those tables carry the header line the tool
writes.
"""
from __future__ import annotations

import ast
import re
import sys
from decimal import Decimal
from functools import cache
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted(p for p in (ROOT / "solutions").glob("ch*/ch*.ipynb") if p.stem == p.parent.name)
SPREAD_TABLES = [ROOT / "tools" / "claim_spread.md"]   # the tables that hold the claims' rows

QUOTE = re.compile(r"<!-- q:([^#\s]+)#(.*?) -->(.*?)<!-- /q -->")
OPEN = re.compile(r"<!-- /?q[:\s]")
# A number: an optional sign (only where it cannot be a range's hyphen, i.e. not after a digit),
# digits, decimals, an exponent. "12-14" is 12 and 14, "-0.3–-0.1" is -0.3 and -0.1.
NUMBER = re.compile(r"(?<![\d.])([-−]?\d+(?:\.\d+)?(?:[eE][-+−]?\d+)?)(?![\d])( ?%)?")


def _ids(paths):
    return [p.parent.name for p in paths]


def numbers(text: str) -> list[Decimal]:
    """The numbers of ``text`` as written (the Unicode minus read as a minus, 7 % read as 0.07,
    and both ends of 97–100 % as fractions)."""
    found = list(NUMBER.finditer(text))
    values = []
    for i, m in enumerate(found):
        pct = bool(m.group(2))
        if not pct and i + 1 < len(found) and found[i + 1].group(2):   # the first end of a range in %
            pct = re.fullmatch(r"\s*(?:–|-|to)\s*", text[m.end():found[i + 1].start()]) is not None
        values.append(Decimal(m.group(1).replace("−", "-")).scaleb(-2 if pct else 0))
    return values


def matches(quoted: Decimal, printed: Decimal) -> bool:
    """``quoted`` is ``printed``, or ``printed`` rounded to the quoted number's last digit."""
    step = Decimal(1).scaleb(quoted.as_tuple().exponent)
    return abs(printed - quoted) <= step / 2 + Decimal("1e-12") * step


def check_quote(lines: list[str], key: str, value: str, *, unique: bool) -> str | None:
    """None if every number of ``value`` is on a line of ``lines`` that contains ``key``, else why not.

    ``unique``: exactly one line may contain the key (a file); otherwise at least one (outputs).
    """
    picked = [ln for ln in lines if key in ln]
    if not picked:
        return "no line contains the key"
    if unique and len(picked) > 1:
        return f"{len(picked)} lines contain the key (it must pick one): " + " // ".join(ln.strip() for ln in picked)
    quoted = numbers(value)
    if not quoted:
        return "the quoted value holds no number"
    missing = [q for q in quoted if not any(matches(q, x) for ln in picked for x in numbers(ln))]
    if missing:
        shown = " // ".join(ln.strip()[:300] for ln in picked[:3])
        return f"{', '.join(map(str, missing))} not on the line (it says: {shown})"
    return None


def outputs(nb) -> list[str]:
    """The lines of every code cell's text/plain and stream outputs."""
    lines = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                lines += o.get("text", "").splitlines()
            elif o.get("output_type") in ("execute_result", "display_data"):
                lines += o.get("data", {}).get("text/plain", "").splitlines()
    return lines


@cache
def _notebook(path: Path):
    return nbformat.read(path, as_version=4)


def markdown_lines(nb) -> list[str]:
    return [ln for cell in nb.cells if cell.cell_type == "markdown" for ln in cell.source.splitlines()]


def quote_errors(chapter: Path) -> list[str]:
    nb = _notebook(chapter)
    name = chapter.parent.name
    errors, out = [], None
    for line in markdown_lines(nb):
        if line.lstrip().startswith("<!-- q:"):
            # A line that starts with a comment is an HTML block in Markdown: it would break the paragraph.
            errors.append(f"{name}: a quote marker starts a line (put a word before it): {line.strip()}")
        unclosed = OPEN.sub("", QUOTE.sub("", line))
        if len(OPEN.findall(line)) != 2 * len(QUOTE.findall(line)) or "<!-- q" in unclosed:
            errors.append(f"{name}: a quote marker not closed on its line (<!-- q:SOURCE#KEY -->VALUE<!-- /q -->): "
                          f"{line.strip()}")
        for source, key, value in QUOTE.findall(line):
            marker = f"<!-- q:{source}#{key} -->{value}<!-- /q -->"
            if source == "out":
                if out is None:
                    out = outputs(nb)
                why = check_quote(out, key, value, unique=False)
            else:
                path = ROOT / source
                if not path.is_file():
                    errors.append(f"{name}: {marker}: no file {source}")
                    continue
                why = check_quote(path.read_text(encoding="utf-8").splitlines(), key, value, unique=True)
            if why:
                errors.append(f"{name}: {marker}: {why}")
    return errors


@pytest.mark.parametrize("chapter", CHAPTERS, ids=_ids(CHAPTERS))
def test_every_quoted_number_is_its_source_s(chapter):
    errors = quote_errors(chapter)
    assert not errors, "\n".join(errors)


def test_the_checker_fails_on_a_moved_number():
    out = ["  copy, free-running: 0.02 0.10 0.48", "reverse: peak 0.47 at position 7, last 0.23"]
    assert check_quote(out, "peak", "0.47", unique=False) is None
    assert check_quote(out, "peak", "0.5", unique=False) is None            # rounded to the quoted precision
    assert check_quote(out, "peak", "0.23–0.47", unique=False) is None      # a range: both ends
    assert "0.49" in check_quote(out, "peak", "0.49", unique=False)         # the number moved
    assert "0.24" in check_quote(out, "peak", "0.23–0.24", unique=False)    # one end moved
    assert check_quote(out, "nothing like this", "0.47", unique=False) == "no line contains the key"
    assert "2 lines" in check_quote(out, "0.", "0.47", unique=True)          # a file's key must pick one line
    table = ["| ch01: x (lengths 12-14) | > 0.05 | 0.4895 | 0.4237–-0.5936 (5) | 1.31× |"]
    assert check_quote(table, "ch01: x", "0.42–-0.59, 1.3×, 12", unique=True) is None
    assert check_quote(table, "ch01: x", "−0.59", unique=True) is None      # the Unicode minus
    assert check_quote(table, "ch01: x", "0.43", unique=True) is not None   # 0.4237 does not round to 0.43
    assert check_quote(["others' share 0.070 0.673"], "share", "7 % and 67 %", unique=False) is None
    assert numbers("97–100 %, 3 to 5 %, 2 and 4 %") == [Decimal("0.97"), Decimal("1.00"), Decimal("0.03"),
                                                       Decimal("0.05"), Decimal(2), Decimal("0.04")]
    assert numbers("1e-4, 3.2E+2 and 10^15.9") == [Decimal("1e-4"), Decimal("3.2E+2"), Decimal(10), Decimal("15.9")]


def test_a_chapter_with_a_moved_number_fails(tmp_path, monkeypatch):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print('exact match 0.94')", outputs=[
                    nbformat.v4.new_output("stream", name="stdout", text="exact match 0.94\n")]),
                nbformat.v4.new_markdown_cell("It gets <!-- q:out#exact match -->0.94<!-- /q --> right, "
                                              "<!-- q:out#exact match -->0.95<!-- /q --> wrong, and "
                                              "<!-- q:tools/nothing.md#x -->1<!-- /q -->.\n"
                                              "<!-- q:out#exact -->0.94<!-- /q --> starts a line; "
                                              "<!-- q:out#exact -->0.94")]
    path = tmp_path / "chXX_demo" / "chXX_demo.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    errors = "\n".join(quote_errors(path))
    assert "0.95 not on the line (it says: exact match 0.94)" in errors
    assert "q:out#exact match -->0.94<" not in errors
    assert "no file tools/nothing.md" in errors
    assert "starts a line" in errors and "not closed" in errors


# -- every claims.check has its row in a tool-written spread table ---------------------------------

def claim_patterns(source: Path) -> list[str]:
    """The claim of every ``claims.check(...)`` in a chapter's text source, as a regular expression
    (an f-string's replacement fields match any text)."""
    patterns = []
    calls = sorted((n for n in ast.walk(ast.parse(source.read_text(encoding="utf-8"))) if isinstance(n, ast.Call)),
                   key=lambda n: (n.lineno, n.col_offset))
    for node in calls:
        if not (isinstance(node.func, ast.Attribute) and node.func.attr == "check"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "claims" and node.args):
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            patterns.append(re.escape(arg.value))
        elif isinstance(arg, ast.JoinedStr):
            patterns.append("".join(re.escape(v.value) if isinstance(v, ast.Constant) else ".+?" for v in arg.values))
        else:
            raise AssertionError(f"{source.name}: a claim that is not a string literal: {ast.unparse(arg)}")
    return patterns


@cache
def spread_rows() -> list[str]:
    return [ln for t in SPREAD_TABLES for ln in t.read_text(encoding="utf-8").splitlines() if ln.startswith("| ch")]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=_ids(CHAPTERS))
def test_every_claim_has_a_row_in_a_spread_table(chapter):
    source = chapter.with_suffix(".py")
    patterns = claim_patterns(source)
    missing = [p for p in patterns
               if not any(re.match(rf"\| {p}(?: \[#\d+\])? \| ", row) for row in spread_rows())]
    assert not missing, (f"{chapter.parent.name}: {len(missing)} claims.check without a row in "
                         f"{', '.join(t.relative_to(ROOT).as_posix() for t in SPREAD_TABLES)} (run tools/claim_spread.py "
                         f"{chapter.parent.name[:4]} --merge tools/claim_spread.md): "
                         + "; ".join(p.replace("\\", "") for p in missing))


def test_claim_patterns_match_f_strings(tmp_path):
    src = tmp_path / "c.py"
    src.write_text('for L in (12, 13):\n    claims.check(f"ch01: at length {L} (max - last)", 1.0, above=0)\n'
                   'claims.check("ch01: plain " "joined", 2.0, below=3)\nother.check("not a claim", 1)\n')
    patterns = claim_patterns(src)
    assert len(patterns) == 2
    assert re.fullmatch(patterns[0], "ch01: at length 13 (max - last)")
    assert re.fullmatch(patterns[1], "ch01: plain joined")


def _tables(text: str) -> list[tuple[str, list[str]]]:
    """(the text of the section before it, the table's lines) for every table of a document."""
    found, section, table = [], [], []
    for line in text.splitlines():
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            found.append(("\n".join(section), table))
            table = []
        section = [] if line.startswith("## ") else section
        section.append(line)
    if table:
        found.append(("\n".join(section), table))
    return found


@pytest.mark.parametrize("table", SPREAD_TABLES, ids=lambda p: p.name)
def test_spread_tables_are_written_by_their_tool(table):
    sys.path.insert(0, str(ROOT / "tools"))
    import claim_spread
    text = table.read_text(encoding="utf-8")
    assert text.startswith(claim_spread.TITLE + "\n\nMade by `tools/claim_spread.py"), (
        f"{table.name} does not start with the header claim_spread.py writes")
    tables = _tables(text)
    assert tables
    for section, lines in tables:
        assert "`tools/claim_spread.py" in section, f"a table of {table.name} under no line naming its tool:\n{lines[0]}"
        head = lines[0]
        assert head.startswith("| claim | bound | seed+0 | over seeds × CPUs (min–max) | ") and head.endswith(
            " | smallest margin | failed in |"), f"{table.name}: not the tool's table header: {head}"
        columns = head.count(" | ")
        for row in lines[2:]:   # a claim may hold "|" (|grad|): the columns are counted from the right
            assert re.search(r" \| [^|]+ \| [^|]+ \|$", row), f"{table.name}: a row the tool did not write: {row}"
            assert row.count(" | ") >= columns, f"{table.name}: a row with fewer columns than its header: {row}"


def test_claim_spread_writes_and_merges_its_header(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import claim_spread
    runs = [{"notebook": f"ch0{c}_x", "offset": off, "kernel": k, "seconds": 1.0, "errors": [],
             "changed_checked_outputs": [],
             "claims": [{"claim": f"ch0{c}: y (share)", "value": 0.5 + off / 10 - (k == "avx2") / 10,
                         "above": 0.1, "below": None, "holds": True}]}
            for c in (1, 2) for off, k in ((0, "native"), (1, "native"), (0, "avx2"))]
    table = claim_spread.report(runs, ["native", "avx2"])
    doc = claim_spread.markdown_document(table, "tools/claim_spread.py ch01 ch02", "a CPU", day="2026-01-01")
    assert doc.startswith(claim_spread.TITLE + "\n\nMade by `tools/claim_spread.py ch01 ch02` on 2026-01-01: a CPU.")
    # seed+0 native; every run; each profile over its seeds; the smallest margin (0.4 - 0.1)
    assert "| ch01: y (share) | > 0.1 | 0.5 | 0.4–0.6 (3) | 0.5–0.6 (2) | 0.4–0.4 (1) | 0.3 | – |" in doc
    summary = claim_spread.spread_summary(runs, {"ch03: z": {"min": 1}, "ch01: gone": {"min": 2}})
    assert summary["ch01: y (share)"] == {"bound": "> 0.1", "min": 0.4, "max": 0.6, "runs": 3, "seeds": 2,
                                         "profiles": ["avx2", "native"]}
    assert "ch03: z" in summary and "ch01: gone" not in summary     # chapters not run are kept, the rest replaced
    new_table = claim_spread.report([r for r in runs if r["notebook"].startswith("ch01")], ["native", "avx2"]).replace(
        "0.4–0.6", "0.4–0.7")
    merged = claim_spread.merge_document(doc, new_table, ["ch01"], "tools/claim_spread.py ch01 --merge x",
                                         "a CPU", note="Why.", day="2026-01-02")
    assert merged.startswith(doc.rstrip("\n").split("| ch01")[0])                 # the old header kept
    assert merged.count("| ch01: y (share)") == 1 and "0.4–0.7" in merged          # the old row replaced
    assert merged.count("| ch02: y (share)") == 1                                  # other chapters kept
    assert "## ch01 (2026-01-02)\n\nMade by `tools/claim_spread.py ch01 --merge x` on 2026-01-02" in merged
    assert "Why." in merged
    # Measured again: the section that held only ch01's rows goes, its text with it.
    again = claim_spread.merge_document(merged, new_table, ["ch01"], "tools/claim_spread.py ch01 --merge x",
                                        "a CPU", day="2026-01-03")
    assert "## ch01 (2026-01-02)" not in again and "Why." not in again and "## ch01 (2026-01-03)" in again
    assert again.count("| ch01: y (share)") == 1 and again.count("| ch02: y (share)") == 1
    prose = claim_spread.merge_document(merged + "\n## Notes\n\nNo table here.\n", new_table, ["ch01"], "x", "a CPU")
    assert "## Notes\n\nNo table here." in prose, "a section without a table was dropped"
    path = tmp_path / "spread.md"
    path.write_text(merged)
    tables = _tables(merged)
    assert len(tables) == 2 and all("`tools/claim_spread.py" in s for s, _ in tables)


# -- no run-specific number in the text without its source ----------------------------------------

# Every decimal number and percentage of a chapter's Markdown (text, tables, model answers) is either
# quoted from its source (a q: marker above) or listed in tests/text_constants.toml as a constant of
# the text: a formula's value, a setting the code states, a paper's figure with its citation. Numbers
# inside $math$, `code` and link targets are formulas and code, not claims about a run; whole numbers
# (sizes, steps, years, counts of a setting) are not checked.
CONSTANTS = ROOT / "tests" / "text_constants.toml"
# A number not inside a word, a path, a version or a name (v1.2, arXiv:1409.0473, x_1.5); a hyphen
# before it is a range's ("7-64 %") only after a digit, else a sign or a word's (NVIDIA's A100-80.5).
UNMARKED = re.compile(r"(?<![\w.$\\{^_/:])(?<!(?<!\d)-)(\d+\.\d+|\d+(?:\.\d+)?\s?%)(?![\w]|\.\d)")
_MATH = re.compile(r"\$\$.+?\$\$|(?<![\\$])\$(?!\$)(?:\\.|[^$\\])+?\$", re.S)
_CODE = re.compile(r"(`+).+?\1", re.S)
_LINK = re.compile(r"\]\([^)]*\)|<[^>]+>")
# A prompt's list of input kinds is written from the exercise's declaration (course_utils/domains, tied by
# tests/test_domains.py): its numbers ("positions of 1000", "1.0: every entry kept") come from there.
_DOMAIN = re.compile(r"<!-- domain: .*?<!-- /domain -->", re.S)


def _prose(text: str) -> str:
    """``text`` with its quoted values, generated domain lists, math, code spans, link targets and HTML
    tags blanked out."""
    for pattern in (QUOTE, _DOMAIN, _CODE, _MATH, _LINK):
        text = pattern.sub(" ", text)
    return text


def unmarked_numbers(text: str) -> list[str]:
    """The decimal numbers and percentages of a Markdown ``text`` outside quotes, math, code and links."""
    return [re.sub(r"\s", "", m.group(1)) for m in UNMARKED.finditer(_prose(text))]


@cache
def text_constants() -> list[dict]:
    import tomllib
    entries = tomllib.loads(CONSTANTS.read_text(encoding="utf-8")).get("constant", [])
    for e in entries:
        assert set(e) == {"chapter", "value", "context", "why"} and all(isinstance(v, str) and v for v in e.values()), (
            f"{CONSTANTS.name}: an entry needs chapter, value, context and why, all non-empty text: {e}")
    return entries


def unmarked_errors(chapter: Path, constants: list[dict]) -> list[str]:
    """Every unmarked number of ``chapter`` that no constant covers, and every constant of the
    chapter that covers nothing (the text moved on without it)."""
    name, short = chapter.parent.name, chapter.parent.name[:4]
    mine = [c for c in constants if c["chapter"] == short]
    used, errors = set(), []
    for cell in _notebook(chapter).cells:
        if cell.cell_type != "markdown":
            continue
        flat = " ".join(cell.source.split())
        for value in unmarked_numbers(cell.source):
            hit = next((i for i, c in enumerate(mine) if c["value"] == value and " ".join(c["context"].split()) in flat),
                       None)
            if hit is None:
                at = flat.find(value)
                errors.append(f"{name}: {value!r} is neither quoted (<!-- q:SOURCE#KEY -->{value}<!-- /q -->) nor a "
                              f"constant of tests/text_constants.toml: ...{flat[max(0, at - 80):at + 40]}...")
            else:
                used.add(hit)
    errors += [f"{name}: tests/text_constants.toml lists {c['value']!r} ({c['context']!r}), which the text no "
               "longer holds" for i, c in enumerate(mine) if i not in used]
    return errors


@pytest.mark.parametrize("chapter", CHAPTERS, ids=_ids(CHAPTERS))
def test_every_number_in_the_text_has_a_source(chapter):
    errors = unmarked_errors(chapter, text_constants())
    assert not errors, f"{len(errors)} numbers without a source:\n" + "\n".join(errors)


def test_the_unmarked_number_checker(tmp_path):
    text = ("Exact match <!-- q:out#x -->0.94<!-- /q --> here; the bound 0.95 and $p = 0.5$, `lr=3e-3`, "
            "[a](b/1.2.md), 12 layers, 7 % of tokens, version 3.11.2, 7-64 % and 0.3.")
    assert unmarked_numbers(text) == ["0.95", "7%", "64%", "0.3"]
    listed = "<!-- domain: ex1 f -->\n- `p`: 1.0: every entry kept.\n<!-- /domain -->\nthen 0.7"
    assert unmarked_numbers(listed) == ["0.7"]                       # the declaration's list is its source
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(text)]
    path = tmp_path / "chXX_demo" / "chXX_demo.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    constants = [{"chapter": "chXX", "value": "0.95", "context": "the bound", "why": "a setting"},
                 {"chapter": "chXX", "value": "0.3", "context": "not in the text", "why": "stale"}]
    errors = "\n".join(unmarked_errors(path, constants))
    assert "'0.95' is neither" not in errors                         # covered by its constant
    assert "'7%' is neither quoted" in errors and "'0.3' is neither quoted" in errors
    assert "lists '0.3' ('not in the text'), which the text no longer holds" in errors


def test_claim_spread_against_an_earlier_table_counts_what_falls_outside(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import claim_spread
    assert claim_spread.label("native", 1) == "native" and claim_spread.label("avx2", 4) == "avx2-4t"
    runs = [{"notebook": "ch01_x", "offset": 0, "kernel": "native-2t", "threads": 2, "seconds": 1.0, "errors": [],
             "changed_checked_outputs": [],
             "claims": [{"claim": "ch01: inside", "value": 0.50004, "above": 0.1, "below": None, "holds": True},
                        {"claim": "ch01: outside", "value": 0.9, "above": 0.1, "below": None, "holds": True},
                        {"claim": "ch01: failed", "value": 0.05, "above": 0.1, "below": None, "holds": False},
                        {"claim": "ch01: not in the table", "value": 9.0, "above": 0.1, "below": None,
                         "holds": True}]}]
    table = "\n".join(["| claim | bound | seed+0 | over seeds × CPUs (min–max) | native | smallest margin | failed in |",
                       "|---|---|---|---|---|---|---|",
                       "| ch01: inside | > 0.1 | 0.45 | 0.4–0.5 (3) | 0.4–0.5 (3) | 0.3 | – |",
                       "| ch01: outside | > 0.1 | 0.45 | 0.4–0.5 (3) | 0.4–0.5 (3) | 0.3 | – |",
                       "| ch01: failed | > 0.1 | 0.45 | 0.2–0.5 (3) | 0.2–0.5 (3) | 0.1 | – |"])
    said = claim_spread.against(runs, table)
    assert said.startswith("Against the earlier table: 2 of 3 values lie outside its range over every run: ")
    assert "ch01: outside: 0.9 against 0.4–0.5 (3)" in said and "ch01: failed: 0.05" in said
    assert "ch01: inside" not in said and said.endswith("Claims that failed their bound: 1 (ch01: failed).")
