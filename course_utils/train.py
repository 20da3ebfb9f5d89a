"""Seeding, device choice, the training loop and evaluation of sequence-to-sequence models.

Models follow the protocol of :mod:`course_utils.decoding` and also have a teacher-forced
``forward(src, src_lengths, tgt_in) -> logits (batch, T, vocab)``.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from tqdm.std import tqdm

from .data import PAD_ID, Batch, Pair, Vocab, batches, make_batch
from .decoding import greedy_decode, tokens_to_lists

#: The training budget of the length-graded comparison (:func:`course_utils.data.length_task`):
#: every chapter trains its model with these settings so that accuracies are comparable.
LENGTH_TASK_BUDGET = dict(steps=700, batch_size=64, lr=3e-3)


def set_seed(seed: int = 0) -> None:
    """Seed Python, NumPy and PyTorch (CPU and every GPU)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def get_device(prefer: str | None = None) -> torch.device:
    """The best available device: CUDA, then Apple's MPS, then the CPU.

    ``prefer`` (or the environment variable ``COURSE_DEVICE``) forces one, e.g. ``"cpu"``.
    """
    choice = prefer or os.environ.get("COURSE_DEVICE")
    if choice:
        return torch.device(choice)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def grading() -> bool:
    """True while nbgrader executes the notebook (autograde or validate): shrink experiments."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor, pad_id: int = PAD_ID,
                  label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean cross-entropy over non-pad target positions.

    Args:
        logits: ``(batch, T, vocab)``; targets: ``(batch, T)`` ids, ``pad_id`` where there is no target.
        label_smoothing: ``eps`` in [0, 1): the target distribution puts ``1 - eps`` on the
            right token and spreads ``eps`` uniformly over the whole vocabulary (Szegedy et al.
            2016; Vaswani et al. 2017 use 0.1). 0 is plain cross-entropy.
    """
    if logits.shape[:2] != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} "
                         "must agree in (batch, T)")
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                       ignore_index=pad_id, label_smoothing=label_smoothing)


@dataclass
class History:
    """What :func:`train_seq2seq` returns: per-step loss, gradient norm (before clipping) and
    learning rate, and wall time."""

    loss: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    seconds: float = 0.0
    lr: list[float] = field(default_factory=list)

    def smoothed(self, window: int = 20) -> list[float]:
        """The loss averaged over a sliding window (for plots)."""
        out, acc = [], 0.0
        for i, v in enumerate(self.loss):
            acc += v
            if i >= window:
                acc -= self.loss[i - window]
            out.append(acc / min(i + 1, window))
        return out


def train_seq2seq(model: nn.Module, pairs: Sequence[Pair], src_vocab: Vocab, tgt_vocab: Vocab,
                  steps: int, batch_size: int = 64, lr: float = 3e-3, clip: float | None = 1.0,
                  device: torch.device | str | None = None, seed: int = 0,
                  progress: bool = True, desc: str = "training", lr_at: Callable[[int], float] | None = None,
                  label_smoothing: float = 0.0, betas: tuple[float, float] = (0.9, 0.999),
                  eps: float = 1e-8) -> History:
    """Train with teacher forcing, Adam and gradient-norm clipping for ``steps`` batches.

    Epochs are reshuffled with ``seed + epoch``. Returns a :class:`History`. The model is
    left on ``device`` (default: :func:`get_device`) in eval mode.

    The loop serves every chapter: the RNNs of chapters 1-2 use the defaults (a constant
    ``lr``); a Transformer passes a schedule and label smoothing.

    Args:
        lr_at: ``lr_at(step) -> learning rate`` for steps counted from 1 (e.g. the warmup
            schedule :func:`course_utils.transformer.noam_lr`); it replaces ``lr``.
        label_smoothing: see :func:`sequence_loss`.
        betas, eps: Adam's (Vaswani et al. use ``(0.9, 0.98)`` and ``1e-9``).
        clip: the largest gradient norm (``None``: no clipping).
    """
    device = torch.device(device) if device is not None else get_device()
    model.to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=betas, eps=eps)
    history = History()
    start = time.perf_counter()
    bar = tqdm(total=steps, desc=desc, disable=not progress, file=_progress_file(progress), mininterval=1.0,
               ascii=True)
    step, epoch = 0, 0
    while step < steps:
        for batch in batches(pairs, src_vocab, tgt_vocab, batch_size, shuffle=True, seed=seed + epoch):
            batch = batch.to(device)
            if lr_at is not None:
                for group in opt.param_groups:
                    group["lr"] = lr_at(step + 1)
            logits = model(batch.src, batch.src_lengths, batch.tgt_in)
            loss = sequence_loss(logits, batch.tgt_out, label_smoothing=label_smoothing)
            opt.zero_grad()
            loss.backward()
            norm = nn.utils.clip_grad_norm_(model.parameters(), math.inf if clip is None else clip)
            opt.step()
            history.loss.append(loss.item())
            history.grad_norm.append(float(norm))
            history.lr.append(opt.param_groups[0]["lr"])
            step += 1
            bar.update(1)
            if step % 50 == 0:
                bar.set_postfix(loss=f"{history.smoothed()[-1]:.3f}")
            if step >= steps:
                break
        epoch += 1
    bar.close()
    history.seconds = time.perf_counter() - start
    model.eval()
    return history


