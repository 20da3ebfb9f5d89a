"""Executing notebooks: nbgrader's execute step in the sandbox, and ``make execute``.

:class:`SandboxedExecute` runs one submission in its own :class:`~course_grading.sandbox.Box`
(bubblewrap; see ``sandbox.py``), with a wall-clock limit per notebook and per cell, a cap on
what the kernel may send back (per message, per cell, per notebook), and the tamper guard
before and after every test cell. A fault (hang, dead kernel, fork bomb, memory) stays with its
submission: it keeps what it earned before, and its graded cells that did not run get an error.

**Who decides a test's result.** nbgrader scores a test cell from its stored outputs: an
``error`` output or a ``stderr`` stream is 0, an ``execute_result`` that reads as a number is
partial credit, anything else full marks. Those outputs are produced by the learner's kernel.
Here the grader rewrites every test cell's outputs itself before nbgrader sees them: a test
passes only if the kernel's reply to *that* execute request says ``ok``, no error output
arrived for it, and the values its checks sent out hold when the grader compares them itself
against its own run of the solution (``verdict.py``, ``reference.py``); the cell then keeps
only its stdout (none from the first hidden test on), and a failing cell gets exactly one error
output (from the first hidden test on, one the grader wrote: ``_failure_note``). ``execute_result`` and display outputs of test cells are dropped, so a forged result
cannot be read as a score; a test cell whose outputs were cleared, or that was skipped, fails.
"""

from __future__ import annotations

import ast
import builtins
import copy
import json
import os
import subprocess
import time
from pathlib import Path

import nbformat
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute

from course_grading import feedback, reference, sandbox, verdict, withhold
from course_grading.course import origin
from course_grading.results import FAULT, META, NOT_CONFIRMED, TAMPERING
from course_utils.messages import ENV as LANG_ENV
from course_utils.messages import notebook_language, speaking, tr
from course_utils.records import RECORD_FLAG

CELL_OUTPUT_BYTES = 2 * 2**20       # what one cell's outputs may hold; more is cut
NOTEBOOK_OUTPUT_BYTES = 16 * 2**20  # what all outputs of a notebook may hold
MESSAGE_BYTES = 64 * 2**20          # a bigger message cuts the kernel's output channel: the notebook stops
RECORD_BYTES = 32 * 2**20           # what the checks' records of a notebook may hold; more are dropped
ONE_RECORD_BYTES = 2**20            # one record (the course's largest is 0.2 MiB); a bigger one is kept as refused
# What a hidden test's failure says instead of its own message (which could show its secret inputs).
_SECRET_NOTE = ("A hidden test does not show its own messages, so that its inputs stay secret: the visible "
                "tests above it show what goes wrong.")   # tr() where it is used: the learner's language
TEST_FAILED = "TestFailed"          # the ename of a test whose message the grader wrote (after the hidden tests begin)
GUARD_ANSWER_CHARS = 100_000        # the tamper guard's answer (at most 50 findings of 300 characters)
HIDDEN = "BEGIN HIDDEN TESTS"

