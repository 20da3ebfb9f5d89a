"""Attention: scores, masked softmax, masks and scaled dot-product attention.

Mask convention (PyTorch's, for ``F.scaled_dot_product_attention``): a boolean mask is
True where a query **may attend** to a key. Masked scores are set to ``-inf`` (not to a
large negative number such as -1e9, which leaks weight when a whole row is masked, swallows
the scores in float32 arithmetic and depends on the dtype), and a row in which every key is
masked gets all-zero weights (so its output is zero, as in PyTorch) instead of NaN.

Multi-head, multi-query and grouped-query attention (chapter 4) are one module,
:class:`MultiHeadAttention`, with ``n_kv_heads`` key/value heads shared by groups of query
heads, and an optional :class:`KVCache` for decoding one token at a time.

Shapes: queries ``(..., L_q, d_k)``, keys ``(..., L_k, d_k)``, values ``(..., L_k, d_v)``,
masks broadcastable to ``(..., L_q, L_k)``; ``...`` is e.g. ``(batch,)`` or
``(batch, heads)``. Chapter 3 of the course derives all of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .positional import apply_rope_half

__all__ = [
    "KVCache", "MultiHeadAttention", "OneHeadSelfAttention", "attention_scores", "cached_attention", "causal_mask",
    "combine_masks", "convert_to_gqa", "grouped_sdpa", "kv_cache_bytes", "masked_softmax",
    "mean_pool_kv_heads", "merge_heads", "padding_mask", "repeat_kv", "scaled_dot_product_attention",
    "split_heads",
]


def _shape(t) -> str:
    return str(tuple(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__


def _broadcasts_to(t: torch.Tensor, shape: torch.Size) -> bool:
    """True when ``t`` broadcasts to exactly ``shape`` (not to something larger)."""
    try:
        return torch.broadcast_shapes(t.shape, shape) == shape
    except RuntimeError:
        return False


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
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the leading (batch, heads) dimensions of q {tuple(q.shape)} and "
                         f"k {tuple(k.shape)} do not broadcast") from None


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
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"{name} must be an int >= 0, got {n!r}")
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril(L_k - L_q)


def padding_mask(lengths: torch.Tensor | Sequence[int], max_len: int | None = None) -> torch.Tensor:
    """Boolean ``(batch, 1, max_len)`` key mask, True at the first ``lengths[b]`` positions.

    Args:
        lengths: ``(batch,)`` integer tensor (or list) of true sequence lengths.
        max_len: the padded length ``L_k`` (default: ``max(lengths)``).

    The middle axis broadcasts over queries: ``scores (batch, L_q, L_k)`` take it as is,
    ``(batch, heads, L_q, L_k)`` after ``.unsqueeze(1)``.
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
        try:
            torch.broadcast_shapes(out.shape, m.shape)
        except RuntimeError:
            raise ValueError(f"mask {i} of shape {tuple(m.shape)} does not broadcast with the "
                             f"masks before it, of shape {tuple(out.shape)}") from None
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


# --------------------------------------------------------------------------------------------
# Multi-head attention (chapter 4)
# --------------------------------------------------------------------------------------------

def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``(batch, L, n_heads * d_head)`` -> ``(batch, n_heads, L, d_head)``.

    Feature ``h * d_head + j`` of a position becomes feature ``j`` of head ``h``.
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError(f"split_heads expects (batch, L, n_heads * d_head), got {_shape(x)}")
    b, L, d = x.shape
    if d % n_heads:
        raise ValueError(f"the last dimension ({d}) is not divisible by n_heads={n_heads}")
    return x.view(b, L, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(batch, n_heads, L, d_head)`` -> ``(batch, L, n_heads * d_head)``; undoes :func:`split_heads`."""
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"merge_heads expects (batch, n_heads, L, d_head), got {_shape(x)}")
    b, h, L, d = x.shape
    return x.transpose(1, 2).reshape(b, L, h * d)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """``(batch, n_kv_heads, T, d_head)`` -> ``(batch, n_kv_heads * n_rep, T, d_head)``.

    Each key/value head is repeated ``n_rep`` times *consecutively*, so query head ``i`` reads
    key/value head ``i // n_rep`` (as ``F.scaled_dot_product_attention(..., enable_gqa=True)``
    and Hugging Face's Llama do). Repeating the whole stack instead (``x.repeat(1, n_rep, 1, 1)``)
    would pair query head ``i`` with key/value head ``i % n_kv_heads``: another model.
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"repeat_kv expects (batch, n_kv_heads, T, d_head), got {_shape(x)}")
    if n_rep == 1:
        return x
    return x.repeat_interleave(n_rep, dim=1)


