"""Feedback for a learner: no hidden test in it, no script from a submission, the faults on top.

* :func:`sanitise_output` runs on every output as it arrives from a kernel: HTML and Markdown
  outputs are cleaned with ``nh3`` (no ``<script>``, no ``on*`` attributes, no ``javascript:``
  URLs), JavaScript outputs are dropped, SVG becomes a note. The autograded notebook, the
  formgrader's view of it and the feedback are all made from these outputs.
* :class:`WithholdAfterHidden` (first) keeps out of the feedback everything the kernel said from
  the first hidden test on: once hidden code has run in the kernel, a learner's cell could print
  it in any encoding (base64 of IPython's caches, of ``linecache``, of a frame's constants), so
  the outputs of every later cell are withheld, and a test cell shows only the grader's own
  result (check names from its reference run, never a value: ``execution.py``).
* :class:`ScrubHidden` (before ``ClearHiddenTests``) removes from every output any line that
  holds a line of a hidden test, wherever it came from (a test's stdout, IPython's history, a
  traceback, a file the notebook read): a second line for what ran before the hidden tests.
* :class:`ShortTracebacks` keeps one line per error in graded cells.
* :class:`FaultNote` puts the submission's faults at the top.
* :func:`sanitise_html_file` cleans the ``<body>`` of the written feedback HTML once more (the
  learner's Markdown cells are rendered to HTML by nbconvert: a raw ``<script>`` or an
  ``onerror`` attribute in them is removed there).
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import nh3
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

from course_grading.course import exercise_of
from course_grading.results import FAULT, META, NOT_CONFIRMED, TAMPERING
from course_utils.messages import language, notebook_language, speaking, tr

_ATTRIBUTES = {"*": {"class", "id", "title"}, "img": {"src", "alt", "width", "height"}, "a": {"href"},
               "td": {"colspan", "rowspan", "align"}, "th": {"colspan", "rowspan", "align", "scope"}}
_SCHEMES = {"http", "https", "mailto", "data"}


def _attribute_filter(tag: str, attr: str, value: str):
    if attr == "href" and value.strip().lower().startswith("data:"):
        return None                                # data: only for images
    if attr == "src" and value.strip().lower().startswith("data:") and not value.strip().lower().startswith(
            ("data:image/png", "data:image/jpeg", "data:image/gif")):
        return None
    return value


def clean_html(html: str) -> str:
    """HTML without scripts, event handlers, styles or dangerous URLs (``nh3``, i.e. ammonia)."""
    return nh3.clean(html, attributes=_ATTRIBUTES, url_schemes=_SCHEMES, attribute_filter=_attribute_filter,
                     clean_content_tags={"script", "style"})


def sanitise_output(out) -> None:
    """Make one notebook output safe to render (in place)."""
    data = out.get("data") if isinstance(out, dict) else None
    if not isinstance(data, dict):
        return
    for mime in list(data):
        value = data[mime]
        text = "".join(value) if isinstance(value, list) else value
        if not isinstance(text, str):
            continue
        if mime in ("text/html", "text/markdown"):
            data[mime] = clean_html(text)
        elif mime == "image/svg+xml":
            del data[mime]
            data.setdefault("text/plain", tr("[an SVG image, not shown in graded notebooks]"))
        elif "javascript" in mime or mime.startswith("application/vnd.jupyter.widget"):
            del data[mime]
    if not data:
        data["text/plain"] = ""


HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)
SCRUBBED_CHARS = 8        # ScrubHidden removes a line that holds a hidden line this long (not blank, not a lone bracket)
DISTINCTIVE_CHARS = 25    # a hidden line this long is its test's own: the tests require it absent from all a
                          # learner sees (feedback, the release: tests/test_hidden_lines.py); a shorter one may
                          # be any line of code (``for n in chunks:``, ``with torch.no_grad():``)


def hidden_lines(nb, min_chars: int = SCRUBBED_CHARS) -> list[str]:
    """The lines of a notebook's hidden tests (every ``### BEGIN HIDDEN TESTS`` ... ``### END HIDDEN
    TESTS`` block of every cell), stripped, of ``min_chars`` characters or more, longest first."""
    lines = set()
    for cell in nb.cells:
        for block in HIDDEN.findall(cell.get("source", "")):
            lines |= {ln.strip() for ln in block.splitlines() if len(ln.strip()) >= min_chars}
    return sorted(lines, key=len, reverse=True)


def scrub(text: str, lines: list[str]) -> str:
    if not lines or not isinstance(text, str):
        return text
    out = []
    for ln in text.splitlines(keepends=True):
        out.append(tr("[a line of a hidden test, removed]") + "\n" if any(h in ln for h in lines) else ln)
    return "".join(out)


GRADER_ENAMES = (FAULT, TAMPERING, NOT_CONFIRMED, "TestFailed")   # errors the grader writes itself
WITHHELD = ("[output withheld from the feedback: this cell ran after the first hidden test, and nothing the "
            "notebook printed from then on is shown]")   # shown as tr(WITHHELD): in the learner's language


def first_hidden(nb) -> int | None:
    """The index of the first test cell with hidden tests (the grader's release puts them there)."""
    for i, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution") and HIDDEN.search(
                cell.get("source", "")):
            return i
    return None


