"""Greedy decoding and beam search for any model that exposes one decoding step.

The protocol (the RNNs of chapters 1-2 and the Transformers of chapters 6-7 follow it)::

    state = model.encode(src, src_lengths)                # dict of batch-first tensors
    log_probs, state = model.decode_step(prev_tokens, state)
    # prev_tokens: (batch,) long; log_probs: (batch, vocab), log-softmax of the next token

Because every tensor in ``state`` has the batch in dimension 0, beam search can copy and
reorder hypotheses with :func:`index_state` without knowing what the state contains.

Decoder-only models (chapter 7) start from a *prompt* instead of one ``<sos>``: every decoder
here takes ``prompt`` ``(batch, P)``; its first ``P - 1`` tokens go through a *prefill*
``prefill(tokens (batch, P - 1), state) -> state`` (their predictions are not needed) and its last
token plays the part of ``<sos>``. The decoders take the model (its ``decode_step``, and its
``prefill``: one parallel pass, when it is a :class:`PromptedDecoder`) or a bare step function with
an explicit ``prefill=`` (``model.prefill``, or :func:`stepwise` to feed one token at a time); they
never look inside a step for the model it came from. Beside
greedy and beam search, :func:`sample_decode` draws each token from the model's distribution,
reshaped by a temperature and cut by :func:`filter_top_k` and :func:`filter_top_p`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from ._validate import check_int
from .data import EOS_ID, PAD_ID, SOS_ID

__all__ = [
    "Decodable", "EncoderDecoder", "PromptedDecoder", "beam_search", "filter_top_k", "filter_top_p", "greedy_decode", "Hypothesis", "index_state",
    "length_normalize", "prefill", "PrefillFn", "sample_decode", "sampling_distribution", "state_batch_size",
    "StepFn", "stepwise", "tokens_to_lists"
]

StepFn = Callable[[torch.Tensor, Any], tuple[torch.Tensor, Any]]
#: ``prefill(tokens (batch, P), state) -> state``: the state after ``tokens`` (e.g. ``DecoderLM.prefill``).
PrefillFn = Callable[[torch.Tensor, Any], Any]


@runtime_checkable
class Decodable(Protocol):
    """A model the decoders here can run: one step, ``decode_step(prev_tokens (batch,), state) ->
    (log_probs (batch, vocab), state)``. Every tensor of ``state`` has the batch in dimension 0, and
    every object in it with a ``reorder(index)`` method (a KV cache) is reordered by
    :func:`index_state`. A step may update the state's caches in place: feed a state once."""

    def decode_step(self, prev_tokens: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]: ...


@runtime_checkable
class EncoderDecoder(Decodable, Protocol):
    """A seq2seq model (chapters 1, 2, 6): ``encode(src (batch, S), src_lengths (batch,)) -> state``."""

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> Any: ...


@runtime_checkable
class PromptedDecoder(Decodable, Protocol):
    """A decoder-only model (chapters 7, 8): an empty state, and a prompt fed in one pass."""

    def init_state(self, batch: int, device=None) -> Any: ...

    def prefill(self, prompt: torch.Tensor, state: Any = None) -> Any: ...


