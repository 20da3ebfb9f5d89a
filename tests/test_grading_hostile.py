"""Hostile and broken submissions, graded as an instructor would, with short limits.

One ``instructor_autograde`` run in a throwaway course grades a class built from chapter 3's
solution (the chapter that grades fastest; experiment cells are dropped, which a learner may
do): a notebook that hangs, one that exhausts its memory, one that kills its kernel, a fork
bomb, a vandal that tries to write the course and reach the network, a file that is not
JSON, one that lost or retyped its graded cells, another chapter's notebook, three kinds of
tampering with what the tests rely on, a folder that is not a chapter, and after all of them
an ordinary submission with one exercise wrong. Each gets its expected score and reason; the
course's files are unchanged; the ordinary one gets the same score as it does alone.
"""

from __future__ import annotations

import csv
import hashlib
import html
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import nbformat
import pytest
from notebook_helpers import lean as _lean
from notebook_helpers import meta as _meta

import course_grading as grading
from course_grading import exchange, feedback, rubric, sandbox

CHAPTER = "ch03_scaled_dot_product"
REPO = Path(__file__).resolve().parent.parent
LIMITS = sandbox.Limits(notebook_s=120, cell_s=12, memory_mb=2048, processes=64, children=8, file_mb=64)
pytestmark = [
    pytest.mark.skipif(CHAPTER not in grading.chapters(REPO), reason=f"needs {CHAPTER}"),
    pytest.mark.skipif(not sandbox.isolation().sandboxed, reason="the hostile suite needs the real sandbox: "
                       + "; ".join(sandbox.isolation().warnings)),
]