class WithholdAfterHidden(Preprocessor):
    """From the first hidden test on, keep only what the grader wrote (see the module's docstring)."""

    enabled = Bool(True)

    def preprocess(self, nb, resources):
        start = first_hidden(nb)
        if start is None:
            return nb, resources
        for cell in nb.cells[start:]:
            if cell.cell_type != "code":
                continue
            meta = cell.metadata.get("nbgrader", {})
            test = meta.get("grade") and not meta.get("solution")
            kept = [o for o in cell.get("outputs", [])
                    if test and o.get("output_type") == "error" and o.get("ename") in GRADER_ENAMES]
            if not test and cell.get("outputs"):
                with speaking(notebook_language(nb)):
                    kept = [nbformat.v4.new_output("stream", name="stdout", text=tr(WITHHELD) + "\n")]
            cell.outputs = kept
        return nb, resources


class ScrubHidden(Preprocessor):
    """Remove every line of a hidden test from every output (runs before ClearHiddenTests)."""

    enabled = Bool(True)

    def preprocess(self, nb, resources):
        lines = hidden_lines(nb)
        if not lines:
            return nb, resources
        with speaking(notebook_language(nb)):
            self._scrub(nb, lines)
        return nb, resources

    @staticmethod
    def _scrub(nb, lines: list[str]) -> None:
        for cell in nb.cells:
            for out in cell.get("outputs", []):
                if "text" in out:
                    out["text"] = scrub(out["text"], lines)
                if "evalue" in out:
                    out["evalue"] = scrub(out["evalue"], lines)
                if "traceback" in out:
                    out["traceback"] = [scrub(t, lines) for t in out["traceback"]]
                for mime, value in list(out.get("data", {}).items()):
                    if isinstance(value, str):
                        out["data"][mime] = scrub(value, lines)


class ShortTracebacks(Preprocessor):
    """Replace tracebacks in graded cells by one line, so feedback never shows hidden tests."""

    enabled = Bool(True)  # nbconvert preprocessors are disabled by default

    def preprocess_cell(self, cell, resources, index):
        if cell.metadata.get("nbgrader", {}).get("grade"):
            for output in cell.get("outputs", []):
                if output.output_type == "error":
                    output.traceback = [f"{output.ename}: {output.evalue}"]
        return cell, resources


class FaultNote(Preprocessor):
    """Put the submission's faults (hang, dead kernel, tampering, ...) at the top of its feedback."""

    enabled = Bool(True)

    def preprocess(self, nb, resources):
        report = nb.metadata.get(META, {})
        lines = list(report.get("faults", []))
        with speaking(notebook_language(nb)):
            for exercise in sorted({exercise_of(test) for test in report.get("tampering", {})}):
                lines.append(tr("{exercise}: the notebook changed what the tests rely on (your instructor's report "
                                "says what); this exercise gets 0", exercise=exercise))
            note = tr("**Grading note.**")
        if lines:
            text = note + " " + " ".join(f"{ln}." if not ln.endswith((".", "。")) else ln for ln in lines)
            nb.cells.insert(0, nbformat.v4.new_markdown_cell(clean_html(text)))
        return nb, resources


