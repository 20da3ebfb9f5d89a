"""Formgrader, opened by the instructor on a hostile submission, in headless Chromium: no script runs.

Chapter 3, cut to its graded cells, is graded by the course's grader for a student whose written
answer carries HTML that runs script in five ways (``<img onerror>``, ``<script>``, SVG ``onbegin``,
``<details ontoggle>``, ``<iframe srcdoc>``), each of which, if it ran, would mark the page and then
set every grade of the submission to 0 through formgrader's API and start a kernel (what such an
answer did to an instructor's session before formgrader's exporter cleaned it). Outputs that carry
script (HTML, Markdown, JavaScript) are then written into the autograded notebook by hand, as if
they had slipped past the grader's own output handling. ``make instructor-lab`` is started on that
course and the instructor opens the submission in formgrader: the page must carry the course's
Content-Security-Policy, nothing may mark it, no grade may change and no kernel may start; the
written answer's own text is shown; and formgrader still works under the policy (the instructor
gives the written answer full credit with formgrader's button, and the gradebook has it; the eye
icon's own inline handler, allowed by its hash, shows the student's name).
Screenshot: site/_build/screenshots/formgrader.png.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from notebook_helpers import lean, meta  # noqa: E402
from servers import server_settings, wait_for_jupyter  # noqa: E402

from course_utils import grading  # noqa: E402
from course_utils.grading.exchange import COURSE_ID  # noqa: E402

CHAPTER = "ch03_scaled_dot_product"
STUDENT = "mallory"
TEXT = "Attention weights of one query sum to one."

# What each vector runs: mark the page, then zero every grade of the submission and start a kernel.
ATTACK = ("var d=document.documentElement;d.dataset.pwned=(d.dataset.pwned||'')+'VEC ';"
          "var x=decodeURIComponent((document.cookie.match(/_xsrf=([^;]+)/)||['',''])[1]);"
          "var h={'X-XSRFToken':x,'Content-Type':'application/json'};"
          "fetch(base_url+'/api/grades?submission_id='+submission_id).then(function(r){return r.json()})"
          ".then(function(gs){gs.forEach(function(g){fetch(base_url+'/api/grade/'+g.id,{method:'PUT',"
          "headers:h,body:JSON.stringify({manual_score:0,extra_credit:-5})})})});"
          "fetch('/api/kernels',{method:'POST',headers:h,body:'{}'});")


def _attack(vector: str) -> str:
    return ATTACK.replace("VEC", vector)


WRITTEN = f"""{TEXT}

<img src="nothing.png" onerror="{_attack('img')}">

<script>{_attack('script')}</script>

<svg><animate onbegin="{_attack('svg')}" attributeName="x" dur="1s"></animate></svg>

<details open ontoggle="{_attack('details')}">more</details>