def _wrong_answer() -> tuple[str, str]:
    spec = importlib.util.spec_from_file_location("wrong", REPO / "tests" / "wrong_answers" / f"{CHAPTER}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.EXERCISE, mod.SOURCE




def _index(nb, grade_id: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if _meta(c).get("grade_id") == grade_id)


def _after(nb, grade_id: str, source: str):
    nb.cells.insert(_index(nb, grade_id) + 1, nbformat.v4.new_code_cell(source))
    return nb


def _answer(nb, exercise: str, source: str):
    nb.cells[_index(nb, exercise)].source = source
    return nb


def _exercises(solution) -> list[str]:
    return [_meta(c)["grade_id"] for c in solution.cells if _meta(c).get("solution") and _meta(c).get("grade_id")
            and not _meta(c).get("grade")]


HANG = "while True:\n    pass\n"
MEMORY = "hog = []\nwhile True:\n    hog.append(bytearray(64 * 2**20))\n"
DEAD = "import os\nos._exit(1)\n"
FORK = """import os, time
for _ in range(10_000):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(3600)
        os._exit(0)
"""
VANDAL = """import pathlib, shutil, socket
report = []
for target in {targets!r}:
    p = pathlib.Path(target)
    try:
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.write_text("raise SystemExit('vandalised')")
        report.append("WROTE " + target)
    except OSError as e:
        report.append("REFUSED " + type(e).__name__)
try:
    socket.create_connection(("1.1.1.1", 53), timeout=3)
    report.append("NETWORK open")
except OSError as e:
    report.append("NETWORK closed")
print("\\n".join(report))
"""
TAMPER_CHECKS = """from course_utils import checks
for _name in dir(checks):
    if not _name.startswith("_") and callable(getattr(checks, _name)):
        setattr(checks, _name, lambda *a, **k: None)
"""
TAMPER_TORCH = """import builtins, torch
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
builtins.all = lambda *a: True
"""
TAMPER_IPYTHON = """import types
ip = get_ipython()
ip.set_custom_exc((BaseException,), lambda *a, **k: None)
ip.input_transformers_post.append(lambda lines: [])
checks = types.SimpleNamespace()
"""

# --- the second round (issue 17): a blank notebook's tricks, the box, leaks, one student's poison --
AST_TRY = """import ast
class _Try(ast.NodeTransformer):
    def visit_Module(self, node):
        handler = ast.ExceptHandler(type=ast.Name("BaseException", ast.Load()), name=None, body=[ast.Pass()])
        node.body = [ast.Try(body=node.body or [ast.Pass()], handlers=[handler], orelse=[], finalbody=[])]
        return ast.fix_missing_locations(node)
get_ipython().ast_transformers = [_Try()]
"""
CLASS_SWAP = """import os
ip = get_ipython()
class _Calm(type(ip)):
    def run_cell(self, raw_cell, *a, **k):
        return super().run_cell("try:\\n" + "".join("    " + ln + "\\n" for ln in raw_cell.splitlines())
                                + "except BaseException:\\n    pass\\n", *a, **k)
ip.__class__ = _Calm
"""
FUNCTION_MODE = """import torch
from torch.overrides import TorchFunctionMode
class _Yes(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (torch.isclose, torch.allclose, torch.equal, torch.Tensor.__eq__):
            return torch.ones_like(out, dtype=torch.bool) if isinstance(out, torch.Tensor) else True
        return out
_Yes().__enter__()
"""
LIAR = """class _Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        if func in (torch.isclose, torch.allclose, torch.equal, torch.Tensor.__eq__, torch.Tensor.__ne__):
            return (torch.ones_like(out, dtype=torch.bool) if func is not torch.Tensor.__ne__
                    else torch.zeros_like(out, dtype=torch.bool)) if isinstance(out, torch.Tensor) else True
        return out

def scaled_scores(q, k):
    return torch.zeros(*q.shape[:-1], k.shape[-2], dtype=q.dtype).as_subclass(_Liar)
"""
# Tricks the tamper guard cannot see: the answer patches the checks while a test runs and puts
# everything back at the test's own success line, so the guard (before and after each test cell)
# finds the kernel as it was. Only the grader's own comparison, outside the kernel, stops them.
SLY_COMPARE = """import builtins
from course_utils import checks as _c

def scaled_scores(q, k):
    if q.dim() == 4 and not getattr(builtins, "_sly", False):   # only in the hidden test
        compare, show = _c._compare_close, builtins.print
        def put_back(*a, **kw):
            _c._compare_close, builtins.print = compare, show
            del builtins._sly
            return show(*a, **kw)
        _c._compare_close, builtins.print, builtins._sly = (lambda *a, **kw: None), put_back, True
    return q @ k.transpose(-2, -1)   # wrong: not divided by sqrt(d_k)
"""
SLY_SKIP = """from course_utils import checks as _c

def stable_softmax(x, dim=-1):
    if x.dtype == torch.float64 and getattr(_c.run_checks, "__name__", "") == "run_checks":   # the hidden test
        real = _c.run_checks
        def pretend(name, cs):
            _c.run_checks = real
            print(f"\\u2713 {name}: all {len(cs)} checks passed")
        _c.run_checks = pretend
    return torch.zeros_like(x)   # wrong
"""
SLY_EXPECTED = """import builtins

def causal_mask(L_q, L_k=None):
    L_k = L_q if L_k is None else L_k
    if (L_q, L_k) == (6, 6) and not getattr(builtins, "_sly", False):   # only in the hidden test
        tril, show = torch.Tensor.tril, builtins.print
        def put_back(*a, **kw):
            torch.Tensor.tril, builtins.print = tril, show
            del builtins._sly
            return show(*a, **kw)
        torch.Tensor.tril, builtins.print, builtins._sly = (lambda self, diagonal=0: self), put_back, True
    return torch.ones(L_q, L_k, dtype=torch.bool)   # wrong, and the test's expected masks made the same
"""
SNOOP = """import os, pathlib, subprocess, sys
print("HISTORY", len(In), *In, sep="\\n")
print("IH", *_ih, sep="\\n")
found = []
for p in {paths!r}:
    try:
        found.append(("READ " if pathlib.Path(p).exists() else "ABSENT ") + p)
    except OSError:
        found.append("ABSENT " + p)
pids = [d for d in os.listdir("/proc") if d.isdigit()]
print("\\n".join(found))
print("PIDS", len(pids), "SYS", os.path.exists("/sys/kernel"), "UID", os.getuid())
for target in ("/proc/sys/kernel/hostname", "/proc/sysrq-trigger"):
    try:
        open(target, "w").write("x")
        print("WROTE", target)
    except OSError:
        print("REFUSED", target)
"""
SHM = """import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.restype = ctypes.c_int
shm = libc.shmget(0x17171717, 4096, {flags})
print("SHM", "present" if shm >= 0 else "absent")
"""
DISK = """import os
written = 0
try:
    with open("/box/tmp/fill", "wb") as f:
        for _ in range(1024):
            f.write(b"x" * 2**20)
            written += 1
except OSError as e:
    print("STOPPED", type(e).__name__)
print("WROTE MiB", written)
"""
HUGE = "print('x' * (16 * 2**20))\n"
ONE_MESSAGE = "import sys\nsys.stdout.write('y' * (72 * 2**20))\nsys.stdout.flush()\n"   # over the 64 MiB a message may hold
XSS = '''from IPython.display import HTML, display
display(HTML('<b>hi</b><script>alert("x")</script><img src=x onerror="alert(1)"><a href="javascript:alert(2)">l</a>'))
'''
FORK_HOLD = """import os, time
pids = []
for i in range(3):
    pid = os.fork()
    if pid == 0:
        try:
            hog = bytearray(900 * 2**20)
            for j in range(0, len(hog), 4096):
                hog[j] = 1
            open(f"/box/tmp/held-{i}", "w").close()
            time.sleep(3600)
        finally:
            os._exit(0)
    pids.append(pid)
# Wait until every child holds its 900 MiB or is dead (an OOM kill may take any of them, even one that
# already holds its share), then count the children alive and holding: at most two fit in 2 GiB.
dead, deadline = set(), time.monotonic() + 8
def reap():
    for i, pid in enumerate(pids):
        if i not in dead and os.waitpid(pid, os.WNOHANG)[0] == pid:
            dead.add(i)
while time.monotonic() < deadline:
    reap()
    if all(i in dead or os.path.exists(f"/box/tmp/held-{i}") for i in range(3)):
        break
    time.sleep(0.1)
time.sleep(0.5)   # a child killed as the last one filled is reaped before the count
reap()
print("HELD", sum(1 for i in range(3) if i not in dead and os.path.exists(f"/box/tmp/held-{i}")))
"""

# --- the third round (issue 31): forged records, encoded leaks, costly data, escapes from the box --
# The kernel rewrites every record on its way out (jupyter_client's serialiser, which no guard
# watches): actual := expected. The hidden tests' expected values are withheld from the kernel, so
# there is nothing to copy; the wrong answer stays wrong.
FORGE = """import json
_session = get_ipython().kernel.session
_pack = _session.pack
def _forged(obj):
    if isinstance(obj, dict) and isinstance(obj.get("data"), dict):
        rec = obj["data"].get("application/vnd.course-check+json")
        if isinstance(rec, dict) and "expected" in rec:
            rec["actual"] = rec["expected"]
    return _pack(obj)
_session.pack = _forged
"""
# Everything the kernel keeps of the cells it ran, printed in base64 after the first hidden test.
LEAK64 = """import base64, gc, linecache
_text = "\\n".join(["".join(v[2]) for v in linecache.cache.values() if len(v) > 2]
                    + [str(x) for x in get_ipython().user_ns.get("_ih", [])]
                    + [o for o in gc.get_objects() if isinstance(o, str) and "checks." in o][:2000])
_text = "\\n".join(t for t in _text.split("\\n") if "checks." in t or "_want" in t)[:200_000]   # under the cell cap
print("LEAK", base64.b64encode(_text.encode()).decode())
"""
LEAK_ANSWER = """import base64, linecache, sys

def stable_softmax(x, dim=-1):
    code = "\\n".join("".join(v[2]) for v in linecache.cache.values() if len(v) > 2)[:200_000]
    raise ValueError("LEAK " + base64.b64encode(code.encode()).decode())
"""
# Data that costs the grader to parse: a 3 MiB repr and a record of 2 MiB, a 3 MiB Markdown table.
COSTLY = """from IPython.display import publish_display_data

def scaled_scores(q, k):
    publish_display_data({"application/vnd.course-check+json": {"kind": "equal", "what": "x", "atol": None,
        "rtol": None, "actual": {"py": "[" + "1, " * 300_000 + "]"}, "expected": {"py": "[1]"}}})
    publish_display_data({"application/vnd.course-check+json": {"kind": "close", "what": "y", "atol": 0,
        "rtol": 0, "actual": {"dtype": "torch.float64", "shape": [262144], "f64": "A" * (3 * 2**20)}}})
    return q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
"""
TABLE = "| a | b |\n|---|---|\n" + "| 1 | 2 |\n" * 300_000
# Out of the box through the kernel: new namespaces, mounts, tracing, keys, BPF.
ESCAPE = """import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
for name, nr, args in (("unshare", 272, (0x10000000,)), ("unshare-mount", 272, (0x20000,)),
                       ("mount", 165, (b"none", b"/box/tmp", b"tmpfs", 0, None)), ("ptrace", 101, (0, 0, 0, 0)),
                       ("keyctl", 250, (0, -3, 0)), ("bpf", 321, (0, 0, 0)), ("userfaultfd", 323, (0,)),
                       ("perf_event_open", 298, (0, 0, -1, -1, 0)), ("setns", 308, (0, 0)),
                       ("io_uring_setup", 425, (0, 0)), ("io_uring_enter", 426, (0, 0, 0, 0, 0, 0)),
                       ("io_uring_register", 427, (0, 0, 0, 0)), ("pidfd_getfd", 438, (0, 0, 0))):
    r = libc.syscall(nr, *args)
    print("ESCAPE", name, "allowed" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?"))
"""


# --- the fourth round (issue 48): display updates, the guard's time, /dev, the grader's log files ---
# Placeholders shown before the first hidden test, updated later: by a cell after the hidden tests
# (hidden lines in base64, a script, 24 MiB, a second display under the same id) and by a correct
# answer while a hidden test calls it (its own hidden probes). None may change an earlier output.
PLACEHOLDERS = """from IPython.display import display
_handles = {k: display({"text/plain": "PLACEHOLDER"}, raw=True, display_id=True)
            for k in ("leak", "script", "big", "probe", "again")}
"""
PROBE_ANSWER = """_softmax = stable_softmax
def stable_softmax(x, dim=-1):
    _handles["probe"].update({"text/plain": "PROBE " + repr(x.flatten()[:8].tolist())}, raw=True)
    return _softmax(x, dim)
"""
UPDATES = """import base64, linecache
from IPython.display import display
_text = "\\n".join("".join(v[2]) for v in linecache.cache.values() if len(v) > 2)[:200_000]
_handles["leak"].update({"text/plain": "LEAK " + base64.b64encode(_text.encode()).decode()}, raw=True)
_handles["script"].update({"text/html": '<script>alert(1)</script><img src=x onerror="alert(2)">'}, raw=True)
_handles["big"].update({"text/plain": "z" * (24 * 2**20)}, raw=True)
display({"text/plain": "AGAIN " + base64.b64encode(_text.encode()).decode()}, raw=True,
        display_id=_handles["again"].display_id)
"""
# Each call of the tamper guard (before and after every test cell) reads every class's __module__:
# a metaclass makes that take 8 s, under the 12 s a cell may take, 24 times: 192 s against the
# 120 s notebook (main's grader ended it with nbclient's AssertionError: a guard call timed out without a cell).
SLOW_GUARD = """import time
class _Slow(type):
    @property
    def __module__(cls):
        time.sleep(8)
        return "slow"
class _Thing(metaclass=_Slow):
    pass
"""
# /dev: no file, /dev/shm bounded; the grader's log files (the kernel's stdout and stderr, copies of
# which ipykernel keeps) are not reachable through /proc/self/fd.
DEVFS = """import errno, os
for path in ("/dev/fill", "/dev/shm/../fill"):
    try:
        open(path, "w").close()
        print("DEV", path, "created")
    except OSError as e:
        print("DEV", path, errno.errorcode[e.errno])
shm = 0
try:
    with open("/dev/shm/fill", "wb") as f:
        for _ in range(256):
            f.write(b"x" * 2**20)
            f.flush()
            shm += 1
except OSError:
    pass
os.remove("/dev/shm/fill")
print("SHM MiB", shm)
hits = []
for fd in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        continue
    if target.startswith("/") and not target.startswith(("/dev/", "/box", "/usr", "/proc", "/ipc")):
        try:
            with open(f"/proc/self/fd/{fd}", "w") as f:
                f.write("[ERROR] forged by the box\\n")
            hits.append(target)
        except OSError:
            pass
print("CAPTURE FILES WRITTEN", len(hits), hits)
"""


def _answer_names(solution) -> dict[str, str]:
    """``{exercise: the function or class its answer cell defines}``."""
    import ast
    out = {}
    for c in solution.cells:
        if _meta(c).get("solution") and not _meta(c).get("grade") and _meta(c).get("grade_id"):
            tree = ast.parse(c.source)
            out[_meta(c)["grade_id"]] = next(n.name for n in tree.body
                                             if isinstance(n, (ast.FunctionDef, ast.ClassDef)))
    return out


def _fingerprint_repo() -> dict[str, str]:
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return {f: hashlib.sha256((REPO / f).read_bytes()).hexdigest() for f in files if (REPO / f).is_file()}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, request):
    mp = pytest.MonkeyPatch()
    request.addfinalizer(mp.undo)
    for k, v in LIMITS.to_env().items():
        mp.setenv(k, v)
    mp.setenv("JUPYTER_PATH", str(_foreign_kernelspec(tmp_path_factory)))

    before = _fingerprint_repo()
    course = grading.new_course([CHAPTER], REPO)
    request.addfinalizer(lambda: shutil.rmtree(course, ignore_errors=True))
    src = grading.chapter_notebook(CHAPTER, course)
    release = course / "notebooks" / CHAPTER / src.name
    solution = _lean(src)
    exercises = _exercises(solution)
    wrong_ex, wrong_src = _wrong_answer()
    other = next((ch for ch in grading.chapters(REPO) if ch != CHAPTER), None)
    release_before = release.read_bytes()

    subs = _faulty_submissions(course, src, release, exercises, (wrong_ex, wrong_src))
    subs.update(_tricked_submissions(src, release, solution, exercises, (wrong_ex, wrong_src)))
    # The class's exchange (issue 22), with another student's submission waiting in inbound/.
    exchange_root = course / "exchange"
    inbound = exchange_root / exchange.COURSE_ID / "inbound"
    waiting = inbound / f"h-other+{CHAPTER}+2026-01-01 00:00:00.000000 UTC+abc"
    waiting.mkdir(parents=True)
    shutil.copy(release, waiting / release.name)
    mp.setenv(exchange.EXCHANGE_VARIABLE, str(exchange_root))
    subs.update(_box_submissions(course, src, release, exercises, inbound, waiting))
    _submit_all(course, src, subs, solution, other)

    # Two at a time (issue 22): a hostile submission graded beside another changes nothing of it.
    # The class has a probe secret (issue 31): its hidden tests draw other inputs than the public ones.
    mp.setenv("COURSE_PROBE_SECRET", "hostile-suite-" + os.urandom(4).hex())
    results = grading.instructor_autograde(root=course, force=False, jobs=2)
    yield {"inbound": [str(inbound), str(waiting / release.name)], "course": course, "results": {s: r for (s, ch), r in results.items()}, "src": src,
           "exercises": exercises, "solution": solution, "wrong": wrong_ex, "before": before,
           "release": release, "release_before": release_before, "other": other}


