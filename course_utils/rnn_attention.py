"""Attention for the RNN encoder-decoder (chapter 2): Bahdanau and Luong.

The three steps of attention, for one decoder query and the encoder states of one batch:

1. **score** every source position j: ``e_j = score(query, key_j)``;
2. **softmax** the scores over the real (non-pad) positions: ``a = masked_softmax(e, mask)``;
3. **weighted sum** of the values: ``c = sum_j a_j value_j`` (the context vector).

In the QKV language of chapter 3 the decoder state is the query and the encoder states are
both the keys and the values.

Score functions (``n`` = the decoder's hidden size, ``d`` = the encoder states' size):

* :func:`additive_score` (Bahdanau 2015): ``v^T tanh(W s + U h_j)``. ``U h_j`` does not
  depend on the decoder step, so it is computed once per sentence and passed in (``UH``).
* :func:`dot_score` (Luong 2015): ``h_t^T h_j`` (needs ``d == n``).
* :func:`general_score` (Luong): ``h_t^T W_a h_j``.
* :func:`concat_score` (Luong): ``v^T tanh(W_a [h_t; h_j])``; splitting ``W_a = [W1 W2]``
  shows that it is the additive score with ``W = W1``, ``U = W2``.
* :func:`location_score` (Luong): ``a_t = softmax(W_a h_t)``, a score per source *position*
  computed from the decoder state alone; the keys' content is never read.

:func:`local_m_mask` restricts attention to Luong's local-m window ``[p_t - D, p_t + D]``
with ``p_t = t`` (clamped to the last real source position).

:class:`AttentionSeq2Seq` puts it together on top of :class:`course_utils.rnn.Encoder` and
follows the decoding protocol of :mod:`course_utils.decoding` (``encode``/``decode_step``
with a dict of batch-first tensors). Boolean masks: True = may attend.
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import masked_softmax, padding_mask
from .decoding import greedy_decode
from .rnn import Encoder

SCORES = ("additive", "dot", "general", "concat")


# ----------------------------------------------------------------------------------------
# Validation helpers
# ----------------------------------------------------------------------------------------

def _check_query_keys(query: torch.Tensor, keys: torch.Tensor, name: str = "keys") -> None:
    if not isinstance(query, torch.Tensor) or query.dim() not in (2, 3):
        got = tuple(query.shape) if isinstance(query, torch.Tensor) else type(query).__name__
        raise ValueError(f"query must be (batch, d_q) or (batch, T, d_q), got {got}")
    if not isinstance(keys, torch.Tensor) or keys.dim() != 3:
        got = tuple(keys.shape) if isinstance(keys, torch.Tensor) else type(keys).__name__
        raise ValueError(f"{name} must be (batch, src_len, d), got {got}")
    if query.shape[0] != keys.shape[0]:
        raise ValueError(f"query and {name} must have the same batch size: query "
                         f"{tuple(query.shape)}, {name} {tuple(keys.shape)}")


def _with_time(query: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(batch, d) -> (batch, 1, d) and a flag to squeeze the result back."""
    return (query.unsqueeze(1), True) if query.dim() == 2 else (query, False)


# ----------------------------------------------------------------------------------------
# Score functions
# ----------------------------------------------------------------------------------------

def additive_score(query: torch.Tensor, UH: torch.Tensor, W: torch.Tensor,
                   v: torch.Tensor) -> torch.Tensor:
    """Bahdanau's additive score ``e_j = v^T tanh(W s + U h_j)``.

    Args:
        query: the decoder state ``s``, ``(batch, n)`` or ``(batch, T, n)`` for T queries.
        UH: ``U h_j`` for every source position, precomputed once per sentence,
            ``(batch, src_len, n_a)``.
        W: ``(n_a, n)``; v: ``(n_a,)``.
    Returns:
        Scores ``(batch, src_len)`` (or ``(batch, T, src_len)``).
    """
    _check_query_keys(query, UH, "UH")
    if W.dim() != 2 or W.shape != (UH.shape[-1], query.shape[-1]):
        raise ValueError(f"W must be (n_a, n) = ({UH.shape[-1]}, {query.shape[-1]}), "
                         f"got {tuple(W.shape)}")
    if v.shape != (UH.shape[-1],):
        raise ValueError(f"v must be (n_a,) = ({UH.shape[-1]},), got {tuple(v.shape)}")
    q, squeeze = _with_time(query)
    hidden = torch.tanh((q @ W.T).unsqueeze(2) + UH.unsqueeze(1))  # (batch, T, src_len, n_a)
    scores = hidden @ v
    return scores.squeeze(1) if squeeze else scores


