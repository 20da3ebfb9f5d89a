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
