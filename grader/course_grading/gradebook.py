"""The instructor's gradebook: backups, storing a chapter's tests, reading grades, grades.csv."""

from __future__ import annotations

import csv
import datetime
import json
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Mapping
from pathlib import Path

import nbformat

from course_grading.course import chapter_notebook, nbgrader
from course_grading.results import META, RECORD, CellGrade, NotebookGrades, _errors_by_cell

BACKUPS_KEPT = 20


def read_grades(course: Path, chapter: str, students: list[str]) -> dict[str, NotebookGrades]:
    """The grades of ``students`` in ``chapter`` from the gradebook and the autograded notebooks."""
    from nbgrader.api import Gradebook, MissingEntry

    nb_name = chapter_notebook(chapter, course).stem
    order = {c.metadata.get("nbgrader", {}).get("grade_id"): i for i, c in
             enumerate(nbformat.read(chapter_notebook(chapter, course), as_version=4).cells)}
    results = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in students:
            out = course / "autograded" / student / chapter
            record = json.loads((out / RECORD).read_text()) if (out / RECORD).exists() else {}
            try:
                nb = nbformat.read(out / f"{nb_name}.ipynb", as_version=4)
            except (OSError, ValueError):
                nb = nbformat.v4.new_notebook()
            errors, every = _errors_by_cell(nb)
            meta = nb.metadata.get(META, {})
            cells = []
            try:
                grades = gb.find_submission_notebook(nb_name, chapter, student).grades
            except MissingEntry:
                grades = []
            for g in grades:
                d = g.to_dict()
                cells.append(CellGrade(d["name"], float(d["auto_score"] or 0.0) if d["manual_score"] is None
                                       else float(d["manual_score"]), float(d["max_score"]),
                                       manual=d["cell_type"] == "markdown" or d["auto_score"] is None,
                                       error=errors.get(d["name"])))
            cells.sort(key=lambda c: order.get(c.grade_id, 10**6))
            fb = course / "feedback" / student / chapter / f"{nb_name}.html"
            results[student] = NotebookGrades(cells, every, fb if fb.exists() else None,
                                              faults=record.get("faults") or meta.get("faults", []),
                                              tampering=meta.get("tampering", {}))
    return results



