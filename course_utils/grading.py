"""Grading, releasing and executing the course's notebooks (nbgrader underneath).

Command line (the Makefile's targets call these)::

    python -m course_utils.grading grade notebooks/ch01_seq2seq_rnn/ch01_seq2seq_rnn.ipynb
    python -m course_utils.grading release            # notebooks/ <- solutions/
    python -m course_utils.grading autograde          # submitted/<student>/<chapter>/ -> grades.csv
    python -m course_utils.grading execute [PATH]     # re-execute solution notebooks in place

``grade`` and ``release`` work in a throwaway course directory with a fresh gradebook, so
they never disturb an instructor's ``gradebook.db``; ``autograde`` is the instructor's and
uses the course root (it backs the gradebook up first, and never writes ``notebooks/``).

Every submission goes through :func:`intake` (a notebook that is not valid JSON, belongs to
another chapter, or lost or retyped its graded cells is repaired or set aside, with a reason)
and is executed by :class:`SandboxedExecute` (``course_utils.sandbox``: a throwaway box, no
network, limits on time, memory and processes, an unprivileged user, the tamper guard). A
fault stays with its submission: it gets a grade, a one-line reason and feedback, and the run
goes on. A submission is regraded when it, its chapter's tests or the grader changed
(:func:`fingerprint`), or always with ``--force``.

Cell naming convention (``grade_id``): an exercise's answer cell is ``exN_name``, its test
cells ``exN_name-visible`` and ``exN_name-hidden``; a written answer is ``qN_name``.
:func:`exercise_of` maps a grade cell to its exercise with that rule.
"""

from __future__ import annotations

import argparse
import ast
import csv
import datetime
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute

from course_utils import sandbox

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "nbgrader_config.py"
META = "course_grading"          # notebook metadata key: the faults and tampering found in a submission
FAULT = "GradingFault"           # the ename of the error put into graded cells a fault skipped
TAMPERING = "TamperingDetected"  # the ename of the error put into the graded cells of a tampered exercise
RECORD = "grading.json"          # autograded/<student>/<chapter>/grading.json: what was graded, and why not
GRADER_VERSION = "2"             # part of every fingerprint: bump it to regrade everything
BACKUPS_KEPT = 20


def chapters(root: Path = REPO) -> list[str]:
    """The chapters: folders ``solutions/chNN_*`` that hold a notebook, in order."""
    return sorted(p.name for p in (root / "solutions").glob("ch*") if any(p.glob("*.ipynb")))


def chapter_notebook(chapter: str, root: Path = REPO) -> Path:
    """The one solution notebook of ``chapter``."""
    nbs = sorted((root / "solutions" / chapter).glob("*.ipynb"))
    if len(nbs) != 1:
        raise FileNotFoundError(f"expected one notebook in solutions/{chapter}, found {len(nbs)}")
    return nbs[0]


def exercise_of(grade_id: str) -> str:
    """``"ex3_beam-hidden"`` -> ``"ex3_beam"``; a name without a suffix is its own exercise."""
    return grade_id.rsplit("-", 1)[0] if grade_id.endswith(("-visible", "-hidden")) else grade_id


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # nbgrader runs `alembic` by name when it creates a gradebook.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("NBGRADER_EXECUTION", None)
    return env


