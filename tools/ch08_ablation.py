"""Chapter 8: which modern part matters at this scale, over seeds (offline, CPU).

Trains chapter 8's small decoder (``course_utils.ablation.CH08_MODEL``, budget ``CH08_BUDGET``) on the
standard library's source once per variant of ``ablation.ABLATIONS`` (each modern part swapped for its
chapter 6 counterpart) and per seed (the seed sets the weights *and* the training windows), and
writes a markdown table of the held-out loss (nats per byte, 64 fixed windows of 64 bytes): mean,
min-max and standard deviation over the seeds, and the paired difference to the modern decoder
(same seed: same initial draws where shapes agree, same batches). For the positional variants it
also measures the loss on windows 4x longer than those seen in training, by position range, and
writes two baselines that ignore the context: a unigram and a bigram model of the bytes (counts of
the training part with add-one smoothing, scored on the whole held-out part).

    OMP_NUM_THREADS=1 .venv/bin/python tools/ch08_ablation.py --seeds 5 --out tools/ch08_ablation.md

The embedding-scale control (``--scaled-control``): chapter 8's decoder draws its token vectors from
N(0, 0.02^2) and does not scale them (norm about 0.16), while the sinusoidal table it adds has
amplitude 1 (norm sqrt(d/2) = 5.66): the token is nearly drowned by its position. The control trains
the sinusoidal variant with the token vectors as chapter 6 has them (the same draws rescaled to
N(0, 1/d), times sqrt(d) in the forward pass: unit-variance entries), beside the modern and the
plain sinusoidal variants (a subset, ``--variants``), in a file of its own:

    OMP_NUM_THREADS=1 .venv/bin/python tools/ch08_ablation.py --seeds 5 --variants sinusoidal \\
        --scaled-control --out tools/ch08_ablation_control.md

One run takes 20-40 s of one core; the default (7 variants x 5 seeds) about 20 minutes, the control
(3 variants x 5 seeds) about 8.
"""
from __future__ import annotations

import argparse
import math
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course_utils import ablation, textlm  # noqa: E402

BASE = "modern (RMSNorm, SwiGLU, RoPE, GQA 4/2)"
SCALED = "sinusoidal positions instead of RoPE, tokens scaled as in chapter 6"
POSITIONAL = (BASE, "learned positions instead of RoPE", "sinusoidal positions instead of RoPE", SCALED)


def scale_tokens(model: torch.nn.Module) -> None:
    """Token vectors as chapter 6 has them: the same draws rescaled from N(0, 0.02^2) to N(0, 1/d),
    multiplied by sqrt(d) in the forward pass (entries of unit variance)."""
    d = model.cfg.d_model
    with torch.no_grad():
        model.embed.table.weight.mul_(d ** -0.5 / 0.02)
    model.embed.scale = math.sqrt(d)


def context_free_baselines(train: torch.Tensor, val: torch.Tensor, vocab: int = textlm.VOCAB_SIZE) -> dict[str, float]:
    """Held-out nats per byte of a unigram and a bigram model of the training bytes (add-one smoothing)."""
    uni = torch.bincount(train, minlength=vocab).double() + 1.0
    pairs = torch.ones(vocab, vocab, dtype=torch.float64)
    pairs.index_put_((train[:-1], train[1:]), torch.ones(len(train) - 1, dtype=torch.float64), accumulate=True)
    return {"unigram": -(uni / uni.sum()).log()[val].mean().item(),
            "bigram": -(pairs / pairs.sum(1, keepdim=True)).log()[val[:-1], val[1:]].mean().item()}


def cpu_name() -> str:
    """The processor's model name (Linux), else the platform's word for it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=ablation.CH08_BUDGET["steps"])
    ap.add_argument("--variants", default=None,
                    help="comma-separated substrings: only the variants whose name contains one (modern always runs)")
    ap.add_argument("--scaled-control", action="store_true",
                    help="also train the sinusoidal variant with token vectors scaled as in chapter 6")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    variants = {name: (changes, None) for name, changes in ablation.ABLATIONS.items()
                if name == BASE or args.variants is None or any(w in name for w in args.variants.split(","))}
    if args.scaled_control:
        variants[SCALED] = ({"positions": "sinusoidal"}, scale_tokens)
    torch.set_num_threads(1)
    train, val = textlm.split_corpus(textlm.stdlib_corpus())
    budget = {**ablation.CH08_BUDGET, "steps": args.steps}
    L = budget["length"]
    loss: dict[str, list[float]] = {}
    ranges: dict[str, list[list[float]]] = {}
    params: dict[str, int] = {}
    start = time.time()
    for seed in range(args.seeds):
        for name, (changes, adjust) in variants.items():
            model = ablation.ch08_model(changes, seed)
            if adjust is not None:
                adjust(model)
            params[name] = sum(p.numel() for p in model.parameters())
            textlm.train_lm(model, train, textlm.lm_config(budget["steps"], lr=budget["lr"]), seed=seed,
                            batch=budget["batch"], length=L)
            loss.setdefault(name, []).append(textlm.eval_loss(model, val, L))
            if name in POSITIONAL:
                by_pos = textlm.loss_by_position(model, val, 4 * L, n=32)
                ranges.setdefault(name, []).append(
                    [by_pos[a:b].mean().item() for a, b in ((0, L), (L, 2 * L), (2 * L, 4 * L))])
            print(f"seed {seed} {name}: {loss[name][-1]:.4f} ({time.time() - start:.0f} s)", flush=True)
    base = BASE
    lines = [
        f"`{shlex.join(sys.argv)}` ({time.strftime('%Y-%m-%d')}, {cpu_name()}, one thread) on "
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"Python {platform.python_version()} (the corpus is this Python's standard library). Model "
        f"{ablation.CH08_MODEL}, budget {budget}; {args.seeds} seeds (weights and training windows); "
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
    baselines = context_free_baselines(train, val)
    lines += ["", "Models that ignore the context (counts of the training bytes, add-one smoothing; the whole held-out "
              f"part): unigram {baselines['unigram']:.2f} nats per byte, bigram {baselines['bigram']:.2f}.",
              "", f"Total {time.time() - start:.0f} s on one thread."]
    title = ("# Chapter 8: each modern part swapped for its chapter 6 counterpart" if args.variants is None
             and not args.scaled_control else "# Chapter 8: the embedding-scale control of the sinusoidal variant")
    text = "\n".join([title, "", *lines]) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
