"""Scaled dot-product attention: scores, masked softmax, masks (chapter 3).

Mask convention (PyTorch's, for ``F.scaled_dot_product_attention``): a boolean mask is
True where a query **may attend** to a key. Masked scores are set to ``-inf`` (not to a
large negative number such as -1e9, which leaks weight when a whole row is masked, swallows
the scores in float32 arithmetic and depends on the dtype), and a row in which every key is
masked gets all-zero weights (so its output is zero, as in PyTorch) instead of NaN.

Shapes: queries ``(..., L_q, d_k)``, keys ``(..., L_k, d_k)``, values ``(..., L_k, d_v)``,
masks broadcastable to ``(..., L_q, L_k)``; ``...`` is e.g. ``(batch,)`` or
``(batch, heads)``. Chapter 3 of the course derives all of it, and two uses of it:

* **cross-attention** (:func:`cross_attention`): queries from one sequence, keys and values from
  another, through projection matrices;
* **sliding-window attention**: query ``i`` sees only keys ``j`` with ``|i - j| <= radius``
  (Beltagy et al. 2020, "Longformer"; the "restricted self-attention" of Vaswani et al. 2017,
  Table 1). A window mask (:func:`sliding_window_mask`) gives the right result but still computes
  all ``L_q x L_k`` scores; :func:`sliding_window_attention` computes only the ``2 * radius + 1``
  scores of each query's window, so its time and memory grow linearly with the length.

Several heads, grouped key/value heads and the module built from them are
:mod:`course_utils.multihead`; the key/value cache is :mod:`course_utils.kvcache`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ._validate import check_int

__all__ = [
    "attention_scores", "causal_mask", "combine_masks", "cross_attention", "key_padding_mask", "masked_softmax",
    "padded_self_attention", "padding_mask", "prefix_lm_mask", "scaled_dot_product_attention", "sliding_window_attention",
    "sliding_window_mask",
]


def _shape(t) -> str:
    return str(tuple(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__


def _broadcast(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """The shape that ``shapes`` broadcast to, or None where they do not (``torch.broadcast_shapes``'
    rules, without its cost: every attention call checks its mask)."""
    out = [1] * max(len(s) for s in shapes)
    for s in shapes:
        for i, n in enumerate(s, len(out) - len(s)):
            if n != 1:
                if out[i] not in (1, n):
                    return None
                out[i] = n
    return tuple(out)


def _broadcasts_to(t: torch.Tensor, shape: torch.Size) -> bool:
    """True when ``t`` broadcasts to exactly ``shape`` (not to something larger)."""
    return _broadcast(t.shape, shape) == tuple(shape)


def _check_mask(mask: torch.Tensor | None, scores: torch.Tensor) -> None:
    """Fail unless ``mask`` is None or a bool tensor that broadcasts to ``scores``' shape."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"mask must be a bool tensor (True = may attend), got {got}; "
                        "convert a 0/1 mask with mask.bool() (or mask == 1)")
    if not _broadcasts_to(mask, scores.shape):
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' "
                         f"shape {tuple(scores.shape)} (..., L_q, L_k); a padding mask for "
                         "(batch, heads, L_q, L_k) scores needs shape (batch, 1, 1, L_k)")


def _check_qk(q: torch.Tensor, k: torch.Tensor) -> None:
    for name, t in (("q", q), ("k", k)):
        if not isinstance(t, torch.Tensor) or t.dim() < 2:
            raise ValueError(f"{name} must be a tensor of shape (..., seq, d_k), got {_shape(t)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share their last dimension d_k: q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}")
    if q.dtype != k.dtype:
        raise TypeError(f"q and k must have the same dtype, got {q.dtype} and {k.dtype}")
    if _broadcast(q.shape[:-2], k.shape[:-2]) is None:
        raise ValueError(f"the leading (batch, heads) dimensions of q {tuple(q.shape)} and "
                         f"k {tuple(k.shape)} do not broadcast")


