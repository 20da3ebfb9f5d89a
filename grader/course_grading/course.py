"""The course directory the grader works on, its chapters, and nbgrader run as a program.

The course root is always explicit: the ``--root`` option of the command line, else the
``COURSE_ROOT`` environment variable, else the current directory (the Makefile runs from the
course root). It is never derived from where ``course_utils`` or Python is installed: a
sandboxed kernel runs the same Python, and must not be able to find the course from it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import nbformat

from course_grading import warm
from course_utils import stored_run

ORIGIN = ".grading-origin"   # in a throwaway course: the course root it was made from


def course_root(root: Path | str | None = None) -> Path:
    """The course root: ``root``, else ``$COURSE_ROOT``, else the current directory; checked."""
    path = Path(root if root is not None else os.environ.get("COURSE_ROOT") or Path.cwd()).resolve()
    if not (path / "nbgrader_config.py").is_file() or not (path / "solutions").is_dir():
        raise SystemExit(f"{path} is not the course root (it needs nbgrader_config.py and solutions/): "
                         "run from the course root, or give --root or COURSE_ROOT")
    return path


def origin(root: Path) -> Path:
    """The course a throwaway course was made from (``root`` itself for a real course)."""
    marker = root / ORIGIN
    if marker.is_file():
        other = Path(marker.read_text().strip())
        if (other / "solutions").is_dir():
            return other
    return root


def chapters(root: Path | None = None) -> list[str]:
    """The chapters: folders ``solutions/chNN_*`` that hold a notebook, in order."""
    root = course_root(root)
    return sorted(p.name for p in (root / "solutions").glob("ch*") if any(p.glob("*.ipynb")))


def chapter_notebook(chapter: str, root: Path | None = None) -> Path:
    """The one solution notebook of ``chapter``."""
    root = course_root(root)
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


GRADER_MEMORY_MB = 3072   # the address space of one nbgrader process (GRADING_GRADER_MEMORY_MB overrides it)


def grader_memory_mb() -> int:
    """The memory cap of each nbgrader process: ``GRADING_GRADER_MEMORY_MB``, else :data:`GRADER_MEMORY_MB`."""
    raw = os.environ.get("GRADING_GRADER_MEMORY_MB", "")
    return int(float(raw)) if raw else GRADER_MEMORY_MB


def nbgrader(*args: str, course: Path, check: bool = True, env: Mapping[str, str] | None = None,
             timeout: float | None = None, memory_mb: int | None = None) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in the course directory ``course`` (which holds the config), with at most
    ``timeout`` seconds and ``memory_mb`` MiB of address space where they are given."""
    proc = warm.run_module("nbgrader", [*args, "--log-level=WARN"], cwd=course, env={**_env(), **(env or {})},
                           timeout=timeout, memory_mb=memory_mb)
    if proc.returncode != 0 and memory_mb is not None and "MemoryError" in (proc.stderr or ""):
        proc.stderr += f"\n[ERROR] nbgrader ran out of its {memory_mb} MiB"
    if check and proc.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


def _stub_config(lang: str) -> str:
    """The lines of nbgrader's configuration that give the release in ``lang`` its own code stub and
    answer placeholder (nbgrader's ``ClearSolutions.code_stub`` and ``text_stub``: stored_run.stubs)."""
    settings = stored_run.stubs(lang)
    return (f"\n# The release in {lang}: nbgrader's stubs in it (course_utils.stored_run.stubs)\n"
            f"c.ClearSolutions.code_stub = {settings['code_stub']!r}\n"
            f"c.ClearSolutions.text_stub = {settings['text_stub']!r}\n")


def new_course(chapter_names: list[str], root: Path | None = None, lang: str | None = None) -> Path:
    """A temporary course directory with the config and the given chapters' sources (in ``lang``,
    from the translation catalogues, where it is given)."""
    root = course_root(root)
    course = Path(tempfile.mkdtemp(prefix="nbgrader-course-"))
    shutil.copy(root / "nbgrader_config.py", course / "nbgrader_config.py")
    (course / ORIGIN).write_text(str(origin(root)))
    translated = {}
    if lang:
        with (course / "nbgrader_config.py").open("a", encoding="utf-8") as config:
            config.write(_stub_config(lang))
        # babel: only a translated release needs it
        from course_utils.i18n.notebooks import translated_chapters
        translated = translated_chapters(root, lang, chapter_names)
    for ch in chapter_names:
        shutil.copytree(root / "solutions" / ch, course / "solutions" / ch,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        if ch in translated:
            nbformat.write(translated[ch], course / "solutions" / ch / f"{ch}.ipynb")
        nbgrader("generate_assignment", ch, "--force", course=course)
        # The learner sees the stored run (the one the text quotes) until they run a cell.
        solution = nbformat.read(course / "solutions" / ch / f"{ch}.ipynb", as_version=4)
        for path in (course / "notebooks" / ch).glob("*.ipynb"):
            released = nbformat.read(path, as_version=4)
            stored_run.add_stored_outputs(released, solution)
            nbformat.write(released, path)
    return course


def release_dir(lang: str | None = None) -> str:
    """Where the release of ``lang`` goes: ``notebooks`` (English), ``notebooks-zh_CN`` (Chinese)."""
    return "notebooks" if not lang else f"notebooks-{lang}"


def stale_pairs(root: Path, chapter_names: list[str]) -> list[str]:
    """The chapters whose notebook (``solutions/chNN/chNN.ipynb``) no longer holds its text source's
    cells (``chNN.py``, the file people edit): their release would ship old text."""
    import jupytext
    stale = []
    for ch in chapter_names:
        text = root / "solutions" / ch / f"{ch}.py"
        if not text.exists():
            continue
        source = [(c.cell_type, c.source) for c in jupytext.read(text).cells]
        paired = [(c.cell_type, c.source) for c in nbformat.read(chapter_notebook(ch, root), as_version=4).cells]
        if source != paired:
            stale.append(ch)
    return stale


def release(root: Path | None = None, chapter_names: list[str] | None = None, lang: str | None = None) -> list[Path]:
    """Regenerate ``notebooks/<chapter>/`` from ``solutions/<chapter>/`` for every chapter; with
    ``lang``, ``notebooks-<lang>/<chapter>/`` from the same sources and the translation catalogues.
    Refuses (``SystemExit``, naming the command) when a chapter's notebook differs from its text source."""
    root = course_root(root)
    written = []
    names = chapter_names or chapters(root)
    stale = stale_pairs(root, names)
    if stale:
        raise SystemExit(f"{', '.join(stale)}: the notebook differs from its text source (.py), so the release "
                         "would ship old text. Run `make sync` (it updates each notebook from its .py, keeping "
                         "the outputs), then release again (`make release` syncs first).")
    course = new_course(names, root, lang)
    try:
        for ch in names:
            target = root / release_dir(lang) / ch
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(course / "notebooks" / ch, target)
            written.extend(sorted(target.glob("*.ipynb")))
    finally:
        shutil.rmtree(course, ignore_errors=True)
    return written
