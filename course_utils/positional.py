"""Positional information, in one place: what is added to the embeddings, and what rotates q and k.

* Added to the token (or patch) embeddings: :func:`sinusoidal_encoding` (the table of Vaswani et
  al. 2017, §3.5) with its module :class:`SinusoidalPositions`, :class:`LearnedPositions` (BERT,
  GPT, ViT) and :class:`NoPositions` (the control); :func:`positional_embedding` builds one by name.
* Applied inside attention: rotary position embedding (RoPE, Su et al. 2021) in its two layouts.
  :func:`apply_rope` rotates the interleaved pairs ``(2i, 2i+1)`` (the paper, Meta's code, chapter
  5); :func:`apply_rope_half` the split halves ``(i, i + d/2)`` (Hugging Face's Llama, chapter 8),
  at positions offset by a KV cache's length (:func:`rope_cos_sin` computes the angles,
  :func:`rope_rotate` applies them); :func:`interleaved_to_half` is the permutation that
  maps one layout onto the other. :class:`~course_utils.multihead.MultiHeadAttention` takes
  ``rope=True``.

Shapes: embeddings ``(batch, L, d_model)``; RoPE inputs ``(..., seq, d_head)``.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import check_int

__all__ = [
    "POSITIONAL", "LearnedPositions", "NoPositions", "SinusoidalPositions", "apply_rope", "apply_rope_half",
    "interleaved_to_half", "positional_embedding", "rope_cos_sin", "rope_rotate", "rotate_half",
    "sinusoidal_encoding",
]

#: The kinds of positional information the models take: added to the embeddings ("sinusoidal",
#: "learned"), rotated into queries and keys inside attention ("rope"), or none at all.
POSITIONAL = ("sinusoidal", "learned", "rope", "none")


# --- added to the embeddings ------------------------------------------------------------------

def sinusoidal_encoding(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The sinusoidal table of Vaswani et al. (2017, §3.5), ``(max_len, d_model)``.

    ``PE[pos, 2i] = sin(pos / base^(2i / d_model))`` and ``PE[pos, 2i + 1] = cos(...)`` of the
    same angle. ``d_model`` must be even (each frequency fills a sine and a cosine column).
    """
    check_int(max_len, "max_len")
    check_int(d_model, "d_model", 1)
    if d_model % 2:
        raise ValueError(f"d_model must be even (sine and cosine columns pair up), got {d_model!r}")
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]                  # (max_len, 1)
    freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (d_model / 2,)
    angle = pos * freq                                                          # (max_len, d_model / 2)
    pe = torch.empty(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.float()


class SinusoidalPositions(nn.Module):
    """Adds the fixed sinusoidal table to ``(batch, L, d_model)`` inputs, from position ``offset``."""

    def __init__(self, d_model: int, max_len: int = 512):
        super().__init__()
        self.register_buffer("table", sinusoidal_encoding(max_len, d_model), persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        L = x.shape[1]
        if offset + L > self.table.shape[0]:
            raise ValueError(f"positions up to {offset + L} requested, but the table has "
                             f"{self.table.shape[0]} (raise max_len)")
        return x + self.table[offset:offset + L]


class LearnedPositions(nn.Module):
    """Adds a learned vector per position (as in BERT and GPT) to ``(batch, L, d_model)`` inputs."""

    def __init__(self, d_model: int, max_len: int = 512):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        L = x.shape[1]
        if offset + L > self.embedding.num_embeddings:
            raise ValueError(f"positions up to {offset + L} requested, but only "
                             f"{self.embedding.num_embeddings} were learned (raise max_len)")
        return x + self.embedding.weight[offset:offset + L]


class NoPositions(nn.Module):
    """No positional information at all (the control experiment)."""

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return x


def positional_embedding(kind: str, d_model: int, max_len: int) -> nn.Module:
    """The module that adds ``kind`` of positions to ``(batch, L, d_model)`` embeddings.

    ``"rope"`` adds nothing (:class:`NoPositions`): its rotation happens inside attention.
    """
    if kind == "sinusoidal":
        return SinusoidalPositions(d_model, max_len)
    if kind == "learned":
        return LearnedPositions(d_model, max_len)
    if kind in ("rope", "none"):
        return NoPositions()
    raise ValueError(f"positional must be one of {POSITIONAL}, got {kind!r}")


# --- RoPE, inside attention ---------------------------------------------------------------------

def apply_rope(x: torch.Tensor, positions, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding (Su et al., RoFormer): rotate pairs of features by angles.

    Features ``(2i, 2i+1)`` of the vector at position ``m`` are rotated by the angle
    ``m * theta_i`` with ``theta_i = base ** (-2i / d)``. Because a rotation by ``a`` followed
    by the transpose of a rotation by ``b`` is a rotation by ``a - b``, the dot product of a
    rotated query (position ``m``) and key (position ``n``) depends only on ``m - n``.
    (Hugging Face's Llama pairs feature ``i`` with ``i + d/2`` instead: the same rotation on
    permuted features.)

    Args:
        x: ``(..., seq, d)`` with even ``d``.
        positions: ``(seq,)`` positions (ints or floats) of the ``seq`` vectors.
    Returns:
        A tensor of ``x``'s shape and dtype.
    """
    if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.shape[-1] % 2:
        raise ValueError(f"x must be a (..., seq, d) tensor with an even d, got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    positions = torch.as_tensor(positions, device=x.device)
    if positions.dim() != 1 or positions.shape[0] != x.shape[-2]:
        raise ValueError(f"positions must have shape (seq,) = ({x.shape[-2]},), got {tuple(positions.shape)}")
    d = x.shape[-1]
    dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
    theta = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)     # (d/2,)
    angle = positions.to(torch.float64)[:, None] * theta[None, :]                          # (seq, d/2)
    cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return out.flatten(-2)


def rope_cos_sin(positions: torch.Tensor, d_head: int, base: float = 10000.0,
                 dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos, sin`` of shape ``(seq, d_head)`` for the split-halves layout.

    Frequency ``theta_i = base ** (-2i / d_head)`` for ``i < d_head / 2``, repeated for both halves
    (``torch.cat([freqs, freqs])``, as Hugging Face's ``LlamaRotaryEmbedding``).
    """
    if d_head % 2:
        raise ValueError(f"RoPE needs an even head size, got d_head={d_head}")
    positions = torch.as_tensor(positions)
    if positions.dim() != 1:
        raise ValueError(f"positions must have shape (seq,), got {tuple(positions.shape)}")
    # float32 as Hugging Face computes it; float64 angles for float64 inputs (exact at large positions)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.int64, device=positions.device)
                               .to(work) / d_head))                                # (d/2,)
    angle = positions.to(work)[:, None] * inv_freq[None, :]                         # (seq, d/2)
    angle = torch.cat([angle, angle], dim=-1)                                       # (seq, d)
    return angle.cos().to(dtype), angle.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` on the two halves of the last axis."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope_half(x: torch.Tensor, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    """Rotate ``x (batch, heads, seq, d_head)`` by positions ``offset .. offset + seq - 1``,
    pairing feature ``i`` with ``i + d_head/2`` (Hugging Face's layout).

    ``offset`` is the number of positions already in the KV cache: a token decoded after a cache of
    ``T`` positions sits at position ``T``, not 0.
    """
    if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.shape[-1] % 2:
        raise ValueError(f"x must be a (..., seq, d_head) tensor with an even d_head, got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    check_int(offset, "offset", note="the cache length")
    pos = torch.arange(offset, offset + x.shape[-2], device=x.device)
    return rope_rotate(x, *rope_cos_sin(pos, x.shape[-1], base, dtype=x.dtype))


def rope_rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin``: ``x (..., seq, d_head)`` rotated by angles computed once
    (:func:`rope_cos_sin`, ``(seq, d_head)``); a stack computes them once per forward for all its layers."""
    return x * cos + rotate_half(x) * sin


def interleaved_to_half(d_head: int) -> torch.Tensor:
    """The permutation ``p`` (a ``(d_head,)`` index) with
    ``apply_rope_half(x[..., p]) == apply_rope(x, positions)[..., p]``:
    ``p = [0, 2, 4, ..., d-2, 1, 3, ..., d-1]`` moves the interleaved pair ``(2i, 2i+1)`` to
    ``(i, i + d/2)``. Applied to the rows of each head of ``W_q`` and ``W_k``, it turns a model
    trained with one layout into the same model in the other (scores unchanged: a permutation of
    the features of both ``q`` and ``k`` leaves ``q . k`` as it is).
    """
    if d_head % 2 or d_head < 2:
        raise ValueError(f"d_head must be even and >= 2, got {d_head}")
    return torch.cat([torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)])