# The reference run makes each test cell a second time, with the answer cells' functions and
# classes made to return slightly different values (floats moved by 0.1 %, booleans flipped,
# integers + 1), every global seed shifted (the global generators advanced too), and the checks
# only recording: an expected value that moves depends on the learner's code (their outputs,
# their module's initial weights); one that stays is *fixed* and must be the test's own in every
# submission (verdict.py). Probes drawn from a test's own torch.Generator stay the same.
TAINT = """
import functools as _cg_ft, random as _cg_random, types as _cg_types, torch as _cg_torch
from course_utils import records as _cg_records
_cg_seeds = (_cg_torch.manual_seed, _cg_torch.random.manual_seed)
_cg_torch.manual_seed = lambda seed, _f=_cg_seeds[0]: _f(int(seed) + 7919)
_cg_torch.random.manual_seed = lambda seed, _f=_cg_seeds[1]: _f(int(seed) + 7919)
_cg_torch.rand(7); _cg_random.random()
def _cg_noise(v):
    if isinstance(v, _cg_torch.Tensor):
        if v.dtype == _cg_torch.bool:
            return ~v
        return v * 1.001 + 1e-3 if v.is_floating_point() or v.is_complex() else v + 1
    if isinstance(v, float):
        return v * 1.001 + 1e-3
    return type(v)(_cg_noise(x) for x in v) if type(v) in (tuple, list) else v
def _cg_taint(obj):
    if isinstance(obj, type) and issubclass(obj, _cg_torch.nn.Module):
        return type(obj.__name__, (obj,), {"forward": lambda self, *a, **k: _cg_noise(obj.forward(self, *a, **k))})
    if isinstance(obj, _cg_types.FunctionType):
        return _cg_ft.wraps(obj)(lambda *a, **k: _cg_noise(obj(*a, **k)))
    return obj
_cg_saved = {n: globals()[n] for n in NAMES if n in globals()}
globals().update({n: _cg_taint(v) for n, v in _cg_saved.items()})
_cg_records.record_only(True)
"""
UNTAINT = """
globals().update(_cg_saved)
_cg_torch.manual_seed, _cg_torch.random.manual_seed = _cg_seeds   # torch may have wrapped one of them
_cg_records.record_only(False)
"""


def execute(path: Path, timeout: int = 600) -> None:
    """Execute notebook(s) in place, in their own folder, keeping outputs (for solutions/).

    The kernel is the course's own Python (``sandbox.kernel_manager``), whatever ``python3``
    kernels the machine has. This is the instructor's own trusted code: no sandbox.
    """
    from jupyter_core.utils import run_sync
    from nbclient import NotebookClient

    paths = sorted(Path(path).glob("*/*.ipynb")) if Path(path).is_dir() else [Path(path)]
    for p in paths:
        nb = nbformat.read(p, as_version=4)
        # No per-cell timestamps: they would change the release on every execution.
        km = sandbox.kernel_manager()
        try:
            NotebookClient(nb, km=km, timeout=timeout, record_timing=False,
                           resources={"metadata": {"path": str(p.parent)}}).execute()
        finally:
            if km.has_kernel:
                run_sync(km.shutdown_kernel)(now=True)
        nbformat.write(nb, p)
        print(f"executed {p}")


class _Stop(Exception):
    pass


# exception names a failure note may repeat (a kernel's own names could carry anything)
_SAFE_ENAMES = frozenset({n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}
                         | {"CheckFailed"})


def _load_reference(chapter: str | None = None, limits: sandbox.Limits | None = None) -> dict | None:
    """The solution's reference run of this chapter (``None``: every test fails).

    The course's own commands make it first and say where it is (``reference.ENV``). nbgrader's own
    ``autograde`` and formgrader's Autograde button run this preprocessor without them: then it is
    made here, on demand (once, then cached), from the course in the current folder (where nbgrader
    runs), so every way of grading gives the same grades.
    """
    path = os.environ.get(reference.ENV)
    if not path and chapter:
        path = str(reference.ensure(Path.cwd(), chapter, limits or sandbox.Limits.from_env()))
    try:
        data = json.loads(Path(path).read_text()) if path else None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("cells"), dict) else None


