"""course_utils.attention_variants against course_utils.attention and PyTorch's own functions."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_utils import attention as A
from course_utils import attention_variants as AV
from course_utils import cost


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def test_cross_attention_equals_pytorch_with_the_same_projections():
    g = _g(1)
    x_dec, x_enc = torch.randn(3, 4, 5, generator=g), torch.randn(3, 6, 7, generator=g)
    W_q, W_k, W_v = torch.randn(5, 8, generator=g), torch.randn(7, 8, generator=g), torch.randn(7, 3, generator=g)
    lengths = torch.tensor([6, 1, 4])
    out, w = AV.cross_attention(x_dec, x_enc, W_q, W_k, W_v, lengths)
    keep = torch.arange(6)[None, None, :] < lengths[:, None, None]                   # (3, 1, 6)
    want = F.scaled_dot_product_attention(x_dec @ W_q, x_enc @ W_k, x_enc @ W_v, attn_mask=keep)
    torch.testing.assert_close(out, want)
    assert w.shape == (3, 4, 6) and (w[1, :, 1:] == 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 4))
    out_np, _ = AV.cross_attention(x_dec, x_enc, W_q, W_k, W_v)
    torch.testing.assert_close(out_np, F.scaled_dot_product_attention(x_dec @ W_q, x_enc @ W_k, x_enc @ W_v))


def test_cross_attention_rejects_mismatched_batches():
    with pytest.raises(ValueError, match="batch"):
        AV.cross_attention(torch.randn(2, 3, 4), torch.randn(3, 5, 4), torch.randn(4, 2), torch.randn(4, 2),
                           torch.randn(4, 2))


@pytest.mark.parametrize("L,radius", [(1, 0), (5, 0), (7, 2), (6, 10), (40, 3)])
def test_sliding_window_mask(L, radius):
    m = AV.sliding_window_mask(L, radius)
    want = torch.tensor([[abs(i - j) <= radius for j in range(L)] for i in range(L)])
    assert m.dtype == torch.bool and torch.equal(m, want)


@pytest.mark.parametrize("L,radius", [(1, 0), (9, 0), (9, 2), (9, 8), (5, 7), (33, 4)])
def test_banded_attention_equals_the_masked_computation(L, radius):
    g = _g(L + radius)
    q, k = torch.randn(2, 3, L, 8, generator=g, dtype=torch.float64), torch.randn(2, 3, L, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, 3, L, 5, generator=g, dtype=torch.float64)
    mask = AV.sliding_window_mask(L, radius)
    out, w = AV.sliding_window_attention(q, k, v, radius)
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
    AV.sliding_window_attention(q, k, v, 2)[0].square().sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    A.scaled_dot_product_attention(q, k, v, AV.sliding_window_mask(12, 2))[0].square().sum().backward()
    for got, t in zip(grads, (q, k, v)):
        torch.testing.assert_close(got, t.grad)


def test_banded_attention_memory_is_linear_in_the_length():
    sizes = []
    for L in (256, 512, 1024):
        q, k, v = (torch.randn(L, 16, requires_grad=True) for _ in range(3))
        sizes.append(cost.saved_bytes(lambda a, b, c: AV.sliding_window_attention(a, b, c, 8)[0], q, k, v))
    assert sizes[2] - sizes[1] == 2 * (sizes[1] - sizes[0]) > 0


def test_banded_attention_memory_grows_with_batch_and_heads_only_as_the_inputs_do():
    """Several sequences and heads keep what one keeps, times their number: no copy of the keys
    and values per window (a batched product over unfold windows keeps 2r + 1 copies)."""
    def kept(shape):
        q, k, v = (torch.randn(*shape, requires_grad=True) for _ in range(3))
        return cost.saved_bytes(lambda a, b, c: AV.sliding_window_attention(a, b, c, 8)[0], q, k, v)
    one, many = kept((1, 1, 512, 16)), kept((2, 3, 512, 16))
    assert many <= 6 * one * 1.05, f"6 sequences x heads keep {many} bytes, one keeps {one}"


@pytest.mark.parametrize("radius", [-1, 1.5, True])
def test_bad_radius(radius):
    with pytest.raises(ValueError, match="radius"):
        AV.sliding_window_mask(4, radius)
    with pytest.raises(ValueError, match="radius"):
        AV.sliding_window_attention(torch.randn(4, 2), torch.randn(4, 2), torch.randn(4, 2), radius)


def test_banded_attention_rejects_cross_attention_shapes():
    with pytest.raises(ValueError, match="same shape"):
        AV.sliding_window_attention(torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2), 1)
