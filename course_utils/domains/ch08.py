"""Chapter 8's declared domains (issue 54): what each exercise's prompt allows, each kind drawn by its hidden test."""

from __future__ import annotations

import torch

from course_utils.domains import Arg, Exercise, Kind, tensor

__all__ = ["CHAPTER", "EXERCISES"]

CHAPTER = "ch08_modern_decoder"


_t = tensor


_FLOATS = (Kind("float32", "float32", _t(torch.float32)), Kind("float64", "float64", _t(torch.float64)))
_TABLE = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
          "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm")


def _key(a):
    k = a.get("hf_key")
    return k.split(".") if isinstance(k, str) else []


EXERCISES = (
    Exercise(chapter=CHAPTER, exercise="ex1_rms_norm", function="rms_norm", reference="course_utils.blocks:rms_norm",
             args=(Arg("x", (*_FLOATS, Kind("float16", "float16", _t(torch.float16)),
                             Kind("float16-large", "float16 values above 256, whose squares overflow float16",
                                  lambda v: _t(torch.float16)(v) and bool((v.abs() > 256).any())),
                             Kind("1-d", "one vector, no leading axis", _t(dim=1)),
                             Kind("leading", "leading axes", lambda v: torch.is_tensor(v) and v.dim() > 1),
                             Kind("large", "values of 1e14", lambda v: torch.is_tensor(v) and bool((v.abs() > 1e13).any())))),
                   Arg("eps", (Kind("number", "a Python float", lambda v: isinstance(v, float)),)))),
    Exercise(chapter=CHAPTER, exercise="ex2_swiglu", function="swiglu", reference=None,
             args=(Arg("x", (*_FLOATS, Kind("1-d", "one vector", _t(dim=1)),
                             Kind("leading", "leading axes", lambda v: torch.is_tensor(v) and v.dim() > 1))),
                   Arg("W_gate", (Kind("large", "gate weights of 100 or more: gates where exp overflows",
                                       lambda v: torch.is_tensor(v) and bool((v.abs() >= 100).any())),
                                  Kind("scaled", "weights of size 1/sqrt(d)", lambda v: torch.is_tensor(v) and bool((v.abs() < 100).all())))))),
    Exercise(chapter=CHAPTER, exercise="ex3_rope", function="rope_half", reference="course_utils.positional:apply_rope_half",
             args=(Arg("x", (*_FLOATS, Kind("no-lead", "(seq, d)", _t(dim=2)), Kind("heads", "(batch, heads, seq, d)", _t(dim=4)))),
                   Arg("offset", (Kind("cache", "a Python int from 1 to 99999 (0, the default, is drawn by leaving it out)",
                                       lambda v: type(v) is int and 0 < v < 100000),
                                  Kind("long-cache", "100000 or more (a 128k cache)", lambda v: type(v) is int and v >= 100000))),
                   Arg("base", (Kind("float", "a Python float", lambda v: isinstance(v, float)),)))),
    Exercise(chapter=CHAPTER, exercise="ex4_keys", function="course_key", reference=None,
             args=(Arg("hf_key", (Kind("fixed", "the embedding, final norm or output layer",
                                       lambda v: v in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight")),
                                  Kind("layer", "a layer's weight of the table",
                                       lambda v: isinstance(v, str) and v.startswith("model.layers.") and v.endswith(".weight"))),),),
             raises=(Kind("wrong-parent", "a module of the table under the other parent (mlp.q_proj)",
                          lambda a: len(_key(a)) == 6 and _key(a)[3] in ("mlp", "self_attn")
                          and ".".join(_key(a)[3:5]) not in _TABLE
                          and any(t.endswith("." + _key(a)[4]) for t in _TABLE)),
                     Kind("other-leaf", "a leaf other than weight (weight_scale, qweight, ...)",
                          lambda a: bool(_key(a)) and _key(a)[-1] not in ("weight", "bias")
                          and ".".join(_key(a)[3:-1]) in _TABLE),
                     Kind("buffer", "a buffer (rotary_emb.inv_freq)", lambda a: "inv_freq" in a.get("hf_key", "")),
                     Kind("other-naming", "another model's or the course's own naming",
                          lambda a: bool(_key(a)) and _key(a)[0] not in ("model", "lm_head")))),
    Exercise(chapter=CHAPTER, exercise="ex5_online", function="online_update", reference=None,
             args=(Arg("scores", (*_FLOATS,
                                  Kind("masked", "-inf scores", lambda v: torch.is_tensor(v) and bool(torch.isneginf(v).any())),
                                  Kind("large", "scores of 100 or more (exp overflows float32)",
                                       lambda v: torch.is_tensor(v) and bool((v[torch.isfinite(v)].abs() >= 100).any())))),
                   Arg("m", (Kind("start", "-inf rows (no score seen yet)", lambda v: torch.is_tensor(v) and bool(torch.isneginf(v).any())),
                             Kind("seen", "finite rows", lambda v: torch.is_tensor(v) and bool(torch.isfinite(v).any())))),),
             # the running state (m, l, acc) goes from block to block and comes back: updating it in place,
             # as FlashAttention's kernels do, is a right answer
             mutates=("m", "l", "acc")),
)
