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

HIDDEN_ONLY = {
    # Hands the work to the course_utils reference: right values, not the learner's code.
    "ex1_additive": '''def additive_score(query, UH, W, v):
    return ra.additive_score(query, UH, W, v)
''',
    # general_score multiplies by W_a^T: right for the symmetric W_a of the visible tests, and
    # only defined when d_q == d_k.
    "ex2_luong_scores": '''def dot_score(query, keys):
    return (keys * query[:, None, :]).sum(-1)


def general_score(query, keys, W_a):
    return ((keys @ W_a) * query[:, None, :]).sum(-1)
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
    # Hands the step to the model's own reference step.
    "ex6_decoder_step": '''def attention_decoder_step(model, prev_tokens, s_prev, memory, UH, mask):
    state = {"hidden": s_prev, "memory": memory, "keys": UH, "mask": mask,
             "step": torch.zeros(len(prev_tokens), dtype=torch.long), "lengths": mask.sum(-1)}
    logits, state = model.bahdanau_step(prev_tokens, state)
    return logits, state["hidden"], state["weights"]
''',
}
