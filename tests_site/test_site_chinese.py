"""The Chinese site (site/_build/html/zh_CN) in headless Chromium, beside the English one.

Every Chinese page: loads cleanly (no console error, no failed or outside request); is marked
``lang="zh-CN"``; draws its Chinese text with a CJK font (the font Chromium actually used for the
glyphs, asked through the DevTools protocol); has as many rendered formulas and loaded figures as the
English page (the translation changes prose only). Every page, in both languages, has the language
switch, and it leads to the same page in the other language. Searching the Chinese site in Chinese
finds the chapters that teach the word. Screenshots: zh_*.png in site/_build/screenshots/.
"""
from __future__ import annotations

import re

import pytest
from test_site_browser import BROKEN_IMAGES, MATHJAX_DONE, PAGES

ZH = "zh_CN/"
SHOT = {"index.html": "zh_index.png", "glossary.html": "zh_glossary.png",
        "chapters/ch03_scaled_dot_product.html": "zh_ch03_scaled_dot_product.png"}
CJK = re.compile(r"[\u4e00-\u9fff]")
# Chinese text of a page: a paragraph of the article with CJK characters in it.
FIRST_CHINESE_PARAGRAPH = """() => {
  const ps = Array.from(document.querySelectorAll('article p, article h1'));
  const p = ps.find(e => /[\\u4e00-\\u9fff]/.test(e.textContent));
  if (!p) return null;
  p.setAttribute('data-course-probe', '1');
  return p.textContent.slice(0, 80);
}"""


def _fonts_used(page, selector: str) -> list[dict]:
    """The platform fonts Chromium used to draw the text of the first element matching ``selector``."""
    cdp = page.context.new_cdp_session(page)
    try:
        cdp.send("DOM.enable")
        cdp.send("CSS.enable")
        root = cdp.send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
        node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
        return cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    finally:
        cdp.detach()


def _counts(page) -> tuple[int, int]:
    math = page.evaluate(MATHJAX_DONE)
    return (math.get("containers", 0) if math["loaded"] else 0), page.evaluate("document.images.length")


@pytest.mark.parametrize("path", PAGES)
def test_chinese_page_loads_in_chinese_with_the_english_pages_math_and_figures(site_server, watch, screenshots, path):
    page = watch.page
    response = page.goto(site_server + ZH + path, wait_until="load")
    assert response is not None and response.ok, f"{ZH}{path}: HTTP {response and response.status}"
    page.wait_for_load_state("networkidle")
    assert page.evaluate("document.documentElement.lang") == "zh-CN"
    zh_math, zh_images = _counts(page)
    math = page.evaluate(MATHJAX_DONE)
    if math["loaded"]:
        assert not math["errors"], f"{ZH}{path}: MathJax errors {math['errors']}"
        assert math["raw"] == 0, f"{ZH}{path}: {math['raw']} formula(s) left as TeX source"
    assert not page.evaluate(BROKEN_IMAGES), f"{ZH}{path}: images not loaded"
    text = page.evaluate(FIRST_CHINESE_PARAGRAPH)
    if not path.startswith("docs/") and path not in ("contributing.html", "benchmarks.html"):
        assert text, f"{ZH}{path}: no Chinese paragraph: the page is not translated"
        fonts = _fonts_used(page, "[data-course-probe]")
        cjk = [f for f in fonts if re.search(r"CJK|Han|WenQuanYi|Hei|PingFang|YaHei|Noto Sans SC", f["familyName"])]
        assert cjk and sum(f["glyphCount"] for f in cjk) >= len(CJK.findall(text)), (
            f"{ZH}{path}: the Chinese text ({text[:30]!r}) is not drawn with a CJK font: {fonts}")
    if path in SHOT:
        page.screenshot(path=str(screenshots / SHOT[path]), full_page=path == "index.html")
    page.wait_for_timeout(200)
    watch.assert_clean(ZH + path)

    page.goto(site_server + path, wait_until="load")
    page.wait_for_load_state("networkidle")
    en_math, en_images = _counts(page)
    assert (zh_math, zh_images) == (en_math, en_images), (
        f"{path}: the Chinese page has {zh_math} formulas and {zh_images} images, the English one "
        f"{en_math} and {en_images}: the translation lost or added math or a figure")


@pytest.mark.parametrize("path", ["index.html", "glossary.html", "chapters/ch03_scaled_dot_product.html",
                                  "docs/grading.html", "search.html"])
def test_the_language_switch_leads_to_the_same_page_in_the_other_language(site_server, watch, path):
    page = watch.page
    for here, there, label in (("", ZH, "中文"), (ZH, "", "English")):
        page.goto(site_server + here + path, wait_until="load")
        switch = page.locator("a.course-language-switch")
        assert switch.count() == 1, f"{here}{path}: no language switch"
        assert switch.inner_text().strip() == label
        switch.click()
        page.wait_for_load_state("load")
        assert page.url.split("?")[0] == site_server + there + path, (
            f"the switch on {here}{path} leads to {page.url}, not {there}{path}")
    watch.assert_clean(f"language switch on {path}")


@pytest.mark.parametrize("word, chapter", [("注意力", "ch03_scaled_dot_product"), ("多头注意力", "ch04_multihead_mqa_gqa"),
                                           ("束搜索", "ch01_seq2seq_rnn")])
def test_searching_the_chinese_site_in_chinese(site_server, watch, word, chapter):
    page = watch.page
    page.goto(f"{site_server}{ZH}search.html?q={word}", wait_until="load")
    results = page.locator("#search-results ul.search li")
    results.first.wait_for(timeout=30_000)
    hrefs = results.locator("a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
    assert any(chapter in h for h in hrefs), f"searching {word!r} does not find {chapter}: {hrefs[:10]}"
    watch.assert_clean(f"{ZH}search.html?q={word}")
