"""Correct answers to chapter 7's exercises, written differently from the solution.

Each source replaces the whole answer cell and must get full marks: other ways of building the mask
(``tril``, a loop, ``operator.index``-free type checks), of drawing BERT's corruption (index assignment,
a loop over positions, ``torch.where`` chains), of filtering logits (Hugging Face's way: a threshold at
the k-th value and an ascending sort for top-p; a loop over rows; float64 masses), of cutting patches
(``Tensor.unfold``, ``einops``-style reshapes, a loop that keeps the dtype) and of the ViT's forward
pass (``model.stack`` called as a whole, ``einsum`` for the patch embedding, the class token by
``repeat``).
"""

CORRECT = {
    "ex1_prefix_mask": {
        "tril and a prefix block": '''def prefix_lm_mask(L, prefix_len):
    if type(prefix_len) is not int:
        raise TypeError(f"prefix_len must be an int, got {type(prefix_len).__name__}")
    if prefix_len < 0 or prefix_len > L:
        raise ValueError(f"prefix_len must lie in [0, {L}], got {prefix_len}")
    mask = torch.tril(torch.ones(L, L, dtype=torch.bool))
    mask[:, :prefix_len] = True
    return mask
''',
        "a loop over queries and keys": '''def prefix_lm_mask(L, prefix_len):
    if not isinstance(prefix_len, int) or isinstance(prefix_len, bool):
        raise ValueError("prefix_len must be an int")
    if not 0 <= prefix_len <= L:
        raise ValueError("prefix_len must be in [0, L]")
    mask = torch.zeros(L, L, dtype=torch.bool)
    for i in range(L):
        for j in range(L):
            mask[i, j] = j < prefix_len or j <= i
    return mask
''',
        "course_utils' check_int and a causal mask": '''def prefix_lm_mask(L, prefix_len):
    from course_utils._validate import check_int
    check_int(prefix_len, "prefix_len", 0, L)
    causal = torch.ones(L, L).tril().bool()
    prefix = torch.arange(L).lt(prefix_len).expand(L, L)
    return causal | prefix
''',
    },
    "ex2_mlm_corrupt": {
        "index assignment on a clone": '''def mlm_corrupt_batch(tokens, mask_id, vocab_size, generator, p=0.15, first_regular_id=6):
    u = torch.rand(tokens.shape, generator=generator)
    action = torch.rand(tokens.shape, generator=generator)
    random_tokens = torch.randint(first_regular_id, vocab_size, tokens.shape, generator=generator)
    chosen = (u < p) & (tokens >= first_regular_id)
    inputs = tokens.clone()
    inputs[chosen & (action < 0.8)] = mask_id
    swap = chosen & (action >= 0.8) & (action < 0.9)
    inputs[swap] = random_tokens[swap]
    labels = torch.full_like(tokens, -100)
    labels[chosen] = tokens[chosen]
    return inputs, labels
''',
        "a loop over positions": '''def mlm_corrupt_batch(tokens, mask_id, vocab_size, generator, p=0.15, first_regular_id=6):
    B, L = tokens.shape
    u = torch.rand(B, L, generator=generator)
    action = torch.rand(B, L, generator=generator)
    random_tokens = torch.randint(first_regular_id, vocab_size, (B, L), generator=generator)
    inputs = tokens.clone()
    labels = torch.full((B, L), families.IGNORE_INDEX, dtype=tokens.dtype)
    for b in range(B):
        for t in range(L):
            tok = int(tokens[b, t])
            if tok < first_regular_id or not u[b, t] < p:
                continue
            labels[b, t] = tok
            if action[b, t] < 0.8:
                inputs[b, t] = mask_id
            elif action[b, t] < 0.9:
                inputs[b, t] = random_tokens[b, t]
    return inputs, labels
''',
        "torch.where chain": '''def mlm_corrupt_batch(tokens, mask_id, vocab_size, generator, p=0.15, first_regular_id=6):
    maskable = tokens.ge(first_regular_id)
    chosen = maskable.logical_and(torch.rand(tokens.size(), generator=generator).lt(p))
    action = torch.rand(tokens.size(), generator=generator)
    random_tokens = torch.randint(low=first_regular_id, high=vocab_size, size=tokens.size(), generator=generator,
                                  dtype=tokens.dtype)
    replaced = torch.where(action < 0.8, torch.full_like(tokens, mask_id),
                           torch.where(action < 0.9, random_tokens, tokens))
    inputs = torch.where(chosen, replaced, tokens)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels
''',
    },
    "ex3_filter_logits": {
        "Hugging Face's way (threshold at the k-th value, ascending sort)": '''def filter_logits(logits, top_k=None, top_p=None):
    scores = logits
    if top_k is not None:
        k = min(top_k, scores.size(-1))
        kth = torch.topk(scores, k)[0][..., -1, None]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:   # 1 keeps all (generate adds no warper)
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        sorted_to_remove = cumulative_probs <= (1 - top_p)
        sorted_to_remove[..., -1:] = False
        to_remove = sorted_to_remove.scatter(-1, sorted_indices, sorted_to_remove)
        scores = scores.masked_fill(to_remove, float("-inf"))
    return scores
''',
        "rows one by one, masses in float64": '''def filter_logits(logits, top_k=None, top_p=None):
    V = logits.shape[-1]
    rows = logits.reshape(-1, V)
    out = torch.full_like(rows, float("-inf"))
    for r in range(rows.shape[0]):
        z = rows[r]
        keep = torch.ones(V, dtype=torch.bool)
        if top_k is not None and top_k < V:
            keep = torch.zeros(V, dtype=torch.bool)
            keep[torch.topk(z, top_k).indices] = True
        if top_p is not None and top_p < 1.0:   # 1 keeps all (generate adds no warper)
            probs = torch.where(keep, z, torch.tensor(float("-inf"), dtype=z.dtype)).double().softmax(-1)
            order = torch.argsort(probs, descending=True, stable=True)
            mass = 0.0
            kept_p = torch.zeros(V, dtype=torch.bool)
            for idx in order.tolist():
                if mass < top_p:
                    kept_p[idx] = True
                mass += probs[idx].item()
            keep = keep & kept_p
        out[r][keep] = z[keep]
    return out.reshape(logits.shape)
''',
        "a sorted view, exclusive cumsum by shifting": '''def filter_logits(logits, top_k=None, top_p=None):
    out = logits.clone()
    if top_k is not None:
        k = min(top_k, out.shape[-1])
        values, _ = out.sort(dim=-1, descending=True)
        out = torch.where(out >= values[..., k - 1:k], out, torch.full_like(out, float("-inf")))
    if top_p is not None and top_p < 1.0:   # 1 keeps all (generate adds no warper)
        values, order = out.sort(dim=-1, descending=True)
        probs = torch.softmax(values, dim=-1)
        before = torch.cat([torch.zeros_like(probs[..., :1]), probs.cumsum(-1)[..., :-1]], dim=-1)
        remove_sorted = before >= top_p
        remove = torch.empty_like(remove_sorted).scatter(-1, order, remove_sorted)
        out = out.masked_fill(remove, float("-inf"))
    return out
''',
    },
    "ex4_patchify": {
        "Tensor.unfold twice": '''def patchify(images, patch):
    B, C, H, W = images.shape
    x = images.unfold(2, patch, patch).unfold(3, patch, patch)     # (B, C, H/p, W/p, p, p)
    x = x.permute(0, 2, 3, 1, 4, 5)
    return x.reshape(B, -1, C * patch * patch)
''',
        "a loop over patches that keeps the dtype": '''def patchify(images, patch):
    B, C, H, W = images.shape
    gh, gw = H // patch, W // patch
    out = images.new_zeros(B, gh * gw, C * patch * patch)
    for r in range(gh):
        for c in range(gw):
            block = images[:, :, r * patch:(r + 1) * patch, c * patch:(c + 1) * patch]
            out[:, r * gw + c] = block.reshape(B, -1)
    return out
''',
        "stack of slices": '''def patchify(images, patch):
    B, C, H, W = images.shape
    rows = []
    for top in range(0, H, patch):
        for left in range(0, W, patch):
            rows.append(images[..., top:top + patch, left:left + patch].flatten(1))
    return torch.stack(rows, dim=1)
''',
    },
    "ex5_vit_forward": {
        "model.stack called as a whole": '''def vit_forward(model, images):
    tokens = model.patch_embed(patches_of(images, model.cfg.patch))
    cls = model.cls_token.repeat(images.shape[0], 1, 1)
    x = model.positions(torch.cat((cls, tokens), dim=1))
    return model.head(model.stack(x).x[:, 0])
''',
        "einsum patch embedding, explicit position weights": '''def vit_forward(model, images):
    B = images.shape[0]
    patches = vit.patchify(images, model.cfg.patch)
    x = torch.einsum("bnf,df->bnd", patches, model.patch_embed.weight) + model.patch_embed.bias
    x = torch.cat([model.cls_token.expand(B, 1, -1), x], dim=1)
    x = x + model.positions.embedding.weight[: x.shape[1]]
    for block in model.stack.layers:
        x = block(x)[0]
    x = model.stack.norm(x)
    return model.head(x[:, 0, :])
''',
        "norm on the class token only": '''def vit_forward(model, images):
    x = model.patch_embed(patches_of(images, model.cfg.patch))
    x = torch.cat([model.cls_token.expand(len(images), -1, -1), x], 1)
    x = model.positions(x)
    for layer in model.stack.layers:
        x, _, _ = layer(x)
    cls_state = model.stack.norm(x[:, :1])[:, 0]
    return model.head(cls_state)
''',
    },
}
