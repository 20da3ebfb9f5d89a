"""Sliding-window attention with a rolling-buffer cache (chapter 9).

Mistral 7B (Jiang et al., "Mistral 7B", 2023) attends to a window of W = 4096 tokens and keeps a
cache of a fixed W slots: "the keys and values for the timestep i are stored in position i mod W of
the cache", so positions older than the window are overwritten and the cache's memory stays flat in
the sequence length. Stacking layers widens what a token sees: through k layers a token reaches
input tokens up to about k × W positions back (32 layers × 4096: about 131K in the paper).

**Convention.** Here a window of ``W`` means that query ``i`` attends to the ``W`` keys
``i - W + 1, ..., i`` (itself and the ``W - 1`` before it): exactly what a cache of ``W`` slots holds
after position ``i`` is written, and what Mistral's reference implementation and Hugging Face's
``sliding_window`` compute. (The paper's prose says "positions between i − W and i", one more.) The
banded causal mask is chapter 3's :func:`course_utils.attention.sliding_window_mask` with
``radius = W - 1`` combined with :func:`course_utils.attention.causal_mask`. With this convention the
receptive field after ``n`` layers is ``n * (W - 1) + 1`` tokens (:func:`receptive_field`): each
layer reaches ``W - 1`` further back, k × W in the paper's round words.

Shapes: queries, keys and values of one step are ``(n_heads, 1, d_head)`` (``(n_heads, d_head)`` in
:func:`rolling_attend`); the buffers are ``(n_heads, W, d_head)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_utils._validate import check_int
from course_utils.attention import causal_mask, combine_masks, sliding_window_mask

__all__ = ["RollingKVCache", "banded_causal_mask", "receptive_field", "rolling_attend", "slot_positions"]


def banded_causal_mask(L: int, window: int, device=None) -> torch.Tensor:
    """Boolean ``(L, L)`` mask, True where ``i - window < j <= i`` (True = may attend): each query
    sees itself and the ``window - 1`` positions before it."""
    check_int(L, "L", low=0)
    check_int(window, "window", low=1)
    return combine_masks(causal_mask(L, device=device), sliding_window_mask(L, window - 1, device=device))


def receptive_field(n_layers: int, window: int) -> int:
    """How many input positions the last layer's output at position ``i`` depends on (for ``i`` large
    enough): ``n_layers * (window - 1) + 1`` (0 layers: the token itself)."""
    check_int(n_layers, "n_layers", low=0)
    check_int(window, "window", low=1)
    return n_layers * (window - 1) + 1


def slot_positions(pos: int, window: int) -> torch.Tensor:
    """The position each of the ``window`` slots holds once positions ``0`` to ``pos`` have been
    written at ``i % window``: a 1-D ``torch.long`` tensor, ``-1`` for a slot not written yet. The
    slots that hold a position are exactly the ones row ``pos`` of :func:`banded_causal_mask` lets
    the query see. Raises ``ValueError`` naming ``pos`` or ``window``."""
    if type(pos) is not int or pos < 0:
        raise ValueError(f"pos must be an int >= 0, got {pos!r}")
    if type(window) is not int or window < 1:
        raise ValueError(f"window must be an int >= 1, got {window!r}")
    held = pos - (pos - torch.arange(window)) % window      # the last position i <= pos with i % W == slot
    return torch.where(held >= 0, held, -1)


def rolling_attend(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor, k_buf: torch.Tensor,
                   v_buf: torch.Tensor, pos: int) -> torch.Tensor:
    """One decoding step with a rolling buffer: write position ``pos``'s ``k_new`` and ``v_new``
    ``(n_heads, d_head)`` into the buffers ``(n_heads, W, d_head)`` **in place** at slot ``pos % W``,
    then attend with ``q`` ``(n_heads, d_head)`` to the filled slots, ``0`` to ``min(pos, W - 1)``:
    positions ``max(0, pos - W + 1)`` to ``pos``. Returns ``(n_heads, d_head)``. Raises ``ValueError``
    (naming the argument) before writing anything."""
    for name, buf in (("k_buf", k_buf), ("v_buf", v_buf)):
        if not isinstance(buf, torch.Tensor) or buf.dim() != 3:
            raise ValueError(f"{name} must be (n_heads, W, d_head), got {getattr(buf, 'shape', type(buf).__name__)}")
    if k_buf.shape != v_buf.shape:
        raise ValueError(f"k_buf and v_buf must have one shape, got {tuple(k_buf.shape)} and {tuple(v_buf.shape)}")
    want = (k_buf.shape[0], k_buf.shape[2])
    for name, x in (("q", q), ("k_new", k_new), ("v_new", v_new)):
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != want:
            raise ValueError(f"{name} must be (n_heads, d_head) = {want}, got {getattr(x, 'shape', type(x).__name__)}")
    check_int(pos, "pos", low=0)
    window = k_buf.shape[1]
    k_buf[:, pos % window] = k_new
    v_buf[:, pos % window] = v_new
    n = min(pos + 1, window)
    return F.scaled_dot_product_attention(q[:, None], k_buf[:, :n], v_buf[:, :n])[:, 0]


class RollingKVCache:
    """A cache of ``window`` slots for one attention layer: position ``i`` is stored at slot
    ``i % window``. ``k`` and ``v`` are ``(n_heads, window, d_head)``; ``pos`` counts the tokens seen."""

    def __init__(self, window: int, n_heads: int, d_head: int, dtype: torch.dtype = torch.float32,
                 device=None):
        self.window = check_int(window, "window", low=1)
        check_int(n_heads, "n_heads", low=1)
        check_int(d_head, "d_head", low=1)
        self.k = torch.zeros(n_heads, window, d_head, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.pos = 0

    def __repr__(self) -> str:
        h, w, d = self.k.shape
        return f"RollingKVCache(window={w}, n_heads={h}, d_head={d}, pos={self.pos})"

    def nbytes(self) -> int:
        """Bytes of the two buffers: the same at every position."""
        return self.k.numel() * self.k.element_size() * 2

    def step(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Write this position's ``k`` and ``v`` ``(n_heads, 1, d_head)`` at slot ``pos % window``,
        then attend with ``q`` ``(n_heads, 1, d_head)`` to the filled slots (the last ``window``
        positions, in slot order: attention does not depend on the order of its keys). Returns
        ``(n_heads, 1, d_head)``."""
        want = (self.k.shape[0], 1, self.k.shape[2])
        for name, x in (("q", q), ("k", k), ("v", v)):
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
            if tuple(x.shape) != want:
                raise ValueError(f"{name} must be (n_heads, 1, d_head) = {want}, got {tuple(x.shape)}")
        out = rolling_attend(q[:, 0], k[:, 0], v[:, 0], self.k, self.v, self.pos)
        self.pos += 1
        return out[:, None]
