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
# # Chapter 3: Scaled dot-product attention
#
# *Attention, from Seq2Seq to Transformers*: queries, keys and values; the scale
# $1/\sqrt{d_k}$; padding and causal masks; self- and cross-attention; why attention alone
# ignores word order; and what attention costs.
#
# **What you will build**: the function `softmax(Q K^T / sqrt(d_k)) V` with a boolean mask,
# equal to PyTorch's fused `F.scaled_dot_product_attention`; a causal mask; a
# cross-attention call; a self-attention layer (an `nn.Module`) with its own projections,
# equal to PyTorch's `nn.MultiheadAttention` with the same weights, which you then train on
# the reversal task with and without position information; and the whole layer over a padded
# batch, from the lengths of its sentences to the output, with its errors for bad inputs. Later chapters import the
# reference versions from `course_utils`, so a learner stuck here can still go on.
#
# **Exercises** (graded by the test cells below each one; points follow difficulty):
# 1 `scaled_scores` (2 points), 2 `stable_softmax` (3), 3 `sdp_attention` (5),
# 4 `causal_mask` (2), 5 `cross_attention` (3), 6 `SelfAttention` (5), 7 `padded_self_attention`
# (5), and two written questions (2 + 2). The papers the chapter uses are listed, with links, at the end.
#
# **The outputs you see first.** Until you run a cell, the output under it is the course's stored
# run, the one this text calls "the stored run". Running the cell replaces it with the output
# of your own run, which can differ from the stored one wherever the text gives a range.

# %%
import math
import time

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.patches import Patch
from torch import nn

from course_utils import (
    attention,
    budget,
    checks,
    claims,
    cost,
    data,
    diagrams,
    multihead,
    plots,
    rnn,
    train,
)

train.set_seed(0)
GRADING = budget.grading()   # True while nbgrader runs the notebook: experiments shrink


# %% [markdown]
# ## 1. What chapter 2 left open
#
# In chapter 2 the decoder's GRU state $s_t$ looked at every encoder state $h_j$, scored it
# ($s_t^\top h_j$ for the dot score of Luong et al. 2015; Bahdanau et al. 2015 used a small
# network instead), turned the scores into weights with a softmax and
# averaged the $h_j$ with those weights. Attention removed the bottleneck of a single
# context vector, but it still rode on recurrent networks:
#
# * the encoder states $h_1, \dots, h_n$ were computed one after the other, so $n$ steps
#   happen in sequence and position 1 reaches position $n$ only through $n-1$ updates;
# * the same vector $h_j$ served twice: once to be *compared* with the query, once as the
#   *content* that is averaged;
# * attention only connected the decoder to the encoder; inside each sequence, words still
#   talked to each other through the recurrence.
#
# This chapter makes attention the whole computation, as the Transformer does (Vaswani et
# al. 2017, "Attention is all you need"). Every position of a sequence asks a
# question (a **query**), every position advertises what it holds (a **key**) and offers
# its content (a **value**); all positions are handled at once, with two matrix products.

# %% [markdown]
# ## 2. Queries, keys and values
#
# Take a sequence of $n$ vectors stacked as the rows of $X \in \mathbb{R}^{n \times d}$
# (token embeddings, say). Three learned matrices project it three ways:
#
# $$Q = X W_Q,\qquad K = X W_K,\qquad V = X W_V,\qquad
#   W_Q, W_K \in \mathbb{R}^{d\times d_k},\; W_V \in \mathbb{R}^{d\times d_v}.$$
#
# Row $i$ of $Q$ is what position $i$ is looking for; row $j$ of $K$ is what position $j$
# can be found by; row $j$ of $V$ is what position $j$ hands over when it is found. The
# attention output is
#
# $$\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\Big(\frac{Q K^\top}{\sqrt{d_k}}\Big)\, V ,$$
#
# where the softmax runs along each row: row $i$ of the $n \times n$ weight matrix says
# how much of each value position $i$ takes, and sums to one (Vaswani et al. 2017, eq. 1).
#
# How wide are $d_k$ and $d_v$? One often reads that "usually $d_k = d_v = d$". That is true
# of a model with a single attention; real models split the width $d$ (called
# $d_\text{model}$) into $h$ heads of $d_k = d_v = d_\text{model}/h$ each: $512/8 = 64$ in
# the base Transformer of Vaswani et al. (2017), $4096/32 = 128$ in LLaMA-7B (Touvron et al.
# 2023). So a real head compares queries and keys of 64 or 128 numbers, not 512; chapter 4
# splits a layer into heads.
#
# * **Self-attention**: $Q$, $K$ and $V$ all come from the same $X$. Every token of a
#   sentence gathers information from every other token of the same sentence.
# * **Cross-attention**: the queries come from one sequence and the keys and values from
#   another: $Q = X_\text{dec} W_Q$, $K = X_\text{enc} W_K$, $V = X_\text{enc} W_V$. In a
#   translation model the decoder's positions (the target written so far) ask questions of
#   the encoder's positions (the source sentence). The two sequences may have different
#   lengths $L_q \ne L_k$; the weight matrix is then $L_q \times L_k$. This is exactly the
#   pattern of chapter 2, with the RNN states replaced by projections.
#
# The picture shows where $Q$, $K$ and $V$ come from in each case (orange: the queries and
# the sequence they come from; blue: the keys, the values and the sequence they come from; in
# self-attention one sequence, drawn in grey-brown, plays both roles):

# %%
_ = diagrams.draw_qkv_roles()
plt.show()

# %% [markdown]
# **Why three matrices and not one?** With a single projection ($Q = K = V = XW$) the score
# matrix $XW(XW)^\top$ is symmetric: token $i$ would be drawn to token $j$ exactly as much
# as $j$ to $i$, while a verb may look for its subject without the subject looking for the
# verb. And tokens tend to pick themselves: row $i$ scores itself $q_i\cdot q_i = \lVert q_i\rVert^2$
# and token $j$ at most $q_i\cdot q_j \le \lVert q_i\rVert\,\lVert q_j\rVert$ (Cauchy-Schwarz),
# which beats $\lVert q_i\rVert^2$ only if $\lVert q_j\rVert > \lVert q_i\rVert$. So another
# token can win row $i$ only when it is longer than $q_i$ (and points its way), and the token
# with the longest $q$ always wins its own row. Separate $W_Q$ and $W_K$ let "what I look
# for" differ from "what I am found by", and a separate $W_V$ lets "what I hand over" differ
# from both. The cell below checks both claims on random numbers.

# %%
# NBVAL_CHECK_OUTPUT
X_demo = torch.randn(6, 8)
W_shared = torch.randn(8, 4)
S_shared = (X_demo @ W_shared) @ (X_demo @ W_shared).T
W_Q_demo, W_K_demo = torch.randn(8, 4), torch.randn(8, 4)
S_two = (X_demo @ W_Q_demo) @ (X_demo @ W_K_demo).T
print("one matrix:   scores symmetric?", torch.allclose(S_shared, S_shared.T),
      "| rows whose largest score is the token itself:", int((S_shared.argmax(1) == torch.arange(6)).sum()), "of 6")
print("W_Q and W_K:  scores symmetric?", torch.allclose(S_two, S_two.T),
      "| rows whose largest score is the token itself:", int((S_two.argmax(1) == torch.arange(6)).sum()), "of 6")
norms = (X_demo @ W_shared).norm(dim=1)
winners = S_shared.argmax(1)
for i in range(6):
    if winners[i] != i:
        print(f"one matrix, row {i} is won by token {int(winners[i])}: |q_{int(winners[i])}| = "
              f"{norms[winners[i]]:.2f} > |q_{i}| = {norms[i]:.2f}")
assert all(norms[winners[i]] > norms[i] for i in range(6) if winners[i] != i), "a key that wins another's row must be longer (Cauchy-Schwarz)"
assert winners[norms.argmax()] == norms.argmax(), 'the longest vector must win its own row'

# %% [markdown]
# ## 3. A worked example you can check by hand
#
# A tiny example, small enough to work through by hand: two tokens with
# $d = 4$, and projections to $d_k = d_v = 2$:
#
# $$X = \begin{bmatrix}1&2&3&4\\4&3&2&1\end{bmatrix},\quad
#   W_Q = W_V = \begin{bmatrix}1&0\\0&1\\0&0\\0&0\end{bmatrix},\quad
#   W_K = \begin{bmatrix}0&1\\1&0\\0&0\\0&0\end{bmatrix}.$$
#
# $W_Q$ and $W_V$ keep the first two coordinates; $W_K$ keeps them and swaps them. The cell
# below does every step in exact (float64) arithmetic.

# %%
# NBVAL_CHECK_OUTPUT
X = torch.tensor([[1., 2, 3, 4], [4, 3, 2, 1]], dtype=torch.float64)
W_Q = torch.tensor([[1., 0], [0, 1], [0, 0], [0, 0]], dtype=torch.float64)
W_K = torch.tensor([[0., 1], [1, 0], [0, 0], [0, 0]], dtype=torch.float64)
W_V = W_Q.clone()
d_k = W_K.shape[1]


def show(name, t, digits=4):
    rows = ["[" + ", ".join(f"{x:.{digits}f}" for x in row) + "]" for row in t.tolist()]
    print(f"{name:<28} [{', '.join(rows)}]")


Q, K, V = X @ W_Q, X @ W_K, X @ W_V
scores = Q @ K.T
scaled = scores / math.sqrt(d_k)
weights = torch.exp(scaled) / torch.exp(scaled).sum(dim=1, keepdim=True)   # row-wise softmax
output = weights @ V
show("Q = X W_Q", Q, 0)
show("K = X W_K", K, 0)
show("V = X W_V", V, 0)
show("Q K^T", scores, 0)
show("Q K^T / sqrt(2)", scaled, 3)
show("weights = softmax(rows)", weights, 6)
show("output = weights V", output, 4)

# %% [markdown]
# Done by hand, this example is easy to get wrong, and a common wrong version of it has
# $QK^\top$ and the scaled scores right but the softmax's first row as $[0.016, 0.984]$, and so
# the output's first row as $[3.952, 2.984]$. The exact values
# are <!-- q:out#weights = softmax(rows) -->$[0.007035, 0.992965]$<!-- /q -->
# and <!-- q:out#output = weights V -->$[3.979, 2.993]$<!-- /q -->. (That version's second rows, $[0.000, 1.000]$
# and $[4.000, 3.000]$, are right to three decimals: exactly they
# are <!-- q:out#weights = softmax(rows) -->$[0.000102, 0.999898]$<!-- /q -->
# and <!-- q:out#output = weights V -->$[3.9997, 2.9999]$<!-- /q -->.) Where does the wrong version go wrong? Two facts
# find the step:
#
# * a softmax over two entries depends only on their difference:
#   $\operatorname{softmax}(a, b)_1 = 1/(1 + e^{\,b-a})$. Row 1's scaled scores differ by
#   $7/\sqrt 2 = 4.950$, so the first weight is $1/(1+e^{4.950}) = 0.00704$; a first
#   weight of $0.016$ would need a difference of $\ln(0.984/0.016) = 4.12$;
# * the wrong output *does* follow from the wrong weights: $0.016\,[1, 2] + 0.984\,[4, 3] = [3.952, 2.984]$.
#
# So the last step is right and the mistake is in the softmax alone; it then propagates to
# the output (and to the multi-head version of the same example, which repeats these numbers:
# chapter 4). The next cell checks both facts.

# %%
# NBVAL_CHECK_OUTPUT
wrong_weights = torch.tensor([[0.016, 0.984], [0.000, 1.000]], dtype=torch.float64)
show("wrong weights @ V", wrong_weights @ V, 3)
print(f"score difference in row 1:      {(scaled[0, 1] - scaled[0, 0]).item():.3f}")
print(f"difference 0.016 would need:    {math.log(0.984 / 0.016):.3f}")
print(f"1 / (1 + e^4.950) = {1 / (1 + math.exp((scaled[0, 1] - scaled[0, 0]).item())):.6f}")
assert torch.allclose(weights[0], torch.tensor([0.00703, 0.99297], dtype=torch.float64), atol=1e-5), 'worked example: first row of weights must be [0.00703, 0.99297]'
assert torch.allclose(output[0], torch.tensor([3.979, 2.993], dtype=torch.float64), atol=5e-4), 'worked example: first output row must be [3.979, 2.993]'


# %% [markdown]
# Notice also how *peaked* the weights are: with only two numbers per token, the scores
# already differ by 5 and one key takes <!-- q:out#weights = softmax(rows) -->99.3 %<!-- /q --> of the weight. Section 5 shows what happens
# when $d_k$ grows to 64, the width of a head in real models (128 in LLaMA), and wider still, and why the
# $\sqrt{d_k}$ is there.
#
# ## 4. Exercises: scores and a numerically stable softmax
#
# The hidden tests of this chapter check that an answer does not simply call a ready-made
# version (`course_utils.attention`, `F.scaled_dot_product_attention`, `torch.softmax` where
# the exercise is the softmax). They use `checks.expect_not_calling`, which lists the
# functions of a given list that your function's code names.
#
# Rules that hold for every exercise of this chapter (the hidden tests check them): inputs are
# float32 or float64 tensors, and what you return has the inputs' dtype (no silent switch to
# float64 or float32; float32 results are compared with a tolerance of about $10^{-5}$, so
# any sensible order of operations is fine); and your functions must not change their inputs
# in place (no `q /= ...` or `x -= ...` on the caller's tensors).

# %% [markdown]
# ### Exercise 1: scaled scores (2 points: 1 visible + 1 hidden)
#
# Write `scaled_scores(q, k)` returning $q k^\top / \sqrt{d_k}$ for queries of shape
# `(..., L_q, d_k)` and keys of shape `(..., L_k, d_k)`; the result has shape
# `(..., L_q, L_k)`. The leading dimensions `...` may be empty, `(batch,)` or
# `(batch, heads)`, so transpose only the last two axes (`k.transpose(-2, -1)`, not `k.T`).
# `L_q`, `L_k` and `d_k` can all differ; the scores have the dtype of `q` and `k` (float32 or
# float64).
#
# <!-- domain: ex1_scores scaled_scores -->
#
# The tests try every kind of input listed here:
# - `q`: float32; float64; a batch of more than 1.
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex1_scores", "locked": false, "schema_version": 3, "solution": true}
def scaled_scores(q, k):
    """Scaled dot-product scores.

    Args:
        q: ``(..., L_q, d_k)`` queries; k: ``(..., L_k, d_k)`` keys.
    Returns:
        ``(..., L_q, L_k)``: entry ``[..., i, j]`` is ``q_i . k_j / sqrt(d_k)``.
    """
    ### BEGIN SOLUTION
    d_k = q.shape[-1]
    return q @ k.transpose(-2, -1) / math.sqrt(d_k)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1_scores-visible", "locked": true, "points": 1, "schema_version": 3, "solution": false} tags=["raises-exception"]
_g = torch.Generator().manual_seed(1)     # test cells draw from their own generator
_Qw = torch.tensor([[1., 2], [4, 3]])
_Kw = torch.tensor([[2., 1], [3, 4]])


def _check_scale():
    got = checks.call(scaled_scores, torch.ones(1, 9), torch.ones(1, 9))
    if not torch.allclose(got, torch.tensor([[3.0]])):
        raise checks.CheckFailed(f"q = k = nine ones gives {got.flatten().tolist()}, expected [3.0]: "
                                 "divide the dot product (9) by sqrt(d_k) = 3")


def _check_batched():
    try:
        got = checks.call(scaled_scores, torch.randn(2, 3, 4, generator=_g), torch.randn(2, 5, 4, generator=_g))
    except RuntimeError as err:
        raise checks.CheckFailed(f"batched inputs (2, 3, 4) and (2, 5, 4) raise '{err}': transpose only "
                                 "the last two axes of k, k.transpose(-2, -1)") from None
    checks.expect_shape(got, (2, 3, 5), "scores of batched inputs")


checks.run_checks("scaled_scores", [
    ("the worked example's shape", lambda: checks.expect_shape(checks.call(scaled_scores, _Qw, _Kw), (2, 2), "scores")),
    ("the worked example's values", lambda: checks.expect_close(
        checks.call(scaled_scores, _Qw, _Kw), torch.tensor([[4., 11], [11, 24]]) / math.sqrt(2), "scores")),
    ("divided by sqrt(d_k)", _check_scale),
    ("L_q = 3 queries, L_k = 5 keys", lambda: checks.expect_shape(
        checks.call(scaled_scores, torch.randn(3, 4, generator=_g), torch.randn(5, 4, generator=_g)), (3, 5), "scores")),
    ("a batch of 2: (2, 3, 4) and (2, 5, 4) give (2, 3, 5)", _check_batched),
])

# %% nbgrader={"grade": true, "grade_id": "ex1_scores-hidden", "locked": true, "points": 1, "schema_version": 3, "solution": false}
# Hidden tests: a seeded grid over the documented domain (no leading dimension, (batch,), (batch, heads);
# L_q, L_k and d_k all different; float32 and float64); inputs unchanged; no ready-made function.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(101)
_cases = []
for _lead in [(), (3,), (2, 3)]:
    for _dtype in (torch.float32, torch.float64):
        for _Lq, _Lk, _dk in [(4, 6, 8), (5, 2, 3), (1, 1, 1), (2, 7, 16)]:
            _q = torch.randn(*_lead, _Lq, _dk, generator=_g, dtype=_dtype)
            _k = torch.randn(*_lead, _Lk, _dk, generator=_g, dtype=_dtype)
            _cases.append((f"{_lead} leading, L_q={_Lq}, L_k={_Lk}, d_k={_dk}, {_dtype}", _q, _k))
