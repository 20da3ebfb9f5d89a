"""The box a submitted notebook runs in: bubblewrap, cgroups, limits.

Every submission gets its own throwaway *box* and its kernel is started by
``python -m course_grading.sandbox kernel BOX CONNECTION_FILE`` (the *launcher*, on the
grader's side), which

* puts itself in the box's cgroup for memory and processes (``cgroups.py``: cgroup v1 as root, or
  cgroup v2 as root or in a delegated subtree), so that memory (page cache and tmpfs included) and
  processes are limited for *everything* the kernel starts, not per process; and sets per-process
  limits (file size, no core dumps; address space where no memory cgroup holds) as a second line;
* then becomes ``bwrap`` (bubblewrap, Debian's ``bubblewrap``), which starts the kernel as an
  unprivileged user (uid 1000, no capabilities, no new privileges) in new user, PID, mount,
  network, IPC, UTS and cgroup namespaces: a fresh ``/proc`` that shows only the box's
  processes, no ``/sys``, no network but loopback, its own SysV IPC (a shared-memory segment
  dies with it), its own host name. Every process dies with the kernel (PID namespace,
  ``--die-with-parent``).

What the kernel sees is built, not hidden: a read-only ``/usr`` (and the ``/bin``, ``/lib``
links), the course's Python (the virtual environment and the interpreter it was made from),
read-only; a fresh copy of the teaching modules of ``course_utils`` (``/box/lib``, read-only,
without the grader); a writable ``/box`` that is a size-limited tmpfs (``/box/work`` the
working folder, ``/box/home``, ``/box/tmp`` = ``/tmp``); a ``/dev/shm`` of its own (``SHM_MB``);
the kernel's sockets (``/ipc``, as root a 1 MiB tmpfs); everything else, ``/dev`` included,
read-only (:func:`box_mounts`). Its stdout and stderr are a pipe, not the grader's log files
(:func:`pipe_output`). The course, ``solutions/``, the gradebook, ``submitted/``,
``autograded/``, ``feedback/``, the nbgrader exchange, the grader's ``TMPDIR`` and every
other student's files are simply not in its file system. Nothing in the box survives it.

Where ``bwrap`` is missing or cannot create namespaces, :func:`isolation` says so with the
command that installs it. ``make autograde`` then refuses to grade (set ``GRADING_UNSANDBOXED=1``
to grade anyway, with the warning: only for work you trust); ``make grade`` (a learner
grading their own notebook) runs the kernel with the per-process limits only, and says so.
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
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path

import course_utils
from course_grading import cgroups, seccomp

PACKAGE = Path(course_utils.__file__).resolve().parent   # the teaching package (a copy goes in the box)
GUARD = "_course_tamper_guard"                       # the tamper guard's module name inside the box
KERNEL_NAME = "attention-course-sandbox"
SANDBOX_UID = 1000
INSTALL_HINT = ("install bubblewrap: `sudo apt-get install bubblewrap` (Debian/Ubuntu), "
                "`sudo dnf install bubblewrap` (Fedora); macOS has none: grade in a Linux container")


@dataclass(frozen=True)
class Limits:
    """The limits on one submission; the one place to change them.

    Each can be overridden by an environment variable ``GRADING_<NAME>`` (upper case), e.g.
    ``GRADING_NOTEBOOK_S=1200 make autograde``.
    """

    notebook_s: float = 600      # wall-clock time for the whole notebook
    cell_s: float = 300          # wall-clock time for one cell
    memory_mb: int = 4096        # memory of the whole box (cgroup); without one, address space per process
    processes: int = 128         # processes and threads of the whole box (pids cgroup)
    children: int = 16           # processes a notebook may leave running; more is a fork bomb
    file_mb: int = 256           # largest file the kernel may write, and the size of the writable box

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
                f"{self.memory_mb} MiB of memory, {self.processes} processes, {self.file_mb} MiB of disk")


# --- what this machine allows ------------------------------------------------------------------

@dataclass(frozen=True)
class Isolation:
    """What this machine allows, and a warning for each thing it does not."""

    bwrap: str | None            # the bubblewrap program, where it works
    cgroups: cgroups.Place       # where the boxes' cgroups are made (cgroup v1 or v2), if anywhere
    root: bool
    warnings: tuple[str, ...]
    userns_closed: bool = False  # bwrap --disable-userns works (bubblewrap 0.8.0 and later)

    @property
    def sandboxed(self) -> bool:
        return self.bwrap is not None

    @property
    def memory_cgroup(self) -> Path | None:
        """Where the boxes' memory cgroups are made (``None``: memory is limited per process only)."""
        return self.cgroups.parents.get("memory")

    @property
    def pids_cgroup(self) -> Path | None:
        return self.cgroups.parents.get("pids")


