"""Scaffold a new chapter: every file a chapter needs, made and wired in, ready to be written.

Usage (``make new-chapter NAME=ch09_attention_at_inference TITLE="Attention at inference time"``)::

    python tools/new_chapter.py ch09_attention_at_inference "Attention at inference time"

What it makes (CONTRIBUTING.md's "Adding a chapter" lists the same, and what to do next):

- ``solutions/NAME/NAME.py``: the text source, with the chapter's fixed parts (title, what you will
  build, the exercises line, "the outputs you see first", the imports, a last section) and one
  sample exercise, ``ex1_scale``, with its prompt (the domain list between its markers), answer
  cell, visible test and hidden test (its expected values in an EXPECTED block); the paired
  ``.ipynb``, executed (the stored run);
- ``course_utils/domains/chNN.py``: the sample exercise's declared domain;
- ``tests/correct_answers/NAME.py`` (two alternatives) and ``tests/wrong_answers/NAME.py`` (a wrong
  answer and the ``HIDDEN_ONLY`` one that passes the visible test);
- ``tools/mutants/NAME.toml`` (no equivalent mutant yet) and the chapter's rows of ``tools/mutants.md``;
- a row in the README's chapter table and in the site's, and the site's table of contents;
- the releases (``notebooks/``, ``notebooks-zh_CN/``) and the Chinese catalogue (its entries await
  translation: ``make test-translations`` lists them).

``tests/test_new_chapter.py`` scaffolds one in a temporary copy of the repository and runs the
chapter-level tests there. Replace the sample exercise by the chapter's own (and its declaration,
answers and README row) as the chapter is written.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HEADER = """# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: all
#     notebook_metadata_filter: kernelspec,-jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---
"""

SOURCE = '''
# %% [markdown]
# # Chapter {number}: {title}
#
# *Attention, from Seq2Seq to Transformers*: what this chapter teaches, in one paragraph.
#
# **What you will build**: `scale` and `shift`, sample exercises to replace by the chapter's own.
#
# **Exercises** (graded by the test cells below each one): 1 `scale` (3 points), 2 `shift` (3).
#
# **The outputs you see first.** Until you run a cell, the output under it is the course's stored
# run, the one this text calls "the stored run". Running the cell replaces it with the output
# of your own run, which can differ from the stored one wherever the text gives a range.

# %%
import torch

from course_utils import budget, checks, train

train.set_seed(0)
GRADING = budget.grading()   # True while nbgrader runs the notebook: experiments shrink

# %% [markdown]
# ## 1. What the previous chapters left open
#
# The motivation: what the learner can do now, and what is still out of reach. Then the idea, and
# a worked example that the learner runs:

# %%
x = torch.arange(4.0)
print("x:", x.tolist(), "  2 x:", (2 * x).tolist(), "  x + 1:", (x + 1).tolist())

# %% [markdown]
# ### Exercise 1: scaling a tensor (1 + 2 points)
#
# Write `scale(x, factor)` returning `x` times `factor`, a new tensor of `x`'s shape and dtype.
#
# <!-- domain: ex1_scale scale -->
# <!-- /domain -->

# %% nbgrader={{"grade": false, "grade_id": "ex1_scale", "locked": false, "schema_version": 3, "solution": true}}
def scale(x, factor):
    """``x`` times ``factor``: a new tensor of ``x``'s shape and dtype."""
    ### BEGIN SOLUTION
    return x * factor
    ### END SOLUTION


# %% nbgrader={{"grade": true, "grade_id": "ex1_scale-visible", "locked": true, "points": 1, "schema_version": 3, "solution": false}} tags=["raises-exception"]
checks.run_checks("scale", [
    ("a float32 vector times 2", lambda: checks.expect_close(
        checks.call(scale, torch.tensor([1.0, -2.0, 3.0]), 2.0), torch.tensor([2.0, -4.0, 6.0]), "scale(x, 2.0)")),
])

# %% nbgrader={{"grade": true, "grade_id": "ex1_scale-hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}}
# Hidden tests: float32 and float64 tensors of several shapes, Python float and int factors.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed({seed})
_cases = [(torch.randn(3, 4, generator=_g, dtype=dtype), factor)
          for dtype in (torch.float32, torch.float64) for factor in (0.5, 3, -1.25)]
_got = [checks.call(scale, x, f) for x, f in _cases]
### BEGIN EXPECTED
_want = [x * f for x, f in _cases]
### END EXPECTED
checks.run_checks("scale (hidden)", [
    (f"case {{i}}: {{x.dtype}}, factor {{f!r}}", lambda i=i: checks.expect_close(_got[i], _want[i], "scale(x, factor)"))
    for i, (x, f) in enumerate(_cases)
] + [(f"case {{i}}: the dtype", lambda i=i, x=x: checks.expect_dtype(_got[i], x.dtype, "scale(x, factor)"))
      for i, (x, f) in enumerate(_cases)])
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 2: shifting a tensor (1 + 2 points)
#
# Write `shift(x, offset)` returning `x` plus `offset`, a new tensor of `x`'s shape and dtype.
#
# <!-- domain: ex2_shift shift -->
# <!-- /domain -->