def nbgrader(*args: str, course: Path, check: bool = True,
             env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in the course directory ``course`` (which holds the config)."""
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"], cwd=course,
                          env={**_env(), **(env or {})}, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


def new_course(chapter_names: list[str], root: Path = REPO) -> Path:
    """A temporary course directory with the config and the given chapters' sources."""
    course = Path(tempfile.mkdtemp(prefix="nbgrader-course-"))
    shutil.copy(root / "nbgrader_config.py", course / "nbgrader_config.py")
    for ch in chapter_names:
        shutil.copytree(root / "solutions" / ch, course / "solutions" / ch,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        nbgrader("generate_assignment", ch, "--force", course=course)
    return course


def release(root: Path = REPO, chapter_names: list[str] | None = None) -> list[Path]:
    """Regenerate ``notebooks/<chapter>/`` from ``solutions/<chapter>/`` for every chapter."""
    written = []
    names = chapter_names or chapters(root)
    course = new_course(names, root)
    try:
        for ch in names:
            target = root / "notebooks" / ch
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(course / "notebooks" / ch, target)
            written.extend(sorted(target.glob("*.ipynb")))
    finally:
        shutil.rmtree(course, ignore_errors=True)
    return written


@dataclass
class CellGrade:
    """The grade of one graded cell of a submission."""

    grade_id: str
    score: float
    max_score: float
    manual: bool                  # a written answer, graded by hand
    error: str | None = None      # "Name: message" of the error the cell raised, if any

    @property
    def exercise(self) -> str:
        return exercise_of(self.grade_id)



@dataclass
class NotebookGrades:
    """Every graded cell of one submitted notebook, plus errors raised anywhere in it."""

    cells: list[CellGrade]
    errors: list[str] = field(default_factory=list)  # errors raised outside graded cells
    feedback: Path | None = None
    faults: list[str] = field(default_factory=list)  # why it was not graded as it stands (one line each)
    tampering: dict[str, list[str]] = field(default_factory=dict)  # test cell -> what was changed

    @property
    def auto_score(self) -> float:
        return sum(c.score for c in self.cells if not c.manual)

    @property
    def auto_max(self) -> float:
        return sum(c.max_score for c in self.cells if not c.manual)

    @property
    def reason(self) -> str:
        """One line for people: the faults, then tampering, or ``""``."""
        parts = list(self.faults)
        if self.tampering:
            exercises = sorted({exercise_of(g) for g in self.tampering})
            what = sorted({w for v in self.tampering.values() for w in v})
            parts.append(f"tampering detected in {', '.join(exercises)} (0 points there): {'; '.join(what)}")
        return " | ".join(parts)[:500]

    def by_exercise(self) -> dict[str, tuple[float, float, bool, list[str]]]:
        """``exercise -> (score, max_score, manual, errors)`` in notebook order."""
        out: dict[str, tuple[float, float, bool, list[str]]] = {}
        for c in self.cells:
            s, m, manual, errs = out.get(c.exercise, (0.0, 0.0, c.manual, []))
            out[c.exercise] = (s + c.score, m + c.max_score, manual, errs + ([c.error] if c.error else []))
        return out

    def table(self) -> str:
        """A per-exercise score table for people (with the faults under it, if any)."""
        rows = [("exercise", "score", "status")]
        for ex, (s, m, manual, errs) in self.by_exercise().items():
            status = ("graded by hand" if manual else "ok" if s == m else (errs[0] if errs else "failed"))
            rows.append((ex, f"{s:g} / {m:g}", status if len(status) <= 150 else status[:147] + "..."))
        rows.append(("total (autograded)", f"{self.auto_score:g} / {self.auto_max:g}", ""))
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(r[1]) for r in rows)
        lines = [f"{a:<{w0}}  {b:>{w1}}  {c}".rstrip() for a, b, c in rows]
        lines.insert(1, "-" * len(lines[0]))
        lines.insert(len(lines) - 1, "-" * len(lines[0]))
        if self.reason:
            lines.append(f"fault: {self.reason}")
        return "\n".join(lines)


def _errors_by_cell(nb: NotebookNode) -> tuple[dict[str, str], list[str]]:
    """Errors raised in a notebook: ``({grade_id: error} of graded cells, [errors elsewhere])``.

    Cells tagged ``raises-exception`` (a deliberate demonstration of an error) are skipped.
    """
    graded, elsewhere = {}, []
    for cell in nb.cells:
        if "raises-exception" in cell.metadata.get("tags", []):
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                msg = f"{out.get('ename')}: {out.get('evalue')}"
                meta = cell.metadata.get("nbgrader", {})
                if meta.get("grade"):
                    graded.setdefault(meta["grade_id"], msg)
                else:
                    elsewhere.append(msg)
    return graded, elsewhere


# --- intake: what nbgrader is given ---------------------------------------------------------

def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _graded_ids(nb: NotebookNode) -> list[str]:
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade_id")]


def intake(submitted: Path, chapter: str, release: Path, dest: Path, root: Path = REPO) -> list[str]:
    """Check one submission, write what nbgrader should grade to ``dest``, return the faults.

    A notebook that cannot be graded as it stands (not valid JSON, another chapter's notebook,
    none of the chapter's graded cells) is replaced by the blank release marked ``not_run``: it
    gets 0 and the reason, without a kernel. Graded cells that were deleted are put back from
    the release (their tests then grade what is there), and cells whose type was changed get
    their type back; both are reported.
    """
    blank = nbformat.read(release, as_version=4)
    try:
        if submitted.is_dir():
            raise ValueError("a folder, not a notebook file")
        nb = nbformat.reads(submitted.read_text(encoding="utf-8"), as_version=4)
        nbformat.validate(nb)
    except Exception as e:   # JSON, encoding, schema: all mean "not a notebook we can grade"
        kind = ("not valid JSON" if isinstance(e, (json.JSONDecodeError, nbformat.reader.NotJSONError))
                else "not a valid notebook")
        return _set_aside(blank, dest, f"{submitted.name} is {kind} ({_one_line(e, 120)}); graded as blank")
    want = _graded_ids(blank)
    have = set(_graded_ids(nb))
    if not have & set(want):
        for other in sorted(set(chapters(root)) | set(chapters(REPO))):
            home = root if other in chapters(root) else REPO
            if other != chapter and have & set(_graded_ids(nbformat.read(chapter_notebook(other, home), 4))):
                return _set_aside(blank, dest, f"this is the notebook of {other}, submitted as {chapter}; "
                                               "graded as blank")
        return _set_aside(blank, dest, f"none of {chapter}'s graded cells are in {submitted.name}; graded as blank")
    faults = []
    template = {c.metadata["nbgrader"]["grade_id"]: c for c in blank.cells if c.metadata.get("nbgrader", {}).get("grade_id")}
    retyped = []
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in template and cell.cell_type != template[gid].cell_type:
            retyped.append(gid)
            new = dict(template[gid])
            new["source"] = cell.source if template[gid].metadata["nbgrader"].get("solution") else template[gid].source
            cell.clear()
            cell.update(NotebookNode(new))
    if retyped:
        faults.append(f"graded cells whose type was changed were given their type back: {', '.join(retyped)}")
    missing = [g for g in want if g not in have]
    if missing:
        position = {g: i for i, g in enumerate(want)}
        for gid in missing:   # after the nearest earlier graded cell that is there, else at the top
            earlier = [i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") in
                       {g for g in want[:position[gid]]}]
            nb.cells.insert(earlier[-1] + 1 if earlier else 0, template[gid])
        faults.append(f"graded cells missing from the submission were put back from the release: {', '.join(missing)}")
    nb.metadata[META] = {"faults": faults}
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dest)
    return faults


