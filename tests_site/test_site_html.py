"""The built site's HTML (no browser): the learner's version only, every chapter, a glossary whose
every link reaches a heading, no asset from outside."""
from __future__ import annotations

import html
import re
import sys
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "site"))
import prepare  # noqa: E402  (site/prepare.py: the chapters and the learner's version)

CHAPTERS = [p.stem for p in prepare.chapters(ROOT)]
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
# Terms the issue names (the notes' words): each must have its own entry in GLOSSARY.md.
REQUIRED_TERMS = ["注意力", "多头注意力", "自注意力", "交叉注意力", "相对位置编码", "掩码", "教师强制",
                  "束搜索", "键值缓存", "分组查询注意力"]


class _Text(HTMLParser):
    """The text of a page (scripts and styles left out), and its element ids and links."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.ids: set[str] = set()
        self.links: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag in ("script", "style"):
            self._skip += 1

    def handle_endtag(self, tag):
        if tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)

    @property
    def text(self) -> str:
        return "".join(self.parts)


def parse(path: Path) -> _Text:
    """Parse one HTML file."""
    p = _Text()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def secret_lines(chapter: str) -> list[str]:
    """Lines of the chapter's solutions and hidden tests that the learner's release never shows.

    Taken between nbgrader's markers in the solution notebook; lines that also occur in the
    release (docstrings, blank lines, `return` alone) and very short ones are left out, so that
    each line left identifies a solution or a hidden test.
    """
    src = nbformat.read(ROOT / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
    rel = nbformat.read(ROOT / "notebooks" / chapter / f"{chapter}.ipynb", as_version=4)
    released = {ln.strip() for c in rel.cells for ln in c.source.splitlines()}
    secret, inside = [], False
    for cell in src.cells:
        for line in cell.source.splitlines():
            s = line.strip()
            if s.startswith(("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS")):
                inside = True
            elif s.startswith(("### END SOLUTION", "### END HIDDEN TESTS")):
                inside = False
            elif inside and len(s) >= 25 and s not in released and not s.startswith("#"):
                secret.append(s)
    return secret


def leaks(page_text: str, secrets: list[str]) -> list[str]:
    """The secret lines that occur in a page's text (whitespace runs compared as one space)."""
    flat = re.sub(r"\s+", " ", html.unescape(page_text))
    return [s for s in secrets if re.sub(r"\s+", " ", s) in flat]


def test_the_leak_check_can_fail():
    """The check below finds a solution line in a page that shows one (the check itself works)."""
    ch = "ch03_scaled_dot_product"
    secrets = secret_lines(ch)
    assert secrets, f"{ch}: no solution lines found between nbgrader's markers"
    page = f"<pre><span>x =</span> {html.escape(secrets[0])}</pre>"
    assert leaks(parse_text(page), secrets) == [secrets[0]]


def parse_text(markup: str) -> str:
    """The text of an HTML fragment."""
    p = _Text()
    p.feed(markup)
    return p.text


def test_every_chapter_has_a_page_linked_from_the_index(site_html):
    index = parse(site_html / "index.html")
    for ch in CHAPTERS:
        assert (site_html / "chapters" / f"{ch}.html").exists(), f"{ch}: no page on the site"
        assert f"chapters/{ch}.html" in index.links, f"{ch}: not linked from the index's chapter table"
    assert "glossary.html" in index.links, "the index does not link the glossary"


# The site's languages: English at the root, Chinese under zh_CN/ (make site builds both).
LANGS = ["", "zh_CN"]


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_solution_and_no_hidden_test_reaches_a_page(site_html, chapter, lang):
    page = site_html / lang / "chapters" / f"{chapter}.html"
    text = page.read_text(encoding="utf-8")
    for marker in MARKERS:
        assert marker not in text, f"{page}: nbgrader's marker {marker!r} is on the page"
    found = leaks(parse(page).text, secret_lines(chapter))
    assert not found, (f"{page} shows {len(found)} line(s) of the solutions or hidden tests, e.g. "
                       f"{found[:3]}")
    assert "NotImplementedError" in text, f"{page}: no exercise stub (the learner's version?)"


# What only a solved exercise prints: a test cell's verdict and a probe's (issue 32).
SOLVED_OUTPUTS = ("checks passed", "use your implementation")


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_page_shows_an_output_the_stub_could_not_have_produced(site_html, chapter, lang):
    """Under an empty exercise stub, no test cell says its checks passed and no experiment says it
    uses the learner's implementation (site/prepare.py drops or rewrites those outputs)."""
    page = site_html / lang / "chapters" / f"{chapter}.html"
    text = html.unescape(page.read_text(encoding="utf-8"))
    found = [phrase for phrase in SOLVED_OUTPUTS if phrase in text]
    assert not found, f"{page} shows {found}: an output of the solution run, not of the stub"
    assert "not implemented yet: the experiments below use the course_utils reference" in text, \
        f"{page}: no probe says the experiments use the reference"


