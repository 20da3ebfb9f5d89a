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
# ## 4. Speculative decoding
#
# Chapter 4 measured why decoding is slow: each new token is one forward pass of the whole model,
# and that pass reads every weight and the whole cache from memory to do a few multiplications per
# number read. On an accelerator, a pass over 5 new tokens costs hardly more than a pass over 1:
# the weights are read once either way. Leviathan, Kalman and Matias ("Fast Inference from
# Transformers via Speculative Decoding", ICML 2023) and Chen et al. ("Accelerating Large Language
# Model Decoding with Speculative Sampling", 2023) turn that into speed. A small **draft** model
# $q$ proposes $\gamma$ tokens $x_1 \dots x_\gamma$, one cheap pass each. The **target** $p$ scores
# all of them in one pass over the $\gamma$ new positions, giving its distributions $p_1 \dots
# p_{\gamma+1}$ at once (the last one after $x_\gamma$). Then, left to right:
#
# - draft token $x_i$ is **kept** with probability $\min\bigl(1, p_i(x_i) / q_i(x_i)\bigr)$;
# - at the first rejection, the token at that place is drawn instead from the **residual**
#   $\mathrm{norm}\bigl(\max(0, p_i - q_i)\bigr)$, and the step ends (the later draft tokens were
#   built on a token that is gone);
# - if all $\gamma$ are kept, one **bonus** token is drawn from $p_{\gamma+1}$.
#
# Every step emits between 1 and $\gamma + 1$ tokens for one target pass. And the tokens are
# distributed **exactly** as the target's own samples, whatever the draft (Leviathan et al.,
# Theorem 3.5). For one token: the draft proposes $x$ with probability $q(x)$ and keeps it with
# probability $\min(1, p(x)/q(x))$, so $x$ comes out kept with probability $\min(q(x), p(x))$; the
# rest of $p(x)$, $\max(0, p(x) - q(x))$, is exactly what the residual puts back, because the total
# rejected mass $1 - \sum_x \min(p(x), q(x))$ equals $\sum_x \max(0, p(x) - q(x))$.
#
# The cell checks this on a vocabulary of 5 tokens by enumeration: the probability of every first
# token, computed from the rule (`speculative.residual_distribution` is the residual), against
# $p$. Then by sampling: 20 000 steps of `speculative.accept` (the course's whole step, random
# draws included) against $p$, and, as the control, the draft's own tokens against $p$.

# %%
import hashlib  # noqa: E402 (sections 4 and 5 import what they use here)
import math  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402

from course_utils import (  # noqa: E402
    ablation,
    decoding,
    kvcache,
    kvquant,
    mla,
    positional,
    runcache,
    speculative,
    textlm,
)

g = torch.Generator().manual_seed(9)
V = 5
p_toy = torch.softmax(torch.randn(2, V, generator=g, dtype=torch.float64) * 1.5, -1)   # the target: p_1, p_2
q_toy = torch.softmax(torch.randn(1, V, generator=g, dtype=torch.float64) * 1.5, -1)   # the draft: q_1 (gamma = 1)
keep = torch.clamp(p_toy[0] / q_toy[0], max=1)              # P(keep x) = min(1, p(x) / q(x))
residual = speculative.residual_distribution(p_toy[0], q_toy[0])
first = sum(q_toy[0, x] * (keep[x] * torch.eye(V, dtype=torch.float64)[x] + (1 - keep[x]) * residual)
            for x in range(V))                               # P(first token emitted = y), enumerated over x
print("target p_1:            ", [f"{v:.4f}" for v in p_toy[0].tolist()])
print("draft q_1:             ", [f"{v:.4f}" for v in q_toy[0].tolist()])
print("first token, enumerated:", [f"{v:.4f}" for v in first.tolist()],
      f"  max |difference from p_1| = {(first - p_toy[0]).abs().max().item():.0e}")
assert torch.allclose(first, p_toy[0], rtol=0, atol=1e-15), "the speculative first token must be distributed as p_1"

N_SAMPLES = budget.pick(20000, grading=2000)
counts, drafted = torch.zeros(V, dtype=torch.float64), torch.zeros(V, dtype=torch.float64)
for _ in range(N_SAMPLES):
    x = torch.multinomial(q_toy[0], 1, generator=g)
    kept, nxt = speculative.accept(p_toy, q_toy, x, g)
    counts[kept[0] if len(kept) else nxt] += 1
    drafted[x] += 1
se = (p_toy[0] * (1 - p_toy[0]) / N_SAMPLES).sqrt()         # the standard error of each frequency
z_spec, z_draft = ((counts / N_SAMPLES - p_toy[0]).abs() / se).max(), ((drafted / N_SAMPLES - p_toy[0]).abs() / se).max()
print(f"{N_SAMPLES} steps: speculative tokens' frequencies {[f'{v:.3f}' for v in (counts / N_SAMPLES).tolist()]}, "
      f"at most {z_spec:.1f} standard errors from p_1; the draft's own tokens: {z_draft:.0f} standard errors")
assert z_spec < 5 < z_draft, "the speculative tokens must follow p (within 5 standard errors), the draft's must not"

