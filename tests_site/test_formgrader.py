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

``test_formgraders_buttons_do_what_make_autograde_does``: a class of three (chapter 3, lean: one
correct, one partly wrong, one blank and a day late; names from ``nbgrader db student import``)
graded by ``make autograde``, then opened in formgrader: names listed, the written answer's math
typeset by the server's MathJax with no request elsewhere (screenshot formgrader-math.png), a
Full credit mark kept by formgrader's Autograde (no tampering warning in its log, its grading record
kept) and by the next ``make autograde``, and Generate and Release Feedback giving the page
``make autograde`` writes, byte for byte.
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

import course_grading as grading  # noqa: E402
from course_grading.exchange import COURSE_ID  # noqa: E402
from course_grading.results import RECORD  # noqa: E402

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
def instructor_lab(tmp: Path, course: Path, extra_env: dict[str, str] | None = None):
    """`make instructor-lab` on ``course`` (``extra_env`` added to its environment): yields (base URL,
    token); stopped after."""
    if not (ROOT / ".venv" / "bin" / "jupyter").exists():
        pytest.skip("no .venv/bin/jupyter: run `make install` first")
    port, token, env, args = server_settings(tmp)
    env.update(extra_env or {})
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


def _give_full_credit(page, grade_id: str) -> int:
    """Click formgrader's full-credit button of ``grade_id`` once its grade views exist, and wait for
    the save it sends (a PUT to ``/api/grade/<id>``); returns that response's status. Formgrader binds
    the button only after it has fetched the grades, so a click before that does nothing."""
    page.wait_for_function("() => window.formgrader && formgrader.grades && formgrader.grades.loaded === true",
                           timeout=30_000)
    saved = lambda r: r.request.method == "PUT" and "/api/grade/" in r.url  # noqa: E731
    with page.expect_response(saved, timeout=30_000) as response:
        page.locator(f"div.pull-right:has(#{grade_id}) .full-credit").click()
    return response.value.status


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
        # The grader's rubric of the written answer, from the source, right after the answer (rubric.py).
        rubric_shown = page.get_by_text(f"Rubric of {written_id}").first.is_visible()
        rubric_after = page.evaluate(
            "([a, b]) => document.body.innerText.indexOf(b) > document.body.innerText.indexOf(a)",
            [TEXT, f"Rubric of {written_id}"])
        pwned = page.evaluate("document.documentElement.dataset.pwned || ''")
        page.screenshot(path=str(screenshots / "formgrader.png"))
        after, kernels = _grades(course), _kernels(base, token)

        # Formgrader itself still works under the policy: full credit for the written answer.
        save_status = _give_full_credit(page, written_id)
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
    assert rubric_shown and rubric_after, f"formgrader's page does not show the rubric of {written_id} after the answer"
    manual, max_score = credited[written_id][1], credited[written_id][3]
    assert manual == max_score > 0, \
        f"formgrader's full-credit button did not save (HTTP {save_status}): {credited[written_id]}"


# ---------------------------------------------------------------------------------------------------
# formgrader's buttons on a class of three, against what `make autograde` does.

CLASS = {   # student: (first name, last name, what they hand in, submitted at)
    "ada": ("Ada", "Lovelace", "correct", "2026-01-10 11:00:00.000000 UTC"),
    "bob": ("Bob", "Babbage", "partly wrong", "2026-01-10 11:30:00.000000 UTC"),
    "cy": ("Cy", "Young", "blank", "2026-01-11 12:00:05.000000 UTC"),        # a day and 5 s late
}
DUE = "2026-01-10 12:00:00 UTC"
WRITTEN_MATH = r"Dividing by $\sqrt{d_k}$ keeps the scores' variance at one: $$\mathrm{Var}(q \cdot k) = d_k.$$"


def _class_notebook(kind: str, solution, release):
    import copy
    nb = copy.deepcopy(release)
    if kind == "blank":
        return nb
    answers = {meta(c)["grade_id"]: c.source for c in solution.cells if meta(c).get("solution")}
    if kind == "partly wrong":
        ns: dict = {}
        exec((ROOT / "tests" / "wrong_answers" / f"{CHAPTER}.py").read_text(), ns)
        answers[ns["EXERCISE"]] = ns["SOURCE"]
    answers["q1_scale"] = WRITTEN_MATH
    for c in nb.cells:
        if meta(c).get("solution"):
            c.source = answers[meta(c)["grade_id"]]
    return nb


