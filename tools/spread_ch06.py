"""Spread over seeds of chapter 6's small experiments, beyond its asserted claims.

``tools/claim_spread.py`` measures the claims the chapter asserts; this script measures what the
text quotes as ranges, and the controls the chapter cannot afford to run in its 90 s. For each seed
offset it runs the chapter's own code (its imports cell and the cell that sets up section 3.4's
small reversal task, taken from the text source) with every seed shifted by the offset, exactly as
``claim_spread.py`` shifts them, and prints one JSON line per run, then a markdown table per part:

* ``ln``: Post-LN and Pre-LN, with and without warmup, at three peak learning rates (the chapter's
  0.03, and 0.01 and 0.003), 100 steps: exact match, final loss, the gradient norm at the first step
  (the initial weights) and the largest over the run (before clipping at 1.0, which all runs use);
* ``share``: 3 layers with separate weights, 3 layers sharing one layer, 1 layer, after 100 and 300
  steps (exact match and final training loss);
* ``smooth``: section 3.4's model with and without label smoothing 0.1 (exact match, and the mean
  probability the model gives its own argmax token, teacher-forced on the test set);
* ``extrap``: section 8's Transformer (length task, lengths 2-14) evaluated on longer reversals
  (lengths 15-18) than it was trained on;
* ``dates``: section 8's date model after ``--date-steps`` steps (exact match on the 500 test dates).

    OMP_NUM_THREADS=1 .venv/bin/python tools/spread_ch06.py --seeds 5 --parts ln share smooth
    OMP_NUM_THREADS=1 .venv/bin/python tools/spread_ch06.py --seeds 5 --parts extrap dates
    OMP_NUM_THREADS=1 .venv/bin/python tools/spread_ch06.py --seeds 5 --parts share --fresh

In one process a run's result can depend on what ran before it (the float rounding of these small,
chaotic runs follows e.g. the memory alignment the matrix kernels see): ``--fresh`` trains each
setting of ``share`` at each seed offset in a process of its own, and prints the settings seed by
seed, so that a comparison between settings is not one of run order.

About 2.4 s per 100-step run of the small model on a fast core: ``ln`` is 60 runs, ``share`` 30.
``ATEN_CPU_CAPABILITY=default`` in the environment gives the portable kernel's values.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from claim_spread import SEED_PRELUDE

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "solutions" / "ch06_transformer" / "ch06_transformer.py"
CELLS = ("from course_utils import (\n    attention,", "small_vocab = data.sequence_vocab(8)")

PARTS = {
    "ln": """
import numpy as np
rows = []
for peak in (0.03, 0.01, 0.003):
    factor = peak * math.sqrt(ABL["d_model"] * ABL_WARMUP)
    scheds = {"warmup": lambda s, f=factor: T.noam_lr(s, ABL["d_model"], ABL_WARMUP, f),
              "no warmup": lambda s, f=factor: T.noam_lr(max(s, ABL_WARMUP), ABL["d_model"], ABL_WARMUP, f)}
    for norm_first, ln in ((False, "Post-LN"), (True, "Pre-LN")):
        for sched in scheds:
            model = small_transformer(norm_first=norm_first)
            config = train.TrainConfig(ABL_STEPS, schedule=train.PerStep(scheds[sched]), betas=(0.9, 0.98), eps=1e-9, clip=1.0)
            hist = train.train_seq2seq(model, small_train, small_vocab, small_vocab, config, batch_size=64,
                                       device="cpu", progress=False)
            sc = train.evaluate(model, small_test, small_vocab, small_vocab)
            rows.append(dict(peak=peak, ln=ln, sched=sched, em=sc.exact_match, loss=float(np.mean(hist.loss[-20:])),
                             grad_first=hist.grad_norm[0], grad_max=max(hist.grad_norm)))
result = rows
""",
    "share": """
