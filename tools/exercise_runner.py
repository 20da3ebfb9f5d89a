"""Grade other answers to a chapter's exercises in-process, fast: the engine of `make mutants` and of
the correct-answer tests.

The chapter's text source (``solutions/chNN_*/chNN_*.py``) runs once, cell by cell, in one IPython
shell in this process, in grading mode (``NBGRADER_EXECUTION=autograde``: the experiments shrink as
they do under nbgrader). When the run reaches an exercise's answer cell, the process forks once per
answer to try: the child runs that answer in place of the solution, then every code cell up to the
exercise's last test cell, and reports which of the exercise's test cells failed; the parent waits,
then runs the solution's own cell and goes on. Each answer thus meets the very state the notebook has
at that point, and no answer can disturb the next (a fork shares nothing that it writes).

A test cell fails as nbgrader counts it: it raises. The grader's own re-judging of the records
(``grader/course_grading/verdict.py``) is stricter still, so an answer that passes here can still fail
there, never the other way round; ``tests/test_grading.py`` grades the correct answers through the
real grader too. One way a test itself could pass here and fail there is ruled out before any answer
is tried: the solution's control run is repeated with the tests as the grader sends them to a
submission's kernel, expected values withheld, and must pass and send the same checks in the same
order (:func:`_same_checks_withheld`; ``tests/test_runner_withheld.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["Exercise", "Outcome", "chapter_cells", "exercises", "find_chapter", "record_chapter", "run_answers"]


@dataclasses.dataclass
class Exercise:
    """One autograded exercise: its answer cell and the cells up to its last test cell."""

    name: str
    answer: int                 # index of the answer cell among the chapter's cells
    last: int                   # index of its last test cell (visible or hidden)
    tests: list[str]            # grade_ids of its test cells, in order
    source: str                 # the solution's answer cell


@dataclasses.dataclass
class Outcome:
    """What one answer got: the test cells it failed (empty: full marks) and why."""

    key: str
    failed: list[str]
    reason: str
    seconds: float
    records: list[list[str]] = dataclasses.field(default_factory=list)   # (kind, what) of every check sent

    @property
    def full_marks(self) -> bool:
        return not self.failed


def find_chapter(name: str, root: Path = ROOT) -> str:
    """``"ch03"`` or ``"ch03_scaled_dot_product"`` -> the chapter's folder name."""
    hits = sorted(p.name for p in (root / "solutions").glob(f"{name}*") if p.is_dir())
    if len(hits) != 1:
        raise SystemExit(f"no single chapter matches {name!r}: {hits}")
    return hits[0]


def chapter_cells(chapter: str, root: Path = ROOT) -> list:
    """The cells of the chapter's text source, as jupytext reads them (nbgrader metadata included)."""
    import jupytext

    src = root / "solutions" / chapter / f"{chapter}.py"
    return jupytext.read(src).cells


def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def exercises(cells: list) -> dict[str, Exercise]:
    """The autograded exercises of a chapter, by name, in order."""
    out: dict[str, Exercise] = {}
    for i, cell in enumerate(cells):
        m = _meta(cell)
        if cell.cell_type != "code" or not m.get("grade_id"):
            continue
        gid = m["grade_id"]
        if m.get("solution") and not m.get("grade"):
            out[gid] = Exercise(gid, i, i, [], cell.source)
        elif m.get("grade"):
            ex = re.sub(r"-(visible|hidden)$", "", gid)
            if ex in out:
                out[ex].tests.append(gid)
                out[ex].last = i
    return {k: v for k, v in out.items() if v.tests}


def _shell():
    os.environ.setdefault("MPLBACKEND", "Agg")
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance()


def _run(shell, source: str, quiet: bool = False, cell_id: str | None = None) -> str | None:
    """Run one cell; the error it raised as ``Type: message``, or None. ``quiet``: print nothing.
    ``cell_id``: the cell's grade_id, told to :mod:`course_utils.domains` for its records."""
    from course_utils import domains

    domains.set_cell(cell_id)
    if quiet:
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
            result = shell.run_cell(source, store_history=False, silent=False)
    else:
        result = shell.run_cell(source, store_history=False, silent=False)
    err = result.error_in_exec or result.error_before_exec
    if err is None:
        return None
    return f"{type(err).__name__}: {str(err).strip()[:400]}"


def _close_figures() -> None:
    """Close the figures a cell drew (the parent runs a whole chapter: they would pile up)."""
    import sys

    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close("all")


