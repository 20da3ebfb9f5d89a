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
# *Attention, from Seq2Seq to Transformers*: what a server does with attention once the model is
# trained. Chapter 4 built the key/value cache and showed that decoding is limited by the bytes it
# reads; chapter 8 built the decoder the field uses. This chapter keeps the model and changes how its
# cache is stored and read: the cache cut into fixed-size pages with a table per sequence, as vLLM
# does (Kwon et al. 2023), so that a batch of requests of unknown lengths wastes almost no memory and
# sequences that share a prompt share its pages; and sliding-window attention with a cache of a
# fixed number of slots, as Mistral 7B does (Jiang et al. 2023), so that the cache stops growing with
# the length of the text. Then two ways to spend less per token: speculative decoding (Leviathan et
# al. 2023; Chen et al. 2023), where a small draft model proposes tokens that the target checks
# several at a time without changing what it would sample; and multi-head latent attention
# (DeepSeek-V2, 2024), which caches one small latent per token instead of every head's keys and
# values; and, optionally, a cache in 8-bit integers. Each one is checked equal to the plain
# computation and measured.
#
# **What you will build**: one decoding step of attention read through a block table; one
# decoding step with a rolling buffer (the write into the slot `pos % W` and the read of the filled
# slots); which position each slot of the buffer holds, checked against the banded mask; the
# verification of a draft (how many draft tokens are kept, and the distribution of the next one);
# and attention over cached latents with the up-projections absorbed. The reference versions live
# in `course_utils.paged` (`PagedKVCache`, `paged_attention`, `paged_memory`), `course_utils.rolling`
# (`rolling_attend`, `slot_positions`, `RollingKVCache`, `banded_causal_mask`, `receptive_field`),
# `course_utils.speculative` (`verify_draft`, `accept`, `speculative_generate`) and `course_utils.mla`
# (`mla_absorbed`, `mla_explicit`, `kv_bytes_per_token`).
#
# **Exercises** (graded by the test cells below each one): 1 `paged_attention` (4 points),
# 2 `rolling_attend` (4), 2b `slot_positions` (2), 3 `verify_draft` (5), 4 `mla_attend` (5); two
# written questions (2 each).
#
# **The outputs you see first.** Until you run a cell, the output under it is the course's stored
# run, the one this text calls "the stored run". Running the cell replaces it with the output
# of your own run, which can differ from the stored one wherever the text gives a range.

# %%
import hashlib
import math
import re
import time
from collections import Counter

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from course_utils import (
    ablation,
    budget,
    checks,
    decoding,
    kvcache,
    kvquant,
    mla,
    paged,
    positional,
    rolling,
    runcache,
    speculative,
    textlm,
    train,
)

train.set_seed(0)
GRADING = budget.grading()   # True while nbgrader runs the notebook: experiments shrink
torch.set_printoptions(precision=4, sci_mode=False)


def tiny(err):
    """A difference at float64's rounding, printed the same on every CPU (its last digits are not)."""
    return "below 1e-12" if err < 1e-12 else f"{err:.1e}"

# %% [markdown]
# ## 1. What chapters 4 and 8 left open
#
# Chapter 4's cache keeps, for each sequence and each layer, the keys and values of every position
# seen so far, one tensor per sequence grown by `torch.cat` at every step; its section 7 showed that
# a decoding step is limited by reading that cache, and that grouped-query attention makes it
# smaller by sharing key/value heads. Chapter 8's decoder caches its GQA keys and values the same way.
# That is enough for one sequence on one machine. A server decodes many requests at once, and two
# things then go wrong. First, it does not know how long a request will become: a cache that is one
# contiguous tensor per request must be reserved for the longest length allowed, and the part a
# shorter request never fills is lost to every other request. Second, the cache grows with every
# token, without end. How large is it? Per token, per layer, one key and one value of
# $d_\text{head}$ numbers per key/value head (chapter 4's `kv_cache_bytes`), for two models of 7
# billion parameters with 16-bit values:

# %%
# (n_layers, n_kv_heads, d_head) of two 7B models; values in 16 bits (2 bytes each)
MODELS = {"Llama 2 7B (MHA, 32 kv heads)": (32, 32, 128), "Mistral 7B (GQA, 8 kv heads)": (32, 8, 128)}
for name, (n_layers, n_kv, d_head) in MODELS.items():
    per_token = kvcache.kv_cache_bytes(n_layers, n_kv, d_head, seq_len=1)
    request = kvcache.kv_cache_bytes(n_layers, n_kv, d_head, seq_len=4096)
    print(f"{name}: {per_token // 2**10} KiB per token, {request / 2**30:.2f} GiB for one request of 4096 tokens")

# %% [markdown]
# A request of 4096 tokens holds <!-- q:out#Llama 2 7B (MHA -->2.00<!-- /q --> GiB of cache in the
# MHA model, and the model's weights are read once per step for the whole batch while every request
# reads its own cache: the cache, not the weights, decides how many requests fit in memory at once.
# Section 2 stores the cache in pages so that a request holds only what it uses; section 3 bounds it
# by a window, so that it stops growing.

# %% [markdown]
# ## 2. A paged KV cache
#
# **The idea** (Kwon et al. 2023, vLLM's PagedAttention). An operating system gives a process memory
# in fixed-size pages and keeps a page table from the addresses the process sees to the pages it
# got, which need not be next to each other. vLLM does the same with the cache. The keys (and,
# alike, the values) of all sequences live in one **pool** of blocks, a tensor `(n_blocks,
# block_size, n_kv_heads, d_head)`. Each sequence has a **block table**, the list of its blocks in
# order: position $t$ of the sequence lives in block `table[t // block_size]`, at slot
# `t % block_size`. A sequence takes a new block only when its last one is full, so it wastes at most
# `block_size - 1` slots, in its last block, wherever its length ends; a free block is any block, so
# there is no gap between sequences that no one can use. vLLM's default block size is 16 tokens. The
# authors measured that in the serving systems before theirs only 20.4 % to 38.2 % of the memory
# reserved for the cache held tokens' keys and values (their Figure 2); with pages the waste is the
# partly filled last blocks alone.
#
# A worked example: a pool of 8 blocks of 4 slots; sequence `a` gets 6 tokens, then `b` 3 tokens,
# then `a` 3 more (the course's `paged.PagedKVCache` takes the first free block each time).

# %%
demo = paged.PagedKVCache(n_blocks=8, block_size=4, n_kv_heads=1, d_head=2)
for seq, n in (("a", 6), ("b", 3), ("a", 3)):
    if seq not in demo.tables:
        demo.add_sequence(seq)
    demo.append(seq, torch.ones(n, 1, 2), torch.ones(n, 1, 2))
for seq, table in demo.tables.items():
    print(f"sequence {seq}: {demo.lengths[seq]} tokens, block table {table}")
print(f"position 7 of a: block table[7 // 4] = {demo.tables['a'][7 // 4]}, slot 7 % 4 = {7 % 4}")
print(demo)

