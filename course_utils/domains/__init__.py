"""Declared domains: for every exercise, the kinds of input its prompt allows and the bad inputs
that must raise, in one place that the hidden tests, the coverage test and the prompt all read.

A chapter's declarations live in ``course_utils/domains/chNN.py`` as a tuple ``EXERCISES`` of
:class:`Exercise`. What uses them:

- :func:`course_utils.checks.call` (through :func:`exercise_of`, :func:`record` and :func:`isolated`):
  while recording is on (:func:`recording`), every call's argument kinds are recorded; a declared
  function's ``mutates`` arguments may change in place and, where ``returns_new``, its output may
  share no memory with an input; while it runs, the other exercises' functions in the notebook's
  namespace are their references (one mistake, one exercise).
- ``tests/test_domains.py``: every declared kind is drawn, every declared raise is tried, by the
  exercise's hidden test cell; every prompt carries its generated list (:func:`describe`).
- ``python -m course_utils.domains --check`` / ``--write``: compare / rewrite the prompts' lists
  between ``<!-- domain: <exercise> -->`` and ``<!-- /domain -->`` in the chapters' text sources.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import math
import pkgutil
import re
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["Arg", "Exercise", "Kind", "chapters", "classify", "declarations", "describe",
           "exercise_of", "isolated", "recording", "set_cell", "tensor", "tensor_kind"]

#: One module per chapter, ``chNN.py`` (a new chapter's module is found by its name).
CHAPTER_MODULES = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if re.fullmatch(r"ch\d\d", m.name)))


@dataclasses.dataclass(frozen=True)
class Kind:
    """One kind of value: ``test(value) -> bool`` classifies an actual argument (for a raise: the
    dict of the bound arguments of a call that raised); ``text`` is the prompt's words for it."""

    name: str
    text: str
    test: Callable[[Any], bool]

    def holds(self, value: Any) -> bool:
        try:
            return bool(self.test(value))
        except Exception:  # noqa: BLE001 (a predicate that cannot judge a value says no)
            return False


@dataclasses.dataclass(frozen=True)
class Arg:
    """An argument of the exercise's function and the kinds of value the prompt allows for it."""

    name: str
    kinds: tuple[Kind, ...]


@dataclasses.dataclass(frozen=True)
class Exercise:
    """The declared domain of one exercise."""

    chapter: str                     # "ch04_multihead_mqa_gqa"
    exercise: str                    # "ex5_kv_bytes" (the answer cell's grade_id)
    function: str                    # the name the learner defines
    reference: str | None            # "course_utils.kvcache:kv_cache_bytes": a drop-in stand-in, same
    #                                  parameters in the same order (None: no stand-in)
    args: tuple[Arg, ...]
    raises: tuple[Kind, ...] = ()
    mutates: tuple[str, ...] = ()    # arguments the prompt allows to change
    returns_new: bool = False        # the prompt promises a new tensor

    def reference_function(self) -> Any:
        if self.reference is None:
            return None
        mod, _, attr = self.reference.partition(":")
        obj: Any = importlib.import_module(mod)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj


def declarations(chapter_module: str) -> tuple[Exercise, ...]:
    """The declarations of ``"ch04"`` (empty when the chapter has no module yet)."""
    try:
        mod = importlib.import_module(f"course_utils.domains.{chapter_module}")
    except ModuleNotFoundError as err:
        if err.name == f"course_utils.domains.{chapter_module}":
            return ()
        raise
    return tuple(mod.EXERCISES)


def chapters() -> dict[str, tuple[Exercise, ...]]:
    """``{"ch04": (Exercise, ...), ...}`` for every chapter."""
    return {c: declarations(c) for c in CHAPTER_MODULES}


# Module state is only ever changed in place, never rebound: the grader's tamper guard
# (grader/course_grading/tamper_guard.py) fails a submission when a course module's global is replaced.
_BY_FUNCTION: dict[str, list[Exercise]] = {}     # filled on first use


def _by_function() -> dict[str, list[Exercise]]:
    if not _BY_FUNCTION:
        for exs in chapters().values():
            for ex in exs:
                _BY_FUNCTION.setdefault(ex.function, []).append(ex)
    return _BY_FUNCTION


def _namespace(fn: Any) -> dict | None:
    """The globals where ``fn`` was defined (the notebook's namespace for a learner's function)."""
    if isinstance(fn, types.FunctionType):
        return fn.__globals__
    mod = sys.modules.get(getattr(fn, "__module__", None) or getattr(type(fn), "__module__", ""))
    return vars(mod) if mod is not None else None


