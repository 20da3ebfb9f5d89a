"""Wrong answers to chapter 8's exercises.

``EXERCISE``/``SOURCE``: RoPE that ignores the offset (every call starts at position 0), the bug
that makes cached decoding wrong while a full forward pass is right. Visible and hidden tests catch
it; the exercise loses all its points.

``HIDDEN_ONLY``: for every exercise, a plausible answer that passes its visible tests and fails its
hidden ones. Each of them is also rejected by the probe with which the chapter's experiments decide
whether to use the learner's function (they fall back to the reference).

``MORE_WRONG``: RoPE in the interleaved layout of the paper (and chapter 5) where Hugging Face's
split-halves layout is asked for: it must lose all of exercise 3's points.

``REVIEWED``: the wrong answers reviewers found with full marks (issue 30: an online softmax that never
subtracts the maximum, a name mapping that makes up names) and more of their kinds, at least one per
exercise that the tests before issue 30 missed; each must lose points on its exercise.
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
    # written for (batch, heads, L, d) only (einsum over named axes): right on the visible tests' inputs,
    # wrong without leading axes or with one
    "ex6_flash": '''def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    for b in (block_q, block_k):
        if type(b) is not int or b < 1:
            raise ValueError("blocks must be positive ints")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ValueError("shapes")
    B, H, L_q, d = q.shape
    outs, lses = [], []
    for i0 in range(0, L_q, block_q):
        q_blk = q[:, :, i0:i0 + block_q]
        n = q_blk.shape[2]
        m = torch.full((B, H, n, 1), float("-inf"), dtype=q.dtype)
        l, acc = torch.zeros_like(m), torch.zeros(B, H, n, v.shape[-1], dtype=q.dtype)
        for j0 in range(0, min(k.shape[2], i0 + n) if causal else k.shape[2], block_k):
            s = torch.einsum("bhqd,bhkd->bhqk", q_blk, k[:, :, j0:j0 + block_k]) / math.sqrt(d)
            if causal:
                s = s.masked_fill(torch.arange(j0, j0 + s.shape[-1]) > torch.arange(i0, i0 + n)[:, None], float("-inf"))
            m, l, acc = online_update(m, l, acc, s, v[:, :, j0:j0 + block_k])
        outs.append(acc / l)
        lses.append(m + l.log())
    return torch.cat(outs, 2), torch.cat(lses, 2)
''',    # written for (batch, heads, L, d) only (named axes B, H): right on the visible tests' inputs, wrong
    # without leading axes or with one
    "ex7_flash_backward": '''def flash_backward(q, k, v, out, lse, d_out, causal=False, block_q=16, block_k=16):
    for b in (block_q, block_k):
        if type(b) is not int or b < 1:
            raise ValueError("blocks must be positive ints")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ValueError("q, k, v: shapes")
    if out.shape != d_out.shape or out.shape != (*q.shape[:-1], v.shape[-1]) or lse.shape != (*q.shape[:-1], 1):
        raise ValueError("out, lse or d_out: shapes")
    B, H, L_q, d = q.shape
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    D = (d_out * out).sum(-1, keepdim=True)
    for i0 in range(0, L_q, block_q):
        n = min(L_q, i0 + block_q) - i0
        qb, dob = q[:, :, i0:i0 + n], d_out[:, :, i0:i0 + n]
        for j0 in range(0, min(k.shape[2], i0 + n) if causal else k.shape[2], block_k):
            kb, vb = k[:, :, j0:j0 + block_k], v[:, :, j0:j0 + block_k]
            s = torch.einsum("bhqd,bhkd->bhqk", qb, kb) / math.sqrt(d)
            if causal:
                s = s.masked_fill(torch.arange(j0, j0 + s.shape[-1]) > torch.arange(i0, i0 + n)[:, None], float("-inf"))
            p = torch.exp(s - lse[:, :, i0:i0 + n])
            dv[:, :, j0:j0 + block_k] += torch.einsum("bhqk,bhqe->bhke", p, dob)
            ds = p * (torch.einsum("bhqe,bhke->bhqk", dob, vb) - D[:, :, i0:i0 + n]) / math.sqrt(d)
            dq[:, :, i0:i0 + n] += torch.einsum("bhqk,bhkd->bhqd", ds, kb)
            dk[:, :, j0:j0 + block_k] += torch.einsum("bhqk,bhqd->bhkd", ds, qb)
    return dq, dk, dv
''',
}

MORE_WRONG = {
    "interleaved": ("ex3_rope", '''def rope_half(x, offset=0, base=10000.0):
    """Wrong: the interleaved pairs (2i, 2i+1) of the paper, not Hugging Face's halves."""
    return positional.apply_rope(x, torch.arange(offset, offset + x.shape[-2]), base)
