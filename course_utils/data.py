"""Synthetic sequence-to-sequence tasks, vocabularies, padding and batching.

Everything here is generated from a seed: no downloads, the same data on every machine.

Two tasks are used throughout the course:

* **dates** -- a small "translation" task: many human ways of writing a date
  ("saturday, march 3rd 2021", "3/3/21", "3 Mar 2021", ...) map to ISO "2021-03-03".
  Source and target have different lengths and no one-to-one alignment, yet every
  output character depends on a few input characters, which makes attention maps readable.
* **sequences** -- reverse (or copy, or sort) a random string of symbols whose length is a
  parameter, so difficulty grows with length and accuracy can be plotted against it.

Token conventions: ``<pad>`` = 0, ``<sos>`` = 1, ``<eos>`` = 2, ``<unk>`` = 3 in every vocabulary.
Tensors are batch-first: ``(batch, seq)``.
"""

from __future__ import annotations

import calendar
import datetime as _dt
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch

from ._validate import check_int

__all__ = [
    "CLS", "EOS", "EOS_ID", "MASK", "PAD", "PAD_ID", "SOS", "SOS_ID", "UNK", "UNK_ID",
    "DATE_FIRST", "DATE_LAST", "DATE_SRC_CHARS", "DATE_TGT_CHARS", "DIGITS_N_TEST", "LENGTH_TASK",
    "N_DATE_FORMATS", "SEQUENCE_TASKS", "SPECIALS", "TASK_PREFIXES", "TOY_FIRST_WORD_ID",
    "TOY_NEGATIVE", "TOY_NOUNS", "TOY_POSITIVE", "Batch", "batches", "date_vocabs", "digits",
    "format_date", "length_task", "make_batch", "make_date_pairs", "make_multitask_pairs",
    "make_sequence_pairs", "make_toy_sentences", "multitask_vocab", "pad_sequences", "Pair",
    "sequence_vocab", "shift_targets", "split", "symbols", "task_of", "toy_grammatical",
    "toy_language_vocab", "toy_sentiment", "Vocab"
]

PAD, SOS, EOS, UNK = "<pad>", "<sos>", "<eos>", "<unk>"
SPECIALS = (PAD, SOS, EOS, UNK)
PAD_ID, SOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3

Pair = tuple[list[str], list[str]]


class Vocab:
    """A token <-> id mapping whose first four ids are ``<pad> <sos> <eos> <unk>``.

    >>> v = Vocab("abc")
    >>> v.encode("cab", add_eos=True)
    [6, 4, 5, 2]
    >>> v.decode([6, 4, 5, 2, 0])
    ['c', 'a', 'b']
    """

    def __init__(self, tokens: Iterable[str]):
        self.itos: list[str] = list(SPECIALS)
        for tok in tokens:
            if tok not in self.itos:
                self.itos.append(tok)
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}

    @classmethod
    def from_sequences(cls, seqs: Iterable[Sequence[str]]) -> Vocab:
        """Build a vocabulary from every token of ``seqs``, in sorted order."""
        return cls(sorted({tok for seq in seqs for tok in seq}))

    def __len__(self) -> int:
        return len(self.itos)

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens: {' '.join(self.itos[:12])}{' ...' if len(self) > 12 else ''})"

    pad_id, sos_id, eos_id, unk_id = PAD_ID, SOS_ID, EOS_ID, UNK_ID

    def encode(self, tokens: Sequence[str], add_sos: bool = False, add_eos: bool = False) -> list[int]:
        """Map tokens to ids (unknown tokens to ``<unk>``), optionally framed by sos/eos."""
        ids = [self.stoi.get(t, UNK_ID) for t in tokens]
        return ([SOS_ID] if add_sos else []) + ids + ([EOS_ID] if add_eos else [])

    def decode(self, ids: Iterable[int], strip: bool = True) -> list[str]:
        """Map ids back to tokens. With ``strip``, stop at ``<eos>`` and drop pad/sos."""
        out = []
        for i in ids:
            i = int(i)
            if strip and i == EOS_ID:
                break
            if strip and i in (PAD_ID, SOS_ID):
                continue
            out.append(self.itos[i] if 0 <= i < len(self.itos) else UNK)
        return out


# ----------------------------------------------------------------------------------------
# Task 1: dates
# ----------------------------------------------------------------------------------------

_ORDINAL = {1: "st", 2: "nd", 3: "rd", 21: "st", 22: "nd", 23: "rd", 31: "st"}


def _ordinal(day: int) -> str:
    return f"{day}{_ORDINAL.get(day, 'th')}"


