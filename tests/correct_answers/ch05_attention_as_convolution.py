"""Correct answers to chapter 5's exercises, written differently from the solution.

Each source replaces the whole answer cell and must get full marks (``tools/mutants.py ch05
--correct``, and ``tests/test_grading.py`` through the real grader): other tensor operations
(``nonzero``, ``einsum``, ``flatten``, complex numbers), loops instead of vectorised forms,
the score from the formula instead of ``v . r``, and float32 angles as Hugging Face computes them.
"""

CORRECT = {
    "ex1_offsets": {
        "nonzero": '''def relative_offsets(height, width):
    pos = torch.nonzero(torch.ones(height, width))            # row-major (row, column) of every cell
    return pos[None] - pos[:, None]
''',
        "divmod": '''def relative_offsets(height, width):
    n = torch.arange(height * width)
    pos = torch.stack([n // width, n % width], dim=1)
    return pos.unsqueeze(0) - pos.unsqueeze(1)
''',
        "python loops": '''def relative_offsets(height, width):
    cells = [(r, c) for r in range(height) for c in range(width)]
    return torch.tensor([[[rj - ri, cj - ci] for (rj, cj) in cells] for (ri, ci) in cells], dtype=torch.long)
''',
        "cartesian_prod": '''def relative_offsets(height, width):
    pos = torch.cartesian_prod(torch.arange(height), torch.arange(width)).reshape(-1, 2)
    return pos[None, :, :] - pos[:, None, :]
''',
    },
    "ex2_quadratic": {
        "the formula, broadcasting": '''def quadratic_scores(offsets, center, alpha):
    d = offsets.to(center.dtype)
    if center.dim() == 1:
        return -alpha * (((d - center) ** 2).sum(-1) - (center ** 2).sum())
    a = torch.as_tensor(alpha, dtype=center.dtype).reshape(-1, 1, 1)
    diff = d[None] - center[:, None, None, :]
    return -a * ((diff ** 2).sum(-1) - (center ** 2).sum(-1)[:, None, None])
''',
        "v . r with a matmul": '''def quadratic_scores(offsets, center, alpha):
    heads = center.reshape(-1, center.shape[-1])
    d = offsets.to(center.dtype)
    r = torch.cat([(d ** 2).sum(-1, keepdim=True), d], -1)                   # (L_q, L_k, 1 + D)
    a = torch.as_tensor(alpha, dtype=center.dtype) * torch.ones(heads.shape[0], dtype=center.dtype)
    v = -a[:, None] * torch.cat([torch.ones_like(heads[:, :1]), -2 * heads], -1)   # (heads, 1 + D)
    out = (r @ v.T).permute(2, 0, 1)
    return out[0] if center.dim() == 1 else out
''',
        "a loop over heads": '''def quadratic_scores(offsets, center, alpha):
    d = offsets.to(center.dtype)

    def one(c, a):
        return -a * (((d - c) ** 2).sum(-1) - (c ** 2).sum())

    if center.dim() == 1:
        return one(center, alpha)
    alphas = alpha if isinstance(alpha, torch.Tensor) else [alpha] * center.shape[0]
    return torch.stack([one(center[h], alphas[h]) for h in range(center.shape[0])])
''',
        "einsum, expanded square": '''def quadratic_scores(offsets, center, alpha):
    d = offsets.to(center.dtype)
    c = center if center.dim() == 2 else center[None]
    a = torch.broadcast_to(torch.as_tensor(alpha, dtype=center.dtype), c.shape[:1])
    out = -a[:, None, None] * ((d * d).sum(-1)[None] - 2 * torch.einsum("qkd,hd->hqk", d, c))
    return out if center.dim() == 2 else out[0]
''',
    },
    "ex3_head_map": {
        "direct, no score matrix": '''def head_attention_map(height, width, query, center, alpha):
    rows = torch.arange(height, dtype=center.dtype)[:, None] - query[0]
    cols = torch.arange(width, dtype=center.dtype)[None, :] - query[1]
    scores = -alpha * ((rows - center[0]) ** 2 + (cols - center[1]) ** 2 - (center ** 2).sum())
    return torch.softmax(scores.flatten(), dim=0).reshape(height, width)
''',
        "the references, exp over the max": '''def head_attention_map(height, width, query, center, alpha):
    scores = conv_attention.quadratic_scores(conv_attention.relative_offsets(height, width), center, alpha)
    row = scores[query[0] * width + query[1]].reshape(height, width)
    e = torch.exp(row - row.max())
    return e / e.sum()
''',
        "only the query's offsets": '''def head_attention_map(height, width, query, center, alpha):
    offsets = relative_offsets(height, width)
    q = query[0] * width + query[1]
    row = quadratic_scores(offsets[q:q + 1], center, alpha)[0]
    return torch.softmax(row.view(height, width).flatten(), -1).view(height, width)
''',
    },
    "ex4_kernel_heads": {
        "flatten and cat": '''def kernel_to_heads(weight):
    c_out, c_in, k, _ = weight.shape
    w_val = weight.flatten(2).permute(2, 1, 0)
    w_out = torch.cat([torch.eye(c_out, dtype=weight.dtype)] * (k * k))
    return w_val, w_out
''',
        "loops": '''def kernel_to_heads(weight):
    c_out, c_in, k, _ = weight.shape
    w_val = torch.stack([weight[:, :, i, j].t() for i in range(k) for j in range(k)])
    w_out = torch.zeros(k * k * c_out, c_out, dtype=weight.dtype)
    for h in range(k * k):
        w_out[h * c_out:(h + 1) * c_out] = torch.eye(c_out)
    return w_val, w_out
''',
        "einsum and tile": '''def kernel_to_heads(weight):
    c_out, c_in, k, _ = weight.shape
    w_val = torch.einsum("oikl->klio", weight).reshape(k * k, c_in, c_out)
    w_out = torch.eye(c_out, dtype=weight.dtype).tile(k * k, 1)
    return w_val, w_out
''',
    },
    "ex5_rope": {
        "float32 angles, as Hugging Face": '''def apply_rope(x, positions):
    d = x.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    cos, sin = freqs.cos().to(x.dtype), freqs.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out
''',
        "complex numbers": '''def apply_rope(x, positions):
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = positions.to(torch.float64)[:, None] * theta
    rot = torch.polar(torch.ones_like(angle), angle)
    xc = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(xc * rot).reshape(x.shape).to(x.dtype)
''',
        "rotation matrices": '''def apply_rope(x, positions):
    d = x.shape[-1]
    i = torch.arange(d // 2, dtype=torch.float64)
    angle = positions.double()[:, None] * torch.exp(-math.log(10000.0) * 2 * i / d)   # (seq, d/2)
    c, s = angle.cos(), angle.sin()
    rot = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)       # (seq, d/2, 2, 2)
    pairs = x.double().unflatten(-1, (d // 2, 2))                                    # (..., seq, d/2, 2)
    return torch.einsum("spij,...spj->...spi", rot, pairs).flatten(-2).to(x.dtype)
''',
    },
}