'''),
}

def _edit(source: str, old: str, new: str) -> str:
    """``source`` with its one occurrence of ``old`` replaced (a wrong answer one edit away from a right one)."""
    assert source.count(old) == 1, old
    return source.replace(old, new)


# Exercise 6's right answer, which the reviewed wrong answers below change in one place each.
_FLASH = '''def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        if type(b) is not int or b < 1:
            raise ValueError(f"{name} must be a positive int, got {b!r}")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ValueError("q (..., L_q, d), k (..., L_k, d), v (..., L_k, d_v) must agree")
    scale = 1 / math.sqrt(q.shape[-1])
    outs, lses = [], []
    for i0 in range(0, q.shape[-2], block_q):
        q_blk = q[..., i0:i0 + block_q, :]
        rows = torch.arange(i0, i0 + q_blk.shape[-2])[:, None]
        m = torch.full((*q_blk.shape[:-1], 1), float("-inf"), dtype=q.dtype)
        l = torch.zeros_like(m)
        acc = torch.zeros(*q_blk.shape[:-1], v.shape[-1], dtype=q.dtype)
        k_end = min(k.shape[-2], i0 + q_blk.shape[-2]) if causal else k.shape[-2]
        for j0 in range(0, k_end, block_k):
            s = q_blk @ k[..., j0:j0 + block_k, :].transpose(-2, -1) * scale
            if causal:
                s = s.masked_fill(torch.arange(j0, j0 + s.shape[-1]) > rows, float("-inf"))
            m, l, acc = online_update(m, l, acc, s, v[..., j0:j0 + block_k, :])
        outs.append(acc / l)
        lses.append(m + torch.log(l))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-2)
'''


# Exercise 7's right answer, which the reviewed wrong answers below change in one place each.
_FLASH_BWD = '''def flash_backward(q, k, v, out, lse, d_out, causal=False, block_q=16, block_k=16):
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        if type(b) is not int or b < 1:
            raise ValueError(f"{name} must be a positive int, got {b!r}")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ValueError("q (..., L_q, d), k (..., L_k, d), v (..., L_k, d_v) must agree")
    for name, t, last in (("out", out, v.shape[-1]), ("lse", lse, 1), ("d_out", d_out, v.shape[-1])):
        if tuple(t.shape) != (*q.shape[:-1], last):
            raise ValueError(f"{name} has the wrong shape {tuple(t.shape)}")
    scale = 1 / math.sqrt(q.shape[-1])
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    D = (d_out * out).sum(-1, keepdim=True)
    for i0 in range(0, q.shape[-2], block_q):
        qs = slice(i0, i0 + block_q)
        q_blk, do_blk = q[..., qs, :], d_out[..., qs, :]
        rows = torch.arange(i0, i0 + q_blk.shape[-2])[:, None]
        k_end = min(k.shape[-2], i0 + q_blk.shape[-2]) if causal else k.shape[-2]
        for j0 in range(0, k_end, block_k):
            ks = slice(j0, j0 + block_k)
            k_blk, v_blk = k[..., ks, :], v[..., ks, :]
            s = q_blk @ k_blk.transpose(-2, -1) * scale
            if causal:
                s = s.masked_fill(torch.arange(j0, j0 + s.shape[-1]) > rows, float("-inf"))
            p = torch.exp(s - lse[..., qs, :])
            dv[..., ks, :] += p.transpose(-2, -1) @ do_blk
            ds = p * (do_blk @ v_blk.transpose(-2, -1) - D[..., qs, :])
            dq[..., qs, :] += ds @ k_blk * scale
            dk[..., ks, :] += ds.transpose(-2, -1) @ q_blk * scale
    return dq, dk, dv
