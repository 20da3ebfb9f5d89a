"""The Transformer encoder-decoder (Vaswani et al., 2017), composed of :mod:`course_utils.blocks`.

* :class:`Seq2SeqTransformer`: a :class:`~course_utils.blocks.TokenEmbedding` and an encoder
  :class:`~course_utils.blocks.TransformerStack` for the source, the same for the target with
  cross-attention in every block, and a linear output layer. ``norm_first=False`` is Post-LN (the
  paper: ``x = norm(x + sublayer(x))``), ``True`` Pre-LN (``x = x + sublayer(norm(x))``). It follows
  the protocol of chapters 1-2's models (``forward(src, src_lengths, tgt_in) -> logits``,
  ``encode``, ``decode_step``), so that :func:`course_utils.train.train_seq2seq`,
  :func:`course_utils.train.evaluate` and :mod:`course_utils.decoding` work on it unchanged;
* :func:`decoder_self_mask`, the decoder's causal-and-padding mask for teacher forcing;
* ``noam_lr``, the warmup schedule of the paper (§5.3): :func:`course_utils.train.noam_lr`, kept with the
  course's other schedules and found here too (chapter 6 names it ``T.noam_lr``, its exercise's reference);
* :func:`from_torch` copies the weights of an ``nn.Transformer`` into a
  :class:`Seq2SeqTransformer`, :func:`copy_torch_layer` those of one PyTorch layer into a
  :class:`~course_utils.blocks.TransformerBlock` (the unit tests show both give the same outputs).

(The positional encodings are in :mod:`course_utils.positional`, the block and the stack in
:mod:`course_utils.blocks`.)

Masks follow the course's convention: a boolean mask is True where a query *may attend*
(``nn.Transformer``'s boolean masks mean the opposite: True = blocked). Shapes are batch-first:
``(batch, seq, d_model)``; attention weights ``(batch, heads, L_q, L_k)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
from torch import nn

from ._validate import check_config, check_int
from .attention import causal_mask, key_padding_mask
from .blocks import BlockConfig, TokenEmbedding, TransformerBlock, TransformerStack
from .data import PAD_ID
from .kvcache import CacheSwitch, DecoderCache
from .multihead import copy_from_torch
from .positional import positional_embedding
from .train import noam_lr  # noqa: F401  (train's; chapter 6 calls it T.noam_lr)

__all__ = [
    "SEQ2SEQ_POSITIONS", "Seq2SeqAttention", "Seq2SeqConfig", "Seq2SeqTransformer", "TransformerFromParts",
    "copy_torch_layer",
    "decoder_self_mask", "from_torch",
]

#: The positional encodings :class:`Seq2SeqTransformer` takes (added to both embeddings).
SEQ2SEQ_POSITIONS = ("sinusoidal", "learned", "none")

def decoder_self_mask(tgt_in: torch.Tensor, pad_id: int = PAD_ID) -> torch.Tensor:
    """The decoder's self-attention mask for teacher forcing, ``(batch, 1, T, T)``.

    Position i may attend to key j when j <= i (causal) *and* key j is not padding.
    """
    T = tgt_in.shape[1]
    keys = (tgt_in != pad_id)[:, None, None, :]                    # (batch, 1, 1, T)
    return keys & causal_mask(T, device=tgt_in.device)             # (batch, 1, T, T)


class Seq2SeqAttention(NamedTuple):
    """The attention weights of one teacher-forced pass of :class:`Seq2SeqTransformer`, one
    ``(batch, heads, L_q, L_k)`` tensor per layer in each list."""

    encoder: list
    decoder_self: list
    cross: list


@dataclass
class Seq2SeqConfig(BlockConfig):
    """A :class:`~course_utils.blocks.BlockConfig` (every block's sizes and switches: ``d_model``,
    ``n_heads``, ``d_ff``, ``n_kv_heads`` (GQA/MQA, chapter 4), ``dropout``, ``norm_first``: False =
    Post-LN, the paper, True = Pre-LN) and the encoder-decoder around the blocks:

    * ``src_vocab``, ``tgt_vocab``: vocabulary sizes; ``n_layers``: layers per stack (encoder and decoder);
    * ``final_norm``: a norm after each stack (``None``: ``norm_first``; Pre-LN needs it, since its
      residual stream is never normalised; ``nn.Transformer`` always has it);
    * ``positions``: ``"sinusoidal"``, ``"learned"`` or ``"none"``; ``max_len``: the longest sequence
      the positional encodings cover;
    * ``share_layers``: one encoder block and one decoder block applied ``n_layers`` times
      (cross-layer weight sharing, as in the Universal Transformer and ALBERT);
    * ``pad_id``: the padding id of the target (for :func:`decoder_self_mask`);
    * ``use_cache``: ``decode_step`` keeps key/value caches (True) or recomputes the whole prefix at
      every step (False); both give the same result.

    Dropout (0 by default: the course's tasks are small and generated fresh) is on attention
    weights, sublayer outputs and embeddings. Widths are properties, so ``dataclasses.replace`` is
    always right.
    """

    src_vocab: int = 1
    tgt_vocab: int = 1
    n_layers: int = 2
    final_norm: bool | None = None
    positions: str = "sinusoidal"
    share_layers: bool = False
    max_len: int = 256
    pad_id: int = PAD_ID
    use_cache: bool = True

    def __post_init__(self):
        super().__post_init__()
        for name in ("src_vocab", "tgt_vocab", "n_layers", "max_len"):
            check_int(getattr(self, name), name, 1)
        if self.positions not in SEQ2SEQ_POSITIONS:
            raise ValueError(f"positions must be one of {SEQ2SEQ_POSITIONS}, got {self.positions!r}")
        if self.rope or self.cross_attention:
            raise ValueError("a Seq2SeqConfig sets positions with positions= and gives the decoder its "
                             "cross-attention itself: rope and cross_attention stay False")

    @classmethod
    def paper(cls, src_vocab: int, tgt_vocab: int, **changes) -> Seq2SeqConfig:
        """The base model of Vaswani et al. (2017, §6.1, Table 3): N = 6 layers per stack, d_model = 512,
        d_ff = 2048, h = 8 heads, dropout 0.1, Post-LN, sinusoidal positions; ``changes``: any other
        field (the course's experiments are far smaller: ``Seq2SeqConfig(...)`` with its defaults)."""
        preset = dict(n_layers=6, d_model=512, d_ff=2048, n_heads=8, dropout=0.1, norm_first=False,
                      positions="sinusoidal")
        return cls(**{"src_vocab": src_vocab, "tgt_vocab": tgt_vocab, **preset, **changes})


class Seq2SeqTransformer(CacheSwitch, nn.Module):
    """An encoder-decoder Transformer with the decoding protocol of :mod:`course_utils.decoding`.

    ``Seq2SeqTransformer(cfg)``, ``cfg`` a :class:`Seq2SeqConfig` (``Seq2SeqConfig(src_vocab=12,
    tgt_vocab=12, d_model=64, n_layers=1)``, or the paper's :meth:`Seq2SeqConfig.paper`); the config
    is ``model.cfg``, its fields are read there (``model.cfg.d_model``), and ``use_cache`` may be
    switched on the model.

    Sub-modules: ``src_embed`` and ``tgt_embed`` (:class:`~course_utils.blocks.TokenEmbedding`),
    ``encoder`` and ``decoder`` (:class:`~course_utils.blocks.TransformerStack`; the decoder's
    blocks have cross-attention), ``out`` (``nn.Linear(d_model, tgt_vocab)``).
    """

    def __init__(self, cfg: Seq2SeqConfig):
        super().__init__()
        self.cfg = check_config(cfg, Seq2SeqConfig, "Seq2SeqTransformer",
                                "Seq2SeqTransformer(Seq2SeqConfig(src_vocab=..., tgt_vocab=..., d_model=...))")
        # Both token tables are drawn before either is redrawn from N(0, 1/d_model) (times sqrt(d_model):
        # unit entries), then the positions: the order of chapter 6's seeded models, kept so that its
        # numbers hold.
        tables = [nn.Embedding(vocab, cfg.d_model) for vocab in (cfg.src_vocab, cfg.tgt_vocab)]
        for table in tables:
            nn.init.normal_(table.weight, std=cfg.d_model ** -0.5)
        self.src_embed, self.tgt_embed = (
            TokenEmbedding(table, positional_embedding(cfg.positions, cfg.d_model, cfg.max_len), dropout=cfg.dropout)
            for table in tables)
        block = cfg.block_config()
        self.encoder = TransformerStack(block, cfg.n_layers, cfg.final_norm, cfg.share_layers)
        self.decoder = TransformerStack(replace(block, cross_attention=True), cfg.n_layers, cfg.final_norm,
                                        cfg.share_layers)
        self.out = nn.Linear(cfg.d_model, cfg.tgt_vocab)

    # --- the two stacks -----------------------------------------------------------------
    def embed_src(self, src: torch.Tensor) -> torch.Tensor:
        """``(batch, S)`` ids -> ``(batch, S, d_model)``: embedding * sqrt(d_model) + positions."""
        return self.src_embed(src)

    def embed_tgt(self, tgt: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """``(batch, T)`` ids at positions ``offset, offset + 1, ...`` -> ``(batch, T, d_model)``."""
        return self.tgt_embed(tgt, offset)

    def run_encoder(self, src: torch.Tensor, src_lengths: torch.Tensor, need_weights: bool = False):
        """Returns ``(memory (batch, S, d_model), memory_mask (batch, 1, 1, S), weights per layer)``."""
        mask = key_padding_mask(src_lengths.to(src.device), src.shape[1])   # (batch, 1, 1, S)
        memory, weights, _ = self.encoder(self.embed_src(src), mask=mask, need_weights=need_weights)
        return memory, mask, weights

    def run_decoder(self, y: torch.Tensor, memory: torch.Tensor | None, memory_mask: torch.Tensor,
                    self_mask: torch.Tensor | None = None, caches=None, cross_caches=None, need_weights: bool = False):
        """The decoder stack on embedded targets ``y (batch, T, d_model)``, causal, over ``memory``.

        ``self_mask``: the target's padding, e.g. ``(batch, 1, 1, T)`` (the causal part is added
        here); ``caches`` and ``cross_caches``: one KVCache per layer each, or ``None``. Returns
        ``(logits (batch, T, V), self weights per layer, cross weights per layer)``."""
        y, w_self, w_cross = self.decoder(y, mask=self_mask, caches=caches, causal=True, memory=memory,
                                          memory_mask=memory_mask, cross_caches=cross_caches,
                                          need_weights=need_weights)
        return self.out(y), w_self, w_cross

    def _teacher_forced(self, src, src_lengths, tgt_in, need_weights: bool):
        memory, memory_mask, w_enc = self.run_encoder(src, src_lengths, need_weights=need_weights)
        target_keys = (tgt_in != self.cfg.pad_id)[:, None, None, :]                 # (batch, 1, 1, T)
        logits, w_self, w_cross = self.run_decoder(self.embed_tgt(tgt_in), memory, memory_mask,
                                                   self_mask=target_keys, need_weights=need_weights)
        return logits, Seq2SeqAttention(w_enc, w_self, w_cross)

    # --- the protocol of chapters 1-2 ------------------------------------------------------
    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: ``src (batch, S)``, ``src_lengths (batch,)``, ``tgt_in (batch, T)``
        (``<sos>`` y_1 ... y_{T-1}) -> logits ``(batch, T, tgt_vocab)``. The decoder's
        self-attention is causal and skips target padding (:func:`decoder_self_mask`)."""
        return self._teacher_forced(src, src_lengths, tgt_in, need_weights=False)[0]

    def forward_with_weights(self, src: torch.Tensor, src_lengths: torch.Tensor,
                             tgt_in: torch.Tensor) -> tuple[torch.Tensor, Seq2SeqAttention]:
        """As :meth:`forward`, and the attention weights: ``(logits, Seq2SeqAttention(encoder,
        decoder_self, cross))``, each a list of ``(batch, heads, ·, ·)`` tensors, one per layer."""
        return self._teacher_forced(src, src_lengths, tgt_in, need_weights=True)

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> dict:
        """The initial decoding state: ``memory (batch, S, d_model)``, ``memory_mask`` and ``cache``, an
        empty :class:`~course_utils.kvcache.DecoderCache`: with ``use_cache``, one self-attention and
        one cross-attention :class:`~course_utils.kvcache.KVCache` per decoder layer (``cache.layers``,
        ``cache.cross``), else the target tokens fed so far (``cache.tokens``)."""
        memory, memory_mask, _ = self.run_encoder(src, src_lengths)
        cache = DecoderCache(len(self.decoder.layers), src.shape[0], src.device, cache_kv=self.cfg.use_cache, cross=True)
        return {"memory": memory, "memory_mask": memory_mask, "cache": cache}

    def decode_step(self, prev_tokens: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
        """Feed ``prev_tokens (batch,)``; return ``(log_probs (batch, tgt_vocab), new state)``.

        With caches, only the new position runs through the decoder: its keys and values are
        appended to each layer's self-attention cache, and the cross-attention keys and values
        of the memory are computed at the first step and reused afterwards. The caches are
        advanced in place, so the state passed in must not be stepped again (it raises *stepped
        already*; beam search steps :func:`~course_utils.decoding.index_state` copies). Without
        caches, the whole prefix is recomputed.
        """
        cache = state["cache"].fork()
        t = cache.feed(prev_tokens[:, None])
        if cache.layers is not None:
            # The memory is passed at every step, but the cross-attention caches compute its
            # keys and values only when they are empty (the first step) and reuse them after.
            logits, _, _ = self.run_decoder(self.embed_tgt(prev_tokens[:, None], offset=t), state["memory"],
                                            state["memory_mask"], caches=cache.layers, cross_caches=cache.cross)
        else:
            logits, _, _ = self.run_decoder(self.embed_tgt(cache.tokens), state["memory"], state["memory_mask"])
        return torch.log_softmax(logits[:, -1], dim=-1), {**state, "cache": cache}


def copy_torch_layer(ours: TransformerBlock,
                     theirs: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer) -> None:
    """Load an ``nn.TransformerEncoderLayer`` into a :class:`~course_utils.blocks.TransformerBlock`
    without cross-attention, or an ``nn.TransformerDecoderLayer`` into one with it (ReLU activation)."""
    decoder = isinstance(theirs, nn.TransformerDecoderLayer)
    if decoder != (ours.cross_attn is not None):
        raise ValueError(f"a {type(theirs).__name__} goes into a block "
                         f"{'with' if decoder else 'without'} cross-attention")
    copy_from_torch(ours.self_attn, theirs.self_attn)
    if decoder:
        copy_from_torch(ours.cross_attn, theirs.multihead_attn)
    ours.ff.linear1.load_state_dict(theirs.linear1.state_dict())
    ours.ff.linear2.load_state_dict(theirs.linear2.state_dict())
    for name in ("norm1", "norm2", "norm3") if decoder else ("norm1", "norm2"):
        getattr(ours, name).load_state_dict(getattr(theirs, name).state_dict())


def from_torch(reference: nn.Transformer, src_vocab: int = 1, tgt_vocab: int = 1, **kwargs) -> Seq2SeqTransformer:
    """A :class:`Seq2SeqTransformer` whose encoder and decoder layers, final norms and widths
    are copied from ``reference`` (an ``nn.Transformer`` with ``batch_first=True`` and a ReLU
    activation). Embeddings and the output layer are the course model's own (``nn.Transformer``
    has none). ``kwargs``: other fields of its :class:`Seq2SeqConfig` (e.g. ``positions``)."""
    enc0 = reference.encoder.layers[0]
    if len(reference.decoder.layers) != len(reference.encoder.layers):
        raise ValueError("from_torch needs as many decoder layers as encoder layers")
    model = Seq2SeqTransformer(Seq2SeqConfig(
        src_vocab=src_vocab, tgt_vocab=tgt_vocab, d_model=enc0.self_attn.embed_dim, n_heads=enc0.self_attn.num_heads,
        n_layers=len(reference.encoder.layers), d_ff=enc0.linear1.out_features, norm_first=enc0.norm_first,
        final_norm=True, **kwargs))
    for ours, theirs in zip(model.encoder.layers, reference.encoder.layers):
        copy_torch_layer(ours, theirs)
    for ours, theirs in zip(model.decoder.layers, reference.decoder.layers):
        copy_torch_layer(ours, theirs)
    model.encoder.norm.load_state_dict(reference.encoder.norm.state_dict())
    model.decoder.norm.load_state_dict(reference.decoder.norm.state_dict())
    return model


class TransformerFromParts(nn.Module):
    """The teacher-forced pass of ``model`` (a :class:`Seq2SeqTransformer`, whose weights are shared,
    not copied) computed by other layer functions: ``encoder_layer(layer, x, mask)`` for every encoder
    block and ``decoder_layer(layer, y, memory, memory_mask)`` (causal) for every decoder block,
    chapter 6's exercises 2 and 4 (the chapter passes the learner's once they pass a probe).

    ``forward(src, src_lengths, tgt_in)`` -> logits ``(batch, T, tgt_vocab)``, as the model's at every
    real target position (a right-padded target's padding is after every real query, so the causal
    mask alone keeps it out; the padded positions' logits are not scored). Training through it
    trains ``model``; decode with ``model`` itself."""

    def __init__(self, model: Seq2SeqTransformer, encoder_layer, decoder_layer):
        super().__init__()
        if not isinstance(model, Seq2SeqTransformer):
            raise TypeError(f"model must be a Seq2SeqTransformer, got {type(model).__name__}")
        self.model, self.encoder_layer, self.decoder_layer = model, encoder_layer, decoder_layer

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        m = self.model
        mask = key_padding_mask(src_lengths.to(src.device), src.shape[1])     # (batch, 1, 1, S)
        memory = m.embed_src(src)
        for layer in m.encoder.layers:
            memory = self.encoder_layer(layer, memory, mask)
        memory = m.encoder.norm(memory)
        y = m.embed_tgt(tgt_in)
        for layer in m.decoder.layers:
            y = self.decoder_layer(layer, y, memory, mask)
        return m.out(m.decoder.norm(y))
