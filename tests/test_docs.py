"""The README and the docs (issue 32): short README, every link resolves, no number typed by hand.

A count the README or a page of ``docs/`` states (chapters, exercises, points, test cells) is
computed here from ``solutions/`` and compared; a limit is compared with the code that sets it.
In the text a count is written as ``<!-- n:NAME -->VALUE<!-- /n -->`` (invisible once rendered),
or left out. Times measured on one machine live only in docs/performance.md, dated.
"""
from __future__ import annotations

import posixpath
import re
import sys
import tomllib
from datetime import date
from functools import cache
from pathlib import Path

import nbformat
import pytest
from notebook_helpers import chapter_slugs, heading_slugs

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
LINKED = [*DOCS, ROOT / "GLOSSARY.md"]
PERFORMANCE = ROOT / "docs" / "performance.md"   # the one page with measured times
MARKER = re.compile(r"<!-- n:(\w+) -->(.*?)<!-- /n -->")
LINK = re.compile(r"(?<!!)\[([^\]\n]*)\]\(([^)\s]+)\)")
NUMBER_WORDS = "two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _code_out(text: str) -> str:
    """``text`` without its fenced code blocks and inline code (an example is not a statement)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`(?:[^`\n]|\n(?!\n))+`", "", text)      # a code span may wrap, not cross a paragraph


def _prose(text: str) -> str:
    """``text`` without code and without the values inside count markers."""
    return MARKER.sub("", _code_out(text))


@cache
def chapter_facts() -> dict[str, dict[str, int]]:
    """Per chapter, from the executed solution notebook's nbgrader metadata: autograded exercises
    (answer cells) and their points (on the test cells), test cells, written answers and points."""
    facts = {}
    for path in sorted((ROOT / "solutions").glob("ch*/ch*.ipynb")):
        if path.stem != path.parent.name:
            continue
        f = dict.fromkeys(("exercises", "points", "test_cells", "written", "written_points"), 0)
        for cell in nbformat.read(path, as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("solution") and not meta.get("grade"):
                f["exercises"] += 1
            elif meta.get("grade") and not meta.get("solution"):
                f["test_cells"] += 1
                f["points"] += int(meta.get("points", 0))
            elif meta.get("grade") and meta.get("solution"):
                f["written"] += 1
                f["written_points"] += int(meta.get("points", 0))
        facts[path.stem] = f
    assert facts, "no executed chapters in solutions/"
    return facts


@cache
def values() -> dict[str, int]:
    """Every number a ``<!-- n:NAME -->`` marker may state, computed from the course itself."""
    from course_grading import course, execution, gradebook, intake, sandbox
    per = chapter_facts().values()
    mib = 2 ** 20
    return {
        "chapters": len(chapter_facts()),
        "exercises": sum(f["exercises"] for f in per),
        "test_cells": sum(f["test_cells"] for f in per),
        "points": sum(f["points"] for f in per),
        "written": sum(f["written"] for f in per),
        "cell_output_mib": execution.CELL_OUTPUT_BYTES // mib,
        "notebook_output_mib": execution.NOTEBOOK_OUTPUT_BYTES // mib,
        "message_mib": execution.MESSAGE_BYTES // mib,
        "submission_mib": intake.MAX_NOTEBOOK_BYTES // mib,
        "outputs_note_mib": intake.OUTPUTS_NOTE_BYTES // mib,
        "json_values": intake.MAX_JSON_VALUES,
        "json_containers": intake.MAX_JSON_CONTAINERS,
        "shm_mib": sandbox.SHM_MB,
        "box_output_kib": sandbox.BOX_OUTPUT_BYTES // 2**10,
        "cell_chars": intake.MAX_CELL_CHARS,
        "text_chars": intake.MAX_TEXT_CHARS,
        "record_mib": execution.ONE_RECORD_BYTES // mib,
        "records_mib": execution.RECORD_BYTES // mib,
        "grader_memory_mib": course.GRADER_MEMORY_MB,
        "backups_kept": gradebook.BACKUPS_KEPT,
        **grader_size(),
    }


def grader_size() -> dict[str, int]:
    """The grader's size (docs/grader.md, per release): its modules (``__init__`` and ``__main__`` not
    counted) and the lines of all its files."""
    files = sorted((ROOT / "grader" / "course_grading").glob("*.py"))
    return {"grader_modules": sum(p.stem not in ("__init__", "__main__") for p in files),
            "grader_lines": sum(len(p.read_text(encoding="utf-8").splitlines()) for p in files)}


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_every_stated_count_is_the_computed_one(doc):
    text = _code_out(doc.read_text(encoding="utf-8"))
    wrong = []
    for name, shown in MARKER.findall(text):
        assert name in values(), f"{_name(doc)}: no value is computed for <!-- n:{name} -->"
        if shown.strip() != str(values()[name]):
            wrong.append(f"<!-- n:{name} -->{shown}<!-- /n --> should say {values()[name]}")
    assert not wrong, f"{_name(doc)}:\n" + "\n".join(wrong)
    # A line that starts with a comment is an HTML block in Markdown: it would break the paragraph.
    starts = [ln for ln in text.splitlines() if ln.lstrip().startswith("<!-- n:")]
    assert not starts, f"{_name(doc)}: a count marker starts a line (put a word before it): {starts}"


# performance.md states dated measurements, the counts of each measured run included.
@pytest.mark.parametrize("doc", [d for d in DOCS if d != PERFORMANCE], ids=_name)
def test_no_count_is_typed_by_hand(doc):
    """'78 test cells', 'seven chapters', '35 browser tests': a count outside a marker goes stale."""
    prose = _prose(doc.read_text(encoding="utf-8"))
    nouns = r"(?:browser |test |hidden |visible )?(?:tests?|test cells?|cells|chapters|exercises|checks|points|wrong answers|mutants)"
    found = re.findall(rf"\b(?:\d+|{NUMBER_WORDS})\s+{nouns}\b", prose, flags=re.I)
    # "the 1 + 2 points" of an exercise's heading is not a count of the course; none is in the docs.
    assert not found, (f"{_name(doc)} types counts by hand: {found}; wrap each in <!-- n:NAME -->…<!-- /n --> "
                       f"(see tests/test_docs.py) or drop it")


# performance.md is the page for measured times.
@pytest.mark.parametrize("doc", [d for d in DOCS if d != PERFORMANCE], ids=_name)
def test_measured_times_only_in_performance_md(doc):
    lines = []
    text = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.M | re.S)
    for line in text.splitlines():
        if line.startswith("|") and "`GRADING_" in line:
            continue      # the limits table: defaults, compared with the code below
        line = _prose(line)
        lines += re.findall(r"\b\d+(?:\.\d+)?\s?(?:s|ms|min|minutes?|seconds?|hours?)\b", line)
    assert not lines, f"{_name(doc)} states times {lines}: measured ones go in docs/performance.md, dated"


def test_performance_md_dates_its_measurements():
    text = PERFORMANCE.read_text(encoding="utf-8")
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        title = section.splitlines()[0]
        assert re.search(r"\b20\d\d-\d\d-\d\d\b", section), f"performance.md, {title}: no date"


def test_the_grading_limits_table_is_the_code_s():
    from course_grading.sandbox import Limits
    text = (ROOT / "docs" / "grading.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\|[^|]+\|\s*([\d.]+)(?:\s*\w+)?\s*\|\s*`GRADING_(\w+)`\s*\|$", text, flags=re.M)
    defaults = Limits()
    assert {name.lower() for _, name in rows} == {f for f in vars(defaults)}, rows
    for shown, name in rows:
        assert float(shown) == getattr(defaults, name.lower()), f"GRADING_{name}: the docs say {shown}"


def test_the_readme_chapter_table_counts_exercises_and_points():
    rows = re.findall(r"^\| (\d+) \| \[`(ch\d\d_\w+)`\]\(notebooks/\2/\2\.ipynb\) \|.*\| ([^|]+) \| [^|]+ \|$",
                      README.read_text(encoding="utf-8"), flags=re.M)
    assert [ch for _, ch, _ in rows] == list(chapter_facts()), "the README's table lacks a chapter or its order"
    for number, ch, cell in rows:
        f = chapter_facts()[ch]
        assert int(number) == int(ch[2:4]), f"{ch} is row {number}"
        want = f"{f['exercises']} autograded ({f['points']})"
        if f["written"]:
            want += f" + {f['written']} written ({f['written_points']})"
        assert cell.strip() == want, f"README, {ch}: the table says {cell.strip()!r}, the notebook {want!r}"


def test_the_readme_states_each_chapter_s_estimated_time_from_tools_learner_time():
    """Issue 52: the learner's time per chapter, an estimate from the chapter's own counts
    (tools/learner_time.py); the README quotes it and tools/learner_time.md shows the counts and rates,
    both current: a chapter that grows moves its estimate, and this fails until both are rewritten."""
    sys.path.insert(0, str(ROOT / "tools"))
    import learner_time
    table = (ROOT / "tools" / "learner_time.md").read_text(encoding="utf-8")
    assert table == learner_time.table(), "tools/learner_time.md is stale: python tools/learner_time.py"
    rows = dict(re.findall(r"^\| \d+ \| \[`(ch\d\d_\w+)`\].*\| ([^|]+) \|$", README.read_text(encoding="utf-8"), flags=re.M))
    estimates = {name: learner_time.hours(c) for name, c in learner_time.chapters().items()}
    assert {k: v.strip() for k, v in rows.items()} == estimates, "the README's time column is not tools/learner_time.py's"
    assert learner_time.hours(dict(prose_words=0, code_lines=0, exercises=1, solution_lines=40, written=0)) == "≈ 2 h"


def _slugs(path: Path) -> set[str]:
    """GitHub's (and MyST's) anchors of a markdown file's headings."""
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    return heading_slugs(m.group(1) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M))


