"""Chapter 8's text corpus and language-model loop (course_utils.textlm), and the ablation table the
chapter quotes (tools/ch08_ablation.md)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from course_utils import ablation, textlm

ROOT = Path(__file__).resolve().parent.parent


def test_the_corpus_is_the_stdlib_as_ascii_and_the_same_every_time():
    text = textlm.stdlib_corpus()
    assert text == textlm.stdlib_corpus()
    assert len(text) > 300_000 and max(text) < textlm.VOCAB_SIZE
    assert text.startswith(b"# file: abc.py\n") and b"# file: weakref.py\n" in text
    with pytest.raises(FileNotFoundError, match="standard library"):
        textlm.stdlib_corpus(["no_such_module.py"])


def test_encode_decode_round_trip_and_split():
    ids = textlm.encode("def f(x):\n    return x\n")
    assert ids.dtype == torch.long and textlm.decode(ids) == "def f(x):\n    return x\n"
    with pytest.raises(ValueError, match="ASCII"):
        textlm.encode(bytes([200]))
    train, val = textlm.split_corpus(b"a" * 1000, held_out=0.1)
    assert (len(train), len(val)) == (900, 100)


def test_windows_are_the_next_bytes_and_seeded():
    data = torch.arange(100) % 128
    x, y = textlm.random_windows(data, 4, 10, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 10) and torch.equal(y[:, :-1], x[:, 1:])
    x2, _ = textlm.random_windows(data, 4, 10, torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)
    with pytest.raises(ValueError, match="longer than a window"):
        textlm.random_windows(data[:10], 1, 10, torch.Generator())


def test_an_untrained_model_costs_about_ln_128_and_training_lowers_it():
    train, val = textlm.split_corpus(textlm.stdlib_corpus())
    model = ablation.ch08_model(seed=0)
    start = textlm.eval_loss(model, val, 32, n=8)
    assert abs(start - math.log(128)) < 0.5
    hist = textlm.train_lm(model, train, textlm.lm_config(30, eval_every=10), batch=8, length=32, seed=0,
                           evaluate=lambda m: textlm.eval_loss(m, val, 32, n=8))
    losses = hist.loss
    assert len(losses) == 30 and sum(losses[-5:]) / 5 < losses[0] - 1.0
    assert hist.eval_steps == [0, 10, 20, 30] and hist.eval_values[0] == pytest.approx(start)
    assert hist.eval_values[-1] == pytest.approx(textlm.eval_loss(model, val, 32, n=8))
    assert hist.eval_values[-1] < start - 1.0
    again = textlm.train_lm(ablation.ch08_model(seed=0), train, textlm.lm_config(3), batch=8, length=32, seed=0).loss
    assert again == losses[:3], "the same seed gives the same windows and weights; evaluating changes nothing"
    curve = textlm.loss_by_position(model, val, 48, n=4)
    assert curve.shape == (48,) and torch.isfinite(curve).all()


def test_the_ablation_variants_have_the_parameter_counts_of_the_table():
    table = (ROOT / "tools" / "ch08_ablation.md").read_text()
    for name, changes in ablation.ABLATIONS.items():
        row = re.search(rf"^\| {re.escape(name)} \| ([\d,]+) \|", table, flags=re.M)
        assert row, f"tools/ch08_ablation.md has no row for {name!r}"
        n = sum(p.numel() for p in ablation.ch08_model(changes).parameters())
        assert n == int(row.group(1).replace(",", "")), name


def test_the_chapter_quotes_the_ablation_tables_as_measured():
    table = (ROOT / "tools" / "ch08_ablation.md").read_text()
    source = (ROOT / "solutions" / "ch08_modern_decoder" / "ch08_modern_decoder.py").read_text()
    # Each cell also carries its quote marker (tests/test_quotes.py), which the rendered row does not show.
    source = re.sub(r"<!-- q:[^>]*? -->|<!-- /q -->", "", source)
    quoted = [line[2:] for line in source.splitlines() if line.startswith("# | ") and "instead of" in line
              or line.startswith("# | modern") or line.startswith("# | all four")]
    assert len(quoted) >= 9, "the chapter quotes both tables of tools/ch08_ablation.md"
    for line in quoted:
        assert line in table, f"the chapter's row differs from tools/ch08_ablation.md: {line}"
