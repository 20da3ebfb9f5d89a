"""Executing notebooks: nbgrader's execute step in the sandbox, and ``make execute``.

:class:`SandboxedExecute` runs one submission in its own :class:`~course_utils.grading.sandbox.Box`
(bubblewrap; see ``sandbox.py``), with a wall-clock limit per notebook and per cell, a cap on
what the kernel may send back (per message, per cell, per notebook), and the tamper guard
before and after every test cell. A fault (hang, dead kernel, fork bomb, memory) stays with its
submission: it keeps what it earned before, and its graded cells that did not run get an error.

**Who decides a test's result.** nbgrader scores a test cell from its stored outputs: an
``error`` output or a ``stderr`` stream is 0, an ``execute_result`` that reads as a number is
partial credit, anything else full marks. Those outputs are produced by the learner's kernel.
Here the grader rewrites every test cell's outputs itself before nbgrader sees them: a test
passes only if the kernel's reply to *that* execute request says ``ok`` and no error output
arrived for it; the cell then keeps only its stdout (none for a cell with hidden tests), and a
failing cell gets exactly one error output. ``execute_result`` and display outputs of test
cells are dropped, so a forged result cannot be read as a score; a test cell whose outputs
were cleared, or that was skipped, fails.
"""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path

import nbformat
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute

from course_utils.grading import feedback, sandbox
from course_utils.grading.results import FAULT, META, TAMPERING