def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Scaled scores ``q k^T / sqrt(d_k)``.

    Args:
        q: ``(..., L_q, d_k)`` queries; k: ``(..., L_k, d_k)`` keys.
    Returns:
        ``(..., L_q, L_k)``: entry ``[..., i, j]`` is ``q_i . k_j / sqrt(d_k)``.
    """
    _check_qk(q, k)
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None, dim: int = -1) -> torch.Tensor:
    """Softmax of ``scores`` over ``dim`` where only positions with ``mask`` True take part.

    Args:
        scores: ``(..., L_q, L_k)`` real scores.
        mask: bool, broadcastable to ``scores``; True = may attend. ``None``: no mask.
    Returns:
        Weights of the shape of ``scores``; zero at masked positions; each row sums to one,
        except rows where every position is masked, which are all zero (no NaN, in the
        forward pass nor in the gradient).
    """
    if not isinstance(scores, torch.Tensor) or not scores.is_floating_point():
        raise TypeError(f"scores must be a floating-point tensor, got "
                        f"{scores.dtype if isinstance(scores, torch.Tensor) else type(scores).__name__}")
    _check_mask(mask, scores)
    if mask is None:
        return torch.softmax(scores, dim=dim)
    # A row whose every key is masked would be softmax(-inf, ..., -inf) = 0/0 = NaN. Such rows
    # are filled with zeros before the softmax (so no NaN appears, not even in the backward
    # pass) and their weights are set to zero afterwards.
    row_ok = mask.any(dim=dim, keepdim=True)
    filled = scores.masked_fill(~mask, float("-inf")).masked_fill(~row_ok, 0.0)
    return torch.softmax(filled, dim=dim).masked_fill(~row_ok, 0.0)


def causal_mask(L_q: int, L_k: int | None = None, device=None) -> torch.Tensor:
    """Boolean ``(L_q, L_k)`` mask letting query i attend to keys j <= i + (L_k - L_q).

    With ``L_k == L_q`` (the default) this is the lower triangle: position i sees itself
    and the past. When ``L_k > L_q`` the queries are the *last* ``L_q`` positions of the
    keys' sequence (as when decoding with a cache), so they see the whole earlier context;
    when ``L_k < L_q`` the first ``L_q - L_k`` queries see nothing. This equals
    ``torch.ones(L_q, L_k).tril(L_k - L_q).bool()`` and PyTorch's
    ``torch.nn.attention.bias.causal_lower_right(L_q, L_k)``; note that
    ``F.scaled_dot_product_attention(..., is_causal=True)`` aligns the triangle to the top
    left instead (``tril(0)``), which differs when ``L_q != L_k``.
    """
    L_k = L_q if L_k is None else L_k
    for name, n in (("L_q", L_q), ("L_k", L_k)):
        check_int(n, name)
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril(L_k - L_q)


def padding_mask(lengths: torch.Tensor | Sequence[int], max_len: int | None = None) -> torch.Tensor:
    """Boolean ``(batch, 1, max_len)`` key mask, True at the first ``lengths[b]`` positions.

    Args:
        lengths: ``(batch,)`` integer tensor (or list) of true sequence lengths.
        max_len: the padded length ``L_k`` (default: ``max(lengths)``).

    The middle axis broadcasts over queries: ``scores (batch, L_q, L_k)`` take it as is; for
    ``(batch, heads, L_q, L_k)`` scores use :func:`key_padding_mask`.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be a 1-D integer tensor (batch,), got dtype {lengths.dtype} "
                         f"and shape {tuple(lengths.shape)}")
    if len(lengths) and int(lengths.min()) < 0:
        raise ValueError(f"lengths must be >= 0, got {lengths.tolist()}")
    longest = int(lengths.max()) if len(lengths) else 0
    max_len = longest if max_len is None else max_len
    if max_len < longest:
        raise ValueError(f"max_len={max_len} is shorter than the longest sequence ({longest})")
    return (torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]).unsqueeze(1)


def key_padding_mask(lengths: torch.Tensor | Sequence[int], max_len: int | None = None) -> torch.Tensor:
    """:func:`padding_mask` with a heads axis: boolean ``(batch, 1, 1, max_len)``, ready for
    multi-head scores ``(batch, heads, L_q, L_k)`` (both middle axes broadcast)."""
    return padding_mask(lengths, max_len).unsqueeze(1)