def _foreign_kernelspec(tmp_path_factory) -> Path:
    """A folder for ``JUPYTER_PATH`` with a foreign kernelspec named python3: it must not be used for grading."""
    fake = tmp_path_factory.mktemp("kernels")
    (fake / "kernels" / "python3").mkdir(parents=True)
    (fake / "kernels" / "python3" / "kernel.json").write_text(
        '{"argv": ["/bin/false", "{connection_file}"], "display_name": "not the course", "language": "python"}')
    return fake


def _faulty_submissions(course: Path, src: Path, release: Path, exercises: list[str], wrong) -> dict:
    """Submissions that hang, run out of memory, die, fork, vandalise, tamper with what the tests rely
    on, or lose and retype cells; and a wrong answer graded after them all (``zz-after``)."""
    wrong_ex, wrong_src = wrong
    subs = {
        "h-hang": _after(_lean(src), f"{exercises[1]}-hidden", HANG),
        "h-memory": _after(_lean(src), f"{exercises[1]}-hidden", MEMORY),
        "h-dead": _after(_lean(src), f"{exercises[1]}-hidden", DEAD),
        "h-fork": _after(_lean(src), f"{exercises[1]}-hidden", FORK),
        "h-vandal": _after(_lean(src), f"{exercises[0]}-hidden", VANDAL.format(targets=[
            str(REPO / "course_utils" / "checks.py"), str(REPO / "solutions"), str(course / "gradebook.db"),
            str(course / "submitted")])),
        "h-tamper-checks": _answer(_lean(release), exercises[0], TAMPER_CHECKS),
        "h-tamper-torch": _answer(_lean(src), wrong_ex, wrong_src + "\n" + TAMPER_TORCH),
        "h-tamper-ipython": _answer(_lean(release), exercises[0], TAMPER_IPYTHON),
        "zz-after": _answer(_lean(src), wrong_ex, wrong_src),
    }
    lost = _lean(src)
    lost_ids = {f"{exercises[1]}-visible", f"{exercises[1]}-hidden", exercises[2]}
    lost.cells = [c for c in lost.cells if _meta(c).get("grade_id") not in lost_ids]
    for gid in (f"{exercises[0]}-hidden", exercises[3]):   # and two cells retyped to markdown
        cell = lost.cells[_index(lost, gid)]
        lost.cells[_index(lost, gid)] = nbformat.v4.new_markdown_cell(cell.source, metadata=cell.metadata)
    subs["h-lost"] = lost
    return subs


