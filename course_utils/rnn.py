"""Recurrent networks and the RNN encoder-decoder of chapter 1.

Reference implementations: :func:`rnn_forward` is the vanilla recurrence written out
(it equals ``nn.RNN`` with the same weights), :func:`gru_step` and :func:`lstm_step` are one
step of the gated cells written out (equal to ``nn.GRUCell`` and ``nn.LSTMCell``;
:func:`lstm_forward` runs :func:`lstm_step` over a sequence and equals ``nn.LSTM``),
:class:`Encoder`, :class:`Decoder` and :class:`Seq2Seq` are the chapter-1 model that later
chapters compare against; :func:`encode_padded` and :func:`decoder_step` are its two parts as chapter 1's
exercises 3 and 4 write them, and :class:`Seq2SeqFromParts` the model computed by such parts.

Every model here exposes the decoding protocol of :mod:`course_utils.decoding`:
``encode(src, src_lengths) -> state`` and ``decode_step(prev_tokens, state) -> (log_probs, state)``,
where ``state`` is a dict of batch-first tensors.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .data import PAD_ID

__all__ = [
    "Decoder", "Encoder", "Seq2Seq", "Seq2SeqFromParts", "decoder_step", "encode_padded", "gru_step", "lstm_forward",
    "lstm_step", "rnn_forward",
]


def rnn_forward(x: torch.Tensor, h0: torch.Tensor, W_xh: torch.Tensor, W_hh: torch.Tensor,
                b_h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The vanilla RNN recurrence ``h_t = tanh(x_t W_xh^T + h_{t-1} W_hh^T + b_h)``.

    Args:
        x: ``(batch, seq, d_in)`` inputs.
        h0: ``(batch, hidden)`` initial state.
        W_xh: ``(hidden, d_in)``; W_hh: ``(hidden, hidden)``; b_h: ``(hidden,)``.
    Returns:
        ``(states, h_last)``: every state ``(batch, seq, hidden)`` and the last ``(batch, hidden)``.
        With ``nn.RNN(d_in, hidden, batch_first=True)``, ``W_xh = weight_ih_l0``,
        ``W_hh = weight_hh_l0`` and ``b_h = bias_ih_l0 + bias_hh_l0`` the results are equal.
    """
    if x.dim() != 3:
        raise ValueError(f"x must be (batch, seq, d_in), got shape {tuple(x.shape)}")
    h = h0
    states = []
    for t in range(x.shape[1]):
        h = torch.tanh(x[:, t] @ W_xh.T + h @ W_hh.T + b_h)
        states.append(h)
    return torch.stack(states, dim=1), h


def gru_step(x_t: torch.Tensor, h_prev: torch.Tensor, W_ih: torch.Tensor, W_hh: torch.Tensor,
             b_ih: torch.Tensor, b_hh: torch.Tensor) -> torch.Tensor:
    """One GRU step, gates in PyTorch's order (reset r, update z, candidate n)::

        r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
        z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
        n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
        h' = (1 - z) * n + z * h

    Args:
        x_t: ``(batch, d_in)``; h_prev: ``(batch, hidden)``.
        W_ih: ``(3 hidden, d_in)``; W_hh: ``(3 hidden, hidden)``; b_ih, b_hh: ``(3 hidden,)``,
            i.e. ``nn.GRUCell``'s ``weight_ih, weight_hh, bias_ih, bias_hh``.
    Returns:
        ``h'`` ``(batch, hidden)``, equal to ``nn.GRUCell`` with the same weights.
    """
    gi, gh = x_t @ W_ih.T + b_ih, h_prev @ W_hh.T + b_hh
    i_r, i_z, i_n = gi.chunk(3, dim=-1)
    h_r, h_z, h_n = gh.chunk(3, dim=-1)
    r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return (1 - z) * n + z * h_prev