def _chapter_slugs(chapter: str) -> set[str]:
    """The anchors of a chapter's headings (its text source's markdown: ``# ## Heading``)."""
    return chapter_slugs((ROOT / "solutions" / chapter / f"{chapter}.py").read_text(encoding="utf-8"))


@pytest.mark.parametrize("doc", LINKED, ids=_name)
def test_every_relative_link_resolves(doc):
    """Each relative link names a file of the repository, and its anchor a heading there."""
    text = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.M | re.S)
    broken = []
    for _, target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue                                   # http(s), mailto
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists():
            broken.append(f"{target} (no such file)")
            continue
        if anchor and file.suffix == ".md" and anchor not in _slugs(file):
            broken.append(f"{target} (no heading with that anchor)")
        if anchor and file.suffix == ".ipynb" and anchor not in _chapter_slugs(file.stem):
            broken.append(f"{target} (no heading with that anchor in the chapter)")
    assert not broken, f"{_name(doc)}: broken links:\n" + "\n".join(broken)


def test_the_readme_is_short_and_says_where_to_go():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 100, "README.md: a newcomer's two minutes; the rest goes in docs/"
    assert "make lab" in text and "make test" in text
    targets = {t.partition("#")[0] for _, t in LINK.findall(text)}
    for doc in [*DOCS[1:], ROOT / "CITATION.cff"]:
        assert _name(doc) in targets, f"README.md does not link {_name(doc)}"


