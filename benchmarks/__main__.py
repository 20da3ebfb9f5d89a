"""``python -m benchmarks``: run the benchmark tables, print them, save them (``make bench``).

    python -m benchmarks                 # the full run (make bench): 2-9 minutes on 2 cores
    python -m benchmarks --quick         # smaller sizes (make bench BENCH_QUICK=1)
    python -m benchmarks --only attention,decoding --no-save
    python -m benchmarks --readme        # copy the last full run's headline into docs/performance.md

Each run is saved as ``benchmarks/results/<date>-<mode>.{json,md}``; a full run also as
``latest.{json,md}`` (docs/performance.md quotes it), a quick one as ``latest-quick.{json,md}``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import time
from pathlib import Path

from benchmarks import harness, suites

RESULTS = Path(__file__).resolve().parent / "results"
# The page that quotes the headline (the README did, before issue 32).
README = Path(__file__).resolve().parents[1] / "docs" / "performance.md"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"


def update_readme(readme: Path = README, results: Path = RESULTS / "latest.json") -> None:
    """Put the headline of ``results`` (the last full run) between the bench markers of ``readme``
    (docs/performance.md),
    with the machine and the date it came from."""
    import json
    if not results.is_file():
        raise SystemExit(f"no {results}: run `make bench` first")
    data = json.loads(results.read_text())
    m = data["machine"]
    block = (f"{START}\n*{m['CPU']}, {m['cores available']} cores, torch {m['torch']} "
             f"({m['ATen CPU capability']}), {m['date (UTC)']} UTC, load average {m['load average at start']} at the "
             f"start; {m['CUDA']}.*\n\n{data['headline'].rstrip()}\n{END}")
    text = readme.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{readme} has no {START} ... {END} block to fill")
    head, rest = text.split(START, 1)
    readme.write_text(head + block + rest.split(END, 1)[1])

#: For a CUDA row, the column compared with the CPU (all threads) row that has the same key.
_GPU_COMPARE = {"attention": ("ms_eager", ("L",)), "mha": ("ms_ours", ("pass", "variant")),
                "decoding": ("ms_step", ("batch", "context", "variant")), "conv": ("ms_att", ("size",)),
                "training": ("examples_s", ("family",))}


def add_gpu_columns(tables: list[harness.Table], cpu_threads: int) -> None:
    """Give every CUDA row ``cpu_over_gpu``: the CPU's time (at ``cpu_threads``) over the GPU's for
    the table's own implementation (throughput: GPU over CPU). Nothing happens without CUDA rows."""
    for t in tables:
        if t.key not in _GPU_COMPARE or not any(r.get("device") == "cuda" for r in t.rows):
            continue
        col, keys = _GPU_COMPARE[t.key]
        cpu = {tuple(r[k] for k in keys): r for r in t.rows
               if r.get("device") == "cpu" and r.get("threads") == str(cpu_threads)}
        t.columns.append(("cpu_over_gpu", "CPU ÷ GPU time", ".1f"))
        for r in t.rows:
            other = cpu.get(tuple(r[k] for k in keys)) if r.get("device") == "cuda" else None
            if other is None:
                r["cpu_over_gpu"] = None
            elif col.endswith("_s"):        # a throughput
                r["cpu_over_gpu"] = r[col] / other[col]
            else:
                r["cpu_over_gpu"] = other[col] / r[col]
        t.notes.append("CPU ÷ GPU: the CPU row at all threads against the GPU row, same sizes (not alternated: "
                       "different devices).")


