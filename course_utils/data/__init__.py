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

One module per task, all of them re-exported here (``data.make_date_pairs``, ``data.Vocab``, ...):
:mod:`~course_utils.data.vocab` (token conventions, :class:`Vocab`), :mod:`~course_utils.data.batching`
(padding, the teacher-forcing offset, batches, splits), :mod:`~course_utils.data.dates`,
:mod:`~course_utils.data.sequences` (with the length-graded split), :mod:`~course_utils.data.images`
(scikit-learn's digits), :mod:`~course_utils.data.toy_language`, :mod:`~course_utils.data.multitask`.
"""

from .batching import Batch, batches, make_batch, pad_sequences, shift_targets, split
from .dates import (
    DATE_FIRST,
    DATE_LAST,
    DATE_SRC_CHARS,
    DATE_TGT_CHARS,
    N_DATE_FORMATS,
    date_vocabs,
    format_date,
    make_date_pairs,
)
from .images import DIGITS_N_TEST, digits
from .multitask import TASK_PREFIXES, make_multitask_pairs, multitask_vocab, task_of
from .sequences import (
    LENGTH_TASK,
    SEQUENCE_TASKS,
    length_task,
    make_sequence_pairs,
    sequence_vocab,
    symbols,
)
from .toy_language import (
    CLS,
    MASK,
    TOY_FIRST_WORD_ID,
    TOY_NEGATIVE,
    TOY_NOUNS,
    TOY_POSITIVE,
    make_toy_sentences,
    toy_grammatical,
    toy_language_vocab,
    toy_sentiment,
)
from .vocab import EOS, EOS_ID, PAD, PAD_ID, SOS, SOS_ID, SPECIALS, UNK, UNK_ID, Pair, Vocab

__all__ = [
    "Batch",
    "CLS",
    "DATE_FIRST",
    "DATE_LAST",
    "DATE_SRC_CHARS",
    "DATE_TGT_CHARS",
    "DIGITS_N_TEST",
    "EOS",
    "EOS_ID",
    "LENGTH_TASK",
    "MASK",
    "N_DATE_FORMATS",
    "PAD",
    "PAD_ID",
    "Pair",
    "SEQUENCE_TASKS",
    "SOS",
    "SOS_ID",
    "SPECIALS",
    "TASK_PREFIXES",
    "TOY_FIRST_WORD_ID",
    "TOY_NEGATIVE",
    "TOY_NOUNS",
    "TOY_POSITIVE",
    "UNK",
    "UNK_ID",
    "Vocab",
    "batches",
    "date_vocabs",
    "digits",
    "format_date",
    "length_task",
    "make_batch",
    "make_date_pairs",
    "make_multitask_pairs",
    "make_sequence_pairs",
    "make_toy_sentences",
    "multitask_vocab",
    "pad_sequences",
    "sequence_vocab",
    "shift_targets",
    "split",
    "symbols",
    "task_of",
    "toy_grammatical",
    "toy_language_vocab",
    "toy_sentiment",
]
