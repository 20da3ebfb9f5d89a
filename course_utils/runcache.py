"""Training runs kept on disk, so that a chapter that repeats another chapter's run reuses it.

Chapters 2 and 6 retrain chapter 1's GRU (and chapter 6 chapter 2's Bahdanau model) on the length
task, with the same code, data, seed and budget, so that their comparisons stand on their own. On
one machine those runs give the same weights to the last bit, so :func:`reuse_or_train` stores a
run's result (its weights, its :class:`~course_utils.train.History`, and the random number
generators' states after it) under a key made of everything the run depends on, and the next
chapter that makes the same run loads it instead of training again, and says so.

The key: the model's initial weights and architecture (``repr``), the training inputs the caller
names (data, settings, seed), every source file of ``course_utils``, and torch's version, CPU kernel
(``ATEN_CPU_CAPABILITY`` changes the float rounding), the limits set on MKL's and oneDNN's vector code
(``MKL_ENABLE_INSTRUCTIONS``, ``ONEDNN_MAX_CPU_ISA``: another emulated CPU), thread count, default
dtype and determinism setting. A run is not kept (it always trains) when code from outside ``course_utils`` and ``torch``
takes part in the model (a learner's own module class, a method patched onto one of ours, a function
or hook set on a module), when it trains on a GPU, or when the caller passes no key (a schedule
function, a time budget).

The folder is ``COURSE_RUN_CACHE`` (``off``: never reuse), else ``$XDG_CACHE_HOME/attention-course/runs``
(``~/.cache/...``); nothing is kept while nbgrader grades (:func:`course_utils.budget.grading`).
``make test`` gives each of its runs a fresh folder, so every run there trains at least once.
"""

from __future__ import annotations

import hashlib
import os
import random
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .budget import grading
from .train import History

__all__ = ["CACHE_VARIABLE", "cache_dir", "reuse_or_train"]

CACHE_VARIABLE = "COURSE_RUN_CACHE"
_PACKAGE = Path(__file__).resolve().parent


def cache_dir() -> Path | None:
    """Where runs are kept, or None where none is (``COURSE_RUN_CACHE=off``, or while grading)."""
    where = os.environ.get(CACHE_VARIABLE, "")
    if where.lower() == "off" or grading():
        return None
    if where:
        return Path(where)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attention-course" / "runs"


def _ours(f) -> bool:
    return str(getattr(f, "__module__", None)).split(".")[0] in ("course_utils", "torch")


def _methods_are_ours(model: nn.Module) -> bool:
    """Whether only course_utils' and torch's code runs in ``model``: its modules' classes (torch's own
    taken as they are: a library may add a method to ``nn.Module``, as ``transformers`` does, without
    changing what a run computes) and their methods, the callables set on the modules, no hooks."""
    for cls in {type(m) for m in model.modules()}:
        for klass in cls.__mro__:
            if klass.__module__.split(".")[0] in ("torch", "builtins"):
                continue
            if not klass.__module__.startswith("course_utils."):
                return False   # a learner's class, or one subclassed from ours
            for value in vars(klass).values():
                f = getattr(value, "__func__", value)
                if hasattr(f, "__code__") and not _ours(f):
                    return False   # a method replaced from outside
    for m in model.modules():
        if any(callable(v) and not isinstance(v, (nn.Module, torch.Tensor)) and not _ours(v) for v in vars(m).values()):
            return False   # a function set on the module (``forward``, a score, a partial)
        if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks:
            return False
    return True


def _key(model: nn.Module, inputs: tuple) -> str:
    h = hashlib.sha256()
    for part in (repr(model), *inputs, torch.__version__, torch.backends.cpu.get_cpu_capability(),
                 os.environ.get("MKL_ENABLE_INSTRUCTIONS"), os.environ.get("ONEDNN_MAX_CPU_ISA"),
                 torch.get_num_threads(), torch.get_default_dtype(), torch.are_deterministic_algorithms_enabled()):
        h.update(repr(part).encode() + b"\0")
    for name, value in model.state_dict().items():
        h.update(name.encode() + b"\0" + value.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    for source in sorted(_PACKAGE.rglob("*.py")):
        h.update(source.read_bytes())
    return h.hexdigest()[:32]


def _generators() -> dict:
    state = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": (state[0], torch.from_numpy(state[1].astype(np.int64)), *state[2:])}


def _restore_generators(saved: dict) -> None:
    torch.set_rng_state(saved["torch"])
    version, internal, gauss_next = saved["python"]
    random.setstate((version, tuple(internal), gauss_next))
    name, keys, *rest = saved["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))


def _load(path: Path, model: nn.Module) -> dict | None:
    """The run stored at ``path`` if it is whole and fits ``model`` (else None: it is made again)."""
    try:
        stored = torch.load(path, weights_only=True)
        shapes = {k: v.shape for k, v in stored["weights"].items()}
        History(**stored["history"])
    except Exception:   # missing, cut short, from another version: any of these means train
        return None
    return stored if shapes == {k: v.shape for k, v in model.state_dict().items()} else None


def reuse_or_train(model: nn.Module, train: Callable[[], History], inputs: tuple | None, *,
                   device: torch.device | str | None = None, label: str = "run") -> History:
    """``train()`` (which trains ``model`` in place and returns its history), or the stored result of the
    same run, loaded into ``model`` (left in eval mode, as training leaves it) with the random number
    generators set as the run left them. ``inputs``: what the run depends on besides the model (the
    data, the settings, the seed), as values whose ``repr`` names them; None: always train."""
    folder = cache_dir()
    on_cpu = torch.device(device or next(model.parameters()).device).type == "cpu"
    if folder is None or inputs is None or not on_cpu or not _methods_are_ours(model):
        return train()
    path = folder / f"{_key(model, inputs)}.pt"
    stored = _load(path, model)
    if stored is not None:
        model.load_state_dict(stored["weights"])
        model.eval()
        _restore_generators(stored["generators"])
        print(f"{label}: reused the same run made before on this machine (same code, data, seed and "
              f"CPU kernel; {CACHE_VARIABLE}=off trains it again)")
        return History(**stored["history"])
    history = train()
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, suffix=".part", delete=False) as f:
        torch.save({"weights": model.state_dict(), "history": asdict(history), "generators": _generators()}, f)
    os.replace(f.name, path)   # whole or not at all: another process may be making the same run
    return history
