"""The run cache (course_utils/runcache.py): a reused run is the trained run to the last bit, random
number generators included, and anything the run depends on makes it train again."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn

from course_utils import data, lengthtask, rnn, runcache
from course_utils.train import History

PAIRS, _, VOCAB = data.length_task()
PAIRS = PAIRS[:96]
CHANGES = {"seed": {"seed": 1}, "steps": {"steps": 4}, "lr": {"lr": 1e-3}}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(runcache.CACHE_VARIABLE, str(tmp_path))
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    return tmp_path


def _gru():
    return rnn.Seq2Seq(len(VOCAB), len(VOCAB), emb_dim=8, hidden=16)


def _run(make=_gru, seed=0, **overrides):
    """A short length-task run (``overrides``: fields of its config), and what the generators draw next."""
    config = lengthtask.length_task_config(**{"steps": 3, **overrides})
    model, history = lengthtask.train_on_length_task(make, PAIRS, VOCAB, config, seed, progress=False)
    return model, history, (torch.rand(3), np.random.rand(3), random.random())


def test_a_reused_run_is_the_trained_run(cache, capsys):
    trained, h1, next1 = _run()
    assert "reused" not in capsys.readouterr().out
    assert len(list(cache.glob("*.pt"))) == 1
    reused, h2, next2 = _run()
    assert "reused the same run" in capsys.readouterr().out
    assert not reused.training
    for (k, a), b in zip(trained.state_dict().items(), reused.state_dict().values()):
        assert torch.equal(a, b), k
    assert h1 == h2
    assert torch.equal(next1[0], next2[0]) and np.array_equal(next1[1], next2[1]) and next1[2] == next2[2]


@pytest.mark.parametrize("change", ["seed", "steps", "lr", "data", "model", "MKL_ENABLE_INSTRUCTIONS",
                                    "ONEDNN_MAX_CPU_ISA"])
def test_what_the_run_depends_on_makes_it_train_again(cache, change, capsys, monkeypatch):
    # MKL's and oneDNN's limits: another emulated CPU (tools/cpu_profiles.py) rounds otherwise.
    _run()
    capsys.readouterr()
    if change.isupper():
        monkeypatch.setenv(change, "AVX2")
        _run()
    elif change == "data":
        lengthtask.train_on_length_task(_gru, PAIRS[:64], VOCAB, lengthtask.length_task_config(steps=3), progress=False)
    elif change == "model":
        _run(make=lambda: rnn.Seq2Seq(len(VOCAB), len(VOCAB), emb_dim=8, hidden=17))
    else:
        _run(**CHANGES[change])
    assert "reused" not in capsys.readouterr().out
    assert len(list(cache.glob("*.pt"))) == 2


def _count(model, inputs):
    calls = []

    def train():
        calls.append(1)
        return History(loss=[1.0], seconds=0.1)
    for _ in range(2):
        runcache.reuse_or_train(model, train, inputs, label="t")
    return len(calls)


def test_a_model_with_code_from_outside_the_course_always_trains(cache):
    class Mine(nn.Module):   # a learner's module: written here, not in course_utils
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            return self.lin(x)

    assert _count(nn.Sequential(nn.Linear(2, 2)), ("x",)) == 1
    assert _count(Mine(), ("x",)) == 2
    patched = _gru()
    patched.encoder.forward = lambda *a: None   # a method replaced on one instance
    assert _count(patched, ("x",)) == 2
    hooked = _gru()
    hooked.encoder.register_forward_hook(lambda *a: None)
    assert _count(hooked, ("x",)) == 2
    class_patched = type("Patched", (rnn.Seq2Seq,), {"__module__": "course_utils.rnn", "encode": lambda *a: None})
    assert _count(class_patched(len(VOCAB), len(VOCAB), emb_dim=8, hidden=16), ("x",)) == 2
    assert _count(nn.Sequential(nn.Linear(2, 2)), None) == 2   # no key: a schedule, a time budget


def test_off_grading_and_a_broken_file_train(cache, monkeypatch):
    model = nn.Sequential(nn.Linear(2, 2))
    assert _count(model, ("y",)) == 1
    for path in cache.glob("*.pt"):
        path.write_bytes(b"not a run")
    assert _count(model, ("y",)) == 1   # made again, then reused
    monkeypatch.setenv(runcache.CACHE_VARIABLE, "off")
    assert runcache.cache_dir() is None and _count(model, ("y",)) == 2
    monkeypatch.delenv(runcache.CACHE_VARIABLE)
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert runcache.cache_dir() is None