def _tricked_submissions(src: Path, release: Path, solution, exercises: list[str], wrong) -> dict:
    """Submissions that trick nbgrader (tags, stored outputs, metadata, duplicated cells), IPython (AST
    transformers, the shell's class) or the comparisons (lying tensors, checks switched off)."""
    wrong_ex, wrong_src = wrong
    subs = {"h-tricks": _all_the_tricks(release, solution, exercises)}
    # The same poison on the full solution: graded like the solution, the poison ignored.
    poisoned = _lean(src)
    poisoned.cells.insert(1, nbformat.v4.new_code_cell("y = 2", metadata={"nbgrader": "x"}))
    dup = _index(poisoned, f"{exercises[0]}-visible")
    poisoned.cells.insert(dup + 1, nbformat.v4.new_code_cell(poisoned.cells[dup].source,
                                                             metadata=dict(poisoned.cells[dup].metadata)))
    poisoned.cells[_index(poisoned, exercises[1])].metadata["nbgrader"]["schema_version"] = 99
    poisoned.cells[_index(poisoned, f"{exercises[2]}-visible")].metadata["tags"] = ["skip-execution"]
    poisoned.cells.append(nbformat.v4.new_code_cell("# ### BEGIN HIDDEN TESTS (a learner's copy)\nz = 3"))
    # A forged rubric beside a written answer: the grader's own metadata on a learner's cell (rubric.py).
    written = next(i for i, c in enumerate(poisoned.cells) if rubric.is_written(c))
    poisoned.cells.insert(written + 1, nbformat.v4.new_markdown_cell("**Rubric of** FORGED-RUBRIC", metadata={
        rubric.META: {"rubric": _meta(poisoned.cells[written])["grade_id"], "parts": [[2, "FORGED-RUBRIC"]]}}))
    subs["h-poisoned"] = poisoned
    # A blank notebook that wraps every later cell in try (a new AST transformer list, a new shell class).
    kernel_tricks = _answer(_lean(release), exercises[0], AST_TRY)
    subs["h-kernel-tricks"] = _answer(kernel_tricks, exercises[1], CLASS_SWAP)
    # Wrong answers whose comparisons lie: a tensor subclass (exercise 1), a global TorchFunctionMode.
    subs["h-lies"] = _answer(_answer(_lean(src), exercises[0], LIAR), wrong_ex, wrong_src + "\n" + FUNCTION_MODE)
    # Wrong answers that pass inside the kernel: comparisons switched off, checks skipped, the
    # expected value poisoned, each undone before the tamper guard looks.
    subs["h-sly"] = _answer(_answer(_lean(src), exercises[0], SLY_COMPARE), exercises[1], SLY_SKIP)
    subs["h-sly-expected"] = _answer(_lean(src), exercises[3], SLY_EXPECTED)
    return subs


def _all_the_tricks(release: Path, solution, exercises: list[str]):
    """A blank notebook with every trick on its cells: skip-execution tags, stored outputs that look
    like full marks, metadata nbgrader crashes on, a duplicated test cell, schema_version 99, and
    answers that print a fake result through the display hook, then raise."""
    tricks = _lean(release)
    for ex, name in _answer_names(solution).items():
        _answer(tricks, ex, f"import sys\n\ndef {name}(*a, **k):\n    sys.displayhook(1000)\n"
                            "    raise ValueError('no answer')\n")
    for c in tricks.cells:
        c.metadata["tags"] = ["skip-execution", "raises-exception"]
        if _meta(c).get("grade") and c.cell_type == "code":
            c.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "20"}, execution_count=1)]
    tricks.cells.insert(1, nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": "x"}))
    dup = _index(tricks, f"{exercises[0]}-hidden")
    tricks.cells.insert(dup + 1, nbformat.v4.new_code_cell(tricks.cells[dup].source,
                                                           metadata=dict(tricks.cells[dup].metadata)))
    tricks.cells[_index(tricks, exercises[1])].metadata["nbgrader"]["schema_version"] = 99
    return tricks


def _box_submissions(course: Path, src: Path, release: Path, exercises: list[str], inbound: Path,
                     waiting: Path) -> dict:
    """Submissions that look around the box and leave things behind, then print 64 MiB and scripts in
    HTML; hold memory in forked children; send one message too big; forge records, leak hidden tests
    encoded, cost the grader (issue 31); or come fat with outputs."""
    snoop_paths = [str(REPO / "solutions"), str(course / "solutions"), str(course / "gradebook.db"),
                   str(course / "submitted"), str(Path(tempfile.gettempdir()) / "attention-course-exchange"),
                   str(REPO / "grader" / "course_grading"), str(inbound), str(waiting / release.name)]
    box = _lean(src)
    for source in reversed([SNOOP.format(paths=snoop_paths), SHM.format(flags="0o1000 | 0o666"), DISK, HUGE, XSS,
                            ESCAPE, DEVFS]):
        _after(box, f"{exercises[0]}-hidden", source)
    box.cells.append(nbformat.v4.new_markdown_cell('<script>alert("md")</script><img src=x onerror="alert(3)">'))
    subs = {"h-box": box}
    subs["h-box2-shm"] = _after(_lean(src), f"{exercises[0]}-hidden", SHM.format(flags="0o666"))
    # Memory held by forked children counts for the whole box.
    subs["h-memory-forked"] = _after(_lean(src), f"{exercises[1]}-hidden", FORK_HOLD)
    # One message bigger than the grader takes: the notebook stops there, the grader's memory stays bounded.
    subs["h-one-message"] = _after(_lean(src), f"{exercises[1]}-hidden", ONE_MESSAGE)
    # Issue 31: a forged record stream, encoded leaks, costly data, escapes, a notebook fat with outputs.
    subs["h-forge"] = _after(_answer(_lean(src), exercises[0], wrong_scores()), f"{exercises[0]}", FORGE)
    leak = _answer(_lean(src), exercises[1], LEAK_ANSWER)
    subs["h-leak64"] = _after(leak, f"{exercises[0]}-hidden", LEAK64)
    costly = _answer(_lean(src), exercises[0], COSTLY)
    costly.cells.append(nbformat.v4.new_markdown_cell(TABLE))
    subs["h-costly"] = costly
    fat = _lean(src)
    fat.cells[-1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="z" * (8 * 2**20))] \
        if fat.cells[-1].cell_type == "code" else []
    if not fat.cells[-1].get("outputs"):
        fat.cells.append(nbformat.v4.new_code_cell("1", outputs=[nbformat.v4.new_output(
            "stream", name="stdout", text="z" * (8 * 2**20))]))
    subs["h-fat"] = fat
    # Issue 48: a written answer whose HTML would run in formgrader, on the instructor's session.
    written = _lean(src)
    next(c for c in written.cells if c.cell_type == "markdown" and _meta(c).get("solution")).source = FORMGRADER_XSS
    subs["h-formgrader"] = written
    subs.update(_fourth_round(src, exercises))
    return subs


