"""Write the course site's source folder: the learner's version of every executed chapter.

``make site`` runs ``python site/prepare.py`` and then Sphinx (site/conf.py) on what it wrote.
For each chapter it reads the *executed* solution notebook ``solutions/chNN_*/chNN_*.ipynb``
(never re-executed) and applies nbgrader's own ``ClearSolutions`` and ``ClearHiddenTests``, the
steps that make the student release, but keeps the stored outputs: a page shows the exercise
stubs a learner gets, with the figures and numbers of the solution run, exactly as the released
notebook shows them before the learner runs a cell (both from ``course_utils.stored_run``).
It also copies the index page, the glossary (GLOSSARY.md, its links rewritten from the
repository's notebooks to the site's chapters), the last ``make bench`` tables, and the course's
documentation (``docs/*.md`` and CONTRIBUTING.md), whose links to pages the site has are pointed at
those pages and whose links to other files of the repository become the file's path as text.

Usage: ``python site/prepare.py [--root ROOT] [--out OUT]`` (default out: site/_build/src).
"""
from __future__ import annotations

import argparse
import posixpath
import re
import shutil
from pathlib import Path

import nbformat

from course_utils.i18n.catalogue import po_path, read, translations
from course_utils.i18n.notebooks import anchors, titles, translate_markdown, translated_chapters
from course_utils.i18n.segments import markdown_blocks
from course_utils.i18n.sources import CAPTION
from course_utils.i18n.terms import chinese_words
from course_utils.stored_run import (  # noqa: F401  (the tests read them here too)
    HIDDEN_BEGIN,
    LEARNER_VERDICT,
    SOLUTION_BEGIN,
    STUB_VERDICT,
    is_test_cell,
    learner_version,
    stub_verdicts,
)

ROOT = Path(__file__).resolve().parent.parent
# GLOSSARY.md links a term to a chapter section in the repository's student notebook
# (notebooks/chNN_x/chNN_x.ipynb#anchor); on the site the same section is chapters/chNN_x.ipynb.
REPO_LINK = re.compile(r"\]\((?:\./)?notebooks/(ch\d\d_\w+)/\1\.ipynb(#[^)\s]*)?\)")
# The same link with its label, for the glossary in another language: [label](notebooks/chNN/chNN.ipynb#anchor).
REPO_LINK_LABELLED = re.compile(r"\[[^\]\n]*\]\((?:\./)?notebooks/(ch\d\d_\w+)/\1\.ipynb(#[^)\s]*)?\)")
# The Chinese site's search dictionary (site/conf.py hands it to jieba through html_search_options).
SEARCH_TERMS = "_search_terms.txt"
# How a link of the glossary names a chapter, by language.
CHAPTER_LABEL = {"zh_CN": "第 {n} 章"}
# The chapters point to the last `make bench` tables in the repository; the site carries them as a page.
BENCH = Path("benchmarks") / "results" / "latest.md"
BENCH_LINK = re.compile(r"\]\((?:\.\./\.\./)?benchmarks/results/latest\.md\)")
# The documentation pages: repository path -> path in the site's source folder.
DOCS_PAGES = {"CONTRIBUTING.md": "contributing.md"}
# A markdown link (not an image): [text](target).
MD_LINK = re.compile(r"(?<!!)\[([^\]\n]*)\]\(([^)\s]+)\)")


def chapters(root: Path) -> list[Path]:
    """The executed solution notebooks, in chapter order."""
    found = sorted(p for p in (root / "solutions").glob("ch*/ch*.ipynb")
                   if p.parent.name == p.stem and ".ipynb_checkpoints" not in p.parts)
    if not found:
        raise SystemExit(f"no executed chapters under {root / 'solutions'}")
    return found


def glossary_for_site(text: str) -> str:
    """GLOSSARY.md with its links to the repository's notebooks pointed at the site's chapters."""
    return REPO_LINK.sub(lambda m: f"](chapters/{m.group(1)}.ipynb{m.group(2) or ''})", text)


def site_pages(root: Path) -> dict[str, str]:
    """Every page of the site that comes from a file of the repository: repository path (posix,
    relative to ``root``) -> path in the site's source folder."""
    pages = {"README.md": "index.md", "GLOSSARY.md": "glossary.md", BENCH.as_posix(): "benchmarks.md"}
    pages.update({f"docs/{p.name}": f"docs/{p.name}" for p in sorted((root / "docs").glob("*.md"))})
    pages.update(DOCS_PAGES)
    for src in chapters(root):
        ch = src.stem
        pages[f"notebooks/{ch}/{ch}.ipynb"] = f"chapters/{ch}.ipynb"
    return pages


def doc_for_site(text: str, repo_path: str, pages: dict[str, str]) -> str:
    """A documentation page's markdown for the site: each relative link to a file that is a page of
    the site points at that page (its anchor kept); each link to another file of the repository
    becomes the file's path as text (the site carries only pages). Links in code blocks stay."""
    here = posixpath.dirname(repo_path)
    site_here = posixpath.dirname(pages[repo_path])

    def relink(m: re.Match) -> str:
        label, target = m.group(1), m.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return m.group(0)                                   # a URL, or an anchor on this page
        path, _, anchor = target.partition("#")
        repo_target = posixpath.normpath(posixpath.join(here, path))
        if repo_target in pages:
            rel = posixpath.relpath(pages[repo_target], site_here or ".")
            return f"[{label}]({rel}{'#' + anchor if anchor else ''})"
        shown = f"`{repo_target}`"
        return shown if label.strip("`") == repo_target or label.strip("`") == path else f"{label} ({shown})"

    parts = re.split(r"(^```.*?^```)", text, flags=re.M | re.S)
    return "".join(part if part.startswith("```") else MD_LINK.sub(relink, part) for part in parts)


