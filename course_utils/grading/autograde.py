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
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from course_utils.grading import reference, sandbox
from course_utils.grading.course import (
    chapter_notebook,
    chapters,
    course_root,
    nbgrader,
    new_course,
)
from course_utils.grading.feedback import sanitise_html_file
from course_utils.grading.gradebook import (
    backup_gradebook,
    read_grades,
    update_gradebook_tests,
    write_grades_csv,
)
from course_utils.grading.intake import fingerprint, intake, one_line, submitted_notebook
from course_utils.grading.results import RECORD, NotebookGrades

UNSANDBOXED = "GRADING_UNSANDBOXED"   # =1: let `make autograde` grade without bubblewrap (trusted work only)


def _last_error(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "ERROR" in ln or "Error" in ln]
    return one_line((errors or lines or ["no log"])[-1], 150)


def grade_chapter(course: Path, chapter: str, submissions: Mapping[str, Path], *, force: bool = False,
                  feedback: bool = True, limits: sandbox.Limits | None = None,
                  base: Path | None = None) -> dict[str, NotebookGrades]:
    """Grade ``{student: notebook}`` for ``chapter`` in ``course``; only what changed unless ``force``.

    ``base``: the folder the submissions were collected in (``submitted/``): no link between it
    and a notebook is followed. The instructor's ``submitted/`` is never modified (nbgrader
    reads rebuilt copies from a staging folder the kernels cannot see).
    """
    limits = limits or sandbox.Limits.from_env()
    # Every submission is held to the solution's own run (verdict.py); made once, then cached.
    env = {**limits.to_env(), reference.ENV: str(reference.ensure(course, chapter, limits))}
    nb_name = chapter_notebook(chapter, course).stem
    release = course / "notebooks" / chapter / f"{nb_name}.ipynb"
    graded = []
    for student, path in submissions.items():
        fp = fingerprint(path, chapter, course, limits, base)
        out = course / "autograded" / student / chapter
        record = out / RECORD
        if not force and record.exists() and json.loads(record.read_text()).get("fingerprint") == fp:
            continue
        staging = Path(tempfile.mkdtemp(prefix="grading-intake-"))
        try:
            faults = intake(path, chapter, release, staging / student / chapter / f"{nb_name}.ipynb", course, base)
            proc = nbgrader("autograde", chapter, "--force", f"--student={student}",
                            f"--CourseDirectory.submitted_directory={staging}", course=course, check=False,
                            env=env, timeout=limits.notebook_s + 300)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        if proc.returncode != 0 or not (out / f"{nb_name}.ipynb").exists():
            faults = faults + [f"nbgrader could not grade it ({_last_error(proc.stderr)})"]
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True, exist_ok=True)
            (out / RECORD).write_text(json.dumps({"fingerprint": None, "faults": faults}))
        else:
            (out / RECORD).write_text(json.dumps({"fingerprint": fp, "graded": time.time()}))
            graded.append(student)
    if feedback and graded:
        nbgrader("generate_feedback", chapter, "--force", course=course, check=False)
        for student in submissions:   # nbgrader rewrote every student's feedback of the chapter
            html = course / "feedback" / student / chapter / f"{nb_name}.html"
            if student not in graded:
                if html.exists():
                    sanitise_html_file(html)
                continue
            html = course / "feedback" / student / chapter / f"{nb_name}.html"
            if not html.exists():   # made again alone, for this student's own reason
                proc = nbgrader("generate_feedback", chapter, "--force", f"--student={student}", course=course,
                                check=False)
            if html.exists():
                sanitise_html_file(html)
            else:
                record = course / "autograded" / student / chapter / RECORD
                data = json.loads(record.read_text())
                data["faults"] = data.get("faults", []) + [f"no feedback could be made ({_last_error(proc.stderr)})"]
                record.write_text(json.dumps(data))
    return read_grades(course, chapter, list(submissions))


def autograde_in(course: Path, chapter: str, submissions: Mapping[str, Path],
                 feedback: bool = False, limits: sandbox.Limits | None = None) -> dict[str, NotebookGrades]:
    """Submit ``{student: notebook}`` to ``chapter`` of ``course``, autograde all of them, read the grades."""
    return grade_chapter(course, chapter, submissions, force=True, feedback=feedback, limits=limits)


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


def instructor_autograde(root: Path | None = None, force: bool = False) -> dict[tuple[str, str], NotebookGrades]:
    """Autograde ``submitted/<student>/<chapter>/``, write feedback, ``grades.csv`` and a fault summary."""
    root = course_root(root)
    submitted = root / "submitted"
    folders = sorted(p for p in submitted.glob("*/*") if p.is_dir()) if submitted.exists() else []
    if not folders:
        raise SystemExit("nothing to grade: put submissions in submitted/<student>/<chapter>/<notebook>.ipynb")
    iso = sandbox.isolation()
    if not iso.sandboxed:
        if os.environ.get(UNSANDBOXED) != "1":
            raise SystemExit("refusing to autograde: submissions would run without a sandbox.\n  "
                             + "\n  ".join(iso.warnings) + f"\n(set {UNSANDBOXED}=1 to grade work you trust anyway)")
        print(f"WARNING: {UNSANDBOXED}=1: grading WITHOUT A SANDBOX; a submission can read and write "
              "everything you can", flush=True)
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
        subs = {s: submitted_notebook(f, nb_name) for s, f in students.items()}
        try:
            graded = grade_chapter(root, ch, subs, force=force, limits=limits, base=submitted)
        except RuntimeError as e:   # the solution's own run failed: nothing of this chapter can be graded
            print(f"ERROR: {e}", flush=True)
            for s in students:
                faults[(s, ch)] = f"not graded: {e}"
            continue
        for (s, res) in graded.items():
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
