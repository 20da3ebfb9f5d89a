"""The Transformer encoder-decoder (Vaswani et al., 2017), built on chapter 4's attention.

Pieces, each small enough to read in one go:

* positional encodings: :func:`sinusoidal_encoding` (the paper's table) and the modules
  :class:`SinusoidalPositions` and :class:`LearnedPositions`;
* :class:`FeedForward`, the position-wise two-layer network;
* :class:`EncoderLayer` and :class:`DecoderLayer`, with ``norm_first=False`` (Post-LN, the
  paper: ``x = norm(x + sublayer(x))``) or ``True`` (Pre-LN: ``x = x + sublayer(norm(x))``);
* :class:`Seq2SeqTransformer`, which follows the protocol of chapters 1-2's models
  (``forward(src, src_lengths, tgt_in) -> logits``, ``encode``, ``decode_step``), so that
  :func:`course_utils.train.train_seq2seq`, :func:`course_utils.train.evaluate` and
  :mod:`course_utils.decoding` work on it unchanged;
* :func:`noam_lr`, the warmup schedule of the paper (§5.3);
* :func:`from_torch` copies the weights of an ``nn.Transformer`` into a
  :class:`Seq2SeqTransformer`, :func:`copy_torch_layer` those of one PyTorch layer (the unit
  tests show both give the same outputs).

Masks follow the course's convention: a boolean mask is True where a query *may attend*
(``nn.Transformer``'s boolean masks mean the opposite: True = blocked). Shapes are batch-first:
``(batch, seq, d_model)``; attention weights ``(batch, heads, L_q, L_k)``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .attention import KVCache, MultiHeadAttention, causal_mask, padding_mask
from .data import PAD_ID

__all__ = [
    "DecoderLayer", "EncoderLayer", "FeedForward", "LearnedPositions", "POSITIONAL", "Seq2SeqTransformer",
    "SinusoidalPositions", "copy_torch_attention", "copy_torch_layer", "decoder_self_mask", "from_torch", "noam_lr",
    "sinusoidal_encoding",
]

#: The kinds of positional information :class:`Seq2SeqTransformer` accepts.
POSITIONAL = ("sinusoidal", "learned", "none")


def sinusoidal_encoding(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The sinusoidal table of Vaswani et al. (2017, §3.5), ``(max_len, d_model)``.

    ``PE[pos, 2i] = sin(pos / base^(2i / d_model))`` and ``PE[pos, 2i + 1] = cos(...)`` of the
    same angle. ``d_model`` must be even (each frequency fills a sine and a cosine column).
    """
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 0:
        raise ValueError(f"max_len must be an int >= 0, got {max_len!r}")
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model <= 0 or d_model % 2:
        raise ValueError(f"d_model must be a positive even int (sine and cosine columns pair up), got {d_model!r}")
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


class _NoPositions(nn.Module):
    """No positional information at all (the control experiment)."""

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return x


def _positions(kind: str, d_model: int, max_len: int) -> nn.Module:
    if kind == "sinusoidal":
        return SinusoidalPositions(d_model, max_len)
    if kind == "learned":
        return LearnedPositions(d_model, max_len)
    if kind == "none":
        return _NoPositions()
    raise ValueError(f"positional must be one of {POSITIONAL}, got {kind!r}")