# %% [markdown]
# Sequence `a` is spread over blocks 0, 1 and 3, with `b`'s block between them; 3 of its 4
# slots of block 3 are still free, and are all that `a` wastes. To attend, a decoding step reads
# the keys and values through the table: the blocks in the table's order, the first `length`
# slots of them. Nothing else changes: attention does not know where its keys were stored, so the
# result is the one over the same keys stored contiguously.
#
# ### Exercise 1: one decoding step through a block table (1 + 3 points)
#
# Write `paged_attention(q, k_pool, v_pool, block_table, length)`, the attention of one new query
# per head to the `length` positions of one sequence stored in the pools:
#
# - `q` is `(n_heads, d_head)`: this step's query of each head. `k_pool` and `v_pool` are
#   `(n_blocks, block_size, n_kv_heads, d_head)`, of `q`'s dtype (float32 or float64); the other
#   sequences' blocks and the unused slots of a block hold stale values, any numbers, which must
#   not change the result.
# - `block_table` is a list of Python ints or a 1-D integer tensor: the sequence's blocks in order.
#   Position $t$ (from $0$ to `length - 1`) is at `k_pool[block_table[t // block_size], t %
#   block_size]` (and the same in `v_pool`). `length` is a Python int, the number of positions; the
#   table may hold more blocks than the `ceil(length / block_size)` it needs (reserved ahead):
#   ignore them.
# - Query head $i$ reads key/value head $\lfloor i / (n_\text{heads} / n_\text{kv\_heads}) \rfloor$
#   (chapter 4's `repeat_kv` order). Scores scaled by $1/\sqrt{d_\text{head}}$, a softmax over the
#   `length` positions (no mask: the new query sees them all), the weighted average of the values.
# - Return `(n_heads, d_head)` in `q`'s dtype. Leave every input as it was.
# - Raise `ValueError` before computing when `k_pool` or `v_pool` is not 4-D or the two differ in
#   shape (the message names `k_pool` or `v_pool`); when `q` is not 2-D or its `d_head` is not the
#   pools' (names `q`); when `n_heads` is not a multiple of `n_kv_heads` (names `n_heads` or
#   `n_kv_heads`); when `length` is below 1 or the table holds fewer blocks than `length` needs
#   (names `length` or `block_table`); when a block number that `length` needs is outside $0$ to
#   `n_blocks - 1`, a negative one too (names `block_table`: Python's `pool[-1]` would silently read
#   the last block).
#
# The tests compare your step with attention over the same keys and values laid out contiguously,
# computed in float64.
#
# <!-- domain: ex1_paged paged_attention -->
#
# The tests try every kind of input listed here:
# - `q`: float32; float64.
# - the arguments together: `n_heads` = `n_kv_heads` (MHA); 1 < `n_kv_heads` < `n_heads` (GQA); `n_kv_heads` = 1 < `n_heads` (MQA); `length` a multiple of `block_size` (the last block full); a last block partly filled (its other slots hold stale values); `length` = 1; `block_size` = 1; a table longer than `length` needs; blocks out of order, with other sequences' blocks between them.
# - `block_table`: a list of Python ints; a 1-D integer tensor.
# - must raise: `k_pool` or `v_pool` not 4-D, or the two of different shapes: ValueError; `q` not 2-D, or its `d_head` not the pools': ValueError; `n_heads` not a multiple of `n_kv_heads`: ValueError; `length` below 1, or a `block_table` with fewer blocks than `length` needs: ValueError; a block number outside 0 to `n_blocks` - 1 (a negative one too): ValueError.
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex1_paged", "locked": false, "schema_version": 3, "solution": true}
def paged_attention(q, k_pool, v_pool, block_table, length):
    """One decoding step of attention through a block table.

    Args:
        q: ``(n_heads, d_head)``, this step's query of each head.
        k_pool, v_pool: ``(n_blocks, block_size, n_kv_heads, d_head)``, the pools of blocks.
        block_table: the sequence's blocks in order (list of ints or 1-D integer tensor).
        length: the number of positions of the sequence (an int >= 1).
    Returns:
        ``(n_heads, d_head)``.
    """
    ### BEGIN SOLUTION
    for name, pool in (("k_pool", k_pool), ("v_pool", v_pool)):
        if pool.dim() != 4:
            raise ValueError(f"{name} must be (n_blocks, block_size, n_kv_heads, d_head), got {tuple(pool.shape)}")
    if k_pool.shape != v_pool.shape:
        raise ValueError(f"k_pool and v_pool must have one shape, got {tuple(k_pool.shape)} and {tuple(v_pool.shape)}")
    n_blocks, block_size, n_kv_heads, d_head = k_pool.shape
    if q.dim() != 2 or q.shape[1] != d_head:
        raise ValueError(f"q must be (n_heads, d_head) with the pools' d_head = {d_head}, got {tuple(q.shape)}")
    n_heads = q.shape[0]
    if n_heads % n_kv_heads != 0:
        raise ValueError(f"n_heads = {n_heads} must be a multiple of n_kv_heads = {n_kv_heads}")
    if length < 1:
        raise ValueError(f"length must be at least 1, got {length}")
    n_used = math.ceil(length / block_size)           # the blocks that hold the sequence
    table = [int(b) for b in block_table][:n_used]
    if len(table) < n_used:
        raise ValueError(f"block_table has {len(table)} blocks; length {length} needs {n_used}")
    if any(b < 0 or b >= n_blocks for b in table):
        raise ValueError(f"block_table's block numbers must be >= 0 and below n_blocks = {n_blocks}, got {table}")
    # the sequence's keys and values, contiguous: (length, n_kv_heads, d_head)
    keys = k_pool[table].reshape(n_used * block_size, n_kv_heads, d_head)[:length]
    values = v_pool[table].reshape(n_used * block_size, n_kv_heads, d_head)[:length]
    # query head i reads key/value head i // (n_heads // n_kv_heads)
    keys = keys.repeat_interleave(n_heads // n_kv_heads, dim=1)
    values = values.repeat_interleave(n_heads // n_kv_heads, dim=1)
    scores = torch.einsum("hd,thd->ht", q, keys) / math.sqrt(d_head)
    return torch.einsum("ht,thd->hd", torch.softmax(scores, dim=-1), values)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1_paged-visible", "locked": true, "points": 1, "schema_version": 3, "solution": false} tags=["raises-exception"]
# a pool of 3 blocks of 4 slots, full of stale values; a sequence of 6 positions in blocks [2, 0]
_g = torch.Generator().manual_seed(91)
_kp1, _vp1 = torch.randn(2, 3, 4, 2, 3, generator=_g, dtype=torch.float64)   # n_kv_heads 2, d_head 3


def _contiguous1(q, k, v):
    """What the tests compare with: attention over k, v ``(length, n_kv_heads, d_head)`` stored contiguously."""
    rep = q.shape[0] // k.shape[1]
    k, v = (t.transpose(0, 1).repeat_interleave(rep, dim=0) for t in (k, v))     # (n_heads, length, d_head)
    return F.scaled_dot_product_attention(q[:, None], k, v)[:, 0]


def _mha1():
    q = torch.randn(2, 3, generator=_g, dtype=torch.float64)
    out = checks.call(paged_attention, q, _kp1, _vp1, [2, 0], 6)
    checks.expect_shape(out, (2, 3), "out: (n_heads, d_head)")
    # positions 0-3 are block 2's four slots, positions 4-5 the first two slots of block 0
    k, v = torch.cat([_kp1[2], _kp1[0, :2]]), torch.cat([_vp1[2], _vp1[0, :2]])
    checks.expect_close(out, _contiguous1(q, k, v), "6 positions in blocks [2, 0] vs the same keys contiguous "
                        "(block 0's slots 2 and 3 are stale: not part of the sequence)")


def _gqa1():
    q = torch.randn(4, 3, generator=_g, dtype=torch.float64)                   # 4 query heads over 2 kv heads
    out = checks.call(paged_attention, q, _kp1, _vp1, torch.tensor([1, 2]), 5)
    k, v = torch.cat([_kp1[1], _kp1[2, :1]]), torch.cat([_vp1[1], _vp1[2, :1]])
    checks.expect_close(out, _contiguous1(q, k, v), "GQA, 4 query heads over 2 kv heads, a tensor table [1, 2], length 5")


def _short1():
    try:
        checks.call(paged_attention, torch.zeros(2, 3, dtype=torch.float64), _kp1, _vp1, [1], 6)
    except ValueError as err:
        if "length" not in str(err) and "block_table" not in str(err):
            checks.expect_equal(str(err), "a message naming length or block_table", "the ValueError")
        return
    checks.expect_equal("returned", "raised ValueError", "paged_attention with a table of 1 block for 6 positions")


checks.run_checks("paged_attention", [
    ("MHA: 6 positions in blocks [2, 0]", _mha1),
    ("GQA, a tensor table, a last block with 1 position", _gqa1),
    ("ValueError for a table too short for length", _short1),
])

# %% nbgrader={"grade": true, "grade_id": "ex1_paged-hidden", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# Hidden tests: MHA, GQA and MQA, float32 and float64, block sizes 1 to 16, lengths that fill their last
# block and lengths that do not (1 included), tables as lists and as tensors, in order or scattered, longer
# than needed; pools full of stale values; against attention over the same keys laid out contiguously
# (float64); the dtype; every declared bad input raises ValueError naming what is wrong.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(191)
# (n_heads, n_kv_heads, block_size, d_head, length, extra blocks in the table, table as a tensor, dtype)
_cases1 = [(4, 4, 4, 3, 8, 0, False, torch.float64), (6, 2, 3, 4, 7, 2, True, torch.float32),
           (4, 1, 1, 2, 5, 0, False, torch.float64), (2, 2, 16, 4, 1, 1, True, torch.float32),
           (8, 2, 16, 8, 37, 1, False, torch.float64), (3, 3, 5, 2, 10, 0, True, torch.float32),
           (6, 3, 4, 5, 13, 0, False, torch.float32)]
_in1 = []
for _r, (_h, _kvh, _bs, _d, _n, _extra, _as_tensor, _dt) in enumerate(_cases1):
    _need = -(-_n // _bs)
    _nb = _need + _extra + 3                                   # 3 blocks of other sequences
    _pools = (torch.randn(2, _nb, _bs, _kvh, _d, generator=_g, dtype=torch.float64) * 3).to(_dt)
    _tab = torch.randperm(_nb, generator=_g)[:_need + _extra].tolist()
    if _r % 2 == 0:
        _tab[:_need] = sorted(_tab[:_need], reverse=True)     # scattered, out of order
    _q = torch.randn(_h, _d, generator=_g, dtype=torch.float64).to(_dt)
    _in1.append((_q, _pools[0], _pools[1], torch.tensor(_tab) if _as_tensor else _tab, _n))
_got1 = [checks.call(paged_attention, *args) for args in _in1]


### BEGIN EXPECTED
def _expected1(q, kp, vp, table, n):
    q, kp, vp = q.double(), kp.double(), vp.double()
    bs, kvh = kp.shape[1], kp.shape[2]
    table = [int(b) for b in table]
    k = torch.stack([kp[table[t // bs], t % bs] for t in range(n)])      # (n, kvh, d)
    v = torch.stack([vp[table[t // bs], t % bs] for t in range(n)])
    group = q.shape[0] // kvh
    out = []
    for i in range(q.shape[0]):
        s = k[:, i // group] @ q[i] / math.sqrt(q.shape[1])
        out.append(torch.softmax(s, 0) @ v[:, i // group])
    return torch.stack(out)


_want1 = [_expected1(*args) for args in _in1]
### END EXPECTED


def _case1(r):
    h, kvh, bs, d, n, extra, as_tensor, dt = _cases1[r]
    what = f"case {r}: {h} heads over {kvh} kv heads, block size {bs}, length {n}, {str(dt)[6:]}"
    checks.expect_dtype(_got1[r], dt, f"{what}: the output's dtype")
    checks.expect_close(_got1[r], _want1[r], f"{what}: vs the same keys contiguous")


def _raises1(args, names, what):
    import re
    try:
        checks.call(paged_attention, *args)
    except ValueError as err:
        if not any(re.search(rf"\b{n}\b", str(err)) for n in names):
            checks.expect_equal(str(err), f"a message naming {' or '.join(names)}", f"the ValueError for {what}")
        return
    checks.expect_equal("returned", "raised ValueError", f"paged_attention with {what}")


def _bad1(r):
    gen = torch.Generator().manual_seed(192)
    kp, vp = torch.randn(2, 5, 4, 2, 3, generator=gen)         # 5 blocks of 4, 2 kv heads, d_head 3
    q = torch.randn(4, 3, generator=gen)
    bad = [("a 3-D k_pool", (q, kp[0], vp, [0, 1], 5), ("k_pool", "v_pool")),
           ("3-D k_pool and v_pool of one shape", (q, kp[0], vp[0], [0, 1], 5), ("k_pool", "v_pool")),
           ("a 1-D q", (q[0], kp, vp, [0, 1], 5), ("q",)),
           ("a v_pool of 4 blocks", (q, kp, vp[:4], [0, 1], 5), ("k_pool", "v_pool")),
           ("q of shape (n_heads, 1, d_head)", (q[:, None], kp, vp, [0, 1], 5), ("q",)),
           ("q of d_head 2", (q[:, :2], kp, vp, [0, 1], 5), ("q",)),
           ("3 query heads over 2 kv heads", (q[:3], kp, vp, [0, 1], 5), ("n_heads", "n_kv_heads")),
           ("length 0", (q, kp, vp, [0, 1], 0), ("length", "block_table")),
           ("a list table of 2 blocks for length 9", (q, kp, vp, [3, 1], 9), ("length", "block_table")),
           ("a tensor table of 1 block for length 5", (q, kp, vp, torch.tensor([2]), 5), ("length", "block_table")),
           ("block number 5 in a pool of 5", (q, kp, vp, [1, 5], 6), ("block_table",)),
           ("block number -1", (q, kp, vp, [-1, 2], 6), ("block_table",)),
           ("block number -2 in a tensor table", (q, kp, vp, torch.tensor([0, -2]), 8), ("block_table",))]
    what, args, names = bad[r]
    _raises1(args, names, what)


checks.run_checks("paged_attention (hidden)", [
    *((f"case {r}", lambda r=r: _case1(r)) for r in range(len(_cases1))),
    *((f"bad input {r}", lambda r=r: _bad1(r)) for r in range(13)),
])
### END HIDDEN TESTS

# %% [markdown]
# The cell below checks your `paged_attention` on a probe (GQA, a scattered table, a partly filled
# last block, stale values around it, and a table with block number -1, which must be refused) and,
# if it agrees with the course's `paged.paged_attention`,
# uses it for the rest of this section. First, four sequences written into one pool a few tokens at
# a time, in turns, as a server decodes them, so that their blocks interleave; each one's step
# through its table against the same attention over its keys kept contiguously on the side.

# %%
def refuses(fn, *args):
    """What ``fn`` does with a bad input: the name of the exception it raises, or "returned"."""
    try:
        fn(*args)
    except Exception as err:  # noqa: BLE001 (any exception is an answer to compare)
        return type(err).__name__
    return "returned"


def _probe_paged(fn):  # float64, 4 query heads over 2 kv heads, blocks of 4, stale values everywhere
    g = torch.Generator().manual_seed(19)
    kp, vp = torch.randn(2, 6, 4, 2, 3, generator=g, dtype=torch.float64)
    q = torch.randn(4, 3, generator=g, dtype=torch.float64)
    return (fn(q, kp, vp, [4, 1, 3], 10), fn(q, kp, vp, torch.tensor([2, 0]), 4),
            refuses(fn, q, kp, vp, [-1, 2], 6))


paged_fn = checks.learner_or_reference(paged_attention, paged.paged_attention, _probe_paged, "paged_attention")

g = torch.Generator().manual_seed(0)
pool = paged.PagedKVCache(n_blocks=32, block_size=16, n_kv_heads=2, d_head=8, dtype=torch.float64)
side = {}                                       # the same keys and values, contiguous: (length, 2, 8)
for _ in range(5):                              # 5 turns; sequence s writes 3 + 4 s tokens per turn
    for s in range(4):
        k, v = torch.randn(2, 3 + 4 * s, 2, 8, generator=g, dtype=torch.float64)
        if s not in pool.tables:
            pool.add_sequence(s)
            side[s] = (k[:0], v[:0])
        pool.append(s, k, v)
        side[s] = (torch.cat([side[s][0], k]), torch.cat([side[s][1], v]))
worst = 0.0
for s, (k, v) in side.items():
    q = torch.randn(4, 8, generator=g, dtype=torch.float64)             # 4 query heads over 2 kv heads
    through_table = paged_fn(q, pool.k_pool, pool.v_pool, pool.tables[s], pool.lengths[s])
    rep = k.transpose(0, 1).repeat_interleave(2, 0), v.transpose(0, 1).repeat_interleave(2, 0)
    contiguous = F.scaled_dot_product_attention(q[:, None], *rep)[:, 0]
    worst = max(worst, (through_table - contiguous).abs().max().item())
    print(f"sequence {s}: {pool.lengths[s]:>3} tokens, block table {pool.tables[s]}")
print(f"through the block tables vs contiguous keys, float64: max |difference| {tiny(worst)}")
assert worst < 1e-12, "attention through a block table must equal attention over the same keys contiguous"

# %% [markdown]
# The tables interleave (sequence 3's blocks are not next to each other) and the results are the
# contiguous ones up to float64's rounding (the course's `paged_attention` gives them bit for bit:
# it calls the same attention on the same numbers). Paging changes where the keys are, never what
# attention computes.
#
# **Memory.** Take a batch of 32 requests whose lengths (prompt and answer together) are spread
# evenly from 1 to the longest allowed, 2048 tokens. A cache preallocated contiguously reserves 2048
# slots for each; a paged one reserves whole blocks. `paged.paged_memory` counts both; the cell also
# writes the requests into a real `PagedKVCache` with blocks of 16 and counts the blocks it took,
# which must agree with the count.

# %%
MAX_LEN, N_REQUESTS = 2048, 32
lengths = torch.randint(1, MAX_LEN + 1, (N_REQUESTS,), generator=torch.Generator().manual_seed(0)).tolist()
per_token = kvcache.kv_cache_bytes(*MODELS["Llama 2 7B (MHA, 32 kv heads)"], seq_len=1)
print(f"{N_REQUESTS} requests of {min(lengths)} to {max(lengths)} tokens ({sum(lengths)} in all), "
      f"max_len {MAX_LEN}; bytes for Llama 2 7B")
print(f"{'layout':<24}{'slots reserved':>15}{'wasted':>9}{'GiB':>8}")
for name, block in (("contiguous, max_len", None), ("pages of 1", 1), ("pages of 16 (vLLM)", 16),
                    ("pages of 128", 128)):
    mem = paged.paged_memory(lengths, MAX_LEN, block_size=block or 1)
    reserved = mem["contiguous"] if block is None else mem["paged"]
    print(f"{name:<24}{reserved:>15}{1 - mem['used'] / reserved:>9.1%}{reserved * per_token / 2**30:>8.2f}")
    assert block is None or reserved - mem["used"] <= N_REQUESTS * (block - 1), "pages waste under a block per request"

real = paged.PagedKVCache(n_blocks=sum(-(-n // 16) for n in lengths), block_size=16, n_kv_heads=1, d_head=1)
for s, n in enumerate(lengths):
    real.add_sequence(s)
    real.append(s, torch.zeros(n, 1, 1), torch.zeros(n, 1, 1))
taken = len(real.refcount) - real.free_blocks
print(f"a real PagedKVCache with blocks of 16 took {taken} blocks = {taken * 16} slots")
assert taken * 16 == paged.paged_memory(lengths, MAX_LEN, 16)["paged"], "the cache must take what paged_memory counts"

fig, ax = plt.subplots(figsize=(7, 3))
order, x = sorted(lengths), range(1, N_REQUESTS + 1)
ax.bar(x, [MAX_LEN] * N_REQUESTS, color="0.85", label="reserved, contiguous")
ax.bar(x, [-(-n // 16) * 16 for n in order], color="tab:orange", label="reserved, pages of 16")
ax.bar(x, order, color="tab:blue", label="tokens")
ax.set(xlabel="request (sorted by length)", ylabel="cache slots", title="What each request reserves")
ax.legend(fontsize=8, loc="upper left")
plt.show()

# %% [markdown]
# The contiguous layout wastes <!-- q:out#contiguous, max_len -->50.5 %<!-- /q --> of what it
# reserves: a request of length $n$ leaves $2048 - n$ slots unused, about half of them on average when
# lengths are spread evenly. Blocks of 16 waste <!-- q:out#pages of 16 (vLLM) -->0.8 %<!-- /q -->,
# at most 15 slots per request, and the real cache took exactly what the count says. The batch
# needs <!-- q:out#pages of 16 (vLLM) -->15.95<!-- /q --> GiB of paged cache, against
# the contiguous one's <!-- q:out#contiguous, max_len -->32.00<!-- /q --> GiB: in the same memory,
# twice as many such requests run at once. Blocks of 1 waste nothing but cost a table entry, and a scattered read,
# per token; blocks of 128 waste <!-- q:out#pages of 128 -->5.9 %<!-- /q -->. vLLM's 16 lies between:
# little waste, and blocks large enough for a GPU to read each in one go.
#
# What this count leaves out, and the paper's measurement has: real requests are not spread evenly
# (the paper replays the ShareGPT and Alpaca datasets), a system that preallocates reserves for the
# longest answer a request may produce before it knows the answer's length, and the gaps left between
# contiguous caches of different sizes cannot be used (external fragmentation). This is how the
# systems it measured came to fill so little of their cache memory. The CPU run shows the
# counting; the speed of the GPU kernel that reads blocks through the table is the paper's
# measurement, not one this chapter can repeat.
#
# **Sharing a prompt: copy-on-write.** Parallel sampling draws several answers to one prompt, and
# beam search keeps several continuations of one text: the sequences share their first tokens. With
# pages they share those tokens' blocks: `fork` gives the new sequence a copy of the table, not of
# the blocks, and counts the references to each block. The first write into a shared block that is
# only partly filled copies it first (copy-on-write), since the other sequences must not see the
# write; the full blocks stay shared. Below, 4 samples of one prompt of 70 tokens, 30 new tokens
# each, decoded in turns.

# %%
PROMPT, N_SAMPLES, NEW = 70, 4, 30
g = torch.Generator().manual_seed(1)
cow = paged.PagedKVCache(n_blocks=64, block_size=16, n_kv_heads=2, d_head=8, dtype=torch.float64)
k_prompt, v_prompt = torch.randn(2, PROMPT, 2, 8, generator=g, dtype=torch.float64)
cow.add_sequence(0)
cow.append(0, k_prompt, v_prompt)
for s in range(1, N_SAMPLES):
    cow.fork(0, s)                                   # shares the prompt's blocks: no copy
print(f"the prompt of {PROMPT} tokens and {N_SAMPLES - 1} forks: {64 - cow.free_blocks} blocks in use, "
      f"reference counts {[cow.refcount[b] for b in cow.tables[0]]}")
side = {s: (k_prompt, v_prompt) for s in range(N_SAMPLES)}
for _ in range(NEW):                                 # decoding: one token per sample per step, in turns
    for s in range(N_SAMPLES):
        k, v = torch.randn(2, 1, 2, 8, generator=g, dtype=torch.float64)
        cow.append(s, k, v)
        side[s] = (torch.cat([side[s][0], k]), torch.cat([side[s][1], v]))
worst = 0.0
for s, (k, v) in side.items():
    q = torch.randn(2, 8, generator=g, dtype=torch.float64)
    contiguous = F.scaled_dot_product_attention(q[:, None], k.transpose(0, 1), v.transpose(0, 1))[:, 0]
    worst = max(worst, (paged_fn(q, cow.k_pool, cow.v_pool, cow.tables[s], cow.lengths[s]) - contiguous).abs().max().item())
    print(f"sample {s}: block table {cow.tables[s]}")
shared, separate = 64 - cow.free_blocks, N_SAMPLES * -(-(PROMPT + NEW) // 16)
print(f"after {NEW} new tokens each: {shared} blocks with sharing, {separate} as {N_SAMPLES} separate copies "
      f"({1 - shared / separate:.0%} fewer); through the tables vs contiguous: max |difference| {tiny(worst)}")
assert worst < 1e-12 and shared < separate, "forked sequences must read their own keys, sharing the prompt's blocks"

# %% [markdown]
# After the forks, the 4 sequences hold the prompt's <!-- q:out#3 forks: -->5<!-- /q --> blocks
# between them, each referenced 4 times: sharing costs nothing. The prompt's last block was only
# partly filled; the first new token of samples 0, 1 and 2 went into it, so each of them copied it
# first, and sample 3, the last to write, found it referenced once and wrote into it in place (its
# table keeps the prompt's block <!-- q:out#sample 3: -->4<!-- /q -->). The prompt's full blocks stay
# shared to the end: <!-- q:out#after 30 new tokens each -->16<!-- /q --> blocks against
# the <!-- q:out#after 30 new tokens each -->28<!-- /q --> of separate copies, and every sample still
# reads its own keys exactly. The longer the shared part, the larger the saving: beams of a beam
# search share most of their text, and a system prompt can be shared by every request that starts
# with it.

# %% [markdown]
# ## 3. Sliding-window attention with a rolling-buffer cache
#
# **The idea** (Jiang et al. 2023, Mistral 7B, §2). Let each position attend only to the last $W$
# positions, itself included: chapter 3's causal mask intersected with its sliding-window mask, a
# band below the diagonal. A decoding step then needs only the last $W$ keys and values, so the
# cache can be a buffer of a fixed $W$ slots: "the keys and values for the timestep $i$ are stored
# in position $i \bmod W$ of the cache", overwriting the position $i - W$ that has just left the
# window. Mistral 7B uses $W = 4096$. Its keys then sit in the buffer out of order (position $i$ at
# slot $i \bmod W$); that does not matter, since attention does not depend on the order of its keys.
# (This course counts the window as the $W$ keys $i - W + 1, \dots, i$, what $W$ slots hold and what
# Mistral's code and Hugging Face's `sliding_window` compute; the paper's text says "between
# $i - W$ and $i$", one more.)
#
# The band for 8 positions and $W = 3$ (`rolling.banded_causal_mask`, built from chapter 3's
# `causal_mask` and `sliding_window_mask`), and the slot each position is written to:

# %%
W_DEMO, L_DEMO = 3, 8
print(rolling.banded_causal_mask(L_DEMO, W_DEMO).int())
print("slot of each position:", [i % W_DEMO for i in range(L_DEMO)])

# %% [markdown]
# Row $i$ of the band has ones at columns $i - 2$ to $i$: at position 5 the buffer's slots 0, 1 and
# 2 hold positions 3, 4 and 5, exactly the row's ones. Before the buffer is full (positions 0 and
# 1) only the slots written so far count; the others hold whatever was there.
#
# ### Exercise 2: one decoding step with a rolling buffer (1 + 3 points)
#
# Write `rolling_attend(q, k_new, v_new, k_buf, v_buf, pos)`, one decoding step of sliding-window
# attention with a window of `W` positions:
#
# - `k_buf` and `v_buf` are the buffers, `(n_heads, W, d_head)`, holding positions $0$ to `pos - 1`
#   as described above: position $i$ in slot $i \bmod W$, for the last `min(pos, W)` positions; a
#   slot not written yet holds stale values, any numbers. `q`, `k_new`, `v_new` are this position's
#   query, key and value, `(n_heads, d_head)`, of the buffers' dtype (float32 or float64). `pos` is a
#   Python int, the position of this step (0 for the first token).
# - Write `k_new` and `v_new` into slot `pos % W` of the buffers, **in place** (the caller keeps the
#   buffers: they are the only inputs you may change).
# - Then attend with `q` to the filled slots, the positions `max(0, pos - W + 1)` to `pos`: slots
#   $0$ to `pos` while `pos < W`, all `W` slots after. Scores scaled by $1/\sqrt{d_\text{head}}$, a
#   softmax, the weighted average of the values; every head on its own.
# - Return `(n_heads, d_head)` in `q`'s dtype.
# - Raise `ValueError` **before writing anything** when `k_buf` or `v_buf` is not 3-D or the two
#   differ in shape (the message names `k_buf` or `v_buf`); when `q`, `k_new` or `v_new` is not
#   `(n_heads, d_head)` of the buffers (names which one); when `pos` is not an int $\ge 0$ (names
#   `pos`).
#
# The tests decode whole sequences step by step, from buffers full of stale values, and compare
# every step with attention over the whole sequence under the banded causal mask (float64), and the
# buffers with the positions they must hold.
#
# <!-- domain: ex2_rolling rolling_attend -->
#
# The tests try every kind of input listed here:
# - `q`: float32; float64.
# - the arguments together: `pos` < W (a buffer still filling; its later slots hold stale values); `pos` >= W (a full buffer: the slot of position `pos` - W overwritten); W = 1.
# - must raise: `k_buf` or `v_buf` not 3-D, or the two of different shapes: ValueError; `q`, `k_new` or `v_new` not `(n_heads, d_head)` of the buffers: ValueError; `pos` not an int >= 0 (a negative int, a float): ValueError.
# - the inputs come back unchanged (except `k_buf`, `v_buf`).
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex2_rolling", "locked": false, "schema_version": 3, "solution": true}
def rolling_attend(q, k_new, v_new, k_buf, v_buf, pos):
    """One decoding step with a rolling buffer of W slots.

    Args:
        q, k_new, v_new: ``(n_heads, d_head)``, this position's query, key and value.
        k_buf, v_buf: ``(n_heads, W, d_head)``, the buffers (written in place).
        pos: this step's position, an int >= 0.
    Returns:
        ``(n_heads, d_head)``.
    """
    ### BEGIN SOLUTION
    if k_buf.dim() != 3 or k_buf.shape != v_buf.shape:
        raise ValueError(f"k_buf and v_buf must both be (n_heads, W, d_head), got {tuple(k_buf.shape)} "
                         f"and {tuple(v_buf.shape)}")
    n_heads, window, d_head = k_buf.shape
    for name, x in (("q", q), ("k_new", k_new), ("v_new", v_new)):
        if tuple(x.shape) != (n_heads, d_head):
            raise ValueError(f"{name} must be (n_heads, d_head) = ({n_heads}, {d_head}), got {tuple(x.shape)}")
    if type(pos) is not int or pos < 0:
        raise ValueError(f"pos must be an int >= 0, got {pos!r}")
    slot = pos % window                              # position pos lives in slot pos mod W
    k_buf[:, slot] = k_new
    v_buf[:, slot] = v_new
    n = min(pos + 1, window)                         # the slots written so far
    scores = torch.einsum("hd,hsd->hs", q, k_buf[:, :n]) / math.sqrt(d_head)
    return torch.einsum("hs,hsd->hd", torch.softmax(scores, dim=-1), v_buf[:, :n])
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex2_rolling-visible", "locked": true, "points": 1, "schema_version": 3, "solution": false} tags=["raises-exception"]
# 2 heads of d_head 4, a window of 3, 5 positions; the buffers start full of stale values (9.0)
_g = torch.Generator().manual_seed(92)
_q2, _k2, _v2 = torch.randn(3, 2, 5, 4, generator=_g, dtype=torch.float64)      # (n_heads, L, d_head) each
_band2 = F.scaled_dot_product_attention(_q2, _k2, _v2, attn_mask=rolling.banded_causal_mask(5, 3))
_kb2, _vb2 = torch.full((2, 2, 3, 4), 9.0, dtype=torch.float64)


def _steps2():
    for i in range(5):
        out = checks.call(rolling_attend, _q2[:, i], _k2[:, i], _v2[:, i], _kb2, _vb2, i)
        checks.expect_shape(out, (2, 4), f"out at position {i}: (n_heads, d_head)")
        checks.expect_close(out, _band2[:, i], f"position {i} vs the banded causal mask over the whole sequence "
                            f"(the window: positions {max(0, i - 2)} to {i})")


def _buffers2():
    checks.expect_close(_kb2, _k2[:, [3, 4, 2]], "k_buf after positions 0-4: slots 0, 1, 2 hold positions 3, 4, 2")
    checks.expect_close(_vb2, _v2[:, [3, 4, 2]], "v_buf after positions 0-4: slots 0, 1, 2 hold positions 3, 4, 2")


def _negative2():
    try:
        checks.call(rolling_attend, _q2[:, 0], _k2[:, 0], _v2[:, 0], _kb2.clone(), _vb2.clone(), -1)
    except ValueError as err:
        if "pos" not in str(err):
            checks.expect_equal(str(err), "a message naming pos", "the ValueError")
        return
    checks.expect_equal("returned", "raised ValueError", "rolling_attend with pos = -1")


checks.run_checks("rolling_attend", [
    ("5 steps with a window of 3, from stale buffers", _steps2),
    ("what the buffers hold after the 5 steps", _buffers2),
    ("ValueError for pos = -1", _negative2),
])

# %% nbgrader={"grade": true, "grade_id": "ex2_rolling-hidden", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# Hidden tests: windows of 1 to 16, sequences shorter than, as long as and several times longer than the
# window, float32 and float64, 1 to 4 heads; buffers full of stale values; every step against the banded
# causal mask over the whole sequence (float64), the buffers after the last step, the dtype; a step far
# into a long sequence; every declared bad input raises ValueError naming what is wrong and writes nothing.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(292)
# (n_heads, W, d_head, length, dtype)
_cases2 = [(2, 4, 3, 11, torch.float64), (3, 1, 2, 5, torch.float32), (1, 5, 4, 5, torch.float32),
           (2, 3, 4, 10, torch.float64), (4, 16, 2, 9, torch.float32)]
_in2, _got2, _bufs2 = [], [], []
for _h, _w, _d, _n, _dt in _cases2:
    _qkv = (torch.randn(3, _h, _n, _d, generator=_g, dtype=torch.float64) * 2).to(_dt)
    _stale = (torch.randn(2, _h, _w, _d, generator=_g, dtype=torch.float64) * 50).to(_dt)
    _in2.append((_qkv, _stale.clone()))
    _kb, _vb = _stale[0].clone(), _stale[1].clone()
    _got2.append([checks.call(rolling_attend, _qkv[0][:, i], _qkv[1][:, i], _qkv[2][:, i], _kb, _vb, i)
                  for i in range(_n)])
    _bufs2.append((_kb, _vb))
# a step far into a sequence: W = 7, position 1000 (slot 6), the buffer full
_far = torch.randn(5, 3, 7, 4, generator=_g, dtype=torch.float64)    # q, k_new, v_new in [:, 0]; the buffers
_far_kb, _far_vb = _far[3].clone(), _far[4].clone()
_got_far = checks.call(rolling_attend, _far[0][:, 0], _far[1][:, 0], _far[2][:, 0], _far_kb, _far_vb, 1000)


### BEGIN EXPECTED
def _expected2(qkv, stale):
    q, k, v = qkv.double()
    h, n, d = q.shape
    w = stale.shape[2]
    outs = []
    for i in range(n):
        lo = max(0, i - w + 1)
        s = torch.einsum("hd,hjd->hj", q[:, i], k[:, lo:i + 1]) / math.sqrt(d)
        outs.append(torch.einsum("hj,hjd->hd", torch.softmax(s, -1), v[:, lo:i + 1]))
    kb, vb = stale[0].double().clone(), stale[1].double().clone()
    for i in range(n):                        # the last position written into each slot
        kb[:, i % w], vb[:, i % w] = k[:, i], v[:, i]
    return outs, kb, vb


_want2 = [_expected2(qkv, stale) for qkv, stale in _in2]
_fk, _fv = _far[3].clone(), _far[4].clone()
_fk[:, 6], _fv[:, 6] = _far[1][:, 0], _far[2][:, 0]
_want_far = torch.einsum("hj,hjd->hd", torch.softmax(torch.einsum("hd,hjd->hj", _far[0][:, 0], _fk) / 2.0, -1), _fv)
_want_far_kb = _fk
### END EXPECTED


def _case2(r):
    h, w, d, n, dt = _cases2[r]
    what = f"case {r}: {h} heads, W = {w}, d_head {d}, {n} positions, {str(dt)[6:]}"
    for i in range(n):
        checks.expect_dtype(_got2[r][i], dt, f"{what}: the dtype at position {i}")
        checks.expect_close(_got2[r][i], _want2[r][0][i], f"{what}: position {i} vs the banded causal mask")
    checks.expect_close(_bufs2[r][0], _want2[r][1], f"{what}: k_buf after the last position")
    checks.expect_close(_bufs2[r][1], _want2[r][2], f"{what}: v_buf after the last position")


def _far2():
    checks.expect_close(_got_far, _want_far, "W = 7, position 1000 on a full buffer: all 7 slots")
    checks.expect_close(_far_kb, _want_far_kb, "W = 7, position 1000: k_buf (slot 1000 % 7 = 6 written)")


def _bad2(r):
    gen = torch.Generator().manual_seed(293)
    kb, vb = torch.randn(2, 2, 4, 3, generator=gen)            # 2 heads, W = 4, d_head 3
    q, k, v = torch.randn(3, 2, 3, generator=gen)
    bad = [("a 2-D k_buf", (q, k, v, kb[0], vb, 2), ("k_buf", "v_buf")),
           ("2-D k_buf and v_buf of one shape", (q, k, v, kb[0], vb[0], 2), ("k_buf", "v_buf")),
           ("a v_buf of W = 3", (q, k, v, kb, vb[:, :3], 2), ("k_buf", "v_buf")),
           ("q of shape (n_heads, 1, d_head)", (q[:, None], k, v, kb, vb, 2), ("q",)),
           ("k_new of d_head 2", (q, k[:, :2], v, kb, vb, 2), ("k_new",)),
           ("v_new of 1 head", (q, k, v[:1], kb, vb, 2), ("v_new",)),
           ("pos = -3", (q, k, v, kb, vb, -3), ("pos",)),
           ("pos = 2.0", (q, k, v, kb, vb, 2.0), ("pos",))]
    what, args, names = bad[r]
    before = [t.clone() for t in args[3:5]]
    _raises1_rolling(args, names, what)
    for name, t, b in zip(("k_buf", "v_buf"), args[3:5], before):
        checks.expect_equal(torch.equal(t, b), True, f"{name} after the ValueError for {what} (nothing written)")


def _raises1_rolling(args, names, what):
    import re
    try:
        checks.call(rolling_attend, *args)
    except ValueError as err:
        if not any(re.search(rf"\b{n}\b", str(err)) for n in names):
            checks.expect_equal(str(err), f"a message naming {' or '.join(names)}", f"the ValueError for {what}")
        return
    checks.expect_equal("returned", "raised ValueError", f"rolling_attend with {what}")


checks.run_checks("rolling_attend (hidden)", [
    *((f"case {r}", lambda r=r: _case2(r)) for r in range(len(_cases2))),
    ("a step far into a sequence", _far2),
    *((f"bad input {r}", lambda r=r: _bad2(r)) for r in range(8)),
])
### END HIDDEN TESTS

# %% [markdown]
# The cell below checks your `rolling_attend` on a probe (a window of 3, 7 positions from stale
# buffers, and a step at position -1, which must be refused before anything is written) and, if it agrees with the course's `rolling.rolling_attend`, decodes with it: 2 heads,
# 40 positions through a buffer of 8 slots, against the whole sequence at once under the banded
# causal mask, and, as the control, under the plain causal mask that sees every earlier position.

# %%
def _probe_rolling(fn):  # float64, 2 heads, W = 3, 7 positions from buffers full of stale values
    g = torch.Generator().manual_seed(29)
    q, k, v = torch.randn(3, 2, 7, 4, generator=g, dtype=torch.float64)
    kb, vb = torch.randn(2, 2, 3, 4, generator=g, dtype=torch.float64) * 10
    kb0, vb0 = kb.clone(), vb.clone()
    refused = refuses(fn, q[:, 0], k[:, 0], v[:, 0], kb, vb, -1)
    untouched = bool(torch.equal(kb, kb0) and torch.equal(vb, vb0))
    return torch.stack([fn(q[:, i], k[:, i], v[:, i], kb, vb, i) for i in range(7)]), kb, vb, refused, untouched


rolling_fn = checks.learner_or_reference(rolling_attend, rolling.rolling_attend, _probe_rolling, "rolling_attend")

H, L, W, D = 2, 40, 8, 16
g = torch.Generator().manual_seed(3)
q, k, v = torch.randn(3, H, L, D, generator=g, dtype=torch.float64)
k_buf, v_buf = torch.zeros(2, H, W, D, dtype=torch.float64)
steps = torch.stack([rolling_fn(q[:, i], k[:, i], v[:, i], k_buf, v_buf, i) for i in range(L)], dim=1)
band = F.scaled_dot_product_attention(q, k, v, attn_mask=rolling.banded_causal_mask(L, W))
causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
err_band = (steps - band).abs().max().item()
err_inside = (steps - causal)[:, :W].abs().max().item()
err_after = (steps - causal)[:, W:].abs().max().item()
print(f"{L} steps through a buffer of {W} slots vs the banded causal mask: max |difference| {tiny(err_band)}")
print(f"control, vs full causal attention: positions 0-{W - 1} max |difference| {tiny(err_inside)}, "
      f"positions {W}-{L - 1} max |difference| {err_after:.2f}")
print(f"the buffers: {k_buf.nbytes + v_buf.nbytes} bytes at every step; a full cache of {L} positions: "
      f"{2 * H * L * D * k.element_size()} bytes")
assert err_band < 1e-12 and err_inside < 1e-12 and err_after > 0.1, "the rolling buffer must equal the band, not full attention"

# %% [markdown]
# Every step equals the band, to float64's rounding: the buffer holds exactly the keys the band lets
# the query see, in another order. The control shows that the window is what changes the result: the
# first 8 positions agree with full causal attention too (their window holds every earlier position),
# and from position 8 on the two differ by up to <!-- q:out#control, vs full causal -->1.93<!-- /q -->.
# The buffers take <!-- q:out#the buffers: -->4096<!-- /q --> bytes at every step, where a full cache
# grows with every token. At Mistral 7B's sizes (the paper, §2: on a sequence of 32k tokens, the
# rolling buffer "reduces the cache memory usage by 8x"):

# %%
MISTRAL, MISTRAL_W = MODELS["Mistral 7B (GQA, 8 kv heads)"], 4096
print(f"Mistral 7B, W = {MISTRAL_W}, 16-bit values:")
for n in (4096, 8192, 16384, 32768):
    full = kvcache.kv_cache_bytes(*MISTRAL, seq_len=n)
    buffer = kvcache.kv_cache_bytes(*MISTRAL, seq_len=min(n, MISTRAL_W))
    print(f"{n:>6} tokens: a full cache {full / 2**30:.1f} GiB, the rolling buffer {buffer / 2**30:.1f} GiB "
          f"(full / buffer = {full / buffer:.0f})")

# %% [markdown]
# Up to the window the two are the same; from there the full cache grows and the buffer stays
# at <!-- q:out#32768 tokens -->0.5<!-- /q --> GiB, <!-- q:out#32768 tokens -->8<!-- /q --> times less at
# 32,768 tokens: the paper's 8x. Per request, that is: the paging of section 2 still decides how
# many requests share the memory.
#
# **What a token still reaches.** A token that has left the window is gone from the buffer, but not
# from the model: at the layer below, the positions inside the window had it in theirs. Each layer
# reaches $W - 1$ positions further back, so after $n$ layers the last position depends on
# $n(W - 1) + 1$ inputs (`rolling.receptive_field`). The paper: "at the last layer, using a window
# size of W = 4096, we have a theoretical attention span of approximately 131K tokens", for
# Mistral's 32 layers. The cell measures the span instead of counting it: a stack of windowed
# attention layers with random weights and residual connections, and the inputs whose gradient at the
# last position's output is not zero.

# %%
def depends_on(n_layers, L_rf, W_rf, d=8):
    """How many input positions the last position's output depends on, through n_layers of windowed
    attention (random weights, residual connections): the inputs whose gradient is not zero."""
    gen = torch.Generator().manual_seed(n_layers)
    x = torch.randn(L_rf, d, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = rolling.banded_causal_mask(L_rf, W_rf)
    h = x
    for _ in range(n_layers):
        Wq, Wk, Wv = torch.randn(3, d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
        h = h + F.scaled_dot_product_attention(h @ Wq, h @ Wk, h @ Wv, attn_mask=mask)
    h[-1].sum().backward()
    return int((x.grad.abs().sum(dim=1) > 0).sum())


for n in range(1, 5):
    print(f"{n} layer(s) of W = 4 over 40 positions: the last output depends on {depends_on(n, 40, 4)} inputs; "
          f"n (W - 1) + 1 = {rolling.receptive_field(n, 4)}")
    assert depends_on(n, 40, 4) == rolling.receptive_field(n, 4), "the receptive field must grow by W - 1 per layer"
print(f"Mistral 7B, 32 layers of W = 4096: {rolling.receptive_field(32, 4096):,} positions "
      f"(the paper's round count, 32 x 4096 = {32 * 4096:,})")

# %% [markdown]
# Each layer adds $W - 1 = 3$ inputs, and the measured dependency is the formula's. For
# Mistral, <!-- q:out#Mistral 7B, 32 layers -->131,041<!-- /q --> positions, the paper's "approximately 131K"
# (which counts $32 \times 4096$). "Depends on" is not "remembers": what reaches the last layer from
# far back has passed through the hidden states of the positions between, one vector of $d_\text{model}$
# numbers per position and layer.

# %% [markdown]
# ### Exercise 2b: which position each slot holds (1 + 1 points)
#
# Exercise 2 read the first `min(pos + 1, W)` slots without asking which position each one holds,
# since attention does not care. The band does name positions. Write `slot_positions(pos, window)`:
# the position that each of the `window` slots holds once positions $0$ to `pos` have been written,
# position $i$ into slot $i \bmod W$.
#
# - `pos` is a Python int $\ge 0$, the last position written; `window` a Python int $\ge 1$.
# - Return a 1-D tensor of `window` entries of dtype `torch.long`: entry $s$ is the largest
#   position $i \le$ `pos` with $i \bmod W = s$, or $-1$ where no position has been written into slot
#   $s$ yet. Positions are exact however large (`pos` may pass $2^{31}$; no float on the way).
# - Raise `ValueError` when `pos` is not an int $\ge 0$ (a negative int, a float; the message names
#   `pos`), or when `window` is not an int $\ge 1$ (names `window`).
#
# <!-- domain: ex2b_slots slot_positions -->
#
# The tests try every kind of input listed here:
# - the arguments together: `pos` = 0 (one slot written); 0 < `pos` < `window` - 1 (some slots not written yet); `pos` = `window` - 1 (every slot written once); `pos` >= `window` (older positions overwritten); `window` = 1; `pos` past 2**31 (exact in a long tensor).
# - must raise: `pos` not an int >= 0 (a negative int, a float): ValueError; `window` not an int >= 1 (0, a float): ValueError.
# - the inputs come back unchanged.
#
# <!-- /domain -->

# %% nbgrader={"grade": false, "grade_id": "ex2b_slots", "locked": false, "schema_version": 3, "solution": true}
def slot_positions(pos, window):
    """The position each slot of a rolling buffer of ``window`` slots holds after position ``pos``.

    Returns:
        ``(window,)`` torch.long, -1 for a slot not written yet.
    """
    ### BEGIN SOLUTION
    if type(pos) is not int or pos < 0:
        raise ValueError(f"pos must be an int >= 0, got {pos!r}")
    if type(window) is not int or window < 1:
        raise ValueError(f"window must be an int >= 1, got {window!r}")
    slots = torch.arange(window)
    last = pos - (pos - slots) % window              # the last position i <= pos with i mod W = slot
    return torch.where(last >= 0, last, torch.full_like(last, -1))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex2b_slots-visible", "locked": true, "points": 1, "schema_version": 3, "solution": false} tags=["raises-exception"]
def _slots2b(pos, window, want):
    got = checks.call(slot_positions, pos, window)
    checks.expect_dtype(got, torch.long, f"slot_positions({pos}, {window})")
    checks.expect_equal(got, torch.tensor(want), f"slot_positions({pos}, {window})")


def _window0_2b():
    try:
        checks.call(slot_positions, 3, 0)
    except ValueError as err:
        if "window" not in str(err):
            checks.expect_equal(str(err), "a message naming window", "the ValueError")
        return
    checks.expect_equal("returned", "raised ValueError", "slot_positions(3, 0)")


checks.run_checks("slot_positions", [
    ("W = 3 after position 5: slots 0, 1, 2 hold 3, 4, 5", lambda: _slots2b(5, 3, [3, 4, 5])),
    ("W = 3 after position 4: slot 2 still holds 2", lambda: _slots2b(4, 3, [3, 4, 2])),
    ("W = 3 after position 1: slot 2 not written yet", lambda: _slots2b(1, 3, [0, 1, -1])),
    ("ValueError for window 0", _window0_2b),
])

# %% nbgrader={"grade": true, "grade_id": "ex2b_slots-hidden", "locked": true, "points": 1, "schema_version": 3, "solution": false}
# Hidden tests: every position from 0 to 3 W + 1 for windows 1 to 7, random (position, window) pairs,
# positions past 2**31 and 2**40, against writing the positions into W slots one by one; the dtype;
# every declared bad input raises ValueError naming what is wrong.
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(392)
_pairs2b = [(p, w) for w in range(1, 8) for p in range(3 * w + 2)]
_pairs2b += [(int(p), int(w)) for p, w in zip(torch.randint(0, 10**6, (20,), generator=_g),
                                              torch.randint(1, 5000, (20,), generator=_g))]
_pairs2b += [(2**31 + int(torch.randint(0, 10**6, (1,), generator=_g)), 4096), (2**40 + 3, 7)]
_got2b = [checks.call(slot_positions, p, w) for p, w in _pairs2b]


### BEGIN EXPECTED
def _written2b(pos, window):
    slots = [-1] * window
    start = max(0, pos - window + 1)                 # the earlier positions are all overwritten
    for i in range(start, pos + 1):
        slots[i % window] = i
    return torch.tensor(slots, dtype=torch.long)


_want2b = [_written2b(p, w) for p, w in _pairs2b]
### END EXPECTED


def _pair2b(r):
    p, w = _pairs2b[r]
    checks.expect_dtype(_got2b[r], torch.long, f"slot_positions({p}, {w})")
    checks.expect_equal(_got2b[r], _want2b[r], f"slot_positions({p}, {w})")


def _bad2b(r):
    bad = [((-1, 3), "pos"), ((2.0, 3), "pos"), ((-7, 1), "pos"), ((5, 0), "window"), ((5, 2.0), "window"),
           ((0, -3), "window")]
    (p, w), name = bad[r]
    try:
        checks.call(slot_positions, p, w)
    except ValueError as err:
        if name not in str(err):
            checks.expect_equal(str(err), f"a message naming {name}", f"the ValueError for slot_positions({p!r}, {w!r})")
        return
    checks.expect_equal("returned", "raised ValueError", f"slot_positions({p!r}, {w!r})")


checks.run_checks("slot_positions (hidden)", [
    *((f"pair {r}: slot_positions{_pairs2b[r]}", lambda r=r: _pair2b(r)) for r in range(len(_pairs2b))),
    *((f"bad input {r}", lambda r=r: _bad2b(r)) for r in range(6)),
])
### END HIDDEN TESTS

# %% [markdown]
# The cell below checks your `slot_positions` on a probe and, if it agrees with the course's
# `rolling.slot_positions`, uses it to check the claim of this section by enumeration: for windows of
# 1, 3 and 8 and every position up to four windows, the positions the buffer holds are exactly the
# columns that row `pos` of the banded causal mask lets the query see.

# %%
def _probe_slots(fn):
    return [fn(p, w) for p, w in ((0, 1), (6, 1), (2, 5), (4, 5), (13, 5), (2**33 + 5, 6))], refuses(fn, 2.0, 3)


slot_fn = checks.learner_or_reference(slot_positions, rolling.slot_positions, _probe_slots, "slot_positions")
rows = 0
for W_check in (1, 3, 8):
    band = rolling.banded_causal_mask(4 * W_check, W_check)
    for pos in range(4 * W_check):
        held = sorted(p for p in slot_fn(pos, W_check).tolist() if p >= 0)
        assert held == torch.nonzero(band[pos]).flatten().tolist(), f"slots vs band row {pos}, W = {W_check}"
        rows += 1
print(f"{rows} rows of the band (W = 1, 3, 8): the buffer's positions equal the row's columns in every one")
print("W = 3, positions 0-6:", [slot_fn(pos, 3).tolist() for pos in range(7)])

# %% [markdown]
# In every one of the <!-- q:out#rows of the band -->48<!-- /q --> rows the buffer holds exactly the
# positions the band allows: exercise 2 compared the outputs of the two computations, this compares
# what they read. The printed run for $W = 3$ is the slot table of this section's start, filled in:
# each slot keeps its position until the position $W$ later overwrites it.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q1_window-prompt", "locked": true, "schema_version": 3, "solution": false}
# **Question 1 (2 points).** A Mistral-style model with $W = 4096$ and 32 layers reads a text of
# 20,000 tokens and must answer a question about token 1,000, a name that appears nowhere else. The
# measurement above says that the last position's output depends on token 1,000. Can the model copy
# the name as reliably as a model with full attention over the 20,000 tokens? Explain where the name
# is when the last token is decoded, and what the rolling buffer has thrown away. Write your answer
# in the cell below.

# %% [markdown] nbgrader={"grade": true, "grade_id": "q1_window", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# Not as reliably. With full attention, the last position's query at any layer can put its weight
# on token 1,000's key and read its value directly, one step. With the window, token 1,000's own key
# and value left every layer's buffer once the decoder passed position 5,095; the name survives only
# inside hidden states of later positions, carried forward window by window: layer 1 at positions up
# to 5,095 may have read it, layer 2 at positions up to about 9,190 may have read those, and so on,
# about 5 windows and so 5 or more layers deep to cover 19,000 positions. At every hop it has to be
# written into, and kept in, a vector of $d_\text{model}$ numbers that also carries everything else
# that position needs, and the chain must have been learned; nothing guarantees it. The receptive
# field says that the output *can* depend on token 1,000 (a gradient is not zero), not how much
# information about it arrives. The rolling buffer threw away the keys and values themselves, the
# exact, addressable copy of the token that attention would retrieve.
#
# **Rubric** (for the grader, 2 points):
#
# - **1 point** for where the name is: no longer in any cache (its key and value were overwritten
#   after 4,096 positions), only inside the hidden states of later positions, passed on from window
#   to window through several layers. Saying only "no, it is outside the window" without the
#   layer-by-layer path gets no point for this part.
# - **1 point** for why that is weaker than full attention: a direct, one-step read of the exact key
#   and value is replaced by a chain of hops through fixed-size vectors that must have kept it
#   (depending on does not mean retrieving; a non-zero gradient can be tiny).
# ### END SOLUTION

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
# turn, and all kept, in float64 and float32) and, if it agrees with the course's `speculative.verify_draft`, the
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
    for dtype in (torch.float64, torch.float32):        # and the distribution keeps p's dtype
        for i in range(5):
            u = ratio * 0.99
            if i < 4:
                u[i] = min(1.0, float(ratio[i])) * 1.01 if ratio[i] < 0.99 else 0.999
            n, dist = fn(p.to(dtype), q.to(dtype), x, u.to(dtype))
            same = float(dist.dtype == dtype)
            out.append(torch.cat([torch.tensor([float(n), same], dtype=torch.float64), dist.double()]))
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

# %% [markdown] nbgrader={"grade": false, "grade_id": "q2_speedup-prompt", "locked": true, "schema_version": 3, "solution": false}
# **Question 2 (2 points).** Let $c$ be the time of one draft pass divided by the time of one
# target pass, and assume a target pass over $\gamma + 1$ positions takes as long as over one.
# Write the expected time per emitted token of speculative decoding, relative to plain decoding
# with the target, in terms of $\alpha$, $\gamma$ and $c$. Then say why a larger $\gamma$ is not
# always better, and what happens with a draft that is as good as the target but as slow
# ($\alpha = 1$, $c = 1$). Write your answer in the cell below.

# %% [markdown] nbgrader={"grade": true, "grade_id": "q2_speedup", "locked": false, "points": 2, "schema_version": 3, "solution": true}
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
# **Rubric** (for the grader, 2 points):
#
# - **1 point** for the ratio: the cost $\gamma c + 1$ per step over the expected tokens
#   $(1 - \alpha^{\gamma+1})/(1 - \alpha)$ (or its inverse stated as the speed-up).
# - **1 point** for the two consequences: the expected tokens saturate while the cost grows linearly
#   in $\gamma$, so a larger $\gamma$ can lose; and at $\alpha = c = 1$ the ratio is 1 (no gain).
#   An answer that only says "more drafting costs more" without the saturation gets half of this
#   point.
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
    out = torch.cat([fn(h[:, a:b], c[:, :b], kr[:, :b], W) for a, b in ((0, 3), (3, 4), (4, 6))], 1)
    W32 = {k: w.float() for k, w in W.items()}
    out32 = fn(h[:, 4:].float(), c.float(), kr.float(), W32)       # float32 in, float32 out
    return torch.cat([out.flatten(), out32.double().flatten(), torch.tensor([float(out32.dtype == torch.float32)],
                                                                             dtype=torch.float64)])


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
# ## 7. What is still missing
#
# Sections 2 and 3 change where the keys and values are stored, sections 4 to 6 how many passes and
# bytes a token costs, and each gives exactly the computation it replaces (int8 within its bound).
# What they leave open:
#
# * **the kernel.** Here the gather through the table copies the sequence's keys into a contiguous
#   tensor before attending; vLLM's PagedAttention kernel reads the blocks where they are, inside the
#   attention kernel, and that (with batching) is where its throughput comes from, a GPU measurement;
# * **the scheduler.** Which requests to run at each step, when to admit a new one or to evict one
#   whose cache no longer fits (vLLM swaps its blocks out or recomputes them later), and prefix
#   caching, the sharing of section 2 between requests that arrive at different times;
# * **training with the window.** A window imposed only at inference, on a model trained with full
#   attention, loses what the model learned to read beyond it; Mistral is trained with its window.
#   Some models interleave windowed layers with full-attention ones;
# * **the speed-up itself.** Speculative decoding pays when a target pass over several tokens costs
#   about one over a single token, which holds where decoding is limited by memory bandwidth (a GPU
#   at small batch); on this CPU the chapter measures tokens per target pass, not the time saved.
#   Drafts need not be separate models either: extra heads on the target, or the target's own
#   earlier layers, can propose;
# * **training with latents.** MLA is a choice made before training (DeepSeek-V2 trains with it);
#   turning a trained MHA model into MLA, as chapter 4 turned MHA into GQA, needs uptraining.
#
# ## References
#
# * W. Kwon, Z. Li, S. Zhuang, Y. Sheng, L. Zheng, C. H. Yu, J. E. Gonzalez, H. Zhang, I. Stoica.
#   *Efficient Memory Management for Large Language Model Serving with PagedAttention.* SOSP 2023.
#   [arXiv:2309.06180](https://arxiv.org/abs/2309.06180) (§4: blocks, block tables, copy-on-write;
#   Figure 2: 20.4 % to 38.2 % of the cache memory used for tokens' states in the systems before;
#   a default block size of 16).
# * A. Q. Jiang et al. *Mistral 7B.* 2023. [arXiv:2310.06825](https://arxiv.org/abs/2310.06825)
#   (§2: sliding-window attention with $W = 4096$, the rolling buffer cache at $i \bmod W$, the
#   theoretical span of about 131K tokens at the last layer, 8x less cache memory on 32k tokens).
# * Y. Leviathan, M. Kalman, Y. Matias. *Fast Inference from Transformers via Speculative Decoding.*
#   ICML 2023. [arXiv:2211.17192](https://arxiv.org/abs/2211.17192) (the acceptance rule and the
#   residual, §2.3; the expected tokens per step $(1 - \alpha^{\gamma+1}) / (1 - \alpha)$, Eq. 1).
# * C. Chen, S. Borgeaud, G. Irving, J.-B. Lespiau, L. Sifre, J. Jumper. *Accelerating Large
#   Language Model Decoding with Speculative Sampling.* 2023.
#   [arXiv:2302.01318](https://arxiv.org/abs/2302.01318).
# * DeepSeek-AI. *DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts Language
#   Model.* 2024. [arXiv:2405.04434](https://arxiv.org/abs/2405.04434) (§2.1: multi-head latent
#   attention, $d_c = 4 d_h$, $d_h^R = d_h / 2$, the cache of $d_c + d_h^R$ values per token and
#   layer, equal to GQA with 2.25 groups; the up-projections absorbed at inference).
