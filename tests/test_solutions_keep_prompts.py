"""The solutions of chapters 5-8 keep their own prompts (issue 54).

Each solution's answer cell is run on its own (no notebook, no grader) on the kinds of input its prompt
allows, the large-value kinds included, and compared with an independent reference: a naive float64
formula or the ``course_utils`` function the chapter names as the reference. A hidden test compares a
learner with the solution, so a solution that breaks its prompt where no test looks would grade right
answers wrong.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_utils import conv_attention, decoding, llama, positional
from course_utils import transformer as T
from course_utils.data import PAD_ID

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import exercise_runner as runner  # noqa: E402

_NAMESPACES: dict[str, dict] = {}


def solution(chapter: str, name: str):
    """The function ``name`` defined by the chapter's answer cells (all run in order in one namespace)."""
    if chapter not in _NAMESPACES:
        ns = {"torch": torch, "F": F, "math": math, "np": np, "PAD_ID": PAD_ID}
        for ex in runner.exercises(runner.chapter_cells(runner.find_chapter(chapter))).values():
            try:
                exec(compile(ex.source, f"<{chapter} {ex.name}>", "exec"), ns)   # noqa: S102 (the course's own source)
            except NameError:   # a cell needing the chapter's other imports (PAD_ID, ...): not tested here,
                pass            # and a function missing for that reason fails its test by KeyError
        _NAMESPACES[chapter] = ns
    return _NAMESPACES[chapter][name]


def _close(got, want, atol, rtol=0.0):
    assert got.shape == want.shape
    assert torch.allclose(got.double(), want.double(), atol=atol, rtol=rtol), (got - want).abs().max()


# ---- chapter 5 -------------------------------------------------------------------------------------

@pytest.mark.parametrize("c_dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("alpha", [1.5, 2, torch.tensor([0.5, 2.0, 3.0], dtype=torch.float64),
                                   torch.tensor([0.5, 2.0, 3.0]), torch.tensor([1, 2, 3])])
def test_ch05_quadratic_scores_any_alpha_dtype(c_dtype, alpha):
    fn = solution("ch05", "quadratic_scores")
    off = conv_attention.relative_offsets(3, 4)
    c = torch.tensor([[1.0, -1.0], [0.5, 2.0], [-2.0, 0.0]], dtype=torch.float64)
    got = fn(off, c.to(c_dtype), alpha)
    assert got.dtype == c_dtype
    a = torch.as_tensor(alpha, dtype=torch.float64).expand(3)
    d = off.double()
    want = -a[:, None, None] * (((d[None] - c[:, None, None]) ** 2).sum(-1) - (c**2).sum(-1)[:, None, None])
    _close(got, want, 1e-4, 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ch05_apply_rope_fractional_and_negative_positions(dtype):
    fn = solution("ch05", "apply_rope")
    x = torch.randn(2, 4, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    pos = torch.tensor([2.5, -1.5, 0.25, 7.0], dtype=dtype)
    got = fn(x.to(dtype), pos)
    want = torch.empty_like(x)
    for s, m in enumerate(pos.double().tolist()):           # rotation matrices, pair by pair
        for i in range(3):
            a = m * 10000.0 ** (-2 * i / 6)
            x0, x1 = x[:, s, 2 * i], x[:, s, 2 * i + 1]
            want[:, s, 2 * i], want[:, s, 2 * i + 1] = x0 * math.cos(a) - x1 * math.sin(a), x0 * math.sin(a) + x1 * math.cos(a)
    assert got.dtype == dtype
    _close(got, want, 1e-5 if dtype == torch.float64 else 1e-4)
    assert not torch.allclose(fn(x, torch.tensor([2.0, -1.0, 0.0, 7.0])), fn(x, pos.double()))


@pytest.mark.parametrize(("h", "w"), [(1, 1), (1, 4), (5, 1), (3, 4)])
def test_ch05_relative_offsets_every_grid_shape(h, w):
    got = solution("ch05", "relative_offsets")(h, w)
    assert got.dtype == torch.int64 and torch.equal(got, conv_attention.relative_offsets(h, w))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("alpha", [0.7, 3, 100.0])
def test_ch05_head_map_sharp_heads_and_both_dtypes(dtype, alpha):
    """A direct float64 softmax of -alpha ||delta - Delta||^2 (alpha 100: scores far from 0)."""
    got = solution("ch05", "head_attention_map")(5, 4, (1, 3), torch.tensor([2.0, -2.0], dtype=dtype), alpha)
    rr, cc = torch.meshgrid(torch.arange(5), torch.arange(4), indexing="ij")
    score = -alpha * ((rr - 1 - 2.0).double() ** 2 + (cc - 3 + 2.0).double() ** 2)
    assert torch.isfinite(got).all()
    _close(got, torch.softmax(score.flatten(), -1).reshape(5, 4), 1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 4, 3, 3), (3, 2, 1, 1), (2, 3, 5, 5)])
