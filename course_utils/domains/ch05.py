"""Chapter 5's declared domains (issue 54): what each exercise's prompt allows, each kind drawn by its hidden test."""

from __future__ import annotations

import torch

from course_utils.domains import Arg, Exercise, Kind, tensor

__all__ = ["CHAPTER", "EXERCISES"]

CHAPTER = "ch05_attention_as_convolution"


_t = tensor


def _py(kind):
    return lambda v: type(v) is kind


SIZE = (Kind("one", "1 (a single row, column or cell)", lambda v: type(v) is int and v == 1),
        Kind("several", "an int above 1", lambda v: type(v) is int and v > 1))

EXERCISES = (
    Exercise(chapter=CHAPTER, exercise="ex1_offsets", function="relative_offsets",
             reference="course_utils.conv_attention:relative_offsets",
             args=(Arg("height", SIZE), Arg("width", SIZE))),
    Exercise(chapter=CHAPTER, exercise="ex2_quadratic", function="quadratic_scores",
             reference="course_utils.conv_attention:quadratic_scores",
             args=(Arg("offsets", (
                       Kind("int-2d", "int64 offsets (L_q, L_k, 2)", lambda v: _t(torch.int64, 3)(v) and v.shape[-1] == 2),
                       Kind("int-1d", "int64 offsets (L_q, L_k, 1) of a 1-D grid", lambda v: _t(torch.int64, 3)(v) and v.shape[-1] == 1),
                       Kind("float32", "float32 offsets", _t(torch.float32, 3)),
                       Kind("float64", "float64 offsets", _t(torch.float64, 3)),
                       Kind("rectangular", "L_q != L_k", lambda v: torch.is_tensor(v) and v.dim() == 3 and v.shape[0] != v.shape[1]))),
                   Arg("center", (
                       Kind("one-head-float32", "(D,) float32", _t(torch.float32, 1)),
                       Kind("one-head-float64", "(D,) float64", _t(torch.float64, 1)),
                       Kind("heads-float32", "(heads, D) float32", _t(torch.float32, 2)),
                       Kind("heads-float64", "(heads, D) float64", _t(torch.float64, 2)),
                       Kind("one-head-2d", "(1, D): one head as a batch of heads", lambda v: _t(dim=2)(v) and v.shape[0] == 1))),
                   Arg("alpha", (
                       Kind("python-float", "a Python float", _py(float)),
                       Kind("python-int", "a Python int", _py(int)),
                       Kind("float32-tensor", "a float32 (heads,) tensor", _t(torch.float32, 1)),
                       Kind("float64-tensor", "a float64 (heads,) tensor", _t(torch.float64, 1)),
                       Kind("int-tensor", "an int64 (heads,) tensor", _t(torch.int64, 1)))))),
    Exercise(chapter=CHAPTER, exercise="ex3_head_map", function="head_attention_map",
             reference=None,
             args=(Arg("height", SIZE), Arg("width", SIZE),
                   Arg("center", (Kind("float32", "a (2,) float32 tensor", _t(torch.float32, 1)),
                                  Kind("float64", "a (2,) float64 tensor", _t(torch.float64, 1)))),
                   Arg("alpha", (Kind("python-float", "a Python float", _py(float)),
                                 Kind("python-int", "a Python int", _py(int)),
                                 Kind("sharp", "50 or more: scores far from 0, the softmax's overflow range",
                                      lambda v: type(v) in (int, float) and v >= 50))))),
    Exercise(chapter=CHAPTER, exercise="ex4_kernel_heads", function="kernel_to_heads",
             reference="course_utils.conv_attention:kernel_to_heads",
             args=(Arg("weight", (Kind("float32", "a float32 kernel", _t(torch.float32, 4)),
                                  Kind("float64", "a float64 kernel", _t(torch.float64, 4)),
                                  Kind("1x1", "K = 1", lambda v: _t(dim=4)(v) and v.shape[-1] == 1),
                                  Kind("one-output", "C_out = 1", lambda v: _t(dim=4)(v) and v.shape[0] == 1))),)),
    Exercise(chapter=CHAPTER, exercise="ex5_rope", function="apply_rope",
             reference="course_utils.positional:apply_rope",
             args=(Arg("x", (Kind("float32", "float32", _t(torch.float32)), Kind("float64", "float64", _t(torch.float64)),
                             Kind("no-lead", "(seq, d): no leading axis", _t(dim=2)),
                             Kind("leading", "one or more leading axes", lambda v: torch.is_tensor(v) and v.dim() > 2))),
                   Arg("positions", (
                       Kind("int64", "an int64 tensor", _t(torch.int64, 1)),
                       Kind("int32", "an int32 tensor", _t(torch.int32, 1)),
                       Kind("float-whole", "a float tensor of whole positions",
                            lambda v: _t(dim=1)(v) and v.is_floating_point() and bool((v == v.round()).all())),
                       Kind("float-fractional", "a float tensor, positions may be fractional (2.5)",
                            lambda v: _t(dim=1)(v) and v.is_floating_point() and bool((v != v.round()).any())),
                       Kind("negative", "negative positions", lambda v: _t(dim=1)(v) and bool((v < 0).any())),
                       Kind("large", "positions of 1000", lambda v: _t(dim=1)(v) and bool((v >= 1000).any())))))),
)
