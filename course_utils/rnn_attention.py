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

The models put it together on top of :class:`course_utils.rnn.Encoder` and follow the
decoding protocol of :mod:`course_utils.decoding` (``encode``/``decode_step`` with a dict of
batch-first tensors). Each score is a small module (:class:`AdditiveScore`, :class:`DotScore`,
:class:`GeneralScore`, :class:`ConcatScore`) with ``keys(memory)``, its key side computed once
per sentence, and ``forward(query, keys)``, the scores. :class:`BahdanauSeq2Seq` (additive
score) and :class:`LuongSeq2Seq` (dot, general or concat; local-m; input feeding) share
:class:`AttentionSeq2SeqBase`; :func:`AttentionSeq2Seq` builds either by the score's name.
Boolean masks: True = may attend.
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
# Score modules: the parameters of a score, its key side and its formula
# ----------------------------------------------------------------------------------------

class AdditiveScore(nn.Module):
    """Bahdanau's score ``v_a^T tanh(W_a s + U_a h_j)`` over states of size ``hidden``.

    ``keys(memory (B, S, h)) -> U_a h_j (B, S, h)``, once per sentence;
    ``forward(query (B, [T,] h), keys) -> scores (B, [T,] S)``.
    """

    def __init__(self, hidden: int):
        super().__init__()
        self.W_a = nn.Linear(hidden, hidden, bias=False)
        self.U_a = nn.Linear(hidden, hidden)
        self.v_a = nn.Parameter(torch.randn(hidden) / hidden ** 0.5)

    def keys(self, memory: torch.Tensor) -> torch.Tensor:
        return self.U_a(memory)

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return additive_score(query, keys, self.W_a.weight, self.v_a)


class DotScore(nn.Module):
    """Luong's dot score ``h_t^T h_j``: no parameters, the keys are the memory itself.

    ``keys(memory (B, S, h)) -> (B, S, h)``; ``forward(query (B, [T,] h), keys) -> (B, [T,] S)``.
    ``hidden`` is unused (every score is built as ``cls(hidden)``).
    """

    def __init__(self, hidden: int):
        super().__init__()

    def keys(self, memory: torch.Tensor) -> torch.Tensor:
        return memory

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return dot_score(query, keys)


class GeneralScore(nn.Module):
    """Luong's general score ``h_t^T W_a h_j``, computed as a dot score against ``h_j W_a^T``.

    ``keys(memory (B, S, h)) -> h_j W_a^T (B, S, h)``; ``forward(query (B, [T,] h), keys) -> (B, [T,] S)``.
    """

    def __init__(self, hidden: int):
        super().__init__()
        self.W_a = nn.Linear(hidden, hidden, bias=False)

    def keys(self, memory: torch.Tensor) -> torch.Tensor:
        return memory @ self.W_a.weight.T

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return dot_score(query, keys)


class ConcatScore(nn.Module):
    """Luong's concat score ``v_a^T tanh(W_a [h_t; h_j])`` with ``W_a = [W1 W2]`` of shape ``(h, 2h)``:
    the additive score with ``W = W1`` and the keys ``W2 h_j``.

    ``keys(memory (B, S, h)) -> W2 h_j (B, S, h)``; ``forward(query (B, [T,] h), keys) -> (B, [T,] S)``.
    """

    def __init__(self, hidden: int):
        super().__init__()
        self.hidden = hidden
        self.W_a = nn.Linear(2 * hidden, hidden, bias=False)
        self.v_a = nn.Parameter(torch.randn(hidden) / hidden ** 0.5)

    def keys(self, memory: torch.Tensor) -> torch.Tensor:
        return memory @ self.W_a.weight[:, self.hidden:].T

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return additive_score(query, keys, self.W_a.weight[:, :self.hidden], self.v_a)


LUONG_SCORES: dict[str, type[nn.Module]] = {"dot": DotScore, "general": GeneralScore,
                                             "concat": ConcatScore}


# ----------------------------------------------------------------------------------------
# The models
# ----------------------------------------------------------------------------------------

