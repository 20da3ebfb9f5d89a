"""Correct answers to chapter 9's exercises, written differently from the solution."""

CORRECT = {
    "ex1_scale": {
        "torch.mul": '''def scale(x, factor):
    return torch.mul(x, factor)
''',
        "factor first": '''def scale(x, factor):
    return factor * x
''',
    },
    "ex2_shift": {
        "torch.add": '''def shift(x, offset):
    return torch.add(x, offset)
''',
        "offset first": '''def shift(x, offset):
    return offset + x
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
