"""Measure every experiment claim of the chapters over seeds and CPU profiles, and print the spread.

A chapter states a trained or sampled result as ``course_utils.claims.check(claim, value,
above=..., below=...)``. This script executes the solution notebooks (never in place) with
``COURSE_CLAIMS_LOG`` set, so each check records its value instead of raising, for every pair of

* a seed offset 0 .. N-1 (``--seeds N``, default 5): every seed the notebook sets (``random``,
  ``numpy``, ``torch.manual_seed``, ``torch.Generator``, ``random.Random``: the data as well as the
  weights) is shifted by the offset;
* a CPU profile (``--profiles``, default every one of ``tools/cpu_profiles.py``: ``native``, ``avx2``
  and ``avx``): ATen's, MKL's and oneDNN's vector code limited together, as on another machine;
* the threads of each kernel (``--threads N``, default 1 as in ``make test``; a learner's Lab uses
  PyTorch's default, every core): a run with N > 1 is labelled ``<profile>-<N>t`` in the tables, and
  ``--markdown`` then leaves ``course_utils/claim_spread.json`` (the one-thread spread) alone;
  ``--against tools/claim_spread.md`` says which values fall outside the one-thread ranges.

It prints, per claim, its bound, the stored run's value (offset 0, native), the range over every
run, the range under each profile and the smallest margin to the bound, and marks a claim that
failed anywhere. It also reports cells that raised, and, for offset 0, cells marked
``# NBVAL_CHECK_OUTPUT`` whose output differs from the stored one (what the portable stage of CI
would catch). Thresholds in the chapters are set from this table: a bound must hold with room to
spare over every run. ``--merge`` also writes each claim's measured range to
``course_utils/claim_spread.json``, which ``claims.check`` quotes to a learner whose run falls
outside its bound.

    .venv/bin/python tools/claim_spread.py                       # every chapter, 5 seeds x 3 profiles
    .venv/bin/python tools/claim_spread.py ch02 --seeds 3 --jobs 2
    .venv/bin/python tools/claim_spread.py --json spread.json    # also keep the raw records
    .venv/bin/python tools/claim_spread.py ch01 ch02 --profiles native avx2 --merge tools/claim_spread.md

``--markdown FILE`` writes a new document (its header line says which tool made it, when and on
what machine); ``--merge FILE`` updates an existing one: it removes the rows of the chapters that
ran from every table of FILE and appends a section with the new table under the same kind of
header line (``--note`` adds a paragraph to it). With ``--from-json`` either writes the table of an
earlier run. The tables are never edited by hand (``tests/test_quotes.py`` checks that every
``claims.check`` of the chapters has its row, and that every table sits under a header line of the
tool that wrote it).

One execution of every chapter takes about 6 minutes of one core natively (about twice that under
``avx``); the default (15 runs a chapter) about 2 hours of one core, 1 hour with ``--jobs 2``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import cpu_profiles  # noqa: E402

SPREAD_JSON = ROOT / "course_utils" / "claim_spread.json"

# Prepended to the notebook when the offset is not 0. It shifts every seed the chapter sets,
# through the functions the chapters and course_utils call.
SEED_PRELUDE = """\
import random as _r, numpy as _np, torch as _t
_OFFSET = {offset}
_torch_seed = _t.manual_seed
_t.manual_seed = lambda s, _f=_torch_seed: _f(int(s) + _OFFSET)
_py_seed = _r.Random.seed
def _seed(self, a=None, version=2, _f=_py_seed):
    return _f(self, a + _OFFSET if isinstance(a, int) else a, version)
_r.Random.seed = _seed
_r.seed = _r._inst.seed
_np_seed = _np.random.seed
_np.random.seed = lambda s=None, _f=_np_seed: _f(None if s is None else int(s) + _OFFSET)
_np_rng = _np.random.default_rng
_np.random.default_rng = lambda s=None, _f=_np_rng: _f(s + _OFFSET if isinstance(s, int) else s)
class _Generator(_t.Generator):
    def manual_seed(self, s):
        return super().manual_seed(int(s) + _OFFSET)