@torch.no_grad()
def predict(model: nn.Module, sources: Sequence[Sequence[str]], src_vocab: Vocab, tgt_vocab: Vocab,
            max_len: int, batch_size: int = 256, decode=greedy_decode) -> list[list[str]]:
    """Translations of ``sources`` (token lists) as token lists.

    ``decode(step, state, max_len) -> (tokens (B, L), scores)`` is greedy decoding by
    default; a notebook passes a learner's own decoder here.
    """
    model.eval()
    device = next(model.parameters()).device
    out: list[list[str]] = []
    for start in range(0, len(sources), batch_size):
        chunk = [(s, []) for s in sources[start:start + batch_size]]
        batch = make_batch(chunk, src_vocab, tgt_vocab).to(device)
        tokens, _ = decode(model.decode_step, model.encode(batch.src, batch.src_lengths), max_len)
        out.extend(tgt_vocab.decode(ids) for ids in tokens_to_lists(tokens.cpu()))
    return out


@dataclass
class Scores:
    """Token accuracy and exact match overall and per source length."""

    token_accuracy: float
    exact_match: float
    by_length: dict[int, tuple[float, float]]  # length -> (token accuracy, exact match)

    def __str__(self) -> str:
        return f"token accuracy {self.token_accuracy:.3f}, exact match {self.exact_match:.3f}"


def score_predictions(predictions: Sequence[Sequence[str]], pairs: Sequence[Pair]) -> Scores:
    """Compare predictions with the targets of ``pairs``.

    Token accuracy counts, over the target positions plus one for ``<eos>``, those where the
    prediction has the same token (a prediction that is too long or too short loses the
    positions that differ, including the end). Exact match needs the whole sequence right.
    """
    if len(predictions) != len(pairs):
        raise ValueError(f"{len(predictions)} predictions for {len(pairs)} pairs")
    per_len: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for pred, (src, tgt) in zip(predictions, pairs):
        ref = list(tgt) + ["<eos>"]
        hyp = list(pred) + ["<eos>"]
        right = sum(1 for i, tok in enumerate(ref) if i < len(hyp) and hyp[i] == tok)
        per_len[len(src)].append((right, len(ref), int(list(pred) == list(tgt))))
    tot_right = sum(r for v in per_len.values() for r, _, _ in v)
    tot = sum(n for v in per_len.values() for _, n, _ in v)
    exact = sum(e for v in per_len.values() for _, _, e in v)
    by_length = {
        L: (sum(r for r, _, _ in v) / sum(n for _, n, _ in v), sum(e for _, _, e in v) / len(v))
        for L, v in sorted(per_len.items())
    }
    return Scores(tot_right / tot, exact / len(predictions), by_length)


def evaluate(model: nn.Module, pairs: Sequence[Pair], src_vocab: Vocab, tgt_vocab: Vocab,
             max_len: int | None = None, decode=greedy_decode) -> Scores:
    """Decode the sources of ``pairs`` (greedily by default, see :func:`predict`) and score
    them (:func:`score_predictions`)."""
    max_len = max_len or max(len(t) for _, t in pairs) + 5
    preds = predict(model, [s for s, _ in pairs], src_vocab, tgt_vocab, max_len, decode=decode)
    return score_predictions(preds, pairs)