# %% [markdown]
# The enumeration agrees with $p_1$ to float64's rounding; the sampled frequencies agree within
# the sampling error, and the draft's own tokens, the control, do not. `tests/test_speculative.py`
# also enumerates two tokens ($\gamma = 2$, the second one depending on the first), where a
# rejection ends the step and the next step starts from the corrected token.
#
# The decisions of a step need, besides $p$ and $q$, only one uniform number $u_i \in [0, 1)$
# per draft token: $x_i$ is kept when $u_i < p_i(x_i) / q_i(x_i)$, which happens with probability
# $\min(1, p_i(x_i)/q_i(x_i))$. Given the $u_i$, the step is deterministic: how many tokens are
# kept, and which distribution the next token comes from. That is the part you write.
# %% [markdown]
# ### Exercise 3: verifying a draft (2 + 3 points)
#
# Write `verify_draft(p, q, draft_tokens, u)`, which returns `(n, dist)`:
#
# - `q` is the draft's probabilities `(gamma, V)`, row $i$ the distribution draft token $i$ was
#   drawn from; `p` is the target's `(gamma + 1, V)`, row $i$ at the same place as draft token
#   $i$, and one more row, `p[gamma]`, after the last draft token; `draft_tokens` is `(gamma,)`
#   integer ids (int64); `u` is `(gamma,)`, uniform numbers in $[0, 1)$, `u[i]` for draft token
#   `i`. `gamma` >= 1; `p` and `q` are float32 or float64 (one dtype), each row sums to 1.
# - Go through the draft tokens in order: token `i`, $x_i$ = `draft_tokens[i]`, is **kept** when
#   `u[i] < p[i, x_i] / q[i, x_i]` (so always when $p_i(x_i) \ge q_i(x_i)$, and never when
#   $p_i(x_i) = 0$); the first token that is not kept stops the step. $q_i(x_i) > 0$ always (the
#   draft drew it).
# - `n` is the number of draft tokens kept, a Python `int` from 0 to `gamma`.
# - `dist` is the distribution the next token will be drawn from, a `(V,)` tensor in `p`'s dtype:
#   when `n < gamma`, the residual at the rejected place, $\max(0, p_n - q_n)$ divided by its sum
#   (`speculative.residual_distribution` in `course_utils`, which you may call); when `n == gamma`,
#   `p[gamma]`, the bonus token's distribution.
# - Raise `ValueError` before any computing when the shapes do not fit: `q` not 2-D, `p` not
#   `(gamma + 1, V)`, `draft_tokens` or `u` not `(gamma,)`; and when a draft token is not an id in
#   $[0, V)$. Do not change the inputs.
#
# You draw no random numbers: the caller draws `u`, and the next token from `dist`, so the tests
# compare your results exactly. They try `u` just below and just above each ratio
# $p_i(x_i)/q_i(x_i)$, so a rule that is right "on average" but keeps or rejects other tokens fails.
#
# <!-- domain: ex3_verify verify_draft -->
#
# The tests try every kind of input listed here:
# - `p`: float32; float64.
# - the arguments together: `gamma` = 1; `gamma` > 1; every draft token kept (`dist` is `p[gamma]`); the first draft token rejected; a later draft token rejected; a draft token to which the target gives probability 0.
# - must raise: `q` not 2-D, `p` not `(gamma + 1, V)`, `draft_tokens` or `u` not `(gamma,)`: ValueError; a draft token outside [0, V): ValueError.
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex3_verify", "locked": false, "schema_version": 3, "solution": true}
def verify_draft(p, q, draft_tokens, u):
    """One speculative step's decisions, its uniforms given.

    Args:
        p: ``(gamma + 1, V)`` the target's probabilities; q: ``(gamma, V)`` the draft's.
        draft_tokens: ``(gamma,)`` int64 ids drawn from ``q``; u: ``(gamma,)`` uniforms in [0, 1).
    Returns:
        ``(n, dist)``: the number of draft tokens kept (int), and ``dist (V,)``, the residual at the
        first rejected place, or ``p[gamma]`` when all are kept.
    """
    ### BEGIN SOLUTION
    if q.dim() != 2:
        raise ValueError(f"q must be (gamma, V), got shape {tuple(q.shape)}")
    gamma, V = q.shape
    if tuple(p.shape) != (gamma + 1, V):
        raise ValueError(f"p must be (gamma + 1, V) with q (gamma, V) = {tuple(q.shape)}, got {tuple(p.shape)}")
    if tuple(draft_tokens.shape) != (gamma,) or tuple(u.shape) != (gamma,):
        raise ValueError(f"draft_tokens and u must be ({gamma},), got {tuple(draft_tokens.shape)} and {tuple(u.shape)}")
    if ((draft_tokens < 0) | (draft_tokens >= V)).any():
        raise ValueError(f"draft_tokens must be ids in [0, {V}), got {draft_tokens.tolist()}")
    for i in range(gamma):
        x = draft_tokens[i]
        if u[i] * q[i, x] >= p[i, x]:             # not kept: u >= p / q, written without dividing
            r = torch.clamp(p[i] - q[i], min=0)
            return i, r / r.sum()
    return gamma, p[gamma]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex3_verify-visible", "locked": true, "points": 2, "schema_version": 3, "solution": false} tags=["raises-exception"]
# gamma = 2 over a vocabulary of 3: the draft proposed tokens 0 then 2
_p3 = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]], dtype=torch.float64)
_q3 = torch.tensor([[0.4, 0.4, 0.2], [0.1, 0.3, 0.6]], dtype=torch.float64)
_x3 = torch.tensor([0, 2])        # p/q: token 0 at place 0: 0.5 / 0.4 >= 1 (always kept); token 2 at place 1: 0.3 / 0.6 = 0.5


def _kept_then_rejected():
    n, dist = checks.call(verify_draft, _p3, _q3, _x3, torch.tensor([0.9, 0.7], dtype=torch.float64))
    checks.expect_equal(n, 1, "n with u = (0.9, 0.7): token 0 kept (p/q >= 1), token 2 not (0.7 >= 0.3 / 0.6)")
    checks.expect_close(dist, torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64),
                        "dist: the residual at place 1, max(0, p_1 - q_1) = (0, 0.3, 0) normalised")


def _all_kept():
    n, dist = checks.call(verify_draft, _p3, _q3, _x3, torch.tensor([0.9, 0.45], dtype=torch.float64))
    checks.expect_equal(n, 2, "n with u = (0.9, 0.45): both kept (0.45 < 0.3 / 0.6)")
    checks.expect_close(dist, _p3[2], "dist when every draft token is kept: p[gamma], the bonus token's")


def _zero_probability():
    p = torch.tensor([[0.0, 0.7, 0.3], [0.2, 0.2, 0.6]], dtype=torch.float64)
    n, dist = checks.call(verify_draft, p, _q3[:1], torch.tensor([0]), torch.tensor([0.0], dtype=torch.float64))
    checks.expect_equal(n, 0, "n when the target gives the draft token probability 0 (even with u = 0)")
    checks.expect_close(dist, torch.tensor([0.0, 0.75, 0.25], dtype=torch.float64), "dist: max(0, p - q) = (0, 0.3, 0.1) normalised")


def _bad_u():
    try:
        checks.call(verify_draft, _p3, _q3, _x3, torch.tensor([0.5], dtype=torch.float64))
    except ValueError:
        return
    checks.expect_equal("returned", "raised ValueError", "verify_draft with u of 1 number for 2 draft tokens")


checks.run_checks("verify_draft", [
    ("a token kept, the next rejected: n and the residual", _kept_then_rejected),
    ("every token kept: the bonus distribution", _all_kept),
    ("a token the target never emits is rejected", _zero_probability),
    ("ValueError for u of the wrong shape", _bad_u),
])

