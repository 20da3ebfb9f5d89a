"""Each chapter's text source (jupytext percent format) and its executed notebook agree.

``solutions/chNN_*/chNN_*.py`` is the file people edit and review; ``make execute`` (or ``make
sync``) brings the ``.ipynb`` up to date from it. These tests fail when the two drift apart:
same cells in the same order, same types, sources and metadata (the nbgrader markers and points
included), same kernel, and the source is exactly what jupytext writes for the notebook (so a
round trip changes nothing). They also check the claims the chapters assert through
``course_utils.claims``, and that no text source reaches the student release.
"""
import ast
import json
import re
import shutil
from pathlib import Path

import jupytext
import nbformat
import pytest

from course_utils import claims

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(ROOT.glob("solutions/ch*/ch*.ipynb"))
FIX = ("edit the .py and run `make sync` (or `make execute`); if you edited the notebook itself, "
       "write it back with `.venv/bin/jupytext --to py:percent {nb}`")


def _source(nb_path: Path) -> Path:
    return nb_path.with_suffix(".py")


def test_every_chapter_has_a_text_source():
    assert NOTEBOOKS, "no chapter notebooks in solutions/"
    for nb_path in NOTEBOOKS:
        assert _source(nb_path).exists(), f"{nb_path.relative_to(ROOT)} has no text source {_source(nb_path).name}"
    for py in ROOT.glob("solutions/ch*/*.py"):
        assert py.with_suffix(".ipynb").exists(), f"{py.relative_to(ROOT)} has no notebook beside it"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_source_and_notebook_have_the_same_cells(nb_path):
    nb = nbformat.read(nb_path, as_version=4)
    src = jupytext.read(_source(nb_path))
    rel = nb_path.relative_to(ROOT)
    fix = FIX.format(nb=rel)
    assert len(src.cells) == len(nb.cells), f"{rel}: {len(nb.cells)} cells, its source {len(src.cells)}: {fix}"
    for i, (a, b) in enumerate(zip(nb.cells, src.cells)):
        where = f"{rel}, cell {i + 1} (counting from 1)"
        assert a.cell_type == b.cell_type, f"{where}: {a.cell_type} in the notebook, {b.cell_type} in the source: {fix}"
        assert a.source == b.source, f"{where}: the code or text differs from the source: {fix}"
        assert dict(a.metadata) == dict(b.metadata), (
            f"{where}: metadata {dict(a.metadata)} in the notebook, {dict(b.metadata)} in the source: {fix}")
    assert nb.metadata.get("kernelspec") == src.metadata.get("kernelspec"), f"{rel}: kernelspec differs: {fix}"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_source_is_exactly_what_jupytext_writes(nb_path):
    text = _source(nb_path).read_text()
    nb = nbformat.read(nb_path, as_version=4)
    nb.metadata["jupytext"] = jupytext.reads(text, fmt="py:percent").metadata["jupytext"]
    assert jupytext.writes(nb, fmt="py:percent") == text, (
        f"{_source(nb_path).relative_to(ROOT)} does not round-trip through its notebook: "
        + FIX.format(nb=nb_path.relative_to(ROOT)))


def test_the_release_holds_no_text_source():
    released = [p for p in (ROOT / "notebooks").rglob("*") if p.is_file()]
    assert released, "notebooks/ is empty: run `make release`"
    extra = [str(p.relative_to(ROOT)) for p in released if p.suffix != ".ipynb"]
    assert not extra, f"the student release must hold notebooks only (a text source holds the solutions): {extra}"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_chapter_asserts_say_what_failed_and_never_time(nb_path):
    # Outside the graded cells, an assert checks an identity (parity, a formula) and says which
    # one failed; a trained number goes through claims.check; a time is printed, never asserted.
    for i, cell in enumerate(nbformat.read(nb_path, as_version=4).cells):
        role = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or role.get("grade") or role.get("solution"):
            continue
        code = "\n".join(ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Assert):
                line = ast.get_source_segment(code, node)
                where = f"{nb_path.name}, cell {i + 1} (counting from 1)"
                assert node.msg is not None, f"{where}: an assert without a message: {line}"
                assert not re.search(r"\b(seconds|time|elapsed)\b", ast.get_source_segment(code, node.test)), (
                    f"{where}: a wall-clock assert: {line}")


def test_a_claim_names_itself_when_it_fails(monkeypatch):
    monkeypatch.delenv(claims.LOG_VARIABLE, raising=False)
    monkeypatch.setenv(claims.MODE_VARIABLE, "strict")
    claims.check("holds", 0.9, above=0.8, below=1.0)
    with pytest.raises(AssertionError, match=r"claim failed: attention keeps long inputs right: measured 0\.7.*above 0\.75"):
        claims.check("attention keeps long inputs right", 0.7, above=0.75)
    with pytest.raises(AssertionError, match="below 0.1"):
        claims.check("small error", float("nan"), below=0.1)
    with pytest.raises(ValueError, match="needs a bound"):
        claims.check("no bound", 1.0)
    with pytest.raises(TypeError, match="one number"):
        claims.check("a list", [1.0, 2.0], above=0)


