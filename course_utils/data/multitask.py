"""Several tasks in one model, named by a prefix (T5-style text-to-text, chapter 7).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from .dates import DATE_SRC_CHARS, DATE_TGT_CHARS, make_date_pairs
from .sequences import make_sequence_pairs, symbols
from .vocab import Pair, Vocab

__all__ = ["TASK_PREFIXES", "make_multitask_pairs", "multitask_vocab", "task_of"]


#: The task prefixes of :func:`make_multitask_pairs`: each is one source token.
TASK_PREFIXES = {"reverse": "reverse:", "sort": "sort:", "date": "date:"}


def make_multitask_pairs(n_per_task: int, seed: int = 0, tasks: Sequence[str] = ("reverse", "sort", "date"),
                         min_len: int = 2, max_len: int = 10, n_symbols: int = 8) -> list[Pair]:
    """Pairs of several tasks mixed in random order, the task named by the source's first token
    (Raffel et al. 2020: every task is text-to-text, the model reads which one from a prefix).

    ``"reverse"`` and ``"sort"`` are :func:`make_sequence_pairs` over ``n_symbols`` symbols and
    lengths ``min_len..max_len``; ``"date"`` is :func:`make_date_pairs`. The source is
    ``[TASK_PREFIXES[task]] + source``; the target is unchanged. One vocabulary serves all tasks
    and both sides: :func:`multitask_vocab`. Every task gets ``n_per_task`` pairs.
    """
    unknown = [t for t in tasks if t not in TASK_PREFIXES]
    if unknown or not tasks:
        raise ValueError(f"tasks must be a non-empty subset of {sorted(TASK_PREFIXES)}, got {list(tasks)}")
    pairs = []
    for i, task in enumerate(tasks):
        if task == "date":
            task_pairs = make_date_pairs(n_per_task, seed=seed + 1000 * i)
        else:
            task_pairs = make_sequence_pairs(n_per_task, min_len, max_len, task=task, n_symbols=n_symbols,
                                             seed=seed + 1000 * i)
        pairs += [([TASK_PREFIXES[task]] + src, tgt) for src, tgt in task_pairs]
    random.Random(seed).shuffle(pairs)
    return pairs


def task_of(pair: Pair) -> str:
    """The task of a :func:`make_multitask_pairs` pair, read from its prefix."""
    names = {prefix: name for name, prefix in TASK_PREFIXES.items()}
    if not pair[0] or pair[0][0] not in names:
        raise ValueError(f"the source does not start with a task prefix {sorted(names)}: {pair[0][:3]}")
    return names[pair[0][0]]


def multitask_vocab(n_symbols: int = 8) -> Vocab:
    """The one vocabulary of :func:`make_multitask_pairs` (sources and targets): the task
    prefixes, the date characters and the sequence symbols."""
    return Vocab([*TASK_PREFIXES.values(), *DATE_SRC_CHARS, *DATE_TGT_CHARS, *symbols(n_symbols)])