@lru_cache(maxsize=1)
def isolation() -> Isolation:
    warnings = []
    root = os.geteuid() == 0
    bwrap = shutil.which("bwrap") if sys.platform.startswith("linux") else None
    userns_closed = False
    if bwrap is None:
        warnings.append(f"no bubblewrap (`bwrap`): submissions cannot be sandboxed; {INSTALL_HINT}")
    else:
        bwrap, userns_closed, why = _probe(bwrap)
        if bwrap is None:
            warnings.append(why)
        elif not userns_closed:
            warnings.append("this bubblewrap has no --disable-userns (it came in 0.8.0): code in the box can still "
                            "make nested user namespaces (the seccomp filter still denies unshare, setns and mount)")
    place = cgroups.find()
    if bwrap and not all(place.limits(c) for c in cgroups.CONTROLLERS):
        warnings.append(f"no whole-box limits ({place.why_not}): memory is limited per process only, and "
                        "processes only by the check after each cell (docs/grading.md#limits says which hosts "
                        "get which)")
    return Isolation(bwrap, place, root, tuple(warnings), userns_closed=bool(bwrap) and userns_closed)


def _probe(bwrap: str) -> tuple[str | None, bool, str]:
    """``(bwrap or None, whether --disable-userns works, why not)``: a trial box with the hardening."""
    base = [bwrap, *_namespaces(), *_system_view()]
    tail = ["--", sys.executable, "-c", "pass"]
    why = ""
    for userns in (["--disable-userns"], []):
        fd = seccomp.memfd()
        argv = [*base, *userns, *(["--seccomp", str(fd)] if fd is not None else []), *tail]
        try:
            ok = subprocess.run(argv, capture_output=True, timeout=60, pass_fds=(fd,) if fd is not None else ())
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, False, f"`bwrap` failed: {e}"
        finally:
            if fd is not None:
                os.close(fd)
        if ok.returncode == 0:
            return bwrap, bool(userns), ""
        why = ok.stderr.decode(errors="replace").strip()[:200]
    return None, False, (f"`bwrap` cannot create the sandbox here ({why}); allow unprivileged user namespaces "
                         "(sysctl kernel.unprivileged_userns_clone=1) or grade as root or in a container")


def hardening(iso: Isolation) -> tuple[list[str], int | None]:
    """bwrap's arguments that close the box further, and the seccomp filter's descriptor to pass on:
    no nested user namespaces (where this bwrap can) and the system calls of ``seccomp.DENIED``."""
    fd = seccomp.memfd()
    args = ["--disable-userns"] if iso.userns_closed else []
    return args + (["--seccomp", str(fd)] if fd is not None else []), fd


