"""The Chinese edition (course_utils/i18n, locale/, docs/translating.md).

* what is cut into catalogue entries, and how a translation goes back in place: markdown blocks,
  quoted numbers, docstrings and test messages (f-strings with their fields), on every chapter;
* the checks a translation must pass (formulas, code, numbers, headings, bold, glossary terms), each
  shown to catch its fault;
* every catalogue complete and in step with its English source: no entry missing or faulty, each glossary
  term translated as the glossary says and by no other name, and its first use in the chapter that
  teaches it glossed with the English; an entry awaiting translation (new or fuzzy) does not fail
  ``make test``: the page shows its English, marked, and ``make test-translations`` fails on it;
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

from course_utils.i18n import answers, catalogue, notebooks, readme, segments, sources, terms

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
    """No entry missing, none left over, none faulty. An entry that awaits its translation (new or fuzzy)
    is not a fault here: the translated page shows its English, marked; ``make test-translations``
    (``python -m course_utils.i18n check``) fails on it, and the run's summary counts it."""
    path = catalogue.po_path(REPO, LANG, domain)
    assert path.is_file(), f"{path.relative_to(REPO)} is missing: run make translations"
    found = catalogue.problems(catalogue.read(path), sources.fresh(REPO, domain), pending=False)
    assert not found, (f"{len(found)} problems in {path.relative_to(REPO)} (python -m course_utils.i18n check "
                       f"{domain}):\n  " + "\n  ".join(found[:20]))


def test_the_chinese_readme_is_current():
    path = readme.readme_path(REPO, LANG)
    assert path.is_file(), "README.zh_CN.md is missing: run make translations"
    assert path.read_text(encoding="utf-8") == readme.translated_readme(REPO, LANG), (
        "README.zh_CN.md differs from README.md translated by locale/zh_CN/LC_MESSAGES/readme.po: "
        "run make translations")
    text = path.read_text(encoding="utf-8")
    assert "make lab LANG=zh_CN" in text and "notebooks-zh_CN/" in text


def test_the_chinese_model_answers_are_current_and_whole():
    """solutions/model_answers.zh_CN.md: every written question of every chapter with its model answer in
    Chinese (none left in English), as make translations writes it from the chapters' catalogues."""
    path = answers.answers_path(REPO, LANG)
    assert path.is_file(), f"{path.relative_to(REPO)} is missing: run make translations"
    text = path.read_text(encoding="utf-8")
    assert text == answers.model_answers(REPO, LANG), f"{path.relative_to(REPO)} is stale: run make translations"
    written = sum(catalogue.is_model_answer(c) for ch in sources.chapter_names(REPO)
                  for c in sources.chapter_notebook(REPO, ch).cells)
    label = answers.HEADINGS[LANG][2].split("（")[0]
    assert text.count(f"**{label}") == written > 0, (text.count(f"**{label}"), written)
    assert notebooks.awaiting_note(LANG) not in text and "### BEGIN SOLUTION" not in text


def test_a_model_answer_is_translated_inside_its_solution_markers():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        "### BEGIN SOLUTION\nThe answer.\n### END SOLUTION", metadata={"nbgrader": {"solution": True, "grade": True}})])
    assert catalogue.model_answer_text(nb.cells[0].source) == "The answer."
    out, missing = notebooks.translate(nb, {"The answer.": "答案。"}, LANG)
    assert out.cells[0].source == "### BEGIN SOLUTION\n答案。\n### END SOLUTION" and not missing


@pytest.fixture(scope="module")
def translated():
    return notebooks.translated_chapters(REPO, LANG)


def test_every_chapter_translates_cell_by_cell(translated):
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


# ---------------------------------------------------------------------- one term per idea, and first uses
GLOSSARY = (REPO / "GLOSSARY.md").read_text(encoding="utf-8")
TAUGHT = terms.taught_in(GLOSSARY)


@pytest.mark.parametrize("english, translation, term, variant", [
    ("The exact match of the GRU.", "GRU 的精确匹配率。", "exact match", "精确匹配"),
    ("The class token looks at the edges.", "类别词元关注边缘。", "class token", "类别词元"),
    ("Attention rollout multiplies the maps.", "注意力 rollout 把各层的图相乘。", "attention rollout", "注意力 rollout"),
    ("Each block adds its input.", "每个模块都加上它的输入。", "block", "模块"),
    ("With a batch of 16.", "批量大小为 16 时。", "batch", "批量大小"),
    ("The masked keys get weight 0.", "被掩盖的键的权重为 0。", "masked", "被掩盖"),
    ("Open the notebook.", "打开这个 notebook。", "notebook", "notebook"),
])
def test_a_term_named_another_way_is_a_fault_naming_the_entry_and_the_term(english, translation, term, variant):
    assert (term, variant) in terms.variant_faults(english, translation)
    fresh = catalogue.template({english: catalogue.Entry(english, [("x.ipynb", 1)], ["markdown"])}, "x")
    cat = catalogue.template({english: catalogue.Entry(english, [("x.ipynb", 1)], ["markdown"])}, "x")
    cat[english].string = translation
    [fault] = [f for f in catalogue.problems(cat, fresh) if "glossary does" in f]
    assert english[:20] in fault and f"'{term}'" in fault and repr(variant) in fault, fault


