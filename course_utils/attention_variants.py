"""Attention variants built on :mod:`course_utils.attention`: cross-attention from projection
matrices, and sliding-window (local) attention, with a mask and as a banded computation.

Chapter 3 derives them: cross-attention is scaled dot-product attention whose queries come
from one sequence and keys/values from another; sliding-window attention lets query ``i``
see only keys ``j`` with ``|i - j| <= radius`` (Beltagy et al. 2020, "Longformer"; the
"restricted self-attention" of Vaswani et al. 2017, Table 1). A window *mask* gives the
right result but still computes all ``L_q x L_k`` scores; :func:`sliding_window_attention`
computes only the ``2 * radius + 1`` scores of each query's window, so its time and memory
grow linearly with the length.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_utils import attention
from course_utils._validate import check_int

__all__ = ["cross_attention", "sliding_window_attention", "sliding_window_mask"]


def cross_attention(x_dec: torch.Tensor, x_enc: torch.Tensor, W_q: torch.Tensor, W_k: torch.Tensor,
                    W_v: torch.Tensor, enc_lengths: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoder queries attending to encoder keys and values (chapter 3's exercise 5).

    Args:
        x_dec: ``(batch, T, d_dec)`` decoder states; x_enc: ``(batch, S, d_enc)`` encoder states.
        W_q: ``(d_dec, d_k)``; W_k: ``(d_enc, d_k)``; W_v: ``(d_enc, d_v)``.
        enc_lengths: ``(batch,)`` true source lengths, or None when nothing is padded.
    Returns:
        ``(output (batch, T, d_v), weights (batch, T, S))``; padding keys get weight 0.
    """
    if x_dec.dim() != 3 or x_enc.dim() != 3 or x_dec.shape[0] != x_enc.shape[0]:
        raise ValueError(f"x_dec (batch, T, d_dec) and x_enc (batch, S, d_enc) must be 3-D with the same "
                         f"batch size, got {tuple(x_dec.shape)} and {tuple(x_enc.shape)}")
    mask = None if enc_lengths is None else attention.padding_mask(enc_lengths, x_enc.shape[1])
    return attention.scaled_dot_product_attention(x_dec @ W_q, x_enc @ W_k, x_enc @ W_v, mask)


def _check_radius(radius: int) -> None:
    check_int(radius, "radius")


def sliding_window_mask(L: int, radius: int, device=None) -> torch.Tensor:
    """Boolean ``(L, L)`` mask, True where ``|i - j| <= radius`` (True = may attend).

    Combine it with :func:`course_utils.attention.causal_mask` for a causal window.
    """
    _check_radius(radius)
    i = torch.arange(L, device=device)
    return (i[:, None] - i[None, :]).abs() <= radius


def sliding_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, radius: int
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Self-attention of each position to its ``2 * radius + 1`` neighbours, computed banded.

    Equal to ``attention.scaled_dot_product_attention(q, k, v, sliding_window_mask(L, radius))``
    but without the ``L x L`` score matrix: keys and values are padded by ``radius`` on both
    sides, and for each of the ``2 * radius + 1`` offsets ``m`` every query ``i`` is compared
    with key ``i - radius + m`` at once (the padded keys shifted by ``m``, a view). Time
    ``O(L * radius * d)``; memory kept for the backward pass ``O(L * (radius + d))``: the
    inputs, the ``(L, 2 * radius + 1)`` scores and weights, never a copy of the keys or values
    per window (a batched product over ``Tensor.unfold`` windows would copy them, ``2 * radius
    + 1`` times the keys and values, as soon as there is more than one sequence or head).

    Args:
        q, k: ``(..., L, d_k)``; v: ``(..., L, d_v)`` (one sequence: self-attention).
        radius: each query sees keys ``i - radius .. i + radius`` that exist.
    Returns:
        ``(output (..., L, d_v), weights (..., L, 2 * radius + 1))``; ``weights[..., i, m]`` is
        the weight of key ``i - radius + m`` (zero where that key is outside the sequence).
    """
    _check_radius(radius)
    if q.shape != k.shape or q.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"sliding-window self-attention needs q and k of the same shape (..., L, d_k) "
                         f"and v (..., L, d_v), got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    L, w = q.shape[-2], 2 * radius + 1
    k_pad = F.pad(k, (0, 0, radius, radius))                           # (..., L + 2 radius, d_k)
    v_pad = F.pad(v, (0, 0, radius, radius))
    scores = torch.stack([(q * k_pad[..., m:m + L, :]).sum(-1) for m in range(w)], -1)   # (..., L, w)
    scores = scores / math.sqrt(q.shape[-1])
    key_pos = torch.arange(L, device=q.device)[:, None] + torch.arange(w, device=q.device) - radius
    inside = (key_pos >= 0) & (key_pos < L)                            # (L, w): the key exists
    weights = attention.masked_softmax(scores, inside)
    out = weights[..., 0, None] * v_pad[..., :L, :]
    for m in range(1, w):
        out = out + weights[..., m, None] * v_pad[..., m:m + L, :]      # (..., L, d_v)
    return out, weights
