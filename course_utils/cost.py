"""Measuring what a computation costs: time per call, memory kept for backward, operations issued.

Used by the chapters that compare implementations (naive vs fused vs windowed attention in
chapter 3; with and without a KV cache in chapter 4). Timings depend on the machine and on
what else runs on it, so notebooks print them (as ratios measured in one run) and never
test them; :func:`saved_bytes` and :func:`count_torch_calls` are exact.

>>> import torch
>>> x = torch.ones(1000, requires_grad=True)
>>> saved_bytes(torch.exp, x)        # exp keeps its result (1000 float32) for the backward pass
4000
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["LargestTensor", "count_torch_calls", "machine", "saved_bytes", "seconds_per_call", "torch_threads"]


def seconds_per_call(fn: Callable, *args: Any, repeats: int = 5, warmup: int = 1,
                     clock: Callable[[], float] = time.perf_counter, **kwargs: Any) -> float:
    """Median time of ``fn(*args, **kwargs)`` over ``repeats`` calls, after ``warmup`` calls.

    The warm-up calls are not timed (the first call of a kernel pays for allocation and
    dispatch caches). The median, unlike the mean, ignores the odd call slowed by another
    program. ``clock`` is the time source: ``time.perf_counter`` (wall clock, the default) or
    ``time.process_time`` (processor time of this process: on a shared machine it does not
    count the moments other programs hold the processor, but it adds up the time of all
    threads, so use it with one thread, see :func:`torch_threads`). CUDA work is waited for
    before the clock is read.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")

    def sync() -> None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    for _ in range(warmup):
        fn(*args, **kwargs)
    sync()
    times = []
    for _ in range(repeats):
        start = clock()
        fn(*args, **kwargs)
        sync()
        times.append(clock() - start)
    return statistics.median(times)


def saved_bytes(fn: Callable, *args: Any, **kwargs: Any) -> int:
    """Bytes of the tensors that ``fn(*args, **kwargs)`` saves for the backward pass.

    This is the memory training must keep between the forward and the backward pass
    (activations), recorded with ``torch.autograd.graph.saved_tensors_hooks``. A tensor
    saved twice, or several views of one tensor, count once (by their storage). Inputs that
    do not require grad save nothing, so pass inputs with ``requires_grad=True``.
    """
    sizes: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        sizes[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args, **kwargs)
    return sum(sizes.values())


class _CountCalls(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def count_torch_calls(fn: Callable, *args: Any, **kwargs: Any) -> int:
    """Number of torch functions and tensor methods that ``fn(*args, **kwargs)`` calls.

    Each call is one operation issued to PyTorch, however large the tensors it works on: a
    count that grows with the sequence length means steps that run one after the other.
    Counted with a ``TorchFunctionMode``; operations inside a module's ``forward`` count too.
    """
    with _CountCalls() as counter:
        fn(*args, **kwargs)
    return counter.n


class LargestTensor(TorchFunctionMode):
    """The largest tensor any torch function or tensor method returned inside the ``with`` block.

    ``numel`` is its number of elements and ``call`` the function that made it: chapter 8's tests of
    the tiled forward use it to see that no ``L_q x L_k`` matrix was built (a view counts at its own
    size, a tensor made outside the block not at all).
    """

    def __init__(self) -> None:
        super().__init__()
        self.numel, self.call = 0, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.numel() > self.numel:
                self.numel, self.call = t.numel(), getattr(func, "__name__", repr(func))
        return out


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the ``with`` block with ``torch.set_num_threads(n)``, then restore the old value."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def machine() -> str:
    """The machine a timing was measured on, in one line, to print beside the timing.

    The processor's name (from ``/proc/cpuinfo`` on Linux, else ``platform``), the logical CPUs,
    PyTorch's threads and version, e.g. ``"AMD EPYC, 2 logical CPUs, 1 torch thread, torch
    2.13.0+cpu"``. Timings are only comparable between runs that print the same line.
    """
    name = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    name = name or platform.processor() or platform.machine() or "unknown processor"
    threads = torch.get_num_threads()
    return (f"{name}, {os.cpu_count()} logical CPUs, {threads} torch thread{'s' if threads > 1 else ''}, "
            f"torch {torch.__version__}")
