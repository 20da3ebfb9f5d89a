"""The course's one decoder-only language model, GPT-style and LLaMA-style (chapters 7 and 8).

As nanoGPT has one ``GPT``, the course has one :class:`DecoderLM`, built from an :class:`LMConfig`:

* :meth:`LMConfig.gpt`: chapter 7's GPT-style model: learned positions added to the scaled token
  embedding, LayerNorm, a ReLU or GELU feed-forward, biases, optional tied weights, padding keys
  masked in teacher forcing, prefix-LM masks.
* :meth:`LMConfig.llama`: chapter 8's LLaMA-style model: RMSNorm, SwiGLU, RoPE inside attention
  (angles computed once per forward by the stack), grouped-query attention, a final norm, no biases,
  an unscaled ``N(0, 0.02^2)`` embedding. Each part can be swapped back for the ablations
  (``norm="layer"``, ``ffn="relu"``, ``positions="learned"|"sinusoidal"``, ``n_kv_heads=n_heads``).

The model is a composition of the course's parts: ``embed``
(:class:`~course_utils.blocks.TokenEmbedding`), ``stack``
(:class:`~course_utils.blocks.TransformerStack`: ``stack.layers``, ``stack.norm``) and ``lm_head``.
Its decoding state is one :class:`~course_utils.kvcache.DecoderCache` (one
:class:`~course_utils.kvcache.KVCache` per layer, and its length), and it follows the decoding
protocol of :mod:`course_utils.decoding`::

    cache = lm.init_state(batch)                        # or lm.prefill(prompt[:, :-1])
    log_probs, cache = lm.decode_step(prev_tokens, cache)
    greedy_decode(lm, lm.init_state(B), max_len, prompt=prompt)   # its prefill: one pass

Shapes: tokens ``(batch, T)``, logits ``(batch, T, vocab_size)``, masks ``(T, T)`` or
``(batch, 1, T, T)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ._validate import check_config, check_int
from .attention import causal_mask, combine_masks, prefix_lm_mask
from .blocks import BlockConfig, TokenEmbedding, TransformerStack
from .data import PAD_ID
from .kvcache import CacheSwitch, DecoderCache
from .positional import POSITIONAL

__all__ = ["DecoderLM", "LMConfig"]


@dataclass
class LMConfig(BlockConfig):
    """A :class:`~course_utils.blocks.BlockConfig` (every block's sizes and switches) and the language
    model around the blocks. Build it with :meth:`gpt` or :meth:`llama`.

    ``positions``: ``"learned"``, ``"sinusoidal"`` (added to the embeddings), ``"rope"`` (rotated
    into queries and keys: the blocks get ``rope=True``; set ``positions``, never ``rope``) or
    ``"none"``. ``tie_weights``: ``lm_head`` shares the token embedding's matrix. ``pad_id``: keys
    holding it are masked in teacher forcing (``None``: no padding mask). ``final_norm``: a norm
    after the last block (``None``: ``norm_first``). ``head_bias``: ``lm_head`` has a bias (never
    when tied). ``embed_std``: the embedding's initial standard deviation (``None``: ``d_model **
    -0.5``); ``embed_scale``: multiply the embedding by ``sqrt(d_model)``. ``use_cache``: the decoding
    state caches keys and values (or the model recomputes the whole prefix at every step).
    Widths are the properties :attr:`ff_width` and :attr:`kv_heads`, so ``dataclasses.replace`` is
    always right.
    """

    vocab_size: int = 256
    n_layers: int = 2
    max_len: int = 128
    positions: str = "learned"
    tie_weights: bool = False
    pad_id: int | None = PAD_ID
    final_norm: bool | None = None
    head_bias: bool = True
    embed_std: float | None = None
    embed_scale: bool = True
    use_cache: bool = True

    def __post_init__(self):
        super().__post_init__()
        check_int(self.vocab_size, "vocab_size", 1)
        check_int(self.n_layers, "n_layers", 1)
        check_int(self.max_len, "max_len", 1)
        if self.positions not in POSITIONAL:
            raise ValueError(f"positions must be one of {POSITIONAL}, got {self.positions!r}")
        if self.rope:
            raise ValueError("an LMConfig switches RoPE with positions='rope', not rope=True")
        if self.positions == "rope" and (self.d_model // self.n_heads) % 2:
            raise ValueError(f"RoPE rotates pairs of features: d_head = {self.d_model // self.n_heads} must be even")

    @property
    def block(self) -> BlockConfig:
        """The :class:`~course_utils.blocks.BlockConfig` of every block (``rope`` from ``positions``)."""
        return self.block_config(rope=self.positions == "rope")

    @classmethod
    def gpt(cls, vocab_size: int, **changes) -> LMConfig:
        """Chapter 7's GPT-style model: Pre-LN (``norm_first=True``), LayerNorm, ReLU (``ffn="gelu"``
        as GPT-2), learned positions, biases, padding keys masked; ``changes``: any other field."""
        return cls(**{"vocab_size": vocab_size, "norm_first": True, **changes})

    @classmethod
    def llama(cls, vocab_size: int = 256, **changes) -> LMConfig:
        """Chapter 8's LLaMA-style model: RMSNorm (eps 1e-6), SwiGLU, RoPE, no biases, a final norm,
        an unscaled ``N(0, 0.02^2)`` embedding, no padding mask, ``max_len`` 512 (the
        learned/sinusoidal ablations' tables and the cache's first allocation; RoPE has no limit)."""
        preset = dict(norm_first=True, norm="rms", ffn="swiglu", eps=1e-6, attention_bias=False, positions="rope",
                      max_len=512, pad_id=None, final_norm=True, head_bias=False, embed_std=0.02, embed_scale=False)
        return cls(**{"vocab_size": vocab_size, **preset, **changes})


class DecoderLM(CacheSwitch, nn.Module):
    """A decoder-only language model: ``tokens (batch, T)`` -> next-token logits ``(batch, T, vocab)``.

    Sub-modules: ``embed`` (:class:`~course_utils.blocks.TokenEmbedding`), ``stack``
    (:class:`~course_utils.blocks.TransformerStack`) and ``lm_head`` (``nn.Linear``). ``use_cache``
    (from the config, may be switched on the model): :meth:`init_state` caches keys and values,
    or keeps the tokens and recomputes the whole prefix at every step (the same result, slower).
    """

    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.cfg = check_config(cfg, LMConfig, "DecoderLM", "DecoderLM(LMConfig.gpt(vocab_size, ...)) or "
                                "DecoderLM(LMConfig.llama(...))")
        self.embed = TokenEmbedding.build(cfg.vocab_size, cfg.d_model, cfg.positions, cfg.max_len,
                                          init_std=cfg.embed_std, scale=cfg.embed_scale, dropout=cfg.dropout)
        self.stack = TransformerStack(cfg.block, cfg.n_layers, final_norm=cfg.final_norm)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.head_bias and not cfg.tie_weights)
        if cfg.tie_weights:
            self.lm_head.weight = self.embed.table.weight

    @property
    def layers(self) -> nn.ModuleList:
        """The blocks, ``stack.layers``."""
        return self.stack.layers

    # --- teacher forcing ---------------------------------------------------------------------

    def _teacher_forced(self, tokens: torch.Tensor, prefix_len, need_weights: bool):
        T = tokens.shape[1]
        mask = causal_mask(T, device=tokens.device) if prefix_len is None else \
            prefix_lm_mask(T, prefix_len, device=tokens.device)
        if self.cfg.pad_id is not None:
            mask = combine_masks((tokens != self.cfg.pad_id)[:, None, None, :], mask)   # (batch, 1, T, T)
        x, weights, _ = self.stack(self.embed(tokens), mask=mask, need_weights=need_weights)
        return self.lm_head(x), weights

    def forward(self, tokens: torch.Tensor, prefix_len: int | torch.Tensor | None = None,
                cache: DecoderCache | None = None) -> torch.Tensor:
        """Teacher forcing: ``tokens (batch, T)`` -> logits ``(batch, T, vocab)``, position t
        predicting token t + 1. Keys holding ``pad_id`` are masked (pad at the end of a sequence).

        ``prefix_len`` (an int, or ``(batch,)`` ints): a *prefix LM* (Raffel et al. 2020, §3.2):
        the first ``prefix_len`` positions attend to each other bidirectionally, the rest causally
        (:func:`~course_utils.attention.prefix_lm_mask`); ``None`` (default) is the causal mask.
        Train a prefix LM only on targets after the prefix: a prefix position sees the tokens it
        would predict.

        ``cache`` (a :class:`~course_utils.kvcache.DecoderCache` from :meth:`init_state`): the tokens
        follow the positions cached, only they run, and the cache grows in place (no padding mask:
        everything fed while decoding is a real token)."""
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point() \
                or tokens.dtype == torch.bool:
            raise ValueError(f"tokens must be a (batch, T) tensor of int64 ids, got "
                             f"{tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__}")
        if isinstance(prefix_len, (list, DecoderCache)):
            raise TypeError("a cache goes in cache=..., the second argument is prefix_len")
        if cache is None:
            return self._teacher_forced(tokens, prefix_len, need_weights=False)[0]
        if prefix_len is not None:
            raise ValueError("with a cache, feed a bidirectional prefix with prefill(prompt, bidirectional=True)")
        return self._extend(tokens, cache)

    def forward_with_weights(self, tokens: torch.Tensor, prefix_len: int | torch.Tensor | None = None):
        """As :meth:`forward`, and the attention weights: ``(logits, [(batch, heads, T, T) per layer])``."""
        return self._teacher_forced(tokens, prefix_len, need_weights=True)

    # --- decoding ------------------------------------------------------------------------------

    def _extend(self, new: torch.Tensor, cache: DecoderCache, prefix: bool = False) -> torch.Tensor:
        """Feed ``new (batch, T_new)`` after the positions of ``cache`` (which grows in place); the
        logits of the new positions ``(batch, T_new, V)``."""
        t0 = cache.feed(new, prefix=prefix)
        if cache.layers is None:                  # recompute the whole prefix, a prefix LM's prefix included
            T = cache.tokens.shape[1]
            x = self.stack(self.embed(cache.tokens), mask=prefix_lm_mask(T, cache.prefix_len, device=new.device)).x
            return self.lm_head(x[:, -new.shape[1]:])
        return self.lm_head(self.stack(self.embed(new, offset=t0), mask=self._cached_mask(new, t0, cache),
                                       caches=cache.layers).x)

    @staticmethod
    def _cached_mask(new: torch.Tensor, t0: int, cache: DecoderCache) -> torch.Tensor | None:
        """The mask of ``new (batch, T_new)`` fed after ``t0`` cached positions, ``(T_new, T_k)``: causal,
        the new queries being the last positions, and a prefix LM's prefix seen by every query. One new
        token (a decoding step) sees every cached position: no mask (``None``) to build or check."""
        if new.shape[1] == 1:
            return None
        T_k = t0 + new.shape[1]
        mask = causal_mask(T_k - t0, T_k, device=new.device)
        if cache.prefix_len:   # a prefix LM's prefix, fed as the first chunk: its keys are seen by every query
            mask = mask | (torch.arange(T_k, device=new.device) < cache.prefix_len)[None, :]
        return mask

    def init_state(self, batch: int, device=None) -> DecoderCache:
        """An empty :class:`~course_utils.kvcache.DecoderCache`: with ``use_cache`` one
        :class:`~course_utils.kvcache.KVCache` per layer (preallocated for ``max_len`` positions),
        without it the tokens fed."""
        return DecoderCache(len(self.layers), batch, device, max_len=self.cfg.max_len, cache_kv=self.cfg.use_cache)

    @torch.no_grad()
    def prefill(self, prompt: torch.Tensor, state: DecoderCache | None = None,
                bidirectional: bool = False) -> DecoderCache:
        """Run the prompt ``(batch, P)`` through the model in one pass; returns the cache after it
        (the state passed in is not to be stepped again). The same state as feeding the prompt to
        :meth:`decode_step` one token at a time (:func:`course_utils.decoding.prefill`).

        ``bidirectional=True`` (a prefix LM, ``forward(..., prefix_len=P)``): the prompt is the
        prefix, its positions see each other; every later token attends causally. Only for a fresh
        state (the prefix must be fed in one piece)."""
        state = self.init_state(prompt.shape[0], prompt.device) if state is None else state
        if prompt.shape[1] == 0:
            return state
        state = state.fork()
        self._extend(prompt, state, prefix=bidirectional)
        return state

    def decode_step(self, prev_tokens: torch.Tensor, state: DecoderCache) -> tuple[torch.Tensor, DecoderCache]:
        """Feed ``prev_tokens (batch,)``; return ``(log_probs (batch, vocab), the next state)``. The
        layers' caches advance in place: step the state returned, never the one passed in again
        (it raises), and branch with :func:`course_utils.decoding.index_state` copies."""
        state = state.fork()
        logits = self._extend(prev_tokens[:, None], state)
        return torch.log_softmax(logits[:, -1], dim=-1, dtype=torch.float32), state