### BEGIN EXPECTED
_want = [torch.einsum("...id,...jd->...ij", q.double(), k.double()) / math.sqrt(q.shape[-1]) for _, q, k in _cases]
### END EXPECTED
_inputs = [(q.clone(), k.clone()) for _, q, k in _cases]
with checks.forbid(attention.attention_scores, attention.scaled_dot_product_attention,
                   (F, "scaled_dot_product_attention")):
    _got = [checks.call(scaled_scores, q, k) for _, q, k in _cases]
checks.run_checks("scaled_scores (hidden)", [
    (name, lambda i=i, name=name: checks.expect_close(_got[i], _want[i], f"scores ({name})"))
    for i, (name, *_) in enumerate(_cases)
] + [
    (f"dtype ({name})", lambda i=i, name=name: checks.expect_dtype(_got[i], _cases[i][1].dtype, f"scores ({name})"))
    for i, (name, *_) in enumerate(_cases)
] + [
    ("q and k unchanged", lambda: [checks.expect_equal(t, t0, "an input after the call") for (_, q, k), (q0, k0)
                                   in zip(_cases, _inputs) for t, t0 in ((q, q0), (k, k0))]),
    ("no ready-made function", lambda: checks.expect_not_calling(
        scaled_scores, attention.attention_scores, attention.scaled_dot_product_attention, F.scaled_dot_product_attention)),
])
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 2: a numerically stable softmax (3 points: 1 + 2)
#
# $\operatorname{softmax}(x)_j = e^{x_j} / \sum_m e^{x_m}$ taken literally overflows: in
# float32, $e^{89}$ is already infinite, and $\infty/\infty$ is NaN. Scores of a few hundred
# are not rare (section 5 shows unscaled scores growing with $d_k$). The fix uses the fact
# that softmax does not change when the same number is subtracted from every entry:
# $\operatorname{softmax}(x) = \operatorname{softmax}(x - \max_m x_m)$. After the shift the
# largest exponent is $e^0 = 1$, so nothing overflows and the sum is at least 1.

# %%
x_big = torch.tensor([1000., 1001., 1002.])
print("the literal formula on [1000, 1001, 1002]:", torch.exp(x_big) / torch.exp(x_big).sum())
x_small = torch.tensor([1., 2., 3.])  # PyTorch's softmax, to see that a shift changes nothing
print("torch.softmax of [1, 2, 3]:      ", torch.softmax(x_small, dim=0))
print("torch.softmax of [1, 2, 3] - 100:", torch.softmax(x_small - 100, dim=0))


# %% [markdown]
# Write `stable_softmax(x, dim=-1)` with the shift, using `torch.exp`, `max` and `sum`
# (not `torch.softmax`, `F.softmax` or `log_softmax`; `torch.logsumexp` is allowed). `x` is
# a float32 or float64 tensor of any shape, `dim` any of its axes (negative or not); the
# result has `x`'s shape and dtype, and `x` itself is left unchanged. Scores may be in the
# hundreds (float32) or thousands (float64), positive or negative, and differ by as much from
# one slice to the next: shift each slice along `dim` by its own maximum. Entries equal to
# $-\infty$ must get weight 0 (they will be how masks work); a slice made only of $-\infty$
# has no softmax and is not tested. Tip: `x.amax(dim=dim, keepdim=True)` keeps the reduced
# axis so that the subtraction broadcasts.
#
# <!-- domain: ex2_softmax stable_softmax -->
#
# The tests try every kind of input listed here:
# - `x`: float32; float64; scores in the hundreds or beyond (exp overflows in float32); with -inf entries.
# - `dim`: -1; another negative axis; an axis counted from 0.
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex2_softmax", "locked": false, "schema_version": 3, "solution": true}
def stable_softmax(x, dim=-1):
    """Softmax of ``x`` along ``dim``, computed without overflow.

    Args:
        x: a floating-point tensor of any shape; ``-inf`` entries get weight 0.
        dim: the axis along which the result sums to one.
    Returns:
        A tensor of ``x``'s shape and dtype.
    """
    ### BEGIN SOLUTION
    shifted = x - x.amax(dim=dim, keepdim=True)
    e = torch.exp(shifted)
    return e / e.sum(dim=dim, keepdim=True)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex2_softmax-visible", "locked": true, "points": 1, "schema_version": 3, "solution": false} tags=["raises-exception"]
_g = torch.Generator().manual_seed(2)
_x = torch.tensor([[1., 2, 3], [0, 0, 0]])
_want_x = torch.tensor([[0.09003057, 0.24472847, 0.66524096], [1 / 3, 1 / 3, 1 / 3]])


def _no_nan_for_large_scores():
    got = checks.call(stable_softmax, torch.tensor([1000., 1001., 1002.]))
    if torch.isnan(got).any() or torch.isinf(got).any():
        raise checks.CheckFailed(f"got {got.tolist()}: exp(1000) overflows, subtract the maximum first")
    checks.expect_close(got, _want_x[0], "softmax([1000, 1001, 1002])")


checks.run_checks("stable_softmax", [
    ("values on small scores", lambda: checks.expect_close(checks.call(stable_softmax, _x), _want_x, "softmax")),
    ("rows sum to one", lambda: checks.expect_close(checks.call(stable_softmax, torch.randn(4, 7, generator=_g)).sum(-1),
                                                    torch.ones(4), "row sums")),
    ("large scores do not overflow", _no_nan_for_large_scores),
    ("-inf gets weight 0", lambda: checks.expect_close(
        checks.call(stable_softmax, torch.tensor([0., float("-inf"), 0.])), torch.tensor([0.5, 0, 0.5]),
        "softmax([0, -inf, 0])")),
    ("along dim=0: each column sums to one", lambda: checks.expect_close(
        checks.call(stable_softmax, _x.T, dim=0), _want_x.T, "softmax of a (3, 2) tensor along dim=0")),
    ("along dim=1 of a 3-D tensor", lambda: checks.expect_close(
        checks.call(stable_softmax, torch.stack([_x.T, _x.T + 7]), 1), torch.stack([_want_x.T, _want_x.T]),
        "softmax along dim=1 of a (2, 3, 2) tensor")),
])

# %% nbgrader={"grade": true, "grade_id": "ex2_softmax-hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Hidden tests: a seeded grid of shapes (1-D to 3-D, square ones included), every axis (positive and
# negative), float32 and float64, small, large and very negative scores, -inf entries; x unchanged;
# no torch.softmax and friends.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(102)
_cases = []
for _n, _shape in enumerate([(7,), (4, 7), (5, 5), (2, 3, 4)]):
    for _dim in [*range(len(_shape)), *range(-len(_shape), 0)]:
        for _dtype in (torch.float32, torch.float64):
            _scale = (1.0, 30.0, 300.0)[len(_cases) % 3]
            _x = torch.randn(*_shape, generator=_g, dtype=_dtype) * _scale
            _at = [1 if a == _dim % len(_shape) else s for a, s in enumerate(_shape)]
            _far = 2000 if _dtype == torch.float64 else 300                       # slices far apart
            _x = _x + torch.randn(*_at, generator=_g, dtype=_dtype) * _far
            if len(_cases) % 2:                                   # -inf entries, never a whole slice of them
                _drop = torch.rand(*_shape, generator=_g) < 0.3
                _drop.narrow(_dim, 0, 1).fill_(False)
                _x = _x.masked_fill(_drop, float("-inf"))
            _cases.append((f"shape {_shape}, dim={_dim}, {_dtype}", _x, _dim))
_cases.append(("very negative scores", torch.tensor([[-1000., -1001.], [-5000., -5000.]], dtype=torch.float64), -1))
_cases.append(("large scores, rows far apart", torch.tensor([[1000., 1001., 1002.], [-1000., -1001., -1003.],
                                                              [0., float("-inf"), 88.]]), -1))
_inputs = [x.clone() for _, x, _ in _cases]
_x3 = torch.randn(2, 3, 4, generator=_g, dtype=torch.float64) * 30
### BEGIN EXPECTED
_want = [torch.softmax(x.double(), dim) for _, x, dim in _cases]
_want_default = torch.softmax(_x3, -1)
### END EXPECTED
with checks.forbid((torch, "softmax"), (F, "softmax"), (torch, "log_softmax"), (F, "log_softmax"),
                   attention.masked_softmax):
    _got = [checks.call(stable_softmax, x, dim=dim) for _, x, dim in _cases]
    _got_default = checks.call(stable_softmax, _x3)
checks.run_checks("stable_softmax (hidden)", [
    (name, lambda i=i, name=name: checks.expect_close(_got[i], _want[i], f"softmax ({name})"))
    for i, (name, *_) in enumerate(_cases)
] + [
    (f"dtype ({name})", lambda i=i, name=name: checks.expect_dtype(_got[i], _cases[i][1].dtype, f"softmax ({name})"))
    for i, (name, *_) in enumerate(_cases)
] + [
    ("dim defaults to -1", lambda: checks.expect_close(_got_default, _want_default, "softmax(x)")),
    ("x unchanged", lambda: [checks.expect_equal(x, x0, "x after the call") for (_, x, _), x0 in zip(_cases, _inputs)]),
    ("no ready-made softmax", lambda: checks.expect_not_calling(
        stable_softmax, torch.softmax, F.softmax, torch.log_softmax, F.log_softmax, nn.Softmax,
        attention.masked_softmax)),
])
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Why divide by $\sqrt{d_k}$?
#
# Suppose the entries of a query $q$ and a key $k$ are independent, with mean 0 and
# variance 1 (unit-variance entries). Then
# $q\cdot k = \sum_{m=1}^{d_k} q_m k_m$ is a sum of $d_k$ independent terms, each of mean 0
# and variance $\mathbb{E}[q_m^2]\,\mathbb{E}[k_m^2] = 1$, so
#
# $$\operatorname{Var}(q\cdot k) = d_k, \qquad \operatorname{std}(q\cdot k) = \sqrt{d_k}.$$
#
# Dividing by $\sqrt{d_k}$ brings the standard deviation back to 1 whatever the width of the
# heads (Vaswani et al. 2017, footnote 4, give this argument). The cell below measures it on
# 20 000 random pairs per $d_k$. Unit variance is an assumption, not what every network
# starts from: a default `nn.Linear` applied to unit-variance inputs gives entries of
# variance about 1/3 (the cell's last line), and then $\operatorname{Var}(q\cdot k) = d_k/9$.
# The constant changes; the growth in proportion to $d_k$, which the scale removes, does not.

# %%
# NBVAL_CHECK_OUTPUT
dks = [1, 4, 16, 64, 256, 1024]
n_pairs = 20_000
stds = {"q.k": [], "q.k / sqrt(d_k)": [], "q.k / d_k": []}
print(" d_k   var(q.k)   std(q.k)   std(q.k/sqrt(d_k))   std(q.k/d_k)")
for d in dks:   # float64, so that the printed digits do not depend on the summation order
    dots = (torch.randn(n_pairs, d, dtype=torch.float64) * torch.randn(n_pairs, d, dtype=torch.float64)).sum(dim=1)
    var = dots.var().item()
    stds["q.k"].append(dots.std().item())
    stds["q.k / sqrt(d_k)"].append((dots / math.sqrt(d)).std().item())
    stds["q.k / d_k"].append((dots / d).std().item())
    claims.check(f"ch03: Var(q.k) = d_k within sampling error (|var/d_k - 1| at d_k={d})", abs(var / d - 1), below=0.1)
    print(f"{d:4d}   {var:8.1f}   {stds['q.k'][-1]:8.2f}   {stds['q.k / sqrt(d_k)'][-1]:18.2f}   "
          f"{stds['q.k / d_k'][-1]:12.3f}")
proj = nn.Linear(512, 64, dtype=torch.float64)                   # PyTorch's default initialisation
with torch.no_grad():
    entry_var = proj(torch.randn(n_pairs, 512, dtype=torch.float64)).var().item()
print(f"variance of the entries of a default nn.Linear(512, 64) on unit-variance inputs: {entry_var:.2f}")
claims.check("ch03: a default nn.Linear(512, 64) gives entries of variance 1/3 (|var - 1/3|)",
             abs(entry_var - 1 / 3), below=0.03)

# %% [markdown]
# Why does the size of the scores matter? The softmax is not scale-free: multiplying the
# scores by a large factor pushes it towards a one-hot vector (the *argmax*). Its Jacobian
# is $\partial p_i / \partial s_j = p_i(\delta_{ij} - p_j)$: when one weight $p_w$ is close
# to 1 and the others close to 0, every entry is close to 0 except those that pair the
# winning key $w$ with keys whose weight is not yet negligible. What does that do to learning?
# The next cell draws one query and 16 keys, 500 times per $d_k$, backpropagates a random
# gradient arriving at the weights, and measures, with and without the scale:
#
# * the largest weight of each row;
# * the norm of the gradient reaching the scores $s$, and the gradient reaching the query $q$;
# * which keys the gradient reaches: the share of the total key gradient
#   $\sum_j \lVert\partial L/\partial k_j\rVert$ that goes to the 14 keys *other* than the two
#   with the largest weights.

# %%
trials, n_keys = 500, 16
sat = {f"{what}, {label}": [] for what in ("max weight", "grad of scores", "grad of q", "others' share", "dead rows")
       for label in ("unscaled", "scaled")}
for d in dks:
    q0, k0 = torch.randn(trials, 1, d), torch.randn(trials, n_keys, d)
    upstream = torch.randn(trials, 1, n_keys)                      # a random gradient arriving at the weights
    for label, scale in (("unscaled", 1.0), ("scaled", 1 / math.sqrt(d))):
        q, k = q0.clone().requires_grad_(), k0.clone().requires_grad_()
        s = (q @ k.transpose(-2, -1)) * scale                      # (trials, 1, n_keys)
        s.retain_grad()
        p = torch.softmax(s, dim=-1)
        (p * upstream).sum().backward()
        key_grad = k.grad.norm(dim=-1)                             # (trials, n_keys)
        by_weight = p[:, 0].argsort(dim=-1, descending=True)       # keys from the largest weight down
        others = key_grad.gather(1, by_weight[:, 2:]).sum(1) / key_grad.sum(1).clamp_min(1e-30)
        sat[f"max weight, {label}"].append(p.max(dim=-1).values.mean().item())
        sat[f"grad of scores, {label}"].append(s.grad.norm(dim=-1).mean().item())
        sat[f"grad of q, {label}"].append(q.grad.norm(dim=-1).mean().item())
        sat[f"others' share, {label}"].append(others.mean().item())
        sat[f"dead rows, {label}"].append((key_grad.sum(1) == 0).float().mean().item())   # exactly one-hot

fig, axes = plt.subplots(1, 4, figsize=(17, 3.6))
for label, ys in stds.items():
    axes[0].loglog(dks, ys, marker="o", label=label)
axes[0].set_ylabel("standard deviation")
axes[0].set_title("spread of the scores")
for label in ("unscaled", "scaled"):
    axes[1].semilogx(dks, sat[f"max weight, {label}"], marker="o", label=label)
    axes[2].loglog(dks, sat[f"grad of scores, {label}"], marker="o", label=f"scores s, {label}")
    axes[2].loglog(dks, sat[f"grad of q, {label}"], marker="s", ls="--", label=f"query q, {label}")
    axes[3].semilogx(dks, sat[f"others' share, {label}"], marker="o", label=label)
axes[1].axhline(1 / n_keys, color="0.6", ls=":", label="uniform (1/16)")
axes[1].set_ylabel("mean largest weight")
axes[1].set_title("softmax saturates without the scale")
axes[2].set_ylabel("mean gradient norm")
axes[2].set_title("gradient reaching s and q")
axes[3].set_ylabel("share of the key gradient")
axes[3].set_title("reaching the 14 keys not in the top 2")
axes[3].set_ylim(0, 1)
for ax in axes:
    ax.set_xlabel("$d_k$")
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
print(f"{'':<27}" + "".join(f"{d:>8}" for d in dks))
for label, ys in sat.items():
    print(f"{label:<27}" + "".join(f"{y:8.3f}" for y in ys))
print(f"at d_k = 1024 the gradient of the scores is {sat['grad of scores, scaled'][-1] / sat['grad of scores, unscaled'][-1]:.1f}"
      " times larger with the scale than without")
claims.check("ch03: unscaled scores saturate the softmax at d_k=1024 (mean largest weight)",
             sat["max weight, unscaled"][-1], above=0.9)
claims.check("ch03: scaled scores do not saturate at d_k=1024 (mean largest weight)",
             sat["max weight, scaled"][-1], below=0.4)
claims.check("ch03: less gradient reaches unscaled scores (scaled / unscaled gradient norm)",
             sat["grad of scores, scaled"][-1] / sat["grad of scores, unscaled"][-1], above=3)
claims.check("ch03: but more reaches q without the scale (unscaled / scaled gradient norm)",
             sat["grad of q, unscaled"][-1] / sat["grad of q, scaled"][-1], above=2.5)
claims.check("ch03: unscaled, the keys outside the top 2 get almost no gradient (share)",
             sat["others' share, unscaled"][-1], below=0.1)
