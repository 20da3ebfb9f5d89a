"""No line of a hidden test in what a learner is given: the English and the Chinese release.

For every chapter (``solutions/ch*``) the hidden-test lines are read from its instructor source (the
``.py`` and its paired ``.ipynb``) with the grader's own :func:`course_grading.feedback.hidden_lines`:
every line of :data:`~course_grading.feedback.DISTINCTIVE_CHARS` characters or more (the rule the
feedback tests use, ``tests/test_grading.py`` and ``tests/test_grading_hostile.py``), and every shorter
one of :data:`~course_grading.feedback.SCRUBBED_CHARS` or more that holds a number other than a seed or
breaks rules 1 to 3 below (``assert n == 4`` is short and tells a value; ``if mask is not None:`` tells
nothing). None may stand in the text of ``notebooks/chNN_*/`` or
``notebooks-zh_CN/chNN_*/``: every string of the notebook's JSON (cell sources, stored outputs,
tracebacks without their colour codes, metadata), read as text, no kernel.

A line found there is excused only by :data:`ALLOWED`, each entry with its reason. **The rule for an
entry** (:func:`literal_problems`, enforced by a test), after each ``manual_seed(N)`` is read as
``manual_seed(SEED)`` (a probe seed is public: the repository holds the hidden tests, and a course with
a probe secret grades with other seeds, ``course_grading.withhold``):

1. no list or tuple of two or more numbers (a tensor literal such as ``[[0.25, 0.75]]``);
2. a line that asserts or compares (``assert``, ``==``, ``!=``, ``<``, ``>``, ``<=``, ``>=``) holds no
   literal at all (no number, no string, no ``True``/``False``/``None``);
3. a line that calls a check (a name holding ``expect``, ``close``, ``equal``, ``approx`` or ``assert``)
   holds no number, no ``True``/``False``/``None`` and at most one string (its message);
4. any other literal (a number, i.e. a digit not inside a name; a string; ``True``, ``False``, ``None``)
   only on a *visible twin*: a line that also stands in a visible test cell of the instructor's source
   of every chapter where it is found. A hidden test may have to repeat a visible helper (to compute
   its expected value inside ``### BEGIN EXPECTED``, where the grader withholds it); its literals are
   then the visible test's own, shown by design.

So no entry can excuse an expected value written as a literal: such a value is compared or checked
(rules 2, 3), written as a tensor (1), or bound to a name, which needs rule 4's visible twin, where the
learner already reads it in a visible test; an entry that is no twin is literal-free code
(``except ValueError as err:``). An entry that excuses nothing any more fails as stale.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import nbformat
import pytest

from course_grading import feedback

REPO = Path(__file__).resolve().parent.parent
RELEASES = ("notebooks", "notebooks-zh_CN")
CHAPTERS = sorted(p for p in (REPO / "solutions").glob("ch*") if p.is_dir())

_EX5_VIT = ("ch07 ex5: the hidden _hidden_vit_case repeats the visible _vit_case (its docstring and one tuple() "
            "aside), to compute its expected logits inside ### BEGIN EXPECTED, which the grader withholds")
_EX6_FLASH = ("ch08 ex6: the hidden _want6 repeats the visible _attention_and_lse (SDPA and the log-sum-exp of "
              "the masked scores in float64) inside ### BEGIN EXPECTED; a formula, no value")
ALLOWED: dict[str, str] = {
    "except ValueError as err:": ("ch09: a bad input must raise ValueError, as each prompt says; the visible tests "
                                  "catch it with this very line"),
    "outs, cache, t = [], None, 0": ("ch04 ex4: the hidden _decode starts as the visible _decode4b of exercise 4b "
                                     "does: no output yet, no cache, position 0"),
    "g = torch.Generator().manual_seed(seed)": _EX5_VIT,
    "with checks.forbid(*forbidden):": _EX5_VIT,
    "got = checks.call(vit_forward, model, images)": _EX5_VIT,
    "model = vit.ViT(vit.ViTConfig(**{\"patch\": 4, \"d_model\": 16, \"n_heads\": 2, \"n_layers\": 2, **kw})).eval()":
        _EX5_VIT + " (the base configuration; each hidden case changes it)",
    "for param in model.parameters():     # every weight random (class token, positions, norms): each part matters":
        _EX5_VIT,
    "param.copy_(torch.randn(param.shape, generator=g) * 0.5)": _EX5_VIT,
    "images = torch.rand(batch, model.cfg.channels, model.cfg.image_size, model.cfg.image_size, generator=g)":
        _EX5_VIT,
    "checks.expect_close(got, want, f\"logits of a ViT {kw or ''} on {batch} images (class token first, positions, \"":
        _EX5_VIT + " (the English release only: the Chinese one translates the message)",
    "q, k, v = q.double(), k.double(), v.double()": _EX6_FLASH,
    "s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])": _EX6_FLASH,
    "s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).tril().logical_not(), float(\"-inf\"))": _EX6_FLASH,
    "return F.scaled_dot_product_attention(q, k, v, is_causal=causal), torch.logsumexp(s, -1, keepdim=True)":
        _EX6_FLASH,
    "k_nan, v_nan = k.clone(), v.clone()": ("ch08 ex6 and ex7: the hidden skip checks fill the keys past a block "
                                            "with NaN as the visible ones do (a copy of the inputs, no value)"),
    "return torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=causal), (q, k, v), d_out.double())":
        ("ch08 ex7: the hidden _autograd7 takes autograd's gradients of SDPA as the visible _autograd_grads does, "
         "inside ### BEGIN EXPECTED, which the grader withholds (a formula, no value)"),
}

_SEED = re.compile(r"manual_seed\(\s*\d+\s*\)")
_NUMBER = re.compile(r"(?<![\w.])\.?\d")                          # a digit not inside a name (h2, float64, _q6)
_STRING = re.compile(r"""[rRbBfFuU]{0,2}(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')""")
_CONSTANT = re.compile(r"\b(?:True|False|None)\b")
_COMPARES = re.compile(r"\bassert\b|[=!<>]=|(?<![-=<>])[<>](?![=<>])")
_CHECKS = re.compile(r"expect|close|equal|approx|assert", re.I)
_NUMBERS = re.compile(r"(?<![\w)\]])[\[(]\s*[-+]?\.?\d[^,\[\]()]*,\s*[-+]?\.?\d")   # [1, 2] or (0.5, -1): not f(1, 2)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def literal_problems(line: str, twin: bool) -> list[str]:
    """Why ``line`` may not be allow-listed (the module's rule; empty: it may). ``twin``: the line also
    stands in a visible test cell of the instructor's source of every chapter where it was found."""
    bare = _SEED.sub("manual_seed(SEED)", line)
    numbers, strings, constants = _NUMBER.search(bare), _STRING.findall(bare), _CONSTANT.search(bare)
    problems = []
    if _NUMBERS.search(bare):
        problems.append("a list or tuple of numbers (a tensor literal)")
    if _COMPARES.search(bare) and (numbers or strings or constants):
        problems.append("an assert or a comparison with a literal")
    if _CHECKS.search(bare) and (numbers or constants or len(strings) > 1):
        problems.append("a check called with a literal other than its message")
    if (numbers or strings or constants) and not twin:
        problems.append("a literal that is neither a seed nor a visible test's own")
    return problems


def _strings(node):
    """Every string in a notebook's JSON; a list of strings (a multi-line source or output) also joined."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, list):
        if node and all(isinstance(x, str) for x in node):
            yield "".join(node)
        for x in node:
            yield from _strings(x)
    elif isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _strings(value)


def visible_text(notebook: Path) -> str:
    """All a learner reads in a notebook file, as text: every string of its JSON, colour codes removed."""
    return _ANSI.sub("", "\n".join(_strings(json.loads(notebook.read_text(encoding="utf-8")))))


@functools.cache
def _source(chapter: Path):
    return nbformat.read(chapter / f"{chapter.name}.ipynb", as_version=4)


def hidden_of(chapter: Path) -> set[str]:
    """The chapter's hidden-test lines the releases must not hold (see the module's docstring)."""
    py = nbformat.from_dict({"cells": [{"source": (chapter / f"{chapter.name}.py").read_text(encoding="utf-8")}]})
    lines = set(feedback.hidden_lines(_source(chapter))) | set(feedback.hidden_lines(py))
    return {ln for ln in lines if len(ln) >= feedback.DISTINCTIVE_CHARS or _telling(ln)}


def _telling(line: str) -> bool:
    """A short hidden line worth looking for: it holds a number other than a seed, or breaks rules 1 to 3."""
    return bool(_NUMBER.search(_SEED.sub("manual_seed(SEED)", line)) or literal_problems(line, twin=True))


def visible_test_lines(chapter: Path) -> set[str]:
    """The lines of the visible test cells of the chapter's instructor source (hidden blocks removed)."""
    cells = [c for c in _source(chapter).cells
             if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata.get("nbgrader", {}).get("solution")]
    return {ln.strip() for c in cells for ln in feedback.HIDDEN.sub("", c.source).splitlines()}