def test_the_docs_are_pages_of_the_site():
    """Every docs page and CONTRIBUTING.md is in the site's table of contents, and once prepared for
    the site each of its links names a page of the site (``make site`` with -W checks the anchors)."""
    sys.path.insert(0, str(ROOT / "site"))
    try:
        import prepare
    finally:
        sys.path.pop(0)
    pages = prepare.site_pages(ROOT)
    index = (ROOT / "site" / "index.md").read_text(encoding="utf-8")
    toc = "\n".join(re.findall(r"```\{toctree\}(.*?)```", index, flags=re.S))
    for doc in DOCS[1:]:
        repo_path = _name(doc)
        assert repo_path in pages, f"{repo_path} is not a page of the site (site/prepare.py)"
        site_path = pages[repo_path]
        assert re.search(rf"^{re.escape(site_path.removesuffix('.md'))}$", toc, flags=re.M), \
            f"{site_path} is in no toctree of site/index.md"
        text = prepare.doc_for_site(doc.read_text(encoding="utf-8"), repo_path, pages)
        text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
        here = Path(site_path).parent
        site_files = set(pages.values())
        for _, target in LINK.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            resolved = posixpath.normpath(posixpath.join(here.as_posix(), target.partition("#")[0]))
            assert resolved in site_files, f"{repo_path} on the site links {target}, not a page of the site"


CFF_KEYS = {"abstract", "authors", "cff-version", "commit", "contact", "date-released", "doi", "identifiers",
            "keywords", "license", "license-url", "message", "preferred-citation", "references", "repository",
            "repository-artifact", "repository-code", "title", "type", "url", "version"}


def test_citation_cff_is_valid_cff_1_2_0():
    yaml = pytest.importorskip("yaml")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert set(cff) <= CFF_KEYS, f"CITATION.cff: keys CFF 1.2.0 does not know: {set(cff) - CFF_KEYS}"
    assert {"cff-version", "message", "title", "authors"} <= set(cff), "CFF 1.2.0's required keys"
    assert cff["cff-version"] == "1.2.0" and cff["message"].strip() and cff["title"].strip()
    assert cff["authors"] and all(isinstance(a, dict) and (a.get("name") or a.get("family-names"))
                                  for a in cff["authors"]), "each author is a person or an entity with a name"
    assert cff["license"] == "MIT" and "MIT" in (ROOT / "LICENSE").read_text().splitlines()[0]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert str(cff["version"]) == version, f"CITATION.cff says {cff['version']}, pyproject.toml {version}"
    released = cff["date-released"]
    assert isinstance(released, date) or re.fullmatch(r"\d{4}-\d\d-\d\d", str(released))
