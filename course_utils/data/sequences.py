"""Task 2, symbol sequences: reverse (or copy, or sort) a random string whose length is a
parameter, and the course's shared length-graded split of it (chapters 1, 2 and 6 compare on it).
"""

from __future__ import annotations

import random

from .batching import split
from .vocab import Pair, Vocab

__all__ = ["LENGTH_TASK", "SEQUENCE_TASKS", "length_task", "make_sequence_pairs", "sequence_vocab", "symbols"]


SEQUENCE_TASKS = ("reverse", "copy", "sort")


def symbols(n_symbols: int) -> list[str]:
    """The token alphabet of the sequence tasks: ``['a', 'b', ...]`` (at most 26)."""
    if not 1 <= n_symbols <= 26:
        raise ValueError(f"n_symbols must be between 1 and 26, got {n_symbols}")
    return [chr(ord("a") + i) for i in range(n_symbols)]


def make_sequence_pairs(n: int, min_len: int, max_len: int, task: str = "reverse",
                        n_symbols: int = 10, seed: int = 0) -> list[Pair]:
    """``n`` pairs of a symbol task with source lengths uniform in ``[min_len, max_len]``.

    ``task`` is ``"reverse"`` (target = source backwards), ``"copy"`` or ``"sort"``.
    """
    if task not in SEQUENCE_TASKS:
        raise ValueError(f"task must be one of {SEQUENCE_TASKS}, got {task!r}")
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got {min_len}, {max_len}")
    rng = random.Random(seed)
    alphabet = symbols(n_symbols)
    pairs = []
    for _ in range(n):
        src = [rng.choice(alphabet) for _ in range(rng.randint(min_len, max_len))]
        tgt = src[::-1] if task == "reverse" else sorted(src) if task == "sort" else list(src)
        pairs.append((src, tgt))
    return pairs


def sequence_vocab(n_symbols: int = 10) -> Vocab:
    """The vocabulary of the sequence tasks (shared by source and target)."""
    return Vocab(symbols(n_symbols))


# ----------------------------------------------------------------------------------------
# The course's shared length-graded experiment (chapters 1, 2 and 6 compare on it)
# ----------------------------------------------------------------------------------------

LENGTH_TASK = dict(task="reverse", min_len=2, max_len=14, n_symbols=8)


def length_task(n_train: int = 12000, n_test: int = 1000, seed: int = 0
                ) -> tuple[list[Pair], list[Pair], Vocab]:
    """The length-graded task every model of the course is compared on.

    Reverse a string of 2 to 14 symbols from an alphabet of 8. Returns ``(train, test,
    vocab)``; no test source occurs in train. Pair it with :data:`course_utils.lengthtask.LENGTH_TASK_BUDGET`
    so that models of different chapters are trained for the same number of steps.
    """
    pairs = make_sequence_pairs(n_train + n_test, seed=seed, **LENGTH_TASK)
    train, test = split(pairs, n_test, seed=seed + 1)
    return train, test, sequence_vocab(LENGTH_TASK["n_symbols"])