@pytest.fixture(scope="module")
def class_of_three(tmp_path_factory, chromium_path):
    """A course with the class of three submitted and graded by ``make autograde`` (the course's
    ``instructor_autograde``), names imported with ``nbgrader db student import``: (course, exchange)."""
    from course_grading import sandbox
    from course_grading.autograde import instructor_autograde
    from course_grading.course import nbgrader

    tmp = tmp_path_factory.mktemp("formgrader-class")
    exchange = tmp / "exchange"
    exchange.mkdir()
    limits = sandbox.Limits(notebook_s=120, cell_s=30, memory_mb=2048, processes=64, children=8, file_mb=64)
    env = {**limits.to_env(), "COURSE_EXCHANGE": str(exchange)}
    if not sandbox.isolation().sandboxed:
        env["GRADING_UNSANDBOXED"] = "1"
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    course = grading.new_course([CHAPTER], ROOT)
    try:
        solution = lean(grading.chapter_notebook(CHAPTER, course))
        release = lean(course / "notebooks" / CHAPTER / f"{CHAPTER}.ipynb")
        students = tmp / "students.csv"
        students.write_text("id,first_name,last_name,email\n" + "".join(
            f"{s},{first},{last},{s}@example.org\n" for s, (first, last, _, _) in CLASS.items()))
        nbgrader("db", "student", "import", str(students), course=course)
        nbgrader("db", "assignment", "add", CHAPTER, f"--duedate={DUE}", course=course)
        for s, (_, _, kind, when) in CLASS.items():
            folder = course / "submitted" / s / CHAPTER
            folder.mkdir(parents=True)
            nbformat.write(_class_notebook(kind, solution, release), folder / f"{CHAPTER}.ipynb")
            (folder / "timestamp.txt").write_text(when)
            (folder / "submission_secret.txt").write_text(f"secret-of-{s}")
        instructor_autograde(course, jobs=1)
        yield course, exchange, env
    finally:
        shutil.rmtree(course, ignore_errors=True)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _grade(course: Path, student: str, grade_id: str):
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE_ID) as gb:
        g = gb.find_grade(grade_id, CHAPTER, CHAPTER, student)
        return g.manual_score, g.needs_manual_grade, g.max_score


def _submission_of(course: Path, student: str) -> str:
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE_ID) as gb:
        return gb.find_submission_notebook(CHAPTER, CHAPTER, student).id


def _click_and_read_modal(page, row: str, button: str, timeout_s: int) -> str:
    """Click ``button`` (its cell's class) in the table row that shows ``row``; the modal's text once it
    shows (a success modal, else the test fails with the error modal's text)."""
    page.locator("tr", has_text=row).locator(f".{button} a").click()
    modal = page.locator("#success-modal, #error-modal").first
    modal.wait_for(state="visible", timeout=timeout_s * 1000)
    text = modal.inner_text()
    assert modal.get_attribute("id") == "success-modal", f"{button} failed:\n{text}"
    modal.locator("button").first.click()
    modal.wait_for(state="detached", timeout=10_000)
    return text


