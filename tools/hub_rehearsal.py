"""A class on a JupyterHub, rehearsed on this machine: ``make hub-rehearsal`` (issue 22).

Starts a real JupyterHub (``jupyterhub==6.1.1``, ``pip install -e '.[hub]'``) with its proxy
(``configurable-http-proxy`` 5.3.0 from ``tools/hub``, ``npm ci``), a dummy authenticator and
``SimpleLocalProcessSpawner`` (every user's server runs as *this* Unix account, each with its own
home under ``DIR/home/<user>``: the case in which nbgrader would name every submission after the
Unix account), and two students, ``alice`` and ``bob``. Then, through the hub:

1. the instructor releases chapter 3 to the exchange (``nbgrader release_assignment``, as in a
   terminal of the instructor's server);
2. each student's server is started through the hub's REST API; each student lists the course's
   assignments, fetches chapter 3, answers it (alice right, bob one exercise wrong) through the
   Contents API and submits it, all through the proxy at ``/user/<name>/``;
3. the instructor collects, grades with the course's grader (``python -m course_grading
   autograde --jobs 2``: sandbox, limits, parallel) and releases the feedback;
4. each student fetches their feedback through their server: exactly one feedback file, their own.

It checks that the exchange named the submissions after the hub's users (not the Unix account),
prints what happened with the time of each step, writes ``DIR/summary.json`` and exits 1 on the
first thing that does not hold. The course is a throwaway copy of the repository's chapter 3 (the
instructor's gradebook is never touched); ``DIR`` (default ``hub-rehearsal/``) is removed first.

Run as root (a grading container), the single-user servers get ``--allow-root``.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import course_grading as grading  # noqa: E402
from course_grading import exchange  # noqa: E402

CHAPTER = "ch03_scaled_dot_product"
PROXY = REPO / "tools" / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
STUDENTS = ("alice", "bob")


class RehearsalFailed(RuntimeError):
    pass


def missing() -> str | None:
    """Why the rehearsal cannot run here (``None`` when it can)."""
    if shutil.which("node") is None:
        return "Node.js is missing (the hub's proxy runs on it): install Node 20 and npm, then `make hub-install`"
    try:
        import jupyterhub  # noqa: F401
    except ImportError:
        return "jupyterhub is not installed: `make hub-install` (pip install -e '.[hub]')"
    if not PROXY.exists():
        return f"configurable-http-proxy is not installed in {PROXY.parent.parent}: `make hub-install` (npm ci)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


HUB_CONFIG = '''"""JupyterHub for the rehearsal (written by tools/hub_rehearsal.py): NOT for a real class."""
c = get_config()  # noqa: F821
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.command = [{proxy!r}]
c.JupyterHub.db_url = "sqlite:///{dir}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{dir}/jupyterhub_cookie_secret"
c.JupyterHub.pid_file = "{dir}/jupyterhub.pid"
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allowed_users = {users!r}
c.JupyterHub.spawner_class = "simple"             # every server as this Unix account: testing only
c.SimpleLocalProcessSpawner.home_dir_template = "{dir}/home/{{username}}"
c.Spawner.cmd = [{singleuser!r}]
c.Spawner.args = {args!r}
c.Spawner.default_url = "/lab"
c.Spawner.http_timeout = 120
c.Spawner.start_timeout = 180
c.Spawner.environment = {{"{variable}": "{exchange}", "OMP_NUM_THREADS": "1"}}
# The rehearsal's driver: a service with just what it needs (start servers, make user tokens).
c.JupyterHub.services = [{{"name": "rehearsal", "api_token": "{token}"}}]
c.JupyterHub.load_roles = [{{
    "name": "rehearsal-driver",
    "scopes": ["admin:servers", "read:users", "tokens", "admin:users"],
    "services": ["rehearsal"],
}}]
'''


class Hub:
    """A running JupyterHub, driven through its REST API with a service token."""

    def __init__(self, folder: Path, log):
        import requests

        self.requests = requests
        self.folder = folder
        self.log = log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = secrets.token_hex(32)
        singleuser = str(Path(sys.executable).parent / "jupyterhub-singleuser")
        args = ["--allow-root"] if os.geteuid() == 0 else []
        (folder / "jupyterhub_config.py").write_text(HUB_CONFIG.format(
            port=self.port, hub_port=free_port(), proxy_api_port=free_port(), proxy=str(PROXY), dir=folder,
            users=set(STUDENTS), singleuser=singleuser, args=args, variable=exchange.EXCHANGE_VARIABLE,
            exchange=folder / "exchange", token=self.token))
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        self.logfile = (folder / "jupyterhub.log").open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(folder / "jupyterhub_config.py")],
                                     cwd=folder, env=env, stdout=self.logfile, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.user_tokens: dict[str, str] = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RehearsalFailed(f"the hub exited ({self.proc.returncode}); see {folder / 'jupyterhub.log'}")
            try:
                if self.api("GET", "/").status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.5)
        raise RehearsalFailed(f"the hub did not answer in 120 s; see {folder / 'jupyterhub.log'}")

    def api(self, method: str, path: str, **kw):
        return self.requests.request(method, f"{self.url}/hub/api{path}",
                                     headers={"Authorization": f"token {self.token}"}, timeout=60, **kw)

    def start_server(self, user: str) -> None:
        r = self.api("POST", f"/users/{user}/server")
        if r.status_code not in (201, 202):
            raise RehearsalFailed(f"could not start {user}'s server: {r.status_code} {r.text[:300]}")
        r = self.api("POST", f"/users/{user}/tokens", json={"note": "rehearsal", "expires_in": 3600})
        if r.status_code != 201:
            raise RehearsalFailed(f"could not make a token for {user}: {r.status_code} {r.text[:300]}")
        self.user_tokens[user] = r.json()["token"]

    def wait_ready(self, user: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            server = self.api("GET", f"/users/{user}").json().get("servers", {}).get("", {})
            if server.get("ready"):
                return
            time.sleep(1)
        raise RehearsalFailed(f"{user}'s server was not ready in {timeout:g} s; see {self.folder / 'jupyterhub.log'}")

    def as_user(self, user: str, method: str, path: str, **kw):
        """A request to ``user``'s own server through the hub's proxy, with ``user``'s token."""
        r = self.requests.request(method, f"{self.url}/user/{user}{path}", timeout=300,
                                  headers={"Authorization": f"token {self.user_tokens[user]}"}, **kw)
        if r.status_code >= 400:
            raise RehearsalFailed(f"{method} /user/{user}{path}: {r.status_code} {r.text[:500]}")
        return r

    def stop(self) -> None:
        for user in self.user_tokens:
            try:
                self.api("DELETE", f"/users/{user}/server")
            except self.requests.RequestException:
                pass
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.logfile.close()


