"""A class, not a folder: nbgrader's exchange end to end, and grading in parallel (issue 22).

* ``test_the_exchange_loop``: an instructor and two students through nbgrader's exchange with
  nbgrader's own command line, in a throwaway course and a temporary exchange: release, fetch,
  submit, collect, ``python -m course_grading autograde --jobs 2`` (the course's grader:
  sandbox, limits), release feedback, and each student fetches their feedback, *only their own*.
  Both students run as the same Unix account (as under a local spawner) with their hub name in
  ``JUPYTERHUB_USER`` and their own home: the exchange must name submissions after the hub
  user. One student's notebook looks for the exchange's inbound folder, the other student's
  submission, ``submitted/`` and the gradebook from inside its box: none is there.
  The chapter falls due between the two submissions: the late one loses 10 % per started day
  (nbgrader_config.py). nbgrader's own API (formgrader's Autograde button) then grades a submission
  exactly as the course's grader did; a grader marks written answers and comments on them (as in
  formgrader), and the next `autograde` puts the marks and comments into the feedback (whose
  contents list names each exercise) and into the exports (per exercise, and a row per student).
  formgrader's page shows each written answer's rubric beside it (from the source, never in the
  feedback before the mark); the feedback shows the marks by part of a marked answer (rubric.py).
* ``test_parallel_grades_equal_serial_grades``: a small class with a poisoned submission graded
  three at a time, then one at a time: the same grades, cell by cell, and the same faults.

Chapter 3 grades fastest; the submissions are lean (the setup cell and the graded cells, which a
learner may do), so each grades in seconds.
"""

from __future__ import annotations

import csv
import datetime
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook
from notebook_helpers import lean as _lean
from notebook_helpers import meta as _meta

import course_grading as grading
from course_grading import exchange, parallel, rubric, sandbox

CHAPTER = "ch03_scaled_dot_product"
REPO = Path(__file__).resolve().parent.parent
LIMITS = sandbox.Limits(notebook_s=120, cell_s=30, memory_mb=2048, processes=64, children=8, file_mb=64)
SANDBOXED = sandbox.isolation().sandboxed
pytestmark = pytest.mark.skipif(CHAPTER not in grading.chapters(REPO), reason=f"needs {CHAPTER}")




def _wrong():
    ns: dict = {}
    exec((REPO / "tests" / "wrong_answers" / f"{CHAPTER}.py").read_text(), ns)
    return ns["EXERCISE"], ns["SOURCE"]


def _set_answer(nb, grade_id: str, source: str):
    cell = next(c for c in nb.cells if _meta(c).get("grade_id") == grade_id)
    cell.source = source
    return nb


def _answers_from(solution, nb):
    """``nb`` (a fetched release) with the answer cells of ``solution``."""
    answers = {_meta(c)["grade_id"]: c.source for c in solution.cells
               if _meta(c).get("solution") and _meta(c).get("grade_id")}
    for c in nb.cells:
        if _meta(c).get("grade_id") in answers:
            c.source = answers[_meta(c)["grade_id"]]
    return nb