class FeedForward(nn.Module):
    """``linear2(dropout(relu(linear1(x))))``, applied to every position alone: ``(..., d_model)``."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))


class EncoderLayer(nn.Module):
    """Self-attention, add & norm, feed-forward, add & norm (seed 001's encoder block).

    ``norm_first=False`` is the paper's Post-LN, ``x = norm(x + dropout(sublayer(x)))``;
    ``True`` is Pre-LN, ``x = x + dropout(sublayer(norm(x)))``.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = False, n_kv_heads: int | None = None):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, n_kv_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x ``(batch, S, d_model)``; mask bool ``(batch, 1, 1, S)`` (True = may attend).

        Returns ``(x (batch, S, d_model), weights (batch, heads, S, S) or None)``.
        """
        if self.norm_first:
            a, w = self.self_attn(self.norm1(x), mask=mask, need_weights=need_weights)
            x = x + self.dropout(a)
            x = x + self.dropout(self.ff(self.norm2(x)))
        else:
            a, w = self.self_attn(x, mask=mask, need_weights=need_weights)
            x = self.norm1(x + self.dropout(a))
            x = self.norm2(x + self.dropout(self.ff(x)))
        return x, w


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder output, feed-forward; each
    followed (Post-LN) or preceded (Pre-LN) by its layer norm, with a residual connection."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = False, n_kv_heads: int | None = None):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, n_kv_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, n_kv_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, y: torch.Tensor, memory: torch.Tensor | None, self_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, self_cache: KVCache | None = None,
                cross_cache: KVCache | None = None, need_weights: bool = False):
        """One decoder layer.

        Args:
            y: ``(batch, T, d_model)`` target states (with a cache: only the new positions).
            memory: ``(batch, S, d_model)`` encoder output; may be ``None`` once ``cross_cache``
                holds its keys and values.
            self_mask: bool, broadcastable to ``(batch, heads, T, T_total)``; the causal part
                is always added (aligned to the last positions, so it is right with a cache).
            memory_mask: bool ``(batch, 1, 1, S)``, the source padding.
            self_cache, cross_cache: :class:`course_utils.attention.KVCache` for decoding.
        Returns:
            ``(y (batch, T, d_model), self weights, cross weights)``, the weights
            ``(batch, heads, T, ·)`` or ``None`` unless ``need_weights``.
        """
        def self_block(h):
            return self.self_attn(h, mask=self_mask, cache=self_cache, causal=True, need_weights=need_weights)

        def cross_block(h):
            return self.cross_attn(h, context=memory, mask=memory_mask, cache=cross_cache,
                                   need_weights=need_weights)

        if self.norm_first:
            a, w_self = self_block(self.norm1(y))
            y = y + self.dropout(a)
            a, w_cross = cross_block(self.norm2(y))
            y = y + self.dropout(a)
            y = y + self.dropout(self.ff(self.norm3(y)))
        else:
            a, w_self = self_block(y)
            y = self.norm1(y + self.dropout(a))
            a, w_cross = cross_block(y)
            y = self.norm2(y + self.dropout(a))
            y = self.norm3(y + self.dropout(self.ff(y)))
        return y, w_self, w_cross


def decoder_self_mask(tgt_in: torch.Tensor, pad_id: int = PAD_ID) -> torch.Tensor:
    """The decoder's self-attention mask for teacher forcing, ``(batch, 1, T, T)``.

    Position i may attend to key j when j <= i (causal) *and* key j is not padding.
    """
    T = tgt_in.shape[1]
    keys = (tgt_in != pad_id)[:, None, None, :]                    # (batch, 1, 1, T)
    return keys & causal_mask(T, device=tgt_in.device)             # (batch, 1, T, T)


def noam_lr(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """The learning rate of Vaswani et al. (2017, §5.3) at ``step`` (counted from 1):
    ``factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``.

    It grows linearly for ``warmup`` steps, peaks at ``factor / sqrt(d_model * warmup)``, then
    decays as ``1 / sqrt(step)``.
    """
    if step < 1:
        raise ValueError(f"steps are counted from 1 (step 0 would divide by zero), got {step}")
    if warmup < 1:
        raise ValueError(f"warmup must be >= 1, got {warmup}")
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


class Seq2SeqTransformer(nn.Module):
    """An encoder-decoder Transformer with the decoding protocol of :mod:`course_utils.decoding`.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes.
        d_model, n_heads, n_layers, d_ff: width, heads per attention, layers per stack (encoder
            and decoder), hidden width of the feed-forward networks.
        dropout: on attention weights, sublayer outputs and embeddings (0 by default: the
            course's tasks are small and generated fresh).
        norm_first: False = Post-LN (the paper), True = Pre-LN.
        final_norm: a layer norm after each stack (default: ``norm_first``; Pre-LN needs it,
            since its residual stream is never normalised; ``nn.Transformer`` always has it).
        positional: ``"sinusoidal"``, ``"learned"`` or ``"none"``.
        share_layers: one encoder layer and one decoder layer applied ``n_layers`` times
            (cross-layer weight sharing, as in the Universal Transformer and ALBERT).
        n_kv_heads: fewer key/value heads (GQA/MQA, chapter 4); default ``n_heads``.
        max_len: the longest sequence the positional encodings cover.
        pad_id: the padding id of the target (for :func:`decoder_self_mask`).
        use_cache: ``decode_step`` keeps key/value caches (True) or recomputes the whole
            prefix at every step (False); both give the same result.
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, d_model: int = 64, n_heads: int = 4, n_layers: int = 2,
                 d_ff: int | None = None, dropout: float = 0.0, norm_first: bool = False,
                 final_norm: bool | None = None, positional: str = "sinusoidal", share_layers: bool = False,
                 n_kv_heads: int | None = None, max_len: int = 256, pad_id: int = PAD_ID, use_cache: bool = True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        d_ff = 4 * d_model if d_ff is None else d_ff
        final_norm = norm_first if final_norm is None else final_norm
        self.d_model, self.n_heads, self.n_layers, self.d_ff = d_model, n_heads, n_layers, d_ff
        self.norm_first, self.positional, self.share_layers = norm_first, positional, share_layers
        self.pad_id, self.use_cache = pad_id, use_cache
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        for emb in (self.src_embed, self.tgt_embed):   # N(0, 1/d_model): times sqrt(d_model) gives unit entries
            nn.init.normal_(emb.weight, std=d_model ** -0.5)
        self.src_pos = _positions(positional, d_model, max_len)
        self.tgt_pos = _positions(positional, d_model, max_len)
        self.dropout = nn.Dropout(dropout)
        args = (d_model, n_heads, d_ff, dropout, norm_first, n_kv_heads)
        if share_layers:
            enc, dec = EncoderLayer(*args), DecoderLayer(*args)
            self.encoder_layers = nn.ModuleList([enc] * n_layers)   # the same module n times
            self.decoder_layers = nn.ModuleList([dec] * n_layers)
        else:
            self.encoder_layers = nn.ModuleList(EncoderLayer(*args) for _ in range(n_layers))
            self.decoder_layers = nn.ModuleList(DecoderLayer(*args) for _ in range(n_layers))
        self.encoder_norm = nn.LayerNorm(d_model) if final_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d_model) if final_norm else nn.Identity()
        self.out = nn.Linear(d_model, tgt_vocab)

    # --- the two stacks -----------------------------------------------------------------
    def embed_src(self, src: torch.Tensor) -> torch.Tensor:
        """``(batch, S)`` ids -> ``(batch, S, d_model)``: embedding * sqrt(d_model) + positions."""
        return self.dropout(self.src_pos(self.src_embed(src) * math.sqrt(self.d_model)))

    def embed_tgt(self, tgt: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """``(batch, T)`` ids at positions ``offset, offset + 1, ...`` -> ``(batch, T, d_model)``."""
        return self.dropout(self.tgt_pos(self.tgt_embed(tgt) * math.sqrt(self.d_model), offset))

    def run_encoder(self, src: torch.Tensor, src_lengths: torch.Tensor, need_weights: bool = False):
        """Returns ``(memory (batch, S, d_model), memory_mask (batch, 1, 1, S), weights per layer)``."""
        mask = padding_mask(src_lengths.to(src.device), src.shape[1]).unsqueeze(1)   # (batch, 1, 1, S)
        x, weights = self.embed_src(src), []
        for layer in self.encoder_layers:
            x, w = layer(x, mask=mask, need_weights=need_weights)
            weights.append(w)
        return self.encoder_norm(x), mask, weights

    def run_decoder(self, y: torch.Tensor, memory: torch.Tensor | None, memory_mask: torch.Tensor,
                    self_mask: torch.Tensor | None = None, caches=None, need_weights: bool = False):
        """Decoder stack on embedded targets ``y (batch, T, d_model)``; ``caches`` a list of
        ``(self KVCache, cross KVCache)`` per layer or ``None``. Returns ``(logits (batch, T, V),
        self weights per layer, cross weights per layer)``."""
        w_self, w_cross = [], []
        for i, layer in enumerate(self.decoder_layers):
            sc, cc = caches[i] if caches is not None else (None, None)
            y, ws, wc = layer(y, memory, self_mask=self_mask, memory_mask=memory_mask, self_cache=sc,
                              cross_cache=cc, need_weights=need_weights)
            w_self.append(ws)
            w_cross.append(wc)
        return self.out(self.decoder_norm(y)), w_self, w_cross

    # --- the protocol of chapters 1-2 ------------------------------------------------------
    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor,
                return_attention: bool = False):
        """Teacher forcing: ``src (batch, S)``, ``src_lengths (batch,)``, ``tgt_in (batch, T)``
        (``<sos>`` y_1 ... y_{T-1}) -> logits ``(batch, T, tgt_vocab)``.

        With ``return_attention=True`` also a dict of per-layer weights ``(batch, heads, ·, ·)``:
        ``"encoder"``, ``"decoder_self"`` and ``"cross"``.
        """
        memory, memory_mask, w_enc = self.run_encoder(src, src_lengths, need_weights=return_attention)
        logits, w_self, w_cross = self.run_decoder(self.embed_tgt(tgt_in), memory, memory_mask,
                                                   self_mask=decoder_self_mask(tgt_in, self.pad_id),
                                                   need_weights=return_attention)
        if return_attention:
            return logits, {"encoder": w_enc, "decoder_self": w_self, "cross": w_cross}
        return logits

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> dict:
        """The initial decoding state: ``memory (batch, S, d_model)``, ``memory_mask``,
        ``tokens (batch, 0)`` (the prefix fed so far) and, with ``use_cache``, one pair of
        empty :class:`~course_utils.attention.KVCache` (self, cross) per decoder layer."""
        memory, memory_mask, _ = self.run_encoder(src, src_lengths)
        state = {"memory": memory, "memory_mask": memory_mask,
                 "tokens": torch.zeros(src.shape[0], 0, dtype=torch.long, device=src.device)}
        if self.use_cache:
            state["caches"] = [(KVCache(), KVCache()) for _ in self.decoder_layers]
        return state

    def decode_step(self, prev_tokens: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
        """Feed ``prev_tokens (batch,)``; return ``(log_probs (batch, tgt_vocab), new state)``.

        With caches, only the new position runs through the decoder: its keys and values are
        appended to each layer's self-attention cache, and the cross-attention keys and values
        of the memory are computed at the first step and reused afterwards. The caches are
        advanced in place. Without caches, the whole prefix is recomputed.
        """
        tokens = torch.cat([state["tokens"], prev_tokens[:, None]], dim=1)     # (batch, t + 1)
        t = tokens.shape[1] - 1
        if self.use_cache:
            # The memory is passed at every step, but the cross-attention caches compute its
            # keys and values only when they are empty (the first step) and reuse them after.
            logits, _, _ = self.run_decoder(self.embed_tgt(prev_tokens[:, None], offset=t), state["memory"],
                                            state["memory_mask"], caches=state["caches"])
        else:
            logits, _, _ = self.run_decoder(self.embed_tgt(tokens), state["memory"], state["memory_mask"])
        new_state = dict(state)
        new_state["tokens"] = tokens
        return torch.log_softmax(logits[:, -1], dim=-1), new_state


def copy_torch_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """Load an ``nn.MultiheadAttention``'s weights into a :class:`MultiHeadAttention` (PyTorch
    stacks W_Q, W_K, W_V in one ``in_proj_weight``)."""
    wq, wk, wv = theirs.in_proj_weight.detach().chunk(3)
    bq, bk, bv = theirs.in_proj_bias.detach().chunk(3)
    with torch.no_grad():
        for lin, w, b in ((ours.q_proj, wq, bq), (ours.k_proj, wk, bk), (ours.v_proj, wv, bv),
                          (ours.out_proj, theirs.out_proj.weight, theirs.out_proj.bias)):
            lin.weight.copy_(w)
            lin.bias.copy_(b)


def copy_torch_layer(ours: EncoderLayer | DecoderLayer,
                     theirs: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer) -> None:
    """Load an ``nn.TransformerEncoderLayer`` into an :class:`EncoderLayer`, or an
    ``nn.TransformerDecoderLayer`` into a :class:`DecoderLayer` (ReLU activation)."""
    copy_torch_attention(ours.self_attn, theirs.self_attn)
    if isinstance(ours, DecoderLayer):
        copy_torch_attention(ours.cross_attn, theirs.multihead_attn)
    ours.ff.linear1.load_state_dict(theirs.linear1.state_dict())
    ours.ff.linear2.load_state_dict(theirs.linear2.state_dict())
    for name in ("norm1", "norm2", "norm3") if isinstance(ours, DecoderLayer) else ("norm1", "norm2"):
        getattr(ours, name).load_state_dict(getattr(theirs, name).state_dict())


def from_torch(reference: nn.Transformer, src_vocab: int = 1, tgt_vocab: int = 1, **kwargs) -> Seq2SeqTransformer:
    """A :class:`Seq2SeqTransformer` whose encoder and decoder layers, final norms and widths
    are copied from ``reference`` (an ``nn.Transformer`` with ``batch_first=True`` and a ReLU
    activation). Embeddings and the output layer are the course model's own (``nn.Transformer``
    has none). ``kwargs`` go to :class:`Seq2SeqTransformer` (e.g. ``positional``)."""
    enc0 = reference.encoder.layers[0]
    if len(reference.decoder.layers) != len(reference.encoder.layers):
        raise ValueError("from_torch needs as many decoder layers as encoder layers")
    model = Seq2SeqTransformer(src_vocab, tgt_vocab, d_model=enc0.self_attn.embed_dim, n_heads=enc0.self_attn.num_heads,
                               n_layers=len(reference.encoder.layers), d_ff=enc0.linear1.out_features,
                               norm_first=enc0.norm_first, final_norm=True, **kwargs)
    for ours, theirs in zip(model.encoder_layers, reference.encoder.layers):
        copy_torch_layer(ours, theirs)
    for ours, theirs in zip(model.decoder_layers, reference.decoder.layers):
        copy_torch_layer(ours, theirs)
    model.encoder_norm.load_state_dict(reference.encoder.norm.state_dict())
    model.decoder_norm.load_state_dict(reference.decoder.norm.state_dict())
    return model
