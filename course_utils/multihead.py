"""Multi-head, multi-query and grouped-query attention (chapter 4).

:class:`MultiHeadAttention` has ``n_kv_heads`` key/value heads shared by groups of query heads
(MHA, GQA and MQA in one module), an optional :class:`~course_utils.kvcache.KVCache` for decoding
one token at a time, and RoPE inside attention. Around it: splitting and merging heads, repeating
key/value heads, a fused grouped attention that never repeats them, one cached step written as a
function (:func:`cached_attention`, the form chapter 4's exercise takes), and the conversion of a
trained MHA into GQA. Scores, masks and single-head attention are :mod:`course_utils.attention`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import check_int
from .attention import (
    _check_bias,
    _check_mask,
    _shape,
    attention_scores,
    causal_mask,
    combine_masks,
    masked_softmax,
    scaled_dot_product_attention,
)
from .kvcache import KVCache
from .positional import apply_rope_half, rope_rotate

__all__ = [
    "MultiHeadAttention", "OneHeadSelfAttention", "cached_attention", "convert_to_gqa", "copy_from_torch",
    "copy_to_torch", "gqa_decode_step", "grouped_sdpa", "mean_pool_kv_heads", "merge_heads", "repeat_kv",
    "split_heads",
]


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
            check_int(n, name, 1)
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
                need_weights: bool = False, causal: bool = False, attn_bias: torch.Tensor | None = None,
                rope_angles: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``x`` to itself (``context`` None) or to ``context``.

        Args:
            x: ``(batch, L_q, d_model)`` queries' inputs.
            context: ``(batch, L_src, d_model)`` for cross-attention, or None.
            mask: bool, True = may attend, broadcastable to ``(batch, n_heads, L_q, L_k)``
                (``L_k`` counts cached positions too); a padding mask from
                :func:`~course_utils.attention.key_padding_mask` is one.
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
            rope_angles: ``(cos, sin)``, each ``(L_q, d_head)``, the angles of the new positions
                (:func:`course_utils.positional.rope_cos_sin`), computed once per forward by a
                :class:`~course_utils.blocks.TransformerStack` for all its layers; ``None``: this
                layer computes them.
        With ``rope=True`` (self-attention only), the queries and keys are rotated by their
        positions after the projections (:func:`course_utils.positional.apply_rope_half`); with a
        cache, the new positions start at ``len(cache)``, and the cache holds rotated keys.

        Returns:
            ``(out (batch, L_q, d_model), weights (batch, n_heads, L_q, L_k) or None)``.
        """
        self._check_call(x, context, cache)
        q = split_heads(self.q_proj(x), self.n_heads)                     # (B, H, L_q, dh)
        q, k, v = self._keys_values(x, q, context, cache, rope_angles)    # k, v: (B, G, L_k, dh)
        L_q, L_k = q.shape[2], k.shape[2]
        if causal:
            mask = combine_masks(mask, causal_mask(L_q, L_k, device=x.device))
        if mask is not None:
            _check_mask(mask, torch.empty(x.shape[0], self.n_heads, L_q, L_k, device="meta"))
        out, weights = self._attend(q, k, v, mask, attn_bias, need_weights)
        return self.out_proj(merge_heads(out)), weights

    def _check_call(self, x: torch.Tensor, context: torch.Tensor | None, cache: KVCache | None) -> None:
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

    def _keys_values(self, x: torch.Tensor, q: torch.Tensor, context: torch.Tensor | None,
                     cache: KVCache | None, rope_angles: tuple[torch.Tensor, torch.Tensor] | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The keys and values to attend over ``(B, G, L_k, dh)`` (the cache's, with the new ones
        appended), and ``q`` (rotated with RoPE)."""
        if cache is not None and cache.static:
            return q, cache.k, cache.v               # cross-attention: the source's K/V, computed once
        source = x if context is None else context
        k = split_heads(self.k_proj(source), self.n_kv_heads)             # (B, G, L, dh)
        v = split_heads(self.v_proj(source), self.n_kv_heads)
        if self.rope:
            q, k = self._rotate(q, k, 0 if cache is None else len(cache), rope_angles)
        if cache is not None:
            if context is not None:
                if len(cache):
                    raise ValueError("cross-attention needs an empty KVCache to fill (or one "
                                     "it filled before); this one holds self-attention keys")
                cache.static = True
            k, v = cache.append(k, v)
        return q, k, v

    def _rotate(self, q: torch.Tensor, k: torch.Tensor, offset: int,
                angles: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE on ``q`` and ``k`` at positions ``offset ..`` (``offset``: the cached positions): with
        the ``angles`` given (the stack's, for every layer), or a ``rotate`` plugged in, or
        :func:`~course_utils.positional.apply_rope_half`."""
        if self.rotate is None and angles is not None:
            if angles[0].shape[-2] != q.shape[2]:
                raise ValueError(f"rope_angles cover {angles[0].shape[-2]} positions, the queries {q.shape[2]}")
            return rope_rotate(q, *angles), rope_rotate(k, *angles)
        rotate = self.rotate or apply_rope_half
        return rotate(q, offset, self.rope_base), rotate(k, offset, self.rope_base)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                attn_bias: torch.Tensor | None, need_weights: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(out (B, H, L_q, dh), weights (B, H, L_q, L_k) or None)``: explicit when the weights or a
        score bias are needed, PyTorch's fused kernel otherwise."""
        p = self.dropout if self.training else 0.0
        if not (need_weights or attn_bias is not None):
            return grouped_sdpa(q, k, v, mask, dropout_p=p), None
        n_rep = self.n_heads // self.n_kv_heads
        k_r, v_r = repeat_kv(k, n_rep), repeat_kv(v, n_rep)               # (B, H, L_k, dh)
        scores = attention_scores(q, k_r)
        if attn_bias is not None:
            _check_bias(attn_bias, scores)
            scores = scores + attn_bias
        weights = masked_softmax(scores, mask)
        out = F.dropout(weights, p) @ v_r if p else weights @ v_r
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


def _check_decode_step(x_new, W_q, W_k, W_v, W_o, n_heads, n_kv_heads, cache) -> None:
    """The ValueErrors of :func:`gqa_decode_step`, each naming what disagrees."""
    if not torch.is_tensor(x_new) or x_new.dim() != 3:
        raise ValueError(f"x_new must be (batch, L_new, d_model), got {_shape(x_new)}")
    check_int(n_heads, "n_heads", low=1)
    check_int(n_kv_heads, "n_kv_heads", low=1)
    d_model = x_new.shape[-1]
    if n_heads % n_kv_heads or d_model % n_heads:
        raise ValueError(f"n_kv_heads must divide n_heads and n_heads must divide d_model, got n_heads={n_heads}, "
                         f"n_kv_heads={n_kv_heads}, d_model={d_model}")
    d_kv = n_kv_heads * (d_model // n_heads)
    for name, w, want in (("W_q", W_q, (d_model, d_model)), ("W_k", W_k, (d_model, d_kv)),
                          ("W_v", W_v, (d_model, d_kv)), ("W_o", W_o, (d_model, d_model))):
        if not torch.is_tensor(w) or tuple(w.shape) != want:
            raise ValueError(f"{name} must be {want} (d_model={d_model}, n_kv_heads * d_head={d_kv}), got {_shape(w)}")
    if cache is None:
        return
    if not isinstance(cache, (tuple, list)) or len(cache) != 2 or not all(torch.is_tensor(t) and t.dim() == 4 for t in cache):
        raise ValueError("cache must be None or a pair (k, v) of (batch, n_kv_heads, T, d_head) tensors")
    k, v = cache
    if k.shape[1] != n_kv_heads or v.shape[1] != n_kv_heads:
        raise ValueError(f"the cache must hold n_kv_heads={n_kv_heads} heads (never the repeated ones), got "
                         f"k {tuple(k.shape)} and v {tuple(v.shape)}")
    want = (x_new.shape[0], n_kv_heads, k.shape[2], d_model // n_heads)
    if tuple(k.shape) != want or tuple(v.shape) != want:
        raise ValueError(f"the cache's k and v must both be (batch, n_kv_heads, T, d_head) = {want}, got "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")


def gqa_decode_step(x_new: torch.Tensor, W_q: torch.Tensor, W_k: torch.Tensor, W_v: torch.Tensor, W_o: torch.Tensor,
                    n_heads: int, n_kv_heads: int, cache: tuple[torch.Tensor, torch.Tensor] | None = None
                    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One cached step of a grouped-query attention layer given by its weight matrices (chapter 4's
    whole decoding step).

    Args:
        x_new: ``(batch, L_new, d_model)``, the new positions (a prompt, a chunk or one token).
        W_q, W_o: ``(d_model, d_model)``; W_k, W_v: ``(d_model, n_kv_heads * d_head)``, with
            ``d_head = d_model // n_heads``; applied as ``x @ W``, no biases.
        n_heads, n_kv_heads: query heads and key/value heads (``n_kv_heads`` divides ``n_heads``).
        cache: None or ``(k, v)``, each ``(batch, n_kv_heads, T, d_head)``, as the previous step returned it.
    Returns:
        ``(out (batch, L_new, d_model), (k, v))``, the cache ``(batch, n_kv_heads, T + L_new, d_head)``,
        un-repeated; the new positions attend causally (mask aligned bottom-right) over the cache and themselves.
    Raises:
        ValueError: shapes that disagree, ``n_kv_heads`` not dividing ``n_heads``, a cache of other heads.
    """
    _check_decode_step(x_new, W_q, W_k, W_v, W_o, n_heads, n_kv_heads, cache)
    q = split_heads(x_new @ W_q, n_heads)
    k = split_heads(x_new @ W_k, n_kv_heads)
    v = split_heads(x_new @ W_v, n_kv_heads)
    out, cache = cached_attention(q, k, v, None if cache is None else tuple(cache))
    return merge_heads(out) @ W_o, cache


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
    new = MultiHeadAttention(mha.d_model, mha.n_heads, n_kv_heads, bias=has_bias, dropout=mha.dropout,
                             rope=mha.rope, rope_base=mha.rope_base).to(mha.q_proj.weight.device,
                                                                         mha.q_proj.weight.dtype)
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


def _torch_pairs(ours: nn.Module, theirs: nn.MultiheadAttention):
    """The (ours, theirs) weight and bias pairs of the four projections; checks that they match."""
    d = theirs.embed_dim
    names = ("q_proj", "k_proj", "v_proj", "out_proj")
    if not all(isinstance(getattr(ours, n, None), nn.Linear) for n in names):
        raise TypeError(f"{type(ours).__name__} needs four nn.Linear sub-modules {names}")
    shapes = [tuple(getattr(ours, n).weight.shape) for n in names]
    if shapes != [(d, d)] * 4:
        raise ValueError(f"nn.MultiheadAttention({d}, ...) has four ({d}, {d}) projections (as many key/value "
                         f"heads as query heads, no GQA), {type(ours).__name__}'s are {shapes}")
    if (theirs.in_proj_bias is None) != (ours.q_proj.bias is None):
        raise ValueError("one module has biases and the other has not: build both with the same bias=")
    if theirs.in_proj_weight is None:
        raise ValueError("this nn.MultiheadAttention has separate q/k/v weights (kdim or vdim != embed_dim)")
    w = theirs.in_proj_weight.chunk(3)
    b = theirs.in_proj_bias.chunk(3) if theirs.in_proj_bias is not None else (None,) * 3
    pairs = [(ours.q_proj, w[0], b[0]), (ours.k_proj, w[1], b[1]), (ours.v_proj, w[2], b[2]),
             (ours.out_proj, theirs.out_proj.weight, theirs.out_proj.bias)]
    return [(lin.weight, tw) for lin, tw, _ in pairs] + [(lin.bias, tb) for lin, _, tb in pairs if tb is not None]


def copy_from_torch(ours: nn.Module, theirs: nn.MultiheadAttention) -> None:
    """Load an ``nn.MultiheadAttention``'s weights into ``ours`` (a :class:`MultiHeadAttention` with as
    many key/value heads as query heads, or any module with the four projections ``q_proj``,
    ``k_proj``, ``v_proj``, ``out_proj``). PyTorch stacks ``W_Q``, ``W_K``, ``W_V`` in one
    ``in_proj_weight (3 d_model, d_model)`` and their biases in ``in_proj_bias``."""
    with torch.no_grad():
        for mine, their in _torch_pairs(ours, theirs):
            mine.copy_(their)


def copy_to_torch(ours: nn.Module, theirs: nn.MultiheadAttention) -> nn.MultiheadAttention:
    """The other way: load ``ours``' four projections into ``theirs``; returns ``theirs``."""
    with torch.no_grad():
        for mine, their in _torch_pairs(ours, theirs):
            their.copy_(mine)
    return theirs
