"""Chapter 9 (Attention at inference time): the declared domain of every exercise."""

from __future__ import annotations

import torch

from course_utils.domains import CALL, Arg, Exercise, Kind, tensor_kind
from course_utils.domains._kinds import BATCH1, BATCHED, F32, F64

__all__ = ["CHAPTER", "EXERCISES"]

CHAPTER = "ch09_attention_at_inference"


# --- exercise 1: paged_attention ----------------------------------------------------------------

def _pools(a) -> tuple | None:
    """(n_blocks, block_size, n_kv_heads, d_head) when both pools are 4-D tensors of one shape."""
    k, v = a["k_pool"], a["v_pool"]
    if isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor) and k.dim() == 4 and k.shape == v.shape:
        return tuple(k.shape)
    return None


def _q_ok(a) -> bool:
    p = _pools(a)
    return p is not None and isinstance(a["q"], torch.Tensor) and a["q"].dim() == 2 and a["q"].shape[1] == p[3]


def _table(a) -> list[int]:
    t = a["block_table"]
    return t.tolist() if isinstance(t, torch.Tensor) else list(t)


def _need(a) -> int:
    return -(-a["length"] // _pools(a)[1])


def _length_ok(a) -> bool:
    n = a["length"]
    return type(n) is int and n >= 1 and len(_table(a)) >= _need(a)


def _heads_ok(a) -> bool:
    return a["q"].shape[0] % _pools(a)[2] == 0


PAGED_CALL = (
    Kind("mha", "`n_heads` = `n_kv_heads` (MHA)", lambda b: b["q"].shape[0] == b["k_pool"].shape[2]),
    Kind("gqa", "1 < `n_kv_heads` < `n_heads` (GQA)", lambda b: 1 < b["k_pool"].shape[2] < b["q"].shape[0]),
    Kind("mqa", "`n_kv_heads` = 1 < `n_heads` (MQA)", lambda b: b["k_pool"].shape[2] == 1 < b["q"].shape[0]),
    Kind("full-last", "`length` a multiple of `block_size` (the last block full)",
         lambda b: b["length"] % b["k_pool"].shape[1] == 0),
    Kind("partial-last", "a last block partly filled (its other slots hold stale values)",
         lambda b: b["length"] % b["k_pool"].shape[1] != 0),
    Kind("length-1", "`length` = 1", lambda b: b["length"] == 1),
    Kind("block-1", "`block_size` = 1", lambda b: b["k_pool"].shape[1] == 1),
    Kind("longer-table", "a table longer than `length` needs",
         lambda b: len(_table(b)) > _need(b)),
    Kind("scattered", "blocks out of order, with other sequences' blocks between them",
         lambda b: _table(b)[:_need(b)] != sorted(_table(b)[:_need(b)])),
)

PAGED_RAISES = (
    Kind("pools", "`k_pool` or `v_pool` not 4-D, or the two of different shapes: ValueError",
         lambda a: _pools(a) is None),
    Kind("q", "`q` not 2-D, or its `d_head` not the pools': ValueError",
         lambda a: _pools(a) is not None and not _q_ok(a)),
    Kind("heads", "`n_heads` not a multiple of `n_kv_heads`: ValueError",
         lambda a: _q_ok(a) and not _heads_ok(a)),
    Kind("length", "`length` below 1, or a `block_table` with fewer blocks than `length` needs: ValueError",
         lambda a: _q_ok(a) and _heads_ok(a) and not _length_ok(a)),
    Kind("block-number", "a block number outside 0 to `n_blocks` - 1 (a negative one too): ValueError",
         lambda a: _q_ok(a) and _heads_ok(a) and _length_ok(a)
         and any(not 0 <= i < _pools(a)[0] for i in _table(a)[:_need(a)])),
)


# --- exercise 2: rolling_attend -----------------------------------------------------------------

def _bufs_ok(a) -> bool:
    k, v = a["k_buf"], a["v_buf"]
    return isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor) and k.dim() == 3 and k.shape == v.shape


def _steps_ok(a) -> bool:
    want = (a["k_buf"].shape[0], a["k_buf"].shape[2])
    return all(isinstance(a[n], torch.Tensor) and tuple(a[n].shape) == want for n in ("q", "k_new", "v_new"))


ROLLING_CALL = (
    Kind("filling", "`pos` < W (a buffer still filling; its later slots hold stale values)",
         lambda b: b["pos"] < b["k_buf"].shape[1]),
    Kind("full", "`pos` >= W (a full buffer: the slot of position `pos` - W overwritten)",
         lambda b: b["pos"] >= b["k_buf"].shape[1]),
    Kind("window-1", "W = 1", lambda b: b["k_buf"].shape[1] == 1),
)

ROLLING_RAISES = (
    Kind("buffers", "`k_buf` or `v_buf` not 3-D, or the two of different shapes: ValueError",
         lambda a: not _bufs_ok(a)),
    Kind("step", "`q`, `k_new` or `v_new` not `(n_heads, d_head)` of the buffers: ValueError",
         lambda a: _bufs_ok(a) and not _steps_ok(a)),
    Kind("pos", "`pos` not an int >= 0 (a negative int, a float): ValueError",
         lambda a: _bufs_ok(a) and _steps_ok(a) and not (type(a["pos"]) is int and a["pos"] >= 0)),
)

SLOT_CALL = (
    Kind("first", "`pos` = 0 (one slot written)", lambda b: b["pos"] == 0),
    Kind("filling", "0 < `pos` < `window` - 1 (some slots not written yet)", lambda b: 0 < b["pos"] < b["window"] - 1),
    Kind("just-full", "`pos` = `window` - 1 (every slot written once)", lambda b: b["pos"] == b["window"] - 1 > 0),
    Kind("wrapped", "`pos` >= `window` (older positions overwritten)", lambda b: b["pos"] >= b["window"]),
    Kind("window-1", "`window` = 1", lambda b: b["window"] == 1),
    Kind("far", "`pos` past 2**31 (exact in a long tensor)", lambda b: b["pos"] > 2**31),
)

SLOT_RAISES = (
    Kind("pos", "`pos` not an int >= 0 (a negative int, a float): ValueError",
         lambda a: not (type(a["pos"]) is int and a["pos"] >= 0)),
    Kind("window", "`window` not an int >= 1 (0, a float): ValueError",
         lambda a: type(a["pos"]) is int and a["pos"] >= 0 and not (type(a["window"]) is int and a["window"] >= 1)),
)

EXERCISES = (
    Exercise(chapter=CHAPTER, exercise="ex1_paged", function="paged_attention",
             reference="course_utils.paged:paged_attention",
             args=(Arg("q", (F32, F64)),
                   Arg(CALL, PAGED_CALL),
                   Arg("block_table", (Kind("list", "a list of Python ints", lambda v: isinstance(v, list)),
                                       tensor_kind("int-tensor", "a 1-D integer tensor",
                                                   lambda t: t.dim() == 1 and t.dtype == torch.long)))),
             raises=PAGED_RAISES),
    Exercise(chapter=CHAPTER, exercise="ex2_rolling", function="rolling_attend",
             reference="course_utils.rolling:rolling_attend",
             args=(Arg("q", (F32, F64)),
                   Arg(CALL, ROLLING_CALL)),
             raises=ROLLING_RAISES, mutates=("k_buf", "v_buf")),
    Exercise(chapter=CHAPTER, exercise="ex2b_slots", function="slot_positions",
             reference="course_utils.rolling:slot_positions",
             args=(Arg(CALL, SLOT_CALL),), raises=SLOT_RAISES),
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