def _name(fn: Any) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def exercise_of(fn: Any) -> Exercise | None:
    """The declaration of the learner's ``fn``, or None. Only a function defined in ``__main__`` (a
    notebook) counts: the course's own references are not learners' answers. Where chapters share a
    function name, the chapter whose other exercises' names are defined there too wins."""
    module = getattr(fn, "__module__", None) or getattr(type(fn), "__module__", None)
    if module != "__main__":
        return None
    cands = _by_function().get(_name(fn), [])
    if len(cands) <= 1:
        return cands[0] if cands else None
    ns = _namespace(fn) or {}
    return max(cands, key=lambda ex: sum(e.function in ns for e in declarations(ex.chapter[:4])))


# --- recording ----------------------------------------------------------------------------------

_STATE = types.SimpleNamespace(records=None, cell=None, depth=0)


def set_cell(grade_id: str | None) -> None:
    """Tell the records which cell runs now (its grade_id; the test harness calls this)."""
    _STATE.cell = grade_id


@contextlib.contextmanager
def recording() -> Iterator[list[dict]]:
    """Record every :func:`course_utils.checks.call` in the block; yields the list of records."""
    old, _STATE.records = _STATE.records, []
    try:
        yield _STATE.records
    finally:
        _STATE.records = old


def _bind(fn: Any, ex: Exercise, args: tuple, kwargs: dict) -> dict[str, Any] | None:
    target = fn if isinstance(fn, (types.FunctionType, type)) else getattr(fn, "forward", fn)
    try:
        bound = inspect.signature(target).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    bound.apply_defaults()
    return dict(bound.arguments)


CALL = "*"      # an Arg of this name classifies the whole call (the dict of bound arguments)


def classify(ex: Exercise, bound: dict[str, Any]) -> dict[str, list[str]]:
    """``{argument: [names of the declared kinds its value is]}``."""
    return {a.name: [k.name for k in a.kinds if (a.name == CALL or a.name in bound)
                     and k.holds(bound if a.name == CALL else bound[a.name])]
            for a in ex.args}


def record(fn: Any, args: tuple, kwargs: dict, raised: BaseException | None) -> None:
    """Append one call's record when recording is on (called by ``checks.call``)."""
    if _STATE.records is None:
        return
    ex = exercise_of(fn)
    rec: dict[str, Any] = {"function": _name(fn), "cell": _STATE.cell, "raised": None if raised is None
                           else type(raised).__name__, "exercise": None, "kinds": {}, "raises": []}
    if ex is not None:
        bound = _bind(fn, ex, args, kwargs)
        rec["exercise"] = f"{ex.chapter}:{ex.exercise}"
        if bound is not None:
            rec["kinds"] = classify(ex, bound)
            if raised is not None:
                rec["raises"] = [k.name for k in ex.raises if k.holds(bound)]
    _STATE.records.append(rec)


def coverage_misses(ex: Exercise, records: list[dict]) -> list[str]:
    """What the exercise's hidden cell never draws: ``argument: kind`` and ``raises: kind``."""
    mine = [r for r in records if r["exercise"] == f"{ex.chapter}:{ex.exercise}"
            and r["cell"] == f"{ex.exercise}-hidden"]
    misses = []
    for a in ex.args:
        seen = {k for r in mine for k in r["kinds"].get(a.name, [])}
        misses += [f"argument `{a.name}`: kind {k.name!r} ({k.text})" for k in a.kinds if k.name not in seen]
    tried = {k for r in mine if r["raised"] for k in r["raises"]}
    misses += [f"raises: {k.name!r} ({k.text}) never tried" for k in ex.raises if k.name not in tried]
    return misses


# --- one mistake costs one exercise -------------------------------------------------------------

_ORIGINAL_CODE: dict[int, types.CodeType] = {}     # id(function) -> its code before checks.forbid


def _stand_in(ref: Any) -> Any:
    """A copy of the reference function made of its original code (``checks.forbid`` may have swapped
    the code of ``ref`` itself); classes and other objects stand in as they are."""
    if not isinstance(ref, types.FunctionType):
        return ref
    code = _ORIGINAL_CODE.get(id(ref), ref.__code__)
    copy = types.FunctionType(code, ref.__globals__, ref.__name__, ref.__defaults__, ref.__closure__)
    copy.__kwdefaults__ = ref.__kwdefaults__
    copy.__dict__.update(ref.__dict__)
    copy.__qualname__ = ref.__qualname__
    return copy