def _namespaces() -> list[str]:
    return ["--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            "--hostname", "grading-box", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]


def _system_view() -> list[str]:
    """The read-only system the kernel needs: /usr, its links, the course's Python; /proc, /dev."""
    args = ["--ro-bind", "/usr", "/usr"]
    for d in ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"):
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for f in ("/etc/ld.so.cache", "/etc/localtime", "/etc/nsswitch.conf"):
        args += ["--ro-bind-try", f, f]
    for prefix in dict.fromkeys((sys.base_prefix, sys.prefix, sys.exec_prefix)):
        if not prefix.startswith("/usr/") and prefix != "/usr":
            args += ["--ro-bind", prefix, prefix]
    args += ["--proc", "/proc", "--dev", "/dev"]
    # The kernel's uid maps to the grader's outside the box (root on CI); what the kernel checks
    # against root's owner rights in /proc (sysctls, IRQs) is covered, read-only.
    for d in ("/proc/sys", "/proc/irq", "/proc/bus", "/proc/fs"):
        if os.path.isdir(d):
            args += ["--tmpfs", d, "--remount-ro", d]
    return args


def _tmp_link() -> list[str]:
    """/tmp inside the box is /box/tmp, unless the course's Python lives under /tmp (a clone in
    /tmp, as CI may make): its read-only bind already made /tmp, and TMPDIR points to /box/tmp."""
    prefixes = (sys.base_prefix, sys.prefix, sys.exec_prefix)
    if any(p == "/tmp" or p.startswith("/tmp/") for p in prefixes):
        return []
    return ["--symlink", "/box/tmp", "/tmp"]


# --- the box -----------------------------------------------------------------------------------

class Box:
    """A throwaway folder (on the grader's side) for one submission's kernel; removed by :meth:`close`."""

    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits.from_env()
        self.iso = isolation()
        self.root = Path(tempfile.mkdtemp(prefix="grading-box-"))
        os.chmod(self.root, 0o700)
        lib = self.root / "lib"
        shutil.copytree(PACKAGE, lib / "course_utils", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        shutil.copy(Path(__file__).with_name("tamper_guard.py"), lib / f"{GUARD}.py")
        for name in ("work", "ipc"):
            (self.root / name).mkdir(mode=0o700)
        self._mounted = False
        if self.iso.sandboxed and self.iso.root:   # the sockets' folder: a tiny tmpfs, not the grader's disk
            self._mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=64,mode=0700",
                                            "tmpfs", str(self.root / "ipc")], capture_output=True).returncode == 0
        (self.root / "passwd").write_text(f"root:x:0:0::/:/usr/sbin/nologin\n"
                                          f"student:x:{SANDBOX_UID}:{SANDBOX_UID}::/box/home:/usr/sbin/nologin\n")
        (self.root / "group").write_text(f"root:x:0:\nstudent:x:{SANDBOX_UID}:\n")
        self.connection_file = self.root / "connection.json"
        self.group = cgroups.BoxGroup(self.iso.cgroups, self.root.name, self.limits.memory_mb * 2**20,
                                      self.limits.processes)
        (self.root / "cgroups.json").write_text(json.dumps({"paths": [str(c) for c in self.group.paths],
                                                            "memory": "memory" in self.group.limited}))
        self._baseline: int | None = None

    def unlimited(self) -> list[str]:
        """What this box was meant to limit as a whole and does not (its cgroup could not be set): said,
        never called limited."""
        return [c for c in cgroups.CONTROLLERS if self.iso.cgroups.limits(c) and c not in self.group.limited]

    def memory_scope(self) -> str:
        return "for the whole box" if "memory" in self.group.limited else "per process"

    @property
    def work(self) -> Path:
        return self.root / "work"

    def kernel_manager(self, max_message_bytes: int | None = None):
        """A kernel manager that starts this box's sandboxed kernel."""
        argv = [sys.executable, "-m", "course_grading.sandbox", "kernel", str(self.root), "{connection_file}"]
        return kernel_manager(argv, transport="ipc", ip=str(self.root / "ipc" / "k"),
                              connection_file=str(self.connection_file), max_message_bytes=max_message_bytes)

    def processes(self, launcher_pid: int | None = None) -> int:
        """Processes in the box beyond those it started with (bwrap, its init, the kernel); the
        first call sets that baseline."""
        procs = self.group.procs()
        n = len(procs) if procs is not None else (descendants(launcher_pid) if launcher_pid else 0)
        if self._baseline is None:
            self._baseline = n
        return max(0, n - self._baseline)

    def out_of_memory(self) -> bool:
        """Whether the box reached its memory limit (its cgroup says so; ``False`` without one)."""
        return self.group.out_of_memory()

    def close(self) -> None:
        self.group.close()
        if self._mounted:
            subprocess.run(["umount", "-l", str(self.root / "ipc")], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


def _kernel_main(box: Path, connection_file: str) -> None:
    """The launcher, on the grader's side: cgroups, limits, then ``exec`` bwrap (or, unsandboxed, the kernel)."""
    limits = Limits.from_env()
    iso = isolation()
    info = json.loads(Path(connection_file).read_text())
    if iso.sandboxed:
        info["ip"] = "/ipc/k"
    conn = box / "kernel.json"
    conn.write_text(json.dumps(info))
    os.chmod(conn, 0o600)
    groups = json.loads((box / "cgroups.json").read_text())
    for cg in groups["paths"]:
        Path(cg, "cgroup.procs").write_text(str(os.getpid()))
    mb = 2**20
    _, hard = resource.getrlimit(resource.RLIMIT_AS)   # the nbgrader process's own cap is not the box's
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    rlimits = [(resource.RLIMIT_FSIZE, limits.file_mb * mb), (resource.RLIMIT_CORE, 0)]
    if not groups["memory"]:   # a memory cgroup (limit read back) limits the whole box; else per process
        rlimits.append((resource.RLIMIT_AS, limits.memory_mb * mb))
    for what, value in rlimits:
        try:
            resource.setrlimit(what, (value, value))
        except (ValueError, OSError):
            pass   # e.g. macOS refuses RLIMIT_AS; the wall-clock limit still holds
    keep = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED", "NBGRADER_EXECUTION", "LANG", "COURSE_DEVICE",
            "COURSE_GRADING_RECORDS", "COURSE_LANG")   # COURSE_LANG: the checks' messages in the notebook's language
    env = {k: os.environ[k] for k in keep if k in os.environ}
    inside = Path("/box") if iso.sandboxed else box
    env.update(PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin", HOME=str(inside / "home"),
               TMPDIR=str(inside / "tmp"), PYTHONPATH=str(inside / "lib"), MPLCONFIGDIR=str(inside / "home"),
               IPYTHONDIR=str(inside / "home" / ".ipython"), JUPYTER_RUNTIME_DIR=str(inside / "home"),
               PYTHONDONTWRITEBYTECODE="1", USER="student", LOGNAME="student")
    kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", str(inside / "kernel.json"),
              "--HistoryManager.hist_file=:memory:"]
    pipe_output()
    if not iso.sandboxed:
        for name in ("home", "tmp"):
            (box / name).mkdir(exist_ok=True)
        os.chdir(box / "work")
        os.execvpe(kernel[0], kernel, env)
    closing, _ = hardening(iso)   # the seccomp descriptor is inheritable: exec keeps it open for bwrap
    argv = [iso.bwrap, *_namespaces(), *closing, *_system_view(), *box_mounts(box, limits), "--", *kernel]
    os.execvpe(argv[0], argv, env)