'''


# Reviewed wrong answers (issue 30) and more of their kinds: each must lose points on its exercise.
REVIEWED = {
    # the default eps of LayerNorm (1e-5) instead of the 1e-6 asked for: invisible on unit-size inputs,
    # wrong where the mean square is near eps (the hidden tests' tiny vectors)
    "eps_default_1e-5": ("ex1_rms_norm", '''def rms_norm(x, weight, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
'''),
    # view instead of reshape: fails on an input that is not contiguous (a transposed batch)
    "view_not_reshape": ("ex2_swiglu", '''def swiglu(x, W_gate, W_up, W_down):
    flat = x.view(-1, x.shape[-1])
    h = F.silu(flat @ W_gate.T) * (flat @ W_up.T)
    return (h @ W_down.T).view(*x.shape[:-1], -1)
'''),
    # computed in float64 "to be safe" and returned in float64 for float32 inputs (the dtype asked
    # for is x's)
    "float64_out": ("ex2_swiglu", '''def swiglu(x, W_gate, W_up, W_down):
    x, W_gate, W_up, W_down = (t.double() for t in (x, W_gate, W_up, W_down))
    return (F.silu(x @ W_gate.T) * (x @ W_up.T)) @ W_down.T
'''),
    # cos and sin precomputed for 2048 positions (the old max_position_embeddings of Hugging Face's
    # cache) and sliced: wrong for a cache longer than that
    "table_of_2048": ("ex3_rope", '''MAX_POSITIONS = 2048


def rope_half(x, offset=0, base=10000.0):
    seq, d = x.shape[-2], x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    table = torch.arange(MAX_POSITIONS, dtype=torch.float64)[:, None] * theta
    angle = table[offset:offset + seq]
    cos, sin = angle.cos().repeat(1, 2).to(x.dtype), angle.sin().repeat(1, 2).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin
'''),
    # a str.replace chain that raises KeyError only for inv_freq and maps every other unknown name
    # to a made-up one (reviewed: 2/2 before, when one unknown name was tried)
    "replace_chain": ("ex4_keys", '''def course_key(hf_key):
    if hf_key.endswith("inv_freq"):
        raise KeyError(hf_key)
    return (hf_key.replace("model.embed_tokens", "embed.table").replace("model.norm", "stack.norm")
            .replace("model.layers", "stack.layers").replace("o_proj", "out_proj").replace("mlp.", "ff.")
            .replace("input_layernorm", "norm1").replace("post_attention_layernorm", "norm2"))
'''),
    # an unknown module name kept as it is (dict.get with a default) instead of raising
    "get_with_default": ("ex4_keys", '''def course_key(hf_key):
    fixed = {"model.embed_tokens.weight": "embed.table.weight", "model.norm.weight": "stack.norm.weight",
             "lm_head.weight": "lm_head.weight"}
    if hf_key in fixed:
        return fixed[hf_key]
    inner = {"self_attn.o_proj": "self_attn.out_proj", "mlp.gate_proj": "ff.gate_proj", "mlp.up_proj": "ff.up_proj",
             "mlp.down_proj": "ff.down_proj", "input_layernorm": "norm1", "post_attention_layernorm": "norm2"}
    parts = hf_key.split(".")
    if parts[:2] != ["model", "layers"] or "rotary_emb" in hf_key:
        raise KeyError(hf_key)
    middle = ".".join(parts[3:-1])
    return f"stack.layers.{parts[2]}.{inner.get(middle, middle)}.{parts[-1]}"
'''),
    # a regular expression not anchored at the end: whatever follows the first ".weight" is ignored
    "regex_unanchored": ("ex4_keys", '''import re


def course_key(hf_key):
    fixed = {"model.embed_tokens.weight": "embed.table.weight", "model.norm.weight": "stack.norm.weight",
             "lm_head.weight": "lm_head.weight"}
    if hf_key in fixed:
        return fixed[hf_key]
    inner = {"self_attn.q_proj": "self_attn.q_proj", "self_attn.k_proj": "self_attn.k_proj",
             "self_attn.v_proj": "self_attn.v_proj", "self_attn.o_proj": "self_attn.out_proj",
             "mlp.gate_proj": "ff.gate_proj", "mlp.up_proj": "ff.up_proj", "mlp.down_proj": "ff.down_proj",
             "input_layernorm": "norm1", "post_attention_layernorm": "norm2"}
    m = re.match(r"model\\.layers\\.(\\d+)\\.([a-z_.]+?)\\.weight", hf_key)
    if m is None or m.group(2) not in inner:
        raise KeyError(hf_key)
    return f"stack.layers.{m.group(1)}.{inner[m.group(2)]}.weight"
'''),
    # tracks the maximum but never subtracts it (reviewed: 4/4 before): NaN in float32 at scores
    # around 100, and l, acc are not the sums the formulas define
    "max_never_subtracted": ("ex5_online", '''def online_update(m, l, acc, scores, v):
    m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
    p = torch.exp(scores)
    return m_new, l + p.sum(-1, keepdim=True), acc + p @ v
'''),
    # m' taken from this block alone, not max(m, block): acc / l stays right while nothing
    # overflows, but m is wrong once the maximum falls, and a fully masked later block gives inf
    "block_max_only": ("ex5_online", '''def online_update(m, l, acc, scores, v):
    m_new = scores.amax(-1, keepdim=True)
    shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
    scale = torch.exp(m - shift)
    p = torch.exp(scores - shift)
    return m_new, l * scale + p.sum(-1, keepdim=True), acc * scale + p @ v
'''),
    # masked scores replaced by -1e9 to dodge the NaN: a fully masked row gets l = B, acc = sum of v
    # (wiped out later by the rescaling, so acc / l at the end is right)
    "mask_as_minus_1e9": ("ex5_online", '''def online_update(m, l, acc, scores, v):
    scores = scores.masked_fill(torch.isinf(scores), -1e9)
    m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
    scale = torch.exp(m - m_new)
    p = torch.exp(scores - m_new)
    return m_new, l * scale + p.sum(-1, keepdim=True), acc * scale + p @ v
'''),
    # Issue 54: SiLU written z exp(z) / (1 + exp(z)): inf / inf = NaN for a gate above ~88.7 in
    # float32 (709.8 in float64), where SiLU(z) = z.
    "silu_by_exp": ("ex2_swiglu", '''def swiglu(x, W_gate, W_up, W_down):
    z = x @ W_gate.T
    return (z * torch.exp(z) / (1 + torch.exp(z)) * (x @ W_up.T)) @ W_down.T
'''),
    # Issue 54: the formula in the input's dtype: x^2 overflows float16 above 256, so a float16 vector
    # of hundreds comes back 0 (x / inf); the prompt asks for float16 inputs computed in float32.
    "rms_squares_overflow": ("ex1_rms_norm", '''def rms_norm(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
'''),
    # Issue 54: the parent and the module checked separately: model.layers.0.mlp.q_proj.weight maps
    # to stack.layers.0.self_attn.q_proj.weight, a real name under the wrong parent.
    "parent_and_module_separately": ("ex4_keys", '''def course_key(hf_key):
    fixed = {"model.embed_tokens.weight": "embed.table.weight", "model.norm.weight": "stack.norm.weight",
             "lm_head.weight": "lm_head.weight"}
    if hf_key in fixed:
        return fixed[hf_key]
    modules = {"q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
               "o_proj": "self_attn.out_proj", "gate_proj": "ff.gate_proj", "up_proj": "ff.up_proj",
               "down_proj": "ff.down_proj", "input_layernorm": "norm1", "post_attention_layernorm": "norm2"}
    parts = hf_key.split(".")
    if parts[:2] != ["model", "layers"] or not parts[2].isdigit() or parts[-1] != "weight":
        raise KeyError(hf_key)
    if len(parts) == 6 and parts[3] in ("self_attn", "mlp") and parts[4] in modules:
        return f"stack.layers.{parts[2]}.{modules[parts[4]]}.weight"
    if len(parts) == 5 and parts[3] in ("input_layernorm", "post_attention_layernorm"):
        return f"stack.layers.{parts[2]}.{modules[parts[3]]}.weight"
    raise KeyError(hf_key)
'''),
    # Issue 54: the old solution: the leaf kept whatever it is, so a quantised checkpoint's
    # ...q_proj.weight_scale or ...down_proj.qweight gets a made-up name instead of KeyError.
    "any_leaf_kept": ("ex4_keys", '''def course_key(hf_key):
    fixed = {"model.embed_tokens.weight": "embed.table.weight", "model.norm.weight": "stack.norm.weight",
             "lm_head.weight": "lm_head.weight"}
    if hf_key in fixed:
        return fixed[hf_key]
    inner = {"self_attn.q_proj": "self_attn.q_proj", "self_attn.k_proj": "self_attn.k_proj",
             "self_attn.v_proj": "self_attn.v_proj", "self_attn.o_proj": "self_attn.out_proj",
             "mlp.gate_proj": "ff.gate_proj", "mlp.up_proj": "ff.up_proj", "mlp.down_proj": "ff.down_proj",
             "input_layernorm": "norm1", "post_attention_layernorm": "norm2"}
    parts = hf_key.split(".")
    if len(parts) >= 5 and parts[:2] == ["model", "layers"] and parts[2].isdigit():
        middle = ".".join(parts[3:-1])
        if middle in inner:
            return f"stack.layers.{parts[2]}.{inner[middle]}.{parts[-1]}"
    raise KeyError(hf_key)
'''),
    # Issue 54: a table of 32768 positions (Mistral's context): right for every offset the tests tried
    # before (up to 8000), wrong for a cache as long as the prompt allows (Llama 3: 128k positions).
    "table_of_32768": ("ex3_rope", '''MAX_POSITIONS = 32768


def rope_half(x, offset=0, base=10000.0):
    seq, d = x.shape[-2], x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    table = torch.arange(MAX_POSITIONS, dtype=torch.float64)[:, None] * theta
    angle = table[offset:offset + seq]
    cos, sin = angle.cos().repeat(1, 2).to(x.dtype), angle.sin().repeat(1, 2).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin
'''),
    # FlashAttention without the causal skip: every key block computed and masked, so the skipped blocks'
    # NaN reaches the output through 0 * NaN (and half the tiles are wasted)
    "flash_no_skip": ("ex6_flash", _edit(_FLASH, "min(k.shape[-2], i0 + q_blk.shape[-2]) if causal else k.shape[-2]",
                                         "k.shape[-2]")),
    # the log-sum-exp without the running maximum: ln(l) alone
    "flash_lse_without_max": ("ex6_flash", _edit(_FLASH, "lses.append(m + torch.log(l))", "lses.append(torch.log(l))")),
    # the diagonal masked too (j >= i): each query loses its own key
    "flash_diagonal_masked": ("ex6_flash", _edit(_FLASH, ") > rows, float", ") >= rows, float")),
    # the whole L_q x L_k matrix at once: right values, but not the tiled algorithm the prompt asks for
    "flash_full_matrix": ("ex6_flash", '''def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    for b in (block_q, block_k):
        if type(b) is not int or b < 1: raise ValueError("b")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]: raise ValueError("s")
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal: s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).tril().logical_not(), float("-inf"))
    s = s.nan_to_num(nan=float("-inf"))
    lse = torch.logsumexp(s, -1, keepdim=True)
    return torch.exp(s - lse).nan_to_num(0.0) @ v.nan_to_num(0.0), lse
