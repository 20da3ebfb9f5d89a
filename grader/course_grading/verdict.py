"""Who decides whether a test passed: the grader, from plain data, outside the learner's kernel.

While a submission is autograded, each value check a test cell makes (``checks.expect_close``,
``expect_equal``, ``expect_shape``, ``expect_dtype``) sends the grader a *record*: its kind, its
name, the learner's value, the expected value and the tolerance, as plain data (tensors as
float64 bytes; see ``records.encode_value``). The learner's kernel can fake, drop or add records,
and it computes the expected values in the first place; so the grader trusts none of it on its
own word. It holds each test cell to its own run of the chapter's *solution* (the reference,
``reference.py``), made once per chapter in the same sandbox:

1. the kernel replied ``ok`` to the cell and no error came back (``execution.py``);
2. the cell sent exactly the checks the solution's run sent, same kinds and names, same order;
3. each record's value agrees with its expected value, compared here with the tolerance of the
   *reference's* record (never the kernel's);
4. where the solution's expected value does not depend on the learner's code (the reference
   run made it twice, the second time with every global seed shifted, and got the same bytes:
   *fixed*), the learner's expected value must equal the solution's: a kernel that computed a
   different "expected" (a replaced function, a poisoned input) fails there. Where it does
   depend on them (e.g. a reference module loaded with the learner's own weights), its shape
   must still match, and its values come from the kernel, under the tamper guard.

:func:`judge` returns why a cell fails, or ``None``; the reasons name a check by its number and
name, never a value, so nothing hidden reaches the feedback.
"""

from __future__ import annotations

import ast
import base64
import json
import re
from typing import Any

import torch

from course_utils.messages import tr
from course_utils.records import RECORD_MIME  # noqa: F401  (records' name; the grader reads verdict.RECORD_MIME)

__all__ = ["agree", "decode", "judge", "same_bytes"]

VALUE_KINDS = ("close", "equal")


def decode(v: Any) -> torch.Tensor | str | None:
    """A record's value: a float64 tensor of its shape, a ``repr`` string, or ``None`` when malformed."""
    if not isinstance(v, dict):
        return None
    if "py" in v:
        return v["py"] if isinstance(v["py"], str) else None
    shape, raw = v.get("shape"), v.get("f64")
    if not (isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape) and isinstance(raw, str)):
        return None
    try:
        data = bytearray(base64.b64decode(raw, validate=True))
    except ValueError:
        return None
    n = 1
    for s in shape:
        n *= s
    if str(v.get("dtype", "")).startswith("torch.complex"):
        shape = [*shape, 2]
        n *= 2
    if len(data) != 8 * n:
        return None
    return (torch.frombuffer(data, dtype=torch.float64) if n else torch.zeros(0, dtype=torch.float64)).reshape(shape)


def agree(kind: str, got: Any, want: Any, atol: float | None, rtol: float | None) -> bool:
    """Whether two encoded values agree for a check of ``kind`` (``close`` within tolerance, else exactly)."""
    a, e = decode(got), decode(want)
    if a is None or e is None or type(a) is not type(e):
        return False
    if isinstance(a, str):
        if a == e:
            return True
        la, le = _literal(a), _literal(e)
        return la is not _NO and le is not _NO and la == le
    if tuple(a.shape) != tuple(e.shape):
        return False
    if kind == "close":
        return bool(torch.isclose(a, e, atol=float(atol or 0.0), rtol=float(rtol or 0.0), equal_nan=True).all())
    return bool(torch.equal(a, e))


_NO = object()


LITERAL_CHARS = 200   # a longer repr is compared as text: never parsed (its cost would be the learner's choice)
_NUMBER = re.compile(r"-?\d+(\.\d*)?([eE][-+]?\d+)?|True|False|None")


def _literal(text: str) -> Any:
    """A short ``repr`` read back when it is a number, a bool or ``None`` (so ``1`` and ``1.0`` agree,
    as ``==`` says), or a short tuple or list of them; anything else compares as text."""
    if len(text) > LITERAL_CHARS or not all(_NUMBER.fullmatch(p.strip()) for p in
                                            text.strip("()[] ").split(",") if p.strip()):
        return _NO
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _NO


def same_bytes(a: Any, b: Any) -> bool:
    """Whether two encoded values are the very same data."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _shape(v: Any) -> Any:
    """What must match where an expected value is not fixed: a tensor's shape, else the value itself."""
    if not isinstance(v, dict):
        return None
    return v.get("py") if "py" in v else v.get("shape")


def judge(records: list[dict], reference: list[dict] | None) -> str | None:
    """Why a test cell fails when its ``records`` are held to the solution's ``reference``, or ``None``."""
    if reference is None:
        return tr("the grader has no reference run for this test")
    if len(records) != len(reference):
        return tr("the grader received {got} of the {total} checks this test makes (a check was skipped, added "
                  "or hidden)", got=len(records), total=len(reference))
    for i, (rec, ref) in enumerate(zip(records, reference), 1):
        if not isinstance(rec, dict) or (rec.get("kind"), rec.get("what")) != (ref["kind"], ref["what"]):
            return tr("{check}: the grader received another check in its place", check=_name(i, ref, reference))
    wrong = failing(records, reference)
    return tr("{check}: does not hold when the grader compares the values itself", check=wrong[0]) if wrong else None


def _name(i: int, ref: dict, reference: list[dict]) -> str:
    return tr("check {i} of {n} ({what})", i=i, n=len(reference), what=ref["what"])


def failing(records: list[dict], reference: list[dict]) -> list[str]:
    """The checks of ``reference`` whose record does not hold, named by the reference (never a value).

    A *fixed* check (its expected value is the same whatever the learner's code does) holds when the
    learner's value agrees with the reference run's expected value: whatever expected value the kernel
    sent is not used. Only where the expected value depends on the learner's code (a relation between
    two of their outputs, a module run with their weights) is the kernel's expected value compared
    with, and then its shape must be the reference's. A missing or swapped record fails.
    """
    out = []
    for i, ref in enumerate(reference, 1):
        rec = records[i - 1] if i <= len(records) else None
        kind, atol, rtol = ref["kind"], ref.get("atol"), ref.get("rtol")
        ok = isinstance(rec, dict) and (rec.get("kind"), rec.get("what")) == (kind, ref["what"])
        if ok and ref["fixed"]:
            ok = agree(kind, rec.get("actual"), ref["expected"], atol, rtol)
        elif ok:
            expected = rec.get("expected")
            ok = _shape(expected) == _shape(ref["expected"]) and agree(kind, rec.get("actual"), expected, atol, rtol)
        if not ok:
            out.append(_name(i, ref, reference))
    return out