def test_nothing_else_in_the_build_holds_a_solution(site_html):
    """No notebook or source copy, search index or other file of the build carries a marker."""
    for path in site_html.rglob("*"):
        if path.is_file() and path.suffix in {".html", ".js", ".txt", ".ipynb", ".md", ".json"}:
            if "mathjax" in path.parts:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            for marker in MARKERS:
                assert marker not in text, f"{path}: nbgrader's marker {marker!r}"
    assert not list(site_html.rglob("*.ipynb")), "a notebook was copied into the site"


def test_glossary_has_the_notes_terms_and_both_languages():
    text = (ROOT / "GLOSSARY.md").read_text(encoding="utf-8")
    headings = [ln for ln in text.splitlines() if ln.startswith("## ")]
    for term in REQUIRED_TERMS:
        assert any(h[3:].split(" · ")[0].split("（")[0] == term
                   or term in re.split(r"[ /、（）]+", h[3:].split(" · ")[0]) for h in headings), \
            f"GLOSSARY.md has no entry for {term}"
    entries = text.split("\n## ")[1:]
    assert len(entries) >= len(REQUIRED_TERMS)
    for entry in entries:
        title = entry.splitlines()[0]
        assert " · " in title, f"glossary entry {title!r}: no English term after ' · '"
        assert "- **EN:**" in entry and "- **中文：**" in entry, f"{title}: a definition is missing"
        assert "](notebooks/" in entry or "](README.md)" in entry, \
            f"{title}: no link to a chapter section (or to the README, for a term its front page teaches)"


@pytest.mark.parametrize("lang", LANGS)
def test_every_glossary_link_reaches_a_heading(site_html, lang):
    """Each link of the glossary page goes to a chapter page and an id that a heading there has
    (in Chinese: the translated heading, which the link names)."""
    site_html = site_html / lang
    glossary = parse(site_html / "glossary.html")
    # The navigation links chapters without an anchor; the glossary's own links all have one.
    targets = [h for h in glossary.links if h.startswith("chapters/") and "#" in h]
    repo_links = re.findall(r"\]\((notebooks/[^)]+)\)", (ROOT / "GLOSSARY.md").read_text())
    assert repo_links, "GLOSSARY.md links no chapter section"
    no_anchor = [u for u in repo_links if "#" not in u]
    assert not no_anchor, f"GLOSSARY.md links a whole chapter, not a section: {no_anchor}"
    assert len(targets) == len(repo_links), (f"GLOSSARY.md has {len(repo_links)} links to sections, "
                                             f"its page on the site {len(targets)}")
    pages: dict[str, set[str]] = {}
    bad = []
    for href in targets:
        page, _, anchor = href.partition("#")
        anchor = urllib.parse.unquote(anchor)
        if page not in pages:
            markup = (site_html / page).read_text(encoding="utf-8")
            # A heading's ids: the <section id="..."> around it and the MyST slug (<span id>)
            # just before its <h1>-<h3>.
            pages[page] = set(re.findall(r'<section id="([^"]+)"', markup)) | set(
                re.findall(r'<span id="([^"]+)"></span><h[1-3]', markup))
        if not anchor or anchor not in pages[page]:
            bad.append(href)
    assert not bad, f"glossary links to no heading: {bad}"


def test_no_page_loads_anything_from_outside(site_html):
    """Scripts, styles, images and fonts of every page come from the site itself."""
    for page in site_html.rglob("*.html"):
        markup = page.read_text(encoding="utf-8")
        external = re.findall(r'<(?:script|link|img|iframe|source)\b[^>]*?(?:src|href)="((?:https?:)?//[^"]+)"',
                              markup)
        external = [u for u in external if "rel=\"canonical\"" not in u]
        assert not external, f"{page} loads from outside: {external}"


def test_the_chinese_pages_footer_is_chinese(site_html):
    """The footer of a Chinese page names the authors and the licence in Chinese (site/conf.py)."""
    for page in [site_html / "zh_CN" / "index.html", *sorted((site_html / "zh_CN").rglob("ch0*.html"))[:1]]:
        footer = re.search(r'<footer class="bd-footer-content">.*?</footer>', page.read_text(encoding="utf-8"), re.S)
        assert footer, f"{page} has no footer"
        text = parse_text(footer.group(0))
        assert "本课程的作者" in text and "MIT 许可证" in text, f"{page}'s footer: {text!r}"
        assert "course's authors" not in text and "licence" not in text, f"{page}'s footer is English: {text!r}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_site_shows_the_release_cells_with_the_solution_runs_outputs(chapter):
    """prepare.learner_version gives the release's cells (sources and kinds), outputs kept."""
    src = nbformat.read(ROOT / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
    rel = nbformat.read(ROOT / "notebooks" / chapter / f"{chapter}.ipynb", as_version=4)
    site = prepare.learner_version(nbformat.read(ROOT / "solutions" / chapter / f"{chapter}.ipynb",
                                                 as_version=4))
    assert [(c.cell_type, c.source) for c in site.cells] == [(c.cell_type, c.source) for c in rel.cells], \
        f"{chapter}: the site's cells differ from the release in notebooks/"
    kept = sum(1 for c in site.cells if c.cell_type == "code" and c.outputs)
    stored = sum(1 for c in src.cells if c.cell_type == "code" and c.outputs)
    assert 0 < kept <= stored, f"{chapter}: {kept} code cells with outputs on the site, {stored} stored"