def index_state(state: Any, index: torch.Tensor) -> Any:
    """Select rows ``index`` (a 1-D long tensor) of every tensor in a nested state.

    Dicts, lists and tuples are walked; tensors are indexed along dimension 0; an object with
    a ``reorder(index)`` method (such as :class:`course_utils.kvcache.KVCache`) is replaced
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
    """The batch size of a nested state: dimension 0 of its first tensor, or the ``batch_size`` of a
    state object that knows it (:class:`course_utils.kvcache.DecoderCache`)."""
    if isinstance(state, torch.Tensor):
        return state.shape[0]
    if isinstance(getattr(state, "batch_size", None), int):
        return state.batch_size
    values = state.values() if isinstance(state, dict) else state if isinstance(state, (list, tuple)) else ()
    for v in values:
        try:
            return state_batch_size(v)
        except ValueError:
            continue
    raise ValueError("the decoding state holds no tensor, so its batch size is unknown")


def _device_of(state: Any) -> torch.device:
    if isinstance(state, torch.Tensor) or isinstance(getattr(state, "device", None), torch.device):
        return state.device
    values = state.values() if isinstance(state, dict) else state
    for v in values:
        if isinstance(v, (torch.Tensor, dict, list, tuple)):
            return _device_of(v)
    return torch.device("cpu")


def _check_prompt(prompt: Any, batch: int) -> torch.Tensor:
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must be a (batch, P) tensor of token ids with P >= 1, got "
                         f"{tuple(prompt.shape) if isinstance(prompt, torch.Tensor) else type(prompt).__name__}")
    if prompt.is_floating_point() or prompt.dtype == torch.bool:
        raise ValueError(f"prompt must hold integer token ids, got dtype {prompt.dtype}")
    if prompt.shape[0] != batch:
        raise ValueError(f"the prompt has {prompt.shape[0]} rows but the state a batch of {batch}")
    return prompt.long()


@torch.no_grad()
def prefill(step: StepFn, state: Any, tokens: torch.Tensor) -> tuple[torch.Tensor | None, Any]:
    """Feed ``tokens (batch, P)`` through ``step`` one position at a time.

    Returns ``(log_probs (batch, V), state)``: the prediction after the last token (``None`` when
    ``P = 0``) and the state that has seen all of them. A model with a parallel prefill (one
    forward pass over the whole prompt, filling its caches) must give the same state.
    """
    log_probs = None
    for t in range(tokens.shape[1]):
        log_probs, state = step(tokens[:, t], state)
    return log_probs, state


def stepwise(step: StepFn) -> PrefillFn:
    """A prefill for a model without a parallel one: ``prefill(tokens (batch, P), state) -> state``
    feeds ``tokens`` through ``step`` one position at a time (:func:`prefill`), P forward passes."""
    if not callable(step):
        raise TypeError(f"stepwise needs a step function, got {type(step).__name__}")
    return lambda tokens, state: prefill(step, state, tokens)[1]


def _resolve(model: Any, prefill_fn: PrefillFn | None) -> tuple[StepFn, PrefillFn | None]:
    """The step and the prefill a decoder runs: a :class:`Decodable` model's ``decode_step`` and (a
    :class:`PromptedDecoder`) its ``prefill``; or a step function and the ``prefill=`` given with it."""
    if prefill_fn is not None and not callable(prefill_fn):
        raise TypeError("prefill must be a function prefill(tokens (batch, P), state) -> state, such as "
                        f"model.prefill or decoding.stepwise(step), got {type(prefill_fn).__name__}")
    if isinstance(model, Decodable):
        own = model.prefill if isinstance(model, PromptedDecoder) else None
        if own is not None and prefill_fn is not None:
            raise ValueError("the model has its own prefill: give the model alone, or its decode_step "
                             "with prefill=...")
        return model.decode_step, own if own is not None else prefill_fn
    if callable(model):
        return model, prefill_fn
    raise TypeError("the first argument is the model (with a decode_step) or a step function "
                    f"step(prev_tokens (batch,), state) -> (log_probs, state), got {type(model).__name__}")


def _start(prefill_fn: PrefillFn | None, state: Any, prompt: torch.Tensor | None,
           sos_id: int) -> tuple[torch.Tensor, Any]:
    """The first token to feed ``(batch,)`` and the state before it: ``<sos>``, or the prompt's last
    token after ``prefill_fn`` has fed its other tokens ``(batch, P - 1)`` (none to feed when P = 1)."""
    batch = state_batch_size(state)
    if prompt is None:
        return torch.full((batch,), sos_id, dtype=torch.long, device=_device_of(state)), state
    prompt = _check_prompt(prompt, batch).to(_device_of(state))
    if prompt.shape[1] == 1:                     # nothing before the last token: nothing to prefill
        return prompt[:, 0], state
    if prefill_fn is None:
        raise ValueError("a prompt needs a prefill: give the model (its prefill runs the prompt in one "
                         "pass), or prefill=model.prefill with a step function, or "
                         "prefill=decoding.stepwise(step) to feed it one token at a time")
    return prompt[:, -1], prefill_fn(prompt[:, :-1], state)


def _decode_loop(model: Any, state: Any, max_len: int, choose: Callable[[torch.Tensor], torch.Tensor],
                 sos_id: int, eos_id: int, pad_id: int, prompt: torch.Tensor | None,
                 prefill_fn: PrefillFn | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The loop shared by greedy and sampled decoding: ``choose(log_probs (B, V)) -> (B,)`` ids."""
    step, prefill_fn = _resolve(model, prefill_fn)
    batch = state_batch_size(state)
    device = _device_of(state)
    prev, state = _start(prefill_fn, state, prompt, sos_id)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    scores = torch.zeros(batch, device=device)
    out = []
    for _ in range(max_len):
        log_probs, state = step(prev, state)
        chosen = choose(log_probs)                                         # (B,)
        logp = log_probs.gather(-1, chosen[:, None]).squeeze(-1)
        chosen = chosen.masked_fill(finished, pad_id)
        scores = scores + logp.masked_fill(finished, 0.0)
        out.append(chosen)
        finished = finished | (chosen == eos_id)
        prev = chosen
        if bool(finished.all()):
            break
    return torch.stack(out, dim=1), scores