def prefix_lm_mask(L: int, prefix_len: int | torch.Tensor, device=None) -> torch.Tensor:
    """Prefix-LM mask: query i may attend to key j when ``j < prefix_len`` (the prefix is seen
    whole, bidirectionally) or ``j <= i`` (causal after it).

    ``prefix_len`` an int gives ``(L, L)``; a ``(batch,)`` tensor gives ``(batch, 1, L, L)``, one
    prefix length per sequence. ``prefix_len = 0`` is :func:`causal_mask`, ``prefix_len = L``
    :func:`course_utils.families.bidirectional_mask` (the pattern of T5's prefix LM and UniLM, chapter 7).
    """
    check_int(L, "L")
    if isinstance(prefix_len, torch.Tensor):
        if prefix_len.dim() != 1 or prefix_len.is_floating_point() or prefix_len.dtype == torch.bool:
            raise ValueError(f"prefix_len must be an int or a (batch,) integer tensor, got dtype "
                             f"{prefix_len.dtype} and shape {tuple(prefix_len.shape)}")
        if len(prefix_len) and not (0 <= int(prefix_len.min()) and int(prefix_len.max()) <= L):
            raise ValueError(f"prefix lengths must lie in [0, L={L}], got {prefix_len.tolist()}")
        device = prefix_len.device if device is None else device
        keys = torch.arange(L, device=device)
        in_prefix = keys[None, :] < prefix_len.to(device)[:, None]            # (batch, L) over keys
        return (in_prefix[:, None, :] | causal_mask(L, device=device)).unsqueeze(1)   # (batch, 1, L, L)
    check_int(prefix_len, "prefix_len", 0, L, f"L = {L}; or give a (batch,) tensor")
    in_prefix = torch.arange(L, device=device) < prefix_len                    # (L,) over keys
    return in_prefix[None, :] | causal_mask(L, device=device)


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Combine boolean masks: a query may attend to a key only where *every* mask allows it.

    ``None`` entries are skipped; the others are broadcast together (e.g. a padding mask
    ``(batch, 1, L_k)`` and a causal mask ``(L_q, L_k)`` give ``(batch, L_q, L_k)``).
    Returns ``None`` when every mask is ``None``.
    """
    out = None
    for i, m in enumerate(masks):
        if m is None:
            continue
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool:
            raise TypeError(f"mask {i} must be a bool tensor (True = may attend), got "
                            f"{m.dtype if isinstance(m, torch.Tensor) else type(m).__name__}")
        if out is None:
            out = m
            continue
        if _broadcast(out.shape, m.shape) is None:
            raise ValueError(f"mask {i} of shape {tuple(m.shape)} does not broadcast with the "
                             f"masks before it, of shape {tuple(out.shape)}")
        out = out & m
    return out


def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 mask: torch.Tensor | None = None,
                                 attn_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(q k^T / sqrt(d_k) + attn_bias) v`` with an optional boolean mask.

    Args:
        q: ``(..., L_q, d_k)``; k: ``(..., L_k, d_k)``; v: ``(..., L_k, d_v)``; the leading
            dimensions (e.g. ``(batch, heads)``) broadcast.
        mask: bool, broadcastable to ``(..., L_q, L_k)``; True = may attend.
        attn_bias: float, broadcastable to ``(..., L_q, L_k)``, added to the scaled scores before
            the mask (relative-position scores, for example). ``None``: no bias.
    Returns:
        ``(output (..., L_q, d_v), weights (..., L_q, L_k))``. The output equals
        ``torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)``,
        including a zero output for a query whose every key is masked.
    """
    _check_qk(q, k)
    if not isinstance(v, torch.Tensor) or v.dim() < 2:
        raise ValueError(f"v must be a tensor of shape (..., L_k, d_v), got {_shape(v)}")
    if v.dtype != q.dtype:
        raise TypeError(f"v must have the dtype of q and k ({q.dtype}), got {v.dtype}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of keys L_k: k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}")
    scores = attention_scores(q, k)
    if attn_bias is not None:
        _check_bias(attn_bias, scores)
        scores = scores + attn_bias
    weights = masked_softmax(scores, mask)
    return weights @ v, weights


def _check_bias(bias, scores: torch.Tensor) -> None:
    if not isinstance(bias, torch.Tensor) or not bias.is_floating_point():
        got = bias.dtype if isinstance(bias, torch.Tensor) else type(bias).__name__
        raise TypeError(f"attn_bias must be a floating-point tensor added to the scores, got {got} "
                        "(a boolean tensor is a mask: pass it as mask=)")
    if not _broadcasts_to(bias, scores.shape):
        raise ValueError(f"attn_bias of shape {tuple(bias.shape)} does not broadcast to the scores' "
                         f"shape {tuple(scores.shape)} (..., L_q, L_k)")


