"""The grading pipeline, chapter by chapter, in a throwaway course with a fresh gradebook.

For every chapter three notebooks are submitted and autograded by the real grader (nbgrader in the
sandbox, records and reference run included):

* ``ci-correct``: the instructor's notebook, stored outputs and all (as a learner saves it), with
  every exercise answered by its first correct alternative of ``tests/correct_answers/<chapter>.py``
  (Hugging Face's way, another loop, another dtype rule) -> full autograded marks, no errors;
* ``ci-blank``: the student release as handed out -> 0 points, and every error it raises is
  inside a graded test cell (the chapter's experiments still run on the references);
* ``ci-zh-tampered``: the Chinese release (notebooks-zh_CN) with wrong answers
  (``tests/wrong_answers/<chapter>.py``: ``SOURCE`` for ``EXERCISE``, wrong in its visible tests, and
  for every other exercise its ``HIDDEN_ONLY`` answer, right in the visible tests and wrong in the
  hidden ones) and every test cell replaced by ``pass`` -> each graded cell scores what the answers
  alone decide: ``EXERCISE``'s cells 0, each other exercise's hidden cell 0, every other cell in full.
  The grader puts the original tests back, and the translation changes prose, never what is graded:
  either fault would move a cell away from that score, which is derived from the solution's points
  alone, so no English copy of this submission is needed to compare with.

All of them are graded in one nbgrader run (hostile submissions: ``test_grading_hostile.py``). Every
other answer of ``tests/correct_answers`` and ``tests/wrong_answers`` (``MORE_WRONG``, ``REVIEWED``, the
rest) is graded in-process by ``tests/test_answers.py`` with the same visible and hidden tests, in a
fraction of the time: the real grader's runs here show that it scores as those in-process runs do.

It also checks that the committed releases equal fresh ones and that feedback never shows hidden tests.
"""

from __future__ import annotations

import html
import importlib.util
import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest

import course_grading as grading
from course_grading import feedback

CHAPTERS = grading.chapters(Path(__file__).resolve().parent.parent)
WRONG = Path(__file__).parent / "wrong_answers"
REPO = Path(__file__).resolve().parent.parent


