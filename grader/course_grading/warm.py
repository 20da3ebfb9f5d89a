"""The grader's programs (nbgrader, the reference run) forked from a process that imported them once.

``python -m nbgrader`` spends about 3 s importing (nbgrader, nbconvert, nbclient, SQLAlchemy, the
grader's own modules) before it reads a notebook, and the grader starts it once per submission,
once per feedback run and once per release; the solution's reference run imports the same. Here
those imports are made once per grading process, in a *fork server*: a single-threaded helper
process, started afresh (never a fork of the caller, whose threads may hold locks), that forks a
child for every run. The child is given what a new process would have: its working directory,
exactly the environment it is passed, its memory cap, its own stdout and stderr (read back as
text) and stdin from ``/dev/null``; past its time limit it is killed. The kernel a run starts is
unchanged: a new process in a new sandbox.

The helper talks JSON lines over its stdin and stdout: ``{"id", "run": {...}}`` or
``{"id", "kill": true}`` in; ``{"id", "pid"}`` when a run is forked, ``{"id", "code"}`` when it has
exited. It exits, killing what still runs, when its stdin closes (when the grader exits).
Unlike multiprocessing's fork server it never imports the caller's main script.

``COURSE_GRADING_COLD=1``, or a platform without ``fork``, starts every run as a new process.
"""

from __future__ import annotations

import json
import os
import queue
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["COLD", "PRELOAD", "run_module"]

COLD = "COURSE_GRADING_COLD"
# What the runs import; a module left out here is imported by the run itself, as before.
PRELOAD = ("nbgrader.apps.nbgraderapp", "nbgrader.apps.autogradeapp", "nbgrader.apps.generateassignmentapp",
           "nbgrader.apps.generatefeedbackapp", "nbgrader.api", "nbclient", "nbconvert.exporters",
           "jupyter_client.manager", "course_grading.execution", "course_grading.feedback",
           "course_grading.late", "course_grading.reference_run")


def run_module(module: str, argv: Sequence[str], cwd: Path, env: Mapping[str, str], timeout: float | None = None,
               memory_mb: int | None = None) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGV`` in ``cwd`` with exactly ``env``: its exit status and output, as
    ``subprocess.run(..., capture_output=True, text=True)`` gives them (124 when it ran past ``timeout``)."""
    cmd = [sys.executable, "-m", module, *argv]
    server = None if os.environ.get(COLD) or not hasattr(os, "fork") else _Server.get()
    if server is not None:
        with tempfile.TemporaryDirectory(prefix="grader-run-") as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            forked, code = server.run({"module": module, "argv": list(argv), "cwd": str(cwd), "env": dict(env),
                                       "memory_mb": memory_mb, "out": str(out), "err": str(err)}, timeout)
            stdout = out.read_text(errors="replace") if out.exists() else ""
            stderr = err.read_text(errors="replace") if err.exists() else ""
        if forked and code is None:
            return subprocess.CompletedProcess(cmd, 124, stdout, f"{stderr}\n[ERROR] {module} ran past {timeout:g} s")
        if forked:
            if code == -signal.SIGKILL and server.dead:
                stderr += "\n[ERROR] the grader's fork server exited during this run"
            return subprocess.CompletedProcess(cmd, code, stdout, stderr)
        # the fork server could not start or is gone: this run starts as a new process
    try:
        return subprocess.run(cmd, cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout,
                              preexec_fn=None if memory_mb is None else lambda: _cap(memory_mb))
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", f"[ERROR] {module} ran past {timeout:g} s")


def _cap(memory_mb: int) -> None:
    """Cap this process's address space at ``memory_mb`` MiB: its *soft* limit, so that the kernel
    launcher it starts can raise its own back, then set the box's (``sandbox._kernel_main``)."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    want = memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard))


# --- the caller's side ----------------------------------------------------------------------------

# The fork server's program: the caller's import path, then the loop.
_START = "import json, sys; sys.path[:] = json.loads(sys.argv[1]); from course_grading import warm; warm._serve()"