_t.Generator = _Generator
"""


def chapters(selected: list[str]) -> list[Path]:
    found = sorted(ROOT.glob("solutions/ch*/ch*.ipynb"))
    if selected:
        found = [p for p in found if any(s in p.stem for s in selected)]
    if not found:
        raise SystemExit(f"no chapter matches {selected}")
    return found


def _outputs_text(cell) -> str:
    parts = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            parts.append(o.get("text", ""))
        elif o.get("output_type") in ("execute_result", "display_data"):
            parts.append(o.get("data", {}).get("text/plain", ""))
    return re.sub(r"\b0x[0-9a-fA-F]{6,16}\b", "0x", "".join(parts))


def label(profile: str, threads: int) -> str:
    """A run's column in the tables: its CPU profile, with its thread count when that is not 1."""
    return profile if threads == 1 else f"{profile}-{threads}t"


def run_one(notebook: str, offset: int, profile: str, threads: int = 1) -> dict:
    """Execute one notebook copy under ``profile`` with every seed shifted by ``offset``; return its
    claims, the cells that raised, the changed checked outputs and (offset 0) every code cell's output."""
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)
    stored = [_outputs_text(c) if c.cell_type == "code" and "NBVAL_CHECK_OUTPUT" in c.source else None
              for c in nb.cells]
    shift = 0
    if offset:
        nb.cells.insert(0, nbformat.v4.new_code_cell(SEED_PRELUDE.format(offset=offset)))
        shift = 1
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "claims.jsonl"
        env = cpu_profiles.environment(profile, dict(
            os.environ, COURSE_CLAIMS_LOG=str(log), OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"))
        env.pop("NBGRADER_EXECUTION", None)
        km = KernelManager(kernel_name="python3")
        km.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        start = time.perf_counter()
        client = NotebookClient(nb, km=km, timeout=900, allow_errors=True, record_timing=False,
                                resources={"metadata": {"path": str(Path(notebook).parent)}})
        try:
            client.execute(env=env)
        finally:   # a kernel manager passed in is the caller's to stop: each run's kernel would stay alive
            if km.has_kernel:
                km.shutdown_kernel(now=True)
        seconds = time.perf_counter() - start
        records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    errors, changed, outputs = [], [], {}
    for i, cell in enumerate(nb.cells[shift:]):
        if cell.cell_type != "code":
            continue
        for o in cell.outputs:
            if o.output_type == "error":
                errors.append(f"cell {i}: {o.ename}: {o.evalue[:200]}")
        if stored[i] is not None and _outputs_text(cell) != stored[i]:
            changed.append(i)
        if offset == 0:
            outputs[i] = _outputs_text(cell)
    return {"notebook": Path(notebook).stem, "offset": offset, "kernel": label(profile, threads), "threads": threads, "seconds": round(seconds, 1),
            "claims": records, "errors": errors, "changed_checked_outputs": changed, "outputs": outputs}


def _bound(rec: dict) -> str:
    return " and ".join(b for b in (f"> {rec['above']:g}" if rec["above"] is not None else "",
                                    f"< {rec['below']:g}" if rec["below"] is not None else "") if b)


def _margin(rec: dict) -> float:
    m = []
    if rec["above"] is not None:
        m.append(rec["value"] - rec["above"])
    if rec["below"] is not None:
        m.append(rec["below"] - rec["value"])
    return min(m)


def _range(values: list[float]) -> str:
    return f"{min(values):.4g}–{max(values):.4g} ({len(values)})" if values else "–"


def by_claim(runs: list[dict]) -> dict[str, dict]:
    """Every claim's records gathered over the runs: its bound, its values by (profile, offset),
    its margins and the runs where it failed. A claim checked in a loop under one name gets a
    running number (``name [#2]``)."""
    claims: dict[str, dict] = {}
    for run in runs:
        seen: dict[str, int] = {}
        for rec in run["claims"]:
            n = seen[rec["claim"]] = seen.get(rec["claim"], 0) + 1
            name = rec["claim"] if n == 1 else f"{rec['claim']} [#{n}]"
            entry = claims.setdefault(name, {"bound": _bound(rec), "above": rec["above"], "below": rec["below"],
                                             "values": {}, "margin": [], "failed": []})
            entry["values"][(run["kernel"], run["offset"])] = rec["value"]
            entry["margin"].append(_margin(rec))
            if not rec["holds"]:
                entry["failed"].append(f"{run['kernel']}/seed+{run['offset']}")
    return claims


def report(runs: list[dict], profiles: list[str]) -> str:
    """The markdown table of every claim over the runs (one column per profile), then the errors."""
    lines = ["| claim | bound | seed+0 | over seeds × CPUs (min–max) | "
             + " | ".join(profiles) + " | smallest margin | failed in |",
             "|---|---|---|---|" + "---|" * len(profiles) + "---|---|"]
    for name, e in by_claim(runs).items():
        stored = e["values"].get((profiles[0], 0), float("nan"))
        per = [_range([v for (k, _), v in e["values"].items() if k == p]) for p in profiles]
        lines.append(f"| {name} | {e['bound']} | {stored:.4g} | {_range(list(e['values'].values()))} | "
                     + " | ".join(per) + f" | {min(e['margin']):.4g} | {', '.join(e['failed']) or '–'} |")
    for run in runs:
        tag = f"{run['notebook']} {run['kernel']} seed+{run['offset']} ({run['seconds']} s)"
        for err in run["errors"]:
            lines.append(f"\nERROR {tag}: {err}")
        if run["offset"] == 0 and run["changed_checked_outputs"]:
            lines.append(f"\nCHANGED checked output {tag}: cells {run['changed_checked_outputs']}")
    return "\n".join(lines)


def spread_summary(runs: list[dict], old: dict | None = None) -> dict:
    """``claim -> {bound, min, max, runs, seeds, profiles}`` over ``runs``, on top of ``old`` (the
    entries of chapters not run are kept): what ``claims.check`` tells a learner whose run falls
    outside the bound."""
    chapters_run = {run["notebook"][:4] for run in runs}
    summary = {k: v for k, v in (old or {}).items() if k[:4] not in chapters_run}
    for name, e in by_claim(runs).items():
        values = list(e["values"].values())
        summary[name] = {"bound": e["bound"], "min": min(values), "max": max(values), "runs": len(values),
                         "seeds": len({o for _, o in e["values"]}), "profiles": sorted({k for k, _ in e["values"]})}
    return dict(sorted(summary.items()))


def moved_quotes(run: dict) -> tuple[int, list[str]]:
    """The text's quotes of the chapter's own outputs (``<!-- q:out#KEY -->``, tests/test_quotes.py)
    checked against ``run``'s outputs instead of the stored ones: (how many quotes, the ones that moved)."""
    import nbformat
    sys.path.insert(0, str(ROOT / "tests"))
    import test_quotes

    chapter = ROOT / "solutions" / run["notebook"] / f"{run['notebook']}.ipynb"
    lines = [ln for text in run["outputs"].values() for ln in text.splitlines()]
    quotes, moved = 0, []
    for line in test_quotes.markdown_lines(nbformat.read(chapter, as_version=4)):
        for source, key, value in test_quotes.QUOTE.findall(line):
            if source == "out":
                quotes += 1
                if test_quotes.check_quote(lines, key, value, unique=False):
                    moved.append(f"{key} -> {value}")
    return quotes, moved


def quotes_report(runs: list[dict]) -> str:
    """Per chapter and profile (seed offset 0): how many of the text's output quotes would move."""
    lines = []
    for run in runs:
        if run["offset"] == 0 and run.get("outputs"):
            quotes, moved = moved_quotes(run)
            lines.append(f"QUOTES {run['notebook']} {run['kernel']}: {len(moved)} of {quotes} move"
                         + (": " + "; ".join(moved) if moved else ""))
    return "\n".join(lines)


TITLE = "# Experiment claims over seeds and CPU profiles"
COLUMNS = ("Columns: the claim's bound; its value at seed offset 0 under the native profile (the stored "
           "outputs' setting); its range over every run (seed offsets x CPU profiles, the number of runs in "
           "brackets); its range over the seed offsets under each CPU profile of tools/cpu_profiles.py "
           "(native: this machine; avx2: ATen, MKL and oneDNN limited to AVX2; avx: ATen's portable kernel, "
           "MKL and oneDNN limited to AVX); the smallest distance to the bound over all runs.")
ROW = re.compile(r"^\| (ch\d\d): ")


def machine(threads: int = 1) -> str:
    """'Intel Xeon ..., 2 cores, torch 2.x, native CPU kernel `AVX512`': where the runs were made."""
    import platform

    import torch
    cpu = platform.processor() or platform.machine()
    info = Path("/proc/cpuinfo")
    if info.exists():
        cpu = next((ln.split(":", 1)[1].strip() for ln in info.read_text().splitlines()
                    if ln.startswith("model name")), cpu)
    return (f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, native CPU kernel "
            f"`{torch.backends.cpu.get_cpu_capability()}`, "
            + ("one thread per notebook" if threads == 1 else f"{threads} threads per notebook"))


def against(runs: list[dict], table: str) -> str:
    """A paragraph comparing ``runs`` with the rows of an earlier table (``--against``): how many claims'
    values lie outside that table's range over every run, which, and whether any failed its bound."""
    ranges = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        found = re.fullmatch(r"(-?[\d.e+-]+)–(-?[\d.e+-]+) \(\d+\)", cells[3]) if len(cells) > 3 else None
        if found and ROW.match(line):     # a claims table's row (other tables of the document skipped)
            ranges[cells[0]] = (float(found.group(1)), float(found.group(2)), cells[3])
    seen, outside = 0, []
    for name, e in by_claim(runs).items():
        if name not in ranges:
            continue
        lo, hi, shown = ranges[name]
        for value in e["values"].values():
            seen += 1
            if not lo <= float(f"{value:.4g}") <= hi:      # the table's rounding
                outside.append(f"{name}: {value:.4g} against {shown}")
    failed = [name for name, e in by_claim(runs).items() if e["failed"]]
    return (f"Against the earlier table: {len(outside)} of {seen} values lie outside its range over every run"
            + (": " + "; ".join(outside) if outside else "") + f". Claims that failed their bound: {len(failed)}" + (f" ({'; '.join(failed)})." if failed else "."))


def made_by(command: str, where: str, day: str | None = None) -> str:
    """The header line of every table this tool writes."""
    return f"Made by `{command}` on {day or time.strftime('%Y-%m-%d')}: {where}."


def markdown_document(table: str, command: str, where: str, day: str | None = None) -> str:
    """A new document: the title, the header line and the table (``--markdown``)."""
    return f"{TITLE}\n\n{made_by(command, where, day)} {COLUMNS}\n\n{table}\n"


def _emptied(section: str) -> bool:
    """A ``## `` section with a claims table but no row left in it (a section of prose alone stays)."""
    lines = section.split("\n")
    return section.startswith("## ") and any(ln.startswith("| claim |") for ln in lines) \
        and not any(map(ROW.match, lines))


def merge_document(old: str, table: str, chapters_run: list[str], command: str, where: str,
                   note: str = "", day: str | None = None) -> str:
    """``old`` (a document this tool wrote) with the rows of ``chapters_run`` (e.g. ``["ch01"]``)
    removed from every table, a section (``## ``) left without rows removed whole (its text described
    them), and a section with ``table`` appended (``--merge``)."""
    kept = [ln for ln in old.rstrip("\n").split("\n")
            if not ((m := ROW.match(ln)) and m.group(1) in chapters_run)]
    sections = re.split(r"\n(?=## )", "\n".join(kept))
    kept = ["\n".join(s for s in sections if not _emptied(s))]
    day = day or time.strftime("%Y-%m-%d")
    heading = f"## {', '.join(chapters_run)} ({day})"
    replaced = (f"The rows of {', '.join(chapters_run)} in the tables above were removed by this run and are "
                "replaced by these.")
    parts = ["\n".join(kept), heading, f"{made_by(command, where, day)} {COLUMNS} {replaced}"]
    if note:
        parts.append(note)
    return "\n\n".join(parts + [table]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("chapters", nargs="*", help="chapter names or parts of them (default: all)")
    parser.add_argument("--seeds", type=int, default=5, help="seed offsets 0..N-1, under every profile")
    parser.add_argument("--profiles", nargs="*", default=list(cpu_profiles.PROFILES), choices=list(cpu_profiles.PROFILES),
                        help="CPU profiles of tools/cpu_profiles.py (default: all)")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks executed at once")
    parser.add_argument("--threads", type=int, default=1, help="threads of each notebook's kernel (default 1)")
    parser.add_argument("--json", type=Path, help="also write the raw records here (after every run)")
    parser.add_argument("--markdown", type=Path, help="also write the table here, with the machine it ran on, and "
                                                      "course_utils/claim_spread.json anew")
    parser.add_argument("--merge", type=Path,
                        help="update this document: drop the rows of the chapters run, append a section with the "
                             "new table; and update course_utils/claim_spread.json")
    parser.add_argument("--against", type=Path, help="compare the runs with an earlier table of this tool: "
                                                     "the values outside its ranges (a paragraph under --markdown)")
    parser.add_argument("--note", default="", help="a paragraph for the section --merge appends")
    parser.add_argument("--from-json", type=Path, help="print the table of an earlier --json run, run nothing")
    parser.add_argument("--quotes", action="store_true",
                        help="also print, per chapter and profile, the text's output quotes that move (seed offset 0)")
    args = parser.parse_args(argv)
    given = list(sys.argv[1:] if argv is None else argv)
    if "--note" in given:   # the note is printed as its own paragraph, not in the command
        del given[given.index("--note"):given.index("--note") + 2]
    command = shlex.join(["tools/claim_spread.py", *(a for a in given if not a.startswith("--note="))])
    if args.from_json:
        runs = json.loads(args.from_json.read_text())
    else:
        plan = [(str(nb), off, prof, args.threads) for nb in chapters(args.chapters) for prof in args.profiles
                for off in range(args.seeds)]
        runs = []
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            for run in pool.map(run_one, *zip(*plan)):
                print(f"ran {run['notebook']} {run['kernel']} seed+{run['offset']}: {run['seconds']} s, "
                      f"{len(run['claims'])} claims, {len(run['errors'])} errors", flush=True)
                runs.append(run)
                if args.json:
                    args.json.write_text(json.dumps(runs, indent=1))
    table = report(runs, list(dict.fromkeys(run["kernel"] for run in runs)))
    print(table)
    if args.quotes:
        print(quotes_report(runs))
    threads = max(run.get("threads") or int((re.search(r"-(\d+)t$", run["kernel"]) or [0, 1])[1]) for run in runs)
    if args.against:
        table = f"{against(runs, args.against.read_text(encoding='utf-8'))}\n\n{table}"
        print(table.split("\n\n")[0])
    if args.markdown:   # a new document, and (one thread, as the bounds are set) the learner's spreads
        args.markdown.write_text(markdown_document(table, command, machine(threads)))
        if threads == 1:
            SPREAD_JSON.write_text(json.dumps(spread_summary(runs), indent=1, ensure_ascii=False) + "\n")
    if args.merge:
        run_chapters = sorted({run["notebook"][:4] for run in runs})
        args.merge.write_text(merge_document(args.merge.read_text(), table, run_chapters, command, machine(),
                                             args.note))
        old = json.loads(SPREAD_JSON.read_text()) if SPREAD_JSON.exists() else {}
        SPREAD_JSON.write_text(json.dumps(spread_summary(runs, old), indent=1, ensure_ascii=False) + "\n")
    failed = any(not r["holds"] for run in runs for r in run["claims"]) or any(run["errors"] for run in runs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