def backup_gradebook(root: Path) -> Path | None:
    """Copy ``gradebook.db`` to ``gradebook-backups/`` (a consistent SQLite copy); keep the newest."""
    db = root / "gradebook.db"
    if not db.exists():
        return None
    folder = root / "gradebook-backups"
    folder.mkdir(mode=0o700, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    dest = folder / f"gradebook-{stamp}.db"
    with sqlite3.connect(db) as src, sqlite3.connect(dest) as dst:
        src.backup(dst)
    os.chmod(dest, 0o600)
    for old in sorted(folder.glob("gradebook-*.db"))[:-BACKUPS_KEPT]:
        old.unlink()
    return dest


def update_gradebook_tests(root: Path, chapter: str) -> None:
    """Store ``solutions/<chapter>``'s current tests in the gradebook, without writing ``notebooks/``.

    nbgrader's ``generate_assignment`` also writes the release; it runs in a throwaway course
    here, pointed at the instructor's gradebook.
    """
    course = Path(tempfile.mkdtemp(prefix="nbgrader-tests-"))
    try:
        shutil.copy(root / "nbgrader_config.py", course / "nbgrader_config.py")
        shutil.copytree(root / "solutions" / chapter, course / "solutions" / chapter,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        proc = nbgrader("generate_assignment", chapter, "--force",
                        f"--CourseDirectory.db_url=sqlite:///{root / 'gradebook.db'}", course=course, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"could not store the tests of solutions/{chapter} in the gradebook. nbgrader "
                             "refuses to add or remove graded cells once a chapter has submissions: restore "
                             "the graded cells, or grade the new version as a new chapter.\n"
                             + proc.stderr[-2000:])
    finally:
        shutil.rmtree(course, ignore_errors=True)



#: What ``grades_lms.csv`` holds for a chapter whose written answers still await a hand mark:
#: ``provisional`` (the points so far, and the chapter named in the ``provisional`` column) or ``empty``
#: (no number: the LMS shows it as missing until the marks are in). ``make autograde LMS_PENDING=empty``.
LMS_PENDING = ("provisional", "empty")

GRADES_HEADER = ["chapter", "student_id", "score", "max_score", "autograded_score", "needs_manual_grade", "fault",
                 "late_penalty", "raw_score", "submitted_at", "due_date", "late", "pending_points"]


def _when(t) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S UTC") if t is not None else ""


def _pending_points(sub) -> float:
    """The points of ``sub``'s answers that still wait for a hand mark (scored 0 until then)."""
    return sum(g.max_score for nb in sub.notebooks for g in nb.grades if _awaits_mark(g))


def pending_marks(course: Path, chapter: str, nb_name: str, students: list[str]) -> dict[str, dict[str, float]]:
    """``{student: {grade_id: points}}``: the answers of ``chapter`` that wait for a hand mark."""
    from nbgrader.api import Gradebook, MissingEntry

    out: dict[str, dict[str, float]] = {}
    if not (course / "gradebook.db").exists():
        return out
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in students:
            try:
                grades = gb.find_submission_notebook(nb_name, chapter, student).grades
            except MissingEntry:
                continue
            out[student] = {g.name: g.max_score for g in grades if _awaits_mark(g)}
    return out


def _awaits_mark(grade) -> bool:
    """A cell nbgrader flags for a hand grade that has no hand mark yet."""
    return bool(grade.needs_manual_grade) and grade.manual_score is None


def write_grades_csv(root: Path, faults: Mapping[tuple[str, str], str], lms_pending: str = "provisional") -> Path:
    """The grade exports, from the gradebook (autograded scores, written marks, late penalties):

    * ``grades.csv``: a row per student and chapter (plus unknown folders): ``score`` is the grade,
      after the late penalty (``max(0, raw_score - late_penalty)``, as ``nbgrader export`` counts it),
      with the raw score, the penalty, when it was submitted, the due date (with any extension), whether
      it was late, and the points still waiting for a hand mark (``needs_manual_grade``,
      ``pending_points``; they count 0 in ``score`` until marked);
    * ``grades_by_exercise.csv``: a row per student, chapter and exercise (its visible and hidden tests
      together; each written question on its own), raw points, ``pending`` where a mark is awaited (the
      late penalty is the chapter's, in ``grades.csv``);
    * ``grades_lms.csv``: a row per student, a column per chapter (``chNN (max)``, after the penalty) and
      the total, the shape a learning-management system imports; a chapter awaiting hand marks is
      ``lms_pending``: ``provisional`` (its points so far, named in the ``provisional`` column) or
      ``empty`` (no number, and no total, until the marks are in).
    """
    from nbgrader.api import Gradebook, MissingEntry

    if lms_pending not in LMS_PENDING:
        raise ValueError(f"lms_pending={lms_pending!r}: expected one of {', '.join(LMS_PENDING)}")
    rows, by_exercise = [], []
    lms: dict[str, dict[str, float | None]] = {}
    provisional: dict[str, list[str]] = {}
    maxima: dict[str, float] = {}
    db = root / "gradebook.db"
    if db.exists():
        with Gradebook(f"sqlite:///{db}") as gb:
            for a in gb.assignments:
                maxima[a.name] = a.max_score
                for st in gb.students:
                    fault = faults.get((st.id, a.name), "")
                    try:
                        sub = gb.find_submission(a.name, st.id)
                    except MissingEntry:
                        rows.append([a.name, st.id, "0", f"{a.max_score:g}", "0", "no", fault,
                                     "0", "0", "", _when(a.duedate), "no", "0"])
                        lms.setdefault(st.id, {})[a.name] = 0.0
                        continue
                    row, score, pending = _submission_row(a, st.id, sub, fault)
                    rows.append(row)
                    if pending:
                        provisional.setdefault(st.id, []).append(f"{a.name}: {pending:g} points to be marked")
                    lms.setdefault(st.id, {})[a.name] = None if pending and lms_pending == "empty" else score
                    by_exercise += _exercise_rows(sub, a.name, st.id)
    seen = {(r[1], r[0]) for r in rows}
    rows += [[ch, s, "0", "", "0", "no", why, "0", "0", "", "", "no", "0"]
             for (s, ch), why in faults.items() if (s, ch) not in seen]
    _write_csv(root / "grades_by_exercise.csv",
               ["student_id", "chapter", "exercise", "kind", "score", "max_score", "pending"], sorted(by_exercise))
    _write_lms(root / "grades_lms.csv", lms, maxima, provisional)
    return _write_csv(root / "grades.csv", GRADES_HEADER, sorted(rows))


def _submission_row(assignment, student: str, sub, fault: str) -> tuple[list[str], float, float]:
    """``grades.csv``'s row of one submission, its score after the late penalty and its points awaiting a mark."""
    penalty = sub.late_submission_penalty or 0.0
    score = max(0.0, sub.score - penalty)
    pending = _pending_points(sub)
    return ([assignment.name, student, f"{score:g}", f"{assignment.max_score:g}", f"{sub.code_score:g}",
             "yes" if sub.needs_manual_grade else "no", fault, f"{penalty:g}", f"{sub.score:g}",
             _when(sub.timestamp), _when(sub.duedate), "yes" if sub.total_seconds_late > 0 else "no",
             f"{pending:g}"], score, pending)


def _write_lms(path: Path, lms: dict[str, dict[str, float | None]], maxima: dict[str, float],
               provisional: dict[str, list[str]]) -> Path:
    """``grades_lms.csv``: a column per chapter, the total and what is provisional; an empty cell (and
    total) where a chapter waits for hand marks and the instructor chose ``empty``."""
    def shown(v: float | None) -> str:
        return "" if v is None else f"{v:g}"

    chapters_ = sorted(maxima)
    return _write_csv(path, ["student_id", *(f"{ch} ({maxima[ch]:g})" for ch in chapters_),
                             f"total ({sum(maxima.values()):g})", "provisional"],
                      [[s, *(shown(lms[s].get(ch, 0.0)) for ch in chapters_),
                        shown(None if None in lms[s].values() else sum(lms[s].values())),
                        "; ".join(provisional.get(s, []))] for s in sorted(lms)])


def _exercise_rows(sub, chapter: str, student: str) -> list[list[str]]:
    """A submission's grades summed per exercise (``ex3_attention-visible`` + ``-hidden``)."""
    from course_grading.course import exercise_of

    totals: dict[str, list] = {}
    for nb in sub.notebooks:
        for g in nb.grades:
            score = g.manual_score if g.manual_score is not None else (g.auto_score or 0.0)
            kind = "written" if g.cell_type == "markdown" else "autograded"
            t = totals.setdefault(exercise_of(g.name), [kind, 0.0, 0.0, False])
            t[1] += score
            t[2] += g.max_score
            t[3] = t[3] or _awaits_mark(g)
    return [[student, chapter, ex, kind, f"{score:g}", f"{mx:g}", "yes" if pending else "no"]
            for ex, (kind, score, mx, pending) in totals.items()]


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path
