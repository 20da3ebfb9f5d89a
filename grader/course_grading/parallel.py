"""Grading N submissions at a time without two writers on the gradebook.

nbgrader's gradebook is one SQLite file and ``nbgrader autograde`` writes it while it grades
(the student, the submission, a score and a comment per graded cell). Several ``nbgrader
autograde`` processes on one gradebook would meet SQLite's writer lock (``database is locked``
after its busy timeout) at best. So the work is split in two:

1. **Grade, N at a time** (:func:`grade_one`, one thread per running submission, each thread
   waiting on its own processes). Each submission gets a private *scratch* folder (mode 0700, in
   the grader's ``TMPDIR``, which no box can see) holding its rebuilt notebook (``intake``), a
   copy of the gradebook as it was before the chapter's run (a consistent SQLite snapshot), and
   nbgrader's output. Its own ``nbgrader autograde --student`` process then writes only that
   copy and that folder, and starts the submission's kernel in its own sandbox box (bubblewrap,
   its own cgroups): exactly what a serial run does, pointed at private files.
2. **Merge, one writer** (:func:`merge`, in the parent, one submission at a time as each
   finishes). What nbgrader wrote for that student is copied into the instructor's gradebook
   through nbgrader's own API: the student, the submission's timestamp, each notebook's late
   penalty, each graded cell's ``auto_score`` and automatic comment; ``needs_manual_grade``
   follows nbgrader's rule against the gradebook's *current* manual score (a grader may be
   marking in the formgrader meanwhile), except that a mark the grader gave stays graded while
   what it marked did not change (:func:`hand_grade_stands`: a regrade, from ``make autograde
   FORCE=1`` or formgrader's Autograde button, does not send marked answers back to "needs manual
   grading"). The autograded notebook, with the rubric of each written answer inserted beside it
   (``rubric.py``: from the instructor's source, for formgrader's manual grading), is moved into
   ``autograded/<student>/<chapter>/``. A submission whose nbgrader run failed writes nothing
   there: its autograded scores are set to 0 and the reason goes to its student.

A serial run (``jobs=1``) is the same code with one submission at a time, so serial and
parallel runs give the same grades (``tests/test_grading_class.py`` compares them, with a
poisoned submission in the class). Feedback is then made once for the chapter, by the parent.

Each running submission holds up to ``Limits.memory_mb`` in its box, one core (one thread per
kernel: ``OMP_NUM_THREADS``), and an nbgrader process of about 150 MiB; :func:`default_jobs`
takes the smaller of the usable cores and what memory allows.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from course_grading import rubric, sandbox
from course_grading.course import chapter_notebook, exercise_of, grader_memory_mb, nbgrader
from course_grading.intake import Refused, intake, one_line, read_submission

# What nbgrader's exchange puts beside a submitted notebook and later steps need: ``collect``
# writes the time of submission, ``submit`` the secret that ``release_feedback`` names the
# student's feedback with (and that ``fetch_feedback`` finds it by).
EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt")
GRADER_MB = 512   # what one running submission costs besides its box: nbgrader, the launcher, the client


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def physical_memory_mb() -> int | None:
    """The machine's memory in MiB, or None where it cannot be read."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20)
    except (AttributeError, ValueError, OSError):
        return None


