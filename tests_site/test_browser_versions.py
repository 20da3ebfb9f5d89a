"""Guard: the pinned Playwright and Debian's Chromium must stay close.

Playwright speaks the DevTools protocol of the Chromium it bundles; it drives Debian's Chromium
(``executable_path``) only while the two are of the same or neighbouring majors. Debian 12's
Chromium moved from 150 to 156 (156.0.8078, November 2026): the pin moved from 1.61.0 (Chromium
149) to 1.64.1, which bundles 156 (1.65.2 bundles 159). Where no release matches, pin the older
neighbour, since a newer browser keeps the protocol an older client uses. This test fails
with what to change when an apt upgrade or a new pin moves them apart.
"""
import json
import re
import subprocess
from pathlib import Path

import pytest

# Debian's Chromium may be this many majors ahead of Playwright's bundled one (never behind).
MAX_AHEAD = 1


def bundled_chromium_major() -> int:
    """The Chromium major that the installed Playwright release was made for."""
    playwright = pytest.importorskip("playwright", reason="Playwright is in the site extra")
    browsers = Path(playwright.__file__).parent / "driver" / "package" / "browsers.json"
    entry = next(b for b in json.loads(browsers.read_text())["browsers"] if b["name"] == "chromium")
    return int(entry["browserVersion"].split(".")[0])


def test_playwright_and_debian_chromium_majors_agree(chromium_path):
    out = subprocess.run([str(chromium_path), "--version"], capture_output=True, text=True,
                         timeout=60).stdout
    m = re.search(r"Chromium (\d+)\.", out)
    assert m, f"cannot read the version of {chromium_path}: {out!r}"
    debian, bundled = int(m.group(1)), bundled_chromium_major()
    ahead = debian - bundled
    assert 0 <= ahead <= MAX_AHEAD, (
        f"Debian's Chromium is {debian}, the pinned Playwright was made for Chromium {bundled}: "
        f"they have drifted apart. Pin in pyproject.toml (site extra) the Playwright release whose "
        f"bundled Chromium (playwright/driver/package/browsers.json) is {debian}, or the newest one "
        f"below it, and update this test's note.")
