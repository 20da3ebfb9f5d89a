"""Executing a submitted notebook so that it cannot harm the course, the gradebook or the class.

Every submission gets its own throwaway *box* (a temporary folder: a read-only copy of
``course_utils``, a working folder, a home, the kernel's sockets) and its kernel is started by
``python -m course_utils.sandbox kernel BOX CONNECTION_FILE``, which, before it becomes the
kernel:

* sets the resource limits of :class:`Limits` (memory, processes, file size; no core dumps) and,
  as root, puts the kernel in a pids cgroup (root is exempt from ``RLIMIT_NPROC``);
* on Linux, enters new network, PID and mount namespaces (``unshare``; as a normal user, in a
  user namespace too): no network; every process the notebook starts dies with its kernel;
  the whole file system is read-only except the box, and the gradebook, ``submitted/``,
  ``autograded/`` and ``feedback/`` are covered by empty file systems;
* drops every capability (``setpriv``), so it cannot undo any of that, and gets an environment
  with nothing of the grader's but the thread settings.

The user ``nobody`` would be the classic choice, but the course's Python often lives where
``nobody`` cannot read it (``/root/.pyenv``); a capability-less process on a read-only file
system, in its own namespaces, gives the same protection without that requirement.

The kernel talks to the grader over Unix sockets in the box (they work across network
namespaces). :class:`SandboxedExecute` is nbgrader's execute step with this kernel, a
wall-clock limit per notebook, the tamper guard (``course_utils.tamper_guard``) before and
after every test cell, and faults that stay with their submission: a notebook that hangs, whose
kernel dies or that forks without end is stopped, keeps what it earned before, and its graded
cells that did not run get an error (0 points); the reason goes into the notebook's metadata
(``course_grading``), which ``course_utils.grading`` reports. :class:`SandboxedExecute` lives in
``course_utils.grading`` (it needs nbgrader; this module stays light because every sandboxed
kernel starts by importing it).

Where a tool is missing (macOS, no ``unshare``, not root) the grader says so once and goes on
with what it has (see :func:`isolation`).
"""

from __future__ import annotations

import ast
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
KERNEL_NAME = "attention-course-sandbox"


@dataclass(frozen=True)
class Limits:
    """The limits on one submission; the one place to change them.

    Each can be overridden by an environment variable ``GRADING_<NAME>`` (upper case), e.g.
    ``GRADING_NOTEBOOK_S=1200 make autograde``.
    """

    notebook_s: float = 600      # wall-clock time for the whole notebook
    cell_s: float = 300          # wall-clock time for one cell
    memory_mb: int = 4096        # address space of the kernel (RLIMIT_AS)
    processes: int = 128         # processes and threads of the sandbox user (RLIMIT_NPROC)
    children: int = 16           # processes a notebook may leave running; more is a fork bomb
    file_mb: int = 256           # largest file the kernel may write (RLIMIT_FSIZE)

    @classmethod
    def from_env(cls, env=os.environ) -> Limits:
        values = {}
        for f in fields(cls):
            raw = env.get(f"GRADING_{f.name.upper()}")
            if raw:
                try:
                    values[f.name] = type(getattr(cls, f.name))(float(raw))
                except ValueError:
                    raise SystemExit(f"GRADING_{f.name.upper()}={raw!r} is not a number") from None
        return cls(**values)

    def to_env(self) -> dict[str, str]:
        return {f"GRADING_{k.upper()}": str(v) for k, v in asdict(self).items()}

    def describe(self) -> str:
        return (f"{self.notebook_s:g} s per notebook, {self.cell_s:g} s per cell, "
                f"{self.memory_mb} MiB of memory, {self.processes} processes")


@dataclass(frozen=True)
class Isolation:
    """What this machine allows, and a warning for each thing it does not."""

    unshare: tuple[str, ...]     # the namespace command, or () where there is none
    pids_cgroup: Path | None     # a pids cgroup (v1) that limits processes even for root
    warnings: tuple[str, ...]


PIDS_CGROUP = Path("/sys/fs/cgroup/pids")


