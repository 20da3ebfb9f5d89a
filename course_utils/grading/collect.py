"""``nbgrader collect`` for this course: an exchange that knows who submitted.

nbgrader's own collect names a submission after the student id in its folder name
(``inbound/<student>+<chapter>+<time>+<random>``), which the student chose, warns when the folder's
owner is someone else and collects it anyway, and copies the folder with ``shutil.copytree``, which
follows links with the instructor's rights. :class:`CourseCollect` (``nbgrader_config.py`` names it)
checks each newest submission before anything is copied and leaves out, with an error that says why:

* a submission whose folder is not owned by the Unix account of the student it names (another
  student's id, set through ``JUPYTERHUB_USER`` or by renaming the folder). The account of student
  ``alice`` is ``alice`` or, as The Littlest JupyterHub names them, ``jupyter-alice``
  (``account_prefixes``); ``owner_map`` maps other accounts to student ids;
* a folder or file that is a symbolic link, a hard link to a file elsewhere (``st_nlink > 1``), a
  FIFO, a socket or a device; a tree over ``max_files`` entries, ``max_depth`` levels or ``max_bytes``.

It then copies regular files only, each opened without following links and checked again on the
open descriptor (a file swapped for a link after the check is refused, not followed).

**Where students share one Unix account** (Zero to JupyterHub: every user is ``jovyan``), the owner
cannot tell students apart: collect then refuses everything, unless the instructor sets
``CourseCollect.trust_names = True`` after choosing an exchange that authenticates students itself
(ngshare, which takes the hub's own login), as docs/jupyterhub.md explains.
"""

from __future__ import annotations

import errno
import os
import pwd
import shutil
import stat
from pathlib import Path

from nbgrader.exchange.default.collect import ExchangeCollect
from traitlets import Bool, Dict, Integer, List

__all__ = ["CourseCollect", "Refused", "check_tree", "copy_tree", "owner_of"]


class Refused(ValueError):
    """A submission collect leaves out, and why."""


def owner_of(st: os.stat_result, owner_map: dict) -> str:
    """The account that owns ``st``, or the student id ``owner_map`` gives it (by name or uid)."""
    try:
        name = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        name = f"uid {st.st_uid}"
    return str(owner_map.get(name, owner_map.get(str(st.st_uid), name)))


def _kind(mode: int) -> str:
    return ("a symbolic link" if stat.S_ISLNK(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a socket"
            if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")


def check_tree(root: Path, *, max_files: int, max_depth: int, max_bytes: int) -> None:
    """Raise :class:`Refused` unless ``root`` is a folder (not a link) of folders and regular files,
    none hard-linked, within the limits; nothing is followed or opened."""
    files = size = 0
    todo = [(Path(root), 0)]
    while todo:
        folder, depth = todo.pop()
        st = os.lstat(folder)
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
                elif not stat.S_ISREG(st.st_mode):
                    raise Refused(f"{entry.name} is {_kind(st.st_mode)}")
                elif st.st_nlink > 1:
                    raise Refused(f"{entry.name} is a hard link to a file elsewhere")
                else:
                    size += st.st_size
                    if size > max_bytes:
                        raise Refused(f"over {max_bytes // 2**20} MiB")


def copy_tree(src: Path, dest: Path) -> None:
    """Copy the regular files and folders of ``src`` into ``dest``, never through a link."""
    dest.mkdir(parents=True, exist_ok=True)
    with os.scandir(src) as entries:
        for entry in entries:
            target = dest / entry.name
            if entry.is_dir(follow_symlinks=False):
                copy_tree(Path(entry.path), target)
                continue
            try:
                fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as e:
                raise Refused(f"{entry.name} cannot be opened without following a link "
                              f"({errno.errorcode.get(e.errno, e.errno)})") from None
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
                    raise Refused(f"{entry.name} changed into {_kind(st.st_mode)} while it was collected")
                with os.fdopen(os.dup(fd), "rb") as f, open(target, "wb") as out:
                    while chunk := f.read(1 << 20):
                        out.write(chunk)
            finally:
                os.close(fd)


class CourseCollect(ExchangeCollect):
    """nbgrader's collect with the checks above (see the module's docstring)."""

    trust_names = Bool(False, help="Collect whatever student id a submission names, whoever owns it: only with "
                                   "an exchange that authenticates students itself (ngshare).").tag(config=True)
    account_prefixes = List(["", "jupyter-"], help="Student alice's account is one of these prefixes + "
                                                   "'alice' (TLJH: jupyter-alice).").tag(config=True)
    owner_map = Dict(help="Unix account name (or uid) -> student id, where they differ.").tag(config=True)
    max_files = Integer(50, help="Entries a submission may hold.").tag(config=True)
    max_depth = Integer(3, help="Folder levels a submission may hold.").tag(config=True)
    max_bytes = Integer(160 * 2**20, help="Bytes a submission may hold.").tag(config=True)

    def refusal(self, src: Path, student: str) -> str | None:
        """Why the submission at ``src`` (naming ``student``) is left out, or ``None``."""
        try:
            st = os.lstat(src)
            if stat.S_ISLNK(st.st_mode):
                return f"{src.name} is a symbolic link"
            if not self.trust_names:
                owner = owner_of(st, self.owner_map)
                if owner not in {p + student for p in self.account_prefixes}:
                    return (f"it names student {student!r} but belongs to {owner!r} (set CourseCollect.owner_map "
                            "where account names and student ids differ)")
            check_tree(src, max_files=self.max_files, max_depth=self.max_depth, max_bytes=self.max_bytes)
        except Refused as e:
            return str(e)
        except OSError as e:
            return f"it cannot be read ({e.strerror})"
        return None

    def copy_files(self):
        kept = []
        for rec in self.src_records:
            src = Path(self.inbound_path) / rec["filename"]
            why = self.refusal(src, rec["username"])
            if why:
                self.log.error("not collected: %s (%s)", rec["filename"], why)
            else:
                kept.append(rec)
        self.src_records = kept
        super().copy_files()

    def do_copy(self, src, dest, log=None):
        try:
            copy_tree(Path(src), Path(dest))
        except Refused as e:
            self.log.error("not collected: %s (%s)", Path(src).name, e)
            shutil.rmtree(dest, ignore_errors=True)
