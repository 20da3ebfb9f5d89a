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


def test_the_seccomp_filter_is_a_valid_program_for_known_machines():
    import struct

    from course_utils.grading import seccomp

    for machine in ("x86_64", "aarch64"):
        prog = seccomp.program(machine)
        assert prog and len(prog) % 8 == 0 and len(prog) // 8 < 4096
        code = [struct.unpack("<HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
        assert code[-1][0] == 0x06 and code[-1][3] & 0xFFFF0000 == 0x00050000   # the shared "deny"
        for i, (op, jt, jf, _) in enumerate(code):                                # every jump lands inside
            if op & 0x07 == 0x05:
                assert i + 1 + max(jt, jf) < len(code)
        # every denied call's number jumps to the final "deny"
        numbers = seccomp._ARCHES[machine][1]
        denied = {numbers[name] for name in seccomp.DENIED}
        lands = {k for i, (op, jt, _, k) in enumerate(code) if op == 0x15 and i + 1 + jt == len(code) - 1}
        assert denied <= lands, denied - lands
    assert seccomp.program("riscv64") is None


def test_the_box_is_closed_where_bubblewrap_can():
    iso = sandbox.isolation()
    if not iso.sandboxed:
        import pytest
        pytest.skip("no bubblewrap here")
    args, fd = sandbox.hardening(iso)
    assert ("--disable-userns" in args) == iso.userns_closed and "--seccomp" in args
    import os
    os.close(fd)
