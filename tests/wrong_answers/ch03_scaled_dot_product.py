"""A typical wrong answer to chapter 3's exercise 3: the mask is *added* as -1e9 (the habit of
the source notes' code, seed 002) instead of filling masked scores with -inf.

Every row with at least one allowed key comes out right, but a query whose every key is
masked gets uniform weights over the padding (an average of meaningless values) instead of
zero weights and a zero output: both the visible and the hidden tests catch it.
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