def default_jobs(limits: sandbox.Limits) -> int:
    """How many submissions to grade at a time: the usable cores, fewer if memory is short
    (each box may use ``limits.memory_mb``, plus ``GRADER_MB`` for the grader's side)."""
    jobs = usable_cores()
    memory = physical_memory_mb()
    if memory:
        jobs = min(jobs, max(1, int(0.8 * memory) // (limits.memory_mb + GRADER_MB)))
    return max(1, jobs)


def parse_jobs(value: str | int | None, limits: sandbox.Limits) -> int:
    """``--jobs``/``JOBS=``: a positive whole number, or ``auto``/empty for :func:`default_jobs`."""
    if value is None or str(value).strip().lower() in ("", "auto", "0"):
        return default_jobs(limits)
    try:
        jobs = int(str(value).strip())
    except ValueError:
        raise SystemExit(f"--jobs/JOBS must be a positive whole number or 'auto', not {value!r}") from None
    if jobs < 1:
        raise SystemExit(f"--jobs/JOBS must be at least 1, not {jobs}")
    return jobs


def snapshot_gradebook(course: Path, dest_folder: Path) -> Path:
    """A consistent copy of ``course/gradebook.db`` (SQLite's backup API) in ``dest_folder``."""
    dest = dest_folder / "gradebook.db"
    with sqlite3.connect(course / "gradebook.db") as src, sqlite3.connect(dest) as dst:
        src.backup(dst)
    os.chmod(dest, 0o600)
    return dest


@dataclass
class Graded:
    """One submission graded into its scratch folder, waiting to be merged."""

    student: str
    scratch: Path
    faults: list[str] = field(default_factory=list)
    error: str = ""                 # why nbgrader could not grade it ("" when it did)
    seconds: float = 0.0

    @property
    def db(self) -> Path:
        return self.scratch / "gradebook.db"

    def autograded(self, chapter: str) -> Path:
        return self.scratch / "autograded" / self.student / chapter


def last_error(stderr: str) -> str:
    """The line of an nbgrader log that says what went wrong (its last error, else its last line); never
    a line the box wrote (``sandbox.BOX_PREFIX``)."""
    mark = sandbox.BOX_PREFIX.decode()
    lines = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith(mark)]
    errors = [ln for ln in lines if "ERROR" in ln or "Error" in ln]
    return one_line((errors or lines or ["no log"])[-1], 150)


def grade_one(course: Path, chapter: str, student: str, submitted: Path, release: Path, snapshot: Path,
              limits: sandbox.Limits, env: Mapping[str, str] | None = None, base: Path | None = None) -> Graded:
    """Grade one submission into a new private scratch folder (never the instructor's gradebook).

    ``snapshot``: the gradebook copy every submission of the run starts from; ``env``: what the
    nbgrader process is given (the limits, where the chapter's reference run is). The exchange's
    small files next to the submitted notebook (``EXCHANGE_FILES``: the time of submission, for
    late penalties, and the secret that names the student's feedback in the exchange) are kept,
    read as the notebook is: never through a link, a regular file of at most 1 KiB.
    """
    start = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="grading-scratch-"))
    os.chmod(scratch, 0o700)
    try:
        return _grade_into(scratch, course, chapter, student, submitted, release, snapshot, limits,
                           {**limits.to_env(), **(env or {})}, base, start)
    except Exception as e:   # a grader bug on one submission stays with that submission
        return Graded(student, scratch, error=f"the grader failed on it ({type(e).__name__}: {one_line(e, 150)})",
                      seconds=time.monotonic() - start)


def _grade_into(scratch: Path, course: Path, chapter: str, student: str, submitted: Path, release: Path,
                snapshot: Path, limits: sandbox.Limits, env: Mapping[str, str], base: Path | None,
                start: float) -> Graded:
    staging = scratch / "submitted"
    dest = staging / student / chapter / release.name
    faults = intake(submitted, chapter, release, dest, course, base)
    for name in EXCHANGE_FILES:
        extra = submitted.parent / name
        if os.path.lexists(extra):
            try:
                (dest.parent / name).write_bytes(read_submission(extra, base, limit=1024))
            except Refused as e:
                faults.append(f"{name} ignored ({e})")
    shutil.copy(snapshot, scratch / "gradebook.db")
    proc = nbgrader("autograde", chapter, "--force", f"--student={student}",
                    f"--CourseDirectory.submitted_directory={staging}",
                    f"--CourseDirectory.autograded_directory={scratch / 'autograded'}",
                    f"--CourseDirectory.db_url=sqlite:///{scratch / 'gradebook.db'}",
                    course=course, check=False, env=env, timeout=limits.notebook_s + 300,
                    memory_mb=grader_memory_mb())
    graded = Graded(student, scratch, faults, seconds=time.monotonic() - start)
    if proc.returncode != 0 or not (graded.autograded(chapter) / release.name).exists():
        graded.error = f"nbgrader could not grade it ({last_error(proc.stderr)})"
        return graded
    # The rubric of each written answer beside it, from the instructor's source, for formgrader (rubric.py);
    # a rubric that cannot be shown costs the grader its aid, never the student a grade.
    try:
        rubric.add_rubric_cells(graded.autograded(chapter) / release.name, chapter_notebook(chapter, course))
    except Exception as e:
        print(f"WARNING: {student}/{chapter}: no rubric shown beside the written answers ({one_line(e, 150)})",
              file=sys.stderr, flush=True)
    return graded


