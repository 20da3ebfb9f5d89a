"""Correct answers to chapter 6's exercises, written differently from the solution.

Each source replaces the whole answer cell and must get full marks (``tools/mutants.py ch06
--correct``, and ``tests/test_grading.py`` through the real grader): float32 arithmetic as the
Annotated Transformer writes the table, ``torch.stack``/``where`` forms, the sub-layers called
through small helpers or with keyword-free calls, and other ways to write the schedule.
"""

CORRECT = {
    "ex1_sinusoidal": {
        "float32, exp-log frequencies (the Annotated Transformer)": '''def sinusoidal_table(max_len, d_model):
    if d_model % 2 == 1:
        raise ValueError(f"d_model must be even, got {d_model}")
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
''',
        "stack and flatten, float64": '''def sinusoidal_table(max_len, d_model):
    if d_model % 2:
        raise ValueError("odd d_model: the sines and cosines pair up")
    i = torch.arange(d_model // 2, dtype=torch.float64)
    angle = torch.outer(torch.arange(max_len, dtype=torch.float64), 10000.0 ** (-2 * i / d_model))
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1).to(torch.float32)
''',
        "cos as a shifted sine": '''def sinusoidal_table(max_len, d_model):
    if d_model & 1:
        raise ValueError("d_model must be even")
    cols = torch.arange(d_model)
    freq = torch.pow(10000.0, -(cols - cols % 2).double() / d_model)
    angle = torch.arange(max_len, dtype=torch.float64)[:, None] * freq + (cols % 2) * (math.pi / 2)
    return torch.sin(angle).float()
''',
    },
    "ex2_encoder_layer": {
        "helpers for the sub-layers": '''def encoder_layer_forward(layer, x, mask=None):
    def attn(h):
        out, _ = layer.self_attn(h, mask=mask)
        return out

    if not layer.norm_first:
        h = layer.norm1(x + attn(x))
        return layer.norm2(h + layer.ff(h))
    h = x + attn(layer.norm1(x))
    return h + layer.ff(layer.norm2(h))
''',
        "context given, a list of sub-layers": '''def encoder_layer_forward(layer, x, mask=None):
    sublayers = [(layer.norm1, lambda h: layer.self_attn(h, context=h, mask=mask)[0]), (layer.norm2, layer.ff)]
    for norm, f in sublayers:
        x = x + f(norm(x)) if layer.norm_first else norm(x + f(x))
    return x
''',
    },
    "ex3_decoder_mask": {
        "tril and unsqueeze": '''def decoder_mask(tgt_in, pad_id=PAD_ID):
    T_len = tgt_in.size(1)
    causal = torch.tril(torch.ones(T_len, T_len, dtype=torch.bool))
    keys = (tgt_in != pad_id).unsqueeze(1).unsqueeze(2)
    return torch.logical_and(causal, keys)
''',
        "expand and where": '''def decoder_mask(tgt_in, pad_id=PAD_ID):
    b, t = tgt_in.shape
    future = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    pad = (tgt_in == pad_id).view(b, 1, 1, t).expand(b, 1, t, t)
    return torch.where(pad | future, False, True)
''',
        "python loops": '''def decoder_mask(tgt_in, pad_id=PAD_ID):
    b, t = tgt_in.shape
    m = torch.zeros(b, 1, t, t, dtype=torch.bool)
    for n in range(b):
        for i in range(t):
            for j in range(i + 1):
                m[n, 0, i, j] = bool(tgt_in[n, j] != pad_id)
    return m
''',
    },
    "ex4_decoder_layer": {
        "three sub-layers in a loop": '''def decoder_layer_forward(layer, y, memory, memory_mask=None):
    sublayers = [(layer.norm1, lambda h: layer.self_attn(h, causal=True)[0]),
                 (layer.norm2, lambda h: layer.cross_attn(h, memory, mask=memory_mask)[0]),
                 (layer.norm3, layer.ff)]
    for norm, f in sublayers:
        y = y + f(norm(y)) if layer.norm_first else norm(y + f(y))
    return y
''',
        "an explicit causal mask": '''def decoder_layer_forward(layer, y, memory, memory_mask=None):
    t = y.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    if layer.norm_first:
        a = y + layer.self_attn(layer.norm1(y), mask=causal)[0]
        b = a + layer.cross_attn(layer.norm2(a), context=memory, mask=memory_mask)[0]
        return b + layer.ff(layer.norm3(b))
    a = layer.norm1(y + layer.self_attn(y, mask=causal)[0])
    b = layer.norm2(a + layer.cross_attn(a, context=memory, mask=memory_mask)[0])
    return layer.norm3(b + layer.ff(b))
''',
    },
    "ex5_warmup": {
        "two branches": '''def warmup_lr(step, d_model, warmup):
    if step < warmup:
        return step * warmup ** -1.5 / math.sqrt(d_model)
    return 1.0 / math.sqrt(d_model * step)
''',
        "math.sqrt and min": '''def warmup_lr(step, d_model, warmup):
    return min(1 / math.sqrt(step), step / warmup / math.sqrt(warmup)) / math.sqrt(d_model)
''',
        "float() of a torch computation": '''def warmup_lr(step, d_model, warmup):
    s = torch.tensor(float(step), dtype=torch.float64)
    return float(d_model ** -0.5 * torch.minimum(s.rsqrt(), s * warmup ** -1.5))
''',
    },
}
