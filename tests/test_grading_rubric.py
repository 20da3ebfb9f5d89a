"""Rubrics of the written questions (grader/course_grading/rubric.py, issue 52).

* every written question (a manually graded cell) of every chapter has a rubric in the format, whose
  parts sum to the cell's points; a missing rubric, a wrong sum, a part line out of the format fail;
* the rubric cell the grader inserts beside each answer of an autograded notebook: from the source,
  without nbgrader metadata (the gradebook's cells are unchanged), rendered by formgrader's exporter
  with the instructor's configuration, and never doubled or taken from a learner's cell;
* the marks by part: read from the comment's first line where they fit, from a full or zero score
  otherwise, the total alone for anything else, never an error;
* the feedback's step: a rubric reaches the learner only with their mark, as the marks by part.

The whole flow (autograde, formgrader's page, a hand mark, the feedback) runs in
``tests/test_grading_class.py``'s class.
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat
import pytest
from notebook_helpers import meta as _meta

import course_grading as grading
from course_grading import rubric
from course_utils.i18n.catalogue import HAN

REPO = Path(__file__).resolve().parent.parent
CHAPTERS = grading.chapters(REPO)


def _source(chapter: str):
    return nbformat.read(grading.chapter_notebook(chapter, REPO), as_version=4)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_written_question_has_a_rubric_whose_parts_sum_to_its_points(chapter):
    nb = _source(chapter)
    found = rubric.rubrics(nb)     # raises RubricError naming every faulty question
    written = {_meta(c)["grade_id"]: float(_meta(c)["points"]) for c in nb.cells if rubric.is_written(c)}
    assert set(found) == set(written), (set(written) - set(found), set(found) - set(written))
    for gid, r in found.items():
        assert sum(p for p, _ in r.parts) == pytest.approx(written[gid]) == r.points, gid
        assert len(r.parts) >= 2 or r.points <= 1, f"{gid}: a rubric of {r.points:g} points in one part"
        assert all(len(text) > 20 for _, text in r.parts), (gid, r.parts)
        assert r.answer and "**Rubric**" not in r.answer, gid


def _written_cell(body: str, points: float = 2):
    cell = nbformat.v4.new_markdown_cell(f"### BEGIN SOLUTION\nThe model answer.\n\n{body}\n### END SOLUTION")
    cell.metadata["nbgrader"] = {"grade": True, "solution": True, "locked": False, "points": points,
                                 "grade_id": "q1", "schema_version": 3}
    return cell


GOOD = ("**Rubric** (for the grader, 2 points):\n\n- **1.5 points** for the cause, stated with\n"
        "  the chapter's evidence.\n- **0.5 point** for the remedy.")


@pytest.mark.parametrize("body, why", [
    ("", "no rubric"),
    ("**Rubric** (for the grader, two points): one point for the cause; one point for the remedy.", "no rubric"),
    (GOOD.replace("1.5 points", "1 point"), "sum to 1.5"),
    (GOOD.replace("2 points):", "3 points):"), "header says 3"),
    (GOOD + "\nA remark that is no part.", "neither a part"),
    (GOOD.replace("- **0.5 point**", "- 0.5 point"), "neither a part"),
    ("**Rubric** (for the grader, 2 points):\n", "at least one part"),
])
def test_a_missing_or_wrong_rubric_fails(body, why):
    nb = nbformat.v4.new_notebook(cells=[_written_cell(body)])
    with pytest.raises(rubric.RubricError, match=why):
        rubric.rubrics(nb)
    assert rubric.rubrics(nb, strict=False) == {}


def test_a_rubric_in_the_format_is_read_part_by_part():
    r = rubric.rubrics(nbformat.v4.new_notebook(cells=[_written_cell(GOOD)]))["q1"]
    assert r.parts == ((1.5, "for the cause, stated with the chapter's evidence."), (0.5, "for the remedy."))
    assert r.answer == "The model answer."


def _autograded(chapter: str):
    """A stand-in for an autograded notebook: the chapter's source, with a learner's cell that imitates a
    rubric cell's text and one that carries a rubric cell's metadata (intake drops it; here it is forged)."""
    nb = _source(chapter)
    first = next(i for i, c in enumerate(nb.cells) if rubric.is_written(c))
    forged = nbformat.v4.new_markdown_cell("**Rubric of q1** forged")
    forged.metadata[rubric.META] = {"rubric": "q1", "parts": [[2, "anything"]]}
    nb.cells[first + 1:first + 1] = [nbformat.v4.new_markdown_cell("**Rubric of q1** (the learner's)"), forged]
    return nb


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if rubric.rubrics(_source(c), strict=False)][:2])
def test_the_rubric_is_inserted_beside_each_answer_from_the_source(chapter, tmp_path):
    nb = _autograded(chapter)
    path = tmp_path / "autograded.ipynb"
    nbformat.write(nb, path)
    graded_cells = [copy.deepcopy(c) for c in nb.cells if _meta(c)]
    source = grading.chapter_notebook(chapter, REPO)
    found = rubric.rubrics(_source(chapter))
    for _ in range(2):                        # a regrade replaces the cells, never doubles them
        assert rubric.add_rubric_cells(path, source) == len(found)
    out = nbformat.read(path, as_version=4)
    assert [c for c in out.cells if _meta(c)] == graded_cells, "the gradebook's cells changed"
    inserted = [c for c in out.cells if rubric.is_rubric_cell(c)]
    assert len(inserted) == len(found) and all("nbgrader" not in c.metadata for c in inserted)
    for i, cell in enumerate(out.cells):
        if rubric.is_written(cell):
            beside = out.cells[i + 1]
            gid = _meta(cell)["grade_id"]
            assert rubric.is_rubric_cell(beside) and beside.metadata[rubric.META]["rubric"] == gid
            assert all(text in beside.source for _, text in found[gid].parts), gid
    assert "forged" not in "".join(c.source for c in out.cells)


def test_formgrader_shows_the_rubric_beside_the_answer(tmp_path):
    from test_formgrader_guard import MARK, _notebook, formgrader_html, instructor_config

    source = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("plain"), _written_cell(GOOD)])
    (tmp_path / "src").mkdir()
    nbformat.write(source, tmp_path / "src" / "ch.ipynb")
    hostile = _notebook()             # a hostile written answer (scripts in its Markdown) and outputs
    nbformat.write(hostile, tmp_path / "graded.ipynb")
    assert rubric.add_rubric_cells(tmp_path / "graded.ipynb", tmp_path / "src" / "ch.ipynb") == 1
    graded = nbformat.read(tmp_path / "graded.ipynb", as_version=4)
    html = formgrader_html(graded, instructor_config())
    assert "Rubric of q1" in html and "for the cause, stated with the chapter" in html and "marks: 1.5, 0.5" in html
    assert html.index("Rubric of q1") > html.index("The weights sum to one.")   # beside (after) the answer
    assert MARK not in html, "the learner's HTML ran beside the rubric"


PARTS = [(1.0, "the cause"), (1.0, "the remedy")]


@pytest.mark.parametrize("score, comment, marks, noted", [
    (1.5, "marks: 1, 0.5\nGood cause.", [1.0, 0.5], False),
    (1.5, "Marks: 0.5 / 1", [0.5, 1.0], False),
    (2.0, None, [1.0, 1.0], False),
    (0.0, "Nothing relevant.", [0.0, 0.0], False),
    (1.0, "Half right.", None, True),
    (1.5, "marks: 1, 1", None, True),               # does not sum to the score
    (1.5, "marks: 1.5, 0", None, True),             # above a part's points
    (1.0, "marks: 1", None, True),                  # one mark for two parts
    (1.0, "marks: one, zero", None, True),
    (1.0, "marks:", None, True),
    (2.0, "marks: 0, 2", [1.0, 1.0], True),         # does not fit, but a full score marks every part
    (1.0, "marks: " + "1," * 100000, None, True),
    (1.0, "", None, True),
])
def test_marks_by_part_come_from_the_comment_or_a_full_or_zero_score(score, comment, marks, noted):
    got, note = rubric.part_marks(PARTS, score, comment)
    assert got == marks and bool(note) == noted, (got, note)


def test_a_malformed_rubric_cell_or_comment_never_fails_the_feedback():
    text = rubric.marks_markdown("q1", [[1, "the cause"], [1, "the remedy"]], 1.0, "marks: x")
    assert "– / 1" in text and "as a whole" in text
    assert rubric.strip_marks_line("marks: 1, 0\nWell argued.") == "Well argued."
    assert rubric.strip_marks_line("Well argued.") == "Well argued." and rubric.strip_marks_line(None) is None


def _feedback_nb():
    nb = nbformat.v4.new_notebook(cells=[_written_cell(GOOD)])
    nb.cells.append(rubric.rubric_cell(rubric.rubrics(nb)["q1"], "solutions/ch/ch.ipynb"))
    nb.cells[0].source = "My answer."          # the learner's, as in an autograded notebook
    nb.cells[0].metadata["nbgrader"]["comment"] = "marks: 1.5, 0\nRemedy missing."
    return nb


def test_the_feedback_shows_a_rubric_only_with_its_mark(monkeypatch):
    monkeypatch.setattr(rubric, "_hand_marks", lambda info: {})
    pending, _ = rubric.RubricMarks().preprocess(_feedback_nb(), {"nbgrader": {}})
    assert [c.source for c in pending.cells] == ["My answer."]

    monkeypatch.setattr(rubric, "_hand_marks", lambda info: {"q1": (1.5, "marks: 1.5, 0\nRemedy missing.")})
    marked, _ = rubric.RubricMarks().preprocess(_feedback_nb(), {"nbgrader": {}})
    shown = marked.cells[1].source
    assert "by part of the rubric** (1.5 / 2 points)" in shown
    assert "**1.5 / 1.5** for the cause" in shown and "**0 / 0.5** for the remedy" in shown
    assert "Model answer" not in shown and not rubric.is_rubric_cell(marked.cells[1])
    assert marked.cells[0].metadata["nbgrader"]["comment"] == "Remedy missing."


def test_a_rubric_cell_with_broken_parts_is_left_out(monkeypatch):
    monkeypatch.setattr(rubric, "_hand_marks", lambda info: {"q1": (2.0, None)})
    nb = _feedback_nb()
    nb.cells[1].metadata[rubric.META]["parts"] = [["x", "y"], 3]
    out, _ = rubric.RubricMarks().preprocess(nb, {"nbgrader": {}})
    assert [c.source for c in out.cells] == ["My answer."]


def test_without_a_gradebook_no_rubric_reaches_the_feedback():
    nb, _ = rubric.RubricMarks().preprocess(_feedback_nb(), {"nbgrader": {"db_url": "sqlite:////nonexistent/x.db"}})
    assert [c.source for c in nb.cells] == ["My answer."]


# --- the rubric in the learner's language (the chapters' catalogues, locale/<lang>/LC_MESSAGES/) -----------

GOOD_PARTS = GOOD.split("\n\n", 1)[1]          # the catalogue's entry of the parts (one markdown block)
ZH_HEADER = "**评分标准**（供评分者使用，共 2 分）："
ZH_PARTS = "- **1.5 分**给原因，并用本章的证据说明。\n- **0.5 分**给补救办法。"


def _course(tmp_path, entries: dict[str, tuple[str, bool]] | None):
    """A course root with one chapter (``chx``, the written question of GOOD) and, unless ``entries`` is None,
    its zh_CN catalogue: ``{msgid: (msgstr, fuzzy)}``."""
    from babel.messages.catalog import Catalog

    from course_utils.i18n import catalogue

    (tmp_path / "solutions" / "chx").mkdir(parents=True)
    source = tmp_path / "solutions" / "chx" / "chx.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("plain"), _written_cell(GOOD)]), source)
    if entries is not None:
        cat = Catalog(locale="zh_CN")
        for msgid, (msgstr, fuzzy) in entries.items():
            cat.add(msgid, msgstr, flags=["fuzzy"] if fuzzy else [])
        catalogue.write(cat, catalogue.po_path(tmp_path, "zh_CN", "chx"))
    return source


def _submission(tmp_path, lang: str | None = "zh_CN"):
    """An autograded notebook of chapter ``chx`` in ``lang`` (its metadata, as the translated release writes it)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("plain"), _written_cell(GOOD)])
    nb.cells[1].source = "我的答案。"
    nb.cells[1].metadata["nbgrader"]["comment"] = "marks: 1.5, 0\n缺少补救办法。"
    if lang:
        nb.metadata["course"] = {"language": lang}
    path = tmp_path / "autograded.ipynb"
    nbformat.write(nb, path)
    return path