# Each format turns a date into one human surface form. US order (month/day) is used for
# the numeric forms so that every input has exactly one reading.
_DATE_FORMATS = (
    lambda d: f"{calendar.day_name[d.weekday()].lower()}, {calendar.month_name[d.month].lower()} {_ordinal(d.day)} {d.year}",
    lambda d: f"{d.month}/{d.day}/{d.year % 100:02d}",
    lambda d: f"{d.day} {calendar.month_abbr[d.month]} {d.year}",
    lambda d: f"{calendar.month_name[d.month]} {d.day}, {d.year}",
    lambda d: f"{d.day:02d} {calendar.month_name[d.month].lower()} {d.year}",
    lambda d: f"{calendar.month_abbr[d.month].lower()} {d.day} {d.year}",
    lambda d: f"the {_ordinal(d.day)} of {calendar.month_name[d.month].lower()}, {d.year}",
    lambda d: f"{calendar.day_abbr[d.weekday()]} {d.day} {calendar.month_abbr[d.month]} {d.year % 100:02d}",
    lambda d: f"{d.month:02d}/{d.day:02d}/{d.year}",
    lambda d: f"{d.year}.{d.month}.{d.day}",
)
N_DATE_FORMATS = len(_DATE_FORMATS)

DATE_FIRST = _dt.date(1950, 1, 1)
DATE_LAST = _dt.date(2049, 12, 31)


def format_date(date: _dt.date, style: int) -> str:
    """Write ``date`` in human surface form number ``style`` (0 <= style < N_DATE_FORMATS).

    Two-digit years are read as 1950-2049, the range of :func:`make_date_pairs`.
    """
    if not 0 <= style < N_DATE_FORMATS:
        raise ValueError(f"style must be in [0, {N_DATE_FORMATS}), got {style}")
    return _DATE_FORMATS[style](date)


def make_date_pairs(n: int, seed: int = 0) -> list[Pair]:
    """``n`` (source, target) character-list pairs of the date task, deterministic in ``seed``.

    The source is a random date between 1950 and 2049 in a random human format, the target
    its ISO form ``YYYY-MM-DD``.
    """
    rng = random.Random(seed)
    span = (DATE_LAST - DATE_FIRST).days
    pairs = []
    for _ in range(n):
        d = DATE_FIRST + _dt.timedelta(days=rng.randrange(span + 1))
        src = format_date(d, rng.randrange(N_DATE_FORMATS))
        pairs.append((list(src), list(d.isoformat())))
    return pairs


DATE_SRC_CHARS = sorted(set(" ,./0123456789") | set("abcdefghijklmnopqrstuvwxyz")
                        | set("ADFJMNOSTW"))
DATE_TGT_CHARS = sorted(set("0123456789-"))


def date_vocabs() -> tuple[Vocab, Vocab]:
    """Source and target vocabularies of the date task (characters)."""
    return Vocab(DATE_SRC_CHARS), Vocab(DATE_TGT_CHARS)


# ----------------------------------------------------------------------------------------
# Task 2: length-graded symbol sequences
# ----------------------------------------------------------------------------------------

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
# Padding, the teacher-forcing offset, batching
# ----------------------------------------------------------------------------------------

