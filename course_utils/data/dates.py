"""Task 1, dates: many human ways of writing a date ("saturday, march 3rd 2021", "3/3/21",
"3 Mar 2021", ...) map to ISO "2021-03-03" (chapters 1, 2, 6 and 7).
"""

from __future__ import annotations

import calendar
import datetime as _dt
import random

from .vocab import Pair, Vocab

__all__ = ["DATE_FIRST", "DATE_LAST", "DATE_SRC_CHARS", "DATE_TGT_CHARS", "N_DATE_FORMATS", "date_vocabs", "format_date", "make_date_pairs"]


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
