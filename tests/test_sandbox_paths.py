"""The sandbox's view of the file system wherever the course is cloned (CI may clone it in /tmp)."""
import sys

from course_grading import sandbox


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

    from course_grading import seccomp

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


# --- issue 48: the box's writable space, its system calls, its output -------------------------------

BOX_PROBE = """import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
for name, nr in (("io_uring_setup", 425), ("io_uring_enter", 426), ("io_uring_register", 427), ("pidfd_getfd", 438)):
    r = libc.syscall(nr, 0, 0, 0, 0, 0, 0)
    print("CALL", name, "allowed" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?"))
for path in ("/dev/fill", "/dev/shm/../x", "/box/tmp/ok"):
    try:
        open(path, "w").close()
        print("CREATE", path, "yes")
    except OSError as e:
        print("CREATE", path, errno.errorcode[e.errno])
written = 0
try:
    with open("/dev/shm/fill", "wb") as f:
        for _ in range({shm} + 8):
            f.write(b"x" * 2**20)
            f.flush()
            written += 1
except OSError as e:
    print("SHM stopped", errno.errorcode[e.errno])
print("SHM MiB", written)
with open("/dev/null", "w") as f:
    f.write("still a device")
print("DONE")
"""


def test_dev_is_read_only_shm_bounded_and_io_uring_and_pidfd_getfd_denied(tmp_path):
    """A trial box with the kernel's mounts and filter (sandbox.box_mounts, hardening): /dev can take
    no file, /dev/shm stops at its size, io_uring and pidfd_getfd fail with EPERM."""
    import os
    import subprocess

    import pytest
    iso = sandbox.isolation()
    if not iso.sandboxed:
        pytest.skip("no bubblewrap here")
    box = tmp_path / "box"
    for d in ("lib", "ipc", "work"):
        (box / d).mkdir(parents=True)
    for f in ("passwd", "group", "kernel.json"):
        (box / f).write_text("")
    closing, fd = sandbox.hardening(iso)
    argv = [iso.bwrap, *sandbox._namespaces(), *closing, *sandbox._system_view(),
            *sandbox.box_mounts(box, sandbox.Limits(file_mb=16)), "--", sys.executable, "-c",
            BOX_PROBE.format(shm=sandbox.SHM_MB)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, pass_fds=(fd,) if fd else ())
    finally:
        if fd is not None:
            os.close(fd)
    out = proc.stdout
    assert "DONE" in out, (proc.stdout, proc.stderr)
    calls = [ln for ln in out.splitlines() if ln.startswith("CALL ")]
    assert len(calls) == 4 and all(ln.endswith(" EPERM") for ln in calls), calls
    assert "CREATE /dev/fill EROFS" in out and "CREATE /dev/shm/../x EROFS" in out and "CREATE /box/tmp/ok yes" in out
    assert "SHM stopped ENOSPC" in out and int(out.split("SHM MiB ")[1].split()[0]) <= sandbox.SHM_MB, out


def test_the_box_writes_to_a_pipe_never_to_the_graders_capture_files(tmp_path):
    """The box's stdout and stderr are a pipe (its /proc/self/fd/1 and 2 reopen nothing of the grader's);
    what it writes reaches the grader's log marked, and bounded; last_error never quotes it."""
    import subprocess

    from course_grading import parallel
    code = ("import os\nfrom course_grading import sandbox\nsandbox.pipe_output()\n"
            "print('fd1', os.readlink('/proc/self/fd/1'), flush=True)\n"
            "os.write(2, b'[ERROR] forged by the box\\n' * 10_000)\n")
    log = tmp_path / "stderr"
    with log.open("wb") as err, (tmp_path / "stdout").open("wb") as out:
        subprocess.run([sys.executable, "-c", code], stdout=out, stderr=err, timeout=60, check=True)
    import time
    for _ in range(100):   # the copying process may end just after the box
        text = log.read_text()
        if "the rest was dropped" in text:
            break
        time.sleep(0.05)
    lines = text.splitlines()
    assert lines and all(ln.startswith("[kernel] ") for ln in lines), lines[:3]
    assert "fd1 pipe:" in text and str(log) not in text
    assert len(text) < sandbox.BOX_OUTPUT_BYTES + 20_000 and "the rest was dropped" in text
    assert "forged" not in parallel.last_error(text + "[ERROR] nbgrader's own line\n")