def _argmax(log_probs: torch.Tensor) -> torch.Tensor:
    return log_probs.argmax(dim=-1)


@torch.no_grad()
def greedy_decode(step: Decodable | StepFn, state: Any, max_len: int, sos_id: int = SOS_ID,
                  eos_id: int = EOS_ID, pad_id: int = PAD_ID, prompt: torch.Tensor | None = None,
                  prefill: PrefillFn | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick the most probable next token at every step, for a whole batch at once.

    Args:
        step: the model, a :class:`Decodable` (its ``decode_step``; its ``prefill`` if it has one), or a
            step function ``step(prev_tokens (B,), state) -> (log_probs (B, V), state)``.
        state: the initial decoding state (batch-first tensors).
        max_len: the most tokens to generate per sentence, ``<eos>`` included.
        prompt: ``(B, P)`` token ids to continue instead of ``<sos>`` (``sos_id`` is then
            unused); the prompt is not part of the returned tokens.
        prefill: with a step function and a prompt, ``prefill(tokens (B, P - 1), state) -> state``
            (``model.prefill``, or :func:`stepwise` ``(step)``: one token at a time).
    Returns:
        ``(tokens, scores)``: ``tokens (B, L)`` with ``L <= max_len``, without the leading
        ``<sos>``; a sentence's ``<eos>`` is kept and everything after it is ``pad_id``.
        ``scores (B,)`` is each sentence's summed log-probability (up to and including ``<eos>``).
    """
    return _decode_loop(step, state, max_len, _argmax, sos_id, eos_id, pad_id, prompt, prefill)


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
def beam_search(step: Decodable | StepFn, state: Any, max_len: int, beam_size: int = 4, alpha: float = 0.0,
                sos_id: int = SOS_ID, eos_id: int = EOS_ID, prompt: torch.Tensor | None = None,
                prefill: PrefillFn | None = None) -> list[Hypothesis]:
    """Beam search for one source sentence.

    Keeps the ``beam_size`` best unfinished prefixes by summed log-probability. A prefix
    that picks ``<eos>`` is set aside as finished; the search stops once ``beam_size``
    hypotheses have finished or ``max_len`` tokens were generated. The results are ranked
    by length-normalised score, best first. With ``beam_size=1`` this is greedy decoding.

    Args:
        step, state, prefill: as in :func:`greedy_decode`; ``state`` must hold one sentence (batch 1).
        alpha: length-normalisation exponent; 0 ranks by raw log-probability, which favours
            short outputs, 1 by the mean log-probability per token.
        prompt: ``(1, P)`` token ids to continue instead of ``<sos>`` (not part of the results).
    Returns:
        Up to ``beam_size`` :class:`Hypothesis`, best first (finished ones before unfinished).
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    if state_batch_size(state) != 1:
        raise ValueError("beam_search decodes one sentence: give it a state of batch size 1")
    step, prefill = _resolve(step, prefill)
    device = _device_of(state)
    prefixes = [[]]
    scores = torch.zeros(1, device=device)
    prev, state = _start(prefill, state, prompt, sos_id)
    finished: list[Hypothesis] = []
    for _ in range(max_len):
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


# --- sampling ------------------------------------------------------------------------------

def _check_logits(logits: Any) -> None:
    if not isinstance(logits, torch.Tensor) or logits.dim() < 1 or not logits.is_floating_point():
        raise ValueError("logits must be a floating-point tensor (..., vocab), got "
                         f"{logits.dtype if isinstance(logits, torch.Tensor) else type(logits).__name__}")


def filter_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest logits of each row, set the others to ``-inf``: ``(..., V)``.

    Exactly ``k`` entries survive even when several logits tie at the boundary (the tie is
    broken by :func:`torch.topk`). ``k >= V`` keeps everything.
    """
    _check_logits(logits)
    check_int(k, "top_k", 1)
    if k >= logits.shape[-1]:
        return logits
    idx = logits.topk(k, dim=-1).indices
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, idx, True)
    return logits.masked_fill(~keep, float("-inf"))


def filter_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filtering (Holtzman et al. 2020): keep the smallest set of most probable tokens
    whose probability (softmax of the row) sums to at least ``p``; the others get ``-inf``.

    A token is kept when the mass of the tokens ranked strictly before it is still below ``p``,
    so the most probable token is always kept and ``p = 1`` keeps every token. Between tokens of
    equal probability the one with the lower id ranks first. ``logits (..., V)``; ``0 < p <= 1``.
    """
    _check_logits(logits)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p <= 1.0:
        raise ValueError(f"top_p must be a probability in (0, 1], got {p!r}")
    if p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True, stable=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs                      # (..., V), exclusive cumsum
    keep_sorted = mass_before < p
    keep_sorted[..., 0] = True
    keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


def sampling_distribution(log_probs: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                          top_p: float | None = None) -> torch.Tensor:
    """The distribution :func:`sample_decode` draws from, ``(..., V)`` probabilities.

    ``softmax(filter_top_p(filter_top_k(log_probs / temperature, top_k), top_p))``: the
    temperature first (below 1 sharpens, above 1 flattens), then top-k, then top-p on what is
    left (the order of Hugging Face's ``generate``). ``temperature = 0`` is the limit: all mass
    on the most probable token (the first one in case of a tie), i.e. greedy decoding.
    """
    _check_logits(log_probs)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
        raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
    if temperature == 0:
        return torch.zeros_like(log_probs).scatter_(-1, log_probs.argmax(dim=-1, keepdim=True), 1.0)
    logits = log_probs / temperature
    if top_k is not None:
        logits = filter_top_k(logits, top_k)
    if top_p is not None:
        logits = filter_top_p(logits, top_p)
    return torch.softmax(logits, dim=-1)


@torch.no_grad()
def sample_decode(step: Decodable | StepFn, state: Any, max_len: int, temperature: float = 1.0,
                  top_k: int | None = None, top_p: float | None = None, generator: torch.Generator | None = None,
                  sos_id: int = SOS_ID, eos_id: int = EOS_ID, pad_id: int = PAD_ID,
                  prompt: torch.Tensor | None = None, prefill: PrefillFn | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw each next token from :func:`sampling_distribution`, for a whole batch at once.

    Args:
        step, state, max_len, sos_id, eos_id, pad_id, prompt, prefill: as in :func:`greedy_decode`.
        temperature, top_k, top_p: see :func:`sampling_distribution`; ``temperature=0`` is
            exactly :func:`greedy_decode` (and draws no random numbers).
        generator: a seeded ``torch.Generator`` makes the samples reproducible (default: the
            global generator, seeded by :func:`course_utils.train.set_seed`).
    Returns:
        ``(tokens (B, L), scores (B,))`` laid out as in :func:`greedy_decode`; ``scores`` sums the
        *model's* log-probabilities of the drawn tokens (before temperature and filtering).
    """
    sampling_distribution(torch.zeros(1), temperature, top_k, top_p)   # bad settings fail before any step
    if temperature == 0:
        return _decode_loop(step, state, max_len, _argmax, sos_id, eos_id, pad_id, prompt, prefill)

    def draw(log_probs: torch.Tensor) -> torch.Tensor:
        probs = sampling_distribution(log_probs, temperature, top_k, top_p)
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)

    return _decode_loop(step, state, max_len, draw, sos_id, eos_id, pad_id, prompt, prefill)
