"""Whole-box limits: a cgroup for each box's memory and processes, on cgroup v1 or v2.

A box's memory (page cache and tmpfs included) and its processes are limited for everything the
kernel starts only inside a cgroup; without one they are limited per process (``RLIMIT_AS``, and
the grader's count of processes after each cell). Which hosts get which:

* **cgroup v1** (the ``memory`` and ``pids`` controllers mounted under ``/sys/fs/cgroup/<controller>``,
  as on older distributions and some container hosts), as root: a child of this process's cgroup in
  each (``memory.limit_in_bytes``, ``memory.memsw.limit_in_bytes``, ``pids.max``);
* **cgroup v2** (the unified hierarchy, every current Debian, Ubuntu and Fedora), where this process's
  cgroup (``0::/path``) can be written (root, or a subtree delegated to the grader's user, e.g.
  ``systemd-run --user --scope -p Delegate=yes make autograde``) and offers ``memory`` and ``pids``:
  the grader's own processes move into a leaf (``grader``: a v2 cgroup with children may hold no
  process), the controllers are enabled for the subtree, and each box gets a child with
  ``memory.max``, ``memory.swap.max = 0`` and ``pids.max``;
* anything else (no root on v1, a v2 cgroup that is not delegated, other processes sharing it):
  none, and :func:`find` says why.

A box is called limited for the whole box only where its limits were written *and read back*
(:attr:`BoxGroup.limited`); the launcher falls back to per-process limits for the rest.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BoxGroup", "Place", "find"]

ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids")
LEAF = "grader"   # v2: where the grader's own processes go, so that its cgroup may have children


@dataclass(frozen=True)
class Place:
    """Where the boxes' cgroups are made: ``{controller: parent folder}`` (one folder for both on v2)."""

    version: int                       # 1 or 2; 0 where there is none
    parents: dict[str, Path] = field(default_factory=dict)
    why_not: str = ""                  # the reason there is none (or only some)

    def limits(self, controller: str) -> bool:
        return controller in self.parents


def _own(lines: list[str], controller: str | None) -> str | None:
    """This process's cgroup path for ``controller`` (v1) or in the unified hierarchy (``None``: v2)."""
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        if (controller is None and ctrls == "") or (controller and controller in ctrls.split(",")):
            return path
    return None


def find(root: Path = ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> Place:
    """Where this machine lets the grader make the boxes' cgroups (see the module's docstring)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError as e:
        return Place(0, why_not=f"cannot read {proc_cgroup} ({e.strerror})")
    if all((root / c / "cgroup.procs").exists() for c in CONTROLLERS):
        return _find_v1(root, lines)
    if (root / "cgroup.controllers").exists():
        return _find_v2(root, lines)
    return Place(0, why_not=f"no memory and pids controllers under {root} (neither cgroup v1 nor v2)")


def _find_v1(root: Path, lines: list[str]) -> Place:
    if os.geteuid() != 0:
        return Place(1, why_not="cgroup v1 lets only root make cgroups")
    parents = {}
    for c in CONTROLLERS:
        path = _own(lines, c)
        here = root / c / (path or "/").lstrip("/")
        parents[c] = here if (here / "cgroup.procs").exists() else root / c
    return Place(1, parents)


def _find_v2(root: Path, lines: list[str]) -> Place:
    path = _own(lines, None)
    if path is None:
        return Place(2, why_not="this process is in no cgroup-v2 cgroup")
    own = root / path.lstrip("/")
    try:
        if own.name == LEAF and not (own / "cgroup.subtree_control").read_text().split():   # set up before
            own = own.parent
        available = (own / "cgroup.controllers").read_text().split()
        missing = [c for c in CONTROLLERS if c not in available]
        if missing:
            return Place(2, why_not=f"cgroup v2: {own} does not offer {' and '.join(missing)} (delegate them: "
                                    "systemd-run --scope -p Delegate=yes ...)")
        _enable_subtree(own)
    except OSError as e:
        return Place(2, why_not=f"cgroup v2: {own} is not delegated to the grader ({e.strerror}); run it with "
                                "systemd-run --scope -p Delegate=yes, or as root")
    return Place(2, {c: own for c in CONTROLLERS})


def _enable_subtree(own: Path) -> None:
    """Enable memory and pids for ``own``'s children, first moving its processes into its leaf."""
    enabled = (own / "cgroup.subtree_control").read_text().split()
    if all(c in enabled for c in CONTROLLERS):
        return
    leaf = own / LEAF
    leaf.mkdir(exist_ok=True)
    for pid in (own / "cgroup.procs").read_text().split():
        try:
            (leaf / "cgroup.procs").write_text(pid)
        except OSError:
            pass   # gone, or a kernel thread: writing subtree_control says whether it mattered
    (own / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in CONTROLLERS))