def _capture_records() -> list[list[str]]:
    """In a forked child: every check's record, as ``[kind, what]``, appended to the list returned
    (what the grader's kernel would send, :func:`course_utils.records.send`)."""
    from course_utils import records

    sent: list[list[str]] = []
    records.send = lambda kind, what, *args, **kwargs: sent.append([kind, str(what)])
    return sent


def _child(shell, cells: list, ex: Exercise, source: str, out_path: str, withheld: bool = False) -> None:
    """In the forked child: the answer, then every code cell up to the exercise's last test.
    ``withheld``: the exercise's test cells as the grader sends them to a submission's kernel, their
    expected values withheld (``course_grading.withhold.strip_expected``)."""
    from course_grading.withhold import strip_expected

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sent = _capture_records()
    failed, reason = [], ""
    err = _run(shell, source)
    if err is not None:
        failed, reason = list(ex.tests), f"the answer cell: {err}"
    else:
        for cell in cells[ex.answer + 1: ex.last + 1]:
            if cell.cell_type != "code":
                continue
            gid = _meta(cell).get("grade_id", "")
            test = gid in ex.tests
            err = _run(shell, strip_expected(cell.source) if withheld and test else cell.source, cell_id=gid)
            if err is not None and test:
                failed.append(gid)
                reason = reason or f"{gid}: {err}"
    Path(out_path).write_text(json.dumps({"failed": failed, "reason": reason, "records": sent}))


