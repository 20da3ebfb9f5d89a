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
