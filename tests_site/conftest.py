"""Fixtures of the site and browser tests (``make test-browser``; not part of ``make test``).

* ``site_html``: the built site (site/_build/html, from ``make site``). Missing, the tests fail
  under CI (CI=true) and skip elsewhere, saying to run ``make site``.
* ``chromium_path``: Debian's Chromium (/usr/bin/chromium, or $CHROMIUM). Missing, the browser
  tests skip and say how to install it (``make browser-tool`` does it as root).
* ``site_server``: the built site served on 127.0.0.1 by a thread of this process.
* ``browser``: one headless Chromium for the session, driven by Playwright for Python through
  ``executable_path`` (Playwright's own browsers are never downloaded), with a fresh user-data-dir.
* ``watch``: a page whose console errors, failed requests and requests outside the local
  servers are recorded (a request elsewhere is aborted and recorded), for the test to assert on.

Screenshots go to ``SCREENSHOTS`` (site/_build/screenshots/), emptied once by the main process
before the run (``make test-browser`` runs the modules on two workers, ``--dist loadfile``).
"""
from __future__ import annotations

import functools
import os
import shutil
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "site" / "_build" / "html"
SCREENSHOTS = ROOT / "site" / "_build" / "screenshots"
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
# Without the background-networking flags Chromium's own connections (component updates, sync,
# field trials) fail on a closed network and show up as errors; --no-sandbox: CI runs as root.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LOCAL_PREFIXES = ("http://127.0.0.1:", "data:", "blob:", "about:")


@pytest.fixture(scope="session")
def site_html() -> Path:
    """The built site's folder; fail (CI) or skip (elsewhere) when it has not been built."""
    if not (SITE / "index.html").exists():
        msg = f"no built site at {SITE}: run `make site` first (make test-browser does)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return SITE


@pytest.fixture(scope="session")
def chromium_path() -> Path:
    """Debian's Chromium, or skip with the reason and the way to install it."""
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"no Chromium at {CHROMIUM}: install Debian's (apt-get install chromium, which "
                    "`make browser-tool` does as root) or set CHROMIUM to its path")
    return CHROMIUM


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


@pytest.fixture(scope="session")
def site_server(site_html):
    """Base URL (ending in /) of the built site, served on 127.0.0.1 by a thread."""
    handler = functools.partial(_QuietHandler, directory=str(site_html))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser(chromium_path, tmp_path_factory):
    """A headless Chromium context (Playwright, Debian's browser, a fresh user-data-dir)."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is in the site extra: "
                                   "make test-browser installs it (pip install -e '.[site]')")
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=str(chromium_path), headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900})
        try:
            yield context
        finally:
            context.close()


class Watch:
    """What one page did: console errors, failed requests, requests outside the local servers."""

    def __init__(self, page):
        self.page = page
        self.console_errors: list[str] = []
        self.failed: list[str] = []
        self.external: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda err: self.console_errors.append(f"uncaught: {err}"))
        page.on("requestfailed", self._failed)
        page.route("**/*", self._route)

    def _console(self, msg):
        if msg.type == "error":
            self.console_errors.append(f"{msg.text} ({msg.location.get('url', '?')})")

    def _failed(self, request):
        if not any(request.url == e for e in self.external):
            self.failed.append(f"{request.method} {request.url}: {request.failure}")

    def _route(self, route):
        url = route.request.url
        if url.startswith(LOCAL_PREFIXES):
            route.continue_()
        else:
            self.external.append(url)
            route.abort()

    def assert_clean(self, what: str, ignore_failed=()):
        """Fail, listing them, if there were console errors, failed or external requests."""
        failed = [f for f in self.failed if not any(s in f for s in ignore_failed)]
        problems = ([f"external request (not to the local server): {u}" for u in self.external]
                    + [f"failed request: {f}" for f in failed]
                    + [f"console error: {c}" for c in self.console_errors])
        assert not problems, f"{what}:\n  " + "\n  ".join(problems)


@pytest.fixture
def watch(browser):
    """A new page in the shared browser, watched (see Watch); closed after the test."""
    page = browser.new_page()
    w = Watch(page)
    yield w
    page.close()


def pytest_configure(config):
    if not hasattr(config, "workerinput"):   # the main process, before any worker starts
        shutil.rmtree(SCREENSHOTS, ignore_errors=True)


@pytest.fixture(scope="session")
def screenshots() -> Path:
    """The folder the screenshots are written to (emptied at the start of the run)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