def count_parameters(model: nn.Module) -> int:
    """The number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = [
    "LENGTH_TASK_BUDGET", "Batch", "History", "Scores", "count_parameters", "error_by_position", "evaluate",
    "get_device", "grading", "length_task_budget", "mean_exact_match", "predict", "score_predictions",
    "sequence_loss", "set_seed", "teacher_forced_accuracy", "teacher_forced_predictions", "train_on_length_task",
    "train_seq2seq",
]


# ----------------------------------------------------------------------------------------
# The length-graded comparison shared by the chapters (data.length_task + LENGTH_TASK_BUDGET)
# ----------------------------------------------------------------------------------------

def length_task_budget(grading_steps: int = 20, **overrides) -> dict:
    """:data:`LENGTH_TASK_BUDGET` with ``overrides``, shrunk to ``grading_steps`` steps while
    nbgrader runs the notebook (:func:`grading`)."""
    budget = {**LENGTH_TASK_BUDGET, **overrides}
    if grading():
        budget["steps"] = min(budget["steps"], grading_steps)
    return budget


def train_on_length_task(make_model, pairs: Sequence[Pair], vocab: Vocab, seed: int = 0,
                         **kwargs) -> tuple[nn.Module, History]:
    """Seed, build ``make_model()`` and train it on the length task with the shared budget.

    Every model of the length comparison starts from the same seed and sees the same
    batches. ``kwargs`` go to :func:`train_seq2seq` (``device``, ``progress``, ``desc``) or
    override the budget (``steps``, ``batch_size``, ``lr``; see :func:`length_task_budget`).
    Returns ``(model, history)``.
    """
    budget_keys = {k: kwargs.pop(k) for k in list(kwargs) if k in LENGTH_TASK_BUDGET}
    set_seed(seed)
    model = make_model()
    history = train_seq2seq(model, pairs, vocab, vocab, seed=seed, **length_task_budget(**budget_keys), **kwargs)
    return model, history


def mean_exact_match(scores: Scores, lo: int, hi: int) -> float:
    """Exact match averaged over the source lengths ``lo..hi`` (each length weighs the same)."""
    missing = [L for L in range(lo, hi + 1) if L not in scores.by_length]
    if missing:
        raise ValueError(f"no test sentences of source length {missing}; have {sorted(scores.by_length)}")
    return sum(scores.by_length[L][1] for L in range(lo, hi + 1)) / (hi - lo + 1)


def error_by_position(predictions: Sequence[Sequence[str]], pairs: Sequence[Pair],
                      lengths: Sequence[int] | None = None) -> list[float]:
    """The share of wrong output tokens at each target position ``0, 1, ...``.

    Position ``i`` counts the sentences (of source length in ``lengths``, default all) whose
    target has a token at ``i``; a prediction is wrong there if its ``i``-th token differs or
    is missing. The ``<eos>`` position is not counted.
    """
    if len(predictions) != len(pairs):
        raise ValueError(f"{len(predictions)} predictions for {len(pairs)} pairs")
    keep = None if lengths is None else set(lengths)
    wrong: dict[int, int] = defaultdict(int)
    total: dict[int, int] = defaultdict(int)
    for pred, (src, tgt) in zip(predictions, pairs):
        if keep is not None and len(src) not in keep:
            continue
        for i, tok in enumerate(tgt):
            total[i] += 1
            wrong[i] += int(i >= len(pred) or pred[i] != tok)
    return [wrong[i] / total[i] for i in range(len(total))]


@torch.no_grad()
def teacher_forced_predictions(model: nn.Module, pairs: Sequence[Pair], src_vocab: Vocab, tgt_vocab: Vocab,
                               batch_size: int = 256) -> list[list[str]]:
    """For every target position, the model's most probable token given the *correct* previous
    tokens (teacher forcing), as token lists as long as the targets: errors do not compound,
    so :func:`error_by_position` on them shows what the decoder gets wrong on its own."""
    model.eval()
    device = next(model.parameters()).device
    out: list[list[str]] = []
    for start in range(0, len(pairs), batch_size):
        chunk = list(pairs[start:start + batch_size])
        batch = make_batch(chunk, src_vocab, tgt_vocab).to(device)
        pred = model(batch.src, batch.src_lengths, batch.tgt_in).argmax(-1).cpu()
        out.extend([tgt_vocab.itos[i] for i in pred[b, : len(t)].tolist()] for b, (_, t) in enumerate(chunk))
    return out


@torch.no_grad()
def teacher_forced_accuracy(model: nn.Module, pairs: Sequence[Pair], src_vocab: Vocab, tgt_vocab: Vocab,
                            batch_size: int = 256) -> float:
    """Token accuracy when the decoder is given the *correct* previous tokens (as in training).

    The share of target positions (``<eos>`` included) where the teacher-forced argmax is the
    target token; compare it with the free-running token accuracy of :func:`evaluate`.
    """
    model.eval()
    device = next(model.parameters()).device
    right = total = 0
    for start in range(0, len(pairs), batch_size):
        batch = make_batch(list(pairs[start:start + batch_size]), src_vocab, tgt_vocab).to(device)
        pred = model(batch.src, batch.src_lengths, batch.tgt_in).argmax(-1)
        real = batch.tgt_out != PAD_ID
        right += int(((pred == batch.tgt_out) & real).sum())
        total += int(real.sum())
    return right / total


# ----------------------------------------------------------------------------------------
# The progress bar of train_seq2seq
# ----------------------------------------------------------------------------------------

class _DisplayLine:
    """A file for tqdm's text bar that shows it as one notebook output updated in place.

    tqdm.auto's widget is stored by an executed notebook as its text fallback frozen at 0%,
    and a text bar on stdout as one output per refresh. Updating one display (a display id)
    keeps a single output, which ends as the finished bar.
    """

    def __init__(self):
        from IPython.display import display
        self.handle = display({"text/plain": ""}, raw=True, display_id=True)

    def write(self, text: str) -> None:
        line = text.replace("\n", "\r").split("\r")
        line = [part for part in line if part.strip()]
        if line:
            self.handle.update({"text/plain": line[-1]}, raw=True)

    def flush(self) -> None:
        pass


def _progress_file(enabled: bool):
    """Where the progress bar goes: one updated display in a notebook kernel, else stdout."""
    if enabled and "ipykernel" in sys.modules:
        try:
            from IPython import get_ipython
            if get_ipython() is not None and type(get_ipython()).__name__ == "ZMQInteractiveShell":
                return _DisplayLine()
        except ImportError:
            pass
    return sys.stdout
