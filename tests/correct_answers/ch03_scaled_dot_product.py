"""Correct answers to chapter 3's exercises, written differently from the solution.

Each source replaces the whole answer cell and must get full marks: the scores by ``einsum``, by
``matmul`` with ``mT`` and the queries scaled first, in float64 and cast back; the softmax by
``logsumexp``, by ``max(...).values``, in float64 intermediates; attention with ``nan_to_num`` for the
fully masked rows, with the learner's own ``stable_softmax`` and ``einsum``, with ``finfo.min`` instead of
``-inf``; the causal mask by ``tril`` and by a loop; cross-attention through the learner's own
``sdp_attention`` or written out with a hand-made padding mask; the module built in another order,
through ``sdp_attention``, or written out with ``F.linear``; the layer over a padded batch from the
course's helpers and the chapter's own functions, in float64 with ``einsum``, or by a loop over the
sequences, each run alone.
"""

CORRECT = {
    "ex1_scores": {
        "einsum": '''def scaled_scores(q, k):
    return torch.einsum("...id,...jd->...ij", q, k) / math.sqrt(q.shape[-1])
''',
        "queries scaled first, matmul and mT": '''def scaled_scores(q, k):
    q = q * q.size(-1) ** -0.5
    return torch.matmul(q, k.mT)
''',
        "float64 intermediates, cast back": '''def scaled_scores(q, k):
    d_k = k.shape[-1]
    s = q.double() @ k.double().transpose(-1, -2) / torch.sqrt(torch.tensor(float(d_k), dtype=torch.float64))
    return s.to(q.dtype)
''',
    },
    "ex2_softmax": {
        "logsumexp": '''def stable_softmax(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))
''',
        "max(...).values, exp and sum": '''def stable_softmax(x, dim=-1):
    m = x.max(dim=dim, keepdim=True).values
    e = (x - m).exp()
    return e / torch.sum(e, dim=dim, keepdim=True)
''',
        "float64 intermediates, moved axis": '''def stable_softmax(x, dim=-1):
    y = x.double().movedim(dim, -1)
    y = y - y.max(-1, keepdim=True)[0]
    e = torch.exp(y)
    return (e / e.sum(-1, keepdim=True)).movedim(-1, dim).to(x.dtype)
''',
    },
    "ex3_attention": {
        "nan_to_num for fully masked rows": '''def sdp_attention(q, k, v, mask=None):
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(k.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return weights @ v, weights
''',
        "own stable_softmax, einsum, isnan": '''def sdp_attention(q, k, v, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
    weights = stable_softmax(scores, dim=-1)
    weights = torch.where(torch.isnan(weights), torch.zeros_like(weights), weights)
    return torch.einsum("...qk,...kd->...qd", weights, v), weights
''',
        "finfo.min, then zero the fully masked rows": '''def sdp_attention(q, k, v, mask=None):
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q * scale) @ k.transpose(-2, -1)
    if mask is None:
        weights = scores.softmax(dim=-1)
    else:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        weights = scores.softmax(dim=-1) * mask
        weights = weights * mask.any(dim=-1, keepdim=True)
    return weights @ v, weights
''',
    },
    "ex4_causal": {
        "tril with its diagonal": '''def causal_mask(L_q, L_k=None):
    if L_k is None:
        L_k = L_q
    return torch.ones(L_q, L_k, dtype=torch.bool).tril(diagonal=L_k - L_q)
''',
        "a loop over queries": '''def causal_mask(L_q, L_k=None):
    L_k = L_q if L_k is None else L_k
    mask = torch.zeros(L_q, L_k, dtype=torch.bool)
    for i in range(L_q):
        last = i + L_k - L_q
        if last >= 0:
            mask[i, : last + 1] = True
    return mask
''',
        "flipped triu": '''def causal_mask(L_q, L_k=None):
    L_k = L_q if L_k is None else L_k
    return ~torch.ones(L_q, L_k, dtype=torch.bool).triu(L_k - L_q + 1)
''',
    },
    "ex5_cross": {
        "own sdp_attention and a hand-made mask": '''def cross_attention(x_dec, x_enc, W_q, W_k, W_v, enc_lengths=None):
    mask = None
    if enc_lengths is not None:
        mask = (torch.arange(x_enc.shape[1])[None, :] < enc_lengths[:, None])[:, None, :]
    return sdp_attention(x_dec @ W_q, x_enc @ W_k, x_enc @ W_v, mask)
''',
        "written out with einsum": '''def cross_attention(x_dec, x_enc, W_q, W_k, W_v, enc_lengths=None):
    q = torch.einsum("btd,dk->btk", x_dec, W_q)
    k = torch.einsum("bsd,dk->bsk", x_enc, W_k)
    v = torch.einsum("bsd,dv->bsv", x_enc, W_v)
    scores = torch.einsum("btk,bsk->bts", q, k) / math.sqrt(W_k.shape[1])
    if enc_lengths is not None:
        S = x_enc.size(1)
        pad = torch.arange(S).unsqueeze(0) >= torch.as_tensor(enc_lengths).unsqueeze(1)   # (batch, S)
        scores = scores.masked_fill(pad.unsqueeze(1), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
''',
    },
    "ex6_module": {
        "another order, own sdp_attention": '''class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.out_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.q_proj = nn.Linear(d_model, d_model)
        self.d_model = d_model

    def forward(self, x, mask=None):
        out, weights = sdp_attention(self.q_proj(x), self.k_proj(x), self.v_proj(x), mask)
        return self.out_proj(out), weights
''',
        "written out with F.linear": '''class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=True))
        self.scale = 1 / math.sqrt(d_model)

    def forward(self, x, mask=None):
        q = F.linear(x, self.q_proj.weight, self.q_proj.bias)
        k = F.linear(x, self.k_proj.weight, self.k_proj.bias)
        v = F.linear(x, self.v_proj.weight, self.v_proj.bias)
        s = torch.bmm(q, k.transpose(1, 2)) * self.scale
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
            w = torch.softmax(s, dim=-1).masked_fill(~mask.any(-1, keepdim=True), 0.0)
        else:
            w = torch.softmax(s, dim=-1)
        return F.linear(torch.bmm(w, v), self.out_proj.weight, self.out_proj.bias), w
''',
    },
    "ex7_padded": {
        "the course's padding_mask, the chapter's causal_mask and sdp_attention": '''def padded_self_attention(x, lengths, W_q, W_k, W_v, W_o, causal=False):
    if not torch.is_tensor(x) or x.ndim != 3 or not torch.is_floating_point(x):
        raise ValueError("x: expected a floating-point (batch, L, d_model) tensor")
    B, L, D = x.shape
    if not torch.is_tensor(lengths) or lengths.shape != (B,) or lengths.dtype not in (
            torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64):
        raise ValueError("lengths: expected an integer tensor of shape (batch,)")
    if lengths.min() < 0 or lengths.max() > L:
        raise ValueError("lengths: each must be in [0, L]")
    if causal is not True and causal is not False:
        raise ValueError("causal must be a bool")
    dk, dv = W_q.shape[-1], W_v.shape[-1]
    for name, w, want in [("W_q", W_q, (D, dk)), ("W_k", W_k, (D, dk)), ("W_v", W_v, (D, dv)), ("W_o", W_o, (dv, D))]:
        if w.shape != want or w.dtype != x.dtype:
            raise ValueError(f"{name}: expected shape {want} and dtype {x.dtype}")
    keys = attention.padding_mask(lengths, L)          # (B, 1, L)
    queries = keys.transpose(1, 2)                     # (B, L, 1)
    mask = keys & queries
    if causal:
        mask = mask & causal_mask(L)
    v = torch.where(queries, x @ W_v, torch.zeros((), dtype=x.dtype))
    out, w = sdp_attention(x @ W_q, x @ W_k, v, mask)
    return out @ W_o, w
''',
        "float64 and einsum, nan_to_num for the empty rows": '''def padded_self_attention(x, lengths, W_q, W_k, W_v, W_o, causal=False):
    if not (isinstance(x, torch.Tensor) and x.dim() == 3 and x.dtype in (torch.float16, torch.bfloat16,
                                                                         torch.float32, torch.float64)):
        raise ValueError(f"x must be a (batch, L, d_model) float tensor")
    B, L, D = x.shape
    ok = isinstance(lengths, torch.Tensor) and list(lengths.shape) == [B] and lengths.dtype in (torch.int32, torch.int64)
    if not ok or not bool(torch.all((0 <= lengths) & (lengths <= L))):
        raise ValueError("lengths must be B integers from 0 to L")
    if type(causal) is not bool:
        raise ValueError("causal must be True or False")
    shapes = {"W_q": (D, W_q.shape[-1]), "W_k": (D, W_q.shape[-1]), "W_v": (D, W_v.shape[-1]), "W_o": (W_v.shape[-1], D)}
    for name, want in shapes.items():
        w = {"W_q": W_q, "W_k": W_k, "W_v": W_v, "W_o": W_o}[name]
        if tuple(w.shape) != want:
            raise ValueError(f"{name} has shape {tuple(w.shape)}, expected {want}")
        if w.dtype != x.dtype:
            raise ValueError(f"{name} is {w.dtype}, x is {x.dtype}")
    pos = torch.arange(L)
    real = pos.expand(B, L) < lengths.unsqueeze(1)
    xd = torch.where(real[..., None], x.double(), 0.0)
    q = torch.einsum("bld,dk->blk", xd, W_q.double())
    k = torch.einsum("bld,dk->blk", xd, W_k.double())
    v = torch.einsum("bld,dv->blv", xd, W_v.double())
    s = torch.einsum("bik,bjk->bij", q, k) * W_q.shape[-1] ** -0.5
    ok = real[:, :, None] & real[:, None, :]
    if causal:
        ok &= pos[:, None] >= pos[None, :]
    w = torch.softmax(s.masked_fill(~ok, -math.inf), dim=-1).nan_to_num(0.0)
    out = torch.einsum("bij,bjv->biv", w, v) @ W_o.double()
    return out.to(x.dtype), w.to(x.dtype)
''',
        "a loop over the sequences, each run alone": '''def padded_self_attention(x, lengths, W_q, W_k, W_v, W_o, causal=False):
    if not isinstance(x, torch.Tensor) or len(x.shape) != 3 or not x.dtype.is_floating_point:
        raise ValueError("x is not a 3-D float tensor")
    B, L, D = x.shape
    if not isinstance(lengths, torch.Tensor) or lengths.dim() != 1 or len(lengths) != B:
        raise ValueError("lengths must have one entry per sequence")
    if lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise ValueError("lengths must hold integers")
    for n in lengths.tolist():
        if not 0 <= n <= L:
            raise ValueError(f"lengths: {n} is not between 0 and {L}")
    if not isinstance(causal, bool):
        raise ValueError("causal: expected a bool")
    dk, dv = W_q.shape[-1], W_v.shape[-1]
    if W_q.shape != (D, dk) or W_q.dtype != x.dtype:
        raise ValueError("W_q")
    if W_k.shape != (D, dk) or W_k.dtype != x.dtype:
        raise ValueError("W_k")
    if W_v.shape != (D, dv) or W_v.dtype != x.dtype:
        raise ValueError("W_v")
    if W_o.shape != (dv, D) or W_o.dtype != x.dtype:
        raise ValueError("W_o")
    out, w = x.new_zeros(B, L, D), x.new_zeros(B, L, L)
    for b, n in enumerate(lengths.tolist()):
        if n == 0:
            continue
        xb = x[b, :n]
        s = (xb @ W_q) @ (xb @ W_k).T / math.sqrt(dk)
        if causal:
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        p = stable_softmax(s, dim=-1)
        w[b, :n, :n] = p
        out[b, :n] = (p @ (xb @ W_v)) @ W_o
    return out, w
''',
    },
}