import numpy as np
rows = []
arms = [(steps, label, kw) for steps in (100, 300)
        for label, kw in (("3 layers, separate", {}), ("3 layers, shared", dict(share_layers=True)), ("1 layer", dict(n_layers=1)))]
for i, (steps, label, kw) in enumerate(arms):
    if ARM is not None and i != ARM:
        continue
    model = small_transformer(**kw)
    config = train.TrainConfig(steps, schedule=train.PerStep(schedules["warmup"]), betas=(0.9, 0.98), eps=1e-9, clip=1.0)
    hist = train.train_seq2seq(model, small_train, small_vocab, small_vocab, config, batch_size=64, device="cpu",
                               progress=False)
    sc = train.evaluate(model, small_test, small_vocab, small_vocab)
    rows.append(dict(steps=steps, model=label, em=sc.exact_match, loss=float(np.mean(hist.loss[-20:]))))
result = rows
""",
    "smooth": """
import numpy as np
rows = []
for eps_ls in (0.0, 0.1):
    model = small_transformer()
    config = train.TrainConfig(ABL_STEPS, schedule=train.PerStep(schedules["warmup"]), betas=(0.9, 0.98), eps=1e-9, clip=1.0)
    hist = train.train_seq2seq(model, small_train, small_vocab, small_vocab, config, batch_size=64, device="cpu",
                               progress=False, label_smoothing=eps_ls)
    sc = train.evaluate(model, small_test, small_vocab, small_vocab)
    b = data.make_batch(small_test, small_vocab, small_vocab)
    with torch.no_grad():
        p = model(b.src, b.src_lengths, b.tgt_in).softmax(-1)
    real = b.tgt_out != PAD_ID
    conf = p.max(-1).values[real].mean().item()
    rows.append(dict(label_smoothing=eps_ls, em=sc.exact_match, confidence=conf))
result = rows
""",
    "extrap": """
len_train, len_test, len_vocab = data.length_task()
LV = len(len_vocab)
model, hist = lengthtask.train_on_length_task(lambda: T.Seq2SeqTransformer(LV, LV, d_model=64, n_heads=4, n_layers=2, d_ff=128),
                                         len_train, len_vocab, lengthtask.length_task_config(schedule=train.PerStep(lambda s: 0.5 * T.noam_lr(s, 64, 100))),
                                         device="cpu", progress=False)
sc = train.evaluate(model, len_test, len_vocab, len_vocab, max_len=20)
longer = data.make_sequence_pairs(400, 15, 18, task="reverse", n_symbols=8, seed=11)
sl = train.evaluate(model, longer, len_vocab, len_vocab, max_len=24)
result = [dict(em_10_14=lengthtask.mean_exact_match(sc, 10, 14), em_15_18=sl.exact_match,
               em_by_len={L: e for L, (_, e) in sl.by_length.items()})]
""",
    "dates": """
date_train, date_test = data.split(data.make_date_pairs(10000, seed=0), 500, seed=1)
sv, tv = data.date_vocabs()
rows = []
for steps in DATE_STEPS_LIST:
    train.set_seed(0)
    model = T.Seq2SeqTransformer(len(sv), len(tv), d_model=64, n_heads=4, n_layers=1, d_ff=256)
    hist = train.train_seq2seq(model, date_train, sv, tv, train.TrainConfig(steps, schedule=train.PerStep(lambda s: 0.5 * T.noam_lr(s, 64, 100)),
                                                                           clip=1.0),
                               batch_size=64, device="cpu", progress=False)
    rows.append(dict(steps=steps, em=train.evaluate(model, date_test, sv, tv).exact_match, seconds=hist.seconds))
