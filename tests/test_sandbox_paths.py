"""The sandbox's view of the file system wherever the course is cloned (CI may clone it in /tmp)."""
import sys

from course_utils.grading import sandbox


def test_tmp_is_the_box_unless_the_course_python_lives_under_tmp(monkeypatch):
    monkeypatch.setattr(sys, "prefix", "/work/course/.venv")
    monkeypatch.setattr(sys, "exec_prefix", "/work/course/.venv")
    assert sandbox._tmp_link() == ["--symlink", "/box/tmp", "/tmp"]
    # A read-only bind of /tmp/clone/.venv creates /tmp in the box: a symlink there would make
    # bwrap fail and every kernel die before it starts (as a fresh clone in /tmp showed).
    monkeypatch.setattr(sys, "prefix", "/tmp/clone/.venv")
    monkeypatch.setattr(sys, "exec_prefix", "/tmp/clone/.venv")
    assert sandbox._tmp_link() == []