# %% nbgrader={"grade": true, "grade_id": "ex3_verify-hidden", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# Hidden tests: float32 and float64, gamma 1 to 5, vocabularies of 3 to 9, random p and q with the
# draft tokens drawn from q; for every place, u just below every earlier ratio and just above this
# one (rejected there), and u just below every ratio (all kept); draft tokens the target gives 0;
# n (a Python int), dist and its dtype against the rule; every declared bad input raises ValueError.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(353)
_cases3 = []                                                       # (p, q, draft_tokens, u)
for _gamma, _V, _dt, _zero in ((1, 3, torch.float64, False), (2, 5, torch.float32, False), (3, 4, torch.float64, True),
                               (4, 9, torch.float32, True), (5, 6, torch.float64, False)):
    _p = torch.softmax(2 * torch.randn(_gamma + 1, _V, generator=_g, dtype=torch.float64), -1)
    _q = torch.softmax(2 * torch.randn(_gamma, _V, generator=_g, dtype=torch.float64), -1)
    _x = torch.multinomial(_q, 1, generator=_g)[:, 0]
    if _zero:                                                      # the target never emits draft token 1
        _p[1, _x[1]] = 0.0
        _p[1] /= _p[1].sum()
    _p, _q = _p.to(_dt), _q.to(_dt)
    _ratio = (_p[:-1].double().gather(1, _x[:, None])[:, 0] / _q.double().gather(1, _x[:, None])[:, 0]).clamp(max=1)
    _below = (_ratio * (1 - 1e-3)).to(_dt)                        # every token kept
    _cases3.append((_p, _q, _x, _below))
    for _i in range(_gamma):
        if _ratio[_i] < 1:                                         # u just above the ratio: rejected at _i
            _u = _below.clone()
            _u[_i] = min(float(_ratio[_i]) * (1 + 1e-3) + 1e-6, 0.999)
            _u[_i + 1:] = torch.rand(_gamma - _i - 1, generator=_g, dtype=torch.float64).to(_dt)
            _cases3.append((_p, _q, _x, _u))
_got3 = [checks.call(verify_draft, *c) for c in _cases3]


### BEGIN EXPECTED
def _rule3(p, q, x, u):
    p, q = p.double(), q.double()
    for i in range(len(x)):
        if float(u[i]) >= float(p[i, x[i]]) / float(q[i, x[i]]):
            r = (p[i] - q[i]).clamp(min=0)
            return i, r / r.sum()
    return len(x), p[-1]


_want3 = [_rule3(*c) for c in _cases3]
### END EXPECTED


def _case3(r):
    p, q, x, u = _cases3[r]
    n, dist = _got3[r]
    what = f"case {r}: gamma {len(x)}, V {p.shape[1]}, {str(p.dtype)[6:]}, u {[round(float(v), 4) for v in u]}"
    checks.expect_equal(type(n).__name__, "int", f"{what}: the type of n")
    checks.expect_equal(n, _want3[r][0], f"{what}: n, the draft tokens kept")
    checks.expect_dtype(dist, p.dtype, f"{what}: dist's dtype (p's)")
    checks.expect_close(dist.double(), _want3[r][1], f"{what}: dist", atol=1e-5 if p.dtype == torch.float32 else 1e-12)


def _raises3(r):
    gen = torch.Generator().manual_seed(354)
    p, q = torch.softmax(torch.randn(4, 5, generator=gen), -1), torch.softmax(torch.randn(3, 5, generator=gen), -1)
    x, u = torch.tensor([0, 4, 2]), torch.rand(3, generator=gen)
    bad = [("q of 1 axis", (p, q[0], x[:1], u[:1])), ("p of gamma rows, not gamma + 1", (p[:3], q, x, u)),
           ("p of another vocabulary", (p[:, :4], q, x, u)), ("draft_tokens of 2 for gamma 3", (p, q, x[:2], u)),
           ("u of 4 for gamma 3", (p, q, x, torch.rand(4, generator=gen))), ("u of shape (3, 1)", (p, q, x, u[:, None])),
           ("a draft token 5 in a vocabulary of 5", (p, q, torch.tensor([0, 5, 2]), u)),
           ("a draft token -1", (p, q, torch.tensor([0, 1, -1]), u))]
    what, args = bad[r]
    try:
        checks.call(verify_draft, *args)
    except ValueError:
        return
    checks.expect_equal("returned", "raised ValueError", f"verify_draft with {what}")


checks.run_checks("verify_draft (hidden)", [
    *((f"case {r}", lambda r=r: _case3(r)) for r in range(len(_cases3))),
    *((f"bad input {r}", lambda r=r: _raises3(r)) for r in range(8)),
])
### END HIDDEN TESTS

# %% [markdown]
# The cell below checks your `verify_draft` on a probe (every place of a 4-token draft rejected in
# turn, and all kept) and, if it agrees with the course's `speculative.verify_draft`, the
# experiments of this section decide with it: `speculative.speculative_generate(..., verify=...)`
# draws the uniforms and the next token around the function it is given.