def _wrong_module(chapter: str):
    path = WRONG / f"{chapter}.py"
    if not path.exists():
        pytest.fail(f"{chapter} needs tests/wrong_answers/{chapter}.py (EXERCISE and SOURCE)")
    spec = importlib.util.spec_from_file_location(f"wrong_{chapter}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _wrong_answer(chapter: str) -> tuple[str, str]:
    mod = _wrong_module(chapter)
    return mod.EXERCISE, mod.SOURCE


def _hidden_only(chapter: str) -> dict[str, str] | None:
    """``HIDDEN_ONLY`` of the chapter's wrong answers, or None where it is not defined yet."""
    return getattr(_wrong_module(chapter), "HIDDEN_ONLY", None)


def _correct_set(chapter: str) -> dict[str, str]:
    """``{exercise: source}``: the first correct alternative of every exercise."""
    path = REPO / "tests" / "correct_answers" / f"{chapter}.py"
    if not path.exists():
        return {}
    spec = importlib.util.spec_from_file_location(f"correct_{chapter}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {ex: next(iter(by_name.values())) for ex, by_name in mod.CORRECT.items() if by_name}


def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


@pytest.fixture(scope="module", params=CHAPTERS)
def graded(request, tmp_path_factory):
    chapter = request.param
    tmp = tmp_path_factory.mktemp(chapter)
    src = grading.chapter_notebook(chapter, REPO)
    exercise, wrong_source = _wrong_answer(chapter)
    course = grading.new_course([chapter], REPO)
    release = course / "notebooks" / chapter / src.name
    hidden_only = _hidden_only(chapter) or {}
    # One wrong submission holds every kind of wrong answer: SOURCE where the visible tests catch it,
    # HIDDEN_ONLY answers (caught by the hidden tests alone) in every other exercise.
    wrong = {**hidden_only, exercise: wrong_source}
    correct = _correct_set(chapter)
    subs = {
        "ci-correct": _answered(src, src, correct, tmp / "correct.ipynb", keep_outputs=True),
        "ci-blank": release,
    }
    zh_course = grading.new_course([chapter], REPO, lang="zh_CN")
    subs["ci-zh-tampered"] = _answered(zh_course / "notebooks" / chapter / src.name, src, wrong, tmp / "zh_tampered.ipynb",
                                       tamper=True)
    results = grading.autograde_in(course, chapter, subs, feedback=True)
    yield {"chapter": chapter, "course": course, "src": src, "exercise": exercise, "results": results, "subs": subs,
           "hidden_only": {ex: a for ex, a in hidden_only.items() if ex != exercise}, "correct": correct,
           "zh_course": zh_course}
    shutil.rmtree(course, ignore_errors=True)
    shutil.rmtree(zh_course, ignore_errors=True)


def _tamper(nb) -> None:
    """Replace every graded cell of ``nb`` by ``pass`` (what a learner who edits the tests away sends)."""
    for cell in nb.cells:
        if _meta(cell).get("grade"):
            cell.source = "pass"


def _answered(release: Path, solution: Path, override: dict[str, str], dest: Path, tamper: bool = False,
              keep_outputs: bool = False) -> Path:
    """The ``release`` notebook (in any language, or the solution itself) with every answer cell, code
    and written, taken from ``solution`` by grade id, and ``override``'s answers instead where given: a
    learner's submission (``tamper``: with its test cells replaced, :func:`_tamper`; its stored outputs
    cleared unless ``keep_outputs``)."""
    nb = nbformat.read(release, as_version=4)
    answers = {_meta(c)["grade_id"]: c.source for c in nbformat.read(solution, as_version=4).cells
               if _meta(c).get("solution")}
    unknown = set(override) - set(answers)
    assert not unknown, f"no answer cell with grade_id {sorted(unknown)} in {solution}"
    answers.update(override)
    for cell in nb.cells:
        if _meta(cell).get("solution"):
            cell.source = answers[_meta(cell)["grade_id"]]
        if cell.cell_type == "code" and not keep_outputs:
            cell.outputs, cell.execution_count = [], None
    if tamper:
        _tamper(nb)
    nbformat.write(nb, dest)
    return dest


def _normalise(path: Path) -> dict:
    nb = json.loads(path.read_text())
    nb.get("metadata", {}).pop("widgets", None)
    return nb


def test_release_is_in_sync(graded):
    ch, src = graded["chapter"], graded["src"]
    fresh = graded["course"] / "notebooks" / ch / src.name
    committed = REPO / "notebooks" / ch / src.name
    assert committed.exists(), f"notebooks/{ch}/{src.name} is missing: run `make release`"
    assert _normalise(committed) == _normalise(fresh), (
        f"notebooks/{ch} differs from a fresh release of solutions/{ch}: run `make release`")


def test_chinese_release_is_in_sync(graded):
    """notebooks-zh_CN/ equals a fresh Chinese release (make release LANG=zh_CN) of the same sources."""
    ch, src = graded["chapter"], graded["src"]
    committed = REPO / "notebooks-zh_CN" / ch / src.name
    assert committed.exists(), f"notebooks-zh_CN/{ch}/{src.name} is missing: run `make release LANG=zh_CN`"
    fresh = graded["zh_course"] / "notebooks" / ch / src.name
    assert _normalise(committed) == _normalise(fresh), (
        f"notebooks-zh_CN/{ch} differs from a fresh Chinese release of solutions/{ch} and "
        f"locale/zh_CN/LC_MESSAGES/{ch}.po: run `make release LANG=zh_CN`")
    text = committed.read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS"):
        assert marker not in text


def test_wrong_answers_lose_exactly_their_points_in_a_tampered_chinese_notebook(graded):
    """``ci-zh-tampered``: ``EXERCISE`` loses all its points, each HIDDEN_ONLY exercise exactly its hidden
    points (below), every other cell keeps its full marks, although every test cell was sent as ``pass``
    and the prose is Chinese; and no error outside the test cells."""
    ex, hidden_only = graded["exercise"], graded["hidden_only"]
    full, res = graded["results"]["ci-correct"], graded["results"]["ci-zh-tampered"]
    sub = nbformat.read(graded["subs"]["ci-zh-tampered"], as_version=4)
    assert all(c.source == "pass" for c in sub.cells if _meta(c).get("grade") and not _meta(c).get("solution"))
    lost = {f"{h}-hidden" for h in hidden_only}
    expected = {c.grade_id: (0 if c.exercise == ex or c.grade_id in lost else c.max_score, c.max_score)
                for c in full.cells if not c.manual}
    assert sum(m for s, m in expected.values() if s == 0 and m > 0) > 0
    got = {c.grade_id: (c.score, c.max_score) for c in res.cells if not c.manual}
    assert got == expected, res.table()
    assert res.auto_max == full.auto_max > res.auto_score
    assert not res.errors, f"wrong answers raise errors outside the test cells: {res.errors}"


def test_release_has_no_solutions_or_hidden_tests(graded):
    ch, src = graded["chapter"], graded["src"]
    text = (REPO / "notebooks" / ch / src.name).read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS"):
        assert marker not in text


def test_fresh_release_holds_the_notebook_only(graded):
    # nbgrader copies every file of solutions/<chapter>/ unless nbgrader_config.py ignores it: the
    # chapter's text source (the solutions and hidden tests in plain text) must never be released.
    ch, src = graded["chapter"], graded["src"]
    assert src.with_suffix(".py").exists(), f"solutions/{ch} has no text source to keep out of the release"
    fresh = sorted(p.name for p in (graded["course"] / "notebooks" / ch).iterdir())
    assert fresh == [src.name], f"a fresh release of {ch} holds {fresh}, not only {src.name}"


def test_correct_answers_score_full_marks(graded):
    """``ci-correct``: every exercise answered by its first correct alternative -> every autograded
    point, and no error anywhere in the notebook."""
    assert graded["correct"], f"tests/correct_answers/{graded['chapter']}.py is missing"
    res = graded["results"]["ci-correct"]
    assert res.auto_max > 0
    lost = [(c.grade_id, c.error) for c in res.cells if not c.manual and c.score < c.max_score]
    assert not lost, f"the first correct alternatives ({sorted(graded['correct'])}) lose points: {lost}"
    assert not res.errors, f"a correct notebook raises errors: {res.errors}"


def test_blank_release_scores_zero_and_still_runs(graded):
    res = graded["results"]["ci-blank"]
    assert res.auto_score == 0, res.table()
    assert not res.errors, ("the blank release raises errors outside test cells (a learner who "
                            f"skips an exercise must still be able to run the chapter): {res.errors}")
    for cell in res.cells:
        if cell.error:
            assert not re.match(r"(ModuleNotFoundError|ImportError|SyntaxError|FileNotFoundError)", cell.error), cell.error


def test_every_exercise_has_visible_and_hidden_tests(graded):
    res = graded["results"]["ci-correct"]
    auto = {c.grade_id for c in res.cells if not c.manual}
    exercises = {grading.exercise_of(g) for g in auto}
    assert len(exercises) >= 5, f"{graded['chapter']} has only {len(exercises)} autograded exercises"
    for ex in exercises:
        assert {f"{ex}-visible", f"{ex}-hidden"} <= auto, f"{ex} needs a -visible and a -hidden test cell"
    assert any(c.manual for c in res.cells), "each chapter has at least one written question"


def test_feedback_never_shows_hidden_tests(graded):
    hidden = feedback.hidden_lines(nbformat.read(graded["src"], as_version=4), feedback.DISTINCTIVE_CHARS)
    assert hidden, "no hidden tests found"
    for student in ("ci-zh-tampered", "ci-blank"):
        fb = graded["results"][student].feedback
        assert fb is not None and fb.exists(), f"no feedback for {student}"
        # Strip tags: syntax highlighting splits code into <span>s.
        text = html.unescape(re.sub(r"<[^>]+>", "", fb.read_text()))
        # A line the learner has in their own notebook is no secret: the visible tests' lines (a hidden
        # test may repeat one) and the learner's own code (a hidden reference may be written as the
        # solution is, and this submission holds the solution of the other exercises).
        release = graded["course"] / "notebooks" / graded["chapter"] / graded["src"].name
        own = "\n".join([c.source for c in nbformat.read(release, as_version=4).cells]
                        + [c.source for c in nbformat.read(graded["subs"][student], as_version=4).cells
                           if not _meta(c).get("grade") or _meta(c).get("solution")])
        leaked = [ln for ln in hidden if ln in text and ln not in own]
        assert not leaked, f"feedback for {student} shows hidden tests: {leaked[:3]}"


CJK = re.compile(r"[\u4e00-\u9fff]")


def test_a_chinese_submission_gets_the_checks_and_the_graders_words_in_chinese(graded):
    """``ci-zh-tampered`` (the Chinese release: its metadata says zh_CN) is graded in Chinese: the kernel
    gets COURSE_LANG=zh_CN through the sandbox (its failing visible check reads in Chinese), the grader's
    notes and the feedback page's contents list too; ``ci-blank`` (the English release) stays English."""
    ex = graded["exercise"]
    zh, blank = graded["results"]["ci-zh-tampered"], graded["results"]["ci-blank"]
    errors = [c.error for c in zh.cells if c.exercise == ex and c.error]
    assert errors and all(CJK.search(e) for e in errors), errors
    assert any("检查" in e for e in errors), errors
    page = zh.feedback.read_text(encoding="utf-8")
    assert f"{ex}：隐藏测试" in page or f"{ex}：可见测试" in page
    english = [c.error for c in blank.cells if c.error]
    assert english and not any(CJK.search(e) for e in english), english
    assert "not implemented yet" in " ".join(english) or "not answered yet" in " ".join(english)
    assert "隐藏测试" not in blank.feedback.read_text(encoding="utf-8")


def test_hidden_only_answers_pass_visible_and_fail_hidden(graded):
    hidden_only = graded["hidden_only"]
    assert hidden_only, f"tests/wrong_answers/{graded['chapter']}.py defines no HIDDEN_ONLY"
    res = graded["results"]["ci-zh-tampered"]
    cells = {c.grade_id: c for c in res.cells}
    for ex in hidden_only:
        visible, hidden = cells[f"{ex}-visible"], cells[f"{ex}-hidden"]
        assert visible.score == visible.max_score, (
            f"{ex}: the HIDDEN_ONLY answer must pass the visible tests, but: {visible.error}")
        assert hidden.score == 0, f"{ex}: the HIDDEN_ONLY answer passes the hidden tests too"
    others = [c for c in res.cells if not c.manual and c.exercise not in {*hidden_only, graded["exercise"]}]
    assert all(c.score == c.max_score for c in others), res.table()


def _answer_cells(chapter: str) -> set[str]:
    nb = nbformat.read(grading.chapter_notebook(chapter, REPO), as_version=4)
    return {_meta(c)["grade_id"] for c in nb.cells
            if _meta(c).get("solution") and not _meta(c).get("grade") and _meta(c).get("grade_id")}


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_hidden_only_covers_every_exercise(chapter):
    hidden_only = _hidden_only(chapter)
    exercises = _answer_cells(chapter)
    assert hidden_only is not None, f"tests/wrong_answers/{chapter}.py needs HIDDEN_ONLY"
    missing = sorted(exercises - set(hidden_only))
    unknown = sorted(set(hidden_only) - exercises)
    assert not unknown, f"HIDDEN_ONLY names exercises {chapter} does not have: {unknown}"
    assert not missing, f"HIDDEN_ONLY of {chapter} lacks a wrong answer for {missing}"
