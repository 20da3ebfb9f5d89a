"""A paged key/value cache: fixed-size blocks, a block table per sequence, copy-on-write (chapter 9).

vLLM's PagedAttention (Kwon et al., "Efficient Memory Management for Large Language Model Serving
with PagedAttention", SOSP 2023) stores each sequence's keys and values in fixed-size *blocks*
(16 tokens in vLLM) taken from one pool, like pages of virtual memory. A sequence's *block table*
lists its blocks in order; position ``t`` lives in block ``table[t // block_size]`` at slot
``t % block_size``. Memory is reserved one block at a time, so a sequence wastes at most
``block_size - 1`` slots (internal fragmentation), where a contiguous cache preallocated to the
maximum length wastes ``max_len - length``. Sequences that share a prompt (parallel sampling, beam
search) share its blocks by reference count; a write into a shared, partly filled last block copies
it first (copy-on-write).

Shapes: the pools are ``(n_blocks, block_size, n_kv_heads, d_head)``; a sequence's keys and values
are ``(length, n_kv_heads, d_head)``; a query is ``(n_heads, T_q, d_head)`` (one decoding step of
:func:`paged_attention`: ``(n_heads, d_head)``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from course_utils._validate import check_int

__all__ = ["PagedKVCache", "paged_attention", "paged_memory"]


class PagedKVCache:
    """A pool of ``n_blocks`` blocks of ``block_size`` tokens, and one block table per sequence.

    ``k_pool`` and ``v_pool`` are ``(n_blocks, block_size, n_kv_heads, d_head)``; ``tables[seq]``
    lists the sequence's blocks, ``lengths[seq]`` its number of tokens, ``refcount[b]`` how many
    sequences use block ``b`` (0: free).
    """

    def __init__(self, n_blocks: int, block_size: int, n_kv_heads: int, d_head: int,
                 dtype: torch.dtype = torch.float32, device=None):
        for value, name in ((n_blocks, "n_blocks"), (block_size, "block_size"),
                            (n_kv_heads, "n_kv_heads"), (d_head, "d_head")):
            check_int(value, name, low=1)
        self.block_size = block_size
        shape = (n_blocks, block_size, n_kv_heads, d_head)
        self.k_pool = torch.zeros(shape, dtype=dtype, device=device)
        self.v_pool = torch.zeros(shape, dtype=dtype, device=device)
        self.refcount = [0] * n_blocks
        self.tables: dict[object, list[int]] = {}
        self.lengths: dict[object, int] = {}

    def __repr__(self) -> str:
        n, b, h, d = self.k_pool.shape
        return (f"PagedKVCache(n_blocks={n}, block_size={b}, n_kv_heads={h}, d_head={d}, "
                f"sequences={len(self.tables)}, free_blocks={self.free_blocks})")

    @property
    def free_blocks(self) -> int:
        """The number of blocks no sequence uses."""
        return self.refcount.count(0)

    def _seq(self, seq) -> list[int]:
        if seq not in self.tables:
            raise KeyError(f"no sequence {seq!r} in the cache (known: {sorted(map(repr, self.tables))})")
        return self.tables[seq]

    def _allocate(self) -> int:
        try:
            block = self.refcount.index(0)
        except ValueError:
            raise RuntimeError(f"the pool is full: all {len(self.refcount)} blocks are in use; "
                               "free a sequence or make a larger pool") from None
        self.refcount[block] = 1
        return block

    def add_sequence(self, seq) -> None:
        """Start an empty sequence named ``seq`` (any hashable); no block is reserved yet."""
        if seq in self.tables:
            raise ValueError(f"sequence {seq!r} already exists")
        self.tables[seq] = []
        self.lengths[seq] = 0

    def _check_kv(self, k: torch.Tensor, v: torch.Tensor) -> None:
        want = tuple(self.k_pool.shape[2:])
        for name, x in (("k", k), ("v", v)):
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
            if x.dim() != 3 or tuple(x.shape[1:]) != want:
                raise ValueError(f"{name} must be (T, n_kv_heads, d_head) = (T, {want[0]}, {want[1]}), "
                                 f"got {tuple(x.shape)}")
        if k.shape != v.shape:
            raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")

    def _writable_last(self, table: list[int]) -> int:
        """The last block, copied first if another sequence shares it (copy-on-write)."""
        last = table[-1]
        if self.refcount[last] > 1:
            copy = self._allocate()
            self.k_pool[copy] = self.k_pool[last]
            self.v_pool[copy] = self.v_pool[last]
            self.refcount[last] -= 1
            table[-1] = last = copy
        return last

    def append(self, seq, k: torch.Tensor, v: torch.Tensor) -> None:
        """Append ``T`` tokens' keys and values, ``k`` and ``v`` of shape ``(T, n_kv_heads, d_head)``."""
        table = self._seq(seq)
        self._check_kv(k, v)
        for t in range(k.shape[0]):
            pos = self.lengths[seq]
            slot = pos % self.block_size
            block = self._allocate() if slot == 0 else self._writable_last(table)
            if slot == 0:
                table.append(block)
            self.k_pool[block, slot] = k[t]
            self.v_pool[block, slot] = v[t]
            self.lengths[seq] = pos + 1

    def fork(self, src, dst) -> None:
        """Start ``dst`` as a copy of ``src`` that shares all its blocks (reference counts + 1)."""
        table = self._seq(src)
        self.add_sequence(dst)
        self.tables[dst] = list(table)
        self.lengths[dst] = self.lengths[src]
        for block in table:
            self.refcount[block] += 1

    def free(self, seq) -> None:
        """Drop sequence ``seq``; each of its blocks returns to the pool when no one else uses it."""
        for block in self._seq(seq):
            self.refcount[block] -= 1
        del self.tables[seq], self.lengths[seq]

    def gather(self, seq) -> tuple[torch.Tensor, torch.Tensor]:
        """The sequence's keys and values, each ``(length, n_kv_heads, d_head)``, read through its table."""
        table = self._seq(seq)
        n = self.lengths[seq]
        index = torch.tensor(table, dtype=torch.long, device=self.k_pool.device)
        k = self.k_pool[index].flatten(0, 1)[:n]
        v = self.v_pool[index].flatten(0, 1)[:n]
        return k, v

    def attend(self, seq, q: torch.Tensor) -> torch.Tensor:
        """Attention of ``q`` ``(n_heads, T_q, d_head)`` to all the sequence's keys (no mask), through
        the block table; ``n_heads`` a multiple of ``n_kv_heads`` (GQA). Returns ``(n_heads, T_q, d_head)``."""
        k, v = self.gather(seq)
        return _attend_kv(q, k, v, seq)