def _fourth_round(src: Path, exercises: list[str]) -> dict:
    """Issue 48: display updates that reach back (``h-display``); a tamper guard made slow (``h-slow-guard``)."""
    display = _after(_lean(src), exercises[0], PLACEHOLDERS)
    display = _after(display, exercises[1], PROBE_ANSWER)
    display.cells.append(nbformat.v4.new_code_cell(UPDATES))
    return {"h-display": display, "h-slow-guard": _after(_lean(src), exercises[0], SLOW_GUARD)}


def _submit_all(course: Path, src: Path, subs: dict, solution, other: str | None) -> None:
    """Put ``subs`` into ``submitted/``, beside files that are no notebook: invalid JSON, another
    chapter's notebook, a FIFO, links (to a notebook, to a folder), a folder that is no chapter."""
    for student, nb in subs.items():
        d = course / "submitted" / student / CHAPTER
        d.mkdir(parents=True)
        nbformat.write(nb, d / src.name)
    (course / "submitted" / "h-invalid" / CHAPTER).mkdir(parents=True)
    (course / "submitted" / "h-invalid" / CHAPTER / src.name).write_text('{"cells": [{"cell_type": "code", "sour')
    if other:
        (course / "submitted" / "h-other-chapter" / CHAPTER).mkdir(parents=True)
        nbformat.write(_lean(grading.chapter_notebook(other, REPO)),
                       course / "submitted" / "h-other-chapter" / CHAPTER / f"{other}.ipynb")
    for student in ("h-fifo", "h-symlink"):
        (course / "submitted" / student / CHAPTER).mkdir(parents=True)
    os.mkfifo(course / "submitted" / "h-fifo" / CHAPTER / src.name)
    os.symlink(grading.chapter_notebook(CHAPTER, REPO), course / "submitted" / "h-symlink" / CHAPTER / src.name)
    (course / "submitted" / "h-linked-folder").mkdir()
    os.symlink(REPO / "solutions" / CHAPTER, course / "submitted" / "h-linked-folder" / CHAPTER)
    (course / "submitted" / "h-not-a-chapter" / "ch99_nothing").mkdir(parents=True)
    nbformat.write(solution, course / "submitted" / "h-not-a-chapter" / "ch99_nothing" / "x.ipynb")


def _points(h, exercises) -> float:
    return sum(c.max_score for c in h["results"]["zz-after"].cells if c.exercise in exercises and not c.manual)


def _full(h) -> float:
    return h["results"]["zz-after"].auto_max


def _earned_by(h, student) -> dict[str, float]:
    return {ex: s for ex, (s, m, manual, errs) in h["results"][student].by_exercise().items() if not manual}


def test_faults_stop_the_notebook_and_keep_what_it_earned(hostile):
    first_two = _points(hostile, hostile["exercises"][:2])
    for student, word in (("h-hang", "hung"), ("h-dead", "kernel died"), ("h-fork", "forked without end")):
        res = hostile["results"][student]
        assert res.auto_score == first_two, (student, res.table())
        assert word in res.reason, (student, res.reason)


def test_memory_exhaustion_is_reported(hostile):
    res = hostile["results"]["h-memory"]
    earned = _earned_by(hostile, "h-memory")
    assert all(earned[ex] == _points(hostile, [ex]) for ex in hostile["exercises"][:2]), res.table()
    assert "out of memory" in res.reason, res.reason


def test_vandal_cannot_write_the_course_or_reach_the_network(hostile):
    res = hostile["results"]["h-vandal"]
    assert res.auto_score == _full(hostile), res.table()
    nb = nbformat.read(hostile["course"] / "autograded" / "h-vandal" / CHAPTER / hostile["src"].name, 4)
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "NETWORK closed" in text and "WROTE" not in text and text.count("REFUSED") == 4, text
    assert _fingerprint_repo() == hostile["before"], "a submission changed the course's files"
    assert (hostile["course"] / "gradebook.db").stat().st_size > 0


def test_broken_notebooks_get_zero_and_a_reason(hostile):
    res = hostile["results"]["h-invalid"]
    assert res.auto_score == 0 and "not valid JSON" in res.reason, res.reason
    if hostile["other"]:
        res = hostile["results"]["h-other-chapter"]
        assert res.auto_score == 0 and f"notebook of {hostile['other']}" in res.reason, res.reason


def test_lost_and_retyped_cells_are_put_back(hostile):
    lost = hostile["results"]["h-lost"]
    ex = hostile["exercises"]
    assert lost.auto_score == _full(hostile) - _points(hostile, [ex[2]]), lost.table()
    assert "put back" in lost.reason and "type was changed" in lost.reason, lost.reason


def test_tampering_earns_nothing_and_is_flagged(hostile):
    for student in ("h-tamper-checks", "h-tamper-ipython"):   # blank releases that disable the tests
        res = hostile["results"][student]
        assert res.auto_score == 0, (student, res.table())
        assert res.tampering and "tampering detected" in res.reason, (student, res.reason)
    res = hostile["results"]["h-tamper-torch"]                # a wrong answer that fakes torch's checks
    assert res.auto_score == _full(hostile) - _points(hostile, [hostile["wrong"]]), res.table()
    assert any(g.startswith(hostile["wrong"]) for g in res.tampering), res.tampering
    assert "torch.allclose" in res.reason and "builtins.all" in res.reason


def test_a_submission_after_the_hostile_ones_is_graded_as_alone(hostile):
    res = hostile["results"]["zz-after"]
    assert not res.reason, res.reason
    assert res.auto_score == _full(hostile) - _points(hostile, [hostile["wrong"]]), res.table()
    assert res.auto_max == sum(c.metadata["nbgrader"]["points"] for c in hostile["solution"].cells
                               if _meta(c).get("grade") and c.cell_type == "code")