def _run(*args: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def _nbgrader(*args: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return _run(sys.executable, "-m", "nbgrader", *args, cwd=cwd, env=env)


SNOOP = """import pathlib
for p in {paths!r}:
    try:
        print(("READ " if pathlib.Path(p).exists() else "ABSENT ") + p)
    except OSError:
        print("ABSENT " + p)
"""


def test_the_exchange_loop(tmp_path):
    base = _class_env(tmp_path)
    course = grading.new_course([CHAPTER], REPO)
    try:
        teacher = {**base, "HOME": str(tmp_path / "home" / "teacher")}
        _nbgrader("release_assignment", CHAPTER, "--force", cwd=course, env=teacher)
        homes, envs = _fetch(tmp_path, base)
        inbound = tmp_path / "exchange" / exchange.COURSE_ID / "inbound"
        paths = _submit(tmp_path, course, teacher, homes, envs)
        _collect(course, inbound, teacher)
        _name_the_students(course, teacher, tmp_path)
        grades = _autograde_the_class(course, teacher, paths)
        _formgrader_shows_the_rubrics(course)
        _exports_are_nbgraders_grades(course, teacher, late={"alice": False, "bob": True}, pending={"alice", "bob"})
        _formgrader_grades_as_the_course_does(course, teacher)
        _written_marks_reach_feedback_and_exports(course, teacher, grades)
        _exports_are_nbgraders_grades(course, teacher, late={"alice": False, "bob": True}, pending={"bob"})
        _a_new_due_date_reaches_every_grade(course, teacher)
        _nbgrader("release_feedback", CHAPTER, cwd=course, env=teacher)
        for student, other in (("alice", "bob"), ("bob", "alice")):
            _nbgrader("fetch_feedback", CHAPTER, cwd=homes[student], env=envs[student])
            html = sorted((homes[student] / CHAPTER / "feedback").glob("*/*.html"))
            assert len(html) == 1, f"{student} fetched {len(html)} feedback files: {html}"
            text = html[0].read_text()
            assert f"{student}-sentinel" in text and f"{other}-sentinel" not in text, student
    finally:
        shutil.rmtree(course, ignore_errors=True)


def _class_env(tmp_path: Path) -> dict:
    """The environment every account of the class runs nbgrader in (no Jupyter or nbgrader variables
    of the caller's), with the temporary exchange and the grading limits."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "NBGRADER"))}
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}"
    base[exchange.EXCHANGE_VARIABLE] = str(tmp_path / "exchange")
    base.update(LIMITS.to_env())
    if not SANDBOXED:   # trusted notebooks only; the box's part of the test is skipped below
        base["GRADING_UNSANDBOXED"] = "1"
    return base


def _fetch(tmp_path: Path, base: dict) -> tuple[dict, dict]:
    """Each student's home (with its exchange configuration) and environment; each fetches the chapter."""
    homes, envs = {}, {}
    for student in ("alice", "bob"):
        home = homes[student] = tmp_path / "home" / student
        exchange.write_student_config(home, tmp_path / "exchange")
        envs[student] = {**base, "HOME": str(home), "JUPYTERHUB_USER": student}
        _nbgrader("fetch_assignment", CHAPTER, cwd=home, env=envs[student])
    return homes, envs


def _submit(tmp_path: Path, course: Path, teacher: dict, homes: dict, envs: dict) -> list[str]:
    """alice submits the solution's answers; the chapter falls due; bob submits late, with a wrong
    answer and a cell that looks for other students' work. Returns the paths bob's cell looks for."""
    solution = _lean(grading.chapter_notebook(CHAPTER, course))
    wrong_ex, wrong_src = _wrong()
    inbound = tmp_path / "exchange" / exchange.COURSE_ID / "inbound"
    paths = []
    for student in ("alice", "bob"):
        home = homes[student]
        if student == "bob":   # the chapter falls due between the two submissions: bob is late
            due = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)
            _nbgrader("db", "assignment", "add", CHAPTER, f"--duedate={due:%Y-%m-%d %H:%M:%S} UTC",
                      cwd=course, env=teacher)
            time.sleep(2)
        fetched = home / CHAPTER / f"{CHAPTER}.ipynb"
        nb = _answers_from(solution, _lean(fetched))
        if student == "bob":
            _set_answer(nb, wrong_ex, wrong_src)
            others = sorted(inbound.iterdir())   # alice's submission, already in the exchange
            assert others, "alice's submission is not in the exchange"
            paths = [str(tmp_path / "exchange"), str(inbound), str(others[0]),
                     str(next(others[0].glob("*.ipynb"))), str(course / "gradebook.db"),
                     str(course / "submitted"), str(homes["alice"])]
            nb.cells.append(nbformat.v4.new_code_cell(SNOOP.format(paths=paths)))
        nb.cells.append(nbformat.v4.new_markdown_cell(f"Submitted by {student}-sentinel."))
        nbformat.write(nb, fetched)
        _nbgrader("submit", CHAPTER, cwd=home, env=envs[student])
        if os.geteuid() == 0:   # the student's own account, given at once: collect's time is st_ctime
            for entry in inbound.glob(f"{student}+*"):
                for p in (entry, *entry.rglob("*")):
                    os.chown(p, UIDS[student], UIDS[student])
    return paths


# As root, each student's inbound folder is given an account of its own as soon as it is submitted
# (a chown changes st_ctime, collect's time of submission: given later, alice would be late too).
UIDS = {"alice": 2001, "bob": 2002}


def _collect(course: Path, inbound: Path, teacher: dict) -> None:
    """Collect both submissions, named after the hub's users.

    Collect takes a submission only from the account of the student it names
    (grader/course_grading/collect.py). Here every student is this one account: as root, give each
    student's inbound folder an account of its own and tell collect whose it is; otherwise trust
    the names, as a hub with an authenticated exchange would.
    """
    if os.geteuid() == 0:   # each inbound folder was given to its student's own uid as it was submitted
        with open(course / "nbgrader_config.py", "a") as f:
            f.write(f"\nc.CourseCollect.owner_map = {{{', '.join(f'{str(u)!r}: {s!r}' for s, u in UIDS.items())}}}\n")
    else:
        with open(course / "nbgrader_config.py", "a") as f:
            f.write("\nc.CourseCollect.trust_names = True\n")
    _nbgrader("collect", CHAPTER, cwd=course, env=teacher)
    # The hub's user names, not the Unix account's (root here, or whoever runs the tests).
    collected = sorted(p.name for p in (course / "submitted").iterdir())
    assert collected == ["alice", "bob"], collected
    assert (course / "submitted" / "alice" / CHAPTER / "timestamp.txt").exists()


def _autograde_the_class(course: Path, teacher: dict, paths: list[str]) -> dict[str, list[str]]:
    """The course's grader, two at a time: alice above bob, bob's box without the paths he looked
    for, bob's late penalty as the course sets it. Returns ``grades.csv``'s rows by student."""
    out = _run(sys.executable, "-m", "course_grading", "--root", str(course), "autograde", "--jobs", "2",
               cwd=course, env=teacher).stdout
    assert "2 at a time" in out, out
    grades = {row.split(",")[1]: row.split(",") for row in (course / "grades.csv").read_text().splitlines()[1:]}
    assert set(grades) == {"alice", "bob"}, grades
    assert float(grades["alice"][4]) > float(grades["bob"][4]) > 0, grades
    assert not grades["alice"][6] and not grades["bob"][6], grades

    graded_bob = nbformat.read(course / "autograded" / "bob" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    seen = "\n".join(str(o.get("text", "")) for c in graded_bob.cells if c.cell_type == "code" for o in c.outputs)
    if SANDBOXED:
        assert not re.search(r"^READ ", seen, re.M) and len(re.findall(r"^ABSENT ", seen, re.M)) == len(paths), seen

    # The late policy (nbgrader_config.py): 10 % of the earned score per started day late.
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        late = {st: gb.find_submission(CHAPTER, st).late_submission_penalty or 0.0 for st in ("alice", "bob")}
        earned = gb.find_submission(CHAPTER, "bob").code_score
    assert late["alice"] == 0 and late["bob"] == pytest.approx(0.1 * earned), late
    assert float(grades["bob"][7]) == pytest.approx(late["bob"]), grades
    return grades


STUDENTS_CSV = "id,first_name,last_name,email\nalice,Alice,Liddell,alice@example.org\nbob,Bob,Marley,bob@example.org\n"


def _formgrader_shows_the_rubrics(course: Path) -> None:
    """alice's autograded notebook, as formgrader's manual-grading page renders it: each written answer
    followed by its rubric from the instructor's source; the gradebook's cells those of the source."""
    from test_formgrader_guard import formgrader_html, instructor_config

    source = nbformat.read(grading.chapter_notebook(CHAPTER, course), as_version=4)
    found = rubric.rubrics(source)
    graded = nbformat.read(course / "autograded" / "alice" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    ids = [_meta(c)["grade_id"] for c in graded.cells if _meta(c).get("grade_id")]
    assert ids == [_meta(c)["grade_id"] for c in source.cells if _meta(c).get("grade_id")], ids
    html = formgrader_html(graded, instructor_config())
    for i, cell in enumerate(graded.cells):
        if rubric.is_written(cell):
            assert graded.cells[i + 1].metadata[rubric.META]["rubric"] == _meta(cell)["grade_id"]
    for gid, r in found.items():
        assert f"Rubric of {gid}" in html and all(text[:40] in html for _, text in r.parts), gid


def _name_the_students(course: Path, teacher: dict, tmp_path: Path) -> None:
    """The instructor imports the class list (docs/instructors.md): formgrader and the exports name them."""
    roster = tmp_path / "students.csv"
    roster.write_text(STUDENTS_CSV)
    _nbgrader("db", "student", "import", str(roster), cwd=course, env=teacher)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assert {(st.id, st.first_name, st.last_name) for st in gb.students} >= {
            ("alice", "Alice", "Liddell"), ("bob", "Bob", "Marley")}


def _exports_are_nbgraders_grades(course: Path, teacher: dict, late: dict[str, bool], pending: set[str]) -> None:
    """Each CSV of the course against ``nbgrader export`` (nbgrader's own exporter, which subtracts the late
    penalty): the same score after the penalty, raw score, penalty and due date for every student; the late
    flag and the points awaiting a hand mark where they are; the LMS file the same grade, provisional where
    a mark is awaited; the per-exercise file flagging what waits for a mark."""
    _nbgrader("export", "--to", str(course / "nbgrader_export.csv"), cwd=course, env=teacher)
    theirs = {r["student_id"]: r for r in csv.DictReader((course / "nbgrader_export.csv").open())}
    ours = {r["student_id"]: r for r in csv.DictReader((course / "grades.csv").open()) if r["chapter"] == CHAPTER}
    lms = {r["student_id"]: r for r in csv.DictReader((course / "grades_lms.csv").open())}
    by_exercise = list(csv.DictReader((course / "grades_by_exercise.csv").open()))
    assert set(ours) == set(theirs) == set(lms) == {"alice", "bob"}, (ours, theirs, lms)
    for st in ("alice", "bob"):
        mine, nbg = ours[st], theirs[st]
        for col, their_col in (("score", "score"), ("raw_score", "raw_score"), ("late_penalty", "late_submission_penalty"),
                               ("max_score", "max_score")):
            assert float(mine[col]) == pytest.approx(float(nbg[their_col])), (st, col, mine, nbg)
        assert float(mine["score"]) == pytest.approx(max(0.0, float(mine["raw_score"]) - float(mine["late_penalty"])))
        assert mine["due_date"][:19] == nbg["duedate"][:19], (mine["due_date"], nbg["duedate"])
        assert mine["late"] == ("yes" if late[st] else "no") and (float(mine["late_penalty"]) > 0) == late[st], mine
        chapter_col = next(k for k in lms[st] if k.startswith(CHAPTER))
        assert float(lms[st][chapter_col]) == pytest.approx(float(mine["score"])), (lms[st], mine)
        waits = st in pending
        assert (float(mine["pending_points"]) > 0) == waits, mine
        assert (CHAPTER in lms[st]["provisional"]) == waits, lms[st]
        written = [r for r in by_exercise if r["student_id"] == st and r["kind"] == "written"]
        assert written and all(r["pending"] == ("yes" if waits else "no") for r in written), written
        page = (course / "feedback" / st / CHAPTER / f"{CHAPTER}.html").read_text()
        assert ("to be marked by your instructor" in page) == waits, f"{st}'s feedback on answers awaiting a mark"
        assert "Rubric of" not in page and "Model answer" not in page, f"the grader's rubric reached {st}'s feedback"
        assert ("by part of the rubric" in page) == (not waits), f"{st}'s feedback on the marks by part"
        assert ("Late submission penalty" in page) == late[st], f"{st}'s feedback on the late penalty"


def _a_new_due_date_reaches_every_grade(course: Path, teacher: dict) -> None:
    """The instructor moves the due date past bob's submission (an extension for all): the next
    `make autograde`, nothing resubmitted and no FORCE, takes his penalty away everywhere."""
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
    _nbgrader("db", "assignment", "add", CHAPTER, f"--duedate={later:%Y-%m-%d %H:%M:%S} UTC", cwd=course, env=teacher)
    out = _run(sys.executable, "-m", "course_grading", "--root", str(course), "autograde",
               cwd=course, env=teacher).stdout
    assert f"late penalty of bob in {CHAPTER}" in out, out
    _exports_are_nbgraders_grades(course, teacher, late={"alice": False, "bob": False}, pending={"bob"})


def _formgrader_grades_as_the_course_does(course: Path, teacher: dict) -> None:
    """formgrader's Autograde button (nbgrader's own API, no reference run prepared by the course's
    commands) grades alice exactly as the course's grader did."""
    before = _scores(course, "alice")
    _run(sys.executable, "-c", API_AUTOGRADE.format(chapter=CHAPTER, student="alice"), cwd=course, env=teacher)
    assert _scores(course, "alice") == before, "nbgrader's API and make autograde disagree"


def _written_marks_reach_feedback_and_exports(course: Path, teacher: dict, grades: dict[str, list[str]]) -> None:
    """A grader marks alice's written answers in formgrader; the next run of the course's grader
    (nothing resubmitted) puts the marks and the comment into her feedback and the exports."""
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        sub = gb.find_submission_notebook(CHAPTER, CHAPTER, "alice")
        answers = [g for g in sub.grades if g.cell_type == "markdown"]
        assert answers, "the chapter has no written answer to mark"
        for i, g in enumerate(answers):
            g.manual_score = g.max_score / 2
            g.needs_manual_grade = False          # as formgrader's save does
            by_part = "marks: 1, 0\n" if i == 0 else ""    # the first with its marks by part (rubric.py)
            gb.find_comment(g.name, CHAPTER, CHAPTER, "alice").manual_comment = f"{by_part}Marked by hand: {g.name}-remark"
        written = [(g.name, g.max_score) for g in answers]
        gb.db.commit()
    marked = sum(mx / 2 for _, mx in written)
    _run(sys.executable, "-m", "course_grading", "--root", str(course), "autograde", cwd=course, env=teacher)
    regraded = {row.split(",")[1]: row.split(",") for row in (course / "grades.csv").read_text().splitlines()[1:]}
    assert float(regraded["alice"][2]) == pytest.approx(float(grades["alice"][2]) + marked), regraded
    feedback = (course / "feedback" / "alice" / CHAPTER / f"{CHAPTER}.html").read_text()
    for name, _ in written:
        assert f"{name}-remark" in feedback, f"alice's feedback lacks the comment on {name}"
    parts = rubric.rubrics(nbformat.read(grading.chapter_notebook(CHAPTER, course), as_version=4))[written[0][0]].parts
    assert "<strong>1 / 1</strong>" in feedback and "<strong>0 / 1</strong>" in feedback and "marks: 1, 0" not in feedback
    assert parts[0][1][:40] in feedback and "marked as a whole" in feedback, "the marks by part are not in the feedback"
    assert "ex1_scores: visible tests" in feedback and ">Test cell<" not in feedback, \
        "the feedback's contents list does not name the exercises"
    by_exercise = list(csv.DictReader((course / "grades_by_exercise.csv").open()))
    mine = {r["exercise"]: r for r in by_exercise if r["student_id"] == "alice"}
    assert float(mine[written[0][0]]["score"]) == written[0][1] / 2, mine
    assert mine["ex1_scores"]["kind"] == "autograded" and float(mine["ex1_scores"]["score"]) > 0, mine
    lms = list(csv.DictReader((course / "grades_lms.csv").open()))
    assert [r["student_id"] for r in lms] == ["alice", "bob"], lms
    assert float(lms[0][next(k for k in lms[0] if k.startswith(CHAPTER))]) == float(regraded["alice"][2])


# What formgrader's Autograde button runs: nbgrader's own API, configured from the course's
# nbgrader_config.py, in the course folder.
API_AUTOGRADE = """
from nbgrader.apps import NbGrader, NbGraderAPI
app = NbGrader()
app.load_config_file()
result = NbGraderAPI(config=app.config).autograde({chapter!r}, {student!r}, force=True)
assert result["success"], result.get("error") or result.get("log")
"""


def _scores(course: Path, student: str) -> dict[str, float]:
    """The autograded score of every test cell of ``student``'s submission, from the gradebook."""
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        sub = gb.find_submission_notebook(CHAPTER, CHAPTER, student)
        return {g.name: g.auto_score for g in sub.grades if g.cell_type == "code"}


DEAD = "import os\nos._exit(1)\n"


def test_parallel_grades_equal_serial_grades(tmp_path, monkeypatch):
    for k, v in LIMITS.to_env().items():
        monkeypatch.setenv(k, v)
    course = grading.new_course([CHAPTER], REPO)
    try:
        src = grading.chapter_notebook(CHAPTER, course)
        wrong_ex, wrong_src = _wrong()
        exercises = [_meta(c)["grade_id"] for c in _lean(src).cells
                     if _meta(c).get("solution") and not _meta(c).get("grade")]
        poisoned = _lean(src)    # bad metadata, a duplicated test cell, then a dead kernel
        poisoned.cells.insert(1, nbformat.v4.new_code_cell("y = 2", metadata={"nbgrader": "x"}))
        at = next(i for i, c in enumerate(poisoned.cells) if _meta(c).get("grade_id") == f"{exercises[0]}-visible")
        poisoned.cells.insert(at + 1, nbformat.v4.new_code_cell(poisoned.cells[at].source,
                                                                metadata=dict(poisoned.cells[at].metadata)))
        at = next(i for i, c in enumerate(poisoned.cells) if _meta(c).get("grade_id") == f"{exercises[1]}-hidden")
        poisoned.cells.insert(at + 1, nbformat.v4.new_code_cell(DEAD))
        notebooks = {"c-solution": _lean(src), "c-wrong": _set_answer(_lean(src), wrong_ex, wrong_src),
                     "c-poisoned": poisoned}   # three at once: the blank notebook's 0 is tests/test_grading.py's
        subs = {}
        for student, nb in notebooks.items():
            subs[student] = tmp_path / f"{student}.ipynb"
            nbformat.write(nb, subs[student])

        def summary(results):
            return {s: ([(c.grade_id, c.score) for c in r.cells if not c.manual], r.faults, r.auto_score)
                    for s, r in results.items()}

        parallel = summary(grading.autograde_in(course, CHAPTER, subs, jobs=3))
        # A grader marks a written answer meanwhile: regrading keeps it (the merge writes only
        # what nbgrader's autograde writes).
        written = next(c.grade_id for c in grading.read_grades(course, CHAPTER, ["c-solution"])["c-solution"].cells
                       if c.manual)
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
            gb.find_grade(written, src.stem, CHAPTER, "c-solution").manual_score = 1.5
            gb.db.commit()
        serial = summary(grading.autograde_in(course, CHAPTER, subs, jobs=1))
        assert parallel == serial
        kept = {c.grade_id: c.score for c in grading.read_grades(course, CHAPTER, ["c-solution"])["c-solution"].cells}
        assert kept[written] == 1.5, kept
        full = serial["c-solution"][2]
        assert full > 0, serial
        assert 0 < serial["c-wrong"][2] < full, serial
        assert 0 < serial["c-poisoned"][2] < full and any("kernel died" in f for f in serial["c-poisoned"][1]), serial
    finally:
        shutil.rmtree(course, ignore_errors=True)


def test_jobs_default_from_the_cores_and_memory():
    limits = sandbox.Limits()
    assert parallel.parse_jobs("3", limits) == 3
    assert parallel.parse_jobs(None, limits) == parallel.parse_jobs("auto", limits) == parallel.default_jobs(limits)
    assert 1 <= parallel.default_jobs(limits) <= parallel.usable_cores()
    assert parallel.default_jobs(sandbox.Limits(memory_mb=10**9)) == 1   # memory, not cores, decides
    for bad in ("-1", "two", "1.5"):
        with pytest.raises(SystemExit, match="jobs"):
            parallel.parse_jobs(bad, limits)
