"""Wrong answers to chapter 4's exercises.

``EXERCISE``/``SOURCE``: the causal mask of a cached step aligned top-left (what
``is_causal=True`` does) instead of bottom-right: a single decoding step from a cache then
sees only the first key. Visible and hidden tests catch it; the exercise loses all its points.

``HIDDEN_ONLY``: for every exercise, a plausible answer that passes its visible tests and
fails its hidden ones. Each of them is also rejected by the probe with which the chapter's
experiments decide whether to use the learner's function (they fall back to the reference).

``MORE_WRONG``: the strided "repair" of the notes' GQA code (``x.repeat``), which must lose all
of exercise 3's points (its visible test names the pairing).
"""

EXERCISE = "ex4_cache"

SOURCE = '''def attend_with_cache(q, k_new, v_new, cache=None):
    """Wrong: the causal mask is aligned top-left, like is_causal=True."""
    if cache is not None:
        k_new = torch.cat([cache[0], k_new], dim=2)
        v_new = torch.cat([cache[1], v_new], dim=2)
    n_rep = q.shape[1] // k_new.shape[1]
    mask = torch.ones(q.shape[2], k_new.shape[2], dtype=torch.bool).tril()
    out, _ = attention.scaled_dot_product_attention(q, multihead.repeat_kv(k_new, n_rep),
                                                    multihead.repeat_kv(v_new, n_rep), mask)
    return out, (k_new, v_new)
'''

# Exercise 4b's reviewed wrong answers are one edit each of this right answer.
_DECODE = '''def gqa_decode_step(x_new, W_q, W_k, W_v, W_o, n_heads, n_kv_heads, cache=None):
    if x_new.dim() != 3:
        raise ValueError("x_new must be (batch, L_new, d_model)")
    b, L, d = x_new.shape
    if n_heads % n_kv_heads or d % n_heads:
        raise ValueError("n_kv_heads must divide n_heads, and n_heads must divide d_model")
    dh = d // n_heads
    for name, w, cols in (("W_q", W_q, d), ("W_k", W_k, n_kv_heads * dh), ("W_v", W_v, n_kv_heads * dh), ("W_o", W_o, d)):
        if w.shape != (d, cols):
            raise ValueError(f"{name} has the wrong shape")
    q = multihead.split_heads(x_new @ W_q, n_heads)
    k = multihead.split_heads(x_new @ W_k, n_kv_heads)
    v = multihead.split_heads(x_new @ W_v, n_kv_heads)
    if cache is not None:
        if cache[0].shape != (b, n_kv_heads, cache[0].shape[2], dh) or cache[1].shape != cache[0].shape:
            raise ValueError("the cache must be (batch, n_kv_heads, T, d_head)")
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    T = k.shape[2]
    rep = n_heads // n_kv_heads
    out, _ = attention.scaled_dot_product_attention(q, multihead.repeat_kv(k, rep), multihead.repeat_kv(v, rep),
                                                    attention.causal_mask(L, T))
    return multihead.merge_heads(out) @ W_o, (k, v)
'''
_CACHE_CHECK = '''        if cache[0].shape != (b, n_kv_heads, cache[0].shape[2], dh) or cache[1].shape != cache[0].shape:
            raise ValueError("the cache must be (batch, n_kv_heads, T, d_head)")
'''
_ATTEND = '''    out, _ = attention.scaled_dot_product_attention(q, multihead.repeat_kv(k, rep), multihead.repeat_kv(v, rep),
                                                    attention.causal_mask(L, T))
'''
_BY_HAND = '''    s = q @ multihead.repeat_kv(k, rep).transpose(-2, -1){scale}
    s = s.masked_fill(~attention.causal_mask(L, T), float("-inf"))
    out = s.softmax(-1) @ multihead.repeat_kv(v, rep)
'''


def _edit(source: str, old: str, new: str) -> str:
    """``source`` with its one occurrence of ``old`` replaced (a wrong answer one edit away from a right one)."""
    if source.count(old) != 1:
        raise ValueError(f"{old!r} occurs {source.count(old)} times")
    return source.replace(old, new)