'''),
    # the backward without the causal skip: every key block computed and masked, so the skipped blocks'
    # NaN reaches dq through 0 * NaN (and half the tiles are wasted)
    "flash_bwd_no_skip": ("ex7_flash_backward", _edit(_FLASH_BWD, "min(k.shape[-2], i0 + q_blk.shape[-2]) if causal else k.shape[-2]",
                                                      "k.shape[-2]")),
    # the softmax's backward without its D term: dS = P * dP
    "flash_bwd_without_D": ("ex7_flash_backward", _edit(_FLASH_BWD, "ds = p * (do_blk @ v_blk.transpose(-2, -1) - D[..., qs, :])",
                                                        "ds = p * (do_blk @ v_blk.transpose(-2, -1))")),
    # dQ without the 1/sqrt(d) of the scores
    "flash_bwd_dq_unscaled": ("ex7_flash_backward", _edit(_FLASH_BWD, "dq[..., qs, :] += ds @ k_blk * scale",
                                                          "dq[..., qs, :] += ds @ k_blk")),
    # dV written, not accumulated: only the last query block's share of each key block survives
    "flash_bwd_dv_overwritten": ("ex7_flash_backward", _edit(_FLASH_BWD, "dv[..., ks, :] += p.transpose",
                                                             "dv[..., ks, :] = p.transpose")),
    # the probabilities without the saved log-sum-exp: exp(S), unnormalised
    "flash_bwd_p_without_lse": ("ex7_flash_backward", _edit(_FLASH_BWD, "p = torch.exp(s - lse[..., qs, :])",
                                                            "p = torch.exp(s)")),
    # the diagonal masked too (j >= i): each query loses its own key
    "flash_bwd_diagonal_masked": ("ex7_flash_backward", _edit(_FLASH_BWD, ") > rows, float", ") >= rows, float")),
    # D from d_out alone (the rowsum of dO, not of dO * O)
    "flash_bwd_D_without_out": ("ex7_flash_backward", _edit(_FLASH_BWD, "D = (d_out * out).sum(-1, keepdim=True)",
                                                            "D = d_out.sum(-1, keepdim=True)")),
    # the normaliser of the tile alone (its own logsumexp) instead of the row's saved lse: right only where
    # one key block holds all the keys a row sees
    "flash_bwd_own_normaliser": ("ex7_flash_backward", _edit(_FLASH_BWD, "p = torch.exp(s - lse[..., qs, :])",
                                                             "p = torch.exp(s - torch.logsumexp(s, -1, keepdim=True))")),
}