def _fork_all(shell, cells: list, ex: Exercise, answers: list[tuple[str, str]], jobs: int,
              timeout: float, withheld: bool = False) -> list[Outcome]:
    """Each answer in its own forked child, ``jobs`` at a time, each stopped after ``timeout`` s
    (``withheld``: see :func:`_child`)."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    pending = list(enumerate(answers))
    running: dict[int, tuple[int, str, float, str]] = {}
    results: dict[int, Outcome] = {}
    tmp = tempfile.mkdtemp(prefix="answers-")
    while pending or running:
        while pending and len(running) < jobs:
            i, (key, source) = pending.pop(0)
            out_path = os.path.join(tmp, f"{i}.json")
            pid = os.fork()
            if pid == 0:
                try:
                    _child(shell, cells, ex, source, out_path, withheld)
                finally:
                    os._exit(0)
            running[pid] = (i, key, time.perf_counter(), out_path)
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            now = time.perf_counter()
            for p, (i, key, t0, _) in list(running.items()):
                if now - t0 > timeout:
                    os.kill(p, signal.SIGKILL)
                    os.waitpid(p, 0)
                    del running[p]
                    results[i] = Outcome(key, list(ex.tests), f"ran past {timeout:.0f} s", now - t0)
            time.sleep(0.005)
            continue
        if pid not in running:
            continue
        i, key, t0, out_path = running.pop(pid)
        seconds = time.perf_counter() - t0
        try:
            got = json.loads(Path(out_path).read_text())
            results[i] = Outcome(key, got["failed"], got["reason"], seconds, got["records"])
        except (OSError, ValueError, KeyError):
            results[i] = Outcome(key, list(ex.tests), "the child died without a result", seconds)
    return [results[i] for i in range(len(answers))]


def _same_checks_withheld(chapter: str, ex: Exercise, control: Outcome, sent: Outcome) -> None:
    """Raise unless the solution's tests, as the grader sends them to a submission's kernel (expected
    values withheld), pass and send the very checks, in the same order, that they send as written:
    the grader pairs a submission's records with its reference run's one by one, so a test that
    needs an expected value's content (iterating it, ``len``, ``if``) or sends another number of
    checks would fail every correct answer there while passing here."""
    where = f"{chapter} {ex.name}: its tests with the expected values withheld (as the grader runs them)"
    if not sent.full_marks:
        raise RuntimeError(f"{where} fail the solution: {sent.reason}. A hidden test may only index a value "
                           "bound in its EXPECTED block and pass it to a check (course_utils.records.Withheld)")
    if sent.records != control.records:
        n = next((i for i, (a, b) in enumerate(zip(control.records, sent.records)) if a != b),
                 min(len(control.records), len(sent.records)))
        said = lambda recs: " ".join(recs[n]) if n < len(recs) else "nothing"  # noqa: E731
        raise RuntimeError(f"{where} send other checks than as written: {len(sent.records)} against "
                           f"{len(control.records)}; check {n + 1} is {said(sent.records)!r} there, "
                           f"{said(control.records)!r} as written")


def run_answers(chapter: str, answers: Mapping[str, Iterable[tuple[str, str]]], jobs: int = 1,
                timeout: float | None = None, root: Path = ROOT, progress=None) -> dict[str, list[Outcome]]:
    """Grade ``answers`` (``{exercise: [(key, answer cell source), ...]}``) of ``chapter``.

    The solution's own answer is graded first at every exercise that has answers to try, as a
    control: if it does not get full marks here, the harness (not the answers) is wrong, and this
    raises. ``timeout``: seconds per answer, by default 5 s plus 20 times the solution's time.
    Returns ``{exercise: [Outcome, ...]}`` in the order given.
    """
    cells = chapter_cells(chapter, root)
    exs = exercises(cells)
    unknown = sorted(set(answers) - set(exs))
    if unknown:
        raise KeyError(f"{chapter} has no autograded exercise {unknown}; it has {sorted(exs)}")
    shell = _shell()
    shell.reset(new_session=False)          # a chapter starts from an empty namespace
    cwd, grading_env = os.getcwd(), os.environ.get("NBGRADER_EXECUTION")
    os.environ["NBGRADER_EXECUTION"] = "autograde"
    os.chdir(root / "solutions" / chapter)
    results: dict[str, list[Outcome]] = {}
    try:
        by_answer = {ex.answer: ex for ex in exs.values() if answers.get(ex.name)}
        for i, cell in enumerate(cells):
            if cell.cell_type != "code":
                continue
            ex = by_answer.get(i)
            if ex is not None:
                todo = list(answers[ex.name])
                control = _fork_all(shell, cells, ex, [("<solution>", ex.source)], 1, 600)[0]
                if not control.full_marks:
                    raise RuntimeError(f"{chapter} {ex.name}: the solution itself fails in this harness "
                                       f"({control.reason}); fix the chapter or the harness first")
                _same_checks_withheld(chapter, ex, control, _fork_all(shell, cells, ex, [("<solution>", ex.source)],
                                                                      1, 600, withheld=True)[0])
                limit = timeout if timeout is not None else 5 + 20 * control.seconds
                results[ex.name] = _fork_all(shell, cells, ex, todo, jobs, limit)
                if progress:
                    progress(ex.name, results[ex.name])
            err = _run(shell, cell.source, quiet=True, cell_id=_meta(cell).get("grade_id"))
            if err is not None and not _meta(cell).get("grade") and "raises-exception" not in cell.metadata.get("tags", []):
                raise RuntimeError(f"{chapter}: cell {i} of the solution raised {err}")
            _close_figures()
            if len(results) == len(by_answer):
                break
    finally:
        os.chdir(cwd)
        if grading_env is None:
            os.environ.pop("NBGRADER_EXECUTION", None)
        else:
            os.environ["NBGRADER_EXECUTION"] = grading_env
    return results


def record_chapter(chapter: str, root: Path = ROOT) -> list[dict]:
    """Run the whole solution of ``chapter`` in grading mode, in this process, with
    :func:`course_utils.domains.recording` on: the records of every ``checks.call``, each with the
    grade_id of the cell that made it (``tests/test_domains.py`` reads them)."""
    from course_utils import domains

    cells = chapter_cells(chapter, root)
    shell = _shell()
    shell.reset(new_session=False)
    cwd, grading_env = os.getcwd(), os.environ.get("NBGRADER_EXECUTION")
    os.environ["NBGRADER_EXECUTION"] = "autograde"
    os.chdir(root / "solutions" / chapter)
    try:
        with domains.recording() as recs:
            for i, cell in enumerate(cells):
                if cell.cell_type != "code":
                    continue
                err = _run(shell, cell.source, quiet=True, cell_id=_meta(cell).get("grade_id"))
                if err is not None and (_meta(cell).get("grade")
                                        or "raises-exception" not in cell.metadata.get("tags", [])):
                    raise RuntimeError(f"{chapter}: cell {i} of the solution raised {err}")
                _close_figures()
        return list(recs)
    finally:
        domains.set_cell(None)
        os.chdir(cwd)
        if grading_env is None:
            os.environ.pop("NBGRADER_EXECUTION", None)
        else:
            os.environ["NBGRADER_EXECUTION"] = grading_env