class AttentionSeq2SeqBase(nn.Module):
    """What Bahdanau's and Luong's models share: the encoder, the memory, the masks, the protocol.

    The encoder is chapter 1's bidirectional :class:`~course_utils.rnn.Encoder`; its
    ``(B, S, 2h)`` states are projected to ``h`` by ``memory_proj`` (one linear layer), so that
    keys, values and the decoder state live in one space of size ``h`` (the dot score needs
    this, and every score matrix stays ``h x h``). The projected states are the keys and the
    values ("memory"). The decoder starts from the encoder's bridged context. ``window=D``
    restricts attention to Luong's local-m window (:func:`local_m_mask`); ``None`` is global.

    A subclass builds its score module (:meth:`_use_score`) and its decoder, and defines
    ``step(prev_tokens (B,), state) -> (logits (B, V), state)``.
    """

    score: str             # the score's name, one of SCORES
    input_feeding: bool

    def __init__(self, src_vocab: int, tgt_vocab: int, emb_dim: int, hidden: int,
                 window: int | None):
        super().__init__()
        if window is not None and window < 0:
            raise ValueError(f"window must be None (global) or >= 0, got {window}")
        self.window, self.hidden = window, hidden
        self.encoder = Encoder(src_vocab, emb_dim, hidden, bidirectional=True)
        self.memory_proj = nn.Linear(2 * hidden, hidden)
        self.embedding = nn.Embedding(tgt_vocab, emb_dim, padding_idx=0)

    def _use_score(self, scorer: nn.Module) -> None:
        # The score's parameters are registered on the model itself (model.W_a, model.U_a,
        # model.v_a, as chapter 2 reads them, and the state_dict keys of saved models); the
        # score module is kept unregistered and holds the same objects. (Replacing model.v_a
        # by a new tensor, as load_state_dict(assign=True) does, would not reach the score.)
        object.__setattr__(self, "scorer", scorer)
        for name, child in scorer.named_children():
            setattr(self, name, child)
        for name, param in scorer.named_parameters(recurse=False):
            setattr(self, name, param)

    def step(self, prev_tokens: torch.Tensor, state: dict[str, torch.Tensor]
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        raise NotImplementedError

    # -- encoding ------------------------------------------------------------------------
    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> dict[str, torch.Tensor]:
        """Read the source once. The state (all batch-first):

        ``hidden (B, h)`` decoder state; ``memory (B, S, h)`` keys/values; ``keys (B, S, h)``
        the key side of the score precomputed once (``scorer.keys(memory)``); ``mask (B, S)``
        real positions; ``lengths (B,)``; ``step (B,)`` the target position; ``weights (B, S)``
        the last attention weights.
        """
        states, context = self.encoder(src, src_lengths)
        memory = self.memory_proj(states)
        B, S = src.shape
        return {"hidden": context, "memory": memory, "keys": self.scorer.keys(memory),
                "mask": padding_mask(src_lengths.to(src.device), S)[:, 0],
                "lengths": src_lengths.to(src.device),
                "step": torch.zeros(B, dtype=torch.long, device=src.device),
                "weights": torch.zeros(B, S, device=memory.device)}

    def _mask(self, state: dict[str, torch.Tensor], t: torch.Tensor) -> torch.Tensor:
        """``(B, S)`` or ``(B, T, S)`` mask for target positions ``t`` (``(B,)`` or ``(B, T)``)."""
        if self.window is None:
            return state["mask"] if t.dim() == 1 else state["mask"].unsqueeze(1)
        return local_m_mask(t, state["lengths"], self.window, state["mask"].shape[1])

    def decode_step(self, prev_tokens: torch.Tensor, state: dict[str, torch.Tensor]
                    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``prev_tokens (B,)`` -> log-probabilities ``(B, tgt_vocab)`` and the next state."""
        logits, state = self.step(prev_tokens, state)
        return torch.log_softmax(logits, dim=-1), state

    # -- teacher forcing -----------------------------------------------------------------
    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits ``(B, T, tgt_vocab)``."""
        return self.forward_with_weights(src, src_lengths, tgt_in)[0]

    def forward_with_weights(self, src: torch.Tensor, src_lengths: torch.Tensor,
                             tgt_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced logits ``(B, T, tgt_vocab)`` and the attention weights ``(B, T, S)``
        (row t: where the decoder looked while writing output t), one :meth:`step` at a time."""
        state = self.encode(src, src_lengths)
        all_logits, all_weights = [], []
        for i in range(tgt_in.shape[1]):
            lg, state = self.step(tgt_in[:, i], state)
            all_logits.append(lg)
            all_weights.append(state["weights"])
        return torch.stack(all_logits, 1), torch.stack(all_weights, 1)


class BahdanauSeq2Seq(AttentionSeq2SeqBase):
    """Bahdanau's decoder (additive score): the query is the *previous* state ``s_{i-1}``; the
    context ``c_i`` enters the ``GRUCell`` with the previous token's embedding, and the output
    layer reads ``[s_i; c_i]``. Sequential even under teacher forcing.
    """

    score = "additive"
    input_feeding = False   # c_i already enters the GRU

    def __init__(self, src_vocab: int, tgt_vocab: int, emb_dim: int = 32, hidden: int = 64,
                 window: int | None = None):
        super().__init__(src_vocab, tgt_vocab, emb_dim, hidden, window)
        self._use_score(AdditiveScore(hidden))          # W_a, U_a, v_a
        self.cell = nn.GRUCell(emb_dim + hidden, hidden)
        self.out = nn.Linear(2 * hidden, tgt_vocab)

    def _bahdanau_recurrence(self, emb: torch.Tensor, state: dict[str, torch.Tensor]
                             ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Attention with ``s_{i-1}``, then the GRU step; returns ``(s_i (B, h), c_i (B, h), state)``."""
        s_prev = state["hidden"]
        scores = self.scorer(s_prev, state["keys"])
        context, weights = attend(scores, state["memory"], self._mask(state, state["step"]))
        s = self.cell(torch.cat([emb, context], dim=-1), s_prev)
        return s, context, {**state, "hidden": s, "step": state["step"] + 1, "weights": weights}

    def bahdanau_step(self, prev_tokens: torch.Tensor, state: dict[str, torch.Tensor]
                      ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One step of the additive decoder: score with ``s_{i-1}``, update the GRU, read out
        ``[s_i; c_i]``. Returns ``(logits (B, V), state)``."""
        s, context, state = self._bahdanau_recurrence(self.embedding(prev_tokens), state)
        return self.out(torch.cat([s, context], dim=-1)), state

    step = bahdanau_step

    def forward_with_weights(self, src: torch.Tensor, src_lengths: torch.Tensor,
                             tgt_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced logits ``(B, T, V)`` and weights ``(B, T, S)``: sequential, but the
        embeddings and the output layer run once for all steps."""
        state = self.encode(src, src_lengths)
        emb = self.embedding(tgt_in)
        states, contexts, all_weights = [], [], []
        for i in range(tgt_in.shape[1]):
            s, context, state = self._bahdanau_recurrence(emb[:, i], state)
            states.append(s)
            contexts.append(context)
            all_weights.append(state["weights"])
        logits = self.out(torch.cat([torch.stack(states, 1), torch.stack(contexts, 1)], dim=-1))
        return logits, torch.stack(all_weights, 1)


class LuongSeq2Seq(AttentionSeq2SeqBase):
    """Luong's decoder (``score`` in ``LUONG_SCORES``: dot, general, concat): the GRU steps first;
    its *new* state ``h_t`` is the query; ``h~_t = tanh(W_c [c_t; h_t])`` feeds the output layer.
    Without input feeding (the default) teacher forcing runs all steps in one GRU call; with
    ``input_feeding=True`` ``h~_{t-1}`` is also concatenated to the next input (state ``feed (B, h)``).
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, emb_dim: int = 32, hidden: int = 64,
                 score: str = "general", window: int | None = None, input_feeding: bool = False):
        if score not in LUONG_SCORES:
            raise ValueError(f"score must be one of {tuple(LUONG_SCORES)}, got {score!r}")
        super().__init__(src_vocab, tgt_vocab, emb_dim, hidden, window)
        self.score, self.input_feeding = score, input_feeding
        self._use_score(LUONG_SCORES[score](hidden))    # general: W_a; concat: W_a, v_a
        self.rnn = nn.GRU(emb_dim + (hidden if input_feeding else 0), hidden, batch_first=True)
        self.W_c = nn.Linear(2 * hidden, hidden)
        self.out = nn.Linear(hidden, tgt_vocab)

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> dict[str, torch.Tensor]:
        state = super().encode(src, src_lengths)
        if self.input_feeding:
            state["feed"] = torch.zeros_like(state["hidden"])
        return state

    def luong_step(self, prev_tokens: torch.Tensor, state: dict[str, torch.Tensor]
                   ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One step of the Luong decoder: update the GRU, then score with the new ``h_t``.
        Returns ``(logits (B, V), state)``."""
        x = self.embedding(prev_tokens)
        if self.input_feeding:
            x = torch.cat([x, state["feed"]], dim=-1)
        _, h = self.rnn(x.unsqueeze(1), state["hidden"].unsqueeze(0).contiguous())
        h = h[0]
        context, weights = attend(self.scorer(h, state["keys"]), state["memory"],
                                  self._mask(state, state["step"]))
        h_tilde = torch.tanh(self.W_c(torch.cat([context, h], dim=-1)))
        new = {**state, "hidden": h, "step": state["step"] + 1, "weights": weights}
        if self.input_feeding:
            new["feed"] = h_tilde
        return self.out(h_tilde), new

    step = luong_step

    def forward_with_weights(self, src: torch.Tensor, src_lengths: torch.Tensor,
                             tgt_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced logits ``(B, T, V)`` and weights ``(B, T, S)``."""
        if self.input_feeding:
            return super().forward_with_weights(src, src_lengths, tgt_in)
        # Without input feeding the GRU does not depend on the attention, so all T steps run
        # at once and attention is one batched matrix product.
        state = self.encode(src, src_lengths)
        B, T = tgt_in.shape
        out, _ = self.rnn(self.embedding(tgt_in), state["hidden"].unsqueeze(0).contiguous())
        t = torch.arange(T, device=src.device).expand(B, T)
        context, weights = attend(self.scorer(out, state["keys"]), state["memory"],
                                  self._mask(state, t))
        logits = self.out(torch.tanh(self.W_c(torch.cat([context, out], dim=-1))))
        return logits, weights


def AttentionSeq2Seq(src_vocab: int, tgt_vocab: int, emb_dim: int = 32, hidden: int = 64,
                     score: str = "additive", window: int | None = None,
                     input_feeding: bool = False) -> AttentionSeq2SeqBase:
    """The attention model of chapter 2 by the name of its score.

    ``score="additive"`` gives a :class:`BahdanauSeq2Seq`; ``"dot"``, ``"general"`` or
    ``"concat"`` a :class:`LuongSeq2Seq`. ``window=D`` is Luong's local-m window (``None``:
    global attention); ``input_feeding`` is Luong's only.
    """
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}")
    if input_feeding and score == "additive":
        raise ValueError("input_feeding is Luong's; the additive (Bahdanau) decoder already "
                         "feeds c_i to the GRU")
    if score == "additive":
        return BahdanauSeq2Seq(src_vocab, tgt_vocab, emb_dim, hidden, window=window)
    return LuongSeq2Seq(src_vocab, tgt_vocab, emb_dim, hidden, score=score, window=window,
                        input_feeding=input_feeding)


@torch.no_grad()
def greedy_with_attention(model: AttentionSeq2SeqBase, src: torch.Tensor, src_lengths: torch.Tensor,
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


__all__ = [
    "LUONG_SCORES", "SCORES", "AdditiveScore", "AttentionSeq2Seq", "AttentionSeq2SeqBase", "BahdanauSeq2Seq",
    "ConcatScore", "DotScore", "GeneralScore", "LuongSeq2Seq", "additive_score", "attend", "concat_score",
    "context_vector", "dot_score", "general_score", "greedy_with_attention", "local_m_mask", "location_score",
]
