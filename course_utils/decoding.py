"""Greedy decoding and beam search for any model that exposes one decoding step.

The protocol (the RNNs of chapters 1-2 and the Transformers of chapters 6-7 follow it)::

    state = model.encode(src, src_lengths)                # dict of batch-first tensors
    log_probs, state = model.decode_step(prev_tokens, state)
    # prev_tokens: (batch,) long; log_probs: (batch, vocab), log-softmax of the next token

Because every tensor in ``state`` has the batch in dimension 0, beam search can copy and
reorder hypotheses with :func:`index_state` without knowing what the state contains.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .data import EOS_ID, PAD_ID, SOS_ID

StepFn = Callable[[torch.Tensor, Any], tuple[torch.Tensor, Any]]


def index_state(state: Any, index: torch.Tensor) -> Any:
    """Select rows ``index`` (a 1-D long tensor) of every tensor in a nested state.

    Dicts, lists and tuples are walked; tensors are indexed along dimension 0; an object with
    a ``reorder(index)`` method (such as :class:`course_utils.attention.KVCache`) is replaced
    by what that returns; anything else (``None``, ints) is returned unchanged.
    """
    if isinstance(state, torch.Tensor):
        return state.index_select(0, index.to(state.device))
    if callable(getattr(state, "reorder", None)):
        return state.reorder(index)
    if isinstance(state, dict):
        return {k: index_state(v, index) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(index_state(v, index) for v in state)
    return state


def state_batch_size(state: Any) -> int:
    """The batch size of a nested state: dimension 0 of its first tensor."""
    if isinstance(state, torch.Tensor):
        return state.shape[0]
    values = state.values() if isinstance(state, dict) else state if isinstance(state, (list, tuple)) else ()
    for v in values:
        try:
            return state_batch_size(v)
        except ValueError:
            continue
    raise ValueError("the decoding state holds no tensor, so its batch size is unknown")


def _device_of(state: Any) -> torch.device:
    if isinstance(state, torch.Tensor):
        return state.device
    values = state.values() if isinstance(state, dict) else state
    for v in values:
        if isinstance(v, (torch.Tensor, dict, list, tuple)):
            return _device_of(v)
    return torch.device("cpu")


@torch.no_grad()
def greedy_decode(step: StepFn, state: Any, max_len: int, sos_id: int = SOS_ID,
                  eos_id: int = EOS_ID, pad_id: int = PAD_ID) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick the most probable next token at every step, for a whole batch at once.

    Args:
        step: ``step(prev_tokens (B,), state) -> (log_probs (B, V), state)``.
        state: the initial decoding state (batch-first tensors).
        max_len: the most tokens to generate per sentence, ``<eos>`` included.
    Returns:
        ``(tokens, scores)``: ``tokens (B, L)`` with ``L <= max_len``, without the leading
        ``<sos>``; a sentence's ``<eos>`` is kept and everything after it is ``pad_id``.
        ``scores (B,)`` is each sentence's summed log-probability (up to and including ``<eos>``).
    """
    batch = state_batch_size(state)
    device = _device_of(state)
    prev = torch.full((batch,), sos_id, dtype=torch.long, device=device)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    scores = torch.zeros(batch, device=device)
    out = []
    for _ in range(max_len):
        log_probs, state = step(prev, state)
        best_logp, best = log_probs.max(dim=-1)
        best = best.masked_fill(finished, pad_id)
        scores = scores + best_logp.masked_fill(finished, 0.0)
        out.append(best)
        finished = finished | (best == eos_id)
        prev = best
        if bool(finished.all()):
            break
    return torch.stack(out, dim=1), scores


@dataclass
class Hypothesis:
    """A beam-search result: ``tokens`` (no ``<sos>``, ending with ``<eos>`` if finished),
    ``score`` = summed log-probability, ``normalized`` = score / len(tokens) ** alpha."""

    tokens: list[int]
    score: float
    normalized: float
    finished: bool


def length_normalize(score: float, length: int, alpha: float) -> float:
    """Divide a summed log-probability by ``length ** alpha`` (alpha = 0: no normalisation)."""
    return score / max(length, 1) ** alpha


@torch.no_grad()
def beam_search(step: StepFn, state: Any, max_len: int, beam_size: int = 4, alpha: float = 0.0,
                sos_id: int = SOS_ID, eos_id: int = EOS_ID) -> list[Hypothesis]:
    """Beam search for one source sentence.

    Keeps the ``beam_size`` best unfinished prefixes by summed log-probability. A prefix
    that picks ``<eos>`` is set aside as finished; the search stops once ``beam_size``
    hypotheses have finished or ``max_len`` tokens were generated. The results are ranked
    by length-normalised score, best first. With ``beam_size=1`` this is greedy decoding.

    Args:
        step, state: as in :func:`greedy_decode`; ``state`` must hold one sentence (batch 1).
        alpha: length-normalisation exponent; 0 ranks by raw log-probability, which favours
            short outputs, 1 by the mean log-probability per token.
    Returns:
        Up to ``beam_size`` :class:`Hypothesis`, best first (finished ones before unfinished).
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    if state_batch_size(state) != 1:
        raise ValueError("beam_search decodes one sentence: give it a state of batch size 1")
    device = _device_of(state)
    prefixes = [[]]
    scores = torch.zeros(1, device=device)
    prev = torch.full((1,), sos_id, dtype=torch.long, device=device)
    finished: list[Hypothesis] = []
    for t in range(max_len):
        log_probs, state = step(prev, state)  # (live, V)
        vocab = log_probs.shape[-1]
        cand = (scores[:, None] + log_probs).reshape(-1)
        top_scores, top_idx = cand.topk(min(2 * beam_size, cand.numel()))
        keep_rows, keep_tokens, keep_scores = [], [], []
        for s, i in zip(top_scores.tolist(), top_idx.tolist()):
            row, tok = divmod(i, vocab)
            if tok == eos_id:
                toks = prefixes[row] + [tok]
                finished.append(Hypothesis(toks, s, length_normalize(s, len(toks), alpha), True))
                if len(finished) >= beam_size:
                    break
            else:
                keep_rows.append(row)
                keep_tokens.append(tok)
                keep_scores.append(s)
                if len(keep_rows) == beam_size:
                    break
        if len(finished) >= beam_size or not keep_rows:
            prefixes = []
            break
        prefixes = [prefixes[r] + [tok] for r, tok in zip(keep_rows, keep_tokens)]
        rows = torch.tensor(keep_rows, device=device)
        state = index_state(state, rows)
        scores = torch.tensor(keep_scores, device=device)
        prev = torch.tensor(keep_tokens, dtype=torch.long, device=device)
    unfinished = [Hypothesis(p, float(s), length_normalize(float(s), len(p), alpha), False)
                  for p, s in zip(prefixes, scores.tolist())]
    ranked = sorted(finished, key=lambda h: -h.normalized) + sorted(unfinished, key=lambda h: -h.normalized)
    return ranked[:beam_size]


def tokens_to_lists(tokens: torch.Tensor, eos_id: int = EOS_ID) -> list[list[int]]:
    """Cut each row of ``(B, L)`` decoded ids at its first ``<eos>`` (excluded)."""
    out = []
    for row in tokens.tolist():
        out.append(row[: row.index(eos_id)] if eos_id in row else row)
    return out
