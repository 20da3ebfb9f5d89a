"""The paged KV cache: attention through the block table equals dense attention, bitwise (the same
SDPA call on the same key and value values, gathered instead of stored contiguously)."""

import pytest
import torch
import torch.nn.functional as F

from course_utils.paged import PagedKVCache, paged_attention, paged_memory

H, D, BS = 2, 8, 4


def _dense(q, k, v):
    rep = q.shape[0] // k.shape[1]
    return F.scaled_dot_product_attention(q, k.transpose(0, 1).repeat_interleave(rep, 0),
                                          v.transpose(0, 1).repeat_interleave(rep, 0))


def test_paged_equals_dense_ragged_forks_and_frees():
    g = torch.Generator().manual_seed(0)
    cache = PagedKVCache(n_blocks=32, block_size=BS, n_kv_heads=H, d_head=D, dtype=torch.float64)
    dense = {}
    for seq, n in (("a", 5), ("b", 8), ("c", 1), ("d", 11)):
        k, v = torch.randn(n, H, D, generator=g, dtype=torch.float64), torch.randn(n, H, D, generator=g, dtype=torch.float64)
        cache.add_sequence(seq)
        cache.append(seq, k[:2], v[:2])
        cache.append(seq, k[2:], v[2:])
        dense[seq] = (k, v)
    cache.fork("a", "a2")                       # shares a's 2 blocks, the last one partly filled
    dense["a2"] = dense["a"]
    cache.free("c")
    del dense["c"]
    for seq in ("a", "a2", "d"):                # write after the fork: copy-on-write
        k, v = torch.randn(3, H, D, generator=g, dtype=torch.float64), torch.randn(3, H, D, generator=g, dtype=torch.float64)
        cache.append(seq, k, v)
        dense[seq] = (torch.cat([dense[seq][0], k]), torch.cat([dense[seq][1], v]))
    for seq, (k, v) in dense.items():
        gk, gv = cache.gather(seq)
        assert torch.equal(gk, k) and torch.equal(gv, v)
        q = torch.randn(2 * H, 3, D, generator=g, dtype=torch.float64)   # GQA: 2 query heads per kv head
        assert torch.equal(cache.attend(seq, q), _dense(q, k, v))


def test_refcounts_and_copy_on_write():
    cache = PagedKVCache(8, BS, 1, 2)
    cache.add_sequence(0)
    cache.append(0, torch.ones(6, 1, 2), torch.ones(6, 1, 2))      # blocks: 1 full, 1 with 2 of 4
    assert cache.free_blocks == 6
    cache.fork(0, 1)
    assert cache.tables[1] == cache.tables[0] and [cache.refcount[b] for b in cache.tables[0]] == [2, 2]
    assert cache.free_blocks == 6                                    # sharing costs nothing
    cache.append(1, torch.zeros(1, 1, 2), torch.zeros(1, 1, 2))
    assert cache.tables[1][0] == cache.tables[0][0]                  # the full block stays shared
    assert cache.tables[1][1] != cache.tables[0][1]                  # the partial one was copied
    assert [cache.refcount[b] for b in cache.tables[0]] == [2, 1] and cache.refcount[cache.tables[1][1]] == 1
    assert torch.equal(cache.gather(0)[0], torch.ones(6, 1, 2))      # the original is untouched
    assert torch.equal(cache.gather(1)[0], torch.cat([torch.ones(6, 1, 2), torch.zeros(1, 1, 2)]))
    cache.free(0)
    assert cache.refcount[cache.tables[1][0]] == 1 and cache.free_blocks == 6
    cache.free(1)
    assert cache.free_blocks == 8


def test_paged_memory():
    m = paged_memory([1, 16, 17, 100], max_len=128, block_size=16)
    assert m == {"used": 134, "contiguous": 512, "paged": 16 + 16 + 32 + 112,
                 "contiguous_waste": 378, "paged_waste": 42}
    lengths = list(range(0, 129, 7))
    assert paged_memory(lengths, 128, 16)["paged_waste"] <= len(lengths) * 15