claims.check("ch03: scaled, the keys outside the top 2 get a real share of the gradient (share)",
             sat["others' share, scaled"][-1], above=0.4)


# %% [markdown]
# Read the table first at $d_k = 64$, the width of a head in real models (512 / 8 heads in the
# original Transformer; 128 in LLaMA). Without the scale the largest of 16 weights already
# averages <!-- q:out#max weight, unscaled -->0.85<!-- /q --> in the stored run (with
# it <!-- q:out#max weight, scaled -->0.25<!-- /q -->), and the 14 keys outside the top two
# get <!-- q:out#others' share, unscaled -->17 %<!-- /q --> of the key gradient
# against <!-- q:out#others' share, scaled -->68 %<!-- /q -->: at a real head width an unscaled softmax
# is well on its way to saturation. The extreme $d_k = 1024$ shows the trend in full: without
# the scale the largest weight averages <!-- q:out#max weight, unscaled -->0.97<!-- /q -->, and
# the gradient reaching the *scores* is several times smaller than with the scale
# (<!-- q:out#grad of scores, unscaled -->0.033<!-- /q -->
# against <!-- q:out#grad of scores, scaled -->0.281<!-- /q --> in the stored
# run, <!-- q:out#at d_k = 1024 the gradient of the scores -->8.4<!-- /q --> times, the ratio printed
# under the table; <!-- q:tools/claim_spread.md#ch03: less gradient reaches unscaled scores -->4.7 to 8.4<!-- /q --> times over
# seeds and CPUs, 500 random draws each, `tools/claim_spread.md`). But saturation does **not** mean that
# no gradient reaches the queries and keys: the gradient reaching $q$ is *larger* without the
# scale (<!-- q:out#grad of q, unscaled -->1.07<!-- /q -->
# against <!-- q:out#grad of q, scaled -->0.28<!-- /q -->), because an unscaled score $s_j = q\cdot k_j$ hands its
# gradient to $q$ multiplied by $k_j$, whose length is about $\sqrt{d_k} = 32$, and the scale
# divides exactly that by 32.
#
# What saturation does is *concentrate* the gradient. With one weight near 1 and the others
# near 0, every entry $p_i(\delta_{ij} - p_j)$ of the Jacobian is small except those that
# pair the winner with the few keys whose weights are not yet negligible; and since the
# gradients of a softmax's scores sum to zero, what the winner's score receives its closest
# rivals receive with the opposite sign. At $d_k = 1024$ the 14 other keys
# get <!-- q:out#others' share, unscaled -->7 %<!-- /q --> of the key gradient
# without the scale, against <!-- q:out#others' share, scaled -->67 %<!-- /q --> with it,
# and <!-- q:out#dead rows, unscaled -->2 %<!-- /q --> of the rows are exactly one-hot
# in float32 and pass no gradient at all. A key that is not already winning gets almost no
# signal telling it to do better, so the random preferences of the initialisation are
# locked in. With the scale, the rows of the table marked "scaled" are flat from $d_k = 4$ on
# (the largest weight between <!-- q:out#max weight, scaled -->0.24 and 0.25<!-- /q -->, the
# others' share between <!-- q:out#others' share, scaled -->0.67 and 0.68<!-- /q -->); they
# differ at $d_k = 1$ (<!-- q:out#max weight, scaled -->0.209<!-- /q -->
# and <!-- q:out#others' share, scaled -->0.717<!-- /q -->), because a score of one term, the product of
# two Gaussian numbers, is not Gaussian itself: it has the same variance but heavier tails and more
# values near 0, while a sum of 4 or more such terms is already close to a Gaussian. The scale does not
# change what attention *can* express (the network could learn smaller $W_Q$, $W_K$); it
# makes the starting point and the spread of the gradient over the keys independent of the
# head width.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q1_scale-prompt", "locked": true, "schema_version": 3, "solution": false}
# **Question 1 (2 points).** Why is the scale $1/\sqrt{d_k}$ and not $1/d_k$? Use the table
# above in your answer: what would dividing by $d_k$ do to the scores, and to the attention
# weights, as $d_k$ grows? Write your answer in the cell below.

# %% [markdown] nbgrader={"grade": true, "grade_id": "q1_scale", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# The dot product of two random vectors with independent unit-variance entries is a sum of
# $d_k$ terms of variance 1, so its variance is $d_k$ and its standard deviation
# $\sqrt{d_k}$. Dividing by $\sqrt{d_k}$ is exactly what makes the standard deviation 1 for
# every $d_k$ (the column std(q.k/sqrt(d_k)) of the table). Dividing by $d_k$ over-corrects: the standard
# deviation becomes $1/\sqrt{d_k}$ (<!-- q:out#1024      995.3 -->0.03<!-- /q --> at $d_k = 1024$), so all scores of a row are
# nearly equal and the softmax is nearly uniform: attention cannot prefer any key at
# initialisation, every key gets a similar share of the gradient whatever it deserves, and
# the gradient with respect to $q$ and $k$ is also scaled down by $1/d_k$.
# Wider heads would then start ever closer to plain averaging. $1/\sqrt{d_k}$ keeps the
# softmax in its sensitive range, neither saturated (no scale) nor flat ($1/d_k$).
#
# **Rubric** (for the grader, 2 points):
#
# - **1 point** for the variance argument: a dot product of unit-variance entries has variance
#   equal to the head width, so dividing by its square root keeps the standard deviation at one
#   for every width (the table's column shows it).
# - **1 point** for what dividing by the width itself does: scores shrink with the width, the
#   softmax is nearly uniform and attention cannot prefer a key at the start (with the table's
#   value or the argument); saying only that the scores become too small gets half of this point.
# ### END SOLUTION

# %% [markdown]
# ## 6. Masks
#
# Often some keys must not be looked at:
#
# * **padding**: sequences of different lengths are padded to a common length in a batch;
#   the padding positions hold no information and must get zero weight;
# * **the future**: a decoder that predicts token $t+1$ from tokens $1..t$ is trained on
#   whole target sentences at once; position $t$ must not see positions after $t$, or it
#   would copy the answer.
#
# The course follows PyTorch's convention for `F.scaled_dot_product_attention`: a mask is a
# **boolean** tensor, broadcastable to the scores' shape `(..., L_q, L_k)`, that is **True
# where a query may attend** to a key. Masked scores are replaced by $-\infty$ before the
# softmax (`scores.masked_fill(~mask, float("-inf"))`): $e^{-\infty} = 0$, so those keys get
# weight exactly 0 and the other weights still sum to one.
#
# **Careful: this is the convention of `F.scaled_dot_product_attention` only.** PyTorch's
# `nn.MultiheadAttention` and `nn.Transformer` read a boolean mask the other way round: True
# means the position is *blocked*. A mask passed to them must be inverted (`~mask`);
# section 9 checks it on `nn.MultiheadAttention`.
#
# One case needs a decision: a query whose **every** key is masked. Its row is
# $\operatorname{softmax}(-\infty, \dots, -\infty) = 0/0 = \text{NaN}$, and a NaN spreads to
# everything it touches. PyTorch (2.13) returns a zero output for such a query, and so does
# `course_utils.attention`: the weights of that row are all zero. (Section 7 shows when it
# happens, and why the common habit of adding $-10^9$ instead is a poor substitute.)

# %% [markdown]
# ### Exercise 3: scaled dot-product attention with a mask (5 points: 2 + 3)
#
# Write `sdp_attention(q, k, v, mask=None)` returning `(output, weights)`:
#
# * `q`: `(..., L_q, d_k)`, `k`: `(..., L_k, d_k)`, `v`: `(..., L_k, d_v)`;
# * `mask`: `None` or a bool tensor broadcastable to `(..., L_q, L_k)`, True = may attend;
# * `weights = softmax(q k^T / sqrt(d_k))` along the keys, with masked keys at weight 0;
#   `output = weights @ v` of shape `(..., L_q, d_v)`;
# * a row whose every key is masked gets zero weights and a zero output (no NaN);
# * masked keys get weight exactly 0 whatever their scores, even when they score far above
#   the allowed keys; scores in the hundreds must not overflow;
# * `L_q`, `L_k`, `d_k` and `d_v` can all differ; the mask may be `(L_k,)`, `(L_q, L_k)`,
#   `(..., 1, L_k)` or the full `(..., L_q, L_k)`; both results have the dtype of `q`
#   (float32 or float64), and the hidden tests compare both, the output *and* the weights.
#
# Use tensor operations (`torch.softmax` is fine here, and so are your functions above);
# do not call `course_utils.attention` or `F.scaled_dot_product_attention`: the hidden
# tests compare your function with the latter.
#
# <!-- domain: ex3_attention sdp_attention -->
#
# The tests try every kind of input listed here:
# - `q`: float32; float64; a batch of more than 1.
# - `mask`: None; a bool tensor; a query whose every key is masked.
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex3_attention", "locked": false, "schema_version": 3, "solution": true}
def sdp_attention(q, k, v, mask=None):
    """Scaled dot-product attention.

    Args:
        q: ``(..., L_q, d_k)``; k: ``(..., L_k, d_k)``; v: ``(..., L_k, d_v)``.
        mask: ``None`` or bool, broadcastable to ``(..., L_q, L_k)``; True = may attend.
    Returns:
        ``(output (..., L_q, d_v), weights (..., L_q, L_k))``.
    """
    ### BEGIN SOLUTION
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        # a fully masked row is NaN (0/0): make it zero, as PyTorch does
        weights = torch.where(mask.any(dim=-1, keepdim=True), weights, torch.zeros_like(weights))
    return weights @ v, weights
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex3_attention-visible", "locked": true, "points": 2, "schema_version": 3, "solution": false} tags=["raises-exception"]
_p1 = 1 / (1 + math.exp(7 / math.sqrt(2)))      # softmax([4, 11] / sqrt 2)[0]
_p2 = 1 / (1 + math.exp(13 / math.sqrt(2)))     # softmax([11, 24] / sqrt 2)[0]
_Ww = torch.tensor([[_p1, 1 - _p1], [_p2, 1 - _p2]], dtype=torch.float64)
_Qd, _Kd = torch.tensor([[1., 2], [4, 3]], dtype=torch.float64), torch.tensor([[2., 1], [3, 4]], dtype=torch.float64)
_g = torch.Generator().manual_seed(3)
_q, _k, _v = torch.randn(2, 3, 4, generator=_g), torch.randn(2, 5, 4, generator=_g), torch.randn(2, 5, 6, generator=_g)
_pad = torch.tensor([[True] * 5, [True, True, True, False, False]])[:, None, :]     # (2, 1, 5)


def _masked_weights_zero():
    _, w = checks.call(sdp_attention, _q, _k, _v, _pad)
    checks.expect_shape(w, (2, 3, 5), "weights")
    if not (w[1, :, 3:] == 0).all():
        raise checks.CheckFailed("keys 3 and 4 of sequence 1 are masked (False) but get weight "
                                 f"{w[1, :, 3:].tolist()}: is the mask ignored, or inverted?")
    checks.expect_close(w.sum(-1), torch.ones(2, 3), "row sums of the masked weights")


def _masked_values_ignored():
    out, _ = checks.call(sdp_attention, _q, _k, _v, _pad)
    v2 = _v.clone()
    v2[1, 3:] = 1000.0
    out2, _ = checks.call(sdp_attention, _q, _k, v2, _pad)
    checks.expect_close(out2, out, "output after changing the values of masked keys")


def _fully_masked_row():
    mask = torch.tensor([True, False, True])[:, None]           # (L_q, 1): query 1 may see no key
    out, w = checks.call(sdp_attention, _q, _k, _v, mask)
    if torch.isnan(w).any() or torch.isnan(out).any():
        raise checks.CheckFailed("a fully masked row gives NaN: softmax(-inf, ..., -inf) = 0/0; "
                                 "set that row's weights to zero")
    checks.expect_close(w[:, 1], torch.zeros(2, 5), "weights of the fully masked query")
    checks.expect_close(out[:, 1], torch.zeros(2, 6), "output of the fully masked query")


checks.run_checks("sdp_attention", [
    ("the worked example's weights", lambda: checks.expect_close(
        checks.call(sdp_attention, _Qd, _Kd, _Qd)[1], _Ww, "weights", atol=1e-7)),
    ("the worked example's output", lambda: checks.expect_close(
        checks.call(sdp_attention, _Qd, _Kd, _Qd)[0], _Ww @ _Qd, "output", atol=1e-7)),
    ("batched shapes (2, 3, 6) and (2, 3, 5)", lambda: [checks.expect_shape(t, s, n) for t, s, n in zip(
        checks.call(sdp_attention, _q, _k, _v), [(2, 3, 6), (2, 3, 5)], ["output", "weights"])]),
    ("rows of the weights sum to one", lambda: checks.expect_close(
        checks.call(sdp_attention, _q, _k, _v)[1].sum(-1), torch.ones(2, 3), "row sums")),
    ("masked keys get weight 0", _masked_weights_zero),
    ("values of masked keys do not change the output", _masked_values_ignored),
    ("a fully masked row gives zeros, not NaN", _fully_masked_row),
])

# %% nbgrader={"grade": true, "grade_id": "ex3_attention-hidden", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# Hidden tests: outputs and weights against a float64 reference (equal to F.scaled_dot_product_attention)
# over a seeded grid: no leading dimension, (batch,), (batch, heads); L_q != L_k, d_k != d_v; float32 and
# float64; every kind of mask (None, (L_k,), (L_q, L_k), padding, causal, a full random one with fully
# masked rows); large scores; masked keys with far larger scores than the allowed ones; inputs unchanged;
# no ready-made attention.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(103)


def _mask(kind, lead, L_q, L_k):
    if kind == "none":
        return None
    if kind == "(L_k,) key mask":
        return torch.arange(L_k) < max(1, L_k - 2)
    if kind == "(L_q, L_k) random":
        return torch.rand(L_q, L_k, generator=_g) < 0.6
    if kind == "padding (lead..., 1, L_k)":
        lengths = torch.randint(1, L_k + 1, (*lead, 1, 1), generator=_g)
        return torch.arange(L_k) < lengths
    if kind == "bottom-right causal":
        return torch.ones(L_q, L_k).tril(L_k - L_q).bool()
    return torch.rand(*lead, L_q, L_k, generator=_g) < 0.4        # full shape, some rows fully masked


_kinds = ["none", "(L_k,) key mask", "(L_q, L_k) random", "padding (lead..., 1, L_k)", "bottom-right causal", "full random"]
_cases = []
for _lead in [(), (2,), (2, 3)]:
    for _dtype in (torch.float32, torch.float64):
        for _Lq, _Lk, _dk, _dv in [(4, 6, 8, 5), (1, 7, 3, 2), (5, 3, 4, 6), (3, 3, 16, 1)]:
            _kind = _kinds[len(_cases) % len(_kinds)]
            _q, _k, _v = (torch.randn(*_lead, L, d, generator=_g, dtype=_dtype)
                          for L, d in ((_Lq, _dk), (_Lk, _dk), (_Lk, _dv)))
            _cases.append((f"{_lead} leading, L_q={_Lq}, L_k={_Lk}, d_k={_dk}, d_v={_dv}, {_dtype}, mask: {_kind}",
                           _q, _k, _v, _mask(_kind, _lead, _Lq, _Lk)))
# scores of a few hundred (float32 overflows e^89): no NaN, no inf
_q, _k, _v = torch.randn(2, 4, 8, generator=_g) * 8, torch.randn(2, 6, 8, generator=_g) * 8, torch.randn(2, 6, 3, generator=_g)
_cases.append(("float32 scores of a few hundred, padding", _q, _k, _v, torch.tensor([[True] * 6, [True] * 3 + [False] * 3])[:, None, :]))
# the masked keys score ~150 above the allowed ones: their weight must still be exactly 0 and the others sum to one
_q = torch.randn(1, 4, generator=_g) + 0.1 * torch.randn(3, 4, generator=_g)          # three similar queries
_k = torch.cat([torch.randn(3, 4, generator=_g), 150 * _q[:1].expand(2, 4) / _q[0].norm()])
_cases.append(("masked keys with far larger scores", _q, _k, torch.randn(5, 2, generator=_g),
               torch.tensor([True, True, True, False, False])))
_inputs = [tuple(None if t is None else t.clone() for t in c[1:]) for c in _cases]
### BEGIN EXPECTED
def _ref_attention(q, k, v, mask):
    s = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(mask.logical_not(), -math.inf)
    w = torch.softmax(s, dim=-1).nan_to_num(0.0)          # a fully masked row: zero weights
    return w @ v.double(), w


_want = [_ref_attention(q, k, v, m) for _, q, k, v, m in _cases]
### END EXPECTED
with checks.forbid(attention.scaled_dot_product_attention, attention.masked_softmax, attention.attention_scores,
                   (F, "scaled_dot_product_attention")):
    _got = [checks.call(sdp_attention, q, k, v, m) for _, q, k, v, m in _cases]


def _same_inputs():
    for c, before in zip(_cases, _inputs):
        for t, t0 in zip(c[1:], before):
            if t is not None:
                checks.expect_equal(t, t0, "an input (q, k, v or mask) after the call")


