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
# # Chapter 4: Multi-head, multi-query and grouped-query attention
#
# *Attention, from Seq2Seq to Transformers*: why one attention head is not enough; splitting
# and merging heads; multi-query (MQA) and grouped-query attention (GQA) as one family; the
# key/value cache that makes generation fast; why MQA and GQA exist (decoding is limited by
# memory, not arithmetic); and turning a trained multi-head model into a GQA one.
#
# **What you will build**: multi-head attention from weight matrices, equal to PyTorch's
# `nn.MultiheadAttention`; `repeat_kv`, the one line that turns MHA into GQA or MQA; one step
# of cached decoding, then the whole cached step of a GQA layer from its weights; the size of a
# KV cache; the mean-pooling conversion of Ainslie et al. The reference versions live in
# `course_utils.multihead` (`MultiHeadAttention`, `repeat_kv`, `cached_attention`,
# `gqa_decode_step`, `mean_pool_kv_heads`) and `course_utils.kvcache` (`KVCache`,
# `kv_cache_bytes`), so a learner stuck here can still go on to chapter 5.
#
# **Exercises** (graded by the test cells below each one): 1 `split_heads`/`merge_heads`
# (2 points), 2 `multi_head_attention` (4), 3 `repeat_kv` (2), 4 `attend_with_cache` (4),
# 4b `gqa_decode_step` (6), 5 `kv_cache_bytes` (2), 6 `mean_pool_heads` (3); two written questions (4).
#
# **The outputs you see first.** Until you run a cell, the output under it is the course's stored
# run, the one this text calls "the stored run". Running the cell replaces it with the output
# of your own run, which can differ from the stored one wherever the text gives a range.

# %%
import math
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from course_utils import (
    attention,
    budget,
    checks,
    claims,
    cost,
    data,
    diagrams,
    families,
    kvcache,
    multihead,
    train,
)
from course_utils.lm import DecoderLM, LMConfig

train.set_seed(0)
GRADING = budget.grading()   # True while nbgrader runs the notebook: experiments shrink
torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# ## 1. What chapter 3 left open: one softmax, one average
#
# Chapter 3 built scaled dot-product attention: query $i$ scores every key, a softmax turns
# the scores into weights $a_{i1}, \dots, a_{in} \ge 0$ that sum to one, and the output is
# $\sum_j a_{ij} v_j$, *one* weighted average of the value vectors. Whatever the query wants,
# it gets a single convex combination.
#
# Suppose position $i$ needs two things at once: the first half of token 1's features
# (say, its part of speech) and the second half of token 3's (say, its number). The target
# is $[v_1^{(:4)}, v_3^{(4:)}]$. One average $\sum_j a_j v_j$ has to spend its weight
# on both tokens, so each half of the result is polluted by the other token. The cell below
# searches for the best weights a single softmax can produce (gradient descent on the
# scores) and compares with two heads of half the width, each with its own softmax.

# %%
# NBVAL_CHECK_OUTPUT
g = torch.Generator().manual_seed(0)
V_demo = torch.randn(5, 8, generator=g, dtype=torch.float64)      # 5 tokens, 8 features
target = torch.cat([V_demo[1, :4], V_demo[3, 4:]])                # half of token 1, half of token 3

