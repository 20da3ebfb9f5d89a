"""Wrong answers to chapter 9's exercises.

``EXERCISE``/``SOURCE``: attention to every slot of the table's blocks, the length ignored: the unused
slots of the last block (stale values) are read as keys. Visible and hidden tests catch it.

``HIDDEN_ONLY``: for every exercise, a plausible answer that passes its visible tests and fails its
hidden ones. ``REVIEWED``: the other mistakes reviewed while writing the tests, each one edit away from
a right answer (``_edit``); each must lose points.
"""

EXERCISE = "ex1_paged"

SOURCE = '''def paged_attention(q, k_pool, v_pool, block_table, length):
    """Wrong: every slot of the table's blocks is a key, the stale ones too."""
    n_kv = k_pool.shape[2]
    k = k_pool[list(block_table)].flatten(0, 1)
    v = v_pool[list(block_table)].flatten(0, 1)
    rep = q.shape[0] // n_kv
    k, v = (t.transpose(0, 1).repeat_interleave(rep, 0) for t in (k, v))
    return F.scaled_dot_product_attention(q[:, None], k, v)[:, 0]
'''

# Exercise 1's reviewed wrong answers are one edit each of this right answer.
_PAGED = '''def paged_attention(q, k_pool, v_pool, block_table, length):
    if k_pool.dim() != 4 or v_pool.dim() != 4 or k_pool.shape != v_pool.shape:
        raise ValueError("k_pool and v_pool must be 4-D of one shape")
    n_blocks, bs, g, d = k_pool.shape
    if q.dim() != 2 or q.shape[1] != d:
        raise ValueError("q must be (n_heads, d_head)")
    h = q.shape[0]
    if h % g != 0:
        raise ValueError("n_heads must be a multiple of n_kv_heads")
    if length < 1:
        raise ValueError("length must be >= 1")
    need = -(-length // bs)
    table = [int(b) for b in block_table]
    if len(table) < need:
        raise ValueError("block_table is too short for length")
    table = table[:need]
    if min(table) < 0 or max(table) >= n_blocks:
        raise ValueError("block_table has a block number outside the pool")
    k = k_pool[table].flatten(0, 1)[:length]
    v = v_pool[table].flatten(0, 1)[:length]
    k = k.transpose(0, 1).repeat_interleave(h // g, dim=0)
    v = v.transpose(0, 1).repeat_interleave(h // g, dim=0)
    w = torch.softmax(q[:, None] @ k.transpose(-2, -1) / math.sqrt(d), dim=-1)
    return (w @ v)[:, 0]
'''

# Exercise 2's reviewed wrong answers are one edit each of this right answer.
_ROLLING = '''def rolling_attend(q, k_new, v_new, k_buf, v_buf, pos):
    if k_buf.dim() != 3 or k_buf.shape != v_buf.shape:
        raise ValueError("k_buf and v_buf must be (n_heads, W, d_head) of one shape")
    h, W, d = k_buf.shape
    for name, t in (("q", q), ("k_new", k_new), ("v_new", v_new)):
        if tuple(t.shape) != (h, d):
            raise ValueError(f"{name} must be (n_heads, d_head)")
    if type(pos) is not int or pos < 0:
        raise ValueError("pos must be an int >= 0")
    k_buf[:, pos % W] = k_new
    v_buf[:, pos % W] = v_new
    n = min(pos + 1, W)
    w = torch.softmax(q[:, None] @ k_buf[:, :n].transpose(-2, -1) / math.sqrt(d), dim=-1)
    return (w @ v_buf[:, :n])[:, 0]
'''

# Exercise 2b's reviewed wrong answers are one edit each of this right answer.
_SLOTS = '''def slot_positions(pos, window):
    if type(pos) is not int or pos < 0:
        raise ValueError("pos must be an int >= 0")
    if type(window) is not int or window < 1:
        raise ValueError("window must be an int >= 1")
    slots = torch.arange(window)
    last = pos - (pos - slots) % window
    return torch.where(last >= 0, last, -1)
'''


def _edit(source: str, old: str, new: str) -> str:
    """``source`` with its one occurrence of ``old`` replaced (a wrong answer one edit away from a right one)."""
    if source.count(old) != 1:
        raise ValueError(f"{old!r} occurs {source.count(old)} times")
    return source.replace(old, new)


