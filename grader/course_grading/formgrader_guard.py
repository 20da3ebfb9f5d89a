"""nbgrader's formgrader, safe for the instructor to open: no learner HTML runs in it.

Formgrader renders each autograded notebook to HTML on the instructor's Jupyter server, under its
origin and with the instructor's session: a script in a learner's Markdown (``<img onerror>``)
could change any grade through formgrader's API or start a kernel. nbconvert's
``HTMLExporter.sanitize_html`` cleans outputs but not the Markdown cells, which formgrader's own
template renders with ``markdown2html`` alone. ``make instructor-lab`` loads this module as a
Jupyter server extension and configures formgrader's exporter (``lab/instructor/
jupyter_server_config.json``; formgrader builds its ``HTMLExporter`` from the server's config):

* :func:`markdown2html` replaces nbconvert's filter of that name: the Markdown of every cell (and
  every ``text/markdown`` output) is rendered as nbconvert renders it, then cleaned with ``nh3``
  (:func:`~course_grading.feedback.clean_html`: no ``<script>``, no ``on*`` attribute, no
  ``javascript:`` URL, no ``<iframe>``, ``<form>`` or ``<style>``);
* :class:`SanitiseOutputs` cleans every output of the notebook before the template sees it
  (:func:`~course_grading.feedback.sanitise_output`, the grader's own output handling), and
  ``sanitize_html`` has nbconvert clean HTML outputs once more and leave JavaScript outputs out;
* :func:`_load_jupyter_server_extension` gives formgrader's pages a Content-Security-Policy
  (:data:`FORMGRADER_CSP`): scripts, styles, images, fonts and connections from the server itself
  only, no inline event handler but formgrader's own five
  (``script-src-attr`` with their hashes), no plugin, no ``<base>``, no form to elsewhere, nothing
  from another host. The
  files of a submission that formgrader serves (``/formgrader/submissions/<id>/<file>``) get
  :data:`FILES_CSP` (a sandbox without scripts), as Jupyter's own ``/files/`` does.
  ``frame-ancestors`` is the server's own (``'self'``, or a hub's ``'none'``).
  Formgrader's pages keep their inline ``<script>`` elements (they set the page's ids), so the
  policy does not stop an inline ``<script>`` element by itself: the cleaning above removes them.

The extension also makes formgrader's pages work offline and do what the course does:

* the manual-grading page renders math with the MathJax 3 of the pinned ``django-static-mathjax``
  package (the version the site and the feedback use), served by this server under
  :data:`MATHJAX_PATH`, instead of MathJax 2 from cdnjs (:func:`local_mathjax`; formgrader's own
  script, written for MathJax 2, is told when typesetting is done);
* formgrader's API is :class:`~course_grading.formgrader_api.CourseAPI`: its Autograde and
  Generate Feedback buttons run the course's grader and feedback, as ``make autograde`` does.

The policy is set on formgrader's handlers, not in the server's ``headers`` setting: a
``Content-Security-Policy`` there replaces every handler's own, and so would lift the sandbox of
``/files/`` and the ``default-src 'none'`` of the API.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

from jinja2 import pass_context
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.preprocessors import Preprocessor

from course_grading.feedback import clean_html, sanitise_output

__all__ = ["FILES_CSP", "FORMGRADER_CSP", "MATHJAX_PATH", "SanitiseOutputs", "local_mathjax", "markdown2html",
           "mathjax_folder", "with_ancestors"]

# formgrader's own inline event handlers (nbgrader 0.9.6's templates): the name toggles and the "Add new
# assignment" and "Add new student" links (tests/test_formgrader_guard.py lists every one in the templates).
_OWN_HANDLERS = ("toggle_name(true);", "toggle_name(false);", "toggleAllNames()", "createAssignmentModal();",
                 "createStudentModal();")
MATHJAX_PATH = "course-mathjax/"   # under the server's base URL: the pinned MathJax 3 (es5 build)


def _hash(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


FORMGRADER_CSP = "; ".join([
    "default-src 'self'",
    "script-src 'self' 'unsafe-inline'",
    "script-src-elem 'self' 'unsafe-inline'",
    "script-src-attr 'unsafe-hashes' " + " ".join(_hash(h) for h in _OWN_HANDLERS),
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "font-src 'self' data:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-src 'self'",
])
FILES_CSP = "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; sandbox"


def with_ancestors(policy: str, settings: dict) -> str:
    """``policy`` with the server's own ``frame-ancestors`` (a hub's ``'none'`` stays), else ``'self'``."""
    theirs = str(settings.get("headers", {}).get("Content-Security-Policy", ""))
    ancestors = next((d.strip() for d in theirs.split(";") if d.strip().startswith("frame-ancestors")),
                     "frame-ancestors 'self'")
    return f"{policy}; {ancestors}"


@pass_context
def markdown2html(context, source: str) -> str:
    """nbconvert's ``markdown2html`` (the same renderer, the cell's attachments), cleaned with nh3."""
    cell = context.get("cell", {})
    path = context.get("resources", {}).get("metadata", {}).get("path", "")
    renderer = IPythonRenderer(escape=False, allow_harmful_protocols=False,
                               attachments=cell.get("attachments", {}), path=path)
    return clean_html(MarkdownWithMath(renderer=renderer).render(source))


class SanitiseOutputs(Preprocessor):
    """Clean every output of the notebook as the grader cleans an output it accepts."""

    def preprocess_cell(self, cell, resources, index):
        for out in cell.get("outputs", []):
            sanitise_output(out)
        return cell, resources


def mathjax_folder() -> Path:
    """The es5 build of MathJax 3 in the pinned ``django-static-mathjax`` package (``tex-svg.js`` in it)."""
    import mathjax

    folder = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    if not (folder / "tex-svg.js").is_file():
        raise FileNotFoundError(f"no MathJax at {folder}: reinstall the course (make install)")
    return folder


# nbconvert's mathjax() macro, which formgrader's template calls: MathJax 2 from cdnjs and its config.
_CDN_SCRIPT = re.compile(r'<script[^>]*\ssrc="https?://[^"]*mathjax[^"]*"[^>]*>\s*</script>', re.I)
_MATHJAX2_CONFIG = re.compile(r'<script type="text/x-mathjax-config">.*?</script>', re.S | re.I)
_CONFIG = ("window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']], "
           "displayMath: [['$$', '$$'], ['\\\\[', '\\\\]']], processEscapes: true}, svg: {fontCache: 'global'}};")
# formgrader.js waits for MathJax 2's startup signal ("End") to select and scroll to the last cell.
_HUB_SHIM = ("MathJax.Hub = {Startup: {signal: {Interest: function (f) {"
             "MathJax.startup.promise.then(function () { f('End'); }); }}}};")


def local_mathjax(html: str, base_url: str) -> str:
    """formgrader's page with the server's own MathJax 3 (``<base_url>/course-mathjax/tex-svg.js``) in
    place of MathJax 2 from a CDN. Only the page's ``<head>`` (the template's) is changed, never the
    body, which holds the learner's text."""
    end = html.find("</head>")
    if end < 0:
        return html
    head = _MATHJAX2_CONFIG.sub("", _CDN_SCRIPT.sub("", html[:end]))
    src = f"{base_url.rstrip('/')}/{MATHJAX_PATH}tex-svg.js"
    head += (f"<script>{_CONFIG}</script>\n<script src=\"{src}\"></script>\n<script>{_HUB_SHIM}</script>\n")
    return head + html[end:]