def test_ch05_kernel_to_heads_matches_the_reference(dtype, shape):
    w = torch.randn(shape, generator=torch.Generator().manual_seed(4), dtype=dtype)
    for got, want in zip(solution("ch05", "kernel_to_heads")(w), conv_attention.kernel_to_heads(w)):
        assert got.dtype == dtype and torch.equal(got, want)


# ---- chapter 6 -------------------------------------------------------------------------------------

def test_ch06_sinusoidal_table_up_to_10000_positions_and_odd_d_model():
    fn = solution("ch06", "sinusoidal_table")
    got = fn(10000, 16)
    want = positional.sinusoidal_encoding(10000, 16)
    assert got.dtype == torch.float32
    _close(got, want, 1e-6)                                  # the solution computes in float64
    for d in (1, 7):
        with pytest.raises(ValueError, match="even"):
            fn(5, d)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_ch06_decoder_mask_any_integer_dtype(dtype):
    ids = torch.tensor([[1, 200, 7, 7], [7, 1, 200, 9]]).to(dtype)
    assert torch.equal(solution("ch06", "decoder_mask")(ids, 7), T.decoder_self_mask(ids, 7))


@pytest.mark.parametrize("args", [(1, 512, 4000), (4000, 512, 4000), (100000, 64, 1), (37, 8, 100)])
def test_ch06_warmup_matches_the_formula(args):
    step, d, w = args
    got = solution("ch06", "warmup_lr")(*args)
    assert isinstance(got, float) and math.isclose(got, d**-0.5 * min(step**-0.5, step * w**-1.5), rel_tol=1e-12)


# ---- chapter 7 -------------------------------------------------------------------------------------

@pytest.mark.parametrize("p", [2.0, 2.5, np.float32(2.5), np.float64(2.0), np.int64(2), np.int32(0), True, False,
                               torch.tensor(2), torch.tensor(2.5), torch.tensor([2]), "2", None, -1, 6])
def test_ch07_prefix_mask_only_python_ints(p):
    with pytest.raises((ValueError, TypeError)):
        solution("ch07", "prefix_lm_mask")(5, p)


@pytest.mark.parametrize("L", [1, 4, 9])
def test_ch07_prefix_mask_every_valid_prefix(L):
    from course_utils import families
    for p in range(L + 1):
        assert torch.equal(solution("ch07", "prefix_lm_mask")(L, p), families.prefix_lm_mask(L, p))


@pytest.mark.parametrize(("dtype", "low"), [(torch.float32, -20.0), (torch.float32, -200.0), (torch.float64, -40.0)])
@pytest.mark.parametrize("k", [None, 2, 3])
def test_ch07_top_p_one_keeps_every_entry_on_saturated_rows(dtype, low, k):
    fn = solution("ch07", "filter_logits")
    z = torch.tensor([[0.0, low, low - 1, low - 2], [low - 1, low, 0.0, low - 2]], dtype=dtype)
    want = z if k is None else decoding.filter_top_k(z, k)
    want = decoding.filter_top_p(want, 1.0)
    got = fn(z, top_k=k, top_p=1.0)
    assert torch.equal(torch.isfinite(got), torch.isfinite(want))
    assert torch.equal(got, want)


@pytest.mark.parametrize(("dtype", "offset"), [(torch.float32, 200.0), (torch.float64, 1000.0)])
@pytest.mark.parametrize(("k", "p"), [(None, 0.3), (None, 0.9), (3, 0.7), (5, None)])
def test_ch07_filter_logits_large_logits(dtype, offset, k, p):
    z = (torch.randn(3, 10, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 2 + offset).to(dtype)
    want = z if k is None else decoding.filter_top_k(z, k)
    want = want if p is None else decoding.filter_top_p(want, p)
    assert torch.equal(solution("ch07", "filter_logits")(z, top_k=k, top_p=p), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("shape", "patch"), [((2, 3, 4, 6), 2), ((1, 1, 5, 5), 5), ((3, 2, 3, 3), 1)])
def test_ch07_patchify_is_unfold(dtype, shape, patch):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(5), dtype=dtype)
    got = solution("ch07", "patchify")(x, patch)
    assert got.dtype == dtype and torch.equal(got, F.unfold(x, patch, stride=patch).transpose(1, 2))