HIDDEN_ONLY = {
    # No check of the block numbers: a negative one silently reads a block from the end of the pool
    # (Python's indexing), one past the end raises IndexError; the visible tests use valid tables only.
    "ex1_paged": _edit(_PAGED, '''    if min(table) < 0 or max(table) >= n_blocks:
        raise ValueError("block_table has a block number outside the pool")
''', ""),
    # Writes the new key and value before checking pos: the ValueError comes, but the buffers were
    # changed (a negative pos writes into slot pos % W); the visible test passes copies of the buffers.
    # pos checked for a negative value only: a float pos gives a float tensor instead of a ValueError.
    "ex2b_slots": _edit(_SLOTS, 'if type(pos) is not int or pos < 0:', 'if pos < 0:'),
    "ex2_rolling": _edit(_ROLLING, '''    if type(pos) is not int or pos < 0:
        raise ValueError("pos must be an int >= 0")
    k_buf[:, pos % W] = k_new
    v_buf[:, pos % W] = v_new
''', '''    k_buf[:, pos % W] = k_new
    v_buf[:, pos % W] = v_new
    if type(pos) is not int or pos < 0:
        raise ValueError("pos must be an int >= 0")
'''),
}

# ``{name: (exercise, source)}``
REVIEWED = {
    # The kv heads repeated as a stack (head i reads kv head i % g, not i // (h / g)): right for MHA and MQA.
    "paged_strided_heads": ("ex1_paged", _edit(_PAGED, "k = k.transpose(0, 1).repeat_interleave(h // g, dim=0)",
                                               "k = k.transpose(0, 1).repeat(h // g, 1, 1)")),
    # No 1/sqrt(d_head) scale.
    "paged_unscaled": ("ex1_paged", _edit(_PAGED, " / math.sqrt(d)", "")),
    # The first block of the table taken as the start of a contiguous run (a contiguous cache's habit).
    "paged_contiguous_from_first_block": ("ex1_paged", _edit(
        _PAGED, "k = k_pool[table].flatten(0, 1)[:length]",
        "k = k_pool[table[0]:table[0] + need].flatten(0, 1)[:length]")),
    # The range check off by one: block number n_blocks passes and then raises IndexError.
    "paged_range_off_by_one": ("ex1_paged", _edit(_PAGED, "max(table) >= n_blocks", "max(table) > n_blocks")),
    # The keys gathered as (length, n_kv_heads, d_head) but the values taken in pool order (the table ignored).
    "paged_values_ignore_table": ("ex1_paged", _edit(_PAGED, "v = v_pool[table].flatten(0, 1)[:length]",
                                                     "v = v_pool[:need].flatten(0, 1)[:length]")),
    # Always float32 (a float64 input comes back rounded).
    "paged_float32": ("ex1_paged", _edit(_PAGED, "return (w @ v)[:, 0]", "return (w @ v)[:, 0].float()")),
    # A table too short is not checked: a short table then reads fewer positions, or fails with IndexError.
    "paged_no_length_check": ("ex1_paged", _edit(_PAGED, '''    if len(table) < need:
        raise ValueError("block_table is too short for length")
''', "")),
    # Position pos written at slot pos (no modulo): IndexError once pos reaches W.
    "rolling_no_modulo": ("ex2_rolling", _edit(_ROLLING, "k_buf[:, pos % W] = k_new", "k_buf[:, min(pos, W - 1)] = k_new")),
    # Every slot read while the buffer fills: the stale values become keys.
    "rolling_reads_stale_slots": ("ex2_rolling", _edit(_ROLLING, "n = min(pos + 1, W)", "n = W")),
    # The window one short: the slots of positions before pos only while filling (position 0 sees nothing).
    "rolling_window_off_by_one": ("ex2_rolling", _edit(_ROLLING, "n = min(pos + 1, W)", "n = max(1, min(pos, W))")),
    # New buffers made with torch.cat instead of writing in place: the caller's buffers never change.
    "rolling_not_in_place": ("ex2_rolling", _edit(_ROLLING, '''    k_buf[:, pos % W] = k_new
    v_buf[:, pos % W] = v_new
''', '''    k_buf = torch.cat([k_buf[:, :pos % W], k_new[:, None], k_buf[:, pos % W + 1:]], dim=1)
    v_buf = torch.cat([v_buf[:, :pos % W], v_new[:, None], v_buf[:, pos % W + 1:]], dim=1)
''')),
    # A float pos accepted (2.0 % W is a float; indexing with it fails with IndexError, not ValueError).
    "rolling_float_pos": ("ex2_rolling", _edit(_ROLLING, "type(pos) is not int or pos < 0", "pos < 0")),
    # No 1/sqrt(d_head) scale.
    "rolling_unscaled": ("ex2_rolling", _edit(_ROLLING, " / math.sqrt(d)", "")),
    # Positions computed in float32: exact only below 2**24 (the prompt: positions past 2**31).
    "slots_float32": ("ex2b_slots", _edit(_SLOTS, "slots = torch.arange(window)",
                                          "slots = torch.arange(window, dtype=torch.float32)")),
    # The empty slots not marked: a slot not written yet gets a negative "position".
    "slots_no_minus_one": ("ex2b_slots", _edit(_SLOTS, "return torch.where(last >= 0, last, -1)", "return last")),
    # No wrap: slot s taken to hold s plus the windows completed so far, also where that is past pos.
    "slots_no_wrap": ("ex2b_slots", _edit(_SLOTS, "last = pos - (pos - slots) % window",
                                          "last = slots + window * (pos // window)")),
    # window not checked: window 0 returns an empty tensor.
    "slots_no_window_check": ("ex2b_slots", _edit(_SLOTS, '''    if type(window) is not int or window < 1:
        raise ValueError("window must be an int >= 1")
''', "")),
}

