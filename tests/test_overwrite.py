"""nbgrader's tampering warning ("checksum has changed") on chapter 3: none for the release as the learner
got it, one for each read-only cell a learner changed (and the stored source put back), as nbgrader does."""
from __future__ import annotations

import copy
import logging
import shutil

import nbformat
import pytest
from nbgrader.preprocessors import OverwriteCells

import course_grading as grading
from course_grading.overwrite import ReleaseAwareOverwriteCells, release_source

CHAPTER = "ch03_scaled_dot_product"


@pytest.fixture(scope="module")
def course():
    path = grading.new_course([CHAPTER])
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _sanitise(cls, course, nb) -> tuple[list[str], nbformat.NotebookNode]:
    """``nb`` through ``cls`` as nbgrader's autograde runs it: (its warnings, the notebook)."""
    pre = cls()
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda r: records.append(r.getMessage()) if r.levelno >= logging.WARNING else None
    pre.log.addHandler(handler)
    try:
        resources = {"nbgrader": {"notebook": CHAPTER, "assignment": CHAPTER,
                                  "db_url": f"sqlite:///{course / 'gradebook.db'}"}}
        nb, _ = pre.preprocess(copy.deepcopy(nb), resources)
    finally:
        pre.log.removeHandler(handler)
    return [r for r in records if "checksum" in r], nb


def _release(course):
    return nbformat.read(course / "notebooks" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)


def _source(course):
    return nbformat.read(course / "solutions" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)


def test_nbgrader_warns_on_every_hidden_test_cell_of_an_honest_submission(course):
    """The warning as it was (so the test below can fail): one per test cell with hidden tests."""
    hidden = sum("BEGIN HIDDEN TESTS" in c.source for c in _source(course).cells)
    warnings, _ = _sanitise(OverwriteCells, course, _release(course))
    assert hidden == len(warnings) > 0, warnings


def test_an_honest_submission_raises_no_warning_and_gets_the_hidden_tests(course):
    warnings, nb = _sanitise(ReleaseAwareOverwriteCells, course, _release(course))
    assert warnings == []
    source = {c.metadata["nbgrader"]["grade_id"]: c.source for c in _source(course).cells
              if c.metadata.get("nbgrader", {}).get("locked")}
    got = {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("locked")}
    assert got == source          # the hidden tests are back in, as nbgrader puts them


def test_a_changed_test_cell_still_raises_the_warning(course):
    nb = _release(course)
    cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("locked") and c.metadata["nbgrader"].get("grade")]
    visible, hidden = cells[0], next(c for c in cells if c.metadata["nbgrader"]["grade_id"].endswith("-hidden"))
    visible.source = "pass"
    hidden.source = hidden.source + "\nassert True"
    warnings, out = _sanitise(ReleaseAwareOverwriteCells, course, nb)
    names = sorted(c.metadata["nbgrader"]["grade_id"] for c in (visible, hidden))
    assert len(warnings) == 2 and all(any(n in w for w in warnings) for n in names), warnings
    restored = {c.metadata["nbgrader"]["grade_id"]: c.source for c in out.cells if c.metadata.get("nbgrader", {}).get("grade_id")}
    assert restored[visible.metadata["nbgrader"]["grade_id"]] != "pass"


def test_release_source_is_what_the_release_holds(course):
    release = {c.metadata["nbgrader"]["grade_id"]: c.source for c in _release(course).cells
               if c.metadata.get("nbgrader", {}).get("locked")}
    for cell in _source(course).cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in release:
            assert release_source(cell.source) == release[gid], gid