checks.run_checks("sdp_attention (hidden)", [
    (f"output, {name}", lambda i=i, name=name: checks.expect_close(_got[i][0], _want[i][0], f"output ({name})"))
    for i, (name, *_) in enumerate(_cases)
] + [
    (f"weights, {name}", lambda i=i, name=name: checks.expect_close(_got[i][1], _want[i][1], f"weights ({name})"))
    for i, (name, *_) in enumerate(_cases)
] + [
    (f"dtypes, {name}", lambda i=i, name=name: [checks.expect_dtype(t, _cases[i][1].dtype, f"{n} ({name})")
                                                for t, n in zip(_got[i], ("output", "weights"))])
    for i, (name, *_) in enumerate(_cases)
] + [
    ("inputs unchanged", _same_inputs),
    ("no ready-made attention", lambda: checks.expect_not_calling(
        sdp_attention, F.scaled_dot_product_attention, attention.scaled_dot_product_attention,
        attention.masked_softmax, attention.attention_scores)),
])
### END HIDDEN TESTS

# %% [markdown]
# The rest of the chapter uses your `sdp_attention` if it agrees with the reference on a
# small masked case, and `course_utils.attention.scaled_dot_product_attention` otherwise.
# Here is the comparison with PyTorch's own fused function on a batch of 2 sequences and 4
# heads, with a padding mask:

# %%
def _probe_attention(fn):
    g = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 6, generator=g)
    mask = attention.padding_mask(torch.tensor([5, 2]), 5) & torch.tensor([True, True, False])[:, None]
    return fn(q, k, v, mask)           # (output, weights), compared with the reference's


attend = checks.learner_or_reference(sdp_attention, attention.scaled_dot_product_attention, _probe_attention,
                                     name="sdp_attention")

# %%
# NBVAL_CHECK_OUTPUT
q, k, v = torch.randn(2, 4, 7, 16), torch.randn(2, 4, 9, 16), torch.randn(2, 4, 9, 8)
key_mask = attention.key_padding_mask(torch.tensor([9, 5]), 9)        # (batch, 1, 1, L_k)
ours, w = attend(q, k, v, key_mask)
fused = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask)
print("shapes: output", tuple(ours.shape), "weights", tuple(w.shape), "mask", tuple(key_mask.shape))
print("max |ours - F.scaled_dot_product_attention| < 1e-6:", (ours - fused).abs().max().item() < 1e-6)


# %% [markdown]
# ## 7. Padding, causal and combined masks
#
# A **padding mask** depends only on the keys: for a batch with lengths $(5, 3)$ padded to
# 5, key $j$ of sequence $b$ is allowed when $j < \text{length}_b$. Its shape
# `(batch, 1, L_k)` broadcasts over the queries (`attention.padding_mask`).
#
# A **causal mask** lets query $i$ see keys $j \le i$: the lower triangle of an
# $L \times L$ matrix, the same for every sequence of the batch. When there are more keys
# than queries ($L_k > L_q$, as when a decoder that has already processed $L_k - L_q$ tokens
# handles $L_q$ new ones; the key-value cache of chapter 4 does this), the queries are the
# *last* $L_q$ positions, so query $i$ sees keys $j \le i + (L_k - L_q)$: the triangle is
# aligned to the bottom right. (Careful: `F.scaled_dot_product_attention(..., is_causal=True)`
# aligns it to the top left, $j \le i$, which differs when $L_q \ne L_k$;
# `torch.nn.attention.bias.causal_lower_right` is PyTorch's bottom-right version.)
#
# ### Exercise 4: the causal mask (2 points: 1 + 1)
#
# Write `causal_mask(L_q, L_k=None)` returning a **bool** tensor of shape `(L_q, L_k)`
# (`L_k` defaults to `L_q`) that is True where $j \le i + (L_k - L_q)$. `torch.tril` with
# its `diagonal` argument, or a comparison of two `torch.arange`s, does it in one line. It
# must be a `torch.bool` tensor for every `L_q, L_k >= 1`, also when there are more queries
# than keys ($L_q > L_k$: the first $L_q - L_k$ queries then see no key).
#
# <!-- domain: ex4_causal causal_mask -->
#
# The tests try every kind of input listed here:
# - `L_q`: 1; more than 1.
# - the arguments together: `L_k` left out (square); `L_k` > `L_q` (a cache).
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex4_causal", "locked": false, "schema_version": 3, "solution": true}
def causal_mask(L_q, L_k=None):
    """Boolean ``(L_q, L_k)`` mask, True where query i may attend to key j <= i + (L_k - L_q)."""
    ### BEGIN SOLUTION
    L_k = L_q if L_k is None else L_k
    i = torch.arange(L_q)[:, None]
    j = torch.arange(L_k)[None, :]
    return j <= i + (L_k - L_q)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex4_causal-visible", "locked": true, "points": 1, "schema_version": 3, "solution": false} tags=["raises-exception"]
_tri = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]).bool()


def _bool_mask():
    m = checks.call(causal_mask, 4)
    checks.expect_shape(m, (4, 4), "causal_mask(4)")
    checks.expect_dtype(m, torch.bool, "causal_mask(4) (True = may attend)")


checks.run_checks("causal_mask", [
    ("a bool (4, 4) tensor", _bool_mask),
    ("causal_mask(4) is the lower triangle with its diagonal", lambda: checks.expect_equal(
        checks.call(causal_mask, 4), _tri, "causal_mask(4)")),
    ("causal_mask(2, 5): the 2 queries are the last 2 of 5 positions", lambda: checks.expect_equal(
        checks.call(causal_mask, 2, 5), torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]).bool(), "causal_mask(2, 5)")),
])

# %% nbgrader={"grade": true, "grade_id": "ex4_causal-hidden", "locked": true, "points": 1, "schema_version": 3, "solution": false}
# Hidden tests: every (L_q, L_k) with 1 <= L_q, L_k <= 6 and L_k left out, more queries than keys, long
# ones, L_k by keyword; a bool tensor every time; no ready-made mask.
### BEGIN HIDDEN TESTS
import torch.nn.attention.bias as _bias

# Every size up to 6, then three larger ones drawn from the class's secret (the grader rewrites the literal
# seed): L_q < L_k, L_q > L_k, and a square one.
_size_draws = torch.Generator().manual_seed(31)
_short, _long, _square = (int(torch.randint(lo, hi, (), generator=_size_draws)) for lo, hi in ((7, 33), (33, 97), (33, 97)))
_sizes = [(a, b) for a in range(1, 7) for b in (None, *range(1, 7))] + [(_short, _long), (_long, _short), (_square, None)]
with checks.forbid(attention.causal_mask):
    _got = [checks.call(causal_mask, a) if b is None else checks.call(causal_mask, a, b) for a, b in _sizes]
    _got_kw = checks.call(causal_mask, 3, L_k=5)
### BEGIN EXPECTED
_want = [torch.ones(a, a if b is None else b).tril((a if b is None else b) - a).bool() for a, b in _sizes]
_want_kw = torch.ones(3, 5).tril(2).bool()
### END EXPECTED
checks.run_checks("causal_mask (hidden)", [
    (f"causal_mask{(a, b)}", lambda i=i, a=a, b=b: checks.expect_equal(_got[i], _want[i], f"causal_mask{(a, b)}"))
    for i, (a, b) in enumerate(_sizes)
] + [
    ("a bool tensor every time", lambda: [checks.expect_dtype(m, torch.bool, f"causal_mask{(a, b)}")
                                          for m, (a, b) in zip(_got, _sizes)]),
    ("L_k given by keyword", lambda: checks.expect_equal(_got_kw, _want_kw, "causal_mask(3, L_k=5)")),
    ("no ready-made mask", lambda: checks.expect_not_calling(causal_mask, attention.causal_mask, _bias.causal_lower_right)),
])
### END HIDDEN TESTS

# %% [markdown]
# Masks **combine** with a logical AND: a decoder's self-attention over a padded batch of
# targets needs both, so query $i$ of sequence $b$ may see key $j$ when $j \le i$ *and* $j$
# is not padding. Broadcasting does the work: `(batch, 1, L)` and `(L, L)` give
# `(batch, L, L)`. `attention.combine_masks` does this and skips `None`s. The three masks of
# the second sequence of a batch with lengths (5, 3):

# %%
make_causal = checks.learner_or_reference(causal_mask, attention.causal_mask, lambda fn: [fn(4), fn(3, 5), fn(5, 3)],
                                          name="causal_mask")
seq_lengths = torch.tensor([5, 3])
pad_mask = attention.padding_mask(seq_lengths, 5)           # (2, 1, 5)
tri = make_causal(5)                                    # (5, 5)
both = attention.combine_masks(pad_mask, tri)           # (2, 5, 5)
labels = [f"t{i}" for i in range(5)]
fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
for ax, (title, m) in zip(axes, [("padding (length 3)", pad_mask[1].expand(5, 5)), ("causal", tri),
                                 ("padding AND causal", both[1])]):
    plots.plot_attention(m.float(), labels, labels, ax=ax, title=title, colorbar=False)
cmap = plt.get_cmap("viridis")
fig.legend(handles=[Patch(color=cmap(1.0), label="True: the query may attend to the key"),
                    Patch(color=cmap(0.0), label="False: blocked (weight 0)")],
           loc="lower center", ncol=2, frameon=False)
fig.tight_layout(rect=(0, 0.08, 1, 1))
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
print("shapes:", tuple(pad_mask.shape), "&", tuple(tri.shape), "->", tuple(both.shape))
print(both[1].int())

# %% [markdown]
# The padded *queries* t3 and t4 still see t0..t2: their outputs are computed, and ignored
# later by the loss (which skips padding targets). Nothing is fully masked here. A fully
# masked row does appear with **left** padding (used to batch prompts for generation, so
# that all sequences end at the same position): the first positions are padding, and
# causally they may only look at padding.

# %%
# NBVAL_CHECK_OUTPUT
left = torch.tensor([[False, False, True, True, True]])       # length 3, padded on the left
left_both = attention.combine_masks(left[:, None, :], tri)[0]
print(left_both.int())
q1, k1, v1 = torch.randn(5, 4), torch.randn(5, 4), torch.randn(5, 2)
out_left, w_left = attend(q1, k1, v1, left_both)
print("weights of the padded queries t0, t1:", w_left[:2].tolist())
print("outputs equal PyTorch's:", torch.allclose(out_left, F.scaled_dot_product_attention(q1, k1, v1, attn_mask=left_both), atol=1e-6))

# %% [markdown]
# ### Why `masked_fill(-inf)` and not adding $-10^9$
#
# A common way to apply a padding mask is `scores += (1 - mask) * -1e9`, with a 0/1
# float mask. It mostly works, because $e^{-10^9}$ is 0 in any floating-point format, but it
# is a trick with three weak points:
#
# 1. **A fully masked row silently averages the padding.** All its scores become
#    $s_j - 10^9$, which in float32 is exactly $-10^9$ for every $j$ (float32 has 24 bits of
#    mantissa: near $10^9$ the spacing between numbers is 64, so any score smaller than 32
#    vanishes). The softmax is then uniform and the output is the average of the padding's
#    values: plausible-looking numbers that mean nothing. With $-\infty$ the same row is NaN
#    (loud), and a deliberate rule (zeros, as in PyTorch) replaces it.
# 2. **It depends on the dtype.** $-10^9$ does not exist in float16 (largest magnitude
#    65504): it becomes $-\infty$. An additive mask built in the model's dtype,
#    `(1 - mask) * big`, then holds $0 \times (-\infty) = \text{NaN}$ at every *allowed*
#    position, and the whole row is NaN: the trick that was meant to avoid infinities
#    produces them.
# 3. **A float 0/1 mask hides the convention.** Is 1 "keep" or "drop"? Adding silently
#    accepts either, and an inverted mask trains a model that attends only to padding. A
#    boolean mask used with `masked_fill` states the convention, and
#    `course_utils.attention` rejects float masks with a message.
#
# The cell below shows each point.

# %%
# NBVAL_CHECK_OUTPUT
s = torch.tensor([[2.0, -1.0, 0.5]])
v_pad = torch.tensor([[10.0, 0.0], [0.0, 10.0], [4.0, 4.0]])          # values of three padding keys
none_allowed = torch.tensor([[False, False, False]])
added = s + (1 - none_allowed.float()) * -1e9
print("1. s - 1e9 in float32:       ", added.tolist(), "(the scores are gone)")
print("   adding -1e9:  weights", torch.softmax(added, -1).tolist(), "output", (torch.softmax(added, -1) @ v_pad).tolist())
print("   -inf, no rule: weights", torch.softmax(s.masked_fill(~none_allowed, float("-inf")), -1).tolist())
w_inf = attention.masked_softmax(s, none_allowed)
print("   -inf + rule:   weights", w_inf.tolist(), "output", (w_inf @ v_pad).tolist())
big16 = torch.tensor(-1e9, dtype=torch.float16)
keep16 = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float16)           # 1 = keep, 0 = mask
print("2. -1e9 in float16:", big16.item(), "| (1 - mask) * -1e9 in float16:", ((1 - keep16) * big16).tolist())
try:
    attention.scaled_dot_product_attention(torch.randn(2, 4), torch.randn(3, 4), torch.randn(3, 2),
                                           torch.tensor([1.0, 1.0, 0.0]))
except TypeError as err:
    print("3.", err)


# %% [markdown]
# ## 8. Cross-attention
#
# In an encoder-decoder model, the decoder's positions attend to the encoder's: queries
# come from the decoder states $X_\text{dec}$ (`(batch, T, d_dec)`), keys and values from
# the encoder states $X_\text{enc}$ (`(batch, S, d_enc)`), and the weight matrix of each
# sequence is $T \times S$. The two sequences need not have the same length, nor even the
# same width: $W_Q$ maps $d_\text{dec}$ to $d_k$, $W_K$ maps $d_\text{enc}$ to $d_k$ so
# that queries and keys can be compared, and $W_V$ maps $d_\text{enc}$ to $d_v$. Only
# padding of the *source* needs masking: every target position may look at every real
# source token (the decoder's own causal mask lives in its self-attention). Note that the
# encoder's keys and values are the same at every decoding step, so they can be computed
# once per source sentence and reused (chapter 4's `kvcache.KVCache` holds them:
# `multihead.MultiHeadAttention` fills it from the source once and reuses it at every step).
#
# ### Exercise 5: a cross-attention call (3 points: 1 + 2)
#
# Write `cross_attention(x_dec, x_enc, W_q, W_k, W_v, enc_lengths=None)` returning
# `(output (batch, T, d_v), weights (batch, T, S))`. Project, build the source padding mask
# from `enc_lengths` (`None`: no padding; `attention.padding_mask` may help) and attend. You
# may call your `sdp_attention` or `attention.scaled_dot_product_attention` for the last
# step, but not `F.scaled_dot_product_attention`. `enc_lengths` is an integer tensor with
# lengths from 1 to `S` (not necessarily any of them equal to `S`); every width (`d_dec`,
# `d_enc`, `d_k`, `d_v`) may differ, and the batch may have any size (also 1, or equal to
# `T`). Both results have the inputs' dtype (float32 or float64).
#
# <!-- domain: ex5_cross cross_attention -->
#
# The tests try every kind of input listed here:
# - `x_dec`: float32; float64; a batch of more than 1; a batch of 1.
# - the arguments together: `enc_lengths` None; `enc_lengths` with sources shorter than S (their padded positions must stay as the caller gave them).
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex5_cross", "locked": false, "schema_version": 3, "solution": true}
def cross_attention(x_dec, x_enc, W_q, W_k, W_v, enc_lengths=None):
    """Decoder queries attending to encoder keys and values.

    Args:
        x_dec: ``(batch, T, d_dec)`` decoder states; x_enc: ``(batch, S, d_enc)`` encoder states.
        W_q: ``(d_dec, d_k)``; W_k: ``(d_enc, d_k)``; W_v: ``(d_enc, d_v)``.
        enc_lengths: ``(batch,)`` true source lengths, or ``None`` if nothing is padded.
    Returns:
        ``(output (batch, T, d_v), weights (batch, T, S))``.
    """
    ### BEGIN SOLUTION
    q = x_dec @ W_q
    k = x_enc @ W_k
    v = x_enc @ W_v
    mask = None if enc_lengths is None else attention.padding_mask(enc_lengths, x_enc.shape[1])
    return attention.scaled_dot_product_attention(q, k, v, mask)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex5_cross-visible", "locked": true, "points": 1, "schema_version": 3, "solution": false} tags=["raises-exception"]
_g = torch.Generator().manual_seed(4)
_xd, _xe = torch.randn(2, 3, 4, generator=_g), torch.randn(2, 5, 6, generator=_g)
_Wq, _Wk, _Wv = torch.randn(4, 8, generator=_g), torch.randn(6, 8, generator=_g), torch.randn(6, 7, generator=_g)
_lens = torch.tensor([5, 2])


def _cross_shapes():
    out, w = checks.call(cross_attention, _xd, _xe, _Wq, _Wk, _Wv)
    checks.expect_shape(out, (2, 3, 7), "output (batch, T, d_v)")
    checks.expect_shape(w, (2, 3, 5), "weights (batch, T, S): queries from the decoder, keys from the encoder")


