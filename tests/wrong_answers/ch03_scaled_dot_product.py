"""Wrong answers to chapter 3's exercises.

``EXERCISE``/``SOURCE``: a typical wrong answer to exercise 3, the mask *added* as -1e9 (the
habit of the source notes' code, seed 002) instead of filling masked scores with -inf.
Every row with at least one allowed key comes out right, but a query whose every key is
masked gets uniform weights over the padding (an average of meaningless values) instead of
zero weights and a zero output: both the visible and the hidden tests catch it.

``HIDDEN_ONLY``: for every exercise, a plausible wrong answer that passes the exercise's
visible tests and fails its hidden tests, so that each hidden test is shown to catch
something the visible ones miss.
"""

EXERCISE = "ex3_attention"

SOURCE = '''def sdp_attention(q, k, v, mask=None):
    """Scaled dot-product attention (wrong: additive -1e9 mask)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + (1.0 - mask.float()) * -1e9
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
'''

# Exercise 7's wrong answers are one edit each of this right answer.
_PADDED = '''def padded_self_attention(x, lengths, W_q, W_k, W_v, W_o, causal=False):
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or not x.is_floating_point():
        raise ValueError("x must be a floating-point (batch, L, d_model) tensor")
    B, L, D = x.shape
    if not isinstance(lengths, torch.Tensor) or lengths.shape != (B,) or lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise ValueError("lengths must be an integer tensor of shape (batch,)")
    if ((lengths < 0) | (lengths > L)).any():
        raise ValueError("lengths must lie between 0 and L")
    if not isinstance(causal, bool):
        raise ValueError("causal must be True or False")
    d_k, d_v = W_q.shape[-1], W_v.shape[-1]
    for name, w, shape in (("W_q", W_q, (D, d_k)), ("W_k", W_k, (D, d_k)), ("W_v", W_v, (D, d_v)), ("W_o", W_o, (d_v, D))):
        if w.shape != shape or w.dtype != x.dtype:
            raise ValueError(f"{name} must be {shape} of x's dtype")
    real = torch.arange(L)[None, :] < lengths[:, None]
    mask = real[:, None, :] & real[:, :, None]
    if causal:
        mask = mask & torch.ones(L, L, dtype=torch.bool).tril()
    v = (x @ W_v).masked_fill(~real[..., None], 0.0)
    out, w = attention.scaled_dot_product_attention(x @ W_q, x @ W_k, v, mask)
    return out @ W_o, w
'''


def _edit(source: str, old: str, new: str) -> str:
    """``source`` with its one occurrence of ``old`` replaced (a wrong answer one edit away from a right one)."""
    if source.count(old) != 1:
        raise ValueError(f"{old!r} occurs {source.count(old)} times")
    return source.replace(old, new)


HIDDEN_ONLY = {
    # d_k read as q.shape[1], right for the (L, d_k) inputs of the worked example and for the
    # shape-only batched check, wrong for (batch, heads, L, d_k) inputs.
    "ex1_scores": '''def scaled_scores(q, k):
    d_k = q.shape[1]
    return q @ k.transpose(-2, -1) / math.sqrt(d_k)
''',
    # The maximum of the whole tensor instead of each row's: softmax does not change, but a
    # row far below the global maximum underflows to 0/0 (the hidden test's row of -5000s).
    "ex2_softmax": '''def stable_softmax(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)
''',
    # Scaled by sqrt(d_v) instead of sqrt(d_k): the worked example has d_v = d_k = 2, and the
    # other visible checks are about masks and row sums; the hidden tests have d_k != d_v.
    "ex3_attention": '''def sdp_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return weights @ v, weights
''',
    # The offset clamped at zero: right when L_k >= L_q (the visible cases), wrong when there
    # are more queries than keys (the first L_q - L_k queries must see nothing).
    "ex4_causal": '''def causal_mask(L_q, L_k=None):
    L_k = L_q if L_k is None else L_k
    i = torch.arange(L_q)[:, None]
    j = torch.arange(L_k)[None, :]
    return j <= i + max(L_k - L_q, 0)
''',
    # Scaled by the decoder's width d_dec instead of d_k: the visible tests check shapes, row
    # sums and padding (consistent whatever the scale); the hidden ones check the values.
    "ex5_cross": '''def cross_attention(x_dec, x_enc, W_q, W_k, W_v, enc_lengths=None):
    q, k, v = x_dec @ W_q, x_enc @ W_k, x_enc @ W_v
    s = q @ k.transpose(-2, -1) / math.sqrt(x_dec.shape[-1])
    if enc_lengths is not None:
        s = s.masked_fill(~attention.padding_mask(enc_lengths, x_enc.shape[1]), float("-inf"))
    w = torch.softmax(s, dim=-1)
    return w @ v, w
''',
    # The mask added as -1e9: right whenever a query may see at least one key (the visible
    # causal check), uniform weights instead of zeros for fully masked rows (hidden).
    "ex6_module": '''class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            s = s + (~mask).float() * -1e9
        w = torch.softmax(s, dim=-1)
        return self.out_proj(w @ v), w
''',
    # The padding cleaned with nan_to_num instead of zeroed: NaN becomes 0 (the visible NaN check passes),
    # but inf becomes the largest float, its values overflow to inf again, and 0 x inf is NaN (hidden).
    "ex7_padded": _edit(_PADDED, "v = (x @ W_v).masked_fill(~real[..., None], 0.0)", "v = torch.nan_to_num(x) @ W_v"),
}

