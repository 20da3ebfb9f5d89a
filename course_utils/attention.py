"""Attention: masked softmax, masks and scaled dot-product attention.

Mask convention (PyTorch's, for ``F.scaled_dot_product_attention``): a boolean mask is
True where a query **may attend** to a key. Masked scores are set to ``-inf`` (not to a
large negative number such as -1e9, which still leaks weight when every score is small or
the dtype is half precision), and a row in which every key is masked gets all-zero weights
(so its output is zero, as in PyTorch) instead of NaN.

Shapes: queries ``(..., L_q, d_k)``, keys ``(..., L_k, d_k)``, values ``(..., L_k, d_v)``,
masks broadcastable to ``(..., L_q, L_k)``.
"""

from __future__ import annotations

import math

import torch


def _check_mask(mask: torch.Tensor | None, scores: torch.Tensor) -> None:
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"mask must be a bool tensor (True = may attend), got {got}; "
                        "convert a 0/1 mask with mask.bool()")
    try:
        torch.broadcast_shapes(mask.shape, scores.shape)
    except RuntimeError:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' "
                         f"shape {tuple(scores.shape)} (..., L_q, L_k)") from None


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None, dim: int = -1) -> torch.Tensor:
    """Softmax of ``scores`` over ``dim`` where only positions with ``mask`` True take part.

    Args:
        scores: ``(..., L_q, L_k)`` real scores.
        mask: bool, broadcastable to ``scores``; True = may attend. ``None``: no mask.
    Returns:
        Weights of the shape of ``scores``; zero at masked positions; each row sums to one,
        except rows where every position is masked, which are all zero.
    """
    _check_mask(mask, scores)
    if mask is None:
        return torch.softmax(scores, dim=dim)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=dim)
    # A fully masked row is softmax(-inf, ..., -inf) = NaN; make it zero.
    return weights.masked_fill(~mask, 0.0).nan_to_num(0.0)


def causal_mask(L_q: int, L_k: int | None = None, device=None) -> torch.Tensor:
    """Boolean ``(L_q, L_k)`` mask letting query i attend to keys j <= i + (L_k - L_q).

    With ``L_k == L_q`` (the default) this is the lower triangle: position i sees itself
    and the past. When ``L_k > L_q`` the queries are the *last* ``L_q`` positions of the
    keys' sequence (as when decoding with a cache), so they see the whole earlier context;
    this matches ``torch.ones(L_q, L_k).tril(L_k - L_q)``.
    """
    L_k = L_q if L_k is None else L_k
    if L_q < 0 or L_k < 0:
        raise ValueError(f"lengths must be >= 0, got L_q={L_q}, L_k={L_k}")
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril(L_k - L_q)


def padding_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """Boolean ``(batch, 1, max_len)`` key mask, True at the first ``lengths[b]`` positions.

    The middle axis broadcasts over queries: ``scores (batch, L_q, L_k)`` take it as is,
    ``(batch, heads, L_q, L_k)`` after ``.unsqueeze(1)``.
    """
    max_len = int(lengths.max()) if max_len is None else max_len
    return (torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]).unsqueeze(1)


def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(q k^T / sqrt(d_k)) v`` with an optional boolean mask.

    Args:
        q: ``(..., L_q, d_k)``; k: ``(..., L_k, d_k)``; v: ``(..., L_k, d_v)``.
        mask: bool, broadcastable to ``(..., L_q, L_k)``; True = may attend.
    Returns:
        ``(output (..., L_q, d_v), weights (..., L_q, L_k))``. The output equals
        ``torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)``.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() < 2:
            raise ValueError(f"{name} must be a tensor of shape (..., seq, dim), got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share their last dimension d_k: q {tuple(q.shape)}, k {tuple(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of keys L_k: k {tuple(k.shape)}, v {tuple(v.shape)}")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = masked_softmax(scores, mask)
    return weights @ v, weights
