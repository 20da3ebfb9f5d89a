"""What the grader's client takes from a kernel, and when (grader/course_grading/execution.py), without a kernel.

nbclient, left to itself, applies an ``update_display_data`` (or any output carrying a transient
``display_id``) in place to every earlier output with that id, outside ``SandboxedExecute.output``
(the caps, the sanitiser, the record channel); and the tamper guard's calls into the kernel were
not charged to the notebook's deadline. These tests feed the client the messages a kernel could send.
"""

import time

import nbformat
import pytest

from course_grading import execution, sandbox, verdict


def _client(cells: int = 3):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"cell {i}") for i in range(cells)])
    ex = execution.SandboxedExecute()
    ex.nb = nb
    ex.reset_execution_trackers()
    ex.clear_before_next_output = False
    ex._report = {"faults": [], "tampering": {}}
    ex._records, ex._record_bytes, ex._pass = {}, 0, 0
    ex._cell_bytes, ex._total_bytes, ex._cut, ex._displays = {}, 0, set(), {}
    return ex, nb


def _msg(kind: str, data: dict, display_id: str | None = None, parent: str = "p") -> dict:
    content = {"data": data, "metadata": {}}
    if display_id is not None:
        content["transient"] = {"display_id": display_id}
    return {"msg_type": kind, "header": {"msg_type": kind}, "parent_header": {"msg_id": parent}, "content": content}


def _send(ex, nb, index: int, msg: dict):
    return ex.process_message(msg, nb.cells[index], index)


def test_a_display_update_never_reaches_an_earlier_cell():
    ex, nb = _client()
    _send(ex, nb, 0, _msg("display_data", {"text/plain": "placeholder"}, "d1"))
    # a later cell (after the hidden tests, or an answer while a hidden test calls it) updates it
    _send(ex, nb, 2, _msg("update_display_data", {"text/plain": "LEAK hidden probes"}, "d1"))
    _send(ex, nb, 2, _msg("display_data", {"text/html": "<script>alert(1)</script>LEAK"}, "d1"))
    assert nb.cells[0].outputs[0]["data"] == {"text/plain": "placeholder"}
    assert "LEAK" not in str(nb.cells[0].outputs) and not ex._display_id_map
    # the later cell's own display is an output of that cell, sanitised like any other
    assert len(nb.cells[2].outputs) == 1 and "<script" not in str(nb.cells[2].outputs)


def test_a_cell_updates_its_own_display_through_the_caps_and_the_sanitiser():
    ex, nb = _client()
    _send(ex, nb, 1, _msg("display_data", {"text/plain": ""}, "bar"))   # a progress bar (course_utils.train)
    _send(ex, nb, 1, _msg("update_display_data", {"text/plain": "50%"}, "bar"))
    assert nb.cells[1].outputs[0]["data"] == {"text/plain": "50%"}
    _send(ex, nb, 1, _msg("update_display_data", {"text/html": '<img src=x onerror="alert(1)">'}, "bar"))
    assert "onerror" not in str(nb.cells[1].outputs[0]["data"])
    big = {"text/plain": "z" * (execution.CELL_OUTPUT_BYTES + 1)}
    _send(ex, nb, 1, _msg("update_display_data", big, "bar"))
    assert len(str(nb.cells[1].outputs)) < 1000 and any("was cut" in f for f in ex._report["faults"])
    record = {verdict.RECORD_MIME: {"kind": "equal", "what": "x"}}
    _send(ex, nb, 1, _msg("update_display_data", record, "bar"))
    assert not ex._records and verdict.RECORD_MIME not in str(nb.cells[1].outputs)


def test_updates_count_against_the_notebooks_cap():
    ex, nb = _client()
    _send(ex, nb, 0, _msg("display_data", {"text/plain": "."}, "d"))
    chunk = {"text/plain": "y" * (execution.CELL_OUTPUT_BYTES // 4)}
    for _ in range(8):   # 2 MiB in all: over the cell's cap, however it is cut into updates
        _send(ex, nb, 0, _msg("update_display_data", chunk, "d"))
    assert ex._cell_bytes[0] > execution.CELL_OUTPUT_BYTES and 0 in ex._cut


def test_a_forged_execution_count_is_not_stored():
    ex, nb = _client()
    msg = _msg("execute_result", {"text/plain": "1"})
    msg["content"]["execution_count"] = "x" * 10_000
    _send(ex, nb, 0, msg)
    assert nb.cells[0].get("execution_count") is None
    assert "xxxx" not in str(nb.cells[0])


class _Kernel:
    """A kernel client whose calls are only counted; the reply comes from ``wait_for_reply``."""

    def __init__(self):
        self.calls = 0

    def execute(self, *a, **k):
        self.calls += 1
        return f"m{self.calls}"


def _timed(ex, monkeypatch, deadline_in: float):
    ex.limits = sandbox.Limits(notebook_s=60, cell_s=30)
    ex._deadline = time.monotonic() + deadline_in
    ex._index, ex._stopped, ex.kc = 1, False, _Kernel()
    seen = []

    def wait_for_reply(msg_id, cell=None):
        seen.append((ex.timeout, cell))
        return {"content": {"user_expressions": {"r": {"status": "ok", "data": {"text/plain": "'[]'"}}}}}

    monkeypatch.setattr(ex, "wait_for_reply", wait_for_reply)
    return seen


def test_the_tamper_guards_calls_are_charged_to_the_notebooks_deadline(monkeypatch):
    ex, nb = _client()
    seen = _timed(ex, monkeypatch, deadline_in=5)
    assert ex._guard("1") == []
    timeout, cell = seen[0]
    # it waits no longer than the notebook has left, and with a cell, so that a timeout stops it
    assert timeout <= 5 and cell is nb.cells[1]


def test_no_call_into_the_kernel_once_the_notebook_is_out_of_time(monkeypatch):
    ex, nb = _client()
    seen = _timed(ex, monkeypatch, deadline_in=-1)
    with pytest.raises(execution._Stop, match="time limit of 60 s"):
        ex._guard("1")
    assert ex.kc.calls == 0 and not seen
    with pytest.raises(execution._Stop):
        ex._quiet("pass")
    assert ex.kc.calls == 0 and any("hung" in f for f in ex._report["faults"])


def test_a_timeout_with_only_the_notebooks_time_left_is_named_so(monkeypatch):
    from nbclient.exceptions import CellTimeoutError
    ex, nb = _client()
    _timed(ex, monkeypatch, deadline_in=4)
    ex._charge()   # a cell or a guard call given the 4 s left of the notebook, not the 30 s of a cell
    with pytest.raises(execution._Stop, match="the notebook ran over its time limit of 60 s"):
        ex._timed_out(CellTimeoutError("Cell execution timed out"), 1)
    ex._deadline = time.monotonic() + 600
    ex._charge()
    with pytest.raises(execution._Stop, match="cell 2 ran past the time limit of 30 s"):
        ex._timed_out(CellTimeoutError("Cell execution timed out"), 1)