# Wrong answers that reviewers found (or that we found while widening the hidden tests to the documented
# domain, issue 30), each of which got full marks from the earlier tests. ``{name: (exercise, source)}``.
REVIEWED = {
    # Scales the caller's queries in place (q /= ...): the scores are right, but the learner's q is
    # changed behind their back (a second call on the same q gives other scores).
    "scores_scale_q_in_place": ("ex1_scores", '''def scaled_scores(q, k):
    q /= math.sqrt(q.shape[-1])
    return q @ k.transpose(-2, -1)
'''),
    # Computes in float64 and returns float64 for float32 scores: the values are right, the dtype is
    # not x's (the old tests only checked that float64 stays float64).
    "softmax_returns_float64": ("ex2_softmax", '''def stable_softmax(x, dim=-1):
    x = x.double()
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)
'''),
    # Subtracts the maximum in place: the caller's scores come back shifted.
    "softmax_shift_in_place": ("ex2_softmax", '''def stable_softmax(x, dim=-1):
    x -= x.amax(dim=dim, keepdim=True)
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)
'''),
    # Masks *after* the softmax and renormalises: right while the allowed keys keep some weight, but
    # when a masked key scores far above the allowed ones their weights underflow to 0 and the row
    # comes out all zero (0 / tiny) instead of a distribution over the allowed keys.
    "attention_renormalised_mask": ("ex3_attention", '''def sdp_attention(q, k, v, mask=None):
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    if mask is not None:
        weights = weights * mask
        weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(1e-12)
    return weights @ v, weights
'''),
    # Weights computed (and returned) in float64 whatever the inputs' dtype; only the output is cast
    # back (the old tests never looked at the weights' values or dtype in the hidden cell).
    "attention_weights_float64": ("ex3_attention", '''def sdp_attention(q, k, v, mask=None):
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return (weights @ v.double()).to(q.dtype), weights
'''),
    # A float mask when L_k is given: the right pattern, the wrong type (True/False in a float tensor
    # is not a mask for masked_fill); the old tests checked the dtype of causal_mask(4) only.
    "causal_float_with_L_k": ("ex4_causal", '''def causal_mask(L_q, L_k=None):
    if L_k is None:
        return torch.ones(L_q, L_q).tril().bool()
    return torch.ones(L_q, L_k).tril(L_k - L_q)
'''),
    # padding_mask(enc_lengths) without max_len pads to the longest length, not to S: right whenever
    # some sequence of the batch is unpadded (every old test), a shape error otherwise.
    "cross_mask_without_max_len": ("ex5_cross", '''def cross_attention(x_dec, x_enc, W_q, W_k, W_v, enc_lengths=None):
    q, k, v = x_dec @ W_q, x_enc @ W_k, x_enc @ W_v
    mask = None if enc_lengths is None else attention.padding_mask(enc_lengths)
    return attention.scaled_dot_product_attention(q, k, v, mask)
'''),
    # The mask built as (batch, S) without the query axis: (batch, S) broadcasts against
    # (batch, T, S) as (1, batch, S), so query t uses the lengths of sequence t. A shape error unless
    # batch == T (or batch == 1), and then silently wrong.
    "cross_mask_without_query_axis": ("ex5_cross", '''def cross_attention(x_dec, x_enc, W_q, W_k, W_v, enc_lengths=None):
    q, k, v = x_dec @ W_q, x_enc @ W_k, x_enc @ W_v
    mask = None
    if enc_lengths is not None:
        mask = torch.arange(x_enc.shape[1])[None, :] < enc_lengths[:, None]
    return attention.scaled_dot_product_attention(q, k, v, mask)
'''),
    # The renormalised mask of exercise 3 inside the module: padding whose keys score far above the
    # real ones zeroes the real keys' weights.
    "module_renormalised_mask": ("ex6_module", '''class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        if mask is not None:
            w = w * mask
            w = w / w.sum(dim=-1, keepdim=True).clamp_min(1e-12)
        return self.out_proj(w @ v), w
'''),
    # Weights and output computed in float32 whatever the module's dtype (a float32 cast "for speed").
    "module_always_float32": ("ex6_module", '''class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        q, k, v = self.q_proj(x).float(), self.k_proj(x).float(), self.v_proj(x).float()
        out, w = attention.scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(out.to(x.dtype)), w
'''),
    # Issue 54. Zeroes the padded encoder positions in the caller's ``x_enc`` with ``masked_fill_``: the
    # outputs are right (padded keys get weight 0 anyway), the input comes back changed, against the
    # chapter's rule; checks.call's inputs-unchanged check names ``x_enc``.
    "cross_zeroes_padding_in_place": ("ex5_cross", '''def cross_attention(x_dec, x_enc, W_q, W_k, W_v, enc_lengths=None):
    mask = None
    if enc_lengths is not None:
        mask = attention.padding_mask(enc_lengths, x_enc.shape[1])
        x_enc.masked_fill_(~mask.transpose(1, 2), 0.0)
    return attention.scaled_dot_product_attention(x_dec @ W_q, x_enc @ W_k, x_enc @ W_v, mask)
'''),
    # Issue 54. Scales the caller's ``x`` in place before the projections (and the query projection's
    # weight back): right outputs, ``x`` changed.
    "module_scales_x_in_place": ("ex6_module", '''class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        k, v = self.k_proj(x), self.v_proj(x)
        q = self.q_proj(x.mul_(1.0).add_(0.0))
        x.mul_(2.0)
        out, w = attention.scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(out), w
'''),
    # Exercise 7 (issue 52): each one edit of ``_PADDED``, a right answer.
    # Only lengths above L are rejected: a negative length builds a mask of no real position and gives
    # zeros, where the prompt asks for a ValueError naming lengths.
    "padded_negative_length_accepted": ("ex7_padded", _edit(_PADDED, "((lengths < 0) | (lengths > L)).any()",
                                                            "(lengths > L).any()")),
    # The padded values left as they are: weight 0 times a NaN (or inf) value is NaN, so every real query
    # of a sequence whose padding holds NaN comes out NaN.
    "padded_values_not_zeroed": ("ex7_padded", _edit(_PADDED, "v = (x @ W_v).masked_fill(~real[..., None], 0.0)",
                                                     "v = x @ W_v")),
    # The key mask only (what nn.MultiheadAttention's key_padding_mask does): padded queries attend to
    # the real keys instead of to nothing, so their weights and outputs are not zero.
    "padded_queries_attend_like_mha": ("ex7_padded", _edit(_PADDED, "mask = real[:, None, :] & real[:, :, None]",
                                                           "mask = real[:, None, :]")),
    # The causal triangle taken from the wrong side (triu: each query sees itself and the future).
    "padded_causal_upper_triangle": ("ex7_padded", _edit(_PADDED, "torch.ones(L, L, dtype=torch.bool).tril()",
                                                         "torch.ones(L, L, dtype=torch.bool).triu()")),
    # The weights' dtype not compared with x's: a float64 W_v on float32 x fails inside the product with
    # a RuntimeError that names no weight, instead of the ValueError the prompt asks for.
    "padded_weight_dtype_unchecked": ("ex7_padded", _edit(_PADDED, "if w.shape != shape or w.dtype != x.dtype:",
                                                          "if w.shape != shape:")),
    # Booleans accepted as lengths: True/False count as 1/0, where the prompt asks for a ValueError.
    "padded_bool_lengths_accepted": ("ex7_padded", _edit(_PADDED, " or lengths.dtype == torch.bool:", ":")),
}