# --- two uses: cross-attention and the sliding window ------------------------------------------

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
    mask = None if enc_lengths is None else padding_mask(enc_lengths, x_enc.shape[1])
    return scaled_dot_product_attention(x_dec @ W_q, x_enc @ W_k, x_enc @ W_v, mask)


def padded_self_attention(x: torch.Tensor, lengths: torch.Tensor, W_q: torch.Tensor, W_k: torch.Tensor,
                          W_v: torch.Tensor, W_o: torch.Tensor, causal: bool = False
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Single-head self-attention over a right-padded batch (chapter 3's exercise 7).

    Args:
        x: ``(batch, L, d_model)``, float; position ``i`` of sequence ``b`` is real when
            ``i < lengths[b]``, padding otherwise (any numbers, inf and NaN included).
        lengths: ``(batch,)`` integer tensor, each length between 0 and ``L``.
        W_q, W_k: ``(d_model, d_k)``; W_v: ``(d_model, d_v)``; W_o: ``(d_v, d_model)``; applied on
            the right (``x @ W_q``), no biases, all of ``x``'s dtype.
        causal: when True, query ``i`` sees keys ``j <= i`` only.
    Returns:
        ``(out (batch, L, d_model), weights (batch, L, L))``. A real query attends to the real keys
        (scale ``1/sqrt(d_k)``); a padded query attends to nothing: its row of weights and its
        output are zero. At the real positions ``out`` equals ``nn.MultiheadAttention`` (one head,
        no biases, the same weights) with ``key_padding_mask``.
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or not x.is_floating_point():
        raise ValueError(f"x must be a floating-point tensor (batch, L, d_model), got {_shape(x)}")
    batch, L, d_model = x.shape
    if (not isinstance(lengths, torch.Tensor) or tuple(lengths.shape) != (batch,)
            or lengths.is_floating_point() or lengths.dtype == torch.bool):
        raise ValueError(f"lengths must be an integer tensor of shape ({batch},), one length per sequence, "
                         f"got {_shape(lengths)}")
    if bool((lengths < 0).any()) or bool((lengths > L).any()):
        raise ValueError(f"lengths must lie between 0 and L = {L}, got {lengths.tolist()}")
    d_k, d_v = W_q.shape[-1], W_v.shape[-1]
    for name, w, shape in (("W_q", W_q, (d_model, d_k)), ("W_k", W_k, (d_model, d_k)),
                           ("W_v", W_v, (d_model, d_v)), ("W_o", W_o, (d_v, d_model))):
        if tuple(w.shape) != shape or w.dtype != x.dtype:
            raise ValueError(f"{name} must be a {x.dtype} tensor of shape {shape}, got {_shape(w)} of {w.dtype}")
    real = torch.arange(L, device=x.device) < lengths.to(x.device)[:, None]          # (batch, L)
    mask = real[:, :, None] & real[:, None, :]                                         # (batch, L_q, L_k)
    if causal:
        mask = mask & causal_mask(L, device=x.device)
    v = (x @ W_v).masked_fill(~real[:, :, None], 0.0)       # a weight of 0 times a NaN of the padding is NaN
    out, weights = scaled_dot_product_attention(x @ W_q, x @ W_k, v, mask)
    return out @ W_o, weights


def _check_radius(radius: int) -> None:
    check_int(radius, "radius")


def sliding_window_mask(L: int, radius: int, device=None) -> torch.Tensor:
    """Boolean ``(L, L)`` mask, True where ``|i - j| <= radius`` (True = may attend).

    Combine it with :func:`causal_mask` for a causal window.
    """
    _check_radius(radius)
    i = torch.arange(L, device=device)
    return (i[:, None] - i[None, :]).abs() <= radius


def sliding_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, radius: int
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Self-attention of each position to its ``2 * radius + 1`` neighbours, computed banded.

    Equal to ``scaled_dot_product_attention(q, k, v, sliding_window_mask(L, radius))``
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
    weights = masked_softmax(scores, inside)
    out = weights[..., 0, None] * v_pad[..., :L, :]
    for m in range(1, w):
        out = out + weights[..., m, None] * v_pad[..., m:m + L, :]      # (..., L, d_v)
    return out, weights
