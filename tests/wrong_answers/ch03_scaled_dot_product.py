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
}