@lru_cache(maxsize=1)
def isolation() -> Isolation:
    warnings = []
    unshare: tuple[str, ...] = ()
    root = os.geteuid() == 0
    if sys.platform.startswith("linux") and shutil.which("unshare") and shutil.which("mount") \
            and shutil.which("setpriv"):
        base = ("unshare", "--net", "--pid", "--fork", "--kill-child", "--mount", "--propagation", "private")
        candidate = base if root else ("unshare", "--user", "--map-root-user", *base[1:])
        probe = Path(tempfile.mkdtemp(prefix="grading-probe-"))
        try:
            (probe / "hide.json").write_text("[]")
            ok = subprocess.run([*candidate, sys.executable, "-m", "course_utils.sandbox", "inside", str(probe),
                                 "true"], capture_output=True, timeout=60).returncode == 0
        finally:
            shutil.rmtree(probe, ignore_errors=True)
        if ok:
            unshare = candidate
        else:
            warnings.append("`unshare` cannot create namespaces here: submissions can reach the network, "
                            "write files you can write and leave processes behind")
    else:
        warnings.append("no `unshare`/`setpriv` (Linux only): submissions can reach the network, write files "
                        "you can write and leave processes behind; grade untrusted work on Linux or in a container")
    cgroup = PIDS_CGROUP if root and (PIDS_CGROUP / "cgroup.procs").exists() else None
    if root and unshare and cgroup is None:
        warnings.append("no pids cgroup (/sys/fs/cgroup/pids): root is exempt from the process limit, so a "
                        "fork bomb is only stopped by the children check after its cell")
    return Isolation(unshare, cgroup, tuple(warnings))


# --- the box ---------------------------------------------------------------------------------

class Box:
    """A throwaway folder for one submission's kernel; removed by :meth:`close`.

    ``hide``: folders and files the kernel must not see (the gradebook, other submissions); an
    empty file system is mounted over each of them inside the kernel's mount namespace.
    """

    def __init__(self, hide: list[Path] = ()):
        self.root = Path(tempfile.mkdtemp(prefix="grading-box-"))
        os.chmod(self.root, 0o755)
        shutil.copytree(PACKAGE, self.root / "lib" / "course_utils",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for name in ("work", "home", "tmp", "ipc"):
            (self.root / name).mkdir(mode=0o700)
        (self.root / "hide.json").write_text(json.dumps([str(p) for p in hide if Path(p).exists()]))
        self.connection_file = self.root / "connection.json"
        self.cgroup = None
        if isolation().pids_cgroup is not None:
            self.cgroup = isolation().pids_cgroup / self.root.name
            try:
                self.cgroup.mkdir()
                (self.cgroup / "pids.max").write_text(str(Limits.from_env().processes))
            except OSError:
                self.cgroup = None
        (self.root / "cgroup").write_text(str(self.cgroup or ""))

    @property
    def work(self) -> Path:
        return self.root / "work"

    def kernel_manager(self):
        """A kernel manager that starts this box's sandboxed kernel."""
        argv = [sys.executable, "-m", "course_utils.sandbox", "kernel", str(self.root), "{connection_file}"]
        return kernel_manager(argv, transport="ipc", ip=str(self.root / "ipc" / "k"),
                              connection_file=str(self.connection_file))

    def close(self) -> None:
        if self.cgroup is not None:
            for _ in range(50):   # empty once the kernel's namespace is gone
                try:
                    self.cgroup.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
        shutil.rmtree(self.root, ignore_errors=True)


def _kernel_main(box: Path, connection_file: str) -> None:
    """Stage 1, as the grader: limits, cgroup, then enter the namespaces (``exec``)."""
    limits = Limits.from_env()
    iso = isolation()
    conn = box / "kernel.json"
    conn.write_text(Path(connection_file).read_text())
    os.chmod(conn, 0o600)
    cgroup = (box / "cgroup").read_text()
    if cgroup:
        Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))
    mb = 1024 * 1024
    for what, value in ((resource.RLIMIT_AS, limits.memory_mb * mb), (resource.RLIMIT_NPROC, limits.processes),
                        (resource.RLIMIT_FSIZE, limits.file_mb * mb), (resource.RLIMIT_CORE, 0)):
        try:
            resource.setrlimit(what, (value, value))
        except (ValueError, OSError):
            pass   # e.g. macOS refuses RLIMIT_AS; the wall-clock limit still holds
    keep = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED", "NBGRADER_EXECUTION", "LANG", "COURSE_DEVICE")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin", HOME=str(box / "home"),
               TMPDIR=str(box / "tmp"), PYTHONPATH=str(box / "lib"), MPLCONFIGDIR=str(box / "home"),
               IPYTHONDIR=str(box / "home" / ".ipython"), JUPYTER_RUNTIME_DIR=str(box / "home"),
               PYTHONDONTWRITEBYTECODE="1")
    kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", str(conn), "--HistoryManager.hist_file=:memory:"]
    os.chdir(box / "work")
    if iso.unshare:
        argv = [*iso.unshare, sys.executable, "-m", "course_utils.sandbox", "inside", str(box), *kernel]
    else:
        argv = kernel
    os.execvpe(argv[0], argv, env)


