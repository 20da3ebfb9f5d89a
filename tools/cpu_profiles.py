"""The CPUs the course emulates on one machine: every library that dispatches on the CPU, limited together.

A trained number depends on how its floats were rounded, and three libraries inside PyTorch pick
their vector code from the CPU they run on: ATen's own kernels (``ATEN_CPU_CAPABILITY``), MKL's BLAS
(``MKL_ENABLE_INSTRUCTIONS``) and oneDNN (``ONEDNN_MAX_CPU_ISA``). Limiting ATen alone is not another
machine: chapter 4's reversal claim held under each of the three settings alone and failed under
the three together. A profile therefore sets all three (an unset variable lets its library use
the best this CPU has):

* ``native``: this machine as it is (nothing limited; on an AVX-512 server, AVX-512 paths);
* ``avx2``: an ordinary laptop without AVX-512 (most Intel laptops, every AMD laptop before Zen 4);
* ``avx``: an older laptop, with ATen's portable kernel (no explicit vector code) and MKL and oneDNN
  limited to AVX.

Not emulated here: Apple silicon (ARM NEON, Accelerate), GPUs and other operating systems' builds
(docs/testing.md says what the course does about them). Threads are one per process in every
profile (``OMP_NUM_THREADS=1``, as in ``make test``): the tests and the spread measure one thread.

    python tools/cpu_profiles.py env avx2     # ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ...
    python tools/cpu_profiles.py names        # native avx2 avx
"""
from __future__ import annotations

import os
import sys

VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")

PROFILES: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "avx": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "AVX", "ONEDNN_MAX_CPU_ISA": "AVX"},
}

DESCRIPTIONS = {
    "native": "this machine, nothing limited",
    "avx2": "an AVX2 laptop: ATen, MKL and oneDNN limited to AVX2",
    "avx": "an older laptop: ATen's portable kernel, MKL and oneDNN limited to AVX",
}

#: How much longer a notebook may take under a profile than natively (the notebooks' time budgets in
#: conftest.py): ATen's portable kernel has no explicit vector code (1.35-2x the native time measured).
SLOWDOWN = {"native": 1.0, "avx2": 1.25, "avx": 2.0}


def environment(profile: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the variables of ``profile`` set and the
    other dispatch variables removed, so that nothing inherited limits a library the profile leaves free."""
    if profile not in PROFILES:
        raise ValueError(f"unknown CPU profile {profile!r}: expected one of {', '.join(PROFILES)}")
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in VARIABLES}
    env.update(PROFILES[profile])
    return env


def current(env: dict[str, str] | None = None) -> str | None:
    """The profile whose settings ``env`` (default: this process's) has exactly, or None."""
    env = os.environ if env is None else env
    settings = {k: env[k] for k in VARIABLES if k in env}
    return next((name for name, p in PROFILES.items() if p == settings), None)


def main(argv: list[str]) -> int:
    if argv[:1] == ["names"]:
        print(" ".join(PROFILES))
        return 0
    if len(argv) == 2 and argv[0] == "env":
        if argv[1] not in PROFILES:
            print(f"unknown CPU profile {argv[1]!r}: expected one of {', '.join(PROFILES)}", file=sys.stderr)
            return 2
        print(" ".join(f"{k}={v}" for k, v in PROFILES[argv[1]].items()))
        return 0
    print("usage: cpu_profiles.py names | env PROFILE", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