def _feedback_of(path, monkeypatch, score=1.5, comment="marks: 1.5, 0\n缺少补救办法。"):
    monkeypatch.setattr(rubric, "_hand_marks", lambda info: {"q1": (score, comment)})
    out, _ = rubric.RubricMarks().preprocess(nbformat.read(path, as_version=4), {"nbgrader": {}})
    shown = [c.source for c in out.cells if "q1" in c.source]
    assert len(shown) == 1, [c.source for c in out.cells]
    return shown[0]


def test_a_chinese_feedback_shows_the_rubric_parts_in_chinese(tmp_path, monkeypatch):
    source = _course(tmp_path, {"**Rubric** (for the grader, 2 points):": (ZH_HEADER, False),
                                GOOD_PARTS: (ZH_PARTS, False)})
    path = _submission(tmp_path)
    assert rubric.add_rubric_cells(path, source) == 1
    shown = _feedback_of(path, monkeypatch)
    assert "**1.5 / 1.5** 给原因，并用本章的证据说明。" in shown and "**0 / 0.5** 给补救办法。" in shown
    assert "q1 的得分，按评分标准的各部分" in shown and "for the cause" not in shown and "point" not in shown
    # the instructor's cell: the English rubric, the model answer, and what the learner will read
    cell = next(c for c in nbformat.read(path, as_version=4).cells if rubric.is_rubric_cell(c))
    assert "for the cause, stated with the chapter's evidence." in cell.source and "给补救办法。" in cell.source
    assert "The model answer." in cell.source
    from test_formgrader_guard import formgrader_html, instructor_config

    html = formgrader_html(nbformat.read(path, as_version=4), instructor_config())
    assert "for the cause, stated with the chapter" in html and "给原因，并用本章的证据说明。" in html
    # the same notebook in English (no language in its metadata): the English parts
    nb = nbformat.read(path, as_version=4)
    del nb.metadata["course"]
    nbformat.write(nb, path)
    english = _feedback_of(path, monkeypatch)
    assert "**1.5 / 1.5** for the cause, stated with the chapter's evidence." in english and "给" not in english