def _error(ename: str, evalue: str) -> NotebookNode:
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def _is_test(cell) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def _size(content) -> int:
    """A cheap upper estimate of what an output message holds."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, dict):
        return sum(_size(v) + len(str(k)) for k, v in content.items())
    if isinstance(content, (list, tuple)):
        return sum(_size(v) for v in content)
    return 8


class SandboxedExecute(Execute):
    """nbgrader's ``Execute`` in a sandbox box, with the limits, the output caps and the tamper guard."""

    reference_mode = False   # True for the solution's own run (reference_run.ReferenceExecute)

    def preprocess(self, nb, resources=None, km=None):
        """Run ``nb`` in the box; the grader's notes, and the kernel (``COURSE_LANG``, which the box's
        launcher passes on), in the notebook's language (its metadata, else ``$COURSE_LANG``)."""
        before = os.environ.get(LANG_ENV)
        lang = os.environ[LANG_ENV] = notebook_language(nb) or before or ""
        try:
            with speaking(lang):
                return self._preprocess(nb, resources)
        finally:
            if before is None:
                os.environ.pop(LANG_ENV, None)
            else:
                os.environ[LANG_ENV] = before

    def _preprocess(self, nb, resources=None):
        self._records: dict[tuple[int, int], list] = {}   # (pass, cell index) -> the records the checks sent
        self._record_bytes = 0
        self._pass = 0
        self._answer_names = sandbox.answer_names(nb)
        report = nb.metadata.get(META, {})
        report.setdefault("faults", [])
        self._reference = None
        if not self.reference_mode:
            try:
                self._reference = _load_reference((resources or {}).get("nbgrader", {}).get("assignment"))
            except (RuntimeError, OSError, subprocess.SubprocessError) as err:   # the solution's own run failed
                report["faults"].append(f"the grader could not make its reference run of the solution: {err}")
        report["tampering"] = {}
        self._report = report
        self._run: set[int] = set()
        if report.get("not_run"):
            self._finish(nb, f"not graded: {report['not_run']}")
            return nb, resources
        self.limits = sandbox.Limits.from_env()
        self.interrupt_on_timeout = False
        self._deadline = time.monotonic() + self.limits.notebook_s
        self._stopped = self._guarded = self._hidden_began = False
        self._reply = None
        self._cell_bytes: dict[int, int] = {}
        self._total_bytes = 0
        self._cut: set[int] = set()
        self._displays: dict[tuple[int, str], list] = {}   # (cell index, display id) -> that cell's outputs
        chapter = (resources or {}).get("nbgrader", {}).get("assignment")
        self._probe_key = withhold.probe_key(origin(Path.cwd()), str(chapter)) if chapter else None
        solution = Path.cwd() / "solutions" / str(chapter)   # nbgrader runs in the course root
        sources = sorted(solution.glob("*.ipynb")) if chapter else []
        self._bindings = sandbox.chapter_bindings(sources[0]) if len(sources) == 1 else {}
        os.environ[RECORD_FLAG] = "1"   # the kernel's checks send their records (the launcher keeps it)
        box = self._box = sandbox.Box(self.limits)
        if box.unlimited():   # never called limited when it is not
            self._fault(f"the box's {' and '.join(box.unlimited())} cgroup could not be set "
                        f"({'; '.join(box.group.errors) or 'its limit did not read back'}): limited per process only")
        self.shutdown_kernel = "immediate"
        resources = resources if resources is not None else {}
        resources.setdefault("metadata", {})["path"] = str(box.work)
        try:
            super().preprocess(nb, resources)
        except _Stop:
            pass
        except Exception as e:   # e.g. the kernel could not start: the fault stays with this notebook
            self._fault(f"the kernel failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        finally:
            if box.out_of_memory():
                self._fault(f"ran out of memory (limit {self.limits.memory_mb} MiB {box.memory_scope()})")
            box.close()
        self._finish(nb, f"not run: {report['faults'][-1]}" if report["faults"] else "not run")
        return nb, resources

    def create_kernel_manager(self):
        self.km = self._box.kernel_manager(max_message_bytes=MESSAGE_BYTES)
        return self.km

    def _fault(self, reason: str) -> None:
        if reason not in self._report["faults"]:
            self._report["faults"].append(reason)

    # --- what the kernel sends back ---------------------------------------------------------------

    def process_message(self, msg, cell, cell_index):
        """nbclient's, except that no output reaches back: nbclient applies an ``update_display_data``
        (and any output with a transient ``display_id``) in place to every earlier output with that
        id, outside :meth:`output` (its caps, the sanitiser, the record channel) and outside the
        position rule of the feedback. Here ``transient`` is dropped before nbclient sees it, so it
        never builds its map of display ids; an update may change only an output of the cell that
        runs now, and only through :meth:`_accept` (:meth:`_update_display`)."""
        content = msg.get("content")
        if not isinstance(content, dict):
            return None
        transient = content.pop("transient", None)
        display_id = transient.get("display_id") if isinstance(transient, dict) else None
        display_id = display_id if isinstance(display_id, str) and len(display_id) <= 200 else None
        if "execution_count" in content and type(content["execution_count"]) is not int:
            content["execution_count"] = None   # nbclient stores it in the cell as it comes
        if msg.get("msg_type") == "update_display_data":
            self._update_display(msg, display_id, cell_index)
            return None
        out = super().process_message(msg, cell, cell_index)
        if out is not None and display_id is not None:
            self._displays.setdefault((cell_index, display_id), []).append(out)
        return out

    def _update_display(self, msg, display_id: str | None, cell_index: int) -> None:
        """Apply a display update to the outputs of *this* cell that carry its id (none of an earlier
        cell's), as a new output would be taken: charged to the caps, sanitised, never a record."""
        targets = self._displays.get((cell_index, display_id)) if display_id else None
        data = msg["content"].get("data")
        if not targets or not isinstance(data, dict) or verdict.RECORD_MIME in data:
            return
        as_display = {**msg, "msg_type": "display_data",
                      "header": {**(msg.get("header") or {}), "msg_type": "display_data"}}
        new = self._accept(as_display, cell_index)
        if new is not None:
            for out in targets:
                out["data"], out["metadata"] = new.get("data", {}), new.get("metadata", {})

    def output(self, outs, msg, display_id, cell_index):
        data = (msg.get("content") or {}).get("data")
        if isinstance(data, dict) and verdict.RECORD_MIME in data:
            self._take_record(msg, data[verdict.RECORD_MIME], cell_index)
            return None
        if self._accept(msg, cell_index, charge_only=True) is None:
            return None
        out = super().output(outs, msg, None, cell_index)
        if out is not None:
            feedback.sanitise_output(out)
        return out

    def _accept(self, msg, cell_index: int, charge_only: bool = False):
        """Charge an output message to the caps (per cell, per notebook); ``None`` if it is over them
        (cut, with a fault), else the output it makes, sanitised (``True`` with ``charge_only``)."""
        size = _size(msg.get("content"))
        used = self._cell_bytes.get(cell_index, 0) + size
        self._cell_bytes[cell_index] = used
        if used > CELL_OUTPUT_BYTES or self._total_bytes + size > NOTEBOOK_OUTPUT_BYTES:
            if cell_index not in self._cut:
                self._cut.add(cell_index)
                self._fault(f"the output of cell {cell_index + 1} was cut (limits: {CELL_OUTPUT_BYTES // 2**20} MiB "
                            f"per cell, {NOTEBOOK_OUTPUT_BYTES // 2**20} MiB per notebook)")
            return None
        self._total_bytes += size
        if charge_only:
            return True
        try:
            out = nbformat.v4.output_from_msg(msg)
        except ValueError:
            return None
        feedback.sanitise_output(out)
        return out

    def _take_record(self, msg, record, cell_index) -> None:
        """Keep a check's record for the grader (never an output: nothing hidden reaches feedback)."""
        size = _size(record)
        if msg.get("msg_type") != "display_data" or self._record_bytes + size > RECORD_BYTES:
            if self._record_bytes + size > RECORD_BYTES:
                self._fault(f"the checks' records were over {RECORD_BYTES // 2**20} MiB; the rest were dropped")
            return
        if size > ONE_RECORD_BYTES or not isinstance(record, dict):   # kept in its place, and it fails
            record = {"kind": str(record.get("kind"))[:20] if isinstance(record, dict) else None,
                      "what": str(record.get("what"))[:500] if isinstance(record, dict) else None, "refused": True}
            size = _size(record)
        self._record_bytes += size
        self._records.setdefault((self._pass, cell_index), []).append(record)

    def handle_comm_msg(self, outs, msg, cell_index):
        return None   # widgets are not graded, and their state could grow without end

    def on_cell_executed(self, **kwargs):
        self._reply = kwargs.get("execute_reply")
        return super().on_cell_executed(**kwargs)

    # --- the result of a test cell, decided here ----------------------------------------------------

    def _decide(self, cell, index: int) -> None:
        content = (self._reply or {}).get("content", {})
        errors = [o for o in cell.outputs if o.get("output_type") == "error"]
        ok = content.get("status") == "ok" and not errors
        keep = [] if self._hidden_began else [o for o in cell.outputs
                                               if o.get("output_type") == "stream" and o.get("name") == "stdout"]
        why = None
        reference_checks = None
        if not self.reference_mode:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            reference_checks = (self._reference or {}).get("cells", {}).get(grade_id)
            if ok:
                why = verdict.judge(self._records.get((0, index), []), reference_checks)
        if ok and why is None:
            cell.outputs = keep
            return
        if why is not None:
            err = _error(NOT_CONFIRMED, tr("the grader did not confirm this test: {why}", why=why))
        elif self._hidden_began and not self.reference_mode:
            # From the first hidden test on, nothing the kernel says reaches the feedback: the
            # grader names the failed checks from its reference run.
            err = _error(TEST_FAILED, self._failure_note(index, reference_checks, errors, content))
        elif errors:
            err = _error(str(errors[0].get("ename")), str(errors[0].get("evalue")))
        elif content.get("status") == "error":
            err = _error(str(content.get("ename")), str(content.get("evalue")))
        else:
            err = _error(FAULT, f"the kernel gave no result for this test (status {content.get('status')!r})")
        cell.outputs = keep + [err]

    def _failure_note(self, index: int, reference_checks, errors, content) -> str:
        """What failed in a test cell, in the grader's words: check names from the reference, no value."""
        if reference_checks is None:
            return tr("the test failed (the grader has no reference run for it)")
        records = self._records.get((0, index), [])
        ename = str((errors[0] if errors else content).get("ename", ""))
        if ename == "NotImplementedYet" or self._unanswered(index):
            return tr("not answered yet: replace `raise NotImplementedError()` in the exercise's cell with your code")
        raised = ename if ename in _SAFE_ENAMES else tr("an exception")
        wrong = verdict.failing(records, reference_checks)[:len(records)]   # of the checks that were made
        more = tr("; and {n} more", n=len(wrong) - 8) if len(wrong) > 8 else ""
        named = tr(": {checks}{more}", checks=tr("; ").join(wrong[:8]), more=more) if wrong else ""
        if len(records) < len(reference_checks):
            return tr("your code stopped this test after {done} of its {total} checks ({raised}){failed}. {note}",
                      done=len(records), total=len(reference_checks), raised=raised,
                      failed=tr("; failed{named}", named=named) if wrong else "", note=tr(_SECRET_NOTE))
        if wrong:
            return tr("{failed} of {total} checks failed{named}", failed=len(wrong), total=len(reference_checks),
                      named=named)
        return tr("a check of this test failed, or your code raised {raised}. {note}", raised=raised,
                  note=tr(_SECRET_NOTE))

    def _unanswered(self, index: int) -> bool:
        """Whether the exercise of test cell ``index`` still has nbgrader's stub as its answer."""
        from course_grading.course import exercise_of
        grade_id = self.nb.cells[index].metadata.get("nbgrader", {}).get("grade_id", "")
        answer = next((c for c in self.nb.cells if c.metadata.get("nbgrader", {}).get("solution")
                       and c.metadata.get("nbgrader", {}).get("grade_id") == exercise_of(grade_id)), None)
        return answer is not None and "raise NotImplementedError()" in answer.source

    def _finish(self, nb, why_not_run: str) -> None:
        tampered = {k.rsplit("-", 1)[0] for k in self._report["tampering"]}
        for index, cell in enumerate(nb.cells):
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type != "code":
                continue
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error" and (out.get("ename") == "MemoryError" or
                                                         "can't allocate memory" in str(out.get("evalue"))):
                    self._fault(f"ran out of memory in cell {index + 1} (limit {self.limits.memory_mb} MiB)"
                                if hasattr(self, "limits") else "ran out of memory")
            if not _is_test(cell):
                continue
            if index not in self._run:
                cell.outputs = [_error(FAULT, why_not_run)]
            exercise = str(meta.get("grade_id", "")).rsplit("-", 1)[0]
            if exercise in tampered:
                # What was changed is named in the instructor's report (grading.json, make autograde's
                # summary), not here: the guard's findings are the kernel's words, and this reaches feedback.
                cell.outputs = [o for o in cell.outputs if o.get("output_type") != "error"]
                cell.outputs.append(_error(TAMPERING, "the notebook changed what the tests rely on "
                                                      "(your instructor's report says what)"))
        nb.metadata[META] = self._report

    def _charge(self) -> None:
        """Charge the next call into the kernel to the notebook's deadline: it gets what is left (up to
        the cell limit), and none is made once the notebook is out of time. Every call goes through
        here: the cell itself, the tamper guard's checks, the grader's own code."""
        remaining = self._deadline - time.monotonic()
        if remaining < 1:
            self._stop(f"hung: the notebook ran over its time limit of {self.limits.notebook_s:g} s "
                       f"(stopped at cell {self._index + 1})")
        self.timeout = int(max(1, min(self.limits.cell_s, remaining)))

    def _wait(self, msg_id: str) -> dict | None:
        """The kernel's reply to a call of the grader's, within :meth:`_charge`'s time (past it, a
        ``CellTimeoutError``: nbclient raises one only when it is given a cell)."""
        self._charge()
        return self.wait_for_reply(msg_id, self.nb.cells[self._index])

    def _guard(self, expr: str) -> list[str]:
        self._charge()
        msg_id = self.kc.execute("", silent=True, store_history=False, user_expressions={"r": expr})
        reply = self._wait(msg_id)
        r = (reply or {}).get("content", {}).get("user_expressions", {}).get("r", {})
        if not isinstance(r, dict) or r.get("status") != "ok":
            ename = str(r.get("ename")) if isinstance(r, dict) else ""
            return [f"the tamper guard failed: {ename if ename in _SAFE_ENAMES else 'it did not answer'}"]
        try:
            text = r["data"]["text/plain"]
            if not isinstance(text, str) or len(text) > GUARD_ANSWER_CHARS:   # the kernel's words: bounded first
                raise ValueError("too long")
            found = json.loads(ast.literal_eval(text))
            assert isinstance(found, list)
            return [str(f)[:300] for f in found[:50]]
        except (KeyError, ValueError, SyntaxError, AssertionError, TypeError):
            return ["the tamper guard's answer was replaced"]

    def preprocess_cell(self, cell, resources, index):
        # Cells are named by their position counting from 1 (the first cell of the notebook is cell 1).
        if self._stopped:
            return cell, resources
        self._index = index
        try:
            self._before_cell(index)
            cell = self._run_cell(cell, index)
        except _Stop:   # out of time, e.g. in the tamper guard's check after a test: that test did not pass
            self._run.discard(index)
            raise
        except CellTimeoutError as e:
            self._run.discard(index)
            self._timed_out(e, index)
        except DeadKernelError:
            self._run.discard(index)
            code = self.km.provisioner.process.poll() if getattr(self.km.provisioner, "process", None) else None
            why = "out of memory" if self._box.out_of_memory() else f"memory limit {self.limits.memory_mb} MiB"
            self._stop(f"the kernel died in cell {index + 1} (exit status {code}; {why})")
        n = self._box.processes(self._launcher_pid())
        if n > self.limits.children:
            self._stop(f"forked without end: {n} processes after cell {index + 1} "
                       f"(limit {self.limits.children}); stopped")
        return cell, resources

    def _before_cell(self, index: int) -> None:
        """Stop if the notebook is out of time; give the cell what is left (up to the cell limit); before
        the first cell, count the box's processes (the baseline) and install the tamper guard."""
        self._charge()
        if not self._guarded:
            self._guarded = True
            self._box.processes(self._launcher_pid())   # the baseline
            out = self._guard(sandbox.guard_call("install", json.dumps(self._bindings)))
            if out != ["installed"]:
                self._fault(f"the grader could not set up its tamper guard: {out}")

    def _run_cell(self, cell, index: int):
        """Execute one cell; a test cell as :meth:`_as_sent` makes it, out of IPython's history, between
        two checks of the tamper guard, and then decided by the grader (:meth:`_after_test`)."""
        test = _is_test(cell)
        self._hidden_began = self._hidden_began or (test and HIDDEN in cell.source)
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        found = self._guard(self._check_expr(cell)) if test else []
        self._run.add(index)
        self._reply = None
        # Test cells stay out of IPython's history (In, _ih, Out): later cells cannot print them.
        # A submission's kernel gets test cells without their expected values (withhold.py).
        source = cell.source
        if test:
            cell.source = self._as_sent(source)
        try:
            self._charge()
            cell = self.execute_cell(cell, index, store_history=not test)
        finally:
            cell.source = source
            self.nb.cells[index].source = source
        if test:
            self._after_test(cell, index, grade_id, found)
        return cell

    def _after_test(self, cell, index: int, grade_id, found: list[str]) -> None:
        """After a test cell ran: the guard's second check, what it found reported, the cell's result
        decided; in the reference run, the cell made once more with the answers nudged."""
        found += self._guard(self._check_expr(cell))
        if found:
            self._report["tampering"][grade_id] = sorted(set(found))
        self._decide(cell, index)
        if self.reference_mode:
            self._run_shifted(cell, index)

    def _timed_out(self, e: CellTimeoutError, index: int) -> None:
        """Stop the notebook after cell ``index`` ran out of time, or its output was lost."""
        if "IOPub" in str(e):
            # the kernel replied, its output never came: a message over MESSAGE_BYTES made the
            # client drop the kernel's output channel
            self._stop(f"the output of cell {index + 1} was over {MESSAGE_BYTES // 2**20} MiB in one message "
                       "(or was lost); stopped")
        if self.timeout < self.limits.cell_s:   # it had only what was left of the notebook's time (_charge)
            self._stop(f"hung: the notebook ran over its time limit of {self.limits.notebook_s:g} s (in cell "
                       f"{index + 1}, or the tamper guard's checks around it)")
        self._stop(f"hung: cell {index + 1} ran past the time limit of {self.timeout} s "
                   f"({self.limits.notebook_s:g} s per notebook, {self.limits.cell_s:g} s per cell)")

    def _as_sent(self, source: str) -> str:
        """A test cell as the kernel gets it: secret probe seeds, and (for a submission) no expected values."""
        source = withhold.seed_probes(source, self._probe_key)
        return source if self.reference_mode else withhold.strip_expected(source)

    def _run_shifted(self, cell, index: int) -> None:
        """The reference run only: the test cell once more, its answers tainted (see TAINT)."""
        self._quiet(TAINT.replace("NAMES", repr(self._answer_names)))
        self._pass = 1
        again = copy.deepcopy(cell)
        again.source = self._as_sent(cell.source)
        try:
            self._charge()
            self.execute_cell(again, index, store_history=False)
        finally:
            self.nb.cells[index] = cell   # nbclient puts the cell it ran into the notebook
            self._pass = 0
            self._quiet(UNTAINT)

    def _quiet(self, code: str) -> None:
        self._charge()
        reply = self._wait(self.kc.execute(code, silent=True, store_history=False))
        if (reply or {}).get("content", {}).get("status") != "ok":
            raise RuntimeError(f"the grader's own code failed in the kernel: {code.strip().splitlines()[-1]}")

    def _launcher_pid(self) -> int | None:
        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        return getattr(process, "pid", None)

    def _check_expr(self, cell) -> str:
        return sandbox.guard_call("check", json.dumps(sandbox.names_read(cell.source)))

    def _stop(self, reason: str) -> None:
        self._stopped = True
        self._fault(reason)
        raise _Stop(reason)
