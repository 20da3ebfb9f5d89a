"""Learner-facing checks used in the notebooks' visible test cells.

Each check raises ``AssertionError`` with a message that says what is wrong (a shape, a
dtype, the first wrong value and where it is, an exercise not done yet) and prints a
one-line success otherwise. Hidden tests use the same helpers.

While a notebook is autograded, every value check also sends the grader what it compared, as a
record (:mod:`course_utils.records`: the format, and the grader's switch to recording only).

>>> import torch
>>> expect_close(torch.ones(2), torch.ones(2), "ones")
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import math
import traceback
import types
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from course_utils import records
from course_utils.messages import tr

# The record format's names are records' (exported there); hidden tests and older code find them here too.
from course_utils.records import (  # noqa: F401
    RECORD_FLAG,
    RECORD_MAX_VALUES,
    RECORD_MIME,
    WITHHELD,
    Withheld,
    encode_value,
)

__all__ = [
    "call", "CheckFailed", "expect_close", "expect_dtype", "expect_equal", "expect_not_calling", "expect_shape",
    "forbid", "learner_or_reference", "NotImplementedYet", "run_checks", "same_result"
]


class CheckFailed(AssertionError):
    """A check failed; the message is meant for the learner.

    In a notebook it shows as its message alone: IPython asks an exception for
    ``_render_traceback_`` before it formats a traceback, and the frames of the checks would
    only hide the hint under ten lines of code the learner did not write.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


