"""`make mutants`: mutation testing of every exercise's tests.

Each exercise's solution (the lines between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` of its
answer cell) is mutated one small change at a time, the way a learner's slip would change it: an
operator, a comparison, a constant, an off-by-one, swapped arguments, a dropped statement or keyword,
an in-place edit, a changed dtype, a confusable function (``max``/``min``, ``sum``/``mean``, ``tril``/
``triu``, ...). Every mutant is graded with the exercise's visible and hidden tests in-process
(``tools/exercise_runner.py``); a mutant that still gets full marks *survived*.

A survivor is either a gap in the tests (add a test that kills it) or *equivalent*: no test could tell
it from the solution (``x.transpose(-1, -2)`` for ``x.transpose(-2, -1)``). Equivalent survivors are
listed, each with its reason, in ``tools/mutants/<chapter>.toml``::

    [ex3_attention]
    "swap args: scores.transpose(-2, -1) -> scores.transpose(-1, -2)" = "a transpose of two axes is symmetric"

Usage::

    python tools/mutants.py                 # every chapter; writes tools/mutants.md
    python tools/mutants.py ch03 --show     # one chapter; prints each unlisted survivor
    python tools/mutants.py ch03 --exercise ex3_attention --show
    python tools/mutants.py ch03 --correct  # grade tests/correct_answers/ and tests/wrong_answers/ instead

It exits non-zero when an exercise kills fewer than ``GOAL`` of its mutants, when a survivor is not
listed, or when a listed one no longer survives (the list must stay true).
"""

from __future__ import annotations

import argparse
import ast
import builtins
import copy
import difflib
import hashlib
import importlib.util
import math
import re
import sys
import time
import tomllib
import types
from collections.abc import Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import exercise_runner as runner  # noqa: E402

ROOT = runner.ROOT
GOAL = 0.90
TABLE = ROOT / "tools" / "mutants.md"
LISTS = ROOT / "tools" / "mutants"

# --- the mutation operators ---------------------------------------------------------------------
BINOP_SWAPS = {ast.Add: [ast.Sub], ast.Sub: [ast.Add], ast.Mult: [ast.Div, ast.Add], ast.Div: [ast.Mult, ast.FloorDiv],
               ast.FloorDiv: [ast.Div, ast.Mod], ast.Mod: [ast.FloorDiv], ast.Pow: [ast.Mult],
               ast.MatMult: [ast.Mult], ast.BitAnd: [ast.BitOr], ast.BitOr: [ast.BitAnd], ast.LShift: [ast.RShift],
               ast.RShift: [ast.LShift]}
CMP_SWAPS = {ast.Lt: [ast.LtE, ast.Gt], ast.LtE: [ast.Lt, ast.GtE], ast.Gt: [ast.GtE, ast.Lt], ast.GtE: [ast.Gt, ast.LtE],
             ast.Eq: [ast.NotEq], ast.NotEq: [ast.Eq], ast.Is: [ast.IsNot], ast.IsNot: [ast.Is], ast.In: [ast.NotIn],
             ast.NotIn: [ast.In]}