@pytest.mark.parametrize("entries, why", [
    (None, "no catalogue"),
    ({"**Rubric** (for the grader, 2 points):": (ZH_HEADER, False)}, "not translated"),
    ({"**Rubric** (for the grader, 2 points):": (ZH_HEADER, False), GOOD_PARTS: (ZH_PARTS, True)}, "not translated"),
    ({"**Rubric** (for the grader, 2 points):": (ZH_HEADER, True), GOOD_PARTS: (ZH_PARTS, False)}, "not translated"),
    ({"**Rubric** (for the grader, 2 points):": (ZH_HEADER, False), GOOD_PARTS: ("", False)}, "not translated"),
], ids=["no-catalogue", "parts-missing", "parts-fuzzy", "header-fuzzy", "parts-empty"])
def test_a_missing_or_fuzzy_translation_leaves_the_rubric_in_english(tmp_path, monkeypatch, entries, why):
    source = _course(tmp_path, entries)
    path = _submission(tmp_path)
    assert rubric.add_rubric_cells(path, source) == 1
    shown = _feedback_of(path, monkeypatch)
    assert "**1.5 / 1.5** for the cause, stated with the chapter's evidence." in shown
    assert "**0 / 0.5** for the remedy." in shown and "给" not in shown
    assert "q1 的得分，按评分标准的各部分" in shown          # the feedback's own words stay in Chinese
    cell = next(c for c in nbformat.read(path, as_version=4).cells if rubric.is_rubric_cell(c))
    assert why in cell.source, cell.source               # the instructor is told why


