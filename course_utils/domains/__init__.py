"""Declared domains: what each exercise's prompt allows as input, in one place its hidden test reads.

An exercise's declaration (:class:`Exercise`) lists, per argument, the *kinds* of value the prompt
allows (:class:`Kind`: Python and NumPy scalars, 0-d and n-d tensors, dtypes and their mixes,
fractional values, magnitudes in a formula's overflow range, sizes past 2**63 ...) and the bad inputs
that must raise. Each chapter has its module, ``course_utils/domains/chNN.py``, defining ``CHAPTER`` and
``EXERCISES``. ``tests/test_domains.py`` runs every chapter's hidden tests with the solution and a
:data:`RECORDER` installed: :func:`course_utils.checks.call` reports every call of learner code, the
test classifies its arguments against the declaration and fails when a declared kind is never drawn
by the exercise's hidden test, or a declared bad input never tried.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["Arg", "Call", "Exercise", "Kind", "RECORDER", "describe", "exercises", "kinds_drawn", "record", "tensor"]


@dataclasses.dataclass(frozen=True)
class Kind:
    """One kind of value an argument may take: ``test(value)`` says whether a value is of it (for a
    bad input that must raise: ``test(arguments)``, the call's bound arguments by name)."""

    name: str
    text: str
    test: Callable[[Any], bool]

    def holds(self, value: Any) -> bool:
        try:
            return bool(self.test(value))
        except Exception:  # noqa: BLE001 (a test that cannot judge a value says no)
            return False


@dataclasses.dataclass(frozen=True)
class Arg:
    """An argument of the exercise's function, by name, with the kinds its prompt allows."""

    name: str
    kinds: tuple[Kind, ...]


@dataclasses.dataclass(frozen=True)
class Exercise:
    """One exercise's declared domain."""

    chapter: str
    exercise: str               # its grade id's stem, e.g. "ex5_rope"
    function: str               # the name the learner defines
    reference: str              # "module:attr" of its course_utils reference
    args: tuple[Arg, ...]
    raises: tuple[Kind, ...] = ()     # bad inputs that must raise (tests on the bound arguments)
    mutates: tuple[str, ...] = ()     # arguments the prompt allows to change (almost always none)
    returns_new: bool = False         # the prompt promises a new tensor: no output may alias an input


def tensor(dtype=None, dim: int | None = None) -> Callable[[Any], bool]:
    """A kind's test: a tensor, of ``dtype`` (or any) with ``dim`` dimensions (or any)."""
    import torch
    return lambda v: (torch.is_tensor(v) and (dtype is None or v.dtype == dtype)
                      and (dim is None or v.dim() == dim))


@dataclasses.dataclass
class Call:
    """One call of learner code through ``checks.call``, as :data:`RECORDER` receives it."""

    function: str
    arguments: dict[str, Any]
    raised: BaseException | None


#: Set by the course's own tests only (never in a learner's kernel or the grader's box): called with
#: every :class:`Call` that ``checks.call`` makes.
RECORDER: Callable[[Call], None] | None = None


def record(fn: Callable, args: tuple, kwargs: dict, raised: BaseException | None) -> None:
    """Hand one call to :data:`RECORDER` (if any), its arguments bound to their names."""
    if RECORDER is None:
        return
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):
        bound = {f"arg{i}": a for i, a in enumerate(args)} | kwargs
    RECORDER(Call(getattr(fn, "__name__", "?"), dict(bound), raised))


def exercises(chapter: str) -> tuple[Exercise, ...]:
    """The declarations of ``chapter`` (e.g. ``"ch05_attention_as_convolution"``); () if it has none yet."""
    try:
        module = importlib.import_module(f"course_utils.domains.{chapter[:4]}")
    except ModuleNotFoundError:
        return ()
    assert module.CHAPTER == chapter, f"course_utils/domains/{chapter[:4]}.py declares {module.CHAPTER}"
    return tuple(module.EXERCISES)


def kinds_drawn(exercise: Exercise, calls: list[Call]) -> dict[str, set[str]]:
    """``{"arg:kind" or "raises:kind": ...}``: which declared kinds ``calls`` (of the exercise's function) drew."""
    drawn: dict[str, set[str]] = {}
    for call in calls:
        if call.function != exercise.function:
            continue
        for arg in exercise.args:
            if arg.name in call.arguments:
                for kind in arg.kinds:
                    if kind.holds(call.arguments[arg.name]):
                        drawn.setdefault(arg.name, set()).add(kind.name)
        if call.raised is not None:
            for kind in exercise.raises:
                if kind.holds(call.arguments):
                    drawn.setdefault("raises", set()).add(kind.name)
    return drawn


def describe(exercise: Exercise) -> str:
    """The prompt's list of what the exercise accepts, generated from its declaration (Markdown)."""
    lines = [f"- `{arg.name}`: " + "; ".join(k.text for k in arg.kinds) + "." for arg in exercise.args]
    if exercise.raises:
        lines.append("- Raises on: " + "; ".join(k.text for k in exercise.raises) + ".")
    return "\n".join(lines)
