"""Typical wrong answers for chapter 6.

``EXERCISE``/``SOURCE``: a decoder layer whose self-attention is not causal. Every position sees
the whole target, so during training it could copy the token it is asked to predict; the visible
tests catch it (changing the last target position changes the earlier outputs) and so do the hidden
ones.

``HIDDEN_ONLY``: for each exercise, a wrong answer that passes the visible tests and fails the
hidden ones.

``MORE_WRONG``: more wrong answers, each of which must lose exactly its exercise's points (the
visible tests catch them).
"""

EXERCISE = "ex4_decoder_layer"
SOURCE = '''def decoder_layer_forward(layer, y, memory, memory_mask=None):
    if layer.norm_first:
        y = y + layer.self_attn(layer.norm1(y))[0]
        y = y + layer.cross_attn(layer.norm2(y), context=memory, mask=memory_mask)[0]
        return y + layer.ff(layer.norm3(y))
    y = layer.norm1(y + layer.self_attn(y)[0])
    y = layer.norm2(y + layer.cross_attn(y, context=memory, mask=memory_mask)[0])
    return layer.norm3(y + layer.ff(y))
'''

HIDDEN_ONLY = {
    # hands the work to the course_utils reference: right values, not the learner's table
    "ex1_sinusoidal": '''def sinusoidal_table(max_len, d_model):
    return positional.sinusoidal_encoding(max_len, d_model)
''',
    # the padding mask is never passed to the attention: right only when nothing is padded
    "ex2_encoder_layer": '''def encoder_layer_forward(layer, x, mask=None):
    if layer.norm_first:
        x = x + layer.self_attn(layer.norm1(x))[0]
        return x + layer.ff(layer.norm2(x))
    x = layer.norm1(x + layer.self_attn(x)[0])
    return layer.norm2(x + layer.ff(x))
''',
    # padding hard-coded as id 0 instead of pad_id
    "ex3_decoder_mask": '''def decoder_mask(tgt_in, pad_id=PAD_ID):
    T_len = tgt_in.shape[1]
    causal = torch.ones(T_len, T_len).tril().bool()
    return causal & (tgt_in != 0)[:, None, None, :]
''',
    # cross-attention without the source padding mask: right only for unpadded sources
    "ex4_decoder_layer": '''def decoder_layer_forward(layer, y, memory, memory_mask=None):
    if layer.norm_first:
        y = y + layer.self_attn(layer.norm1(y), causal=True)[0]
        y = y + layer.cross_attn(layer.norm2(y), context=memory)[0]
        return y + layer.ff(layer.norm3(y))
    y = layer.norm1(y + layer.self_attn(y, causal=True)[0])
    y = layer.norm2(y + layer.cross_attn(y, context=memory)[0])
    return layer.norm3(y + layer.ff(y))
''',
    # linear warmup, then held at the peak: no 1/sqrt(step) decay
    "ex5_warmup": '''def warmup_lr(step, d_model, warmup):
    return d_model ** -0.5 * min(step, warmup) * warmup ** -1.5
''',
}

MORE_WRONG = {
    # the frequency multiplied instead of divided: pos * 10000^(2i/d_model). Right for the first
    # pair (i = 0) and at position 0; the visible test of the second pair catches it.
    "frequency_multiplied": ("ex1_sinusoidal", '''def sinusoidal_table(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos * 10000 ** (two_i / d_model)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table.float()
'''),
    # the exponent i / d_model instead of 2i / d_model: right for the first pair (i = 0) and at
    # position 0; the visible test of the second pair catches it.
    "exponent_i_over_d": ("ex1_sinusoidal", '''def sinusoidal_table(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    i = torch.arange(d_model // 2, dtype=torch.float64)
    angle = pos / 10000 ** (i / d_model)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table.float()
'''),
}

# Wrong answers that the earlier hidden tests missed (issue 30): each must lose points on its
# exercise (``tools/mutants.py ch06 --correct``).
REVIEWED = {
    # Pre-LN with the residual added in place (x += ...): the value returned is right, but the
    # caller's x is changed (a residual stream kept by the caller is corrupted). The old tests
    # computed the expected value before the call and never looked at x again.
    "encoder_in_place_residual": ("ex2_encoder_layer", '''def encoder_layer_forward(layer, x, mask=None):
    if layer.norm_first:
        x += layer.self_attn(layer.norm1(x), mask=mask)[0]
        return x + layer.ff(layer.norm2(x))
    x = layer.norm1(x + layer.self_attn(x, mask=mask)[0])
    return layer.norm2(x + layer.ff(x))
'''),
    # The keys kept are the first "length" positions, length = number of non-pad ids: right when
    # the padding is at the end, wrong where pad_id appears in the middle (the prompt's rule is
    # per key: tgt_in[b, j] != pad_id).
    "mask_from_lengths": ("ex3_decoder_mask", '''def decoder_mask(tgt_in, pad_id=PAD_ID):
    T_len = tgt_in.shape[1]
    lengths = (tgt_in != pad_id).sum(1)
    keys = torch.arange(T_len)[None, :] < lengths[:, None]
    causal = torch.ones(T_len, T_len, dtype=torch.bool).tril()
    return causal & keys[:, None, None, :]
'''),
    # The same in-place residual in the decoder (y += ...), in both orders' first sub-layer.
    "decoder_in_place_residual": ("ex4_decoder_layer", '''def decoder_layer_forward(layer, y, memory, memory_mask=None):
    if layer.norm_first:
        y += layer.self_attn(layer.norm1(y), causal=True)[0]
        y = y + layer.cross_attn(layer.norm2(y), context=memory, mask=memory_mask)[0]
        return y + layer.ff(layer.norm3(y))
    y = layer.norm1(y + layer.self_attn(y, causal=True)[0])
    y = layer.norm2(y + layer.cross_attn(y, context=memory, mask=memory_mask)[0])
    return layer.norm3(y + layer.ff(y))
'''),
    # Returns a 0-d tensor, not the Python float the prompt asks for (the old tests called float()
    # on whatever came back).
    "warmup_tensor": ("ex5_warmup", '''def warmup_lr(step, d_model, warmup):
    step = torch.tensor(step, dtype=torch.float64)
    return d_model ** -0.5 * torch.minimum(step ** -0.5, step * warmup ** -1.5)
'''),
    # Calls positional.SinusoidalPositions (the reference's module) for the table: the prompt
    # forbids course_utils.positional; the forbidden reference runs inside it.
    "table_from_reference_module": ("ex1_sinusoidal", '''def sinusoidal_table(max_len, d_model):
    return positional.SinusoidalPositions(d_model, max_len).table.clone()
'''),
    # Issue 54: the old solution: an odd d_model gives a (max_len, d_model + 1) table instead of the
    # ValueError the prompt asks for.
    "odd_d_model_accepted": ("ex1_sinusoidal", '''def sinusoidal_table(max_len, d_model):
    two_i = torch.arange(0, d_model, 2).double()
    angle = torch.arange(max_len)[:, None] / 10000 ** (two_i / d_model)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1).float()
'''),
    # Issue 54: the angles in bfloat16 (8 bits of mantissa): fine at the first positions, off by far
    # more than float32's rounding from a few hundred on.
    "angles_in_bfloat16": ("ex1_sinusoidal", '''def sinusoidal_table(max_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angle = (torch.arange(max_len, dtype=torch.float64)[:, None] * freq).to(torch.bfloat16).double()
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1).float()
'''),
}
