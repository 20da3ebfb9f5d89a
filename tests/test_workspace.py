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


def _no_server():
    return {}, []


def _release_v2(release):
    """A new release: the introduction and a plain code cell reworded, a test cell grown."""
    new = nbformat.read(release / NB, as_version=4)
    intro = next(c for c in new.cells if c.cell_type == "markdown" and c.source.startswith("# Chapter 3"))
    intro.source += "\n\nA sentence of the new release."
    code = next(c for c in new.cells if c.cell_type == "code" and not c.metadata.get("nbgrader") and c.outputs)
    code.source += "\n# reworded in the new release"
    _grade(new, "ex2_softmax-visible").source += "\n# a test that grew"
    nbformat.write(new, release / NB)
    return intro.get("id"), code.get("id")


def test_an_overwrite_after_an_update_loses_nothing_for_good(course):
    # JupyterLab's "File Changed" dialog: Overwrite writes the open (old) copy over the update. The
    # next update, with or without a new release, brings the release's text back into every cell the
    # learner never edited, and keeps the one they did.
    release, ws = course
    old_copy = nbformat.read(ws / NB, as_version=4)
    intro_id, code_id = _release_v2(release)
    workspace.update(ws, release, log=lambda _: None, is_open=_no_server)
    answer = "def scaled_scores(q, k):\n    return q @ k.mT / q.shape[-1] ** 0.5\n"
    _grade(old_copy, "ex1_scores").source = answer          # typed in the open tab before the update
    nbformat.write(old_copy, ws / NB)                       # ... and saved with Overwrite
    said = []
    assert workspace.update(ws, release, log=said.append, is_open=_no_server) == [ws / NB], said
    got = {c.get("id"): c for c in nbformat.read(ws / NB, as_version=4).cells}
    assert got[intro_id].source.endswith("A sentence of the new release.")
    assert got[code_id].source.endswith("# reworded in the new release")
    assert _grade(nbformat.read(ws / NB, as_version=4), "ex1_scores").source == answer
    # A later release still brings its changes, and the learner's answer stays.
    new = nbformat.read(release / NB, as_version=4)
    new.cells.append(nbformat.v4.new_markdown_cell("An appendix of release 3"))
    nbformat.write(new, release / NB)
    workspace.update(ws, release, log=lambda _: None, is_open=_no_server)
    final = nbformat.read(ws / NB, as_version=4)
    assert final.cells[-1].source == "An appendix of release 3"
    assert _grade(final, "ex1_scores").source == answer
    assert {c.get("id"): c.source for c in final.cells}[intro_id].endswith("A sentence of the new release.")


def test_a_cell_the_learner_edited_is_kept_even_if_an_older_release_held_similar_text(course):
    release, ws = course
    intro_id, _ = _release_v2(release)
    mine = nbformat.read(ws / NB, as_version=4)
    intro = next(c for c in mine.cells if c.get("id") == intro_id)
    intro.source += "\n\nMy own note."
    nbformat.write(mine, ws / NB)
    workspace.update(ws, release, log=lambda _: None, is_open=_no_server)
    got = {c.get("id"): c.source for c in nbformat.read(ws / NB, as_version=4).cells}
    assert got[intro_id].endswith("My own note.")


def test_visible_test_outputs_survive_and_unrun_cells_show_the_new_stored_run(course):
    release, ws = course
    mine = nbformat.read(ws / NB, as_version=4)
    ran = [nbformat.v4.new_output("stream", name="stdout", text="scaled_scores: all 4 checks passed\n")]
    _grade(mine, "ex1_scores-visible").outputs = ran
    nbformat.write(mine, ws / NB)
    new = nbformat.read(release / NB, as_version=4)
    unrun = next(c for c in new.cells if c.cell_type == "code" and not c.metadata.get("nbgrader") and c.outputs)
    unrun.outputs = [nbformat.v4.new_output("stream", name="stdout", text="the new stored run\n")]
    _grade(new, "ex2_softmax-visible").source += "\n# a test that grew"
    nbformat.write(new, release / NB)
    workspace.update(ws, release, log=lambda _: None, is_open=_no_server)
    got = nbformat.read(ws / NB, as_version=4)
    assert _grade(got, "ex1_scores-visible").outputs == ran                  # unchanged test cell: kept
    assert _grade(got, "ex2_softmax-visible").source.endswith("# a test that grew")
    assert next(c for c in got.cells if c.get("id") == unrun.get("id")).outputs[0]["text"] == "the new stored run\n"


def test_an_update_waits_for_a_notebook_open_in_jupyter(course):
    release, ws = course
    _release_v2(release)
    before = (ws / NB).read_bytes()
    said = []
    opened = ({(ws / NB).resolve(): "http://127.0.0.1:8888/"}, [])
    assert workspace.update(ws, release, log=said.append, is_open=lambda: opened) == []
    assert (ws / NB).read_bytes() == before
    assert said and said[0].startswith(f"NOT updated: {NB} is open in Jupyter (http://127.0.0.1:8888/)")
    assert "Close and Shut Down Notebook" in said[0] and "make update" in said[0]
    said.clear()
    assert workspace.update(ws, release, log=said.append, is_open=lambda: ({}, ["http://x/ (timeout)"])) == [ws / NB]
    assert said[0].startswith("note: a running Jupyter server did not say") and said[1].startswith("updated:")


def test_open_notebooks_asks_each_running_server(tmp_path, monkeypatch):
    # Two servers: one answers (two kernel sessions), one does not.
    import http.server
    import json
    import threading

    from jupyter_server import serverapp

    class Server(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.headers.get("Authorization") != "token secret":
                self.send_response(403)
                self.end_headers()
                return
            body = {"/api/sessions": [{"path": "ch01/ch01.ipynb"},
                                      {"notebook": {"path": "ch02/ch02.ipynb"}}]}.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write(json.dumps(body).encode())

        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    up = f"http://127.0.0.1:{httpd.server_address[1]}/"
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{s.getsockname()[1]}/"      # nothing listens there
    monkeypatch.setattr(serverapp, "list_running_servers", lambda *a, **k: iter([
        {"url": up, "token": "secret", "root_dir": str(tmp_path)},
        {"url": down, "token": "x", "root_dir": str(tmp_path)}]))
    try:
        found, silent = workspace.open_notebooks()
    finally:
        httpd.shutdown()
    assert found == {(tmp_path / "ch01/ch01.ipynb").resolve(): up, (tmp_path / "ch02/ch02.ipynb").resolve(): up}
    assert len(silent) == 1 and silent[0].startswith(down)