def test_a_variant_is_not_a_fault_where_it_is_another_terms_name_or_an_english_gloss():
    assert terms.variant_faults("Call the sub-modules of the block.", "调用这个块的各个子模块。") == []
    assert terms.variant_faults("Open the notebook.", "打开这个笔记本（notebook）。") == []
    assert terms.variant_faults("Masked language modelling.", "掩码语言模型。") == []
    assert terms.variant_faults("The exact match.", "精确匹配率。", ["term: exact match -- quoted from a paper"]) == []


def test_every_glossary_term_names_the_chapter_that_teaches_it():
    headings = set(terms.glossary_headings(GLOSSARY))
    assert set(TAUGHT) <= headings
    untaught = headings - set(TAUGHT)
    assert untaught == {"笔记本"}, f"glossary terms whose 'Taught in' line links no chapter: {untaught}"
    assert TAUGHT["贪心搜索"] == "ch01_seq2seq_rnn" and TAUGHT["正弦位置编码"] == "ch06_transformer"


def test_a_first_use_needs_its_english_in_parentheses():
    greedy = next(t for t in terms.TERMS if t.english[0] == "greedy search")
    block = next(t for t in terms.TERMS if t.english[0] == "block")
    assert terms.with_english(greedy, "第 5 节讲贪心搜索（greedy search）。")
    assert terms.with_english(greedy, "**贪心搜索**（greedy decoding，每步取最大）。")
    assert not terms.with_english(greedy, "第 5 节讲贪心搜索。")
    assert not terms.with_english(greedy, "贪心搜索很快。束搜索（beam search）更好。")
    # 块 inside 模块 or 图像块 is not a use of "block"
    assert terms.uses("块", "这个模块读入图像块，每个块都") == [12]
    entries = [("## 5. Greedy", "## 5. 贪心搜索"), ("Skip to greedy search.", "跳到贪心搜索。"), ("x", "贪心搜索（greedy search）")]
    assert terms.first_use(greedy, entries) == entries[1]
    assert terms.first_use(block, [("The module.", "这个模块。")]) is None
    assert terms.first_use(greedy, entries[:1]) == entries[0]      # used only in a heading: the heading


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_term_first_used_in_the_chapter_that_teaches_it_carries_its_english(chapter):
    """docs/translating.md's rule: in the chapter that teaches a term (the first chapter its glossary
    entry links), the first use of its Chinese in running text carries the English in parentheses."""
    cat = catalogue.read(catalogue.po_path(REPO, LANG, chapter))
    entries = [(m.id, cat[m.id].string) for m in sources.fresh(REPO, chapter)
               if m.id and m.id in cat and cat[m.id].string and not cat[m.id].fuzzy]
    missed = []
    for t in terms.TERMS:
        if TAUGHT.get(t.heading) != chapter or not any(re.search(r"[\u4e00-\u9fff]", zh) for zh in t.chinese):
            continue
        first = terms.first_use(t, entries)
        if first is not None and not terms.with_english(t, first[1]):
            missed.append(f"{t.english[0]} ({'/'.join(t.chinese)}): {first[1][:80]!r}")
    assert not missed, f"{chapter}: first uses without the English in parentheses:\n  " + "\n  ".join(missed)


# ------------------------------------------------------------------------------------------- typography
@pytest.mark.parametrize("text, faults", [
    ("硬注意力只挑*一个*位置", 1),
    ("硬注意力只挑**一个**位置", 0),
    ("见 *Sequence to Sequence Learning*（2014）", 0),
    ("* 列表项\n* 另一项，`a*b*c` 与 $x*y*z$", 0),
    ("**注意**：_强调_。", 1),
])
def test_italic_chinese_is_a_fault_and_latin_italics_are_not(text, faults):
    assert len(catalogue.italic_faults(text)) == faults
    assert bool([f for f in catalogue.entry_faults(text, text, code=False) if "italic" in f]) == bool(faults)


def test_written_questions_have_one_label_in_every_chapter():
    en = "**Question 2 (written, 2 points).** Why?"
    assert catalogue.question_faults(en, "**简答题 2（2 分）**：为什么？") == []
    for other in ("**问题 2（简答题，2 分）** 为什么？", "**简答题 2**（2 分）。为什么？", "**简答题 2（2 分）。** 为什么？"):
        assert catalogue.question_faults(en, other), other
    found = 0
    for chapter in CHAPTERS:
        cat = catalogue.read(catalogue.po_path(REPO, LANG, chapter))
        for m in cat:
            if m.id and catalogue.QUESTION.match(m.id) and m.string and not m.fuzzy:
                found += 1
                assert not catalogue.question_faults(m.id, m.string), f"{chapter}: {m.string[:40]!r}"
    assert found >= len(CHAPTERS), "the chapters' written questions were not found"