# Names a learner confuses: attribute and builtin names, both ways.
NAME_SWAPS = {
    "max": "min", "min": "max", "amax": "amin", "amin": "amax", "argmax": "argmin", "argmin": "argmax",
    "maximum": "minimum", "minimum": "maximum", "sum": "mean", "mean": "sum", "any": "all", "all": "any",
    "tril": "triu", "triu": "tril", "float32": "float64", "float64": "float32", "double": "float",
    "float": "double", "long": "int", "int64": "int32", "softmax": "log_softmax", "log_softmax": "softmax",
    "sin": "cos", "cos": "sin", "sqrt": "rsqrt", "rsqrt": "sqrt", "exp": "expm1", "log": "log1p",
    "floor": "ceil", "ceil": "floor", "ones": "zeros", "zeros": "ones", "ones_like": "zeros_like",
    "zeros_like": "ones_like", "new_ones": "new_zeros", "new_zeros": "new_ones", "relu": "gelu", "gelu": "relu",
    "silu": "sigmoid", "sigmoid": "silu", "tanh": "sigmoid", "repeat_interleave": "repeat",
    "repeat": "repeat_interleave", "var": "std", "std": "var", "cumsum": "cumprod", "topk": "sort",
    "le": "lt", "lt": "le", "ge": "gt", "gt": "ge", "eq": "ne", "ne": "eq", "isinf": "isnan", "isnan": "isinf",
    "bool": "int", "cat": "stack", "stack": "cat", "unsqueeze": "squeeze", "logsumexp": "amax",
    "multinomial": "argmax", "rand": "randn", "randn": "rand", "bernoulli": "round", "numel": "__len__",
}
# Out-of-place methods whose in-place twin a learner may call by mistake (it changes the caller's tensor).
INPLACE = {"add", "sub", "mul", "div", "masked_fill", "clamp", "exp", "neg", "fill", "sqrt", "pow", "tanh",
           "sigmoid", "relu", "softmax", "copy", "scatter", "index_fill", "where", "abs", "float", "t", "transpose",
           "unsqueeze", "squeeze"}
SYMMETRIC = {"transpose", "swapaxes", "swapdims", "maximum", "minimum", "add", "mul", "isclose", "allclose",
             "eq", "ne", "logical_and", "logical_or", "max", "min"}
RANGE_FUNCS = {"range", "arange"}
# Modules the chapters call by these names: a mutation to a name the module lacks is not a slip a
# learner could make (it only raises AttributeError), so it is not generated.
MODULES = {"torch": torch, "math": math, "F": torch.nn.functional, "nn": torch.nn, "np": None}


