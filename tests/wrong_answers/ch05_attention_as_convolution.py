"""Plausible wrong answers to chapter 5's exercises.

``EXERCISE``/``SOURCE``: RoPE with Hugging Face's pairing (feature ``i`` with ``i + d/2``)
where the exercise asks for adjacent pairs ``(2i, 2i+1)``, as in the RoFormer paper. It is a
rotation too (lengths kept, scores relative), but a different one: the visible test "pair
(0, 1) at position 1 is rotated by 1 radian" and every hidden value catch it. No other
exercise uses ``apply_rope``, so it loses exactly that exercise's points.

``HIDDEN_ONLY``: for each exercise, a wrong answer that passes the visible tests and fails
the hidden ones.
"""

EXERCISE = "ex5_rope"

SOURCE = '''def apply_rope(x, positions):
    """RoPE (wrong: pairs feature i with feature i + d/2)."""
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.as_tensor(positions, dtype=torch.float64)[:, None] * theta[None, :]
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
'''

HIDDEN_ONLY = {
    # Row and column of cell n taken with the height where the width belongs
    # (n // height, n % height): right on square grids only.
    "ex1_offsets": '''def relative_offsets(height, width):
    n = torch.arange(height * width)
    pos = torch.stack([n // height, n % height], dim=-1)
    return pos[None, :, :] - pos[:, None, :]
''',
    # Drops the ||Delta||^2 term: the same softmax, the same peak, the same scores for a centre
    # at 0, but not the score the exercise asks for.
    "ex2_quadratic": '''def quadratic_scores(offsets, center, alpha):
    center = torch.as_tensor(center)
    d = offsets.to(center.dtype)
    alpha = torch.as_tensor(alpha, dtype=center.dtype)
    if center.dim() == 1:
        return -alpha * ((d - center) ** 2).sum(-1)
    return -alpha.expand(center.shape[0])[:, None, None] * ((d[None] - center[:, None, None, :]) ** 2).sum(-1)
''',
    # Reads the query's row of scores at the column-major index: right when the grid is square
    # and the query sits on the diagonal.
    "ex3_head_map": '''def head_attention_map(height, width, query, center, alpha):
    offsets = relative_offsets(height, width)
    scores = quadratic_scores(offsets, center, alpha)
    row = scores[query[1] * height + query[0]]
    return torch.softmax(row, dim=-1).reshape(height, width)
''',
    # Taps in column-major order (head i*K + j gets tap (j, i)): the middle tap is still right.
    "ex4_kernel_heads": '''def kernel_to_heads(weight):
    c_out, c_in, k, _ = weight.shape
    w_val = weight.permute(3, 2, 1, 0).reshape(k * k, c_in, c_out)
    w_out = torch.eye(c_out, dtype=weight.dtype).repeat(k * k, 1)
    return w_val, w_out
''',
    # theta_i = 10000^(-i/d) instead of 10000^(-2i/d): still a rotation, pair 0 still turns by
    # one radian per position, scores still relative, but the other pairs turn too fast.
    "ex5_rope": '''def apply_rope(x, positions):
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(d // 2, dtype=torch.float64) / d)
    angle = torch.as_tensor(positions, dtype=torch.float64)[:, None] * theta[None, :]
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
''',
}

