"""Typical wrong answers for chapter 7.

``EXERCISE``/``SOURCE``: a prefix-LM mask that applies the prefix on the query side instead of the
key side: the prefix positions see the whole sequence, the future included; the visible tests
catch it (a prefix of 2 in 5 positions), and so do the hidden ones.

``HIDDEN_ONLY``: for each exercise, a wrong answer that passes the visible tests and fails the
hidden ones.

``MORE_WRONG``: top-k/top-p filtering that writes ``-inf`` into the logits it was given (right
values returned, the caller's tensor spoiled): it used to pass every graded test and fail only the
chapter's probe; the visible and the hidden tests now check that the input is left unchanged.
"""

EXERCISE = "ex1_prefix_mask"
SOURCE = '''def prefix_lm_mask(L, prefix_len):
    if not 0 <= prefix_len <= L:
        raise ValueError(f"prefix_len must be in [0, {L}]")
    idx = torch.arange(L)
    return (idx[:, None] < prefix_len) | (idx[None, :] <= idx[:, None])
'''

HIDDEN_ONLY = {
    # right for every valid prefix length, but a prefix longer than L (or negative) gives a mask
    # instead of an error
    "ex1_prefix_mask": '''def prefix_lm_mask(L, prefix_len):
    keys = torch.arange(L)
    return (keys[None, :] < prefix_len) | (keys[None, :] <= keys[:, None])
''',
    # every position may be chosen, [CLS] and padding included (and the input is left unchanged)
    "ex2_mlm_corrupt": '''def mlm_corrupt_batch(tokens, mask_id, vocab_size, generator, p=0.15, first_regular_id=6):
    chosen = torch.rand(tokens.shape, generator=generator) < p
    action = torch.rand(tokens.shape, generator=generator)
    random_tokens = torch.randint(first_regular_id, vocab_size, tokens.shape, generator=generator)
    inputs = tokens.masked_fill(chosen & (action < 0.8), mask_id)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_tokens, inputs)
    labels = tokens.masked_fill(~chosen, -100)
    return inputs, labels
''',
    # top-p measured on the distribution before top-k, and the two filters intersected
    "ex3_filter_logits": '''def filter_logits(logits, top_k=None, top_p=None):
    keep = torch.ones_like(logits, dtype=torch.bool)
    if top_k is not None and top_k < logits.shape[-1]:
        keep &= torch.zeros_like(keep).scatter_(-1, logits.topk(top_k, dim=-1).indices, True)
    if top_p is not None:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True, stable=True)
        probs = sorted_logits.softmax(-1)
        keep_sorted = probs.cumsum(-1) - probs < top_p
        keep_sorted[..., 0] = True
        keep &= torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))
''',
    # the features inside a patch ordered row, column, channel: right only for one channel
    "ex4_patchify": '''def patchify(images, patch):
    B, C, H, W = images.shape
    x = images.reshape(B, C, H // patch, patch, W // patch, patch)
    x = x.permute(0, 2, 4, 3, 5, 1)
    return x.reshape(B, (H // patch) * (W // patch), C * patch * patch)
''',
    # the model called as a whole instead of built from its modules
    "ex5_vit_forward": '''def vit_forward(model, images):
    return model(images)
''',
}

MORE_WRONG = {
    "filter_in_place": ("ex3_filter_logits", '''def filter_logits(logits, top_k=None, top_p=None):
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits[logits < kth] = float("-inf")
    if top_p is not None:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True, stable=True)
        probs = sorted_logits.softmax(-1)
        remove_sorted = probs.cumsum(-1) - probs >= top_p
        remove_sorted[..., 0] = False
        logits[torch.zeros_like(remove_sorted).scatter_(-1, order, remove_sorted)] = float("-inf")
    return logits
'''),
}

