"""Correct answers to chapter 8's exercises, written differently from the solution: each must get full
marks (``tools/mutants.py ch08 --correct``; ``tests/test_grading.py`` grades them through the real
grader too). Each source replaces the whole answer cell; the notebook's imports (``torch``, ``F``,
``math``) are in scope.

Among them, Hugging Face's own ways of writing each part: ``LlamaRMSNorm`` (float32 inside),
``LlamaMLP`` (``F.linear``), ``LlamaRotaryEmbedding`` with ``apply_rotary_pos_emb`` (float32 angles,
which the prompt of exercise 3 accepts within ``1e-5 + 5e-7 (offset + seq) max|x|``).
"""

CORRECT = {
    "ex1_rms_norm": {
        # Hugging Face's LlamaRMSNorm: float32 inside (even for float64 inputs), cast back, gain last
        "hf_float32": '''def rms_norm(x, weight, eps=1e-6):
    input_dtype = x.dtype
    hidden_states = x.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return weight * hidden_states.to(input_dtype)
''',
        # the norm of the vector divided by sqrt(d), float16 computed in float32
        "vector_norm": '''def rms_norm(x, weight, eps=1e-6):
    h = x.float() if x.dtype == torch.float16 else x
    d = h.shape[-1]
    ms = torch.linalg.vector_norm(h, dim=-1, keepdim=True) ** 2 / d
    return (h / torch.sqrt(ms + eps) * weight).to(x.dtype)
''',
        # float64 throughout, cast back to x's dtype
        "float64_einsum": '''def rms_norm(x, weight, eps=1e-6):
    h = x.double()
    ms = torch.einsum("...i,...i->...", h, h).unsqueeze(-1) / h.shape[-1]
    return (h / (ms + eps).sqrt() * weight.double()).to(x.dtype)
''',
    },
    "ex2_swiglu": {
        # Hugging Face's LlamaMLP with the weights as nn.Linear would use them
        "hf_linear": '''def swiglu(x, W_gate, W_up, W_down):
    return F.linear(F.silu(F.linear(x, W_gate)) * F.linear(x, W_up), W_down)
''',
        # einsum, SiLU written out as z * sigmoid(z)
        "einsum_own_silu": '''def swiglu(x, W_gate, W_up, W_down):
    g = torch.einsum("...d,fd->...f", x, W_gate)
    u = torch.einsum("...d,fd->...f", x, W_up)
    return torch.einsum("...f,df->...d", g * torch.sigmoid(g) * u, W_down)
''',
        # flattened to (n, d) with reshape (works on non-contiguous inputs), SiLU as z / (1 + e^-z)
        "flatten_reshape": '''def swiglu(x, W_gate, W_up, W_down):
    flat = x.reshape(-1, x.shape[-1])
    g = flat @ W_gate.t()
    h = g / (1 + torch.exp(-g)) * (flat @ W_up.t())
    return (h @ W_down.t()).reshape(*x.shape[:-1], W_down.shape[0])
''',
    },
    "ex3_rope": {
        # Hugging Face transformers 4.4x: LlamaRotaryEmbedding.forward (float32 angles by a matmul of
        # inv_freq and the position ids) and apply_rotary_pos_emb with rotate_half
        "hf_float32_matmul": '''def rope_half(x, offset=0, base=10000.0):
    dim = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
    position_ids = torch.arange(offset, offset + x.shape[-2])[None]
    inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].float()
    freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dtype=x.dtype)[0], emb.sin().to(dtype=x.dtype)[0]

    def rotate_half(t):
        t1 = t[..., : t.shape[-1] // 2]
        t2 = t[..., t.shape[-1] // 2:]
        return torch.cat((-t2, t1), dim=-1)

    return (x * cos) + (rotate_half(x) * sin)
''',
        # Hugging Face transformers 5.x: float32 angles as position_ids[..., None].float() * inv_freq
        "hf_float32_5x": '''def rope_half(x, offset=0, base=10000.0):
    dim = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    position_ids = torch.arange(offset, offset + x.shape[-2])
    freqs = position_ids[..., None].float() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin
''',
        # the halves as the real and imaginary parts of complex numbers, float64 angles
        "complex_float64": '''def rope_half(x, offset=0, base=10000.0):
    seq, d = x.shape[-2], x.shape[-1]
    theta = torch.tensor(base, dtype=torch.float64) ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)
    angle = torch.outer(torch.arange(seq, dtype=torch.float64) + offset, theta)
    z = torch.complex(x[..., : d // 2].double(), x[..., d // 2:].double()) * torch.polar(torch.ones_like(angle), angle)
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)
''',
        # the rotation written per half, float32 angles from exp and log
        "halves_float32_exp": '''def rope_half(x, offset=0, base=10000.0):
    seq, d = x.shape[-2], x.shape[-1]
    h = d // 2
    inv = torch.exp(-math.log(base) * torch.arange(0, d, 2, dtype=torch.float32) / d)
    angle = (offset + torch.arange(seq, dtype=torch.float32))[:, None] * inv
    c, s = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
''',
    },
    "ex4_keys": {
        # one anchored regular expression for the per-layer names
        "regex": '''import re


def course_key(hf_key):
    fixed = {"model.embed_tokens.weight": "embed.table.weight", "model.norm.weight": "stack.norm.weight",
             "lm_head.weight": "lm_head.weight"}
    if hf_key in fixed:
        return fixed[hf_key]
    m = re.fullmatch(r"model\\.layers\\.(\\d+)\\.(self_attn\\.[qkvo]_proj|mlp\\.(?:gate|up|down)_proj"
                     r"|input_layernorm|post_attention_layernorm)\\.weight", hf_key)
    if m is None:
        raise KeyError(hf_key)
    layer, module = m.groups()
    module = {"self_attn.o_proj": "self_attn.out_proj", "input_layernorm": "norm1",
              "post_attention_layernorm": "norm2"}.get(module, module.replace("mlp.", "ff."))
    return f"stack.layers.{layer}.{module}.weight"
''',
        # prefix and suffix stripped, the middle looked up (a KeyError from the dict itself)
        "strip_and_lookup": '''def course_key(hf_key):
    if hf_key == "model.embed_tokens.weight":
        return "embed.table.weight"
    if hf_key == "model.norm.weight":
        return "stack.norm.weight"
    if hf_key == "lm_head.weight":
        return hf_key
    table = {"self_attn.q_proj": "self_attn.q_proj", "self_attn.k_proj": "self_attn.k_proj",
             "self_attn.v_proj": "self_attn.v_proj", "self_attn.o_proj": "self_attn.out_proj",
             "mlp.gate_proj": "ff.gate_proj", "mlp.up_proj": "ff.up_proj", "mlp.down_proj": "ff.down_proj",
             "input_layernorm": "norm1", "post_attention_layernorm": "norm2"}
    prefix, suffix = "model.layers.", ".weight"
    if not (hf_key.startswith(prefix) and hf_key.endswith(suffix)):
        raise KeyError(hf_key)
    layer, _, module = hf_key[len(prefix):-len(suffix)].partition(".")
    if not layer.isdigit():
        raise KeyError(hf_key)
    return f"stack.layers.{layer}.{table[module]}.weight"
''',
        # every name of the table enumerated by pattern, a loop over the rows
        "rows_loop": '''def course_key(hf_key):
    rows = [("self_attn.q_proj", "self_attn.q_proj"), ("self_attn.k_proj", "self_attn.k_proj"),
            ("self_attn.v_proj", "self_attn.v_proj"), ("self_attn.o_proj", "self_attn.out_proj"),
            ("mlp.gate_proj", "ff.gate_proj"), ("mlp.up_proj", "ff.up_proj"), ("mlp.down_proj", "ff.down_proj"),
            ("input_layernorm", "norm1"), ("post_attention_layernorm", "norm2")]
    singles = {"model.embed_tokens.weight": "embed.table.weight", "model.norm.weight": "stack.norm.weight",
               "lm_head.weight": "lm_head.weight"}
    if hf_key in singles:
        return singles[hf_key]
    parts = hf_key.split(".", 3)
    if len(parts) == 4 and parts[0] == "model" and parts[1] == "layers" and parts[2].isdigit():
        for hf, ours in rows:
            if parts[3] == hf + ".weight":
                return f"stack.layers.{parts[2]}.{ours}.weight"
    raise KeyError(f"no course name for {hf_key!r}")
''',
    },
    "ex5_online": {
        # NaN (from -inf - -inf) replaced by 0 after the fact
        "nan_to_num": '''def online_update(m, l, acc, scores, v):
    m_new = torch.maximum(m, scores.max(dim=-1, keepdim=True).values)
    scale = torch.exp(m - m_new).nan_to_num(0.0)
    p = torch.exp(scores - m_new).nan_to_num(0.0)
    return m_new, l * scale + p.sum(dim=-1, keepdim=True), acc * scale + p @ v
''',
        # float64 inside, torch.where on finite maxima, einsum; cast back to the inputs' dtype
        "float64_where_einsum": '''def online_update(m, l, acc, scores, v):
    dt = acc.dtype
    m64, s64 = m.double(), scores.double()
    m_new = torch.maximum(m64, s64.amax(-1, keepdim=True))
    finite = torch.isfinite(m_new)
    scale = torch.where(finite, torch.exp(m64 - m_new), torch.zeros_like(m_new))
    p = torch.where(finite, torch.exp(s64 - m_new), torch.zeros_like(s64))
    l_new = l.double() * scale + p.sum(-1, keepdim=True)
    acc_new = acc.double() * scale + torch.einsum("...qb,...bd->...qd", p, v.double())
    return m_new.to(dt), l_new.to(dt), acc_new.to(dt)
''',
        # the running sums updated in place, the shift taken from a masked_fill
        "in_place": '''def online_update(m, l, acc, scores, v):
    m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
    shift = m_new.masked_fill(m_new == float("-inf"), 0.0)
    p = (scores - shift).exp()
    scale = (m - shift).exp()
    l.mul_(scale).add_(p.sum(-1, keepdim=True))
    acc.mul_(scale).add_(p @ v)
    return m_new, l, acc
''',
    },
    "ex6_flash": {
        # the online softmax written inline with einsum (no call of online_update), keys sliced to the last
        # query a block needs, the output written into preallocated tensors
        "inline_einsum": '''def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    for b in (block_q, block_k):
        if isinstance(b, bool) or not isinstance(b, int) or b <= 0:
            raise ValueError("bad block")
    if q.shape[:-2] != k.shape[:-2] or v.shape[:-2] != k.shape[:-2] or v.shape[-2] != k.shape[-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError("shapes")
    Lq, Lk = q.shape[-2], k.shape[-2]
    out = q.new_empty(*q.shape[:-1], v.shape[-1]); lse = q.new_empty(*q.shape[:-1], 1)
    for i in range(0, Lq, block_q):
        qi = q[..., i:i + block_q, :] / math.sqrt(q.shape[-1])
        n = qi.shape[-2]
        m = qi.new_full((*qi.shape[:-1], 1), -math.inf); l = torch.zeros_like(m)
        a = qi.new_zeros(*qi.shape[:-1], v.shape[-1])
        stop = min(Lk, i + n) if causal else Lk
        for j in range(0, stop, block_k):
            kj, vj = k[..., j:min(j + block_k, stop), :], v[..., j:min(j + block_k, stop), :]
            s = torch.einsum("...qd,...kd->...qk", qi, kj)
            if causal:
                qpos = torch.arange(i, i + n).unsqueeze(-1); kpos = torch.arange(j, j + kj.shape[-2])
                s = torch.where(kpos <= qpos, s, torch.tensor(-math.inf, dtype=s.dtype))
            m2 = torch.maximum(m, s.max(-1, keepdim=True).values)
            c = torch.exp(m - m2).nan_to_num(0.0)
            p = torch.exp(s - m2).nan_to_num(0.0)
            l = l * c + p.sum(-1, keepdim=True); a = a * c + torch.einsum("...qk,...kd->...qd", p, vj); m = m2
        out[..., i:i + n, :] = a / l
        lse[..., i:i + n, :] = m + l.log()
    return out, lse
''',
        # q.split into blocks, the skip as a break inside the loop, computed in float64 and cast back
        "split_float64": '''def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    if not (type(block_q) is int and type(block_k) is int and block_q > 0 and block_k > 0):
        raise ValueError("blocks")
    if q.dim() != k.dim() or k.shape[:-1] != v.shape[:-1] or q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError("shapes")
    dt = q.dtype
    q, k, v = q.double(), k.double(), v.double()
    outs, lses = [], []
    for qb, i0 in zip(q.split(block_q, dim=-2), range(0, q.shape[-2], block_q)):
        m = torch.full(qb.shape[:-1] + (1,), float("-inf"), dtype=q.dtype); l = torch.zeros_like(m)
        acc = torch.zeros(qb.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
        for kb, vb, j0 in zip(k.split(block_k, dim=-2), v.split(block_k, dim=-2), range(0, k.shape[-2], block_k)):
            if causal and j0 > i0 + qb.shape[-2] - 1:
                break
            s = (qb @ kb.mT) / q.shape[-1] ** 0.5
            if causal:
                mask = torch.arange(j0, j0 + kb.shape[-2])[None, :] > torch.arange(i0, i0 + qb.shape[-2])[:, None]
                s = s.masked_fill(mask, float("-inf"))
            m, l, acc = online_update(m, l, acc, s, vb)
        outs.append((acc / l).to(dt)); lses.append((m + l.log()).to(dt))
    return torch.cat(outs, -2), torch.cat(lses, -2)
''',
    },
    "ex7_flash_backward": {
        # FlashAttention-2's order (Algorithm 2): key blocks outermost, dK and dV of a key block summed in
        # local tensors over the query blocks that see it and concatenated at the end; dQ added in place
        "keys_outer": '''def flash_backward(q, k, v, out, lse, d_out, causal=False, block_q=16, block_k=16):
    if any(isinstance(b, bool) or not isinstance(b, int) or b <= 0 for b in (block_q, block_k)):
        raise ValueError(f"block_q and block_k must be positive ints, got {block_q!r}, {block_k!r}")
    if q.shape[:-2] != k.shape[:-2] or v.shape[:-1] != k.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ValueError("q, k, v: shapes")
    want = {"out": (*q.shape[:-1], v.shape[-1]), "lse": (*q.shape[:-1], 1), "d_out": (*q.shape[:-1], v.shape[-1])}
    for name, t in (("out", out), ("lse", lse), ("d_out", d_out)):
        if t.shape != want[name]:
            raise ValueError(f"{name}: shape {tuple(t.shape)}, expected {want[name]}")
    Lq, Lk, c = q.shape[-2], k.shape[-2], q.shape[-1] ** -0.5
    Dr = (out * d_out).sum(dim=-1, keepdim=True)
    dq, dks, dvs = torch.zeros_like(q), [], []
    for j in range(0, Lk, block_k):
        kj, vj = k[..., j:j + block_k, :], v[..., j:j + block_k, :]
        dkj, dvj = torch.zeros_like(kj), torch.zeros_like(vj)
        for i in range(0, Lq, block_q):
            n = min(Lq, i + block_q) - i
            if causal and j > i + n - 1:
                continue
            qi, doi = q[..., i:i + n, :], d_out[..., i:i + n, :]
            s = (qi @ kj.mT) * c
            if causal:
                future = torch.arange(j, j + kj.shape[-2]).unsqueeze(0) > torch.arange(i, i + n).unsqueeze(1)
                s = torch.where(future, torch.full_like(s, -math.inf), s)
            p = (s - lse[..., i:i + n, :]).exp()
            dvj = dvj + p.mT @ doi
            ds = p * (doi @ vj.mT - Dr[..., i:i + n, :]) * c
            dq[..., i:i + n, :] += ds @ kj
            dkj = dkj + ds.mT @ qi
        dks.append(dkj)
        dvs.append(dvj)
    return dq, torch.cat(dks, -2), torch.cat(dvs, -2)
''',
        # einsum over named axes with "...", computed in float64 and cast back, q.split for the query blocks,
        # the skip as a break, the query blocks' dq concatenated
        "einsum_float64": '''def flash_backward(q, k, v, out, lse, d_out, causal=False, block_q=16, block_k=16):
    if not (type(block_q) is int and type(block_k) is int and min(block_q, block_k) >= 1):
        raise ValueError("block_q, block_k: positive ints")
    if q.dim() != k.dim() or q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ValueError("q, k, v disagree")
    if out.shape != d_out.shape or out.shape != q.shape[:-1] + v.shape[-1:]:
        raise ValueError("out or d_out has the wrong shape")
    if lse.shape != q.shape[:-1] + (1,):
        raise ValueError("lse has the wrong shape")
    dt = q.dtype
    q, k, v, out, lse, d_out = (t.double() for t in (q, k, v, out, lse, d_out))
    delta = torch.einsum("...qd,...qd->...q", d_out, out).unsqueeze(-1)
    dk, dv, dqs = torch.zeros_like(k), torch.zeros_like(v), []
    for qb, i0 in zip(q.split(block_q, -2), range(0, q.shape[-2], block_q)):
        n = qb.shape[-2]
        dob, lb, db = d_out[..., i0:i0 + n, :], lse[..., i0:i0 + n, :], delta[..., i0:i0 + n, :]
        dqb = torch.zeros_like(qb)
        for j0 in range(0, k.shape[-2], block_k):
            if causal and j0 >= i0 + n:
                break
            kb, vb = k[..., j0:j0 + block_k, :], v[..., j0:j0 + block_k, :]
            s = torch.einsum("...qd,...kd->...qk", qb, kb) / math.sqrt(q.shape[-1])
            if causal:
                s = s.masked_fill(torch.arange(j0, j0 + kb.shape[-2]) > torch.arange(i0, i0 + n)[:, None], -math.inf)
            p = torch.exp(s - lb)
            dv[..., j0:j0 + block_k, :] += torch.einsum("...qk,...qe->...ke", p, dob)
            ds = p * (torch.einsum("...qe,...ke->...qk", dob, vb) - db) / math.sqrt(q.shape[-1])
            dqb += torch.einsum("...qk,...kd->...qd", ds, kb)
            dk[..., j0:j0 + block_k, :] += torch.einsum("...qk,...qd->...kd", ds, qb)
        dqs.append(dqb)
    return torch.cat(dqs, -2).to(dt), dk.to(dt), dv.to(dt)
''',
    },
}
