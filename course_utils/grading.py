"""Grading, releasing and executing the course's notebooks (nbgrader underneath).

Command line (the Makefile's targets call these)::

    python -m course_utils.grading grade notebooks/ch01_seq2seq_rnn/ch01_seq2seq_rnn.ipynb
    python -m course_utils.grading release            # notebooks/ <- solutions/
    python -m course_utils.grading autograde          # submitted/<student>/<chapter>/ -> grades.csv
    python -m course_utils.grading execute [PATH]     # re-execute solution notebooks in place

``grade`` and ``release`` work in a throwaway course directory with a fresh gradebook, so
they never disturb an instructor's ``gradebook.db``; ``autograde`` is the instructor's and
uses the course root.

Cell naming convention (``grade_id``): an exercise's answer cell is ``exN_name``, its test
cells ``exN_name-visible`` and ``exN_name-hidden``; a written answer is ``qN_name``.
:func:`exercise_of` maps a grade cell to its exercise with that rule.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "nbgrader_config.py"


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


def nbgrader(*args: str, course: Path, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in the course directory ``course`` (which holds the config)."""
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"], cwd=course,
                          env=_env(), capture_output=True, text=True)
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

    @property
    def auto_score(self) -> float:
        return sum(c.score for c in self.cells if not c.manual)

    @property
    def auto_max(self) -> float:
        return sum(c.max_score for c in self.cells if not c.manual)

    def by_exercise(self) -> dict[str, tuple[float, float, bool, list[str]]]:
        """``exercise -> (score, max_score, manual, errors)`` in notebook order."""
        out: dict[str, tuple[float, float, bool, list[str]]] = {}
        for c in self.cells:
            s, m, manual, errs = out.get(c.exercise, (0.0, 0.0, c.manual, []))
            out[c.exercise] = (s + c.score, m + c.max_score, manual, errs + ([c.error] if c.error else []))
        return out

    def table(self) -> str:
        """A per-exercise score table for people."""
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
        return "\n".join(lines)


def _errors_by_cell(nb_path: Path) -> tuple[dict[str, str], list[str]]:
    """Errors raised in a notebook: ``({grade_id: error} of graded cells, [errors elsewhere])``.

    Cells tagged ``raises-exception`` (a deliberate demonstration of an error) are skipped.
    """
    nb = nbformat.read(nb_path, as_version=4)
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


def autograde_in(course: Path, chapter: str, submissions: Mapping[str, Path],
                 feedback: bool = False) -> dict[str, NotebookGrades]:
    """Submit ``{student: notebook}`` to ``chapter`` of ``course``, autograde, read the grades."""
    from nbgrader.api import Gradebook

    nb_name = chapter_notebook(chapter, course).stem
    for student, path in submissions.items():
        dest = course / "submitted" / student / chapter
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dest / f"{nb_name}.ipynb")
    nbgrader("autograde", chapter, "--force", course=course)
    if feedback:
        nbgrader("generate_feedback", chapter, "--force", course=course)
    results = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in submissions:
            errors, every = _errors_by_cell(course / "autograded" / student / chapter / f"{nb_name}.ipynb")
            sub = gb.find_submission_notebook(nb_name, chapter, student)
            cells = []
            for g in sub.grades:
                d = g.to_dict()
                cells.append(CellGrade(d["name"], float(d["auto_score"] or 0.0) if d["manual_score"] is None
                                       else float(d["manual_score"]), float(d["max_score"]),
                                       manual=d["cell_type"] == "markdown" or d["auto_score"] is None,
                                       error=errors.get(d["name"])))
            order = {c.metadata.get("nbgrader", {}).get("grade_id"): i for i, c in
                     enumerate(nbformat.read(chapter_notebook(chapter, course), as_version=4).cells)}
            cells.sort(key=lambda c: order.get(c.grade_id, 10**6))
            fb = course / "feedback" / student / chapter / f"{nb_name}.html"
            results[student] = NotebookGrades(cells, every, fb if feedback and fb.exists() else None)
    return results


def grade(notebook: Path, root: Path = REPO, student: str = "you") -> NotebookGrades:
    """Grade one learner notebook with the hidden tests of its chapter, in a throwaway course.

    The chapter is the notebook's folder name (``notebooks/ch01_seq2seq_rnn/...``).
    """
    notebook = Path(notebook).resolve()
    chapter = notebook.parent.name
    if chapter not in chapters(root):
        raise SystemExit(f"{notebook}: its folder {chapter!r} is not a chapter; chapters are "
                         f"{', '.join(chapters(root))}")
    course = new_course([chapter], root)
    try:
        return autograde_in(course, chapter, {student: notebook})[student]
    finally:
        shutil.rmtree(course, ignore_errors=True)


def instructor_autograde(root: Path = REPO) -> None:
    """Autograde everything under ``submitted/``, write feedback and ``grades.csv``."""
    from nbgrader.api import Gradebook, MissingEntry

    submitted = root / "submitted"
    todo = sorted({p.parent.name for p in submitted.glob("*/*/*.ipynb")})
    if not todo:
        raise SystemExit("nothing to grade: put submissions in submitted/<student>/<chapter>/<notebook>.ipynb")
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        known = set()
        for ch in todo:
            try:
                if gb.find_assignment(ch).notebooks:
                    known.add(ch)
            except MissingEntry:
                pass
    for ch in todo:
        if ch not in chapters(root):
            raise SystemExit(f"submitted/*/{ch}: {ch!r} is not a chapter")
        if ch not in known:  # the gradebook needs the chapter's tests; regenerating is harmless here
            nbgrader("generate_assignment", ch, "--force", course=root)
        print(f"autograding {ch} ...", flush=True)
        nbgrader("autograde", ch, course=root)
        nbgrader("generate_feedback", ch, "--force", course=root)
    nbgrader("export", course=root)
    print(f"feedback in {root / 'feedback'}, grades in {root / 'grades.csv'}")


def execute(path: Path, timeout: int = 600) -> None:
    """Execute notebook(s) in place, in their own folder, keeping outputs (for solutions/)."""
    from nbclient import NotebookClient

    paths = sorted(Path(path).glob("*/*.ipynb")) if Path(path).is_dir() else [Path(path)]
    for p in paths:
        nb = nbformat.read(p, as_version=4)
        # No per-cell timestamps: they would change the release on every execution.
        NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                       resources={"metadata": {"path": str(p.parent)}}).execute()
        nbformat.write(nb, p)
        print(f"executed {p}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.grading", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade", help="grade one notebook with the hidden tests")
    g.add_argument("notebook", type=Path)
    sub.add_parser("release", help="regenerate notebooks/ from solutions/")
    sub.add_parser("autograde", help="grade submitted/, write feedback and grades.csv")
    e = sub.add_parser("execute", help="re-execute notebooks in place")
    e.add_argument("path", type=Path, nargs="?", default=REPO / "solutions")
    args = parser.parse_args(argv)
    if args.command == "grade":
        if not args.notebook.exists():
            raise SystemExit(f"no such notebook: {args.notebook}")
        print(f"grading {args.notebook} (this runs the whole notebook) ...", flush=True)
        print(grade(args.notebook).table())
    elif args.command == "release":
        for p in release():
            print(f"wrote {p.relative_to(REPO)}")
    elif args.command == "autograde":
        instructor_autograde()
    elif args.command == "execute":
        execute(args.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
