"""The learner's path in JupyterLab, in headless Chromium: `make lab`'s own server on a copy of
chapter 3's release (the fastest chapter to run).

Open the chapter; no news popup (lab/labconfig, shipped with `make lab`); Run All runs to the
end (the visible test cells are tagged ``raises-exception``), and every exercise's visible test
says the exercise is not implemented yet, the first and the second alike; write the first
exercise's solution into its cell and run it and its test: the test passes; save and press
nbgrader's Validate: its dialog reports the exercises still left, and no longer the first. The
learner's Lab has no formgrader and no assignment list (no exchange: neither menu item nor page).
Then the course is updated while the chapter is open: `make update` leaves the open notebook alone and
says so; the learner closes it (File > Close and Shut Down Notebook), the update merges, and after
reopening the answer is still there, and so is the new cell.
Screenshots: site/_build/screenshots/lab_*.png.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest
from servers import server_settings, wait_for_jupyter

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = "ch03_scaled_dot_product"
EXERCISE = "ex1_scores"            # its answer cell; its visible tests are EXERCISE + "-visible"
FUNCTION = "scaled_scores"
NEXT_EXERCISE, NEXT_FUNCTION = "ex2_softmax", "stable_softmax"   # Run All reaches its test too
RUN_ALL_S = 240
VALIDATE_S = 300


def _cell_index(nb, grade_id: str) -> int:
    for i, cell in enumerate(nb.cells):
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return i
    raise AssertionError(f"{CHAPTER}: no cell with grade_id {grade_id}")


def _solution_source() -> str:
    """The exercise's answer cell as in the solutions, nbgrader's marker lines left out."""
    nb = nbformat.read(ROOT / "solutions" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    src = nb.cells[_cell_index(nb, EXERCISE)].source
    return "\n".join(ln for ln in src.splitlines()
                     if ln.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))


@contextlib.contextmanager
def running_lab(tmp: Path, release: Path, make_args: tuple[str, ...] = ()):
    """`make lab` (with ``make_args``, e.g. ``LANG=zh_CN``) on a temporary copy of the chapter from
    ``release``: yields (base URL, token, folder); the server and its kernels are stopped after."""
    if not (ROOT / ".venv" / "bin" / "jupyter").exists():
        pytest.skip("no .venv/bin/jupyter: run `make install` first")
    work = tmp / "course"
    shutil.copytree(release / CHAPTER, work / CHAPTER)
    port, token, env, args = server_settings(tmp)
    log = (tmp / "server.log").open("w")
    proc = subprocess.Popen(["make", "--no-print-directory", "-C", str(ROOT), "lab", *make_args, f"WORKSPACE={work}",
                             f"LAB_ROOT={work}", f"LAB_ARGS={args}"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}/"
    try:
        wait_for_jupyter(proc, base, token, tmp / "server.log", "make lab")
        yield base, token, work
    finally:
        os.killpg(proc.pid, signal.SIGTERM)   # make, jupyter lab and its kernels: one group
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.fixture(scope="module")
def lab(tmp_path_factory, chromium_path):
    """`make lab` on a temporary copy of the chapter's release: (base URL, token, folder)."""
    with running_lab(tmp_path_factory.mktemp("lab"), ROOT / "notebooks") as running:
        yield running


def _wait_idle(page, timeout_s: float) -> None:
    """Wait until no cell is queued or running ([*]) and the kernel is idle."""
    page.wait_for_function(
        """() => !Array.from(document.querySelectorAll('.jp-InputPrompt'))
                   .some(p => p.textContent.includes('*'))
               && document.querySelector('.jp-Notebook-ExecutionIndicator[data-status="idle"]')""",
        timeout=timeout_s * 1000, polling=500)


def _make_update(work: Path, release: Path) -> subprocess.CompletedProcess:
    """`make update` of the workspace ``work`` from ``release``, as the learner runs it beside the open Lab
    (the same Jupyter runtime folder, so it finds the running server)."""
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(work.parent / "runtime")}
    return subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "course_utils.workspace", "update",
                           str(work), "--release", str(release)], capture_output=True, text=True, env=env)


def _server_state(base: str, token: str) -> str:
    """What the server says is open (for a failure's message)."""
    said = []
    for path in ("api/sessions", "lab/api/workspaces"):
        try:
            with urllib.request.urlopen(f"{base}{path}?token={token}", timeout=10) as r:
                said.append(f"{path}: {r.read().decode()[:3000]}")
        except OSError as err:
            said.append(f"{path}: {err}")
    return "\n" + "\n".join(said)


