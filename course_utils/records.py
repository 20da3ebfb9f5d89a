"""What a check sends to the grader, and how: the record format of a graded kernel.

While a notebook is autograded, every value check of :mod:`course_utils.checks` also sends what it
compared (its kind and name, the learner's value, the expected value, the tolerance) out of the
kernel as plain data: a display message of the MIME type :data:`RECORD_MIME`, tensors as float64
bytes (never pickle). The grader, outside the learner's kernel, compares them again and against
its own run of the solution (``grader/course_grading/verdict.py``); a test passes only if both
agree. Nothing is sent unless the grader set :data:`RECORD_FLAG` in the kernel's environment.

Two things the grader changes in the kernel, both through this module:

- a hidden test's expected values are replaced by :data:`WITHHELD` before the cell reaches the
  kernel (``grader/course_grading/withhold.py``): a check given one sends the learner's value alone;
- :func:`record_only` switches the checks to recording without judging, which the grader's
  reference run does while it probes which expected values depend on the answer.

The learner never calls anything here: the checks do.
"""

from __future__ import annotations

import base64
import os
from typing import Any

import torch

__all__ = [
    "RECORD_FLAG", "RECORD_MAX_VALUES", "RECORD_MIME", "WITHHELD", "Withheld", "encode_value",
    "is_record_only", "plain", "record_only", "send",
]

RECORD_MIME = "application/vnd.course-check+json"
RECORD_FLAG = "COURSE_GRADING_RECORDS"
RECORD_MAX_VALUES = 2**20   # a bigger tensor is sent as its shape and dtype only (and cannot pass)
_only = False               # see record_only; the tamper guard watches it like every course_utils global


def record_only(on: bool) -> None:
    """Switch the checks to recording only (``True``) or back to recording and judging (``False``).

    The grader's reference run turns it on while it runs each test cell a second time with the
    answers nudged: the checks must then send what they compared without failing on it. Nothing
    else turns it on (the tamper guard flags and undoes a change made by a notebook's own code).
    """
    global _only
    _only = bool(on)


def is_record_only() -> bool:
    """Whether the checks only record (:func:`record_only`): they then send, and never fail."""
    return _only


class Withheld:
    """An expected value the grader keeps out of the learner's kernel.

    A hidden test computes its expected values between ``### BEGIN EXPECTED`` and ``### END EXPECTED``.
    When the grader runs a submission, it sends the kernel that cell with each such block replaced by
    ``name = WITHHELD`` for every name the block binds: the learner's kernel never computes, holds or
    sees an expected value, so no code in it can copy one into a learner's result. A check given a
    withheld value (``expect_close(got, _want[i], ...)``) sends the learner's value alone, and the
    grader compares it, outside the kernel, with its own run of the solution. Indexing, attributes,
    calls and arithmetic on a withheld value give it back; anything that would need its content
    (``len``, ``bool``, iterating) is an error that says so.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "<an expected value withheld by the grader>"

    def _same(self, *args, **kwargs) -> Withheld:
        return self

    __getitem__ = __call__ = __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _same
    __truediv__ = __rtruediv__ = __matmul__ = __rmatmul__ = __neg__ = __pow__ = _same

    def __getattr__(self, name: str) -> Withheld:
        if name.startswith("__"):   # protocols (__array__, __torch_function__, ...) are not pretended
            raise AttributeError(name)
        return self

    def _needs_content(self, *args, **kwargs):
        raise TypeError("an expected value withheld by the grader has no content in the kernel: a hidden "
                        "test may only index it and pass it to a check (course_utils.checks.Withheld)")

    __iter__ = __len__ = __bool__ = __float__ = __int__ = __index__ = _needs_content


WITHHELD = Withheld()


def plain(t: torch.Tensor, dtype: torch.dtype | None = torch.float64) -> torch.Tensor:
    """A plain ``torch.Tensor`` copy of ``t`` on the CPU (in ``dtype``; ``None`` keeps its own): a
    tensor subclass's overrides, and any ``TorchFunctionMode`` in force, play no part in what is
    sent or compared afterwards (the checks compare these copies too)."""
    with torch._C.DisableTorchFunction():
        t = torch.Tensor.as_subclass(t, torch.Tensor).detach()
        return (t.to("cpu", dtype) if dtype is not None else t.to("cpu")).clone()


def encode_value(v: Any) -> dict:
    """``v`` as JSON-able plain data: a tensor as dtype, shape and float64 bytes; anything else by ``repr``."""
    try:
        return _encode(v)
    except Exception as err:  # noqa: BLE001 (a value that cannot be sent cannot pass outside)
        return {"py": f"<{type(v).__name__} that could not be encoded: {type(err).__name__}>"}


def _encode(v: Any) -> dict:
    """:func:`encode_value` without the guard against values whose encoding raises."""
    if isinstance(v, torch.Tensor):
        t = plain(v, None)
        out = {"dtype": str(t.dtype), "shape": list(t.shape)}
        with torch._C.DisableTorchFunction():
            if t.numel() <= RECORD_MAX_VALUES:
                data = torch.view_as_real(t) if t.is_complex() else t
                out["f64"] = base64.b64encode(data.to(torch.float64).contiguous().numpy().tobytes()).decode()
        return out
    if isinstance(v, torch.dtype):
        return {"py": str(v)}
    return {"py": repr(v)}


def send(kind: str, what: str, actual: Any, expected: Any, atol: float | None = None,
         rtol: float | None = None) -> None:
    """Send the grader one check's record (only while a notebook is autograded: :data:`RECORD_FLAG`).

    ``kind`` is the check (``"close"``, ``"equal"``, ``"shape"``, ``"dtype"``), ``what`` its name
    in the test; a :class:`Withheld` ``expected`` is left out of the record.
    """
    if os.environ.get(RECORD_FLAG) != "1":
        return
    from IPython.display import publish_display_data

    record = {"kind": kind, "what": str(what), "atol": atol, "rtol": rtol, "actual": encode_value(actual)}
    if not isinstance(expected, Withheld):
        record["expected"] = encode_value(expected)
    publish_display_data({RECORD_MIME: record})
