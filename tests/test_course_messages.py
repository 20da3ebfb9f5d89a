"""The learner-facing messages of course_utils in the learner's language (course_utils/messages.py).

Every ``tr`` message of the package is in the catalogue, every entry is translated with its
placeholders and the glossary's terms, the compiled ``.mo`` is its ``.po``, the English is unchanged
while ``COURSE_LANG`` is unset, and a failing check, ``make grade``'s table, the grader's notes and the
feedback page's words read in Chinese under ``COURSE_LANG=zh_CN``; ``make lab LANG=zh_CN`` passes the
language to the kernels, the grader's sandbox passes it on, and the Chinese release has nbgrader's
stubs in Chinese.
"""

from __future__ import annotations

import ast
import collections
import fnmatch
import re
import shutil
import string
import subprocess
import tomllib
import unicodedata
from pathlib import Path

import nbformat
import pytest
import torch
from babel.messages.pofile import read_po

from course_grading import feedback, sandbox
from course_grading.execution import SandboxedExecute
from course_grading.results import CellGrade, NotebookGrades
from course_utils import checks, messages, stored_run, workspace
from course_utils.i18n import terms

ROOT = Path(__file__).resolve().parent.parent
PO = messages.po_path("zh_CN")
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture
def english(monkeypatch):
    monkeypatch.delenv(messages.ENV, raising=False)


@pytest.fixture
def chinese(monkeypatch):
    monkeypatch.setenv(messages.ENV, "zh_CN")


def _entries() -> dict[str, str]:
    with PO.open("rb") as f:
        return {m.id: m.string for m in read_po(f) if m.id}


def _labels(tree: ast.Module) -> list[str]:
    """A module's ``LABELS`` tuple of strings (course_utils/diagrams.py): messages it looks up by value."""
    return [e.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Tuple)
            and any(isinstance(t, ast.Name) and t.id == "LABELS" for t in n.targets)
            for e in n.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def source_messages() -> dict[str, str]:
    """``{message: where}`` of every ``tr(...)`` call of the package and of the grader (its own package,
    grader/course_grading/, whose messages are course_utils' catalogue's too): a string literal, or a
    module constant (``tr(TO_BE_MARKED)``); and every string of a module's ``LABELS``, whose
    ``tr(label)`` looks them up by value. Any other argument is reported as ``where`` with no message."""
    found: dict[str, str] = {}
    for path in [*sorted((ROOT / "course_utils").rglob("*.py")), *sorted((ROOT / "grader").rglob("*.py"))]:
        tree = ast.parse(path.read_text())
        labels = _labels(tree)
        for label in labels:
            found.setdefault(label, f"{path.relative_to(ROOT)} (LABELS)")
        constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                     and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                     for t in n.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            func = getattr(node, "func", None)
            if not isinstance(node, ast.Call) or getattr(func, "id", getattr(func, "attr", None)) != "tr":
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.setdefault(arg.value, where)
            elif isinstance(arg, ast.Name) and arg.id in constants:
                found.setdefault(constants[arg.id], where)
            elif not labels:
                found[f"<not a literal at {where}>"] = where
    return found


def _without_fields(text: str) -> str:
    return "".join(literal for literal, _, _, _ in string.Formatter().parse(text))


def _fields(text: str) -> collections.Counter:
    return collections.Counter(name for _, name, _, _ in string.Formatter().parse(text) if name is not None)


def test_every_message_of_the_package_is_in_the_catalogue_and_no_other():
    used, entries = source_messages(), _entries()
    missing = {m: w for m, w in used.items() if m not in entries}
    assert not missing, f"tr() messages not in {PO.relative_to(ROOT)} (add them, docs/translating.md): {missing}"
    stale = sorted(set(entries) - set(used))
    assert not stale, f"entries of {PO.name} that no tr() call uses any more (remove them): {stale}"
    assert len(used) >= 60


def test_every_entry_is_translated_and_keeps_its_placeholders():
    with PO.open("rb") as f:
        catalog = read_po(f)
    bad = []
    for m in catalog:
        if not m.id:
            continue
        if not m.string or m.fuzzy:
            bad.append(f"{m.id!r}: not translated" + (" (fuzzy)" if m.fuzzy else ""))
        elif _fields(m.id) != _fields(m.string):
            bad.append(f"{m.id!r}: placeholders {dict(_fields(m.id))} became {dict(_fields(m.string))}")
        elif re.search("[A-Za-z]", _without_fields(m.id)) and not CJK.search(m.string):
            bad.append(f"{m.id!r}: the translation has no Chinese")
    assert not bad, "\n".join(bad)