def _cross_padding():
    out, w = checks.call(cross_attention, _xd, _xe, _Wq, _Wk, _Wv, _lens)
    if not (w[1, :, 2:] == 0).all():
        raise checks.CheckFailed("sequence 1 has 2 source tokens, but padding keys 2..4 get weight "
                                 f"{w[1, :, 2:].tolist()}: build a mask from enc_lengths")
    alone, _ = checks.call(cross_attention, _xd[1:], _xe[1:, :2], _Wq, _Wk, _Wv)
    checks.expect_close(out[1:], alone, "output of sequence 1 against the same sequence without padding")


checks.run_checks("cross_attention", [
    ("shapes with T = 3 queries and S = 5 keys", _cross_shapes),
    ("rows of the weights sum to one", lambda: checks.expect_close(
        checks.call(cross_attention, _xd, _xe, _Wq, _Wk, _Wv)[1].sum(-1), torch.ones(2, 3), "row sums")),
    ("source padding is masked", _cross_padding),
])

# %% nbgrader={"grade": true, "grade_id": "ex5_cross-hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Hidden tests: outputs and weights against a float64 direct computation over a seeded grid: batch 1 and
# more (batch = T included), T != S, d_dec, d_enc, d_k and d_v all different, float32 and float64, no
# padding, some padding, a source of length 1; no fused function.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(105)
_cases = []
for _dtype in (torch.float32, torch.float64):
    for _B, _T, _S, _dd, _de, _dk, _dv, _lens in [
            (3, 4, 6, 5, 3, 2, 4, [6, 1, 4]), (3, 4, 6, 5, 3, 2, 4, None), (1, 1, 5, 2, 6, 3, 7, [3]),
            (4, 4, 3, 6, 2, 5, 3, [2, 3, 1, 3]), (2, 5, 5, 3, 4, 8, 2, [5, 5]), (2, 3, 7, 4, 4, 4, 4, [7, 2])]:
        _args = tuple(torch.randn(*shape, generator=_g, dtype=_dtype) for shape in
                      ((_B, _T, _dd), (_B, _S, _de), (_dd, _dk), (_de, _dk), (_de, _dv)))
        _L = None if _lens is None else torch.tensor(_lens)
        _cases.append((f"batch {_B}, T={_T}, S={_S}, d_dec={_dd}, d_enc={_de}, d_k={_dk}, d_v={_dv}, "
                       f"lengths {_lens}, {_dtype}", _args, _L))
### BEGIN EXPECTED
def _direct(x_dec, x_enc, W_q, W_k, W_v, lengths):
    x_dec, x_enc, W_q, W_k, W_v = (t.double() for t in (x_dec, x_enc, W_q, W_k, W_v))
    s = torch.einsum("btd,bsd->bts", x_dec @ W_q, x_enc @ W_k) / math.sqrt(W_q.shape[1])
    if lengths is not None:
        s = s.masked_fill(torch.arange(x_enc.shape[1])[None, None, :] >= lengths[:, None, None], float("-inf"))
    w = torch.softmax(s, -1)
    return w @ (x_enc @ W_v), w


_want = [_direct(*args, L) for _, args, L in _cases]
### END EXPECTED
with checks.forbid((F, "scaled_dot_product_attention")):
    _got = [checks.call(cross_attention, *args, L) for _, args, L in _cases]
checks.run_checks("cross_attention (hidden)", [
    (f"output, {name}", lambda i=i, name=name: checks.expect_close(_got[i][0], _want[i][0], f"output ({name})"))
    for i, (name, *_) in enumerate(_cases)
] + [
    (f"weights, {name}", lambda i=i, name=name: checks.expect_close(_got[i][1], _want[i][1], f"weights ({name})"))
    for i, (name, *_) in enumerate(_cases)
] + [
    (f"dtype, {name}", lambda i=i, name=name: checks.expect_dtype(_got[i][0], _cases[i][1][0].dtype, f"output ({name})"))
    for i, (name, *_) in enumerate(_cases)
] + [
    ("no fused function", lambda: checks.expect_not_calling(cross_attention, F.scaled_dot_product_attention, by_name=False)),
])
### END HIDDEN TESTS

# %% [markdown]
# A decoder of 4 positions reading a source of 6 tokens, of which the second sentence has
# only 4 (random weights, so the pattern itself means nothing yet; chapter 6
# trains such a model):

# %%
def _probe_cross(fn):
    g = torch.Generator().manual_seed(6)
    args = (torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 6, generator=g), torch.randn(4, 8, generator=g),
            torch.randn(6, 8, generator=g), torch.randn(6, 2, generator=g), torch.tensor([5, 3]))
    return fn(*args)                   # (output, weights), compared with the reference's


cross = checks.learner_or_reference(cross_attention, attention.cross_attention, _probe_cross,
                                    name="cross_attention")
x_dec, x_enc = torch.randn(2, 4, 16), torch.randn(2, 6, 12)
W_q, W_k, W_v = torch.randn(16, 8) / 4, torch.randn(12, 8) / 3.5, torch.randn(12, 8) / 3.5
out_x, w_x = cross(x_dec, x_enc, W_q, W_k, W_v, torch.tensor([6, 4]))
fig, ax = plt.subplots(figsize=(5, 3))
_ = plots.plot_attention(w_x[1], [f"y{i}" for i in range(4)], [f"x{j}" for j in range(6)], ax=ax,
                         title="cross-attention, source length 4 of 6")
fig.axes[-1].set_ylabel("attention weight")      # the colour bar
plt.show()


# %% [markdown]
# ## 9. A self-attention layer as a module
#
# In a model, an attention layer owns its projections: it is an `nn.Module` whose
# parameters are $W_Q$, $W_K$, $W_V$, learned with the rest of the network. The Transformer
# adds a fourth matrix $W_O$ after the attention (Vaswani et al. 2017, section 3.2.2). With one
# head, as here, it is one more linear layer; with several heads (chapter 4) it
# is what mixes them. PyTorch's `nn.Linear(d_in, d_out)` computes $x A^\top + b$ with a
# weight $A$ of shape `(d_out, d_in)`, so `q_proj(x)` is $X W_Q$ with $W_Q = A^\top$ (plus a
# bias).
#
# ### Exercise 6: a self-attention layer (5 points: 2 + 3)
#
# Write the `nn.Module` `SelfAttention(d_model)`:
#
# * four sub-modules `q_proj`, `k_proj`, `v_proj`, `out_proj`, each an
#   `nn.Linear(d_model, d_model)` with a bias (the names matter: the tests load your
#   module's weights into PyTorch's `nn.MultiheadAttention` and into the course's
#   `multihead.MultiHeadAttention` and compare the results);
# * `forward(x, mask=None)` with `x` of shape `(batch, L, d_model)` and `mask` `None` or a
#   bool tensor broadcastable to `(batch, L, L)`, True = may attend (a padding mask
#   `(batch, 1, L)`, a causal mask `(L, L)`, or both combined);
# * it returns `(out, weights)`: `weights` `(batch, L, L)` are the attention weights of the
#   projected queries and keys (scale $1/\sqrt{d_\text{model}}$, since the single head is
#   $d_\text{model}$ wide), with the rules of exercise 3 for masks and fully masked rows,
#   and `out` `(batch, L, d_model)` is `out_proj` applied to the weighted values;
# * masks may have any of these shapes, and `(L,)` too; masked keys get weight exactly 0 whatever
#   their scores; `out` and `weights` have `x`'s dtype (the tests also run the module after
#   `.double()` on float64 inputs), and load fixed weights into it with `load_state_dict`.
#
# You may use your `sdp_attention` or `attention.scaled_dot_product_attention` for the
# attention itself; not `F.scaled_dot_product_attention`, `nn.MultiheadAttention` or
# `multihead.MultiHeadAttention`.
#
# <!-- domain: ex6_module SelfAttention -->
#
# The tests try every kind of input listed here:
# - `x`: float32; float64; a batch of more than 1.
# - `mask`: None; a bool tensor.
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex6_module", "locked": false, "schema_version": 3, "solution": true}
class SelfAttention(nn.Module):
    """Single-head self-attention with its own projections.

    Sub-modules ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``: ``nn.Linear(d_model, d_model)``.
    ``forward(x (batch, L, d_model), mask=None)`` returns
    ``(out (batch, L, d_model), weights (batch, L, L))``; mask: bool, True = may attend.
    """

    def __init__(self, d_model):
        super().__init__()
        ### BEGIN SOLUTION
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        ### END SOLUTION

    def forward(self, x, mask=None):
        ### BEGIN SOLUTION
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)      # (batch, L, d_model) each
        mixed, weights = attention.scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(mixed), weights
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex6_module-visible", "locked": true, "points": 2, "schema_version": 3, "solution": false} tags=["raises-exception"]
_g = torch.Generator().manual_seed(8)
_x = torch.randn(2, 5, 16, generator=_g)


def _direct_self_attention(m, x, mask=None):
    """The formula, with the module's own weights: out_proj(softmax(q k^T / sqrt(d)) v)."""
    q, k, v = (x @ lin.weight.T + lin.bias for lin in (m.q_proj, m.k_proj, m.v_proj))
    s = q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, dim=-1)
    return (w @ v) @ m.out_proj.weight.T + m.out_proj.bias, w


def _module():
    with torch.random.fork_rng():          # the same initial weights at every call, the notebook's RNG untouched
        torch.manual_seed(8)
        m = checks.call(SelfAttention, 16, what="SelfAttention(16)")
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        lin = getattr(m, name, None)
        if not isinstance(lin, nn.Linear):
            raise checks.CheckFailed(f"SelfAttention needs a sub-module {name} = nn.Linear(d_model, d_model), "
                                     f"got {type(lin).__name__}")
        checks.expect_shape(lin.weight, (16, 16), f"{name}.weight")
        if lin.bias is None:
            raise checks.CheckFailed(f"{name} needs a bias (nn.Linear's default)")
    n_params = sum(p.numel() for p in m.parameters())
    checks.expect_equal(n_params, 4 * (16 * 16 + 16), "number of parameters (four d x d weights and biases)")
    return m


def _forward_values():
    m = _module()
    out, w = checks.call(m, _x, what="SelfAttention.forward")
    checks.expect_shape(out, (2, 5, 16), "out (batch, L, d_model)")
    checks.expect_shape(w, (2, 5, 5), "weights (batch, L, L)")
    want_out, want_w = _direct_self_attention(m, _x)
    checks.expect_close(w, want_w, "weights (scale by 1/sqrt(d_model))")
    checks.expect_close(out, want_out, "out (out_proj of the weighted values)")


def _causal_respected():
    m = _module()
    tri = torch.ones(5, 5).tril().bool()
    out, w = checks.call(m, _x, tri, what="SelfAttention.forward")
    if not (w[:, ~tri] == 0).all():
        raise checks.CheckFailed("with a causal mask, query i must give weight 0 to keys j > i: is the mask "
                                 "ignored or inverted (True = may attend)?")
    checks.expect_close(out, _direct_self_attention(m, _x, tri)[0], "out with a causal mask")


def _gradients_reach_every_projection():
    m = _module()
    out, _ = checks.call(m, _x, what="SelfAttention.forward")
    out.square().sum().backward()
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        g = getattr(m, name).weight.grad
        if g is None or g.abs().sum() == 0:
            raise checks.CheckFailed(f"no gradient reaches {name}.weight: is it used in forward?")


checks.run_checks("SelfAttention", [
    ("four nn.Linear(16, 16) sub-modules with bias", _module),
    ("shapes and values without a mask", _forward_values),
    ("a causal mask is respected", _causal_respected),
    ("gradients reach all four projections", _gradients_reach_every_projection),
])

# %% nbgrader={"grade": true, "grade_id": "ex6_module-hidden", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# Hidden tests: fixed weights loaded into your module; out and weights against a float64 computation (equal
# to nn.MultiheadAttention with the same weights) for d_model 12 and 5, batch 3 and 1, L = 6, 4 and 1,
# float32 and float64, and every kind of mask: none, causal (L, L), padding (batch, 1, L), a key mask (L,),
# padding and causal combined (batch, L, L), left padding (fully masked rows), padded keys with far larger
# scores than the real ones; no ready-made attention module.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(108)


def _fixed_weights(d):
    sd = {}
    for lin in ["q_proj", "k_proj", "v_proj", "out_proj"]:
        sd[f"{lin}.weight"] = torch.randn(d, d, generator=_g) / math.sqrt(d)
        sd[f"{lin}.bias"] = torch.randn(d, generator=_g) / 3
    return sd


_left = torch.tensor([[False, False, True, True, True, True]] * 3)[:, None, :] & attention.causal_mask(6)
_masks6 = {"no mask": None, "causal (6, 6)": attention.causal_mask(6),
           "padding (3, 1, 6)": attention.padding_mask(torch.tensor([6, 4, 2]), 6),
           "key mask (6,)": torch.tensor([True, True, True, True, False, False]),
           "padding and causal (3, 6, 6)": attention.combine_masks(attention.padding_mask(torch.tensor([6, 4, 2]), 6),
                                                                   attention.causal_mask(6)),
           "left padding, fully masked rows (3, 6, 6)": _left}
_settings = [(12, 3, 6, _masks6), (5, 1, 4, {"no mask": None, "causal (4, 4)": attention.causal_mask(4)}),
             (5, 2, 1, {"no mask": None})]
_cases, _modules = [], []
for _dtype in (torch.float32, torch.float64):
    for _d, _B, _L, _masks in _settings:
        _sd = _fixed_weights(_d)
        with torch.random.fork_rng():          # building the module does not move the notebook's RNG
            _m = checks.call(SelfAttention, _d, what=f"SelfAttention({_d})")
        _m.load_state_dict(_sd, strict=False)
        _m = _m.to(_dtype)
        _x = torch.randn(_B, _L, _d, generator=_g, dtype=_dtype)
        for _name, _mask in _masks.items():
            _cases.append((f"d_model={_d}, batch {_B}, L={_L}, {_dtype}, {_name}", _m, _x, _mask, _sd))
        if _L == 6:      # padding whose inputs are 40 times larger: masked keys with far larger scores
            _x = _x.clone()
            _x[:, 4:] *= 40
            _pad4 = attention.padding_mask(torch.tensor([4, 4, 4]), 6)
            _cases.append((f"d_model={_d}, {_dtype}, padded keys with far larger scores", _m, _x, _pad4, _sd))
### BEGIN EXPECTED
def _direct(sd, x, mask):
    x = x.double()
    q, k, v = (x @ sd[f"{n}.weight"].double().T + sd[f"{n}.bias"].double() for n in ("q_proj", "k_proj", "v_proj"))
    s = q @ k.mT / math.sqrt(x.shape[-1])
    if mask is not None:
        s = s.masked_fill(mask.logical_not(), -math.inf)
    w = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return (w @ v) @ sd["out_proj.weight"].double().T + sd["out_proj.bias"].double(), w


_want = [_direct(sd, x, mask) for _, _, x, mask, sd in _cases]
### END EXPECTED
with checks.forbid((F, "scaled_dot_product_attention"), nn.MultiheadAttention.forward,
                   multihead.MultiHeadAttention.forward, F.multi_head_attention_forward):
    with torch.no_grad():
        _got = [checks.call(m, x, mask, what="SelfAttention.forward") for _, m, x, mask, _ in _cases]
checks.run_checks("SelfAttention (hidden)", [
    (f"out, {name}", lambda i=i, name=name: checks.expect_close(_got[i][0], _want[i][0], f"out ({name})"))
    for i, (name, *_) in enumerate(_cases)
] + [
    (f"weights, {name}", lambda i=i, name=name: checks.expect_close(_got[i][1], _want[i][1], f"weights ({name})"))
    for i, (name, *_) in enumerate(_cases)
] + [
    (f"dtypes, {name}", lambda i=i, name=name: [checks.expect_dtype(t, _cases[i][2].dtype, f"{n} ({name})")
                                                for t, n in zip(_got[i], ("out", "weights"))])
    for i, (name, *_) in enumerate(_cases)
] + [
    ("no ready-made attention module", lambda: checks.expect_not_calling(
        SelfAttention.forward, nn.MultiheadAttention, multihead.MultiHeadAttention, F.multi_head_attention_forward)),
])
### END HIDDEN TESTS

# %% [markdown]
# The experiments below use your `SelfAttention` if it gives the reference's result on a
# probe (the same weights loaded into both, a padded and causal batch), and otherwise the
# course's `multihead.OneHeadSelfAttention` (its `MultiHeadAttention` with a single head), which
# has the same four sub-modules. The next cell also checks the warning of section 6: PyTorch's
# `nn.MultiheadAttention`, given your module's weights, computes the same layer only when
# the mask is inverted.

# %%
def _probe_self_attention(cls):
    g = torch.Generator().manual_seed(7)
    with torch.random.fork_rng():                  # building the layer does not move the notebook's RNG
        layer = cls(8)
    layer.load_state_dict({f"{lin}.{p}": torch.randn((8, 8) if p == "weight" else (8,), generator=g)
                           for lin in ("q_proj", "k_proj", "v_proj", "out_proj") for p in ("weight", "bias")})
    x = torch.randn(2, 5, 8, generator=g)
    return layer(x, attention.combine_masks(attention.padding_mask(torch.tensor([5, 3]), 5), attention.causal_mask(5)))


SelfAttentionLayer = checks.learner_or_reference(SelfAttention, multihead.OneHeadSelfAttention,
                                                 _probe_self_attention, name="SelfAttention")