HIDDEN_ONLY = {
    # merge_heads unpacks the shape in the wrong order; right only when L == n_heads
    "ex1_split": '''def split_heads(x, n_heads):
    b, L, d = x.shape
    return x.view(b, L, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(x):
    b, h, L, d = x.shape
    return x.transpose(1, 2).reshape(b, h, L * d)
''',
    # keys and values taken from x instead of context: right for self-attention only
    "ex2_mha": '''def multi_head_attention(x, context, W_q, W_k, W_v, W_o, n_heads, mask=None):
    q = split_used(x @ W_q, n_heads)
    k = split_used(x @ W_k, n_heads)
    v = split_used(x @ W_v, n_heads)
    out, weights = attention.scaled_dot_product_attention(q, k, v, mask)
    return merge_used(out) @ W_o, weights
''',
    # the batch size written as 1 in expand: right for one sequence only (the visible test's batch)
    "ex3_repeat_kv": '''def repeat_kv(x, n_rep):
    return torch.cat([x[:, i:i + 1].expand(1, n_rep, x.shape[2], x.shape[3]) for i in range(x.shape[1])], dim=1)
''',
    # no causal mask: right for one new token at a time, wrong for a prompt or a chunk
    "ex4_cache": '''def attend_with_cache(q, k_new, v_new, cache=None):
    if cache is not None:
        k_new = torch.cat([cache[0], k_new], dim=2)
        v_new = torch.cat([cache[1], v_new], dim=2)
    n_rep = q.shape[1] // k_new.shape[1]
    out, _ = attention.scaled_dot_product_attention(q, multihead.repeat_kv(k_new, n_rep),
                                                    multihead.repeat_kv(v_new, n_rep))
    return out, (k_new, v_new)
''',
    # n_rep taken as n_kv_heads (the argument repeat_kv's name suggests): right whenever n_heads is
    # n_kv_heads squared, as in the visible tests (4 heads, 2 key/value heads), wrong for MHA, MQA and other GQA
    "ex4b_decode_step": _edit(_DECODE, "rep = n_heads // n_kv_heads", "rep = n_kv_heads"),
    # the batch argument is ignored
    "ex5_kv_bytes": '''def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_value=2):
    return 2 * n_layers * n_kv_heads * d_head * seq_len * bytes_per_value
''',
    # works for a 2-D weight only, not for a bias
    "ex6_mean_pool": '''def mean_pool_heads(weight, n_heads, n_groups):
    d_head = weight.shape[0] // n_heads
    grouped = weight.reshape(n_groups, n_heads // n_groups, d_head, weight.shape[1])
    return grouped.mean(dim=1).reshape(n_groups * d_head, weight.shape[1])
''',
}

MORE_WRONG = {
    # T and d_head swapped in the final reshape: right only when T == d_head (the HIDDEN_ONLY answer until
    # issue 54; the visible test's heads now vary within a head, with T != d_head, and catch it).
    "repeat_t_d_swapped": ("ex3_repeat_kv", '''def repeat_kv(x, n_rep):
    b, g, T, d = x.shape
    return x[:, :, None].expand(b, g, n_rep, T, d).reshape(b, g * n_rep, d, T)
'''),
    # The "natural repair" of the notes' GQA code (section 5): the whole stack of key/value heads
    # repeated n_rep times, so query head i reads key/value head i % g instead of i // (h/g).
    # Right shape, wrong pairing: the visible test's head order and the hidden values catch it.
    "repeat_strided": ("ex3_repeat_kv", '''def repeat_kv(x, n_rep):
    return x.repeat(1, n_rep, 1, 1)
'''),
}

