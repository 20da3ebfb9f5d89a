"""Chapter 3 (scaled dot-product attention): the declared domain of every exercise."""

from __future__ import annotations

import torch

from course_utils.domains import CALL, Arg, Exercise, Kind, tensor_kind
from course_utils.domains._kinds import BATCH1, BATCHED, BOOL, F32, F64, NEG_INF, NONE

__all__ = ["EXERCISES", "stable_softmax"]

CH = "ch03_scaled_dot_product"

LARGE32 = tensor_kind("large", "scores in the hundreds or beyond (exp overflows in float32)",
                      lambda t: bool((t.abs() > 88.7).logical_and(t.isfinite()).any()))
FULLY_MASKED = tensor_kind("fully-masked-row", "a query whose every key is masked",
                           lambda m: m.dtype == torch.bool and bool((~m).all(dim=-1).any()))



def stable_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Exercise 2's stand-in while another exercise runs: the softmax of ``x`` along ``dim``, with the
    exercise's own signature (the library's ``masked_softmax`` takes a mask second)."""
    return torch.softmax(x, dim=dim)


EXERCISES = (
    Exercise(CH, "ex1_scores", "scaled_scores", "course_utils.attention:attention_scores",
             (Arg("q", (F32, F64, BATCHED)),)),
    Exercise(CH, "ex2_softmax", "stable_softmax", "course_utils.domains.ch03:stable_softmax",
             (Arg("x", (F32, F64, LARGE32, NEG_INF)),
              Arg("dim", (Kind("last", "-1", lambda v: v == -1),
                          Kind("other-negative", "another negative axis", lambda v: v < -1),
                          Kind("non-negative", "an axis counted from 0", lambda v: v >= 0))))),
    Exercise(CH, "ex3_attention", "sdp_attention", "course_utils.attention:scaled_dot_product_attention",
             (Arg("q", (F32, F64, BATCHED)), Arg("mask", (NONE, BOOL, FULLY_MASKED)))),
    Exercise(CH, "ex4_causal", "causal_mask", "course_utils.attention:causal_mask",
             (Arg("L_q", (Kind("one", "1", lambda v: v == 1), Kind("several", "more than 1", lambda v: v > 1))),
              Arg(CALL, (Kind("square", "`L_k` left out (square)", lambda b: b["L_k"] is None),
                         Kind("longer", "`L_k` > `L_q` (a cache)", lambda b: b["L_k"] is not None
                              and b["L_k"] > b["L_q"]))))),
    Exercise(CH, "ex5_cross", "cross_attention", "course_utils.attention:cross_attention",
             (Arg("x_dec", (F32, F64, BATCHED, BATCH1)),
              Arg(CALL, (Kind("no-padding", "`enc_lengths` None", lambda b: b["enc_lengths"] is None),
                         Kind("padding", "`enc_lengths` with sources shorter than S (their padded positions "
                              "must stay as the caller gave them)",
                              lambda b: b["enc_lengths"] is not None
                              and bool((b["enc_lengths"] < b["x_enc"].shape[1]).any())))))),
    Exercise(CH, "ex6_module", "SelfAttention", None,
             (Arg("x", (F32, F64, BATCHED)), Arg("mask", (NONE, BOOL)))),
)