_BODY = re.compile(r"(<body[^>]*>)(.*)(</body>)", re.S | re.I)


_TOC_ENTRY = re.compile(r'(<a href="#(?:comment-)?)([A-Za-z0-9_-]+)(">)(Test cell|Written response|Coding free-response|Task|Comment)(</a>)')


# nbgrader's names of a graded cell, as the contents list shows them (in the learner's language).
_KINDS = {"Test cell": lambda: tr("test cell"), "Written response": lambda: tr("written response"),
          "Coding free-response": lambda: tr("coding free-response"), "Task": lambda: tr("task")}


def _toc_name(m: re.Match) -> str:
    gid, kind = m.group(2), m.group(4)
    if kind == "Comment":
        what = tr("comment on {gid}", gid=gid)
    elif gid.endswith(("-visible", "-hidden")):
        ex, part = gid.rsplit("-", 1)
        what = tr("{exercise}: visible tests", exercise=ex) if part == "visible" else tr(
            "{exercise}: hidden tests", exercise=ex)
    else:
        what = tr("{gid}: {kind}", gid=gid, kind=_KINDS[kind]())
    return f"{m.group(1)}{gid}{m.group(3)}{what}{m.group(5)}"


TO_BE_MARKED = "to be marked by your instructor"


def mark_pending(html: str, pending: dict[str, float], lang: str | None = None) -> str:
    """Each written answer still waiting for a hand mark (``{grade_id: points}``) reads "to be marked by
    your instructor" (in ``lang``, the learner's language, where it is given) where nbgrader's page says
    "Score: 0.0 / 2.0", in the contents list and above the answer: a learner must not read a mark not
    yet given as a zero."""
    with speaking(lang):
        return _mark_pending(html, pending)


def _mark_pending(html: str, pending: dict[str, float]) -> str:
    for gid, points in pending.items():
        shown = tr("({pending}; {points} points)", pending=tr(TO_BE_MARKED), points=f"{points:g}")
        above = tr("{pending} ({points} points)", pending=tr(TO_BE_MARKED), points=f"{points:g}")
        html = re.sub(rf'(<a href="#{re.escape(gid)}">[^<]*</a>) \(Score: [0-9.]+ / [0-9.]+\)',
                      lambda m, shown=shown: f"{m.group(1)} {shown}", html)
        html = re.sub(rf'(<a name="{re.escape(gid)}"></a>.*?<span class="pull-right">\s*)Score: [0-9.]+ / [0-9.]+',
                      lambda m, above=above: f"{m.group(1)}{above}", html,
                      count=1, flags=re.S)
    return html


_SCORE = re.compile(r"\bScore: ([0-9.]+) / ([0-9.]+)")


def _template_words(html: str) -> str:
    """nbgrader's own words on the page (its labels, "Score: 1.0 / 2.0") in the language of the messages."""
    html = _SCORE.sub(lambda m: tr("Score: {score} / {max}", score=m.group(1), max=m.group(2)), html)
    for english, said in (("Student's answer", tr("Student's answer")), ("Grade cell: ", tr("Grade cell: "))):
        html = html.replace(f'<span class="nbgrader-label">{english}</span>',
                            f'<span class="nbgrader-label">{said}</span>')
    return html.replace('rel="noopener noreferrer">(Top)</a>', f'rel="noopener noreferrer">{tr("(Top)")}</a>')


# nbconvert's classic page scrolls a long output line sideways, so an error message with its hint
# reads as cut off in a printout or a narrow window: wrap it instead.
_WRAP = "<style>div.output_area pre { white-space: pre-wrap; overflow-wrap: anywhere; }</style>"