SHM_MB = 64   # /dev/shm in the box: its own tmpfs of this size (the rest of /dev is read-only)


def box_mounts(box: Path, limits: Limits) -> list[str]:
    """bwrap's arguments for what the kernel may write, after :func:`_system_view`: the ``/box`` tmpfs
    (``limits.file_mb``), ``/dev/shm`` (:data:`SHM_MB`) and the sockets' folder; then ``/`` and ``/dev``
    (bwrap's ``--dev`` is a tmpfs of the host's default size) read-only."""
    mb = 2**20
    return ["--ro-bind", str(box / "passwd"), "/etc/passwd", "--ro-bind", str(box / "group"), "/etc/group",
            "--size", str(limits.file_mb * mb), "--tmpfs", "/box",
            "--dir", "/box/work", "--dir", "/box/home", "--dir", "/box/tmp",
            "--ro-bind", str(box / "lib"), "/box/lib", "--ro-bind", str(box / "kernel.json"), "/box/kernel.json",
            "--bind", str(box / "ipc"), "/ipc",
            *_tmp_link(), "--size", str(SHM_MB * mb), "--tmpfs", "/dev/shm",
            "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/box/work"]


BOX_OUTPUT_BYTES = 64 * 2**10   # what the box may write to its stdout and stderr that reaches the grader's log
BOX_PREFIX = b"[kernel] "       # each such line is marked (parallel.last_error never quotes one)


def pipe_output() -> None:
    """Give the box a pipe for its stdout and stderr instead of the grader's capture files (which the
    box could otherwise reopen through ``/proc/self/fd`` and rewrite): a small process outside the box
    copies at most :data:`BOX_OUTPUT_BYTES` of it, each line marked :data:`BOX_PREFIX`, to the
    grader's stderr, and ends when the box has closed the pipe."""
    r, w = os.pipe()
    if os.fork() == 0:
        try:
            os.close(w)
            _copy_marked(r, 2)
        finally:
            os._exit(0)
    os.close(r)
    for fd in (1, 2):
        os.dup2(w, fd)
    os.close(w)


