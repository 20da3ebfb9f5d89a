"""The grader's command line: ``python -m course_grading {grade,release,autograde,execute}``.

Every command works on an explicit course root: ``--root DIR``, else ``$COURSE_ROOT``, else the
current directory (the Makefile runs from the course root).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from course_grading import sandbox
from course_grading.autograde import grade, instructor_autograde
from course_grading.course import course_root, release
from course_grading.execution import execute
from course_utils import messages
from course_utils.messages import tr


def _quiet_libraries() -> None:
    """nbgrader's gradebook trips SQLAlchemy 2's warnings about its relationships (harmless, and not
    the instructor's to fix): the grader's output is its table and its faults, nothing else."""
    import warnings

    from sqlalchemy.exc import SAWarning

    warnings.simplefilter("ignore", SAWarning)


def _speak_notebook_language(notebook: Path) -> None:
    """``make grade`` in the notebook's language (its metadata, else a ``notebooks-zh_CN`` or
    ``workspace-zh_CN`` folder of its path): the table, the grader's notes and the kernel's checks."""
    import json

    try:
        nb = json.loads(notebook.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        nb = None
    lang = messages.notebook_language(nb, notebook.resolve())
    if lang:
        os.environ[messages.ENV] = lang


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_grading",
                                     description="Grade, release, autograde and execute the course's notebooks.")
    parser.add_argument("--root", type=Path, default=None,
                        help="the course root (default: $COURSE_ROOT, else the current directory)")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade", help="grade one notebook with the hidden tests")
    g.add_argument("notebook", type=Path)
    r = sub.add_parser("release", help="regenerate notebooks/ from solutions/ (--lang zh_CN: notebooks-zh_CN/)")
    r.add_argument("--lang", default=None, help="a language of locale/ (zh_CN): the release from its catalogues")
    a = sub.add_parser("autograde", help="grade submitted/, write feedback and grades.csv")
    a.add_argument("--force", action="store_true", help="regrade every submission, changed or not")
    a.add_argument("--lms-pending", choices=["provisional", "empty"], default="provisional",
                   help="grades_lms.csv for a chapter whose written answers await a hand mark: its points so far, "
                        "named in the provisional column (default), or empty until marked")
    a.add_argument("--jobs", "-j", default=None,
                   help="submissions graded at a time, each in its own sandbox (default: auto, from the "
                        "cores and the memory limit per box)")
    e = sub.add_parser("execute", help="re-execute notebooks in place")
    e.add_argument("path", type=Path, nargs="?", default=None)
    args = parser.parse_args(argv)
    _quiet_libraries()
    root = course_root(args.root)
    if args.command == "grade":
        if not args.notebook.exists():
            raise SystemExit(f"no such notebook: {args.notebook}")
        _speak_notebook_language(args.notebook)
        iso = sandbox.isolation()
        for w in iso.warnings:
            print(f"{'WARNING' if not iso.sandboxed else 'note'}: {w}")
        if not iso.sandboxed:
            print("WARNING: your notebook runs WITHOUT A SANDBOX (fine for your own work; never grade "
                  "someone else's notebook this way)", flush=True)
        print(tr("grading {notebook} (this runs the whole notebook; limits: {limits}) ...", notebook=args.notebook,
                 limits=sandbox.Limits.from_env().describe()), flush=True)
        print(grade(args.notebook, root).table())
    elif args.command == "release":
        for p in release(root, lang=args.lang):
            print(f"wrote {p.relative_to(root)}")
    elif args.command == "autograde":
        instructor_autograde(root, force=args.force, jobs=args.jobs, lms_pending=args.lms_pending)
    elif args.command == "execute":
        execute(args.path if args.path is not None else root / "solutions")
    return 0
