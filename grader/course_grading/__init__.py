"""The course's grader (nbgrader underneath), a package of its own beside the teaching package
``course_utils``, which it imports and which never imports it (docs/grader.md: its modules, its size
per release, which commands install it). One module per idea:

- :mod:`~course_grading.cli` -- ``python -m course_grading {grade,release,autograde,execute}``
- :mod:`~course_grading.course` -- the explicit course root, chapters, nbgrader as a program, release
- :mod:`~course_grading.warm` -- nbgrader and the reference run forked from a process that imported them once
- :mod:`~course_grading.intake` -- a submission read safely and rebuilt from the trusted release
- :mod:`~course_grading.autograde` -- one submission, one chapter, the instructor's class
- :mod:`~course_grading.parallel` -- N submissions at a time, merged into the gradebook by one writer
- :mod:`~course_grading.exchange` -- nbgrader's exchange: its folder, a student's configuration
- :mod:`~course_grading.inbound` -- the exchange's inbound folder: whose each submission is, and when, from the server
- :mod:`~course_grading.collect` -- ``nbgrader collect`` that knows who submitted, and copies files only
- :mod:`~course_grading.late` -- the late policy: a share of the points per day late
- :mod:`~course_grading.execution` -- nbgrader's execute step in the sandbox; the checks' records collected
- :mod:`~course_grading.reference` -- the solution's own run, once per chapter, that submissions are held to
- :mod:`~course_grading.reference_run` -- that run itself, in its own process: the solution executed, its checks written
- :mod:`~course_grading.verdict` -- who decides a test's result: the grader, from plain data, outside the kernel
- :mod:`~course_grading.withhold` -- hidden tests without their expected values; the class's secret probes
- :mod:`~course_grading.sandbox` -- the box: bubblewrap, cgroups, limits
- :mod:`~course_grading.cgroups` -- whole-box memory and process limits (cgroup v1 or v2)
- :mod:`~course_grading.seccomp` -- the system calls the box denies
- :mod:`~course_grading.tamper_guard` -- inside the kernel: restores and flags what a submission replaced
- :mod:`~course_grading.feedback` -- sanitised feedback without hidden tests
- :mod:`~course_grading.formgrader_guard` -- formgrader safe to open: learner HTML cleaned, a Content-Security-Policy, math offline
- :mod:`~course_grading.formgrader_api` -- formgrader's Autograde and Generate Feedback buttons, done as ``make autograde`` does
- :mod:`~course_grading.overwrite` -- nbgrader's "checksum has changed" warning only for a changed read-only cell
- :mod:`~course_grading.gradebook` -- backups, tests stored, grades read, ``grades.csv``
- :mod:`~course_grading.results` -- per-cell grades and a submission's faults
- :mod:`~course_grading.rubric` -- the written questions' rubrics: from the source, beside each answer in formgrader, marks by part in the feedback

The names below are imported lazily: the sandbox's launcher imports this package and must
stay light (no nbgrader).
"""

from __future__ import annotations

import importlib

_WHERE = {
    "course_root": "course", "chapters": "course", "chapter_notebook": "course", "exercise_of": "course",
    "nbgrader": "course", "new_course": "course", "release": "course",
    "fingerprint": "intake", "read_submission": "intake", "rebuild": "intake",
    "grade_chapter": "autograde", "autograde_in": "autograde", "grade": "autograde",
    "instructor_autograde": "autograde",
    "read_grades": "gradebook", "backup_gradebook": "gradebook", "update_gradebook_tests": "gradebook",
    "write_grades_csv": "gradebook",
    "execute": "execution", "SandboxedExecute": "execution",
    "CellGrade": "results", "NotebookGrades": "results", "META": "results", "FAULT": "results",
    "TAMPERING": "results", "RECORD": "results", "GRADER_VERSION": "results",
    "Limits": "sandbox",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
