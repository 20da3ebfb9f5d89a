"""An int8 key/value cache with per-channel scales (chapter 9).

Each channel (one head's one feature) of the cached keys or values gets its own scale,
``scale = max_t |x[t, h, d]| / 127``, and is stored as ``round(x / scale)`` in int8 (symmetric, no
zero point). Dequantised, every value is off by at most ``scale / 2``; the cache takes 1 byte per
value plus the scales instead of 2 (bfloat16) or 4 (float32). Per-channel scales suit keys, whose
outlier features sit in fixed channels (KIVI, Liu et al. 2024, quantises keys per channel and values
per token); here both use the one function.

Shapes: ``x (T, n_heads, d_head)``; the int8 codes the same; ``scale (n_heads, d_head)``.
"""

from __future__ import annotations

import torch

from course_utils._validate import check_int

__all__ = ["dequantize_int8", "int8_cache_bytes", "quantize_int8"]


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x (T, n_heads, d_head)`` floats -> ``(codes int8 (T, n_heads, d_head), scale (n_heads, d_head))``
    with ``scale = max over T of |x| / 127`` (1 where a channel is all zeros)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 3 or not x.is_floating_point() or x.shape[0] == 0:
        raise ValueError(f"x must be a floating (T, n_heads, d_head) tensor with T >= 1, got "
                         f"{x.dtype} {tuple(x.shape)}")
    amax = x.abs().amax(dim=0)
    scale = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    codes = torch.round(x / scale).clamp(-127, 127).to(torch.int8)
    return codes, scale


def dequantize_int8(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``codes (T, n_heads, d_head)`` int8 and ``scale (n_heads, d_head)`` -> floats ``codes * scale``."""
    if not isinstance(codes, torch.Tensor) or codes.dtype != torch.int8:
        raise TypeError(f"codes must be an int8 tensor, got {getattr(codes, 'dtype', type(codes).__name__)}")
    if not isinstance(scale, torch.Tensor) or codes.dim() != 3 or scale.shape != codes.shape[1:]:
        raise ValueError(f"codes must be (T, n_heads, d_head) and scale (n_heads, d_head), got "
                         f"{tuple(codes.shape)} and {getattr(scale, 'shape', type(scale).__name__)}")
    return codes.to(scale.dtype) * scale


def int8_cache_bytes(seq_len: int, n_heads: int, d_head: int, scale_bytes: int = 4) -> int:
    """Bytes of one layer's int8 K and V for ``seq_len`` tokens, with their per-channel scales:
    ``2 * (seq_len * n_heads * d_head + n_heads * d_head * scale_bytes)``."""
    for v, name in ((seq_len, "seq_len"), (n_heads, "n_heads"), (d_head, "d_head"), (scale_bytes, "scale_bytes")):
        check_int(v, name)
    return 2 * (seq_len * n_heads * d_head + n_heads * d_head * scale_bytes)
