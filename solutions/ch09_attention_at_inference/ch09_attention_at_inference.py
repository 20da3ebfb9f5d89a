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
# the length of the text. Each one is checked equal to the plain computation and measured.
#
# **What you will build**: one decoding step of attention read through a block table; one
# decoding step with a rolling buffer (the write into the slot `pos % W` and the read of the filled
# slots); and which position each slot of the buffer holds, checked against the banded mask. The reference versions live in `course_utils.paged` (`PagedKVCache`, `paged_attention`,
# `paged_memory`) and `course_utils.rolling` (`rolling_attend`, `slot_positions`, `RollingKVCache`,
# `banded_causal_mask`, `receptive_field`).
#
# **Exercises** (graded by the test cells below each one): 1 `paged_attention` (4 points),
# 2 `rolling_attend` (4), 2b `slot_positions` (2); one written question (2).
#
# **The outputs you see first.** Until you run a cell, the output under it is the course's stored
# run, the one this text calls "the stored run". Running the cell replaces it with the output
# of your own run, which can differ from the stored one wherever the text gives a range.

# %%
import math

import torch
import torch.nn.functional as F

from course_utils import budget, checks, kvcache, paged, rolling, train

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
# **Rubric** (for the grader, two points): one point for where the name is: no longer in any cache
# (its key and value were overwritten after 4,096 positions), only inside the hidden states of
# later positions, passed on from window to window through several layers; one point for why that
# is weaker than full attention: a direct, one-step read of the exact key and value is replaced by a
# chain of hops through fixed-size vectors that must have kept it (depending on does not mean
# retrieving; a non-zero gradient can be tiny). Saying only "no, it is outside the window" without
# the layer-by-layer path gets no point for the first part.
# ### END SOLUTION

# %% [markdown]
# ## 4. What is still missing
#
# Both sections change where the keys and values are stored, and both give exactly the attention of
# the plain computation. What they leave open:
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
# * **the size of each entry.** Both sections keep every key and value in full: fewer bytes per token
#   need fewer or smaller entries per token.
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