def test_a_failed_claim_informs_the_learner_and_the_chapter_goes_on(monkeypatch, capsys):
    # The learner's kernel (COURSE_CLAIMS unset or inform): no exception, a notice that says what was
    # expected, what this run gave, the measured spread of that very claim and what it means.
    monkeypatch.delenv(claims.LOG_VARIABLE, raising=False)
    name, spread = next(iter(claims._spreads().items()))
    name = name.split(" [#")[0]
    measured = claims.measured_spread(name)
    assert measured is not None and measured["min"] <= spread["min"] and measured["max"] >= spread["max"]
    for mode in (None, "inform"):
        if mode is None:
            monkeypatch.delenv(claims.MODE_VARIABLE, raising=False)
        else:
            monkeypatch.setenv(claims.MODE_VARIABLE, mode)
        claims.check(name, -123.5, above=1e9)
        out = capsys.readouterr().out
        assert f"Claim not met on this run: {name}" in out
        assert "Expected: above 1e+09." in out and "Your run: -123.5." in out
        assert f"{measured['min']:.4g} to {measured['max']:.4g} over {measured['runs']} runs" in out
        assert "The chapter goes on." in out
        claims.check(name, 2e9, above=1e9)          # a claim that holds: the learner's value beside the range
        out = capsys.readouterr().out
        assert out.startswith(f"Claim met on this run: {name}: your run 2e+09 (expected above 1e+09; ") and (
            f"{measured['min']:.4g} to {measured['max']:.4g} over {measured['runs']} runs" in out), out
        assert out.count("\n") == 1
    claims.check("a claim never measured", 0.9, above=0.5)
    assert capsys.readouterr().out == "Claim met on this run: a claim never measured: your run 0.9 (expected above 0.5).\n"
    monkeypatch.setenv(claims.MODE_VARIABLE, "strict")
    claims.check(name, 2e9, above=1e9)              # where the course tests itself a claim that holds is silent
    assert capsys.readouterr().out == ""
    monkeypatch.delenv(claims.MODE_VARIABLE)
    claims.check("a claim never measured", 0.1, above=0.5)
    assert "no recorded spread" in capsys.readouterr().out
    monkeypatch.setenv(claims.MODE_VARIABLE, "loud")
    with pytest.raises(ValueError, match="COURSE_CLAIMS='loud': expected one of strict, inform"):
        claims.check(name, 0.1, above=0.5)


def test_every_measured_spread_is_one_the_table_holds():
    # claims.check quotes course_utils/claim_spread.json to the learner: every entry is a row of
    # tools/claim_spread.md, with the same range over every run, written by the same run.
    table = (ROOT / "tools" / "claim_spread.md").read_text(encoding="utf-8")
    for name, e in claims._spreads().items():
        row = next((ln for ln in table.splitlines() if ln.startswith(f"| {name} | ")), None)
        assert row is not None, f"course_utils/claim_spread.json: {name!r} has no row in tools/claim_spread.md"
        assert f"| {e['min']:.4g}–{e['max']:.4g} ({e['runs']}) |" in row, (
            f"{name}: the JSON's range {e['min']:.4g}–{e['max']:.4g} ({e['runs']}) is not the table's: {row}")


def test_a_claim_is_recorded_not_raised_under_the_log(tmp_path, monkeypatch):
    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv(claims.LOG_VARIABLE, str(log))
    claims.check("fails", 0.5, above=0.75)
    claims.check("holds", 0.9, above=0.75)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["claim"], r["value"], r["above"], r["holds"]) for r in records] == [
        ("fails", 0.5, 0.75, False), ("holds", 0.9, 0.75, True)]


def test_the_thread_count_is_measured_and_every_claim_holds_under_it():
    # docs/testing.md: a learner's Lab runs every core; tools/claim_spread_threads.md measures every claim
    # with more than one thread against the one-thread table, and no claim may fail its bound there.
    text = (ROOT / "tools" / "claim_spread_threads.md").read_text(encoding="utf-8")
    assert re.search(r"Made by `tools/claim_spread\.py .*, ([2-9]|\d\d+) threads per notebook\.", text), \
        "tools/claim_spread_threads.md is not a run of tools/claim_spread.py with more than one thread"
    assert "Against the earlier table: " in text and "Claims that failed their bound: 0." in text
    rows = {ln.split(" | ")[0][2:] for ln in text.splitlines() if re.match(r"\| ch\d\d: ", ln)}
    missing = sorted(set(claims._spreads()) - rows)
    assert not missing, f"claims never run with more than one thread (tools/claim_spread_threads.md): {missing}"


def test_a_release_cannot_ship_a_notebook_older_than_its_text_source(tmp_path):
    # Issue 49: the release reads the paired notebook; a chapter whose .py was edited alone would ship
    # its old text. Every committed pair is in step, and a release of an edited copy refuses, naming the fix.
    from course_grading import course
    names = course.chapters(ROOT)
    assert course.stale_pairs(ROOT, names) == [], "a chapter's notebook differs from its .py: run `make sync`"
    ch = names[0]
    shutil.copytree(ROOT / "solutions" / ch, tmp_path / "solutions" / ch)
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    text = tmp_path / "solutions" / ch / f"{ch}.py"
    text.write_text(text.read_text().replace("# %% [markdown]\n", "# %% [markdown]\n# A sentence added to the text.\n#\n", 1))
    assert course.stale_pairs(tmp_path, [ch]) == [ch]
    with pytest.raises(SystemExit, match=r"differs from its text source \(\.py\).*make sync"):
        course.release(tmp_path, [ch])
