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

from course_utils.grading.course import chapter_notebook, nbgrader
from course_utils.grading.results import META, RECORD, CellGrade, NotebookGrades, _errors_by_cell

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



def write_grades_csv(root: Path, faults: Mapping[tuple[str, str], str]) -> Path:
    """The grade exports, from the gradebook (autograded scores, written marks, late penalties):

    * ``grades.csv``: a row per student and chapter (plus unknown folders), with the fault and the
      late penalty (``score`` is after the penalty, as nbgrader counts it);
    * ``grades_by_exercise.csv``: a row per student, chapter and exercise (its visible and hidden tests
      together; each written question on its own);
    * ``grades_lms.csv``: a row per student, a column per chapter (``chNN (max)``) and the total, the
      shape a learning-management system imports.
    """
    from nbgrader.api import Gradebook, MissingEntry

    rows, by_exercise = [], []
    lms: dict[str, dict[str, float]] = {}
    maxima: dict[str, float] = {}
    db = root / "gradebook.db"
    if db.exists():
        with Gradebook(f"sqlite:///{db}") as gb:
            for a in gb.assignments:
                maxima[a.name] = a.max_score
                for st in gb.students:
                    try:
                        sub = gb.find_submission(a.name, st.id)
                    except MissingEntry:
                        rows.append([a.name, st.id, "0", f"{a.max_score:g}", "0", "no",
                                     faults.get((st.id, a.name), ""), "0"])
                        lms.setdefault(st.id, {})[a.name] = 0.0
                        continue
                    rows.append([a.name, st.id, f"{sub.score:g}", f"{a.max_score:g}", f"{sub.code_score:g}",
                                 "yes" if sub.needs_manual_grade else "no", faults.get((st.id, a.name), ""),
                                 f"{sub.late_submission_penalty or 0:g}"])
                    lms.setdefault(st.id, {})[a.name] = sub.score
                    by_exercise += _exercise_rows(sub, a.name, st.id)
    seen = {(r[1], r[0]) for r in rows}
    for (s, ch), why in faults.items():
        if (s, ch) not in seen:
            rows.append([ch, s, "0", "", "0", "no", why, "0"])
    _write_csv(root / "grades_by_exercise.csv",
               ["student_id", "chapter", "exercise", "kind", "score", "max_score"], sorted(by_exercise))
    chapters_ = sorted(maxima)
    _write_csv(root / "grades_lms.csv",
               ["student_id", *(f"{ch} ({maxima[ch]:g})" for ch in chapters_), f"total ({sum(maxima.values()):g})"],
               [[s, *(f"{lms[s].get(ch, 0.0):g}" for ch in chapters_), f"{sum(lms[s].values()):g}"]
                for s in sorted(lms)])
    return _write_csv(root / "grades.csv", ["chapter", "student_id", "score", "max_score", "autograded_score",
                                            "needs_manual_grade", "fault", "late_penalty"], sorted(rows))


def _exercise_rows(sub, chapter: str, student: str) -> list[list[str]]:
    """A submission's grades summed per exercise (``ex3_attention-visible`` + ``-hidden``)."""
    from course_utils.grading.course import exercise_of

    totals: dict[str, list] = {}
    for nb in sub.notebooks:
        for g in nb.grades:
            score = g.manual_score if g.manual_score is not None else (g.auto_score or 0.0)
            kind = "written" if g.cell_type == "markdown" else "autograded"
            t = totals.setdefault(exercise_of(g.name), [kind, 0.0, 0.0])
            t[1] += score
            t[2] += g.max_score
    return [[student, chapter, ex, kind, f"{score:g}", f"{mx:g}"] for ex, (kind, score, mx) in totals.items()]


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path
