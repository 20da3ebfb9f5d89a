"""The chapters' probes reject the plausible wrong answers (issue 24).

An experiment uses the learner's function only if it agrees with the reference on a probe
(``checks.learner_or_reference``). A wrong answer that passes the visible tests (``HIDDEN_ONLY``
in ``tests/wrong_answers/``) must not slip into the experiments either: for every such answer,
the chapter's text source is run in grading mode with the answer in its cell, and the probe of
each function the answer defines must say that it falls back to the reference (a function the
answer leaves right, such as ``split_heads`` beside a wrong ``merge_heads``, may agree).
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ["ch04_multihead_mqa_gqa", "ch05_attention_as_convolution", "ch07_transformer_families",
            "ch08_modern_decoder", "ch09_attention_at_inference"]
REJECTED = ("gives a different result", "raised ")


def _hidden_only(chapter: str) -> dict[str, str]:
    spec = importlib.util.spec_from_file_location(f"wrong_{chapter}", ROOT / "tests" / "wrong_answers" / f"{chapter}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.HIDDEN_ONLY


def _probe_lines(chapter: str, answers: dict[str, str]) -> dict[str, str]:
    """Run the chapter's code cells (grading mode) with ``answers``; ``{function: probe verdict}``."""
    source = (ROOT / "solutions" / chapter / f"{chapter}.py").read_text()
    env: dict = {"__name__": "__main__"}
    verdicts: dict[str, str] = {}
    for cell in re.split(r"\n(?=# %%)", source):
        head = cell.split("\n", 1)[0]
        if "[markdown]" in head:
            continue
        grade_id = re.search(r'"grade_id": "([^"]+)"', head)
        if grade_id and grade_id.group(1) in answers:
            cell = answers[grade_id.group(1)]
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(Exception):  # failing tests are expected
            exec(compile(cell, f"{chapter}:{head[:40]}", "exec"), env)
        for line in out.getvalue().splitlines():
            found = re.match(r"\[(\w+)\] (.*)", line)
            if found:
                verdicts[found.group(1)] = found.group(2)
    return verdicts


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_probes_reject_the_hidden_only_answers(chapter, monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")        # the experiments shrink
    monkeypatch.chdir(ROOT / "solutions" / chapter)
    answers = _hidden_only(chapter)
    verdicts = _probe_lines(chapter, answers)
    for exercise, text in answers.items():
        defined = re.findall(r"^def (\w+)", text, flags=re.M)
        names = [n for n in defined if n in verdicts]
        assert names, f"{chapter} {exercise}: no probe of {defined} ran"
        rejected = [n for n in names if verdicts[n].startswith(REJECTED)]
        assert rejected, (f"{chapter} {exercise}: the HIDDEN_ONLY answer passes its probe(s) "
                          f"{ {n: verdicts[n] for n in names} }: the experiments would use a wrong function")
