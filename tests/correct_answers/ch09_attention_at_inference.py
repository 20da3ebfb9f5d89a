"""Correct answers to chapter 9's exercises, written differently from the solution."""

CORRECT = {
    "ex1_paged": {
        # position by position through the table, then PyTorch's attention with its own GQA pairing
        "loop over positions, F.scaled_dot_product_attention(enable_gqa=True)": '''def paged_attention(q, k_pool, v_pool, block_table, length):
    if k_pool.ndim != 4 or v_pool.ndim != 4 or k_pool.shape != v_pool.shape:
        raise ValueError("k_pool and v_pool must be 4-D tensors of one shape")
    nb, bs, g, d = k_pool.shape
    if q.ndim != 2 or q.shape[-1] != d:
        raise ValueError("q must be (n_heads, d_head) with the pools' d_head")
    if q.shape[0] % g:
        raise ValueError("n_heads must be a multiple of n_kv_heads")
    if length < 1 or len(block_table) * bs < length:
        raise ValueError("length does not fit in the block_table")
    rows_k, rows_v = [], []
    for t in range(length):
        b = int(block_table[t // bs])
        if not 0 <= b < nb:
            raise ValueError("block_table: a block number outside the pool")
        rows_k.append(k_pool[b, t % bs])
        rows_v.append(v_pool[b, t % bs])
    k = torch.stack(rows_k, dim=1)            # (n_kv_heads, length, d_head)
    v = torch.stack(rows_v, dim=1)
    return F.scaled_dot_product_attention(q[:, None], k, v, enable_gqa=True)[:, 0]
''',
        # the query heads grouped by key/value head (no repeat), computed in float64 and cast back
        "grouped query heads in float64, index_select": '''def paged_attention(q, k_pool, v_pool, block_table, length):
    for name, p in (("k_pool", k_pool), ("v_pool", v_pool)):
        if p.dim() != 4:
            raise ValueError(f"{name} must be 4-D")
    if k_pool.shape != v_pool.shape:
        raise ValueError("k_pool and v_pool differ in shape")
    n_blocks, bs, g, d = k_pool.shape
    if q.dim() != 2 or q.shape[1] != d:
        raise ValueError("q must be (n_heads, d_head)")
    h = q.shape[0]
    if h % g != 0:
        raise ValueError("n_heads is not a multiple of n_kv_heads")
    if length < 1:
        raise ValueError("length must be >= 1")
    need = (length + bs - 1) // bs
    table = torch.as_tensor(block_table, dtype=torch.long)
    if table.numel() < need:
        raise ValueError("block_table is too short for length")
    table = table[:need]
    if bool((table < 0).any()) or bool((table >= n_blocks).any()):
        raise ValueError("block_table has a block number outside the pool")
    k = k_pool.index_select(0, table).flatten(0, 1)[:length].double()     # (length, g, d)
    v = v_pool.index_select(0, table).flatten(0, 1)[:length].double()
    qg = q.double().reshape(g, h // g, d)
    s = torch.einsum("grd,lgd->grl", qg, k) / d ** 0.5
    out = torch.einsum("grl,lgd->grd", s.softmax(-1), v)
    return out.reshape(h, d).to(q.dtype)
''',
    },
    "ex2_rolling": {
        # every slot scored, the unfilled ones masked with -inf
        "all W slots with a mask of the filled ones": '''def rolling_attend(q, k_new, v_new, k_buf, v_buf, pos):
    if k_buf.ndim != 3 or v_buf.ndim != 3 or k_buf.shape != v_buf.shape:
        raise ValueError("k_buf and v_buf must be (n_heads, W, d_head), of one shape")
    h, W, d = k_buf.shape
    for name, t in (("q", q), ("k_new", k_new), ("v_new", v_new)):
        if t.shape != (h, d):
            raise ValueError(f"{name} has the wrong shape")
    if not isinstance(pos, int) or isinstance(pos, bool) or pos < 0:
        raise ValueError("pos must be an int >= 0")
    k_buf[:, pos % W].copy_(k_new)
    v_buf[:, pos % W].copy_(v_new)
    filled = torch.arange(W) <= pos
    scores = (k_buf @ q.unsqueeze(-1)).squeeze(-1) / math.sqrt(d)
    weights = torch.softmax(scores.masked_fill(~filled, float("-inf")), dim=-1)
    return (weights.unsqueeze(1) @ v_buf).squeeze(1)
''',
        # the keys put back in the order of their positions, then PyTorch's attention
        "chronological order, F.scaled_dot_product_attention": '''def rolling_attend(q, k_new, v_new, k_buf, v_buf, pos):
    if k_buf.dim() != 3:
        raise ValueError("k_buf must be 3-D")
    if v_buf.shape != k_buf.shape:
        raise ValueError("v_buf must have k_buf's shape")
    h, W, d = k_buf.shape
    if q.shape != (h, d) or k_new.shape != (h, d) or v_new.shape != (h, d):
        bad = [n for n, t in (("q", q), ("k_new", k_new), ("v_new", v_new)) if t.shape != (h, d)]
        raise ValueError(f"{bad[0]} must be (n_heads, d_head)")
    if type(pos) is not int or pos < 0:
        raise ValueError(f"pos must be a non-negative int, got {pos!r}")
    slot = pos % W
    k_buf[:, slot] = k_new
    v_buf[:, slot] = v_new
    if pos < W:
        k, v = k_buf[:, :pos + 1], v_buf[:, :pos + 1]
    else:
        order = [(slot + 1 + j) % W for j in range(W)]        # oldest first
        k, v = k_buf[:, order], v_buf[:, order]
    return F.scaled_dot_product_attention(q[:, None], k, v)[:, 0]
''',
    },
    "ex2b_slots": {
        # the buffer simulated: the last W positions written one by one
        "writing the last W positions into a list": '''def slot_positions(pos, window):
    if not isinstance(pos, int) or isinstance(pos, bool) or pos < 0:
        raise ValueError("pos must be a non-negative int")
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ValueError("window must be a positive int")
    slots = [-1] * window
    for i in range(max(0, pos - window + 1), pos + 1):
        slots[i % window] = i
    return torch.tensor(slots)
''',
        # slot s holds s plus a whole number of windows: the largest such number that stays <= pos
        "s + W * floor((pos - s) / W), with Python ints": '''def slot_positions(pos, window):
    if type(pos) is not int or pos < 0:
        raise ValueError(f"pos: expected an int >= 0, got {pos!r}")
    if type(window) is not int or window < 1:
        raise ValueError(f"window: expected an int >= 1, got {window!r}")
    return torch.tensor([s + window * ((pos - s) // window) if s <= pos else -1 for s in range(window)],
                        dtype=torch.long)
''',
    },
}