result = rows
""",
}


SHARE_ARMS = 6   # the ``share`` part's (steps, model) settings, each of which --fresh runs in a process of its own


def run(part: str, offset: int, date_steps: list[int], arm: int | None = None) -> list[dict]:
    cells = re.split(r"\n(?=# %%)", SOURCE.read_text())
    env: dict = {"DATE_STEPS_LIST": date_steps, "ARM": arm}
    exec(SEED_PRELUDE.format(offset=offset), env)
    for marker in CELLS:
        cell = next(c for c in cells if marker in c)
        exec(cell, env)
    exec("import math\n" + PARTS[part], env)
    return env["result"]


def _range(values) -> str:
    values = list(values)
    return f"{min(values):.2f}–{max(values):.2f}"


def table(part: str, rows: list[dict]) -> str:
    """Markdown: per setting, the value at offset 0 and the range over the offsets."""
    keys = {"ln": ("peak", "ln", "sched"), "share": ("steps", "model"), "smooth": ("label_smoothing",),
            "extrap": (), "dates": ("steps",)}[part]
    values = [k for k in rows[0] if k not in keys and k not in ("offset", "em_by_len")]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    head = "| " + " | ".join(keys + tuple(f"{v} (seed+0; range)" for v in values)) + " |"
    lines = [head, "|" + "---|" * (len(keys) + len(values))]
    for key, rs in groups.items():
        first = next(r for r in rs if r["offset"] == min(x["offset"] for x in rs))
        lines.append("| " + " | ".join([str(k) for k in key]
                                       + [f"{first[v]:.2f}; {_range(r[v] for r in rs)}" for v in values]) + " |")
    return "\n".join(lines)


def paired(rows: list[dict]) -> str:
    """The share part seed by seed: exact match of each setting, and the differences the chapter reads."""
    by = {(r["offset"], r["steps"], r["model"]): r["em"] for r in rows}
    lines = ["| steps | seed offset | separate | shared | 1 layer | shared - separate | shared - 1 layer |",
             "|---|---|---|---|---|---|---|"]
    for steps in sorted({r["steps"] for r in rows}):
        for offset in sorted({r["offset"] for r in rows}):
            sep, sh, one = (by[offset, steps, m] for m in ("3 layers, separate", "3 layers, shared", "1 layer"))
            lines.append(f"| {steps} | {offset} | {sep:.2f} | {sh:.2f} | {one:.2f} | {sh - sep:+.2f} | {sh - one:+.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--parts", nargs="*", default=list(PARTS), choices=list(PARTS))
    parser.add_argument("--date-steps", type=int, nargs="*", default=[600])
    parser.add_argument("--fresh", action="store_true",
                        help="share: train every (seed offset, setting) in a fresh process of its own, so that no "
                             "result depends on what ran before it in the process")
    parser.add_argument("--one", type=int, nargs=2, metavar=("OFFSET", "ARM"), default=None,
                        help="(used by --fresh) run one setting of the share part at one seed offset, print its JSON")
    args = parser.parse_args()
    kernel = os.environ.get("ATEN_CPU_CAPABILITY", "native")
    if args.one is not None:
        for r in run("share", args.one[0], args.date_steps, arm=args.one[1]):
            print(json.dumps({"offset": args.one[0], **r}), flush=True)
        return
    for part in args.parts:
        rows = []
        for offset in range(args.seeds):
            if args.fresh and part == "share":
                for arm in range(SHARE_ARMS):
                    done = subprocess.run([sys.executable, __file__, "--one", str(offset), str(arm)], check=True,
                                          capture_output=True, text=True, cwd=Path(__file__).parent)
                    rows += [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
                    print(json.dumps({"part": part, "kernel": kernel, "fresh": True, **rows[-1]}), flush=True)
                continue
            for r in run(part, offset, args.date_steps):
                rows.append({"offset": offset, **r})
                print(json.dumps({"part": part, "kernel": kernel, **rows[-1]}), flush=True)
        fresh = ", every setting in a fresh process" if args.fresh and part == "share" else ""
        print(f"\n{part}, kernel {kernel}, seed offsets 0-{args.seeds - 1}{fresh}:\n{table(part, rows)}\n", flush=True)
        if part == "share":
            print(paired(rows), flush=True)


if __name__ == "__main__":
    main()
