"""The Transformer block and the stack of blocks: one of each, composed into every model of the course.

* :class:`BlockConfig`, the sizes and switches of a block: width, heads (``n_kv_heads`` for GQA/MQA),
  feed-forward width and kind (``"relu"``, ``"gelu"``, ``"swiglu"``), norm kind (``"layer"``,
  ``"rms"``) and order (``norm_first``: Post-LN or Pre-LN), cross-attention, RoPE, biases, dropout.
* The parts: :class:`FeedForward` (two linear layers, ReLU or GELU), :class:`SwiGLU` (Shazeer 2020),
  :class:`RMSNorm` (Zhang & Sennrich 2019) and :func:`make_norm`.
* :class:`TransformerBlock`: self-attention, optional cross-attention over an encoder's output,
  feed-forward; each sub-layer with a residual connection and a norm, after it (Post-LN, the paper:
  ``x = norm(x + sublayer(x))``) or before it (Pre-LN: ``x = x + sublayer(norm(x))``). Its key/value
  caches are arguments of :meth:`TransformerBlock.forward`, one for self- and one for cross-attention.
* :class:`TransformerStack`: ``n_layers`` blocks (or one block applied ``n_layers`` times) and a final
  norm, and :class:`TokenEmbedding`: token ids to vectors plus positions.

The models are compositions of these: :class:`course_utils.transformer.Seq2SeqTransformer` (an
encoder stack and a decoder stack with cross-attention), :class:`course_utils.families.EncoderOnly`,
:class:`course_utils.vit.ViT` (patches instead of tokens) and the one decoder-only language model,
:class:`course_utils.lm.DecoderLM` (GPT-style, or LLaMA-style with RMSNorm, SwiGLU, RoPE, no biases).

Masks are boolean, True = may attend, broadcastable to ``(batch, heads, L_q, L_k)``; states are
``(batch, L, d_model)``; attention weights ``(batch, heads, L_q, L_k)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import check_int
from .kvcache import KVCache
from .multihead import MultiHeadAttention
from .positional import positional_embedding, rope_cos_sin

__all__ = [
    "FFNS", "NORMS", "BlockConfig", "BlockOutput", "FeedForward", "RMSNorm", "StackOutput", "SwiGLU",
    "TokenEmbedding", "TransformerBlock", "TransformerStack", "make_norm", "rms_norm", "swiglu_hidden",
]

NORMS = ("layer", "rms")
FFNS = ("relu", "gelu", "swiglu")


def swiglu_hidden(d_model: int, multiple_of: int = 8) -> int:
    """LLaMA's hidden size: ``2/3 * 4 * d_model`` rounded up to a multiple of ``multiple_of``
    (three matrices of that width hold as many weights as two of width ``4 * d_model``)."""
    h = int(2 * 4 * d_model / 3)
    return multiple_of * ((h + multiple_of - 1) // multiple_of)


@dataclass
class BlockConfig:
    """The sizes and switches of a :class:`TransformerBlock` (and of every block of a stack).

    ``d_ff=None``: ``4 * d_model`` for ReLU/GELU, :func:`swiglu_hidden` for SwiGLU.
    ``n_kv_heads=None``: ``n_heads`` (multi-head attention). The fields keep what was given; the
    widths a block is built with are the properties :attr:`ff_width` and :attr:`kv_heads`, derived
    each time, so ``dataclasses.replace(cfg, d_model=128)`` or ``replace(cfg, ffn="swiglu")`` gets
    the width of the new config, never the old one's. ``attention_bias``: biases in the
    attention's four projections (LLaMA has none; the feed-forward of ``"relu"``/``"gelu"`` always
    has them, SwiGLU never). ``rope``: rotate queries and keys in self-attention (chapter 8).
    ``eps``: the norms' epsilon.
    """

    d_model: int = 64
    n_heads: int = 4
    d_ff: int | None = None
    n_kv_heads: int | None = None
    dropout: float = 0.0
    norm_first: bool = False
    cross_attention: bool = False
    norm: str = "layer"
    ffn: str = "relu"
    attention_bias: bool = True
    rope: bool = False
    rope_base: float = 10000.0
    eps: float = 1e-5

    def __post_init__(self):
        check_int(self.d_model, "d_model", 1)
        check_int(self.n_heads, "n_heads", 1)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        for name, allowed in (("norm", NORMS), ("ffn", FFNS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.rope and self.cross_attention:
            raise ValueError("RoPE is applied in self-attention only: rope=True with cross_attention=True "
                             "is not a block this course builds")
        check_int(self.ff_width, "d_ff", 1)
        check_int(self.kv_heads, "n_kv_heads", 1)

    @property
    def ff_width(self) -> int:
        """The feed-forward's hidden width: ``d_ff``, else the default of ``ffn`` for ``d_model``."""
        if self.d_ff is not None:
            return self.d_ff
        return swiglu_hidden(self.d_model) if self.ffn == "swiglu" else 4 * self.d_model

    @property
    def kv_heads(self) -> int:
        """The key/value heads: ``n_kv_heads``, else ``n_heads``."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    def block_config(self, **changes) -> BlockConfig:
        """The :class:`BlockConfig` part of this config (a model's config is built on it), with ``changes``."""
        return BlockConfig(**{**{f.name: getattr(self, f.name) for f in fields(BlockConfig)}, **changes})


# --- the parts --------------------------------------------------------------------------------

def _dropout(p: float) -> nn.Module:
    """``nn.Dropout(p)``, or ``nn.Identity()`` for ``p = 0`` (the same result without a call into
    PyTorch: chapter 4 counts the calls of a decoding step)."""
    return nn.Dropout(p) if p else nn.Identity()


class FeedForward(nn.Module):
    """``linear2(dropout(act(linear1(x))))`` applied to every position alone: ``(..., d_model)``;
    ``act`` is ReLU (the paper) or GELU (GPT, BERT)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', got {activation!r}")
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = _dropout(dropout)
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.linear1(x)
        h = torch.relu(h) if self.activation == "relu" else F.gelu(h)
        return self.linear2(self.dropout(h))

    def extra_repr(self) -> str:
        return "" if self.activation == "relu" else f"activation={self.activation!r}"


class SwiGLU(nn.Module):
    """Gated feed-forward ``down(silu(gate(x)) * up(x))`` (Shazeer 2020), no biases: ``(..., d_model)``.

    ``fn``: another function computing it, ``fn(x, W_gate, W_up, W_down)`` (chapter 8 plugs in the
    learner's); ``None``: the layers' own.
    """

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)
        self.fn = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fn is not None:
            return self.fn(x, self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(mean(x**2, -1) + eps) * weight`` over the last axis ``(..., d)``.

    Computed in float32 at least (as Hugging Face's ``LlamaRMSNorm``), returned in ``x``'s dtype.
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"rms_norm expects a floating-point tensor, got {type(x).__name__}")
    h = x.to(torch.promote_types(x.dtype, torch.float32))
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    h = h.to(x.dtype)
    return h if weight is None else weight * h


class RMSNorm(nn.Module):
    """Root-mean-square normalisation with a learned gain ``weight (d,)`` (initialised to 1).

    ``fn``: another function computing it, ``fn(x, weight, eps)`` (chapter 8 plugs in the learner's);
    ``None``: :func:`rms_norm`.
    """

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps
        self.fn = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.fn or rms_norm)(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


def make_norm(cfg: BlockConfig) -> nn.Module:
    """The block's norm: ``nn.LayerNorm`` or :class:`RMSNorm` over ``d_model``, with ``cfg.eps``."""
    if cfg.norm == "rms":
        return RMSNorm(cfg.d_model, cfg.eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.eps)


def _make_ffn(cfg: BlockConfig) -> nn.Module:
    if cfg.ffn == "swiglu":
        return SwiGLU(cfg.d_model, cfg.ff_width)
    return FeedForward(cfg.d_model, cfg.ff_width, cfg.dropout, activation=cfg.ffn)


# --- the block --------------------------------------------------------------------------------

class BlockOutput(NamedTuple):
    """What a :class:`TransformerBlock` returns: the new states ``(batch, L, d_model)`` and the
    attention weights ``(batch, heads, L, L_k)`` of its self- and cross-attention (``None`` unless
    asked for with ``need_weights``, and ``cross_weights`` always ``None`` without cross-attention)."""

    x: torch.Tensor
    self_weights: torch.Tensor | None
    cross_weights: torch.Tensor | None


class TransformerBlock(nn.Module):
    """One Transformer block: self-attention, cross-attention (if ``cfg.cross_attention``), feed-forward.

    Built from a :class:`BlockConfig`, or from its fields: ``TransformerBlock(d_model=8, n_heads=2,
    d_ff=16, norm_first=True)``. Sub-modules, named as in ``nn.TransformerEncoderLayer`` and
    ``nn.TransformerDecoderLayer``: ``self_attn`` and ``cross_attn`` (chapter 4's
    :class:`~course_utils.multihead.MultiHeadAttention`; ``cross_attn`` is ``None`` without
    cross-attention), ``ff``, and the norms: ``norm1`` before/after self-attention; then
    ``norm2`` for the feed-forward, or, with cross-attention, ``norm2`` for cross-attention and
    ``norm3`` for the feed-forward.

    Post-LN (``norm_first=False``, the paper) computes ``x = norm(x + dropout(sublayer(x)))`` per
    sub-layer; Pre-LN (``True``) ``x = x + dropout(sublayer(norm(x)))``.
    """

    def __init__(self, cfg: BlockConfig | None = None, **fields):
        super().__init__()
        if cfg is None:
            cfg = BlockConfig(**fields)
        elif fields:
            cfg = replace(cfg, **fields)
        if not isinstance(cfg, BlockConfig):
            raise TypeError(f"cfg must be a BlockConfig, got {type(cfg).__name__}")
        self.cfg, self.norm_first = cfg, cfg.norm_first
        attn = dict(bias=cfg.attention_bias, dropout=cfg.dropout)
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.kv_heads, rope=cfg.rope,
                                            rope_base=cfg.rope_base, **attn)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.kv_heads, **attn) \
            if cfg.cross_attention else None
        self.ff = _make_ffn(cfg)
        self.norm1, self.norm2 = make_norm(cfg), make_norm(cfg)
        self.norm3 = make_norm(cfg) if cfg.cross_attention else None
        self.dropout = _dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, cache: KVCache | None = None,
                causal: bool = False, memory: torch.Tensor | None = None, memory_mask: torch.Tensor | None = None,
                cross_cache: KVCache | None = None, need_weights: bool = False,
                rope_angles: tuple[torch.Tensor, torch.Tensor] | None = None) -> BlockOutput:
        """One block on ``x (batch, L, d_model)`` (with a cache: only the new positions).

        Args:
            mask: self-attention's bool mask, broadcastable to ``(batch, heads, L, L_k)``, ``L_k``
                counting cached positions (e.g. a ``(batch, 1, 1, L)`` padding mask).
            cache: self-attention's :class:`~course_utils.kvcache.KVCache`; the new keys and
                values are appended to it (in place).
            causal: also apply the causal mask, aligned to the last positions (right with a cache).
            memory: ``(batch, S, d_model)``, the encoder's output for cross-attention; may be
                ``None`` once ``cross_cache`` holds its keys and values.
            memory_mask: bool ``(batch, 1, 1, S)``, the source padding.
            cross_cache: cross-attention's cache, filled from ``memory`` on first use, then reused.
            need_weights: return the attention weights too (explicit computation, not the fused kernel).
            rope_angles: RoPE's ``(cos, sin)`` of the new positions, ``(L, d_head)`` each (the
                stack computes them once for all its layers); ``None``: self-attention computes them.
        Returns:
            :class:`BlockOutput` ``(x, self_weights, cross_weights)``.
        """
        has_cross = self.cross_attn is not None
        if not has_cross and (memory is not None or memory_mask is not None or cross_cache is not None):
            raise ValueError("this block has no cross-attention (cross_attention=False): "
                             "memory, memory_mask and cross_cache must be None")
        if has_cross and memory is None and not (cross_cache is not None and cross_cache.static):
            raise ValueError("this block attends to an encoder's output: pass memory (batch, S, d_model), "
                             "or a cross_cache filled from it")

        def self_block(h):
            return self.self_attn(h, mask=mask, cache=cache, causal=causal, need_weights=need_weights,
                                  rope_angles=rope_angles)

        def cross_block(h):
            return self.cross_attn(h, context=memory, mask=memory_mask, cache=cross_cache,
                                   need_weights=need_weights)

        ff_norm = self.norm3 if has_cross else self.norm2
        w_cross = None
        if self.norm_first:
            a, w_self = self_block(self.norm1(x))
            x = x + self.dropout(a)
            if has_cross:
                a, w_cross = cross_block(self.norm2(x))
                x = x + self.dropout(a)
            x = x + self.dropout(self.ff(ff_norm(x)))
        else:
            a, w_self = self_block(x)
            x = self.norm1(x + self.dropout(a))
            if has_cross:
                a, w_cross = cross_block(x)
                x = self.norm2(x + self.dropout(a))
            x = ff_norm(x + self.dropout(self.ff(x)))
        return BlockOutput(x, w_self, w_cross)