# Sections 4 and 5 (exercises 3 and 4), appended after the sample exercises.
# Exercise 3's and 4's reviewed wrong answers are one edit each of these right answers.
_VERIFY = '''def verify_draft(p, q, draft_tokens, u):
    if q.dim() != 2 or tuple(p.shape) != (q.shape[0] + 1, q.shape[1]):
        raise ValueError("p must be (gamma + 1, V) and q (gamma, V)")
    gamma = q.shape[0]
    if tuple(draft_tokens.shape) != (gamma,) or tuple(u.shape) != (gamma,):
        raise ValueError("draft_tokens and u must be (gamma,)")
    if ((draft_tokens < 0) | (draft_tokens >= q.shape[1])).any():
        raise ValueError("draft_tokens must be ids in [0, V)")
    for i in range(gamma):
        x = draft_tokens[i]
        if u[i] * q[i, x] >= p[i, x]:
            r = (p[i] - q[i]).clamp(min=0)
            return i, r / r.sum()
    return gamma, p[gamma]
'''

_MLA = '''def mla_attend(h, c_kv, k_rope, W):
    if h.dim() != 3 or h.shape[-1] != W["W_Q"].shape[1]:
        raise ValueError("h must be (batch, T_q, d_model)")
    if c_kv.dim() != 3 or k_rope.dim() != 3 or c_kv.shape[:2] != k_rope.shape[:2]:
        raise ValueError("c_kv and k_rope must agree")
    if c_kv.shape[0] != h.shape[0] or c_kv.shape[1] < h.shape[1]:
        raise ValueError("the cache must hold T_q positions of h's batch")
    T, T_q = c_kv.shape[1], h.shape[1]
    q_c = torch.einsum("btm,hmd->bhtd", h, W["W_Q"])
    q_r = positional.apply_rope_half(torch.einsum("btm,hmr->bhtr", h, W["W_QR"]), offset=T - T_q)
    q_lat = torch.einsum("bhtd,hcd->bhtc", q_c, W["W_UK"])
    scores = q_lat @ c_kv[:, None].transpose(-1, -2) + q_r @ k_rope[:, None].transpose(-1, -2)
    scores = scores / math.sqrt(W["W_Q"].shape[-1] + k_rope.shape[-1])
    mask = torch.ones(T_q, T, dtype=torch.bool).tril(T - T_q)
    a = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    W_OV = torch.einsum("hcd,hdm->hcm", W["W_UV"], W["W_O"])
    return torch.einsum("bhtc,hcm->btm", a @ c_kv[:, None], W_OV)
'''


def _edit(source: str, old: str, new: str) -> str:
    """``source`` with its one occurrence of ``old`` replaced (a wrong answer one edit away from a right one)."""
    if source.count(old) != 1:
        raise ValueError(f"{old!r} occurs {source.count(old)} times")
    return source.replace(old, new)


# Computes in float64 whatever p's dtype: right on the visible float64 tests, wrong dtype for float32.
HIDDEN_ONLY["ex3_verify"] = _edit(_VERIFY, "    gamma = q.shape[0]\n", "    gamma = q.shape[0]\n    p, q = p.double(), q.double()\n")
# Computes in float64 whatever h's dtype: right on the visible float64 layer, wrong dtype for float32.
HIDDEN_ONLY["ex4_mla_attend"] = _edit(_MLA, "    T, T_q = c_kv.shape[1], h.shape[1]\n",
                                      "    T, T_q = c_kv.shape[1], h.shape[1]\n    h, c_kv, k_rope = h.double(), c_kv.double(), k_rope.double()\n"
                                      "    W = {k: v.double() for k, v in W.items()}\n")

