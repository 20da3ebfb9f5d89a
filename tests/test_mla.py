"""Multi-head latent attention: the absorbed inference form equals the explicit computation (float64,
tolerance 1e-12: the products are grouped differently), in one pass and decoding token by token
from the cache of [c_KV, k_rope]; DeepSeek-V2's KV bytes per token reproduced (exact integers)."""

import pytest
import torch
import torch.nn.functional as F

from course_utils.mla import kv_bytes_per_token, mla_absorbed, mla_cache, mla_explicit, mla_weights
from course_utils.positional import apply_rope_half

D_MODEL, N_H, D_H, D_C, D_R = 24, 3, 8, 32, 4      # d_c = 4 d_h, d_h^R = d_h / 2 as in DeepSeek-V2


def _setup(seed=0, T=9):
    g = torch.Generator().manual_seed(seed)
    W = mla_weights(D_MODEL, N_H, D_H, D_C, D_R, generator=g, dtype=torch.float64)
    return W, torch.randn(2, T, D_MODEL, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("seed", range(3))
def test_absorbed_equals_explicit(seed):
    W, h = _setup(seed)
    c_kv, k_rope = mla_cache(h, W)
    assert c_kv.shape == (2, 9, D_C) and k_rope.shape == (2, 9, D_R)
    torch.testing.assert_close(mla_absorbed(h, c_kv, k_rope, W), mla_explicit(h, W), rtol=0, atol=1e-12)


def test_absorbed_decoding_from_the_cache():
    W, h = _setup(1)
    want = mla_explicit(h, W)
    c_kv = torch.zeros(2, 0, D_C, dtype=torch.float64)
    k_rope = torch.zeros(2, 0, D_R, dtype=torch.float64)
    for t in range(h.shape[1]):
        c, k = mla_cache(h[:, t:t + 1], W, offset=t)
        c_kv, k_rope = torch.cat([c_kv, c], 1), torch.cat([k_rope, k], 1)
        torch.testing.assert_close(mla_absorbed(h[:, t:t + 1], c_kv, k_rope, W), want[:, t:t + 1], rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.cat([c_kv, k_rope], -1), torch.cat(mla_cache(h, W), -1), rtol=0, atol=1e-12)


def test_explicit_is_attention_with_rebuilt_keys():
    """The explicit form is plain causal SDPA over per-head keys [c W_UK ; RoPE(h W_KR)] and values c W_UV."""
    W, h = _setup(2)
    c = h @ W["W_DKV"]
    q = torch.cat([torch.einsum("btm,hmd->bhtd", h, W["W_Q"]),
                   apply_rope_half(torch.einsum("btm,hmr->bhtr", h, W["W_QR"]))], -1)
    k_r = apply_rope_half((h @ W["W_KR"])[:, None]).expand(-1, N_H, -1, -1)
    k = torch.cat([torch.einsum("btc,hcd->bhtd", c, W["W_UK"]), k_r], -1)
    v = torch.einsum("btc,hcd->bhtd", c, W["W_UV"])
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(mla_explicit(h, W), torch.einsum("bhtd,hdm->btm", o, W["W_O"]), rtol=0, atol=1e-12)


def test_deepseek_v2_kv_bytes():
    n_h, d_h, d_c, d_r = 128, 128, 512, 64                # DeepSeek-V2, §2.1 and Table 1
    mla = kv_bytes_per_token("mla", n_h, d_h, d_c=d_c, d_rope=d_r, bytes_per_value=1)
    assert mla == 576 == 4.5 * d_h                        # (d_c + d_h^R) elements per token and layer
    groups = mla / (2 * d_h)                              # GQA caches 2 n_g d_h: equal at n_g = 2.25
    assert groups == 2.25
    assert kv_bytes_per_token("mha", n_h, d_h, bytes_per_value=1) == 2 * 128 * 128 == 32768
    assert kv_bytes_per_token("mqa", n_h, d_h, bytes_per_value=1) == 256
    assert kv_bytes_per_token("gqa", n_h, d_h, n_kv_heads=8, n_layers=60) == 2 * 8 * 128 * 60 * 2


def test_bad_inputs():
    W, h = _setup()
    with pytest.raises(ValueError, match="d_model"):
        mla_explicit(h[..., :5], W)
    with pytest.raises(TypeError, match="torch.Tensor"):
        mla_cache([1.0], W)
    c_kv, k_rope = mla_cache(h[:, :3], W)
    with pytest.raises(ValueError, match="at least"):
        mla_absorbed(h, c_kv, k_rope, W)
    with pytest.raises(ValueError, match="even"):
        mla_weights(8, 2, 4, 8, 3)
    with pytest.raises(ValueError, match="kind"):
        kv_bytes_per_token("mha2", 4, 8)
    with pytest.raises(ValueError, match="n_kv_heads"):
        kv_bytes_per_token("gqa", 4, 8)
    with pytest.raises(ValueError, match="d_c"):
        kv_bytes_per_token("mla", 4, 8)