def _meta(cell) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def answered(fetched: dict, solution_path: Path, student: str) -> dict:
    """The fetched notebook (JSON) answered as ``student`` does: alice right, bob one exercise
    wrong; each signs it in a markdown cell, which their feedback shows."""
    import nbformat

    solution = nbformat.read(solution_path, as_version=4)
    answers = {_meta(c)["grade_id"]: c.source for c in solution.cells if _meta(c).get("solution") and _meta(c).get("grade_id")}
    if student == "bob":
        ns: dict = {}
        exec((REPO / "tests" / "wrong_answers" / f"{CHAPTER}.py").read_text(), ns)
        answers[ns["EXERCISE"]] = ns["SOURCE"]
    first = next(i for i, c in enumerate(fetched["cells"]) if c["cell_type"] == "code")
    cells = [c for i, c in enumerate(fetched["cells"]) if i == first or _meta(c).get("grade_id")]   # lean: fast
    for c in cells:
        if _meta(c).get("grade_id") in answers:
            c["source"] = answers[_meta(c)["grade_id"]]
    cells.append({"cell_type": "markdown", "metadata": {}, "source": f"Submitted by {student}-sentinel."})
    return {**fetched, "cells": cells}


def _start_servers(hub: Hub) -> None:
    """Every student's notebook server, started through the hub, then waited for."""
    for s in STUDENTS:
        hub.start_server(s)
    for s in STUDENTS:
        hub.wait_ready(s)


def _collected(course: Path) -> list[str]:
    """The names of the submissions in ``submitted/``, which must be the hub's users (not the Unix account)."""
    collected = sorted(p.name for p in (course / "submitted").iterdir())
    if collected != sorted(STUDENTS):
        raise RehearsalFailed(f"the exchange named the submissions {collected}, not after the hub's users "
                              f"{sorted(STUDENTS)} (the servers' Unix account is {pwd.getpwuid(os.geteuid()).pw_name})")
    return collected


def _grades(course: Path) -> dict[str, float]:
    """``grades.csv``'s score by student: alice (the solution) above bob (a wrong answer) above 0."""
    rows = (course / "grades.csv").read_text().splitlines()
    grades = {r.split(",")[1]: float(r.split(",")[4]) for r in rows[1:]}
    if not grades.get("alice", 0) > grades.get("bob", 0) > 0:
        raise RehearsalFailed(f"unexpected grades: {grades}")
    return grades


def _submit_through_the_hub(hub: Hub, s: str, course: Path) -> None:
    """Student ``s``, through the hub's nbgrader extension: sees the chapter among the released
    assignments, fetches it, answers it (in the notebook server) and submits it."""
    listed = hub.as_user(s, "GET", "/assignments", params={"course_id": exchange.COURSE_ID}).json()
    names = [a.get("assignment_id") for a in listed.get("value", [])]
    if CHAPTER not in names:
        raise RehearsalFailed(f"{s} does not see {CHAPTER} among the released assignments: {listed}")
    hub.as_user(s, "POST", "/assignments/fetch",
                data={"course_id": exchange.COURSE_ID, "assignment_id": CHAPTER})
    path = f"/api/contents/{CHAPTER}/{CHAPTER}.ipynb"
    nb = hub.as_user(s, "GET", path, params={"content": 1}).json()["content"]
    hub.as_user(s, "PUT", path, json={"type": "notebook", "format": "json",
                                      "content": answered(nb, grading.chapter_notebook(CHAPTER, course), s)})
    hub.as_user(s, "POST", "/assignments/submit",
                data={"course_id": exchange.COURSE_ID, "assignment_id": CHAPTER})


