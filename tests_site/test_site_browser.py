"""Every page of the built site in headless Chromium, as a reader opens it.

Each page: loads with no console error and no failed request; every request goes to the local
server (any other is aborted and fails the test); MathJax has rendered its math with no error;
every image has loaded. The search page finds "softmax". Screenshots of the index, the
glossary and chapter 3 are written to site/_build/screenshots/.
"""
from __future__ import annotations

import pytest
from test_site_html import CHAPTERS, ROOT, prepare

# The documentation pages too (docs/*.md and CONTRIBUTING.md, as site/prepare.py places them).
DOC_PAGES = sorted(p.rsplit(".", 1)[0] + ".html" for r, p in prepare.site_pages(ROOT).items()
                   if r.startswith("docs/") or r in prepare.DOCS_PAGES)
PAGES = ["index.html", "glossary.html", "benchmarks.html"] + [f"chapters/{ch}.html" for ch in CHAPTERS] + DOC_PAGES
SHOT = {"index.html": ("index.png", True), "glossary.html": ("glossary.png", False),
        "chapters/ch03_scaled_dot_product.html": ("ch03_scaled_dot_product.png", False)}

# Resolves when MathJax has typeset the page (or at once on a page that does not load it).
MATHJAX_DONE = """async () => {
  if (!window.MathJax) return {loaded: false};
  await MathJax.startup.promise;
  return {loaded: true,
          containers: document.querySelectorAll('mjx-container').length,
          errors: Array.from(document.querySelectorAll('mjx-merror, [data-mjx-error]'))
                       .map(e => e.getAttribute('data-mjx-error') || e.textContent).slice(0, 5),
          raw: document.querySelectorAll('.math:not(:has(mjx-container))').length};
}"""
BROKEN_IMAGES = """() => Array.from(document.images)
  .filter(i => !i.complete || i.naturalWidth === 0).map(i => i.currentSrc || i.src)"""


@pytest.mark.parametrize("path", PAGES)
def test_page_loads_cleanly_with_math_and_images(site_server, watch, screenshots, path):
    page = watch.page
    response = page.goto(site_server + path, wait_until="load")
    assert response is not None and response.ok, f"{path}: HTTP {response and response.status}"
    page.wait_for_load_state("networkidle")
    math = page.evaluate(MATHJAX_DONE)
    if path.startswith("chapters/"):
        assert math["loaded"], f"{path}: MathJax did not load"
        assert math["containers"] > 0, f"{path}: no formula rendered by MathJax"
        assert not math["errors"], f"{path}: MathJax errors {math['errors']}"
        assert math["raw"] == 0, f"{path}: {math['raw']} formula(s) left as TeX source"
    images = page.evaluate("document.images.length")
    broken = page.evaluate(BROKEN_IMAGES)
    assert not broken, f"{path}: images not loaded: {broken}"
    if path.startswith("chapters/") and path != "chapters/ch02_attention_seq2seq.html":
        assert images > 0, f"{path}: no figure on the page"
    if path in SHOT:
        name, full = SHOT[path]
        page.screenshot(path=str(screenshots / name), full_page=full)
    page.wait_for_timeout(200)   # late console errors (deferred scripts)
    watch.assert_clean(path)


def test_search_finds_softmax(site_server, watch):
    page = watch.page
    page.goto(site_server + "search.html?q=softmax", wait_until="load")
    results = page.locator("#search-results ul.search li")
    results.first.wait_for(timeout=30_000)
    hrefs = results.locator("a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
    assert any("ch03_scaled_dot_product" in h for h in hrefs), \
        f"searching 'softmax' does not find chapter 3: {hrefs}"
    watch.assert_clean("search.html?q=softmax")
