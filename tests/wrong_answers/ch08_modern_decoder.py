"""Wrong answers to chapter 8's exercises.

``EXERCISE``/``SOURCE``: RoPE that ignores the offset (every call starts at position 0), the bug
that makes cached decoding wrong while a full forward pass is right. Visible and hidden tests catch
it; the exercise loses all its points.

``HIDDEN_ONLY``: for every exercise, a plausible answer that passes its visible tests and fails its
hidden ones. Each of them is also rejected by the probe with which the chapter's experiments decide
whether to use the learner's function (they fall back to the reference).

``MORE_WRONG``: RoPE in the interleaved layout of the paper (and chapter 5) where Hugging Face's
split-halves layout is asked for: it must lose all of exercise 3's points.
"""

EXERCISE = "ex3_rope"

SOURCE = '''def rope_half(x, offset=0, base=10000.0):
    """Wrong: the positions always start at 0, whatever the cache holds."""
    seq, d = x.shape[-2], x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(seq, dtype=torch.float64)[:, None] * theta
    cos, sin = angle.cos().repeat(1, 2).to(x.dtype), angle.sin().repeat(1, 2).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin
'''

HIDDEN_ONLY = {
    # eps added outside the square root: right to 1e-6 for unit-size inputs, wrong for a large eps
    "ex1_rms_norm": '''def rms_norm(x, weight, eps=1e-6):
    return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * weight
''',
    # torch.mm: right for (n, d) inputs, fails on (batch, seq, d)
    "ex2_swiglu": '''def swiglu(x, W_gate, W_up, W_down):
    return torch.mm(F.silu(torch.mm(x, W_gate.T)) * torch.mm(x, W_up.T), W_down.T)
''',
    # the sequence length read from axis 2: right for (batch, heads, seq, d) only
    "ex3_rope": '''def rope_half(x, offset=0, base=10000.0):
    seq, d = x.shape[2], x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(offset, offset + seq, dtype=torch.float64)[:, None] * theta
    cos, sin = angle.cos().repeat(1, 2).to(x.dtype), angle.sin().repeat(1, 2).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin
''',
    # the layer number read as one character: right for layers 0-9 only
    "ex4_keys": '''def course_key(hf_key):
    fixed = {"model.embed_tokens.weight": "embed.table.weight", "model.norm.weight": "stack.norm.weight",
             "lm_head.weight": "lm_head.weight"}
    if hf_key in fixed:
        return fixed[hf_key]
    inner = {"self_attn.q_proj": "self_attn.q_proj", "self_attn.k_proj": "self_attn.k_proj",
             "self_attn.v_proj": "self_attn.v_proj", "self_attn.o_proj": "self_attn.out_proj",
             "mlp.gate_proj": "ff.gate_proj", "mlp.up_proj": "ff.up_proj", "mlp.down_proj": "ff.down_proj",
             "input_layernorm": "norm1", "post_attention_layernorm": "norm2"}
    if not hf_key.startswith("model.layers."):
        raise KeyError(hf_key)
    layer, rest = hf_key[13], hf_key[15:]
    middle, _, leaf = rest.rpartition(".")
    if middle not in inner:
        raise KeyError(hf_key)
    return f"stack.layers.{layer}.{inner[middle]}.{leaf}"
''',
    # the accumulated output not rescaled when the maximum rises (and no guard for -inf rows):
    # right while the first block holds each row's maximum
    "ex5_online": '''def online_update(m, l, acc, scores, v):
    m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
    p = torch.exp(scores - m_new)
    return m_new, l * torch.exp(m - m_new) + p.sum(-1, keepdim=True), acc + p @ v
''',
}

MORE_WRONG = {
    "interleaved": ("ex3_rope", '''def rope_half(x, offset=0, base=10000.0):
    """Wrong: the interleaved pairs (2i, 2i+1) of the paper, not Hugging Face's halves."""
    return positional.apply_rope(x, torch.arange(offset, offset + x.shape[-2]), base)
'''),
}
