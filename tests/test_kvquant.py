"""The int8 KV cache: every value within scale / 2 (exact bound), attention's error measured small,
memory about a quarter of float32's."""

import pytest
import torch
import torch.nn.functional as F

from course_utils.kvcache import kv_cache_bytes
from course_utils.kvquant import dequantize_int8, int8_cache_bytes, quantize_int8


def test_error_bound_and_attention():
    g = torch.Generator().manual_seed(0)
    k = torch.randn(64, 4, 16, generator=g) * torch.linspace(0.1, 10, 16)   # channels of different ranges
    v = torch.randn(64, 4, 16, generator=g)
    kq, ks = quantize_int8(k)
    vq, vs = quantize_int8(v)
    assert kq.dtype == torch.int8 and ks.shape == (4, 16)
    assert ((dequantize_int8(kq, ks) - k).abs() <= ks / 2 * (1 + 1e-6)).all()
    q = torch.randn(4, 8, 16, generator=g)
    exact = F.scaled_dot_product_attention(q, k.transpose(0, 1), v.transpose(0, 1))
    approx = F.scaled_dot_product_attention(q, dequantize_int8(kq, ks).transpose(0, 1),
                                            dequantize_int8(vq, vs).transpose(0, 1))
    rel = (approx - exact).norm() / exact.norm()
    assert rel < 0.05, rel


def test_memory():
    T, H, D = 4096, 8, 128
    fp32 = kv_cache_bytes(1, H, D, T, bytes_per_value=4)
    int8 = int8_cache_bytes(T, H, D)
    assert int8 == 2 * (T * H * D + H * D * 4)
    assert 0.25 < int8 / fp32 < 0.251


def test_bad_inputs():
    with pytest.raises(ValueError, match="floating"):
        quantize_int8(torch.zeros(3, 2, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="int8"):
        dequantize_int8(torch.zeros(3, 2, 4), torch.ones(2, 4))
    with pytest.raises(ValueError, match="scale"):
        dequantize_int8(torch.zeros(3, 2, 4, dtype=torch.int8), torch.ones(4))
    with pytest.raises(ValueError, match="seq_len"):
        int8_cache_bytes(-1, 2, 4)