def leaks(hidden, notebook: Path) -> list[str]:
    """The lines of ``hidden`` that stand in ``notebook``'s text."""
    text = visible_text(notebook)
    return sorted(ln for ln in hidden if ln in text)


@functools.cache
def scan() -> dict[str, dict[str, list[str]]]:
    """{chapter: {release folder: hidden lines found in that release's notebook}}."""
    found = {}
    for chapter in CHAPTERS:
        hidden = hidden_of(chapter)
        found[chapter.name] = {rel: leaks(hidden, REPO / rel / chapter.name / f"{chapter.name}.ipynb")
                               for rel in RELEASES}
    return found


def test_every_chapter_has_hidden_tests_and_both_releases():
    assert CHAPTERS, "no chapter in solutions/"
    for chapter in CHAPTERS:
        assert hidden_of(chapter), f"{chapter.name}: no hidden-test line found (markers renamed?)"
        for rel in RELEASES:
            assert (REPO / rel / chapter.name / f"{chapter.name}.ipynb").is_file(), f"{rel}/{chapter.name}: no release"


@pytest.mark.parametrize("chapter", [c.name for c in CHAPTERS])
def test_no_hidden_line_stands_in_a_release(chapter):
    found = [f"{rel}: {ln}" for rel, lines in scan()[chapter].items() for ln in lines if ln not in ALLOWED]
    assert not found, (f"{chapter}: lines of hidden tests stand in what a learner sees (reword one side, or "
                       f"allow-list a generic statement in tests/test_hidden_lines.py with its reason):\n"
                       + "\n".join(found))