@pytest.mark.parametrize("header, parts, why", [
    (ZH_HEADER, ZH_PARTS.replace("1.5 分", "1 分"), "does not parse"),             # parts sum to 1.5
    (ZH_HEADER, ZH_PARTS.replace("1.5 分", "1 分").replace("0.5 分", "1 分"), "differ"),   # 1 + 1: not 1.5 + 0.5
    (ZH_HEADER.replace("2 分", "3 分"), ZH_PARTS, "does not parse"),
    (ZH_HEADER, ZH_PARTS.replace("- **0.5 分**", "- 0.5 分"), "does not parse"),
    (ZH_HEADER, ZH_PARTS + "\n另有一行，不是一部分。", "does not parse"),
    (ZH_HEADER, "- **2 分**给原因和补救办法。", "differ"),                          # one part for two
    ("**评分**：2 分", ZH_PARTS, "does not parse"),
    (ZH_HEADER, ZH_PARTS + " ⟨q3⟩", "does not parse"),                            # a quote the English has not
], ids=["sum-not-header", "points-differ", "header-3", "part-not-bold", "stray-line", "one-part", "no-header",
        "bad-placeholder"])
def test_a_broken_translation_leaves_the_rubric_in_english(tmp_path, monkeypatch, header, parts, why):
    source = _course(tmp_path, {"**Rubric** (for the grader, 2 points):": (header, False), GOOD_PARTS: (parts, False)})
    path = _submission(tmp_path)
    assert rubric.add_rubric_cells(path, source) == 1
    shown = _feedback_of(path, monkeypatch)
    assert "**1.5 / 1.5** for the cause, stated with the chapter's evidence." in shown and "给" not in shown
    cell = next(c for c in nbformat.read(path, as_version=4).cells if rubric.is_rubric_cell(c))
    assert why in cell.source, cell.source


