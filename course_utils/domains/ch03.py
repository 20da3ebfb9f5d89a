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
    Exercise(CH, "ex7_padded", "padded_self_attention", "course_utils.attention:padded_self_attention",
             (Arg("x", (F32, F64, BATCHED, BATCH1)),
              Arg(CALL, (Kind("no-padding", "every length `L` (no padding)",
                              lambda b: bool((b["lengths"] == b["x"].shape[1]).all())),
                         Kind("padding", "lengths shorter than `L`, the padding holding large numbers",
                              lambda b: bool((b["x"][~_real(b)].abs() > 10).any())),
                         Kind("non-finite-padding", "padding holding inf or NaN",
                              lambda b: not bool(b["x"][~_real(b)].isfinite().all())),
                         Kind("length-0", "a sequence of length 0", lambda b: bool((b["lengths"] == 0).any())),
                         Kind("length-1", "`L` = 1", lambda b: b["x"].shape[1] == 1))),
              Arg("causal", (Kind("true", "True", lambda v: v is True),
                             Kind("false", "False, or left out", lambda v: v is False)))),
             raises=(Kind("x", "`x` not a 3-D floating-point tensor: ValueError", lambda a: not _x_ok(a)),
                     Kind("lengths", "`lengths` not an integer tensor of shape `(batch,)`, or a length outside "
                                     "0 to `L`: ValueError", lambda a: _x_ok(a) and not _lengths_ok(a)),
                     Kind("weights", "a weight of another shape than declared, or another dtype than `x`: "
                                     "ValueError", lambda a: _x_ok(a) and _lengths_ok(a) and not _weights_ok(a)),
                     Kind("causal", "`causal` not True or False: ValueError",
                          lambda a: _x_ok(a) and _lengths_ok(a) and _weights_ok(a)
                          and not isinstance(a["causal"], bool)))),
)


def _real(b: dict) -> torch.Tensor:
    """(batch, L): True at the real positions of exercise 7's call ``b``."""
    return torch.arange(b["x"].shape[1])[None, :] < b["lengths"][:, None]


def _x_ok(a: dict) -> bool:
    x = a["x"]
    return isinstance(x, torch.Tensor) and x.dim() == 3 and x.is_floating_point()


def _lengths_ok(a: dict) -> bool:
    n, (batch, L, _) = a["lengths"], a["x"].shape
    return (isinstance(n, torch.Tensor) and tuple(n.shape) == (batch,) and not n.is_floating_point()
            and n.dtype != torch.bool and bool(((n >= 0) & (n <= L)).all()))


def _weights_ok(a: dict) -> bool:
    d, d_k, d_v = a["x"].shape[-1], a["W_q"].shape[-1], a["W_v"].shape[-1]
    want = {"W_q": (d, d_k), "W_k": (d, d_k), "W_v": (d, d_v), "W_o": (d_v, d)}
    return all(tuple(a[n].shape) == s and a[n].dtype == a["x"].dtype for n, s in want.items())
