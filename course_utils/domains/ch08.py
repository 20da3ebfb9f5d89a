"""Chapter 8's declared domains (issue 54): what each exercise's prompt allows, each kind drawn by its hidden test."""

from __future__ import annotations

import torch

from course_utils import flash
from course_utils.domains import CALL, Arg, Exercise, Kind, tensor

__all__ = ["CHAPTER", "EXERCISES", "online_update"]

CHAPTER = "ch08_modern_decoder"


_t = tensor


_FLOATS = (Kind("float32", "float32", _t(torch.float32)), Kind("float64", "float64", _t(torch.float64)))
_TABLE = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
          "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm")


def online_update(m, l, acc, scores, v):  # noqa: E741 (the exercise names the normaliser l)
    """Exercise 5's stand-in while another exercise runs (exercise 6 calls it): the library's update,
    with the exercise's own signature (the library names ``l`` ``denom``)."""
    return flash.online_softmax_update(m, l, acc, scores, v)


def _lengths(a):
    """``(L_q, L_k)`` of a call of exercise 6, or ``None`` when q or k is not a tensor with two axes."""
    q, k = a.get("q"), a.get("k")
    ok = torch.is_tensor(q) and torch.is_tensor(k) and q.dim() >= 2 and k.dim() >= 2
    return (q.shape[-2], k.shape[-2]) if ok else None


def _blocks(a):
    return a.get("block_q", 16), a.get("block_k", 16)


def _agree(a):
    q, k, v = a.get("q"), a.get("k"), a.get("v")
    return all(torch.is_tensor(t) and t.dim() >= 2 for t in (q, k, v)) and q.shape[:-2] == k.shape[:-2] \
        and k.shape[:-1] == v.shape[:-1] and q.shape[-1] == k.shape[-1]


def _bad_block(b):
    return type(b) is not int or b < 1


def _saved_agree(a):
    """Exercise 7's out, lse and d_out: (..., L_q, d_v), (..., L_q, 1), (..., L_q, d_v) for q and v."""
    q, v = a.get("q"), a.get("v")
    shapes = [tuple(getattr(a.get(n), "shape", ())) for n in ("out", "lse", "d_out")]
    rows = tuple(q.shape[:-1])
    return shapes == [(*rows, v.shape[-1]), (*rows, 1), (*rows, v.shape[-1])]


def _key(a):
    k = a.get("hf_key")
    return k.split(".") if isinstance(k, str) else []


# Exercises 6 and 7 take the same q, k, v, causal flag and blocks, and refuse the same bad blocks and shapes.
_FLASH_ARGS = (
    Arg("q", (*_FLOATS, Kind("no-lead", "(L_q, d): no leading axis", _t(dim=2)),
              Kind("leading", "leading axes (a batch; a batch and heads)", lambda v: torch.is_tensor(v) and v.dim() > 2))),
    Arg(CALL, (Kind("not-causal", "causal=False", lambda a: not a.get("causal", False)),
               Kind("causal", "causal=True", lambda a: a.get("causal", False) is True),
               Kind("one-key", "blocks of one query and one key", lambda a: _blocks(a) == (1, 1)),
               Kind("ragged", "lengths that are not multiples of the blocks (a shorter last block)",
                    lambda a: _lengths(a) is not None and not any(map(_bad_block, _blocks(a)))
                    and (_lengths(a)[0] % _blocks(a)[0] or _lengths(a)[1] % _blocks(a)[1]) != 0),
               Kind("blocks-beyond", "blocks longer than the sequences",
                    lambda a: _lengths(a) is not None and _blocks(a)[0] > _lengths(a)[0] and _blocks(a)[1] > _lengths(a)[1]),
               Kind("more-queries", "L_q > L_k", lambda a: _lengths(a) is not None and _lengths(a)[0] > _lengths(a)[1]),
               Kind("more-keys", "L_k > L_q", lambda a: _lengths(a) is not None and _lengths(a)[1] > _lengths(a)[0]),
               Kind("skipped-nan", "causal, NaN keys and values in the blocks that must be skipped",
                    lambda a: a.get("causal", False) is True and torch.is_tensor(a.get("v"))
                    and bool(torch.isnan(a["v"]).any())))),
)
_FLASH_RAISES = (Kind("bad-block", "block_q or block_k not a positive int (0, -1, 2.0, True): ValueError",
                      lambda a: any(map(_bad_block, _blocks(a)))),
                 Kind("shapes-disagree", "q, k, v whose shapes do not agree: ValueError",
                      lambda a: not any(map(_bad_block, _blocks(a))) and not _agree(a)))


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
    Exercise(chapter=CHAPTER, exercise="ex5_online", function="online_update",
             reference="course_utils.domains.ch08:online_update",
             args=(Arg("scores", (*_FLOATS,
                                  Kind("masked", "-inf scores", lambda v: torch.is_tensor(v) and bool(torch.isneginf(v).any())),
                                  Kind("large", "scores of 100 or more (exp overflows float32)",
                                       lambda v: torch.is_tensor(v) and bool((v[torch.isfinite(v)].abs() >= 100).any())))),
                   Arg("m", (Kind("start", "-inf rows (no score seen yet)", lambda v: torch.is_tensor(v) and bool(torch.isneginf(v).any())),
                             Kind("seen", "finite rows", lambda v: torch.is_tensor(v) and bool(torch.isfinite(v).any())))),),
             # the running state (m, l, acc) goes from block to block and comes back: updating it in place,
             # as FlashAttention's kernels do, is a right answer
             mutates=("m", "l", "acc")),
    Exercise(chapter=CHAPTER, exercise="ex6_flash", function="flash_forward", reference="course_utils.flash:tiled_forward",
             args=_FLASH_ARGS, raises=_FLASH_RAISES),
    Exercise(chapter=CHAPTER, exercise="ex7_flash_backward", function="flash_backward",
             reference="course_utils.flash:tiled_backward",
             args=_FLASH_ARGS,
             raises=(*_FLASH_RAISES,
                     Kind("saved-shapes", "out, lse or d_out not of the shapes above: ValueError",
                          lambda a: not any(map(_bad_block, _blocks(a))) and _agree(a) and not _saved_agree(a)))),
)
