"""Autograding: a learner's own notebook (``grade``), a chapter's submissions, the instructor's class.

Each submission is graded on its own: its own intake (``intake.py``), its own nbgrader process
(``nbgrader autograde --student``), its own sandbox. Whatever one submission does (bad
metadata, a crash inside nbgrader, a huge output, a hang) stays in that process: the student
gets a grade of 0 for what did not run and the reason from *their* run, and the next student
is graded exactly as if it were alone.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from html import escape as html_escape
from pathlib import Path

from course_grading import gradebook, late, parallel, reference, sandbox, withhold
from course_grading.course import (
    chapter_notebook,
    chapters,
    course_root,
    grader_memory_mb,
    nbgrader,
    new_course,
    origin,
)
from course_grading.feedback import mark_pending, sanitise_html_file
from course_grading.gradebook import (
    backup_gradebook,
    read_grades,
    update_gradebook_tests,
    write_grades_csv,
)
from course_grading.intake import fingerprint, submitted_notebook
from course_grading.results import RECORD, NotebookGrades
from course_utils.messages import notebook_language

UNSANDBOXED = "GRADING_UNSANDBOXED"   # =1: let `make autograde` grade without bubblewrap (trusted work only)


def grade_chapter(course: Path, chapter: str, submissions: Mapping[str, Path], *, force: bool = False,
                  feedback: bool = True, limits: sandbox.Limits | None = None,
                  base: Path | None = None, jobs: int = 1, progress: bool = False) -> dict[str, NotebookGrades]:
    """Grade ``{student: notebook}`` for ``chapter`` in ``course``; only what changed unless ``force``.

    ``base``: the folder the submissions were collected in (``submitted/``): no link between it
    and a notebook is followed. The instructor's ``submitted/`` is never modified (nbgrader
    reads rebuilt copies from a staging folder the kernels cannot see). ``jobs``: how many
    submissions are graded at a time, each in its own nbgrader process and sandbox, into its own
    copy of the gradebook; the results are merged into the gradebook by this process alone, one
    student at a time (``parallel.py``), so ``jobs`` never changes a grade.
    """
    limits = limits or sandbox.Limits.from_env()
    nb_name = chapter_notebook(chapter, course).stem
    todo = _to_grade(course, chapter, submissions, limits, base, force)
    graded = []
    if todo:
        release = course / "notebooks" / chapter / f"{nb_name}.ipynb"
        graded = _grade_in_parallel(course, chapter, todo, release, limits, base, jobs, progress)
    # Feedback is made again for every submission of the chapter, graded now or not: a grader may have
    # marked written answers in formgrader since the last run, and the feedback must show those marks.
    if feedback and (graded or _autograded(course, chapter, submissions)):
        _make_feedback(course, chapter, submissions, nb_name)
    return read_grades(course, chapter, list(submissions))


def _to_grade(course: Path, chapter: str, submissions: Mapping[str, Path], limits: sandbox.Limits,
              base: Path | None, force: bool) -> dict[str, tuple[Path, str]]:
    """``{student: (notebook, fingerprint)}`` of the submissions to grade now: all of them with
    ``force``, else those whose fingerprint (what their grade depends on) changed since their last grading."""
    todo: dict[str, tuple[Path, str]] = {}
    for student, path in submissions.items():
        fp = fingerprint(path, chapter, course, limits, base)
        record = course / "autograded" / student / chapter / RECORD
        if not force and record.exists() and json.loads(record.read_text()).get("fingerprint") == fp:
            continue
        todo[student] = (path, fp)
    return todo


def _grade_in_parallel(course: Path, chapter: str, todo: Mapping[str, tuple[Path, str]], release: Path,
                       limits: sandbox.Limits, base: Path | None, jobs: int, progress: bool) -> list[str]:
    """Grade ``todo`` (``jobs`` at a time, each against a snapshot of the gradebook), merge each result
    into the gradebook as it comes, and return the students graded without an error."""
    # Every submission is held to the solution's own run (verdict.py); made once, then cached.
    env = {**limits.to_env(), reference.ENV: str(reference.ensure(course, chapter, limits))}
    snap_dir = Path(tempfile.mkdtemp(prefix="grading-snapshot-"))
    os.chmod(snap_dir, 0o700)
    graded = []
    try:
        snapshot = parallel.snapshot_gradebook(course, snap_dir)
        pool = ThreadPoolExecutor(max_workers=max(1, min(jobs, len(todo))), thread_name_prefix="grading")
        running = {pool.submit(parallel.grade_one, course, chapter, student, path, release, snapshot,
                               limits, env, base): student for student, (path, _) in todo.items()}
        try:
            for n, done in enumerate(as_completed(running), 1):
                student = running[done]
                result = done.result()
                if _take_result(course, chapter, student, result, todo[student][1]):
                    graded.append(student)
                if progress:
                    print(f"  [{n}/{len(todo)}] {student} ({result.seconds:.0f} s)"
                          + (f": {result.error}" if result.error else ""), flush=True)
        except BaseException:   # Ctrl-C or a gradebook error: start nothing more
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        finally:
            pool.shutdown(wait=True)
    finally:
        shutil.rmtree(snap_dir, ignore_errors=True)
    return graded


def _take_result(course: Path, chapter: str, student: str, result, fp: str) -> bool:
    """Merge one submission's result into the gradebook (this process is its one writer) and write
    the student's grading record: its fingerprint if it was graded, else its faults. Whether it was."""
    try:
        parallel.merge(course, chapter, result)
    finally:
        parallel.discard(result)
    record = course / "autograded" / student / chapter / RECORD
    if result.error:
        record.write_text(json.dumps({"fingerprint": None, "faults": result.faults + [result.error]}))
        return False
    record.write_text(json.dumps({"fingerprint": fp, "graded": time.time()}))
    return True