def chapter_notebooks(root: Path, lang: str | None) -> dict[str, nbformat.NotebookNode]:
    """The executed chapters, by name: as stored (English), or in ``lang`` from the catalogues
    (their cells, outputs and links otherwise the same)."""
    if lang:
        return translated_chapters(root, lang, [src.stem for src in chapters(root)])
    return {src.stem: nbformat.read(src, as_version=4) for src in chapters(root)}


def glossary_in(lang: str, text: str, english: dict[str, nbformat.NotebookNode],
                translated: dict[str, nbformat.NotebookNode], table: dict[str, str]) -> str:
    """The glossary page in ``lang``: its introduction from the ``site`` catalogue, its terms as they are
    (both languages), each link to a chapter section pointed at the translated section and named by it."""
    intro_end = text.index("\n## ") + 1
    # The introduction's Chinese summary for English readers goes: the translated introduction says it.
    intro = "".join(b.text for b in markdown_blocks(text[:intro_end])
                    if b.translatable or not re.search(r"[\u4e00-\u9fff]", b.text))
    intro = translate_markdown(intro, table, [], lang=lang)
    named = {ch: titles(nb, translated[ch]) for ch, nb in english.items()}
    maps = {ch: anchors(nb, translated[ch]) for ch, nb in english.items()}

    def relabel(m: re.Match) -> str:
        ch, anchor = m.group(1), (m.group(2) or "#")[1:]
        number = int(ch[2:4])
        title = named.get(ch, {}).get(anchor)
        new_anchor = maps.get(ch, {}).get(anchor, anchor)
        label = CHAPTER_LABEL[lang].format(n=number) + (f" · {title}" if title else "")
        return f"[{label}](chapters/{ch}.ipynb{'#' + new_anchor if anchor else ''})"
    return intro + REPO_LINK_LABELLED.sub(relabel, text[intro_end:])


def prepare(root: Path, out: Path, lang: str | None = None) -> list[Path]:
    """Write the site's source folder ``out`` from the course at ``root`` (in ``lang`` where it is
    given: chapters, front page and glossary translated, documentation pages in English); return the
    chapters."""
    if out.exists():
        shutil.rmtree(out)
    (out / "chapters").mkdir(parents=True)
    written = []
    notebooks = chapter_notebooks(root, lang)
    for name, nb in notebooks.items():
        nb = learner_version(nb)
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                cell.source = BENCH_LINK.sub("](../benchmarks.md)", cell.source)
        target = out / "chapters" / f"{name}.ipynb"
        nbformat.write(nb, target)
        written.append(target)
    index = (root / "site" / "index.md").read_text(encoding="utf-8")
    glossary = (root / "GLOSSARY.md").read_text(encoding="utf-8")
    if lang:
        # The glossary's terms as words of the search index (jieba would cut 多头注意力 into 多头 and 注意力).
        (out / SEARCH_TERMS).write_text("".join(f"{w} 100000 n\n" for w in chinese_words()), encoding="utf-8")
        table = translations(read(po_path(root, lang, "site")))
        index = translate_markdown(index, table, [], lang=lang)
        index = CAPTION.sub(lambda m: f":caption: {table.get(m.group(1), m.group(1))}", index)
        english = chapter_notebooks(root, None)
        glossary = glossary_in(lang, glossary, english, notebooks, table)
    else:
        glossary = glossary_for_site(glossary)
    (out / "index.md").write_text(index, encoding="utf-8")
    # The glossary's links to the README (a term the course's front page teaches) point at the site's front page.
    glossary = glossary.replace("](README.md)", "](index.md)")
    (out / "glossary.md").write_text(glossary, encoding="utf-8")
    shutil.copy(root / BENCH, out / "benchmarks.md")
    pages = site_pages(root)
    for repo_path, site_path in pages.items():
        if repo_path.startswith("docs/") or repo_path in DOCS_PAGES:
            target = out / site_path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(doc_for_site((root / repo_path).read_text(encoding="utf-8"), repo_path, pages),
                              encoding="utf-8")
    return written


def main() -> None:
    """Command line: see the module's docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--out", type=Path, default=None,
                        help="default: site/_build/src, or site/_build/src-LANG")
    parser.add_argument("--lang", default=None, help="a language of locale/ (zh_CN): the site in it")
    args = parser.parse_args()
    out = args.out or ROOT / "site" / "_build" / ("src" + (f"-{args.lang}" if args.lang else ""))
    written = prepare(args.root.resolve(), out.resolve(), args.lang)
    print(f"site/prepare.py: {len(written)} chapters (learner's version, stored outputs"
          f"{', ' + args.lang if args.lang else ''}) -> {out}")


if __name__ == "__main__":
    main()
