"""Chapter 2 (attention in seq2seq): the declared domain of every exercise."""

from __future__ import annotations

import torch

from course_utils.domains import CALL, Arg, Exercise, Kind, tensor_kind
from course_utils.domains._kinds import BATCH1, BATCHED, F32, F64

__all__ = ["EXERCISES"]

CH = "ch02_attention_seq2seq"

NOT_SYMMETRIC = tensor_kind("not-symmetric", "not symmetric (square or not)",
                            lambda w: w.shape[0] != w.shape[1] or not torch.equal(w, w.T))
LARGE = tensor_kind("large", "scores of 1000 and beyond, positive or negative",
                    lambda t: bool((t.abs() >= 1000).logical_and(t.isfinite()).any()))
ALL_PADDING = Kind("all-padding-row", "a row without any real position",
                   lambda b: bool((~b["mask"].expand_as(b["scores"])).all(dim=-1).any()))
FEWER_AXES = Kind("fewer-axes", "a mask with fewer axes than the scores",
                  lambda b: b["mask"].dim() < b["scores"].dim())

EXERCISES = (
    Exercise(CH, "ex1_additive", "additive_score", "course_utils.rnn_attention:additive_score",
             (Arg("query", (F32, F64, BATCHED, BATCH1)),)),
    Exercise(CH, "ex2_luong_scores", "dot_score", "course_utils.rnn_attention:dot_score",
             (Arg("query", (F32, F64, BATCHED, BATCH1)),)),
    Exercise(CH, "ex2_luong_scores", "general_score", "course_utils.rnn_attention:general_score",
             (Arg("query", (F32, F64, BATCHED, BATCH1)), Arg("W_a", (NOT_SYMMETRIC,)))),
    Exercise(CH, "ex3_masked_softmax", "masked_softmax", "course_utils.attention:masked_softmax",
             (Arg("scores", (F32, F64, LARGE)), Arg(CALL, (ALL_PADDING, FEWER_AXES)))),
    Exercise(CH, "ex4_context", "context_vector", "course_utils.rnn_attention:context_vector",
             (Arg("weights", (F32, F64, BATCHED, BATCH1,
                              tensor_kind("zero-row", "a row of zero weights (all padding)",
                                          lambda w: bool((w == 0).all(dim=-1).any())))),)),
    Exercise(CH, "ex5_local_window", "local_m_mask", "course_utils.rnn_attention:local_m_mask",
             (Arg("D", (Kind("0", "0", lambda v: v == 0), Kind(">0", "more than 0", lambda v: v > 0))),
              Arg(CALL, (Kind("t-beyond", "`t` beyond the sentence", lambda b: bool((b["t"] >= b["lengths"]).any())),
                         Kind("S-longer", "`src_len` above the longest length",
                              lambda b: b["src_len"] > int(b["lengths"].max())))))),
    Exercise(CH, "ex6_decoder_step", "attention_decoder_step", None,
             (Arg("prev_tokens", (BATCHED, BATCH1)),)),
    Exercise(CH, "ex7_teacher_forced", "bahdanau_teacher_forced", None,
             (Arg("src", (BATCHED, BATCH1)),
              Arg("tgt_in", (tensor_kind("T=1", "one position", lambda t: t.dim() == 2 and t.shape[1] == 1),
                             tensor_kind("T>1", "several positions", lambda t: t.dim() == 2 and t.shape[1] > 1))))),
)
