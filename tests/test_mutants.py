"""The mutation tool (tools/mutants.py) and its committed table, without running any mutant.

`make mutants` grades every mutant and writes tools/mutants.md; running it belongs there, not in
`make test`. These tests keep that table true cheaply: every exercise has its row, the row was
made from the current cells and tool (its fingerprint), it counts the mutants the tool makes now,
every survivor is listed as equivalent with a reason, and every exercise kills at least 90 %.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import exercise_runner as runner  # noqa: E402
import mutants  # noqa: E402

CHAPTERS = [d.name for d in sorted((ROOT / "solutions").glob("ch*")) if d.is_dir()]

SAMPLE = '''def f(x, lengths, mask=None):
    """A docstring that must not be mutated: x.max(dim=-1) + 1."""
    ### BEGIN SOLUTION
    y = x.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    n = sum(lengths) // 2
    if n < len(lengths):
        y = y[:, : n].to(torch.float64)
    z = torch.tril(y.clone())
    return z * 2.0 + torch.arange(n).sum()
    ### END SOLUTION
'''


def _ops(source: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, _ in mutants.mutants(source):
        op, change = key.split(": ", 1)
        out.setdefault(op, []).append(change)
    return out


def test_the_mutator_makes_every_kind_of_slip():
    ops = _ops(SAMPLE)
    expected = {"operator", "comparison", "constant", "off by one", "swap args", "drop statement",
                "drop keyword", "in place", "swap name", "drop clone", "negate condition", "drop unary",
                "drop operand"}
    assert expected <= set(ops), f"missing operators: {sorted(expected - set(ops))}"
    flat = " ".join(c for changes in ops.values() for c in changes)
    for want in ("torch.float32", "torch.triu", "float('inf')", "n <= len(lengths)", "y[:, :n + 1]",
                 "sum(lengths) / 2", "masked_fill_(", "torch.arange(n - 1)", "x.masked_fill(mask,"):
        assert want in flat, f"no mutant writes {want!r}"


def test_mutants_change_only_the_solution_lines_and_compile():
    original = ast.unparse(ast.parse(SAMPLE))
    keys = [k for k, _ in mutants.mutants(SAMPLE)]
    assert len(keys) == len(set(keys)), "two mutants share a key"
    for key, text in mutants.mutants(SAMPLE):
        compile(text, "<mutant>", "exec")
        assert text != original, key
        assert "A docstring that must not be mutated: x.max(dim=-1) + 1." in text, f"{key} changed the docstring"
        assert text.startswith("def f(x, lengths, mask=None):"), f"{key} changed the signature"


GUARDED = '''def g(x, d):
    ### BEGIN SOLUTION
    s = torch.exp(x) * math.sqrt(d) + torch.sqrt(x)
    return s.exp()
    ### END SOLUTION
'''


def test_no_mutant_calls_a_function_the_module_lacks_or_makes_a_module_function_in_place():
    """``math`` has no ``rsqrt`` (a swap to it would only raise AttributeError), and ``torch.exp_`` exists but
    is not a slip a learner makes for ``torch.exp(x)``: neither is generated, while their legitimate
    twins are (``torch.sqrt`` -> ``torch.rsqrt``, ``s.exp()`` -> ``s.exp_()``)."""
    keys = [k for k, _ in mutants.mutants(GUARDED)]
    after = [k.split(" -> ", 1)[1] for k in keys]
    assert any("torch.rsqrt(x)" in a for a in after) and any(a == "return s.exp_()" for a in after), keys
    assert not any("math.rsqrt" in a for a in after), "a swap to a name math lacks"
    assert not any("torch.exp_(" in a for a in after), "a module function made in place"


def _rows() -> dict:
    assert mutants.TABLE.exists(), "tools/mutants.md is missing: run `make mutants`"
    return mutants.read_table()


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_committed_mutation_table_is_current_and_every_exercise_reaches_the_goal(chapter):
    rows = _rows()
    cells = runner.chapter_cells(chapter)
    listed = mutants.equivalents(chapter)
    exs = runner.exercises(cells)
    assert set(listed) <= set(exs), f"tools/mutants/{chapter}.toml names exercises {chapter} lacks"
    for name, ex in exs.items():
        row = rows.get((chapter, name))
        assert row is not None, f"{chapter} {name} has no row in tools/mutants.md: run `make mutants`"
        assert row["fingerprint"] == mutants.fingerprint(ex, cells), (
            f"{chapter} {name}: its cells or the tool changed since tools/mutants.md was written: run "
            f"`make mutants CH={chapter[:4]}`")
        keys = [k for k, _ in mutants.mutants(ex.source)]
        assert row["mutants"] == len(keys), f"{chapter} {name}: the table counts {row['mutants']} mutants, the tool makes {len(keys)}"
        stale = set(listed.get(name, {})) - set(keys)
        assert not stale, f"tools/mutants/{chapter}.toml lists mutants of {name} the tool no longer makes: {sorted(stale)}"
        assert row["killed"] + row["equivalent"] == row["mutants"], (
            f"{chapter} {name}: {row['mutants'] - row['killed'] - row['equivalent']} survivors are neither killed "
            "nor listed as equivalent (make mutants SHOW=1 prints them)")
        assert row["killed"] >= mutants.GOAL * row["mutants"], (
            f"{chapter} {name}: {row['killed']}/{row['mutants']} mutants killed, under {mutants.GOAL:.0%}")
