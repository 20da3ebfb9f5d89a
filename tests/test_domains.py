"""Issue 54: every kind of input an exercise's declaration names is drawn by its hidden test.

``course_utils/domains/chNN.py`` declares, per exercise, the kinds of each argument its prompt allows and
the bad inputs that must raise. ``tools/domain_coverage.py`` runs a chapter's solution in grading mode
with :data:`course_utils.domains.RECORDER` set and classifies every ``checks.call`` of each hidden test
cell; a kind or raise never drawn there fails here, named with its exercise and argument.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils import domains

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import exercise_runner as runner  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted(p.name for p in (ROOT / "solutions").glob("ch*") if p.is_dir())
#: Chapters whose declarations are still to be written (issue 54): this list must empty.
PENDING = ["ch01_seq2seq_rnn", "ch02_attention_seq2seq", "ch03_scaled_dot_product", "ch04_multihead_mqa_gqa"]
DECLARED = [c for c in CHAPTERS if c not in PENDING]


def test_pending_chapters_have_no_declarations_yet_and_the_others_have():
    for chapter in CHAPTERS:
        assert bool(domains.exercises(chapter)) == (chapter not in PENDING), (
            f"{chapter}: {'declared; take it off PENDING' if chapter in PENDING else 'no declarations'}")


@pytest.mark.parametrize("chapter", DECLARED)
def test_every_function_exercise_is_declared_once(chapter):
    """A declaration names an exercise of the chapter and the function its answer cell defines."""
    found = runner.exercises(runner.chapter_cells(chapter))
    decls = domains.exercises(chapter)
    assert len({d.exercise for d in decls}) == len(decls)
    for d in decls:
        assert d.exercise in found, f"{chapter}: no exercise {d.exercise}"
        assert f"def {d.function}(" in found[d.exercise].source, f"{chapter} {d.exercise} defines no {d.function}"
    undeclared = [ex for ex, e in found.items() if "\ndef " in "\n" + e.source and ex not in {d.exercise for d in decls}]
    assert not undeclared, f"{chapter}: exercises without a declaration: {undeclared}"


@pytest.mark.parametrize("chapter", DECLARED)
def test_every_declared_kind_is_drawn_by_the_hidden_test(chapter):
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "domain_coverage.py"), chapter], cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    assert run.stdout, run.stderr[-3000:]
    result = json.loads(run.stdout)
    problems = [f"{ex}: never drawn {r['missing']}" for ex, r in result.items() if r["missing"]]
    problems += [f"{ex}: the hidden test failed with the solution: {r['error']}" for ex, r in result.items() if r["error"]]
    assert not problems, f"{chapter}:\n" + "\n".join(problems)


def test_a_kind_never_drawn_is_found():
    """The check can fail: a call that draws one of two kinds leaves the other missing."""
    ex = domains.Exercise(chapter="x", exercise="ex1", function="f", reference="m:f",
                          args=(domains.Arg("a", (domains.Kind("one", "1", lambda v: v == 1),
                                                  domains.Kind("two", "2", lambda v: v == 2))),),
                          raises=(domains.Kind("neg", "negative", lambda a: a["a"] < 0),))
    drawn = domains.kinds_drawn(ex, [domains.Call("f", {"a": 1}, None), domains.Call("f", {"a": -1}, None)])
    assert drawn == {"a": {"one"}}, "a call that did not raise must not draw a raise"
    drawn = domains.kinds_drawn(ex, [domains.Call("f", {"a": -1}, ValueError())])
    assert drawn == {"raises": {"neg"}}