def grouped_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                 dropout_p: float = 0.0) -> torch.Tensor:
    """Fused attention of ``n_heads`` query heads over ``n_kv_heads`` key/value heads.

    Args:
        q: ``(batch, n_heads, L_q, d_head)``; k, v: ``(batch, n_kv_heads, L_k, d_head)``.
        mask: bool, True = may attend, broadcastable to ``(batch, n_heads, L_q, L_k)``.
    Returns:
        ``(batch, n_heads, L_q, d_head)``, equal to ``F.scaled_dot_product_attention(q,
        repeat_kv(k, r), repeat_kv(v, r), attn_mask=mask)`` with ``r = n_heads // n_kv_heads``.

    The keys and values are never repeated: the ``r`` query heads of a group are folded into
    the query-length axis, ``(batch, n_kv_heads, r * L_q, d_head)``, so each key/value head is
    read from memory once per step, which is where MQA and GQA save time when decoding.
    """
    b, h, L_q, d = q.shape
    g, L_k = k.shape[1], k.shape[2]
    r = h // g
    if r == 1:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    q = q.reshape(b, g, r * L_q, d)                    # heads of group j are j*r .. j*r + r - 1
    if mask is not None:
        mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
        mb, mh, mq = mask.shape[:3]
        if mh != 1:                                    # one mask per head: fold it like the queries
            mask = mask.expand(mb, h, L_q, L_k).reshape(mb, g, r * L_q, L_k)
        elif mq != 1:                                  # one mask for all heads: folded row i*L_q + t is row t
            mask = mask.expand(mb, 1, L_q, L_k).repeat(1, 1, r, 1)
        # a mask that is the same for every head is never copied per head (a causal mask stays L x L)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    return out.view(b, h, L_q, d)