FEEDBACK_S = 120   # what making one student's feedback may take; nbgrader's own HTML export takes seconds
FALLBACK = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Feedback</title></head>
<body><h1>Feedback for {chapter}</h1>
<p>The grader could not make this feedback page: {why}. Your notebook was graded; your instructor has
your scores and can tell you more.</p></body></html>
"""


def _make_feedback(course: Path, chapter: str, submissions: Mapping[str, Path], nb_name: str) -> None:
    """Every autograded student's feedback of ``chapter``, made again (a grader may have marked written
    answers in formgrader since the last run, and the feedback must show those marks).

    nbgrader makes the whole chapter's at once, in a process with a memory cap and a time limit. A
    student whose page is missing after it (the run stopped on someone's notebook) gets their own run,
    with the same limits; where that fails too, a short page says so (and the instructor's record).
    """
    students = [s for s in submissions if (course / "autograded" / s / chapter).is_dir()]
    html = {s: course / "feedback" / s / chapter / f"{nb_name}.html" for s in students}
    for path in html.values():
        path.unlink(missing_ok=True)
    # One student's alone: nbgrader would otherwise rewrite every student's page, uncleaned.
    only = [f"--student={students[0]}"] if len(students) == 1 else []
    nbgrader("generate_feedback", chapter, "--force", *only, course=course, check=False,
             timeout=FEEDBACK_S * max(1, len(students)), memory_mb=grader_memory_mb())
    pending = gradebook.pending_marks(course, chapter, nb_name, students)
    for student in students:
        proc = None
        if not html[student].exists():   # made again alone, for this student's own reason
            proc = nbgrader("generate_feedback", chapter, "--force", f"--student={student}", course=course,
                            check=False, timeout=FEEDBACK_S, memory_mb=grader_memory_mb())
        if html[student].exists():
            lang = _language(course / "autograded" / student / chapter / f"{nb_name}.ipynb")
            if pending.get(student):
                html[student].write_text(mark_pending(html[student].read_text(encoding="utf-8", errors="replace"),
                                                      pending[student], lang), encoding="utf-8")
            sanitise_html_file(html[student], lang)
            continue
        why = f"it was too large or took too long ({parallel.last_error(proc.stderr if proc else '')})"
        html[student].parent.mkdir(parents=True, exist_ok=True)
        html[student].write_text(FALLBACK.format(chapter=chapter, why=html_escape(why)))
        record = course / "autograded" / student / chapter / RECORD
        if record.exists():
            data = json.loads(record.read_text())
            data["faults"] = data.get("faults", []) + [f"no feedback could be made: {why}"]
            record.write_text(json.dumps(data))


def _language(autograded: Path) -> str | None:
    """The learner's language, which intake wrote into the notebook it graded (None: English)."""
    try:
        return notebook_language(json.loads(autograded.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def _autograded(course: Path, chapter: str, submissions: Mapping[str, Path]) -> bool:
    """Whether any of ``submissions`` has an autograded notebook to make feedback from."""
    return any((course / "autograded" / s / chapter).is_dir() for s in submissions)


def autograde_in(course: Path, chapter: str, submissions: Mapping[str, Path], feedback: bool = False,
                 limits: sandbox.Limits | None = None, jobs: int = 1) -> dict[str, NotebookGrades]:
    """Submit ``{student: notebook}`` to ``chapter`` of ``course``, autograde all of them (``jobs``
    at a time), read the grades."""
    return grade_chapter(course, chapter, submissions, force=True, feedback=feedback, limits=limits, jobs=jobs)


def grade(notebook: Path, root: Path | None = None, student: str = "you") -> NotebookGrades:
    """Grade one learner notebook with the hidden tests of its chapter, in a throwaway course.

    The chapter is the notebook's folder name (``notebooks/ch01_seq2seq_rnn/...``).
    """
    root = course_root(root)
    notebook = Path(notebook).absolute()
    chapter = notebook.parent.name
    if chapter not in chapters(root):
        raise SystemExit(f"{notebook} is in the folder {chapter!r}, which is not a chapter: a notebook is "
                         f"graded with the tests of the chapter folder it sits in ({', '.join(chapters(root))})")
    course = new_course([chapter], root)
    try:
        return autograde_in(course, chapter, {student: notebook})[student]
    finally:
        shutil.rmtree(course, ignore_errors=True)


def _ensure_probe_secret(root: Path) -> None:
    """A class's hidden probes come from a secret of its own (``withhold.py``): made on the first
    ``make autograde`` of a real course (a throwaway course uses its origin's, or the variable)."""
    path = root / withhold.SECRET_FILE
    if origin(root) != root or os.environ.get(withhold.SECRET_VARIABLE) or path.exists():
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    print(f"made {withhold.SECRET_FILE}: this class's hidden tests draw their probes from it (keep it; "
          "never commit or share it)")


def instructor_autograde(root: Path | None = None, force: bool = False, jobs: int | str | None = None,
                         lms_pending: str = "provisional") -> dict[tuple[str, str], NotebookGrades]:
    """Autograde ``submitted/<student>/<chapter>/``, write feedback, ``grades.csv`` and a fault summary.

    ``jobs``: submissions graded at a time (``None`` or ``"auto"``: from the cores and memory,
    :func:`~course_grading.parallel.default_jobs`). ``lms_pending``: what ``grades_lms.csv`` holds for
    a chapter awaiting hand marks (:data:`~course_grading.gradebook.LMS_PENDING`).
    """
    root = course_root(root)
    submitted = root / "submitted"
    folders = sorted(p for p in submitted.glob("*/*") if p.is_dir()) if submitted.exists() else []
    if not folders:
        raise SystemExit("nothing to grade: put submissions in submitted/<student>/<chapter>/<notebook>.ipynb")
    iso = _sandbox_or_refuse()
    limits = sandbox.Limits.from_env()
    jobs = parallel.parse_jobs(jobs, limits)
    print(f"limits: {limits.describe()} (GRADING_* variables change them); {jobs} at a time "
          f"({parallel.usable_cores()} cores; JOBS=N changes it)")
    for w in iso.warnings:
        print(f"WARNING: {w}")
    _prepare_class(root)
    known = chapters(root)
    results: dict[tuple[str, str], NotebookGrades] = {}
    faults: dict[tuple[str, str], str] = {}
    for ch in sorted({f.name for f in folders}):
        students = {f.parent.name: f for f in folders if f.name == ch}
        if ch not in known:
            for s in students:
                faults[(s, ch)] = f"submitted/{s}/{ch} is not a chapter folder ({', '.join(known)}); not graded"
            continue
        _grade_class_chapter(root, ch, students, results, faults, force=force, limits=limits, jobs=jobs)
    if (root / "gradebook.db").exists():
        os.chmod(root / "gradebook.db", 0o600)
    write_grades_csv(root, faults, lms_pending)
    _print_summary(root, faults, len(folders))
    return results


def autograde_submission(root: Path, chapter: str, student: str) -> NotebookGrades:
    """Regrade ``submitted/<student>/<chapter>/`` as ``make autograde FORCE=1`` grades it (the sandbox or a
    refusal, the gradebook's backup and current tests, the intake, the grading record, the feedback), one
    submission: what formgrader's Autograde button does (``formgrader_api.py``). The CSV exports are
    ``make autograde``'s (they need every submission's faults)."""
    root = Path(root)
    if chapter not in chapters(root):
        raise SystemExit(f"{chapter!r} is not a chapter of this course ({', '.join(chapters(root))})")
    folder = root / "submitted" / student / chapter
    if not folder.is_dir():
        raise SystemExit(f"no submission of {chapter} by {student}: {folder} is not a folder")
    iso = _sandbox_or_refuse()
    for w in iso.warnings:
        print(f"WARNING: {w}")
    limits = sandbox.Limits.from_env()
    _prepare_class(root)
    update_gradebook_tests(root, chapter)
    nb_name = chapter_notebook(chapter, root).stem
    print(f"autograding {chapter} of {student} (limits: {limits.describe()}) ...", flush=True)
    graded = grade_chapter(root, chapter, {student: submitted_notebook(folder, nb_name)}, force=True,
                           limits=limits, base=root / "submitted", progress=True)
    if (root / "gradebook.db").exists():
        os.chmod(root / "gradebook.db", 0o600)
    return graded[student]


def make_feedback(root: Path, chapter: str, student: str | None = None) -> list[Path]:
    """The course's feedback of ``chapter`` (``make autograde``'s: offline math, its own policy, contents by
    exercise, the faults on top) for ``student``, else every autograded student; the pages written."""
    root = Path(root)
    if chapter not in chapters(root):
        raise SystemExit(f"{chapter!r} is not a chapter of this course ({', '.join(chapters(root))})")
    autograded = root / "autograded"
    students = [student] if student else sorted(p.name for p in autograded.glob("*") if (p / chapter).is_dir())
    students = [s for s in students if (autograded / s / chapter).is_dir()]
    if not students:
        raise SystemExit(f"nothing autograded for {chapter}{f' of {student}' if student else ''}: autograde first")
    nb_name = chapter_notebook(chapter, root).stem
    _make_feedback(root, chapter, dict.fromkeys(students), nb_name)
    return [root / "feedback" / s / chapter / f"{nb_name}.html" for s in students]


def _sandbox_or_refuse() -> sandbox.Isolation:
    """The sandbox's isolation on this machine; without one, refuse to grade (unless the instructor
    set ``GRADING_UNSANDBOXED=1`` for work they trust, which is then said loudly)."""
    iso = sandbox.isolation()
    if not iso.sandboxed:
        if os.environ.get(UNSANDBOXED) != "1":
            raise SystemExit("refusing to autograde: submissions would run without a sandbox.\n  "
                             + "\n  ".join(iso.warnings) + f"\n(set {UNSANDBOXED}=1 to grade work you trust anyway)")
        print(f"WARNING: {UNSANDBOXED}=1: grading WITHOUT A SANDBOX; a submission can read and write "
              "everything you can", flush=True)
    return iso


def _prepare_class(root: Path) -> None:
    """Before a class is graded: its probe secret, a backup of its gradebook, and the folders that hold
    students' work closed to everyone but the instructor."""
    _ensure_probe_secret(root)
    backup = backup_gradebook(root)
    if backup:
        print(f"gradebook backed up to {backup.relative_to(root)}")
    if (root / "gradebook.db").exists():   # a due date moved, an extension, a hand mark: the penalty follows
        for ch, student, old, new in late.refresh_penalties(f"sqlite:///{root / 'gradebook.db'}",
                                                            late.configured_percent(root)):
            print(f"late penalty of {student} in {ch}: {old:g} -> {new:g} points (due date, extension or marks changed)")
    for private in ("submitted", "autograded", "feedback"):   # other students' work stays out of reach
        (root / private).mkdir(exist_ok=True)
        os.chmod(root / private, 0o700)


def _grade_class_chapter(root: Path, ch: str, students: Mapping[str, Path],
                         results: dict[tuple[str, str], NotebookGrades], faults: dict[tuple[str, str], str],
                         *, force: bool, limits: sandbox.Limits, jobs: int) -> None:
    """Grade the class's submissions of chapter ``ch`` (``{student: folder}``), adding each student's
    grades to ``results`` and every reason a submission lost points or was not graded to ``faults``."""
    nb_name = chapter_notebook(ch, root).stem
    update_gradebook_tests(root, ch)
    print(f"autograding {ch}: {len(students)} submissions ...", flush=True)
    subs = {s: submitted_notebook(f, nb_name) for s, f in students.items()}
    try:
        graded = grade_chapter(root, ch, subs, force=force, limits=limits, base=root / "submitted", jobs=jobs,
                               progress=True)
    except RuntimeError as e:   # the solution's own run failed: nothing of this chapter can be graded
        print(f"ERROR: {e}", flush=True)
        for s in students:
            faults[(s, ch)] = f"not graded: {e}"
        return
    for (s, res) in graded.items():
        results[(s, ch)] = res
        if res.reason:
            faults[(s, ch)] = res.reason


def _print_summary(root: Path, faults: Mapping[tuple[str, str], str], submissions: int) -> None:
    """Where the feedback and grades are, and every submission's fault."""
    print(f"feedback in {root / 'feedback'}, grades in {root / 'grades.csv'} (per exercise: grades_by_exercise.csv; "
          "one row per student for an LMS: grades_lms.csv)")
    print(f"faults: {len(faults)} of {submissions} submissions" + (":" if faults else ""))
    for (s, ch), why in sorted(faults.items()):
        print(f"  {s}/{ch}: {why}")
