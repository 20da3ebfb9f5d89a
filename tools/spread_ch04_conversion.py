"""Spread over seeds of chapter 4's MHA -> GQA/MQA conversion (section 8), beyond its claims.

``tools/claim_spread.py`` measures the chapter's asserted claims; this script measures the numbers
the text quotes as ranges: for each seed offset it runs the chapter's own code for the experiment
(its cells that define the decoder, the data, ``fit``, ``converted``, ``test_loss`` and
``exact_match``, taken from the text source) with every seed shifted by the offset, exactly as
``claim_spread.py`` shifts them, and prints one JSON line per offset, then the ranges:

* the test loss right after conversion, and the exact match after uptraining, for GQA-2 and MQA
  started by mean pooling, first head and random key/value heads.

    OMP_NUM_THREADS=1 .venv/bin/python tools/spread_ch04_conversion.py --seeds 5   # about 2.5 min
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from claim_spread import SEED_PRELUDE

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "solutions" / "ch04_multihead_mqa_gqa" / "ch04_multihead_mqa_gqa.py"
CELLS = ("from course_utils import (\n    attention,", "def small_decoder(", "def mean_pool_heads",
         "pool_fn = checks.learner_or_reference")
RUN = """
STEPS, UPTRAIN = 600, 60
torch.manual_seed(7)
base = fit(small_decoder(len(vocab)), STEPS)
result = {"base": exact_match(base, rev_test)}
for n_kv, kind in ((2, "GQA-2"), (1, "MQA")):
    for how in ("mean", "first", "random"):
        m = converted(base, n_kv, how)
        loss = test_loss(m, rev_test)
        result[f"{kind} {how}"] = (loss, exact_match(fit(m, UPTRAIN, seed=5), rev_test))
"""


def run(offset: int) -> dict:
    cells = re.split(r"\n(?=# %%)", SOURCE.read_text())
    env: dict = {}
    exec(SEED_PRELUDE.format(offset=offset), env)
    for cell in cells:
        if any(marker in cell for marker in CELLS):
            exec(cell, env)
    exec(RUN, env)
    return env["result"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for offset in range(args.seeds):
        rows.append(run(offset))
        print(json.dumps({"offset": offset, **rows[-1]}), flush=True)
    print(f"MHA exact match: {min(r['base'] for r in rows):.3f} to {max(r['base'] for r in rows):.3f}")
    for kind in ("GQA-2", "MQA"):
        for a, b in (("random", "mean"), ("first", "mean")):
            d = [r[f"{kind} {a}"][0] - r[f"{kind} {b}"][0] for r in rows]
            print(f"{kind}: test loss right after conversion, {a} minus {b}: {min(d):.2f} to {max(d):.2f}")
        for a, b in (("mean", "random"), ("mean", "first"), ("first", "random")):
            d = [r[f"{kind} {a}"][1] - r[f"{kind} {b}"][1] for r in rows]
            print(f"{kind}: exact match after uptraining, {a} minus {b}: {min(d):.3f} to {max(d):.3f}")
    d = [r["GQA-2 mean"][1] - r["MQA mean"][1] for r in rows]
    print(f"mean pooling, exact match after uptraining, GQA-2 minus MQA: {min(d):.3f} to {max(d):.3f}")


if __name__ == "__main__":
    main()