# %% nbgrader={{"grade": false, "grade_id": "ex2_shift", "locked": false, "schema_version": 3, "solution": true}}
def shift(x, offset):
    """``x`` plus ``offset``: a new tensor of ``x``'s shape and dtype."""
    ### BEGIN SOLUTION
    return x + offset
    ### END SOLUTION


# %% nbgrader={{"grade": true, "grade_id": "ex2_shift-visible", "locked": true, "points": 1, "schema_version": 3, "solution": false}} tags=["raises-exception"]
checks.run_checks("shift", [
    ("a float32 vector plus 2", lambda: checks.expect_close(
        checks.call(shift, torch.tensor([1.0, -2.0, 3.0]), 2.0), torch.tensor([3.0, 0.0, 5.0]), "shift(x, 2.0)")),
])

# %% nbgrader={{"grade": true, "grade_id": "ex2_shift-hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}}
# Hidden tests: float32 and float64 tensors, Python float and int offsets.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed({seed2})
_cases = [(torch.randn(2, 5, generator=_g, dtype=dtype), offset)
          for dtype in (torch.float32, torch.float64) for offset in (0.25, -3, 7.5)]
_got = [checks.call(shift, x, o) for x, o in _cases]
### BEGIN EXPECTED
_want = [x + o for x, o in _cases]
### END EXPECTED
checks.run_checks("shift (hidden)", [
    (f"case {{i}}: {{x.dtype}}, offset {{o!r}}", lambda i=i: checks.expect_close(_got[i], _want[i], "shift(x, offset)"))
    for i, (x, o) in enumerate(_cases)
] + [(f"case {{i}}: the dtype", lambda i=i, x=x: checks.expect_dtype(_got[i], x.dtype, "shift(x, offset)"))
      for i, (x, o) in enumerate(_cases)])
### END HIDDEN TESTS

# %% [markdown]
# ## 2. What is still missing
#
# What this chapter leaves open, and which chapter takes it up.
'''

DOMAINS = '''"""Chapter {number} ({title}): the declared domain of every exercise."""

from __future__ import annotations

import torch

from course_utils.domains import Arg, Exercise, Kind, tensor

__all__ = ["CHAPTER", "EXERCISES"]

CHAPTER = "{name}"

EXERCISES = (
    Exercise(chapter=CHAPTER, exercise="ex1_scale", function="scale", reference=None,
             args=(Arg("x", (Kind("float32", "float32", tensor(torch.float32)),
                             Kind("float64", "float64", tensor(torch.float64)))),
                   Arg("factor", (Kind("python-float", "a Python float", lambda v: type(v) is float),
                                  Kind("python-int", "a Python int", lambda v: type(v) is int))))),
    Exercise(chapter=CHAPTER, exercise="ex2_shift", function="shift", reference=None,
             args=(Arg("x", (Kind("float32", "float32", tensor(torch.float32)),
                             Kind("float64", "float64", tensor(torch.float64)))),
                   Arg("offset", (Kind("python-float", "a Python float", lambda v: type(v) is float),
                                  Kind("python-int", "a Python int", lambda v: type(v) is int))))),
)
'''

CORRECT = '''"""Correct answers to chapter {number}'s exercises, written differently from the solution."""

CORRECT = {{
    "ex1_scale": {{
        "torch.mul": \'\'\'def scale(x, factor):
    return torch.mul(x, factor)
\'\'\',
        "factor first": \'\'\'def scale(x, factor):
    return factor * x
\'\'\',
    }},
    "ex2_shift": {{
        "torch.add": \'\'\'def shift(x, offset):
    return torch.add(x, offset)
\'\'\',
        "offset first": \'\'\'def shift(x, offset):
    return offset + x
\'\'\',
    }},
}}
'''

WRONG = '''"""Plausible wrong answers to chapter {number}'s exercises.

``HIDDEN_ONLY``: for each exercise, a wrong answer that passes the visible tests and fails the hidden ones.
"""

EXERCISE = "ex1_scale"

SOURCE = \'\'\'def scale(x, factor):
    return x + factor
\'\'\'