def merge(course: Path, chapter: str, graded: Graded) -> None:
    """Write what nbgrader stored for ``graded.student`` in its scratch gradebook into the
    course's gradebook (the one writer), and move its autograded folder into place."""
    from nbgrader.api import Gradebook, MissingEntry

    out = course / "autograded" / graded.student / chapter
    before = _answers(out)       # what the grader saw when marking by hand (read before it is replaced)
    after = {} if graded.error else _answers(graded.autograded(chapter))
    shutil.rmtree(out, ignore_errors=True)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as dst:
        dst.update_or_create_student(graded.student)
        if graded.error:   # nothing of this run counts: its autograded scores are 0
            try:
                sub = dst.find_submission(chapter, graded.student)
            except MissingEntry:
                sub = dst.update_or_create_submission(chapter, graded.student)
            for nb in sub.notebooks:
                for g in nb.grades:
                    if g.cell_type == "code":
                        g.auto_score = 0.0
                        g.needs_manual_grade = g.manual_score is not None
            dst.db.commit()
            out.mkdir(parents=True, exist_ok=True)
            return
        with Gradebook(f"sqlite:///{graded.db}") as src:
            got = src.find_submission(chapter, graded.student)
            kwargs = {"timestamp": got.timestamp} if got.timestamp else {}
            dst.update_or_create_submission(chapter, graded.student, **kwargs)
            for snb in got.notebooks:
                dnb = dst.find_submission_notebook(snb.name, chapter, graded.student)
                dnb.late_submission_penalty = snb.late_submission_penalty
                for g in snb.grades:
                    dg = dst.find_grade(g.name, snb.name, chapter, graded.student)
                    kept = hand_grade_stands(dg, g.auto_score, before.get(snb.name), after.get(snb.name))
                    dg.auto_score = g.auto_score
                    dg.needs_manual_grade = not kept and (dg.manual_score is not None or dg.auto_score is None)
                for c in snb.comments:
                    dst.find_comment(c.name, snb.name, chapter, graded.student).auto_comment = c.auto_comment
            dst.db.commit()
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(graded.autograded(chapter), out)


def _answers(folder: Path) -> dict[str, dict[str, str]]:
    """``{notebook: {grade_id: source}}`` of the graded and answer cells of the autograded notebooks in
    ``folder`` (empty where there are none)."""
    import nbformat

    found = {}
    for path in sorted(folder.glob("*.ipynb")) if folder.is_dir() else []:
        try:
            nb = nbformat.read(path, as_version=4)
        except Exception:   # an unreadable old copy: no hand grade is kept on its word
            continue
        found[path.stem] = {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells
                            if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")}
    return found


def hand_grade_stands(grade, new_auto: float | None, before: dict[str, str] | None,
                      after: dict[str, str] | None) -> bool:
    """Whether a grader's mark on ``grade`` still holds after a regrade, so that the cell is not sent back
    to "needs manual grading" (nbgrader's rule sends back every cell with a manual score, on every run).

    It holds when the grader had marked it (a manual score, nothing pending) and what was marked is what
    is graded now: a written answer (or hand-graded code answer) with the same text; a test cell whose
    automatic score is the same and whose exercise's answers have the same text. Without the earlier
    autograded notebook there is nothing to compare with, and nbgrader's rule applies.
    """
    if grade.manual_score is None or grade.needs_manual_grade or before is None or after is None:
        return False
    name = grade.name
    if name not in before or before.get(name) != after.get(name):
        return False
    if grade.cell_type == "markdown" or grade.auto_score is None and new_auto is None:
        return True                 # a written answer: the text the grader read
    if grade.auto_score != new_auto:
        return False
    exercise = exercise_of(name)
    answers = [gid for gid in after if gid != name and exercise_of(gid) == exercise] or list(after)
    return all(before.get(gid) == after.get(gid) for gid in answers)


def discard(graded: Graded) -> None:
    shutil.rmtree(graded.scratch, ignore_errors=True)