def _module_of(node: ast.AST):
    """The module an attribute's value names (``torch``, ``torch.nn.functional``, ...), or None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in MODULES:
        return None
    mod = MODULES[node.id]
    for part in reversed(parts):
        mod = getattr(mod, part, None)
    return mod if isinstance(mod, types.ModuleType) else None


def _exists(value: ast.AST, attr: str) -> bool:
    """False only where ``value`` is a known module that has no ``attr``."""
    mod = _module_of(value)
    if mod is None:
        return not (isinstance(value, ast.Name) and value.id in MODULES)
    return hasattr(mod, attr)


def _node_mutations(node: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """(operator name, replacement node) for every mutation of ``node`` itself."""
    for kind, mutations in _MUTATIONS_BY_KIND:
        if isinstance(node, kind):
            yield from mutations(node)
            return


def _binop(node: ast.BinOp) -> Iterator[tuple[str, ast.AST]]:
    """Another arithmetic operator; the operation dropped for one of its operands."""
    for new in BINOP_SWAPS.get(type(node.op), []):
        yield "operator", ast.BinOp(node.left, new(), node.right)
    if isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        yield "drop operand", node.left
    if isinstance(node.op, (ast.Add, ast.Mult)):
        yield "drop operand", node.right


def _augassign(node: ast.AugAssign) -> Iterator[tuple[str, ast.AST]]:
    """Another arithmetic operator in ``x op= y``."""
    for new in BINOP_SWAPS.get(type(node.op), []):
        yield "operator", ast.AugAssign(node.target, new(), node.value)


def _compare(node: ast.Compare) -> Iterator[tuple[str, ast.AST]]:
    """Each comparison of a chain swapped for its neighbours (``<`` for ``<=``, ...)."""
    for i, op in enumerate(node.ops):
        for new in CMP_SWAPS.get(type(op), []):
            ops = list(node.ops)
            ops[i] = new()
            yield "comparison", ast.Compare(node.left, ops, node.comparators)


def _boolop(node: ast.BoolOp) -> Iterator[tuple[str, ast.AST]]:
    """``and`` for ``or`` and back; each operand alone."""
    yield "and/or", ast.BoolOp(ast.Or() if isinstance(node.op, ast.And) else ast.And(), node.values)
    for v in node.values:
        yield "drop operand", v


def _unary(node: ast.UnaryOp) -> Iterator[tuple[str, ast.AST]]:
    """``-x``, ``not x``, ``~x`` without the operator."""
    if isinstance(node.op, (ast.USub, ast.Not, ast.Invert)):
        yield "drop unary", node.operand


def _constant_or_infinity(node: ast.Constant) -> Iterator[tuple[str, ast.AST]]:
    """A number or a boolean changed (:func:`_constant`); ``"-inf"`` for ``"inf"`` and back."""
    if not isinstance(node.value, str) and node.value is not None:
        yield from _constant(node)
    elif node.value in ("-inf", "inf", "+inf"):
        yield "constant", ast.Constant("inf" if node.value.startswith("-") else "-inf")


def _negate(node: ast.If | ast.While | ast.IfExp) -> Iterator[tuple[str, ast.AST]]:
    """The condition of an ``if``, a ``while`` or a conditional expression negated."""
    yield "negate condition", _replace_field(node, "test", ast.UnaryOp(ast.Not(), node.test))


def _slice(node: ast.Slice) -> Iterator[tuple[str, ast.AST]]:
    """A computed bound of a slice moved by one."""
    for field in ("lower", "upper"):
        e = getattr(node, field)
        if e is not None and not isinstance(e, (ast.Constant, ast.UnaryOp)):
            for op in (ast.Add, ast.Sub):
                yield "off by one", _replace_field(node, field, ast.BinOp(e, op(), ast.Constant(1)))


def _attribute(node: ast.Attribute) -> Iterator[tuple[str, ast.AST]]:
    """``mod.max`` for ``mod.min`` and so on, where the module has the other name."""
    if node.attr in NAME_SWAPS and _exists(node.value, NAME_SWAPS[node.attr]):
        yield "swap name", ast.Attribute(node.value, NAME_SWAPS[node.attr], node.ctx)


def _name(node: ast.Name) -> Iterator[tuple[str, ast.AST]]:
    """A builtin swapped for its counterpart (``max`` for ``min``, ...)."""
    if node.id in NAME_SWAPS and hasattr(builtins, node.id) and hasattr(builtins, NAME_SWAPS[node.id]):
        yield "swap name", ast.Name(NAME_SWAPS[node.id], node.ctx)


def _constant(node: ast.Constant) -> Iterator[tuple[str, ast.AST]]:
    v = node.value
    if isinstance(v, bool):
        yield "constant", ast.Constant(not v)
    elif isinstance(v, int):
        yield "constant", ast.Constant(v + 1)
        yield "constant", ast.Constant(v - 1)
    elif isinstance(v, float):
        yield "constant", ast.Constant(v + 1.0)
        if v != 0:
            yield "constant", ast.Constant(0.0)
            yield "constant", ast.Constant(v / 2)


def _call(node: ast.Call) -> Iterator[tuple[str, ast.AST]]:
    """A call's mutations: its first two arguments swapped, a keyword dropped, a range bound moved by
    one, a copy dropped, an operation made in place or not."""
    yield from _swapped_args(node)
    for i in range(len(node.keywords)):
        if node.keywords[i].arg is not None:
            yield "drop keyword", ast.Call(node.func, node.args, node.keywords[:i] + node.keywords[i + 1:])
    yield from _range_off_by_one(node)
    if isinstance(node.func, ast.Attribute):
        yield from _method_mutations(node, node.func)


def _called_name(func: ast.AST) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _swapped_args(node: ast.Call) -> Iterator[tuple[str, ast.AST]]:
    """The first two arguments swapped, where the function is not symmetric and they differ."""
    if (len(node.args) >= 2 and _called_name(node.func) not in SYMMETRIC
            and ast.dump(node.args[0]) != ast.dump(node.args[1])):
        args = [node.args[1], node.args[0], *node.args[2:]]
        yield "swap args", ast.Call(node.func, args, node.keywords)


def _range_off_by_one(node: ast.Call) -> Iterator[tuple[str, ast.AST]]:
    """Each computed argument of a range-like function (``range``, ``arange``, ...) moved by one."""
    if _called_name(node.func) not in RANGE_FUNCS:
        return
    for i, a in enumerate(node.args):
        if not isinstance(a, (ast.Constant, ast.UnaryOp)):
            for op in (ast.Add, ast.Sub):
                args = list(node.args)
                args[i] = ast.BinOp(a, op(), ast.Constant(1))
                yield "off by one", ast.Call(node.func, args, node.keywords)


def _method_mutations(node: ast.Call, func: ast.Attribute) -> Iterator[tuple[str, ast.AST]]:
    """``x.clone()`` as ``x``; ``x.add(y)`` as ``x.add_(y)`` (on a tensor, not a module); and back."""
    if func.attr == "clone" and not node.args:
        yield "drop clone", func.value
    elif func.attr in INPLACE and _exists(func.value, func.attr + "_") and _module_of(func.value) is None:
        yield "in place", ast.Call(ast.Attribute(func.value, func.attr + "_", func.ctx), node.args, node.keywords)
    elif func.attr.endswith("_") and not func.attr.startswith("_") and func.attr[:-1] in INPLACE:
        yield "not in place", ast.Call(ast.Attribute(func.value, func.attr[:-1], func.ctx), node.args, node.keywords)


# Which mutations a node gets, by its kind (the first kind it is an instance of).
_MUTATIONS_BY_KIND = (
    (ast.BinOp, _binop), (ast.AugAssign, _augassign), (ast.Compare, _compare), (ast.BoolOp, _boolop),
    (ast.UnaryOp, _unary), (ast.Constant, _constant_or_infinity), ((ast.If, ast.While, ast.IfExp), _negate),
    (ast.Slice, _slice), (ast.Attribute, _attribute), (ast.Name, _name), (ast.Call, _call),
)


def _replace_field(node: ast.AST, field: str, value: ast.AST) -> ast.AST:
    new = copy.copy(node)
    setattr(new, field, value)
    return new


def _solution_lines(source: str) -> set[int]:
    """Line numbers (1-based) between each ``### BEGIN SOLUTION`` and its ``### END SOLUTION``."""
    lines, inside = set(), False
    for i, ln in enumerate(source.splitlines(), 1):
        if "### BEGIN SOLUTION" in ln:
            inside = True
        elif "### END SOLUTION" in ln:
            inside = False
        elif inside:
            lines.add(i)
    return lines


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