def _copy_marked(r: int, out: int, limit: int = BOX_OUTPUT_BYTES) -> None:
    """Copy the lines read from ``r`` to ``out``, marked, up to ``limit`` bytes; read the rest to the end."""
    left, pending = limit, b""
    while chunk := os.read(r, 65536):
        if left <= 0:
            continue
        *lines, pending = (pending + chunk).split(b"\n")
        if len(pending) > 4096:
            lines, pending = [*lines, pending], b""
        for line in lines:
            if left <= 0:
                break
            try:
                os.write(out, BOX_PREFIX + line[:left] + b"\n")
                left -= len(BOX_PREFIX) + len(line) + 1
            except OSError:   # the grader's log is gone: read on, so that the box never blocks
                left = 0
    if pending and left > 0:
        os.write(out, BOX_PREFIX + pending[:left] + b"\n")
    if left <= 0:
        os.write(out, BOX_PREFIX + f"(more than {limit} bytes: the rest was dropped)\n".encode())


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


def kernel_manager(argv: list[str] | None = None, max_message_bytes: int | None = None, **kwargs):
    """An ``AsyncKernelManager`` for the course's own Python (``sys.executable``, i.e. ``.venv``),
    whatever kernelspecs named ``python3`` the machine has. ``max_message_bytes``: the client
    drops the connection of a kernel that sends a bigger message (the grader's memory stays bounded)."""
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    spec = KernelSpec(argv=argv or [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                      display_name="course kernel", language="python")

    class _Specs(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return spec

    class _Manager(AsyncKernelManager):
        def client(self, **kw):
            if max_message_bytes:
                import zmq
                import zmq.asyncio
                ctx = zmq.asyncio.Context()
                ctx.setsockopt(zmq.MAXMSGSIZE, int(max_message_bytes))
                kw.setdefault("context", ctx)
            return super().client(**kw)

    return _Manager(kernel_name=KERNEL_NAME, kernel_spec_manager=_Specs(), **kwargs)


def guard_call(function: str, argument_json: str) -> str:
    """The expression the grader evaluates in the kernel to call the tamper guard: ``install``
    imports it (before any learner code ran); ``check`` finds it without a name the notebook
    could rebind (``__import__``, ``__builtins__``)."""
    if function == "install":
        return f"__import__({GUARD!r})._GuardEntry.install({json.dumps(argument_json)})"
    return (f"[c for c in ().__class__.__base__.__subclasses__() if c.__module__ == {GUARD!r} "
            f"and c.__qualname__ == '_GuardEntry'][0].{function}({json.dumps(argument_json)})")


# --- what the tests read -------------------------------------------------------------------

def _parsed_cells(cells, keep) -> list[ast.Module]:
    """The parsed code cells whose nbgrader metadata ``keep`` accepts (cells that do not parse are left out)."""
    trees = []
    for cell in cells:
        if cell.cell_type == "code" and keep(cell.metadata.get("nbgrader", {})):
            try:
                trees.append(ast.parse(cell.source))
            except SyntaxError:
                pass
    return trees


def chapter_bindings(solution: Path) -> dict[str, tuple[str, str | None]]:
    """``{name: (module, attr)}`` bound by the imports of the chapter's instructor cells."""
    import nbformat

    out: dict[str, tuple[str, str | None]] = {}
    cells = nbformat.read(solution, as_version=4).cells
    for tree in _parsed_cells(cells, lambda meta: not meta.get("solution") and not meta.get("grade")):
        for node in tree.body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    out[a.asname or a.name.split(".")[0]] = (a.name, None) if a.asname else (a.name.split(".")[0], None)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name != "*":
                        out[a.asname or a.name] = (node.module, a.name)
    return out


def answer_names(nb) -> list[str]:
    """The top-level names the answer cells (nbgrader ``solution``) of a notebook define."""
    names: list[str] = []
    for tree in _parsed_cells(nb.cells, lambda meta: meta.get("solution")):
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.append(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names += [t.id for t in targets if isinstance(t, ast.Name)]
    return sorted(set(names))


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
    raise SystemExit("usage: python -m course_grading.sandbox kernel BOX CONNECTION_FILE")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
