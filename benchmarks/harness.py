"""The benchmark harness: side-by-side timing, the machine's ceilings, tables, and their files.

Everything a table reports is measured in one run of one process, so its numbers share the
machine's state at that moment:

* :func:`alternate` times several implementations *round-robin*: in each round every one runs
  once (the order rotates from round to round), so a burst of load from another program hits
  all of them alike. A ratio is the median over rounds of the per-round ratio (a paired
  measurement), a time the median over rounds.
* :func:`measure_ceilings` measures what the machine can do in the same run: the fp32
  matrix-multiply peak (GFLOP/s) and the memory bandwidth of a large copy (GB/s), for each
  device and thread count. Each table row carries its achieved fraction of one of them.
* :class:`Table` holds the rows; :meth:`Table.problems` says what is wrong with one (a ratio
  that is not a finite positive number, a row without its ceiling), :func:`to_markdown` and
  :func:`save` write the run to ``benchmarks/results/``.

Timings are wall-clock (``time.perf_counter``; CUDA is synchronised around each sample).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.flop_counter import FlopCounterMode

from course_utils import cost

__all__ = [
    "Ceiling", "Table", "Timing", "all_threads", "alternate", "best_ceilings", "count_flops", "devices", "headline", "machine_description",
    "measure_ceilings", "save", "sync", "thread_settings", "to_markdown",
]


# --------------------------------------------------------------------------------------------
# devices and threads
# --------------------------------------------------------------------------------------------

def all_threads() -> int:
    """The processors this process may run on (``os.sched_getaffinity``, else ``os.cpu_count``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:        # not on Linux
        return os.cpu_count() or 1


def thread_settings() -> list[int]:
    """The thread counts every CPU table is measured with: one thread, and all threads."""
    n = all_threads()
    return [1] if n == 1 else [1, n]


def devices(cpu_only: bool = False) -> tuple[list[str], str]:
    """``(devices to measure, a line saying why CUDA is or is not among them)``."""
    if cpu_only:
        return ["cpu"], "CUDA: not measured (--cpu-only)"
    if torch.cuda.is_available():
        return ["cpu", "cuda"], f"CUDA: {torch.cuda.get_device_name(0)}"
    return ["cpu"], "CUDA: not available on this machine, the GPU rows are skipped"


def sync(device: str) -> None:
    """Wait for the work queued on ``device`` (CUDA runs asynchronously; the CPU does not)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# --------------------------------------------------------------------------------------------
# timing side by side
# --------------------------------------------------------------------------------------------

@dataclass
class Timing:
    """Seconds per call of each implementation, one entry per round (see :func:`alternate`)."""

    seconds: dict[str, list[float]]

    def median(self, name: str) -> float:
        """Median seconds per call of ``name`` over the rounds."""
        return statistics.median(self.seconds[name])

    def ratio(self, num: str, den: str) -> float:
        """Median over rounds of ``time(num) / time(den)`` measured in the same round."""
        return statistics.median(a / b for a, b in zip(self.seconds[num], self.seconds[den]))

    @property
    def rounds(self) -> int:
        return len(next(iter(self.seconds.values())))


def alternate(fns: Mapping[str, Callable[[], Any]], rounds: int = 5, warmup: int = 2,
              min_sample_s: float = 0.01, budget_s: float | None = None, min_rounds: int = 3,
              device: str = "cpu", long_call_s: float = 0.25) -> Timing:
    """Time each of ``fns`` (no arguments) side by side, round-robin.

    After ``warmup`` untimed calls of each function (one when a call lasts over ``long_call_s``;
    the last gives its rough duration),
    each function is called ``n`` times per sample, ``n`` chosen so that a sample lasts at
    least ``min_sample_s`` (short calls are otherwise below the clock's resolution and the
    loop's overhead). Then ``rounds`` rounds: in round ``r`` the functions run in the order
    rotated by ``r``, one sample each. ``budget_s`` caps the rounds to what fits in it (never
    fewer than ``min_rounds``).

    Returns:
        a :class:`Timing` with, per function, ``rounds`` values of seconds per call.
    """
    if not fns:
        raise ValueError("nothing to time")
    if rounds < 1 or warmup < 1:
        raise ValueError(f"need rounds >= 1 and warmup >= 1, got rounds={rounds}, warmup={warmup}")
    names = list(fns)
    inner: dict[str, int] = {}
    round_s = 0.0
    for name in names:
        for _ in range(warmup):
            sync(device)
            start = time.perf_counter()
            fns[name]()
            sync(device)
            once = time.perf_counter() - start
            if once > long_call_s:       # a long call is its own warm-up: no need to repeat it
                break
        inner[name] = max(1, math.ceil(min_sample_s / max(once, 1e-7)))
        round_s += inner[name] * once
    if budget_s is not None:
        rounds = max(min_rounds, min(rounds, int(budget_s / max(round_s, 1e-9))))
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn, n = fns[name], inner[name]
            sync(device)
            start = time.perf_counter()
            for _ in range(n):
                fn()
            sync(device)
            seconds[name].append((time.perf_counter() - start) / n)
    return Timing(seconds)


# --------------------------------------------------------------------------------------------
# counting operations
# --------------------------------------------------------------------------------------------

class _SDPAFlops(TorchFunctionMode):
    """Adds the matrix-multiply FLOPs of ``F.scaled_dot_product_attention`` calls on the CPU,
    which PyTorch's ``FlopCounterMode`` does not count there (it counts the CUDA kernels)."""

    def __init__(self, backward: bool):
        super().__init__()
        self.flops, self.backward = 0, backward

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention and args[0].device.type == "cpu":
            q, k = args[0], args[1]
            batch = math.prod(q.shape[:-2])
            flops = 4 * batch * q.shape[-2] * k.shape[-2] * q.shape[-1]      # q k^T and weights @ v
            self.flops += flops * (3 if self.backward and q.requires_grad else 1)
        return func(*args, **kwargs)


def count_flops(fn: Callable[[], Any], backward: bool = False) -> int:
    """Floating-point operations of the matrix products (``mm``, ``bmm``, convolutions, attention)
    that ``fn()`` issues, counted by ``torch.utils.flop_counter.FlopCounterMode``.

    Element-wise work (softmax, activations, the optimiser) is not counted. Fused attention on the
    CPU is counted as ``4 * batch * heads * L_q * L_k * d`` (its two products), and three times
    that when ``backward`` is True and the call is differentiated (the gradient needs twice the
    forward's products).
    """
    with FlopCounterMode(display=False) as counter, _SDPAFlops(backward) as extra:
        fn()
    return int(counter.get_total_flops()) + extra.flops


# --------------------------------------------------------------------------------------------
# the machine's ceilings
# --------------------------------------------------------------------------------------------

@dataclass
class Ceiling:
    """What one device at one thread count can do, measured in this run: the best of the rounds."""

    device: str
    threads: int
    peak_gflops: float        # fp32 matrix multiply
    bandwidth_gbs: float      # a large copy: bytes read + bytes written per second
    matmul_n: int
    copy_mib: int


def _peak(device: str, n: int, rounds: int) -> float:
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=g)
    b = torch.randn(n, n, device=device, generator=g)
    out = torch.empty(n, n, device=device)
    t = alternate({"mm": lambda: torch.mm(a, b, out=out)}, rounds=rounds, min_sample_s=0.02, device=device)
    return 2 * n ** 3 / min(t.seconds["mm"]) / 1e9


def _bandwidth(device: str, mib: int, rounds: int) -> float:
    src = torch.ones(mib * 2 ** 20 // 4, device=device)
    dst = torch.empty_like(src)
    t = alternate({"copy": lambda: dst.copy_(src)}, rounds=rounds, min_sample_s=0.02, device=device)
    return 2 * src.nbytes / min(t.seconds["copy"]) / 1e9


def best_ceilings(*runs: Mapping[tuple[str, int], Ceiling]) -> dict[tuple[str, int], Ceiling]:
    """The better of several measurements of the same ceilings: the machine can do at least that.

    On one device, a ceiling at ``n`` threads is also at least the one at fewer threads (``n``
    threads may always do the work of fewer): on a machine that other programs share, the
    all-threads measurement can come out lower than the one-thread one.
    """
    out: dict[tuple[str, int], Ceiling] = {}
    for run in runs:
        for key, c in run.items():
            old = out.get(key)
            out[key] = c if old is None else Ceiling(c.device, c.threads, max(c.peak_gflops, old.peak_gflops),
                                                     max(c.bandwidth_gbs, old.bandwidth_gbs), c.matmul_n, c.copy_mib)
    for (device, threads), c in sorted(out.items()):
        fewer = [o for (d, t), o in out.items() if d == device and t < threads]
        if fewer:
            out[(device, threads)] = Ceiling(device, threads, max([c.peak_gflops] + [o.peak_gflops for o in fewer]),
                                             max([c.bandwidth_gbs] + [o.bandwidth_gbs for o in fewer]),
                                             c.matmul_n, c.copy_mib)
    return out


def measure_ceilings(device_list: Sequence[str], matmul_n: int = 1024, copy_mib: int = 256,
                     rounds: int = 15, threads: Sequence[int] | None = None) -> dict[tuple[str, int], Ceiling]:
    """The ceilings of every device: on the CPU at each of ``threads`` (default
    :func:`thread_settings`), on CUDA once (recorded under :func:`all_threads`).

    Each is the best of ``rounds`` short samples (about 20 ms): on a shared machine, the best
    sample is the one least disturbed by other programs, the closest to what the machine can do.
    """
    out = {}
    for device in device_list:
        settings = list(threads or thread_settings()) if device == "cpu" else [all_threads()]
        for threads in settings:
            with cost.torch_threads(threads):
                out[(device, threads)] = Ceiling(device, threads, _peak(device, matmul_n, rounds),
                                                 _bandwidth(device, copy_mib, rounds), matmul_n, copy_mib)
    return out


# --------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------

@dataclass
class Table:
    """One table of the run.

    ``columns`` are ``(key, header, format)``; ``rows`` are dicts over the keys. Every key in
    ``ratios`` must hold a finite positive number in every row (a ratio measured in this run),
    and every key in ``ceilings`` too (the row's achieved fraction of, or distance to, the
    ceiling it names). ``notes`` are printed under the table.

    ``ceiling_of`` maps a ceiling column to the :class:`Ceiling` field it is a fraction of
    (``"peak_gflops"`` or ``"bandwidth_gbs"``): while the table is measured such a column holds
    the achieved rate (GFLOP/s or GB/s), and :meth:`finalize` divides it by the ceiling of the
    row's device and thread count once the run has measured its ceilings for the last time.
    """

    key: str
    title: str
    columns: list[tuple[str, str, str]]
    ratios: list[str]
    ceilings: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    ceiling_of: dict[str, str] = field(default_factory=dict)
    finalized: bool = False

    def finalize(self, ceilings: Mapping[tuple[str, int], Ceiling]) -> None:
        """Turn the achieved rates of the ``ceiling_of`` columns into fractions of the ceilings
        (the rate itself is kept under ``<column>_achieved``)."""
        if self.finalized:
            raise RuntimeError(f"table {self.key} is already finalized")
        for row in self.rows:
            label = row.get("threads")
            setting = (row.get("device", "cpu"), all_threads() if label == "GPU" else int(label))
            for col, kind in self.ceiling_of.items():
                row[f"{col}_achieved"] = row[col]
                row[col] = row[col] / getattr(ceilings[setting], kind)
        self.finalized = True

    def problems(self) -> list[str]:
        """What makes the table ill-formed (empty when it is well-formed)."""
        out = []
        keys = {c[0] for c in self.columns}
        for k in self.ratios + self.ceilings:
            if k not in keys:
                out.append(f"{self.key}: {k!r} is a ratio or ceiling but not a column")
        if not self.rows:
            out.append(f"{self.key}: no rows")
        if not self.ceilings:
            out.append(f"{self.key}: no ceiling column")
        if self.ceiling_of and not self.finalized:
            out.append(f"{self.key}: the ceiling columns hold rates, not fractions (finalize was not called)")
        for i, row in enumerate(self.rows):
            missing = keys - set(row)
            if missing:
                out.append(f"{self.key}, row {i}: no value for {sorted(missing)}")
            for k in self.ratios + self.ceilings:
                v = row.get(k)
                if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
                    kind = "ratio" if k in self.ratios else "ceiling"
                    out.append(f"{self.key}, row {i}: {kind} {k!r} is {v!r}, not a finite positive number")
        return out


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return format(value, fmt) if fmt else str(value)


def to_markdown(tables: Sequence[Table], machine: Mapping[str, Any], ceilings: Mapping[tuple[str, int], Ceiling],
                header: str = "", summary: str = "") -> str:
    """The whole run as Markdown: the machine, its ceilings, the ``summary`` (the headline
    ratios), then every table with its notes."""
    lines = [f"# `make bench` results{header}", ""]
    lines += [f"- **{k}**: {v}" for k, v in machine.items()]
    load = machine.get("load average at start", "")
    cores = machine.get("cores available")
    try:
        busy = float(str(load).split()[0]) > float(cores)
    except (ValueError, TypeError, IndexError):
        busy = False
    if busy:
        lines += ["", f"**The machine was shared**: the load average at the start ({load}) was above its {cores} cores. "
                  "The all-threads rows then measure waiting for a busy core as much as the code; compare the "
                  "one-thread rows, and ratios rather than times."]
    lines += ["", "## The machine's ceilings (measured at the start and at the end of this run; the better of "
              "the two, each the best of its rounds, and at all threads at least the one-thread value)", "",
              "| device | threads | fp32 matmul peak (GFLOP/s) | copy bandwidth (GB/s) |", "|---|---|---|---|"]
    for c in ceilings.values():
        lines.append(f"| {c.device} | {c.threads} | {c.peak_gflops:.1f} (n = {c.matmul_n}) | "
                     f"{c.bandwidth_gbs:.1f} ({c.copy_mib} MiB) |")
    if summary:
        lines += ["", "## Headline ratios (CPU; every one measured side by side in this run)", "", summary.rstrip()]
    for t in tables:
        lines += ["", f"## {t.title}", ""]
        lines.append("| " + " | ".join(h for _, h, _ in t.columns) + " |")
        lines.append("|" + "---|" * len(t.columns))
        for row in t.rows:
            lines.append("| " + " | ".join(_cell(row.get(k), f) for k, _, f in t.columns) + " |")
        lines.append("")
        lines += [f"*{n}*" if not n.startswith("-") else n for n in t.notes]
        lines.append(f"*Measured in {t.seconds:.0f} s.*")
    return "\n".join(lines) + "\n"


def machine_description() -> dict[str, Any]:
    """The machine and software a run came from (CPU model, cores, torch, ATen's CPU kernel, threads)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    desc = {
        "date (UTC)": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "CPU": cpu,
        "cores available": all_threads(),
        "thread settings": ", ".join(map(str, thread_settings())),
        "torch": torch.__version__,
        "ATen CPU capability": torch.backends.cpu.get_cpu_capability(),
        "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY", "(unset)"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "(unset)"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?",
    }
    if torch.cuda.is_available():
        desc["GPU"] = torch.cuda.get_device_name(0)
    return desc


def save(tables: Sequence[Table], machine: Mapping[str, Any], ceilings: Mapping[tuple[str, int], Ceiling],
         out_dir: Path, stem: str, config: Mapping[str, Any], latest: str | None = None,
         summary: str = "") -> list[Path]:
    """Write ``stem.json`` and ``stem.md`` into ``out_dir``, and the same under the name ``latest``
    (e.g. ``"latest"``) when given."""
    out_dir.mkdir(parents=True, exist_ok=True)
    data = {
        "machine": dict(machine), "config": dict(config),
        "ceilings": [asdict(c) for c in ceilings.values()],
        "tables": [asdict(t) for t in tables], "headline": summary,
    }
    text = json.dumps(data, indent=1, default=str)
    md = to_markdown(tables, machine, ceilings, header=f" ({config.get('mode', '')})", summary=summary)
    written = []
    for name in [stem] + ([latest] if latest else []):
        for suffix, content in ((".json", text), (".md", md)):
            path = out_dir / f"{name}{suffix}"
            path.write_text(content)
            written.append(path)
    return written


# --------------------------------------------------------------------------------------------
# the headline: one line per claim, docs/performance.md quotes it
# --------------------------------------------------------------------------------------------

def headline(tables: Sequence[Table], selectors: Sequence[tuple[str, str, Mapping[str, Any], str, str]],
             threads: Sequence[int]) -> str:
    """A short Markdown table: for each ``(claim, table key, row filter, column, format)`` the
    value in the CPU row that matches the filter, at each thread count (a column per count).
    Selectors whose row is missing (a table left out, another size) are skipped."""
    by_key = {t.key: t for t in tables}
    lines = ["| claim | " + " | ".join(f"{n} thread{'s' if n > 1 else ''}" for n in threads) + " |",
             "|---|" + "---|" * len(threads)]
    for claim, key, where, col, fmt in selectors:
        t = by_key.get(key)
        if t is None:
            continue
        cells = []
        for n in threads:
            row = next((r for r in t.rows if r.get("device", "cpu") == "cpu"
                        and r.get("threads", str(n)) == str(n)
                        and all(r.get(k) == v for k, v in where.items())), None)
            cells.append(_cell(row.get(col), fmt) if row else "–")
        if any(c != "–" for c in cells):
            lines.append(f"| {claim} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
