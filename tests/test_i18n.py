"""The Chinese edition (course_utils/i18n, locale/, docs/translating.md).

* what is cut into catalogue entries, and how a translation goes back in place: markdown blocks,
  quoted numbers, docstrings and test messages (f-strings with their fields), on every chapter;
* the checks a translation must pass (formulas, code, numbers, headings, bold, glossary terms), each
  shown to catch its fault;
* every catalogue complete and in step with its English source: no entry missing, untranslated, fuzzy or
  faulty, and each glossary term translated as the glossary says;
* README.zh_CN.md equal to a fresh one, and the Chinese chapters' links and anchors resolving.

The Chinese release's sync and the same-score grading test are in tests/test_grading.py (they share its
graded class); the Chinese site and notebook in a browser in tests_site/.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

from course_utils.i18n import catalogue, notebooks, readme, segments, sources, terms

REPO = Path(__file__).resolve().parent.parent
LANG = "zh_CN"
CHAPTERS = sources.chapter_names(REPO)
DOMAINS = sources.domains(REPO)


def _english(chapter: str) -> nbformat.NotebookNode:
    return sources.chapter_notebook(REPO, chapter)


# ------------------------------------------------------------------------------ cutting and putting back
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_markdown_blocks_rebuild_every_cell_and_keep_formulas_and_code_shared(chapter):
    for cell in _english(chapter).cells:
        if cell.cell_type != "markdown":
            continue
        blocks = segments.markdown_blocks(cell.source)
        assert "".join(b.text for b in blocks) == cell.source
        for b in blocks:
            text = b.text.strip()
            if text.startswith("```") or (text.startswith("$$") and text.endswith("$$") and "\n\n" not in text):
                assert not b.translatable, f"a formula or code block became an entry: {text[:60]!r}"


def test_a_fence_or_display_formula_with_blank_lines_stays_one_shared_block():
    text = "Intro text here.\n\n```python\nx = 1\n\ny = 2\n```\n\n$$\na\n\nb\n$$\n\nEnd of it.\n"
    blocks = segments.markdown_blocks(text)
    assert [b.translatable for b in blocks if b.text.strip()] == [True, False, False, True]
    assert "".join(b.text for b in blocks) == text


def test_quoted_numbers_become_placeholders_and_come_back_from_the_english():
    block = "one key takes <!-- q:out#w -->99.3 %<!-- /q --> and <!-- q:out#v -->$[1, 2]$<!-- /q --> of it"
    msgid, quotes = segments.to_msgid(block)
    assert msgid == "one key takes ⟨q1⟩ and ⟨q2⟩ of it"
    assert segments.from_msgstr("其中 ⟨q2⟩ 与 ⟨q1⟩", quotes) == (
        "其中 <!-- q:out#v -->$[1, 2]$<!-- /q --> 与 <!-- q:out#w -->99.3 %<!-- /q -->")
    with pytest.raises(ValueError, match="⟨q3⟩"):
        segments.from_msgstr("⟨q3⟩", quotes)


def _strings_removed(tree: ast.AST) -> str:
    """The tree's dump with every string constant emptied and every f-string cut to its fields."""
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            node.values = [v for v in node.values if isinstance(v, ast.FormattedValue)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = ""
    return ast.dump(tree)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_translated_code_cell_is_the_same_code_with_other_strings(chapter):
    """Every visible test and exercise cell, its entries replaced by marked text: it compiles, its code
    (the tree without string constants) is unchanged, each replacement field of an f-string survives,
    and (see the next test) nothing after ``### BEGIN HIDDEN TESTS`` is an entry."""
    for cell in _english(chapter).cells:
        strings = catalogue.cell_strings(cell)
        if not strings:
            continue
        table = {s.msgid: "译：" + s.msgid for s in strings}
        out = segments.replace_strings(cell.source, strings, table)
        assert _strings_removed(ast.parse(out)) == _strings_removed(ast.parse(cell.source))


def test_an_f_string_is_rebuilt_with_its_fields_whatever_the_translation_reorders():
    source = 'raise X(f"got {got.shape!r:>10}, expected {want} {{literal}}" f"; tail {n:.3f}")\n'
    [s] = segments.code_strings(source, docstrings_only=False)
    assert s.msgid == "got {got.shape!r:>10}, expected {want} {{literal}}; tail {n:.3f}"
    [plain] = segments.code_strings('x = f"a {b} and" " {not a field}"\n', docstrings_only=False)
    assert plain.msgid == "a {b} and {{not a field}}"
    out = segments.replace_strings(source, [s], {s.msgid: "应为 {want}，得到 {got.shape!r:>10}；{n:.3f} {{字面}}"})
    ns = {"X": lambda m: m, "got": type("G", (), {"shape": (2, 3)})(), "want": (3, 2), "n": 0.5}
    msg = eval(out.replace("raise ", ""), ns)
    assert msg == "应为 (3, 2)，得到     (2, 3)；0.500 {字面}"


def test_only_prose_strings_of_a_test_and_only_docstrings_of_an_exercise_are_entries():
    test = 'checks.run_checks("scaled_scores", [("the shape of the scores", f)])\nx = "out_proj"\n'
    assert [s.msgid for s in segments.code_strings(test, docstrings_only=False)] == ["the shape of the scores"]
    exercise = 'def f(x):\n    """Doubles ``x``."""\n    raise ValueError("a message for the solution")\n'
    assert [s.msgid for s in segments.code_strings(exercise, docstrings_only=True)] == ["Doubles ``x``."]
    hidden = 'check("a visible check name", f)\n### BEGIN HIDDEN TESTS\ncheck("a hidden check name", g)\n'
    assert [s.msgid for s in segments.code_strings(hidden, docstrings_only=False)] == ["a visible check name"]


# ------------------------------------------------------------------------------------------- the checks
GOOD = ("In chapter 2 the score $s_t^\\top h_j$ of `attn` took ⟨q1⟩ of [the weight](#5-masks).",
        "第 2 章中，`attn` 的分数 $s_t^\\top h_j$ 占了 [权重](#5-masks) 的 ⟨q1⟩。")


@pytest.mark.parametrize("bad, fault", [
    (GOOD[1].replace("$s_t^\\top h_j$", "$s_t h_j$"), "math"),
    (GOOD[1].replace("`attn`", "attn"), "code"),
    (GOOD[1].replace("(#5-masks)", "(#5-掩码)"), "link"),
    (GOOD[1].replace("⟨q1⟩", "99.3 %"), "quote"),
    (GOOD[1].replace("第 2 章", "第二章"), "number"),
    (GOOD[1] + "（共 3 处）", "number"),
])
def test_a_translation_that_changes_what_must_be_kept_is_a_fault(bad, fault):
    assert catalogue.entry_faults(GOOD[0], GOOD[1], code=False) == []
    faults = catalogue.entry_faults(GOOD[0], bad, code=False)
    assert faults and fault in " ".join(faults), faults


def test_headings_fields_bold_and_commands_are_checked():
    assert catalogue.entry_faults("## 3. Masks", "3. 掩码", code=False)
    assert catalogue.entry_faults("## 3. Masks", "### 3. 掩码", code=False)
    assert not catalogue.entry_faults("## 3. Masks", "## 3. 掩码", code=False)
    assert catalogue.entry_faults("got {x}, expected {y}", "得到 {x}，应为 {z}", code=True)
    assert catalogue.entry_faults("**Note:** it", "**注意：**它", code=False)
    assert not catalogue.entry_faults("**Note:** it", "**注意**：它", code=False)
    fence = "```bash\nmake lab   # open the lab\n```"
    assert not catalogue.entry_faults(fence, "```bash\nmake lab   # 打开 Lab\n```", code=False)
    assert catalogue.entry_faults(fence, "```bash\nmake test   # 打开 Lab\n```", code=False)


def test_the_term_table_is_the_glossary_both_ways():
    glossary = terms.glossary_headings((REPO / "GLOSSARY.md").read_text(encoding="utf-8"))
    assert glossary, "GLOSSARY.md has no term headings (## 中文 · English)"
    rows = {t.heading for t in terms.TERMS}
    assert not set(glossary) - rows, f"glossary terms with no row in course_utils/i18n/terms.py: {set(glossary) - rows}"
    assert not rows - set(glossary), f"rows of terms.py whose heading is not in GLOSSARY.md: {rows - set(glossary)}"
    for t in terms.TERMS:
        words = re.findall(r"[\u4e00-\u9fff]+", t.heading)
        assert any(zh in t.heading or any(w in zh for w in words) for zh in t.chinese), (
            f"{t.english[0]}: none of {t.chinese} is the glossary's {t.heading}")


def test_a_term_left_out_is_found_and_an_exemption_needs_a_reason():
    en = "The decoder reads the KV cache; see `mask` and $attention$."
    assert terms.missing_terms(en, "解码器读取键值缓存；见 `mask` 和 $attention$。") == []
    assert terms.missing_terms(en, "译码器读取键值缓存。") == ["decoder"]
    assert terms.missing_terms(en, "译码器读取键值缓存。", ["term: decoder"]) == ["decoder"]
    assert terms.missing_terms(en, "译码器读取键值缓存。", ["term: decoder -- the hardware sense"]) == []


# ------------------------------------------------------------------------------------------ catalogues
@pytest.mark.parametrize("domain", DOMAINS)
def test_catalogue_is_complete_and_in_step_with_its_english_source(domain):
    path = catalogue.po_path(REPO, LANG, domain)
    assert path.is_file(), f"{path.relative_to(REPO)} is missing: run make translations"
    found = catalogue.problems(catalogue.read(path), sources.fresh(REPO, domain))
    assert not found, (f"{len(found)} problems in {path.relative_to(REPO)} (python -m course_utils.i18n check "
                       f"{domain}):\n  " + "\n  ".join(found[:20]))


def test_the_chinese_readme_is_current():
    path = readme.readme_path(REPO, LANG)
    assert path.is_file(), "README.zh_CN.md is missing: run make translations"
    assert path.read_text(encoding="utf-8") == readme.translated_readme(REPO, LANG), (
        "README.zh_CN.md differs from README.md's learner part translated by locale/zh_CN/LC_MESSAGES/readme.po: "
        "run make translations")
    text = path.read_text(encoding="utf-8")
    assert "make lab LANG=zh_CN" in text and "notebooks-zh_CN/" in text


@pytest.fixture(scope="module")
def translated():
    return notebooks.translated_chapters(REPO, LANG, strict=True)


def test_every_chapter_translates_with_no_english_left(translated):
    assert set(translated) == set(CHAPTERS)
    for ch, nb in translated.items():
        english = _english(ch)
        assert len(nb.cells) == len(english.cells)
        for en, zh in zip(english.cells, nb.cells):
            assert en.cell_type == zh.cell_type and en.metadata == zh.metadata
            if en.cell_type == "code":
                assert en.outputs == zh.outputs
        assert nb.metadata["course"]["language"] == LANG


def test_every_heading_is_translated_and_every_anchor_link_resolves(translated):
    """Each English heading has its translated heading (same cells, same order), and every link to an
    anchor of a chapter in the Chinese chapters names a heading of that Chinese chapter."""
    anchors = {ch: set(notebooks.slugs(t for c in nb.cells if c.cell_type == "markdown"
                                       for t in notebooks.heading_titles(c.source)))
               for ch, nb in translated.items()}
    for ch, nb in translated.items():
        english = _english(ch)
        for en, zh in zip(english.cells, nb.cells):
            if en.cell_type == "markdown":
                assert len(notebooks.heading_titles(en.source)) == len(notebooks.heading_titles(zh.source)), (
                    f"{ch}: a heading was lost or added in translation: {notebooks.heading_titles(zh.source)}")
        for cell in nb.cells:
            if cell.cell_type != "markdown":
                continue
            for m in notebooks.LINK.finditer(cell.source):
                target, anchor = m.group(2), m.group(3)
                other = ch if not target else next((c for c in CHAPTERS if c in target), None)
                if other is not None:
                    assert anchor in anchors[other], f"{ch}: a link to #{anchor} of {other}, which has no such heading"


def test_a_fuzzy_entry_keeps_its_old_english_through_read_and_write(tmp_path):
    """``#| msgid`` (the old English of a changed paragraph) survives any number of read/write
    round trips, one line of the English per line; lines an older writer wrapped are dropped, and a
    translator's own comment stays."""
    from babel.messages.catalog import Catalog

    cat = Catalog(locale="zh_CN")
    cat.add("New text,\nsecond line with \"quotes\".", string="旧译文", flags={"fuzzy"},
            previous_id="Old text,\nits second line.", auto_comments=["markdown"], user_comments=["term: kept"])
    cat.add("Untouched.", string="未变。")
    path = tmp_path / "x.po"
    catalogue.write(cat, path)
    first = path.read_text()
    assert '#| msgid ""\n#| "Old text,\\n"\n#| "its second line."\nmsgid ""\n' in first, first
    back = catalogue.read(path)
    entry = back.get("New text,\nsecond line with \"quotes\".")
    assert entry.fuzzy and entry.previous_id == ("Old text,\nits second line.",) and entry.user_comments == ["term: kept"]
    assert not back.get("Untouched.").previous_id
    catalogue.write(back, path)
    assert path.read_text() == first, "a second round trip changed the catalogue"
    # What Babel's own writer made of a previous id: wrapped, quoted pieces run together.
    path.write_text(first.replace('#| msgid ""\n#| "Old text,\\n"\n#| "its second line."\n',
                                  '# | msgid "" "Old text,\\n" "its\n# second line."\n'))
    entry = catalogue.read(path).get("New text,\nsecond line with \"quotes\".")
    assert not entry.previous_id and entry.user_comments == ["term: kept"], entry.user_comments