@contextlib.contextmanager
def isolated(fn: Any) -> Iterator[None]:
    """While the learner's ``fn`` runs, every OTHER declared exercise of its chapter that the
    notebook's namespace defines is the reference; the learner's versions come back afterwards, even
    when the call fails. Nested calls keep the outermost swap."""
    ex = exercise_of(fn)
    ns = _namespace(fn)
    if ex is None or ns is None or _STATE.depth:
        _STATE.depth += 1
        try:
            yield
        finally:
            _STATE.depth -= 1
        return
    saved: dict[str, Any] = {}
    for other in declarations(ex.chapter[:4]):
        if other.exercise == ex.exercise or other.function == ex.function or other.function not in ns:
            continue
        mine = ns[other.function]
        if getattr(mine, "__module__", None) != "__main__":
            continue
        ref = other.reference_function()
        if ref is None:
            continue
        saved[other.function] = mine
        ns[other.function] = _stand_in(ref)
    _STATE.depth += 1
    try:
        yield
    finally:
        _STATE.depth -= 1
        ns.update(saved)


# --- the prompt's list --------------------------------------------------------------------------

def describe(ex: Exercise) -> str:
    """The prompt's list of what the tests try (markdown, no comment prefix)."""
    lines = ["The tests try every kind of input listed here:"]
    for a in ex.args:
        what = "the arguments together" if a.name == CALL else f"`{a.name}`"
        lines.append(f"- {what}: " + "; ".join(k.text for k in a.kinds) + ".")
    if ex.raises:
        lines.append("- must raise: " + "; ".join(k.text for k in ex.raises) + ".")
    lines.append("- the inputs come back unchanged" + (
        f" (except {', '.join(f'`{m}`' for m in ex.mutates)})" if ex.mutates else "")
        + ("; the result is a new tensor, not a view of an input." if ex.returns_new else "."))
    return "\n".join(lines)


def _marker(ex: Exercise) -> tuple[str, str]:
    return f"<!-- domain: {ex.exercise} {ex.function} -->", "<!-- /domain -->"


ROOT = Path(__file__).resolve().parent.parent.parent


def _source(ex: Exercise, root: Path) -> Path:
    return root / "solutions" / ex.chapter / f"{ex.chapter}.py"


def _block(ex: Exercise) -> list[str]:
    start, end = _marker(ex)
    # blank lines around the list: the catalogues (course_utils.i18n) take it as a paragraph of its own
    return ([f"# {start}", "#"] + [f"# {ln}" if ln else "#" for ln in describe(ex).splitlines()]
            + ["#", f"# {end}"])


def prompt_problems(root: Path = ROOT, write: bool = False) -> list[str]:
    """Where a prompt's list is missing or disagrees with its declaration (rewritten when ``write``)."""
    problems = []
    for exs in chapters().values():
        for ex in exs:
            path = _source(ex, root)
            lines = path.read_text(encoding="utf-8").split("\n")
            start, end = _marker(ex)
            i = next((n for n, ln in enumerate(lines) if ln == f"# {start}"), None)
            if i is None:
                problems.append(f"{path.name}: the prompt of {ex.exercise} has no `{start}` list")
                continue
            j = next((n for n in range(i, len(lines)) if lines[n] == f"# {end}"), None)
            if j is None:
                problems.append(f"{path.name}: {ex.exercise}'s list has no closing `{end}`")
                continue
            if lines[i:j + 1] != _block(ex):
                problems.append(f"{path.name}: the prompt of {ex.exercise} disagrees with its declaration")
                if write:
                    lines[i:j + 1] = _block(ex)
                    path.write_text("\n".join(lines), encoding="utf-8")
    return problems


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m course_utils.domains", description=__doc__.split("\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", action="store_true", help="fail when a prompt's list disagrees with its declaration")
    g.add_argument("--write", action="store_true", help="rewrite the prompts' lists from the declarations")
    a = p.parse_args(argv)
    problems = prompt_problems(write=a.write)
    for line in problems:
        print(line)
    if a.write:
        left = [x for x in prompt_problems() if "disagrees" not in x]
        return 1 if left else 0
    return 1 if problems else 0


# Kinds shared by the chapters' declarations.

def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


PY_INT = Kind("python-int", "a Python int", _is_int)
BIG_INT = Kind("int-past-2**63", "a Python int large enough that a product passes 2**63 (exact however large)",
               lambda v: _is_int(v) and v >= 2**31)


def tensor(dtype: Any = None, dim: int | None = None) -> Callable[[Any], bool]:
    """A kind's test: a tensor, of ``dtype`` (or any) with ``dim`` dimensions (or any)."""
    def test(v: Any) -> bool:
        import torch
        return torch.is_tensor(v) and (dtype is None or v.dtype == dtype) and (dim is None or v.dim() == dim)
    return test


def tensor_kind(name: str, text: str, pred: Callable[[Any], bool]) -> Kind:
    """A kind that holds for a tensor meeting ``pred``."""
    def test(v: Any) -> bool:
        import torch
        return isinstance(v, torch.Tensor) and bool(pred(v))
    return Kind(name, text, test)


def finite(v: Any) -> bool:
    return math.isfinite(v)