# --- the stack --------------------------------------------------------------------------------

class StackOutput(NamedTuple):
    """What a :class:`TransformerStack` returns: the final states ``(batch, L, d_model)`` (after the
    final norm) and one entry per layer of self- and cross-attention weights (``None`` entries
    unless ``need_weights``)."""

    x: torch.Tensor
    self_weights: list
    cross_weights: list


class TransformerStack(nn.Module):
    """``n_layers`` :class:`TransformerBlock` and a final norm (``final_norm``, default
    ``cfg.norm_first``: Pre-LN never normalises its residual stream, so it needs one at the end).

    ``share_layers=True`` applies one block ``n_layers`` times (cross-layer weight sharing, as in
    the Universal Transformer and ALBERT). Sub-modules: ``layers`` (``nn.ModuleList``), ``norm``.
    """

    def __init__(self, cfg: BlockConfig, n_layers: int, final_norm: bool | None = None,
                 share_layers: bool = False):
        super().__init__()
        check_int(n_layers, "n_layers")
        self.cfg = cfg
        if share_layers:
            self.layers = nn.ModuleList([TransformerBlock(cfg)] * n_layers)   # the same module n times
        else:
            self.layers = nn.ModuleList(TransformerBlock(cfg) for _ in range(n_layers))
        final_norm = cfg.norm_first if final_norm is None else final_norm
        self.norm = make_norm(cfg) if final_norm else nn.Identity()

    def rope_angles(self, x: torch.Tensor, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE's ``(cos, sin)``, each ``(L, d_head)``, for the positions ``offset .. offset + L - 1``
        of ``x (batch, L, d_model)``, in ``x``'s dtype (:func:`~course_utils.positional.rope_cos_sin`)."""
        pos = torch.arange(offset, offset + x.shape[1], device=x.device)
        return rope_cos_sin(pos, self.cfg.d_model // self.cfg.n_heads, self.cfg.rope_base, dtype=x.dtype)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, caches: list[KVCache] | None = None,
                causal: bool = False, memory: torch.Tensor | None = None, memory_mask: torch.Tensor | None = None,
                cross_caches: list[KVCache] | None = None, need_weights: bool = False) -> StackOutput:
        """Every block on ``x (batch, L, d_model)``, then the final norm; the arguments are those of
        :meth:`TransformerBlock.forward`, with one cache per layer in ``caches`` and ``cross_caches``.

        With RoPE (``cfg.rope``), the angles of the new positions (after the cached ones) are
        computed here once and given to every layer (Hugging Face's ``position_embeddings``)."""
        for name, cs in (("caches", caches), ("cross_caches", cross_caches)):
            if cs is not None and len(cs) != len(self.layers):
                raise ValueError(f"{name}: one KVCache per layer, {len(self.layers)} layers, got {len(cs)}")
        angles = self.rope_angles(x, 0 if not caches else len(caches[0])) if self.cfg.rope else None
        w_self, w_cross = [], []
        for i, layer in enumerate(self.layers):
            x, ws, wc = layer(x, mask=mask, cache=None if caches is None else caches[i], causal=causal,
                              memory=memory, memory_mask=memory_mask,
                              cross_cache=None if cross_caches is None else cross_caches[i],
                              need_weights=need_weights, rope_angles=angles)
            w_self.append(ws)
            w_cross.append(wc)
        return StackOutput(self.norm(x), w_self, w_cross)


# --- the embedding of tokens ------------------------------------------------------------------

class TokenEmbedding(nn.Module):
    """Token ids ``(batch, L)`` at positions ``offset ..`` -> ``(batch, L, d_model)``: the token's
    vector (times ``sqrt(d_model)`` if ``scale``, as in the paper), plus its position, then dropout.

    Built from its parts, ``TokenEmbedding(table, positions)`` (``table`` an ``nn.Embedding``,
    ``positions`` a module of :mod:`course_utils.positional`), or with :meth:`build`. Sub-modules:
    ``table``, ``positions``.
    """

    def __init__(self, table: nn.Embedding, positions: nn.Module, scale: bool = True, dropout: float = 0.0):
        super().__init__()
        self.table, self.positions = table, positions
        self.scale = math.sqrt(table.embedding_dim) if scale else None
        self.dropout = _dropout(dropout)

    @classmethod
    def build(cls, vocab_size: int, d_model: int, positions: str = "learned", max_len: int = 512,
              init_std: float | None = None, scale: bool = True, dropout: float = 0.0) -> TokenEmbedding:
        """A table of ``vocab_size`` vectors drawn from ``N(0, init_std^2)`` (default
        ``1 / d_model``, so that times ``sqrt(d_model)`` the entries have unit variance) and the
        positions named by ``positions`` (:func:`course_utils.positional.positional_embedding`)."""
        table = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(table.weight, std=d_model ** -0.5 if init_std is None else init_std)
        return cls(table, positional_embedding(positions, d_model, max_len), scale, dropout)

    @property
    def weight(self) -> torch.Tensor:
        """The table's ``(vocab_size, d_model)`` matrix (an output layer may share it)."""
        return self.table.weight

    def forward(self, tokens: torch.Tensor, offset: int = 0) -> torch.Tensor:
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point() \
                or tokens.dtype == torch.bool:
            raise ValueError(f"tokens must be a (batch, L) tensor of integer ids, got "
                             f"{tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__}"
                             f"{' of ' + str(tokens.dtype) if isinstance(tokens, torch.Tensor) else ''}")
        x = self.table(tokens)
        if self.scale is not None:
            x = x * self.scale
        return self.dropout(self.positions(x, offset))