def _own_feedback(hub: Hub, s: str) -> str:
    """Student ``s`` fetches their feedback through the hub; the one page they get must be theirs
    alone (no other student's sentinel). Returns its path in their server."""
    hub.as_user(s, "POST", "/assignments/fetch_feedback",
                data={"course_id": exchange.COURSE_ID, "assignment_id": CHAPTER})
    listing = hub.as_user(s, "GET", f"/api/contents/{CHAPTER}/feedback").json()["content"]
    files = []
    for folder_entry in listing:
        inner = hub.as_user(s, "GET", f"/api/contents/{folder_entry['path']}").json()["content"]
        files += [f["path"] for f in inner if f["name"].endswith(".html")]
    if len(files) != 1:
        raise RehearsalFailed(f"{s} fetched {len(files)} feedback files, not their one: {files}")
    text = hub.as_user(s, "GET", f"/api/contents/{files[0]}", params={"content": 1}).json()["content"]
    others = [o for o in STUDENTS if o != s and f"{o}-sentinel" in text]
    if f"{s}-sentinel" not in text or others:
        raise RehearsalFailed(f"{s}'s feedback is not theirs alone (it shows {others or 'not ' + s})")
    return files[0]


def rehearse(folder: Path, jobs: int = 2, log=print) -> dict:
    """Run the whole rehearsal in ``folder``; return the summary (also written to summary.json)."""
    why = missing()
    if why:
        raise RehearsalFailed(why)
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "home").mkdir(parents=True)
    folder = folder.resolve()
    times: dict[str, float] = {}
    start = time.monotonic()

    def step(name: str, t0: float) -> None:
        times[name] = round(time.monotonic() - t0, 1)
        log(f"  {name}: {times[name]:.1f} s")

    root = folder / "exchange"
    for student in STUDENTS:   # what the course's admin puts in each student's home (docs/jupyterhub.md)
        exchange.write_student_config(folder / "home" / student, root)
    course = grading.new_course([CHAPTER], REPO)
    env = {**os.environ, exchange.EXCHANGE_VARIABLE: str(root),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}

    def instructor(*args: str) -> str:
        proc = subprocess.run(list(args), cwd=course, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise RehearsalFailed(f"{' '.join(args[2:])} failed:\n{proc.stdout[-1500:]}\n{proc.stderr[-2500:]}")
        return proc.stdout

    nbgrader = [sys.executable, "-m", "nbgrader"]
    hub = None
    try:
        t0 = time.monotonic()
        log(f"starting JupyterHub in {folder} ...")
        hub = Hub(folder, log)
        _start_servers(hub)
        step("hub and two servers up", t0)

        t0 = time.monotonic()
        instructor(*nbgrader, "release_assignment", CHAPTER, "--force")
        step("instructor: release_assignment", t0)

        t0 = time.monotonic()
        for s in STUDENTS:
            _submit_through_the_hub(hub, s, course)
        step("students: list, fetch, answer, submit (through the hub)", t0)

        t0 = time.monotonic()
        # Every rehearsal user is this one Unix account, so the folder's owner cannot name the student:
        # the course's collect would refuse all of them (docs/jupyterhub.md); the rehearsal trusts the
        # names the hub's users submitted under, as only an authenticated exchange may.
        instructor(*nbgrader, "collect", CHAPTER, "--CourseCollect.trust_names=True")
        collected = _collected(course)
        step("instructor: collect", t0)

        t0 = time.monotonic()
        out = instructor(sys.executable, "-m", "course_grading", "--root", str(course), "autograde",
                         "--jobs", str(jobs))
        log("    " + "\n    ".join(out.strip().splitlines()))
        step(f"instructor: autograde --jobs {jobs} (sandboxed)", t0)

        t0 = time.monotonic()
        instructor(*nbgrader, "release_feedback", CHAPTER)
        step("instructor: release_feedback", t0)

        t0 = time.monotonic()
        feedback = {s: _own_feedback(hub, s) for s in STUDENTS}
        step("students: fetch_feedback, each their own only", t0)

        grades = _grades(course)
        summary = {"ok": True, "students": list(STUDENTS), "collected": collected, "grades": grades,
                   "feedback": feedback, "seconds": times, "total_s": round(time.monotonic() - start, 1),
                   "unix_uid": os.geteuid(), "jobs": jobs}
    finally:
        if hub is not None:
            hub.stop()
        shutil.rmtree(course, ignore_errors=True)
    (folder / "summary.json").write_text(json.dumps(summary, indent=2))
    log(f"rehearsal passed in {summary['total_s']:.0f} s: grades {grades}; summary in {folder / 'summary.json'}")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=REPO / "hub-rehearsal", help="working folder (removed first)")
    parser.add_argument("--jobs", type=int, default=2, help="submissions graded at a time")
    args = parser.parse_args(argv)
    try:
        rehearse(args.dir, args.jobs)
    except RehearsalFailed as e:
        print(f"REHEARSAL FAILED: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
