"""Relative positions, the quadratic encoding and attention as convolution (chapter 5)."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils import conv_attention, positional


def test_relative_offsets_are_key_minus_query_in_row_major_order():
    off = conv_attention.relative_offsets(3, 4)
    assert off.shape == (12, 12, 2) and not off.is_floating_point()
    for q in range(12):
        for k in range(12):
            assert off[q, k].tolist() == [k // 4 - q // 4, k % 4 - q % 4]
    assert torch.equal(off, -off.transpose(0, 1))


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_relative_offsets_reject_bad_sizes(bad):
    with pytest.raises(ValueError, match="height"):
        conv_attention.relative_offsets(bad, 3)


def test_quadratic_scores_equal_the_formula_for_one_and_many_heads():
    off = conv_attention.relative_offsets(5, 4)
    centers = torch.tensor([[0., 0.], [1., -1.], [-2., 1.]], dtype=torch.float64)
    alphas = torch.tensor([0.5, 2.0, 7.0], dtype=torch.float64)
    got = conv_attention.quadratic_scores(off, centers, alphas)
    assert got.shape == (3, 20, 20) and got.dtype == torch.float64
    d = off.double()
    for h in range(3):
        want = -alphas[h] * (((d - centers[h]) ** 2).sum(-1) - (centers[h] ** 2).sum())
        torch.testing.assert_close(got[h], want)
        torch.testing.assert_close(conv_attention.quadratic_scores(off, centers[h], alphas[h].item()), want)


def test_quadratic_head_peaks_at_query_plus_center():
    off = conv_attention.relative_offsets(7, 7)
    center = torch.tensor([1., -2.])
    weights = torch.softmax(conv_attention.quadratic_scores(off, center, 3.0), -1)
    pos = conv_attention.grid_positions(7, 7)
    q = 3 * 7 + 3                                               # the middle cell (3, 3)
    assert pos[weights[q].argmax()].tolist() == [4, 1]


@pytest.mark.parametrize("alpha,peak", [(0.5, 0.16), (2.0, 0.62), (10.0, 0.9998), (50.0, 1.0)])
def test_peak_probability_on_a_7x7_grid_matches_the_paper(alpha, peak):
    off = conv_attention.relative_offsets(7, 7)
    w = torch.softmax(conv_attention.quadratic_scores(off, torch.zeros(2, dtype=torch.float64), alpha), -1)
    assert round(w[24].max().item(), len(str(peak)) - 2) == peak


def test_kernel_to_heads_gives_each_head_its_tap():
    w = torch.randn(4, 3, 3, 3)
    w_val, w_out = conv_attention.kernel_to_heads(w)
    assert w_val.shape == (9, 3, 4) and w_out.shape == (36, 4)
    centers = conv_attention.kernel_centers(3)
    for h in range(9):
        i, j = (centers[h] + 1).tolist()
        torch.testing.assert_close(w_val[h] @ w_out[4 * h:4 * h + 4], w[:, :, i, j].T)


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("c_in,c_out", [(1, 1), (3, 4), (5, 2)])
def test_conv_as_attention_equals_conv2d_in_float64(k, c_in, c_out):
    g = torch.Generator().manual_seed(k * 100 + c_in * 10 + c_out)
    x = torch.randn(2, c_in, 7, 6, generator=g, dtype=torch.float64)
    w = torch.randn(c_out, c_in, k, k, generator=g, dtype=torch.float64)
    got = conv_attention.conv_as_attention(x, w, alpha=50.0)
    torch.testing.assert_close(got, F.conv2d(x, w, padding=k // 2), atol=1e-5, rtol=0)


@pytest.mark.parametrize("k,c_in,c_out", [(1, 3, 1), (3, 3, 4), (5, 2, 2)])
def test_chapter4_multihead_module_computes_the_convolution(k, c_in, c_out):
    g = torch.Generator().manual_seed(k + 7 * c_in)
    x = torch.randn(2, c_in, 6, 5, generator=g, dtype=torch.float64)
    w = torch.randn(c_out, c_in, k, k, generator=g, dtype=torch.float64)
    torch.testing.assert_close(conv_attention.conv_as_multihead(x, w, 50.0), F.conv2d(x, w, padding=k // 2),
                               atol=1e-5, rtol=0)
    torch.testing.assert_close(conv_attention.conv_as_multihead(x, w, 3.0), conv_attention.conv_as_attention(x, w, 3.0))


def test_conv_as_attention_float32_and_the_error_shrinks_with_alpha():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 3, 8, 8, generator=g)
    w = torch.randn(2, 3, 3, 3, generator=g)
    ref = F.conv2d(x, w, padding=1)
    errs = [(conv_attention.conv_as_attention(x, w, a) - ref).abs().max().item() for a in (1.0, 5.0, 20.0)]
    assert errs[0] > errs[1] > errs[2] and errs[0] > 0.1
    assert errs[2] < 1e-4


def test_without_zero_keys_the_border_replicates():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 2, 6, 5, generator=g, dtype=torch.float64)
    w = torch.randn(3, 2, 3, 3, generator=g, dtype=torch.float64)
    got = conv_attention.conv_as_attention(x, w, 60.0, zero_padding=False)
    torch.testing.assert_close(got, F.conv2d(F.pad(x, (1, 1, 1, 1), mode="replicate"), w))
    inside = F.conv2d(x, w, padding=1)
    assert (got - inside)[..., 1:-1, 1:-1].abs().max() < 1e-10
    assert (got - inside).abs().max() > 0.1


def test_conv_as_attention_rejects_bad_input():
    with pytest.raises(ValueError, match="odd"):
        conv_attention.conv_as_attention(torch.zeros(1, 1, 4, 4), torch.zeros(1, 1, 2, 2), 10.0)
    with pytest.raises(ValueError, match="C_in=3"):
        conv_attention.conv_as_attention(torch.zeros(1, 3, 4, 4), torch.zeros(1, 2, 3, 3), 10.0)
    with pytest.raises(ValueError, match="alpha"):
        conv_attention.conv_as_attention(torch.zeros(1, 1, 4, 4), torch.zeros(1, 1, 3, 3), 0.0)


def test_positional_attention_weights_are_softmax_of_the_bias():
    g = torch.Generator().manual_seed(2)
    bias = torch.randn(2, 4, 5, generator=g)
    x = torch.randn(3, 5, 6, generator=g)
    w_val, w_out = torch.randn(2, 6, 3, generator=g), torch.randn(6, 7, generator=g)
    out, weights = conv_attention.positional_attention(x, bias, w_val, w_out)
    torch.testing.assert_close(weights, torch.softmax(bias, -1))
    heads = [torch.softmax(bias[h], -1) @ (x @ w_val[h]) for h in range(2)]
    torch.testing.assert_close(out, torch.cat(heads, -1) @ w_out)


def _rope_reference(x, positions, base=10000.0):
    """RoPE as a block-diagonal rotation matrix per position (the paper's eq. 14)."""
    d = x.shape[-1]
    out = torch.empty_like(x)
    for s, m in enumerate(positions.tolist()):
        rot = torch.zeros(d, d, dtype=x.dtype)
        for i in range(d // 2):
            a = m * base ** (-2 * i / d)
            rot[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor(
                [[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=x.dtype)
        out[..., s, :] = x[..., s, :] @ rot.T
    return out


def test_rope_equals_the_rotation_matrices_and_keeps_norms():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, 8, generator=g, dtype=torch.float64)
    pos = torch.tensor([0, 1, 4, 9, 30])
    got = positional.apply_rope(x, pos)
    torch.testing.assert_close(got, _rope_reference(x, pos))
    torch.testing.assert_close(got.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(positional.apply_rope(x, torch.zeros(5)), x)


def test_rope_scores_depend_only_on_the_relative_position():
    g = torch.Generator().manual_seed(4)
    q, k = torch.randn(16, generator=g, dtype=torch.float64), torch.randn(16, generator=g, dtype=torch.float64)

    def score(m, n):
        return (positional.apply_rope(q[None], torch.tensor([m])) @ positional.apply_rope(k[None], torch.tensor([n])).T).item()

    for m, n in [(3, 1), (10, 4), (0, 7)]:
        for shift in (1, 5, 100):
            assert math.isclose(score(m, n), score(m + shift, n + shift), rel_tol=1e-9, abs_tol=1e-9)
    assert abs(score(3, 1) - score(4, 1)) > 1e-3


def test_rope_rejects_odd_dimension_and_wrong_positions():
    with pytest.raises(ValueError, match="even"):
        positional.apply_rope(torch.zeros(3, 5), torch.arange(3))
    with pytest.raises(ValueError, match="positions"):
        positional.apply_rope(torch.zeros(3, 4), torch.arange(4))
