"""The solution's own run, against which the grader holds every submission (``verdict.py``).

For each chapter, the grader runs the solution notebook once, in the same sandbox, with the
same limits and the same ``GRADING`` budget as a submission (``NBGRADER_EXECUTION=autograde``),
and keeps, for every test cell, the checks it made: kind, name, expected value, tolerance, and
whether the expected value is *fixed* (the same bytes when the cell runs again with every global
seed shifted) or depends on the learner's code. The run is cached in
``<course>/.grading-cache/reference/`` (the course the throwaway grading courses were made from),
under a key made of the solution notebook, the course's code (the teaching modules and the
grader), torch's version and CPU kernel, the thread count and the limits; a lock lets parallel graders share one run. The folder is the instructor's
(mode 0700) and, like the rest of the course, not in any box's view.

A solution whose own tests fail cannot be a reference: grading the chapter stops with the
reason, since every submission would be held to a wrong answer.

This module says where a reference is and makes it when it is missing; the run itself is
``reference_run.py``, in a process of its own (it executes the solution with the grader's
executor, ``execution.py``, which reads the reference through this module).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path

from course_grading import sandbox, warm, withhold
from course_grading.course import chapter_notebook, origin
from course_grading.results import GRADER_VERSION

__all__ = ["ENV", "ensure", "reference_path"]

CACHE = ".grading-cache"
ENV = "COURSE_GRADING_REFERENCE"   # the grader tells each nbgrader run where the chapter's reference is


def reference_path(course: Path, chapter: str, limits: sandbox.Limits) -> Path:
    """Where the reference run of ``chapter`` is cached, by what it depends on."""
    import torch

    h = hashlib.sha256(chapter_notebook(chapter, course).read_bytes())
    grader = Path(__file__).resolve().parent
    for code in [*sorted(sandbox.PACKAGE.rglob("*.py")), *sorted(grader.rglob("*.py"))]:
        h.update(code.read_bytes())   # the teaching modules (subpackages too), the checks, and the grader
    key = withhold.probe_key(origin(course), chapter)   # secret probes: their own reference
    h.update(hashlib.sha256(key).digest() if key else b"public probes")
    for part in (GRADER_VERSION, torch.__version__, os.environ.get("ATEN_CPU_CAPABILITY", ""),
                 os.environ.get("OMP_NUM_THREADS", ""), json.dumps(limits.to_env(), sort_keys=True)):
        h.update(b"\0" + part.encode())
    return origin(course) / CACHE / "reference" / f"{chapter}-{h.hexdigest()[:20]}.json"


def ensure(course: Path, chapter: str, limits: sandbox.Limits) -> Path:
    """The reference run of ``chapter`` (made now if it is not cached); raises if the solution fails."""
    path = reference_path(course, chapter, limits)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent.parent, 0o700)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # another grader may be making it: wait, then read its result
        if path.exists():
            return path
        env = {**os.environ, **limits.to_env(), "NBGRADER_EXECUTION": "autograde"}
        tmp = path.with_suffix(".part")
        proc = warm.run_module("course_grading.reference_run", [chapter, str(tmp)], cwd=course, env=env,
                               timeout=limits.notebook_s * 2 + 300)
        if proc.returncode != 0 or not tmp.exists():
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"the reference run of {chapter}'s solution failed, so nothing can be graded "
                               f"against it: {tail}")
        tmp.replace(path)
    return path