def test_every_student_has_a_row_feedback_and_the_release_is_untouched(hostile):
    course = hostile["course"]
    rows = list(csv.DictReader((course / "grades.csv").open()))
    students = {p.name for p in (course / "submitted").iterdir()}
    assert {r["student_id"] for r in rows} == students
    by = {(r["student_id"], r["chapter"]): r for r in rows}
    assert "not a chapter" in by[("h-not-a-chapter", "ch99_nothing")]["fault"]
    assert "hung" in by[("h-hang", CHAPTER)]["fault"]
    assert by[("zz-after", CHAPTER)]["fault"] == ""
    for s in students - {"h-not-a-chapter"}:
        assert (course / "feedback" / s / CHAPTER / hostile["src"].name.replace(".ipynb", ".html")).exists(), s
    fb = (course / "feedback" / "h-hang" / CHAPTER / hostile["src"].name.replace(".ipynb", ".html")).read_text()
    assert "Grading note" in fb and "hung" in fb
    assert hostile["release"].read_bytes() == hostile["release_before"], "grading rewrote notebooks/"
    assert list((course / "gradebook-backups").glob("gradebook-*.db")), "no backup of the gradebook"


def test_resubmission_is_regraded_and_nothing_else(hostile):
    course, src = hostile["course"], hostile["src"]
    nbformat.write(hostile["solution"], course / "submitted" / "zz-after" / CHAPTER / src.name)
    stamp = {s: (course / "autograded" / s / CHAPTER / grading.RECORD).read_text()
             for s in ("h-vandal", "h-lost")}
    res = grading.instructor_autograde(root=course)
    assert res[("zz-after", CHAPTER)].auto_score == _full(hostile)
    for s, before in stamp.items():
        assert (course / "autograded" / s / CHAPTER / grading.RECORD).read_text() == before, f"{s} was regraded"
    rows = {r["student_id"]: r for r in csv.DictReader((course / "grades.csv").open()) if r["chapter"] == CHAPTER}
    assert float(rows["zz-after"]["autograded_score"]) == _full(hostile)


def test_changed_tests_reach_the_gradebook_and_regrade(hostile):
    """A stricter hidden test in solutions/ reaches the gradebook, and changes every fingerprint."""
    from nbgrader.api import Gradebook

    course, src = hostile["course"], hostile["src"]
    sub = course / "submitted" / "zz-after" / CHAPTER / src.name
    before = grading.fingerprint(sub, CHAPTER, course, LIMITS)
    stricter = grading.new_course([CHAPTER], REPO)
    try:
        nb = nbformat.read(grading.chapter_notebook(CHAPTER, stricter), as_version=4)
        cell = nb.cells[_index(nb, f"{hostile['exercises'][0]}-hidden")]
        cell.source = cell.source.replace("### END HIDDEN TESTS", "assert False, 'a stricter test'\n### END HIDDEN TESTS")
        nbformat.write(nb, grading.chapter_notebook(CHAPTER, stricter))
        (stricter / "gradebook.db").unlink()
        shutil.copy(course / "gradebook.db", stricter / "gradebook.db")   # a gradebook with submissions
        release = (stricter / "notebooks" / CHAPTER / src.name).read_bytes()
        grading.update_gradebook_tests(stricter, CHAPTER)
        with Gradebook(f"sqlite:///{stricter / 'gradebook.db'}") as gb:
            stored = gb.find_source_cell(f"{hostile['exercises'][0]}-hidden", src.stem, CHAPTER).source
        assert "a stricter test" in stored
        assert grading.fingerprint(sub, CHAPTER, stricter, LIMITS) != before
        assert (stricter / "notebooks" / CHAPTER / src.name).read_bytes() == release, "it rewrote notebooks/"
    finally:
        shutil.rmtree(stricter, ignore_errors=True)


