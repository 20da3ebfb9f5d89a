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
