"""Chapter 9 (Attention at inference time): the declared domain of every exercise."""

from __future__ import annotations

import torch

from course_utils.domains import Arg, Exercise, Kind, tensor

__all__ = ["CHAPTER", "EXERCISES"]

CHAPTER = "ch09_attention_at_inference"

EXERCISES = (
    Exercise(chapter=CHAPTER, exercise="ex1_scale", function="scale", reference=None,
             args=(Arg("x", (Kind("float32", "float32", tensor(torch.float32)),
                             Kind("float64", "float64", tensor(torch.float64)))),
                   Arg("factor", (Kind("python-float", "a Python float", lambda v: type(v) is float),
                                  Kind("python-int", "a Python int", lambda v: type(v) is int))))),
    Exercise(chapter=CHAPTER, exercise="ex2_shift", function="shift", reference=None,
             args=(Arg("x", (Kind("float32", "float32", tensor(torch.float32)),
                             Kind("float64", "float64", tensor(torch.float64)))),
                   Arg("offset", (Kind("python-float", "a Python float", lambda v: type(v) is float),
                                  Kind("python-int", "a Python int", lambda v: type(v) is int))))),
)
