"""The learner's workspace (course_utils/workspace.py): filled once, never overwritten, updated by a merge
that keeps every edit the learner made."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from course_utils import workspace

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = "ch03_scaled_dot_product"
NB = f"{CHAPTER}/{CHAPTER}.ipynb"


def _grade(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


@pytest.fixture
def course(tmp_path):
    release = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks" / CHAPTER, release / CHAPTER)
    ws = tmp_path / "workspace"
    workspace.update(ws, release, log=lambda _: None)
    return release, ws


def test_first_update_copies_the_release_and_a_second_changes_nothing(course):
    release, ws = course
    assert (ws / NB).read_bytes() == (release / NB).read_bytes()
    before = (ws / NB).stat().st_mtime_ns
    assert workspace.update(ws, release, log=lambda _: None) == []
    assert (ws / NB).stat().st_mtime_ns == before


def test_an_update_keeps_the_learners_answers_and_cells_and_brings_the_new_ones(course):
    release, ws = course
    mine = nbformat.read(ws / NB, as_version=4)
    answer = "def scaled_scores(q, k):\n    return q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
    _grade(mine, "ex1_scores").source = answer
    note = nbformat.v4.new_markdown_cell("My own note on exercise 1")
    at = mine.cells.index(_grade(mine, "ex1_scores"))
    mine.cells.insert(at + 1, note)
    _grade(mine, "ex1_scores-visible").source = "pass  # a learner who emptied a test cell"
    nbformat.write(mine, ws / NB)

    new = nbformat.read(release / NB, as_version=4)
    new.cells.insert(1, nbformat.v4.new_markdown_cell("## What is new in this version"))
    _grade(new, "ex1_scores").source += "\n# (the stub's comment changed too)"
    _grade(new, "ex2_softmax-visible").source += "\n# a test that grew"
    first_md = next(c for c in new.cells if c.cell_type == "markdown" and c.source.startswith("# Chapter 3"))
    first_md.source += "\n\nA sentence added to the introduction."
    nbformat.write(new, release / NB)

    written = workspace.update(ws, release, log=lambda _: None)
    assert written == [ws / NB]
    got = nbformat.read(ws / NB, as_version=4)
    assert _grade(got, "ex1_scores").source == answer, "the learner's answer was overwritten"
    sources = [c.source for c in got.cells]
    assert sources.index("My own note on exercise 1") == sources.index(answer) + 1, "the learner's own cell moved or vanished"
    assert "## What is new in this version" in sources
    assert any(s.endswith("A sentence added to the introduction.") for s in sources), "an untouched cell kept the old text"
    assert _grade(got, "ex2_softmax-visible").source.endswith("# a test that grew")
    assert _grade(got, "ex1_scores-visible").source == _grade(new, "ex1_scores-visible").source, \
        "a test cell must be the course's (nbgrader restores it anyway)"
    backups = list((ws / workspace.STATE / "backups").glob("*.ipynb"))
    assert len(backups) == 1 and _grade(nbformat.read(backups[0], as_version=4), "ex1_scores").source == answer
    assert workspace.update(ws, release, log=lambda _: None) == [], "the same release is merged again"


def test_answers_saved_in_the_release_folder_before_the_workspace_existed_are_kept(tmp_path):
    # A learner of an older make lab answered in notebooks/ itself; the workspace is filled from it.
    release = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks" / CHAPTER, release / CHAPTER)
    old = nbformat.read(release / NB, as_version=4)
    answer = "def scaled_scores(q, k):\n    return q @ k.mT / q.shape[-1] ** 0.5\n"
    _grade(old, "ex1_scores").source = answer
    nbformat.write(old, release / NB)
    ws = tmp_path / "workspace"
    workspace.update(ws, release, log=lambda _: None)
    new = nbformat.read(ROOT / "notebooks" / NB, as_version=4)    # the course's next release
    _grade(new, "ex1_scores").source += "\n# the stub changed"
    nbformat.write(new, release / NB)
    workspace.update(ws, release, log=lambda _: None)
    got = nbformat.read(ws / NB, as_version=4)
    assert _grade(got, "ex1_scores").source == answer, "an answer saved before the workspace existed was lost"
    assert _grade(got, "ex2_softmax").source == _grade(new, "ex2_softmax").source


def test_outputs_of_untouched_cells_survive_an_update(course):
    release, ws = course
    mine = nbformat.read(ws / NB, as_version=4)
    code = next(c for c in mine.cells if c.cell_type == "code" and not c.metadata.get("nbgrader"))
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="the learner ran this\n")]
    nbformat.write(mine, ws / NB)
    new = nbformat.read(release / NB, as_version=4)
    new.cells.append(nbformat.v4.new_markdown_cell("An appendix"))
    nbformat.write(new, release / NB)
    workspace.update(ws, release, log=lambda _: None)
    got = nbformat.read(ws / NB, as_version=4)
    same = next(c for c in got.cells if c.get("id") == code.get("id"))
    assert same.outputs and same.outputs[0]["text"] == "the learner ran this\n"
    assert got.cells[-1].source == "An appendix"


def test_a_notebook_the_learner_broke_is_left_alone(course):
    release, ws = course
    (ws / NB).write_text("{ not json")
    new = nbformat.read(release / NB, as_version=4)
    new.cells.append(nbformat.v4.new_markdown_cell("An appendix"))
    nbformat.write(new, release / NB)
    messages = []
    assert workspace.update(ws, release, log=messages.append) == []
    assert (ws / NB).read_text() == "{ not json"
    assert any("NOT updated" in m for m in messages)


def test_new_chapters_arrive_and_a_deleted_notebook_comes_back(course):
    release, ws = course
    shutil.copytree(ROOT / "notebooks" / "ch04_multihead_mqa_gqa", release / "ch04_multihead_mqa_gqa")
    (ws / NB).unlink()
    written = workspace.update(ws, release, log=lambda _: None)
    assert {p.parent.name for p in written} == {CHAPTER, "ch04_multihead_mqa_gqa"}


def test_make_lab_opens_the_workspace_never_the_release_and_git_ignores_it():
    makefile = (ROOT / "Makefile").read_text()
    assert "LAB_ROOT ?= $(WORKSPACE)" in makefile and "lab: update" in makefile
    assert "/workspace/" in (ROOT / ".gitignore").read_text().split()
    learner = (ROOT / "lab" / "learner" / "labconfig" / "page_config.json").read_text()
    for plugin in ("formgrader", "create-assignment", "course-list"):
        assert f'"@jupyter/nbgrader:{plugin}": true' in learner
