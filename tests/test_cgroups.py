"""Whole-box limits on cgroup v1 and v2 (grader/course_grading/cgroups.py).

The v2 path is tested on a folder laid out as the kernel lays out a delegated cgroup (the files the
grader reads and writes); the v1 path, where this machine has it as root, on the real hierarchy. A
box is called limited only where its limit was written and read back.
"""

import os
from pathlib import Path

import pytest

from course_grading import cgroups


def _v2(tmp_path: Path, offered: str = "cpu memory pids", procs: str = "101\n102\n") -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    own = root / "user.slice" / "grading.scope"
    own.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    (own / "cgroup.controllers").write_text(offered + "\n")
    (own / "cgroup.subtree_control").write_text("\n")
    (own / "cgroup.procs").write_text(procs)
    proc = tmp_path / "self-cgroup"
    proc.write_text("0::/user.slice/grading.scope\n")
    return root, proc


def test_v2_a_delegated_cgroup_gets_a_leaf_and_limited_children(tmp_path):
    root, proc = _v2(tmp_path)
    place = cgroups.find(root, proc)
    own = root / "user.slice" / "grading.scope"
    assert place.version == 2 and place.parents == {"memory": own, "pids": own} and not place.why_not
    # the grader's processes moved into the leaf (a v2 cgroup with children holds none), then the
    # controllers were enabled for the children
    assert (own / cgroups.LEAF / "cgroup.procs").read_text() == "102"   # the last one written
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids"
    group = cgroups.BoxGroup(place, "grading-box-1", 2048 * 2**20, 64)
    box = own / "grading-box-1"
    assert group.paths == [box] and group.limited == {"memory", "pids"} and not group.errors
    assert (box / "memory.max").read_text() == str(2048 * 2**20) and (box / "pids.max").read_text() == "64"
    (box / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert group.out_of_memory()


def test_v2_without_delegated_controllers_no_box_is_called_limited(tmp_path):
    root, proc = _v2(tmp_path, offered="cpu memory")
    place = cgroups.find(root, proc)
    assert place.version == 2 and not place.parents and "does not offer pids" in place.why_not
    assert "Delegate=yes" in place.why_not
    group = cgroups.BoxGroup(place, "grading-box-2", 2**30, 64)
    assert not group.limited and group.procs() is None and not group.out_of_memory()


def test_a_limit_that_does_not_read_back_is_not_called_held(tmp_path):
    root, proc = _v2(tmp_path)
    place = cgroups.find(root, proc)
    gone = cgroups.Place(2, {"memory": tmp_path / "nowhere", "pids": tmp_path / "nowhere"})
    group = cgroups.BoxGroup(gone, "grading-box-3", 2**30, 64)
    assert not group.limited and group.errors and "memory cgroup" in group.errors[0]

    class Clamped(cgroups.BoxGroup):   # a kernel that keeps its own value ("max") whatever is written
        def _limit(self, cg, controller, memory_bytes, processes):
            (cg / "memory.max").write_text("max")
            return super()._limit(cg, controller, memory_bytes, processes) and controller == "pids"

    group = Clamped(place, "grading-box-4", 2**30, 64)
    assert group.limited == {"pids"}


def test_no_cgroups_at_all_says_why(tmp_path):
    (tmp_path / "self-cgroup").write_text("0::/\n")
    place = cgroups.find(tmp_path / "empty", tmp_path / "self-cgroup")
    assert place.version == 0 and not place.parents and "neither cgroup v1 nor v2" in place.why_not


def test_v1_here_as_root_limits_a_box_and_reads_the_limits_back():
    place = cgroups.find()
    if place.version != 1 or not place.parents:
        pytest.skip(f"no cgroup v1 for the grader here ({place.why_not or f'cgroup v{place.version}'})")
    group = cgroups.BoxGroup(place, f"grading-test-{os.getpid()}", 256 * 2**20, 32)
    try:
        assert group.limited == {"memory", "pids"}, group.errors
        assert int((place.parents["memory"] / group.paths[0].name / "memory.limit_in_bytes").read_text()) \
            == 256 * 2**20
    finally:
        group.close()
    assert not any(p.exists() for p in group.paths)


def test_the_grader_says_when_boxes_are_limited_per_process_only(tmp_path, monkeypatch):
    """The fallback: a WARNING with the reason (make autograde prints isolation's warnings), boxes
    reported "per process"; a box whose cgroup was expected and could not be set says which."""
    from course_grading import sandbox
    monkeypatch.setattr(cgroups, "find", lambda: cgroups.Place(2, why_not="cgroup v2: /x is not delegated"))
    sandbox.isolation.cache_clear()
    try:
        iso = sandbox.isolation()
        if iso.sandboxed:
            assert any("no whole-box limits (cgroup v2: /x is not delegated)" in w for w in iso.warnings), iso.warnings
        box = sandbox.Box(sandbox.Limits())
        try:
            assert box.memory_scope() == "per process" and box.unlimited() == []
        finally:
            box.close()
        nowhere = cgroups.Place(2, {"memory": tmp_path / "gone", "pids": tmp_path / "gone"})
        monkeypatch.setattr(cgroups, "find", lambda: nowhere)
        sandbox.isolation.cache_clear()
        box = sandbox.Box(sandbox.Limits())
        try:
            assert box.unlimited() == ["memory", "pids"] and box.memory_scope() == "per process"
        finally:
            box.close()
    finally:
        sandbox.isolation.cache_clear()
