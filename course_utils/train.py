"""Seeding, device choice, the course's one training loop, and evaluation of sequence-to-sequence models.

* :func:`fit` is the training loop of every model of the course: batches in, a loss per task
  (:func:`seq2seq_loss`, :func:`classification_loss`, :func:`next_token_loss`), AdamW with weight
  decay on the weight matrices only (:func:`param_groups`), a learning-rate schedule, gradient-norm
  clipping, a device, a progress bar, an evaluation every so many steps; it returns a
  :class:`History`. :func:`train_seq2seq`, :func:`course_utils.classify.train_classifier` and
  :func:`course_utils.textlm.train_lm` are :func:`fit` with their task's batches and loss.
* The learning-rate schedules of the course: :func:`noam_lr` (Vaswani et al.) and
  :func:`warmup_cosine` (a linear warmup and a cosine decay), as schedule objects of a
  :class:`TrainConfig` (:class:`Noam`, :class:`WarmupCosine`) whose length is the config's
  ``steps`` unless they fix their own, so ``dataclasses.replace(cfg, steps=...)`` stays right.
* Every loss skips the targets marked :data:`IGNORE_INDEX` (-100, ``F.cross_entropy``'s default);
  :func:`sequence_loss` marks the padding of seq2seq targets so.
* Seq2seq models follow the protocol of :mod:`course_utils.decoding` and also have a teacher-forced
  ``forward(src, src_lengths, tgt_in) -> logits (batch, T, vocab)``; :func:`evaluate` decodes and
  scores them. (The length-graded comparison of chapters 1, 2 and 6 is :mod:`course_utils.lengthtask`.)
"""

from __future__ import annotations

import itertools
import math
import os
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.std import tqdm

from ._validate import check_int
from .data import PAD_ID, Batch, Pair, Vocab, batches, make_batch
from .decoding import greedy_decode, tokens_to_lists
from .progress import progress_file

__all__ = [
    "IGNORE_INDEX", "History", "Noam", "PerStep", "Scores", "TrainConfig", "WarmupCosine", "classification_loss",
    "count_parameters", "epochs", "evaluate", "fit", "get_device", "next_token_loss", "noam_lr", "param_groups",
    "predict", "score_predictions", "seq2seq_loss", "sequence_loss", "set_seed", "train_seq2seq", "warmup_cosine",
]


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