# %%
# NBVAL_CHECK_OUTPUT
layer = SelfAttentionLayer(16)
torch_mha = multihead.copy_to_torch(layer, nn.MultiheadAttention(16, 1, batch_first=True))  # PyTorch's, same weights
with torch.no_grad():
    x_l = torch.randn(2, 5, 16)
    allowed = make_causal(5)                                        # True = may attend (this course)
    ours_l, _ = layer(x_l, allowed)
    torch_inverted, _ = torch_mha(x_l, x_l, x_l, attn_mask=~allowed)
    torch_as_is, _ = torch_mha(x_l, x_l, x_l, attn_mask=allowed)
print("nn.MultiheadAttention, mask inverted (~mask):", torch.allclose(ours_l, torch_inverted, atol=1e-5))
print("nn.MultiheadAttention, mask as it is:        ", torch.allclose(ours_l, torch_as_is, atol=1e-5))
print("parameters:", sum(p.numel() for p in layer.parameters()), "= 4 x (16 x 16 + 16)")

# %% [markdown]
# ### Exercise 7: the whole layer over a padded batch (5 points: 2 + 3)
#
# Exercises 1 to 6 built the parts; a layer inside a model is handed none of them. It gets a batch
# of sentences padded on the right to a common length `L`, the true length of each, its weights,
# and whether it is a decoder's (causal) layer. Write the whole single-head layer,
# `padded_self_attention(x, lengths, W_q, W_k, W_v, W_o, causal=False)`, returning
# `(out, weights)`:
#
# - `x` is `(batch, L, d_model)`, float32 or float64. Position `i` of sequence `b` is **real** when
#   `i < lengths[b]` and **padding** otherwise. Padding holds whatever the batch was filled with:
#   any numbers, large ones, even `inf` or `NaN` (memory from `torch.empty`, say). Nothing at the
#   padding may change anything at the real positions, and no `NaN` may come out.
# - `lengths` is an integer tensor of shape `(batch,)`, each length between 0 and `L` (`L`: no
#   padding; 0: a sequence with no real position at all).
# - The weights are applied on the right with no biases, $q = x W_Q$, $k = x W_K$, $v = x W_V$,
#   and at the end $\text{out} = (\text{weights}\; v)\, W_O$: `W_q` and `W_k` are `(d_model, d_k)`,
#   `W_v` is `(d_model, d_v)`, `W_o` is `(d_v, d_model)`. `d_k` is `W_q`'s number of columns and
#   `d_v` is `W_v`'s; they may differ from each other and from `d_model`. The scores are scaled by
#   $1/\sqrt{d_k}$.
# - A real query `i` of sequence `b` attends to the real keys `j < lengths[b]` of its own sequence,
#   and, when `causal` is True, only to those with `j <= i`. Its row of weights sums to one.
# - A **padded query attends to nothing**: its row of weights is all zero and its output is the
#   zero vector (so a sequence of length 0 gives zeros throughout). Padded keys get weight exactly
#   0 in every row, however large their scores.
# - Return `out (batch, L, d_model)` and `weights (batch, L, L)`, both in `x`'s dtype; leave the
#   inputs unchanged.
# - Raise `ValueError`, with a message naming what is wrong, when: `x` is not a 3-D floating-point
#   tensor (name `x`); `lengths` is not an integer tensor of shape `(batch,)`, or a length lies
#   outside 0 to `L` (name `lengths`); a weight has another shape than the ones above, or another
#   dtype than `x` (name that weight: `W_q`, `W_k`, `W_v` or `W_o`; a `W_k` that differs from
#   `W_q` is `W_k`'s fault, a `W_o` whose rows are not `d_v` is `W_o`'s); `causal` is not `True`
#   or `False` (name `causal`).
#
# You may call your functions of exercises 1 to 5 (while the tests run this exercise, those names
# are the course's versions, so a mistake there costs its own exercise only) and the helpers of
# `course_utils.attention` (`padding_mask`, `causal_mask`, `scaled_dot_product_attention`), or write
# everything out; not `F.scaled_dot_product_attention`, `nn.MultiheadAttention` or the course's own
# `attention.padded_self_attention`. At the real positions the result is what PyTorch's
# `nn.MultiheadAttention` with one head, no biases and the same weights gives for each sequence
# alone; the tests compare with that computation, in float64.
#
# <!-- domain: ex7_padded padded_self_attention -->
#
# The tests try every kind of input listed here:
# - `x`: float32; float64; a batch of more than 1; a batch of 1.
# - the arguments together: every length `L` (no padding); lengths shorter than `L`, the padding holding large numbers; padding holding inf or NaN; a sequence of length 0; `L` = 1.
# - `causal`: True; False, or left out.
# - must raise: `x` not a 3-D floating-point tensor: ValueError; `lengths` not an integer tensor of shape `(batch,)`, or a length outside 0 to `L`: ValueError; a weight of another shape than declared, or another dtype than `x`: ValueError; `causal` not True or False: ValueError.
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex7_padded", "locked": false, "schema_version": 3, "solution": true}
def padded_self_attention(x, lengths, W_q, W_k, W_v, W_o, causal=False):
    """Single-head self-attention over a batch padded on the right.

    Args:
        x: ``(batch, L, d_model)``; position i of sequence b is real when ``i < lengths[b]``.
        lengths: ``(batch,)`` integer tensor, each length between 0 and L.
        W_q, W_k: ``(d_model, d_k)``; W_v: ``(d_model, d_v)``; W_o: ``(d_v, d_model)``; applied as ``x @ W``.
        causal: True for a decoder's layer (query i sees keys j <= i only).
    Returns:
        ``(out (batch, L, d_model), weights (batch, L, L))``; zero rows at the padded queries.
    """
    ### BEGIN SOLUTION
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or not x.is_floating_point():
        raise ValueError("x must be a floating-point tensor of shape (batch, L, d_model), "
                         f"got {type(x).__name__} {tuple(getattr(x, 'shape', ()))}")
    batch, L, d_model = x.shape
    if (not isinstance(lengths, torch.Tensor) or tuple(lengths.shape) != (batch,)
            or lengths.is_floating_point() or lengths.dtype == torch.bool):
        raise ValueError(f"lengths must be an integer tensor of shape ({batch},), one length per sequence")
    if ((lengths < 0) | (lengths > L)).any():
        raise ValueError(f"lengths must lie between 0 and L={L}, got {lengths.tolist()}")
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    d_k, d_v = W_q.shape[-1], W_v.shape[-1]          # the widths, read from W_q and W_v
    shapes = {"W_q": (W_q, (d_model, d_k)), "W_k": (W_k, (d_model, d_k)),
              "W_v": (W_v, (d_model, d_v)), "W_o": (W_o, (d_v, d_model))}
    for name, (w, shape) in shapes.items():
        if tuple(w.shape) != shape or w.dtype != x.dtype:
            raise ValueError(f"{name} must be a {x.dtype} tensor of shape {shape}, "
                             f"got {w.dtype} {tuple(w.shape)}")
    # 1. which (query, key) pairs may meet: both real, and the key not after the query if causal
    real = torch.arange(L)[None, :] < lengths[:, None]                   # (batch, L)
    allowed = real[:, :, None] & real[:, None, :]                        # (batch, L_q, L_k)
    if causal:
        allowed = allowed & torch.ones(L, L, dtype=torch.bool).tril()
    # 2. project; padded values are zeroed, since a weight of 0 times NaN is still NaN
    q = x @ W_q                                                          # (batch, L, d_k)
    k = x @ W_k                                                          # (batch, L, d_k)
    v = (x @ W_v).masked_fill(~real[:, :, None], 0.0)                    # (batch, L, d_v)
    # 3. scaled scores and the masked softmax; a row with no allowed key (a padded query) is zero
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)                    # (batch, L_q, L_k)
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.where(allowed.any(dim=-1, keepdim=True), weights, torch.zeros_like(weights))
    # 4. the weighted values, projected back to d_model
    return (weights @ v) @ W_o, weights
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex7_padded-visible", "locked": true, "points": 2, "schema_version": 3, "solution": false} tags=["raises-exception"]
# a batch of 2 sequences padded to L = 5, d_model 6, d_k 4, d_v 3 (float64)
_g = torch.Generator().manual_seed(9)
_x7 = torch.randn(2, 5, 6, generator=_g, dtype=torch.float64)
_W7 = [torch.randn(r, c, generator=_g, dtype=torch.float64) / math.sqrt(r) for r, c in ((6, 4), (6, 4), (6, 3), (3, 6))]