class _Swap(ast.NodeTransformer):
    """Replace the ``target``-th node of an ``ast.walk`` with ``new`` (or a statement by ``pass``)."""

    def __init__(self, target: int, new: ast.AST):
        self.target, self.new, self.i = target, new, -1

    def visit(self, node):
        self.i += 1
        if self.i == self.target:
            return self.new
        return self.generic_visit(node)


def mutants(source: str) -> list[tuple[str, str]]:
    """Every mutant of an answer cell's solution lines: ``[(key, mutated cell source), ...]``.

    The key names the operator and the changed line, before and after (code as ``ast.unparse``
    writes it), so that a listed equivalent mutant is found again after unrelated edits.
    """
    tree = ast.parse(source)
    region = _solution_lines(source)
    original = ast.unparse(tree)
    seen = {original}
    out: list[tuple[str, str]] = []
    nodes = _visit_order(tree)
    for idx, node in enumerate(nodes):
        if getattr(node, "lineno", None) not in region:
            continue
        if isinstance(node, ast.stmt) and not _is_docstring(node) and not isinstance(node, ast.Return):
            candidates = [("drop statement", ast.Pass())]
        else:
            candidates = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _is_docstring_value(tree, node):
            continue
        for op, new in candidates + list(_node_mutations(node)):
            mutated = _Swap(idx, copy.deepcopy(new)).visit(copy.deepcopy(tree))
            ast.fix_missing_locations(mutated)
            try:
                text = ast.unparse(mutated)
                compile(text, "<mutant>", "exec")
            except (SyntaxError, ValueError, TypeError):
                continue
            if text in seen:
                continue
            seen.add(text)
            key = _key(op, original, text)
            n = sum(1 for k, _ in out if k == key or k.startswith(key + " [#"))
            out.append((key if n == 0 else f"{key} [#{n + 1}]", text))
    return out


