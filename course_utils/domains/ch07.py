"""Chapter 7's declared domains (issue 54): what each exercise's prompt allows, each kind drawn by its hidden test."""

from __future__ import annotations

import numpy as np
import torch

from course_utils.domains import Arg, Exercise, Kind, tensor

__all__ = ["CHAPTER", "EXERCISES"]

CHAPTER = "ch07_transformer_families"


_t = tensor


def _p(a):
    return a.get("prefix_len")


def _L(a):
    return a.get("L")


EXERCISES = (
    Exercise(chapter=CHAPTER, exercise="ex1_prefix_mask", function="prefix_lm_mask",
             reference="course_utils.families:prefix_lm_mask",
             args=(Arg("prefix_len", (Kind("zero", "0: the causal mask", lambda v: type(v) is int and v == 0),
                                      Kind("inside", "an int strictly between 0 and L", lambda v: type(v) is int and v > 0),)),),
             raises=(Kind("negative", "an int below 0: ValueError", lambda a: type(_p(a)) is int and _p(a) < 0),
                     Kind("beyond", "an int above L: ValueError", lambda a: type(_p(a)) is int and _p(a) > _L(a)),
                     Kind("python-float", "a Python float (2.0, 2.5)", lambda a: type(_p(a)) is float),
                     Kind("numpy-float", "a NumPy float", lambda a: isinstance(_p(a), np.floating)),
                     Kind("numpy-int", "a NumPy integer", lambda a: isinstance(_p(a), np.integer)),
                     Kind("bool", "True or False", lambda a: type(_p(a)) is bool),
                     Kind("tensor-0d-float", "a 0-d float tensor", lambda a: _t(dim=0)(_p(a)) and _p(a).is_floating_point()),
                     Kind("tensor-0d-int", "a 0-d integer tensor", lambda a: _t(dim=0)(_p(a)) and not _p(a).is_floating_point()),
                     Kind("tensor-1-element", "a 1-element tensor", lambda a: _t(dim=1)(_p(a)) and _p(a).numel() == 1),
                     Kind("str", "a string", lambda a: isinstance(_p(a), str)),
                     Kind("none", "None", lambda a: _p(a) is None))),
    Exercise(chapter=CHAPTER, exercise="ex2_mlm_corrupt", function="mlm_corrupt_batch",
             reference=None,
             args=(Arg("p", (Kind("zero", "p = 0", lambda v: v == 0), Kind("one", "p = 1", lambda v: v == 1),
                             Kind("between", "0 < p < 1", lambda v: isinstance(v, float) and 0 < v < 1))),)),
    Exercise(chapter=CHAPTER, exercise="ex3_filter_logits", function="filter_logits",
             reference=None,
             args=(Arg("logits", (Kind("float32", "float32", _t(torch.float32)), Kind("float64", "float64", _t(torch.float64)),
                                  Kind("1-d", "no leading dimension", _t(dim=1)),
                                  Kind("leading", "1 to 3 leading dimensions", lambda v: torch.is_tensor(v) and 2 <= v.dim() <= 4),
                                  Kind("large", "logits of 200 or more (exp overflows float32)",
                                       lambda v: torch.is_tensor(v) and bool((v.abs() >= 200).any())),
                                  Kind("saturated", "one logit 20 or more above the rest of its row",
                                       lambda v: torch.is_tensor(v) and v.shape[-1] > 1
                                       and bool((v.topk(2, -1).values.diff(dim=-1).abs() >= 20).any())))),
                   Arg("top_k", (Kind("none", "None", lambda v: v is None), Kind("one", "1", lambda v: v == 1),
                                 Kind("several", "an int above 1", lambda v: type(v) is int and v > 1))),
                   Arg("top_p", (Kind("none", "None", lambda v: v is None),
                                 Kind("below-one", "a float in (0, 1)", lambda v: isinstance(v, float) and 0 < v < 1),
                                 Kind("one", "1.0: every entry kept", lambda v: isinstance(v, float) and v == 1.0))))),
    Exercise(chapter=CHAPTER, exercise="ex4_patchify", function="patchify", reference="course_utils.vit:patchify",
             args=(Arg("images", (Kind("float32", "float32", _t(torch.float32, 4)), Kind("float64", "float64", _t(torch.float64, 4)),
                                  Kind("non-square", "H != W", lambda v: _t(dim=4)(v) and v.shape[-1] != v.shape[-2]))),
                   Arg("patch", (Kind("one", "1", lambda v: v == 1), Kind("several", "an int above 1", lambda v: type(v) is int and v > 1))))),
    Exercise(chapter=CHAPTER, exercise="ex5_vit_forward", function="vit_forward", reference=None,
             args=(Arg("images", (Kind("one-image", "a batch of 1", lambda v: _t(dim=4)(v) and v.shape[0] == 1),
                                  Kind("batch", "a batch of several", lambda v: _t(dim=4)(v) and v.shape[0] > 1))),)),
)