def run(mode: str, only: list[str] | None = None, skip: list[str] = (), cpu_only: bool = False,
        log=print) -> tuple[list[harness.Table], dict, dict, suites.Config]:
    """Measure the ceilings, then every table of ``mode`` (``full``, ``quick`` or ``tiny``).

    Returns ``(tables, machine description, ceilings, config)``.
    """
    if mode not in suites.CONFIGS:
        raise SystemExit(f"unknown mode {mode!r}: one of {', '.join(suites.CONFIGS)}")
    names = only or list(suites.SUITES)
    unknown = [n for n in [*names, *skip] if n not in suites.SUITES]
    if unknown:
        raise SystemExit(f"unknown table(s) {unknown}: the tables are {', '.join(suites.SUITES)}")
    cfg = suites.CONFIGS[mode]
    device_list, cuda_line = harness.devices(cpu_only)
    machine = harness.machine_description()
    machine["CUDA"] = cuda_line
    log(cuda_line)
    log(f"measuring the ceilings (fp32 matmul n = {cfg.matmul_n}, copy {cfg.copy_mib} MiB) ...")
    threads = list(cfg.threads or harness.thread_settings())
    ceilings = harness.measure_ceilings(device_list, cfg.matmul_n, cfg.copy_mib, cfg.ceiling_rounds, threads)
    for c in ceilings.values():
        log(f"  {c.device}, {c.threads} thread(s): {c.peak_gflops:.1f} GFLOP/s, {c.bandwidth_gbs:.1f} GB/s")
    ctx = suites.Context(device_list, threads, ceilings, log=log)
    tables = []
    for name in names:
        if name in skip:
            continue
        log(f"{name} ...")
        tables.append(suites.SUITES[name](cfg, ctx))
        log(f"  ({tables[-1].seconds:.0f} s)")
    log("measuring the ceilings again ...")
    end = harness.measure_ceilings(device_list, cfg.matmul_n, cfg.copy_mib, cfg.ceiling_rounds, threads)

    def describe(cs):
        return "; ".join(f"{c.device} {c.threads} thread(s): {c.peak_gflops:.1f} GFLOP/s, {c.bandwidth_gbs:.1f} GB/s"
                         for c in cs.values())

    machine["ceilings at the start"] = describe(ceilings)
    machine["ceilings at the end"] = describe(end)
    machine["load average at the end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    best = harness.best_ceilings(ceilings, end)     # the machine can do at least that: every fraction uses it
    for t in tables:
        t.finalize(best)
    add_gpu_columns(tables, max(ctx.threads))
    return tables, machine, best, cfg


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (also BENCH_QUICK=1)")
    parser.add_argument("--mode", choices=list(suites.CONFIGS), default=None, help="full, quick or tiny")
    parser.add_argument("--only", default="", help=f"comma-separated tables: {', '.join(suites.SUITES)}")
    parser.add_argument("--skip", default="", help="comma-separated tables to leave out")
    parser.add_argument("--cpu-only", action="store_true", help="do not measure CUDA even when present")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the results go (benchmarks/results)")
    parser.add_argument("--no-save", action="store_true", help="print only")
    parser.add_argument("--readme", action="store_true",
                        help="measure nothing: copy the headline of results/latest.json into docs/performance.md")
    args = parser.parse_args(argv)
    if args.readme:
        update_readme()
        print(f"docs/performance.md: headline from {RESULTS / 'latest.json'}")
        return 0
    mode = args.mode or ("quick" if args.quick or os.environ.get("BENCH_QUICK", "") not in ("", "0") else "full")
    only = [s for s in args.only.split(",") if s] or None
    skip = [s for s in args.skip.split(",") if s]
    start = time.perf_counter()
    tables, machine, ceilings, cfg = run(mode, only, skip, args.cpu_only,
                                         log=lambda s: print(s, file=sys.stderr, flush=True))
    machine["wall time of the run"] = f"{time.perf_counter() - start:.0f} s"
    machine["command"] = "make bench" + (" BENCH_QUICK=1" if mode == "quick" else "") if mode != "tiny" else \
        "python -m benchmarks --mode tiny"
    problems = [p for t in tables for p in t.problems()]
    config = {"mode": mode, **cfg.as_dict()}
    summary = harness.headline(tables, suites.headline_selectors(cfg), list(cfg.threads or harness.thread_settings()))
    print(harness.to_markdown(tables, machine, ceilings, header=f" ({mode})", summary=summary))
    if not args.no_save:
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H%M")
        latest = {"full": "latest", "quick": "latest-quick"}.get(mode)
        written = harness.save(tables, machine, ceilings, args.out, f"{stamp}-{mode}", config, latest=latest,
                               summary=summary)
        print("saved: " + ", ".join(str(p) for p in written), file=sys.stderr)
    if problems:
        print("ILL-FORMED TABLES:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