#: The target value of positions that do not count in a loss (``F.cross_entropy``'s default): the one
#: ignore label of every loss of the course.
IGNORE_INDEX = -100


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor, pad_id: int = PAD_ID,
                  label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean cross-entropy over non-pad target positions.

    Args:
        logits: ``(batch, T, vocab)``; targets: ``(batch, T)`` ids, ``pad_id`` where there is no target
            (marked :data:`IGNORE_INDEX` here, as every loss of the course skips it).
        label_smoothing: ``eps`` in [0, 1): the target distribution puts ``1 - eps`` on the
            right token and spreads ``eps`` uniformly over the whole vocabulary (Szegedy et al.
            2016; Vaswani et al. 2017 use 0.1). 0 is plain cross-entropy.
    """
    if logits.shape[:2] != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} "
                         "must agree in (batch, T)")
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
    targets = targets.masked_fill(targets == pad_id, IGNORE_INDEX)
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                       ignore_index=IGNORE_INDEX, label_smoothing=label_smoothing)


@dataclass
class History:
    """What :func:`fit` returns: per-step loss, gradient norm (before clipping) and learning rate,
    the steps taken and the wall time; and, where ``fit`` was given an ``evaluate``, the steps it
    evaluated after (``eval_steps``, counted from 1; 0 is before training) and the values
    (``eval_values``)."""

    loss: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    seconds: float = 0.0
    lr: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    eval_values: list[float] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.loss)

    def smoothed(self, window: int = 20) -> list[float]:
        """The loss averaged over a sliding window (for plots)."""
        out, acc = [], 0.0
        for i, v in enumerate(self.loss):
            acc += v
            if i >= window:
                acc -= self.loss[i - window]
            out.append(acc / min(i + 1, window))
        return out

    def epoch_means(self, sizes: Sequence[int]) -> list[float]:
        """The loss per epoch, each step weighted by its batch's size: ``sizes`` are one epoch's batch
        sizes in order (the last epoch may be cut short)."""
        per_epoch = len(sizes)
        out = []
        for e in range(0, self.steps, per_epoch):
            losses = self.loss[e:e + per_epoch]
            out.append(sum(v * n for v, n in zip(losses, sizes)) / sum(sizes[:len(losses)]))
        return out


# ----------------------------------------------------------------------------------------
# Learning-rate schedules (a TrainConfig's schedule; steps counted from 1)
# ----------------------------------------------------------------------------------------

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


def warmup_cosine(step: int, total: int, warmup: int = 0, floor: float = 0.0, overlap: bool = False) -> float:
    """The factor of the peak learning rate at ``step`` (counted from 1) of a linear warmup over
    ``warmup`` steps (``step / warmup``) and a cosine decay from 1 to ``floor`` over ``total`` steps.

    ``overlap=False`` (GPT-2 and nanoGPT's schedule; :func:`course_utils.classify.train_classifier`): the
    cosine starts where the warmup ends and reaches ``floor`` at ``total``. ``overlap=True``
    (:func:`course_utils.textlm.train_lm`): the cosine runs over all ``total`` steps from step 1, and
    the warmup caps it: ``min(step / warmup, cosine)``.
    """
    if step < 1:
        raise ValueError(f"steps are counted from 1, got {step}")
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"floor is a fraction of the peak learning rate, in [0, 1], got {floor}")
    if overlap:
        ramp = min(1.0, step / max(1, warmup))
        return min(ramp, floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * (step - 1) / max(1, total))))
    if step - 1 < warmup:
        return step / warmup
    done = min(1.0, (step - 1 - warmup) / max(1, total - warmup))
    return floor + (1 - floor) * (0.5 * (1 + math.cos(math.pi * done)))


@dataclass(frozen=True)
class WarmupCosine:
    """The schedule ``config.lr * warmup_cosine(step, total, warmup, floor, overlap)`` (see
    :func:`warmup_cosine`): ``total=None`` (default) is the config's ``steps``, read at every step, so
    a ``dataclasses.replace(config, steps=...)`` decays over the new length."""

    warmup: int = 0
    floor: float = 0.0
    overlap: bool = False
    total: int | None = None

    def __call__(self, step: int, config: TrainConfig) -> float:
        total = config.steps if self.total is None else self.total
        return config.lr * warmup_cosine(step, total, self.warmup, self.floor, self.overlap)


@dataclass(frozen=True)
class Noam:
    """The schedule :func:`noam_lr` ``(step, d_model, warmup, factor)``: its peak is set by ``factor``
    and ``d_model``, so the config's ``lr`` is not used."""

    d_model: int
    warmup: int
    factor: float = 1.0

    def __call__(self, step: int, config: TrainConfig) -> float:
        return noam_lr(step, self.d_model, self.warmup, self.factor)


@dataclass(frozen=True)
class PerStep:
    """The schedule ``fn(step)``: a learning rate that depends on the step alone (chapter 6 wraps the
    learner's ``noam_lr`` in it). A schedule that depends on the number of steps reads it from the
    config instead (:class:`WarmupCosine`), so that it follows ``replace(config, steps=...)``."""

    fn: Callable[[int], float]

    def __post_init__(self):
        if not callable(self.fn):
            raise TypeError(f"PerStep takes a function of the step, got {type(self.fn).__name__}")

    def __call__(self, step: int, config: TrainConfig) -> float:
        return self.fn(step)


# ----------------------------------------------------------------------------------------
# The training loop
# ----------------------------------------------------------------------------------------

def seq2seq_loss(model: nn.Module, batch: Batch, label_smoothing: float = 0.0) -> torch.Tensor:
    """Teacher forcing on a :class:`~course_utils.data.Batch`: :func:`sequence_loss` of
    ``model(src, src_lengths, tgt_in)`` against ``tgt_out``."""
    logits = model(batch.src, batch.src_lengths, batch.tgt_in)
    return sequence_loss(logits, batch.tgt_out, label_smoothing=label_smoothing)


def classification_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Cross-entropy of ``model(x) (batch, classes)`` against ``y (batch,)``, for ``batch = (x, y)``."""
    x, y = batch
    return F.cross_entropy(model(x), y)


def next_token_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy of ``model(x) (batch, T, vocab)`` against ``y (batch, T)`` (the next
    tokens; :data:`IGNORE_INDEX` where nothing is scored), for ``batch = (x, y)``."""
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=IGNORE_INDEX)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW's two groups: the weight matrices of ``nn.Linear`` and convolution layers decay by
    ``weight_decay``; biases, norms, embeddings (token, position, class token) do not (decaying
    them pulls gains towards 0 and rare tokens' vectors towards the origin). Practice differs:
    minGPT excludes embeddings as here; BERT excludes only biases and LayerNorm weights; nanoGPT
    decays every tensor of two or more dimensions, embeddings included. A weight shared by an
    embedding and an output layer counts as an embedding. Each parameter appears once, in
    ``model.parameters()`` order."""
    decayed = {id(m.weight) for m in model.modules()
               if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d))}
    decayed -= {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    params = list(model.parameters())
    return [{"params": [p for p in params if id(p) in decayed], "weight_decay": weight_decay},
            {"params": [p for p in params if id(p) not in decayed], "weight_decay": 0.0}]


def _to(batch, device: torch.device):
    """``batch`` on ``device``: a tensor, a tuple or list of them, or anything with ``.to``."""
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to(b, device) for b in batch)
    return batch.to(device) if hasattr(batch, "to") else batch


@dataclass(frozen=True)
class TrainConfig:
    """How :func:`fit` trains: ``steps`` AdamW updates (fewer if the batches run out or time is up).

    Fields:
        steps: the number of updates.
        lr: the learning rate (the peak of a schedule that scales it).
        schedule: ``schedule(step, config) -> learning rate`` for steps counted from 1, set before each
            step (:meth:`lr_of`): :class:`WarmupCosine`, :class:`Noam`, or :class:`PerStep` for a
            function of the step alone; a function of the config, so it follows
            ``replace(config, steps=...)``. ``None``: the constant ``lr``.
        weight_decay: AdamW's decoupled decay, on the weight matrices only (:func:`param_groups`).
        betas, eps: Adam's moment decays and epsilon (Vaswani et al. use ``(0.9, 0.98)``, ``1e-9``).
        clip: the largest gradient norm (``None``: no clipping; the norm is recorded anyway).
        max_seconds: stop after the first step that ends past this wall-clock budget.
        eval_every: how often ``fit``'s ``evaluate`` runs, in steps.

    ``dataclasses.replace(cfg, steps=20)`` keeps every other setting, and a ``schedule`` without a
    length of its own runs over the 20 steps.
    """

    steps: int
    lr: float = 3e-3
    schedule: Callable[[int, TrainConfig], float] | None = None
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    clip: float | None = None
    max_seconds: float | None = None
    eval_every: int = 100

    def __post_init__(self):
        check_int(self.steps, "steps")
        check_int(self.eval_every, "eval_every", low=1)
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if self.clip is not None and not self.clip > 0:
            raise ValueError(f"clip must be None (no clipping) or > 0, got {self.clip!r}")
        if self.schedule is not None and not callable(self.schedule):
            raise TypeError(f"schedule must be callable as schedule(step, config), got {type(self.schedule).__name__}")

    @property
    def scheduled(self) -> bool:
        """Whether the learning rate changes from step to step (a ``schedule``)."""
        return self.schedule is not None

    def lr_of(self, step: int) -> float:
        """The learning rate of ``step`` (counted from 1): ``schedule(step, self)``, or ``lr``."""
        return self.lr if self.schedule is None else self.schedule(step, self)


def fit(model: nn.Module, batches: Iterable, loss_fn: Callable[[nn.Module, object], torch.Tensor],
        config: TrainConfig, *, device: torch.device | str | None = None, progress: bool = False,
        desc: str = "training", evaluate: Callable[[nn.Module], float] | None = None) -> History:
    """The course's training loop: ``config.steps`` AdamW updates of ``model`` on ``loss_fn(model, batch)``.

    Args:
        batches: an iterable of batches (tensors, tuples of tensors or
            :class:`~course_utils.data.Batch`); one is drawn per step, and training stops early
            if it runs out. Seed it to make runs repeat.
        loss_fn: the task's loss, e.g. :func:`seq2seq_loss`, :func:`classification_loss`,
            :func:`next_token_loss`.
        config: the optimiser, the schedule, clipping and the budget (:class:`TrainConfig`).
        device: where to train (default: where the model's parameters are); batches are moved there.
        progress: a progress bar (one updated line in a notebook), labelled ``desc``.
        evaluate: ``evaluate(model) -> float`` (e.g. a held-out loss) before the first step, after
            every ``config.eval_every`` steps and after the last, in eval mode, without gradients, on
            a fork of torch's random state (training goes exactly as without it): ``History.eval_values``.
    Returns:
        a :class:`History`; the model is left in eval mode.
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a train.TrainConfig (e.g. TrainConfig(steps=100, lr=1e-3)), "
                        f"got {type(config).__name__}")
    params = list(model.parameters())
    if not params:
        raise ValueError("the model has no parameters to train")
    device = torch.device(device or params[0].device)
    model.to(device).train()
    params = list(model.parameters())   # after the move: the tensors the optimiser updates and clips
    # foreach: one call per update for all tensors (PyTorch's default on CUDA); on the CPU it computes
    # the same bits as the loop over tensors, with less Python per step
    opt = torch.optim.AdamW(param_groups(model, config.weight_decay), lr=config.lr, betas=config.betas,
                            eps=config.eps, foreach=True)
    history = History()
    _evaluate(model, evaluate, 0, history)
    start = time.perf_counter()
    bar = tqdm(total=config.steps, desc=desc, disable=not progress, file=progress_file(progress), mininterval=1.0,
               ascii=True)
    for step, batch in enumerate(itertools.islice(batches, config.steps), start=1):
        if config.scheduled:
            lr = config.lr_of(step)
            for group in opt.param_groups:
                group["lr"] = lr
        _update(params, opt, loss_fn(model, _to(batch, device)), config.clip, history)
        bar.update(1)
        if step % 50 == 0:
            bar.set_postfix(loss=f"{history.smoothed()[-1]:.3f}")
        if step % config.eval_every == 0:
            _evaluate(model, evaluate, step, history)
        if config.max_seconds is not None and time.perf_counter() - start > config.max_seconds:
            break
    bar.close()
    history.seconds = time.perf_counter() - start
    if history.steps % config.eval_every:
        _evaluate(model, evaluate, history.steps, history)
    model.eval()
    return history


def _update(params: list[nn.Parameter], opt: torch.optim.Optimizer, loss: torch.Tensor, clip: float | None,
            history: History) -> None:
    """One optimiser step on ``loss``, the gradient norm of ``params`` (the model's) clipped to ``clip``;
    recorded in ``history``."""
    opt.zero_grad()
    loss.backward()
    norm = nn.utils.clip_grad_norm_(params, math.inf if clip is None else clip)
    opt.step()
    history.loss.append(loss.item())
    history.grad_norm.append(float(norm))
    history.lr.append(opt.param_groups[0]["lr"])


def _evaluate(model: nn.Module, evaluate: Callable[[nn.Module], float] | None, step: int, history: History) -> None:
    """``evaluate(model)`` after ``step`` into ``history`` (in eval mode, no gradients, torch's random
    state forked), the model back in training mode."""
    if evaluate is None:
        return
    model.eval()
    device = next(model.parameters()).device
    with torch.no_grad(), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        history.eval_values.append(float(evaluate(model)))
    history.eval_steps.append(step)
    model.train()


def epochs(epoch_batches: Callable[[int], Iterable]) -> Iterable:
    """Endless batches: ``epoch_batches(0)``, then ``epoch_batches(1)``, ... (e.g. a reshuffle per epoch)."""
    for epoch in itertools.count():
        yield from epoch_batches(epoch)


def train_seq2seq(model: nn.Module, pairs: Sequence[Pair], src_vocab: Vocab, tgt_vocab: Vocab,
                  config: TrainConfig, *, batch_size: int = 64, seed: int = 0, label_smoothing: float = 0.0,
                  device: torch.device | str | None = None, progress: bool = True,
                  desc: str = "training") -> History:
    """:func:`fit` on teacher-forced batches of ``batch_size`` pairs of ``pairs`` (:func:`seq2seq_loss`,
    with ``label_smoothing``: :func:`sequence_loss`).

    Epochs are reshuffled with ``seed + epoch``. The RNNs of chapters 1-2 train with a constant ``lr``
    and ``clip=1.0``; a Transformer adds a schedule (``config.schedule``, e.g. :class:`Noam`) and label
    smoothing. The model trains where it is unless ``device`` is given, and is left in eval mode.
    """
    stream = epochs(lambda epoch: batches(pairs, src_vocab, tgt_vocab, batch_size, shuffle=True, seed=seed + epoch))
    return fit(model, stream, lambda m, b: seq2seq_loss(m, b, label_smoothing), config, device=device,
               progress=progress, desc=desc)


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