def _set_aside(blank: NotebookNode, dest: Path, reason: str) -> list[str]:
    blank.metadata[META] = {"faults": [reason], "not_run": reason}
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(blank, dest)
    return [reason]


def fingerprint(submitted: Path, chapter: str, course: Path, limits: sandbox.Limits) -> str:
    """What a grade depends on: the submission, the chapter's tests, the grader and its limits."""
    h = hashlib.sha256()
    for p in (submitted, chapter_notebook(chapter, course)):
        h.update(p.read_bytes() if p.is_file() else b"<not a file>")
    h.update(GRADER_VERSION.encode())
    h.update(json.dumps(limits.to_env(), sort_keys=True).encode())
    return h.hexdigest()


def _submitted_notebook(folder: Path, nb_name: str) -> Path:
    """The notebook to grade in ``submitted/<student>/<chapter>/``: the chapter's name, else the only one."""
    right = folder / f"{nb_name}.ipynb"
    others = sorted(folder.glob("*.ipynb"))
    return right if right.exists() or len(others) != 1 else others[0]


def grade_chapter(course: Path, chapter: str, submissions: Mapping[str, Path], *, force: bool = False,
                  feedback: bool = True, limits: sandbox.Limits | None = None) -> dict[str, NotebookGrades]:
    """Grade ``{student: notebook}`` for ``chapter`` in ``course``; only what changed unless ``force``.

    One nbgrader run grades every submission that needs it, each in its own sandbox; the
    instructor's ``submitted/`` is never modified (nbgrader reads repaired copies).
    """
    limits = limits or sandbox.Limits.from_env()
    env = limits.to_env()
    staging = Path(tempfile.mkdtemp(prefix="grading-intake-"))
    env["GRADING_HIDE"] = str(staging)       # the kernels must not see the other submissions
    nb_name = chapter_notebook(chapter, course).stem
    release = course / "notebooks" / chapter / f"{nb_name}.ipynb"
    todo = {}
    try:
        for student, path in submissions.items():
            fp = fingerprint(path, chapter, course, limits)
            record = course / "autograded" / student / chapter / RECORD
            if not force and record.exists() and json.loads(record.read_text()).get("fingerprint") == fp:
                continue
            todo[student] = (fp, intake(path, chapter, release, staging / student / chapter / f"{nb_name}.ipynb",
                                        course))
        if todo:
            proc = nbgrader("autograde", chapter, "--force", f"--CourseDirectory.submitted_directory={staging}",
                            course=course, check=False, env=env)
            for student, (fp, faults) in todo.items():
                out = course / "autograded" / student / chapter
                if not (out / f"{nb_name}.ipynb").exists():
                    tail = [ln for ln in proc.stderr.splitlines() if "ERROR" in ln][-1:] or ["no log"]
                    faults = faults + [f"nbgrader could not grade it ({_one_line(tail[0], 150)})"]
                    out.mkdir(parents=True, exist_ok=True)
                    (out / RECORD).write_text(json.dumps({"fingerprint": None, "faults": faults}))
                else:
                    (out / RECORD).write_text(json.dumps({"fingerprint": fp, "graded": time.time()}))
        if feedback:
            nbgrader("generate_feedback", chapter, "--force", course=course, check=False)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return read_grades(course, chapter, list(submissions))


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


