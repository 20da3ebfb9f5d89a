"""Hostile and broken submissions, graded as an instructor would, with short limits.

One ``instructor_autograde`` run in a throwaway course grades a class built from chapter 3's
solution (the chapter that grades fastest; experiment cells are dropped, which a learner may
do): a notebook that hangs, one that exhausts its memory, one that kills its kernel, a fork
bomb, a vandal that tries to write the course and reach the network, a file that is not
JSON, one that lost or retyped its graded cells, another chapter's notebook, three kinds of
tampering with what the tests rely on, a folder that is not a chapter, and after all of them
an ordinary submission with one exercise wrong. Each gets its expected score and reason; the
course's files are unchanged; the ordinary one gets the same score as it does alone.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

from course_utils import grading
from course_utils.grading import sandbox

CHAPTER = "ch03_scaled_dot_product"
REPO = Path(__file__).resolve().parent.parent
LIMITS = sandbox.Limits(notebook_s=120, cell_s=20, memory_mb=2048, processes=64, children=8)
pytestmark = [
    pytest.mark.skipif(CHAPTER not in grading.chapters(REPO), reason=f"needs {CHAPTER}"),
    pytest.mark.skipif(not sandbox.isolation().sandboxed, reason="the hostile suite needs the real sandbox: "
                       + "; ".join(sandbox.isolation().warnings)),
]


def _wrong_answer() -> tuple[str, str]:
    spec = importlib.util.spec_from_file_location("wrong", REPO / "tests" / "wrong_answers" / f"{CHAPTER}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.EXERCISE, mod.SOURCE


def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _lean(nb_path: Path):
    """The notebook with its first (setup) cell and its graded cells only, outputs cleared."""
    nb = nbformat.read(nb_path, as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells = [c for i, c in enumerate(nb.cells) if i == first or _meta(c).get("grade_id")]
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    return nb


def _index(nb, grade_id: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if _meta(c).get("grade_id") == grade_id)


def _after(nb, grade_id: str, source: str):
    nb.cells.insert(_index(nb, grade_id) + 1, nbformat.v4.new_code_cell(source))
    return nb


def _answer(nb, exercise: str, source: str):
    nb.cells[_index(nb, exercise)].source = source
    return nb


def _exercises(solution) -> list[str]:
    return [_meta(c)["grade_id"] for c in solution.cells if _meta(c).get("solution") and _meta(c).get("grade_id")
            and not _meta(c).get("grade")]


HANG = "while True:\n    pass\n"
MEMORY = "hog = []\nwhile True:\n    hog.append(bytearray(64 * 2**20))\n"
DEAD = "import os\nos._exit(1)\n"
FORK = """import os, time
for _ in range(10_000):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(3600)
        os._exit(0)
"""
VANDAL = """import pathlib, shutil, socket
report = []
for target in {targets!r}:
    p = pathlib.Path(target)
    try:
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.write_text("raise SystemExit('vandalised')")
        report.append("WROTE " + target)
    except OSError as e:
        report.append("REFUSED " + type(e).__name__)
try:
    socket.create_connection(("1.1.1.1", 53), timeout=3)
    report.append("NETWORK open")
except OSError as e:
    report.append("NETWORK closed")
print("\\n".join(report))
"""
TAMPER_CHECKS = """from course_utils import checks
for _name in dir(checks):
    if not _name.startswith("_") and callable(getattr(checks, _name)):
        setattr(checks, _name, lambda *a, **k: None)
