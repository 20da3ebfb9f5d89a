"""The key/value cache of one attention layer, and of a whole decoder, for decoding one token at a time (chapter 4).

:class:`KVCache` is the cache of one layer: :class:`~course_utils.multihead.MultiHeadAttention`
appends to it (self-attention) or fills it once (cross-attention). :class:`DecoderCache` is the
decoding state of a whole decoder (:class:`course_utils.lm.DecoderLM`'s, and with ``cross=True``
:class:`course_utils.transformer.Seq2SeqTransformer`'s): one :class:`KVCache` per layer and the
number of positions fed, kept consistent by the cache itself. :func:`kv_cache_bytes` is its size.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ._validate import check_int

__all__ = ["CacheSwitch", "DecoderCache", "KVCache", "kv_cache_bytes"]


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
        check_int(length, "crop's length", 0, self._len, f"the cache holds {self._len} positions")
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


def kv_cache_bytes(n_layers: int, n_kv_heads: int, d_head: int, seq_len: int, batch: int = 1,
                   bytes_per_value: int = 2) -> int:
    """Bytes of the key/value cache: ``2 (K and V) * layers * kv heads * d_head * tokens * batch
    * bytes per value`` (2 for float16/bfloat16, 4 for float32)."""
    return 2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_value


class DecoderCache:
    """The decoding state of a decoder: one :class:`KVCache` per layer (``layers``), or, for a model
    that recomputes instead of caching (``cache_kv=False``), the ``tokens (batch, T)`` fed so far.
    ``cross=True`` (an encoder-decoder's decoder, caching) adds one cross-attention cache per layer
    (``cross``): filled from the source at the first step, reused after, reordered with the rows.

    ``len(cache)`` is the number of positions fed, read from one place: the first layer's
    :class:`KVCache` (or ``tokens``); no second count can disagree with it. :meth:`feed` returns the
    offset of the new tokens before the model's forward appends their keys and values to the layers.
    A model's ``decode_step`` feeds a :meth:`fork` (a new object sharing the layers, which it now
    owns) and returns it, so the state passed in stays behind: stepping it again would attend over
    keys it never fed, and raises (*stepped already*). Beam search branches with :meth:`reorder`
    (:func:`course_utils.decoding.index_state` calls it), which copies.

    ``prefix_len``: the positions of a prefix LM's bidirectional prefix (fed first, in one piece).
    ``batch_size`` and ``device`` are known before anything is cached.
    """

    def __init__(self, n_layers: int, batch_size: int, device=None, max_len: int | None = None,
                 cache_kv: bool = True, cross: bool = False):
        check_int(batch_size, "batch_size", 0)
        self.batch_size, self.device = batch_size, torch.device("cpu") if device is None else torch.device(device)
        self.layers = [KVCache(max_len=max_len) for _ in range(n_layers)] if cache_kv else None
        self.cross = [KVCache() for _ in range(n_layers)] if cache_kv and cross else None
        self.tokens = None if cache_kv else torch.zeros(batch_size, 0, dtype=torch.long, device=self.device)
        self.prefix_len = 0
        self._owner = {"state": self}   # shared by the forks of this state: which one may feed the layers

    def __len__(self) -> int:
        return self.tokens.shape[1] if self.layers is None else len(self.layers[0])

    def __getitem__(self, i: int) -> KVCache:
        return self.layers[i]

    def __repr__(self) -> str:
        kind = "tokens" if self.layers is None else f"{len(self.layers)} layers" + (" and cross" if self.cross else "")
        return f"DecoderCache(batch={self.batch_size}, len={len(self)}, {kind})"

    def _copy(self) -> DecoderCache:
        new = object.__new__(DecoderCache)
        new.__dict__.update(self.__dict__)
        return new

    def fork(self) -> DecoderCache:
        """A new cache object sharing the layers, which it now owns: what a step feeds and returns
        (this one is left behind, and feeding it raises)."""
        self.check()
        new = self._copy()
        self._owner["state"] = new
        return new

    def check(self) -> None:
        """Raise unless this state owns its layers (no later state has been stepped from it) and every
        layer holds the same positions."""
        if self.layers is None:
            return
        lengths = {len(layer) for layer in self.layers}
        if self._owner["state"] is not self or len(lengths) > 1:
            raise ValueError(f"this decoding state was stepped already: a later state shares its caches "
                             f"(now {len(self)} positions{', per layer ' + str(sorted(lengths)) if len(lengths) > 1 else ''}) "
                             "and advanced them in place. Step the state that decode_step returned, or "
                             "decoding.index_state copies to branch")

    def feed(self, new_tokens: torch.Tensor, prefix: bool = False) -> int:
        """Check ``new_tokens (batch, T_new)`` can be fed (:meth:`check`); return the positions fed
        before them (their offset), to which the model's forward appends their keys and values.
        Without key/value layers the tokens are kept. ``prefix=True``: they are a prefix LM's
        bidirectional prefix (only as the first thing fed)."""
        batch, n_new = new_tokens.shape
        if batch != self.batch_size:
            raise ValueError(f"{batch} rows fed to a decoding state of batch {self.batch_size}")
        offset = len(self)
        if prefix and offset:
            raise ValueError("a bidirectional prefix must be the first thing fed (the state is not empty)")
        self.check()
        if prefix:
            self.prefix_len = n_new
        if self.tokens is not None:
            self.tokens = torch.cat([self.tokens, new_tokens], dim=1)
        return offset

    def reorder(self, index: torch.Tensor) -> DecoderCache:
        """A new cache holding batch rows ``index`` (copies: beam search reorders its hypotheses); it
        owns its copies, and this state keeps its own."""
        self.check()
        new = self._copy()
        new.batch_size = len(index)
        if self.layers is not None:
            new.layers = [layer.reorder(index) for layer in self.layers]
        if self.cross is not None:
            new.cross = [layer.reorder(index) for layer in self.cross]
        if self.tokens is not None:
            new.tokens = self.tokens.index_select(0, index.to(self.tokens.device))
        new._owner = {"state": new}
        return new

    def crop(self, length: int) -> DecoderCache:
        """Keep the first ``length`` positions (every layer's :meth:`KVCache.crop`); return the cache."""
        self.check()
        check_int(length, "crop's length", 0, len(self), f"the cache holds {len(self)} positions")
        for layer in self.layers or ():
            layer.crop(length)
        if self.tokens is not None:
            self.tokens = self.tokens[:, :length]
        self.prefix_len = min(self.prefix_len, length)
        return self

    def nbytes(self) -> int:
        """Bytes held by the cached keys and values of every layer (cross-attention's included)."""
        return sum(layer.nbytes() for layer in (self.layers or []) + (self.cross or []))


class CacheSwitch:
    """A decoder model's ``use_cache``: its config's field, switched on the model (``model.use_cache =
    False``) by replacing ``model.cfg`` with a copy (a config shared by other models never changes).
    With the cache, :meth:`init_state` keeps keys and values; without, the tokens (and each step
    recomputes the prefix)."""

    @property
    def use_cache(self) -> bool:
        return self.cfg.use_cache

    @use_cache.setter
    def use_cache(self, value: bool) -> None:
        self.cfg = replace(self.cfg, use_cache=bool(value))