def test_the_translations_use_the_glossary_terms():
    bad = []
    for english, chinese in _entries().items():
        bad += [f"{english!r} lacks {t}" for t in terms.missing_terms(english, chinese)]
        bad += [f"{english!r} says {v} for {t}" for t, v in terms.variant_faults(english, chinese)]
    assert not bad, "\n".join(bad)
    with messages.speaking("zh_CN"):
        assert messages.tr("check {i}/{n} ({desc}): {reason}").startswith("检查 ")


def test_a_lost_placeholder_is_found():
    assert _fields("{what}: got {got}") != _fields("{what}：得到")
    assert _fields("{a} {b}") == _fields("{b}，{a}")


def test_the_compiled_catalogue_is_the_po(tmp_path):
    mo = PO.with_suffix(".mo")
    assert mo.exists(), f"{mo.relative_to(ROOT)} is missing: run {messages.COMPILE}"
    stale = messages.out_of_date(PO, mo)
    assert not stale, f"{mo.name} differs from {PO.name} in {stale[:3]}: run {messages.COMPILE}"
    # a stale .mo is seen: the .po changed after compiling
    po, old = tmp_path / "course_utils.po", tmp_path / "course_utils.mo"
    shutil.copy(PO, po)
    messages.compile_catalogue(po, old)
    assert messages.out_of_date(po, old) == []
    po.write_text(po.read_text(encoding="utf-8").replace('msgstr "它的值变了"', 'msgstr "它的值改变了"'),
                  encoding="utf-8")
    assert messages.out_of_date(po, old) == ["its values changed"]
    assert messages.out_of_date(po, tmp_path / "missing.mo")


def test_the_catalogue_is_package_data():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["course_utils"]
    for path in (PO, PO.with_suffix(".mo")):
        rel = path.relative_to(ROOT / "course_utils").as_posix()
        assert any(fnmatch.fnmatch(rel, pattern) for pattern in data), f"pyproject's package-data lacks {rel}"
    assert messages.languages() == ["zh_CN"]


def _failing_report() -> str:
    with pytest.raises(checks.CheckFailed) as info:
        checks.run_checks("ex1_scores", [
            ("shape", lambda: checks.expect_shape(torch.ones(2, 3), (2, 4), "scores")),
            ("values", lambda: checks.expect_close(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 3.0]), "scores")),
            ("fine", lambda: None)])
    return str(info.value)


@pytest.mark.parametrize("value", [None, "", "en", "en_US.UTF-8", "xx_YY"])
def test_english_is_unchanged_without_a_chinese_course_lang(monkeypatch, capsys, value):
    if value is None:
        monkeypatch.delenv(messages.ENV, raising=False)
    else:
        monkeypatch.setenv(messages.ENV, value)
    assert _failing_report() == (
        "ex1_scores: 2 of 3 checks failed\n"
        "  \u2717 check 1/3 (shape): scores: expected shape (2, 4), got (2, 3)\n"
        "  \u2717 check 2/3 (values): scores: wrong value at index (1,): got 2, expected 3 (1 of 2 values differ)")
    checks.run_checks("ex2", [("a", lambda: None)])
    assert capsys.readouterr().out == "\u2713 ex2: all 1 checks passed\n"
    assert messages.tr("{x}") == "{x}" and messages.tr("a {x} b", x=1) == "a 1 b"


def test_a_failing_check_reads_in_chinese(chinese, capsys):
    report = _failing_report()
    print(report)
    assert report == (
        "ex1_scores：3 项检查中有 2 项未通过\n"
        "  \u2717 检查 1/3（shape）：scores：形状应为 (2, 4)，得到的是 (2, 3)\n"
        "  \u2717 检查 2/3（values）：scores：索引 (1,) 处的值不对：得到 2，应为 3（2 个值中有 1 个不同）")
    checks.run_checks("ex2", [("a", lambda: None)])
    assert capsys.readouterr().out.endswith("\u2713 ex2：全部 1 项检查通过\n")


def test_not_implemented_in_place_and_view_read_in_chinese(chinese):
    def todo(x):
        raise NotImplementedError()

    def scale_(x):
        return x.mul_(2)

    def ex_view(x):
        return x.view(-1)

    with pytest.raises(checks.NotImplementedYet, match="todo 还没有实现：把 `raise NotImplementedError\\(\\)` 换成你的代码"):
        checks.call(todo, torch.ones(2))
    with pytest.raises(checks.CheckFailed, match="scale_ 原地修改了它的输入 `x`（它的值变了）"):
        checks.call(scale_, torch.ones(2))
    with messages.speaking("en"):
        with pytest.raises(checks.CheckFailed, match="scale_ changed its input `x` in place"):
            checks.call(scale_, torch.ones(2))
    with pytest.raises(checks.CheckFailed, match="ex_view：todo 还没有实现"):
        checks.run_checks("ex_view", [("a", lambda: checks.call(todo, torch.ones(1)))])


