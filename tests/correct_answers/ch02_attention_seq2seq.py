"""Correct answers for chapter 2, written differently from the solution: each must get full marks.

``CORRECT = {exercise: {name: source}}``; each source replaces the whole answer cell.
"""

CORRECT = {
    "ex1_additive": {
        "einsum": '''def additive_score(query, UH, W, v):
    return torch.einsum("bsa,a->bs", torch.tanh(torch.einsum("bn,an->ba", query, W).unsqueeze(1) + UH), v)
''',
        "a loop over source positions, multiply and sum": '''def additive_score(query, UH, W, v):
    Ws = torch.matmul(W, query.unsqueeze(-1)).squeeze(-1)      # (batch, n_a)
    cols = [(torch.tanh(Ws + UH[:, j]) * v).sum(dim=-1) for j in range(UH.shape[1])]
    return torch.stack(cols, dim=1)
''',
    },
    "ex2_luong_scores": {
        "bmm": '''def dot_score(query, keys):
    return torch.bmm(keys, query.unsqueeze(2)).squeeze(2)


def general_score(query, keys, W_a):
    return torch.bmm(keys, (query @ W_a).unsqueeze(2)).squeeze(2)
''',
        "einsum, W_a applied to the keys": '''def dot_score(query, keys):
    return torch.einsum("bd,bsd->bs", query, keys)


def general_score(query, keys, W_a):
    projected = keys @ W_a.T                       # (batch, S, d_q): W_a h_s for every s
    return torch.einsum("bq,bsq->bs", query, projected)
''',
    },
    "ex3_masked_softmax": {
        "torch.softmax after -inf, empty rows filled with 0 first": '''def masked_softmax(scores, mask):
    m = mask.expand(scores.shape)
    has_real = m.any(dim=-1, keepdim=True)
    filled = scores.masked_fill(~m, float("-inf")).masked_fill(~has_real, 0.0)
    return torch.softmax(filled, dim=-1) * m
''',
        "a finite fill, a detached maximum, times the mask": '''def masked_softmax(scores, mask):
    lowest = torch.finfo(scores.dtype).min
    filled = torch.where(mask, scores, torch.full_like(scores, lowest))
    shifted = filled - filled.amax(dim=-1, keepdim=True).detach()
    e = torch.exp(shifted) * mask
    return e / e.sum(dim=-1, keepdim=True).clamp(min=1e-30)
''',
        "torch.where over a softmax that is NaN in empty rows (masked_fill stops the NaN gradient)": '''def masked_softmax(scores, mask):
    w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return torch.where(mask.any(dim=-1, keepdim=True), w, torch.zeros_like(w))
''',
        "-1e9 fill, empty rows zeroed": '''def masked_softmax(scores, mask):
    w = torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)
    return w * mask.any(dim=-1, keepdim=True) * mask
''',
    },
    "ex4_context": {
        "einsum": '''def context_vector(weights, values):
    return torch.einsum("bs,bsd->bd", weights, values)
''',
        "bmm": '''def context_vector(weights, values):
    return torch.bmm(weights.unsqueeze(1), values).squeeze(1)
''',
    },
    "ex5_local_window": {
        "python loops": '''def local_m_mask(t, lengths, D, src_len):
    rows = []
    for tb, lb in zip(t.tolist(), lengths.tolist()):
        p = min(tb, lb - 1)
        rows.append([p - D <= j <= p + D and j < lb for j in range(src_len)])
    return torch.tensor(rows, dtype=torch.bool).reshape(len(rows), src_len)
''',
        "torch.where for the clamp, two comparisons for the window": '''def local_m_mask(t, lengths, D, src_len):
    p = torch.where(t < lengths, t, lengths - 1).unsqueeze(1)
    j = torch.arange(src_len).expand(t.shape[0], src_len)
    return (j >= p - D) & (j <= p + D) & (j < lengths.unsqueeze(1))
''',
    },
    "ex6_decoder_step": {
        "the model's layers called directly, bmm for the context": '''def attention_decoder_step(model, prev_tokens, s_prev, memory, UH, mask):
    e = torch.tanh(model.W_a(s_prev).unsqueeze(1) + UH) @ model.v_a
    e = e.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(e, dim=-1)
    context = torch.bmm(weights.unsqueeze(1), memory).squeeze(1)
    s = model.cell(torch.cat([model.embedding(prev_tokens), context], dim=1), s_prev)
    return model.out(torch.cat([s, context], dim=1)), s, weights
''',
        "the learner's own functions of exercises 1, 3 and 4": '''def attention_decoder_step(model, prev_tokens, s_prev, memory, UH, mask):
    weights = masked_softmax(additive_score(s_prev, UH, model.W_a.weight, model.v_a), mask)
    context = context_vector(weights, memory)
    x = torch.cat((model.embedding(prev_tokens), context), -1)
    s = model.cell(x, s_prev)
    logits = model.out(torch.cat((s, context), -1))
    return logits, s, weights
''',
    },
    "ex7_teacher_forced": {
        "model.encode and the learner's step of exercise 6": '''def bahdanau_teacher_forced(model, src, src_lengths, tgt_in):
    if tgt_in.ndim != 2 or tgt_in.dtype not in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
        raise ValueError("tgt_in: expected a 2-d integer tensor")
    if src.ndim != 2 or len(src) != len(tgt_in):
        raise ValueError("src and tgt_in must have the same batch")
    if src_lengths.shape != (len(src),):
        raise ValueError("src_lengths must have shape (batch,)")
    st = model.encode(src, src_lengths)
    s, logits, weights = st["hidden"], [], []
    for i in range(tgt_in.shape[1]):
        lg, s, w = attention_decoder_step(model, tgt_in[:, i], s, st["memory"], st["keys"], st["mask"])
        logits.append(lg)
        weights.append(w)
    return torch.stack(logits, dim=1), torch.stack(weights, dim=1)
''',
        "embeddings once, the output layer once over all steps, einsum scores": '''def bahdanau_teacher_forced(model, src, src_lengths, tgt_in):
    if tgt_in.ndim != 2 or tgt_in.dtype not in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
        raise ValueError("tgt_in: expected a 2-d integer tensor")
    if src.ndim != 2 or len(src) != len(tgt_in):
        raise ValueError("src and tgt_in must have the same batch")
    if src_lengths.shape != (len(src),):
        raise ValueError("src_lengths must have shape (batch,)")
    enc, s = model.encoder(src, src_lengths)
    memory = model.memory_proj(enc)
    UH = model.U_a(memory)
    real = torch.arange(src.shape[1])[None, :] < src_lengths[:, None]
    emb = model.embedding(tgt_in)
    states, contexts, weights = [], [], []
    for x in emb.unbind(1):
        e = torch.einsum("bsh,h->bs", torch.tanh(UH + (s @ model.W_a.weight.T)[:, None, :]), model.v_a)
        w = torch.softmax(e.masked_fill(~real, float("-inf")), dim=-1)
        c = torch.einsum("bs,bsh->bh", w, memory)
        s = model.cell(torch.cat([x, c], -1), s)
        states.append(s)
        contexts.append(c)
        weights.append(w)
    logits = model.out(torch.cat([torch.stack(states, 1), torch.stack(contexts, 1)], -1))
    return logits, torch.stack(weights, 1)
''',
    },
}