# ------------------------------------------------------------------ English edits land, translations follow
def _course_copy(tmp_path: Path, chapter: str) -> Path:
    """A course with one chapter, the README, the glossary and their catalogues, to edit in English."""
    import shutil
    (tmp_path / "solutions" / chapter).mkdir(parents=True)
    shutil.copy(REPO / "solutions" / chapter / f"{chapter}.ipynb", tmp_path / "solutions" / chapter)
    for name in ("README.md", "GLOSSARY.md"):
        shutil.copy(REPO / name, tmp_path / name)
    (tmp_path / "site").mkdir()
    shutil.copy(REPO / "site" / "index.md", tmp_path / "site" / "index.md")
    for domain in (chapter, "readme", "site"):
        target = catalogue.po_path(tmp_path, LANG, domain)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(catalogue.po_path(REPO, LANG, domain), target)
    return tmp_path


def _one_word_changed(text: str, old: str, new: str) -> str:
    assert text.count(old) >= 1
    return text.replace(old, new, 1)


def test_a_one_word_english_edit_lands_and_the_chinese_shows_it_marked(tmp_path, capsys):
    """A maintainer who reads no Chinese rewords one word of the README and one of a chapter's
    paragraph, and runs ``make translations``: the entries turn fuzzy, ``make test``'s catalogue check
    passes and counts them, the Chinese pages show the new English with the note, and ``make
    test-translations`` (``python -m course_utils.i18n check``) fails, naming them."""
    from course_utils.i18n.__main__ import main

    chapter = "ch03_scaled_dot_product"
    root = _course_copy(tmp_path, chapter)
    readme_text = (root / "README.md").read_text(encoding="utf-8")
    (root / "README.md").write_text(_one_word_changed(readme_text, "Skipping an exercise never blocks you",
                                                      "Skipping an exercise never stops you"), encoding="utf-8")
    nb = nbformat.read(root / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "markdown" and "## 6. Masks" in c.source)
    cell.source = _one_word_changed(cell.source, "## 6. Masks", "## 6. Masking")
    para = next(c for c in nb.cells if c.cell_type == "markdown" and "The course follows" in c.source)
    para.source = _one_word_changed(para.source, "The course follows", "The course keeps")
    nbformat.write(nb, root / "solutions" / chapter / f"{chapter}.ipynb")

    assert main(["update", "--root", str(root)]) == 0
    for domain, edits in ((chapter, 2), ("readme", 1), ("site", 0)):
        cat = catalogue.read(catalogue.po_path(root, LANG, domain))
        fresh = sources.fresh(root, domain)
        assert len(catalogue.awaiting(cat, fresh)) == edits, domain
        assert catalogue.problems(cat, fresh, pending=False) == [], domain       # make test passes
        assert len(catalogue.problems(cat, fresh)) == edits, domain              # make test-translations does not
        assert all(cat[m].previous_id for m in catalogue.awaiting(cat, fresh))   # the old English, for the translator
    capsys.readouterr()
    assert main(["check", "--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert "fuzzy" in out and "The course keeps" in out and "6. Masking" in out

    note = notebooks.awaiting_note(LANG)
    zh = notebooks.translated_chapters(root, LANG)[chapter]
    text = "\n".join(c.source for c in zh.cells if c.cell_type == "markdown")
    assert "## 6. Masking\n\n" + note in text and text.count(note) == 2
    assert "The course keeps" in text
    with pytest.raises(ValueError, match="entries without a translation"):
        notebooks.translated_chapters(root, LANG, strict=True)
    zh_readme = readme.translated_readme(root, LANG)
    assert "Skipping an exercise never stops you" in zh_readme and zh_readme.count(note) == 1
    # The rest stays translated, and what is translated is checked as strictly as before.
    assert "掩码" in text and "运行所有单元格" in zh_readme


def test_an_awaiting_docstring_keeps_its_code_and_shows_the_note():
    source = 'def f(x):\n    """Doubles ``x``.\n\n    Args:\n        x: a tensor.\n    """\n    return 2 * x\n'
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source, metadata={
        "nbgrader": {"solution": True, "grade": False, "grade_id": "f", "locked": False}})])
    out, missing = notebooks.translate(nb, {}, LANG)
    assert missing == ["Doubles ``x``.\n\n    Args:\n        x: a tensor.\n    "]
    code = out.cells[0].source
    assert notebooks.AWAITING[LANG] in code and _strings_removed(ast.parse(code)) == _strings_removed(ast.parse(source))
    ns: dict = {}
    exec(code, ns)
    assert ns["f"](3) == 6 and ns["f"].__doc__.startswith("Doubles ``x``.")


def test_a_visible_tests_prose_is_an_entry_however_short_and_code_is_not():
    names = ["step 1", "rotated x", "shape (batch, S)", "float32, 10 tokens", "respects max_len",
             "softmax([0, -inf, 0])", "rope_half(x, offset=5)", "o_proj -> out_proj", "split_heads / merge_heads"]
    test = "".join(f'check({n!r}, f)\n' for n in names)
    assert [s.msgid for s in segments.code_strings(test, docstrings_only=False)] == names[:5]
