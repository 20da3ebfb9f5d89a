"""The online softmax and FlashAttention's tiling in PyTorch (chapter 8, course_utils.flash)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_utils import cost, flash


def test_online_softmax_equals_softmax_with_huge_scores():
    x = torch.randn(4, 37, dtype=torch.float64) * 300       # exp would overflow without the max
    for block in (1, 5, 37, 64):
        torch.testing.assert_close(flash.online_softmax(x, block), torch.softmax(x, -1))


def test_online_update_over_blocks_equals_softmax_times_v():
    s, v = torch.randn(3, 6, 20, dtype=torch.float64), torch.randn(3, 20, 5, dtype=torch.float64)
    m = torch.full((3, 6, 1), float("-inf"), dtype=torch.float64)
    l, acc = torch.zeros(3, 6, 1, dtype=torch.float64), torch.zeros(3, 6, 5, dtype=torch.float64)
    for j in range(0, 20, 7):
        m, l, acc = flash.online_softmax_update(m, l, acc, s[..., j:j + 7], v[:, j:j + 7])
    torch.testing.assert_close(acc / l, torch.softmax(s, -1) @ v)
    torch.testing.assert_close(m, s.amax(-1, keepdim=True))


def test_online_update_keeps_a_fully_masked_block_harmless():
    m = torch.full((1, 2, 1), float("-inf"))
    l, acc = torch.zeros(1, 2, 1), torch.zeros(1, 2, 3)
    m, l, acc = flash.online_softmax_update(m, l, acc, torch.full((1, 2, 4), float("-inf")), torch.randn(1, 4, 3))
    assert torch.isinf(m).all() and (l == 0).all() and (acc == 0).all() and not acc.isnan().any()
    s, v = torch.randn(1, 2, 4), torch.randn(1, 4, 3)
    m, l, acc = flash.online_softmax_update(m, l, acc, s, v)
    torch.testing.assert_close(acc / l, torch.softmax(s, -1) @ v)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L_q,L_k,bq,bk", [(37, 37, 8, 5), (20, 33, 7, 64), (33, 20, 4, 3), (16, 16, 16, 16),
                                           (1, 9, 1, 2)])
def test_flash_equals_sdpa_in_values_and_gradients(causal, L_q, L_k, bq, bk):
    g = torch.Generator().manual_seed(L_q * 100 + L_k)
    q = torch.randn(2, 3, L_q, 16, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(2, 3, L_k, 16, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(2, 3, L_k, 8, dtype=torch.float64, generator=g, requires_grad=True)
    out = flash.flash_attention(q, k, v, causal, bq, bk)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(out, ref)
    d_out = torch.randn(out.shape, dtype=torch.float64, generator=g)
    got = torch.autograd.grad(out, (q, k, v), d_out)
    want = torch.autograd.grad(ref, (q, k, v), d_out)
    for name, a, b in zip("qkv", got, want):
        torch.testing.assert_close(a, b, msg=lambda m, name=name: f"d{name}: {m}")


def test_flash_passes_gradcheck():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(3))
    assert torch.autograd.gradcheck(lambda q, k, v: flash.flash_attention(q, k, v, True, 4, 3), (q, k, v))


def test_naive_attention_equals_sdpa():
    q, k, v = (torch.randn(2, 9, 8, dtype=torch.float64) for _ in range(3))
    for causal in (False, True):
        torch.testing.assert_close(flash.naive_attention(q, k, v, causal),
                                   F.scaled_dot_product_attention(q, k, v, is_causal=causal))


def test_flash_keeps_linear_memory_for_backward_and_naive_keeps_quadratic():
    saved = {}
    for L in (256, 512, 1024):
        q, k, v = (torch.randn(1, 1, L, 32, requires_grad=True) for _ in range(3))
        saved[L] = (cost.saved_bytes(flash.naive_attention, q, k, v, True),
                    cost.saved_bytes(flash.flash_attention, q, k, v, True))
        # flash keeps q, k, v, out (4 * L * 32 floats) and one log-sum-exp per query
        assert saved[L][1] == 4 * (4 * L * 32 + L)
    assert saved[1024][0] / saved[512][0] > 3.5, "the naive version's memory grows as L^2"
    assert saved[1024][1] / saved[512][1] == pytest.approx(2.0), "flash's memory grows as L"


@pytest.mark.parametrize("bad", [0, -2, 1.5, True])
def test_bad_tile_sizes_are_rejected(bad):
    q = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="block_q"):
        flash.flash_attention(q, q, q, block_q=bad)


def test_mismatched_shapes_are_rejected():
    with pytest.raises(ValueError, match="must agree"):
        flash.flash_attention(torch.randn(1, 4, 8), torch.randn(1, 5, 6), torch.randn(1, 5, 6))


@pytest.mark.parametrize("causal", [False, True])
def test_tiled_forward_returns_the_output_and_each_rows_log_sum_exp(causal):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 9, 4, generator=g, dtype=torch.float64) for _ in range(3))
    out, lse = flash.tiled_forward(q, k, v, causal, block_q=4, block_k=3)
    s = q @ k.transpose(-2, -1) / 2.0
    if causal:
        s = s.masked_fill(torch.ones(9, 9, dtype=torch.bool).tril().logical_not(), float("-inf"))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    torch.testing.assert_close(lse, torch.logsumexp(s, -1, keepdim=True))
    with pytest.raises(ValueError):
        flash.tiled_forward(q, k, v, causal, block_q=0)


def test_flash_attention_runs_a_given_forward_and_recomputes_from_its_lse():
    """The backward pass uses the forward's lse: a forward whose lse is off by 1 gives wrong gradients."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 7, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    calls = []

    def mine(*args):
        calls.append(args[3:])
        return flash.tiled_forward(*args)

    def off(*args):
        out, lse = flash.tiled_forward(*args)
        return out, lse + 1.0

    d_out = torch.randn(1, 7, 4, generator=g, dtype=torch.float64)
    want = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), d_out)
    got = torch.autograd.grad(flash.flash_attention(q, k, v, True, 3, 2, forward=mine), (q, k, v), d_out)
    assert calls == [(True, 3, 2)]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    wrong = torch.autograd.grad(flash.flash_attention(q, k, v, True, 3, 2, forward=off), (q, k, v), d_out)
    assert not torch.allclose(wrong[0], want[0])