CELL_OUTPUT_BYTES = 2 * 2**20       # what one cell's outputs may hold; more is cut
NOTEBOOK_OUTPUT_BYTES = 16 * 2**20  # what all outputs of a notebook may hold
MESSAGE_BYTES = 64 * 2**20          # a bigger message cuts the kernel's output channel: the notebook stops
HIDDEN = "BEGIN HIDDEN TESTS"


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

    def preprocess(self, nb, resources=None, km=None):
        report = nb.metadata.get(META, {})
        report.setdefault("faults", [])
        report["tampering"] = {}
        self._report = report
        self._run: set[int] = set()
        if report.get("not_run"):
            self._finish(nb, f"not graded: {report['not_run']}")
            return nb, resources
        self.limits = sandbox.Limits.from_env()
        self.interrupt_on_timeout = False
        self._deadline = time.monotonic() + self.limits.notebook_s
        self._stopped = self._guarded = False
        self._reply = None
        self._cell_bytes: dict[int, int] = {}
        self._total_bytes = 0
        self._cut: set[int] = set()
        chapter = (resources or {}).get("nbgrader", {}).get("assignment")
        solution = Path.cwd() / "solutions" / str(chapter)   # nbgrader runs in the course root
        sources = sorted(solution.glob("*.ipynb")) if chapter else []
        self._bindings = sandbox.chapter_bindings(sources[0]) if len(sources) == 1 else {}
        box = self._box = sandbox.Box(self.limits)
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
                self._fault(f"ran out of memory (limit {self.limits.memory_mb} MiB for the whole box)")
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

    def output(self, outs, msg, display_id, cell_index):
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
        out = super().output(outs, msg, display_id, cell_index)
        if out is not None:
            feedback.sanitise_output(out)
        return out

    def handle_comm_msg(self, outs, msg, cell_index):
        return None   # widgets are not graded, and their state could grow without end

    def on_cell_executed(self, **kwargs):
        self._reply = kwargs.get("execute_reply")
        return super().on_cell_executed(**kwargs)

    # --- the result of a test cell, decided here ----------------------------------------------------

    def _decide(self, cell) -> None:
        content = (self._reply or {}).get("content", {})
        errors = [o for o in cell.outputs if o.get("output_type") == "error"]
        ok = content.get("status") == "ok" and not errors
        keep = [] if HIDDEN in cell.source else [o for o in cell.outputs
                                                  if o.get("output_type") == "stream" and o.get("name") == "stdout"]
        if ok:
            cell.outputs = keep
            return
        if errors:
            err = _error(str(errors[0].get("ename")), str(errors[0].get("evalue")))
        elif content.get("status") == "error":
            err = _error(str(content.get("ename")), str(content.get("evalue")))
        else:
            err = _error(FAULT, f"the kernel gave no result for this test (status {content.get('status')!r})")
        cell.outputs = keep + [err]

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
                what = "; ".join(sorted({w for k, v in self._report["tampering"].items()
                                         if k.rsplit("-", 1)[0] == exercise for w in v}))[:300]
                cell.outputs = [o for o in cell.outputs if o.get("output_type") != "error"]
                cell.outputs.append(_error(TAMPERING, f"the notebook changed what the tests rely on: {what}"))
        nb.metadata[META] = self._report

    def _guard(self, expr: str) -> list[str]:
        msg_id = self.kc.execute("", silent=True, store_history=False, user_expressions={"r": expr})
        reply = self.wait_for_reply(msg_id)
        r = (reply or {}).get("content", {}).get("user_expressions", {}).get("r", {})
        if not isinstance(r, dict) or r.get("status") != "ok":
            return [f"the tamper guard failed: {r.get('ename') if isinstance(r, dict) else r}"]
        try:
            found = json.loads(ast.literal_eval(r["data"]["text/plain"]))
            assert isinstance(found, list)
            return [str(f)[:300] for f in found[:50]]
        except (KeyError, ValueError, SyntaxError, AssertionError, TypeError):
            return ["the tamper guard's answer was replaced"]

    def preprocess_cell(self, cell, resources, index):
        # Cells are named by their position counting from 1 (the first cell of the notebook is cell 1).
        if self._stopped:
            return cell, resources
        remaining = self._deadline - time.monotonic()
        try:
            if remaining < 1:
                self._stop(f"hung: the notebook ran over its time limit of {self.limits.notebook_s:g} s "
                           f"(stopped before cell {index + 1})")
            self.timeout = int(max(1, min(self.limits.cell_s, remaining)))
            if not self._guarded:
                self._guarded = True
                self._box.processes(self._launcher_pid())   # the baseline
                out = self._guard(sandbox.guard_call("install", json.dumps(self._bindings)))
                if out != ["installed"]:
                    self._fault(f"the grader could not set up its tamper guard: {out}")
            test = _is_test(cell)
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            found = []
            if test:
                found += self._guard(self._check_expr(cell))
            self._run.add(index)
            self._reply = None
            # Test cells stay out of IPython's history (In, _ih, Out): later cells cannot print them.
            cell = self.execute_cell(cell, index, store_history=not test)
            if test:
                found += self._guard(self._check_expr(cell))
                if found:
                    self._report["tampering"][grade_id] = sorted(set(found))
                self._decide(cell)
            n = self._box.processes(self._launcher_pid())
            if n > self.limits.children:
                self._stop(f"forked without end: {n} processes after cell {index + 1} "
                           f"(limit {self.limits.children}); stopped")
        except CellTimeoutError as e:
            self._run.discard(index)
            if "IOPub" in str(e):
                # the kernel replied, its output never came: a message over MESSAGE_BYTES made the
                # client drop the kernel's output channel
                self._stop(f"the output of cell {index + 1} was over {MESSAGE_BYTES // 2**20} MiB in one message "
                           "(or was lost); stopped")
            self._stop(f"hung: cell {index + 1} ran past the time limit of {self.timeout} s "
                       f"({self.limits.notebook_s:g} s per notebook, {self.limits.cell_s:g} s per cell)")
        except DeadKernelError:
            self._run.discard(index)
            code = self.km.provisioner.process.poll() if getattr(self.km.provisioner, "process", None) else None
            why = "out of memory" if self._box.out_of_memory() else f"memory limit {self.limits.memory_mb} MiB"
            self._stop(f"the kernel died in cell {index + 1} (exit status {code}; {why})")
        return cell, resources

    def _launcher_pid(self) -> int | None:
        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        return getattr(process, "pid", None)

    def _check_expr(self, cell) -> str:
        return sandbox.guard_call("check", json.dumps(sandbox.names_read(cell.source)))

    def _stop(self, reason: str) -> None:
        self._stopped = True
        self._fault(reason)
        raise _Stop(reason)
