"""Wrong answers for chapter 2.

``EXERCISE``/``SOURCE``: the masked softmax that fills padding with -1e9. It gives the right
weights while a row has at least one real position, but a row of all padding gets uniform
weights (1/S on every padded key) instead of zeros (the visible tests catch it).

``HIDDEN_ONLY``: for every exercise, a plausible wrong answer that passes the visible tests and
fails the hidden ones, so each hidden test is shown to catch something.
"""

EXERCISE = "ex3_masked_softmax"
SOURCE = """def masked_softmax(scores, mask):
    \"\"\"Softmax over the last axis where mask is True.\"\"\"
    return torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)
"""

# Exercise 7's reviewed wrong answers are one edit each of this right answer.
_TF = '''def bahdanau_teacher_forced(model, src, src_lengths, tgt_in):
    if tgt_in.dim() != 2 or tgt_in.is_floating_point() or tgt_in.dtype == torch.bool:
        raise ValueError("tgt_in must be a 2-d integer tensor")
    if src.dim() != 2 or src.shape[0] != tgt_in.shape[0]:
        raise ValueError("src must have as many rows as tgt_in")
    if src_lengths.dim() != 1 or src_lengths.shape[0] != src.shape[0]:
        raise ValueError("src_lengths must be 1-d, one per row of src")
    st = model.encode(src, src_lengths)
    memory, UH, mask, s = st["memory"], st["keys"], st["mask"], st["hidden"]
    logits, weights = [], []
    for i in range(tgt_in.shape[1]):
        w = attention.masked_softmax(ra.additive_score(s, UH, model.W_a.weight, model.v_a), mask)
        c = ra.context_vector(w, memory)
        s = model.cell(torch.cat([model.embedding(tgt_in[:, i]), c], 1), s)
        logits.append(model.out(torch.cat([s, c], 1)))
        weights.append(w)
    return torch.stack(logits, 1), torch.stack(weights, 1)
'''
_TF_STEP = """    for i in range(tgt_in.shape[1]):
        w = attention.masked_softmax(ra.additive_score(s, UH, model.W_a.weight, model.v_a), mask)
        c = ra.context_vector(w, memory)
        s = model.cell(torch.cat([model.embedding(tgt_in[:, i]), c], 1), s)
"""


def _edit(source: str, old: str, new: str) -> str:
    """``source`` with its one occurrence of ``old`` replaced (a wrong answer one edit away from a right one)."""
    if source.count(old) != 1:
        raise ValueError(f"{old!r} occurs {source.count(old)} times")
    return source.replace(old, new)