def autograde_in(course: Path, chapter: str, submissions: Mapping[str, Path],
                 feedback: bool = False, limits: sandbox.Limits | None = None) -> dict[str, NotebookGrades]:
    """Submit ``{student: notebook}`` to ``chapter`` of ``course``, autograde all of them, read the grades."""
    return grade_chapter(course, chapter, submissions, force=True, feedback=feedback, limits=limits)


def grade(notebook: Path, root: Path = REPO, student: str = "you") -> NotebookGrades:
    """Grade one learner notebook with the hidden tests of its chapter, in a throwaway course.

    The chapter is the notebook's folder name (``notebooks/ch01_seq2seq_rnn/...``).
    """
    notebook = Path(notebook).resolve()
    chapter = notebook.parent.name
    if chapter not in chapters(root):
        raise SystemExit(f"{notebook} is in the folder {chapter!r}, which is not a chapter: a notebook is "
                         f"graded with the tests of the chapter folder it sits in ({', '.join(chapters(root))})")
    course = new_course([chapter], root)
    try:
        return autograde_in(course, chapter, {student: notebook})[student]
    finally:
        shutil.rmtree(course, ignore_errors=True)


# --- the instructor's autograde -----------------------------------------------------------------

def backup_gradebook(root: Path = REPO) -> Path | None:
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


def instructor_autograde(root: Path = REPO, force: bool = False) -> dict[tuple[str, str], NotebookGrades]:
    """Autograde ``submitted/<student>/<chapter>/``, write feedback, ``grades.csv`` and a fault summary."""
    submitted = root / "submitted"
    folders = sorted(p for p in submitted.glob("*/*") if p.is_dir()) if submitted.exists() else []
    if not folders:
        raise SystemExit("nothing to grade: put submissions in submitted/<student>/<chapter>/<notebook>.ipynb")
    iso = sandbox.isolation()
    limits = sandbox.Limits.from_env()
    print(f"limits: {limits.describe()} (GRADING_* variables change them)")
    for w in iso.warnings:
        print(f"WARNING: {w}")
    backup = backup_gradebook(root)
    if backup:
        print(f"gradebook backed up to {backup.relative_to(root)}")
    for private in ("submitted", "autograded", "feedback"):   # other students' work stays out of reach
        (root / private).mkdir(exist_ok=True)
        os.chmod(root / private, 0o700)
    known = chapters(root)
    results: dict[tuple[str, str], NotebookGrades] = {}
    faults: dict[tuple[str, str], str] = {}
    for ch in sorted({f.name for f in folders}):
        students = {f.parent.name: f for f in folders if f.name == ch}
        if ch not in known:
            for s in students:
                faults[(s, ch)] = f"submitted/{s}/{ch} is not a chapter folder ({', '.join(known)}); not graded"
            continue
        nb_name = chapter_notebook(ch, root).stem
        update_gradebook_tests(root, ch)
        print(f"autograding {ch}: {len(students)} submissions ...", flush=True)
        subs = {s: _submitted_notebook(f, nb_name) for s, f in students.items()}
        for (s, res) in grade_chapter(root, ch, subs, force=force, limits=limits).items():
            results[(s, ch)] = res
            if res.reason:
                faults[(s, ch)] = res.reason
    if (root / "gradebook.db").exists():
        os.chmod(root / "gradebook.db", 0o600)
    write_grades_csv(root, faults)
    print(f"feedback in {root / 'feedback'}, grades in {root / 'grades.csv'}")
    print(f"faults: {len(faults)} of {len(folders)} submissions" + (":" if faults else ""))
    for (s, ch), why in sorted(faults.items()):
        print(f"  {s}/{ch}: {why}")
    return results


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