def _visit_order(tree: ast.AST) -> list[ast.AST]:
    """Nodes in the order :class:`_Swap` visits them (pre-order, fields in order)."""
    order: list[ast.AST] = []

    def walk(node):
        order.append(node)
        for child in ast.iter_child_nodes(node):
            walk(child)
    walk(tree)
    return order


def _is_docstring_value(tree: ast.AST, node: ast.Constant) -> bool:
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Module)) and n.body and _is_docstring(n.body[0]):
            if n.body[0].value is node:
                return True
    return False


def _key(op: str, before: str, after: str) -> str:
    a, b = before.splitlines(), after.splitlines()
    old, new = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag != "equal":
            old += [ln.strip() for ln in a[i1:i2]]
            new += [ln.strip() for ln in b[j1:j2]]
    return f"{op}: {' / '.join(old) or '(nothing)'} -> {' / '.join(new) or '(nothing)'}"


# --- the lists of equivalent mutants and the table ------------------------------------------------
def equivalents(chapter: str) -> dict[str, dict[str, str]]:
    """``{exercise: {mutant key: reason}}`` from ``tools/mutants/<chapter>.toml`` (empty if none)."""
    path = LISTS / f"{chapter}.toml"
    if not path.exists():
        return {}
    data = tomllib.loads(path.read_text())
    for ex, entries in data.items():
        for key, reason in entries.items():
            if not (isinstance(reason, str) and reason.strip()):
                raise SystemExit(f"{path}: [{ex}] {key!r} needs a reason (a non-empty string)")
    return data


