"""MultiHeadAttention (MHA / GQA / MQA) and KVCache against PyTorch's own attention."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_utils import attention as A
from course_utils import decoding, kvcache, multihead

D, H = 24, 6


def _mha_pair(d=D, h=H, bias=True, seed=0):
    """Our module and nn.MultiheadAttention holding the same weights."""
    torch.manual_seed(seed)
    ours = multihead.MultiHeadAttention(d, h, bias=bias)
    theirs = multihead.copy_to_torch(ours, nn.MultiheadAttention(d, h, bias=bias, batch_first=True))
    return ours, theirs


def _grads(module):
    return [p.grad.clone() for p in module.parameters()]


def _their_grads_in_our_order(theirs, bias):
    g = theirs.in_proj_weight.grad
    out = [g[:D], g[D:2 * D], g[2 * D:]]
    if bias:
        gb = theirs.in_proj_bias.grad
        out = [out[0], gb[:D], out[1], gb[D:2 * D], out[2], gb[2 * D:], theirs.out_proj.weight.grad,
               theirs.out_proj.bias.grad]
    else:
        out += [theirs.out_proj.weight.grad]
    return out


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("masks", ["none", "padding", "causal", "both"])
def test_self_attention_equals_nn_multiheadattention(bias, need_weights, masks):
    ours, theirs = _mha_pair(bias=bias)
    torch.manual_seed(1)
    x = torch.randn(3, 7, D)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    lengths = torch.tensor([7, 4, 1])
    keep = A.key_padding_mask(lengths, 7)           # (3, 1, 1, 7) True = may attend
    causal = A.causal_mask(7)
    mask = {"none": None, "padding": keep, "causal": causal, "both": A.combine_masks(keep, causal)}[masks]
    kpm = ~keep[:, 0, 0] if masks in ("padding", "both") else None    # PyTorch: True = blocked
    am = ~causal if masks in ("causal", "both") else None
    out, w = ours(x1, mask=mask, need_weights=need_weights)
    ref, ref_w = theirs(x2, x2, x2, key_padding_mask=kpm, attn_mask=am, need_weights=True,
                        average_attn_weights=False)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    if need_weights:
        torch.testing.assert_close(w, ref_w, atol=1e-5, rtol=1e-5)
    else:
        assert w is None
    (out ** 2).sum().backward()
    (ref ** 2).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, atol=1e-5, rtol=1e-4)
    for g, r in zip(_grads(ours), _their_grads_in_our_order(theirs, bias)):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-4)


def test_cross_attention_equals_nn_multiheadattention():
    ours, theirs = _mha_pair()
    torch.manual_seed(2)
    x, ctx = torch.randn(2, 4, D), torch.randn(2, 9, D)
    keep = A.key_padding_mask(torch.tensor([9, 5]), 9)
    out, w = ours(x, context=ctx, mask=keep, need_weights=True)
    ref, ref_w = theirs(x, ctx, ctx, key_padding_mask=~keep[:, 0, 0], average_attn_weights=False)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w, ref_w, atol=1e-5, rtol=1e-5)
    assert w[1, :, :, 5:].abs().max() == 0


@pytest.mark.parametrize("n_kv", [1, 2, 3, 6])
@pytest.mark.parametrize("need_weights", [True, False])
def test_gqa_and_mqa_equal_sdpa_with_enable_gqa(n_kv, need_weights):
    torch.manual_seed(3)
    m = multihead.MultiHeadAttention(D, H, n_kv_heads=n_kv)
    assert m.k_proj.out_features == n_kv * (D // H) == m.v_proj.out_features
    x = torch.randn(2, 8, D, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    mask = A.combine_masks(A.key_padding_mask(torch.tensor([8, 6]), 8), A.causal_mask(8))
    out, _ = m(x, mask=mask, need_weights=need_weights)
    q = m.q_proj(x2).view(2, 8, H, -1).transpose(1, 2)
    k = m.k_proj(x2).view(2, 8, n_kv, -1).transpose(1, 2)
    v = m.v_proj(x2).view(2, 8, n_kv, -1).transpose(1, 2)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    ref = m.out_proj(ref.transpose(1, 2).reshape(2, 8, D))
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    out.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, atol=1e-5, rtol=1e-4)


def test_repeat_kv_pairs_query_head_i_with_kv_head_i_div_group():
    kv = torch.arange(3.0).view(1, 3, 1, 1).expand(1, 3, 2, 4)      # head g holds the value g
    rep = multihead.repeat_kv(kv, 4)
    assert rep.shape == (1, 12, 2, 4)
    assert rep[0, :, 0, 0].tolist() == [i // 4 for i in range(12)]
    wrong = kv.repeat(1, 4, 1, 1)                                     # the stacked order: i % 3
    assert wrong[0, :, 0, 0].tolist() == [i % 3 for i in range(12)]
    assert multihead.repeat_kv(kv, 1) is kv


def test_split_merge_heads_equal_a_loop_over_heads():
    torch.manual_seed(4)
    x = torch.randn(2, 5, D)
    s = multihead.split_heads(x, H)
    assert s.shape == (2, H, 5, D // H)
    for h in range(H):
        assert torch.equal(s[:, h], x[..., h * 4:(h + 1) * 4])
    assert torch.equal(multihead.merge_heads(s), x)


@pytest.mark.parametrize("n_kv", [6, 2, 1])
def test_cached_decoding_equals_one_causal_forward(n_kv):
    torch.manual_seed(5)
    m = multihead.MultiHeadAttention(D, H, n_kv_heads=n_kv).eval()
    x = torch.randn(2, 10, D)
    full, _ = m(x, causal=True)
    cache = kvcache.KVCache()
    outs = [m(x[:, :4], cache=cache, causal=True)[0]]                 # prefill the prompt
    for t in range(4, 10):                                             # then one token at a time
        outs.append(m(x[:, t:t + 1], cache=cache, causal=True)[0])
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-5, rtol=1e-5)
    assert cache.k.shape == (2, n_kv, 10, D // H) and len(cache) == 10
    assert cache.nbytes() == 2 * 2 * n_kv * 10 * (D // H) * 4
    # without the causal mask a step would see every cached key: the same as the last full row only
    one, _ = m(x[:, :1], cache=kvcache.KVCache(), causal=True)
    torch.testing.assert_close(one, full[:, :1], atol=1e-5, rtol=1e-5)


def test_cross_attention_cache_is_filled_once_and_reused():
    torch.manual_seed(6)
    m = multihead.MultiHeadAttention(D, H, n_kv_heads=2).eval()
    x, ctx = torch.randn(2, 3, D), torch.randn(2, 7, D)
    ref, _ = m(x, context=ctx)
    cache = kvcache.KVCache()
    a, _ = m(x[:, :1], context=ctx, cache=cache)
    assert cache.static and len(cache) == 7
    b, _ = m(x[:, 1:], cache=cache)                                     # context not needed any more
    torch.testing.assert_close(torch.cat([a, b], 1), ref, atol=1e-5, rtol=1e-5)
    assert len(cache) == 7


def test_kv_cache_reorder_is_used_by_decoding_index_state():
    cache = kvcache.KVCache()
    cache.append(torch.arange(3.0).view(3, 1, 1, 1), torch.arange(3.0).view(3, 1, 1, 1))
    state = {"caches": [cache], "memory": torch.arange(3.0)}
    picked = decoding.index_state(state, torch.tensor([2, 2, 0]))
    assert picked["caches"][0].k.flatten().tolist() == [2.0, 2.0, 0.0]
    assert picked["memory"].tolist() == [2.0, 2.0, 0.0]
    assert cache.k.flatten().tolist() == [0.0, 1.0, 2.0]               # the original is untouched


def test_kv_cache_is_preallocated_and_appends_in_place():
    """With ``max_len`` the buffers are allocated once; appends write only the new positions."""
    g = torch.Generator().manual_seed(9)
    ks, vs = torch.randn(2, 3, 12, 4, generator=g), torch.randn(2, 3, 12, 4, generator=g)
    cache = kvcache.KVCache(max_len=12)
    with torch.no_grad():
        cache.append(ks[:, :, :5], vs[:, :, :5])
        ptr, seen = cache.k.data_ptr(), cache.k
        for t in range(5, 12):
            k, v = cache.append(ks[:, :, t:t + 1], vs[:, :, t:t + 1])
            assert k.data_ptr() == ptr and cache.capacity == 12          # no reallocation, no copy of the cache
    assert torch.equal(cache.k, ks) and torch.equal(cache.v, vs) and len(cache) == 12
    assert seen.shape[2] == 5 and torch.equal(seen, ks[:, :, :5])       # an earlier view still shows its 5 positions
    assert cache.nbytes() == ks.nbytes + vs.nbytes
    with pytest.raises(ValueError, match="max_len"):
        kvcache.KVCache(max_len=0)


def test_kv_cache_without_max_len_doubles_its_capacity():
    cache = kvcache.KVCache()
    capacities = []
    with torch.no_grad():
        for t in range(20):
            cache.append(torch.full((1, 1, 1, 2), float(t)), torch.full((1, 1, 1, 2), -float(t)))
            capacities.append(cache.capacity)
    assert capacities[:5] == [1, 2, 4, 4, 8] and capacities[-1] == 32   # log2(T) reallocations, O(T) copies
    assert cache.k[0, 0, :, 0].tolist() == [float(t) for t in range(20)]
    assert cache.v[0, 0, :, 1].tolist() == [-float(t) for t in range(20)]


def test_kv_cache_crop_forgets_positions_and_reuses_the_buffers():
    """After ``crop(T)`` the next step sees exactly the first T positions, in the same buffers."""
    torch.manual_seed(11)
    m = multihead.MultiHeadAttention(D, H, n_kv_heads=2).eval()
    x, other = torch.randn(2, 7, D), torch.randn(2, 1, D)
    cache = kvcache.KVCache(max_len=7)
    with torch.no_grad():
        m(x[:, :6], cache=cache, causal=True)
        ptr = cache.k.data_ptr()
        m(other, cache=cache, causal=True)                     # a step we take back
        assert len(cache.crop(6)) == 6
        step, _ = m(x[:, 6:], cache=cache, causal=True)
        full, _ = m(x, causal=True)
    torch.testing.assert_close(step, full[:, 6:], atol=1e-5, rtol=1e-5)
    assert cache.k.data_ptr() == ptr and cache.capacity == 7
    for bad in (8, -1, 2.0, True):
        with pytest.raises(ValueError, match=r"crop.s length must be an int in \[0, 7\] \(the cache holds 7 positions\)"):
            cache.crop(bad)


def test_kv_cache_keeps_gradients_when_autograd_records():
    """Appends that need gradients concatenate (no in-place write into saved tensors)."""
    torch.manual_seed(10)
    m = multihead.MultiHeadAttention(D, H, n_kv_heads=2)
    x = torch.randn(2, 6, D, requires_grad=True)
    cache = kvcache.KVCache(max_len=6)
    outs = [m(x[:, :3], cache=cache, causal=True)[0]]
    outs += [m(x[:, t:t + 1], cache=cache, causal=True)[0] for t in range(3, 6)]
    torch.cat(outs, 1).sum().backward()
    full = x.detach().clone().requires_grad_()
    m(full, causal=True)[0].sum().backward()
    torch.testing.assert_close(x.grad, full.grad, atol=1e-5, rtol=1e-5)


def test_attn_bias_is_added_to_the_scaled_scores():
    torch.manual_seed(7)
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 4)
    bias = torch.randn(3, 5, 6)
    mask = A.key_padding_mask(torch.tensor([6, 2]), 6)
    out, w = A.scaled_dot_product_attention(q, k, v, mask, attn_bias=bias)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(~mask, float("-inf")))
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    m = multihead.MultiHeadAttention(D, H)
    x = torch.randn(2, 5, D)
    zero, _ = m(x, attn_bias=torch.zeros(H, 5, 5))
    torch.testing.assert_close(zero, m(x)[0], atol=1e-6, rtol=1e-6)
    with pytest.raises(TypeError, match="mask="):
        A.scaled_dot_product_attention(q, k, v, attn_bias=mask)


def test_clear_errors():
    with pytest.raises(ValueError, match="does not divide d_model"):
        multihead.MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match="does not divide n_heads"):
        multihead.MultiHeadAttention(24, 6, n_kv_heads=4)
    m = multihead.MultiHeadAttention(D, H)
    with pytest.raises(ValueError, match=r"\(batch, seq, d_model=24\)"):
        m(torch.randn(5, D))
    with pytest.raises(ValueError, match=r"\(batch, seq, d_model=24\)"):
        m(torch.randn(2, 5, 12))
    with pytest.raises(TypeError, match="bool"):
        m(torch.randn(2, 5, D), mask=torch.ones(5, 5))
    with pytest.raises(ValueError, match="broadcast"):
        m(torch.randn(2, 5, D), mask=torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="floating"):
        m(torch.ones(2, 5, D, dtype=torch.long))
    with pytest.raises(ValueError, match="divisible"):
        multihead.split_heads(torch.randn(2, 3, 10), 4)


@pytest.mark.parametrize("n_kv", [1, 2, 3])
def test_grouped_sdpa_never_repeats_and_equals_repeated_kv(n_kv):
    torch.manual_seed(8)
    q, k, v = torch.randn(2, 6, 4, 5), torch.randn(2, n_kv, 9, 5), torch.randn(2, n_kv, 9, 5)
    mask = A.combine_masks(A.key_padding_mask(torch.tensor([9, 3]), 9), A.causal_mask(4, 9))
    r = 6 // n_kv
    ref = F.scaled_dot_product_attention(q, multihead.repeat_kv(k, r), multihead.repeat_kv(v, r), attn_mask=mask)
    torch.testing.assert_close(multihead.grouped_sdpa(q, k, v, mask), ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(multihead.grouped_sdpa(q, k, v), F.scaled_dot_product_attention(
        q, k, v, enable_gqa=True), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("n_kv", [1, 2, 3])
def test_grouped_sdpa_takes_every_mask_shape_without_copying_it_per_head(n_kv, monkeypatch):
    """Masks of every broadcastable shape give what the repeated keys give; a mask shared by all
    heads is folded at most r times (never batch x heads x L x L)."""
    torch.manual_seed(9)
    b, h, L_q, L_k = 2, 6, 4, 9
    q, k, v = torch.randn(b, h, L_q, 5), torch.randn(b, n_kv, L_k, 5), torch.randn(b, n_kv, L_k, 5)
    r = h // n_kv
    g = torch.Generator().manual_seed(3)
    masks = {"causal (L_q, L_k)": A.causal_mask(L_q, L_k),
             "padding (B, 1, 1, L_k)": A.key_padding_mask(torch.tensor([9, 3]), L_k),
             "per head (1, H, L_q, L_k)": torch.rand(1, h, L_q, L_k, generator=g) > 0.3,
             "per example and head (B, H, L_q, L_k)": torch.rand(b, h, L_q, L_k, generator=g) > 0.3,
             "3-d (1, L_q, L_k)": torch.rand(1, L_q, L_k, generator=g) > 0.3,
             "additive float (B, 1, L_q, L_k)": torch.randn(b, 1, L_q, L_k, generator=g)}
    for name, mask in masks.items():
        if mask.dtype == torch.bool:
            mask = mask | torch.eye(L_q, L_k, dtype=torch.bool)      # no query row left without a key
        ref = F.scaled_dot_product_attention(q, multihead.repeat_kv(k, r), multihead.repeat_kv(v, r), attn_mask=mask)
        torch.testing.assert_close(multihead.grouped_sdpa(q, k, v, mask), ref, atol=1e-6, rtol=1e-5, msg=name)
    seen, real_sdpa = [], F.scaled_dot_product_attention

    def spy(*args, attn_mask=None, **kwargs):
        seen.append(attn_mask.numel())
        return real_sdpa(*args, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    q, k, v = torch.randn(4, 8, 512, 2), torch.randn(4, 2, 512, 2), torch.randn(4, 2, 512, 2)
    multihead.grouped_sdpa(q, k, v, A.causal_mask(512, 512))
    assert seen == [4 * 512 * 512], f"the causal mask was copied to {seen} elements, expected r * L * L"


@pytest.mark.parametrize("n_kv", [1, 2, 6])
def test_cached_attention_prefill_chunks_and_steps_equal_full_causal_attention(n_kv):
    torch.manual_seed(9)
    q, k, v = torch.randn(2, 6, 9, 4), torch.randn(2, n_kv, 9, 4), torch.randn(2, n_kv, 9, 4)
    r = 6 // n_kv
    full, _ = A.scaled_dot_product_attention(q, multihead.repeat_kv(k, r), multihead.repeat_kv(v, r), A.causal_mask(9))
    out1, cache = multihead.cached_attention(q[:, :, :3], k[:, :, :3], v[:, :, :3])        # prefill 3
    out2, cache = multihead.cached_attention(q[:, :, 3:7], k[:, :, 3:7], v[:, :, 3:7], cache)  # a chunk of 4
    outs = [out1, out2]
    for t in (7, 8):
        o, cache = multihead.cached_attention(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1], cache)
        outs.append(o)
    torch.testing.assert_close(torch.cat(outs, 2), full, atol=1e-6, rtol=1e-5)
    assert cache[0].shape == (2, n_kv, 9, 4)


def test_kv_cache_bytes_and_mean_pooling():
    # Llama-2-7B-like: 32 layers, 32 heads of 128, float16: 512 KiB per token with MHA
    assert kvcache.kv_cache_bytes(32, 32, 128, 1) == 512 * 1024
    assert kvcache.kv_cache_bytes(32, 8, 128, 4096, batch=2, bytes_per_value=4) == 2 * 32 * 8 * 128 * 4096 * 2 * 4
    w = torch.arange(24.0).view(6, 4)                       # 3 heads of d_head 2
    pooled = multihead.mean_pool_kv_heads(w, n_heads=3, n_groups=1)
    torch.testing.assert_close(pooled, (w[0:2] + w[2:4] + w[4:6]) / 3)
    b = torch.arange(8.0)                                   # 4 heads of 2, 2 groups
    torch.testing.assert_close(multihead.mean_pool_kv_heads(b, 4, 2), torch.tensor([1.0, 2.0, 5.0, 6.0]))
    torch.testing.assert_close(multihead.mean_pool_kv_heads(w, 3, 3), w)
    with pytest.raises(ValueError, match="does not divide"):
        multihead.mean_pool_kv_heads(w, 3, 2)


@pytest.mark.parametrize("how", ["mean", "first", "random"])
def test_convert_to_gqa(how):
    torch.manual_seed(10)
    mha = multihead.MultiHeadAttention(D, H)
    gqa = multihead.convert_to_gqa(mha, 2, how, generator=torch.Generator().manual_seed(0))
    assert gqa.n_kv_heads == 2 and gqa.k_proj.weight.shape == (2 * 4, D)
    assert torch.equal(gqa.q_proj.weight, mha.q_proj.weight)
    assert torch.equal(gqa.out_proj.bias, mha.out_proj.bias)
    heads = mha.k_proj.weight.view(H, 4, D)
    if how == "mean":
        torch.testing.assert_close(gqa.k_proj.weight[:4], heads[:3].mean(0))
    elif how == "first":
        assert torch.equal(gqa.v_proj.weight[4:], mha.v_proj.weight.view(H, 4, D)[3])
    else:
        assert not torch.allclose(gqa.k_proj.weight[:4], heads[:3].mean(0))
    # converting to as many kv heads as query heads by mean pooling changes nothing
    same = multihead.convert_to_gqa(mha, H, "mean")
    x = torch.randn(2, 5, D)
    torch.testing.assert_close(same(x)[0], mha(x)[0])


def test_weights_copied_to_and_from_torch_round_trip_and_refuse_what_torch_cannot_hold():
    ours, theirs = _mha_pair(bias=True)
    back = multihead.MultiHeadAttention(D, H)
    multihead.copy_from_torch(back, theirs)
    for a, b in zip(back.parameters(), ours.parameters()):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="no GQA"):
        multihead.copy_to_torch(multihead.MultiHeadAttention(D, H, n_kv_heads=2), theirs)
    with pytest.raises(ValueError, match="biases"):
        multihead.copy_to_torch(multihead.MultiHeadAttention(D, H, bias=False), theirs)
    with pytest.raises(TypeError, match="q_proj"):
        multihead.copy_to_torch(nn.Linear(D, D), theirs)


def test_a_gqa_conversion_keeps_rope():
    """Issue 34: ``convert_to_gqa`` of a RoPE attention is a RoPE attention with the same base."""
    torch.manual_seed(0)
    mha = multihead.MultiHeadAttention(16, 4, rope=True, rope_base=500.0)
    gqa = multihead.convert_to_gqa(mha, 2, how="first")
    assert gqa.rope and gqa.rope_base == 500.0
    same = multihead.convert_to_gqa(mha, 4, how="first")          # no grouping: the very same attention
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(same(x)[0], mha(x)[0])