# %%
def _probe_verify(fn):
    g = torch.Generator().manual_seed(31)
    p = torch.softmax(2 * torch.randn(5, 7, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(2 * torch.randn(4, 7, generator=g, dtype=torch.float64), -1)
    x = torch.tensor([1, 3, 0, 6])
    ratio = (p[:4, :].gather(1, x[:, None])[:, 0] / q.gather(1, x[:, None])[:, 0]).clamp(max=1)
    out = []
    for i in range(5):
        u = ratio * 0.99
        if i < 4:
            u[i] = min(1.0, float(ratio[i])) * 1.01 if ratio[i] < 0.99 else 0.999
        n, dist = fn(p, q, x, u)
        out.append(torch.cat([torch.tensor([float(n)], dtype=torch.float64), dist]))
    return torch.stack(out)


verify_fn = checks.learner_or_reference(verify_draft, speculative.verify_draft, _probe_verify, "verify_draft")

# %% [markdown]
# **The draft and the target.** The target is chapter 8's decoder (`ablation.ch08_model`: $d = 64$,
# 2 layers, 4 query heads over 2 key/value heads) trained as chapter 8 trains it, on the standard
# library's bytes; the draft is the same architecture shrunk ($d = 32$, 1 layer, 2 query heads over
# 1 key/value head), trained the same way (same steps, data, seed). Both runs are kept in the
# course's run cache (`runcache.reuse_or_train`), so a second run of the chapter loads them.

# %%
# NBVAL_IGNORE_OUTPUT
corpus = textlm.stdlib_corpus()
train_ids, val_ids = textlm.split_corpus(corpus)
LM_BUDGET = {**ablation.CH08_BUDGET, "steps": budget.pick(ablation.CH08_BUDGET["steps"], grading=5)}
LM_CONFIG = textlm.lm_config(LM_BUDGET["steps"], lr=LM_BUDGET["lr"])
DRAFT_CHANGES = dict(d_model=32, n_layers=1, n_heads=2, n_kv_heads=1)
data_key = hashlib.sha256(train_ids.numpy().tobytes()).hexdigest()


def trained_decoder(changes, label):
    """Chapter 8's decoder with ``changes``, trained on the stdlib's bytes with chapter 8's budget."""
    model = ablation.ch08_model(changes, seed=0)
    runcache.reuse_or_train(model, lambda: textlm.train_lm(model, train_ids, LM_CONFIG, seed=0, batch=LM_BUDGET["batch"],
                                                           length=LM_BUDGET["length"]),
                            (data_key, LM_CONFIG, LM_BUDGET, 0), label=label)
    return model.eval()


start = time.perf_counter()
target, draft = trained_decoder({}, "the target"), trained_decoder(DRAFT_CHANGES, "the draft")
for name, m in (("target", target), ("draft", draft)):
    print(f"{name}: {sum(w.numel() for w in m.parameters()):,} parameters, held-out loss "
          f"{textlm.eval_loss(m, val_ids, LM_BUDGET['length']):.3f} nats per byte")
print(f"({time.perf_counter() - start:.0f} s)")

# %% [markdown]
# **Greedy speculative decoding is greedy decoding.** With argmax decoding, $p$ and $q$ are one-hot
# on their argmax: a draft token is kept exactly when it is the target's argmax, and the correction
# is the target's argmax. So the tokens must be the target's own greedy tokens, token for token,
# whatever $\gamma$ and however bad the draft. The prompts are the first lines of four function
# definitions of the held-out text.

# %%
# NBVAL_IGNORE_OUTPUT
val_text = textlm.decode(val_ids)
starts = [m.start() + 1 for m in re.finditer("\n    def ", val_text)][:budget.pick(4, grading=1)]
prompts = [val_ids[s:s + 24][None] for s in starts]
N_NEW = budget.pick(120, grading=20)
GAMMAS = (1, 2, 3, 4, 6, 8)
greedy_want = [decoding.greedy_decode(target, target.init_state(1), N_NEW, eos_id=-1, prompt=pr)[0] for pr in prompts]
greedy_rows = {}
for gamma in GAMMAS:
    stats = Counter()
    for pr, want in zip(prompts, greedy_want):
        got, st = speculative.speculative_generate(target, draft, pr, gamma, N_NEW, verify=verify_fn)
        assert torch.equal(got, want), f"greedy speculative decoding (gamma {gamma}) must equal greedy decoding"
        stats.update(st)
    greedy_rows[gamma] = stats
print(f"greedy speculative decoding = greedy decoding, token for token: {len(prompts)} prompts x {N_NEW} tokens, "
      f"gamma {', '.join(map(str, GAMMAS))}")
print("a prompt and the target's greedy continuation:", repr(textlm.decode(prompts[0][0])), "->",
      repr(textlm.decode(greedy_want[0][0][:60])))

# %% [markdown]
# **Sampling: acceptance rate and target passes per token.** Now at temperature 1, where the rule
# itself matters. For each $\gamma$, the four prompts are continued by `N_NEW` sampled tokens each
# (generator seeded). A step ends on its first rejection, so the draft tokens after it are never
# tested: the acceptance rate, Leviathan et al.'s $\alpha$, is the tokens kept over the tokens
# *tested*, kept / (kept + rejections), not kept / drafted. With $\alpha$, if every draft token were
# kept independently with probability $\alpha$, a step would emit on average
# $(1 - \alpha^{\gamma+1})/(1 - \alpha)$ tokens (their Eq. 1, `speculative.expected_tokens_per_step`),
# the measured tokens per target pass beside it. The greedy rows come from the runs above.

# %%
# NBVAL_IGNORE_OUTPUT
gen = torch.Generator().manual_seed(0)
sample_rows = {}
for gamma in GAMMAS:
    stats = Counter()
    for pr in prompts:
        _, st = speculative.speculative_generate(target, draft, pr, gamma, N_NEW, greedy=False, generator=gen, verify=verify_fn)
        stats.update(st)
    sample_rows[gamma] = stats
n_tokens = len(prompts) * N_NEW
print(f"{'decoding':>9} {'gamma':>5} {'alpha':>6} {'tokens/pass':>12} {'Eq. 1 at alpha':>15} {'passes/token':>13} {'draft passes/token':>19}")
for mode, rows in (("greedy", greedy_rows), ("sampling", sample_rows)):
    for gamma, st in rows.items():
        alpha = st["accepted"] / (st["accepted"] + st["rejected"])
        per_pass = n_tokens / st["target_passes"]     # the last step may emit more than is kept: a slight underestimate
        assert 1 <= per_pass <= gamma + 1, "a target pass emits between 1 and gamma + 1 tokens"
        print(f"{mode:>9} {gamma:>5} {alpha:>6.3f} {per_pass:>12.2f} {speculative.expected_tokens_per_step(alpha, gamma):>15.2f} "
              f"{st['target_passes'] / n_tokens:>13.3f} {st['drafted'] / n_tokens:>19.2f}")

# %% [markdown]
# Read your run's table (it is one sample: the trained weights differ a little between CPUs, and
# the sampled tokens with the seed). In the stored run the greedy rows keep more than the sampling
# rows: a greedy draft only has to agree with the target's argmax, a sampling draft's whole
# distribution is compared with the target's. In both, the tokens per target pass first grow with
# $\gamma$, then level off (a further draft token is tested only when all before it were kept), and
# the target passes per token fall below 1 while the draft passes per token keep growing. Eq. 1 is a model, not an identity: it assumes that each draft token is kept
# independently with the same probability, while real text has easy stretches (indentation, a
# keyword's end) where a draft is right many times in a row and hard ones where it is wrong at
# once; the measured column and the formula's differ by as much as that assumption fails.
#
# **What this CPU run shows, and what it cannot.** It measures passes, not time. The speed-up
# comes from a target pass over $\gamma + 1$ positions costing about as much as a pass over one,
# which holds where decoding is bound by reading the weights from memory (a large model on a GPU,
# chapter 4's measurement); a model this small on a CPU is bound by the overhead of each call
# instead, so its timings would say nothing about a GPU's. Leviathan et al. report "2X-3X
# acceleration" of T5-XXL on TPUs with identical outputs (their abstract); the pass counts above are
# what such a speed-up is made of, the time itself is beyond this notebook.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q3_speedup-prompt", "locked": true, "schema_version": 3, "solution": false}
# **Question 3 (2 points).** Let $c$ be the time of one draft pass divided by the time of one
# target pass, and assume a target pass over $\gamma + 1$ positions takes as long as over one.
# Write the expected time per emitted token of speculative decoding, relative to plain decoding
# with the target, in terms of $\alpha$, $\gamma$ and $c$. Then say why a larger $\gamma$ is not
# always better, and what happens with a draft that is as good as the target but as slow
# ($\alpha = 1$, $c = 1$). Write your answer in the cell below.

# %% [markdown] nbgrader={"grade": true, "grade_id": "q3_speedup", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# A step costs $\gamma$ draft passes and one target pass, $\gamma c + 1$ target-pass times, and
# emits on average $(1 - \alpha^{\gamma+1})/(1 - \alpha)$ tokens (Eq. 1). Plain decoding takes one
# target-pass time per token, so the time per token relative to it is
# $$\frac{(1 - \alpha)(\gamma c + 1)}{1 - \alpha^{\gamma+1}},$$
# the inverse of Leviathan et al.'s improvement factor (their Theorem 3.8). The numerator grows
# linearly in $\gamma$, while the tokens per step saturate at $1/(1 - \alpha)$: each further draft
# token is tested only if all before it were kept, so it adds $\alpha^{\gamma+1}$ tokens and costs
# a full $c$. Past some $\gamma$ the extra drafting costs more than it brings (the optimum is
# larger for larger $\alpha$ and smaller $c$). With $\alpha = 1$ and $c = 1$ the ratio is
# $(\gamma + 1)/(\gamma + 1) = 1$: every token is kept, but each costs a draft pass as long as the
# target pass it saves, so nothing is gained; speculative decoding needs a draft that is both
# cheap and often right.
#
# **Rubric** (for the grader, two points): one point for the ratio, cost $\gamma c + 1$ per step
# over the expected tokens $(1 - \alpha^{\gamma+1})/(1 - \alpha)$ (or its inverse stated as the
# speed-up); one point for the two consequences: the expected tokens saturate while the cost grows
# linearly in $\gamma$, so a larger $\gamma$ can lose, and at $\alpha = c = 1$ the ratio is 1
# (no gain). An answer that only says "more drafting costs more" without the saturation gets half
# of the second point.
# ### END SOLUTION

# %% [markdown]
# ## 5. Latent KV: multi-head latent attention
#
# Chapter 4 shrank the cache by sharing key/value heads (GQA, MQA), at some cost in quality.
# DeepSeek-V2 (DeepSeek-AI, 2024, §2.1) shrinks it another way: **multi-head latent attention**
# (MLA) caches, per token and layer, one small **latent** $c^{KV}_t = h_t W^{DKV}$ of width $d_c$,
# and rebuilds every head's key and value from it, $k^C_{t,i} = c^{KV}_t W^{UK}_i$ and
# $v_{t,i} = c^{KV}_t W^{UV}_i$. Each head still has its own keys and values (unlike MQA), but they
# all lie in one $d_c$-dimensional subspace.
#
# **The decoupled RoPE key.** Chapter 8's RoPE rotates each key by its position. Rotated keys
# $R_t\, c_t W^{UK}_i$ would stand the rotation between $W^{UK}_i$ and the query, and the trick
# below (folding $W^{UK}_i$ into the query) needs nothing in between. So MLA leaves the rebuilt keys
# unrotated and adds a small separate part: a key $k^R_t = \mathrm{RoPE}(h_t W^{KR})$ of width
# $d^R_h$, **shared by all heads** and cached, and a rotated query part per head. Head $i$'s query
# and key are the concatenations $[q^C_{t,i};\, q^R_{t,i}]$ and $[k^C_{s,i};\, k^R_s]$, the score
# their dot product over $\sqrt{d_h + d^R_h}$. The cache holds $c^{KV}_t$ and $k^R_t$:
# $d_c + d^R_h$ numbers per token and layer, whatever the number of heads.
#
# **Absorption.** At inference nothing needs rebuilding. Head $i$'s content score is
# $q^C_i \cdot (c_s W^{UK}_i) = (q^C_i W^{UK\top}_i) \cdot c_s$: fold $W^{UK}_i$ into the query, once
# per query, and score the latents directly. Its output is $\sum_s a_s (c_s W^{UV}_i) W^O_i =
# (\sum_s a_s c_s)(W^{UV}_i W^O_i)$: average the latents, and fold $W^{UV}_i$ into the output
# projection (a product that can be computed once, with the weights). `course_utils.mla` has both
# forms: `mla_explicit` (keys and values rebuilt, the training form) and `mla_absorbed` (the cache
# only). The cell compares them on random weights, in float64, for a whole sequence, and then for
# the last 3 positions as queries against the cache of all 10.

# %%
g = torch.Generator().manual_seed(5)
W_mla = mla.mla_weights(d_model=32, n_heads=4, d_head=8, d_c=16, d_rope=4, generator=g, dtype=torch.float64)
h_seq = torch.randn(2, 10, 32, generator=g, dtype=torch.float64)
explicit = mla.mla_explicit(h_seq, W_mla)
c_kv, k_rope = mla.mla_cache(h_seq, W_mla)
absorbed_all = mla.mla_absorbed(h_seq, c_kv, k_rope, W_mla)
absorbed_last = mla.mla_absorbed(h_seq[:, -3:], c_kv, k_rope, W_mla)
print(f"cache per token: c_kv {tuple(c_kv.shape[2:])} + k_rope {tuple(k_rope.shape[2:])}; "
      f"MHA would cache 2 x 4 heads x 8 = {2 * 4 * 8} numbers")
print(f"absorbed vs explicit, whole sequence: max |difference| = {(absorbed_all - explicit).abs().max().item():.0e}; "
      f"last 3 positions on the cache: {(absorbed_last - explicit[:, -3:]).abs().max().item():.0e}")
assert torch.allclose(absorbed_all, explicit, rtol=0, atol=1e-12) and torch.allclose(absorbed_last, explicit[:, -3:], rtol=0, atol=1e-12), \
    "absorbed MLA must equal explicit MLA"

# %% [markdown]
# The two forms agree to float64's rounding: they compute the same sums in another order.

# %% [markdown]
# ### Exercise 4: attention over cached latents (2 + 3 points)
#
# Write `mla_attend(h, c_kv, k_rope, W)`, MLA's inference step: the new positions' queries attend
# to the cache, with the up-projections absorbed, and the function returns the layer's output.
#
# - `h` is `(batch, T_q, d_model)`, float32 or float64: the vectors of the `T_q` newest positions.
#   `c_kv` `(batch, T, d_c)` and `k_rope` `(batch, T, d_rope)` are the cache of all `T` positions
#   (what `mla.mla_cache` returns), the new ones included: the queries are positions `T - T_q` to
#   `T - 1`. `k_rope` is already rotated. All in `h`'s dtype.
# - `W` is the dict of `mla.mla_weights`: `W["W_Q"]` `(n_heads, d_model, d_head)`, `W["W_QR"]`
#   `(n_heads, d_model, d_rope)`, `W["W_UK"]` and `W["W_UV"]` `(n_heads, d_c, d_head)`, `W["W_O"]`
#   `(n_heads, d_head, d_model)` (it also holds `W_DKV` and `W_KR`, which made the cache).
# - Head $i$'s query at a new position: $q^C = h\, W_Q[i]$ and $q^R = \mathrm{RoPE}(h\, W_{QR}[i])$,
#   rotated at its own position: `positional.apply_rope_half(x, offset=T - T_q)` on `x`
#   `(batch, n_heads, T_q, d_rope)`. Its score with cached position $s$ is
#   $\bigl(q^C \cdot (c_s W_{UK}[i]) + q^R \cdot k^R_s\bigr) / \sqrt{d_\text{head} + d_\text{rope}}$;
#   a query at position $t$ sees positions $s \le t$ only (the bottom-right causal mask), a softmax
#   over $s$ gives the weights $a_s$, and the output is $\sum_i \bigl(\sum_s a_s\, c_s W_{UV}[i]\bigr)
#   W_O[i]$, summed over the heads.
# - Compute it **absorbed**: $W_{UK}[i]$ folded into the query ($q^C W_{UK}[i]^\top$, of width
#   $d_c$, scored against the latents), $W_{UV}[i] W_O[i]$ applied to the averaged latent. (The
#   tests compare values, so rebuilding the keys and values passes them too; but it is the form that
#   makes the cache worth having.)
# - Return `(batch, T_q, d_model)` in `h`'s dtype.
# - Raise `ValueError` before any computing when `h` is not 3-D or its last axis is not `W_Q`'s
#   `d_model`; when `c_kv` and `k_rope` are not 3-D or differ in batch or length, when their batch is
#   not `h`'s, or when the cache holds fewer positions than `T_q`. Do not change the inputs.
#
# <!-- domain: ex4_mla_attend mla_attend -->
#
# The tests try every kind of input listed here:
# - `h`: float32; float64; a batch of more than 1; a batch of 1.
# - the arguments together: the queries a whole sequence (`T_q` = `T`); one new position on a filled cache (`T_q` = 1 < `T`); a chunk of several new positions on a filled cache (1 < `T_q` < `T`); one head; several heads.
# - must raise: `h` not 3-D, or its `d_model` not `W_Q`'s: ValueError; `c_kv` and `k_rope` not 3-D or differing in batch or length, their batch not `h`'s, or fewer cached positions than `T_q`: ValueError.
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex4_mla_attend", "locked": false, "schema_version": 3, "solution": true}
def mla_attend(h, c_kv, k_rope, W):
    """MLA's inference step: the last ``T_q`` of ``T`` positions attend to the latent cache.

    Args:
        h: ``(batch, T_q, d_model)``; c_kv: ``(batch, T, d_c)``; k_rope: ``(batch, T, d_rope)``, rotated.
        W: the weights of ``mla.mla_weights``.
    Returns:
        ``(batch, T_q, d_model)``.
    """
    ### BEGIN SOLUTION
    if h.dim() != 3 or h.shape[-1] != W["W_Q"].shape[1]:
        raise ValueError(f"h must be (batch, T_q, d_model) with W_Q's d_model, got {tuple(h.shape)}")
    batch, T_q, _ = h.shape
    if c_kv.dim() != 3 or k_rope.dim() != 3 or c_kv.shape[:2] != k_rope.shape[:2]:
        raise ValueError(f"c_kv and k_rope must be (batch, T, ...) alike, got {tuple(c_kv.shape)} and {tuple(k_rope.shape)}")
    T = c_kv.shape[1]
    if c_kv.shape[0] != batch or T < T_q:
        raise ValueError(f"the cache must hold at least T_q = {T_q} positions of batch {batch}, got {tuple(c_kv.shape)}")
    d_head, d_rope = W["W_Q"].shape[-1], k_rope.shape[-1]
    q_c = torch.einsum("btm,hmd->bhtd", h, W["W_Q"])
    q_r = positional.apply_rope_half(torch.einsum("btm,hmr->bhtr", h, W["W_QR"]), offset=T - T_q)
    q_lat = torch.einsum("bhtd,hcd->bhtc", q_c, W["W_UK"])             # W_UK folded into the query
    scores = torch.einsum("bhtc,bsc->bhts", q_lat, c_kv) + torch.einsum("bhtr,bsr->bhts", q_r, k_rope)
    visible = torch.arange(T) <= torch.arange(T - T_q, T)[:, None]    # query t sees s <= t
    a = torch.softmax((scores / math.sqrt(d_head + d_rope)).masked_fill(~visible, float("-inf")), dim=-1)
    mixed = torch.einsum("bhts,bsc->bhtc", a, c_kv)                    # the averaged latent per head
    return torch.einsum("bhtc,hcd,hdm->btm", mixed, W["W_UV"], W["W_O"])  # W_UV W_O applied
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex4_mla_attend-visible", "locked": true, "points": 2, "schema_version": 3, "solution": false} tags=["raises-exception"]
# the layer of the cell above: d_model 32, 4 heads of 8, d_c 16, d_rope 4; 2 sequences of 10 positions
def _whole4():
    got = checks.call(mla_attend, h_seq, c_kv, k_rope, W_mla)
    checks.expect_shape(got, (2, 10, 32), "the output for the whole sequence: (batch, T_q, d_model)")
    checks.expect_close(got, explicit, "the whole sequence vs mla.mla_explicit (keys and values rebuilt)", atol=1e-10)


def _last4():
    got = checks.call(mla_attend, h_seq[:, -1:], c_kv, k_rope, W_mla)
    checks.expect_close(got, explicit[:, -1:], "the last position alone on the cache of 10: its query rotated at "
                        "position 9 (offset T - T_q), seeing every cached position", atol=1e-10)


def _raises4():
    try:
        checks.call(mla_attend, h_seq[:, -4:], c_kv[:, :3], k_rope[:, :3], W_mla)
    except ValueError:
        return
    checks.expect_equal("returned", "raised ValueError", "mla_attend with 4 query positions and a cache of 3")


checks.run_checks("mla_attend", [
    ("the whole sequence at once", _whole4),
    ("one new position on a filled cache", _last4),
    ("ValueError for a cache shorter than the queries", _raises4),
])

# %% nbgrader={"grade": true, "grade_id": "ex4_mla_attend-hidden", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# Hidden tests: float32 and float64, batch 1 to 3, 1 to 5 heads, several d_head, d_c and d_rope; the
# queries a whole sequence, one position on a filled cache, or a chunk of several on a filled cache;
# every output against keys and values rebuilt explicitly (float64); the dtype; every declared bad input.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(454)
# (batch, T, T_q, d_model, n_heads, d_head, d_c, d_rope, dtype)
_cases4 = [(1, 7, 7, 12, 3, 4, 6, 2, torch.float64), (2, 9, 1, 16, 2, 8, 12, 6, torch.float32),
           (3, 8, 3, 10, 5, 2, 4, 4, torch.float64), (2, 6, 6, 8, 1, 6, 5, 2, torch.float32),
           (1, 11, 4, 20, 4, 5, 10, 8, torch.float64)]
_in4 = []
for _b, _T, _Tq, _dm, _nh, _dh, _dc, _dr, _dt in _cases4:
    _W = {k: v.to(_dt) for k, v in mla.mla_weights(_dm, _nh, _dh, _dc, _dr, generator=_g, dtype=torch.float64).items()}
    _h = torch.randn(_b, _T, _dm, generator=_g, dtype=torch.float64).to(_dt)
    _c = _h @ _W["W_DKV"]
    _kr = positional.apply_rope_half((_h @ _W["W_KR"])[:, None])[:, 0]
    _in4.append((_h, _c, _kr, _W))
_got4 = [checks.call(mla_attend, h[:, -c[2]:], ckv, kr, W) for (h, ckv, kr, W), c in zip(_in4, _cases4)]


### BEGIN EXPECTED
def _explicit4(h, W):
    h, W = h.double(), {k: v.double() for k, v in W.items()}
    b, T, _ = h.shape
    c = h @ W["W_DKV"]
    kr = positional.apply_rope_half((h @ W["W_KR"])[:, None])
    q = torch.cat([torch.einsum("btm,hmd->bhtd", h, W["W_Q"]),
                   positional.apply_rope_half(torch.einsum("btm,hmr->bhtr", h, W["W_QR"]))], -1)
    k_c = torch.einsum("btc,hcd->bhtd", c, W["W_UK"])
    k = torch.cat([k_c, kr.expand(-1, k_c.shape[1], -1, -1)], -1)
    s = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    v = torch.einsum("btc,hcd->bhtd", c, W["W_UV"])
    return torch.einsum("bhtd,hdm->btm", torch.softmax(s, -1) @ v, W["W_O"])


_want4 = [_explicit4(h, W)[:, -c[2]:] for (h, _, _, W), c in zip(_in4, _cases4)]
### END EXPECTED


def _case4(r):
    b, T, Tq, dm, nh, dh, dc, dr, dt = _cases4[r]
    what = f"case {r}: batch {b}, {Tq} queries on a cache of {T}, {nh} heads of {dh}, d_c {dc}, d_rope {dr}, {str(dt)[6:]}"
    checks.expect_dtype(_got4[r], dt, f"{what}: the dtype")
    checks.expect_close(_got4[r].double(), _want4[r], f"{what}: the output vs keys and values rebuilt",
                        atol=1e-4 if dt == torch.float32 else 1e-10)


def _raises4_hidden(r):
    h, c, kr, W = _in4[2]                              # batch 3, T 8, d_model 10
    bad = [("h of 2 axes", (h[0], c, kr, W)), ("h of d_model 9", (h[..., :9], c, kr, W)),
           ("c_kv of 2 axes", (h[:, -2:], c[0], kr, W)), ("c_kv of 2 axes (batch, T)", (h[:, -2:], c[..., 0], kr, W)),
           ("k_rope of batch 2", (h[:, -2:], c, kr[:2], W)),
           ("k_rope of 7 positions, c_kv of 8", (h[:, -2:], c, kr[:, :7], W)),
           ("a cache of batch 2 for h of batch 3", (h[:, -2:], c[:2], kr[:2], W)),
           ("5 queries on a cache of 4", (h[:, -5:], c[:, :4], kr[:, :4], W))]
    what, args = bad[r]
    try:
        checks.call(mla_attend, *args)
    except ValueError:
        return
    checks.expect_equal("returned", "raised ValueError", f"mla_attend with {what}")


checks.run_checks("mla_attend (hidden)", [
    *((f"case {r}", lambda r=r: _case4(r)) for r in range(len(_cases4))),
    *((f"bad input {r}", lambda r=r: _raises4_hidden(r)) for r in range(8)),
])
### END HIDDEN TESTS

# %% [markdown]
# The cell below checks your `mla_attend` on a probe (a prompt of 3, one token, a chunk of 2) and,
# if it agrees with the course's `mla.mla_absorbed`, decodes with it: the layer above, a prompt of 4
# positions, then one position at a time, each step appending its latent and rotated key to the cache
# (`mla.mla_cache` at the position's offset) and attending to the cache alone.

# %%
def _probe_mla(fn):
    g = torch.Generator().manual_seed(55)
    W = mla.mla_weights(12, 3, 4, 6, 2, generator=g, dtype=torch.float64)
    h = torch.randn(2, 6, 12, generator=g, dtype=torch.float64)
    c, kr = mla.mla_cache(h, W)
    return torch.cat([fn(h[:, a:b], c[:, :b], kr[:, :b], W) for a, b in ((0, 3), (3, 4), (4, 6))], 1)


attend_fn = checks.learner_or_reference(mla_attend, mla.mla_absorbed, _probe_mla, "mla_attend")
c_cache, r_cache = mla.mla_cache(h_seq[:, :4], W_mla)                    # the prompt's cache
outs = [attend_fn(h_seq[:, :4], c_cache, r_cache, W_mla)]
for t in range(4, 10):
    c_new, r_new = mla.mla_cache(h_seq[:, t:t + 1], W_mla, offset=t)     # the new position's latent and key
    c_cache, r_cache = torch.cat([c_cache, c_new], 1), torch.cat([r_cache, r_new], 1)
    outs.append(attend_fn(h_seq[:, t:t + 1], c_cache, r_cache, W_mla))
err = (torch.cat(outs, 1) - explicit).abs().max().item()
print(f"prompt of 4, then 6 single steps on the latent cache vs explicit MLA over the whole sequence: max |difference| = {err:.0e}")
print(f"the cache holds c_kv {tuple(c_cache.shape)} and k_rope {tuple(r_cache.shape)}: "
      f"{c_cache.numel() + r_cache.numel()} numbers; the rebuilt keys and values would be {2 * 2 * 10 * 4 * 8}")
assert err < 1e-10, "decoding on the latent cache must equal explicit MLA"

# %% [markdown]
# **KV bytes per token.** Chapter 4's table, extended. Per token and layer, MHA caches $2 n_h d_h$
# numbers, GQA with $n_g$ groups $2 n_g d_h$, MQA $2 d_h$, MLA $d_c + d^R_h$
# (`mla.kv_bytes_per_token`). DeepSeek-V2's attention has $n_h = 128$ heads of $d_h = 128$,
# $d_c = 4 d_h$ and $d^R_h = d_h / 2$, and 60 layers; the paper's Table 1 writes MLA's cache as
# $(d_c + d^R_h)\, l \approx \tfrac{9}{2} d_h\, l$ elements and calls it "equal to GQA with only <!-- q:out#as many as GQA with -->2.25<!-- /q -->
# groups". The cell reproduces that from the dimensions (bfloat16, 2 bytes a number), and checks the
# formula against the bytes of the tensors `mla.mla_cache` returns.

# %%
# NBVAL_CHECK_OUTPUT
N_H, D_H, LAYERS = 128, 128, 60                      # DeepSeek-V2 (§2.1.1 and §3.1.2)
D_C, D_R = 4 * D_H, D_H // 2
rows = [("MHA", mla.kv_bytes_per_token("mha", N_H, D_H, n_layers=LAYERS)),
        ("GQA-8", mla.kv_bytes_per_token("gqa", N_H, D_H, n_kv_heads=8, n_layers=LAYERS)),
        ("GQA-2", mla.kv_bytes_per_token("gqa", N_H, D_H, n_kv_heads=2, n_layers=LAYERS)),
        ("MQA", mla.kv_bytes_per_token("mqa", N_H, D_H, n_layers=LAYERS)),
        ("MLA", mla.kv_bytes_per_token("mla", N_H, D_H, d_c=D_C, d_rope=D_R, n_layers=LAYERS))]
mha_bytes = rows[0][1]
print(f"{'kind':>6} {'numbers per token and layer':>28} {'KiB per token':>14} {'GiB at 4096 tokens':>19} {'/ MHA':>8}")
for kind, b in rows:
    print(f"{kind:>6} {b // (2 * LAYERS):>28} {b / 1024:>14.1f} {b * 4096 / 2**30:>19.3f} {b / mha_bytes:>8.4f}")
mla_numbers = D_C + D_R
groups = mla_numbers / (2 * D_H)                     # the GQA whose 2 n_g d_h numbers equal MLA's
print(f"\nMLA: d_c + d_h^R = {mla_numbers} = {mla_numbers / D_H} d_h per token and layer, "
      f"as many as GQA with {groups} groups")
assert groups == 2.25, "DeepSeek-V2's dimensions must give the paper's 2.25 groups"
c_small, r_small = mla.mla_cache(h_seq.float(), {k: v.float() for k, v in W_mla.items()})
tensor_bytes = c_small.nbytes + r_small.nbytes
formula = mla.kv_bytes_per_token("mla", 4, 8, d_c=16, d_rope=4, bytes_per_value=4) * 2 * 10
print(f"mla_cache of 2 sequences of 10 tokens, float32: {tensor_bytes} bytes; the formula: {formula}")
assert tensor_bytes == formula, "the formula must count the cache's bytes"

# %% [markdown]
# MLA caches <!-- q:out#   MLA -->0.0176<!-- /q --> of MHA's bytes in this configuration, less than
# GQA with 8 groups and a little more than GQA with 2, while every head keeps keys and values of its
# own. What it costs: the rebuilt keys live in a subspace of $d_c$ dimensions, and at inference each
# query is first mapped into that space (width $d_c = 4 d_h$ per head instead of $d_h$), so a
# decoding step does more arithmetic per cached byte than GQA's; since decoding is bound by reading
# memory (chapter 4), that is the trade DeepSeek-V2 chose. `make bench` times one decoding step both
# ways (its `latent` table): rebuilding every head's keys and values from the latents at each step
# costs work in proportion to the whole cache, the absorbed step only reads the latents. The paper reports MLA stronger than MHA
# in its ablations (its Appendix D.2); that comparison needs training at scale and is beyond this
# notebook.


# %% [markdown]
# ## 6. An int8 KV cache (optional)
#
# A third way to shrink the cache keeps every number but stores it in fewer bits. `course_utils.kvquant`
# stores each cached key or value in int8, with one scale per **channel** (one head's one feature):
# `scale = max over positions of |x| / 127`, code `round(x / scale)`. Dequantised, every number is off
# by at most half its channel's scale, by construction; the cache takes 1 byte a number, plus the
# scales, instead of 2 (bfloat16) or 4 (float32). Per-channel scales suit keys, whose large values sit
# in a few fixed channels (KIVI, Liu et al. 2024, quantises keys per channel and values per token; here
# both use the one function).
#
# The cell fills the trained target's cache with 48 held-out bytes in each of 32 windows (the model
# was trained on windows of 64), replaces every layer's keys and values by their int8 round trip, and
# feeds each window's next 16 bytes on top: their next-byte loss with the int8 cache against the
# float32 one, and how often the argmax changes.

# %%
# NBVAL_IGNORE_OUTPUT
CONTEXT, FOLLOW, N_WINDOWS = 48, 16, 32
window = torch.stack([val_ids[s:s + CONTEXT + FOLLOW + 1]
                      for s in torch.linspace(0, len(val_ids) - CONTEXT - FOLLOW - 2, N_WINDOWS).long().tolist()])


def int8_round_trip(t):
    """``t (batch, heads, T, d_head)`` through int8, per-channel scales for each sequence; the worst
    error as a fraction of its bound, half a scale."""
    backs, worst = [], 0.0
    for seq in t:                                                          # (heads, T, d_head)
        codes, scale = kvquant.quantize_int8(seq.transpose(0, 1))          # (T, heads, d_head), scale (heads, d_head)
        back = kvquant.dequantize_int8(codes, scale).transpose(0, 1)
        backs.append(back)
        worst = max(worst, ((back - seq).abs() / (scale[:, None] / 2)).max().item())
    return torch.stack(backs), worst


with torch.no_grad():
    exact_cache = target.init_state(N_WINDOWS)
    target(window[:, :CONTEXT], cache=exact_cache)
    int8_cache = target.init_state(N_WINDOWS)
    worst = 0.0
    for i, layer in enumerate(exact_cache.layers):
        (k8, wk), (v8, wv) = int8_round_trip(layer.k), int8_round_trip(layer.v)
        int8_cache.layers[i] = kvcache.KVCache(k8, v8)
        worst = max(worst, wk, wv)
    assert worst <= 1 + 1e-5, "an int8 round trip is off by at most half a scale"
    follow, want = window[:, CONTEXT:CONTEXT + FOLLOW], window[:, CONTEXT + 1:].reshape(-1)
    logits_exact = target(follow, cache=exact_cache).flatten(0, 1)
    logits_int8 = target(follow, cache=int8_cache).flatten(0, 1)
loss = {name: torch.nn.functional.cross_entropy(lg, want).item() for name, lg in (("float32", logits_exact), ("int8", logits_int8))}
print(f"worst error of the round trip: {worst:.3f} of half a scale")
print(f"next-byte loss of the {FOLLOW} bytes after {CONTEXT}, {N_WINDOWS} windows: float32 cache {loss['float32']:.4f}, "
      f"int8 cache {loss['int8']:.4f}; max |logit difference| {(logits_exact - logits_int8).abs().max().item():.3f}; "
      f"argmax changed at {(logits_exact.argmax(-1) != logits_int8.argmax(-1)).sum().item()} of {len(want)} positions")

# %%
# NBVAL_CHECK_OUTPUT
heads, d_head = target.cfg.n_kv_heads, target.cfg.d_model // target.cfg.n_heads
print(f"{'tokens':>7} {'float32 bytes':>14} {'bfloat16 bytes':>15} {'int8 + scales':>14} {'int8 / bfloat16':>16}")
for T in (16, 256, 4096):
    bf16 = 2 * T * heads * d_head * 2
    int8 = kvquant.int8_cache_bytes(T, heads, d_head)
    print(f"{T:>7} {2 * bf16:>14} {bf16:>15} {int8:>14} {int8 / bf16:>16.3f}")

# %% [markdown]
# The round trip stays within half a scale, as it must. What it does to the model is your run's
# number above: the difference of the two losses, and the argmax changes, are the price of the int8
# cache on this model.
# The bytes, per layer of the target's key/value heads: the scales
# are a fixed cost, so for short sequences int8 saves less than half of bfloat16's bytes, and
# for long ones it tends to half.


# %% [markdown]
# ## 2. What is still missing
#
# What this chapter leaves open, and which chapter takes it up.