HIDDEN_ONLY = {{
    # Always float32: right on the visible float32 vector, wrong in dtype for float64.
    "ex1_scale": \'\'\'def scale(x, factor):
    return (x * factor).float()
\'\'\',
    # Rounds the offset to an int: right for the visible 2.0, wrong for 0.25 and 7.5.
    "ex2_shift": \'\'\'def shift(x, offset):
    return x + int(offset)
\'\'\',
}}
'''

MUTANTS = "# Survivors of `python tools/mutants.py {short}` that no test can tell from the solution.\n"


def _run(*cmd: str) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)


def _insert_after_last(path: Path, pattern: str, line: str) -> None:
    """Put ``line`` after the last line of ``path`` that matches ``pattern``."""
    lines = path.read_text(encoding="utf-8").split("\n")
    last = max(i for i, ln in enumerate(lines) if re.match(pattern, ln))
    lines.insert(last + 1, line)
    path.write_text("\n".join(lines), encoding="utf-8")


def _source_as_jupytext_writes(source: Path) -> None:
    """Rewrite the text source exactly as jupytext writes its notebook (``tests/test_sources.py``)."""
    import jupytext
    import nbformat

    nb = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    nb.metadata["jupytext"] = jupytext.reads(source.read_text(encoding="utf-8"), fmt="py:percent").metadata["jupytext"]
    source.write_text(jupytext.writes(nb, fmt="py:percent"), encoding="utf-8")


def _refresh_counts() -> None:
    """Rewrite every ``<!-- n:NAME -->`` count of the docs (chapters, test cells ...) from the course now:
    the values ``tests/test_docs.py`` checks them against."""
    sys.path.insert(0, str(ROOT / "tests"))
    import test_docs

    values = test_docs.values()
    for doc in test_docs.DOCS:
        text = doc.read_text(encoding="utf-8")
        new = test_docs.MARKER.sub(lambda m: f"<!-- n:{m[1]} -->{values[m[1]]}<!-- /n -->" if m[1] in values else m[0], text)
        if new != text:
            doc.write_text(new, encoding="utf-8")


def scaffold(name: str, title: str) -> None:
    """Write every file of chapter ``name`` (``chNN_slug``) and wire it in (see the module docstring)."""
    if not re.fullmatch(r"ch\d\d_[a-z0-9_]+", name):
        raise SystemExit(f"NAME must look like ch09_attention_at_inference, got {name!r}")
    short, number = name[:4], int(name[2:4])
    if any((ROOT / "solutions").glob(f"{short}_*")):
        raise SystemExit(f"a chapter {short}_* exists already")
    fields = {"name": name, "title": title, "number": number, "short": short, "seed": 900 + number, "seed2": 950 + number}
    folder = ROOT / "solutions" / name
    folder.mkdir(parents=True)
    (folder / f"{name}.py").write_text(HEADER + SOURCE.format(**fields), encoding="utf-8")
    (ROOT / "course_utils" / "domains" / f"{short}.py").write_text(DOMAINS.format(**fields), encoding="utf-8")
    (ROOT / "tests" / "correct_answers" / f"{name}.py").write_text(CORRECT.format(**fields), encoding="utf-8")
    (ROOT / "tests" / "wrong_answers" / f"{name}.py").write_text(WRONG.format(**fields), encoding="utf-8")
    (ROOT / "tools" / "mutants" / f"{name}.toml").write_text(MUTANTS.format(**fields), encoding="utf-8")
    link = f"notebooks/{name}/{name}.ipynb"
    _insert_after_last(ROOT / "README.md", r"\| \d+ \| \[`ch\d\d_",
                       f"| {number} | [`{name}`]({link}) | {title.lower()} | 2 autograded (6) | (tools/learner_time.py) |")
    _insert_after_last(ROOT / "site" / "index.md", r"\| \d+ \| \[.*\]\(chapters/ch\d\d_",
                       f"| {number} | [{title}](chapters/{name}.ipynb) | {title.lower()} |")
    _insert_after_last(ROOT / "site" / "index.md", r"chapters/ch\d\d_", f"chapters/{name}")
    python = sys.executable
    _run(python, "-m", "course_utils.domains", "--write")
    _run(python, "-m", "jupytext", "--quiet", "--to", "ipynb", str(folder / f"{name}.py"))
    _source_as_jupytext_writes(folder / f"{name}.py")
    _run(python, "-m", "course_grading", "execute", str(folder / f"{name}.ipynb"))
    _refresh_counts()
    _run(python, str(ROOT / "tools" / "learner_time.py"))
    _run(python, "-m", "course_utils.i18n", "update")
    _run(python, "-m", "course_grading", "release")
    _run(python, "-m", "course_grading", "release", "--lang", "zh_CN")
    _run(python, str(ROOT / "tools" / "mutants.py"), short)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        raise SystemExit('usage: python tools/new_chapter.py ch09_attention_at_inference "Attention at inference time"')
    scaffold(*argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