"""
TAMPER_TORCH = """import builtins, torch
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
builtins.all = lambda *a: True
"""
TAMPER_IPYTHON = """import types
ip = get_ipython()
ip.set_custom_exc((BaseException,), lambda *a, **k: None)
ip.input_transformers_post.append(lambda lines: [])
checks = types.SimpleNamespace()
"""


def _fingerprint_repo() -> dict[str, str]:
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return {f: hashlib.sha256((REPO / f).read_bytes()).hexdigest() for f in files if (REPO / f).is_file()}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, request):
    mp = pytest.MonkeyPatch()
    request.addfinalizer(mp.undo)
    for k, v in LIMITS.to_env().items():
        mp.setenv(k, v)
    # A foreign kernelspec named python3 must not be used for grading.
    fake = tmp_path_factory.mktemp("kernels")
    (fake / "kernels" / "python3").mkdir(parents=True)
    (fake / "kernels" / "python3" / "kernel.json").write_text(
        '{"argv": ["/bin/false", "{connection_file}"], "display_name": "not the course", "language": "python"}')
    mp.setenv("JUPYTER_PATH", str(fake))

    before = _fingerprint_repo()
    course = grading.new_course([CHAPTER], REPO)
    request.addfinalizer(lambda: shutil.rmtree(course, ignore_errors=True))
    src = grading.chapter_notebook(CHAPTER, course)
    release = course / "notebooks" / CHAPTER / src.name
    solution = _lean(src)
    blank = _lean(release)
    exercises = _exercises(solution)
    wrong_ex, wrong_src = _wrong_answer()
    other = next((ch for ch in grading.chapters(REPO) if ch != CHAPTER), None)
    release_before = release.read_bytes()

    def lean_solution():
        return _lean(src)

    subs = {
        "h-hang": _after(lean_solution(), f"{exercises[1]}-hidden", HANG),
        "h-memory": _after(lean_solution(), f"{exercises[1]}-hidden", MEMORY),
        "h-dead": _after(lean_solution(), f"{exercises[1]}-hidden", DEAD),
        "h-fork": _after(lean_solution(), f"{exercises[1]}-hidden", FORK),
        "h-vandal": _after(lean_solution(), f"{exercises[0]}-hidden", VANDAL.format(targets=[
            str(REPO / "course_utils" / "checks.py"), str(REPO / "solutions"), str(course / "gradebook.db"),
            str(course / "submitted")])),
        "h-tamper-checks": _answer(_lean(release), exercises[0], TAMPER_CHECKS),
        "h-tamper-torch": _answer(lean_solution(), wrong_ex, wrong_src + "\n" + TAMPER_TORCH),
        "h-tamper-ipython": _answer(_lean(release), exercises[0], TAMPER_IPYTHON),
        "zz-after": _answer(lean_solution(), wrong_ex, wrong_src),
    }
    lost = lean_solution()
    lost_ids = {f"{exercises[1]}-visible", f"{exercises[1]}-hidden", exercises[2]}
    lost.cells = [c for c in lost.cells if _meta(c).get("grade_id") not in lost_ids]
    for gid in (f"{exercises[0]}-hidden", exercises[3]):   # and two cells retyped to markdown
        cell = lost.cells[_index(lost, gid)]
        lost.cells[_index(lost, gid)] = nbformat.v4.new_markdown_cell(cell.source, metadata=cell.metadata)
    subs["h-lost"] = lost
    for student, nb in subs.items():
        d = course / "submitted" / student / CHAPTER
        d.mkdir(parents=True)
        nbformat.write(nb, d / src.name)
    (course / "submitted" / "h-invalid" / CHAPTER).mkdir(parents=True)
    (course / "submitted" / "h-invalid" / CHAPTER / src.name).write_text('{"cells": [{"cell_type": "code", "sour')
    if other:
        (course / "submitted" / "h-other-chapter" / CHAPTER).mkdir(parents=True)
        nbformat.write(_lean(grading.chapter_notebook(other, REPO)),
                       course / "submitted" / "h-other-chapter" / CHAPTER / f"{other}.ipynb")
    (course / "submitted" / "h-not-a-chapter" / "ch99_nothing").mkdir(parents=True)
    nbformat.write(solution, course / "submitted" / "h-not-a-chapter" / "ch99_nothing" / "x.ipynb")

    results = grading.instructor_autograde(root=course, force=False)
    yield {"course": course, "results": {s: r for (s, ch), r in results.items()}, "src": src,
           "exercises": exercises, "solution": solution, "wrong": wrong_ex, "before": before,
           "release": release, "release_before": release_before, "other": other}


def _points(h, exercises) -> float:
    return sum(c.max_score for c in h["results"]["zz-after"].cells if c.exercise in exercises and not c.manual)


def _full(h) -> float:
    return h["results"]["zz-after"].auto_max


def _earned_by(h, student) -> dict[str, float]:
    return {ex: s for ex, (s, m, manual, errs) in h["results"][student].by_exercise().items() if not manual}


def test_faults_stop_the_notebook_and_keep_what_it_earned(hostile):
    first_two = _points(hostile, hostile["exercises"][:2])
    for student, word in (("h-hang", "hung"), ("h-dead", "kernel died"), ("h-fork", "forked without end")):
        res = hostile["results"][student]
        assert res.auto_score == first_two, (student, res.table())
        assert word in res.reason, (student, res.reason)


def test_memory_exhaustion_is_reported(hostile):
    res = hostile["results"]["h-memory"]
    earned = _earned_by(hostile, "h-memory")
    assert all(earned[ex] == _points(hostile, [ex]) for ex in hostile["exercises"][:2]), res.table()
    assert "out of memory" in res.reason, res.reason


def test_vandal_cannot_write_the_course_or_reach_the_network(hostile):
    res = hostile["results"]["h-vandal"]
    assert res.auto_score == _full(hostile), res.table()
    nb = nbformat.read(hostile["course"] / "autograded" / "h-vandal" / CHAPTER / hostile["src"].name, 4)
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "NETWORK closed" in text and "WROTE" not in text and text.count("REFUSED") == 4, text
    assert _fingerprint_repo() == hostile["before"], "a submission changed the course's files"
    assert (hostile["course"] / "gradebook.db").stat().st_size > 0


def test_broken_notebooks_get_zero_and_a_reason(hostile):
    res = hostile["results"]["h-invalid"]
    assert res.auto_score == 0 and "not valid JSON" in res.reason, res.reason
    if hostile["other"]:
        res = hostile["results"]["h-other-chapter"]
        assert res.auto_score == 0 and f"notebook of {hostile['other']}" in res.reason, res.reason


def test_lost_and_retyped_cells_are_put_back(hostile):
    lost = hostile["results"]["h-lost"]
    ex = hostile["exercises"]
    assert lost.auto_score == _full(hostile) - _points(hostile, [ex[2]]), lost.table()
    assert "put back" in lost.reason and "type was changed" in lost.reason, lost.reason


def test_tampering_earns_nothing_and_is_flagged(hostile):
    for student in ("h-tamper-checks", "h-tamper-ipython"):   # blank releases that disable the tests
        res = hostile["results"][student]
        assert res.auto_score == 0, (student, res.table())
        assert res.tampering and "tampering detected" in res.reason, (student, res.reason)
    res = hostile["results"]["h-tamper-torch"]                # a wrong answer that fakes torch's checks
    assert res.auto_score == _full(hostile) - _points(hostile, [hostile["wrong"]]), res.table()
    assert any(g.startswith(hostile["wrong"]) for g in res.tampering), res.tampering
    assert "torch.allclose" in res.reason and "builtins.all" in res.reason


def test_a_submission_after_the_hostile_ones_is_graded_as_alone(hostile):
    res = hostile["results"]["zz-after"]
    assert not res.reason, res.reason
    assert res.auto_score == _full(hostile) - _points(hostile, [hostile["wrong"]]), res.table()
    assert res.auto_max == sum(c.metadata["nbgrader"]["points"] for c in hostile["solution"].cells
                               if _meta(c).get("grade") and c.cell_type == "code")


def test_every_student_has_a_row_feedback_and_the_release_is_untouched(hostile):
    course = hostile["course"]
    rows = list(csv.DictReader((course / "grades.csv").open()))
    students = {p.name for p in (course / "submitted").iterdir()}
    assert {r["student_id"] for r in rows} == students
    by = {(r["student_id"], r["chapter"]): r for r in rows}
    assert "not a chapter" in by[("h-not-a-chapter", "ch99_nothing")]["fault"]
    assert "hung" in by[("h-hang", CHAPTER)]["fault"]
    assert by[("zz-after", CHAPTER)]["fault"] == ""
    for s in students - {"h-not-a-chapter"}:
        assert (course / "feedback" / s / CHAPTER / hostile["src"].name.replace(".ipynb", ".html")).exists(), s
    fb = (course / "feedback" / "h-hang" / CHAPTER / hostile["src"].name.replace(".ipynb", ".html")).read_text()
    assert "Grading note" in fb and "hung" in fb
    assert hostile["release"].read_bytes() == hostile["release_before"], "grading rewrote notebooks/"
    assert list((course / "gradebook-backups").glob("gradebook-*.db")), "no backup of the gradebook"


def test_resubmission_is_regraded_and_nothing_else(hostile):
    course, src = hostile["course"], hostile["src"]
    nbformat.write(hostile["solution"], course / "submitted" / "zz-after" / CHAPTER / src.name)
    stamp = {s: (course / "autograded" / s / CHAPTER / grading.RECORD).read_text()
             for s in ("h-vandal", "h-lost")}
    res = grading.instructor_autograde(root=course)
    assert res[("zz-after", CHAPTER)].auto_score == _full(hostile)
    for s, before in stamp.items():
        assert (course / "autograded" / s / CHAPTER / grading.RECORD).read_text() == before, f"{s} was regraded"
    rows = {r["student_id"]: r for r in csv.DictReader((course / "grades.csv").open()) if r["chapter"] == CHAPTER}
    assert float(rows["zz-after"]["autograded_score"]) == _full(hostile)


def test_changed_tests_reach_the_gradebook_and_regrade(hostile):
    """A stricter hidden test in solutions/ reaches the gradebook, and changes every fingerprint."""
    from nbgrader.api import Gradebook

    course, src = hostile["course"], hostile["src"]
    sub = course / "submitted" / "zz-after" / CHAPTER / src.name
    before = grading.fingerprint(sub, CHAPTER, course, LIMITS)
    stricter = grading.new_course([CHAPTER], REPO)
    try:
        nb = nbformat.read(grading.chapter_notebook(CHAPTER, stricter), as_version=4)
        cell = nb.cells[_index(nb, f"{hostile['exercises'][0]}-hidden")]
        cell.source = cell.source.replace("### END HIDDEN TESTS", "assert False, 'a stricter test'\n### END HIDDEN TESTS")
        nbformat.write(nb, grading.chapter_notebook(CHAPTER, stricter))
        (stricter / "gradebook.db").unlink()
        shutil.copy(course / "gradebook.db", stricter / "gradebook.db")   # a gradebook with submissions
        release = (stricter / "notebooks" / CHAPTER / src.name).read_bytes()
        grading.update_gradebook_tests(stricter, CHAPTER)
        with Gradebook(f"sqlite:///{stricter / 'gradebook.db'}") as gb:
            stored = gb.find_source_cell(f"{hostile['exercises'][0]}-hidden", src.stem, CHAPTER).source
        assert "a stricter test" in stored
        assert grading.fingerprint(sub, CHAPTER, stricter, LIMITS) != before
        assert (stricter / "notebooks" / CHAPTER / src.name).read_bytes() == release, "it rewrote notebooks/"
    finally:
        shutil.rmtree(stricter, ignore_errors=True)


def test_make_clean_never_deletes_grading_results():
    out = subprocess.run(["make", "-n", "clean"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    for kept in ("gradebook", "submitted", "autograded", "feedback", "grades.csv"):
        assert kept not in out, f"`make clean` would delete {kept}: {out}"


def test_notebooks_run_in_the_course_environment():
    """nbval uses the Python that runs pytest (.venv), not a kernelspec found by name."""
    import tomllib

    addopts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "--nbval-current-env" in addopts
    km = sandbox.kernel_manager()
    assert km.kernel_spec.argv[0] == __import__("sys").executable


def test_make_grade_explains_a_folder_that_is_not_a_chapter(tmp_path):
    nb = tmp_path / "homework" / "mine.ipynb"
    nb.parent.mkdir()
    nbformat.write(nbformat.v4.new_notebook(), nb)
    with pytest.raises(SystemExit, match="'homework', which is not a chapter"):
        grading.grade(nb, REPO)


def test_make_grade_explains_a_notebook_that_is_not_json(tmp_path, monkeypatch):
    for k, v in LIMITS.to_env().items():
        monkeypatch.setenv(k, v)
    nb = tmp_path / CHAPTER / f"{CHAPTER}.ipynb"
    nb.parent.mkdir()
    nb.write_text("{ this is not json")
    res = grading.grade(nb, REPO)
    assert res.auto_score == 0 and "not valid JSON" in res.reason
    assert "fault: " in res.table()