def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int = PAD_ID) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists into a ``(batch, max_len)`` long tensor; also return the lengths ``(batch,)``."""
    if len(seqs) == 0:
        raise ValueError("pad_sequences needs at least one sequence")
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    out = torch.full((len(seqs), int(lengths.max())), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return out, lengths


def shift_targets(targets: Sequence[Sequence[int]], sos_id: int = SOS_ID, eos_id: int = EOS_ID,
                  pad_id: int = PAD_ID) -> tuple[torch.Tensor, torch.Tensor]:
    """The teacher-forcing offset: decoder input ``[<sos>, y1..yn]``, target ``[y1..yn, <eos>]``.

    Args:
        targets: ``batch`` lists of target ids, without sos/eos.
    Returns:
        ``(decoder_input, decoder_target)``, both ``(batch, max_len + 1)`` long tensors,
        right-padded with ``pad_id``. At every position t the decoder sees ``decoder_input[:, t]``
        and must predict ``decoder_target[:, t]``.
    """
    dec_in, _ = pad_sequences([[sos_id, *t] for t in targets], pad_id)
    dec_out, _ = pad_sequences([[*t, eos_id] for t in targets], pad_id)
    return dec_in, dec_out


@dataclass
class Batch:
    """One padded batch. ``src (B, S)``, ``src_lengths (B,)``, ``tgt_in`` and ``tgt_out (B, T)``."""

    src: torch.Tensor
    src_lengths: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor

    def to(self, device) -> Batch:
        return Batch(*(t.to(device) for t in (self.src, self.src_lengths, self.tgt_in, self.tgt_out)))

    @property
    def src_mask(self) -> torch.Tensor:
        """``(B, S)`` bool, True at real (non-pad) source positions."""
        return self.src != PAD_ID


def make_batch(pairs: Sequence[Pair], src_vocab: Vocab, tgt_vocab: Vocab) -> Batch:
    """Encode and pad a list of (source, target) token pairs into a :class:`Batch`."""
    src, src_lengths = pad_sequences([src_vocab.encode(s) for s, _ in pairs])
    tgt_in, tgt_out = shift_targets([tgt_vocab.encode(t) for _, t in pairs])
    return Batch(src, src_lengths, tgt_in, tgt_out)


def batches(pairs: Sequence[Pair], src_vocab: Vocab, tgt_vocab: Vocab, batch_size: int,
            shuffle: bool = True, seed: int = 0) -> Iterator[Batch]:
    """One pass over ``pairs`` in batches (the last one may be smaller)."""
    order = list(range(len(pairs)))
    if shuffle:
        random.Random(seed).shuffle(order)
    for start in range(0, len(order), batch_size):
        yield make_batch([pairs[i] for i in order[start:start + batch_size]], src_vocab, tgt_vocab)


def split(pairs: Sequence[Pair], n_test: int, seed: int = 0) -> tuple[list[Pair], list[Pair]]:
    """Split into (train, test) so that no test source string also occurs in train."""
    rng = random.Random(seed)
    order = list(range(len(pairs)))
    rng.shuffle(order)
    test = [pairs[i] for i in order[:n_test]]
    seen = {tuple(s) for s, _ in test}
    train = [pairs[i] for i in order[n_test:] if tuple(pairs[i][0]) not in seen]
    return train, test


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


# ----------------------------------------------------------------------------------------
# Images: scikit-learn's bundled 8x8 handwritten digits (chapter 7's ViT)
# ----------------------------------------------------------------------------------------

#: The digits' fixed split: this many test images, drawn per class by :func:`digits`.
DIGITS_N_TEST = 360


def digits(n_test: int = DIGITS_N_TEST, seed: int = 0
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scikit-learn's 1797 handwritten digits (8x8 pixels, UCI "optdigits"), shipped inside the
    package: no download. Returns ``(x_train, y_train, x_test, y_test)``.

    ``x`` is ``(n, 1, 8, 8)`` float32 in [0, 1] (the 0-16 grey levels divided by 16), ``y`` is
    ``(n,)`` long in 0-9. The split is stratified: each class gives the same share (rounded, the
    shares adding up to ``n_test``) of its images to the test set, chosen at random by ``seed``;
    the defaults are the course's fixed split (1437 train, 360 test).
    """
    from sklearn.datasets import load_digits  # imported here: only chapter 7 needs scikit-learn

    check_int(n_test, "n_test", 1, 1796, "scikit-learn's digits hold 1797 images")
    bunch = load_digits()
    x = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0     # (1797, 1, 8, 8)
    y = torch.tensor(bunch.target, dtype=torch.long)
    # each class's share of n_test, rounded so that the shares add up to n_test exactly
    share = torch.bincount(y, minlength=10).double() * n_test / len(y)
    take = share.floor().long()
    take[(share - take).argsort(descending=True, stable=True)[: n_test - int(take.sum())]] += 1
    g = torch.Generator().manual_seed(seed)
    test_idx = []
    for c in range(10):
        idx = (y == c).nonzero().squeeze(1)
        test_idx.append(idx[torch.randperm(len(idx), generator=g)[: int(take[c])]])
    test = torch.zeros(len(y), dtype=torch.bool)
    test[torch.cat(test_idx)] = True
    return x[~test], y[~test], x[test], y[test]


# ----------------------------------------------------------------------------------------
# A toy language for masked and causal language modelling (chapter 7)
# ----------------------------------------------------------------------------------------

CLS, MASK = "[CLS]", "[MASK]"
#: Adjectives of the toy language by polarity (a sentence never mixes the two).
TOY_POSITIVE = ("happy", "kind", "calm", "brave", "bright", "gentle", "clever", "warm")
TOY_NEGATIVE = ("sad", "cruel", "angry", "lazy", "dull", "rude", "cold", "mean")
TOY_NOUNS = ("cat", "dog", "bird", "horse", "frog", "owl", "bear", "duck")
_TOY_DETS = {False: ("a", "this", "the"), True: ("some", "these", "the")}   # singular, plural