def test_bad_inputs():
    cache = PagedKVCache(2, BS, H, D)
    with pytest.raises(ValueError, match="block_size"):
        PagedKVCache(2, 0, H, D)
    with pytest.raises(KeyError, match="no sequence"):
        cache.gather("x")
    cache.add_sequence("x")
    with pytest.raises(ValueError, match="already exists"):
        cache.add_sequence("x")
    with pytest.raises(ValueError, match="n_kv_heads"):
        cache.append("x", torch.zeros(1, H + 1, D), torch.zeros(1, H + 1, D))
    with pytest.raises(TypeError, match="torch.Tensor"):
        cache.append("x", [0.0], torch.zeros(1, H, D))
    with pytest.raises(ValueError, match="empty"):
        cache.attend("x", torch.zeros(H, 1, D))
    with pytest.raises(RuntimeError, match="pool is full"):
        cache.append("x", torch.zeros(3 * BS, H, D), torch.zeros(3 * BS, H, D))
    with pytest.raises(ValueError, match="max_len"):
        paged_memory([5, 200], max_len=128)


def test_paged_attention_equals_the_cache_and_dense():
    """The free function of one decoding step: equal to the cache's own attend, bitwise, with stale
    values in the last block's unused slots, a table longer than the length needs, a tensor table."""
    g = torch.Generator().manual_seed(3)
    cache = PagedKVCache(n_blocks=12, block_size=BS, n_kv_heads=H, d_head=D, dtype=torch.float64)
    cache.k_pool.normal_(generator=g)                 # stale values everywhere
    cache.v_pool.normal_(generator=g)
    cache.add_sequence("s")
    k, v = torch.randn(2, 10, H, D, generator=g, dtype=torch.float64)
    cache.append("s", k, v)
    q = torch.randn(3 * H, D, generator=g, dtype=torch.float64)
    table = cache.tables["s"]
    want = cache.attend("s", q[:, None])[:, 0]
    assert torch.equal(paged_attention(q, cache.k_pool, cache.v_pool, table, 10), want)
    assert torch.equal(paged_attention(q, cache.k_pool, cache.v_pool, torch.tensor(table + [0]), 10), want)
    torch.testing.assert_close(want, _dense(q[:, None], k, v)[:, 0], rtol=0, atol=0)
    short = paged_attention(q, cache.k_pool, cache.v_pool, table, 5)          # a prefix of the sequence
    torch.testing.assert_close(short, _dense(q[:, None], k[:5], v[:5])[:, 0], rtol=0, atol=0)


@pytest.mark.parametrize("args, word", [
    ((torch.zeros(H, 1, D),), "q"), ((torch.zeros(H, D + 1),), "q"), ((torch.zeros(H + 1, D),), "n_heads"),
    ((None, torch.zeros(4, BS, H, D), torch.zeros(4, BS, H, D), [0], 0), "length"),
    ((None, torch.zeros(4, BS, H, D), torch.zeros(4, BS, H, D), [0], BS + 1), "block_table"),
    ((None, torch.zeros(4, BS, H, D), torch.zeros(4, BS, H, D), [4], 1), "block_table"),
    ((None, torch.zeros(4, BS, H, D), torch.zeros(4, BS, H, D), [-1], 1), "block_table"),
    ((None, torch.zeros(4, BS, H, D), torch.zeros(4, BS, H, D), [0.0], 1), "block_table"),
    ((None, torch.zeros(4, BS, H, D), torch.zeros(3, BS, H, D), [0], 1), "k_pool"),
    ((None, torch.zeros(BS, H, D), torch.zeros(BS, H, D), [0], 1), "k_pool"),
])
def test_paged_attention_bad_inputs(args, word):
    full = [torch.zeros(H, D), torch.zeros(4, BS, H, D), torch.zeros(4, BS, H, D), [0, 1], 3]
    for i, a in enumerate(args):
        if a is not None:
            full[i] = a
    with pytest.raises(ValueError, match=word):
        paged_attention(*full)