def _formula7(x, W_q, W_k, W_v, W_o, mask=None):
    """One unpadded batch through the formula: (softmax(x W_q (x W_k)^T / sqrt(d_k)) x W_v) W_o."""
    s = (x @ W_q) @ (x @ W_k).mT / math.sqrt(W_q.shape[1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, dim=-1)
    return (w @ (x @ W_v)) @ W_o, w


def _no_padding7():
    out, w = checks.call(padded_self_attention, _x7, torch.tensor([5, 5]), *_W7)
    checks.expect_shape(out, (2, 5, 6), "out (batch, L, d_model)")
    checks.expect_shape(w, (2, 5, 5), "weights (batch, L, L)")
    want_out, want_w = _formula7(_x7, *_W7)
    checks.expect_close(w, want_w, "weights without padding (scale by 1/sqrt(d_k), d_k = 4)")
    checks.expect_close(out, want_out, "out without padding: (weights @ v) @ W_o")


def _padded7(fill):
    x = _x7.clone()
    x[1, 2:] = fill                                       # sequence 1 has 2 real positions
    out, w = checks.call(padded_self_attention, x, torch.tensor([5, 2]), *_W7)
    alone_out, alone_w = _formula7(_x7[1:, :2], *_W7)
    checks.expect_close(out[1:, :2], alone_out, f"out of sequence 1 (padding filled with {fill}) against "
                        "the same 2 positions without padding")
    checks.expect_close(w[1:, :2, :2], alone_w, f"weights of sequence 1's real queries (padding {fill})")
    checks.expect_close(w[1, :, 2:], torch.zeros(5, 3, dtype=torch.float64), "weights of the padded keys")
    checks.expect_close(w[1, 2:], torch.zeros(3, 5, dtype=torch.float64), "weights of the padded queries")
    checks.expect_close(out[1, 2:], torch.zeros(3, 6, dtype=torch.float64), "out at the padded positions")


def _causal7():
    out, w = checks.call(padded_self_attention, _x7, torch.tensor([5, 5]), *_W7, causal=True)
    want_out, want_w = _formula7(_x7, *_W7, mask=torch.ones(5, 5, dtype=torch.bool).tril())
    checks.expect_close(w, want_w, "weights with causal=True (query i sees keys j <= i)")
    checks.expect_close(out, want_out, "out with causal=True")


def _raises7(args, name, what):
    """padded_self_attention(*args) must raise ValueError, its message naming ``name``."""
    try:
        checks.call(padded_self_attention, *args)
    except ValueError as err:
        if name not in str(err):
            checks.expect_equal(str(err), f"a message naming {name}", f"the ValueError for {what}")
        return
    checks.expect_equal("returned", "raised ValueError", f"padded_self_attention with {what}")


checks.run_checks("padded_self_attention", [
    ("no padding: shapes and the formula's values", _no_padding7),
    ("padding of large numbers changes nothing at the real positions; padded rows and columns are zero",
     lambda: _padded7(1e3)),
    ("padding holding NaN changes nothing either (0 x NaN is NaN: zero the padded values)",
     lambda: _padded7(float("nan"))),
    ("causal=True", _causal7),
    ("ValueError naming lengths for a length of 6 when L = 5", lambda: _raises7(
        (_x7, torch.tensor([5, 6]), *_W7), "lengths", "lengths [5, 6] and L = 5")),
    ("ValueError naming W_o for a W_o of shape (4, 6) when d_v = 3", lambda: _raises7(
        (_x7, torch.tensor([5, 2]), *_W7[:3], torch.zeros(4, 6, dtype=torch.float64)), "W_o", "W_o (4, 6)")),
])

# %% nbgrader={"grade": true, "grade_id": "ex7_padded-hidden", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# Hidden tests: a seeded grid (batch 1 to 4, L from 1 to 7, d_model, d_k and d_v all different or all
# equal, float32 and float64, causal or not and causal left out, lengths from 0 to L, padding of large
# numbers, inf and NaN): out and weights against a float64 computation (equal at the real positions to
# nn.MultiheadAttention with one head and the same weights); dtypes; every declared bad input raises.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(109)
# (L, d_model, d_k, d_v, lengths, causal, dtype, padding)
_grid7 = [(6, 8, 4, 5, [6, 3, 1], False, torch.float32, 1e3), (6, 8, 4, 5, [6, 3, 1], True, torch.float64, math.nan),
          (4, 5, 5, 5, [4], True, torch.float32, None), (4, 5, 3, 2, [2], None, torch.float64, math.inf),
          (5, 6, 2, 7, [0, 5, 2, 4], True, torch.float32, 40.0), (1, 3, 3, 3, [1, 0], False, torch.float64, math.nan),
          (7, 4, 6, 3, [7, 7], None, torch.float64, None), (6, 8, 8, 8, [5, 6, 2], True, torch.float32, -math.inf)]
_in7 = []
for _L, _d, _dk, _dv, _lens, _causal, _dt, _fill in _grid7:
    _x = torch.randn(len(_lens), _L, _d, generator=_g, dtype=torch.float64)
    _Ws = [torch.randn(r, c, generator=_g, dtype=torch.float64) / math.sqrt(r) for r, c in ((_d, _dk), (_d, _dk), (_d, _dv), (_dv, _d))]
    _x = _x.to(_dt)
    if _fill is not None:
        _x = _x.masked_fill(torch.arange(_L)[None, :, None] >= torch.tensor(_lens)[:, None, None], _fill)
    _in7.append((_x, torch.tensor(_lens), [W.to(_dt) for W in _Ws]))


### BEGIN EXPECTED
def _ref7(x, lengths, Ws, causal):
    keep = torch.arange(x.shape[1])[None, :] < lengths[:, None]
    x = x.double().masked_fill(~keep[..., None], 0.0)
    W_q, W_k, W_v, W_o = (W.double() for W in Ws)
    pair = keep[:, :, None] & keep[:, None, :] & (torch.ones(x.shape[1], x.shape[1]).tril().bool() | (not causal))
    s = ((x @ W_q) @ (x @ W_k).transpose(1, 2) / W_q.shape[1] ** 0.5).masked_fill(~pair, -math.inf)
    w = torch.softmax(s, -1).nan_to_num(0.0)
    return w @ (x @ W_v) @ W_o, w


_want7 = [_ref7(x, lens, Ws, bool(c[5])) for (x, lens, Ws), c in zip(_in7, _grid7)]
### END EXPECTED


def _case7(r):
    L, d, dk, dv, lens, causal, dt, fill = _grid7[r]
    x, lengths, Ws = _in7[r]
    what = f"case {r}: L {L}, d_model {d}, d_k {dk}, d_v {dv}, lengths {lens}, causal {causal}, {str(dt)[6:]}"
    kw = {} if causal is None else {"causal": causal}
    with checks.forbid((F, "scaled_dot_product_attention"), nn.MultiheadAttention.forward,
                       F.multi_head_attention_forward, attention.padded_self_attention):
        out, w = checks.call(padded_self_attention, x, lengths, *Ws, **kw)
    checks.expect_equal((out.dtype, w.dtype), (dt, dt), f"{what}: dtypes of out and weights")
    checks.expect_close(w, _want7[r][1], f"{what}: weights")
    checks.expect_close(out, _want7[r][0], f"{what}: out")


def _bad7(r):
    gen = torch.Generator().manual_seed(110)
    x, n = torch.randn(3, 4, 6, generator=gen), torch.tensor([4, 2, 0])
    W = {shape: torch.randn(*shape, generator=gen) for shape in ((6, 5), (6, 3), (5, 5), (5, 3), (3, 6), (2, 6))}
    ok = [W[6, 5], W[6, 5], W[6, 3], W[3, 6]]
    bad = [("x of 2 axes", (x[:, 0], n, *ok), "x"), ("x as nested lists", (x.tolist(), n, *ok), "x"),
           ("x and the weights of integers", (x.long(), n, *(w.long() for w in ok)), "x"),
           ("lengths of floats", (x, n.float(), *ok), "lengths"), ("lengths of another batch", (x, n[:2], *ok), "lengths"),
           ("lengths of shape (batch, 1)", (x, n[:, None], *ok), "lengths"), ("lengths as a list", (x, n.tolist(), *ok), "lengths"),
           ("a length of 5 > L", (x, n + 1, *ok), "lengths"), ("a negative length", (x, n - 1, *ok), "lengths"),
           ("lengths of bools", (x, n > 0, *ok), "lengths"),
           ("W_q of 5 rows", (x, n, W[5, 5], *ok[1:]), "W_q"), ("W_k of 3 columns", (x, n, ok[0], W[6, 3], *ok[2:]), "W_k"),
           ("W_v of 5 rows", (x, n, *ok[:2], W[5, 3], ok[3]), "W_v"), ("W_v in float64", (x, n, *ok[:2], W[6, 3].double(), ok[3]), "W_v"),
           ("W_o of 2 rows where d_v = 3", (x, n, *ok[:3], W[2, 6]), "W_o"), ("W_o transposed, (6, 3)", (x, n, *ok[:3], W[6, 3]), "W_o"),
           ("W_q of 1 axis (a bias?)", (x, n, W[6, 5][:, 0], *ok[1:]), "W_q"),
           ("W_v of 1 axis", (x, n, *ok[:2], W[6, 3][:, 0], ok[3]), "W_v"),
           ("causal given as the string 'yes'", (x, n, *ok, "yes"), "causal"), ("causal given as 2", (x, n, *ok, 2), "causal")]
    what, args, name = bad[r]
    _raises7(args, name, what=what)


checks.run_checks("padded_self_attention (hidden)", [
    *((f"case {r}: lengths {_grid7[r][4]}, causal {_grid7[r][5]}", lambda r=r: _case7(r)) for r in range(len(_grid7))),
    *((f"bad input {r}", lambda r=r: _bad7(r)) for r in range(20)),
    ("no ready-made attention layer", lambda: checks.expect_not_calling(
        padded_self_attention, F.scaled_dot_product_attention, nn.MultiheadAttention, F.multi_head_attention_forward,
        attention.padded_self_attention)),
])
### END HIDDEN TESTS

# %% [markdown]
# The next cell checks your `padded_self_attention` on a probe (a padded, causal batch with a
# sequence of length 0, NaN and inf in the padding) and, if it agrees with the course's
# `attention.padded_self_attention`, uses it (and the course's function otherwise) to measure what
# padding does, and does not do, to a batch: every sequence of a batch padded to 12 against the same sequence alone, and against PyTorch's
# `nn.MultiheadAttention` (one head, no biases, your weights) with its `key_padding_mask`
# (True = *blocked*, section 6's warning).

# %%
def _probe_padded(fn):
    g = torch.Generator().manual_seed(12)
    x = torch.randn(3, 5, 8, generator=g, dtype=torch.float64)
    x[1, 3:] = float("nan")
    x[2] = float("inf")                                          # length 0: all of it padding
    Ws = [torch.randn(r, c, generator=g, dtype=torch.float64) / 3 for r, c in ((8, 4), (8, 4), (8, 6), (6, 8))]
    return fn(x, torch.tensor([5, 3, 0]), *Ws, causal=True)    # (out, weights)


padded_attend = checks.learner_or_reference(padded_self_attention, attention.padded_self_attention, _probe_padded,
                                            name="padded_self_attention")

# %%
# NBVAL_CHECK_OUTPUT
lengths_b = torch.tensor([12, 9, 4, 1])
g_b = torch.Generator().manual_seed(13)                         # its own generator: later cells draw as before
x_b = torch.randn(4, 12, 16, generator=g_b)
x_b[torch.arange(12)[None, :] >= lengths_b[:, None]] = 1e4       # the padding: large numbers
W_b = [torch.randn(16, 16, generator=g_b) / 4 for _ in range(4)]  # W_q, W_k, W_v, W_o
with torch.random.fork_rng():
    mha_b = nn.MultiheadAttention(16, 1, bias=False, batch_first=True)
with torch.no_grad():
    mha_b.in_proj_weight.copy_(torch.cat([W.T for W in W_b[:3]]))   # nn.Linear stores W^T
    mha_b.out_proj.weight.copy_(W_b[3].T)
    for causal in (False, True):
        out_b, w_b = padded_attend(x_b, lengths_b, *W_b, causal=causal)
        future = torch.ones(12, 12, dtype=torch.bool).triu(1) if causal else None     # True = blocked
        alone = [padded_attend(x_b[i:i + 1, :n], lengths_b[i:i + 1], *W_b, causal=causal)[0][0]
                 for i, n in enumerate(lengths_b.tolist())]
        torch_b, _ = mha_b(x_b, x_b, x_b, key_padding_mask=~attention.padding_mask(lengths_b, 12)[:, 0],
                           attn_mask=future, need_weights=False)
        real_b = torch.arange(12)[None, :] < lengths_b[:, None]
        print(f"causal={causal}: each sequence's real positions as when run alone:",
              all(torch.allclose(out_b[i, :n], a, atol=1e-4) for i, (n, a) in enumerate(zip(lengths_b.tolist(), alone))),
              "| equal to nn.MultiheadAttention there:", torch.allclose(out_b[real_b], torch_b[real_b], atol=1e-4),
              "| padded outputs zero (ours):", bool((out_b[~real_b] == 0).all()),
              "| (PyTorch's):", bool((torch_b[~real_b] == 0).all()))

# %% [markdown]
# Padding of large numbers changes nothing at the real positions: each sentence of the batch gets
# exactly what it gets alone, with and without the causal mask, and PyTorch's layer agrees there.
# The two differ only at the padded positions: PyTorch's padded queries still attend to the real keys
# and get outputs that look like any other, while this chapter's rule gives them zeros. Neither is
# wrong (a loss skips those positions either way), but only the zeros can be told apart from real
# outputs, which is why the rule is stated in the exercise rather than left to the library.

# %% [markdown]
# ## 10. Self-attention does not know word order
#
# Shuffle the rows of $X$ with a permutation matrix $P$. Then
# $(PX)W_Q\,((PX)W_K)^\top = P\,(QK^\top)P^\top$: the scores are shuffled the same way along
# both axes, the row-wise softmax commutes with that, and
# $\operatorname{Attention}(PX) = P\operatorname{Attention}(X)$. Self-attention is
# **permutation equivariant**: each token's output depends on the token and on the *set*
# of tokens around it, not on where they stand. "dog bites man" and "man bites dog" give
# the same output vector for *dog*. The cell checks it, and checks that a causal mask,
# which does depend on positions, breaks the symmetry.

# %%
# NBVAL_CHECK_OUTPUT
d_model = 8
vocab = {w: torch.randn(d_model) for w in ["dog", "bites", "man"]}
Wq_s, Wk_s, Wv_s = (torch.randn(d_model, d_model) for _ in range(3))


def self_attend(words, mask=None):
    x = torch.stack([vocab[w] for w in words])
    return attend(x @ Wq_s, x @ Wk_s, x @ Wv_s, mask)[0]


a, b = self_attend(["dog", "bites", "man"]), self_attend(["man", "bites", "dog"])
print("output of 'dog' equal in both sentences:", torch.allclose(a[0], b[2], atol=1e-6))
print("outputs shuffled like the inputs:       ", torch.allclose(a[[2, 1, 0]], b, atol=1e-6))
X6 = torch.randn(6, d_model)
perm = torch.randperm(6)
out6 = attend(X6 @ Wq_s, X6 @ Wk_s, X6 @ Wv_s)[0]
out6_perm = attend(X6[perm] @ Wq_s, X6[perm] @ Wk_s, X6[perm] @ Wv_s)[0]
print("6 random tokens, random permutation:    ", torch.allclose(out6_perm, out6[perm], atol=1e-6))
c, d = self_attend(["dog", "bites", "man"], make_causal(3)), self_attend(["man", "bites", "dog"], make_causal(3))
print("with a causal mask, still equivariant?  ", torch.allclose(c[[2, 1, 0]], d, atol=1e-6))

# %% [markdown]
# ### Measured: a trained self-attention layer with and without positions
#
# Equivariance is a property of the untrained layer as much as of a trained one, so training
# cannot remove it. Here is the test. The reversal task of chapter 1 (`course_utils.data`),
# with every string 8 symbols long (from an alphabet of 8), is treated as labelling: the
# output at position $i$ must be the input symbol at position $7 - i$. The model is an
# embedding, your `SelfAttention` layer and a linear read-out to the 8 symbols, trained
# twice for 300 steps of Adam: once as it is, once with a learned vector per position added
# to the embeddings (learned absolute positions; chapter 6 uses sinusoidal
# ones, chapter 5 relative ones). Two controls: whether the model without positions is
# indeed equivariant after training (reverse the input: are its predictions reversed?), and
# the best any equivariant model can do here, computed directly: at each position, guess the
# symbol that is most frequent among the *other* seven.

# %%
# NBVAL_IGNORE_OUTPUT
REV_LEN = 8
rev_pairs = data.make_sequence_pairs(3000, REV_LEN, REV_LEN, task="reverse", n_symbols=8, seed=3)
rev_train, rev_test = data.split(rev_pairs, 500, seed=4)
rev_vocab = data.sequence_vocab(8)
src_train, tgt_train = (torch.tensor([rev_vocab.encode(p[side]) for p in rev_train]) for side in (0, 1))
src_test, tgt_test = (torch.tensor([rev_vocab.encode(p[side]) for p in rev_test]) for side in (0, 1))


class Reverser(nn.Module):
    """Embedding (+ a learned vector per position) -> one self-attention layer -> a symbol per position."""

    def __init__(self, positions, d_model=32):
        super().__init__()
        self.embed = nn.Embedding(len(rev_vocab), d_model)
        self.pos = nn.Parameter(torch.randn(REV_LEN, d_model)) if positions else None
        self.attn = SelfAttentionLayer(d_model)
        self.readout = nn.Linear(d_model, len(rev_vocab))

    def forward(self, src):                                  # src (batch, L) -> logits (batch, L, vocab)
        x = self.embed(src)
        if self.pos is not None:
            x = x + self.pos
        h, weights = self.attn(x)
        return self.readout(h), weights


rev_steps = budget.pick(300, grading=30)
reversal = {}
for positions in (False, True):
    train.set_seed(0)
    model = Reverser(positions)
    batch_rng = torch.Generator().manual_seed(0)
    minibatches = (tuple(t[idx] for t in (src_train, tgt_train))
                   for idx in (torch.randint(len(src_train), (64,), generator=batch_rng) for _ in range(rev_steps)))
    start = time.perf_counter()
    train.fit(model, minibatches, lambda m, b: F.cross_entropy(m(b[0])[0].flatten(0, 1), b[1].flatten()),
              train.TrainConfig(rev_steps, lr=1e-2))   # the course's loop (Adam; it leaves the model in eval mode)
    with torch.no_grad():
        logits, rev_weights = model(src_test)
        flipped_logits, _ = model(src_test.flip(1))
    pred = logits.argmax(-1)
    reversal[positions] = dict(model=model, weights=rev_weights, seconds=time.perf_counter() - start,
                               token=(pred == tgt_test).float().mean().item(),
                               exact=(pred == tgt_test).all(1).float().mean().item(),
                               equivariant=torch.allclose(flipped_logits, logits.flip(1), atol=1e-4))

one_hot = F.one_hot(src_test, len(rev_vocab))                             # (batch, L, vocab)
others = one_hot.sum(1, keepdim=True) - one_hot                           # symbol counts at the other positions
best_guess = (others.argmax(-1) == tgt_test).float().mean().item()
print(f"{'':<26}{'token accuracy':>15}{'exact match':>13}{'reversed input -> reversed output':>35}{'time':>7}")
for positions, r in reversal.items():
    name = "with positions" if positions else "without positions"
    print(f"{name:<26}{r['token']:15.3f}{r['exact']:13.3f}{str(r['equivariant']):>35}{r['seconds']:6.1f}s")
print(f"{'best equivariant guess':<26}{best_guess:15.3f}")
print(f"{'chance (1 of 8 symbols)':<26}{1 / 8:15.3f}")
if not GRADING:
    claims.check("ch03: self-attention with positions learns reversal (exact match)", reversal[True]["exact"],
                 above=0.95)
    assert reversal[False]["equivariant"], "without positions the trained layer must be permutation equivariant"
    assert not reversal[True]["equivariant"], "with positions the trained layer must not be permutation equivariant"
    claims.check("ch03: without positions the layer does no better than the best equivariant guess "
                 "(|token accuracy - best guess|)", abs(reversal[False]["token"] - best_guess), below=0.05)
    claims.check("ch03: without positions almost no sentence is reversed exactly (exact match)",
                 reversal[False]["exact"], below=0.05)

# %% [markdown]
# Without positions the trained layer stays equivariant (reversing the input reverses its
# predictions exactly), its token accuracy, <!-- q:out#without positions -->0.339<!-- /q -->, is the
# best equivariant guess (<!-- q:out#best equivariant guess -->0.342<!-- /q -->), above chance only
# because a symbol that is frequent in the string is a good guess, and its exact match
# is <!-- q:out#without positions -->0.000<!-- /q -->. With learned positions the same layer
# reaches an exact match of <!-- q:out#with positions -->1.000<!-- /q --> on the test strings. What it learned is visible in its
# attention weights: query $i$ looks at key $7 - i$, the anti-diagonal.

# %%
example = 0
_ = plots.plot_attention(reversal[True]["weights"][example],
                         [f"out {i}" for i in range(REV_LEN)],
                         [f"{j}:{s}" for j, s in enumerate(rev_vocab.decode(src_test[example].tolist()))],
                         title="trained with positions: attention weights")
plt.gcf().axes[-1].set_ylabel("attention weight")
plt.show()


# %% [markdown] nbgrader={"grade": false, "grade_id": "q2_order-prompt", "locked": true, "schema_version": 3, "solution": false}
# **Question 2 (2 points).** Chapter 1's reversal task maps `a b c` to `c b a`. Can a model
# built only from (unmasked) self-attention layers and position-wise layers, with no
# information about positions, solve it? Argue from the equivariance of this section, use
# the measurement above, and say what has to be added. Write your answer in the cell below.

# %% [markdown] nbgrader={"grade": true, "grade_id": "q2_order", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# No. Such a model is permutation equivariant: the output at a position depends only on
# the token there and the multiset of all tokens. In `a b c -> c b a` the token `b` (at
# position 1) must output `b`; in `b a c -> c a b` the same token `b` with the same set of
# tokens around it (at position 0) must output `c`. An equivariant model gives `b` the same
# output in both, so it cannot be right on both inputs. The measurement agrees: trained
# without positions, the layer stays exactly equivariant and reaches only the token accuracy
# of the best equivariant guess (<!-- q:out#without positions -->0.339<!-- /q -->
# against <!-- q:out#best equivariant guess -->0.342<!-- /q -->; chance
# is <!-- q:out#chance (1 of 8 symbols) -->0.125<!-- /q -->), with an exact
# match of <!-- q:out#without positions -->0.000<!-- /q -->; the same layer with a learned vector per
# position added to the inputs reaches an exact match of <!-- q:out#with positions -->1.000<!-- /q -->, attending from output $i$ to input $7-i$. So positional
# information must be added: to the inputs (learned or sinusoidal positional encodings,
# chapter 6) or to the scores (relative positions, chapter 5). A
# causal mask also breaks the symmetry (it is how decoder-only models learn some order),
# but alone it is a weak signal of position, and for reversal it hides exactly the
# symbols the first outputs need.
#
# **Rubric** (for the grader, 2 points):
#
# - **1 point** for the answer no, with the permutation-equivariance argument on a concrete pair
#   of inputs in which the same token with the same neighbours must give two different outputs.
# - **1 point** for the measurement (without positions the token accuracy stays at the best
#   equivariant guess and the exact match at zero; with a learned vector per position the layer
#   reverses) and for what adds position (encodings on the inputs, or relative positions in the
#   scores).
# ### END SOLUTION

# %% [markdown]
# ## 11. What attention costs
#
# For a sequence of length $L$ and width $d$, self-attention forms the $L \times L$ score
# matrix: $O(L^2 d)$ operations and $O(L^2)$ memory for the weights, against $O(L d^2)$
# operations for a recurrent layer. But all $L^2$ scores are independent, so attention
# needs $O(1)$ *sequential* steps where a recurrent layer needs $O(L)$: step $t$ cannot
# start before step $t-1$ is done. Vaswani et al. (2017, Table 1) put it as
#
# | layer | operations per layer | sequential operations | longest path between positions |
# |---|---|---|---|
# | self-attention | $O(n^2 d)$ | $O(1)$ | $O(1)$ |
# | recurrent | $O(n d^2)$ | $O(n)$ | $O(n)$ |
# | restricted self-attention (window of $r$) | $O(r n d)$ | $O(1)$ | $O(n/r)$ |
#
# First the sequential steps, counted: the number of tensor operations PyTorch executes for
# the naive attention `softmax(q k^T / sqrt(d)) v` and for chapter 1's recurrence
# `rnn.rnn_forward`, as the length grows (`cost.count_torch_calls` counts them).

# %%
# NBVAL_CHECK_OUTPUT
def naive_attention(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


d = 8
W_xh, W_hh, b_h = torch.randn(d, d), torch.randn(d, d), torch.zeros(d)
op_counts = {}
for L in [8, 16, 32, 64]:
    x = torch.randn(1, L, d)
    op_counts[L] = (cost.count_torch_calls(naive_attention, x, x, x),
                    cost.count_torch_calls(rnn.rnn_forward, x, torch.zeros(1, d), W_xh, W_hh, b_h))
    print(f"L = {L:3d}: attention {op_counts[L][0]:3d} operations, recurrence {op_counts[L][1]:4d}")
assert len({a for a, _ in op_counts.values()}) == 1, 'the operations per step must not depend on L'
assert op_counts[64][1] - op_counts[32][1] == 2 * (op_counts[32][1] - op_counts[16][1]), 'the operations must grow linearly in L'

# %% [markdown]
# Attention's count does not depend on $L$ (each operation just gets bigger and runs in
# parallel inside); the recurrence issues a fixed number of operations per step, $L$ times
# in a row.
#
# Now time and memory, measured for lengths from 128 to 4096 with $d = 64$ (one sequence,
# one head):
#
# * **naive**: `softmax(q k^T / sqrt(d)) v`, which builds the $L\times L$ matrix;
# * **fused**: `F.scaled_dot_product_attention`, which on this CPU runs a "flash attention"
#   kernel: it walks through the keys in blocks and keeps a running softmax, never storing
#   the whole $L\times L$ matrix (it picks that kernel for 4-D `(batch, heads, L, d)` inputs);
# * **fused + window mask**: the same call with a sliding-window mask (each query may see
#   the keys at most 32 positions away, 65 keys): the same result as a local attention;
# * **banded window**: the same sliding window computed without the $L \times L$ matrix:
#   `attention.sliding_window_attention` pads the keys and values, and for each of
#   the 65 offsets compares every query with the key at that offset at once (the keys shifted,
#   a view): 65 scores per query, never $L$;
# * **GRU**: one `nn.GRU(64, 64)` layer, as in chapters 1 and 2.
#
# Time is the median of 5 runs of the forward pass after one warm-up run, on one thread
# (`cost.seconds_per_call`), measured as processor time (`time.process_time`): on a shared
# machine the wall clock also counts the moments when other programs have the processor,
# processor time does not. Memory is what training must keep: the bytes of every tensor
# saved for the backward pass (`cost.saved_bytes`, which records them with
# `torch.autograd.graph.saved_tensors_hooks`). Timings vary between machines and runs, so
# they are printed, not checked; the memory is exact.

# %%
# NBVAL_IGNORE_OUTPUT
lengths = budget.pick([128, 256, 512, 1024, 2048, 4096], grading=[32, 64, 128])
repeats = budget.pick(5, grading=1)
d, radius = 64, 32
gru = nn.GRU(d, d, batch_first=True)
variants = {
    "naive attention": naive_attention,
    "fused attention": F.scaled_dot_product_attention,
    "fused + window mask": lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=attention.sliding_window_mask(q.shape[-2], radius)),
    "banded window": lambda q, k, v: attention.sliding_window_attention(q, k, v, radius)[0],
}
times = {name: [] for name in [*variants, "GRU"]}
memory = {name: [] for name in [*variants, "GRU"]}
with cost.torch_threads(1):
    for L in lengths:
        q, k, v = (torch.randn(1, 1, L, d) for _ in range(3))
        x = torch.randn(1, L, d)
        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        for name, fn in variants.items():
            with torch.no_grad():
                times[name].append(cost.seconds_per_call(fn, q, k, v, repeats=repeats, clock=time.process_time))
            memory[name].append(cost.saved_bytes(fn, qg, kg, vg))
        with torch.no_grad():
            times["GRU"].append(cost.seconds_per_call(gru, x, repeats=repeats, clock=time.process_time))
        memory["GRU"].append(cost.saved_bytes(gru, x))

fig, axes = plt.subplots(1, 2, figsize=(13, 4.4))
_, time_slopes = plots.plot_loglog(lengths, times, ax=axes[0], ylabel="forward processor time (s)")
_, mem_slopes = plots.plot_loglog(lengths, {k: [b / 2**20 for b in v] for k, v in memory.items()}, ax=axes[1],
                                  ylabel="saved for backward (MiB)")
axes[0].set_title("time against length")
axes[1].set_title("memory against length")
for ax in axes:
    ax.set_xticks(lengths, [str(L) for L in lengths])
    ax.minorticks_off()
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
last = lambda series, name: math.log2(series[name][-1] / series[name][-2])     # slope over the last doubling
print("log-log slopes          time (fit)  time (last doubling)  memory (fit)  memory (last doubling)")
for name in times:
    print(f"  {name:<20} {time_slopes[name]:9.2f}  {last(times, name):20.2f}  "
          f"{mem_slopes[name]:12.2f}  {last(memory, name):22.2f}")
print(f"at L = {lengths[-1]}:")
for name in times:
    print(f"  {name:<20} {times[name][-1] * 1e3:8.1f} ms  {memory[name][-1] / 2**20:7.1f} MiB")

# %% [markdown]
# What to read in the plots and the table (the timings differ from run to run and from
# machine to machine; the memory does not):
#
# * **naive and fused attention**: time grows with a fitted slope of about 2 (double $L$,
#   four times the work; the table's first column). Over the last doubling the naive version
#   is steeper (the second column: <!-- q:out#naive attention -->3.19<!-- /q --> in the stored run), because its
#   $L\times L$ matrix (64 MiB at $L = 4096$) no longer fits in the processor's caches and
#   every pass over it goes to main memory. The fused kernel does the same $O(L^2 d)$
#   arithmetic without writing that matrix out, and is several times faster at the longest
#   length (the last lines).
# * **GRU**: slope about 1. On one CPU thread it can still be competitive at these lengths,
#   but its $L$ steps must run one after the other, while attention's work is a few big
#   products that parallel hardware (a GPU) runs at once.
# * **memory**: the naive attention keeps the $L\times L$ weights for the backward pass,
#   slope close to 2 (the $L\times d$ inputs pull it a little below 2 at short lengths); the
#   fused kernel keeps only $q, k, v$, the output and one number per query, slope 1, and
#   recomputes the weights during the backward pass; the GRU keeps a few vectors per step,
#   slope 1 (with a large constant).
# * **a window mask alone saves nothing**: with the mask, the fused call still computes
#   every one of the $L^2$ scores, then throws most of them away; it is *slower* than without
#   a mask (the last lines), and in this version of PyTorch on the CPU it keeps an
#   $L\times L$ tensor for the backward pass (<!-- q:out#fused + window mask -->68.0<!-- /q --> MiB
#   against <!-- q:out#fused attention -->4.0<!-- /q --> MiB at
#   $L = 4096$). The mask changes the *result*, not the cost.
#
# Timings on your machine differ; `make bench` measures these ratios (eager against fused against banded, at one thread and at all threads) side by side in one run, with the machine's own ceilings, see [benchmarks/results/latest.md](../../benchmarks/results/latest.md).
# * **the banded computation** is what saves: time and memory grow linearly (fitted memory
#   slope <!-- q:out#banded window -->0.95<!-- /q -->; time slope about 1 over the last doubling, lower over all
#   lengths, because its 65 offsets cost a fixed number of small operations that dominate short
#   sequences), and at the longest length it is the fastest of the five and
#   keeps <!-- q:out#banded window -->5.3<!-- /q --> MiB, close to the
#   fused kernel.
#
# The memory numbers are exact, and the next cell checks what follows from them: the
# $L\times L$ score matrix itself has exactly $L^2$ entries, a log-log slope of exactly 2,
# and the banded computation gives the masked result.

# %%
# NBVAL_CHECK_OUTPUT
score_entries = [L * L for L in lengths]
entry_slope = np.polyfit(np.log(lengths), np.log(score_entries), 1)[0]
print(f"slope of the score matrix's size: {entry_slope:.2f}")
print("memory grows faster for naive attention than for the fused kernel and the GRU:",
      last(memory, "naive attention") > last(memory, "fused attention") + 0.3
      and last(memory, "naive attention") > last(memory, "GRU") + 0.3)
print("fused attention, banded window and GRU memory are linear in L:",
      all(abs(last(memory, name) - 1) < 0.05 for name in ("fused attention", "banded window", "GRU")))
print("a window mask does not make the fused call's memory linear:", last(memory, "fused + window mask") > 1.5)
q, k, v = (torch.randn(1, 1, 300, 16, dtype=torch.float64) for _ in range(3))
banded, _ = attention.sliding_window_attention(q, k, v, radius)
masked = F.scaled_dot_product_attention(q, k, v, attn_mask=attention.sliding_window_mask(300, radius))
print("banded window equals the masked fused call:", torch.allclose(banded, masked))

# %% [markdown]
# ### Paying less than $L^2$
#
# The quadratic cost has drawn many answers. They fall into a few families:
#
# * **local (sliding-window) attention**: each query sees only the keys within a window of
#   radius $r$; cost $O(L r d)$, linear in $L$. Vaswani et al. (2017, Table 1) list it as
#   restricted self-attention; Luong et al. (2015) had a local attention for RNNs (chapter 2);
#   Longformer (Beltagy et al. 2020) adds a few global tokens to the windows. Measured above.
# * **sparse attention**: fixed sparse patterns (a local window plus strided positions), so
#   that any two positions are linked within two layers at $O(L\sqrt{L})$ cost (the Sparse
#   Transformer, Child et al. 2019).
# * **low-rank and linear attention**: project the $L$ keys and values down to $k \ll L$
#   rows (Linformer, Wang et al. 2020), or replace $\exp(q\cdot k)$ by a product of feature
#   maps $\phi(q)\cdot\phi(k)$, so that $(\phi(Q)\phi(K)^\top)V = \phi(Q)\,(\phi(K)^\top V)$
#   costs $O(L d^2)$ instead of $O(L^2 d)$ (Katharopoulos et al. 2020; the Performer,
#   Choromanski et al. 2021). They are different attention functions, not approximations of
#   softmax attention (except the Performer, whose random features estimate $\exp(q\cdot k)$
#   without bias only in expectation), and they are trained as such.
# * **exact, memory-saving kernels**: compute exactly softmax attention in blocks, with a
#   running softmax, never storing the $L \times L$ matrix (Rabe and Staats 2021;
#   FlashAttention, Dao et al. 2022): memory linear in $L$, time still $O(L^2 d)$ but with
#   far less memory traffic. The fused kernel measured above is one.
#
# The first three change *what* is computed, so a model must be trained with them; the last
# computes the same function faster. The sliding window's price is reach: one layer links
# positions at most $r$ apart, so distant positions need about $L/r$ layers (the path length
# $O(n/r)$ of the table).
#
# ### What the Transformer gains, measured
#
# Three advantages of the Transformer over recurrent sequence-to-sequence models are usually
# named. This chapter has a measurement for each, and a price:
#
# 1. **Parallel computation.** Attention issued 6 operations at every length, the
#    recurrence 515 at $L = 64$, growing with $L$ (the count above). During training
#    the whole target sentence is known, so a Transformer decoder computes every position
#    at once (with a causal mask, section 7), where an RNN decoder, even with teacher forcing,
#    must still run its recurrence step by step. Decoding new text stays one token at a time;
#    chapter 4's key-value cache makes each step cheap.
# 2. **Long-range dependencies.** Every position reads every other in one step: the path
#    between two positions has length 1, whatever their distance. The next cell measures
#    what that means for learning signals: the gradient of the last output of a sequence of
#    64 with respect to each input, for a randomly initialised RNN, GRU and `SelfAttention`
#    layer.
# 3. **Rich representations.** Separate $W_Q$, $W_K$, $W_V$ let a token look for something
#    other than what it offers (section 2); what is usually meant is above all multi-head
#    attention, several patterns side by side, which is chapter 4. A single head, as here,
#    follows one pattern per query, and it needs positions added to use word order at all
#    (section 10).
#
# The price of all three is the $L^2$ cost above.

# %%
L_path, d_path, n_draws = 64, 32, 20
recurrent = {"RNN": nn.RNN(d_path, d_path, batch_first=True), "GRU": nn.GRU(d_path, d_path, batch_first=True)}
attn_layer = SelfAttentionLayer(d_path)
reach = {name: torch.zeros(L_path) for name in [*recurrent, "self-attention"]}
for _ in range(n_draws):
    x = torch.randn(1, L_path, d_path, requires_grad=True)
    outputs = {name: layer(x)[0] for name, layer in recurrent.items()}
    outputs["self-attention"] = attn_layer(x)[0]
    for name, out in outputs.items():
        (grad,) = torch.autograd.grad(out[0, -1].sum(), x)
        reach[name] += grad[0].norm(dim=-1) / n_draws              # (L,): one norm per input position
distance = torch.arange(L_path - 1, -1, -1)                         # how far input j is from the last output
fig, ax = plt.subplots(figsize=(6.5, 3.6))
for name, r in reach.items():
    ax.semilogy(distance[:-1], r[:-1], label=name)                 # distance 0 (the query's own input) left out
ax.set_xlabel("distance from the last position (positions back)")
ax.set_ylabel(r"mean $\|\partial (\sum_k y_{L,k}) / \partial x_j\|$")
ax.set_title("how much of each input reaches the last output")
ax.legend()
plt.show()
print(f"{'':<16}{'1 back':>10}{'8 back':>10}{'63 back':>10}{'ratio 63 / 1':>15}")
for name, r in reach.items():
    at = lambda back: r[L_path - 1 - back].item()
    print(f"{name:<16}{at(1):10.2e}{at(8):10.2e}{at(63):10.2e}{at(63) / at(1):15.2e}")
ratio = {name: r[0].item() / r[L_path - 2].item() for name, r in reach.items()}
claims.check("ch03: little of the input 63 positions back reaches an RNN's last output (ratio to 1 back)",
             ratio["RNN"], below=1e-3)
claims.check("ch03: self-attention reaches 63 positions back about as well as 1 back (ratio)",
             ratio["self-attention"], above=0.3)

# %% [markdown]
# In the recurrent layers the influence of an input fades with every step it must travel:
# the gradient from 63 positions back, divided by the one from 1 position back,
# is <!-- q:out#RNN               1.14 -->0<!-- /q --> (the gradient vanished entirely in float32) for the RNN
# and <!-- q:out#GRU               7.61 -->9.1e-14<!-- /q --> for the GRU at their random initialisation
# (chapter 1 measured the same fading). In self-attention an input 63 positions back reaches
# the last output about as strongly as the previous one
# (ratio <!-- q:out#self-attention    2.12 -->1.23<!-- /q --> in the stored run; <!-- q:tools/claim_spread.md#ch03: self-attention reaches 63 positions back -->0.81 to 1.23<!-- /q --> over
# seeds and CPUs): distance plays no
# role, which is the same fact as the permutation equivariance of section 10.
#
# ## 12. What is still missing
#
# Scaled dot-product attention is now the whole computation of a layer: every position
# reads from every other in one parallel step, with masks for padding and for the future,
# and the same function serves self- and cross-attention. Three things are missing, and
# they open the next chapters:
#
# * **one pattern per layer.** Each query gets one softmax, so one layer can follow one
#   relation at a time (the subject, *or* the previous word, *or* the matching bracket).
#   Chapter 4 runs several smaller attentions side by side (**multi-head**
#   attention), and shares keys and values between heads (MQA, GQA) to shrink the
#   key-value cache that fast decoding needs.
# * **order.** Self-attention is permutation equivariant (section 10): without positions it
#   sees a bag of tokens, and the learned position vectors of section 10 only work for the
#   lengths seen in training. Chapter 5 gives attention relative positions (and
#   shows that heads can then imitate a convolution); chapter 6 adds sinusoidal
#   positional encodings to the inputs.
# * **the rest of a layer.** Attention only mixes positions; it does not transform each
#   position's content much (its output is a linear map of an average of values).
#   Chapter 6 adds the position-wise feed-forward network, residual connections and
#   layer normalisation, and stacks layers into the Transformer.
#
# And the cost stays: $L^2$ time and, without a fused kernel, $L^2$ memory, unless the
# model gives up some of its reach (section 11). That is the price of $O(1)$ sequential
# steps and a path of length 1 between any two positions.
#
# ## References
#
# * Bahdanau, Cho, Bengio (2015). Neural machine translation by jointly learning to align
#   and translate. ICLR. [arXiv:1409.0473](https://arxiv.org/abs/1409.0473)
# * Luong, Pham, Manning (2015). Effective approaches to attention-based neural machine
#   translation. EMNLP. [arXiv:1508.04025](https://arxiv.org/abs/1508.04025)
# * Vaswani et al. (2017). Attention is all you need. NeurIPS.
#   [arXiv:1706.03762](https://arxiv.org/abs/1706.03762) (scaled dot-product attention,
#   eq. 1; the $\sqrt{d_k}$ argument, footnote 4; $W_O$, section 3.2.2; Table 1)
# * Touvron et al. (2023). LLaMA: open and efficient foundation language models.
#   [arXiv:2302.13971](https://arxiv.org/abs/2302.13971) (heads of $d_k = 128$)
# * Beltagy, Peters, Cohan (2020). Longformer: the long-document Transformer.
#   [arXiv:2004.05150](https://arxiv.org/abs/2004.05150) (sliding-window attention)
# * Child, Gray, Radford, Sutskever (2019). Generating long sequences with sparse
#   Transformers. [arXiv:1904.10509](https://arxiv.org/abs/1904.10509)
# * Wang, Li, Khabsa, Fang, Ma (2020). Linformer: self-attention with linear complexity.
#   [arXiv:2006.04768](https://arxiv.org/abs/2006.04768)
# * Katharopoulos, Vyas, Pappas, Fleuret (2020). Transformers are RNNs: fast autoregressive
#   Transformers with linear attention. ICML. [arXiv:2006.16236](https://arxiv.org/abs/2006.16236)
# * Choromanski et al. (2021). Rethinking attention with Performers. ICLR.
#   [arXiv:2009.14794](https://arxiv.org/abs/2009.14794)
# * Rabe, Staats (2021). Self-attention does not need $O(n^2)$ memory.
#   [arXiv:2112.05682](https://arxiv.org/abs/2112.05682)
# * Dao, Fu, Ermon, Rudra, Ré (2022). FlashAttention: fast and memory-efficient exact
#   attention with IO-awareness. NeurIPS. [arXiv:2205.14135](https://arxiv.org/abs/2205.14135)
