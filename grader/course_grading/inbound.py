"""The exchange's ``inbound/`` folder as the course reads it: whose each submission is, from the server.

nbgrader's collect takes the student and the time of a submission from the folder's *name*
(``<student>+<chapter>+<time>+<random>``), which the student wrote: a classmate's folder named after
another student and a later time hid that student's own submission, and one name whose time did not
parse stopped the whole collect. Here the course lists ``inbound/`` itself (:func:`submissions`):

* each entry is ``lstat``-ed first (never followed): its **owner** decides whose it is. An entry
  whose owner is not the account of the student its name gives (``alice`` or ``jupyter-alice``,
  see :class:`Accounts`) is ignored with a message, and so is one that is not a folder or whose
  name does not parse (not ``student+chapter+time[+random]``, a time nbgrader cannot read, or a
  student id other than :data:`STUDENT_ID`):
  it hides no one and stops nothing;
* the folders left are grouped by student, and each student's newest is the one whose folder
  changed last (``st_ctime``: the server's clock, which no user can set back), never the time in
  the name or in the student's ``timestamp.txt``.
"""

from __future__ import annotations

import fnmatch
import os
import pwd
import re
import stat
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from nbgrader.utils import parse_utc

__all__ = ["Accounts", "Inbound", "STUDENT_ID", "owner_of", "server_time", "submissions"]

# What a student id may be (an account or hub user name): no markup or quotes (formgrader's pages show
# student ids), no path, not ".." or a hidden name.
STUDENT_ID = re.compile(r"(?!\.)[\w.@+-]+")


def owner_of(st: os.stat_result, owner_map: dict) -> str:
    """The account that owns ``st``, or the student id ``owner_map`` gives it (by name or uid)."""
    try:
        name = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        name = f"uid {st.st_uid}"
    return str(owner_map.get(name, owner_map.get(str(st.st_uid), name)))


def server_time(seconds: float) -> datetime:
    """A time of the server's clock (``st_ctime``, ``time.time()``) as a naive UTC datetime (as
    nbgrader keeps due dates and times of submission)."""
    return datetime.fromtimestamp(seconds, timezone.utc).replace(tzinfo=None)


@dataclass(frozen=True)
class Accounts:
    """Which Unix accounts are which student: ``prefix + student`` for each prefix, or ``owner_map``
    (account name or uid -> student id); ``trust_names`` believes the folder's name instead."""

    prefixes: tuple[str, ...] = ("", "jupyter-")
    owner_map: dict = field(default_factory=dict)
    trust_names: bool = False

    def refusal(self, st: os.stat_result, student: str) -> str | None:
        """Why a folder with ``st`` is not ``student``'s, or ``None`` when it is."""
        if self.trust_names:
            return None
        owner = owner_of(st, self.owner_map)
        if owner in {p + student for p in self.prefixes}:
            return None
        return (f"it names student {student!r} but belongs to {owner!r} (set CourseCollect.owner_map "
                "where account names and student ids differ)")


@dataclass(frozen=True)
class Inbound:
    """One folder of ``inbound/`` that is a submission of the chapter by the student who owns it."""

    student: str
    path: Path
    changed: datetime   # the folder's st_ctime: when it last changed, by the server's clock


def _parse_name(name: str, chapter: str) -> tuple[str | None, str | None]:
    """``(student, None)`` for a well-formed name of ``chapter``, ``(None, why)`` for a bad one,
    ``(None, None)`` for another chapter's."""
    parts = name.rsplit("+", 3)
    if len(parts) < 3:
        return None, ("its name is not student+chapter+time+random" if chapter in name else None)
    if parts[1] != chapter:
        return None, None
    try:
        parse_utc(parts[2])
    except (ValueError, OverflowError, TypeError, AttributeError):
        return None, f"its time {parts[2][:40]!r} does not parse"
    if not STUDENT_ID.fullmatch(parts[0]):
        return None, ("its name gives no student id (letters, digits and _ . @ + - only, not starting "
                      "with a dot)")
    return parts[0], None


def _entry(entry: os.DirEntry, chapter: str, accounts: Accounts) -> tuple[Inbound | None, str | None]:
    """The submission ``entry`` is, or why it is ignored (``(None, None)``: not this chapter's)."""
    st = entry.stat(follow_symlinks=False)       # lstat: the owner first, nothing followed
    student, why = _parse_name(entry.name, chapter)
    if student is None:
        return None, why
    if stat.S_ISLNK(st.st_mode):
        return None, "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return None, "it is not a folder"
    why = accounts.refusal(st, student)
    if why:
        return None, why
    return Inbound(student, Path(entry.path), server_time(st.st_ctime)), None


def submissions(inbound: Path, chapter: str, accounts: Accounts, students: str = "*",
                due: datetime | None = None, log=None) -> list[Inbound]:
    """Each student's submission of ``chapter`` in ``inbound`` (see the module's docstring): the
    newest, or with ``due`` the newest changed by then if there is one. ``students`` is a pattern of
    student ids; every entry ignored is reported through ``log.error`` with the reason."""
    by_student: dict[str, list[Inbound]] = {}
    with os.scandir(inbound) as entries:
        for entry in entries:
            try:
                found, why = _entry(entry, chapter, accounts)
            except OSError as e:
                found, why = None, f"it cannot be read ({e.strerror})"
            if why and log is not None:
                log.error("ignored in inbound: %s (%s)", entry.name, why)
            if found is not None and fnmatch.fnmatchcase(found.student, students):
                by_student.setdefault(found.student, []).append(found)
    chosen = []
    for student in sorted(by_student):
        folders = sorted(by_student[student], key=lambda s: (s.changed, s.path.name), reverse=True)
        on_time = [s for s in folders if due is not None and s.changed <= due]
        chosen.append((on_time or folders)[0])
    return chosen
