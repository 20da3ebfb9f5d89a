"""Real text every machine has: the Python standard library's own source, as bytes (chapter 8).

:func:`stdlib_corpus` reads a fixed, sorted list of pure-Python modules of the standard library
(code, comments and docstrings; nothing is downloaded), keeps ASCII (any other byte becomes ``?``)
and returns one byte string. The vocabulary is the 128 ASCII codes (:data:`VOCAB_SIZE`): token id =
byte value, no tokenizer to train. The files differ slightly between Python patch releases, so
claims on models trained on it are stated with tolerances.

:func:`train_lm` is the small next-token training loop of chapter 8 (random windows of the training
text, with the settings of :func:`lm_config`: AdamW, cosine decay), :func:`eval_loss` the mean cross-entropy over fixed windows of the
held-out text, and :func:`loss_by_position` the loss at each position of long windows (to see what
positional schemes do beyond the length they were trained on). Chapter 8's experiment on this text
(its model, budget and ablations) is :mod:`course_utils.ablation`.
"""

from __future__ import annotations

import sysconfig
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from . import train

__all__ = ["STDLIB_FILES", "VOCAB_SIZE", "decode",
           "encode", "eval_loss", "lm_config", "loss_by_position", "random_windows", "split_corpus", "stdlib_corpus",
           "train_lm"]

VOCAB_SIZE = 128

# Pure-Python modules present in every CPython 3.11+ (sorted); the corpus is their concatenation.
STDLIB_FILES = (
    "abc.py", "bisect.py", "calendar.py", "colorsys.py", "contextlib.py", "copy.py", "csv.py",
    "dataclasses.py", "difflib.py", "enum.py", "fnmatch.py", "fractions.py", "functools.py",
    "heapq.py", "keyword.py", "numbers.py", "operator.py", "queue.py", "random.py", "shlex.py",
    "statistics.py", "string.py", "textwrap.py", "tokenize.py", "types.py", "weakref.py",
)


def stdlib_corpus(files: Sequence[str] = STDLIB_FILES, root: str | Path | None = None) -> bytes:
    """The ASCII text of ``files`` from the standard library (``sysconfig``'s ``stdlib`` path),
    each preceded by a ``# file: name`` line, in the order given. A missing file raises."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    parts = []
    for name in files:
        path = root / name
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not in this Python's standard library")
        raw = path.read_bytes().replace(b"\r\n", b"\n")
        parts.append(f"# file: {name}\n".encode() + bytes(b if b < 128 else ord("?") for b in raw))
    return b"\n".join(parts)


def encode(text: bytes | str) -> torch.Tensor:
    """Bytes (or an ASCII string) -> ``(n,)`` int64 ids."""
    if isinstance(text, str):
        text = text.encode("ascii", errors="replace")
    ids = torch.frombuffer(bytearray(text), dtype=torch.uint8).long()
    if len(ids) and int(ids.max()) >= VOCAB_SIZE:
        raise ValueError("encode expects ASCII text (byte values < 128)")
    return ids


def decode(ids: torch.Tensor | Sequence[int]) -> str:
    """``(n,)`` ids -> a string (ids outside ASCII show as ``?``)."""
    return "".join(chr(i) if 0 <= i < VOCAB_SIZE else "?" for i in torch.as_tensor(ids).tolist())


def random_windows(data: torch.Tensor, batch: int, length: int, generator: torch.Generator
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` random windows of ``data``: inputs ``(batch, length)`` and their next tokens."""
    if len(data) <= length:
        raise ValueError(f"the text ({len(data)} tokens) must be longer than a window ({length})")
    start = torch.randint(0, len(data) - length, (batch,), generator=generator)
    idx = start[:, None] + torch.arange(length + 1)
    chunk = data[idx]
    return chunk[:, :-1], chunk[:, 1:]


def lm_config(steps: int, lr: float = 3e-3, warmup: int = 20, weight_decay: float = 0.01,
              eval_every: int = 100) -> train.TrainConfig:
    """Chapter 8's training settings as a :class:`~course_utils.train.TrainConfig`: AdamW (betas 0.9,
    0.95; ``weight_decay`` on the weight matrices only), linear warm-up for ``warmup`` steps capping a
    cosine decay to 10 % of ``lr`` over all ``steps`` (:class:`~course_utils.train.WarmupCosine`,
    ``overlap=True``), gradient clipping at 1.0."""
    return train.TrainConfig(steps, lr=lr, schedule=train.WarmupCosine(warmup, floor=0.1, overlap=True),
                             weight_decay=weight_decay, betas=(0.9, 0.95), clip=1.0, eval_every=eval_every)


def train_lm(model: nn.Module, data: torch.Tensor, config: train.TrainConfig, *, batch: int = 32,
             length: int = 64, seed: int = 0, evaluate=None) -> train.History:
    """:func:`course_utils.train.fit` with ``config`` (e.g. :func:`lm_config`) on ``config.steps``
    batches of ``batch`` random windows of ``length`` tokens of ``data (n,)``, with the next-token loss;
    returns its :class:`~course_utils.train.History` (``.loss``: the loss of every step).

    ``model(tokens (batch, length)) -> logits (batch, length, V)``. The windows come from a generator
    seeded with ``seed``, so two models trained with the same seed see the same text.
    ``evaluate(model) -> float``, e.g. ``lambda m: eval_loss(m, held_out)``: measured every
    ``config.eval_every`` steps (``History.eval_steps``, ``.eval_values``), without changing the training.
    """
    if not isinstance(config, train.TrainConfig):
        raise TypeError(f"config must be a train.TrainConfig (e.g. textlm.lm_config(500)), got {type(config).__name__}")
    g = torch.Generator().manual_seed(seed)
    windows = (random_windows(data, batch, length, g) for _ in range(config.steps))
    return train.fit(model, windows, train.next_token_loss, config, evaluate=evaluate)


def _fixed_windows(data: torch.Tensor, length: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` evenly spaced windows of ``data`` (the same for every model)."""
    if len(data) <= length:
        raise ValueError(f"the text ({len(data)} tokens) must be longer than a window ({length})")
    starts = torch.linspace(0, len(data) - length - 1, n).long()
    idx = starts[:, None] + torch.arange(length + 1)
    chunk = data[idx]
    return chunk[:, :-1], chunk[:, 1:]


@torch.no_grad()
def loss_by_position(model: nn.Module, data: torch.Tensor, length: int, n: int = 32,
                     batch: int = 16) -> torch.Tensor:
    """Mean cross-entropy (nats) at each position ``(length,)`` over ``n`` fixed windows of ``data``."""
    model.eval()
    x, y = _fixed_windows(data, length, n)
    total = torch.zeros(length)
    for i in range(0, n, batch):
        logits = model(x[i:i + batch])
        total += F.cross_entropy(logits.transpose(1, 2), y[i:i + batch], reduction="none").sum(0)
    return total / n


def eval_loss(model: nn.Module, data: torch.Tensor, length: int = 64, n: int = 64) -> float:
    """Mean cross-entropy (nats per byte) over ``n`` fixed windows of ``length`` tokens of ``data``."""
    return float(loss_by_position(model, data, length, n).mean())


def split_corpus(text: bytes, held_out: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids of the first ``1 - held_out`` of the text (training) and of the rest (validation)."""
    data = encode(text)
    n = int(len(data) * (1 - held_out))
    return data[:n], data[n:]