def test_formgraders_buttons_do_what_make_autograde_does(class_of_three, watch, screenshots, tmp_path):
    """The class of three in formgrader: students named, math rendered offline on the manual-grading
    page (no request leaves the server), a hand mark that formgrader's Autograde and a later
    ``make autograde`` keep, no tampering warning on an honest submission, and Generate and Release
    Feedback giving the course's own feedback page, byte for byte what ``make autograde`` wrote."""
    import time

    from nbgrader.utils import notebook_hash

    from course_grading.autograde import instructor_autograde

    course, exchange, env = class_of_three
    page = watch.page
    feedback = course / "feedback" / "ada" / CHAPTER / f"{CHAPTER}.html"
    timings = {}
    with instructor_lab(tmp_path, course, env) as (base, token):
        page.goto(f"{base}lab?token={token}", wait_until="domcontentloaded")
        page.goto(f"{base}formgrader/manage_submissions/{CHAPTER}", wait_until="load")
        page.locator("tr", has_text="Lovelace, Ada").wait_for(timeout=30_000)
        names = page.locator("table").inner_text()

        # The manual-grading page: the written answer's math typeset by the server's MathJax.
        response = page.goto(f"{base}formgrader/submissions/{_submission_of(course, 'ada')}/", wait_until="load")
        csp = response.headers.get("content-security-policy", "")
        page.locator("mjx-container").first.wait_for(timeout=30_000)
        typeset = page.locator("mjx-container").count()
        page.screenshot(path=str(screenshots / "formgrader-math.png"))
        save_status = _give_full_credit(page, "q1_scale")
        marked = _grade(course, "ada", "q1_scale")

        # Autograde (ada's, regraded by the course's grader), then Generate and Release Feedback.
        page.goto(f"{base}formgrader/manage_submissions/{CHAPTER}", wait_until="load")
        start = time.monotonic()
        log = _click_and_read_modal(page, "Lovelace, Ada", "autograde", 300)
        timings["Autograde"] = time.monotonic() - start
        after_autograde = _grade(course, "ada", "q1_scale")
        record_path = course / "autograded" / "ada" / CHAPTER / RECORD
        record = json.loads(record_path.read_text()) if record_path.exists() else {}
        start = time.monotonic()
        gen_log = _click_and_read_modal(page, "Lovelace, Ada", "generate-feedback", 180)
        timings["Generate Feedback"] = time.monotonic() - start
        generated = feedback.read_bytes()
        rel_log = _click_and_read_modal(page, "Lovelace, Ada", "release-feedback", 60)
        # The chapter's Generate Feedback (Manage Assignments): every student's page, the course's.
        page.goto(f"{base}formgrader/manage_assignments", wait_until="load")
        all_log = _click_and_read_modal(page, CHAPTER, "generate-feedback", 180)
        pages = {s: (course / "feedback" / s / CHAPTER / f"{CHAPTER}.html").read_text() for s in CLASS}
    released = exchange / COURSE_ID / "feedback" / f"{notebook_hash(secret='secret-of-ada', notebook_id=CHAPTER)}.html"

    # `make autograde` after formgrader's Autograde: nothing to regrade, the hand mark stays graded.
    instructor_autograde(course, jobs=1)
    after_make = _grade(course, "ada", "q1_scale")
    made_by_make_autograde = feedback.read_bytes()
    print(f"formgrader's buttons (seconds, under load): {timings}")

    assert all(f"{last}, {first}" in names for first, last, _, _ in CLASS.values()) and "None, None" not in names, names
    assert typeset >= 2, f"the written answer's math was not typeset ({typeset} formulas)"
    assert "https:" not in csp and "http:" not in csp, csp
    watch.assert_clean("formgrader's pages")
    assert marked[0] == marked[2] and marked[1] is False, \
        f"the full-credit button did not save (HTTP {save_status}): {marked}"
    assert "checksum" not in log and "has changed" not in log, f"a tampering warning on an honest submission:\n{log}"
    assert "faults: none" in log and "ex6_module" in log, log
    assert after_autograde == marked, f"formgrader's Autograde undid the hand mark: {marked} -> {after_autograde}"
    assert after_make == marked, f"make autograde undid the hand mark: {marked} -> {after_make}"
    assert record.get("fingerprint"), f"formgrader's Autograde left no grading record: {record}"
    assert "feedback/ada" in gen_log, gen_log
    assert generated == made_by_make_autograde, "Generate Feedback's page is not the one make autograde writes"
    text = generated.decode()
    assert '<meta http-equiv="Content-Security-Policy"' in text and "cdnjs" not in text, "not the course's page"
    assert "ex1_scores: hidden tests" in text and "Test cell</a>" not in text, "contents not named by exercise"
    assert released.read_bytes() == generated, f"Release Feedback released another page:\n{rel_log}"
    assert all(f"feedback/{s}/" in all_log for s in CLASS), all_log
    assert all('<meta http-equiv="Content-Security-Policy"' in t and "cdnjs" not in t for t in pages.values()), \
        "the chapter's Generate Feedback wrote a page that is not the course's"