def dot_score(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Luong's dot score ``e_j = h_t^T h_j``.

    Args:
        query: ``(batch, d)`` or ``(batch, T, d)``; keys: ``(batch, src_len, d)``.
    Returns:
        ``(batch, src_len)`` (or ``(batch, T, src_len)``).
    """
    _check_query_keys(query, keys)
    if query.shape[-1] != keys.shape[-1]:
        raise ValueError(f"the dot score needs query and keys of the same size: query "
                         f"{tuple(query.shape)}, keys {tuple(keys.shape)} (project the keys first)")
    q, squeeze = _with_time(query)
    scores = q @ keys.transpose(1, 2)
    return scores.squeeze(1) if squeeze else scores


def general_score(query: torch.Tensor, keys: torch.Tensor, W_a: torch.Tensor) -> torch.Tensor:
    """Luong's general score ``e_j = h_t^T W_a h_j``.

    Args:
        query: ``(batch, d_q)`` or ``(batch, T, d_q)``; keys: ``(batch, src_len, d_k)``;
        W_a: ``(d_q, d_k)``.
    Returns:
        ``(batch, src_len)`` (or ``(batch, T, src_len)``). Equal to
        ``dot_score(query, keys @ W_a.T)``, which is how a model computes it: ``keys @ W_a.T``
        once per sentence.
    """
    _check_query_keys(query, keys)
    if W_a.dim() != 2 or W_a.shape != (query.shape[-1], keys.shape[-1]):
        raise ValueError(f"W_a must be (d_q, d_k) = ({query.shape[-1]}, {keys.shape[-1]}), "
                         f"got {tuple(W_a.shape)}")
    return dot_score(query, keys @ W_a.T)


def concat_score(query: torch.Tensor, keys: torch.Tensor, W_a: torch.Tensor,
                 v_a: torch.Tensor) -> torch.Tensor:
    """Luong's concat score ``e_j = v_a^T tanh(W_a [h_t; h_j])``, computed literally.

    Args:
        query: ``(batch, d_q)`` or ``(batch, T, d_q)``; keys: ``(batch, src_len, d_k)``;
        W_a: ``(n_a, d_q + d_k)``; v_a: ``(n_a,)``.
    Returns:
        ``(batch, src_len)`` (or ``(batch, T, src_len)``). Equals
        ``additive_score(query, keys @ W_a[:, d_q:].T, W_a[:, :d_q], v_a)``.
    """
    _check_query_keys(query, keys)
    d_q, d_k = query.shape[-1], keys.shape[-1]
    if W_a.dim() != 2 or W_a.shape[1] != d_q + d_k:
        raise ValueError(f"W_a must be (n_a, d_q + d_k) = (n_a, {d_q + d_k}), "
                         f"got {tuple(W_a.shape)}")
    if v_a.shape != (W_a.shape[0],):
        raise ValueError(f"v_a must be (n_a,) = ({W_a.shape[0]},), got {tuple(v_a.shape)}")
    q, squeeze = _with_time(query)
    T, S = q.shape[1], keys.shape[1]
    pairs = torch.cat([q.unsqueeze(2).expand(-1, T, S, d_q),
                       keys.unsqueeze(1).expand(-1, T, S, d_k)], dim=-1)
    scores = torch.tanh(pairs @ W_a.T) @ v_a
    return scores.squeeze(1) if squeeze else scores


def location_score(query: torch.Tensor, W_a: torch.Tensor, src_len: int) -> torch.Tensor:
    """Luong's location score ``e = W_a h_t``: one score per source position from the query alone.

    Luong et al. (2015, section 3.1) write ``a_t = softmax(W_a h_t)``: ``W_a`` has one row per
    source position (up to a maximum length), so the score of position j is ``h_t . W_a[j]``
    whatever the encoder state at j holds. Positions beyond ``src_len`` are cut off; padding
    is masked afterwards, as for the other scores.

    Args:
        query: ``(batch, d_q)`` or ``(batch, T, d_q)``; W_a: ``(max_len, d_q)``;
        src_len: the padded source length S (at most ``max_len``).
    Returns:
        ``(batch, S)`` (or ``(batch, T, S)``).
    """
    if not isinstance(query, torch.Tensor) or query.dim() not in (2, 3):
        got = tuple(query.shape) if isinstance(query, torch.Tensor) else type(query).__name__
        raise ValueError(f"query must be (batch, d_q) or (batch, T, d_q), got {got}")
    if W_a.dim() != 2 or W_a.shape[1] != query.shape[-1]:
        raise ValueError(f"W_a must be (max_len, d_q) with d_q = {query.shape[-1]}, got {tuple(W_a.shape)}")
    if not 0 < src_len <= W_a.shape[0]:
        raise ValueError(f"src_len must be between 1 and W_a's {W_a.shape[0]} rows (the longest "
                         f"source it scores), got {src_len}")
    return query @ W_a[:src_len].T


# ----------------------------------------------------------------------------------------
# Softmax, context, windows
# ----------------------------------------------------------------------------------------

def context_vector(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """The weighted sum ``c = sum_j a_j value_j``.

    Args:
        weights: ``(batch, src_len)`` or ``(batch, T, src_len)``; values: ``(batch, src_len, d_v)``.
    Returns:
        ``(batch, d_v)`` (or ``(batch, T, d_v)``).
    """
    if weights.dim() not in (2, 3) or values.dim() != 3 or weights.shape[0] != values.shape[0] \
            or weights.shape[-1] != values.shape[1]:
        raise ValueError("weights (batch, [T,] src_len) and values (batch, src_len, d_v) do not "
                         "fit: "
                         f"{tuple(weights.shape)} and {tuple(values.shape)}")
    w, squeeze = _with_time(weights)
    ctx = w @ values
    return ctx.squeeze(1) if squeeze else ctx


def attend(scores: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps 2 and 3: ``weights = masked_softmax(scores, mask)``, ``context = weights @ values``.

    Args:
        scores: ``(batch, src_len)`` or ``(batch, T, src_len)``; values: ``(batch, src_len, d_v)``;
        mask: bool broadcastable to ``scores``, True = may attend (a real source position).
    Returns:
        ``(context (batch, [T,] d_v), weights (batch, [T,] src_len))``. A row whose every
        position is masked gets zero weights and a zero context (never NaN).
    """
    weights = masked_softmax(scores, mask)
    return context_vector(weights, values), weights


def local_m_mask(t: torch.Tensor, lengths: torch.Tensor, D: int, src_len: int) -> torch.Tensor:
    """Luong's local-m window: source positions ``j`` with ``|j - p_t| <= D``, ``p_t = t``.

    ``p_t`` is clamped to the last real position ``lengths - 1`` (a target longer than its
    source would otherwise have a window of padding only), and padding is excluded.

    Args:
        t: target positions, long ``(batch,)`` (one step) or ``(batch, T)``.
        lengths: ``(batch,)`` true source lengths; D: the half-width (>= 0);
        src_len: the padded length S.
    Returns:
        bool ``(batch, S)`` (or ``(batch, T, S)``), True = inside the window and not padding.
    """
    if D < 0:
        raise ValueError(f"the window half-width D must be >= 0, got {D}")
    if t.dim() not in (1, 2) or t.shape[0] != lengths.shape[0]:
        raise ValueError(f"t must be (batch,) or (batch, T) with the batch of lengths "
                         f"{tuple(lengths.shape)}, "
                         f"got {tuple(t.shape)}")
    extra = (1,) * (t.dim() - 1)
    last = (lengths - 1).view(-1, *extra)
    centre = torch.minimum(t, last)
    j = torch.arange(src_len, device=t.device)
    inside = (j - centre.unsqueeze(-1)).abs() <= D
    real = j < lengths.view(-1, *extra, 1)
    return inside & real


# ----------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------

class AttentionSeq2Seq(nn.Module):
    """A GRU encoder-decoder with attention over every encoder state.

    The encoder is chapter 1's bidirectional :class:`~course_utils.rnn.Encoder`; its
    ``(batch, S, 2h)`` states are projected to ``h`` by ``memory_proj`` (one linear layer),
    so that keys, values and the decoder state live in one space of size ``h`` (the dot
    score needs this, and every score matrix stays ``h x h``). The projected states are the
    keys and the values ("memory"). The decoder starts from the encoder's bridged context.

    Two decoders, as in the two papers:

    * ``score="additive"`` (Bahdanau): the query is the *previous* state ``s_{i-1}``; the
      context ``c_i`` enters the GRU's input with the previous token, and the output layer
      reads ``[s_i; c_i]``. The decoder is sequential even under teacher forcing.
    * ``score in ("dot", "general", "concat")`` (Luong): the GRU steps first; its *new* state
      ``h_t`` is the query; ``h~_t = tanh(W_c [c_t; h_t])`` feeds the output layer. Without
      input feeding (the default) teacher forcing runs all steps in one GRU call; with
      ``input_feeding=True`` ``h~_{t-1}`` is also concatenated to the next input.

    ``window=D`` restricts attention to Luong's local-m window (:func:`local_m_mask`);
    ``None`` is global attention.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes; emb_dim, hidden: embedding and GRU sizes.
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, emb_dim: int = 32, hidden: int = 64,
                 score: str = "additive", window: int | None = None, input_feeding: bool = False):
        super().__init__()
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {score!r}")
        if window is not None and window < 0:
            raise ValueError(f"window must be None (global) or >= 0, got {window}")
        if input_feeding and score == "additive":
            raise ValueError("input_feeding is Luong's; the additive (Bahdanau) decoder already "
                             "feeds c_i to the GRU")
        self.score, self.window, self.input_feeding = score, window, input_feeding
        self.hidden = hidden
        self.encoder = Encoder(src_vocab, emb_dim, hidden, bidirectional=True)
        self.memory_proj = nn.Linear(2 * hidden, hidden)
        self.embedding = nn.Embedding(tgt_vocab, emb_dim, padding_idx=0)
        if score == "additive":
            self.W_a = nn.Linear(hidden, hidden, bias=False)
            self.U_a = nn.Linear(hidden, hidden)
            self.v_a = nn.Parameter(torch.randn(hidden) / hidden ** 0.5)
            self.cell = nn.GRUCell(emb_dim + hidden, hidden)
            self.out = nn.Linear(2 * hidden, tgt_vocab)
        else:
            if score == "general":
                self.W_a = nn.Linear(hidden, hidden, bias=False)
            elif score == "concat":
                self.W_a = nn.Linear(2 * hidden, hidden, bias=False)
                self.v_a = nn.Parameter(torch.randn(hidden) / hidden ** 0.5)
            self.rnn = nn.GRU(emb_dim + (hidden if input_feeding else 0), hidden, batch_first=True)
            self.W_c = nn.Linear(2 * hidden, hidden)
            self.out = nn.Linear(hidden, tgt_vocab)

    # -- encoding ------------------------------------------------------------------------
    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> dict[str, torch.Tensor]:
        """Read the source once. The state (all batch-first):

        ``hidden (B, h)`` decoder state; ``memory (B, S, h)`` keys/values; ``keys (B, S, h)``
        the key side of the score precomputed once (``U h_j`` for additive, ``h_j W_a^T`` for
        general, ``W2 h_j`` for concat, ``h_j`` for dot); ``mask (B, S)`` real positions;
        ``lengths (B,)``; ``step (B,)`` the target position; ``weights (B, S)`` the last
        attention weights; ``feed (B, h)`` (input feeding only) the last ``h~``.
        """
        states, context = self.encoder(src, src_lengths)
        memory = self.memory_proj(states)
        if self.score == "additive":
            keys = self.U_a(memory)
        elif self.score == "general":
            keys = memory @ self.W_a.weight.T
        elif self.score == "concat":
            keys = memory @ self.W_a.weight[:, self.hidden:].T
        else:
            keys = memory
        B, S = src.shape
        state = {"hidden": context, "memory": memory, "keys": keys,
                 "mask": padding_mask(src_lengths.to(src.device), S)[:, 0],
                 "lengths": src_lengths.to(src.device),
                 "step": torch.zeros(B, dtype=torch.long, device=src.device),
                 "weights": torch.zeros(B, S, device=memory.device)}
        if self.input_feeding:
            state["feed"] = torch.zeros_like(context)
        return state

    def _mask(self, state: dict[str, torch.Tensor], t: torch.Tensor) -> torch.Tensor:
        """``(B, S)`` or ``(B, T, S)`` mask for target positions ``t`` (``(B,)`` or ``(B, T)``)."""
        if self.window is None:
            return state["mask"] if t.dim() == 1 else state["mask"].unsqueeze(1)
        return local_m_mask(t, state["lengths"], self.window, state["mask"].shape[1])

    def _scores(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        if self.score == "additive":
            return additive_score(query, keys, self.W_a.weight, self.v_a)
        if self.score == "concat":
            return additive_score(query, keys, self.W_a.weight[:, :self.hidden], self.v_a)
        return dot_score(query, keys)  # dot, and general with W_a folded into the keys

    # -- one step --------------------------------------------------------------------------
    def _bahdanau_recurrence(self, emb: torch.Tensor, state: dict[str, torch.Tensor]
                             ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Attention with ``s_{i-1}``, then the GRU step; returns ``(s_i, c_i, state)``."""
        s_prev = state["hidden"]
        scores = self._scores(s_prev, state["keys"])
        context, weights = attend(scores, state["memory"], self._mask(state, state["step"]))
        s = self.cell(torch.cat([emb, context], dim=-1), s_prev)
        return s, context, {**state, "hidden": s, "step": state["step"] + 1, "weights": weights}

    def bahdanau_step(self, prev_tokens: torch.Tensor, state: dict[str, torch.Tensor]
                      ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One step of the additive decoder: score with ``s_{i-1}``, update the GRU, read out
        ``[s_i; c_i]``. Returns ``(logits (B, V), state)``."""
        s, context, state = self._bahdanau_recurrence(self.embedding(prev_tokens), state)
        return self.out(torch.cat([s, context], dim=-1)), state

    def luong_step(self, prev_tokens: torch.Tensor, state: dict[str, torch.Tensor]
                   ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One step of the Luong decoder: update the GRU, then score with the new ``h_t``."""
        x = self.embedding(prev_tokens)
        if self.input_feeding:
            x = torch.cat([x, state["feed"]], dim=-1)
        _, h = self.rnn(x.unsqueeze(1), state["hidden"].unsqueeze(0).contiguous())
        h = h[0]
        context, weights = attend(self._scores(h, state["keys"]), state["memory"],
                                  self._mask(state, state["step"]))
        h_tilde = torch.tanh(self.W_c(torch.cat([context, h], dim=-1)))
        new = {**state, "hidden": h, "step": state["step"] + 1, "weights": weights}
        if self.input_feeding:
            new["feed"] = h_tilde
        return self.out(h_tilde), new

    def decode_step(self, prev_tokens: torch.Tensor, state: dict[str, torch.Tensor]
                    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``prev_tokens (B,)`` -> log-probabilities ``(B, tgt_vocab)`` and the next state."""
        step = self.bahdanau_step if self.score == "additive" else self.luong_step
        logits, state = step(prev_tokens, state)
        return torch.log_softmax(logits, dim=-1), state

    # -- teacher forcing -----------------------------------------------------------------
    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits ``(B, T, tgt_vocab)``."""
        return self.forward_with_weights(src, src_lengths, tgt_in)[0]

    def forward_with_weights(self, src: torch.Tensor, src_lengths: torch.Tensor,
                             tgt_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced logits ``(B, T, tgt_vocab)`` and the attention weights ``(B, T, S)``
        (row t: where the decoder looked while writing output t)."""
        state = self.encode(src, src_lengths)
        if self.score != "additive" and not self.input_feeding:
            # Luong without input feeding: the GRU does not depend on the attention, so all
            # T steps run at once and attention is one batched matrix product.
            B, T = tgt_in.shape
            out, _ = self.rnn(self.embedding(tgt_in), state["hidden"].unsqueeze(0).contiguous())
            t = torch.arange(T, device=src.device).expand(B, T)
            context, weights = attend(self._scores(out, state["keys"]), state["memory"],
                                      self._mask(state, t))
            logits = self.out(torch.tanh(self.W_c(torch.cat([context, out], dim=-1))))
        elif self.score == "additive":
            # Sequential, but the embeddings and the output layer run once for all steps.
            emb = self.embedding(tgt_in)
            states, contexts, all_weights = [], [], []
            for i in range(tgt_in.shape[1]):
                s, context, state = self._bahdanau_recurrence(emb[:, i], state)
                states.append(s)
                contexts.append(context)
                all_weights.append(state["weights"])
            logits = self.out(torch.cat([torch.stack(states, 1), torch.stack(contexts, 1)], dim=-1))
            weights = torch.stack(all_weights, 1)
        else:
            step = self.luong_step
            all_logits, all_weights = [], []
            for i in range(tgt_in.shape[1]):
                lg, state = step(tgt_in[:, i], state)
                all_logits.append(lg)
                all_weights.append(state["weights"])
            logits, weights = torch.stack(all_logits, 1), torch.stack(all_weights, 1)
        return logits, weights


@torch.no_grad()
def greedy_with_attention(model: AttentionSeq2Seq, src: torch.Tensor, src_lengths: torch.Tensor,
                          max_len: int, eos_id: int = 2, sos_id: int = 1
                          ) -> tuple[list[list[int]], list[torch.Tensor]]:
    """Greedy decoding that also returns the attention weights of every generated token.

    Args:
        src: ``(B, S)``; src_lengths: ``(B,)``.
    Returns:
        ``(tokens, weights)``: per sentence the generated ids (up to, without, ``<eos>``)
        and a ``(len(tokens) + 1, src_length)`` tensor of weights (the last row is the
        ``<eos>`` step, when one was produced within ``max_len``).
    """
    model.eval()
    weights = []

    def step(prev, state):  # greedy decoding, recording each step's attention
        log_probs, state = model.decode_step(prev, state)
        weights.append(state["weights"])
        return log_probs, state

    tokens, _ = greedy_decode(step, model.encode(src, src_lengths), max_len, sos_id=sos_id, eos_id=eos_id)
    toks_t, ws_t = tokens.cpu(), torch.stack(weights, 1).cpu()
    out_tokens, out_weights = [], []
    for b in range(src.shape[0]):
        row = toks_t[b].tolist()
        n = row.index(eos_id) if eos_id in row else len(row)
        out_tokens.append(row[:n])
        out_weights.append(ws_t[b, : min(n + 1, len(row)), : int(src_lengths[b])])
    return out_tokens, out_weights


__all__ = ["SCORES", "AttentionSeq2Seq", "additive_score", "attend", "concat_score",
           "context_vector", "dot_score", "general_score", "greedy_with_attention", "local_m_mask",
           "location_score"]
