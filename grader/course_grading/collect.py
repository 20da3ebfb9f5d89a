"""``nbgrader collect`` for this course: it decides from what the server knows, and copies files only.

nbgrader's own collect takes a submission's student and time from its folder's name
(``inbound/<student>+<chapter>+<time>+<random>``), which the student chose, warns when the folder's
owner is someone else and collects it anyway, stops at the first name it cannot parse, copies the
student's own ``timestamp.txt`` (the time the late penalty is computed from) and copies with
``shutil.copytree``, which follows links with the instructor's rights. :class:`CourseCollect`
(``nbgrader_config.py`` names it) instead:

* lists ``inbound/`` itself (:mod:`~course_grading.inbound`): each folder's owner first
  (``lstat``), grouped by owner. A folder not owned by the Unix account of the student it names
  (``alice`` or, as The Littlest JupyterHub names them, ``jupyter-alice``: ``account_prefixes``;
  ``owner_map`` maps other accounts to student ids), a folder whose name does not parse, and
  anything that is not a folder are ignored with a message: one student's folder can neither hide
  another's submission nor stop the class;
* checks the chosen folder before anything is copied and leaves it out, with an error that says
  why, if it holds a symbolic link, a hard link to a file elsewhere (``st_nlink > 1``), a FIFO, a
  socket or a device, or is over ``max_files`` entries, ``max_depth`` levels or ``max_bytes``;
* copies regular files only, each opened without following links and checked again on the open
  descriptor, and reads of each file at most the size it had when opened, and of the whole
  submission at most ``max_bytes`` (a file that grows while it is copied is refused, not copied on);
* writes ``timestamp.txt`` itself: the time of submission is the last change of anything in the
  folder by the server's clock (``st_ctime``, which no user can set back), never the time in the
  folder's name or in the student's own ``timestamp.txt`` (which is not copied).

A refused submission leaves an earlier collected copy of it in place.

**Where students share one Unix account** (Zero to JupyterHub: every user is ``jovyan``), the owner
cannot tell students apart: collect then refuses everything, unless the instructor sets
``CourseCollect.trust_names = True`` after choosing an exchange that authenticates students itself
(ngshare, which takes the hub's own login), as docs/jupyterhub.md explains.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.exchange.default.collect import ExchangeCollect
from traitlets import Bool, Dict, Integer, List

from course_grading.inbound import Accounts, Inbound, server_time, submissions

__all__ = ["Budget", "CourseCollect", "Refused", "check_tree", "copy_tree"]

TIMESTAMP = "timestamp.txt"   # nbgrader's record of the time of submission: written by collect, never copied


class Refused(ValueError):
    """A submission collect leaves out, and why."""


def _kind(mode: int) -> str:
    return ("a symbolic link" if stat.S_ISLNK(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a socket"
            if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")


def check_tree(root: Path, *, max_files: int, max_depth: int, max_bytes: int) -> float:
    """Raise :class:`Refused` unless ``root`` is a folder (not a link) of folders and regular files,
    none hard-linked, within the limits; nothing is followed or opened. Returns the latest
    ``st_ctime`` of the folder and everything in it."""
    files = size = 0
    latest = 0.0
    todo = [(Path(root), 0)]
    while todo:
        folder, depth = todo.pop()
        st = os.lstat(folder)
        latest = max(latest, st.st_ctime)
        if not stat.S_ISDIR(st.st_mode):
            raise Refused(f"{folder.name} is {_kind(st.st_mode)}, not a folder")
        if depth > max_depth:
            raise Refused(f"folders nested deeper than {max_depth} levels")
        with os.scandir(folder) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                files += 1
                if files > max_files:
                    raise Refused(f"more than {max_files} files")
                if stat.S_ISDIR(st.st_mode):
                    todo.append((Path(entry.path), depth + 1))
                    continue
                if not stat.S_ISREG(st.st_mode):
                    raise Refused(f"{entry.name} is {_kind(st.st_mode)}")
                if st.st_nlink > 1:
                    raise Refused(f"{entry.name} is a hard link to a file elsewhere")
                latest = max(latest, st.st_ctime)
                size += st.st_size
                if size > max_bytes:
                    raise Refused(f"over {max_bytes // 2**20} MiB")
    return latest


@dataclass
class Budget:
    """What a copy may still write: bytes, files and folder levels (``copy_tree`` spends it)."""

    bytes: int
    files: int
    depth: int
    latest: float = 0.0   # the latest st_ctime of a file copied, seen on its descriptor after the copy

    def spend(self, name: str, size: int) -> None:
        """Take one entry of ``size`` bytes, or raise :class:`Refused`."""
        self.files -= 1
        if self.files < 0:
            raise Refused("more files than were checked appeared while it was collected")
        if size > self.bytes:
            raise Refused(f"{name} would take it over the size limit while it was collected")
        self.bytes -= size


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open(name: str, flags: int, dir_fd: int | None, what: str) -> int:
    """``name`` opened with ``flags`` (relative to the open folder ``dir_fd``), never through a link."""
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as e:
        raise Refused(f"{os.path.basename(name)} cannot be opened as {what} without following a link "
                      f"({errno.errorcode.get(e.errno, e.errno)})") from None


def copy_file(name: str, target: Path, budget: Budget, dir_fd: int | None = None) -> None:
    """Copy one regular file, opened without following a link: at most the size it had when it
    was opened, and only if that fits in ``budget`` (a file that grows later is cut there)."""
    fd = _open(name, _FILE_FLAGS, dir_fd, "a file")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            raise Refused(f"{os.path.basename(name)} changed into {_kind(st.st_mode)} while it was collected")
        budget.spend(os.path.basename(name), st.st_size)
        left = st.st_size
        with open(target, "wb") as out:
            while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
                out.write(chunk)
                left -= len(chunk)
        budget.latest = max(budget.latest, os.fstat(fd).st_ctime)
    finally:
        os.close(fd)


def _copy_folder(fd: int, dest: Path, budget: Budget, depth: int, skip: frozenset[str]) -> None:
    """Copy the open folder ``fd`` into ``dest``: its folders opened from it (``O_NOFOLLOW``), so a
    folder swapped for a link after it was listed is refused, not followed."""
    dest.mkdir(parents=True, exist_ok=True)
    with os.scandir(fd) as entries:
        for entry in entries:
            if entry.name in skip:
                continue
            if not entry.is_dir(follow_symlinks=False):
                copy_file(entry.name, dest / entry.name, budget, dir_fd=fd)
                continue
            if depth >= budget.depth:
                raise Refused("folders nested deeper than was checked appeared while it was collected")
            budget.spend(entry.name, 0)
            inner = _open(entry.name, _DIR_FLAGS, fd, "a folder")
            try:
                _copy_folder(inner, dest / entry.name, budget, depth + 1, frozenset())
            finally:
                os.close(inner)


def copy_tree(src: Path, dest: Path, budget: Budget, skip: frozenset[str] = frozenset()) -> None:
    """Copy the regular files and folders of ``src`` into ``dest``, never through a link, within
    ``budget``; the names in ``skip`` are left out at the top level."""
    fd = _open(str(src), _DIR_FLAGS, None, "a folder")
    try:
        _copy_folder(fd, dest, budget, 0, skip)
    finally:
        os.close(fd)


def write_timestamp(folder: Path, when) -> None:
    """nbgrader's ``timestamp.txt`` (its format, UTC) with the server's time ``when``."""
    (folder / TIMESTAMP).write_text(f"{when:%Y-%m-%d %H:%M:%S.%f} UTC")


class CourseCollect(ExchangeCollect):
    """nbgrader's collect, deciding from what the server knows (see the module's docstring)."""

    trust_names = Bool(False, help="Collect whatever student id a submission names, whoever owns it: only with "
                                   "an exchange that authenticates students itself (ngshare).").tag(config=True)
    account_prefixes = List(["", "jupyter-"], help="Student alice's account is one of these prefixes + "
                                                   "'alice' (TLJH: jupyter-alice).").tag(config=True)
    owner_map = Dict(help="Unix account name (or uid) -> student id, where they differ.").tag(config=True)
    max_files = Integer(50, help="Entries a submission may hold.").tag(config=True)
    max_depth = Integer(3, help="Folder levels a submission may hold.").tag(config=True)
    max_bytes = Integer(160 * 2**20, help="Bytes a submission may hold.").tag(config=True)

    def init_src(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.inbound_path = os.path.join(self.root, self.coursedir.course_id, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        due = self._due_date() if self.before_duedate else None
        accounts = Accounts(tuple(self.account_prefixes), dict(self.owner_map), self.trust_names)
        self.src_records = submissions(Path(self.inbound_path), self.coursedir.assignment_id, accounts,
                                       self.coursedir.student_id or "*", due, self.log)

    def _due_date(self):
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                return gb.find_assignment(self.coursedir.assignment_id).duedate
            except MissingEntry:
                return None

    def copy_files(self):
        if not self.src_records:
            self.log.warning("No submissions of %r for course %r to collect", self.coursedir.assignment_id,
                             self.coursedir.course_id)
        for sub in self.src_records:
            try:
                self.collect_one(sub)
            except Exception as e:   # one student's folder never stops the class
                why = (str(e) if isinstance(e, Refused) else f"it cannot be read ({e.strerror or e})"
                       if isinstance(e, OSError) else f"{type(e).__name__}: {e}")
                self.log.error("not collected: %s (%s)", sub.path.name, why)

    def collect_one(self, sub: Inbound) -> None:
        """Check, then copy one student's submission into ``submitted/`` with the server's time."""
        when = server_time(check_tree(sub.path, max_files=self.max_files, max_depth=self.max_depth,
                                      max_bytes=self.max_bytes))
        dest = Path(self.coursedir.format_path(self.coursedir.submitted_directory, sub.student,
                                               self.coursedir.assignment_id))
        if not self._replaces(dest, when, sub.student):
            return
        dest.parent.mkdir(parents=True, exist_ok=True)
        partial = dest.parent / f".collecting-{dest.name}"
        shutil.rmtree(partial, ignore_errors=True)
        try:
            budget = Budget(self.max_bytes, self.max_files, self.max_depth)
            copy_tree(sub.path, partial, budget, skip=frozenset({TIMESTAMP}))
            write_timestamp(partial, max(when, server_time(budget.latest)))
            shutil.rmtree(dest, ignore_errors=True)
            os.replace(partial, dest)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        self.log.info("Collected submission: %s %s (%s)", sub.student, self.coursedir.assignment_id, sub.path.name)

    def _replaces(self, dest: Path, when, student: str) -> bool:
        """Whether a submission changed at ``when`` is to be copied over what ``dest`` holds."""
        if not dest.is_dir():
            return True
        try:
            existing = self.coursedir.get_existing_timestamp(str(dest))
        except Exception:   # an unreadable timestamp.txt of an earlier collect: the new one replaces it
            existing = None
        if self.update and (existing is None or when > existing):
            return True
        if self.before_duedate and existing != when:
            return True
        self.log.info("%s: %s %s", "No newer submission to collect" if self.update else
                      "Submission already exists, use --update to update", student, self.coursedir.assignment_id)
        return False
