"""Chapter 9 (Attention at inference time): the declared domain of every exercise."""

from __future__ import annotations

import torch

from course_utils.domains import CALL, Arg, Exercise, Kind, tensor
from course_utils.domains._kinds import BATCH1, BATCHED, F32, F64

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


# --- Sections 4 and 5 (speculative decoding, latent KV): exercises 3 and 4 -------------------------

def _n_kept(b: dict) -> int:
    """How many draft tokens the rule keeps for the bound arguments ``b`` of ``verify_draft``."""
    from course_utils.speculative import verify_draft
    return verify_draft(b["p"], b["q"], b["draft_tokens"], b["u"])[0]


def _shapes_ok(a: dict) -> bool:
    q, p = a["q"], a["p"]
    return (q.dim() == 2 and tuple(p.shape) == (q.shape[0] + 1, q.shape[1])
            and tuple(a["draft_tokens"].shape) == (q.shape[0],) and tuple(a["u"].shape) == (q.shape[0],))


def _cache_ok(a: dict) -> bool:
    c, r, h = a["c_kv"], a["k_rope"], a["h"]
    return c.dim() == 3 and r.dim() == 3 and c.shape[:2] == r.shape[:2] and c.shape[0] == h.shape[0] and c.shape[1] >= h.shape[1]


def _h_ok(a: dict) -> bool:
    return a["h"].dim() == 3 and a["h"].shape[-1] == a["W"]["W_Q"].shape[1]


EXERCISES += (
    Exercise(chapter=CHAPTER, exercise="ex3_verify", function="verify_draft",
             reference="course_utils.speculative:verify_draft",
             args=(Arg("p", (F32, F64)),
                   Arg(CALL, (Kind("gamma-1", "`gamma` = 1", lambda b: b["q"].shape[0] == 1),
                              Kind("gamma-many", "`gamma` > 1", lambda b: b["q"].shape[0] > 1),
                              Kind("all-kept", "every draft token kept (`dist` is `p[gamma]`)",
                                   lambda b: _n_kept(b) == b["q"].shape[0]),
                              Kind("first-rejected", "the first draft token rejected", lambda b: _n_kept(b) == 0),
                              Kind("later-rejected", "a later draft token rejected",
                                   lambda b: 0 < _n_kept(b) < b["q"].shape[0]),
                              Kind("p-zero", "a draft token to which the target gives probability 0",
                                   lambda b: bool((b["p"][:-1].gather(1, b["draft_tokens"][:, None]) == 0).any()))))),
             raises=(Kind("shapes", "`q` not 2-D, `p` not `(gamma + 1, V)`, `draft_tokens` or `u` not `(gamma,)`: "
                                    "ValueError", lambda a: not _shapes_ok(a)),
                     Kind("ids", "a draft token outside [0, V): ValueError",
                          lambda a: _shapes_ok(a) and bool(((a["draft_tokens"] < 0) | (a["draft_tokens"] >= a["q"].shape[1])).any())))),
    Exercise(chapter=CHAPTER, exercise="ex4_mla_attend", function="mla_attend", reference="course_utils.mla:mla_absorbed",
             args=(Arg("h", (F32, F64, BATCHED, BATCH1)),
                   Arg(CALL, (Kind("whole", "the queries a whole sequence (`T_q` = `T`)",
                                   lambda b: b["h"].shape[1] == b["c_kv"].shape[1]),
                              Kind("token", "one new position on a filled cache (`T_q` = 1 < `T`)",
                                   lambda b: b["h"].shape[1] == 1 < b["c_kv"].shape[1]),
                              Kind("chunk", "a chunk of several new positions on a filled cache (1 < `T_q` < `T`)",
                                   lambda b: 1 < b["h"].shape[1] < b["c_kv"].shape[1]),
                              Kind("one-head", "one head", lambda b: b["W"]["W_Q"].shape[0] == 1),
                              Kind("many-heads", "several heads", lambda b: b["W"]["W_Q"].shape[0] > 1)))),
             raises=(Kind("h", "`h` not 3-D, or its `d_model` not `W_Q`'s: ValueError", lambda a: not _h_ok(a)),
                     Kind("cache", "`c_kv` and `k_rope` not 3-D or differing in batch or length, their batch not "
                                   "`h`'s, or fewer cached positions than `T_q`: ValueError",
                          lambda a: _h_ok(a) and not _cache_ok(a)))),
)