# The reviewed wrong answers (issue 30) and more that the earlier hidden tests missed: each must lose
# points on its exercise (``tools/mutants.py ch05 --correct``).
REVIEWED = {
    # Indexes alpha[:, None, None] when there are several heads: a plain-number alpha (allowed by
    # the docstring, one width for every head) raises TypeError. Every multi-head test and the
    # section-2 probe used to pass tensor alphas.
    "alpha_indexed_as_tensor": ("ex2_quadratic", '''def quadratic_scores(offsets, center, alpha):
    d = offsets.to(center.dtype)
    if center.dim() == 1:
        return -alpha * (((d - center) ** 2).sum(-1) - (center ** 2).sum())
    diff = d[None] - center[:, None, None, :]
    return -alpha[:, None, None] * ((diff ** 2).sum(-1) - (center ** 2).sum(-1)[:, None, None])
'''),
    # int32 offsets: the docstring promises int64; the old tests only asked "not floating point"
    # and compared values.
    "int32_offsets": ("ex1_offsets", '''def relative_offsets(height, width):
    rows, cols = torch.meshgrid(torch.arange(height, dtype=torch.int32), torch.arange(width, dtype=torch.int32),
                                indexing="ij")
    pos = torch.stack([rows.reshape(-1), cols.reshape(-1)], dim=-1)
    return pos[None, :, :] - pos[:, None, :]
'''),
    # A (1, D) centre squeezed to one head: returns (L_q, L_k) where (1, L_q, L_k) is asked.
    "one_head_squeezed": ("ex2_quadratic", '''def quadratic_scores(offsets, center, alpha):
    d = offsets.to(center.dtype)
    a = torch.as_tensor(alpha, dtype=center.dtype).reshape(-1, 1, 1)
    diff = d[None] - center.reshape(-1, 1, 1, center.shape[-1])
    return (-a * ((diff ** 2).sum(-1) - (center.reshape(-1, center.shape[-1]) ** 2).sum(-1)[:, None, None])).squeeze(0)
'''),
    # exp without subtracting the maximum: the scores include +alpha ||Delta||^2, so a sharp head
    # off the query (alpha 50, centre (2, -2) in float32) overflows to inf / inf = NaN.
    "softmax_without_max": ("ex3_head_map", '''def head_attention_map(height, width, query, center, alpha):
    scores = quadratic_scores(relative_offsets(height, width), center, alpha)
    e = torch.exp(scores[query[0] * width + query[1]])
    return (e / e.sum()).reshape(height, width)
'''),
    # Everything in float64 "for exactness": the prompt asks for weight's dtype; the old tests
    # checked the dtype of a float64 kernel only.
    "always_float64": ("ex4_kernel_heads", '''def kernel_to_heads(weight):
    weight = weight.double()
    c_out, c_in, k, _ = weight.shape
    w_val = weight.permute(2, 3, 1, 0).reshape(k * k, c_in, c_out)
    w_out = torch.eye(c_out, dtype=torch.float64).repeat(k * k, 1)
    return w_val, w_out
'''),
    # Always returns float32 (casts x first, as some Llama code does): right values for float64
    # inputs at float32 precision, but not x's dtype; the old tests checked the dtype of float32 only.
    "always_float32": ("ex5_rope", '''def apply_rope(x, positions):
    x = x.float()
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    angle = positions.float()[:, None] * theta[None, :]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * angle.cos() - x2 * angle.sin(), x1 * angle.sin() + x2 * angle.cos()], dim=-1).flatten(-2)
'''),
    # A precomputed table indexed by the positions (a "RoPE cache"): fails for float positions,
    # which the prompt allows.
    "cache_indexed_by_positions": ("ex5_rope", '''def apply_rope(x, positions):
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    table = torch.arange(int(positions.max()) + 1, dtype=torch.float64)[:, None] * theta[None, :]
    angle = table[positions]
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
'''),
    # Positions truncated to integers (a "position is an index" habit): float positions are allowed
    # and may be fractional, so position 2.5 must not rotate as if it were 2 (issue 54).
    "positions_truncated_long": ("ex5_rope", '''def apply_rope(x, positions):
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = positions.long().to(torch.float64)[:, None] * theta[None, :]
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
'''),
    # alpha taken as it comes, not cast to center's dtype: a float64 alpha tensor with float32 centres
    # gives float64 scores (or raises in einsum); the prompt allows alpha tensors of any dtype and asks
    # for center's dtype (issue 54).
    "alpha_not_cast": ("ex2_quadratic", '''def quadratic_scores(offsets, center, alpha):
    d = offsets.to(center.dtype)
    alpha = torch.as_tensor(alpha)
    if center.dim() == 1:
        return -alpha * (((d - center) ** 2).sum(-1) - (center ** 2).sum())
    a = alpha.expand(center.shape[0])[:, None, None]
    return -a * (((d[None] - center[:, None, None, :]) ** 2).sum(-1) - (center ** 2).sum(-1)[:, None, None])
'''),
}