def execute(path: Path, timeout: int = 600) -> None:
    """Execute notebook(s) in place, in their own folder, keeping outputs (for solutions/).

    The kernel is the course's own Python (``sandbox.kernel_manager``), whatever ``python3``
    kernels the machine has.
    """
    from jupyter_core.utils import run_sync
    from nbclient import NotebookClient

    paths = sorted(Path(path).glob("*/*.ipynb")) if Path(path).is_dir() else [Path(path)]
    for p in paths:
        nb = nbformat.read(p, as_version=4)
        # No per-cell timestamps: they would change the release on every execution.
        km = sandbox.kernel_manager()
        try:
            NotebookClient(nb, km=km, timeout=timeout, record_timing=False,
                           resources={"metadata": {"path": str(p.parent)}}).execute()
        finally:
            if km.has_kernel:
                run_sync(km.shutdown_kernel)(now=True)
        nbformat.write(nb, p)
        print(f"executed {p}")


# --- nbgrader's execute step, sandboxed (see course_utils.sandbox) ------------------------------

class _Stop(Exception):
    pass


def _error(ename: str, evalue: str) -> NotebookNode:
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def _is_test(cell) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


class SandboxedExecute(Execute):
    """nbgrader's ``Execute`` in a :class:`Box`, with the limits and the tamper guard."""

    def preprocess(self, nb, resources=None, km=None):
        report = nb.metadata.get(META, {})
        report.setdefault("faults", [])
        report["tampering"] = {}
        self._report = report
        self._run: set[int] = set()
        if report.get("not_run"):
            self._finish(nb, f"not graded: {report['not_run']}")
            return nb, resources
        self.limits = sandbox.Limits.from_env()
        self.interrupt_on_timeout = False
        self._deadline = time.monotonic() + self.limits.notebook_s
        self._stopped = self._guarded = False
        chapter = (resources or {}).get("nbgrader", {}).get("assignment")
        solution = Path.cwd() / "solutions" / str(chapter)   # nbgrader runs in the course
        sources = sorted(solution.glob("*.ipynb")) if chapter else []
        self._bindings = sandbox.chapter_bindings(sources[0]) if len(sources) == 1 else {}
        course = Path.cwd()
        hide = [course / n for n in ("gradebook.db", "submitted", "autograded", "feedback", "gradebook-backups",
                                     "grades.csv")]
        hide += [Path(p) for p in os.environ.get("GRADING_HIDE", "").split(os.pathsep) if p]
        box = self._box = sandbox.Box(hide)
        self.shutdown_kernel = "immediate"
        resources = resources if resources is not None else {}
        resources.setdefault("metadata", {})["path"] = str(box.work)
        try:
            super().preprocess(nb, resources)
        except _Stop:
            pass
        except Exception as e:   # e.g. the kernel could not start: the fault stays with this notebook
            self._fault(f"the kernel failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        finally:
            box.close()
        self._finish(nb, f"not run: {report['faults'][-1]}" if report["faults"] else "not run")
        return nb, resources

    def create_kernel_manager(self):
        self.km = self._box.kernel_manager()
        return self.km

    def _fault(self, reason: str) -> None:
        self._report["faults"].append(reason)

    def _finish(self, nb, why_not_run: str) -> None:
        tampered = {k.rsplit("-", 1)[0] for k in self._report["tampering"]}
        for index, cell in enumerate(nb.cells):
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type != "code":
                continue
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error" and (out.get("ename") == "MemoryError" or
                                                         "can't allocate memory" in str(out.get("evalue"))):
                    msg = f"ran out of memory in cell {index + 1} (limit {sandbox.Limits.from_env().memory_mb} MiB)"
                    if msg not in self._report["faults"]:
                        self._fault(msg)
            if not _is_test(cell):
                continue
            if index not in self._run:
                cell.outputs = [_error(FAULT, why_not_run)]
            exercise = str(meta.get("grade_id", "")).rsplit("-", 1)[0]
            if exercise in tampered:
                what = "; ".join(sorted({w for k, v in self._report["tampering"].items()
                                         if k.rsplit("-", 1)[0] == exercise for w in v}))[:300]
                cell.outputs.append(_error(TAMPERING, f"the notebook changed what the tests rely on: {what}"))
        nb.metadata[META] = self._report

    def _guard(self, expr: str) -> list[str]:
        msg_id = self.kc.execute("", silent=True, store_history=False, user_expressions={"r": expr})
        reply = self.wait_for_reply(msg_id)
        r = (reply or {}).get("content", {}).get("user_expressions", {}).get("r", {})
        if r.get("status") != "ok":
            return [f"the tamper guard failed: {r.get('ename')}: {r.get('evalue')}"]
        try:
            found = json.loads(ast.literal_eval(r["data"]["text/plain"]))
            assert isinstance(found, list)
            return [str(f) for f in found]
        except (KeyError, ValueError, SyntaxError, AssertionError):
            return ["the tamper guard's answer was replaced"]

    def preprocess_cell(self, cell, resources, index):
        # Cells are named by their position counting from 1 (the first cell of the notebook is cell 1).
        if self._stopped:
            return cell, resources
        remaining = self._deadline - time.monotonic()
        try:
            if remaining < 1:
                self._stop(f"hung: the notebook ran over its time limit of {self.limits.notebook_s:g} s "
                           f"(stopped before cell {index + 1})")
            self.timeout = int(max(1, min(self.limits.cell_s, remaining)))
            if not self._guarded:
                self._guarded = True
                out = self._guard("__import__('course_utils.tamper_guard', fromlist=['_']).install("
                                  f"{json.dumps(json.dumps(self._bindings))})")
                if out != ["installed"]:
                    self._fault(f"the grader could not set up its tamper guard: {out}")
            test = _is_test(cell)
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            found = []
            if test:
                found += self._guard(self._check_expr(cell))
            self._run.add(index)
            cell = self.execute_cell(cell, index, store_history=True)
            if test:
                found += self._guard(self._check_expr(cell))
                if found:
                    self._report["tampering"][grade_id] = sorted(set(found))
            if self.km.provisioner and getattr(self.km.provisioner, "process", None):
                n = sandbox.descendants(self.km.provisioner.process.pid) - (1 if sandbox.isolation().unshare else 0)
                if n > self.limits.children:
                    self._stop(f"forked without end: {n} processes after cell {index + 1} "
                               f"(limit {self.limits.children}); stopped")
        except CellTimeoutError:
            self._run.discard(index)
            self._stop(f"hung: cell {index + 1} ran past the time limit of {self.timeout} s "
                       f"({self.limits.notebook_s:g} s per notebook, {self.limits.cell_s:g} s per cell)")
        except DeadKernelError:
            self._run.discard(index)
            code = self.km.provisioner.process.poll() if getattr(self.km.provisioner, "process", None) else None
            self._stop(f"the kernel died in cell {index + 1} (exit status {code}; memory limit "
                       f"{self.limits.memory_mb} MiB)")
        return cell, resources

    def _check_expr(self, cell) -> str:
        names = json.dumps(json.dumps(sandbox.names_read(cell.source)))
        return f"__import__('course_utils.tamper_guard', fromlist=['_']).check({names})"

    def _stop(self, reason: str) -> None:
        self._stopped = True
        self._fault(reason)
        raise _Stop(reason)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.grading", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade", help="grade one notebook with the hidden tests")
    g.add_argument("notebook", type=Path)
    sub.add_parser("release", help="regenerate notebooks/ from solutions/")
    a = sub.add_parser("autograde", help="grade submitted/, write feedback and grades.csv")
    a.add_argument("--force", action="store_true", help="regrade every submission, changed or not")
    e = sub.add_parser("execute", help="re-execute notebooks in place")
    e.add_argument("path", type=Path, nargs="?", default=REPO / "solutions")
    args = parser.parse_args(argv)
    if args.command == "grade":
        if not args.notebook.exists():
            raise SystemExit(f"no such notebook: {args.notebook}")
        for w in sandbox.isolation().warnings:
            print(f"note: {w}")
        print(f"grading {args.notebook} (this runs the whole notebook; limits: "
              f"{sandbox.Limits.from_env().describe()}) ...", flush=True)
        print(grade(args.notebook).table())
    elif args.command == "release":
        for p in release():
            print(f"wrote {p.relative_to(REPO)}")
    elif args.command == "autograde":
        instructor_autograde(force=args.force)
    elif args.command == "execute":
        execute(args.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
