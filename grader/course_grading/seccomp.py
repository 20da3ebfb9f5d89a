"""The system calls the box denies: a seccomp filter for bubblewrap's ``--seccomp``.

bubblewrap already drops every capability and, with ``--disable-userns``, forbids new user
namespaces inside the box. The filter is a second, independent line: a classic BPF program (the
kernel's ``struct sock_filter``, built here without libseccomp) that makes the calls below fail
with ``EPERM`` whatever the process's privileges, as Docker's and Flatpak's default profiles do:

* new namespaces and mounts: ``unshare``, ``setns``, ``mount`` and the new mount API,
  ``umount2``, ``pivot_root``, and ``clone`` with any ``CLONE_NEW*`` flag; ``clone3`` fails
  with ``ENOSYS`` (its flags sit behind a pointer a filter cannot read), so the C library falls
  back to ``clone``;
* looking into or changing other processes: ``ptrace``, ``process_vm_readv/writev``,
  ``pidfd_getfd`` (taking another process's file descriptors);
* kernel attack surface a notebook never needs: ``keyctl``, ``add_key``, ``request_key``,
  ``bpf``, ``userfaultfd``, ``perf_event_open``, ``kexec_load``, module loading, and
  ``io_uring_setup/enter/register`` (denied by Docker's default profile too: io_uring runs
  file operations the filter would not see one by one).

Calls of another architecture's ABI (32-bit ``int 0x80`` on x86-64, x32) are denied as a
whole: they would bypass the numbers below. Only x86-64 and aarch64 are known; elsewhere
:func:`program` returns ``None`` and the box runs without the filter (and says so).
"""

from __future__ import annotations

import errno
import os
import platform
import struct

__all__ = ["DENIED", "program", "memfd"]

DENIED = ("unshare", "setns", "mount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen",
          "fsconfig", "fsmount", "fspick", "mount_setattr", "ptrace", "process_vm_readv",
          "process_vm_writev", "keyctl", "add_key", "request_key", "bpf", "userfaultfd",
          "perf_event_open", "kexec_load", "init_module", "finit_module", "io_uring_setup", "io_uring_enter",
          "io_uring_register", "pidfd_getfd")

# (audit architecture, syscall numbers) from the kernel's unistd tables.
_ARCHES = {
    "x86_64": (0xC000003E, {
        "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
        "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "userfaultfd": 323,
        "perf_event_open": 298, "kexec_load": 246, "init_module": 175, "finit_module": 313,
        "clone": 56, "clone3": 435, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "pidfd_getfd": 438}),
    "aarch64": (0xC00000B7, {
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
        "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280, "userfaultfd": 282,
        "perf_event_open": 241, "kexec_load": 104, "init_module": 105, "finit_module": 273,
        "clone": 220, "clone3": 435, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "pidfd_getfd": 438}),
}
_X32_BIT = 0x40000000
CLONE_NEW_FLAGS = 0x7E020080   # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET|NEWTIME

# classic BPF opcodes and seccomp return values
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _ERRNO, _KILL = 0x7FFF0000, 0x00050000, 0x80000000
_NR, _ARCH, _ARG0 = 0, 4, 16   # offsets in struct seccomp_data (little-endian: arg 0's low half)


def program(machine: str | None = None) -> bytes | None:
    """The filter for ``machine`` (default: this one) as bytes of ``struct sock_filter``, or ``None``."""
    arch = _ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit, nr = arch
    deny, enosys = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
    denied = [nr[name] for name in DENIED]
    # Each instruction: (code, jump if true, jump if false, k); jumps count instructions skipped.
    code: list[tuple[int, int, int, int]] = [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ_K, 1, 0, audit),
        (_RET_K, 0, 0, deny),                        # another ABI: nothing of it is allowed
        (_LD_W_ABS, 0, 0, _NR),
    ]
    if audit == 0xC000003E:
        code += [(_JGE_K, 0, 1, _X32_BIT), (_RET_K, 0, 0, deny)]
    code += [(_JEQ_K, 0, 1, nr["clone3"]), (_RET_K, 0, 0, enosys)]
    for i, number in enumerate(denied):
        # jump to the shared "deny" at the end of this list when it matches
        code.append((_JEQ_K, len(denied) - i + 3, 0, number))
    code += [
        (_JEQ_K, 0, 2, nr["clone"]),                 # clone: read its flags; any other call: allow
        (_LD_W_ABS, 0, 0, _ARG0),
        (_JSET_K, 1, 0, CLONE_NEW_FLAGS),            # a new namespace: deny
        (_RET_K, 0, 0, _ALLOW),
        (_RET_K, 0, 0, deny),                        # the one "deny" every denied number jumps to
    ]
    return b"".join(struct.pack("<HBBI", *ins) for ins in code)


def memfd(machine: str | None = None) -> int | None:
    """An inheritable file descriptor holding :func:`program`, positioned at its start (for
    ``bwrap --seccomp FD``), or ``None`` where no filter is known for this machine."""
    prog = program(machine)
    if prog is None:
        return None
    fd = os.memfd_create("course-seccomp", 0)
    os.write(fd, prog)
    os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    return fd