def _attend_kv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq) -> torch.Tensor:
    """``q`` ``(n_heads, T_q, d_head)`` attends to ``k``, ``v`` ``(length, n_kv_heads, d_head)`` (no mask)."""
    n_kv = k.shape[1]
    if not isinstance(q, torch.Tensor) or q.dim() != 3 or q.shape[-1] != k.shape[-1] or q.shape[0] % n_kv:
        raise ValueError(f"q must be (n_heads, T_q, d_head) with d_head = {k.shape[-1]} and n_heads a "
                         f"multiple of n_kv_heads = {n_kv}, got {getattr(q, 'shape', type(q).__name__)}")
    if k.shape[0] == 0:
        raise ValueError(f"sequence {seq!r} is empty: there is nothing to attend to")
    rep = q.shape[0] // n_kv
    k = k.transpose(0, 1).repeat_interleave(rep, dim=0)
    v = v.transpose(0, 1).repeat_interleave(rep, dim=0)
    return F.scaled_dot_product_attention(q, k, v)


def _table_index(block_table, length: int, block_size: int, n_blocks: int) -> torch.Tensor:
    """The first ``ceil(length / block_size)`` entries of ``block_table`` as a long tensor, checked."""
    check_int(length, "length", low=1, note="the tokens to attend to")
    if isinstance(block_table, torch.Tensor):
        table = block_table
    elif isinstance(block_table, (list, tuple)) and all(isinstance(b, int) and not isinstance(b, bool)
                                                          for b in block_table):
        table = torch.tensor(list(block_table), dtype=torch.long)
    else:
        raise ValueError(f"block_table must be a list of Python ints or a 1-D integer tensor, got {block_table!r:.60}")
    if table.dim() != 1 or table.is_floating_point() or table.is_complex() or table.dtype == torch.bool:
        raise ValueError(f"block_table must be 1-D of integers, got shape {tuple(table.shape)} and {table.dtype}")
    need = -(-length // block_size)
    if table.numel() < need:
        raise ValueError(f"block_table holds {table.numel()} blocks of {block_size} slots: too short for length "
                         f"{length}, which needs {need}")
    index = table[:need].long()
    if bool(((index < 0) | (index >= n_blocks)).any()):
        raise ValueError(f"block_table entries must be block numbers in [0, {n_blocks - 1}], got {index.tolist()}")
    return index


def paged_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, block_table,
                    length: int) -> torch.Tensor:
    """One decoding step of attention through a block table: ``q`` ``(n_heads, d_head)`` attends to the
    ``length`` keys and values that ``block_table`` points at in the pools ``(n_blocks, block_size,
    n_kv_heads, d_head)`` (position ``t`` at block ``block_table[t // block_size]``, slot ``t %
    block_size``; query head ``i`` reads key/value head ``i // (n_heads // n_kv_heads)``; no mask).
    ``block_table``: a list of Python ints or a 1-D integer tensor; entries past the ones ``length``
    needs are ignored. Returns ``(n_heads, d_head)``. Raises ``ValueError`` naming what is wrong."""
    if not isinstance(q, torch.Tensor) or q.dim() != 2:
        raise ValueError(f"q must be (n_heads, d_head), got {getattr(q, 'shape', type(q).__name__)}")
    for name, pool in (("k_pool", k_pool), ("v_pool", v_pool)):
        if not isinstance(pool, torch.Tensor) or pool.dim() != 4:
            raise ValueError(f"{name} must be (n_blocks, block_size, n_kv_heads, d_head), "
                             f"got {getattr(pool, 'shape', type(pool).__name__)}")
    if k_pool.shape != v_pool.shape:
        raise ValueError(f"k_pool and v_pool must have one shape, got {tuple(k_pool.shape)} and {tuple(v_pool.shape)}")
    n_blocks, block_size, n_kv, d_head = k_pool.shape
    if q.shape[1] != d_head:
        raise ValueError(f"q's d_head must be the pools' {d_head}, got q of shape {tuple(q.shape)}")
    if q.shape[0] % n_kv:
        raise ValueError(f"n_heads (q's {q.shape[0]} heads) must be a multiple of the pools' n_kv_heads = {n_kv}")
    index = _table_index(block_table, length, block_size, n_blocks).to(k_pool.device)
    k = k_pool[index].flatten(0, 1)[:length]
    v = v_pool[index].flatten(0, 1)[:length]
    return _attend_kv(q[:, None], k, v, None)[:, 0]


def paged_memory(lengths: Sequence[int], max_len: int, block_size: int = 16) -> dict[str, int]:
    """Token slots of a batch of sequences of ``lengths``: ``used`` (sum of the lengths),
    ``contiguous`` (each preallocated to ``max_len``), ``paged`` (each rounded up to whole blocks of
    ``block_size``), and the waste of each (``paged_waste <= len(lengths) * (block_size - 1)``).
    Multiply by ``2 * n_layers * n_kv_heads * d_head * bytes`` for bytes."""
    check_int(max_len, "max_len", low=1)
    check_int(block_size, "block_size", low=1)
    for n in lengths:
        check_int(n, "each length", low=0, high=max_len, note="a sequence fits in max_len")
    used = sum(lengths)
    contiguous = len(lengths) * max_len
    paged = sum(math.ceil(n / block_size) * block_size for n in lengths)
    return {"used": used, "contiguous": contiguous, "paged": paged,
            "contiguous_waste": contiguous - used, "paged_waste": paged - used}