@pytest.mark.parametrize("causal, L_q, L_k, bq, bk", [(False, 9, 7, 4, 3), (True, 10, 10, 3, 4), (True, 6, 9, 16, 2)])
def test_tiled_backward_equals_autograd_of_the_explicit_attention(causal, L_q, L_k, bq, bk):
    g = torch.Generator().manual_seed(7)
    q = torch.randn(2, L_q, 4, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, L_k, 4, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, L_k, 3, generator=g, dtype=torch.float64, requires_grad=True)
    d_out = torch.randn(2, L_q, 3, generator=g, dtype=torch.float64)
    want = torch.autograd.grad(flash.naive_attention(q, k, v, causal), (q, k, v), d_out)
    with torch.no_grad():
        out, lse = flash.tiled_forward(q, k, v, causal, bq, bk)
        got = flash.tiled_backward(q, k, v, out, lse, d_out, causal, bq, bk)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_flash_attention_runs_a_given_backward():
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(1, 7, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    calls = []

    def mine(*args):
        calls.append(args[6:])
        return flash.tiled_backward(*args)

    d_out = torch.randn(1, 7, 4, generator=g, dtype=torch.float64)
    want = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), d_out)
    got = torch.autograd.grad(flash.flash_attention(q, k, v, True, 3, 2, backward=mine), (q, k, v), d_out)
    assert calls == [(True, 3, 2)]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name, shape", [("out", (1, 5, 3)), ("lse", (1, 5)), ("d_out", (1, 4, 4))])
def test_tiled_backward_rejects_a_saved_tensor_of_the_wrong_shape(name, shape):
    q, k, v = torch.randn(1, 5, 4), torch.randn(1, 6, 4), torch.randn(1, 6, 3)
    args = {"out": torch.randn(1, 5, 3), "lse": torch.randn(1, 5, 1), "d_out": torch.randn(1, 5, 3)}
    args[name] = torch.randn(shape) if name != "out" else torch.randn(1, 5, 2)
    with pytest.raises(ValueError, match=name):
        flash.tiled_backward(q, k, v, **args)
    with pytest.raises(ValueError, match="block_k"):
        flash.tiled_backward(q, k, v, torch.randn(1, 5, 3), torch.randn(1, 5, 1), torch.randn(1, 5, 3), block_k=0)
