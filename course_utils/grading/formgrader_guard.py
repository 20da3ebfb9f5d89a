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
  (:func:`~course_utils.grading.feedback.clean_html`: no ``<script>``, no ``on*`` attribute, no
  ``javascript:`` URL, no ``<iframe>``, ``<form>`` or ``<style>``);
* :class:`SanitiseOutputs` cleans every output of the notebook before the template sees it
  (:func:`~course_utils.grading.feedback.sanitise_output`, the grader's own output handling), and
  ``sanitize_html`` has nbconvert clean HTML outputs once more and leave JavaScript outputs out;
* :func:`_load_jupyter_server_extension` gives formgrader's pages a Content-Security-Policy
  (:data:`FORMGRADER_CSP`): scripts, styles, images, fonts and connections from the server itself
  only (MathJax from cdnjs excepted), no inline event handler but formgrader's own three
  (``script-src-attr`` with their hashes), no plugin, no ``<base>``, no form to elsewhere. The
  files of a submission that formgrader serves (``/formgrader/submissions/<id>/<file>``) get
  :data:`FILES_CSP` (a sandbox without scripts), as Jupyter's own ``/files/`` does.
  ``frame-ancestors`` is the server's own (``'self'``, or a hub's ``'none'``).
  Formgrader's pages keep their inline ``<script>`` elements (they set the page's ids), so the
  policy does not stop an inline ``<script>`` element by itself: the cleaning above removes them.

The policy is set on formgrader's handlers, not in the server's ``headers`` setting: a
``Content-Security-Policy`` there replaces every handler's own, and so would lift the sandbox of
``/files/`` and the ``default-src 'none'`` of the API.
"""

from __future__ import annotations

import base64
import hashlib

from jinja2 import pass_context
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.preprocessors import Preprocessor

from course_utils.grading.feedback import clean_html, sanitise_output

__all__ = ["FILES_CSP", "FORMGRADER_CSP", "SanitiseOutputs", "markdown2html", "with_ancestors"]

# formgrader's own inline event handlers (nbgrader 0.9.6's templates): the name toggles.
_OWN_HANDLERS = ("toggle_name(true);", "toggle_name(false);", "toggleAllNames()")
_MATHJAX = "https://cdnjs.cloudflare.com/ajax/libs/mathjax/"   # formgrader's template loads MathJax 2 there


def _hash(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


FORMGRADER_CSP = "; ".join([
    "default-src 'self'",
    f"script-src 'self' 'unsafe-inline' {_MATHJAX}",
    f"script-src-elem 'self' 'unsafe-inline' {_MATHJAX}",
    "script-src-attr 'unsafe-hashes' " + " ".join(_hash(h) for h in _OWN_HANDLERS),
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    f"font-src 'self' data: {_MATHJAX}",
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


def _jupyter_server_extension_points():
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp) -> None:
    """Give formgrader's pages :data:`FORMGRADER_CSP` and the files it serves :data:`FILES_CSP`."""
    from nbgrader.server_extensions.formgrader import base, handlers

    base.BaseHandler.content_security_policy = property(lambda self: with_ancestors(FORMGRADER_CSP, self.settings))
    handlers.SubmissionFilesHandler.content_security_policy = property(
        lambda self: with_ancestors(FILES_CSP, self.settings))
    serverapp.log.info("formgrader: Content-Security-Policy set (course_utils.grading.formgrader_guard)")