class KVCache:
    """The keys and values of the positions decoded so far, for one attention layer.

    ``k`` and ``v`` are ``None`` while the cache is empty, then ``(batch, n_kv_heads, T,
    d_head)``: the *un-repeated* key/value heads (for GQA/MQA that is ``n_heads / n_kv_heads``
    times less memory than the repeated ones). :class:`MultiHeadAttention` appends to it in
    self-attention; in cross-attention it fills an empty cache once from the source and marks
    it ``static``, and afterwards reuses those keys and values without recomputing them.

    Storage is preallocated, as in Llama's reference code: the keys and values live in buffers
    ``(batch, n_kv_heads, capacity, d_head)``, an append writes only the new positions into them,
    and ``k``/``v`` are views of the first ``T`` positions. ``max_len`` sets the capacity of the
    first allocation (the longest sequence the cache will hold, prompt included); without it, or
    when a sequence outgrows it, the capacity doubles, so that ``T`` appends cost O(T) copies in
    all instead of the O(T^2) of concatenating the whole cache at every step. While autograd
    records (a step that needs gradients), appends concatenate instead: writing in place into a
    buffer that earlier steps saved for the backward pass would break it.
    """

    def __init__(self, k: torch.Tensor | None = None, v: torch.Tensor | None = None,
                 static: bool = False, max_len: int | None = None):
        if (k is None) != (v is None):
            raise ValueError("give both k and v, or neither")
        if max_len is not None and max_len < 1:
            raise ValueError(f"max_len must be a positive number of positions, got {max_len}")
        if k is not None and (k.dim() != 4 or k.shape[:3] != v.shape[:3]):
            raise ValueError(f"k and v must have shape (batch, n_kv_heads, T, d_head), "
                             f"got {tuple(k.shape)} and {tuple(v.shape)}")
        self.max_len = max_len
        # buffers (batch, n_kv_heads, capacity, d_head) and the positions filled; given k and v
        # are taken as they are (full buffers, no copy)
        self._k, self._v = k, v
        self._len = 0 if k is None else k.shape[2]
        self.static = static  # True once filled by cross-attention: reused, never appended to

    @property
    def k(self) -> torch.Tensor | None:
        """The cached keys ``(batch, n_kv_heads, T, d_head)``, or None while empty."""
        return None if self._k is None else self._k[:, :, :self._len]

    @property
    def v(self) -> torch.Tensor | None:
        """The cached values ``(batch, n_kv_heads, T, d_head)``, or None while empty."""
        return None if self._v is None else self._v[:, :, :self._len]

    @property
    def capacity(self) -> int:
        """Positions the buffers can hold before they are reallocated."""
        return 0 if self._k is None else self._k.shape[2]

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        shape = None if self._k is None else tuple(self.k.shape)
        return f"KVCache(k={shape})"

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add ``k``, ``v`` ``(batch, n_kv_heads, T_new, d_head)``; return everything cached."""
        if k.dim() != 4 or k.shape != v.shape[:3] + k.shape[3:] or k.shape[:3] != v.shape[:3]:
            raise ValueError(f"append expects k and v of shape (batch, n_kv_heads, T_new, d_head), "
                             f"got {tuple(k.shape)} and {tuple(v.shape)}")
        if self._k is not None and (k.shape[:2] != self._k.shape[:2] or k.shape[3] != self._k.shape[3]
                                    or v.shape[3] != self._v.shape[3]):
            raise ValueError(f"cannot append keys of shape {tuple(k.shape)} to a cache of shape "
                             f"{tuple(self.k.shape)}: batch, heads and d_head must agree")
        new_len = self._len + k.shape[2]
        if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad):
            # recording for backward: no in-place writes into tensors earlier steps saved
            self._k = k if self._k is None else torch.cat([self.k, k], dim=2)
            self._v = v if self._v is None else torch.cat([self.v, v], dim=2)
        elif self._k is None or new_len > self.capacity:
            wanted = max(new_len, self.max_len or 0, 2 * self.capacity if self._k is not None else 0)
            self._k = self._grow(self._k, k, wanted)
            self._v = self._grow(self._v, v, wanted)
        else:
            self._k[:, :, self._len:new_len] = k
            self._v[:, :, self._len:new_len] = v
        self._len = new_len
        return self.k, self.v

    def _grow(self, buf: torch.Tensor | None, new: torch.Tensor, capacity: int) -> torch.Tensor:
        """A buffer of ``capacity`` positions holding the cached ``buf[:, :, :T]`` and then ``new``."""
        b, g, t_new, d = new.shape
        out = new.new_empty((b, g, capacity, d), dtype=new.dtype if buf is None else buf.dtype)
        if buf is not None:
            out[:, :, :self._len] = buf[:, :, :self._len]
        out[:, :, self._len:self._len + t_new] = new
        return out

    def crop(self, length: int) -> KVCache:
        """Keep the first ``length`` positions and forget the rest; return the cache itself.

        The capacity is kept, so the next append writes into the same buffers. Views of the
        cache taken before (``k``, ``v``, what ``append`` returned) share those buffers: after a
        crop and a new append their positions past ``length`` hold the new keys and values.
        """
        if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= self._len:
            raise ValueError(f"crop keeps 0 to {self._len} positions (the cache holds {self._len}), "
                             f"got {length!r}")
        self._len = length
        return self

    def reorder(self, index: torch.Tensor) -> KVCache:
        """A new cache holding batch rows ``index`` (beam search reorders its hypotheses)."""
        if self._k is None:
            return KVCache(static=self.static, max_len=self.max_len)
        index = index.to(self._k.device)
        return KVCache(self.k.index_select(0, index), self.v.index_select(0, index), self.static,
                       max_len=self.max_len)

    def nbytes(self) -> int:
        """Bytes held by the cached keys and values (the ``T`` positions filled, not the capacity)."""
        return 0 if self._k is None else self.k.nbytes + self.v.nbytes


class MultiHeadAttention(nn.Module):
    """Multi-head attention with ``n_kv_heads`` key/value heads: MHA, GQA and MQA in one module.

    ``n_kv_heads = n_heads`` (the default) is multi-head attention (Vaswani et al. 2017),
    ``n_kv_heads = 1`` multi-query attention (Shazeer 2019), a divisor in between grouped-query
    attention (Ainslie et al. 2023): query head ``i`` uses key/value head
    ``i // (n_heads // n_kv_heads)``.

    Sub-modules: ``q_proj`` (d_model -> d_model), ``k_proj`` and ``v_proj``
    (d_model -> n_kv_heads * d_head), ``out_proj`` (d_model -> d_model), all ``nn.Linear``.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None, bias: bool = True,
                 dropout: float = 0.0, rope: bool = False, rope_base: float = 10000.0):
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        for name, n in (("d_model", d_model), ("n_heads", n_heads), ("n_kv_heads", n_kv_heads)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"{name} must be a positive int, got {n!r}")
        if d_model % n_heads:
            raise ValueError(f"n_heads={n_heads} does not divide d_model={d_model}: each head gets "
                             "d_model / n_heads features")
        if n_heads % n_kv_heads:
            raise ValueError(f"n_kv_heads={n_kv_heads} does not divide n_heads={n_heads}: each "
                             "key/value head serves an equal group of query heads")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        if rope and self.d_head % 2:
            raise ValueError(f"RoPE rotates pairs of features: d_head = {self.d_head} must be even")
        self.rope, self.rope_base = rope, rope_base
        # the rotation RoPE uses, rotate(x (batch, heads, seq, d_head), offset, base); None is
        # positional.apply_rope_half (chapter 8 plugs in the learner's version and the other layout)
        self.rotate = None

    def extra_repr(self) -> str:
        rope = f", rope=True, rope_base={self.rope_base:g}" if self.rope else ""
        return f"d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}{rope}"

    def _check_input(self, t, name: str) -> None:
        if not isinstance(t, torch.Tensor) or t.dim() != 3 or t.shape[-1] != self.d_model:
            raise ValueError(f"{name} must have shape (batch, seq, d_model={self.d_model}), "
                             f"got {_shape(t)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, cache: KVCache | None = None,
                need_weights: bool = False, causal: bool = False,
                attn_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``x`` to itself (``context`` None) or to ``context``.

        Args:
            x: ``(batch, L_q, d_model)`` queries' inputs.
            context: ``(batch, L_src, d_model)`` for cross-attention, or None.
            mask: bool, True = may attend, broadcastable to ``(batch, n_heads, L_q, L_k)``
                (``L_k`` counts cached positions too); a padding mask from
                :func:`padding_mask` needs ``.unsqueeze(1)``.
            cache: a :class:`KVCache`. Self-attention: the new keys/values are appended and
                the queries attend over everything cached. Cross-attention: an empty cache is
                filled from ``context`` (and marked ``static``); a static cache is reused as it
                is, so ``context`` may then be None. The cache is updated in place: after the
                call it holds the new positions too, so feed each position once (a caller that
                needs the state before the step keeps ``len(cache)`` and calls
                :meth:`KVCache.crop`, or decodes from a :meth:`KVCache.reorder` copy).
            need_weights: also return the attention weights (uses the explicit computation;
                otherwise PyTorch's fused kernel).
            causal: also apply :func:`causal_mask` ``(L_q, L_k)``, aligned bottom-right so that
                the new queries are the last ``L_q`` positions of the keys' sequence.
            attn_bias: float, broadcastable to ``(batch, n_heads, L_q, L_k)``, added to the scaled
                scores.
        With ``rope=True`` (self-attention only), the queries and keys are rotated by their
        positions after the projections (:func:`course_utils.positional.apply_rope_half`); with a
        cache, the new positions start at ``len(cache)``, and the cache holds rotated keys.

        Returns:
            ``(out (batch, L_q, d_model), weights (batch, n_heads, L_q, L_k) or None)``.
        """
        self._check_input(x, "x")
        if self.rope and (context is not None or (cache is not None and cache.static)):
            raise ValueError("RoPE rotates queries and keys by their positions in one sequence: "
                             "this attention (rope=True) is for self-attention, not cross-attention")
        if context is not None:
            self._check_input(context, "context")
            if context.shape[0] != x.shape[0]:
                raise ValueError(f"x and context must have the same batch size, got "
                                 f"{x.shape[0]} and {context.shape[0]}")
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache, got {type(cache).__name__}")
        if cache is not None and len(cache) and cache.k.shape[0] != x.shape[0]:
            raise ValueError(f"the cache holds a batch of {cache.k.shape[0]}, x a batch of {x.shape[0]}")
        q = split_heads(self.q_proj(x), self.n_heads)                     # (B, H, L_q, dh)
        if cache is not None and cache.static:
            k, v = cache.k, cache.v                  # cross-attention: the source's K/V, computed once
        else:
            source = x if context is None else context
            k = split_heads(self.k_proj(source), self.n_kv_heads)         # (B, G, L, dh)
            v = split_heads(self.v_proj(source), self.n_kv_heads)
            if self.rope:
                offset = 0 if cache is None else len(cache)               # positions after the cached ones
                rotate = self.rotate or apply_rope_half
                q, k = rotate(q, offset, self.rope_base), rotate(k, offset, self.rope_base)
            if cache is not None:
                if context is not None:
                    if len(cache):
                        raise ValueError("cross-attention needs an empty KVCache to fill (or one "
                                         "it filled before); this one holds self-attention keys")
                    cache.static = True
                k, v = cache.append(k, v)
        L_q, L_k = q.shape[2], k.shape[2]
        if causal:
            mask = combine_masks(mask, causal_mask(L_q, L_k, device=x.device))
        if mask is not None:
            _check_mask(mask, torch.empty(x.shape[0], self.n_heads, L_q, L_k, device="meta"))
        n_rep = self.n_heads // self.n_kv_heads
        p = self.dropout if self.training else 0.0
        if need_weights or attn_bias is not None:
            k_r, v_r = repeat_kv(k, n_rep), repeat_kv(v, n_rep)           # (B, H, L_k, dh)
            scores = attention_scores(q, k_r)
            if attn_bias is not None:
                _check_bias(attn_bias, scores)
                scores = scores + attn_bias
            weights = masked_softmax(scores, mask)
            out = F.dropout(weights, p) @ v_r if p else weights @ v_r
        else:
            weights = None
            out = grouped_sdpa(q, k, v, mask, dropout_p=p)
        out = self.out_proj(merge_heads(out))
        return out, (weights if need_weights else None)


def cached_attention(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
                     cache: tuple[torch.Tensor, torch.Tensor] | None = None
                     ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One decoding step (or a prefill) of causal attention over a key/value cache.

    Args:
        q: ``(batch, n_heads, L_new, d_head)``, the queries of the ``L_new`` new positions.
        k_new, v_new: ``(batch, n_kv_heads, L_new, d_head)``, their keys and values.
        cache: ``(k, v)`` of shape ``(batch, n_kv_heads, T, d_head)`` for the ``T`` positions
            before them, or None (nothing cached yet).
    Returns:
        ``(out (batch, n_heads, L_new, d_head), (k, v))`` where ``k, v`` are the cache with the
        new positions appended: ``(batch, n_kv_heads, T + L_new, d_head)``, un-repeated.

    The new queries are the *last* ``L_new`` of the ``T + L_new`` positions, so the causal mask
    is :func:`causal_mask` ``(L_new, T + L_new)``, aligned bottom-right.
    """
    if cache is not None:
        k_new = torch.cat([cache[0], k_new], dim=2)
        v_new = torch.cat([cache[1], v_new], dim=2)
    n_rep = q.shape[1] // k_new.shape[1]
    mask = causal_mask(q.shape[2], k_new.shape[2], device=q.device)
    out, _ = scaled_dot_product_attention(q, repeat_kv(k_new, n_rep), repeat_kv(v_new, n_rep), mask)
    return out, (k_new, v_new)


def kv_cache_bytes(n_layers: int, n_kv_heads: int, d_head: int, seq_len: int, batch: int = 1,
                   bytes_per_value: int = 2) -> int:
    """Bytes of the key/value cache: ``2 (K and V) * layers * kv heads * d_head * tokens * batch
    * bytes per value`` (2 for float16/bfloat16, 4 for float32)."""
    return 2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_value


def mean_pool_kv_heads(weight: torch.Tensor, n_heads: int, n_groups: int) -> torch.Tensor:
    """Mean-pool the per-head rows of a key or value projection into ``n_groups`` heads.

    Args:
        weight: ``(n_heads * d_head, d_model)`` (an ``nn.Linear`` weight) or
            ``(n_heads * d_head,)`` (its bias); rows ``h * d_head .. (h + 1) * d_head - 1``
            belong to head ``h``.
        n_groups: the number of key/value heads to keep; it divides ``n_heads``.
    Returns:
        ``(n_groups * d_head, ...)``: group ``j`` is the mean of heads ``j*r .. j*r + r - 1``
        with ``r = n_heads // n_groups`` (the consecutive grouping of :func:`repeat_kv`), as in
        Ainslie et al. (2023).
    """
    if n_heads % n_groups:
        raise ValueError(f"n_groups={n_groups} does not divide n_heads={n_heads}")
    if weight.shape[0] % n_heads:
        raise ValueError(f"weight has {weight.shape[0]} rows, not a multiple of n_heads={n_heads}")
    d_head = weight.shape[0] // n_heads
    grouped = weight.reshape(n_groups, n_heads // n_groups, d_head, *weight.shape[1:])
    return grouped.mean(dim=1).reshape(n_groups * d_head, *weight.shape[1:])


def convert_to_gqa(mha: MultiHeadAttention, n_kv_heads: int, how: str = "mean",
                   generator: torch.Generator | None = None) -> MultiHeadAttention:
    """A GQA copy of ``mha`` with ``n_kv_heads`` key/value heads (Ainslie et al. 2023, §2.1).

    ``how``: ``"mean"`` mean-pools each group's key and value heads; ``"first"`` keeps the first
    head of each group; ``"random"`` initialises the key/value projections afresh (from
    ``generator``). Query and output projections are copied unchanged.
    """
    if how not in ("mean", "first", "random"):
        raise ValueError(f"how must be 'mean', 'first' or 'random', got {how!r}")
    has_bias = mha.q_proj.bias is not None
    new = MultiHeadAttention(mha.d_model, mha.n_heads, n_kv_heads, bias=has_bias,
                             dropout=mha.dropout).to(mha.q_proj.weight.device, mha.q_proj.weight.dtype)
    h, r, dh = mha.n_heads, mha.n_heads // n_kv_heads, mha.d_head
    with torch.no_grad():
        for name in ("q_proj", "out_proj"):
            getattr(new, name).load_state_dict(getattr(mha, name).state_dict())
        for name in ("k_proj", "v_proj"):
            old, dst = getattr(mha, name), getattr(new, name)
            for p_old, p_new in ((old.weight, dst.weight), (old.bias, dst.bias)):
                if p_old is None:
                    continue
                if how == "mean":
                    p_new.copy_(mean_pool_kv_heads(p_old, h, n_kv_heads))
                elif how == "first":
                    p_new.copy_(p_old.reshape(n_kv_heads, r, dh, *p_old.shape[1:])[:, 0]
                                .reshape(p_new.shape))
                else:
                    bound = 1 / math.sqrt(mha.d_model)   # nn.Linear's default initialisation range
                    p_new.copy_(torch.rand(p_new.shape, generator=generator) * 2 * bound - bound)
    return new


class OneHeadSelfAttention(MultiHeadAttention):
    """:class:`MultiHeadAttention` with one head, as a single-head self-attention layer (chapter 3's
    ``SelfAttention``): ``forward(x (batch, L, d_model), mask (batch, L, L) or None)`` returns
    ``(output (batch, L, d_model), weights (batch, L, L))``; the same four sub-modules
    ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``."""

    def __init__(self, d_model: int):
        super().__init__(d_model, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        mask = None if mask is None else mask.unsqueeze(-3)      # (batch, 1, L, L): the single head
        out, weights = super().forward(x, mask=mask, need_weights=True)
        return out, weights.squeeze(1)