class _Server:
    """The caller's handle on its fork server: one per process, shared by its threads."""

    _lock = threading.Lock()
    _current: _Server | None = None

    @classmethod
    def get(cls) -> _Server | None:
        """This process's fork server, started now if it has none; None where one died before it
        forked anything (it cannot start here: every run then starts as a new process)."""
        with cls._lock:
            old = cls._current
            if old is not None and old.pid == os.getpid() and old.dead and not old.forked:
                return None
            if old is None or old.pid != os.getpid() or old.dead:
                cls._current = cls()
            return cls._current

    def __init__(self):
        self.pid = os.getpid()
        self.dead = False
        self.forked = False
        self._next = 0
        self._write = threading.Lock()
        self._waiting: dict[int, queue.Queue] = {}
        self._proc = subprocess.Popen([sys.executable, "-c", _START, json.dumps(sys.path)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        threading.Thread(target=self._read, name="nbgrader-fork-server", daemon=True).start()

    def _read(self) -> None:
        for line in self._proc.stdout:
            try:
                msg = json.loads(line)
                box = self._waiting.get(msg["id"])
            except (ValueError, KeyError, TypeError):
                continue
            if box is not None:
                box.put(msg)
        self.dead = True   # it exited: every run still waiting ends with an error
        for box in list(self._waiting.values()):
            box.put({"code": -signal.SIGKILL})

    def _send(self, msg: dict) -> None:
        with self._write:
            self._proc.stdin.write(json.dumps(msg).encode() + b"\n")
            self._proc.stdin.flush()

    def run(self, request: dict, timeout: float | None) -> tuple[bool, int | None]:
        """``(forked, status)`` of one run: ``forked`` is False where the fork server was gone before
        it could fork (nothing ran); the status is None where the run was killed at ``timeout``, and
        ``-SIGKILL`` where the fork server went away while it ran."""
        box: queue.Queue = queue.Queue()
        with self._write:
            self._next += 1
            rid = self._next
            self._waiting[rid] = box
        forked = False
        try:
            self._send({"id": rid, "run": request})
            msg = box.get()   # forked, or the server is gone
            if "code" in msg:
                return False, msg["code"]
            forked = self.forked = True
            try:
                return True, box.get(timeout=timeout)["code"]
            except queue.Empty:
                self._send({"id": rid, "kill": True})
                box.get()
                return True, None
        except OSError:   # its stdin is closed: it has exited (a run it forked is not run again)
            self.dead = True
            return forked, -signal.SIGKILL if forked else None
        finally:
            self._waiting.pop(rid, None)


# --- the fork server ------------------------------------------------------------------------------

def _serve() -> None:
    """The fork server's loop: import :data:`PRELOAD`, then fork a child per request, report its pid
    and its exit status, kill it on request; at the end of stdin, kill what runs and exit."""
    import importlib

    global _REPLIES
    _REPLIES = os.dup(1)   # the replies' pipe; whatever an import prints goes to stderr instead
    os.dup2(2, 1)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:   # noqa: BLE001 - the run imports it itself, and reports what fails
            pass
    forks = _Forks()
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ)
    pending = b""
    while True:
        if sel.select(timeout=0.05):
            chunk = os.read(0, 1 << 20)
            if not chunk:
                forks.kill_all()
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                forks.take(json.loads(line))
        forks.reap()


class _Forks:
    """The fork server's children: ``{pid: request id}``."""

    def __init__(self):
        self.running: dict[int, int] = {}

    def take(self, msg: dict) -> None:
        if "run" in msg:
            pid = os.fork()
            if pid == 0:
                _child(**msg["run"])   # never returns
            self.running[pid] = msg["id"]
            _say({"id": msg["id"], "pid": pid})
        elif msg.get("kill"):
            for pid, rid in self.running.items():
                if rid == msg["id"]:
                    os.kill(pid, signal.SIGKILL)

    def reap(self) -> None:
        while self.running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            _say({"id": self.running.pop(pid), "code": os.waitstatus_to_exitcode(status)})

    def kill_all(self) -> None:
        for pid in self.running:
            os.kill(pid, signal.SIGKILL)


_REPLIES = 1


def _say(msg: dict) -> None:
    os.write(_REPLIES, json.dumps(msg).encode() + b"\n")


def _child(module: str, argv: list[str], cwd: str, env: dict[str, str], memory_mb: int | None, out: str,
           err: str) -> None:
    """In the forked child: become ``python -m MODULE ARGV`` (directory, environment, limits,
    output), run it, and exit with its status."""
    code = 1
    try:
        import atexit
        import runpy
        import traceback

        os.close(_REPLIES)
        for stream, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                    (2, err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            fd = os.open(path, flags, 0o600)
            os.dup2(fd, stream)
            os.close(fd)
        try:
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)
            if memory_mb is not None:
                _cap(memory_mb)
            sys.argv = [module, *argv]   # run_module puts the module's file first
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, (int, type(None))):
                print(e.code, file=sys.stderr)
        except BaseException:   # what the interpreter prints before it exits with 1
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()   # as the interpreter does at exit (nbclient cleans up its kernel there)
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
