"""Chapter 8: which modern part matters at this scale, over seeds (offline, CPU).

Trains chapter 8's small decoder (``course_utils.textlm.CH08_MODEL``, budget ``CH08_BUDGET``) on the
standard library's source once per variant of ``textlm.ABLATIONS`` (each modern part swapped for its
chapter 6 counterpart) and per seed (the seed sets the weights *and* the training windows), and
writes a markdown table of the held-out loss (nats per byte, 64 fixed windows of 64 bytes): mean,
min-max and standard deviation over the seeds, and the paired difference to the modern decoder
(same seed: same initial draws where shapes agree, same batches). For the positional variants it
also measures the loss on windows 4x longer than those seen in training, by position range.

    OMP_NUM_THREADS=1 .venv/bin/python tools/ch08_ablation.py --seeds 5 --out tools/ch08_ablation.md

One run takes about 20 s of one core; the default (7 variants x 5 seeds) about 12 minutes.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course_utils import textlm  # noqa: E402

POSITIONAL = ("modern (RMSNorm, SwiGLU, RoPE, GQA 4/2)", "learned positions instead of RoPE",
              "sinusoidal positions instead of RoPE")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=textlm.CH08_BUDGET["steps"])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    train, val = textlm.split_corpus(textlm.stdlib_corpus())
    budget = {**textlm.CH08_BUDGET, "steps": args.steps}
    L = budget["length"]
    loss: dict[str, list[float]] = {}
    ranges: dict[str, list[list[float]]] = {}
    params: dict[str, int] = {}
    start = time.time()
    for seed in range(args.seeds):
        for name, changes in textlm.ABLATIONS.items():
            model = textlm.ch08_model(changes, seed)
            params[name] = sum(p.numel() for p in model.parameters())
            textlm.train_lm(model, train, seed=seed, **budget)
            loss.setdefault(name, []).append(textlm.eval_loss(model, val, L))
            if name in POSITIONAL:
                by_pos = textlm.loss_by_position(model, val, 4 * L, n=32)
                ranges.setdefault(name, []).append(
                    [by_pos[a:b].mean().item() for a, b in ((0, L), (L, 2 * L), (2 * L, 4 * L))])
            print(f"seed {seed} {name}: {loss[name][-1]:.4f} ({time.time() - start:.0f} s)", flush=True)
    base = textlm.ABLATIONS and next(iter(textlm.ABLATIONS))
    lines = [
        "# Chapter 8: each modern part swapped for its chapter 6 counterpart",
        "",
        f"`{' '.join(sys.argv)}` on {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"Python {platform.python_version()} (the corpus is this Python's standard library). Model "
        f"{textlm.CH08_MODEL}, budget {budget}; {args.seeds} seeds (weights and training windows); "
        "held-out loss in nats per byte (lower is better), 64 fixed windows of "
        f"{L} bytes of the last 10 % of the corpus. Difference: variant minus modern, same seed.",
        "",
        "| variant | parameters | loss, mean | min-max | std | difference to modern, mean (min-max) |",
        "|---|---|---|---|---|---|",
    ]
    for name, values in loss.items():
        diff = [v - b for v, b in zip(values, loss[base])]
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        lines.append(f"| {name} | {params[name]:,} | {statistics.mean(values):.3f} | {min(values):.3f}-{max(values):.3f} "
                     f"| {sd:.3f} | {statistics.mean(diff):+.3f} ({min(diff):+.3f} to {max(diff):+.3f}) |")
    lines += ["", f"## Longer than trained: windows of {4 * L} bytes (trained on {L}), loss by position range", "",
              f"| positions | 0-{L - 1} (seen) | {L}-{2 * L - 1} | {2 * L}-{4 * L - 1} |", "|---|---|---|---|"]
    for name, rows in ranges.items():
        cells = []
        for j in range(3):
            col = [r[j] for r in rows]
            cells.append(f"{statistics.mean(col):.2f} ({min(col):.2f}-{max(col):.2f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", f"Total {time.time() - start:.0f} s on one thread."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