# ---- chapter 8 -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("dtype", "scale"), [(torch.float16, 300.0), (torch.float16, 0.5), (torch.float32, 1e14),
                                              (torch.float64, 1e14), (torch.float32, 1.0)])
def test_ch08_rms_norm_float16_and_large_values(dtype, scale):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(4, 16, generator=g, dtype=torch.float64) * scale).to(dtype)
    w = torch.randn(16, generator=g, dtype=torch.float64).to(dtype)
    got = solution("ch08", "rms_norm")(x, w)
    x64, w64 = x.double(), w.double()
    want = x64 / (x64.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * w64
    assert got.dtype == dtype
    _close(got, want, *((1e-3, 2e-3) if dtype == torch.float16 else (1e-5, 1e-4)))


@pytest.mark.parametrize(("dtype", "top"), [(torch.float32, 400.0), (torch.float64, 3000.0)])
def test_ch08_swiglu_large_gates(dtype, top):
    x = (torch.rand(4, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 2 - 1).to(dtype).double()
    Wg = torch.diag(torch.linspace(-top, top, 6, dtype=torch.float64).to(dtype).double())
    eye = torch.eye(6, dtype=torch.float64)
    got = solution("ch08", "swiglu")(x.to(dtype), Wg.to(dtype), eye.to(dtype), eye.to(dtype))
    z = x @ Wg.T
    want = z * torch.sigmoid(z) * x                          # float64: no overflow for |z| <= 3000 here
    assert got.dtype == dtype and torch.isfinite(got).all()
    _close(got, want, 1e-5, 1e-4)


@pytest.mark.parametrize("key", [
    "model.layers.0.mlp.q_proj.weight", "model.layers.0.self_attn.gate_proj.weight",
    "model.layers.0.self_attn.q_proj.weight_scale", "model.layers.3.mlp.down_proj.qweight",
    "model.layers.1.self_attn.k_proj.scales", "model.norm.weight_scale", "model.layers.2.input_layernorm.bias",
])
def test_ch08_course_key_raises_off_its_table(key):
    with pytest.raises(KeyError):
        solution("ch08", "course_key")(key)
    with pytest.raises(KeyError):
        llama.hf_key_to_ours(key)


def test_ch08_course_key_matches_the_reference_on_its_table():
    fn = solution("ch08", "course_key")
    for i in (0, 7, 123):
        for part in llama.HF_NAMES:
            key = f"model.layers.{i}.{part}.weight"
            assert fn(key) == llama.hf_key_to_ours(key)
    for key in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"):
        assert fn(key) == llama.hf_key_to_ours(key)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ch08_online_update_keeps_minus_inf_in_unseen_rows(dtype):
    """A row masked in the first block keeps m = -inf, l = 0, acc = 0; the next block then comes out right."""
    fn = solution("ch08", "online_update")
    s1 = torch.full((2, 3), float("-inf"), dtype=dtype)
    s2 = torch.tensor([[-150.0, -151.0], [90.0, 100.0]], dtype=dtype)
    v1, v2 = torch.ones(3, 2, dtype=dtype), torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=dtype)
    m, l, acc = fn(torch.full((2, 1), float("-inf"), dtype=dtype), torch.zeros(2, 1, dtype=dtype),
                   torch.zeros(2, 2, dtype=dtype), s1, v1)
    assert torch.isneginf(m).all() and (l == 0).all() and (acc == 0).all()
    m, l, acc = fn(m, l, acc, s2, v2)
    want = torch.softmax(s2.double(), -1) @ v2.double()
    _close(acc / l, want, 1e-5, 1e-4)


@pytest.mark.parametrize(("offset", "dtype"), [(0, torch.float64), (131069, torch.float64), (100000, torch.float32)])
def test_ch08_rope_half_long_caches(offset, dtype):
    x = torch.randn(2, 3, 4, 16, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    got = solution("ch08", "rope_half")(x.to(dtype), offset, 500000.0)
    ang = torch.arange(offset, offset + 4, dtype=torch.float64)[:, None] * 500000.0 ** (-torch.arange(0, 16, 2) / 16)
    cos, sin = ang.cos().repeat(1, 2), ang.sin().repeat(1, 2)
    want = x * cos + torch.cat([-x[..., 8:], x[..., :8]], -1) * sin
    assert got.dtype == dtype
    _close(got, want, 1e-5 + 5e-7 * (offset + 4) * x.abs().max().item())
