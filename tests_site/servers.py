"""A Jupyter server that a browser test starts with `make lab` or `make instructor-lab`: its port,
token, environment and arguments, and the wait until it answers."""
from __future__ import annotations

import os
import secrets
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

__all__ = ["SERVER_START_S", "server_settings", "wait_for_jupyter"]

SERVER_START_S = 120


def server_settings(tmp: Path) -> tuple[int, str, dict[str, str], str]:
    """(port, token, environment, ``LAB_ARGS``) for a server of its own: a free port, a new token, and
    fresh user settings, workspaces and config under ``tmp``, so that what the page shows comes from
    the course's shipped settings, not from an earlier session on this machine."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
           "JUPYTER_CONFIG_DIR": str(tmp / "config"), "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    args = (f"--no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port={port} "
            f"--ServerApp.port_retries=0 --IdentityProvider.token={token}")
    return port, token, env, args


def wait_for_jupyter(proc: subprocess.Popen, base: str, token: str, log_path: Path, what: str,
                     start_s: float = SERVER_START_S) -> None:
    """Return once ``base`` answers ``api/status``; fail with the server's log if ``proc`` exits or
    ``start_s`` seconds pass first (``what``: the command, for the message)."""
    deadline = time.monotonic() + start_s
    while True:
        try:
            with urllib.request.urlopen(f"{base}api/status?token={token}", timeout=5):
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{what} did not start (exit {proc.poll()}):\n"
                                     + log_path.read_text()[-3000:]) from None
            time.sleep(0.5)