def test_the_allow_list_excuses_no_literal_value():
    for line, reason in ALLOWED.items():
        assert reason.strip(), f"{line!r} needs a reason"
        where = [ch for ch in CHAPTERS if any(line in lines for lines in scan()[ch.name].values())]
        twin = bool(where) and all(line in visible_test_lines(ch) for ch in where)
        assert not literal_problems(line, twin), (line, literal_problems(line, twin))


def test_the_allow_list_has_no_stale_entry():
    found = {ln for by_release in scan().values() for lines in by_release.values() for ln in lines}
    stale = sorted(set(ALLOWED) - found)
    assert not stale, f"allow-listed lines that no release holds as a hidden line any more (remove them): {stale}"


@pytest.mark.parametrize("line, twin", [
    ("assert out.tolist() == [[0.25, 0.75]]", True),
    ("want = torch.tensor([0.5, -1.25, 3e-2])", True),
    ("_cases = [(2, 3), (4, 5)]", True),
    ("checks.expect_equal(n_params, 1234, \"parameters\")", True),
    ("checks.expect_close(got, 0.731, \"sigmoid(1)\")", True),
    ("checks.expect_equal(flag, True, \"causal\")", True),
    ("checks.expect_equal(str(err), \"bad shape\", \"message\")", True),
    ("assert str(err) == \"q must be 3-D\"", True),
    ("assert result is None or result < threshold", True),
    ("_want = 0.7310585786300049", False),
    ("g = torch.Generator().manual_seed(seed + 17)", False),
    ("msg = \"expected 42 tokens\"", False),
    ("_message = \"q must be three-dimensional\"", False),
    ("_causal = True", False),
])
def test_the_rule_refuses_a_line_that_carries_a_literal(line, twin):
    assert literal_problems(line, twin), line


@pytest.mark.parametrize("line, twin", [
    ("except ValueError as err:", False),
    ("g = torch.Generator().manual_seed(101)", False),
    ("with checks.forbid(*forbidden):", False),
    ("checks.expect_close(got, want, f\"logits on {batch} images\")", True),
    ("s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])", True),
    ("x = torch.randn(2, 3, generator=g, dtype=torch.float64)", True),
])
def test_the_rule_accepts_a_generic_statement(line, twin):
    assert not literal_problems(line, twin), (line, literal_problems(line, twin))


def _with_line(release: Path, line: str, where: str, out: Path) -> Path:
    """A copy of ``release`` with ``line`` put where a learner would read it."""
    nb = json.loads(release.read_text(encoding="utf-8"))
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    if where == "markdown":
        nb["cells"].append({"cell_type": "markdown", "metadata": {}, "source": ["A note:\n", f"    {line}\n"]})
    elif where == "stream":
        code["outputs"].append({"output_type": "stream", "name": "stdout", "text": ["a\n", f"  {line}\n", "b\n"]})
    elif where == "traceback":   # IPython colours each token: the line is split by escape codes
        coloured = " ".join(f"\x1b[0;32m{word}\x1b[0m" for word in line.split(" "))
        code["outputs"].append({"output_type": "error", "ename": "E", "evalue": "", "traceback": ["x", coloured]})
    elif where == "code":
        code["source"] = "".join(code["source"]) + f"\n    {line}\n"
    out.write_text(json.dumps(nb), encoding="utf-8")
    return out


@pytest.mark.parametrize("where", ["markdown", "code", "stream", "traceback"])
@pytest.mark.parametrize("rel", RELEASES)
def test_the_scan_finds_a_hidden_line_put_into_a_copy_of_a_release(tmp_path, rel, where):
    chapter = next((c for c in CHAPTERS if c.name.startswith("ch03")), CHAPTERS[0])
    release = REPO / rel / chapter.name / f"{chapter.name}.ipynb"
    hidden = hidden_of(chapter)
    clean = set(leaks(hidden, release))
    line = max((ln for ln in hidden if ln not in clean and _NUMBER.search(ln)), key=len)
    assert line not in ALLOWED
    assert set(leaks(hidden, _with_line(release, line, where, tmp_path / release.name))) == clean | {line}