def test_learner_path_in_jupyterlab(lab, watch, screenshots):
    base, token, work = lab
    page = watch.page
    release = nbformat.read(work / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    answer, visible = _cell_index(release, EXERCISE), _cell_index(release, EXERCISE + "-visible")
    cells = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell")

    page.goto(f"{base}lab/tree/{CHAPTER}/{CHAPTER}.ipynb?token={token}", wait_until="load")
    cells.nth(visible).wait_for(state="attached", timeout=120_000)
    _wait_idle(page, 120)
    page.wait_for_timeout(3000)   # the news question would appear by now
    assert page.get_by_text("official Jupyter news").count() == 0, \
        "JupyterLab asks about Jupyter news: lab/labconfig/default_setting_overrides.json not applied"

    # Run All: the visible test cells are tagged raises-exception, so the run goes on past a
    # failing one: the first exercise's visible test says what to do, and so does the next one's.
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).first.click()
    out = cells.nth(visible).locator(".jp-OutputArea")
    out.get_by_text(f"{FUNCTION} is not implemented yet").wait_for(timeout=RUN_ALL_S * 1000)
    cells.nth(_cell_index(release, NEXT_EXERCISE + "-visible")).locator(".jp-OutputArea").get_by_text(
        f"{NEXT_FUNCTION} is not implemented yet").wait_for(timeout=RUN_ALL_S * 1000)
    _wait_idle(page, RUN_ALL_S)
    out.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshots / "lab_run_all.png"))

    # The learner writes the exercise, runs it and its test: the test passes.
    cells.nth(answer).locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(_solution_source())
    page.keyboard.press("Escape")
    page.keyboard.press("Shift+Enter")      # runs the answer, selects the test cell
    page.keyboard.press("Shift+Enter")      # runs the test
    out.get_by_text(f"{FUNCTION}: all").wait_for(timeout=120_000)
    assert "checks passed" in out.inner_text(), f"the visible test did not pass: {out.inner_text()!r}"
    _wait_idle(page, 120)
    page.keyboard.press("Control+s")
    page.wait_for_timeout(1000)
    out.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshots / "lab_exercise_passes.png"))

    # nbgrader's Validate runs the whole notebook and reports what still fails.
    page.get_by_role("button", name="Validate").first.click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=VALIDATE_S * 1000)
    dialog.get_by_text(re.compile("not implemented yet|failed|passed", re.I)).first.wait_for(
        timeout=VALIDATE_S * 1000)
    text = dialog.inner_text()
    page.screenshot(path=str(screenshots / "lab_validate.png"))
    assert "stable_softmax is not implemented yet" in text, \
        f"Validate does not report the next unanswered exercise: {text[:2000]!r}"
    assert f"{FUNCTION} is not implemented yet" not in text, \
        f"Validate still reports the answered exercise as missing: {text[:2000]!r}"
    page.keyboard.press("Escape")

    # The learner's Lab has no formgrader: no menu item, no page (make lab's lab/learner config).
    page.get_by_role("menuitem", name="Nbgrader", exact=True).click()
    page.wait_for_timeout(500)
    menu = page.locator(".lm-Menu").last.inner_text()
    page.keyboard.press("Escape")
    assert "Formgrader" not in menu and "Course List" not in menu and "Assignment List" not in menu, \
        f"the learner's nbgrader menu: {menu!r}"
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(f"{base}formgrader?token={token}", timeout=10)

    # The course is updated while the chapter is open: `make update` leaves it alone and says why
    # (JupyterLab would write the open copy over the update at its next save); once the learner has
    # closed it, the update merges: after reopening, the answer is still there, and so is the new cell.
    new_release = work.parent / "new-release"
    shutil.copytree(ROOT / "notebooks" / CHAPTER, new_release / CHAPTER)
    nb = nbformat.read(new_release / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell("## New in this version of the course"))
    nbformat.write(nb, new_release / CHAPTER / f"{CHAPTER}.ipynb")
    saved = (work / CHAPTER / f"{CHAPTER}.ipynb").read_bytes()
    proc = _make_update(work, new_release)
    assert proc.returncode == 0 and f"NOT updated: {CHAPTER}/{CHAPTER}.ipynb is open in Jupyter" in proc.stdout, \
        proc.stdout + proc.stderr
    assert (work / CHAPTER / f"{CHAPTER}.ipynb").read_bytes() == saved, "the update wrote under the open notebook"
    page.screenshot(path=str(screenshots / "lab_update_waits.png"))

    page.get_by_role("menuitem", name="File", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Close and Shut Down Notebook")).click()
    page.locator(".jp-Dialog").get_by_role("button", name=re.compile(r"^(Ok|Shut Down)$", re.I)).click()
    deadline = time.monotonic() + 60
    while "NOT updated" in (proc := _make_update(work, new_release)).stdout and time.monotonic() < deadline:
        time.sleep(2)             # JupyterLab saves its closed layout a moment later
    assert proc.returncode == 0 and "updated" in proc.stdout and "NOT updated" not in proc.stdout, \
        proc.stdout + proc.stderr + _server_state(base, token)

    page.goto(f"{base}lab/tree/{CHAPTER}/{CHAPTER}.ipynb?token={token}", wait_until="load")
    cells.nth(answer + 1).wait_for(state="attached", timeout=120_000)
    page.locator(".jp-NotebookPanel .jp-MarkdownOutput").get_by_text(
        "New in this version of the course").first.wait_for(timeout=60_000)
    kept_cell = cells.nth(answer + 1)       # the new cell came in above it
    kept_cell.scroll_into_view_if_needed()   # JupyterLab renders only the cells in view
    kept_cell.locator(".cm-content").get_by_text(f"def {FUNCTION}").first.wait_for(timeout=60_000)
    kept = kept_cell.locator(".cm-content").inner_text()
    assert "NotImplementedError" not in kept, f"the answer is gone: {kept!r}"
    assert page.get_by_text("File Changed").count() == 0, "JupyterLab reports the notebook changed on disk"
    page.screenshot(path=str(screenshots / "lab_after_update.png"))

    # JupyterLab asks its own server only; no request went elsewhere (news, updates, fonts).
    # No console error, no request outside the local server (news, updates, fonts), no failed
    # request but JupyterLab's own: it aborts a pending save of the workspace layout when a newer
    # one supersedes it (net::ERR_ABORTED on PUT .../lab/api/workspaces/).
    watch.failed = [f for f in watch.failed
                    if not ("/lab/api/workspaces/" in f and f.startswith("PUT ") and "ERR_ABORTED" in f)]
    watch.assert_clean("JupyterLab")