class _LocalMathExporter:
    """formgrader's exporter, its pages given :func:`local_mathjax`."""

    def __init__(self, exporter, base_url: str):
        self._exporter, self._base_url = exporter, base_url

    def from_filename(self, filename, resources=None, **kw):
        html, resources = self._exporter.from_filename(filename, resources=resources, **kw)
        return local_mathjax(html, self._base_url), resources


def _course_api(handler):
    """formgrader's API object (its ``BaseHandler.api``), the course's (``formgrader_api.CourseAPI``)."""
    from course_grading.formgrader_api import CourseAPI

    handler.coursedir.parent.load_config_file()
    api = CourseAPI(handler.coursedir, handler.authenticator, parent=handler.coursedir.parent)
    api.log_level = handler.log.level
    return api


def _jupyter_server_extension_points():
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp) -> None:
    """Give formgrader's pages :data:`FORMGRADER_CSP` and the files it serves :data:`FILES_CSP`; serve the
    pinned MathJax under :data:`MATHJAX_PATH` and put it in the manual-grading page; make formgrader's API
    the course's."""
    from nbgrader.server_extensions.formgrader import base, handlers

    base.BaseHandler.content_security_policy = property(lambda self: with_ancestors(FORMGRADER_CSP, self.settings))
    handlers.SubmissionFilesHandler.content_security_policy = property(
        lambda self: with_ancestors(FILES_CSP, self.settings))
    handlers.SubmissionHandler.exporter = property(
        lambda self: _LocalMathExporter(self.settings["nbgrader_exporter"], self.base_url))
    base.BaseHandler.api = property(_course_api)
    web_app = getattr(serverapp, "web_app", None)
    if web_app is not None:
        from jupyter_server.utils import url_path_join
        from tornado import web

        pattern = url_path_join(web_app.settings.get("base_url", "/"), MATHJAX_PATH, "(.*)")
        web_app.add_handlers(".*$", [(pattern, web.StaticFileHandler, {"path": str(mathjax_folder())})])
    serverapp.log.info("formgrader: the course's Content-Security-Policy, MathJax and grader "
                       "(course_grading.formgrader_guard)")
