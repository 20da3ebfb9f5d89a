# ---
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

# %% [markdown]
# # Chapter 9: Attention at inference time
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
#
# The tests try every kind of input listed here:
# - `x`: float32; float64.
# - `factor`: a Python float; a Python int.
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex1_scale", "locked": false, "schema_version": 3, "solution": true}
def scale(x, factor):
    """``x`` times ``factor``: a new tensor of ``x``'s shape and dtype."""
    ### BEGIN SOLUTION
    return x * factor
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1_scale-visible", "locked": true, "points": 1, "schema_version": 3, "solution": false} tags=["raises-exception"]
checks.run_checks("scale", [
    ("a float32 vector times 2", lambda: checks.expect_close(
        checks.call(scale, torch.tensor([1.0, -2.0, 3.0]), 2.0), torch.tensor([2.0, -4.0, 6.0]), "scale(x, 2.0)")),
])

# %% nbgrader={"grade": true, "grade_id": "ex1_scale-hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Hidden tests: float32 and float64 tensors of several shapes, Python float and int factors.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(909)
_cases = [(torch.randn(3, 4, generator=_g, dtype=dtype), factor)
          for dtype in (torch.float32, torch.float64) for factor in (0.5, 3, -1.25)]
_got = [checks.call(scale, x, f) for x, f in _cases]
### BEGIN EXPECTED
_want = [x * f for x, f in _cases]
### END EXPECTED
checks.run_checks("scale (hidden)", [
    (f"case {i}: {x.dtype}, factor {f!r}", lambda i=i: checks.expect_close(_got[i], _want[i], "scale(x, factor)"))
    for i, (x, f) in enumerate(_cases)
] + [(f"case {i}: the dtype", lambda i=i, x=x: checks.expect_dtype(_got[i], x.dtype, "scale(x, factor)"))
      for i, (x, f) in enumerate(_cases)])
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 2: shifting a tensor (1 + 2 points)
#
# Write `shift(x, offset)` returning `x` plus `offset`, a new tensor of `x`'s shape and dtype.
#
# <!-- domain: ex2_shift shift -->
#
# The tests try every kind of input listed here:
# - `x`: float32; float64.
# - `offset`: a Python float; a Python int.
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex2_shift", "locked": false, "schema_version": 3, "solution": true}
def shift(x, offset):
    """``x`` plus ``offset``: a new tensor of ``x``'s shape and dtype."""
    ### BEGIN SOLUTION
    return x + offset
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex2_shift-visible", "locked": true, "points": 1, "schema_version": 3, "solution": false} tags=["raises-exception"]
checks.run_checks("shift", [
    ("a float32 vector plus 2", lambda: checks.expect_close(
        checks.call(shift, torch.tensor([1.0, -2.0, 3.0]), 2.0), torch.tensor([3.0, 0.0, 5.0]), "shift(x, 2.0)")),
])

# %% nbgrader={"grade": true, "grade_id": "ex2_shift-hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Hidden tests: float32 and float64 tensors, Python float and int offsets.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(959)
_cases = [(torch.randn(2, 5, generator=_g, dtype=dtype), offset)
          for dtype in (torch.float32, torch.float64) for offset in (0.25, -3, 7.5)]
_got = [checks.call(shift, x, o) for x, o in _cases]
### BEGIN EXPECTED
_want = [x + o for x, o in _cases]
### END EXPECTED
checks.run_checks("shift (hidden)", [
    (f"case {i}: {x.dtype}, offset {o!r}", lambda i=i: checks.expect_close(_got[i], _want[i], "shift(x, offset)"))
    for i, (x, o) in enumerate(_cases)
] + [(f"case {i}: the dtype", lambda i=i, x=x: checks.expect_dtype(_got[i], x.dtype, "shift(x, offset)"))
      for i, (x, o) in enumerate(_cases)])
### END HIDDEN TESTS

# %% [markdown]
# ## 2. What is still missing
#
# What this chapter leaves open, and which chapter takes it up.