<iframe srcdoc="<script>parent.document.documentElement.dataset.pwned+='iframe '</script>"></iframe>
"""

OUTPUTS = [nbformat.v4.new_output("display_data", data={
    "text/html": f'<img src="nothing.png" onerror="{_attack("output-html")}">',
    "text/markdown": f'<img src="nothing.png" onerror="{_attack("output-markdown")}">',
    "application/javascript": _attack("output-js")})]


def _grades(course: Path) -> dict[str, tuple]:
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE_ID) as gb:
        nb = gb.find_submission_notebook(CHAPTER, CHAPTER, STUDENT)
        return {g.name: (g.auto_score, g.manual_score, g.extra_credit, g.max_score) for g in nb.grades}


def _submission_id(course: Path) -> str:
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE_ID) as gb:
        return gb.find_submission_notebook(CHAPTER, CHAPTER, STUDENT).id


@pytest.fixture(scope="module")
def hostile_course(tmp_path_factory, chromium_path):
    """A course with one autograded hostile submission: (course, written answer's grade id)."""
    tmp = tmp_path_factory.mktemp("formgrader")
    course = grading.new_course([CHAPTER], ROOT)
    nb = lean(grading.chapter_notebook(CHAPTER, course))
    written = next(c for c in nb.cells if c.cell_type == "markdown" and meta(c).get("solution") and meta(c).get("grade"))
    written.source = WRITTEN
    path = tmp / f"{CHAPTER}.ipynb"
    nbformat.write(nb, path)
    graded = grading.autograde_in(course, CHAPTER, {STUDENT: path})[STUDENT]
    autograded = course / "autograded" / STUDENT / CHAPTER / f"{CHAPTER}.ipynb"
    assert autograded.exists(), graded.table()
    nb = nbformat.read(autograded, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("print('after')", outputs=OUTPUTS))
    nbformat.write(nb, autograded)
    yield course, meta(written)["grade_id"]
    shutil.rmtree(course, ignore_errors=True)


@contextlib.contextmanager
def instructor_lab(tmp: Path, course: Path):
    """`make instructor-lab` on ``course``: yields (base URL, token); stopped after."""
    if not (ROOT / ".venv" / "bin" / "jupyter").exists():
        pytest.skip("no .venv/bin/jupyter: run `make install` first")
    port, token, env, args = server_settings(tmp)
    log_path = tmp / "server.log"
    log = log_path.open("w")
    proc = subprocess.Popen(["make", "--no-print-directory", "-C", str(ROOT), "instructor-lab",
                             f"INSTRUCTOR_ROOT={course}", f"LAB_ARGS={args}"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}/"
    try:
        wait_for_jupyter(proc, base, token, log_path, "make instructor-lab")
        yield base, token
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def _kernels(base: str, token: str) -> list:
    with urllib.request.urlopen(f"{base}api/kernels?token={token}", timeout=10) as r:
        return json.load(r)


def test_a_hostile_submission_runs_nothing_in_formgrader(hostile_course, watch, screenshots, tmp_path):
    course, written_id = hostile_course
    before = _grades(course)
    page = watch.page
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    with instructor_lab(tmp_path, course) as (base, token):
        page.goto(f"{base}lab?token={token}", wait_until="domcontentloaded")   # the session's cookie
        response = page.goto(f"{base}formgrader/submissions/{_submission_id(course)}/", wait_until="load")
        assert response is not None and response.ok, response and response.status
        csp = response.headers.get("content-security-policy", "")
        page.get_by_text(TEXT).first.wait_for(timeout=30_000)
        page.wait_for_timeout(3000)          # what a payload's fetches would need to land
        pwned = page.evaluate("document.documentElement.dataset.pwned || ''")
        page.screenshot(path=str(screenshots / "formgrader.png"))
        after, kernels = _grades(course), _kernels(base, token)

        # Formgrader itself still works under the policy: full credit for the written answer.
        page.locator(f"div.pull-right:has(#{written_id}) .full-credit").click()
        page.wait_for_timeout(2000)
        credited = _grades(course)
        # ... and its own inline handlers, which the policy allows by hash: the eye shows the name.
        page.locator("span.name-hidden").first.click()
        name_shown = page.locator("a.name-shown").first.is_visible()
        with urllib.request.urlopen(f"{base}api/status?token={token}", timeout=10) as r:
            api_csp = r.headers.get("Content-Security-Policy", "")

    problems = [f"learner script ran in formgrader: {pwned}" if pwned else "",
                f"dialogs: {dialogs}" if dialogs else "",
                f"grades changed by opening the submission: {before} -> {after}" if after != before else "",
                f"a kernel was started: {kernels}" if kernels else "",
                "" if "script-src-attr 'unsafe-hashes'" in csp and "connect-src 'self'" in csp
                else f"formgrader's page lacks the course's Content-Security-Policy: {csp!r}",
                "" if "default-src 'none'" in api_csp else f"the API's own policy was replaced: {api_csp!r}"]
    assert not any(problems), "\n".join(p for p in problems if p)
    assert name_shown, "formgrader's own onclick handler (the student's name) was blocked"
    manual, max_score = credited[written_id][1], credited[written_id][3]
    assert manual == max_score > 0, f"formgrader's full-credit button did not save: {credited[written_id]}"