def _fmt_shape(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")"


def expect_shape(t: Any, shape: Sequence[int], what: str) -> None:
    """Fail unless ``t`` is a tensor of exactly ``shape``."""
    withheld = isinstance(shape, Withheld)
    records.send("shape", what, list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__,
            shape if withheld else [int(s) for s in shape])
    if records.is_record_only() or withheld:
        return
    _shape_holds(t, shape, what)


def _shape_holds(t: Any, shape: Sequence[int], what: str) -> None:
    """:func:`expect_shape` without a record: the value checks' own records already carry the shape."""
    if records.is_record_only():
        return
    if not isinstance(t, torch.Tensor):
        raise CheckFailed(tr("{what}: expected a torch.Tensor of shape {shape}, got {got}", what=what,
                              shape=_fmt_shape(shape), got=type(t).__name__))
    if tuple(t.shape) != tuple(shape):
        raise CheckFailed(tr("{what}: expected shape {shape}, got {got}", what=what, shape=_fmt_shape(shape),
                              got=_fmt_shape(t.shape)))


def expect_dtype(t: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    """Fail unless ``t`` has ``dtype``."""
    records.send("dtype", what, getattr(t, "dtype", type(t).__name__), dtype)
    if records.is_record_only() or isinstance(dtype, Withheld):
        return
    if t.dtype != dtype:
        raise CheckFailed(tr("{what}: expected dtype {dtype}, got {got}", what=what, dtype=dtype, got=t.dtype))


def expect_close(actual: Any, expected: torch.Tensor, what: str, atol: float = 1e-5,
                 rtol: float = 1e-4) -> None:
    """Fail unless ``actual`` has ``expected``'s shape and values (within tolerance).

    The message names the first position that differs and both values there. Both sides are
    compared as plain tensors (:func:`course_utils.records.plain`), whatever subclass ``actual`` is.
    """
    if isinstance(expected, Withheld):   # the grader compares it, outside the kernel
        records.send("close", what, actual, expected, atol, rtol)
        return
    expected = torch.as_tensor(expected)
    records.send("close", what, actual, expected, atol, rtol)
    _shape_holds(actual, expected.shape, what)
    if records.is_record_only():
        return
    a = records.plain(actual)
    e = records.plain(expected)
    with torch._C.DisableTorchFunction():
        _compare_close(a, e, what, atol, rtol)


def _compare_close(a: torch.Tensor, e: torch.Tensor, what: str, atol: float, rtol: float) -> None:
    if torch.isnan(a).any() and not torch.isnan(e).any():
        idx = tuple(int(i) for i in torch.nonzero(torch.isnan(a))[0])
        raise CheckFailed(tr("{what}: NaN at index {index} (expected {expected})", what=what, index=idx,
                              expected=f"{e[idx].item():.6g}"))
    bad = ~torch.isclose(a, e, atol=atol, rtol=rtol, equal_nan=True)
    if bad.any():
        idx = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise CheckFailed(tr("{what}: wrong value at index {index}: got {got}, expected {expected} "
                             "({wrong} of {total} values differ)", what=what, index=idx, got=f"{a[idx].item():.6g}",
                             expected=f"{e[idx].item():.6g}", wrong=int(bad.sum()), total=bad.numel()))


def expect_equal(actual: Any, expected: Any, what: str) -> None:
    """Fail unless ``actual == expected`` (tensors: same shape and every element equal)."""
    records.send("equal", what, actual, expected)
    if isinstance(expected, Withheld):
        return
    if isinstance(expected, torch.Tensor):
        _shape_holds(actual, expected.shape, what)
        if records.is_record_only():
            return
        actual, expected = records.plain(actual, None), records.plain(expected, None)
        with torch._C.DisableTorchFunction():
            bad = actual != expected
            if bad.any():
                idx = tuple(int(i) for i in torch.nonzero(bad)[0])
                raise CheckFailed(tr("{what}: wrong value at index {index}: got {got}, expected {expected}",
                                     what=what, index=idx, got=actual[idx].item(), expected=expected[idx].item()))
    elif not records.is_record_only() and actual != expected:
        raise CheckFailed(tr("{what}: expected {expected}, got {got}", what=what, expected=repr(expected),
                              got=repr(actual)))


class NotImplementedYet(CheckFailed):
    """The learner's function still raises ``NotImplementedError``: the exercise is not done yet."""


def _tensors(value: Any, where: str, depth: int = 0) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in ``value`` (inside lists, tuples and dicts, and a module's parameters and
    buffers), each with where it sits (``x``, ``cache[0]``, ``layer.weight``)."""
    if isinstance(value, torch.Tensor):
        yield where, value
    elif isinstance(value, torch.nn.Module):
        for name, t in [*value.named_parameters(), *value.named_buffers()]:
            yield f"{where}.{name}", t
    elif depth < 3 and isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _tensors(v, f"{where}[{i}]", depth + 1)
    elif depth < 3 and isinstance(value, dict):
        for k, v in value.items():
            yield from _tensors(v, f"{where}[{k!r}]", depth + 1)


def _frozen(t: torch.Tensor) -> tuple:
    """What a tensor is now: its values (a copy), shape, dtype, strides and offset."""
    with torch.no_grad(), torch._C.DisableTorchFunction():
        t = records.plain(t, None) if type(t) is not torch.Tensor else t
        return (t.detach().clone(), tuple(t.shape), t.dtype, t.stride(), t.storage_offset())


def _changed(before: tuple, t: torch.Tensor) -> str | None:
    """How ``t`` differs from its snapshot ``before``, or None."""
    now = _frozen(t)
    if now[1:] != before[1:]:
        return tr("its shape, dtype or layout changed from {before} to {now}",
                  before=f"{_fmt_shape(before[1])} {before[2]}", now=f"{_fmt_shape(now[1])} {now[2]}")
    old, new = before[0], now[0]
    with torch._C.DisableTorchFunction():
        same = torch.equal(old, new) or (old.is_floating_point() and torch.equal(old.isnan(), new.isnan())
                                         and torch.equal(old.nan_to_num(0.0), new.nan_to_num(0.0)))
    return None if same else tr("its values changed")


def _inputs(fn: Callable, args: tuple, kwargs: dict, skip: tuple[str, ...] = ()) -> list[tuple[str, torch.Tensor, tuple]]:
    """Every tensor the call hands ``fn``, named by its argument, with its snapshot; a module's own
    parameters and buffers (``self.…``) are inputs too. Arguments named in ``skip`` are not watched."""
    try:
        named = dict(inspect.signature(fn).bind_partial(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        named = {f"argument {i + 1}": a for i, a in enumerate(args)} | kwargs
    if isinstance(fn, torch.nn.Module):
        named = {"self": fn, **named}
    return [(where, t, _frozen(t)) for name, value in named.items() if name not in skip
            for where, t in _tensors(value, name)]


def _shares_memory(out: Any, watched: list[tuple[str, torch.Tensor, tuple]]) -> str | None:
    """The watched input whose memory a tensor of ``out`` shares, or None."""
    ptrs = {t.untyped_storage().data_ptr() for _, t in _tensors(out, "out") if t.numel()}
    return next((where for where, t, _ in watched if t.numel() and t.untyped_storage().data_ptr() in ptrs), None)


# Warnings the learner's code gave inside run_checks, shown after its verdict (not above the hint).
_WARNED: list[str] | None = None


def _said(name: str, caught: list) -> None:
    """The warnings a call of ``name`` gave, one line each, without the file path of the cell that gave
    them (a temporary file of the kernel): kept for after run_checks' verdict, else printed now."""
    lines = [tr("note: {name} gave a {category}: {message}", name=name, category=w.category.__name__,
                message=(str(w.message).splitlines() or [''])[0][:300]) for w in caught]
    lines = list(dict.fromkeys(lines))
    if _WARNED is not None:
        _WARNED.extend(x for x in lines if x not in _WARNED)
    else:
        for line in lines:
            print(line)


def call(fn: Callable, *args, what: str | None = None, **kwargs) -> Any:
    """Call the learner's ``fn``; an exercise not done yet becomes a clear failure, and so does a call
    that changed one of its inputs in place (the course's rule: a function leaves its inputs as they
    were, unless its declaration in :mod:`course_utils.domains` lists the argument in ``mutates``).

    Where ``fn`` is a declared exercise (:mod:`course_utils.domains`): while it runs, the chapter's
    other exercises' functions are their references (one mistake costs one exercise), and where its
    prompt promises a new tensor, the result must not share an input's memory. While
    :func:`course_utils.domains.recording` is on, the call is recorded.
    """
    from course_utils import domains
    name = what or getattr(fn, "__name__", "your function")
    ex = domains.exercise_of(fn)
    watched = _inputs(fn, args, kwargs, skip=ex.mutates if ex is not None else ())
    try:
        with warnings.catch_warnings(record=True) as caught, domains.isolated(fn):
            warnings.simplefilter("always")
            out = fn(*args, **kwargs)
    except NotImplementedError as err:
        domains.record(fn, args, kwargs, err)
        raise NotImplementedYet(tr("{name} is not implemented yet: replace `raise NotImplementedError()` "
                                   "with your code", name=name)) from None
    except BaseException as err:
        domains.record(fn, args, kwargs, err)
        raise
    domains.record(fn, args, kwargs, None)
    _said(name, caught)
    for where, t, before in watched:
        how = _changed(before, t)
        if how:
            raise CheckFailed(tr("{name} changed its input `{where}` in place ({how}): a function of the course "
                                 "leaves its inputs as they were and returns new tensors (use `x.masked_fill(...)`, "
                                 "`x * s`, `x.transpose(...)`, not `x.masked_fill_(...)`, `x.mul_(s)`, "
                                 "`x.transpose_(...)`)", name=name, where=where, how=how))
    shared = _shares_memory(out, watched) if ex is not None and ex.returns_new else None
    if shared is not None:
        raise CheckFailed(tr("{name} returned a view of its input `{where}` (the result shares its memory): "
                             "the prompt asks for a new tensor, so that the caller's input and your result do not "
                             "change together", name=name, where=shared))
    return out


def run_checks(name: str, checks: Sequence[tuple[str, Callable[[], None]]]) -> None:
    """Run every named check; print a success line, or fail naming every check that failed.

    Each failure is listed with its number, its description and its reason (the hint), so a
    learner sees check 3's advice even when check 2 fails too. A check that raises anything
    but :class:`CheckFailed` (the learner's code crashed) is listed with the exception and the
    line that raised it.
    """
    global _WARNED
    failures = []
    outer, _WARNED = _WARNED, []
    try:
        for i, (desc, check) in enumerate(checks, 1):
            try:
                check()
            except NotImplementedYet as err:   # every check would say the same: say it once
                raise CheckFailed(tr("{name}: {reason}", name=name, reason=err)) from None
            except CheckFailed as err:
                failures.append(tr("check {i}/{n} ({desc}): {reason}", i=i, n=len(checks), desc=desc, reason=err))
            except Exception as err:  # noqa: BLE001 (the learner's code raised: report it with the others)
                failures.append(tr("check {i}/{n} ({desc}) raised {error}: {reason}{where}", i=i, n=len(checks),
                                   desc=desc, error=type(err).__name__, reason=err, where=_where(err)))
    finally:
        warned, _WARNED = _WARNED, outer
    if failures:
        raise CheckFailed(tr("{name}: {failed} of {n} checks failed", name=name, failed=len(failures), n=len(checks))
                          + "\n"
                          + "\n".join(f"  \u2717 {f}" for f in failures)
                          + "".join(f"\n  {w}" for w in warned))
    print("\u2713 " + tr("{name}: all {n} checks passed", name=name, n=len(checks)))
    for w in warned:
        print(w)


def _where(err: BaseException) -> str:
    """`` (line N: code)`` of the innermost frame that raised ``err``, where it is known."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    if last.line:
        return tr(" (line {line}: {code})", line=last.lineno, code=last.line.strip())
    return tr(" (line {line})", line=last.lineno)


def same_result(got: Any, want: Any, atol: float = 1e-4, rtol: float = 1e-4) -> bool:
    """True when ``got`` and ``want`` agree: tensors within tolerance (same shape), numbers
    within tolerance, and sequences, dicts and dataclasses element by element."""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
            return False
        got, want = records.plain(got, None), records.plain(want, None)
        with torch._C.DisableTorchFunction():
            if want.dtype == torch.bool or not want.is_floating_point():
                return bool(torch.equal(got, want))
            return bool(torch.allclose(got.double(), want.double(), atol=atol, rtol=rtol, equal_nan=True))
    if dataclasses.is_dataclass(want) and not isinstance(want, type):
        if type(got) is not type(want):
            return False
        return all(same_result(getattr(got, f.name), getattr(want, f.name), atol, rtol)
                   for f in dataclasses.fields(want))
    if isinstance(want, dict):
        return (isinstance(got, dict) and got.keys() == want.keys()
                and all(same_result(got[k], want[k], atol, rtol) for k in want))
    if isinstance(want, (list, tuple)):
        return (isinstance(got, (list, tuple)) and len(got) == len(want)
                and all(same_result(g, w, atol, rtol) for g, w in zip(got, want)))
    if isinstance(want, float) or isinstance(got, float):
        try:
            return math.isclose(float(got), float(want), rel_tol=rtol, abs_tol=atol)
        except (TypeError, ValueError):
            return False
    return got == want


def learner_or_reference(learner: Callable, reference: Callable, probe: Callable[[Callable], Any],
                         name: str | None = None) -> Callable:
    """Return the learner's function if it agrees with the reference on a probe, else the reference.

    Lets the experiments of a chapter run on the learner's code when it is right, and only
    then: ``probe(fn)`` is a small call of the function (it may also assert things itself);
    its result with the learner's function is compared with its result with the reference
    (:func:`same_result`: tensors within 1e-4). The reference from ``course_utils`` is used,
    and a line says why, when the learner's function raises ``NotImplementedError`` (the
    exercise is not done), raises anything else, or returns a different result.
    """
    name = name or getattr(learner, "__name__", "your function")
    try:
        got = probe(learner)
    except NotImplementedError:
        print(tr("[{name}] not implemented yet: the experiments below use the course_utils reference", name=name))
        return reference
    except Exception as err:  # noqa: BLE001 (any failure means: fall back, and say why)
        print(tr("[{name}] raised {error}: {reason}; the experiments below use the course_utils reference",
                 name=name, error=type(err).__name__, reason=err))
        return reference
    if not same_result(got, probe(reference)):
        print(tr("[{name}] gives a different result from the course_utils reference on a probe "
                 "input; the experiments below use the reference (run the exercise's tests to "
                 "see what differs)", name=name))
        return reference
    print(tr("[{name}] agrees with the reference on a probe: the experiments below use your implementation",
             name=name))
    return learner


def _domains():
    from course_utils import domains
    return domains


def _forbidden_message(name: str) -> str:
    return tr("your answer calls {name}: the exercise is to write it yourself", name=name)


def _forbidden(name: str) -> Callable:
    def stand_in(*args, **kwargs):
        raise CheckFailed(_forbidden_message(name))
    return stand_in


def _raising_code(name: str, old_code: types.CodeType) -> types.CodeType:
    """A code object that raises ``AssertionError`` naming ``name``.

    It has ``old_code``'s free variables (a function's code can only be swapped for code
    with the same closure size) and uses only builtins, since it runs with the original
    function's globals.
    """
    freevars = old_code.co_freevars
    src = (f"def _outer({', '.join(freevars)}):\n"
           f"    def f(*args, **kwargs):\n"
           f"        {'; '.join(freevars) or 'pass'}\n"
           f"        raise AssertionError({_forbidden_message(name)!r})\n"
           f"    return f\n")
    ns: dict[str, Any] = {}
    exec(compile(src, "<forbid>", "exec"), {}, ns)  # noqa: S102 (fixed template, no user input)
    return ns["_outer"](*([None] * len(freevars))).__code__


@contextlib.contextmanager
def forbid(*targets: Any) -> Iterator[None]:
    """Make calling any of ``targets`` fail inside the ``with`` block.

    A target is a Python function (its code object is swapped, so every alias of it fails
    too, whatever name a learner imported it under) or a ``(module, attribute)`` pair
    (the attribute is replaced, for builtins such as ``torch.nn.functional`` functions).
    """
    restore: list[Callable[[], None]] = []
    try:
        for target in targets:
            if isinstance(target, tuple):
                module, attr = target
                old = getattr(module, attr)
                setattr(module, attr, _forbidden(f"{module.__name__}.{attr}"))
                restore.append(functools.partial(setattr, module, attr, old))
            elif isinstance(target, types.FunctionType):
                old_code = target.__code__
                _domains()._ORIGINAL_CODE.setdefault(id(target), old_code)
                restore.append(functools.partial(_domains()._ORIGINAL_CODE.pop, id(target), None))
                target.__code__ = _raising_code(f"{target.__module__}.{target.__qualname__}", old_code)
                restore.append(functools.partial(setattr, target, "__code__", old_code))
            else:
                raise TypeError(f"cannot forbid {target!r}: give a function or (module, name)")
        yield
    finally:
        for undo in reversed(restore):
            undo()



def expect_not_calling(fn: Callable, *banned: Callable, by_name: bool = True) -> None:
    """Fail if the code of ``fn`` uses one of the ``banned`` functions.

    A static complement to :func:`forbid`: it looks at every name that ``fn``'s code (and the
    code of functions defined inside it) uses. A global alias (``from X import f as g``)
    counts by what it refers to; an attribute such as ``torch.softmax`` counts by its name
    (unless ``by_name`` is False); so does a function captured in ``fn``'s closure. A learner's own notebook function with the same name as a
    banned one (defined in ``__main__``) is allowed.
    """
    names, todo = set(), [fn.__code__]
    while todo:
        code = todo.pop()
        names |= set(code.co_names)
        todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    glob = fn.__globals__
    captured = [c.cell_contents for c in (fn.__closure__ or ()) if _cell_filled(c)]
    found: list[str] = []
    for b in banned:
        own = getattr(glob.get(b.__name__), "__module__", None) == "__main__"
        if (any(glob.get(n) is b for n in names) or any(c is b for c in captured)
                or (by_name and b.__name__ in names and not own)):
            if b.__name__ not in found:
                found.append(b.__name__)
    if found:
        raise CheckFailed(tr("{name} uses {banned}: the exercise is to write it with basic tensor operations",
                             name=fn.__name__, banned=", ".join(found)))


def _cell_filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty closure cell raises ValueError)
    except ValueError:
        return False
    return True