HIDDEN_ONLY = {
    # Computes in float32 "to be safe": right for float32 inputs, float64 ones come back as float32.
    "ex1_additive": '''def additive_score(query, UH, W, v):
    Ws = query.float() @ W.float().T
    return torch.tanh(Ws[:, None, :] + UH.float()) @ v.float()
''',
    # general_score projects the query into a tensor shaped like the query: right while d_q == d_k (the
    # visible tests), a broadcasting error otherwise (the hidden tests and the chapter's probe have d_q != d_k).
    "ex2_luong_scores": '''def dot_score(query, keys):
    return (keys * query[:, None, :]).sum(-1)


def general_score(query, keys, W_a):
    proj = torch.zeros_like(query)              # shaped like the query: assumes d_k == d_q
    for i in range(query.shape[-1]):
        proj = proj + query[:, i:i + 1] * W_a[i]
    return (keys * proj[:, None, :]).sum(-1)
''',
    # No subtraction of the row maximum: exp(1000) overflows to inf and the row becomes NaN.
    "ex3_masked_softmax": '''def masked_softmax(scores, mask):
    exp = torch.exp(scores.masked_fill(~mask, float("-inf")))
    return exp / exp.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(scores.dtype).tiny)
''',
    # Uses the first sentence's weights for every sentence of the batch.
    "ex4_context": '''def context_vector(weights, values):
    return weights[0] @ values
''',
    # Builds the positions from the longest sentence instead of the padded length src_len.
    "ex5_local_window": '''def local_m_mask(t, lengths, D, src_len):
    centre = torch.minimum(t, lengths - 1)[:, None]
    j = torch.arange(int(lengths.max()))[None, :]
    return ((j - centre).abs() <= D) & (j < lengths[:, None])
''',
    # A bare squeeze() on the context: with one sentence in the batch the batch axis goes too.
    "ex6_decoder_step": '''def attention_decoder_step(model, prev_tokens, s_prev, memory, UH, mask):
    weights = attention.masked_softmax(ra.additive_score(s_prev, UH, model.W_a.weight, model.v_a), mask)
    context = (weights[:, None, :] @ memory).squeeze()
    s = model.cell(torch.cat([model.embedding(prev_tokens), context], dim=1), s_prev)
    return model.out(torch.cat([s, context], dim=1)), s, weights
''',
    # Checks only the cases the visible test tries (a float tgt_in, a batch mismatch, src_lengths of another
    # length): a 1-d, 3-d or bool tgt_in and a 2-d src_lengths or 1-d src are let through (the hidden tests).
    "ex7_teacher_forced": '''def bahdanau_teacher_forced(model, src, src_lengths, tgt_in):
    if tgt_in.is_floating_point():
        raise ValueError("tgt_in must hold token ids")
    if len(src) != len(tgt_in):
        raise ValueError("src and tgt_in: different batches")
    if len(src_lengths) != len(src):
        raise ValueError("src_lengths: one length per sentence")
    st = model.encode(src, src_lengths.reshape(-1))
    s, logits, weights = st["hidden"], [], []
    for i in range(tgt_in.shape[-1]):
        w = attention.masked_softmax(ra.additive_score(s, st["keys"], model.W_a.weight, model.v_a), st["mask"])
        c = ra.context_vector(w, st["memory"])
        s = model.cell(torch.cat([model.embedding(tgt_in[..., i].reshape(-1)), c], 1), s)
        logits.append(model.out(torch.cat([s, c], 1)))
        weights.append(w)
    return torch.stack(logits, 1), torch.stack(weights, 1)
''',
}