def _columns(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _grades() -> NotebookGrades:
    return NotebookGrades(cells=[
        CellGrade("ex1_scores-visible", 1, 1, False), CellGrade("ex1_scores-hidden", 1, 1, False),
        CellGrade("ex2_softmax-visible", 0, 1, False, "CheckFailed: ex2_softmax：3 项检查中有 1 项未通过"),
        CellGrade("q1_scale", 0, 2, True)], faults=["ran out of memory"])


def test_the_grade_table_reads_in_chinese_and_lines_up(chinese):
    table = _grades().table()
    print(table)
    lines = table.splitlines()
    assert lines[0].split() == ["练习", "得分", "状态"]
    assert "人工评分" in table and "通过" in table and "合计（自动评分）" in table and "问题：ran out of memory" in table
    assert lines[1] == "-" * _columns(lines[0])
    score_end = {_columns(ln[:ln.index(" / ") + 4]) for ln in lines if " / " in ln}
    assert len(score_end) == 1, f"the score column does not line up:\n{table}"


def test_the_grade_table_is_english_without_course_lang(english):
    grades = _grades()
    grades.cells[2].error = "CheckFailed: ex2_softmax: 1 of 3 checks failed"
    table = grades.table()
    assert table.splitlines()[0].split() == ["exercise", "score", "status"]
    assert "graded by hand" in table and "total (autograded)" in table and not CJK.search(table)


def test_the_feedback_page_words_read_in_chinese(english):
    page = ('<a href="#q1">Written response</a> (Score: 0.0 / 2.0) <a name="q1"></a><span class="pull-right">'
            'Score: 0.0 / 2.0</span> <a href="#ex1-hidden">Test cell</a> <a href="#ex2">Test cell</a>')
    zh = feedback.name_exercises(feedback.mark_pending(page, {"q1": 2.0}, "zh_CN"))
    assert "（待教师评分；2 分）" in zh and "待教师评分（2 分）" in zh
    assert "to be marked" in feedback.mark_pending(page, {"q1": 2.0})
    with messages.speaking("zh_CN"):
        named = feedback.name_exercises(page)
        assert feedback.scrub("secret line here\n", ["secret line here"]) == "[隐藏测试的一行，已删去]\n"
    assert ">ex1：隐藏测试<" in named and ">ex2：测试单元格<" in named and "(得分：0.0 / 2.0)" in named
    english = feedback.name_exercises(page)
    assert ">ex1: hidden tests<" in english and ">ex2: test cell<" in english and "(Score: 0.0 / 2.0)" in english
    nb = nbformat.v4.new_notebook(metadata={"course": {"language": "zh_CN"}, "course_grading": {
        "faults": [], "tampering": {"ex1-visible": ["x"]}}})
    note = feedback.FaultNote().preprocess(nb, {})[0].cells[0].source
    assert note.startswith("**评分说明。** ex1：笔记本改动了测试所依赖的内容"), note


def _note(ename: str, records: list, reference: list, answer: str = "return 1") -> str:
    ex = SandboxedExecute()
    ex.nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(answer, metadata={"nbgrader": {"solution": True, "grade_id": "ex1"}}),
        nbformat.v4.new_code_cell("", metadata={"nbgrader": {"grade": True, "grade_id": "ex1-hidden"}})])
    ex._records = {(0, 1): records}
    return ex._failure_note(1, reference, [{"ename": ename}], {})


def test_the_graders_notes_read_in_chinese(chinese):
    ref = [{"kind": "equal", "what": "a", "fixed": True, "expected": 1},
           {"kind": "equal", "what": "b", "fixed": True, "expected": 2}]
    assert _note("NotImplementedYet", [], ref).startswith("尚未作答：")
    assert _note("ValueError", [], ref).startswith("你的代码让这个测试在其 2 项检查中的第 0 项之后停了下来（ValueError）。隐藏测试")
    with messages.speaking("en"):
        assert _note("ValueError", [], ref).startswith("your code stopped this test after 0 of its 2 checks (ValueError).")
        assert _note("ValueError", [], ref, "raise NotImplementedError()").startswith("not answered yet")


