"""Plausible wrong answers to chapter 9's exercises.

``HIDDEN_ONLY``: for each exercise, a wrong answer that passes the visible tests and fails the hidden ones.
"""

EXERCISE = "ex1_scale"

SOURCE = '''def scale(x, factor):
    return x + factor
'''

HIDDEN_ONLY = {
    # Always float32: right on the visible float32 vector, wrong in dtype for float64.
    "ex1_scale": '''def scale(x, factor):
    return (x * factor).float()
''',
    # Rounds the offset to an int: right for the visible 2.0, wrong for 0.25 and 7.5.
    "ex2_shift": '''def shift(x, offset):
    return x + int(offset)
''',
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
