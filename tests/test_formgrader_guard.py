"""Formgrader's view of a notebook, rendered as ``make instructor-lab`` configures it: no learner script.

The browser test (tests_site/test_formgrader.py) opens a hostile submission in a running formgrader;
this one renders formgrader's own template with the exporter configuration of
``lab/instructor/jupyter_server_config.json`` and looks at the HTML, in a second.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import nbformat
from nbconvert.exporters import HTMLExporter
from nbgrader.server_extensions.formgrader import handlers
from traitlets.config import Config

from course_grading import formgrader_guard

REPO = Path(__file__).resolve().parent.parent
INSTRUCTOR_CONFIG = REPO / "lab" / "instructor" / "jupyter_server_config.json"
MARK = "PWNED"
HOSTILE_MARKDOWN = f"""The weights sum to one.

<img src="x.png" onerror="alert('{MARK}-img')">

<script>alert('{MARK}-script')</script>

<a href="javascript:alert('{MARK}-href')">link</a> and <svg onload="alert('{MARK}-svg')"></svg>

<iframe srcdoc="<script>alert('{MARK}-iframe')</script>"></iframe>
"""


def _notebook():
    nb = nbformat.v4.new_notebook()
    written = nbformat.v4.new_markdown_cell(HOSTILE_MARKDOWN)
    written.metadata["nbgrader"] = {"grade": True, "solution": True, "locked": False, "points": 2,
                                    "grade_id": "q1", "schema_version": 3}
    code = nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output("display_data", data={
        "text/html": f"<b>bold</b><img src=x onerror=\"alert('{MARK}-out')\">",
        "text/markdown": f"<img src=x onerror=\"alert('{MARK}-md')\">",
        "application/javascript": f"alert('{MARK}-js')"})])
    nb.cells = [nbformat.v4.new_markdown_cell("plain"), written, code]
    return nb


def instructor_config() -> Config:
    """The server configuration of ``make instructor-lab`` (lab/instructor), as a traitlets Config."""
    return Config(json.loads(INSTRUCTOR_CONFIG.read_text()))


def formgrader_html(nb, config: Config) -> str:
    """``nb`` as formgrader's exporter renders it (its template, the given server config)."""
    config.HTMLExporter.template_name = "formgrade"
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    resources = {"base_url": "", "submission_id": "s", "notebook_id": "nb", "assignment_id": "a", "index": 0,
                 "total": 1, "student": "x", "last_name": "", "first_name": "", "mathjax_url": ""}
    html, _ = HTMLExporter(config=config).from_notebook_node(nb, resources=resources)
    return html


def test_without_the_instructor_config_formgrader_renders_learner_script():
    """The attack as it was: formgrader's own template keeps the Markdown's script (the test below
    therefore fails without lab/instructor's configuration)."""
    config = Config()
    config.HTMLExporter.sanitize_html = True      # nbconvert's own switch: outputs only
    html = formgrader_html(_notebook(), config)
    assert f"onerror=\"alert('{MARK}-img')\"" in html


def test_formgrader_renders_no_learner_script_with_the_instructor_config():
    html = formgrader_html(_notebook(), instructor_config())
    assert "The weights sum to one." in html and "<b>bold</b>" in html
    assert MARK not in html, [line for line in html.splitlines() if MARK in line]


def test_formgraders_pages_get_the_policy():
    """The extension sets the policy on formgrader's handlers only, not in the server's headers."""
    from nbgrader.server_extensions.formgrader import base
    patched = [(base.BaseHandler, "content_security_policy"), (handlers.SubmissionFilesHandler, "content_security_policy"),
               (handlers.SubmissionHandler, "exporter"), (base.BaseHandler, "api")]
    saved = {(c, n): c.__dict__.get(n) for c, n in patched}
    try:
        formgrader_guard._load_jupyter_server_extension(SimpleNamespace(log=SimpleNamespace(info=print)))
        page = base.BaseHandler.__new__(base.BaseHandler)
        page.application = SimpleNamespace(settings={})
        files = handlers.SubmissionFilesHandler.__new__(handlers.SubmissionFilesHandler)
        files.application = SimpleNamespace(settings={})
        assert page.content_security_policy == formgrader_guard.FORMGRADER_CSP + "; frame-ancestors 'self'"
        assert "script-src-attr 'unsafe-hashes' 'sha256-" in page.content_security_policy
        assert "sandbox" in files.content_security_policy and "default-src 'none'" in files.content_security_policy
        # On a hub (frame-ancestors 'none' in the server's headers), formgrader keeps the hub's.
        page.application = SimpleNamespace(settings={"headers": {
            "Content-Security-Policy": "frame-ancestors 'none'; report-uri /x"}})
        assert page.content_security_policy.endswith("; frame-ancestors 'none'")
        assert "https:" not in page.content_security_policy and "http:" not in page.content_security_policy
        assert isinstance(base.BaseHandler.__dict__["api"], property)          # the course's API (formgrader_api)
    finally:
        for (cls, name), value in saved.items():
            if value is None:
                delattr(cls, name)
            else:
                setattr(cls, name, value)


def test_formgraders_own_handlers_are_the_ones_allowed():
    """The inline handlers the policy allows are exactly formgrader's own (every one in nbgrader's templates:
    a missing one is a dead link, such as "Add new assignment", under the policy)."""
    templates = "".join(p.read_text() for p in Path(handlers.template_path).rglob("*") if p.is_file())
    found = set(re.findall(r'\son[a-z]+="([^"]*)"', templates, re.I))
    assert found == set(formgrader_guard._OWN_HANDLERS), found


def test_the_manual_grading_page_loads_mathjax_from_the_server_only():
    """The page formgrader renders, as the extension rewrites it: MathJax 3 from the server (the pinned
    package's file, which exists), no script or style from another host, the learner's text untouched."""
    nb = _notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell("Scale by $\\sqrt{d_k}$ and <code>https://cdnjs.x/mathjax.js</code>"))
    raw = formgrader_html(nb, instructor_config())
    assert "cdnjs.cloudflare.com/ajax/libs/mathjax" in raw          # what formgrader's template does by itself
    html = formgrader_guard.local_mathjax(raw, "/base/")
    head, body = html.split("</head>", 1)
    assert '<script src="/base/course-mathjax/tex-svg.js"></script>' in head
    assert (formgrader_guard.mathjax_folder() / "tex-svg.js").is_file()
    assert not re.findall(r'(?:src|href)="(?:https?:)?//', head), re.findall(r'(?:src|href)="[^"]*"', head)
    assert "x-mathjax-config" not in head and "MathJax.Hub = " in head     # formgrader.js's MathJax 2 call, answered
    assert body == raw.split("</head>", 1)[1]                              # the learner's part is not touched
