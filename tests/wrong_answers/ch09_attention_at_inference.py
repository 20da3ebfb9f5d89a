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