def test_the_zh_form_is_read_with_either_punctuation_and_spacing():
    text = "**评分标准** (供评分者使用, 共 2 分):\n\n- **1.5分** 给原因，\n  并用本章的证据说明。\n- ** 0.5 分 **给补救办法。"
    parts = rubric.parse_rubric(text, "q1", 2, rubric.FORMS["zh_CN"])
    assert parts == ((1.5, "给原因，并用本章的证据说明。"), (0.5, "给补救办法。"))   # Chinese lines join without a space


def test_forged_translated_parts_in_the_cell_fall_back_to_english(tmp_path, monkeypatch):
    path = _submission(tmp_path)
    assert rubric.add_rubric_cells(path, _course(tmp_path, None)) == 1
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if rubric.is_rubric_cell(c))
    for forged in ([[1.0, "一"], [1.0, "二"]], [[1.5, "一"]], [[1.5, 3], [0.5, "二"]], "x", [[1.5, "一"], [0.5]]):
        cell.metadata[rubric.META]["translations"] = {"zh_CN": forged}
        nbformat.write(nb, path)
        shown = _feedback_of(path, monkeypatch)
        assert "**1.5 / 1.5** for the cause" in shown and "一" not in shown, forged


def _translated_fully(chapter: str, gid: str) -> bool:
    """Whether the catalogue holds a usable translation of every block of ``gid``'s rubric."""
    from course_utils.i18n import catalogue, notebooks

    table = catalogue.translations(catalogue.read(catalogue.po_path(REPO, "zh_CN", chapter)))
    cell = next(c for c in _source(chapter).cells if _meta(c).get("grade_id") == gid)
    text = catalogue.model_answer_text(cell.source)
    missing: list[str] = []
    notebooks.translate_markdown(text[text.index("**Rubric**"):], table, missing, mark=False)
    return not missing


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if rubric.rubrics(_source(c), strict=False)])
def test_every_translated_rubric_of_the_course_reads_in_chinese(chapter):
    english = rubric.rubrics(_source(chapter))
    found = rubric.translated_rubrics(grading.chapter_notebook(chapter, REPO), english, "zh_CN")
    for gid, got in found.items():
        if isinstance(got, str):                  # why it stays English: only a pending translation may
            assert "not translated" in got and not _translated_fully(chapter, gid), (gid, got)
            continue
        assert [p for p, _ in got] == [p for p, _ in english[gid].parts], gid
        assert all(HAN.search(t) for _, t in got), (gid, got)


def test_a_catalogue_that_does_not_parse_leaves_the_rubric_in_english(tmp_path, monkeypatch):
    source = _course(tmp_path, {GOOD_PARTS: (ZH_PARTS, False)})
    po = tmp_path / "locale" / "zh_CN" / "LC_MESSAGES" / "chx.po"
    po.write_text(po.read_text(encoding="utf-8") + '\nmsgid "unterminated\n', encoding="utf-8")
    path = _submission(tmp_path)
    assert rubric.add_rubric_cells(path, source) == 1
    assert "**1.5 / 1.5** for the cause" in _feedback_of(path, monkeypatch)
    cell = next(c for c in nbformat.read(path, as_version=4).cells if rubric.is_rubric_cell(c))
    assert "no catalogue locale/zh_CN/LC_MESSAGES/chx.po that can be read" in cell.source