logits = torch.zeros(5, dtype=torch.float64, requires_grad=True)  # one head: the best softmax weights
opt = torch.optim.Adam([logits], lr=0.1)
for _ in range(2000):
    loss = ((torch.softmax(logits, 0) @ V_demo - target) ** 2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
one_head_w = torch.softmax(logits, 0).detach()
one_head_err = ((one_head_w @ V_demo - target) ** 2).sum().sqrt().item()

two_heads = torch.cat([V_demo[1, :4], V_demo[3, 4:]])             # head 1 one-hot on token 1 (features 0-3),
two_head_err = (two_heads - target).norm().item()                 # head 2 one-hot on token 3 (features 4-7)
print("best single-head weights:", [round(w, 3) for w in one_head_w.tolist()])
print(f"error of the best single head: {one_head_err:.3f}   (norm of the target: {target.norm().item():.3f})")
print(f"error of two heads of width 4: {two_head_err:.3f}")
claims.check("ch04: no single head hits the two-token target (error of the best head found)", one_head_err,
             above=0.3)
assert two_head_err < 1e-12, "two heads of width 4 must hit the target exactly"

# %% [markdown]
# The best single softmax spreads its weight over the two tokens (and a little elsewhere)
# and misses the target by a large fraction of its size; two heads, each free to put its
# weight on a different token *and* responsible for a different slice of the features, hit
# it exactly. That is the idea of **multi-head attention** (Vaswani et al., 2017, §3.2.2):
# project the input $h$ times into narrower queries, keys and values, attend in each of the
# $h$ subspaces independently, concatenate the $h$ results and mix them with one output matrix:
#
# $$\operatorname{head}_i = \operatorname{Attention}(X W_i^Q,\; X W_i^K,\; X W_i^V),\qquad
#   \operatorname{MultiHead}(X) = \operatorname{Concat}(\operatorname{head}_1, \dots,
#   \operatorname{head}_h)\, W^O,$$
#
# with $W_i^Q, W_i^K, W_i^V \in \mathbb{R}^{d_\text{model} \times d_\text{head}}$,
# $d_\text{head} = d_\text{model} / h$ and $W^O \in \mathbb{R}^{d_\text{model} \times
# d_\text{model}}$. (The heads are often compared to the several kernels of a convolution layer,
# one kernel per head. Chapter 5 makes the relation between the two exact, and it is a different
# one: with relative positions, each head plays one kernel *position* (tap)
# of a single convolution, $K^2$ heads for a $K\times K$ kernel, and the output projection
# sums them.)
#
# **The same matrix products as one wide head.** Because each head is $h$ times narrower, the
# projections cost the same as one full-width head ($4\,n\,d_\text{model}^2$ multiply-adds for $Q$,
# $K$, $V$ and $W^O$ over $n$ tokens), and so do the scores and the weighted sums:
# $h \cdot n^2 d_\text{head} = n^2 d_\text{model}$ each. PyTorch's FLOP counter, which counts
# matrix products, confirms it on the course's `MultiHeadAttention` (one multiply-add = 2 FLOPs).
# Not everything is the same, though: $h$ heads make $h$ matrices of $n \times n$ attention weights
# where one head makes one, so the softmax ($h\,n^2$ exponentials) and the memory those weights take
# (kept for the backward pass) grow $h$-fold; at $n = 128$ and 8 heads that is 8 matrices of
# $128 \times 128$ per sequence instead of one.

# %%
# NBVAL_CHECK_OUTPUT
n_tok, d_model = 128, 256
x_cost = torch.randn(1, n_tok, d_model)
print(" heads  d_head        FLOPs   formula 2*(4 n d^2 + 2 n^2 d)")
for h in (1, 2, 4, 8, 16):
    mha_h = multihead.MultiHeadAttention(d_model, h, bias=False)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        mha_h(x_cost, need_weights=True)            # the explicit computation: every matmul is counted
    formula = 2 * (4 * n_tok * d_model ** 2 + 2 * n_tok ** 2 * d_model)
    print(f"{h:>6} {d_model // h:>7} {counter.get_total_flops():>12,} {formula:>12,}")
    assert counter.get_total_flops() == formula, 'the counted FLOPs must equal 2(4nd^2 + 2n^2 d)'

# %% [markdown]
# ## 2. The worked example, with two heads
#
# Chapter 3's two-token example extends to two heads, and the extension is easy to get wrong.
# Start from $X = \begin{bmatrix}1&2&3&4\\4&3&2&1\end{bmatrix}$ with $Q = V =
# \begin{bmatrix}1&2\\4&3\end{bmatrix}$ and $K = \begin{bmatrix}2&1\\3&4\end{bmatrix}$
# (chapter 3's projections), give both heads the per-head matrices $W^Q_i = W^V_i = I$ and
# $W^K_i = \begin{bmatrix}0&1\\1&0\end{bmatrix}$ applied to those $Q, K, V$ (so both heads are
# the same), and $W^O = I$.
#
# Two common slips. First, writing the full projection as $W_Q = \begin{bmatrix}1&0\\0&1\\1&0\\0&1
# \end{bmatrix}$ does *not* give that $Q$; the $Q$ comes from chapter 3's $W_Q$, with two zero
# rows. Second, a per-head $W^K_i$ that swaps the columns of $K$ swaps them *again*: the head-1
# scores $[[4, 11], [11, 24]]$ usually written for this example are what the un-swapped $K$
# gives. The cell takes those scores ($K_i = K$) and computes the rest exactly.

# %%
# NBVAL_CHECK_OUTPUT
X = torch.tensor([[1., 2, 3, 4], [4, 3, 2, 1]], dtype=torch.float64)
W_Q_wrong = torch.tensor([[1., 0], [0, 1], [1, 0], [0, 1]], dtype=torch.float64)
W_Q3 = torch.tensor([[1., 0], [0, 1], [0, 0], [0, 0]], dtype=torch.float64)   # chapter 3's
W_K3 = torch.tensor([[0., 1], [1, 0], [0, 0], [0, 0]], dtype=torch.float64)
print("X @ (the 4x2 W_Q with rows I, I):", (X @ W_Q_wrong).tolist(), " <- not the Q stated")
Q2, K2, V2 = X @ W_Q3, X @ W_K3, X @ W_Q3
print("Q = V =", Q2.tolist(), "  K =", K2.tolist())
swap = torch.tensor([[0., 1], [1, 0]], dtype=torch.float64)
print("scores with K W^K_i (K swapped again):", (Q2 @ (K2 @ swap).T).tolist(), " <- not [[4, 11], [11, 24]]")

heads = []
for _ in range(2):                                   # two identical heads, as in the example
    scores = Q2 @ K2.T / math.sqrt(2)                # d_head = 2
    w = torch.softmax(scores, dim=-1)
    heads.append(w @ V2)
multi = torch.cat(heads, dim=1) @ torch.eye(4, dtype=torch.float64)   # W_O = I
print("scores:", scores.tolist())
print("weights, row 1:", [round(v, 6) for v in w[0].tolist()], " (not [0.016, 0.984])")
print("MultiHead(X):")
for row in multi.tolist():
    print("   ", [round(v, 4) for v in row])
print("the wrong first row: [3.952, 2.984, 3.952, 2.984]")
assert torch.allclose(multi[0], torch.tensor([3.979, 2.993, 3.979, 2.993], dtype=torch.float64), atol=5e-4), 'worked example: first output row'
assert torch.allclose(multi[1], torch.tensor([3.9997, 2.9999, 3.9997, 2.9999], dtype=torch.float64), atol=5e-5), 'worked example: second output row'


# %% [markdown]
# The softmax row $[0.016, 0.984]$ often given for this example is chapter 3's error carried
# over: the weights are $[0.007035, 0.992965]$, and the first output row is $[3.979, 2.993, 3.979, 2.993]$,
# not $[3.952, 2.984, \dots]$. With identical heads, multi-head attention only repeats
# one head's result; heads are useful because training makes them *different*.
#
# ## 3. Splitting and merging heads
#
# Nobody runs $h$ separate projections. One matrix $W^Q \in \mathbb{R}^{d_\text{model}
# \times d_\text{model}}$ holds all the $W^Q_i$ side by side (head $i$ owns columns
# $i\,d_\text{head}$ to $(i+1)\,d_\text{head} - 1$), so one matrix product computes every
# head's queries at once: `(batch, L, d_model)`. *Splitting* reshapes this to
# `(batch, L, heads, d_head)` and moves the head axis forward, `(batch, heads, L, d_head)`,
# so that chapter 3's batched attention treats `(batch, heads)` as batch dimensions and
# handles all heads in one call. *Merging* undoes it after attention:
# `(batch, heads, L, d_head)` → `(batch, L, heads, d_head)` → `(batch, L, d_model)`, which
# is exactly the concatenation $\operatorname{Concat}(\operatorname{head}_1, \dots,
# \operatorname{head}_h)$. The diagram follows the queries of one sequence of 3 tokens with
# $d_\text{model} = 8$ and 4 heads (colours: the head that owns each column):

# %%
diagrams.draw_split_merge_heads(seq=3, n_heads=4, d_head=2)
plt.show()

# %% [markdown]
# ### Exercise 1: split and merge (1 + 1 points)
#
# Write `split_heads(x, n_heads)` and `merge_heads(x)`. Use `view`/`reshape` and
# `transpose`; a `view` right after a `transpose` fails because the memory is no longer in
# order, which is what `reshape` (or `.contiguous()`) is for.
#
# Rules for every exercise of this chapter (the hidden tests check them over many sizes, not
# only those of the visible tests): tensors are float32 or float64, and what you return keeps
# their dtype; your functions do not change their inputs in place; float32 results are
# compared with a tolerance of about $10^{-5}$, so any sensible order of operations is fine.
# Here any batch size, length and number of heads (1 included, `d_head = 1` included) may
# come in.
#
# <!-- domain: ex1_split split_heads -->
#
# The tests try every kind of input listed here:
# - `x`: float32; float64; a batch of more than 1; a batch of 1; a leaf tensor that requires grad.
# - `n_heads`: 1; more than 1.
# - the inputs come back unchanged.
#
# <!-- /domain -->
#
# <!-- domain: ex1_split merge_heads -->
#
# The tests try every kind of input listed here:
# - `x`: float32; float64; a batch of more than 1; a batch of 1; a leaf tensor that requires grad.
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex1_split", "locked": false, "schema_version": 3, "solution": true}
def split_heads(x, n_heads):
    """``(batch, L, n_heads * d_head)`` -> ``(batch, n_heads, L, d_head)``.

    Head ``h`` gets features ``h * d_head`` to ``(h + 1) * d_head - 1`` of every position.
    """
    ### BEGIN SOLUTION
    b, L, d = x.shape
    return x.view(b, L, n_heads, d // n_heads).transpose(1, 2)
    ### END SOLUTION


def merge_heads(x):
    """``(batch, n_heads, L, d_head)`` -> ``(batch, L, n_heads * d_head)``; undoes ``split_heads``."""
    ### BEGIN SOLUTION
    b, h, L, d = x.shape
    return x.transpose(1, 2).reshape(b, L, h * d)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1_split-visible", "locked": true, "points": 1, "schema_version": 3, "solution": false} tags=["raises-exception"]
_x = torch.arange(2 * 4 * 8.).view(2, 4, 8)          # batch 2, L = 4, 4 heads of d_head 2


def _split_blocks():
    s = checks.call(split_heads, _x, 4)
    checks.expect_shape(s, (2, 4, 4, 2), "split_heads(x of shape (2, 4, 8), 4)")
    checks.expect_equal(s[:, 0], _x[..., 0:2], "head 0 (it must hold features 0 and 1 of every position)")
    checks.expect_equal(s[:, 3], _x[..., 6:8], "head 3 (features 6 and 7)")


def _round_trip():
    s = checks.call(split_heads, _x, 4)
    checks.expect_equal(checks.call(merge_heads, s), _x, "merge_heads(split_heads(x, 4))")


checks.run_checks("split_heads / merge_heads", [
    ("shape and which features each head gets", _split_blocks),
    ("merge undoes split", _round_trip),
])

# %% nbgrader={"grade": true, "grade_id": "ex1_split-hidden", "locked": true, "points": 1, "schema_version": 3, "solution": false}
# Hidden tests: a grid of (batch, L, heads, d_head): L different from, equal to and smaller than the number
# of heads, one head, d_head = 1, batch 1, float32 and float64; split, merge, and both round trips.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(101)
_cases = []
for _dtype in (torch.float32, torch.float64):
    for _b, _L, _h, _dh in [(3, 7, 3, 4), (1, 1, 2, 5), (2, 4, 4, 1), (2, 5, 1, 6), (2, 3, 6, 3), (4, 2, 2, 2)]:
        _x = torch.randn(_b, _L, _h * _dh, generator=_g, dtype=_dtype)
        _y = torch.randn(_b, _h, _L, _dh, generator=_g, dtype=_dtype)
        _cases.append((f"batch {_b}, L={_L}, {_h} heads of {_dh}, {_dtype}", _x, _y, _h))
_xg = torch.randn(2, 3, 6, generator=_g, dtype=torch.float64).requires_grad_()    # leaves that require grad:
_yg = torch.randn(2, 2, 3, 3, generator=_g, dtype=torch.float64).requires_grad_()  # no in-place view ops
_cases.append(("batch 2, L=3, 2 heads of 3, leaves that require grad", _xg, _yg, 2))
### BEGIN EXPECTED
_want_split = [x.reshape(x.shape[0], x.shape[1], h, -1).permute(0, 2, 1, 3) for _, x, _, h in _cases]
_want_merge = [y.permute(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1) for _, _, y, _ in _cases]
### END EXPECTED
_split = [checks.call(split_heads, x, h) for _, x, _, h in _cases]
_merge = [checks.call(merge_heads, y) for _, _, y, _ in _cases]
checks.run_checks("split_heads / merge_heads (hidden)", [
    (f"split, {name}", lambda i=i, name=name: checks.expect_equal(_split[i], _want_split[i], f"split_heads ({name})"))
    for i, (name, *_) in enumerate(_cases)
] + [
    (f"merge, {name}", lambda i=i, name=name: checks.expect_equal(_merge[i], _want_merge[i], f"merge_heads ({name})"))
    for i, (name, *_) in enumerate(_cases)
] + [
    (f"round trips, {name}", lambda i=i, name=name: [
        checks.expect_equal(checks.call(merge_heads, _split[i]), _cases[i][1], f"merge_heads(split_heads(x)) ({name})"),
        checks.expect_equal(checks.call(split_heads, _merge[i], _cases[i][3]), _cases[i][2],
                            f"split_heads(merge_heads(y)) ({name})")])
    for i, (name, *_) in enumerate(_cases)
] + [
    (f"dtypes, {name}", lambda i=i, name=name: [checks.expect_dtype(t, _cases[i][1].dtype, f"{n} ({name})")
                                                for t, n in ((_split[i], "split"), (_merge[i], "merge"))])
    for i, (name, *_) in enumerate(_cases)
])
### END HIDDEN TESTS

# %% [markdown]
# **Batched heads are a loop over heads.** The whole point of splitting is that one batched
# computation does what a Python loop over heads would do. The cell checks it on random
# weights: the loop slices each head's columns out of the big matrices and runs chapter 3's
# attention on each head alone.

# %%
split_used = checks.learner_or_reference(split_heads, multihead.split_heads,
                                         lambda f: f(torch.arange(24.).view(1, 3, 8), 2), "split_heads")
merge_used = checks.learner_or_reference(merge_heads, multihead.merge_heads,
                                         lambda f: f(torch.arange(24.).view(1, 2, 3, 4)), "merge_heads")
g = torch.Generator().manual_seed(1)
B, L, D, H = 2, 6, 16, 4
dh = D // H
x = torch.randn(B, L, D, generator=g)
Wq, Wk, Wv = (torch.randn(D, D, generator=g) / 4 for _ in range(3))

q, k, v = split_used(x @ Wq, H), split_used(x @ Wk, H), split_used(x @ Wv, H)
batched, _ = attention.scaled_dot_product_attention(q, k, v)           # (B, H, L, dh), all heads at once
batched = merge_used(batched)

looped = []
for i in range(H):                                                     # one head at a time
    cols = slice(i * dh, (i + 1) * dh)
    head_i, _ = attention.scaled_dot_product_attention(x @ Wq[:, cols], x @ Wk[:, cols], x @ Wv[:, cols])
    looped.append(head_i)
looped = torch.cat(looped, dim=-1)                                     # Concat(head_1, ..., head_h)
print("largest difference, batched vs loop over heads:", f"{(batched - looped).abs().max().item():.1e}")
assert torch.allclose(batched, looped, atol=1e-6), 'the batched heads must equal the loop over heads'


# %% [markdown]
# ## 4. Multi-head attention from weight matrices
#
# ### Exercise 2: multi-head attention (1 + 3 points)
#
# Write `multi_head_attention(x, context, W_q, W_k, W_v, W_o, n_heads, mask=None)`:
# queries come from `x (batch, L_q, d_model)`, keys and values from
# `context (batch, L_k, d_model)` (pass `context = x` for self-attention). The weight
# matrices are applied on the right, `x @ W_q`, all of shape `(d_model, d_model)`, with no
# biases. Split into `n_heads` heads, run scaled dot-product attention in every head (your
# chapter 3 function or `attention.scaled_dot_product_attention`; note that the scale is
# $1/\sqrt{d_\text{head}}$, the width of a head), merge, and apply `W_o`. `mask` is boolean,
# True = may attend, broadcastable to `(batch, n_heads, L_q, L_k)`: `(batch, 1, 1, L_k)` key
# padding, `(L_q, L_k)`, `(batch, 1, L_q, L_k)`, or a different mask per head
# `(batch, n_heads, L_q, L_k)`. As in chapter 3, masked keys get weight exactly 0 and a query
# whose every key is masked gets zero weights and a zero output (no NaN). Return the output
# `(batch, L_q, d_model)` and the weights `(batch, n_heads, L_q, L_k)`, both in `x`'s dtype.
#
# (Do not call `nn.MultiheadAttention`, `F.multi_head_attention_forward` or
# `multihead.MultiHeadAttention`: the hidden tests check.)
#
# <!-- domain: ex2_mha multi_head_attention -->
#
# The tests try every kind of input listed here:
# - `x`: float32; float64; a batch of more than 1.
# - the arguments together: `context` is `x` (self-attention); `context` of another length than `x` (cross-attention).
# - `n_heads`: 1; more than 1.
# - `mask`: None; a bool tensor.
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex2_mha", "locked": false, "schema_version": 3, "solution": true}
def multi_head_attention(x, context, W_q, W_k, W_v, W_o, n_heads, mask=None):
    """Multi-head attention of ``x`` over ``context``.

    Args:
        x: ``(batch, L_q, d_model)``; context: ``(batch, L_k, d_model)``.
        W_q, W_k, W_v, W_o: ``(d_model, d_model)``, applied as ``x @ W``.
        n_heads: the number of heads; it divides ``d_model``.
        mask: bool, True = may attend, broadcastable to ``(batch, n_heads, L_q, L_k)``, or None.
    Returns:
        ``(out (batch, L_q, d_model), weights (batch, n_heads, L_q, L_k))``.
    """
    ### BEGIN SOLUTION
    q = split_used(x @ W_q, n_heads)
    k = split_used(context @ W_k, n_heads)
    v = split_used(context @ W_v, n_heads)
    out, weights = attention.scaled_dot_product_attention(q, k, v, mask)
    return merge_used(out) @ W_o, weights
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex2_mha-visible", "locked": true, "points": 1, "schema_version": 3, "solution": false} tags=["raises-exception"]
def _reference_mha(x, context, W_q, W_k, W_v, W_o, n_heads, mask=None):
    """The course's module with the same weights (nn.Linear stores W transposed)."""
    m = multihead.MultiHeadAttention(x.shape[-1], n_heads, bias=False).to(x.dtype)
    with torch.no_grad():
        for lin, W in ((m.q_proj, W_q), (m.k_proj, W_k), (m.v_proj, W_v), (m.out_proj, W_o)):
            lin.weight.copy_(W.T)
    return m(x, context=context, mask=mask, need_weights=True)


_g = torch.Generator().manual_seed(2)
_x = torch.randn(2, 5, 8, generator=_g)
_W = [torch.randn(8, 8, generator=_g) / 3 for _ in range(4)]
_want_out, _want_w = _reference_mha(_x, _x, *_W, 2)


def _mha_shapes():
    out, w = checks.call(multi_head_attention, _x, _x, *_W, 2)
    checks.expect_shape(out, (2, 5, 8), "output")
    checks.expect_shape(w, (2, 2, 5, 5), "weights (batch, heads, L_q, L_k)")


def _mha_values():
    out, w = checks.call(multi_head_attention, _x, _x, *_W, 2)
    checks.expect_close(w.sum(-1), torch.ones(2, 2, 5), "each head's weights, summed over keys")
    checks.expect_close(w, _want_w, "weights (is the scale 1/sqrt(d_head) = 1/2 here?)")
    checks.expect_close(out, _want_out, "output (merge the heads, then apply W_o)")


checks.run_checks("multi_head_attention", [
    ("shapes, self-attention, 2 heads", _mha_shapes),
    ("values, self-attention, 2 heads", _mha_values),
])

# %% nbgrader={"grade": true, "grade_id": "ex2_mha-hidden", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# Hidden tests: outputs and weights against a float64 computation over a grid: cross-attention (L_q != L_k),
# 1, 2, 3, 4, 8 heads and d_head = 1, batch 1 to 3, float32 and float64, every kind of mask (none, key
# padding (batch, 1, 1, L_k), (L_q, L_k) random, a causal (L, L) mask with L = n_heads, padded causal
# (batch, 1, L, L), a per-head (batch, heads, L_q, L_k) mask, left padding with fully masked rows);
# no ready-made multi-head attention.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(102)


### BEGIN EXPECTED
def _direct_mha(x, context, W_q, W_k, W_v, W_o, n_heads, mask):
    x, context, W_q, W_k, W_v, W_o = (t.double() for t in (x, context, W_q, W_k, W_v, W_o))
    b, L_q, d = x.shape
    heads = lambda t: t.reshape(b, t.shape[1], n_heads, d // n_heads).permute(0, 2, 1, 3)
    q, k, v = heads(x @ W_q), heads(context @ W_k), heads(context @ W_v)
    s = q @ k.transpose(-2, -1) / math.sqrt(d // n_heads)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return (w @ v).permute(0, 2, 1, 3).reshape(b, L_q, d) @ W_o, w
### END EXPECTED


def _mha_mask(kind, b, h, L_q, L_k):
    if kind == "none":
        return None
    if kind == "key padding (batch, 1, 1, L_k)":
        return attention.key_padding_mask(torch.randint(1, L_k + 1, (b,), generator=_g), L_k)
    if kind == "(L_q, L_k) random":
        return torch.rand(L_q, L_k, generator=_g) < 0.6
    if kind == "causal (L, L)":
        return attention.causal_mask(L_q)
    if kind == "padded causal (batch, 1, L, L)":
        return attention.combine_masks(attention.key_padding_mask(torch.randint(1, L_k + 1, (b,), generator=_g), L_k),
                                       attention.causal_mask(L_q, L_k))
    if kind == "per head (batch, heads, L_q, L_k)":
        return torch.rand(b, h, L_q, L_k, generator=_g) < 0.4
    left = torch.arange(L_k) >= torch.randint(0, L_k, (b, 1, 1, 1), generator=_g)       # left padding
    return left & attention.causal_mask(L_q, L_k)


_cases = []
for _dtype in (torch.float32, torch.float64):
    for _b, _Lq, _Lk, _d, _h, _kind in [
            (2, 3, 6, 8, 4, "key padding (batch, 1, 1, L_k)"), (2, 5, 5, 8, 8, "padded causal (batch, 1, L, L)"),
            (2, 5, 5, 8, 1, "none"), (1, 4, 7, 12, 3, "(L_q, L_k) random"), (2, 4, 4, 8, 4, "causal (L, L)"),
            (2, 3, 5, 6, 2, "per head (batch, heads, L_q, L_k)"), (3, 2, 4, 6, 6, "none"),
            (2, 6, 6, 8, 2, "left padding, fully masked rows")]:
        _xq = torch.randn(_b, _Lq, _d, generator=_g, dtype=_dtype)
        _ctx = _xq if _Lq == _Lk else torch.randn(_b, _Lk, _d, generator=_g, dtype=_dtype)
        _Ws = [torch.randn(_d, _d, generator=_g, dtype=_dtype) / math.sqrt(_d) for _ in range(4)]
        _cases.append((f"batch {_b}, L_q={_Lq}, L_k={_Lk}, d_model={_d}, {_h} heads, {_dtype}, mask: {_kind}",
                       (_xq, _ctx, *_Ws, _h, _mha_mask(_kind, _b, _h, _Lq, _Lk))))
### BEGIN EXPECTED
_want = [_direct_mha(*args) for _, args in _cases]
### END EXPECTED
with checks.forbid(multihead.MultiHeadAttention.forward, (F, "multi_head_attention_forward"),
                   nn.MultiheadAttention.forward):
    _got = [checks.call(multi_head_attention, *args) for _, args in _cases]
checks.run_checks("multi_head_attention (hidden)", [
    (f"output, {name}", lambda i=i, name=name: checks.expect_close(_got[i][0], _want[i][0], f"out ({name})"))
    for i, (name, _) in enumerate(_cases)
] + [
    (f"weights, {name}", lambda i=i, name=name: checks.expect_close(_got[i][1], _want[i][1], f"weights ({name})"))
    for i, (name, _) in enumerate(_cases)
] + [
    (f"dtypes, {name}", lambda i=i, name=name: [checks.expect_dtype(t, _cases[i][1][0].dtype, f"{n} ({name})")
                                                for t, n in zip(_got[i], ("out", "weights"))])
    for i, (name, _) in enumerate(_cases)
] + [
    ("no ready-made multi-head attention", lambda: checks.expect_not_calling(
        multi_head_attention, nn.MultiheadAttention, multihead.MultiHeadAttention, F.multi_head_attention_forward)),
])
### END HIDDEN TESTS

# %% [markdown]
# **Equal to PyTorch.** `course_utils.multihead.MultiHeadAttention` is the same computation as
# a module: `nn.Linear` layers `q_proj`, `k_proj`, `v_proj` and `out_proj` (with biases). PyTorch's
# `nn.MultiheadAttention` packs the three input projections into one `in_proj_weight` of shape
# `(3 d_model, d_model)`; load the same numbers into both and they agree. One trap: PyTorch's
# `nn.MultiheadAttention` and `nn.Transformer` read boolean masks the *other* way round from
# `F.scaled_dot_product_attention` and this course: for them True means *blocked*. Pass them
# `~mask`.

# %%
mha_fn = checks.learner_or_reference(
    multi_head_attention, lambda *a, **k: _reference_mha(*a, **k),
    lambda f: f(_x, _x[:, :3], *_W, 4, attention.key_padding_mask(torch.tensor([3, 2]), 3)),
    "multi_head_attention")
torch.manual_seed(3)
ours = multihead.MultiHeadAttention(16, 4)
theirs = multihead.copy_to_torch(ours, nn.MultiheadAttention(16, 4, batch_first=True))
xs = torch.randn(2, 6, 16)
keep = attention.combine_masks(attention.key_padding_mask(torch.tensor([6, 4]), 6), attention.causal_mask(6))
with torch.no_grad():
    out_ours, w_ours = ours(xs, mask=keep, need_weights=True)
    out_theirs, w_theirs = theirs(xs, xs, xs, attn_mask=~attention.causal_mask(6),          # True = blocked
                                  key_padding_mask=~attention.padding_mask(torch.tensor([6, 4]), 6)[:, 0],
                                  average_attn_weights=False)
    # the function of exercise 2 (yours if it passed the probe) with the same weights; it has
    # no biases, so zero the module's biases for this comparison
    plain = multihead.MultiHeadAttention(16, 4, bias=False)
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        getattr(plain, name).weight.copy_(getattr(ours, name).weight)
    out_plain, _ = plain(xs, mask=keep)
    out_fn, _ = mha_fn(xs, xs, *(getattr(ours, n).weight.T for n in ("q_proj", "k_proj", "v_proj", "out_proj")), 4, keep)
print(f"course module vs nn.MultiheadAttention: output {(out_ours - out_theirs).abs().max().item():.1e}, "
      f"weights {(w_ours - w_theirs).abs().max().item():.1e}")
print(f"multi_head_attention (exercise 2) vs the course module without biases: {(out_fn - out_plain).abs().max().item():.1e}")
assert torch.allclose(out_ours, out_theirs, atol=1e-5) and torch.allclose(w_ours, w_theirs, atol=1e-5), 'MultiHeadAttention must equal nn.MultiheadAttention with the same weights'
assert torch.allclose(out_fn, out_plain, atol=1e-5), 'the functional form must equal the module'


# %% [markdown]
# ## 5. Fewer keys and values: MQA and GQA as one family
#
# Why would anyone give heads fewer keys and values? Not to save parameters (the table below shows
# how little that saves) and not for training speed, but for generation: a model that writes one
# token at a time keeps the keys and values of every earlier token (the *cache* of section 6) and
# reads all of them again at every step, so at long contexts decoding is limited by how many bytes
# of keys and values it must read, not by arithmetic (section 7 measures it). Fewer key/value heads,
# fewer bytes to read. With that motivation, the variants themselves.
#
# In multi-head attention every head has its own keys and values. **Multi-query attention**
# (MQA, Shazeer 2019) keeps $h$ query heads but only *one* key head and one value head,
# shared by all of them. **Grouped-query attention** (GQA, Ainslie et al. 2023) sits in
# between: $g$ key/value heads, each shared by a group of $h/g$ consecutive query heads.
# One parameter, `n_kv_heads` $= g$, covers the family:
#
# | `n_kv_heads` | name | key/value heads | query head $i$ reads key/value head |
# |---|---|---|---|
# | $h$ | MHA | $h$ | $i$ |
# | a divisor $g$ of $h$ | GQA-$g$ | $g$ | $\lfloor i / (h/g) \rfloor$ |
# | 1 | MQA | 1 | 0 |
#
# The picture shows which key/value head each of 8 query heads reads.

# %%
fig, axes = plt.subplots(1, 3, figsize=(14, 2.4))
for ax, (g, name) in zip(axes, [(8, "MHA: 8 key/value heads"), (2, "GQA-2: 2 key/value heads"), (1, "MQA: 1 key/value head")]):
    diagrams.draw_head_groups(ax, 8, g, name)
fig.tight_layout()
plt.show()

# %% [markdown]
# One often reads that MHA "has the most parameters" and MQA "the fewest". That is true of the
# key and value projections only: $W^Q$ and $W^O$ are $d_\text{model} \times
# d_\text{model}$ in all three. The table counts one attention layer's parameters (with
# biases) at a few sizes of real models.

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'d_model':>8} {'heads':>6} {'kv heads':>9} {'Q and O params':>15} {'K and V params':>15} {'total':>13}  vs MHA")
for d_model, h in ((512, 8), (4096, 32), (8192, 64)):
    mha_total = None
    for g in sorted({h, 8, 1}, reverse=True):
        m = multihead.MultiHeadAttention(d_model, h, g) if d_model <= 512 else None
        d_head = d_model // h
        qo = 2 * (d_model * d_model + d_model)
        kv = 2 * (d_model * g * d_head + g * d_head)
        if m is not None:                                # counted from a real module where it is cheap
            assert qo + kv == sum(p.numel() for p in m.parameters()), "the parameter formula must equal the module's count"
        total = qo + kv
        mha_total = mha_total or total
        print(f"{d_model:>8} {h:>6} {g:>9} {qo:>15,} {kv:>15,} {total:>13,}  {total / mha_total:.3f}")


# %% [markdown]
# At $d_\text{model} = 4096$ with 32 heads, GQA-8 keeps <!-- q:out#41,953,280 -->0.625<!-- /q --> of MHA's attention
# parameters and MQA <!-- q:out#34,611,456 -->0.516<!-- /q --> (the last column): never less than half, because the
# query and output projections stay. Models
# that switch to MQA or GQA usually spend the saving elsewhere (Shazeer's MQA model widened its
# feed-forward layers from 4096 to 5440 to keep the parameter count). Parameters are not
# the reason these variants exist; section 7 shows what is.
#
# **Sharing keys and values is one line: `repeat_kv`.** With $g$ key/value heads, the keys
# have shape `(batch, g, L, d_head)`. Repeat each key/value head $h/g$ times *consecutively*
# and every query head finds its partner at the same index: `(batch, h, L, d_head)`; then
# run ordinary multi-head attention.
#
# ### Exercise 3: `repeat_kv` (1 + 1 points)
#
# Write `repeat_kv(x, n_rep)`: `(batch, n_kv_heads, T, d_head)` →
# `(batch, n_kv_heads * n_rep, T, d_head)`, where output head $i$ is input head
# $\lfloor i / n_\text{rep} \rfloor$: the $n_\text{rep}$ copies of a key/value head sit next to
# each other. Mind the order: repeating the whole stack of heads $n_\text{rep}$ times gives
# the right shape and the wrong pairing (section 5 shows what that does). Work on the
# `n_kv_heads` axis only; the other axes must come out as they went in, the dtype too, for any
# `n_rep >= 1` (`n_rep = 1`: MHA, `n_kv_heads = 1`: MQA).
#
# <!-- domain: ex3_repeat_kv repeat_kv -->
#
# The tests try every kind of input listed here:
# - `x`: float32; float64; a batch of more than 1; every head holding different values at different positions.
# - `n_rep`: 1; more than 1.
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex3_repeat_kv", "locked": false, "schema_version": 3, "solution": true}
def repeat_kv(x, n_rep):
    """``(batch, n_kv_heads, T, d_head)`` -> ``(batch, n_kv_heads * n_rep, T, d_head)``;
    output head ``i`` is input head ``i // n_rep``."""
    ### BEGIN SOLUTION
    return x.repeat_interleave(n_rep, dim=1)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex3_repeat_kv-visible", "locked": true, "points": 1, "schema_version": 3, "solution": false} tags=["raises-exception"]
# head j holds 100 j plus the position's number (0 to 5): the head shows in the hundreds, the order within it below
_kv = torch.arange(2.).view(1, 2, 1, 1) * 100 + torch.arange(6.).view(1, 1, 3, 2)


def _repeat_order():
    r = checks.call(repeat_kv, _kv, 3)
    checks.expect_shape(r, (1, 6, 3, 2), "repeat_kv(x of shape (1, 2, 3, 2), 3)")
    got = torch.div(r[0, :, 0, 0], 100, rounding_mode="floor")
    if got.tolist() != [0, 0, 0, 1, 1, 1]:
        raise checks.CheckFailed(f"output heads come from input heads {got.int().tolist()}, expected "
                                 "[0, 0, 0, 1, 1, 1]: repeat each head n_rep times in a row "
                                 "(x.repeat(1, n_rep, 1, 1) gives [0, 1, 0, 1, 0, 1], another model)")


def _within_heads():
    r = checks.call(repeat_kv, _kv, 3)
    for i in range(6):
        checks.expect_equal(r[0, i], _kv[0, i // 3], f"output head {i}: a copy of input head {i // 3}, positions and "
                            "features in their order")


checks.run_checks("repeat_kv", [("shape and which key/value head each query head reads", _repeat_order),
                                ("each copy keeps the positions and features of its head", _within_heads)])

# %% nbgrader={"grade": true, "grade_id": "ex3_repeat_kv-hidden", "locked": true, "points": 1, "schema_version": 3, "solution": false}
# Hidden tests: a grid of (batch, n_kv_heads, T, d_head, n_rep): T != d_head and T == d_head, batch 1 to 3,
# MQA, n_rep = 1, float32 and float64; x unchanged.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(103)
_cases = []
for _dtype in (torch.float32, torch.float64):
    for _b, _kvh, _T, _dh, _rep in [(2, 3, 5, 4, 2), (2, 1, 5, 4, 4), (2, 3, 5, 4, 1), (1, 2, 1, 3, 3),
                                    (3, 4, 2, 2, 2), (2, 2, 6, 3, 3)]:
        _x = torch.randn(_b, _kvh, _T, _dh, generator=_g, dtype=_dtype)
        _cases.append((f"batch {_b}, {_kvh} kv heads, T={_T}, d_head={_dh}, n_rep={_rep}, {_dtype}", _x, _rep))
### BEGIN EXPECTED
_want = [torch.stack([x[:, i // r] for i in range(x.shape[1] * r)], dim=1)    # head i reads head i // n_rep
         for _, x, r in _cases]
### END EXPECTED
_inputs = [x.clone() for _, x, _ in _cases]
_got = [checks.call(repeat_kv, x, r) for _, x, r in _cases]
checks.run_checks("repeat_kv (hidden)", [
    (name, lambda i=i, name=name: checks.expect_equal(_got[i], _want[i], f"repeat_kv ({name})"))
    for i, (name, *_) in enumerate(_cases)
] + [
    (f"dtype, {name}", lambda i=i, name=name: checks.expect_dtype(_got[i], _cases[i][1].dtype, f"repeat_kv ({name})"))
    for i, (name, *_) in enumerate(_cases)
] + [
    ("x unchanged", lambda: [checks.expect_equal(c[1], x0, "x after the call") for c, x0 in zip(_cases, _inputs)]),
])
### END HIDDEN TESTS

# %% [markdown]
# **A GQA split that does not run.** A `split_head` for grouped-query attention that one
# meets in circulation builds the shared keys with `x[:, :, None, :, :].expand(...).reshape(batch, num_heads // group_num,
# group_num, seq_len, head_dim)`. Run as written on the projected keys (3 axes), it fails at once:

# %%
def broken_split_head(x, num_heads, head_dim, group_num):
    """A GQA split_head as it is often written (for the keys and values)."""
    batch_size, seq_len = x.size()[:2]
    x = x[:, :, None, :, :].expand(batch_size, group_num, num_heads, seq_len, head_dim).reshape(
        batch_size, num_heads // group_num, group_num, seq_len, head_dim)
    return x


try:
    broken_split_head(torch.randn(2, 5, 2 * 4), num_heads=8, head_dim=4, group_num=2)
except IndexError as err:
    print("IndexError:", err)

# %% [markdown]
# A natural repair flattens the repeated heads in the other order, `(h/g, g)` instead of
# `(g, h/g)`: the same as `x.repeat(1, h // g, 1, 1)`. It runs, and it has the right shape, but
# it pairs query head $i$ with key/value head $i \bmod g$ instead of $\lfloor i/(h/g) \rfloor$.
# Is that a bug or just another convention? Both are valid *architectures*; the problem is
# that they are different functions of the same weights. Take a GQA layer whose weights
# follow one convention (PyTorch's `enable_gqa=True`, Hugging Face's Llama, this course) and
# run it with the other:

# %%
repeat_used = checks.learner_or_reference(repeat_kv, multihead.repeat_kv,
                                          lambda f: f(torch.arange(120.).view(2, 3, 5, 4), 2), "repeat_kv")
torch.manual_seed(4)
gqa = multihead.MultiHeadAttention(32, 8, n_kv_heads=2).eval()
xg = torch.randn(4, 10, 32)
with torch.no_grad():
    q = multihead.split_heads(gqa.q_proj(xg), 8)
    k = multihead.split_heads(gqa.k_proj(xg), 2)
    v = multihead.split_heads(gqa.v_proj(xg), 2)
    mask = attention.causal_mask(10)
    right, _ = attention.scaled_dot_product_attention(q, repeat_used(k, 4), repeat_used(v, 4), mask)
    strided, _ = attention.scaled_dot_product_attention(q, k.repeat(1, 4, 1, 1), v.repeat(1, 4, 1, 1), mask)
    fused = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
print("query head -> kv head, consecutive:", [i // 4 for i in range(8)])
print("query head -> kv head, strided:    ", [i % 2 for i in range(8)])
print(f"consecutive vs F.sdpa(enable_gqa=True): {(right - fused).abs().max().item():.1e}")
print(f"strided vs F.sdpa(enable_gqa=True):     {(strided - fused).abs().max().item():.2f} "
      f"(the outputs themselves are of size {fused.abs().mean().item():.2f} on average)")
assert torch.allclose(right, fused, atol=1e-6) and not torch.allclose(strided, fused, atol=1e-2), 'repeat_kv must match enable_gqa; the strided grouping must not'

# %% [markdown]
# Heads 0, 2, 5 and 7 happen to get the same partner in both orders; the other four read the
# wrong keys and values. The attention outputs (the heads' outputs, before $W_O$ mixes them)
# differ by up to <!-- q:out#strided vs F.sdpa(enable_gqa=True) -->1.59<!-- /q --> in one entry, where an entry's average absolute
# size is <!-- q:out#strided vs F.sdpa(enable_gqa=True) -->0.23<!-- /q --> (a largest difference against an average size: the point is only that the
# difference is not rounding, it is of the size of the values themselves). A
# checkpoint trained with one grouping cannot be loaded into code that uses the other without
# permuting the query heads. Whenever you move GQA weights between libraries, check the
# grouping, as this course's tests do against `F.scaled_dot_product_attention(..., enable_gqa=True)`.
#
# ## 6. The key/value cache
#
# A decoder generates one token at a time: token $t+1$ depends on tokens $1..t$. Without
# care, step $t$ runs the whole model on all $t$ tokens again, though the keys and values of
# tokens $1..t-1$ have not changed since the previous step (causal attention: earlier
# positions never look at later ones). Generating $T$ tokens then processes
# $1 + 2 + \dots + T = T(T+1)/2$ token positions instead of $T$.
#
# The **KV cache** keeps, for every layer, the keys and values computed so far. Decoding
# becomes:
# 1. **prefill**: run the prompt's $P$ tokens through the model in one batched call (causal
#    mask), storing their keys and values;
# 2. **decode**: for each new token, compute its query, key and value only, append the key
#    and value to the cache, and attend from the one new query over everything cached.
#
# Each row of the diagram is one call of the model on a prompt of 4 tokens and then 3 new ones:
# the work per step is one token's, but the keys and values read grow with every step.

# %%
diagrams.draw_kv_cache(prompt=4, steps=3)
plt.show()

# %% [markdown]
# Two details matter. The cache stores the **un-repeated** `n_kv_heads` keys and values (the
# whole point of GQA and MQA: the cache is $g/h$ of MHA's). And the causal mask of $L_q$ new
# queries over $L_k \ge L_q$ keys must be aligned **bottom-right**: the new queries are the
# *last* $L_q$ positions, so query $i$ may see keys $0..i + (L_k - L_q)$. That is
# `attention.causal_mask(L_q, L_k)`; PyTorch's `is_causal=True` aligns the triangle top-left,
# which is only right when $L_q = L_k$:

# %%
# NBVAL_CHECK_OUTPUT
print("attention.causal_mask(2, 5): the 2 new queries are positions 3 and 4\n", attention.causal_mask(2, 5).int())
print("the mask behind is_causal=True (top-left):\n", torch.ones(2, 5).tril().int())


# %% [markdown]
# ### Exercise 4: one step of cached attention (1 + 3 points)
#
# Write `attend_with_cache(q, k_new, v_new, cache)` for **grouped** heads: `q` is
# `(batch, n_heads, L_new, d_head)`, the new keys and values `(batch, n_kv_heads, L_new,
# d_head)`, and `cache` is `None` or a tuple `(k, v)` of shape `(batch, n_kv_heads, T, d_head)`.
# Append the new keys and values to the cache; attend from the new queries over all
# `T + L_new` keys with the bottom-right causal mask (so a prompt of several tokens, or a
# chunk of them, works too); return `(out, (k, v))` with `out (batch, n_heads, L_new,
# d_head)` and the *un-repeated* updated cache. Use your `repeat_kv` (or
# `multihead.repeat_kv`), `attention.causal_mask` and `attention.scaled_dot_product_attention`.
# Any batch size and any `n_kv_heads` that divides `n_heads` (MHA, GQA, MQA) may come in, and
# any sequence of chunks: a prompt of several tokens, then single tokens or chunks of several.
# `out` has `q`'s dtype (float32 or float64).
#
# <!-- domain: ex4_cache attend_with_cache -->
#
# The tests try every kind of input listed here:
# - `q`: float32; float64; a batch of more than 1.
# - `cache`: None (an empty cache); a `(k, v)` pair.
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex4_cache", "locked": false, "schema_version": 3, "solution": true}
def attend_with_cache(q, k_new, v_new, cache=None):
    """Causal attention of ``L_new`` new positions over the cache plus themselves.

    Args:
        q: ``(batch, n_heads, L_new, d_head)``.
        k_new, v_new: ``(batch, n_kv_heads, L_new, d_head)``.
        cache: None or ``(k, v)``, each ``(batch, n_kv_heads, T, d_head)``.
    Returns:
        ``(out (batch, n_heads, L_new, d_head), (k, v))``, the cache now ``(batch, n_kv_heads, T + L_new, d_head)``.
    """
    ### BEGIN SOLUTION
    if cache is not None:
        k_new = torch.cat([cache[0], k_new], dim=2)
        v_new = torch.cat([cache[1], v_new], dim=2)
    n_rep = q.shape[1] // k_new.shape[1]
    mask = attention.causal_mask(q.shape[2], k_new.shape[2])
    out, _ = attention.scaled_dot_product_attention(q, repeat_used(k_new, n_rep), repeat_used(v_new, n_rep), mask)
    return out, (k_new, v_new)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex4_cache-visible", "locked": true, "points": 1, "schema_version": 3, "solution": false} tags=["raises-exception"]
_g = torch.Generator().manual_seed(4)
_q, _k, _v = torch.randn(2, 4, 6, 3, generator=_g), torch.randn(2, 2, 6, 3, generator=_g), torch.randn(2, 2, 6, 3, generator=_g)
_full, _ = attention.scaled_dot_product_attention(_q, _k.repeat_interleave(2, 1), _v.repeat_interleave(2, 1),
                                                  attention.causal_mask(6))


def _one_step():
    out, cache = checks.call(attend_with_cache, _q[:, :, 5:], _k[:, :, 5:], _v[:, :, 5:], (_k[:, :, :5], _v[:, :, :5]))
    checks.expect_shape(out, (2, 4, 1, 3), "output of one step (batch, n_heads, 1, d_head)")
    checks.expect_shape(cache[0], (2, 2, 6, 3), "the cached keys after the step: un-repeated, 5 + 1 positions")
    checks.expect_close(cache[1], _v, "the cached values (old ones first, then the new one)")
    checks.expect_close(out, _full[:, :, 5:], "output of the last position, vs full causal attention")


def _token_by_token():
    cache, outs = None, []
    for t in range(6):
        out, cache = checks.call(attend_with_cache, _q[:, :, t:t + 1], _k[:, :, t:t + 1], _v[:, :, t:t + 1], cache)
        outs.append(out)
    checks.expect_close(torch.cat(outs, 2), _full, "six single steps from an empty cache, vs full causal attention")


checks.run_checks("attend_with_cache", [("one step from a cache of 5", _one_step), ("token by token", _token_by_token)])

# %% nbgrader={"grade": true, "grade_id": "ex4_cache-hidden", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# Hidden tests: MHA, GQA and MQA, batch 1 to 3, float32 and float64; a prompt of several tokens (prefill)
# from an empty cache, then chunks of several tokens and single tokens on a filled cache (the causal mask
# must be aligned bottom-right); every chunk's output against full causal attention, and the un-repeated
# cache after the last chunk.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(104)


### BEGIN EXPECTED
def _full_causal(q, k, v):
    n_rep = q.shape[1] // k.shape[1]
    k, v = (t.double()[:, :, None].expand(-1, -1, n_rep, -1, -1).flatten(1, 2) for t in (k, v))
    L = q.shape[2]
    s = (q.double() @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(
        torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v
### END EXPECTED


_cases = []
for _dtype in (torch.float32, torch.float64):
    for _b, _h, _kvh, _dh, _chunks in [(1, 6, 1, 4, [4, 3, 1, 1]), (2, 4, 2, 3, [2, 1, 3]), (2, 4, 4, 5, [3, 2]),
                                       (3, 8, 2, 2, [1, 5, 1])]:
        _T = sum(_chunks)
        _q = torch.randn(_b, _h, _T, _dh, generator=_g, dtype=_dtype)
        _k, _v = (torch.randn(_b, _kvh, _T, _dh, generator=_g, dtype=_dtype) for _ in range(2))
        _name = {_h: "MHA", 1: "MQA"}.get(_kvh, f"GQA-{_kvh}")
        _cases.append((f"{_name}, batch {_b}, {_h} heads of {_dh}, chunks {_chunks}, {_dtype}", _q, _k, _v, _chunks))
### BEGIN EXPECTED
_want = [_full_causal(q, k, v) for _, q, k, v, _ in _cases]
_want_cache = [(k, v) for _, _, k, v, _ in _cases]          # the cache holds the keys and values un-repeated
### END EXPECTED


def _decode(q, k, v, chunks):
    outs, cache, t = [], None, 0
    for n in chunks:
        out, cache = checks.call(attend_with_cache, q[:, :, t:t + n], k[:, :, t:t + n], v[:, :, t:t + n], cache)
        outs.append(out)
        t += n
    return outs, cache


_got = [_decode(q, k, v, chunks) for _, q, k, v, chunks in _cases]
checks.run_checks("attend_with_cache (hidden)", [
    (f"outputs of every chunk, {name}", lambda i=i, name=name: checks.expect_close(
        torch.cat(_got[i][0], dim=2), _want[i], f"the chunks' outputs against full causal attention ({name})"))
    for i, (name, *_) in enumerate(_cases)
] + [
    (f"cache after the last chunk, {name}", lambda i=i, name=name: [
        checks.expect_close(_got[i][1][0], _want_cache[i][0], f"cached keys, un-repeated ({name})"),
        checks.expect_close(_got[i][1][1], _want_cache[i][1], f"cached values, un-repeated ({name})")])
    for i, (name, *_) in enumerate(_cases)
] + [
    (f"dtype, {name}", lambda i=i, name=name: checks.expect_dtype(_got[i][0][-1], _cases[i][1].dtype,
                                                                 f"output ({name})"))
    for i, (name, *_) in enumerate(_cases)
])
### END HIDDEN TESTS

# %% [markdown]
# `multihead.MultiHeadAttention` does the same with a `KVCache` object: pass `cache=` and
# `causal=True`, and it projects only the new tokens, appends their keys and values and
# attends over everything cached. Cached decoding must give exactly what a full forward pass
# gives. The cell prefills 5 tokens and then decodes 7 more one by one, for MHA, GQA and MQA,
# and shows what the top-left mask of `is_causal=True` would have done to the prefill of a
# chunk on a non-empty cache.

# %%
cache_fn = checks.learner_or_reference(attend_with_cache, multihead.cached_attention,
                                       lambda f: f(_q[:, :, 3:], _k[:, :, 3:], _v[:, :, 3:], (_k[:, :, :3], _v[:, :, :3])),
                                       "attend_with_cache")
torch.manual_seed(5)
x_seq = torch.randn(2, 12, 32)
for g, name in ((8, "MHA"), (2, "GQA-2"), (1, "MQA")):
    layer = multihead.MultiHeadAttention(32, 8, n_kv_heads=g).eval()
    with torch.no_grad():
        full, _ = layer(x_seq, causal=True)
        cache = kvcache.KVCache()
        steps = [layer(x_seq[:, :5], cache=cache, causal=True)[0]]
        steps += [layer(x_seq[:, t:t + 1], cache=cache, causal=True)[0] for t in range(5, 12)]
        # the same layer through the exercise's function
        q = multihead.split_heads(layer.q_proj(x_seq), 8)
        k = multihead.split_heads(layer.k_proj(x_seq), g)
        v = multihead.split_heads(layer.v_proj(x_seq), g)
        o1, c = cache_fn(q[:, :, :5], k[:, :, :5], v[:, :, :5], None)
        o2, c = cache_fn(q[:, :, 5:], k[:, :, 5:], v[:, :, 5:], c)
        mine = layer.out_proj(multihead.merge_heads(torch.cat([o1, o2], 2)))
        wrong = F.scaled_dot_product_attention(q[:, :, 5:], k, v, is_causal=True, enable_gqa=g < 8)
        wrong = layer.out_proj(multihead.merge_heads(torch.cat([o1, wrong], 2)))
    err = (torch.cat(steps, 1) - full).abs().max().item()
    print(f"{name:>5}: cache holds k of shape {tuple(cache.k.shape)}; cached vs full: {err:.1e}; "
          f"attend_with_cache vs full: {(mine - full).abs().max().item():.1e}; "
          f"chunk with is_causal=True vs full: {(wrong - full).abs().max().item():.2f}")
    assert err < 1e-5 and (mine - full).abs().max() < 1e-5 and (wrong - full).abs().max() > 0.05, 'cached attention must equal the full causal forward; the top-left mask must not'


# %% [markdown]
# ### Exercise 4b: the whole cached GQA step (2 + 4 points)
#
# Exercise 4 was handed the queries, keys and values. A decoder's attention layer starts from the
# new tokens' vectors and its weight matrices, and ends with the output projection: write the
# whole step, `gqa_decode_step(x_new, W_q, W_k, W_v, W_o, n_heads, n_kv_heads, cache=None)`, which
# returns `(out, cache)`. You may call your own `split_heads`, `repeat_kv`, `merge_heads` and
# `attend_with_cache` (while the tests run your step, they use the course's versions of those, so a
# mistake there costs its own exercise only), or write everything out.
#
# - `x_new` is `(batch, L_new, d_model)`, float32 or float64: the vectors of the `L_new` new
#   positions (a prompt, a chunk of several tokens, or one token). `cache` is `None` (nothing seen
#   yet) or the `(k, v)` that the previous call returned, each `(batch, n_kv_heads, T, d_head)`.
# - The weights are applied on the right, `x_new @ W_q`, with no biases; `d_head = d_model //
#   n_heads`; `W_q` and `W_o` are `(d_model, d_model)`, `W_k` and `W_v` are `(d_model, n_kv_heads *
#   d_head)`. Head $j$ is columns $j \cdot d_\text{head}$ to $(j + 1) \cdot d_\text{head}$ of a
#   projection, as in `split_heads`: `n_heads` query heads, `n_kv_heads` key and value heads.
# - Append the new keys and values to the cache's (the old positions first). The cache you return
#   holds the `n_kv_heads` heads, **never the repeated ones**: `(batch, n_kv_heads, T + L_new,
#   d_head)`, in `x_new`'s dtype. Do not change the tensors of the cache you were given (a new
#   tensor, `torch.cat`, is the way).
# - Query head $i$ reads key/value head $\lfloor i / (n_\text{heads} / n_\text{kv\_heads})
#   \rfloor$ (`repeat_kv`'s order). The new queries are the last `L_new` of the `T + L_new`
#   positions: new query $i$ sees positions $0$ to $T + i$ (the bottom-right causal mask). Scores
#   are scaled by $1/\sqrt{d_\text{head}}$, then a softmax over the keys, the average of the values,
#   the heads merged (head $i$ in columns $i \cdot d_\text{head}$ onwards) and `W_o` applied.
# - Return `out (batch, L_new, d_model)` in `x_new`'s dtype, and the new cache `(k, v)`.
# - Raise `ValueError` before any computing when `x_new` is not 3-D; when `n_kv_heads` does not
#   divide `n_heads` or `n_heads` does not divide `d_model`; when a weight has another shape than the
#   ones above; when the cache's keys or values are not `(batch, n_kv_heads, T, d_head)` with this
#   step's batch and `d_head` (a cache of the repeated heads, say), or the keys and values differ in
#   shape. The message names what is wrong: `x_new`; `n_heads` or `n_kv_heads`; the weight (`W_q`,
#   `W_k`, `W_v` or `W_o`); `cache`. (A `ValueError` that Python raises by itself, "not enough
#   values to unpack", names none of them.)
#
# The tests decode sequences chunk by chunk and compare every chunk's output with the whole sequence
# run at once through causal GQA (in float64), and every cache with the un-repeated keys and values.
#
# <!-- domain: ex4b_decode_step gqa_decode_step -->
#
# The tests try every kind of input listed here:
# - `x_new`: float32; float64; a batch of more than 1; a batch of 1.
# - the arguments together: `n_kv_heads` = `n_heads` (MHA); 1 < `n_kv_heads` < `n_heads` (GQA); `n_kv_heads` = 1 < `n_heads` (MQA); a prompt of several tokens on an empty cache; one new token on a filled cache; a chunk of several tokens on a filled cache (the mask aligned bottom-right).
# - `cache`: None (an empty cache); a `(k, v)` pair.
# - must raise: `x_new` not 3-D: ValueError; `n_kv_heads` not dividing `n_heads`, or `n_heads` not dividing `d_model`: ValueError; a weight of the wrong shape: ValueError; a cache of other than `n_kv_heads` heads (the repeated ones): ValueError; a cache whose batch or `d_head` is not the step's, or whose `k` and `v` disagree: ValueError.
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex4b_decode_step", "locked": false, "schema_version": 3, "solution": true}
def gqa_decode_step(x_new, W_q, W_k, W_v, W_o, n_heads, n_kv_heads, cache=None):
    """One cached step of a grouped-query attention layer.

    Args:
        x_new: ``(batch, L_new, d_model)``, the new positions.
        W_q, W_o: ``(d_model, d_model)``; W_k, W_v: ``(d_model, n_kv_heads * d_head)``; applied as ``x @ W``.
        n_heads, n_kv_heads: query heads and key/value heads (``n_kv_heads`` divides ``n_heads``).
        cache: None or ``(k, v)``, each ``(batch, n_kv_heads, T, d_head)``.
    Returns:
        ``(out (batch, L_new, d_model), (k, v))``, the cache ``(batch, n_kv_heads, T + L_new, d_head)``.
    """
    ### BEGIN SOLUTION
    if x_new.dim() != 3:
        raise ValueError(f"x_new must be (batch, L_new, d_model), got shape {tuple(x_new.shape)}")
    batch, L_new, d_model = x_new.shape
    if n_heads % n_kv_heads != 0 or d_model % n_heads != 0:
        raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}, "
                         f"and n_heads must divide d_model={d_model}")
    d_head = d_model // n_heads              # the width of one head
    for name, w, cols in (("W_q", W_q, d_model), ("W_k", W_k, n_kv_heads * d_head),
                          ("W_v", W_v, n_kv_heads * d_head), ("W_o", W_o, d_model)):
        if tuple(w.shape) != (d_model, cols):
            raise ValueError(f"{name} must be ({d_model}, {cols}), got {tuple(w.shape)}")
    # 1. project the new positions and split them into heads: (batch, heads, L_new, d_head)
    q = (x_new @ W_q).view(batch, L_new, n_heads, d_head).permute(0, 2, 1, 3)
    k = (x_new @ W_k).view(batch, L_new, n_kv_heads, d_head).permute(0, 2, 1, 3)
    v = (x_new @ W_v).view(batch, L_new, n_kv_heads, d_head).permute(0, 2, 1, 3)
    # 2. append them to the cache, un-repeated
    if cache is not None:
        k_old, v_old = cache
        want = (batch, n_kv_heads, k_old.shape[2], d_head)
        if tuple(k_old.shape) != want or tuple(v_old.shape) != want:
            raise ValueError(f"the cache's k and v must both be {want} (n_kv_heads={n_kv_heads} heads, never "
                             f"the repeated ones), got {tuple(k_old.shape)} and {tuple(v_old.shape)}")
        k = torch.cat([k_old, k], dim=2)
        v = torch.cat([v_old, v], dim=2)
    # 3. every query head reads its group's key/value head; the new queries are the last L_new positions
    n_rep = n_heads // n_kv_heads
    scores = q @ repeat_used(k, n_rep).mT / math.sqrt(d_head)
    scores = torch.where(attention.causal_mask(L_new, k.shape[2]), scores, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ repeat_used(v, n_rep)
    # 4. merge the heads (head i in columns i * d_head onwards) and project
    out = out.permute(0, 2, 1, 3).reshape(batch, L_new, d_model)
    return out @ W_o, (k, v)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex4b_decode_step-visible", "locked": true, "points": 2, "schema_version": 3, "solution": false} tags=["raises-exception"]
# a GQA layer: d_model 8, 4 query heads and 2 key/value heads of d_head 2; a batch of 2 sequences of 6
_g = torch.Generator().manual_seed(41)
_x4b = torch.randn(2, 6, 8, generator=_g)
_W4b = [torch.randn(8, cols, generator=_g) / math.sqrt(8) for cols in (8, 4, 4, 8)]   # W_q, W_k, W_v, W_o


def _full_gqa(x, W_q, W_k, W_v, W_o, n_heads, n_kv_heads):
    """What the tests compare with: the whole sequence at once, causal, in float64 (PyTorch's GQA attention)."""
    x, W_q, W_k, W_v, W_o = (t.double() for t in (x, W_q, W_k, W_v, W_o))
    q, k, v = (multihead.split_heads(x @ W, n) for W, n in ((W_q, n_heads), (W_k, n_kv_heads), (W_v, n_kv_heads)))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return multihead.merge_heads(out) @ W_o


_want4b = _full_gqa(_x4b, *_W4b, 4, 2)


def _decode4b(chunks):
    outs, cache, t = [], None, 0
    for n in chunks:
        out, cache = checks.call(gqa_decode_step, _x4b[:, t:t + n], *_W4b, 4, 2, cache)
        outs.append(out)
        t += n
    return outs, cache


def _prompt4b():
    out, (k, v) = checks.call(gqa_decode_step, _x4b[:, :4], *_W4b, 4, 2)
    checks.expect_shape(out, (2, 4, 8), "out of a prompt of 4 tokens: (batch, L_new, d_model)")
    checks.expect_shape(k, (2, 2, 4, 2), "the cached keys: (batch, n_kv_heads, T, d_head), 2 heads, not the 4 repeated")
    checks.expect_close(k, multihead.split_heads(_x4b[:, :4] @ _W4b[1], 2), "the cached keys: x_new @ W_k in 2 heads")
    checks.expect_close(v, multihead.split_heads(_x4b[:, :4] @ _W4b[2], 2), "the cached values: x_new @ W_v in 2 heads")
    checks.expect_close(out, _want4b[:, :4], "out of the prompt vs the whole sequence at once")


def _tokens4b():
    outs, (k, _) = _decode4b([3, 1, 1, 1])
    checks.expect_shape(k, (2, 2, 6, 2), "the cached keys after 3 + 1 + 1 + 1 positions")
    checks.expect_close(torch.cat(outs, 1), _want4b, "a prompt of 3, then 3 single tokens, vs the whole sequence at once")


def _chunk4b():
    outs, _ = _decode4b([3, 3])
    checks.expect_close(outs[1], _want4b[:, 3:], "a chunk of 3 on a cache of 3: new query i sees positions 0 to 3 + i "
                        "(the bottom-right mask; a top-left one, is_causal=True, hides the cache)")


def _raises_naming(args, names, what):
    """gqa_decode_step(*args) must raise ValueError, its message naming one of ``names``."""
    try:
        checks.call(gqa_decode_step, *args)
    except ValueError as err:
        if not any(n in str(err) for n in names):
            checks.expect_equal(str(err), f"a message naming {' or '.join(names)}", f"the ValueError for {what}")
        return
    checks.expect_equal("returned", "raised ValueError", f"gqa_decode_step with {what}")


def _raises4b():
    repeated = torch.zeros(2, 4, 3, 2)                     # a cache of the 4 repeated heads
    _raises_naming((_x4b, _W4b[0], torch.randn(8, 6), torch.randn(8, 6), _W4b[3], 4, 3), ("n_heads", "n_kv_heads"),
                   "n_heads=4, n_kv_heads=3 (W_k and W_v of 3 heads of 2)")
    _raises_naming((_x4b[:, 3:4], *_W4b, 4, 2, (repeated, repeated)), ("cache",), "a cache of 4 heads where n_kv_heads=2")


checks.run_checks("gqa_decode_step", [
    ("a prompt on an empty cache: shapes, the un-repeated cache, the output", _prompt4b),
    ("a prompt, then one token at a time", _tokens4b),
    ("a chunk of several tokens on a filled cache", _chunk4b),
    ("ValueError for heads that do not divide, and for a cache of repeated heads", _raises4b),
])

# %% nbgrader={"grade": true, "grade_id": "ex4b_decode_step-hidden", "locked": true, "points": 4, "schema_version": 3, "solution": false}
# Hidden tests: MHA, GQA (2, 3 and 4 query heads per key/value head) and MQA, batch 1 to 3, float32 and
# float64, d_head 2 to 3; each sequence decoded in chunks (a prompt, single tokens, chunks of several on a
# filled cache): every chunk's output against the whole sequence through causal GQA (float64), the cache
# after every chunk against the un-repeated keys and values, the dtypes; every declared bad input raises.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(141)
# (batch, d_model, n_heads, n_kv_heads, chunks, dtype)
_cases4b = [(1, 12, 6, 1, (4, 1, 1), torch.float64), (2, 8, 4, 4, (2, 3, 1), torch.float32),
            (3, 16, 8, 2, (1, 4, 2, 1), torch.float64), (2, 12, 6, 3, (5, 2), torch.float32),
            (2, 18, 6, 2, (3, 1, 3), torch.float64)]
_in4b = []
for _b, _d, _h, _kvh, _chunks, _dt in _cases4b:
    _cols = (_d, _kvh * (_d // _h), _kvh * (_d // _h), _d)
    _in4b.append((torch.randn(_b, sum(_chunks), _d, generator=_g, dtype=torch.float64).to(_dt),
                  [(torch.randn(_d, c, generator=_g, dtype=torch.float64) / math.sqrt(_d)).to(_dt) for c in _cols]))


### BEGIN EXPECTED
def _whole4b(x, Ws, h, g):
    x, (W_q, W_k, W_v, W_o) = x.double(), [W.double() for W in Ws]
    b, L, d = x.shape
    q = (x @ W_q).view(b, L, h, d // h).transpose(1, 2)
    k, v = ((x @ W).view(b, L, g, d // h).transpose(1, 2) for W in (W_k, W_v))
    kr, vr = (t[:, :, None].expand(-1, -1, h // g, -1, -1).flatten(1, 2) for t in (k, v))
    s = (q @ kr.transpose(-2, -1) / math.sqrt(d // h)).masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1),
                                                                   float("-inf"))
    return (torch.softmax(s, -1) @ vr).transpose(1, 2).reshape(b, L, d) @ W_o, k, v


_wants4b = [_whole4b(x, Ws, c[2], c[3]) for (x, Ws), c in zip(_in4b, _cases4b)]
### END EXPECTED


def _case4b(r):
    b, d, h, kvh, chunks, dt = _cases4b[r]
    x, Ws = _in4b[r]
    what = f"case {r}: batch {b}, d_model {d}, {h} heads, {kvh} kv heads, chunks {chunks}, {str(dt)[6:]}"
    cache, t = None, 0
    for n in chunks:
        out, cache = checks.call(gqa_decode_step, x[:, t:t + n], *Ws, h, kvh, cache)
        checks.expect_equal((out.dtype, cache[0].dtype, cache[1].dtype), (dt, dt, dt), f"{what}: dtypes of out, k, v")
        checks.expect_close(out, _wants4b[r][0][:, t:t + n], f"{what}: out of positions {t} to {t + n - 1}")
        t += n
        checks.expect_close(cache[0], _wants4b[r][1][:, :, :t], f"{what}: cached keys after {t} positions, un-repeated")
        checks.expect_close(cache[1], _wants4b[r][2][:, :, :t], f"{what}: cached values after {t} positions, un-repeated")


def _raises4b_hidden(r):
    gen = torch.Generator().manual_seed(142)
    x = torch.randn(2, 3, 12, generator=gen)
    W = {c: torch.randn(12, c, generator=gen) for c in (2, 4, 6, 8, 12)}   # d_model 12
    ok = [W[12], W[4], W[4], W[12]]                                       # 6 heads of 2, n_kv_heads = 2
    kv = torch.zeros(2, 2, 5, 2)
    bad = [("x_new of 2 axes", (x[0], *ok, 6, 2), ("x_new",)),
           ("n_heads=6, n_kv_heads=4 (W_k, W_v of 4 heads of 2)", (x, W[12], W[8], W[8], W[12], 6, 4), ("n_heads", "n_kv_heads")),
           ("n_heads=5 with d_model 12", (x, W[12], W[2], W[2], W[12], 5, 1), ("n_heads", "n_kv_heads")),
           ("W_q of 6 columns", (x, W[6], W[4], W[4], W[12], 6, 2), ("W_q",)),
           ("W_k of MHA's shape", (x, W[12], W[12], W[4], W[12], 6, 2), ("W_k",)),
           ("W_v of 3 kv heads", (x, W[12], W[4], W[6], W[12], 6, 2), ("W_v",)),
           ("W_o of 4 columns", (x, W[12], W[4], W[4], W[4], 6, 2), ("W_o",)),
           ("a cache of the 6 repeated heads", (x, *ok, 6, 2, (torch.zeros(2, 6, 5, 2),) * 2), ("cache",)),
           ("a cache whose keys have 6 heads", (x, *ok, 6, 2, (torch.zeros(2, 6, 5, 2), kv)), ("cache",)),
           ("a cache whose values have 1 head", (x, *ok, 6, 2, (kv, torch.zeros(2, 1, 5, 2))), ("cache",)),
           ("a cache of another batch", (x, *ok, 6, 2, (torch.zeros(1, 2, 5, 2),) * 2), ("cache",)),
           ("a cache of another d_head", (x, *ok, 6, 2, (torch.zeros(2, 2, 5, 3),) * 2), ("cache",)),
           ("a cache whose k and v differ in length", (x, *ok, 6, 2, (kv, torch.zeros(2, 2, 4, 2))), ("cache",))]
    what, args, names = bad[r]
    _raises_naming(args, names, what=what)


checks.run_checks("gqa_decode_step (hidden)", [
    *((f"case {r}: {_cases4b[r][2]} heads, {_cases4b[r][3]} kv heads, chunks {_cases4b[r][4]}",
       lambda r=r: _case4b(r)) for r in range(len(_cases4b))),
    *((f"bad input {r}", lambda r=r: _raises4b_hidden(r)) for r in range(13)),
])
### END HIDDEN TESTS

# %% [markdown]
# The cell below checks your `gqa_decode_step` on a probe (GQA with 4 query heads per key/value head,
# a prompt, a token and a chunk) and, if it agrees with the course's `multihead.gqa_decode_step`,
# decodes with it: the weights of a GQA layer `multihead.MultiHeadAttention(32, 8, n_kv_heads=2)`,
# a prompt of 5 positions and then 7 positions one at a time, against the layer's whole causal pass.

# %%
def _probe_step(fn):  # float64, 8 query heads over 2 key/value heads: a prompt of 3, one token, a chunk of 2
    g = torch.Generator().manual_seed(14)
    x = torch.randn(2, 6, 16, generator=g, dtype=torch.float64)
    Ws = [torch.randn(16, c, generator=g, dtype=torch.float64) / 4 for c in (16, 4, 4, 16)]
    outs, cache = [], None
    for a, b in ((0, 3), (3, 4), (4, 6)):
        out, cache = fn(x[:, a:b], *Ws, 8, 2, cache)
        outs.append(out)
    return torch.cat(outs, 1), cache


step_fn = checks.learner_or_reference(gqa_decode_step, multihead.gqa_decode_step, _probe_step, "gqa_decode_step")
torch.manual_seed(6)
layer = multihead.MultiHeadAttention(32, 8, n_kv_heads=2, bias=False).eval()
W = [m.weight.T for m in (layer.q_proj, layer.k_proj, layer.v_proj, layer.out_proj)]   # x @ W = m(x)
x_seq = torch.randn(2, 12, 32)
with torch.no_grad():
    full, _ = layer(x_seq, causal=True)
    out, cache = step_fn(x_seq[:, :5], *W, 8, 2)                      # the prompt: 5 positions at once
    outs = [out]
    for t in range(5, 12):                                            # then one position per step
        out, cache = step_fn(x_seq[:, t:t + 1], *W, 8, 2, cache)
        outs.append(out)
err = (torch.cat(outs, 1) - full).abs().max().item()
print(f"prompt of 5, then 7 single steps vs the layer's whole causal pass: max |difference| = {err:.1e}")
print(f"the cache holds k and v of shape {tuple(cache[0].shape)}: {2 * cache[0].numel()} numbers, "
      f"where repeated heads would take {2 * cache[0].numel() * 4}")
assert err < 1e-5 and cache[0].shape == (2, 2, 12, 4), "the cached steps must equal the whole causal pass"

# %% [markdown]
# Each step reads the keys and values of every earlier position from the cache and appends its own;
# the outputs are the whole pass's, up to rounding. The cache keeps the 2 key/value heads, not the 8
# that attention reads: that ratio, $g/h$, is what section 7 turns into bytes and time per token.

# %% [markdown]
# ## 7. Why MQA and GQA exist: decoding is memory-bound
#
# **Shazeer's argument** (2019, §2.4 and §3.1). Count, per step, the bytes an attention layer
# must read from memory against the arithmetic it does with them. In his notation $d$ is
# $d_\text{model}$, $h$ the number of heads, $k = d/h$ the width of a key (and of a value),
# $n$ the number of tokens and $b$ the batch. In training, or when a whole sequence is processed
# at once, each weight and each key is used by many queries: the ratio of memory accesses to
# arithmetic is $\Theta(1/k + 1/(bn))$, small, so the processor computes at full speed. In incremental
# decoding with MHA, each step reads the whole cache of $n$ keys and values, of all $h$ heads,
# for a single query per sequence: the ratio becomes $\Theta(n/d + 1/b)$, and once the
# context $n$ is comparable to $d$, moving the cache dominates. With one shared key/value
# head (MQA) the cache is $h$ times smaller and the term becomes $\Theta(1/d + n/(dh) + 1/b)$.
# His measurements (TPUv2, a 211M-parameter translation model, µs per output token):
#
# | model | training | greedy decoding, encoder + decoder | beam 4, encoder + decoder |
# |---|---|---|---|
# | MHA | 13.2 | 1.7 + 46 | 2.0 + 203 |
# | MQA | 13.0 | 1.5 + 3.8 | 1.6 + 32 |
#
# Training time is the same; the decoder is 12× faster with greedy decoding. The quality
# cost was small (BLEU 26.7 → 26.5 on the dev set); GQA (Ainslie et al. 2023) recovers most of
# it with a few key/value heads: their T5-XXL with 8 groups scored 47.1 against MHA's 47.2 and
# MQA's 46.6, at 0.28 s per sample against 1.51 s (MHA) and 0.24 s (MQA). Their GQA and MQA
# models were not trained from scratch: they are the MHA T5-XXL checkpoint, converted and
# uptrained for 5 % of its pre-training steps (section 8 does the same on a small model).
#
# **The size of the cache.** Per token, per layer, the cache holds one key and one value
# vector of $d_\text{head}$ numbers for each key/value head.
#
# ### Exercise 5: KV-cache bytes (1 + 1 points)
#
# Write `kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_value=2)`:
# the bytes of the cache of `batch` sequences of `seq_len` tokens, with values stored in
# `bytes_per_value` bytes (2 for float16 or bfloat16, 4 for float32). Return a Python `int`
# (exact, however large), and keep the arguments in this order: the tests pass them by
# position as well as by keyword, and leave the defaults out.
#
# <!-- domain: ex5_kv_bytes kv_cache_bytes -->
#
# The tests try every kind of input listed here:
# - `n_layers`: a Python int.
# - `seq_len`: a Python int.
# - `bytes_per_value`: 1; 2; 4.
# - the arguments together: sizes whose product passes 2**53; sizes whose product passes 2**63 (a Python int stays exact).
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex5_kv_bytes", "locked": false, "schema_version": 3, "solution": true}
def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_value=2):
    """Bytes held by the key/value cache of a decoder (keys and values, every layer)."""
    ### BEGIN SOLUTION
    return 2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_value
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex5_kv_bytes-visible", "locked": true, "points": 1, "schema_version": 3, "solution": false} tags=["raises-exception"]
def _one_token():
    got = checks.call(kv_cache_bytes, 32, 32, 128, 1)
    if got != 524288:
        hint = " (did you count the values as well as the keys?)" if got == 262144 else ""
        raise checks.CheckFailed(f"32 layers, 32 heads of 128, one token, float16: expected 524288 bytes "
                                 f"(512 KiB), got {got}{hint}")


def _float32_tokens():
    got = checks.call(kv_cache_bytes, 2, 4, 16, 10, bytes_per_value=4)
    checks.expect_equal(got, 2 * 2 * 4 * 16 * 10 * 4, "2 layers, 4 kv heads of 16, 10 tokens, float32")
    checks.expect_equal(type(got).__name__, "int", "the type of the result")


checks.run_checks("kv_cache_bytes", [("one token of a 7B-sized MHA model", _one_token), ("float32, 10 tokens", _float32_tokens)])

# %% nbgrader={"grade": true, "grade_id": "ex5_kv_bytes-hidden", "locked": true, "points": 1, "schema_version": 3, "solution": false}
# Hidden tests: a seeded grid of sizes (batch > 1, GQA, MQA, 1, 2 and 4 bytes per value, numbers past 2**53,
# 2**63 and 2**128),
# by position and by keyword, defaults left out; a Python int every time.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(105)
_cases = [((80, 8, 128, 4096), {"batch": 16}), ((1, 1, 1, 1, 3, 4), {}),
          ((95, 97, 255, 99_999_999, 63, 1), {}),                                   # past 2**53
          ((1000, 1000, 1000, 10**7, 1000, 4), {}),                                 # past 2**63
          ((), {"n_layers": 10**6, "n_kv_heads": 10**6, "d_head": 10**6, "seq_len": 10**6,
                "batch": 10**6, "bytes_per_value": 4})]                             # past 2**128
for _i in range(12):
    _n = [int(v) for v in torch.randint(1, 97, (6,), generator=_g)]
    _bpv = (1, 2, 4)[_i % 3]
    if _i % 4 == 0:
        _cases.append(((_n[0], _n[1], _n[2], _n[3], _n[4], _bpv), {}))
    elif _i % 4 == 1:
        _cases.append(((), {"n_layers": _n[0], "n_kv_heads": _n[1], "d_head": _n[2], "seq_len": _n[3],
                            "batch": _n[4], "bytes_per_value": _bpv}))
    elif _i % 4 == 2:
        _cases.append(((_n[0], _n[1], _n[2], _n[3]), {"bytes_per_value": _bpv}))   # batch left out
    else:
        _cases.append(((_n[0], _n[1], _n[2], _n[3], _n[4]), {}))                    # 2 bytes by default
### BEGIN EXPECTED
def _ref_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_value=2):
    return 2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_value


_want = [_ref_bytes(*a, **kw) for a, kw in _cases]
_want_type = "int"
### END EXPECTED
_got = [checks.call(kv_cache_bytes, *a, **kw) for a, kw in _cases]
checks.run_checks("kv_cache_bytes (hidden)", [
    (f"kv_cache_bytes(*{a}, **{kw})", lambda i=i: checks.expect_equal(_got[i], _want[i], "bytes"))
    for i, (a, kw) in enumerate(_cases)
] + [
    ("a Python int every time", lambda: [checks.expect_equal(type(r).__name__, _want_type, "the type of the result")
                                         for r in _got]),
])
### END HIDDEN TESTS

# %% [markdown]
# The table uses your function (once it agrees with the reference) on two real shapes: a
# 7B-parameter model (32 layers, 32 query heads of 128) and a 70B one (80 layers, 64 query
# heads of 128), in float16, for one sequence of 4096 tokens. The cache is exactly $g/h$ of
# MHA's; the last lines check the formula against the bytes of the course's `KVCache`.

# %%
# NBVAL_CHECK_OUTPUT
bytes_fn = checks.learner_or_reference(kv_cache_bytes, kvcache.kv_cache_bytes,
                                       lambda f: f(3, 2, 8, 5, batch=2, bytes_per_value=4), "kv_cache_bytes")
print(f"{'model':>5} {'kind':>6} {'kv heads':>9} {'KiB per token':>14} {'GiB at 4096 tokens':>19} {'/ MHA':>7}")
for name, layers, h in (("7B", 32, 32), ("70B", 80, 64)):
    for g in (h, 8, 1):
        per_token = bytes_fn(layers, g, 128, 1)
        kind = "MHA" if g == h else "MQA" if g == 1 else f"GQA-{g}"
        ratio = per_token / bytes_fn(layers, h, 128, 1)
        print(f"{name:>5} {kind:>6} {g:>9} {per_token / 1024:>14,.0f} {bytes_fn(layers, g, 128, 4096) / 2**30:>19.3f} {ratio:>7.4f}")
        assert ratio == g / h, 'the cache ratio must be exactly g / h'

weights_gib = 7e9 * 2 / 2**30
print(f"\n7B weights in float16: {weights_gib:.1f} GiB; MHA cache of one 4096-token sequence: "
      f"{bytes_fn(32, 32, 128, 4096) / 2**30:.1f} GiB ({bytes_fn(32, 32, 128, 4096) / 2**30 / weights_gib:.0%} of the weights); "
      f"of 8 sequences: {bytes_fn(32, 32, 128, 4096, batch=8) / 2**30:.0f} GiB\n")

layer = multihead.MultiHeadAttention(64, 8, n_kv_heads=2)
cache = kvcache.KVCache()
with torch.no_grad():
    layer(torch.randn(3, 20, 64), cache=cache, causal=True)
print("KVCache.nbytes() of a GQA-2 layer, 3 sequences of 20 tokens, float32:", cache.nbytes(),
      "| formula:", bytes_fn(1, 2, 8, 20, batch=3, bytes_per_value=4))
assert cache.nbytes() == bytes_fn(1, 2, 8, 20, batch=3, bytes_per_value=4), 'KVCache.nbytes must equal the formula'


# %% [markdown]
# A 7B MHA model needs 2 GiB of cache per 4096-token sequence, <!-- q:out#MHA cache of one 4096-token sequence -->15 %<!-- /q --> of its float16
# weights; a batch of 8 such sequences needs more memory than the weights. With GQA-8
# the 70B model's cache is <!-- q:out#  70B  GQA-8 -->1.25<!-- /q --> GiB per sequence instead of <!-- q:out#  70B    MHA -->10<!-- /q -->.
#
# **Measured here.** A small decoder-only model, the course's GPT (`DecoderLM(LMConfig.gpt(...))`, which
# chapter 7 trains on language; here it gets a GELU feed-forward and `n_kv_heads` key/value heads)
# generates tokens after a context of 64 to 1024 tokens, with and without the cache, for MHA, GQA-2
# and MQA. It is a preview of chapters 6 and 7: token and learned position embeddings, a stack of
# blocks (the course's one `blocks.TransformerBlock`: layer norm, causal multi-head attention, layer
# norm, a feed-forward network, with residual connections), a projection to the vocabulary. It
# decodes through the protocol every model of the course follows: `prefill` runs the context in
# one pass, `decode_step` feeds one token. Without the cache every step runs the whole context
# through the model again.

# %%
def small_decoder(vocab, d_model=64, n_heads=8, n_kv_heads=None, n_layers=2, d_ff=128, max_len=64):
    """The course's GPT with a GELU feed-forward: ``n_layers`` Pre-LN blocks of ``n_heads`` query
    heads and ``n_kv_heads`` key/value heads (None: as many as query heads), learned positions up to
    ``max_len`` (the caches are preallocated for as many)."""
    return DecoderLM(LMConfig.gpt(vocab, d_model=d_model, n_heads=n_heads, n_layers=n_layers, d_ff=d_ff,
                                  max_len=max_len, n_kv_heads=n_kv_heads, ffn="gelu"))


def seconds_per_token(model, context, n_new, cached, batch):
    """Seconds per generated token after a random context of ``context`` tokens: the fastest
    of ``n_new`` steps (the one least disturbed by other programs on the machine)."""
    ids = torch.randint(0, 64, (batch, context), generator=torch.Generator().manual_seed(0))
    model.use_cache = cached              # without the cache, decode_step recomputes the whole prefix
    times = []
    with torch.no_grad():
        state = model.prefill(ids[:, :-1])                 # not timed
        nxt = ids[:, -1]
        for _ in range(n_new):
            t0 = time.perf_counter()
            log_probs, state = model.decode_step(nxt, state)
            nxt = log_probs.argmax(-1)
            times.append(time.perf_counter() - t0)
    return min(times)


# %%
# NBVAL_IGNORE_OUTPUT
print("measured in one run on:", cost.machine())
contexts = budget.pick([64, 128, 256, 512, 1024], grading=[64, 128])
torch.manual_seed(6)
decoders = {name: small_decoder(64, d_model=256, n_heads=8, n_kv_heads=g, n_layers=2, d_ff=512, max_len=1100).eval()
            for name, g in (("MHA", 8), ("GQA-2", 2), ("MQA", 1))}
seconds_per_token(decoders["MHA"], 64, 3, True, 1)           # warm-up
timing = {"MHA, no cache": [], "MHA, cache": [], "GQA-2, cache": [], "MQA, cache": []}
for n in contexts:
    timing["MHA, no cache"].append(seconds_per_token(decoders["MHA"], n, 3, cached=False, batch=1))
    timing["MHA, cache"].append(seconds_per_token(decoders["MHA"], n, 15, cached=True, batch=1))
batched = {name: [seconds_per_token(m, n, 15, cached=True, batch=16) for n in contexts] for name, m in decoders.items()}
for name in ("GQA-2", "MQA"):
    timing[f"{name}, cache"] = [seconds_per_token(decoders[name], n, 15, cached=True, batch=1) for n in contexts]

print("ms per generated token, batch 1:")
print(f"{'context':>8}" + "".join(f"{k:>15}" for k in timing) + f"{'no cache / cache':>18}")
for i, n in enumerate(contexts):
    print(f"{n:>8}" + "".join(f"{v[i] * 1e3:>15.2f}" for v in timing.values())
          + f"{timing['MHA, no cache'][i] / timing['MHA, cache'][i]:>17.1f}x")
print("\nms per generated token, batch 16 (the cache of 16 sequences must be read at every step):")
print(f"{'context':>8}" + "".join(f"{k:>10}" for k in batched) + f"{'MHA / MQA':>11}")
for i, n in enumerate(contexts):
    print(f"{n:>8}" + "".join(f"{v[i] * 1e3:>10.2f}" for v in batched.values())
          + f"{batched['MHA'][i] / batched['MQA'][i]:>10.1f}x")

fig, axes = plt.subplots(1, 2, figsize=(13, 4))
for label, ys in timing.items():
    axes[0].loglog(contexts, [y * 1e3 for y in ys], marker="o", label=label)
axes[0].set(xlabel="context length (tokens)", ylabel="ms per generated token", title="batch 1")
for label, ys in batched.items():
    axes[1].loglog(contexts, [y * 1e3 for y in ys], marker="o", label=f"{label}, cache")
axes[1].set(xlabel="context length (tokens)", ylabel="ms per generated token", title="batch 16, with the cache")
for ax in axes:
    ax.legend()
fig.tight_layout()
plt.show()
if not GRADING:   # times are printed, never asserted: they depend on the machine and its load
    i512 = contexts.index(512)
    print(f"at 512 tokens the cache is {timing['MHA, no cache'][i512] / timing['MHA, cache'][i512]:.1f}x faster; "
          f"at {contexts[-1]} tokens and batch 16, MQA is {batched['MHA'][-1] / batched['MQA'][-1]:.1f}x faster "
          "than MHA")


# %% [markdown]
# What the measurements show (one run on the machine printed above: the exact numbers, and even
# the smaller ratios, vary from machine to machine and run to run, so the cell prints them and
# asserts nothing about time):
#
# * **The cache.** Without it the time per token grows with the context, because every step
#   processes the whole context again; with it a step costs little more than a forward pass of
#   one token. The printed ratio "no cache / cache" grows with the context.
# * **MQA and GQA, batch 16.** With 16 sequences and a long context each step must read 16
#   caches; MHA's is 8 times larger than MQA's and 4 times larger than GQA-2's, and MHA's step
#   falls behind as the context grows (the printed "MHA / MQA" grows with it,
#   to <!-- q:out#tokens and batch 16, MQA is -->2.3<!-- /q -->× at the longest context in the stored run). That is Shazeer's $n/d$ term. The
#   whole step gains less than 8 times because it also runs the projections and the
#   feed-forward network, which MQA does not shrink: the next cell times the attention alone. The caches here are preallocated (`KVCache(max_len=...)`, as in
#   Llama's reference code): a step writes its one new key and value in place. A cache that grows
#   by `torch.cat` would also copy itself, whole, at every step, and that copy, not only the
#   reading, would then be in the gap. The next cell takes one step of batch 16 apart.
# * **Batch 1.** With a short context the three variants cost about the same, and it is not because the weights
#   dominate: MQA's key and value projections are 8 times smaller than MHA's (section 5's table).
#   The cell after next shows what does dominate.
#
# **Where the time of a step goes (batch 16, the longest context).** For one layer: the attention
# of the new queries over the cache as the module computes it (`grouped_sdpa`, each key/value
# head read once), the same attention computed the way much GQA code does it (`repeat_kv`,
# then the fused kernel: the shared heads are first copied $h/g$ times), and the copy a
# concatenating cache would make at every step (`torch.cat` of the keys and of the values).

# %%
# NBVAL_IGNORE_OUTPUT
n_long, b_long = contexts[-1], 16
gen = torch.Generator().manual_seed(1)
print(f"one layer, batch {b_long}, context {n_long}, ms per step (median of 15 calls, processor time):")
print(f"{'':>6} {'grouped_sdpa':>13} {'repeat_kv + fused':>18} {'torch.cat copy':>15} {'copy / attention':>17}"
      f" {'whole step, 2 layers':>21}")
for name, g in (("MHA", 8), ("GQA-2", 2), ("MQA", 1)):
    q1 = torch.randn(b_long, 8, 1, 32, generator=gen)                        # one new query per sequence
    k_c, v_c = torch.randn(2, b_long, g, n_long, 32, generator=gen)           # the cache of one layer
    kv1 = torch.randn(b_long, g, 1, 32, generator=gen)                        # the new key and value
    with torch.no_grad():       # processor time: the moments other programs hold the CPU do not count
        t_grouped = cost.seconds_per_call(multihead.grouped_sdpa, q1, k_c, v_c, repeats=15, clock=time.process_time)
        t_repeat = cost.seconds_per_call(
            lambda: F.scaled_dot_product_attention(q1, multihead.repeat_kv(k_c, 8 // g), multihead.repeat_kv(v_c, 8 // g)),
            repeats=15, clock=time.process_time)
        t_copy = cost.seconds_per_call(lambda: (torch.cat([k_c, kv1], 2), torch.cat([v_c, kv1], 2)), repeats=15,
                                       clock=time.process_time)
    repeated = "(the same call)" if g == 8 else f"{t_repeat * 1e3:.2f}"    # repeat_kv(x, 1) is x itself
    print(f"{name:>6} {t_grouped * 1e3:>13.2f} {repeated:>18} {t_copy * 1e3:>15.2f} {t_copy / t_grouped:>17.2f}"
          f" {batched[name][-1] * 1e3:>21.2f}")

# %% [markdown]
# Read the rows against each other (the absolute numbers move with the machine's load). With
# `repeat_kv` first, GQA-2 and MQA cost about what MHA's attention costs, or more: the copy
# writes $h/g$ times the cache before the kernel reads it, so the saving is gone; folded into
# `grouped_sdpa` they cost a fraction of it. The `torch.cat` column is what every step of a
# concatenating cache adds per layer, for keys and values together: for MHA it is of the same
# order as the attention itself (the "copy / attention" column: it reads the whole cache and
# writes it again, where the attention only reads it), which is why the course's `KVCache`
# preallocates. (The last column is the whole step, both layers, from the
# table above, measured in wall-clock time.)
#
# **Batch 1: the cost of calling PyTorch.** One decoding step of the small decoder issues the
# same number of PyTorch operations whatever its width (counted by `cost.count_torch_calls`),
# and each operation costs a few microseconds of Python and dispatch before any arithmetic. The
# cell counts them, then times a step of the same decoder at $d_\text{model} = 256$ and at
# $d_\text{model} = 32$, whose weight matrices hold 64 times fewer multiply-adds.

# %%
# NBVAL_CHECK_OUTPUT
ids64 = torch.randint(0, 64, (1, 64), generator=torch.Generator().manual_seed(0))
narrow = {}
for d in (256, 32):
    for name, g in (("MHA", 8), ("MQA", 1)):
        torch.manual_seed(6)
        narrow[(d, name)] = small_decoder(64, d_model=d, n_heads=8, n_kv_heads=g, n_layers=2, d_ff=2 * d, max_len=1100).eval()
print(f"{'d_model':>8} {'kind':>5} {'weights in the blocks':>22} {'PyTorch calls per step':>23}")
for (d, name), m in narrow.items():
    m.use_cache = True
    with torch.no_grad():
        state = m.prefill(ids64)                                          # 64 tokens in the caches
        calls = cost.count_torch_calls(m.decode_step, ids64[:, 0], state)  # one cached step
    n_weights = sum(p.numel() for block in m.stack.layers for p in block.parameters())
    print(f"{d:>8} {name:>5} {n_weights:>22,} {calls:>23}")

# %%
# NBVAL_IGNORE_OUTPUT
step_ms = {key: seconds_per_token(m, 64, 15, cached=True, batch=1) * 1e3 for key, m in narrow.items()}
print("ms per token, batch 1, context 64:", {f"{name}, d_model {d}": round(t, 3) for (d, name), t in step_ms.items()})
print(f"d_model 256 / d_model 32: MHA {step_ms[(256, 'MHA')] / step_ms[(32, 'MHA')]:.1f}x, "
      f"MQA {step_ms[(256, 'MQA')] / step_ms[(32, 'MQA')]:.1f}x (the weights: 64x fewer multiply-adds)")

# %% [markdown]
# The narrow decoder is nowhere near 64 times faster (the printed ratios): at batch 1 a step of
# this size is bound by the number of operations, not by the bytes of weights or cache it reads,
# so removing key/value heads saves nothing measurable. On a large model the weight matrices are
# gigabytes and a batch-1 step *is* bound by reading them (Pope et al. 2022); there too MQA saves
# little at batch 1 with a short context, because the cache is small beside the weights.
#
# Timings on your machine differ; `make bench` measures the time per token with and without the cache, for MHA, GQA and MQA, with the fraction of the memory bandwidth each step reaches (and the module against `nn.MultiheadAttention`, section 9) side by side in one run, with the machine's own ceilings, see [benchmarks/results/latest.md](../../benchmarks/results/latest.md).
#
# ## 8. From a trained MHA model to GQA: mean-pooling the heads
#
# Training a GQA model from scratch costs a full training run. Ainslie et al. (2023) start
# instead from a trained MHA checkpoint: in each group, the key projections of its $h/g$
# heads are replaced by their **mean** (likewise the values), and the model is trained a
# little more (**uptraining**: 5 % of the original steps in the paper). They found mean
# pooling better than keeping each group's first head, and both better than initialising the
# shared key/value heads at random.
#
# ### Exercise 6: mean-pool the heads (1 + 2 points)
#
# Write `mean_pool_heads(weight, n_heads, n_groups)`. `weight` is a key or value projection's
# weight `(n_heads * d_head, d_model)` (as `nn.Linear` stores it: head $h$ owns rows
# $h\,d_\text{head}$ to $(h+1)\,d_\text{head} - 1$) **or its bias** `(n_heads * d_head,)`.
# Return `(n_groups * d_head, ...)`: group $j$ is the mean of heads $j r, \dots, j r + r - 1$
# with $r$ = `n_heads // n_groups` (the consecutive grouping of `repeat_kv`). `n_groups` is any
# divisor of `n_heads` (1: MQA; `n_heads`: nothing to pool); the result keeps `weight`'s dtype
# (float32 or float64), and `weight` itself is left unchanged.
#
# <!-- domain: ex6_mean_pool mean_pool_heads -->
#
# The tests try every kind of input listed here:
# - `weight`: float32; float64; a weight (2-D); a bias (1-D).
# - `n_groups`: 1; more than 1.
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex6_mean_pool", "locked": false, "schema_version": 3, "solution": true}
def mean_pool_heads(weight, n_heads, n_groups):
    """Mean of each group's key (or value) heads: ``(n_heads * d_head, ...)`` -> ``(n_groups * d_head, ...)``."""
    ### BEGIN SOLUTION
    d_head = weight.shape[0] // n_heads
    grouped = weight.reshape(n_groups, n_heads // n_groups, d_head, *weight.shape[1:])
    return grouped.mean(dim=1).reshape(n_groups * d_head, *weight.shape[1:])
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex6_mean_pool-visible", "locked": true, "points": 1, "schema_version": 3, "solution": false} tags=["raises-exception"]
_w = torch.arange(12 * 3.).view(12, 3)     # 6 heads of d_head 2, d_model 3


def _two_groups():
    got = checks.call(mean_pool_heads, _w, 6, 2)
    checks.expect_shape(got, (4, 3), "mean_pool_heads(weight (12, 3), n_heads=6, n_groups=2)")
    checks.expect_close(got[:2], (_w[0:2] + _w[2:4] + _w[4:6]) / 3,
                        "group 0 = mean of heads 0, 1 and 2 (rows 0-1, 2-3 and 4-5)")
    checks.expect_close(got[2:], (_w[6:8] + _w[8:10] + _w[10:12]) / 3,
                        "group 1 = mean of heads 3, 4 and 5 (rows 6-7, 8-9 and 10-11)")


checks.run_checks("mean_pool_heads", [("6 heads into 2 groups (3 heads per group)", _two_groups)])

# %% nbgrader={"grade": true, "grade_id": "ex6_mean_pool-hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Hidden tests: weights (2-D) and biases (1-D) over a grid of (n_heads, n_groups, d_head, d_model): MQA (one
# group), as many groups as heads, d_head = 1, float32 and float64; the input unchanged.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(106)
_cases = []
for _dtype in (torch.float32, torch.float64):
    for _h, _grp, _dh, _dm in [(6, 3, 4, 5), (6, 1, 4, 5), (6, 6, 4, 5), (8, 2, 1, 3), (4, 2, 3, 7), (8, 4, 2, 2)]:
        for _shape in ((_h * _dh, _dm), (_h * _dh,)):
            _w = torch.randn(*_shape, generator=_g, dtype=_dtype)
            _kind = "weight" if len(_shape) == 2 else "bias"
            _cases.append((f"{_kind} {_shape}, {_h} heads into {_grp} groups, {_dtype}", _w, _h, _grp))
### BEGIN EXPECTED
def _ref_pool(w, h, grp):
    r, dh = h // grp, w.shape[0] // h
    return torch.cat([sum(w[(j * r + i) * dh:(j * r + i + 1) * dh].double() for i in range(r)) / r for j in range(grp)])


_want = [_ref_pool(w, h, grp) for _, w, h, grp in _cases]
### END EXPECTED
_inputs = [w.clone() for _, w, *_ in _cases]
_got = [checks.call(mean_pool_heads, w, h, grp) for _, w, h, grp in _cases]
checks.run_checks("mean_pool_heads (hidden)", [
    (name, lambda i=i, name=name: checks.expect_close(_got[i], _want[i], f"mean_pool_heads ({name})"))
    for i, (name, *_) in enumerate(_cases)
] + [
    (f"dtype, {name}", lambda i=i, name=name: checks.expect_dtype(_got[i], _cases[i][1].dtype,
                                                                 f"mean_pool_heads ({name})"))
    for i, (name, *_) in enumerate(_cases)
] + [
    ("the input unchanged", lambda: [checks.expect_equal(c[1], w0, "weight after the call")
                                     for c, w0 in zip(_cases, _inputs)]),
])
### END HIDDEN TESTS

# %% [markdown]
# **The experiment.** The small decoder of section 7 (2 layers, 8 heads of 8, about 73 000
# parameters) learns to reverse strings of 4 to 8 symbols written as a prompt, `a c b <sep>`
# → `b c a <eos>`, trained only on the answer tokens. We convert the trained MHA model to
# GQA-2 and to MQA three ways (mean-pool, first head of each group, random key/value heads),
# measure the test loss right after the conversion (cross-entropy of the answer tokens: how much
# of the trained model each start keeps), uptrain each for 10 % of the original steps and
# measure the test exact match (the whole answer right; under teacher forcing, which for an
# exact-match criterion is the same as greedy decoding: if every token is right given the
# right prefix, greedy decoding produces the same prefix).

# %%
pool_fn = checks.learner_or_reference(mean_pool_heads, multihead.mean_pool_kv_heads,
                                      lambda f: (f(torch.arange(24.).view(8, 3), 4, 2), f(torch.arange(8.), 4, 2)),
                                      "mean_pool_heads")
vocab = data.sequence_vocab(8)
SEP = data.SOS_ID                                        # <sos> doubles as the separator
pairs = data.make_sequence_pairs(6000, 4, 8, task="reverse", n_symbols=8, seed=0)
rev_train, rev_test = data.split(pairs, 500, seed=1)


def prompt_batch(pairs_):
    """Prompt ``src <sep>``, completion ``tgt <eos>``: inputs and next-token targets (chapter 7's
    batching), the targets inside the prompt ignored (``train.IGNORE_INDEX``)."""
    return families.lm_training_batch([vocab.encode(s) + [SEP] for s, _ in pairs_],
                                      [vocab.encode(t) + [data.EOS_ID] for _, t in pairs_])


def fit(model, steps, lr=3e-3, seed=0):
    """``steps`` of the course's loop (``train.fit``, Adam) on random batches of 64 reversal prompts."""
    gen = torch.Generator().manual_seed(seed)
    minibatches = (prompt_batch([rev_train[i] for i in torch.randint(len(rev_train), (64,), generator=gen).tolist()])
                   for _ in range(steps))
    train.fit(model, minibatches, train.next_token_loss, train.TrainConfig(steps, lr=lr))
    return model


def test_loss(model, pairs_):
    """Mean cross-entropy of the answer tokens of ``pairs_`` (teacher-forced)."""
    inputs, targets = prompt_batch(pairs_)
    with torch.no_grad():
        return train.next_token_loss(model, (inputs, targets)).item()


def exact_match(model, pairs_):
    inputs, targets = prompt_batch(pairs_)
    with torch.no_grad():
        right = (model(inputs).argmax(-1) == targets) | (targets == train.IGNORE_INDEX)
    return right.all(dim=1).float().mean().item()


def converted(model, n_kv, how):
    """A copy of ``model`` whose attention layers have ``n_kv`` key/value heads."""
    new = small_decoder(len(vocab), n_kv_heads=n_kv)
    new.load_state_dict({k: v for k, v in model.state_dict().items() if ".self_attn." not in k}, strict=False)
    for block_new, block_old in zip(new.stack.layers, model.stack.layers):
        block_new.self_attn = multihead.convert_to_gqa(block_old.self_attn, n_kv, how,
                                                       generator=torch.Generator().manual_seed(1))
        if how == "mean":   # the learner's pooling (if it agrees with the reference) on the K and V projections
            with torch.no_grad():
                for name in ("k_proj", "v_proj"):
                    old, dst = getattr(block_old.self_attn, name), getattr(block_new.self_attn, name)
                    dst.weight.copy_(pool_fn(old.weight, 8, n_kv))
                    dst.bias.copy_(pool_fn(old.bias, 8, n_kv))
    return new.eval()


# %%
# NBVAL_IGNORE_OUTPUT
STEPS = budget.pick(600, grading=20)
UPTRAIN = STEPS // 10
torch.manual_seed(7)
t0 = time.perf_counter()
base = fit(small_decoder(len(vocab)), STEPS)
train_s = time.perf_counter() - t0
print(f"MHA model: {train.count_parameters(base):,} parameters, {STEPS} steps in {train_s:.1f} s, "
      f"test exact match {exact_match(base, rev_test):.3f}")
conversion = {}
for n_kv, kind in ((2, "GQA-2"), (1, "MQA")):
    for how in ("mean", "first", "random"):
        m = converted(base, n_kv, how)
        before = test_loss(m, rev_test)
        after = exact_match(fit(m, UPTRAIN, seed=5), rev_test)
        conversion[(kind, how)] = (before, after)
print(f"the MHA model's test loss: {test_loss(base, rev_test):.4f}")
print(f"\n{'':>6} {'initialised by':>15} {'test loss, converted':>21} {f'exact match after {UPTRAIN} more steps':>34}")
for (kind, how), (before, after) in conversion.items():
    print(f"{kind:>6} {how:>15} {before:>21.2f} {after:>34.3f}")
if not GRADING:   # GQA-2 only: MQA's comparisons change sign with the seed (see the text)
    claims.check("ch04: the MHA model learns reversal (test exact match)", exact_match(base, rev_test), above=0.75)
    claims.check("ch04: GQA-2 initialised by mean pooling beats random initialisation after uptraining "
                 "(difference in exact match)", conversion[("GQA-2", "mean")][1] - conversion[("GQA-2", "random")][1],
                 above=0.4)
    claims.check("ch04: GQA-2 initialised by mean pooling keeps more of the model than random key/value heads "
                 "(test loss right after conversion: random minus mean)",
                 conversion[("GQA-2", "random")][0] - conversion[("GQA-2", "mean")][0], above=0.15)

# %% [markdown]
# Reading the table. It is one training run, the stored run. `tools/claim_spread.py` runs the
# whole notebook again with every seed shifted and on several CPUs (`tools/claim_spread.md`),
# and the cell's bounds are set below the smallest values those runs gave. It asserts that the
# trained MHA model learns the task, and two comparisons for GQA-2:
#
# * Right after conversion every variant has lost the task (its test loss, against the MHA
#   model's, printed above the table): each query head was trained with its own keys and values,
#   and a shared key/value head changes what all the heads of its group attend to. (Ainslie et
#   al. also report that MQA needs uptraining; their large models keep more of their quality
#   right after conversion than this tiny one.)
# * **GQA-2, right after conversion.** Mean pooling keeps more than random key/value heads
#   (test loss <!-- q:out# GQA-2            mean -->5.74<!-- /q --> against <!-- q:out# GQA-2          random -->6.72<!-- /q --> in the stored
#   run; the cell asserts the difference). Keeping the first head of each group did better still
#   in the stored run (<!-- q:out# GQA-2           first -->4.63<!-- /q -->); the course has not measured that comparison over seeds
#   and CPUs, so it is not asserted. One reading, not tested
#   here: the first head is a key/value head that one query head of the group was trained with,
#   while the mean of four heads trained apart is none of them. Ainslie et al. found the opposite
#   order for T5 at scale; this tiny model does not settle which start is better.
# * **GQA-2, after uptraining for 10 % of the original steps.** Both starts that keep trained heads
#   come back far ahead of random ones, which must learn their key/value heads again from nothing:
#   in the stored run <!-- q:out# GQA-2            mean -->0.992<!-- /q --> (mean pooling) and <!-- q:out# GQA-2           first -->0.980<!-- /q --> (first head)
#   against <!-- q:out# GQA-2          random -->0.116<!-- /q --> in exact match; the cell asserts a wide lead of mean pooling
#   over random. Which of mean pooling and the first head comes back further the chapter does not
#   measure beyond the stored run.
# * **MQA.** With all eight query heads on one key/value head, the cell asserts none of the
#   comparisons, and the course has not measured them over seeds and CPUs. In the stored
#   run mean pooling comes back to <!-- q:out#   MQA            mean -->0.902<!-- /q --> in exact match against
#   random's <!-- q:out#   MQA          random -->0.000<!-- /q -->, the first head to <!-- q:out#   MQA           first -->0.984<!-- /q -->, and GQA-2 started by mean
#   pooling comes back further than MQA. Sixty steps are too few to settle MQA here.
#
# ## 9. How fast is the module?
#
# `MultiHeadAttention` calls PyTorch's fused kernel when the weights are not requested
# (`need_weights=False`), and the explicit `softmax(QK^T/√d) V` when they are. A benchmark of
# its forward pass against `nn.MultiheadAttention` at the same sizes (self-attention, no mask;
# the median of 15 calls, `cost.seconds_per_call`), measured in one run on the machine it
# prints (the ratio column is the one to compare between machines; `make bench` repeats it):

# %%
# NBVAL_IGNORE_OUTPUT
print("measured in one run on:", cost.machine())
torch.manual_seed(8)
print(f"{'batch':>6} {'L':>5} {'d_model':>8} {'ours, fused':>12} {'nn.MHA':>9} {'ratio':>6} {'ours, with weights':>19}")
for b, L, d in budget.pick(((8, 128, 256), (4, 512, 256)), grading=((2, 16, 32),)):
    ours = multihead.MultiHeadAttention(d, 8).eval()
    theirs = nn.MultiheadAttention(d, 8, batch_first=True).eval()
    xb = torch.randn(b, L, d)
    with torch.no_grad():
        t_ours = cost.seconds_per_call(lambda: ours(xb), repeats=15)
        t_theirs = cost.seconds_per_call(lambda: theirs(xb, xb, xb, need_weights=False), repeats=15)
        t_weights = cost.seconds_per_call(lambda: ours(xb, need_weights=True), repeats=15)
    print(f"{b:>6} {L:>5} {d:>8} {t_ours * 1e3:>10.2f}ms {t_theirs * 1e3:>7.2f}ms {t_ours / t_theirs:>6.2f} {t_weights * 1e3:>17.2f}ms")

# %% [markdown]
# Reading it (the run stored here): without the weights, the module runs PyTorch's fused kernel and
# takes about the time of `nn.MultiheadAttention`, which does the same (ratio <!-- q:out#8   128      256 -->1.02<!-- /q -->
# and <!-- q:out#4   512      256 -->0.86<!-- /q -->). Asking for the weights sends it down the explicit path, which builds the
# $L \times L$ probabilities of every head in memory: <!-- q:out#8   128      256 -->7.77<!-- /q --> ms against <!-- q:out#8   128      256 -->6.27<!-- /q --> ms at
# $L = 128$, <!-- q:out#4   512      256 -->32.82<!-- /q --> ms against <!-- q:out#4   512      256 -->23.12<!-- /q --> ms at $L = 512$, the gap growing with $L$ as that matrix does.
# Request the weights only where you look at them (a plot, a probe); training and decoding do not.
#
# > **Common mistakes about this chapter's layer.**
# > * In the two-head worked example the softmax row is $[0.00703, 0.99297]$, not
# >   $[0.016, 0.984]$, so the first output row is $[3.979, 2.993, 3.979, 2.993]$; a $W_Q$ with
# >   rows $I, I$ does not give the example's $Q$, and a per-head $W^K_i$ that swaps would swap $K$ a
# >   second time (section 2).
# > * "MHA has the most parameters, MQA the fewest": true of the key and value
# >   projections only; $W^Q$ and $W^O$ are the same in all three (section 5).
# > * A GQA `split_head` that indexes the 3-axis keys with five indices raises an `IndexError`,
# >   and the natural repair pairs query heads with the wrong key/value heads (section 5).
# > * Heads as "several convolution kernels": a head is not a kernel. With relative
# >   positions a head plays one kernel *position* (tap), and $K^2$ heads whose outputs the
# >   output projection adds make one $K\times K$ convolution (chapter 5).
#
# ## 10. Questions

# %% [markdown] nbgrader={"grade": false, "grade_id": "prompt_q1", "locked": true, "schema_version": 3, "solution": false}
# **Question 1 (2 points).** Shazeer's MQA model decodes about 12× faster than the MHA one, but
# trains at the same speed (13.0 against 13.2 µs per token). Using the memory-access argument of
# section 7, explain why sharing keys and values speeds up incremental decoding so much and
# training hardly at all. Then say why, in section 7's measurements, the three variants cost about
# the same at batch 1 with a short context, using what the chapter measured there.

# %% [markdown] nbgrader={"grade": true, "grade_id": "q1_mqa_speed", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# In training (and in a prefill), all positions are processed at once: each key and value
# is read once and used by every query of the sequence, and each weight matrix by every
# token of the batch, so arithmetic per byte is high and the processor is compute-bound;
# fewer key/value heads remove only a small part of the arithmetic (the K and V projections),
# so training time barely moves. In incremental decoding each step has one query per
# sequence, yet must read the whole cache (n positions x h heads x d_head, per layer):
# arithmetic per byte is about 1, and the step is bound by memory traffic, which MQA divides
# by h (the n/d term of Shazeer's Θ(n/d + 1/b) becomes n/(dh)). At batch 1 with 64 tokens of
# context, the small decoder's step is bound by neither: it issues about the same number of PyTorch
# operations in all three variants, and the same number at either width (the count printed in
# section 7; MQA's repeat of its key/value heads adds a few), each costing microseconds
# of overhead, and the same decoder at d_model 32, with 64 times fewer weight multiply-adds,
# is not much faster. MQA's smaller K/V projections and cache save work that is not the
# bottleneck. (On a large model a batch-1 step is bound by reading the weights, which MQA does
# not shrink much either.)
#
# **Rubric** (for the grader, 2 points):
#
# - **1 point** for the difference between the two regimes: training and prefill reuse every key,
#   value and weight across many queries and are compute-bound, while a decoding step reads the
#   whole cache for one query per sequence and is memory-bound, which is the traffic MQA divides
#   by the number of heads.
# - **1 point** for why this chapter's small decoder at a batch of one shows no gain: about the
#   same number of PyTorch operations in every variant and at either width (section 7's count),
#   each with a fixed overhead, so neither the arithmetic nor the cache is the bottleneck.
# ### END SOLUTION

# %% [markdown] nbgrader={"grade": false, "grade_id": "prompt_q2", "locked": true, "schema_version": 3, "solution": false}
# **Question 2 (2 points).** In section 8, why does a GQA-2 start that keeps the trained heads
# (mean pooling or the first head of each group) beat random key/value heads after the same short
# uptraining? And why might a model builder choose GQA with 8 key/value heads rather than MQA for
# a 70B model, given the cache table of section 7?

# %% [markdown] nbgrader={"grade": true, "grade_id": "q2_conversion", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# A start that keeps trained heads starts from keys and values built from what the group's trained
# heads computed, so the query and output projections, which were trained with such keys and
# values, still roughly fit. The first head of a group is exactly the key/value head that one of
# its query heads was trained with; a mean of the group's heads fits to the extent that those heads
# computed similar things, which section 8 leaves untested (in its stored run the first head kept
# more than mean pooling right after conversion, but not in every seed). Either way, for GQA-2 mean
# pooling's test loss right after conversion is lower than with random heads in every run the
# chapter measured, and uptraining only adjusts; random
# key/value heads discard everything the attention layers learnt, and a few percent of the steps
# are not enough to relearn it. (After uptraining, which of mean and first is better this small
# experiment does not settle; with MQA, where one head must serve all eight, even the gap to random
# right after conversion changes sign with the seed.) GQA-8 on a 70B model (64 query heads) already cuts the cache 8-fold
# (<!-- q:out#  70B    MHA -->10<!-- /q --> GiB -> <!-- q:out#  70B  GQA-8 -->1.25<!-- /q --> GiB per 4096-token sequence, section 7's table), so the cache is no
# longer the dominant cost; going to MQA (<!-- q:out#  70B    MQA -->0.156<!-- /q --> GiB) saves another GiB but shares one key/value head
# among 64 query heads, which costs quality (Ainslie et al.: 46.6 vs 47.1 average for T5-XXL)
# and is less stable to uptrain; with tensor parallelism over 8 devices, 8 key/value heads
# also split evenly, where one would be replicated on every device.
#
# **Rubric** (for the grader, 2 points):
#
# - **1 point** for why a start from trained heads (the first of each group, or their mean) beats
#   random key and value heads: the query and output projections were trained with such keys and
#   values, with section 8's losses right after conversion.
# - **1 point** for the choice of GQA-8 over MQA for a large model: the cache is already several
#   times smaller (section 7's table), while one shared head costs quality and uptrains less
#   stably (and splits badly across devices).
# ### END SOLUTION

# %% [markdown]
# ## 11. What is still missing
#
# Multi-head attention, with its grouped variants and a cache, is the layer every
# Transformer is built from. But, like chapter 3's attention, it is still blind to word order:
# permuting the tokens permutes the outputs. The decoder of sections 7–8 got its sense of
# order from learned *absolute* position embeddings added to the input, one vector per
# position up to a fixed maximum. Chapter 5 gives attention *relative* positions,
# scores that depend on the offset between query and key, and shows that with them a
# multi-head attention layer can compute exactly a convolution, each head playing the part of
# one position of the kernel. Chapter 6 assembles the full Transformer from this
# chapter's module.
#
# ## References
#
# * Vaswani, A. et al. (2017). *Attention Is All You Need.* NeurIPS. §3.2.2, multi-head
#   attention. <https://arxiv.org/abs/1706.03762>
# * Shazeer, N. (2019). *Fast Transformer Decoding: One Write-Head is All You Need.*
#   (multi-query attention; the memory-access argument, Table 2). <https://arxiv.org/abs/1911.02150>
# * Ainslie, J. et al. (2023). *GQA: Training Generalized Multi-Query Transformer Models from
#   Multi-Head Checkpoints.* EMNLP. (grouped-query attention; mean pooling; uptraining).
#   <https://arxiv.org/abs/2305.13245>
# * Pope, R. et al. (2022). *Efficiently Scaling Transformer Inference.* (why decoding is
#   memory-bound at scale; the KV cache). <https://arxiv.org/abs/2211.05102>
# * PyTorch documentation: `torch.nn.MultiheadAttention` (mask convention, packed
#   `in_proj_weight`) and `torch.nn.functional.scaled_dot_product_attention` (`enable_gqa`).
#   <https://pytorch.org/docs/stable/generated/torch.nn.MultiheadAttention.html>
