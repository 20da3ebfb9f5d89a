"""Chapter 8's experiment: one model, one budget, each modern part swapped for its chapter 6 counterpart.

:data:`CH08_MODEL` is the small LLaMA-style decoder of chapter 8 (about 109 000 parameters, byte-level
on :func:`course_utils.textlm.stdlib_corpus`), :data:`CH08_BUDGET` its training budget (``steps``
and ``lr`` for :func:`course_utils.textlm.lm_config`, ``batch`` and ``length`` the windows of
:func:`course_utils.textlm.train_lm`), :data:`ABLATIONS` the variants that swap one part back
(``tools/ch08_ablation.py`` trains them all, several seeds, and writes the chapter's table), and
:func:`ch08_model` builds one, seeded. Tokens ``(batch, T)`` in, logits ``(batch, T, 128)`` out.
"""

from __future__ import annotations

import torch
from torch import nn

from .textlm import VOCAB_SIZE

__all__ = ["ABLATIONS", "CH08_BUDGET", "CH08_MODEL", "ch08_model"]

#: The model and budget of chapter 8's experiments (tools/ch08_ablation.py uses the same).
CH08_MODEL = dict(vocab_size=VOCAB_SIZE, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2)
CH08_BUDGET = dict(steps=500, batch=32, length=64, lr=3e-3)

#: name -> the DecoderConfig fields that differ from the modern decoder.
ABLATIONS = {
    "modern (RMSNorm, SwiGLU, RoPE, GQA 4/2)": {},
    "LayerNorm instead of RMSNorm": {"norm": "layer"},
    "ReLU FFN (4d) instead of SwiGLU": {"ffn": "relu"},
    "learned positions instead of RoPE": {"positions": "learned"},
    "sinusoidal positions instead of RoPE": {"positions": "sinusoidal"},
    "MHA (4 K/V heads) instead of GQA": {"n_kv_heads": 4},
    "all four swapped (chapter 6/7 GPT-style)": {"norm": "layer", "ffn": "relu", "positions": "learned",
                                                 "n_kv_heads": 4},
}


def ch08_model(changes: dict | None = None, seed: int = 0) -> nn.Module:
    """Chapter 8's small decoder (:data:`CH08_MODEL`) with ``changes`` to its config, seeded:
    ``model(tokens (batch, T)) -> logits (batch, T, 128)``."""
    from .llama import DecoderConfig, ModernDecoder
    torch.manual_seed(seed)
    return ModernDecoder(DecoderConfig(**{**CH08_MODEL, **(changes or {})}))