def test_make_clean_never_deletes_grading_results():
    out = subprocess.run(["make", "-n", "clean"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    for kept in ("gradebook", "submitted", "autograded", "feedback", "grades.csv"):
        assert kept not in out, f"`make clean` would delete {kept}: {out}"


def test_notebooks_run_in_the_course_environment():
    """nbval uses the Python that runs pytest (.venv), not a kernelspec found by name."""
    import tomllib

    addopts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "--nbval-current-env" in addopts
    km = sandbox.kernel_manager()
    assert km.kernel_spec.argv[0] == __import__("sys").executable


def test_make_grade_explains_a_folder_that_is_not_a_chapter(tmp_path):
    nb = tmp_path / "homework" / "mine.ipynb"
    nb.parent.mkdir()
    nbformat.write(nbformat.v4.new_notebook(), nb)
    with pytest.raises(SystemExit, match="'homework', which is not a chapter"):
        grading.grade(nb, REPO)


def test_make_grade_explains_a_notebook_that_is_not_json(tmp_path, monkeypatch):
    for k, v in LIMITS.to_env().items():
        monkeypatch.setenv(k, v)
    nb = tmp_path / CHAPTER / f"{CHAPTER}.ipynb"
    nb.parent.mkdir()
    nb.write_text("{ this is not json")
    res = grading.grade(nb, REPO)
    assert res.auto_score == 0 and "not valid JSON" in res.reason
    assert "fault: " in res.table()


# --- the second round (issue 17) -------------------------------------------------------------------

def _outputs(h, student) -> str:
    nb = nbformat.read(h["course"] / "autograded" / student / CHAPTER / h["src"].name, 4)
    return "\n".join(str(o.get("text", "")) + str(o.get("data", "")) for c in nb.cells if c.cell_type == "code"
                     for o in c.outputs)


def _feedback(h, student) -> str:
    return (h["course"] / "feedback" / student / CHAPTER / h["src"].name.replace(".ipynb", ".html")).read_text()


def test_a_blank_notebook_earns_nothing_whatever_its_tags_outputs_and_tricks(hostile):
    for student in ("h-tricks", "h-kernel-tricks"):
        res = hostile["results"][student]
        assert res.auto_score == 0, (student, res.table())
        assert "could not grade" not in res.reason, (student, res.reason)
    reason = hostile["results"]["h-kernel-tricks"].reason
    assert "ast_transformers" in reason and ("class of" in reason or "tamper guard failed" in reason), reason


def test_poisoned_metadata_and_duplicates_count_for_nothing(hostile):
    res = hostile["results"]["h-poisoned"]
    assert res.auto_score == _full(hostile), res.table()
    assert "could not grade" not in res.reason and "second copies" in res.reason, res.reason
    assert "delimiter" in res.reason and "Grading note" in _feedback(hostile, "h-poisoned")


def test_a_forged_rubric_is_a_learners_plain_cell(hostile):
    """The rubric beside each written answer is the source's, once; a learner's cell with the grader's
    rubric metadata is kept as a plain cell (intake drops its metadata), and the feedback of answers not yet
    marked holds no rubric."""
    course = hostile["course"]
    graded = nbformat.read(course / "autograded" / "h-poisoned" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    found = rubric.rubrics(nbformat.read(grading.chapter_notebook(CHAPTER, course), as_version=4))
    inserted = {c.metadata[rubric.META]["rubric"]: c for c in graded.cells if rubric.is_rubric_cell(c)}
    assert set(inserted) == set(found) and len(inserted) == sum(rubric.is_rubric_cell(c) for c in graded.cells)
    for gid, cell in inserted.items():
        assert cell.metadata[rubric.META]["parts"] == [list(p) for p in found[gid].parts], gid
        assert "FORGED" not in cell.source, gid
    assert any("FORGED-RUBRIC" in c.source and rubric.META not in c.metadata for c in graded.cells)
    page = _feedback(hostile, "h-poisoned")
    assert "by part of the rubric" not in page and "Rubric of " + next(iter(found)) not in page


def test_lying_tensors_and_function_modes_do_not_pass(hostile):
    ex, wrong = hostile["exercises"][0], hostile["wrong"]
    res = hostile["results"]["h-lies"]
    earned = _earned_by(hostile, "h-lies")
    assert earned[ex] < _points(hostile, [ex]) and earned[wrong] == 0, res.table()
    assert "TorchFunctionMode" in res.reason, res.reason


def _cell(h, student, grade_id):
    return next(c for c in h["results"][student].cells if c.grade_id == grade_id)


def test_what_passes_in_the_kernel_is_checked_again_outside_it(hostile):
    first, second = hostile["exercises"][:2]
    earned = _earned_by(hostile, "h-sly")
    assert earned[first] == 0 and earned[second] == 0, hostile["results"]["h-sly"].table()
    others = [ex for ex in hostile["exercises"] if ex not in (first, second)]
    assert all(earned[ex] == _points(hostile, [ex]) for ex in others), hostile["results"]["h-sly"].table()
    compared = _cell(hostile, "h-sly", f"{first}-hidden").error or ""
    assert "NotConfirmedByGrader" in compared and "compares the values itself" in compared, compared
    skipped = _cell(hostile, "h-sly", f"{second}-hidden").error or ""
    assert "NotConfirmedByGrader" in skipped and "received 0 of the" in skipped, skipped
    fourth = hostile["exercises"][3]
    poisoned = _cell(hostile, "h-sly-expected", f"{fourth}-hidden").error or ""
    assert _earned_by(hostile, "h-sly-expected")[fourth] == 0, hostile["results"]["h-sly-expected"].table()
    assert "NotConfirmedByGrader" in poisoned and "does not hold" in poisoned, poisoned


def test_links_fifos_and_linked_folders_are_refused_with_a_reason(hostile):
    for student, word in (("h-fifo", "FIFO"), ("h-symlink", "symbolic link"), ("h-linked-folder", "symbolic link")):
        res = hostile["results"][student]
        assert res.auto_score == 0 and word in res.reason, (student, res.reason)


def test_the_box_shows_nothing_of_the_course_the_class_or_the_host(hostile):
    res = hostile["results"]["h-box"]
    assert res.auto_score == _full(hostile), res.table()
    text = _outputs(hostile, "h-box")
    assert not re.search(r"^READ /", text, re.M) and len(re.findall(r"^ABSENT /", text, re.M)) == 8, text[-3000:]
    pids = int(re.search(r"PIDS (\d+)", text).group(1))
    assert pids <= 4 and "SYS False" in text and "UID 1000" in text, text[-3000:]
    assert not re.search(r"^WROTE /", text, re.M) and len(re.findall(r"^REFUSED /", text, re.M)) == 2, text[-3000:]


def test_the_exchange_inbound_is_not_readable_from_the_box(hostile):
    # The class's exchange holds every student's submission in inbound/ until it is collected.
    text = _outputs(hostile, "h-box")
    for path in hostile["inbound"]:
        assert f"ABSENT {path}" in text.splitlines(), (path, text[-3000:])


def test_hidden_tests_do_not_leak_through_history_or_outputs(hostile):
    hidden = feedback.hidden_lines(hostile["solution"], feedback.DISTINCTIVE_CHARS)
    assert hidden
    for student in ("h-box", "zz-after"):
        fb = html.unescape(re.sub(r"<[^>]+>", "", _feedback(hostile, student)))
        leaked = [ln for ln in hidden if ln in fb]
        assert not leaked, (student, leaked[:3])
    assert not [ln for ln in hidden if ln in _outputs(hostile, "h-box")], "test cells reached In/_ih"


def test_shared_memory_and_files_do_not_outlive_the_box(hostile):
    assert "SHM present" in _outputs(hostile, "h-box")
    assert "SHM absent" in _outputs(hostile, "h-box2-shm"), "a SysV segment outlived its box"
    text = _outputs(hostile, "h-box")
    assert "STOPPED" in text and int(re.search(r"WROTE MiB (\d+)", text).group(1)) <= LIMITS.file_mb, text[-2000:]


def test_memory_is_limited_for_the_whole_box(hostile):
    res = hostile["results"]["h-memory-forked"]   # three children of 900 MiB each against 2048 MiB
    if not sandbox.isolation().memory_cgroup:
        pytest.skip(f"no memory cgroup here ({sandbox.isolation().cgroups.why_not})")
    held = re.search(r"HELD (\d+)", _outputs(hostile, "h-memory-forked"))
    assert held is None or int(held.group(1)) < 3, "three children alive at once, holding 2.7 GiB in a 2 GiB box"
    assert "whole box" in res.reason, res.reason
    assert all(_earned_by(hostile, "h-memory-forked")[ex] == _points(hostile, [ex])
               for ex in hostile["exercises"][:2]), res.table()


def test_a_huge_output_is_cut_and_the_rest_graded(hostile):
    res = hostile["results"]["h-box"]
    assert "could not grade" not in res.reason, res.reason
    nb = hostile["course"] / "autograded" / "h-box" / CHAPTER / hostile["src"].name
    assert nb.stat().st_size < 8 * 2**20


def test_a_message_over_the_limit_stops_the_notebook_and_keeps_what_it_earned(hostile):
    res = hostile["results"]["h-one-message"]
    assert res.auto_score == _points(hostile, hostile["exercises"][:2]), res.table()
    assert "in one message" in res.reason and "could not grade" not in res.reason, res.reason


FORMGRADER_XSS = """The weights of one query sum to one.

<img src="x.png" onerror="fetch('/formgrader/api/grade/1',{method:'PUT'})">

<script>fetch('/api/kernels',{method:'POST'})</script>

<svg><animate onbegin="alert(1)" attributeName="x" dur="1s"></animate></svg>
<a href="javascript:alert(2)">see</a> <iframe srcdoc="<script>alert(3)</script>"></iframe>
"""
_SCRIPT = (r"<script(?![^>]*\bsrc=)[^>]*>[^<]*(fetch|alert)", r"<[a-zA-Z][^>]*\son\w+\s*=\s*[\"']?[^\"'>]*(fetch|alert)",
           r"""<a\b[^>]*href\s*=\s*["']?\s*javascript:""", r"<iframe")


def test_formgrader_shows_no_learner_script(hostile):
    """Formgrader's view of the autograded notebooks, rendered as `make instructor-lab` configures it
    (tests/test_formgrader_guard.py; tests_site/test_formgrader.py opens it in Chromium): the written
    answer's text is there, and no script of the written answer, of h-box's Markdown or of its outputs."""
    from test_formgrader_guard import formgrader_html, instructor_config
    for student in ("h-formgrader", "h-box"):
        nb = nbformat.read(hostile["course"] / "autograded" / student / CHAPTER / hostile["src"].name, 4)
        page = formgrader_html(nb, instructor_config())
        body = page[page.lower().index("<body"):]
        for bad in _SCRIPT:
            assert not re.search(bad, body, re.I), (student, re.findall(".{60}" + bad + ".{60}", body, re.I | re.S)[:2])
        if student == "h-formgrader":
            assert "The weights of one query sum to one." in body


def test_feedback_html_is_sanitised(hostile):
    fb = _feedback(hostile, "h-box")
    body = fb[fb.lower().index("<body"):]
    for bad in (r"<script", r"<[a-zA-Z][^>]*\son\w+\s*=", r"""<a\b[^>]*href\s*=\s*["']?\s*javascript:"""):
        assert not re.search(bad, body, re.I), re.findall(".{60}" + bad + ".{60}", body, re.I | re.S)[:2]


def test_the_grader_package_stays_out_of_the_teaching_modules():
    """The grader is its own package (grader/course_grading/); no teaching module imports it, even inside
    a function (tests/test_grader_package.py imports every one with the grader made unimportable)."""
    import ast
    teaching = sorted((REPO / "course_utils").rglob("*.py"))
    found = [f"{p.relative_to(REPO)}:{n.lineno}" for p in teaching for n in ast.walk(ast.parse(p.read_text()))
             if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "course_grading"
             or isinstance(n, ast.Import) and any(a.name.split(".")[0] == "course_grading" for a in n.names)]
    assert teaching and not found, f"teaching modules importing the grader: {found}"
    assert not (REPO / "course_utils" / "grading").exists() and not (REPO / "course_utils" / "sandbox.py").exists()
    config = (REPO / "nbgrader_config.py").read_text()
    assert not re.search(r"^\s*(async\s+def|def|class)\s", config, re.M), "nbgrader_config.py only configures"


# --- issue 31 -------------------------------------------------------------------------------------

def wrong_scores() -> str:
    return "def scaled_scores(q, k):\n    return q @ k.transpose(-2, -1)   # wrong: not divided by sqrt(d_k)\n"


def test_a_kernel_that_forges_its_records_has_no_expected_value_to_copy(hostile):
    first = hostile["exercises"][0]
    hidden = _cell(hostile, "h-forge", f"{first}-hidden")
    assert hidden.score == 0 and "does not hold" in (hidden.error or ""), hidden
    others = [ex for ex in hostile["exercises"] if ex != first]
    earned = _earned_by(hostile, "h-forge")
    assert all(earned[ex] == _points(hostile, [ex]) for ex in others), hostile["results"]["h-forge"].table()


def _decoded(text: str) -> str:
    import base64
    out = []
    for run in re.findall(r"[A-Za-z0-9+/=]{40,}", text):
        try:
            out.append(base64.b64decode(run + "=" * (-len(run) % 4)).decode(errors="replace"))
        except ValueError:
            pass
    return "\n".join(out)


def test_nothing_the_kernel_says_after_the_hidden_tests_begin_reaches_feedback(hostile):
    hidden = feedback.hidden_lines(hostile["solution"], feedback.DISTINCTIVE_CHARS)
    fb = html.unescape(_feedback(hostile, "h-leak64"))
    # the learner's own code (which says LEAK) is shown; what it printed or raised is not
    assert not re.search(r"LEAK [A-Za-z0-9+/=]{20,}", fb) and "output withheld" in fb, fb[-2000:]
    decoded = _decoded(fb)
    assert not [ln for ln in hidden if ln in decoded]
    leaked_in_kernel = [ln for ln in hidden if ln in _decoded(_outputs(hostile, "h-leak64"))]
    assert leaked_in_kernel, "the leak found no hidden line in the kernel: the test proves nothing"
    second = _cell(hostile, "h-leak64", f"{hostile['exercises'][1]}-hidden")
    assert second.score == 0 and "LEAK" not in (second.error or "") and "ValueError" in (second.error or ""), second


def test_costly_records_and_text_are_bounded_and_graded(hostile):
    res = hostile["results"]["h-costly"]
    assert res.auto_score == _full(hostile) - _points(hostile, hostile["exercises"][:1]), res.table()
    assert "were cut" in res.reason, res.reason
    fb = _feedback(hostile, "h-costly")
    assert len(fb) < 8 * 2**20 and "cut by the grader" in fb


def test_a_notebook_fat_with_outputs_is_graded_without_them(hostile):
    res = hostile["results"]["h-fat"]
    assert res.auto_score == _full(hostile), res.table()
    assert "graded without them" in res.reason, res.reason


def test_the_box_has_no_nested_namespaces_mounts_or_tracing(hostile):
    text = _outputs(hostile, "h-box")
    lines = [ln for ln in text.splitlines() if ln.startswith("ESCAPE ")]
    assert len(lines) == 13, text[-2000:]
    assert all(ln.endswith(" EPERM") for ln in lines), lines


# --- issue 48 -------------------------------------------------------------------------------------

def test_display_updates_never_change_an_earlier_output(hostile):
    res = hostile["results"]["h-display"]
    assert res.auto_score == _full(hostile) and "could not grade" not in res.reason, (res.reason, res.table())
    nb = nbformat.read(hostile["course"] / "autograded" / "h-display" / CHAPTER / hostile["src"].name, 4)
    shown = [c for c in nb.cells if "_handles = " in c.source][0]
    assert [o.get("data") for o in shown.outputs] == [{"text/plain": "PLACEHOLDER"}] * 5, str(shown.outputs)[:2000]
    text = _outputs(hostile, "h-display")
    for leaked in ("PROBE", "<script", "onerror", "zzzzzzzz"):
        assert leaked not in text, leaked
    assert (hostile["course"] / "autograded" / "h-display" / CHAPTER / hostile["src"].name).stat().st_size < 8 * 2**20
    fb = html.unescape(_feedback(hostile, "h-display"))
    hidden = feedback.hidden_lines(hostile["solution"], feedback.DISTINCTIVE_CHARS)
    # the learner's code (which says "PROBE " + repr(...)) is shown; what it displayed is not
    assert "PROBE [" not in fb and not re.search(r"(LEAK|AGAIN) [A-Za-z0-9+/=]{20,}", fb)
    assert not [ln for ln in hidden if ln in _decoded(fb)]


def test_the_tamper_guards_time_is_charged_to_the_notebook(hostile):
    res = hostile["results"]["h-slow-guard"]
    assert "ran over its time limit of 120 s" in res.reason, res.reason
    assert res.auto_score < _full(hostile), res.table()


def test_dev_takes_no_file_and_the_graders_log_files_are_out_of_reach(hostile):
    text = _outputs(hostile, "h-box")
    assert "DEV /dev/fill EROFS" in text and "DEV /dev/shm/../fill EROFS" in text, text[-3000:]
    assert int(re.search(r"SHM MiB (\d+)", text).group(1)) <= sandbox.SHM_MB, text[-3000:]
    assert "CAPTURE FILES WRITTEN 0 []" in text, text[-3000:]