# Wrong answers that the earlier tests gave full marks, found while widening the hidden tests to the
# documented domain (issue 30). ``{name: (exercise, source)}``.
REVIEWED = {
    # merge_heads fills a new tensor made with torch.zeros: float32 whatever the input (float64 heads
    # come back rounded to float32); the old tests only used float32.
    "merge_into_float32_zeros": ("ex1_split", '''def split_heads(x, n_heads):
    b, L, d = x.shape
    return x.view(b, L, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(x):
    b, h, L, d = x.shape
    out = torch.zeros(b, L, h * d)
    for i in range(h):
        out[:, :, i * d:(i + 1) * d] = x[:, i]
    return out
'''),
    # Its own masked softmax with no rule for fully masked rows: NaN weights and outputs for a query
    # that may see no key (left padding); the old tests' masks never masked a whole row.
    "mha_nan_for_fully_masked_rows": ("ex2_mha", '''def multi_head_attention(x, context, W_q, W_k, W_v, W_o, n_heads, mask=None):
    q = split_used(x @ W_q, n_heads)
    k = split_used(context @ W_k, n_heads)
    v = split_used(context @ W_v, n_heads)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return merge_used(weights @ v) @ W_o, weights
'''),
    # Copies heads into torch.empty(...): float32 whatever x's dtype.
    "repeat_into_float32_empty": ("ex3_repeat_kv", '''def repeat_kv(x, n_rep):
    b, g, T, d = x.shape
    out = torch.empty(b, g * n_rep, T, d)
    for i in range(g * n_rep):
        out[:, i] = x[:, i // n_rep]
    return out
'''),
    # n_rep read from the batch axis of the keys (shape[0]) instead of their head axis: right whenever
    # batch == n_kv_heads (the visible GQA test: 2 and 2; the old hidden MQA test: 1 and 1).
    "cache_n_rep_from_batch_axis": ("ex4_cache", '''def attend_with_cache(q, k_new, v_new, cache=None):
    if cache is not None:
        k_new = torch.cat([cache[0], k_new], dim=2)
        v_new = torch.cat([cache[1], v_new], dim=2)
    n_rep = q.shape[1] // k_new.shape[0]
    mask = attention.causal_mask(q.shape[2], k_new.shape[2])
    out, _ = attention.scaled_dot_product_attention(q, multihead.repeat_kv(k_new, n_rep),
                                                    multihead.repeat_kv(v_new, n_rep), mask)
    return out, (k_new, v_new)
'''),
    # batch and bytes_per_value in the other order: the old positional test (1, 1, 1, 1, 3, 4) gives
    # 24 either way, and every other test passed them by keyword or left them out.
    "kv_bytes_arguments_swapped": ("ex5_kv_bytes", '''def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, bytes_per_value=2, batch=1):
    return 2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_value
'''),
    # The product through NumPy's int64: wraps past 2**63 against the prompt's "exact, however large"
    # (1000, 1000, 1000, 10**7, 1000, 4) gives 6213023705161793536, not 8 * 10**19 (issue 54).
    "kv_bytes_numpy_int64": ("ex5_kv_bytes", '''def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_value=2):
    import numpy
    return int(numpy.prod([2, n_layers, n_kv_heads, d_head, seq_len, batch, bytes_per_value]))
'''),
    # q scaled in place (q.mul_): the outputs are right, the caller's queries come back changed.
    "cache_scales_q_in_place": ("ex4_cache", '''def attend_with_cache(q, k_new, v_new, cache=None):
    if cache is not None:
        k_new = torch.cat([cache[0], k_new], dim=2)
        v_new = torch.cat([cache[1], v_new], dim=2)
    n_rep = q.shape[1] // k_new.shape[1]
    k, v = multihead.repeat_kv(k_new, n_rep), multihead.repeat_kv(v_new, n_rep)
    scores = q.mul_(q.shape[-1] ** -0.5) @ k.transpose(-2, -1)
    scores = scores.masked_fill(~attention.causal_mask(q.shape[2], k.shape[2]), float("-inf"))
    return scores.softmax(-1) @ v, (k_new, v_new)
'''),
    # Sums the heads of each group into torch.zeros(...): float32 whatever the weight's dtype.
    "mean_pool_float32_accumulator": ("ex6_mean_pool", '''def mean_pool_heads(weight, n_heads, n_groups):
    d_head = weight.shape[0] // n_heads
    r = n_heads // n_groups
    out = torch.zeros(n_groups * d_head, *weight.shape[1:])
    for j in range(n_groups):
        for i in range(r):
            h = j * r + i
            out[j * d_head:(j + 1) * d_head] += weight[h * d_head:(h + 1) * d_head] / r
    return out
'''),
    # Issue 54. ``.transpose_`` on the view: equivalent on plain tensors, but an in-place view op on a
    # view of a leaf that requires grad raises; the hidden tests pass such leaves.
    "split_transpose_in_place": ("ex1_split", '''def split_heads(x, n_heads):
    b, L, d = x.shape
    return x.view(b, L, n_heads, d // n_heads).transpose_(1, 2)


def merge_heads(x):
    b, h, L, d = x.shape
    return x.transpose(1, 2).reshape(b, L, h * d)
'''),
    # Issue 54. Scales the caller's ``x`` in place before projecting the queries (and undoes the scale on the
    # scores): every output is right, ``x`` comes back changed.
    "mha_scales_x_in_place": ("ex2_mha", '''def multi_head_attention(x, context, W_q, W_k, W_v, W_o, n_heads, mask=None):
    k = split_used(context @ W_k, n_heads)
    v = split_used(context @ W_v, n_heads)
    q = split_used(x.mul_(1 / math.sqrt(x.shape[-1] // n_heads)) @ W_q, n_heads)
    out, weights = attention.scaled_dot_product_attention(q * math.sqrt(q.shape[-1]), k, v, mask)
    return merge_used(out) @ W_o, weights
'''),
    # Issue 52: the whole cached GQA step (exercise 4b).
    # The cache keeps the repeated heads (n_heads of them, not n_kv_heads): right outputs, the cache as
    # large as MHA's, against the prompt; the cached keys' shape and the hidden caches catch it.
    "decode_step_cache_stores_repeated_heads": ("ex4b_decode_step", _edit(_edit(_edit(_DECODE, "    rep = n_heads // n_kv_heads\n" + _ATTEND,
                                                       "    out, _ = attention.scaled_dot_product_attention(q, k, v, attention.causal_mask(L, T))\n"),
                                                 _CACHE_CHECK, ""),
                                           "    if cache is not None:\n",
                                           "    rep = n_heads // n_kv_heads\n    k, v = multihead.repeat_kv(k, rep), multihead.repeat_kv(v, rep)\n    if cache is not None:\n")),
    # The causal mask aligned top-left (is_causal=True's): a single token on a filled cache then sees only
    # position 0, and a chunk misses the cache.
    "decode_step_mask_top_left": ("ex4b_decode_step", _edit(_DECODE, "attention.causal_mask(L, T))", "torch.ones(L, T, dtype=torch.bool).tril())")),
    # The key/value heads repeated as a stack (x.repeat): query head i reads head i % n_kv_heads, not i //
    # (n_heads / n_kv_heads); right for MHA and MQA only.
    "decode_step_repeat_strided": ("ex4b_decode_step", _edit(_DECODE, "multihead.repeat_kv(k, rep), multihead.repeat_kv(v, rep),", "k.repeat(1, rep, 1, 1), v.repeat(1, rep, 1, 1),")),
    # No 1/sqrt(d_head) on the scores.
    "decode_step_no_scale": ("ex4b_decode_step", _edit(_DECODE, _ATTEND, _BY_HAND.format(scale=""))),
    # The scores scaled by 1/sqrt(d_model) instead of 1/sqrt(d_head).
    "decode_step_scale_by_d_model": ("ex4b_decode_step", _edit(_DECODE, _ATTEND, _BY_HAND.format(scale=" / math.sqrt(d)"))),
    # The cache is not updated: it returns the new positions' keys and values only, so the next step
    # forgets the past.
    "decode_step_returns_only_the_new_keys": ("ex4b_decode_step", _edit(_edit(_DECODE, "@ W_o, (k, v)", "@ W_o, (k_new, v_new)"), "    if cache is not None:\n", "    k_new, v_new = k, v\n    if cache is not None:\n")),
    # The heads merged by a reshape without the transpose: right for one token (L_new = 1), wrong for a
    # prompt or a chunk.
    "decode_step_merge_without_transpose": ("ex4b_decode_step", _edit(_DECODE, "return multihead.merge_heads(out) @ W_o", "return out.reshape(b, L, d) @ W_o")),
    # The cache is not checked: a cache of the repeated heads, or of another batch or d_head, fails inside
    # torch.cat with a RuntimeError (or broadcasts), not the ValueError the prompt asks for.
    "decode_step_cache_not_checked": ("ex4b_decode_step", _edit(_DECODE, _CACHE_CHECK, "")),
}
