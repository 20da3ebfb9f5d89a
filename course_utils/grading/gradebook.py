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
    """``grades.csv``: a row per student and chapter of the gradebook, plus unknown folders, with the fault."""
    from nbgrader.api import Gradebook, MissingEntry

    rows = []
    db = root / "gradebook.db"
    if db.exists():
        with Gradebook(f"sqlite:///{db}") as gb:
            for a in gb.assignments:
                for st in gb.students:
                    try:
                        sub = gb.find_submission(a.name, st.id)
                        row = [a.name, st.id, f"{sub.score:g}", f"{a.max_score:g}", f"{sub.code_score:g}",
                               "yes" if sub.needs_manual_grade else "no"]
                    except MissingEntry:
                        row = [a.name, st.id, "0", f"{a.max_score:g}", "0", "no"]
                    rows.append(row + [faults.get((st.id, a.name), "")])
    seen = {(r[1], r[0]) for r in rows}
    for (s, ch), why in faults.items():
        if (s, ch) not in seen:
            rows.append([ch, s, "0", "", "0", "no", why])
    path = root / "grades.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["chapter", "student_id", "score", "max_score", "autograded_score", "needs_manual_grade", "fault"])
        w.writerows(sorted(rows))
    return path


