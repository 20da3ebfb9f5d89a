"""Chapter 6's declared domains (issue 54): what each exercise's prompt allows, each kind drawn by its hidden test."""

from __future__ import annotations

import torch

from course_utils.domains import Arg, Exercise, Kind, tensor

__all__ = ["CHAPTER", "EXERCISES"]

CHAPTER = "ch06_transformer"


_t = tensor


def _int(pred):
    return lambda v: type(v) is int and pred(v)


_LAYER = (Kind("post-ln", "a Post-LN block (norm_first False)", lambda v: getattr(v, "norm_first", None) is False),
          Kind("pre-ln", "a Pre-LN block (norm_first True)", lambda v: getattr(v, "norm_first", None) is True))
_MASK = (Kind("none", "None", lambda v: v is None), Kind("padding", "a bool padding mask", _t(torch.bool)))

EXERCISES = (
    Exercise(chapter=CHAPTER, exercise="ex1_sinusoidal", function="sinusoidal_table",
             reference="course_utils.positional:sinusoidal_encoding",
             args=(Arg("max_len", (Kind("one", "1", _int(lambda v: v == 1)),
                                   Kind("short", "2 to 1023 positions", _int(lambda v: 1 < v < 1024)),
                                   Kind("long", "1024 to 10000 positions (float32 angles lose digits)",
                                        _int(lambda v: 1024 <= v <= 10000)))),
                   Arg("d_model", (Kind("two", "2", _int(lambda v: v == 2)),
                                   Kind("even", "an even int above 2", _int(lambda v: v > 2 and v % 2 == 0))))),
             raises=(Kind("odd-d-model", "an odd d_model: ValueError",
                          lambda a: type(a.get("d_model")) is int and a["d_model"] % 2 == 1),)),
    Exercise(chapter=CHAPTER, exercise="ex2_encoder_layer", function="encoder_layer_forward",
             reference=None,
             args=(Arg("layer", _LAYER), Arg("mask", _MASK))),
    Exercise(chapter=CHAPTER, exercise="ex3_decoder_mask", function="decoder_mask",
             reference="course_utils.transformer:decoder_self_mask",
             args=(Arg("tgt_in", tuple(Kind(str(dt)[6:], f"{str(dt)[6:]} ids", _t(dt, 2))
                                       for dt in (torch.int64, torch.int32, torch.int16, torch.uint8))),
                   Arg("pad_id", (Kind("int", "a Python int", lambda v: type(v) is int),)))),
    Exercise(chapter=CHAPTER, exercise="ex4_decoder_layer", function="decoder_layer_forward",
             reference=None,
             args=(Arg("layer", _LAYER), Arg("memory_mask", _MASK))),
    Exercise(chapter=CHAPTER, exercise="ex5_warmup", function="warmup_lr", reference="course_utils.transformer:noam_lr",
             args=(Arg("step", (Kind("first", "step 1", _int(lambda v: v == 1)),
                                Kind("later", "a step above 1", _int(lambda v: v > 1)))),
                   Arg("warmup", (Kind("one", "warmup 1", _int(lambda v: v == 1)),
                                  Kind("several", "warmup above 1", _int(lambda v: v > 1)))))),
)