REVIEWED = {
    # The ratio upside down: keeps with probability min(1, q/p), which favours the draft's tokens.
    "verify_ratio_inverted": ("ex3_verify", _edit(_VERIFY, "if u[i] * q[i, x] >= p[i, x]:", "if u[i] * p[i, x] >= q[i, x]:")),
    # Goes on after a rejection, counting every kept token: n is no longer the length of a kept prefix.
    "verify_counts_past_rejection": ("ex3_verify", _edit(_edit(_VERIFY, "            r = (p[i] - q[i]).clamp(min=0)\n            return i, r / r.sum()\n",
                                                             "            gamma -= 1\n"), "    return gamma, p[gamma]", "    return gamma, p[-1]")),
    # The residual not normalised: max(0, p - q) itself, which sums to less than 1.
    "verify_residual_unnormalised": ("ex3_verify", _edit(_VERIFY, "return i, r / r.sum()", "return i, r")),
    # The residual the wrong way round: max(0, q - p), the draft's surplus instead of the target's.
    "verify_residual_q_minus_p": ("ex3_verify", _edit(_VERIFY, "r = (p[i] - q[i]).clamp(min=0)", "r = (q[i] - p[i]).clamp(min=0)")),
    # The bonus from the last draft place, p[gamma - 1], instead of the row after it.
    "verify_bonus_off_by_one": ("ex3_verify", _edit(_VERIFY, "return gamma, p[gamma]", "return gamma, p[gamma - 1]")),
    # After a rejection the next token is drawn from the target itself, p[i], not the residual: the
    # emitted tokens then over-weight where q > p.
    "verify_correction_from_p": ("ex3_verify", _edit(_VERIFY, "return i, r / r.sum()", "return i, p[i]")),
    # No check of u's shape: a u of the wrong length is read as far as it goes.
    "verify_u_unchecked": ("ex3_verify", _edit(_VERIFY, " or tuple(u.shape) != (gamma,)", "")),
    # The query's RoPE at positions 0.. (no offset): right for a whole sequence, wrong for new positions on a cache.
    "mla_rope_no_offset": ("ex4_mla_attend", _edit(_MLA, ", offset=T - T_q)", ")")),
    # Scaled by 1/sqrt(d_head), forgetting the RoPE part of the query's width.
    "mla_scale_d_head_only": ("ex4_mla_attend", _edit(_MLA, "math.sqrt(W[\"W_Q\"].shape[-1] + k_rope.shape[-1])", "math.sqrt(W[\"W_Q\"].shape[-1])")),
    # The causal mask aligned top-left: new positions on a cache see only the first positions.
    "mla_mask_top_left": ("ex4_mla_attend", _edit(_MLA, "mask = torch.ones(T_q, T, dtype=torch.bool).tril(T - T_q)", "mask = torch.ones(T_q, T, dtype=torch.bool).tril()")),
    # No causal mask: every query sees every cached position (right only for the last position).
    "mla_no_mask": ("ex4_mla_attend", _edit(_MLA, "mask = torch.ones(T_q, T, dtype=torch.bool).tril(T - T_q)", "mask = torch.ones(T_q, T, dtype=torch.bool)")),
    # The heads averaged instead of summed in the output projection.
    "mla_heads_averaged": ("ex4_mla_attend", _edit(_MLA, "return torch.einsum(\"bhtc,hcm->btm\", a @ c_kv[:, None], W_OV)",
                                                 "return torch.einsum(\"bhtc,hcm->btm\", a @ c_kv[:, None], W_OV) / W_OV.shape[0]")),
    # The RoPE part left out of the score: content only.
    "mla_no_rope_score": ("ex4_mla_attend", _edit(_MLA, " + q_r @ k_rope[:, None].transpose(-1, -2)", "")),
    # No check of the cache's batch against h's: a cache of another batch fails inside einsum with a
    # RuntimeError (or broadcasts, for a batch of 1), not the ValueError the prompt asks for.
    "mla_cache_batch_unchecked": ("ex4_mla_attend", _edit(_MLA, "c_kv.shape[0] != h.shape[0] or ", "")),
}
