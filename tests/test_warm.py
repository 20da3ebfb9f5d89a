"""nbgrader forked from a warm process (``course_grading.warm``) runs as a new process would.

Each run here is ``nbgrader db student list`` in a folder whose ``nbgrader_config.py`` reports what
the run sees (its directory, environment, stdin, memory cap, parent) or misbehaves (sleeps, takes
too much memory, prints): config files are Python that nbgrader runs at start-up.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from course_grading import warm

ARGS = ["db", "student", "list", "--log-level=WARN"]
REPORT = """
import json, os, resource, sys
json.dump({"cwd": os.getcwd(), "env": dict(os.environ), "stdin": os.path.realpath(f"/proc/self/fd/0"),
           "soft_as": resource.getrlimit(resource.RLIMIT_AS)[0], "ppid": os.getppid(), "pid": os.getpid(),
           "argv0": sys.argv[0]}, open(os.environ["REPORT_TO"], "w"))
print("to stdout"); print("to stderr", file=sys.stderr)
"""


def _course(tmp_path: Path, config: str) -> Path:
    course = tmp_path / "course"
    course.mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(config)
    return course


@pytest.fixture
def env(tmp_path):
    return {"PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"], "HOME": str(tmp_path), "REPORT_TO": str(tmp_path / "report.json"),
            "ONLY_HERE": "yes"}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the fork server needs fork")
def test_a_warm_run_sees_what_a_new_process_sees(tmp_path, env, monkeypatch):
    course = _course(tmp_path, REPORT)
    monkeypatch.delenv(warm.COLD, raising=False)
    monkeypatch.setenv("NOT_PASSED", "1")
    proc = warm.run_module("nbgrader", ARGS, cwd=course, env=env, memory_mb=1500)
    assert proc.returncode == 0, proc.stderr
    assert "to stdout" in proc.stdout and "to stderr" in proc.stderr and "to stderr" not in proc.stdout
    seen = json.loads((tmp_path / "report.json").read_text())
    assert seen["cwd"] == str(course)
    assert {k: v for k, v in seen["env"].items() if k in env or k == "NOT_PASSED"} == env, \
        "the run must get exactly the environment it is given"
    assert seen["stdin"] == os.devnull
    assert seen["soft_as"] == 1500 * 2**20
    assert resource.getrlimit(resource.RLIMIT_AS)[0] != 1500 * 2**20, "the cap is the run's, not the caller's"
    server = warm._Server.get()
    assert seen["ppid"] == server._proc.pid, "the run is a fork of the warm server"
    warm.run_module("nbgrader", ARGS, cwd=course, env=env)
    assert warm._Server.get() is server and json.loads((tmp_path / "report.json").read_text())["pid"] != seen["pid"]

    monkeypatch.setenv(warm.COLD, "1")
    cold = warm.run_module("nbgrader", ARGS, cwd=course, env=env, memory_mb=1500)
    seen_cold = json.loads((tmp_path / "report.json").read_text())
    assert cold.returncode == 0 and seen_cold["ppid"] == os.getpid(), "COURSE_GRADING_COLD starts a new process"
    for key in ("cwd", "env", "stdin", "soft_as"):
        if key == "env":
            assert {k: seen_cold["env"].get(k) for k in env} == env
        elif key != "stdin":   # a new process inherits the caller's stdin
            assert seen_cold[key] == seen[key], key


@pytest.mark.parametrize("cold", [False, True])
def test_time_and_memory_limits_hold(tmp_path, env, monkeypatch, cold):
    if cold:
        monkeypatch.setenv(warm.COLD, "1")
    else:
        monkeypatch.delenv(warm.COLD, raising=False)
    slow = _course(tmp_path, "import time\ntime.sleep(60)\n")
    proc = warm.run_module("nbgrader", ARGS, cwd=slow, env=env, timeout=2)
    assert proc.returncode == 124 and "ran past 2 s" in proc.stderr   # (the config alone sleeps 6 minutes)
    greedy = tmp_path / "greedy"
    greedy.mkdir()
    (greedy / "nbgrader_config.py").write_text("x = bytearray(900 * 2**20)\n")
    proc = warm.run_module("nbgrader", ARGS, cwd=greedy, env=env, memory_mb=600)
    assert "MemoryError" in proc.stderr, proc.stderr[-2000:]   # (traitlets reports a failed config, and goes on)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the fork server needs fork")
def test_runs_from_threads_at_once_and_a_script_without_a_main_guard(tmp_path, env, monkeypatch):
    monkeypatch.delenv(warm.COLD, raising=False)
    courses = [_course(tmp_path / str(i), "import time\ntime.sleep(0.2)\nprint('done')\n") for i in range(3)]
    results = {}   # each run in a course of its own: they all create its gradebook

    def one(course):
        results[course] = warm.run_module("nbgrader", ARGS, cwd=course, env=env)

    threads = [threading.Thread(target=one, args=(c,)) for c in courses]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert all(results[c].returncode == 0 and "done" in results[c].stdout for c in courses), results
    course = courses[0]
    # multiprocessing's fork server would import this script again in every child (it has no guard)
    script = tmp_path / "unguarded.py"
    script.write_text(f"from course_grading import warm\nprint('script ran')\n"
                      f"print(warm.run_module('nbgrader', {ARGS!r}, cwd={str(course)!r}, env={env!r}).returncode)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in Path(warm.__file__).parents[1:3])})
    assert out.stdout.split() == ["script", "ran", "0"], out.stdout + out.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the fork server needs fork")
def test_a_fork_server_that_cannot_start_leaves_runs_to_new_processes(tmp_path, env, monkeypatch):
    monkeypatch.delenv(warm.COLD, raising=False)
    monkeypatch.setattr(warm._Server, "_current", None)
    monkeypatch.setattr(warm, "_START", "import sys; sys.exit(3)")
    course = _course(tmp_path, REPORT)
    for _ in range(2):
        proc = warm.run_module("nbgrader", ARGS, cwd=course, env=env)
        assert proc.returncode == 0 and "to stdout" in proc.stdout, proc.stderr
        assert json.loads((tmp_path / "report.json").read_text())["ppid"] == os.getpid()
    assert warm._Server.get() is None, "a server that died before forking anything is not started again"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the fork server needs fork")
def test_a_run_whose_fork_server_dies_fails_with_the_reason(tmp_path, env, monkeypatch):
    monkeypatch.delenv(warm.COLD, raising=False)
    monkeypatch.setattr(warm._Server, "_current", None)
    course = _course(tmp_path, "import time\ntime.sleep(0.5)\n")   # nbgrader reads its config six times
    assert warm.run_module("nbgrader", ARGS, cwd=course, env=env).returncode == 0   # the server is up
    server = warm._Server.get()
    assert server.forked
    threading.Timer(1.0, server._proc.kill).start()
    proc = warm.run_module("nbgrader", ARGS, cwd=course, env=env)
    assert proc.returncode != 0 and "fork server exited" in proc.stderr, proc
    assert warm._Server.get() is not server, "the next run gets a new fork server"
