"""Waiting for a Jupyter server that a browser test started with `make lab` or `make instructor-lab`."""
from __future__ import annotations

import subprocess
import time
import urllib.request
from pathlib import Path

__all__ = ["SERVER_START_S", "wait_for_jupyter"]

SERVER_START_S = 120


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
