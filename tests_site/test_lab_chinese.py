"""The Chinese learner in JupyterLab (headless Chromium): `make lab LANG=zh_CN`'s own server on a copy of
chapter 3 of the Chinese release (notebooks-zh_CN/).

JupyterLab's interface is Chinese (the language pack's locale, from lab/zh_CN); the chapter's text is;
a wrong answer to the first exercise gets the visible test's Chinese hint (the translated message, with
its numbers filled in by the test's own code); the right answer passes. Screenshots:
site/_build/screenshots/lab_zh_*.png.
"""
from __future__ import annotations

import nbformat
import pytest
from test_lab import (
    CHAPTER,
    EXERCISE,
    FUNCTION,
    ROOT,
    _cell_index,
    _solution_source,
    _wait_idle,
    running_lab,
)

RELEASE = ROOT / "notebooks-zh_CN"
# The answer without the division by sqrt(d_k): its visible test must say so, in Chinese.
WRONG = f"def {FUNCTION}(q, k):\n    return q @ k.transpose(-2, -1)\n"


@pytest.fixture(scope="module")
def lab_zh(tmp_path_factory, chromium_path):
    with running_lab(tmp_path_factory.mktemp("lab-zh"), RELEASE, ("LANG=zh_CN",)) as running:
        yield running


def _run(page, cells, index: int) -> None:
    """Select cell ``index`` and run it (Shift+Enter), then wait for the kernel."""
    cells.nth(index).scroll_into_view_if_needed()
    cells.nth(index).locator(".jp-InputArea-prompt, .jp-InputPrompt").first.click()
    page.keyboard.press("Shift+Enter")
    _wait_idle(page, 180)


def _type_answer(page, cells, index: int, text: str) -> None:
    cells.nth(index).scroll_into_view_if_needed()
    cells.nth(index).locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(text)
    page.keyboard.press("Escape")


def test_chinese_learner_in_jupyterlab(lab_zh, watch, screenshots):
    base, token, work = lab_zh
    page = watch.page
    release = nbformat.read(work / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    setup = next(i for i, c in enumerate(release.cells) if c.cell_type == "code")
    answer, visible = _cell_index(release, EXERCISE), _cell_index(release, EXERCISE + "-visible")
    cells = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell")

    page.goto(f"{base}lab/tree/{CHAPTER}/{CHAPTER}.ipynb?token={token}", wait_until="load")
    cells.nth(visible).wait_for(state="attached", timeout=120_000)
    _wait_idle(page, 120)
    # JupyterLab itself in Chinese: its menu bar (the zh-CN language pack, chosen by lab/zh_CN).
    for menu in ("文件", "编辑", "运行"):
        assert page.get_by_role("menuitem", name=menu, exact=True).count() == 1, \
            f"JupyterLab's menu bar has no '{menu}': the Chinese language pack is not in use"
    title = release.cells[0].source.splitlines()[0].lstrip("# ").strip()
    assert "缩放点积注意力" in title
    page.locator(".jp-MarkdownOutput h1").filter(has_text=title).first.wait_for(timeout=60_000)
    page.screenshot(path=str(screenshots / "lab_zh_chapter.png"))

    _run(page, cells, setup)
    _type_answer(page, cells, answer, WRONG)
    _run(page, cells, answer)
    _run(page, cells, visible)
    out = cells.nth(visible).locator(".jp-OutputArea")
    out.get_by_text("除以 sqrt(d_k) = 3").first.wait_for(timeout=60_000)
    assert "q = k = 全一向量" in out.inner_text(), f"the visible test's hint is not in Chinese: {out.inner_text()[:800]!r}"
    out.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshots / "lab_zh_hint.png"))

    _type_answer(page, cells, answer, _solution_source())
    _run(page, cells, answer)
    _run(page, cells, visible)
    # make lab LANG=zh_CN gives the kernel COURSE_LANG=zh_CN: the checks' own framing is Chinese too
    out.get_by_text(f"{FUNCTION}：全部").wait_for(timeout=60_000)
    text = out.inner_text()
    assert "项检查通过" in text and "checks passed" not in text and "全一向量" not in text, text[:800]
    page.screenshot(path=str(screenshots / "lab_zh_passes.png"))
    watch.failed = [f for f in watch.failed
                    if not ("/lab/api/workspaces/" in f and f.startswith("PUT ") and "ERR_ABORTED" in f)]
    watch.assert_clean("JupyterLab in Chinese")