# Wrong answers from the review of issue 30 (each used to get full marks on its exercise), and one or
# more of the same kind that the old hidden tests missed too. Every one must lose points.
REVIEWED = {
    # ex1, reviewed: only the range is checked, so prefix_lm_mask(5, 2.5) returns a mask instead of
    # raising (the old tests tried the ints 5 and -1 only).
    "prefix_float_accepted": ("ex1_prefix_mask", '''def prefix_lm_mask(L, prefix_len):
    if not 0 <= prefix_len <= L:
        raise ValueError(f"prefix_len must be in [0, {L}]")
    keys = torch.arange(L)
    return (keys[None, :] < prefix_len) | (keys[None, :] <= keys[:, None])
'''),
    # ex1: a whole float such as 2.0 passes as an int (the prompt says a float raises, even 2.0).
    "prefix_whole_float_accepted": ("ex1_prefix_mask", '''def prefix_lm_mask(L, prefix_len):
    if prefix_len != int(prefix_len) or not 0 <= prefix_len <= L:
        raise ValueError(f"prefix_len must be an int in [0, {L}]")
    keys = torch.arange(L)
    return (keys[None, :] < int(prefix_len)) | (keys[None, :] <= keys[:, None])
'''),
    # ex1: the prefix length cast with int(): 2.5 silently becomes 2.
    "prefix_int_cast": ("ex1_prefix_mask", '''def prefix_lm_mask(L, prefix_len):
    prefix_len = int(prefix_len)
    if not 0 <= prefix_len <= L:
        raise ValueError(f"prefix_len must be in [0, {L}]")
    mask = torch.tril(torch.ones(L, L, dtype=torch.bool))
    mask[:, :prefix_len] = True
    return mask
'''),
    # ex2, reviewed: the special tokens excluded by name (padding, <sos>, [CLS], [MASK]) instead of
    # every id below first_regular_id: <eos> and <unk> get chosen (no old test batch contained them).
    "specials_by_name": ("ex2_mlm_corrupt", '''def mlm_corrupt_batch(tokens, mask_id, vocab_size, generator, p=0.15, first_regular_id=6):
    maskable = (tokens != PAD_ID) & (tokens != data.SOS_ID) & (tokens != CLS_ID) & (tokens != MASK_ID)
    chosen = maskable & (torch.rand(tokens.shape, generator=generator) < p)
    action = torch.rand(tokens.shape, generator=generator)
    random_tokens = torch.randint(first_regular_id, vocab_size, tokens.shape, generator=generator)
    inputs = tokens.masked_fill(chosen & (action < 0.8), mask_id)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_tokens, inputs)
    labels = tokens.masked_fill(~chosen, -100)
    return inputs, labels
'''),
    # ex2: the toy vocabulary's first word id (6) hard-coded instead of the argument first_regular_id.
    "first_regular_id_hardcoded": ("ex2_mlm_corrupt", '''def mlm_corrupt_batch(tokens, mask_id, vocab_size, generator, p=0.15, first_regular_id=6):
    chosen = (tokens >= data.TOY_FIRST_WORD_ID) & (torch.rand(tokens.shape, generator=generator) < p)
    action = torch.rand(tokens.shape, generator=generator)
    random_tokens = torch.randint(first_regular_id, vocab_size, tokens.shape, generator=generator)
    inputs = tokens.masked_fill(chosen & (action < 0.8), mask_id)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_tokens, inputs)
    labels = tokens.masked_fill(~chosen, -100)
    return inputs, labels
'''),
    # ex2: only padding excluded ("the other specials never occur inside a sentence").
    "only_padding_excluded": ("ex2_mlm_corrupt", '''def mlm_corrupt_batch(tokens, mask_id, vocab_size, generator, p=0.15, first_regular_id=6):
    chosen = (tokens != 0) & (torch.rand(tokens.shape, generator=generator) < p)
    action = torch.rand(tokens.shape, generator=generator)
    random_tokens = torch.randint(first_regular_id, vocab_size, tokens.shape, generator=generator)
    inputs = tokens.clone()
    inputs[chosen & (action < 0.8)] = mask_id
    swap = chosen & (action >= 0.8) & (action < 0.9)
    inputs[swap] = random_tokens[swap]
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels
'''),
    # ex3: the logits turned into float32 first: float64 logits come back as float32 (and rounded).
    "filter_float32_result": ("ex3_filter_logits", '''def filter_logits(logits, top_k=None, top_p=None):
    logits = logits.float()
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True, stable=True)
        probs = sorted_logits.softmax(-1)
        keep_sorted = probs.cumsum(-1) - probs < top_p
        keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
        logits = logits.masked_fill(~keep, float("-inf"))
    return logits
'''),
    # ex3: the softmax written out without subtracting the maximum: logits around 200 overflow in
    # float32 (inf / inf = NaN), and top-p then drops every token but the first.
    "filter_naive_softmax": ("ex3_filter_logits", '''def filter_logits(logits, top_k=None, top_p=None):
    out = logits
    if top_k is not None and top_k < out.shape[-1]:
        kth = out.topk(top_k, dim=-1).values[..., -1:]
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, order = torch.sort(out, dim=-1, descending=True, stable=True)
        e = torch.exp(sorted_logits)
        probs = e / e.sum(-1, keepdim=True)
        keep_sorted = probs.cumsum(-1) - probs < top_p
        keep_sorted[..., 0] = True
        keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
        out = out.masked_fill(~keep, float("-inf"))
    return out
'''),
    # ex3: Hugging Face's top-p copied with scatter(1, ...): right for (batch, V) logits only; one row
    # (V,) or (batch, T, V) logits fail.
    "filter_scatter_dim1": ("ex3_filter_logits", '''def filter_logits(logits, top_k=None, top_p=None):
    scores = logits
    if top_k is not None:
        kth = torch.topk(scores, min(top_k, scores.size(-1)))[0][..., -1, None]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        sorted_to_remove = cumulative_probs <= (1 - top_p)
        sorted_to_remove[..., -1:] = False
        to_remove = sorted_to_remove.scatter(1, sorted_indices, sorted_to_remove)
        scores = scores.masked_fill(to_remove, float("-inf"))
    return scores
'''),
    # ex4: a loop into a float32 buffer: float64 images come back as float32.
    "patchify_float32_buffer": ("ex4_patchify", '''def patchify(images, patch):
    B, C, H, W = images.shape
    gh, gw = H // patch, W // patch
    out = torch.zeros(B, gh * gw, C * patch * patch)
    for r in range(gh):
        for c in range(gw):
            out[:, r * gw + c] = images[:, :, r * patch:(r + 1) * patch, c * patch:(c + 1) * patch].reshape(B, -1)
    return out
'''),
    # ex5: the class token's state taken with squeeze(): a batch of one image loses its batch axis,
    # (n_classes,) instead of (1, n_classes).
    "vit_squeeze_batch": ("ex5_vit_forward", '''def vit_forward(model, images):
    x = model.patch_embed(patches_of(images, model.cfg.patch))
    x = torch.cat([model.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
    x = model.positions(x)
    for layer in model.stack.layers:
        x = layer(x).x
    return model.head(model.stack.norm(x)[:, :1].squeeze())
'''),
    # Issue 54: only Python floats rejected (isinstance(x, float)): numpy.float32(2.5), torch.tensor(2.5),
    # numpy.int64(2) and True return a mask, where the prompt says only a Python int is an int.
    "prefix_only_python_float_rejected": ("ex1_prefix_mask", '''def prefix_lm_mask(L, prefix_len):
    if isinstance(prefix_len, (float, str)) or prefix_len is None or not 0 <= prefix_len <= L:
        raise ValueError(f"prefix_len must be an int in [0, {L}], got {prefix_len!r}")
    keys = torch.arange(L)
    return (keys[None, :] < prefix_len) | (keys[None, :] <= keys[:, None])
'''),
    # Issue 54: numbers.Integral accepts NumPy integers (and bool when not excluded): numpy.int64(2)
    # returns a mask, but the prompt counts only a Python int as an int.
    "prefix_integral_accepted": ("ex1_prefix_mask", '''import numbers


def prefix_lm_mask(L, prefix_len):
    if isinstance(prefix_len, bool) or not isinstance(prefix_len, numbers.Integral) or not 0 <= prefix_len <= L:
        raise ValueError(f"prefix_len must be an int in [0, {L}], got {prefix_len!r}")
    keys = torch.arange(L)
    return (keys[None, :] < prefix_len) | (keys[None, :] <= keys[:, None])
'''),
    # Issue 54: the old solution: top-p applied at top_p = 1 too, so a saturated float32 row
    # ([0, -20, -21, -22]: mass 1.0 after the first token) keeps 1 entry where 1 keeps every entry.
    "top_p_one_on_saturated_row": ("ex3_filter_logits", '''def filter_logits(logits, top_k=None, top_p=None):
    if top_k is not None and top_k < logits.shape[-1]:
        keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, logits.topk(top_k, dim=-1).indices, True)
        logits = logits.masked_fill(~keep, float("-inf"))
    if top_p is not None:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        keep_sorted = probs.cumsum(-1) - probs < top_p
        keep_sorted[..., 0] = True
        keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
        logits = logits.masked_fill(~keep, float("-inf"))
    return logits
'''),
}
