"""Declared domains (``course_utils/domains``): every exercise declared, every declared kind drawn and
every declared raise tried by the exercise's hidden test cell, every prompt carrying the list generated
from its declaration, inputs unchanged, and one mistake costing one exercise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from course_utils import checks, domains

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import exercise_runner as runner  # noqa: E402

CHAPTERS = [d.name for d in sorted((ROOT / "solutions").glob("ch*")) if d.is_dir()]

# Chapters whose exercises are not all declared yet. This list must shrink to empty: the test below
# fails for a chapter listed here once it is fully declared (take it off), and for any chapter not
# listed that has an undeclared exercise.
NOT_YET_DECLARED: list[str] = []


def _declared(chapter: str) -> set[str]:
    return {ex.exercise for ex in domains.declarations(chapter[:4])}


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_exercise_is_declared(chapter):
    exs = set(runner.exercises(runner.chapter_cells(chapter)))
    missing = sorted(exs - _declared(chapter))
    unknown = sorted(_declared(chapter) - exs)
    assert not unknown, f"course_utils/domains/{chapter[:4]}.py declares unknown exercises {unknown}"
    found = runner.exercises(runner.chapter_cells(chapter))
    for ex in domains.declarations(chapter[:4]):
        assert ex.chapter == chapter, f"{ex.exercise}: chapter {ex.chapter!r}, expected {chapter!r}"
        assert f"def {ex.function}(" in found[ex.exercise].source or f"class {ex.function}(" in found[ex.exercise].source, (
            f"{chapter} {ex.exercise}: its answer cell defines no {ex.function}")
    if chapter[:4] in NOT_YET_DECLARED:
        assert missing, (f"{chapter} is fully declared: take {chapter[:4]!r} off NOT_YET_DECLARED "
                         "(the list must shrink to empty)")
    else:
        assert not missing, f"course_utils/domains/{chapter[:4]}.py does not declare {missing}"


def test_not_yet_declared_is_empty():
    """The final state: every exercise of every chapter declared."""
    assert not NOT_YET_DECLARED, f"chapters not yet declared: {NOT_YET_DECLARED}"


def test_prompts_carry_their_declarations():
    problems = domains.prompt_problems()
    assert not problems, ("prompts and declarations disagree (run `python -m course_utils.domains --write`, "
                          "then keep the notebooks and catalogues in sync):\n" + "\n".join(problems))


def test_references_resolve():
    for exs in domains.chapters().values():
        for ex in exs:
            if ex.reference is not None:
                assert callable(ex.reference_function()), f"{ex.exercise}: {ex.reference} is not callable"


_RECORD = ("import json, sys; sys.path.insert(0, 'tools'); import exercise_runner as r; "
           "print('RECORDS' + json.dumps(r.record_chapter(sys.argv[1])))")


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if domains.declarations(c[:4])])
def test_hidden_cells_draw_every_declared_kind(chapter):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    env.pop("NBGRADER_EXECUTION", None)
    proc = subprocess.run([sys.executable, "-c", _RECORD, chapter], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    records = json.loads(proc.stdout[proc.stdout.rindex("RECORDS") + len("RECORDS"):])
    misses = {f"{ex.exercise} ({ex.function})": m for ex in domains.declarations(chapter[:4])
              if (m := domains.coverage_misses(ex, records))}
    assert not misses, f"{chapter}: the hidden tests never draw:\n" + "\n".join(
        f"  {ex}: {m}" for ex, ms in misses.items() for m in ms)


# --- the mechanism, on a made-up exercise ---------------------------------------------------------

def _fake(monkeypatch, **kw):
    """A made-up chapter 'ch99' with exercises ex1 (``first``) and ex2 (``second``); functions defined
    in a fake notebook namespace (``__main__``)."""
    t = domains.Kind("tensor", "a tensor", torch.is_tensor)
    ex1 = domains.Exercise("ch99_fake", "ex1_first", "first", "torch:neg", (domains.Arg("x", (t,)),))
    ex2 = domains.Exercise("ch99_fake", "ex2_second", "second", None, (domains.Arg("x", (t,)),), **kw)
    monkeypatch.setattr(domains, "_BY_FUNCTION", {"first": [ex1], "second": [ex2]})
    real = domains.declarations
    monkeypatch.setattr(domains, "declarations", lambda c: (ex1, ex2) if c == "ch99" else real(c))
    ns: dict = {"__name__": "__main__"}
    exec("def first(x):\n    return x * 0  # wrong\n"          # noqa: S102 (fixed test source)
         "def second(x):\n    return first(x) + 1\n", ns)
    return ns


def test_other_exercises_are_the_reference_while_one_runs(monkeypatch):
    ns = _fake(monkeypatch)
    x = torch.tensor([1.0, 2.0])
    mine = ns["first"]
    assert torch.equal(checks.call(ns["second"], x), -x + 1)      # torch.neg stands in for `first`
    assert ns["first"] is mine                                    # and the learner's comes back
    assert torch.equal(checks.call(ns["first"], x), x * 0)       # its own exercise uses its own


def test_the_learners_function_comes_back_after_a_failure(monkeypatch):
    ns = _fake(monkeypatch)
    mine = ns["first"]
    with pytest.raises(TypeError):
        checks.call(ns["second"], "not a tensor")
    assert ns["first"] is mine


def test_a_forbidden_reference_still_stands_in(monkeypatch):
    ns = _fake(monkeypatch)
    ref = types.FunctionType((lambda x: -x).__code__, {}, "ref")
    ex1 = domains._BY_FUNCTION["first"][0]
    monkeypatch.setattr(type(ex1), "reference_function", lambda self: ref if self is ex1 else None)
    with checks.forbid(ref):
        assert torch.equal(checks.call(ns["second"], torch.ones(2)), torch.zeros(2))


def test_an_input_changed_in_place_fails_naming_it(monkeypatch):
    ns = _fake(monkeypatch)
    exec("def second(x):\n    return x.mul_(2)\n", ns)  # noqa: S102
    with pytest.raises(checks.CheckFailed, match=r"second changed its input `x` in place"):
        checks.call(ns["second"], torch.ones(3))
    t = torch.tensor([float("nan"), 1.0])
    exec("def second(x):\n    return x + 1\n", ns)  # noqa: S102
    checks.call(ns["second"], t)                                  # NaN stays NaN: unchanged
    exec("def second(x):\n    x.data = x.data.t()\n    return x\n", ns)  # noqa: S102
    with pytest.raises(checks.CheckFailed, match="in place"):
        checks.call(ns["second"], torch.ones(2, 3))


def test_tensors_inside_containers_and_modules_are_watched(monkeypatch):
    ns = _fake(monkeypatch)
    exec("def second(x):\n    x[1].zero_()\n    return 1\n", ns)  # noqa: S102
    with pytest.raises(checks.CheckFailed, match=r"`x\[1\]`"):
        checks.call(ns["second"], [torch.ones(2), torch.ones(2)])
    exec("def second(x):\n    x.weight.data.zero_()\n    return 1\n", ns)  # noqa: S102
    with pytest.raises(checks.CheckFailed, match=r"`x.weight`"):
        checks.call(ns["second"], torch.nn.Linear(2, 2))


def test_declared_mutation_is_allowed(monkeypatch):
    ns = _fake(monkeypatch, mutates=("x",))
    exec("def second(x):\n    return x.mul_(2)\n", ns)  # noqa: S102
    checks.call(ns["second"], torch.ones(3))


def test_returns_new_rejects_a_view_of_an_input(monkeypatch):
    ns = _fake(monkeypatch, returns_new=True)
    exec("def second(x):\n    return x.view(-1)\n", ns)  # noqa: S102
    with pytest.raises(checks.CheckFailed, match=r"view of its input `x`"):
        checks.call(ns["second"], torch.ones(2, 2))
    exec("def second(x):\n    return x.clone().view(-1)\n", ns)  # noqa: S102
    checks.call(ns["second"], torch.ones(2, 2))


def test_recording_classifies_arguments_and_raises(monkeypatch):
    ns = _fake(monkeypatch)
    with domains.recording() as recs:
        checks.call(ns["second"], torch.ones(1))
        with pytest.raises(TypeError):
            checks.call(ns["second"], None)
    assert recs[0]["exercise"] == "ch99_fake:ex2_second" and recs[0]["kinds"] == {"x": ["tensor"]}
    assert recs[1]["raised"] == "TypeError" and recs[1]["kinds"] == {"x": []}
    assert domains._STATE.records is None                         # off outside the block


def test_a_modules_own_parameters_are_watched(monkeypatch):
    t = domains.Kind("tensor", "a tensor", torch.is_tensor)
    ex = domains.Exercise("ch99_fake", "ex1_mod", "Mod", None, (domains.Arg("x", (t,)),))
    monkeypatch.setattr(domains, "_BY_FUNCTION", {"Mod": [ex]})

    class Mod(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2))

        def forward(self, x):
            with torch.no_grad():
                self.w.mul_(2)
            return x * self.w

    Mod.__module__ = "__main__"
    with pytest.raises(checks.CheckFailed, match=r"`self.w`"):
        checks.call(Mod(), torch.ones(2))


def test_coverage_names_what_the_hidden_cell_never_draws(monkeypatch):
    _fake(monkeypatch)
    ex2 = domains._BY_FUNCTION["second"][0]
    rec = {"exercise": "ch99_fake:ex2_second", "cell": "ex2_second-hidden", "raised": None, "kinds": {"x": []},
           "raises": []}
    assert domains.coverage_misses(ex2, [rec]) == ["argument `x`: kind 'tensor' (a tensor)"]
    visible = {**rec, "cell": "ex2_second-visible", "kinds": {"x": ["tensor"]}}
    assert domains.coverage_misses(ex2, [rec, visible]), "a kind drawn by the visible cell only does not count"
    assert domains.coverage_misses(ex2, [{**rec, "kinds": {"x": ["tensor"]}}]) == []


def _answer_parameters(chapter: str, ex: domains.Exercise) -> list[tuple[str, bool]] | None:
    """``[(name, has_default)]`` of the function the exercise's solution cell defines (None for a class)."""
    import ast
    source = runner.exercises(runner.chapter_cells(chapter))[ex.exercise].source
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == ex.function:
            a = node.args
            names = [p.arg for p in a.posonlyargs + a.args]
            return [(n, i >= len(names) - len(a.defaults)) for i, n in enumerate(names)]
    return None


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_reference_is_a_drop_in_stand_in(chapter):
    """While one exercise runs, the others' functions are their references: a reference must take the
    solution's parameters, by the same names in the same order (a learner's call by keyword or by position
    works on both), and any parameter it adds must have a default."""
    import inspect
    for ex in domains.declarations(chapter[:4]):
        if ex.reference is None:
            continue
        mine = _answer_parameters(chapter, ex)
        assert mine is not None, f"{ex.exercise}: a stand-in for a class ({ex.function}) is not supported"
        ref = list(inspect.signature(ex.reference_function()).parameters.values())
        assert [p.name for p in ref[:len(mine)]] == [n for n, _ in mine], (
            f"{ex.exercise}: {ex.reference} takes ({', '.join(p.name for p in ref)}), the exercise "
            f"({', '.join(n for n, _ in mine)})")
        assert all(p.default is not p.empty for p in ref[len(mine):]), f"{ex.exercise}: {ex.reference} needs more"
        assert all(p.default is not p.empty for (_, has), p in zip(mine, ref) if has), (
            f"{ex.exercise}: a parameter with a default in the exercise has none in {ex.reference}")
