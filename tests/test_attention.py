"""course_utils.attention against PyTorch's fused ``F.scaled_dot_product_attention``; cross-attention
and sliding-window attention (mask and banded) against the same.

Every mask kind the course uses (none, padding, causal, padding and causal combined,
broadcast over heads, cross-attention with L_q != L_k, a fully masked row) gives the same
output as PyTorch, and the same gradients; bad inputs raise errors that say what is wrong.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_utils import attention as A
from course_utils import cost, multihead

B, H, LQ, LK, DK, DV = 2, 3, 4, 6, 8, 5


def _qkv(lq=LQ, lk=LK, lead=(B,), dtype=torch.float64, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(*lead, n, d, generator=g, dtype=dtype, requires_grad=grad)
               for n, d in ((lq, DK), (lk, DK), (lk, DV)))
    return q, k, v


def _masks():
    """(name, lq, lk, lead, mask) for every mask kind."""
    lengths = torch.tensor([6, 3])
    pad = A.padding_mask(lengths, LK)                         # (B, 1, LK)
    self_pad = A.padding_mask(torch.tensor([4, 2]), LQ)       # (B, 1, LQ)
    rnd = torch.rand(B, LQ, LK, generator=torch.Generator().manual_seed(1)) > 0.4
    rnd[:, :, 0] = True                                        # no fully masked row here
    return [
        ("none", LQ, LK, (B,), None),
        ("padding", LQ, LK, (B,), pad),
        ("causal", LQ, LQ, (B,), A.causal_mask(LQ)),
        ("padding+causal", LQ, LQ, (B,), A.combine_masks(self_pad, A.causal_mask(LQ))),
        ("padding over heads", LQ, LK, (B, H), pad.unsqueeze(1)),
        ("causal over batch and heads", LQ, LQ, (B, H), A.causal_mask(LQ)),
        ("cross, L_q < L_k, causal lower right", 2, 7, (B,), A.causal_mask(2, 7)),
        ("cross, L_q > L_k, padding", 7, 3, (B,), A.padding_mask(torch.tensor([3, 1]), 3)),
        ("arbitrary (batch, L_q, L_k)", LQ, LK, (B,), rnd),
        ("one mask row per query (L_q, 1)", LQ, LK, (B,), torch.tensor([True, False, True, True])[:, None]),
    ]


@pytest.mark.parametrize("name,lq,lk,lead,mask", _masks(), ids=[m[0] for m in _masks()])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equals_pytorch_fused(name, lq, lk, lead, mask, dtype):
    q, k, v = _qkv(lq, lk, lead, dtype)
    out, weights = A.scaled_dot_product_attention(q, k, v, mask)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, want)
    assert weights.shape == (*lead, lq, lk)
    assert out.shape == (*lead, lq, DV) and out.dtype == dtype
    rows_with_keys = torch.ones(weights.shape[:-1], dtype=dtype)
    if mask is not None:                         # a fully masked row sums to 0, the others to 1
        rows_with_keys = mask.expand_as(weights).any(-1).to(dtype)
    torch.testing.assert_close(weights.sum(-1), rows_with_keys)
    if mask is not None:
        assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()


@pytest.mark.parametrize("name,lq,lk,lead,mask", _masks(), ids=[m[0] for m in _masks()])
def test_gradients_equal_pytorch_fused(name, lq, lk, lead, mask):
    q, k, v = _qkv(lq, lk, lead, grad=True)
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    g = torch.randn(*lead, lq, DV, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    (A.scaled_dot_product_attention(q, k, v, mask)[0] * g).sum().backward()
    (F.scaled_dot_product_attention(q2, k2, v2, attn_mask=mask) * g).sum().backward()
    for ours, theirs in ((q, q2), (k, k2), (v, v2)):
        torch.testing.assert_close(ours.grad, theirs.grad)


def test_fully_masked_row_gives_zeros_like_pytorch():
    q, k, v = _qkv(grad=True)
    mask = A.padding_mask(torch.tensor([6, 0]), LK)          # the second sequence is empty
    mask = mask & torch.tensor([True, False, True, True])[:, None]   # and query 1 sees nothing
    out, weights = A.scaled_dot_product_attention(q, k, v, mask)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, want)
    assert (out[1] == 0).all() and (out[0, 1] == 0).all()
    assert (weights[1] == 0).all() and (weights[0, 1] == 0).all()
    torch.testing.assert_close(weights[0, [0, 2, 3]].sum(-1), torch.ones(3, dtype=torch.float64))
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all(), "a fully masked row must not give NaN gradients"


def test_masked_softmax_matches_softmax_and_ignores_masked_scores():
    x = torch.randn(3, 5)
    torch.testing.assert_close(A.masked_softmax(x), torch.softmax(x, -1))
    mask = torch.tensor([True, True, False, True, False])
    a = A.masked_softmax(x, mask)
    b = A.masked_softmax(x.masked_fill(~mask, 1e4), mask)      # masked scores do not matter
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a[:, mask], torch.softmax(x[:, mask], -1))
    assert (a[:, ~mask] == 0).all()
    torch.testing.assert_close(A.masked_softmax(x, mask[:, None].expand(5, 3).T.contiguous(), dim=-1), a)
    # another dim: normalise over queries
    m0 = torch.tensor([[True], [False], [True]])
    torch.testing.assert_close(A.masked_softmax(x, m0, dim=0)[[0, 2]], torch.softmax(x[[0, 2]], 0))


def test_attention_scores():
    q, k, _ = _qkv()
    torch.testing.assert_close(A.attention_scores(q, k), q @ k.transpose(-2, -1) / DK ** 0.5)


def test_worked_example_of_the_notes():
    """Seed 000's example: chapter 3 section 3 (the worked example) gives the exact values and
    finds the step where the source notes went wrong."""
    X = torch.tensor([[1., 2, 3, 4], [4, 3, 2, 1]], dtype=torch.float64)
    W_Q = W_V = torch.tensor([[1., 0], [0, 1], [0, 0], [0, 0]], dtype=torch.float64)
    W_K = torch.tensor([[0., 1], [1, 0], [0, 0], [0, 0]], dtype=torch.float64)
    out, w = A.scaled_dot_product_attention(X @ W_Q, X @ W_K, X @ W_V)
    torch.testing.assert_close(A.attention_scores(X @ W_Q, X @ W_K) * 2 ** 0.5,
                               torch.tensor([[4., 11], [11, 24]], dtype=torch.float64))
    torch.testing.assert_close(w[0], torch.tensor([0.007035, 0.992965], dtype=torch.float64), atol=1e-6, rtol=0)
    # [0.00703, 0.99297], the exact weights cut (not rounded) to 5 decimals, as chapter 3 section 3 checks them
    torch.testing.assert_close(w[0], torch.tensor([0.00703, 0.99297], dtype=torch.float64), atol=1e-5, rtol=0)
    torch.testing.assert_close(out[0], torch.tensor([3.979, 2.993], dtype=torch.float64), atol=5e-4, rtol=0)
    torch.testing.assert_close(out[1], torch.tensor([3.9997, 2.9999], dtype=torch.float64), atol=5e-5, rtol=0)


@pytest.mark.parametrize("lq,lk", [(1, 1), (4, 4), (2, 5), (5, 2), (3, 0), (0, 3)])
def test_causal_mask_semantics(lq, lk):
    m = A.causal_mask(lq, lk)
    assert m.dtype == torch.bool and m.shape == (lq, lk)
    assert torch.equal(m, torch.ones(lq, lk).tril(lk - lq).bool())
    i, j = torch.meshgrid(torch.arange(lq), torch.arange(lk), indexing="ij")
    assert torch.equal(m, j <= i + (lk - lq))       # query i is position i + (lk - lq) of the keys
    if 0 < lq <= lk:   # (PyTorch's lower-right bias gives NaN rows when lq > lk; ours gives zeros)
        # imported here, not at the top: it imports torch._dynamo, seconds that every worker would pay
        from torch.nn.attention.bias import causal_lower_right

        assert torch.equal(m, causal_lower_right(lq, lk)._materialize())


def test_causal_mask_default_is_square_lower_triangle():
    assert torch.equal(A.causal_mask(3), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]]).bool())


def test_is_causal_true_differs_for_rectangular_masks():
    """F.sdpa(is_causal=True) aligns the triangle top left; our causal_mask bottom right."""
    q, k, v = _qkv(2, 5)
    ours = A.scaled_dot_product_attention(q, k, v, A.causal_mask(2, 5))[0]
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(top_left, A.scaled_dot_product_attention(q, k, v, torch.ones(2, 5).tril().bool())[0])
    assert not torch.allclose(ours, top_left)
    # with L_q == L_k they agree
    q, k, v = _qkv(4, 4)
    torch.testing.assert_close(A.scaled_dot_product_attention(q, k, v, A.causal_mask(4))[0],
                               F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_padding_mask():
    m = A.padding_mask(torch.tensor([3, 1, 0]), 4)
    assert m.dtype == torch.bool and m.shape == (3, 1, 4)
    assert m[:, 0].int().tolist() == [[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]]
    assert A.padding_mask([2, 1]).shape == (2, 1, 2)     # a list works; max_len defaults to the longest


def test_combine_masks():
    pad = A.padding_mask(torch.tensor([3, 2]), 3)
    both = A.combine_masks(pad, A.causal_mask(3), None)
    assert both.shape == (2, 3, 3)
    assert both[1].int().tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 0]]
    assert A.combine_masks(None, None) is None
    assert A.combine_masks(None, pad) is pad


# --- bad inputs ---------------------------------------------------------------------------

def test_float_mask_is_rejected():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="bool tensor"):
        A.scaled_dot_product_attention(q, k, v, torch.ones(LQ, LK))
    with pytest.raises(TypeError, match="bool tensor"):
        A.scaled_dot_product_attention(q, k, v, torch.ones(LQ, LK, dtype=torch.long))
    with pytest.raises(TypeError, match="bool tensor"):
        A.masked_softmax(torch.randn(2, 3), [[True] * 3] * 2)


def test_mismatched_d_k_is_rejected():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="d_k"):
        A.scaled_dot_product_attention(q, k[..., :-1], v)
    with pytest.raises(ValueError, match="d_k"):
        A.attention_scores(q, k[..., :-1])


def test_mismatched_number_of_keys_and_values_is_rejected():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="L_k"):
        A.scaled_dot_product_attention(q, k, v[:, :-1])


@pytest.mark.parametrize("shape", [(LQ, LK + 1), (B, LQ + 1, LK), (3, LQ, LK), (B, 2, LQ, LK)])
def test_non_broadcastable_mask_is_rejected(shape):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="does not broadcast"):
        A.scaled_dot_product_attention(q, k, v, torch.ones(shape, dtype=torch.bool))


def test_other_bad_inputs():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"\(\.\.\., seq, d_k\)"):
        A.scaled_dot_product_attention(q[0, 0], k, v)
    with pytest.raises(TypeError, match="floating-point"):
        A.scaled_dot_product_attention(q.long(), k.long(), v.long())
    with pytest.raises(TypeError, match="same dtype"):
        A.scaled_dot_product_attention(q.float(), k, v)
    with pytest.raises(TypeError, match="dtype of q"):
        A.scaled_dot_product_attention(q, k, v.float())
    with pytest.raises(ValueError, match="do not broadcast"):
        A.scaled_dot_product_attention(q, torch.cat([k, k]).reshape(4, LK, DK)[:3], v)
    with pytest.raises(ValueError, match="int >= 0"):
        A.causal_mask(-1)
    with pytest.raises(ValueError, match="int >= 0"):
        A.causal_mask(3, 2.0)
    with pytest.raises(ValueError, match="shorter than the longest"):
        A.padding_mask(torch.tensor([5, 2]), 3)
    with pytest.raises(ValueError, match="1-D integer"):
        A.padding_mask(torch.tensor([[5, 2]]))
    with pytest.raises(ValueError, match="1-D integer"):
        A.padding_mask(torch.tensor([5.0, 2.0]))
    with pytest.raises(ValueError, match="does not broadcast"):
        A.combine_masks(torch.ones(2, 3, dtype=torch.bool), torch.ones(4, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask 1 must be a bool"):
        A.combine_masks(torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 3))


def test_one_head_self_attention_is_multi_head_with_one_head():
    torch.manual_seed(0)
    one = multihead.OneHeadSelfAttention(8)
    multi = multihead.MultiHeadAttention(8, 1)
    multi.load_state_dict(one.state_dict())
    x = torch.randn(2, 5, 8)
    mask = A.combine_masks(A.padding_mask(torch.tensor([5, 3]), 5), A.causal_mask(5))
    out, w = one(x, mask)
    want, want_w = multi(x, mask=mask.unsqueeze(-3), need_weights=True)
    assert out.shape == (2, 5, 8) and w.shape == (2, 5, 5)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(w, want_w.squeeze(1))


def test_key_padding_mask_is_the_padding_mask_with_a_heads_axis():
    m = A.key_padding_mask(torch.tensor([3, 1]), 4)
    assert m.shape == (2, 1, 1, 4) and torch.equal(m[:, 0], A.padding_mask(torch.tensor([3, 1]), 4))
    scores = torch.zeros(2, 5, 2, 4)                       # (batch, heads, L_q, L_k)
    w = A.masked_softmax(scores, m)
    assert torch.equal(w[1, :, :, 1:], torch.zeros(5, 2, 3)) and torch.allclose(w[0, :, :, :3], torch.tensor(1 / 3))
    with pytest.raises(ValueError):                        # a 3-D score tensor does not take it
        A.masked_softmax(torch.zeros(2, 2, 4), m)


# --- cross-attention and the sliding window

def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def test_cross_attention_equals_pytorch_with_the_same_projections():
    g = _g(1)
    x_dec, x_enc = torch.randn(3, 4, 5, generator=g), torch.randn(3, 6, 7, generator=g)
    W_q, W_k, W_v = torch.randn(5, 8, generator=g), torch.randn(7, 8, generator=g), torch.randn(7, 3, generator=g)
    lengths = torch.tensor([6, 1, 4])
    out, w = A.cross_attention(x_dec, x_enc, W_q, W_k, W_v, lengths)
    keep = torch.arange(6)[None, None, :] < lengths[:, None, None]                   # (3, 1, 6)
    want = F.scaled_dot_product_attention(x_dec @ W_q, x_enc @ W_k, x_enc @ W_v, attn_mask=keep)
    torch.testing.assert_close(out, want)
    assert w.shape == (3, 4, 6) and (w[1, :, 1:] == 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 4))
    out_np, _ = A.cross_attention(x_dec, x_enc, W_q, W_k, W_v)
    torch.testing.assert_close(out_np, F.scaled_dot_product_attention(x_dec @ W_q, x_enc @ W_k, x_enc @ W_v))


def test_cross_attention_rejects_mismatched_batches():
    with pytest.raises(ValueError, match="batch"):
        A.cross_attention(torch.randn(2, 3, 4), torch.randn(3, 5, 4), torch.randn(4, 2), torch.randn(4, 2),
                           torch.randn(4, 2))


@pytest.mark.parametrize("causal", [False, True])
def test_padded_self_attention_equals_pytorch_at_real_positions_and_is_zero_at_padding(causal):
    g = _g(3)
    x = torch.randn(4, 6, 8, generator=g, dtype=torch.float64)
    W_q, W_k, W_v, W_o = (torch.randn(8, 8, generator=g, dtype=torch.float64) / 3 for _ in range(4))
    lengths = torch.tensor([6, 3, 1, 0])
    x[1, 3:] = 1e3                                                    # padding: any numbers
    x[2, 1:] = float("nan")
    x[3, :2] = float("inf")
    out, w = A.padded_self_attention(x, lengths, W_q, W_k, W_v, W_o, causal=causal)
    mha = torch.nn.MultiheadAttention(8, 1, bias=False, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([W_q.T, W_k.T, W_v.T]))
        mha.out_proj.weight.copy_(W_o.T)
        for b, n in enumerate(lengths.tolist()):
            if n:
                xb = x[b:b + 1, :n]
                mask = torch.ones(n, n, dtype=torch.bool).triu(1) if causal else None
                want, _ = mha(xb, xb, xb, attn_mask=mask)
                torch.testing.assert_close(out[b:b + 1, :n], want)
    real = torch.arange(6)[None, :] < lengths[:, None]
    assert not out.isnan().any() and not w.isnan().any()
    assert (out[~real] == 0).all() and (w[~real] == 0).all() and (w.transpose(1, 2)[~real] == 0).all()
    torch.testing.assert_close(w.sum(-1), real.double())


@pytest.mark.parametrize("bad,match", [
    (dict(x=torch.randn(6, 8)), "x"), (dict(lengths=torch.tensor([6.0, 3.0])), "lengths"),
    (dict(lengths=torch.tensor([6])), "lengths"), (dict(lengths=torch.tensor([7, 3])), "lengths"),
    (dict(lengths=torch.tensor([6, -1])), "lengths"), (dict(W_k=torch.randn(8, 5)), "W_k"),
    (dict(W_v=torch.randn(7, 4)), "W_v"), (dict(W_o=torch.randn(8, 4)), "W_o"),
    (dict(W_q=torch.randn(8, 4, dtype=torch.float64)), "W_q")])
def test_padded_self_attention_rejects_bad_inputs(bad, match):
    args = dict(x=torch.randn(2, 6, 8), lengths=torch.tensor([6, 3]), W_q=torch.randn(8, 4), W_k=torch.randn(8, 4),
                W_v=torch.randn(8, 4), W_o=torch.randn(4, 8))
    with pytest.raises(ValueError, match=match):
        A.padded_self_attention(**{**args, **bad})


@pytest.mark.parametrize("L,radius", [(1, 0), (5, 0), (7, 2), (6, 10), (40, 3)])
def test_sliding_window_mask(L, radius):
    m = A.sliding_window_mask(L, radius)
    want = torch.tensor([[abs(i - j) <= radius for j in range(L)] for i in range(L)])
    assert m.dtype == torch.bool and torch.equal(m, want)


@pytest.mark.parametrize("L,radius", [(1, 0), (9, 0), (9, 2), (9, 8), (5, 7), (33, 4)])
def test_banded_attention_equals_the_masked_computation(L, radius):
    g = _g(L + radius)
    q, k = torch.randn(2, 3, L, 8, generator=g, dtype=torch.float64), torch.randn(2, 3, L, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, 3, L, 5, generator=g, dtype=torch.float64)
    mask = A.sliding_window_mask(L, radius)
    out, w = A.sliding_window_attention(q, k, v, radius)
    want_out, want_w = A.scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    # band layout: weights[..., i, m] is the weight of key i - radius + m
    assert w.shape == (2, 3, L, 2 * radius + 1)
    for i in range(L):
        for m in range(2 * radius + 1):
            j = i - radius + m
            expected = want_w[..., i, j] if 0 <= j < L else torch.zeros(2, 3, dtype=torch.float64)
            torch.testing.assert_close(w[..., i, m], expected)


def test_banded_attention_gradients_equal_the_masked_computation():
    g = _g(3)
    q, k, v = (torch.randn(12, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    A.sliding_window_attention(q, k, v, 2)[0].square().sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    A.scaled_dot_product_attention(q, k, v, A.sliding_window_mask(12, 2))[0].square().sum().backward()
    for got, t in zip(grads, (q, k, v)):
        torch.testing.assert_close(got, t.grad)


def test_banded_attention_memory_is_linear_in_the_length():
    sizes = []
    for L in (256, 512, 1024):
        q, k, v = (torch.randn(L, 16, requires_grad=True) for _ in range(3))
        sizes.append(cost.saved_bytes(lambda a, b, c: A.sliding_window_attention(a, b, c, 8)[0], q, k, v))
    assert sizes[2] - sizes[1] == 2 * (sizes[1] - sizes[0]) > 0


def test_banded_attention_memory_grows_with_batch_and_heads_only_as_the_inputs_do():
    """Several sequences and heads keep what one keeps, times their number: no copy of the keys
    and values per window (a batched product over unfold windows keeps 2r + 1 copies)."""
    def kept(shape):
        q, k, v = (torch.randn(*shape, requires_grad=True) for _ in range(3))
        return cost.saved_bytes(lambda a, b, c: A.sliding_window_attention(a, b, c, 8)[0], q, k, v)
    one, many = kept((1, 1, 512, 16)), kept((2, 3, 512, 16))
    assert many <= 6 * one * 1.05, f"6 sequences x heads keep {many} bytes, one keeps {one}"


@pytest.mark.parametrize("radius", [-1, 1.5, True])
def test_bad_radius(radius):
    with pytest.raises(ValueError, match="radius"):
        A.sliding_window_mask(4, radius)
    with pytest.raises(ValueError, match="radius"):
        A.sliding_window_attention(torch.randn(4, 2), torch.randn(4, 2), torch.randn(4, 2), radius)


def test_banded_attention_rejects_cross_attention_shapes():
    with pytest.raises(ValueError, match="same shape"):
        A.sliding_window_attention(torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2), 1)


def test_the_shape_check_broadcasts_as_pytorch_does():
    """``attention._broadcast`` (the masks' and heads' shape check, without ``torch.broadcast_shapes``'
    cost) agrees with PyTorch on random shapes with sizes 0, 1 and more, of different ranks."""
    gen = torch.Generator().manual_seed(0)
    for _ in range(3000):
        shapes = [tuple(int(n) for n in torch.randint(0, 4, (int(torch.randint(0, 5, (1,), generator=gen)),),
                                                   generator=gen)) for _ in range(int(torch.randint(1, 4, (1,), generator=gen)))]
        try:
            expected = tuple(torch.broadcast_shapes(*shapes))
        except RuntimeError:
            expected = None
        assert A._broadcast(*shapes) == expected, shapes
