"""Correct answers to chapter 3's exercises, written differently from the solution.

Each source replaces the whole answer cell and must get full marks: the scores by ``einsum``, by
``matmul`` with ``mT`` and the queries scaled first, in float64 and cast back; the softmax by
``logsumexp``, by ``max(...).values``, in float64 intermediates; attention with ``nan_to_num`` for the
fully masked rows, with the learner's own ``stable_softmax`` and ``einsum``, with ``finfo.min`` instead of
``-inf``; the causal mask by ``tril`` and by a loop; cross-attention through the learner's own
``sdp_attention`` or written out with a hand-made padding mask; the module built in another order,
through ``sdp_attention``, or written out with ``F.linear``.
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
}
