"""Chapter 4 (multi-head, MQA, GQA): the declared domain of every exercise."""

from __future__ import annotations

from course_utils.domains import CALL, PY_INT, Arg, Exercise, Kind, tensor_kind
from course_utils.domains._kinds import BATCH1, BATCHED, BOOL, F32, F64, MANY, NONE, ONE

__all__ = ["EXERCISES"]

CH = "ch04_multihead_mqa_gqa"

GRAD_LEAF = tensor_kind("grad-leaf", "a leaf tensor that requires grad", lambda t: t.is_leaf and t.requires_grad)
HEADS_VARY = tensor_kind("heads-vary", "every head holding different values at different positions",
                         lambda t: bool((t != t[:, :, :1, :1]).any(dim=(2, 3)).all()))


def _w(name: str) -> Arg:
    return Arg(name, (F32, F64))


EXERCISES = (
    Exercise(CH, "ex1_split", "split_heads", "course_utils.multihead:split_heads",
             (Arg("x", (F32, F64, BATCHED, BATCH1, GRAD_LEAF)), Arg("n_heads", (ONE, MANY)))),
    Exercise(CH, "ex1_split", "merge_heads", "course_utils.multihead:merge_heads",
             (Arg("x", (F32, F64, BATCHED, BATCH1, GRAD_LEAF)),)),
    Exercise(CH, "ex2_mha", "multi_head_attention", None,
             (Arg("x", (F32, F64, BATCHED)),
              Arg(CALL, (Kind("self", "`context` is `x` (self-attention)", lambda b: b["context"] is b["x"]),
                         Kind("cross", "`context` of another length than `x` (cross-attention)",
                              lambda b: b["context"].shape[1] != b["x"].shape[1]))),
              Arg("n_heads", (ONE, MANY)),
              Arg("mask", (NONE, BOOL)))),
    Exercise(CH, "ex3_repeat_kv", "repeat_kv", "course_utils.multihead:repeat_kv",
             (Arg("x", (F32, F64, BATCHED, HEADS_VARY)), Arg("n_rep", (ONE, MANY)))),
    Exercise(CH, "ex4_cache", "attend_with_cache", "course_utils.multihead:cached_attention",
             (Arg("q", (F32, F64, BATCHED)),
              Arg("cache", (Kind("none", "None (an empty cache)", lambda v: v is None),
                            Kind("pair", "a `(k, v)` pair", lambda v: isinstance(v, tuple) and len(v) == 2))))),
    Exercise(CH, "ex4b_decode_step", "gqa_decode_step", "course_utils.multihead:gqa_decode_step",
             (Arg("x_new", (F32, F64, BATCHED, BATCH1)),
              Arg(CALL, (Kind("mha", "`n_kv_heads` = `n_heads` (MHA)", lambda b: b["n_kv_heads"] == b["n_heads"]),
                         Kind("gqa", "1 < `n_kv_heads` < `n_heads` (GQA)", lambda b: 1 < b["n_kv_heads"] < b["n_heads"]),
                         Kind("mqa", "`n_kv_heads` = 1 < `n_heads` (MQA)", lambda b: b["n_kv_heads"] == 1 < b["n_heads"]),
                         Kind("prompt", "a prompt of several tokens on an empty cache",
                              lambda b: b["cache"] is None and b["x_new"].shape[1] > 1),
                         Kind("token", "one new token on a filled cache",
                              lambda b: b["cache"] is not None and b["x_new"].shape[1] == 1),
                         Kind("chunk", "a chunk of several tokens on a filled cache (the mask aligned bottom-right)",
                              lambda b: b["cache"] is not None and b["x_new"].shape[1] > 1))),
              Arg("cache", (Kind("none", "None (an empty cache)", lambda v: v is None),
                            Kind("pair", "a `(k, v)` pair", lambda v: isinstance(v, tuple) and len(v) == 2)))),
             raises=(Kind("not-3d", "`x_new` not 3-D: ValueError", lambda a: a["x_new"].dim() != 3),
                     Kind("heads", "`n_kv_heads` not dividing `n_heads`, or `n_heads` not dividing `d_model`: ValueError",
                          lambda a: _x3(a) and (a["n_heads"] % a["n_kv_heads"] != 0
                                                or a["x_new"].shape[-1] % a["n_heads"] != 0)),
                     Kind("weights", "a weight of the wrong shape: ValueError",
                          lambda a: _x3(a) and _heads_ok(a) and not _weights_ok(a)),
                     Kind("cache-heads", "a cache of other than `n_kv_heads` heads (the repeated ones): ValueError",
                          lambda a: _x3(a) and _heads_ok(a) and _weights_ok(a) and a["cache"][0].shape[1] != a["n_kv_heads"]),
                     Kind("cache-shape", "a cache whose batch or `d_head` is not the step's, or whose `k` and `v` "
                                         "disagree: ValueError",
                          lambda a: _x3(a) and _heads_ok(a) and _weights_ok(a) and a["cache"][0].shape[1] == a["n_kv_heads"]
                          and not _cache_ok(a)))),
    Exercise(CH, "ex5_kv_bytes", "kv_cache_bytes", "course_utils.kvcache:kv_cache_bytes",
             (Arg("n_layers", (PY_INT,)), Arg("seq_len", (PY_INT,)),
              Arg("bytes_per_value", (Kind("1", "1", lambda v: v == 1), Kind("2", "2", lambda v: v == 2),
                                      Kind("4", "4", lambda v: v == 4))),
              Arg(CALL, (Kind("past-2**53", "sizes whose product passes 2**53",
                              lambda b: 2**53 < _product(b) <= 2**63),
                         Kind("past-2**63", "sizes whose product passes 2**63 (a Python int stays exact)",
                              lambda b: _product(b) > 2**63))))),
    Exercise(CH, "ex6_mean_pool", "mean_pool_heads", "course_utils.multihead:mean_pool_kv_heads",
             (Arg("weight", (F32, F64, tensor_kind("2-d", "a weight (2-D)", lambda t: t.dim() == 2),
                             tensor_kind("1-d", "a bias (1-D)", lambda t: t.dim() == 1))),
              Arg("n_groups", (ONE, MANY)))),
)


def _product(b: dict) -> int:
    p = 2
    for k in ("n_layers", "n_kv_heads", "d_head", "seq_len", "batch", "bytes_per_value"):
        p *= int(b[k])
    return p


def _x3(a: dict) -> bool:
    return a["x_new"].dim() == 3


def _heads_ok(a: dict) -> bool:
    return a["n_heads"] % a["n_kv_heads"] == 0 and a["x_new"].shape[-1] % a["n_heads"] == 0


def _weights_ok(a: dict) -> bool:
    d = a["x_new"].shape[-1]
    d_kv = a["n_kv_heads"] * (d // a["n_heads"])
    return tuple(a["W_q"].shape) == tuple(a["W_o"].shape) == (d, d) and tuple(a["W_k"].shape) == tuple(a["W_v"].shape) == (d, d_kv)


def _cache_ok(a: dict) -> bool:
    k, v = a["cache"]
    want = (a["x_new"].shape[0], a["n_kv_heads"], k.shape[2], a["x_new"].shape[-1] // a["n_heads"])
    return tuple(k.shape) == tuple(v.shape) == want