def toy_language_vocab() -> Vocab:
    """The toy language's vocabulary: the four specials, ``[CLS]`` = 4, ``[MASK]`` = 5, then the
    words in sorted order (ids from :data:`TOY_FIRST_WORD_ID`)."""
    words = {".", "and", "not", "very", "is", "are", *TOY_POSITIVE, *TOY_NEGATIVE, *TOY_NOUNS,
             *(n + "s" for n in TOY_NOUNS), *_TOY_DETS[False], *_TOY_DETS[True]}
    return Vocab([CLS, MASK, *sorted(words)])


#: The first id of a word (not a special token, ``[CLS]`` or ``[MASK]``) in :func:`toy_language_vocab`.
TOY_FIRST_WORD_ID = 6


def make_toy_sentences(n: int, seed: int = 0, p_not: float = 0.5, max_adjectives: int = 3,
                       adjectives: Sequence[str] | None = None) -> list[tuple[list[str], int]]:
    """``n`` sentences of a toy language with a sentiment label, ``(words, label)``.

    The grammar: ``det noun copula ["not"] ["very"] adj {"and" ["very"] adj} "."`` where

    * the determiner, the noun and the copula agree in number ("a cat is", "some cats are");
    * 1 to ``max_adjectives`` adjectives, all of the same polarity (:data:`TOY_POSITIVE` or
      :data:`TOY_NEGATIVE`), drawn from ``adjectives`` if given (e.g. to keep some unseen);
    * "not" (with probability ``p_not``) flips the meaning.

    ``label`` is 1 when the sentence says something positive: positive adjectives without "not",
    or negative ones with it. Masked language modelling can learn agreement, which adjectives go
    together (and therefore their polarity) and where "not" may stand, without any label.
    """
    check_int(n, "n")
    if max_adjectives < 1:
        raise ValueError(f"max_adjectives must be >= 1, got {max_adjectives}")
    pools = {1: list(TOY_POSITIVE), 0: list(TOY_NEGATIVE)}
    if adjectives is not None:
        unknown = set(adjectives) - set(TOY_POSITIVE) - set(TOY_NEGATIVE)
        if unknown:
            raise ValueError(f"unknown adjectives {sorted(unknown)}; choose from TOY_POSITIVE and TOY_NEGATIVE")
        pools = {pol: [a for a in pool if a in adjectives] for pol, pool in pools.items()}
    polarities = [pol for pol, pool in pools.items() if pool]
    if not polarities:
        raise ValueError("adjectives is empty")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        plural = rng.random() < 0.5
        noun = rng.choice(TOY_NOUNS) + ("s" if plural else "")
        words = [rng.choice(_TOY_DETS[plural]), noun, "are" if plural else "is"]
        negated = rng.random() < p_not
        if negated:
            words.append("not")
        polarity = rng.choice(sorted(polarities))
        for i in range(rng.randint(1, max_adjectives)):
            if i:
                words.append("and")
            if rng.random() < 0.25:
                words.append("very")
            words.append(rng.choice(pools[polarity]))
        words.append(".")
        out.append((words, int(polarity != negated)))
    return out


def toy_sentiment(words: Sequence[str]) -> int | None:
    """The label of a toy sentence (1 positive, 0 negative), or ``None`` if it is not grammatical."""
    if not toy_grammatical(words):
        return None
    positive = any(w in TOY_POSITIVE for w in words)      # a grammatical sentence has one polarity
    return int(positive != (words[3] == "not"))


def toy_grammatical(words: Sequence[str]) -> bool:
    """Whether ``words`` is a sentence of :func:`make_toy_sentences`'s grammar (agreement in
    number, one polarity, "and" between adjectives, at most one "very" before each, a final ".";
    any number of adjectives). Used to score what a language model generates."""
    words = list(words)
    if len(words) < 5 or words[-1] != ".":
        return False
    det, noun, copula = words[:3]
    plural = noun.endswith("s") and noun[:-1] in TOY_NOUNS
    if not (plural or noun in TOY_NOUNS) or det not in _TOY_DETS[plural] or copula != ("are" if plural else "is"):
        return False
    rest = words[4:-1] if words[3] == "not" else words[3:-1]
    groups, current = [], []
    for w in rest:           # split the adjective phrase at "and"
        if w == "and":
            groups.append(current)
            current = []
        else:
            current.append(w)
    groups.append(current)
    adjs = []
    for g in groups:
        if len(g) == 2 and g[0] == "very":
            g = g[1:]
        if len(g) != 1 or g[0] not in TOY_POSITIVE + TOY_NEGATIVE:
            return False
        adjs.append(g[0])
    return all(a in TOY_POSITIVE for a in adjs) or all(a in TOY_NEGATIVE for a in adjs)


# ----------------------------------------------------------------------------------------
# Several tasks in one model, named by a prefix (T5-style text-to-text, chapter 7)
# ----------------------------------------------------------------------------------------

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