class BoxGroup:
    """One box's cgroups, made in ``place`` with the box's limits; :attr:`limited` names what holds."""

    def __init__(self, place: Place, name: str, memory_bytes: int, processes: int):
        self.place = place
        self.memory_bytes = memory_bytes
        self.paths: list[Path] = []
        self.limited: set[str] = set()
        self.errors: list[str] = []
        for controller, parent in place.parents.items():
            cg = parent / name
            try:
                if cg not in self.paths:
                    cg.mkdir()
                    self.paths.append(cg)
                if self._limit(cg, controller, memory_bytes, processes):
                    self.limited.add(controller)
            except OSError as e:
                self.errors.append(f"{controller} cgroup {cg}: {e.strerror}")

    def _limit(self, cg: Path, controller: str, memory_bytes: int, processes: int) -> bool:
        """Write the limits of ``controller`` and read them back: whether they hold."""
        want = processes if controller == "pids" else memory_bytes
        if controller == "pids":
            key, extra = "pids.max", {}
        elif self.place.version == 1:
            key, extra = "memory.limit_in_bytes", {"memory.memsw.limit_in_bytes": want, "memory.swappiness": 0}
        else:
            key, extra = "memory.max", {"memory.swap.max": 0}
        (cg / key).write_text(str(want))
        for k, v in extra.items():   # where the kernel has them (no swap accounting: no memsw)
            if (cg / k).exists():
                (cg / k).write_text(str(v))
        got = (cg / key).read_text().strip()
        return got.isdigit() and want - 2**16 <= int(got) <= want   # the kernel rounds down to whole pages

    def procs(self) -> list[int] | None:
        """The processes in the box's cgroup (``None`` without one)."""
        if not self.paths:
            return None
        try:
            return [int(p) for p in (self.paths[-1] / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def out_of_memory(self) -> bool:
        """Whether the box reached its memory limit (an OOM kill, a failed charge, the peak at the limit)."""
        if "memory" not in self.limited:
            return False
        cg = self.place.parents["memory"] / self.paths[0].name
        try:
            if self.place.version == 1:
                kills = [int(ln.split()[1]) for ln in (cg / "memory.oom_control").read_text().splitlines()
                         if ln.startswith("oom_kill ")]
                return (bool(kills and kills[0] > 0) or int((cg / "memory.failcnt").read_text()) > 0
                        or int((cg / "memory.max_usage_in_bytes").read_text()) >= 0.97 * self.memory_bytes)
            events = dict(ln.split() for ln in (cg / "memory.events").read_text().splitlines())
            peak = int((cg / "memory.peak").read_text()) if (cg / "memory.peak").exists() else 0
            return int(events.get("oom_kill", 0)) > 0 or int(events.get("oom", 0)) > 0 or peak >= 0.97 * self.memory_bytes
        except (OSError, ValueError, IndexError):
            return False

    def close(self) -> None:
        """Kill what is left in the box's cgroups and remove them."""
        for _ in range(50):
            procs = self.procs() or []
            if not procs:
                break
            for pid in procs:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.05)
        for cg in self.paths:
            for _ in range(50):
                try:
                    cg.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)
