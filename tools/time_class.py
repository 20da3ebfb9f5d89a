"""Time ``make autograde`` on a class of copies of a chapter's solution, one and N at a time.

    .venv/bin/python tools/time_class.py --students 30 --jobs 1 2

builds a throwaway course (never the instructor's gradebook) with ``--students`` copies of the
chapter's solution notebook in ``submitted/``, runs ``python -m course_grading autograde
--force --jobs J`` once for each ``J`` in the order given, and prints the seconds, the load average
before and after (the machine may be shared), and the distinct autograded scores (every copy of
the solution must get full marks, whatever ``J``). Run the orders ``1 2`` and ``2 1`` on a shared
machine: the load drifts.

``--modes warm cold`` runs each ``J`` twice: with the grader's fork server (``warm``, the default)
and with a new process for every nbgrader run (``cold``: ``COURSE_GRADING_COLD=1``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import course_grading as grading  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", default="ch03_scaled_dot_product")
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--jobs", nargs="+", default=["1", "2"])
    parser.add_argument("--modes", nargs="+", choices=["warm", "cold"], default=["warm"])
    args = parser.parse_args(argv)
    course = grading.new_course([args.chapter], REPO)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = {}
    try:
        src = grading.chapter_notebook(args.chapter, course)
        for i in range(args.students):
            folder = course / "submitted" / f"s{i:03d}" / args.chapter
            folder.mkdir(parents=True)
            shutil.copy(src, folder / src.name)
        for jobs, mode in [(j, m) for j in args.jobs for m in args.modes]:
            load = os.getloadavg()
            start = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "course_grading", "--root", str(course), "autograde",
                                   "--force", "--jobs", str(jobs)], cwd=course, capture_output=True, text=True,
                                  env={**env, "COURSE_GRADING_COLD": "1" if mode == "cold" else ""})
            seconds = time.monotonic() - start
            if proc.returncode != 0:
                print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
                return 1
            rows = (course / "grades.csv").read_text().splitlines()[1:]
            out[f"{jobs} {mode}"] = {"seconds": round(seconds, 1), "per_submission_s": round(seconds / args.students, 1),
                         "scores": sorted({r.split(",")[4] for r in rows}), "load_before": load,
                         "load_after": os.getloadavg()}
            print(f"jobs={jobs} {mode}: {out[f'{jobs} {mode}']}", flush=True)
    finally:
        shutil.rmtree(course, ignore_errors=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