def test_the_language_of_a_notebook():
    zh = {"metadata": {"course": {"language": "zh_CN"}}}
    assert messages.notebook_language(zh) == "zh_CN"
    assert messages.notebook_language({"metadata": {}}) is None
    assert messages.notebook_language({"metadata": {"course": {"language": "../../etc"}}}) is None
    assert messages.notebook_language({"metadata": {"course": {"language": "fr_FR"}}}) is None   # no catalogue
    assert messages.notebook_language(None, Path("/x/notebooks-zh_CN/ch01/ch01.ipynb")) == "zh_CN"
    assert messages.notebook_language(None, Path("/x/workspace-zh_CN/ch01/ch01.ipynb")) == "zh_CN"
    assert messages.notebook_language({"metadata": {}}, Path("/x/notebooks/ch01/ch01.ipynb")) is None
    committed = nbformat.read(next((ROOT / "notebooks-zh_CN").glob("ch01*/*.ipynb")), as_version=4)
    assert messages.notebook_language(committed) == "zh_CN"


def test_speaking_overrides_the_environment(chinese):
    assert messages.language() == "zh_CN"
    with messages.speaking("en"):
        assert messages.language() is None
        with messages.speaking(None):   # None: as it was
            assert messages.language() is None
    with messages.speaking(None):
        assert messages.language() == "zh_CN"


def test_make_lab_passes_course_lang_to_the_kernels():
    def lab(*args):
        out = subprocess.run(["make", "-n", "lab", *args], cwd=ROOT, capture_output=True, text=True,
                             env={"PATH": "/usr/bin:/bin"}, check=True).stdout
        return next(ln for ln in out.splitlines() if "jupyter lab" in ln)
    assert "COURSE_LANG=zh_CN JUPYTER_CONFIG_PATH=" in lab("LANG=zh_CN")
    assert "COURSE_LANG" not in lab()


def test_the_sandbox_passes_course_lang_and_nothing_else_new():
    tree = ast.parse(Path(sandbox.__file__).read_text())
    kept = [node for node in ast.walk(tree) if isinstance(node, ast.Tuple)
            and any(getattr(e, "value", None) == "COURSE_GRADING_RECORDS" for e in node.elts)]
    assert len(kept) == 1
    assert [e.value for e in kept[0].elts] == ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED",
                                               "NBGRADER_EXECUTION", "LANG", "COURSE_DEVICE",
                                               "COURSE_GRADING_RECORDS", "COURSE_LANG"]


def test_the_chinese_release_has_nbgraders_stubs_in_chinese():
    zh, en = stored_run.stubs("zh_CN"), stored_run.stubs()
    assert en["code_stub"]["python"] == "# YOUR CODE HERE\nraise NotImplementedError()"
    assert en["text_stub"] == "YOUR ANSWER HERE"
    assert zh["code_stub"]["python"] == "# 在此编写你的代码\nraise NotImplementedError()"
    assert zh["text_stub"] == "在此写下你的回答"
    assert zh["code_stub"]["R"] == en["code_stub"]["R"]
    text = "".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "notebooks-zh_CN").glob("ch*/*.ipynb")))
    assert "YOUR CODE HERE" not in text and "YOUR ANSWER HERE" not in text, "run make release LANG=zh_CN"
    assert "# 在此编写你的代码" in text and "在此写下你的回答" in text
    # the workspace still sees an unanswered written answer in either language
    assert workspace._is_stub(nbformat.v4.new_markdown_cell("在此写下你的回答"))
    assert workspace._is_stub(nbformat.v4.new_markdown_cell("YOUR ANSWER HERE"))
    assert workspace._is_stub(nbformat.v4.new_code_cell(zh["code_stub"]["python"]))


def test_the_grader_reads_a_chinese_submission_in_its_language(tmp_path):
    """intake (make grade, make autograde) carries the submission's language into the notebook it grades
    (the kernel's COURSE_LANG and the grader's words follow it), and gives an unanswered Chinese written
    answer the release's placeholder back, so that nbgrader sees no response (0, nothing to mark by hand)."""
    from nbgrader import utils

    from course_grading.intake import intake

    chapter = "ch01_seq2seq_rnn"
    en, zh = (ROOT / d / chapter / f"{chapter}.ipynb" for d in ("notebooks", "notebooks-zh_CN"))
    dest = tmp_path / "graded.ipynb"
    intake(zh, chapter, en, dest, ROOT)
    nb = nbformat.read(dest, as_version=4)
    assert messages.notebook_language(nb) == "zh_CN"
    written = [c for c in nb.cells if c.cell_type == "markdown" and c.metadata.get("nbgrader", {}).get("solution")]
    assert written and all(c.source == "YOUR ANSWER HERE" for c in written)
    assert all(utils.compute_checksum(c) == c.metadata["nbgrader"]["checksum"] for c in written)
    intake(en, chapter, en, dest, ROOT)
    assert messages.notebook_language(nbformat.read(dest, as_version=4)) is None