def name_exercises(html: str) -> str:
    """nbgrader's contents list names every graded cell "Test cell" or "Written response": name it by
    its exercise instead ("ex3_attention: hidden tests", "q1_scale: written response"); and long
    output lines wrap instead of running off the page."""
    html = _TOC_ENTRY.sub(_toc_name, html)
    if language() is not None:
        html = _template_words(html)
    if _WRAP not in html:
        html = html.replace("</head>", _WRAP + "\n</head>", 1)
    return html


# nbconvert's page loads MathJax 2 from a CDN (offline, the learner sees raw TeX). The feedback carries
# MathJax 3 (the SVG build: no font files to fetch) inside the page instead, from the pinned
# django-static-mathjax package (pyproject.toml; MathJax 3.2.2, the version the site serves), and a
# Content-Security-Policy that lets run only these two scripts, by their hashes: no other script, no
# javascript: link, nothing fetched from anywhere.
_CDN_MATHJAX = re.compile(r'<script src="https?://[^"]*mathjax[^"]*">\s*</script>', re.I)
# Bootstrap's inlined CSS names an icon font in ../fonts/, which no feedback page has: drop the rule.
_GLYPH_FONT = re.compile(r"@font-face\s*\{[^}]*Glyphicons[^}]*\}", re.I)
_MATHJAX2_CONFIG = re.compile(r'<script type="text/x-mathjax-config">.*?</script>', re.S | re.I)
_MATHJAX3_CONFIG = ("window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']], "
                    "displayMath: [['$$', '$$'], ['\\\\[', '\\\\]']], processEscapes: true, "
                    "packages: {'[-]': ['require', 'autoload', 'html']}}, svg: {fontCache: 'global'}, "
                    "startup: {typeset: true}};")


def _mathjax_source() -> str | None:
    try:
        import mathjax
    except ImportError:
        return None
    path = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5" / "tex-svg.js"
    return path.read_text(encoding="utf-8") if path.exists() else None


def _sha256(script: str) -> str:
    import base64
    import hashlib

    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode() + "'"


_CSP_META = '<meta http-equiv="Content-Security-Policy"'


def offline_math(html: str) -> str:
    """The page with MathJax 3 inside it instead of MathJax 2 from a CDN, under a strict CSP: always
    (without the MathJax package, one that lets no script run). Whether the page has its policy
    already is read from its ``<head>`` (nbconvert's own), never from the body, which holds the
    learner's text: a cell that says "Content-Security-Policy" cannot turn the policy off."""
    end = html.find("</head>")
    if _CSP_META in html[:max(end, 0)]:
        return html
    html = _CDN_MATHJAX.sub("", html)
    html = _MATHJAX2_CONFIG.sub("", html)
    html = _GLYPH_FONT.sub("", html)
    code = _mathjax_source()
    scripts = [] if code is None else [_MATHJAX3_CONFIG, code.replace("</script", "<\\/script")]
    allowed = " ".join(_sha256(s) for s in scripts) or "'none'"
    csp = (f"default-src 'none'; script-src {allowed}; style-src 'unsafe-inline'; img-src data:; font-src data:")
    head = f'{_CSP_META} content="{csp}">\n' + "".join(f"<script>{s}</script>\n" for s in scripts)
    if "</head>" not in html:   # no head to put it in: before everything else, where a browser makes one
        return head + html
    return html.replace("</head>", head + "</head>", 1)


def sanitise_html_file(path: Path, lang: str | None = None) -> None:
    """Clean the ``<body>`` of a feedback HTML file in place (the ``<head>`` is nbconvert's own), name
    each entry of its contents list by its exercise (in ``lang``, the learner's language, where it is
    given), and make its math render offline."""
    with speaking(lang):
        text = name_exercises(path.read_text(encoding="utf-8", errors="replace"))
    m = _BODY.search(text)
    text = clean_html(text) if m is None else text[:m.start(2)] + clean_html(m.group(2)) + text[m.end(2):]
    path.write_text(offline_math(text), encoding="utf-8")   # after the cleaning, which would remove it