def fingerprint(ex: runner.Exercise, cells: list) -> str:
    """A hash of what decides an exercise's mutation score: its answer and test cells, this tool and
    the runner (so the committed table can be checked without running it; the equivalence list is
    checked against the table's counts and the mutants the tool makes)."""
    h = hashlib.sha256()
    for cell in cells[ex.answer: ex.last + 1]:
        if cell.cell_type == "code":
            h.update(cell.source.encode())
    for path in (Path(__file__), Path(runner.__file__)):
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def _load_answers(kind: str, chapter: str) -> dict:
    path = ROOT / "tests" / kind / f"{chapter}.py"
    if not path.exists():
        return {}
    spec = importlib.util.spec_from_file_location(f"{kind}_{chapter}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return vars(mod)


def wrong_answers(chapter: str) -> dict[str, list[tuple[str, str]]]:
    """Every wrong answer of ``tests/wrong_answers/<chapter>.py`` by exercise: ``SOURCE``, ``HIDDEN_ONLY``,
    ``MORE_WRONG`` and ``REVIEWED``."""
    mod = _load_answers("wrong_answers", chapter)
    out: dict[str, list[tuple[str, str]]] = {}
    if "EXERCISE" in mod:
        out.setdefault(mod["EXERCISE"], []).append(("SOURCE", mod["SOURCE"]))
    for ex, src in mod.get("HIDDEN_ONLY", {}).items():
        out.setdefault(ex, []).append(("HIDDEN_ONLY", src))
    for group in ("MORE_WRONG", "REVIEWED"):
        for name, (ex, src) in mod.get(group, {}).items():
            out.setdefault(ex, []).append((f"{group} {name}", src))
    return out


def correct_answers(chapter: str) -> dict[str, list[tuple[str, str]]]:
    """``CORRECT`` of ``tests/correct_answers/<chapter>.py``: ``{exercise: [(name, source), ...]}``."""
    return {ex: list(alts.items()) for ex, alts in _load_answers("correct_answers", chapter).get("CORRECT", {}).items()}


def run_chapter(chapter: str, only: str | None, jobs: int, show: bool) -> list[dict]:
    """Mutate and grade every exercise of ``chapter``; print progress; return the table rows."""
    cells = runner.chapter_cells(chapter)
    exs = runner.exercises(cells)
    if only:
        exs = {only: exs[only]}
    listed = equivalents(chapter)
    todo = {name: mutants(ex.source) for name, ex in exs.items()}
    rows: list[dict] = []

    def report(name, outcomes):
        eq = listed.get(name, {})
        survivors = [o for o in outcomes if o.full_marks]
        unlisted = [o for o in survivors if o.key not in eq]
        killed_listed = sorted(set(eq) - {o.key for o in survivors})
        n, killed = len(outcomes), len(outcomes) - len(survivors)
        row = {"chapter": chapter, "exercise": name, "mutants": n, "killed": killed,
               "equivalent": len(survivors) - len(unlisted), "unlisted": len(unlisted),
               "stale": len(killed_listed), "fingerprint": fingerprint(exs[name], cells)}
        rows.append(row)
        print(f"{chapter:32s} {name:20s} {n:4d} mutants {killed:4d} killed ({killed / max(n, 1):6.1%}) "
              f"{row['equivalent']:3d} listed {len(unlisted):3d} unlisted", flush=True)
        if show:
            source = dict(todo[name])
            for o in unlisted:
                print(f"    SURVIVED  {o.key}")
                diff = difflib.unified_diff(ast.unparse(ast.parse(exs[name].source)).splitlines(),
                                            source[o.key].splitlines(), lineterm="", n=1)
                print("\n".join("        " + ln for ln in list(diff)[2:]))
        for key in killed_listed:
            print(f"    LISTED BUT NOT SURVIVING (remove it from tools/mutants/{chapter}.toml): {key}")

    runner.run_answers(chapter, {n: m for n, m in todo.items()}, jobs=jobs, progress=report)
    return rows


def grade_answers(chapter: str, jobs: int) -> bool:
    """Grade the chapter's correct and wrong answers; print each verdict; True when all are as they should be."""
    good = correct_answers(chapter)
    bad = wrong_answers(chapter)
    todo: dict[str, list[tuple[str, str]]] = {}
    for ex, alts in good.items():
        todo.setdefault(ex, []).extend((f"correct {name}", src) for name, src in alts)
    for ex, alts in bad.items():
        todo.setdefault(ex, []).extend((f"wrong {name}", src) for name, src in alts)
    results = runner.run_answers(chapter, todo, jobs=jobs)
    ok = True
    for ex, outcomes in results.items():
        for o in outcomes:
            want_full = o.key.startswith("correct ")
            right = o.full_marks == want_full
            ok &= right
            verdict = "full marks" if o.full_marks else f"loses {', '.join(o.failed)}"
            print(f"{'ok ' if right else 'BAD'} {ex:20s} {o.key:40s} {verdict}"
                  + ("" if right or not o.reason else f"\n        {o.reason}"))
    return ok


def write_table(rows: list[dict], seconds: float, ran: int | None = None) -> None:
    """Write ``tools/mutants.md`` with ``rows``; ``ran``: how many of them this run measured (all if ``None``)."""
    lines = ["# Mutation scores of the exercises' tests", "",
             "Written by `make mutants` (`tools/mutants.py`): every exercise's solution mutated one small change at",
             "a time and graded in-process with its visible and hidden tests. *Equivalent*: survivors listed with",
             "their reasons in `tools/mutants/<chapter>.toml`. `tests/test_mutants.py` checks that this table is",
             "current (the fingerprint of each exercise's cells and of the tool) and that every exercise reaches",
             f"{GOAL:.0%}.", "",
             f"Last run: {len(rows) if ran is None else ran} exercises in {seconds:.0f} s"
             + ("." if ran is None or ran == len(rows) else " (the other rows are from earlier runs)."), "",
             "| chapter | exercise | mutants | killed | equivalent | killed % | fingerprint |",
             "|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['chapter']} | {r['exercise']} | {r['mutants']} | {r['killed']} | {r['equivalent']} | "
                     f"{100 * r['killed'] / max(r['mutants'], 1):.1f} | {r['fingerprint']} |")
    total_m = sum(r["mutants"] for r in rows)
    total_k = sum(r["killed"] for r in rows)
    lines.append(f"| **all** | | {total_m} | {total_k} | {sum(r['equivalent'] for r in rows)} | "
                 f"{100 * total_k / max(total_m, 1):.1f} | |")
    TABLE.write_text("\n".join(lines) + "\n")


def read_table() -> dict[tuple[str, str], dict]:
    """The committed table's rows by ``(chapter, exercise)``."""
    rows = {}
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and re.fullmatch(r"ch\d\d_\w+", cells[0]):
            rows[(cells[0], cells[1])] = {"mutants": int(cells[2]), "killed": int(cells[3]),
                                          "equivalent": int(cells[4]), "fingerprint": cells[6]}
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("chapters", nargs="*", help="chapters (ch03 or its full name); default: all")
    p.add_argument("--exercise", help="one exercise only (with one chapter)")
    p.add_argument("--show", action="store_true", help="print every unlisted survivor with its diff")
    p.add_argument("--correct", action="store_true",
                   help="grade tests/correct_answers/ (full marks) and tests/wrong_answers/ (lose points) instead")
    p.add_argument("--jobs", type=int, default=2, help="mutants graded at a time (default 2)")
    p.add_argument("--no-write", action="store_true", help="do not rewrite tools/mutants.md")
    args = p.parse_args(argv)
    names = [runner.find_chapter(c) for c in args.chapters] or [
        d.name for d in sorted((ROOT / "solutions").glob("ch*")) if d.is_dir()]
    if args.correct:
        return 0 if all([grade_answers(ch, args.jobs) for ch in names]) else 1
    t0 = time.perf_counter()
    rows = []
    for ch in names:
        rows += run_chapter(ch, args.exercise, args.jobs, args.show)
    bad = [r for r in rows if r["killed"] < GOAL * r["mutants"] or r["unlisted"] or r["stale"]]
    full_run = not args.chapters and not args.exercise
    if full_run and not args.no_write:
        write_table(rows, time.perf_counter() - t0)
        print(f"wrote {TABLE.relative_to(ROOT)}")
    elif not args.no_write and TABLE.exists():
        old = read_table()
        for r in rows:
            old[(r["chapter"], r["exercise"])] = r
        merged = [{"chapter": c, "exercise": e, **v} for (c, e), v in old.items()]
        merged.sort(key=lambda r: (r["chapter"], _order(r)))
        write_table(merged, time.perf_counter() - t0, ran=len(rows))
        print(f"updated {len(rows)} rows of {TABLE.relative_to(ROOT)}")
    for r in bad:
        print(f"FAIL {r['chapter']} {r['exercise']}: {r['killed']}/{r['mutants']} killed, "
              f"{r['unlisted']} unlisted survivors, {r['stale']} listed mutants that no longer survive")
    return 1 if bad else 0


def _order(row: dict) -> int:
    m = re.match(r"ex(\d+)", row["exercise"])
    return int(m.group(1)) if m else 0


if __name__ == "__main__":
    raise SystemExit(main())