def _inside_main(box: Path, kernel: list[str]) -> None:
    """Stage 2, inside the new namespaces (root there): read-only file system, hidden course data,
    a private /dev/shm; then drop every capability and become the kernel (``exec``)."""
    def mount(*args: str) -> None:
        subprocess.run(["mount", *args], check=True, capture_output=True)

    mount("--bind", str(box), str(box))                       # the box stays writable ...
    for hidden in json.loads((box / "hide.json").read_text()):
        if Path(hidden).is_dir():
            mount("-t", "tmpfs", "-o", "size=4k,mode=000", "tmpfs", hidden)
        else:
            empty = box / "empty"
            empty.touch(mode=0o000)
            mount("--bind", str(empty), hidden)
            mount("-o", "remount,bind,ro", hidden)
    mount("-t", "tmpfs", "-o", "size=64m", "tmpfs", "/dev/shm")
    mount("-o", "remount,bind,ro", "/")                       # ... and everything else is read-only
    os.execvp("setpriv", ["setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all",
                          "--no-new-privs", *kernel])


def descendants(pid: int) -> int:
    """How many processes descend from ``pid`` (Linux /proc; 0 elsewhere)."""
    children: dict[int, list[int]] = {}
    for p in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(p.name))
    todo, n = list(children.get(pid, [])), 0
    while todo:
        n += 1
        todo.extend(children.get(todo.pop(), []))
    return n


def kernel_manager(argv: list[str] | None = None, **kwargs):
    """An ``AsyncKernelManager`` for the course's own Python (``sys.executable``, i.e. ``.venv``),
    whatever kernelspecs named ``python3`` the machine has."""
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    spec = KernelSpec(argv=argv or [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                      display_name="course kernel", language="python")

    class _Specs(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return spec

    return AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=_Specs(), **kwargs)


# --- what the tests read -------------------------------------------------------------------

def chapter_bindings(solution: Path) -> dict[str, tuple[str, str | None]]:
    """``{name: (module, attr)}`` bound by the imports of the chapter's instructor cells."""
    import nbformat

    out: dict[str, tuple[str, str | None]] = {}
    for cell in nbformat.read(solution, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or meta.get("solution") or meta.get("grade"):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    out[a.asname or a.name.split(".")[0]] = (a.name, None) if a.asname else (a.name.split(".")[0], None)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name != "*":
                        out[a.asname or a.name] = (node.module, a.name)
    return out


def names_read(source: str) -> list[str]:
    """The global names a cell reads and does not bind itself (a test cell's ``checks``, ``torch`` ...)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
    return sorted(read - bound)


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "kernel":
        _kernel_main(Path(argv[1]), argv[2])
    elif len(argv) >= 3 and argv[0] == "inside":
        _inside_main(Path(argv[1]), argv[2:])
    raise SystemExit("usage: python -m course_utils.sandbox kernel BOX CONNECTION_FILE")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
