"""The length-graded comparison of chapters 1, 2 and 6: one task, one budget, the same metrics.

Every chapter trains its model on :func:`course_utils.data.length_task` (reversal of sequences of
2-14 symbols, tested up to longer ones) with :data:`LENGTH_TASK_BUDGET`, through
:func:`train_on_length_task` (the course's loop, :func:`course_utils.train.fit`), and reports the
same metrics: exact match by source length and averaged over a range (:func:`mean_exact_match`),
the share of errors at each output position (:func:`error_by_position`), and the teacher-forced
predictions and accuracy that separate what the decoder gets wrong on its own from errors that
compound (:func:`teacher_forced_predictions`, :func:`teacher_forced_accuracy`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict

import torch
from torch import nn

from .budget import grading
from .data import PAD_ID, Pair, Vocab, make_batch
from .runcache import reuse_or_train
from .train import History, PerStep, Scores, TrainConfig, set_seed, train_seq2seq

__all__ = [
    "LENGTH_TASK_BUDGET", "error_by_position", "length_task_config", "mean_exact_match", "teacher_forced_accuracy",
    "teacher_forced_predictions", "train_on_length_task",
]

#: The training budget of the length-graded comparison (:func:`course_utils.data.length_task`):
#: every chapter trains its model with these settings so that accuracies are comparable.
LENGTH_TASK_BUDGET = dict(steps=700, batch_size=64, lr=3e-3)



def length_task_config(grading_steps: int = 3, **overrides) -> TrainConfig:
    """The training settings of :data:`LENGTH_TASK_BUDGET` (``steps``, ``lr``; gradient norms clipped
    at 1.0) as a :class:`~course_utils.train.TrainConfig`, with ``overrides`` (its fields), shrunk to
    ``grading_steps`` steps while nbgrader runs the notebook (:func:`course_utils.budget.grading`)."""
    fields = {"steps": LENGTH_TASK_BUDGET["steps"], "lr": LENGTH_TASK_BUDGET["lr"], "clip": 1.0, **overrides}
    if grading():
        fields["steps"] = min(fields["steps"], grading_steps)
    return TrainConfig(**fields)


def train_on_length_task(make_model, pairs: Sequence[Pair], vocab: Vocab, config: TrainConfig | None = None,
                         seed: int = 0, *, batch_size: int = LENGTH_TASK_BUDGET["batch_size"], device=None,
                         progress: bool = True, desc: str = "training") -> tuple[nn.Module, History]:
    """Seed, build ``make_model()`` and train it on the length task with ``config`` (default: the
    shared budget, :func:`length_task_config`; change it with ``length_task_config(lr=...)``).

    Every model of the length comparison starts from the same seed and sees the same batches.
    ``device``, ``progress`` and ``desc`` go to :func:`course_utils.train.train_seq2seq`.
    A run another chapter made before on this machine, the same to the last bit, is reused
    (:func:`course_utils.runcache.reuse_or_train`; not with a :class:`~course_utils.train.PerStep` function,
    whose code the cache cannot compare, or a time budget).
    Returns ``(model, history)``.
    """
    config = length_task_config() if config is None else config
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a train.TrainConfig (lengthtask.length_task_config(...)), got {type(config).__name__}")
    set_seed(seed)
    model = make_model()
    inputs = None if isinstance(config.schedule, PerStep) or config.max_seconds else (list(pairs), vocab.itos, seed, batch_size, asdict(config))
    history = reuse_or_train(model, lambda: train_seq2seq(model, pairs, vocab, vocab, config, batch_size=batch_size,
                                                          seed=seed, device=device, progress=progress, desc=desc),
                             inputs, device=device, label=desc)
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