# Sections 4 and 5 (exercises 3 and 4), appended after the sample exercises.
CORRECT["ex3_verify"] = {
    "ratio by division, the course's residual": '''def verify_draft(p, q, draft_tokens, u):
    if q.ndim != 2 or p.shape != (q.shape[0] + 1, q.shape[1]) or draft_tokens.shape != (q.shape[0],) \\
            or u.shape != (q.shape[0],):
        raise ValueError("p must be (gamma + 1, V), q (gamma, V), draft_tokens and u (gamma,)")
    if draft_tokens.min() < 0 or draft_tokens.max() >= q.shape[1]:
        raise ValueError("draft_tokens must be ids in [0, V)")
    for i, x in enumerate(draft_tokens.tolist()):
        if not u[i] < torch.clamp(p[i, x] / q[i, x], max=1.0):
            return i, speculative.residual_distribution(p[i], q[i])
    return len(draft_tokens), p[-1]
''',
    "vectorised: the first rejection by cumprod": '''def verify_draft(p, q, draft_tokens, u):
    if q.dim() != 2:
        raise ValueError("q must be 2-D")
    g, V = q.shape
    if list(p.shape) != [g + 1, V] or list(draft_tokens.shape) != [g] or list(u.shape) != [g]:
        raise ValueError("shapes: p (gamma + 1, V), draft_tokens (gamma,), u (gamma,)")
    if bool(((draft_tokens < 0) | (draft_tokens >= V)).any()):
        raise ValueError("a draft token out of range")
    idx = torch.arange(g)
    kept = (u.to(p.dtype) * q[idx, draft_tokens] < p[idx, draft_tokens]).long()
    n = int(kept.cumprod(0).sum())
    if n == g:
        return n, p[g]
    resid = torch.relu(p[n] - q[n])
    return n, resid / resid.sum()
''',
}
CORRECT["ex4_mla_attend"] = {
    "keys and values rebuilt (the explicit form)": '''def mla_attend(h, c_kv, k_rope, W):
    if h.dim() != 3 or h.shape[2] != W["W_Q"].shape[1]:
        raise ValueError("h must be (batch, T_q, d_model)")
    if c_kv.dim() != 3 or k_rope.dim() != 3 or c_kv.shape[:2] != k_rope.shape[:2] \\
            or c_kv.shape[0] != h.shape[0] or c_kv.shape[1] < h.shape[1]:
        raise ValueError("the cache c_kv, k_rope does not fit h")
    T, Tq = c_kv.shape[1], h.shape[1]
    q = torch.cat([torch.einsum("btm,hmd->bhtd", h, W["W_Q"]),
                   positional.apply_rope_half(torch.einsum("btm,hmr->bhtr", h, W["W_QR"]), offset=T - Tq)], -1)
    k_c = torch.einsum("bsc,hcd->bhsd", c_kv, W["W_UK"])
    k = torch.cat([k_c, k_rope[:, None].expand(-1, k_c.shape[1], -1, -1)], -1)
    v = torch.einsum("bsc,hcd->bhsd", c_kv, W["W_UV"])
    mask = torch.ones(Tq, T, dtype=torch.bool).tril(T - Tq)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return torch.einsum("bhtd,hdm->btm", out, W["W_O"])
''',
    "absorbed, one head at a time": '''def mla_attend(h, c_kv, k_rope, W):
    if len(h.shape) != 3 or h.shape[-1] != W["W_Q"].shape[-2]:
        raise ValueError("h: expected (batch, T_q, d_model)")
    if len(c_kv.shape) != 3 or len(k_rope.shape) != 3 or c_kv.shape[0] != k_rope.shape[0] \\
            or c_kv.shape[1] != k_rope.shape[1] or c_kv.shape[0] != h.shape[0] or c_kv.shape[1] < h.shape[1]:
        raise ValueError("cache: c_kv and k_rope must be (batch, T, .) with T >= T_q")
    b, Tq, dm = h.shape
    T = c_kv.shape[1]
    scale = (W["W_Q"].shape[-1] + k_rope.shape[-1]) ** -0.5
    hidden = torch.triu(torch.ones(Tq, T, dtype=torch.bool), diagonal=T - Tq + 1)
    out = torch.zeros(b, Tq, dm, dtype=h.dtype)
    for i in range(W["W_Q"].shape[0]):
        q_lat = h @ W["W_Q"][i] @ W["W_UK"][i].T
        q_r = positional.apply_rope_half((h @ W["W_QR"][i])[:, None], offset=T - Tq)[:, 0]
        s = (q_lat @ c_kv.transpose(1, 2) + q_r @ k_rope.transpose(1, 2)) * scale
        a = s.masked_fill(hidden, float("-inf")).softmax(-1)
        out = out + (a @ c_kv) @ (W["W_UV"][i] @ W["W_O"][i])
    return out
''',
}