def lstm_step(x_t: torch.Tensor, h_prev: torch.Tensor, c_prev: torch.Tensor, W_ih: torch.Tensor,
              W_hh: torch.Tensor, b_ih: torch.Tensor, b_hh: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """One LSTM step (Hochreiter & Schmidhuber 1997, with the forget gate), gates in PyTorch's
    order (input i, forget f, candidate g, output o)::

        i = sigmoid(W_ii x + b_ii + W_hi h + b_hi)      what to write
        f = sigmoid(W_if x + b_if + W_hf h + b_hf)      what to keep of the cell
        g = tanh(W_ig x + b_ig + W_hg h + b_hg)         the candidate
        o = sigmoid(W_io x + b_io + W_ho h + b_ho)      what to show
        c' = f * c + i * g                              the cell state: an additive path
        h' = o * tanh(c')

    Args:
        x_t: ``(batch, d_in)``; h_prev, c_prev: ``(batch, hidden)``.
        W_ih: ``(4 hidden, d_in)``; W_hh: ``(4 hidden, hidden)``; b_ih, b_hh: ``(4 hidden,)``,
            i.e. ``nn.LSTMCell``'s ``weight_ih, weight_hh, bias_ih, bias_hh``.
    Returns:
        ``(h', c')``, both ``(batch, hidden)``, equal to ``nn.LSTMCell`` with the same weights.
    """
    if x_t.dim() != 2 or h_prev.shape != c_prev.shape:
        raise ValueError(f"x_t must be (batch, d_in) and h_prev, c_prev (batch, hidden) of one shape; "
                         f"got {tuple(x_t.shape)}, {tuple(h_prev.shape)}, {tuple(c_prev.shape)}")
    gates = x_t @ W_ih.T + b_ih + h_prev @ W_hh.T + b_hh
    i, f, g, o = gates.chunk(4, dim=-1)
    c = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def lstm_forward(x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor, W_ih: torch.Tensor,
                 W_hh: torch.Tensor, b_ih: torch.Tensor, b_hh: torch.Tensor
                 ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """:func:`lstm_step` over a sequence: ``x (batch, seq, d_in)``, ``h0, c0 (batch, hidden)``.

    Returns ``(states (batch, seq, hidden), (h_T, c_T))``, equal to
    ``nn.LSTM(d_in, hidden, batch_first=True)`` with ``weight_ih_l0, weight_hh_l0, bias_ih_l0,
    bias_hh_l0`` (its ``h_n, c_n`` without the leading layer axis).
    """
    if x.dim() != 3:
        raise ValueError(f"x must be (batch, seq, d_in), got shape {tuple(x.shape)}")
    h, c, states = h0, c0, []
    for t in range(x.shape[1]):
        h, c = lstm_step(x[:, t], h, c, W_ih, W_hh, b_ih, b_hh)
        states.append(h)
    return torch.stack(states, dim=1), (h, c)


class Encoder(nn.Module):
    """Embedding + (bi)directional GRU + a bridge from the encoder's size to the decoder's.

    A bidirectional GRU ends with two states of size ``hidden`` (one per direction). The
    decoder has one state of size ``hidden``, so the two are concatenated (2h) and mapped
    back to h by ``bridge`` (a linear layer and tanh), which keeps the decoder's size, and
    so its parameter count, independent of the encoder's direction.
    """

    def __init__(self, vocab_size: int, emb_dim: int, hidden: int, bidirectional: bool = True):
        super().__init__()
        self.hidden = hidden
        self.directions = 2 if bidirectional else 1
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.rnn = nn.GRU(emb_dim, hidden, batch_first=True, bidirectional=bidirectional)
        self.bridge = nn.Linear(self.directions * hidden, hidden)

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode a padded batch.

        Args:
            src: ``(batch, src_len)`` token ids, right-padded with ``<pad>``.
            src_lengths: ``(batch,)`` true lengths.
        Returns:
            ``(states, context)``: all encoder states ``(batch, src_len, directions * hidden)``
            (zero at padded positions) and the context vector ``(batch, hidden)``. Packing
            makes both independent of how much padding a sentence was given.
        """
        emb = self.embedding(src)
        packed = pack_padded_sequence(emb, src_lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h_n = self.rnn(packed)
        states, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        last = torch.cat([h_n[-2], h_n[-1]], dim=-1) if self.directions == 2 else h_n[-1]
        return states, torch.tanh(self.bridge(last))


class Decoder(nn.Module):
    """A GRU decoder conditioned on a context vector.

    With ``context_every_step=False`` the context only initialises the hidden state. With
    ``True`` it is also concatenated to every input embedding and to the output layer's input,
    so the decoder is reminded of the source at every step.
    """

    def __init__(self, vocab_size: int, emb_dim: int, hidden: int, context_every_step: bool = True):
        super().__init__()
        self.context_every_step = context_every_step
        extra = hidden if context_every_step else 0
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.rnn = nn.GRU(emb_dim + extra, hidden, batch_first=True)
        self.out = nn.Linear(hidden + extra, vocab_size)

    def forward(self, tgt_in: torch.Tensor, hidden: torch.Tensor, context: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run ``T`` steps at once (teacher forcing).

        Args:
            tgt_in: ``(batch, T)`` decoder inputs; hidden, context: ``(batch, hidden)``.
        Returns:
            ``(logits (batch, T, vocab), last hidden (batch, hidden))``.
        """
        emb = self.embedding(tgt_in)
        ctx = context.unsqueeze(1).expand(-1, tgt_in.shape[1], -1)
        rnn_in = torch.cat([emb, ctx], dim=-1) if self.context_every_step else emb
        out, h = self.rnn(rnn_in, hidden.unsqueeze(0).contiguous())
        feats = torch.cat([out, ctx], dim=-1) if self.context_every_step else out
        return self.out(feats), h.squeeze(0)


class Seq2Seq(nn.Module):
    """The chapter-1 encoder-decoder: one context vector carries the whole source.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes.
        emb_dim, hidden: embedding and GRU sizes.
        bidirectional: bidirectional encoder (its 2h final state is bridged to h).
        context_every_step: feed the context to every decoder step, not only at the start.
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, emb_dim: int = 32, hidden: int = 128,
                 bidirectional: bool = True, context_every_step: bool = True):
        super().__init__()
        self.encoder = Encoder(src_vocab, emb_dim, hidden, bidirectional)
        self.decoder = Decoder(tgt_vocab, emb_dim, hidden, context_every_step)

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits ``(batch, T, tgt_vocab)`` for decoder inputs ``tgt_in (batch, T)``."""
        _, context = self.encoder(src, src_lengths)
        logits, _ = self.decoder(tgt_in, context, context)
        return logits

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> dict[str, torch.Tensor]:
        """The decoding state after reading the source: ``hidden`` and ``context``, both ``(batch, hidden)``."""
        _, context = self.encoder(src, src_lengths)
        return {"hidden": context, "context": context}

    def decode_step(self, prev_tokens: torch.Tensor, state: dict[str, torch.Tensor]
                    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One autoregressive step: ``prev_tokens (batch,)`` -> log-probabilities ``(batch, tgt_vocab)``."""
        logits, hidden = self.decoder(prev_tokens.unsqueeze(1), state["hidden"], state["context"])
        return torch.log_softmax(logits[:, 0], dim=-1), {**state, "hidden": hidden}


# --- the model from other parts (chapter 1 trains the learner's) -------------------------------

def encode_padded(encoder: Encoder, src: torch.Tensor, src_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Chapter 1's exercise 3 (the reference): ``encoder``'s ``(states, context)`` of a padded batch,
    ``src (batch, src_len)`` and ``src_lengths (batch,)`` -> ``(batch, src_len, directions * H)``,
    ``(batch, H)``."""
    return encoder(src, src_lengths)


def decoder_step(decoder: Decoder, prev_tokens: torch.Tensor, hidden: torch.Tensor, context: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Chapter 1's exercise 4 (the reference): one step of ``decoder``, ``prev_tokens (batch,)``,
    ``hidden`` and ``context (batch, H)`` -> ``(log_probs (batch, vocab), hidden (batch, H))``."""
    logits, hidden = decoder(prev_tokens[:, None], hidden, context)
    return torch.log_softmax(logits[:, 0], dim=-1), hidden


class Seq2SeqFromParts(Seq2Seq):
    """``model`` (a :class:`Seq2Seq`; its encoder and decoder are shared, not copied) computed by
    other parts, with the signatures of :func:`encode_padded` and :func:`decoder_step` (chapter 1 passes the
    learner's once they pass a probe). Teacher forcing feeds the target one position at a time
    through ``step``, so ``forward`` returns log-probabilities ``(batch, T, vocab)``, which
    :func:`course_utils.train.sequence_loss` scores as it scores logits (a log-softmax leaves
    log-probabilities as they are); decoding follows the same protocol as :class:`Seq2Seq`."""

    def __init__(self, model: Seq2Seq, encode=encode_padded, step=decoder_step):
        nn.Module.__init__(self)
        if not isinstance(model, Seq2Seq):
            raise TypeError(f"model must be an rnn.Seq2Seq, got {type(model).__name__}")
        self.encoder, self.decoder, self.encode_fn, self.step_fn = model.encoder, model.decoder, encode, step

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        state = self.encode(src, src_lengths)
        steps = []
        for t in range(tgt_in.shape[1]):
            log_probs, state = self.decode_step(tgt_in[:, t], state)
            steps.append(log_probs)
        return torch.stack(steps, dim=1)                                     # (batch, T, vocab)

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> dict[str, torch.Tensor]:
        _, context = self.encode_fn(self.encoder, src, src_lengths)
        return {"hidden": context, "context": context}

    def decode_step(self, prev_tokens: torch.Tensor, state: dict[str, torch.Tensor]
                    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        log_probs, hidden = self.step_fn(self.decoder, prev_tokens, state["hidden"], state["context"])
        return log_probs, {**state, "hidden": hidden}