# Reviewers' plausible wrong answers (issue 30) that the old hidden tests gave full marks (or nearly
# did); each must lose points on its exercise: ``{name: (exercise, source)}``.
REVIEWED = {
    # Scores written into a float32 buffer: float64 inputs come back as float32.
    "additive_float32_buffer": ("ex1_additive", '''def additive_score(query, UH, W, v):
    scores = torch.zeros(UH.shape[0], UH.shape[1])
    Ws = query @ W.T
    for j in range(UH.shape[1]):
        scores[:, j] = torch.tanh(Ws + UH[:, j]) @ v
    return scores
'''),
    # squeeze() without an axis: a source of one position loses its axis.
    "additive_squeeze_all": ("ex1_additive", '''def additive_score(query, UH, W, v):
    Ws = query @ W.T
    return (torch.tanh(Ws[:, None, :] + UH) @ v[:, None]).squeeze()
'''),
    # Casts to float32 (to avoid a dtype mismatch): float64 scores lose their precision and dtype.
    "luong_cast_to_float32": ("ex2_luong_scores", '''def dot_score(query, keys):
    return torch.einsum("bd,bsd->bs", query.float(), keys.float())


def general_score(query, keys, W_a):
    return torch.einsum("bq,qk,bsk->bs", query.float(), W_a.float(), keys.float())
'''),
    # The row maximum taken before masking: a padded position with a score of 1000 makes every
    # real position underflow to 0 (and the row to all zeros).
    "softmax_max_before_masking": ("ex3_masked_softmax", '''def masked_softmax(scores, mask):
    exp = torch.exp(scores - scores.max(dim=-1, keepdim=True).values).masked_fill(~mask, 0.0)
    return exp / exp.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(scores.dtype).tiny)
'''),
    # Renormalises the weights: a row of zero weights (all padding) gives NaN instead of 0, and
    # weights that do not sum to one are changed.
    "context_renormalised": ("ex4_context", '''def context_vector(weights, values):
    w = weights / weights.sum(dim=-1, keepdim=True)
    return (w[..., None] * values).sum(dim=-2)
'''),
    # One centre for the whole batch, from the first sentence's t.
    "window_first_t": ("ex5_local_window", '''def local_m_mask(t, lengths, D, src_len):
    centre = torch.minimum(t[0], lengths - 1)[:, None]
    j = torch.arange(src_len)[None, :]
    return ((j - centre).abs() <= D) & (j < lengths[:, None])
'''),
    # The context before the embedding in the GRU cell's input: runs only when emb_dim == hidden.
    "step_context_first": ("ex6_decoder_step", '''def attention_decoder_step(model, prev_tokens, s_prev, memory, UH, mask):
    scores = ra.additive_score(s_prev, UH, model.W_a.weight, model.v_a)
    weights = attention.masked_softmax(scores, mask)
    context = ra.context_vector(weights, memory)
    s = model.cell(torch.cat([context, model.embedding(prev_tokens)], dim=-1), s_prev)
    logits = model.out(torch.cat([s, context], dim=-1))
    return logits, s, weights
'''),
    # Issue 54. Adds the value axis to the caller's ``weights`` in place (``unsqueeze_``): the first context is
    # right, the caller's weights come back (batch, S, 1); checks.call names ``weights`` and the rule.
    "context_unsqueezes_weights_in_place": ("ex4_context", '''def context_vector(weights, values):
    return (weights.unsqueeze_(-1) * values).sum(dim=1)
'''),
    # Issue 54. A general score with W_a on the wrong side (keys @ W_a^T against the query): right for a
    # symmetric W_a, which every visible case used before.
    "general_wa_transposed": ("ex2_luong_scores", '''def dot_score(query, keys):
    return (keys * query[:, None, :]).sum(-1)


def general_score(query, keys, W_a):
    return (keys * (query @ W_a.T)[:, None, :]).sum(-1)
'''),
    # Issue 54. A matrix product with the whole batch of queries: (batch, S, batch) squeezed, right for a batch
    # of 1 only, which every visible case used before.
    "luong_batch_of_one_only": ("ex2_luong_scores", '''def dot_score(query, keys):
    return (keys @ query.T).squeeze(-1)


def general_score(query, keys, W_a):
    return (keys @ (query @ W_a).T).squeeze(-1)
'''),
    # Exercise 7 (the rest of this dict): each one edit of ``_TF``, a right answer.
    # Scores with the new state s_i (computed first from the previous context): Luong's order, not Bahdanau's.
    "tf_scores_with_new_state": ("ex7_teacher_forced", _edit(_TF, _TF_STEP, """    c = torch.zeros_like(s)
    for i in range(tgt_in.shape[1]):
        s = model.cell(torch.cat([model.embedding(tgt_in[:, i]), c], 1), s)
        w = attention.masked_softmax(ra.additive_score(s, UH, model.W_a.weight, model.v_a), mask)
        c = ra.context_vector(w, memory)
""")),
    # Keys U_a h_j from the encoder's projected states recomputed as U_a applied to the state s instead of the memory: every position gets the same key.
    "tf_keys_from_encoder_states": ("ex7_teacher_forced", _edit(_TF, "ra.additive_score(s, UH,",
                                                                "ra.additive_score(s, model.U_a(s)[:, None, :].expand_as(memory),")),
    # A plain softmax: padding positions get weight.
    "tf_weights_not_masked": ("ex7_teacher_forced", _edit(_TF, "attention.masked_softmax(ra.additive_score(s, UH, model.W_a.weight, model.v_a), mask)",
                                                          "torch.softmax(ra.additive_score(s, UH, model.W_a.weight, model.v_a), -1)")),
    # The output layer reads [s_i; s_i]: the context left out of the read-out.
    "tf_logits_from_state_only": ("ex7_teacher_forced", _edit(_TF, "model.out(torch.cat([s, c], 1))", "model.out(torch.cat([s, s], 1))")),
    # Starts from the second target token: step i is fed tgt_in[:, i + 1] (and the last step the last token again).
    "tf_off_by_one": ("ex7_teacher_forced", _edit(_TF, "model.embedding(tgt_in[:, i])",
                                                  "model.embedding(tgt_in[:, min(i + 1, tgt_in.shape[1] - 1)])")),
    # No check of src_lengths' shape: a (B, 1) src_lengths runs (broadcast) instead of raising.
    "tf_no_validation_of_lengths": ("ex7_teacher_forced", _edit(_TF, """    if src_lengths.dim() != 1 or src_lengths.shape[0] != src.shape[0]:
        raise ValueError("src_lengths must be 1-d, one per row of src")
    st = model.encode(src, src_lengths)
""", """    st = model.encode(src, src_lengths.reshape(-1))
""")),
}
