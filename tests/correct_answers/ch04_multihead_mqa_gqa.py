"""Correct answers to chapter 4's exercises, written differently from the solution.

Each source replaces the whole answer cell and must get full marks: heads split with ``unflatten`` or
``chunk``/``stack`` and merged with ``flatten`` or ``cat``; multi-head attention as a loop over heads
(column slices of the weights) or written out with ``einsum``; ``repeat_kv`` as Hugging Face writes it
(``expand`` then ``reshape``), with ``index_select`` or a ``cat`` of expanded heads; cached attention
through PyTorch's fused ``F.scaled_dot_product_attention(..., enable_gqa=True)`` or written out with
``einsum``; the whole cached GQA step from the chapter's own parts, with ``einsum`` and PyTorch's fused
attention, or as a loop over key/value groups in float64; the cache bytes by ``math.prod``; the mean-pooling by ``unflatten`` or a loop over groups
in float64.
"""

CORRECT = {
    "ex1_split": {
        "unflatten and flatten": '''def split_heads(x, n_heads):
    return x.unflatten(-1, (n_heads, -1)).transpose(1, 2)


def merge_heads(x):
    return x.permute(0, 2, 1, 3).flatten(2)
''',
        "chunk/stack and unbind/cat": '''def split_heads(x, n_heads):
    return torch.stack(x.chunk(n_heads, dim=-1), dim=1)


def merge_heads(x):
    return torch.cat(x.unbind(dim=1), dim=-1)
''',
        "contiguous view": '''def split_heads(x, n_heads):
    batch, length, width = x.size()
    return x.reshape(batch, length, n_heads, width // n_heads).permute(0, 2, 1, 3).contiguous()


def merge_heads(x):
    batch, heads, length, d_head = x.size()
    return x.transpose(1, 2).contiguous().view(batch, length, heads * d_head)
''',
    },
    "ex2_mha": {
        "a loop over heads": '''def multi_head_attention(x, context, W_q, W_k, W_v, W_o, n_heads, mask=None):
    b, L_q, d = x.shape
    L_k, dh = context.shape[1], d // n_heads
    if mask is not None:
        mask = torch.broadcast_to(mask, (b, n_heads, L_q, L_k))
    outs, weights = [], []
    for i in range(n_heads):
        cols = slice(i * dh, (i + 1) * dh)
        out_i, w_i = attention.scaled_dot_product_attention(
            x @ W_q[:, cols], context @ W_k[:, cols], context @ W_v[:, cols],
            None if mask is None else mask[:, i])
        outs.append(out_i)
        weights.append(w_i)
    return torch.cat(outs, dim=-1) @ W_o, torch.stack(weights, dim=1)
''',
        "written out with einsum": '''def multi_head_attention(x, context, W_q, W_k, W_v, W_o, n_heads, mask=None):
    b, L_q, d = x.shape
    dh = d // n_heads
    q = (x @ W_q).view(b, L_q, n_heads, dh)
    k = (context @ W_k).view(b, -1, n_heads, dh)
    v = (context @ W_v).view(b, -1, n_heads, dh)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / dh ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    out = torch.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, L_q, d)
    return out @ W_o, weights
''',
    },
    "ex3_repeat_kv": {
        "Hugging Face's expand and reshape": '''def repeat_kv(x, n_rep):
    batch, n_kv_heads, T, d_head = x.shape
    if n_rep == 1:
        return x
    x = x[:, :, None, :, :].expand(batch, n_kv_heads, n_rep, T, d_head)
    return x.reshape(batch, n_kv_heads * n_rep, T, d_head)
''',
        "index_select": '''def repeat_kv(x, n_rep):
    idx = torch.arange(x.shape[1] * n_rep) // n_rep
    return x.index_select(1, idx)
''',
        "a cat of expanded heads": '''def repeat_kv(x, n_rep):
    return torch.cat([x[:, j:j + 1].expand(-1, n_rep, -1, -1) for j in range(x.shape[1])], dim=1)
''',
    },
    "ex4_cache": {
        "PyTorch's fused attention with enable_gqa": '''def attend_with_cache(q, k_new, v_new, cache=None):
    k, v = (k_new, v_new) if cache is None else (torch.cat((cache[0], k_new), -2), torch.cat((cache[1], v_new), -2))
    mask = attention.causal_mask(q.shape[-2], k.shape[-2])
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return out, (k, v)
''',
        "written out with einsum": '''def attend_with_cache(q, k_new, v_new, cache=None):
    if cache is None:
        k, v = k_new, v_new
    else:
        k, v = torch.cat([cache[0], k_new], dim=2), torch.cat([cache[1], v_new], dim=2)
    rep = q.shape[1] // k.shape[1]
    kr, vr = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    L_new, L = q.shape[2], k.shape[2]
    scores = torch.einsum("bhqd,bhkd->bhqk", q, kr) / math.sqrt(q.shape[-1])
    future = torch.arange(L)[None, :] > torch.arange(L - L_new, L)[:, None]
    weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    return torch.einsum("bhqk,bhkd->bhqd", weights, vr), (k, v)
''',
    },
    "ex4b_decode_step": {
        "from the chapter's own parts (split_heads, attend_with_cache, merge_heads)": '''def gqa_decode_step(x_new, W_q, W_k, W_v, W_o, n_heads, n_kv_heads, cache=None):
    if x_new.dim() != 3:
        raise ValueError("x_new must have 3 axes (batch, L_new, d_model)")
    batch, _, d_model = x_new.shape
    if n_heads % n_kv_heads or d_model % n_heads:
        raise ValueError("n_kv_heads must divide n_heads, and n_heads must divide d_model")
    d_kv = n_kv_heads * (d_model // n_heads)
    if W_q.shape != (d_model, d_model) or W_o.shape != (d_model, d_model):
        raise ValueError("W_q and W_o must be (d_model, d_model)")
    if W_k.shape != (d_model, d_kv) or W_v.shape != (d_model, d_kv):
        raise ValueError("W_k and W_v must be (d_model, n_kv_heads * d_head)")
    if cache is not None:
        k_old, v_old = cache
        if k_old.shape[1] != n_kv_heads:
            raise ValueError("the cache holds n_kv_heads heads, never the repeated ones")
        if k_old.shape != v_old.shape or k_old.shape[0] != batch or k_old.shape[3] != d_model // n_heads:
            raise ValueError("the cache's k and v must be (batch, n_kv_heads, T, d_head)")
    q = split_heads(x_new @ W_q, n_heads)
    k = split_heads(x_new @ W_k, n_kv_heads)
    v = split_heads(x_new @ W_v, n_kv_heads)
    out, new_cache = attend_with_cache(q, k, v, cache)
    return merge_heads(out) @ W_o, new_cache
''',
        "einsum and PyTorch's fused attention with enable_gqa": '''def gqa_decode_step(x_new, W_q, W_k, W_v, W_o, n_heads, n_kv_heads, cache=None):
    if len(x_new.shape) != 3:
        raise ValueError(f"x_new: expected 3 axes, got {x_new.shape}")
    b, n, d = x_new.shape
    if n_heads % n_kv_heads != 0:
        raise ValueError(f"n_kv_heads={n_kv_heads} key/value heads cannot be shared equally by n_heads={n_heads}")
    if d % n_heads != 0:
        raise ValueError(f"d_model={d} is not a multiple of n_heads={n_heads}")
    dh = d // n_heads
    shapes = {"W_q": (d, d), "W_k": (d, n_kv_heads * dh), "W_v": (d, n_kv_heads * dh), "W_o": (d, d)}
    for name, w in zip(shapes, (W_q, W_k, W_v, W_o)):
        if tuple(w.shape) != shapes[name]:
            raise ValueError(f"{name}: expected {shapes[name]}, got {tuple(w.shape)}")
    q = torch.einsum("bnd,dhe->bhne", x_new, W_q.view(d, n_heads, dh))
    k = torch.einsum("bnd,dhe->bhne", x_new, W_k.view(d, n_kv_heads, dh))
    v = torch.einsum("bnd,dhe->bhne", x_new, W_v.view(d, n_kv_heads, dh))
    if cache is not None:
        ck, cv = cache
        if ck.dim() != 4 or ck.shape[1] != n_kv_heads or cv.dim() != 4 or cv.shape[1] != n_kv_heads:
            raise ValueError(f"cache: expected {n_kv_heads} key/value heads")
        if tuple(ck.shape) != (b, n_kv_heads, ck.shape[2], dh) or tuple(cv.shape) != tuple(ck.shape):
            raise ValueError(f"cache: expected (batch={b}, {n_kv_heads}, T, d_head={dh}) for k and v")
        k, v = torch.cat((ck, k), dim=-2), torch.cat((cv, v), dim=-2)
    T = k.shape[-2]
    allowed = torch.arange(T)[None, :] <= torch.arange(T - n, T)[:, None]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
    return torch.einsum("bhne,hef->bnf", out, W_o.view(n_heads, dh, d)), (k, v)
''',
        "a loop over the key/value groups, in float64": '''def gqa_decode_step(x_new, W_q, W_k, W_v, W_o, n_heads, n_kv_heads, cache=None):
    if x_new.ndim != 3 or n_heads % n_kv_heads or x_new.shape[2] % n_heads:
        raise ValueError("x_new must be (batch, L_new, d_model) and n_kv_heads | n_heads | d_model")
    b, L, d = x_new.shape
    dh, rep = d // n_heads, n_heads // n_kv_heads
    for name, w, cols in (("W_q", W_q, d), ("W_k", W_k, n_kv_heads * dh), ("W_v", W_v, n_kv_heads * dh), ("W_o", W_o, d)):
        if w.shape != (d, cols):
            raise ValueError(f"{name} has the wrong shape {tuple(w.shape)}")
    x = x_new.double()
    k = torch.stack([x @ W_k.double()[:, j * dh:(j + 1) * dh] for j in range(n_kv_heads)], dim=1)
    v = torch.stack([x @ W_v.double()[:, j * dh:(j + 1) * dh] for j in range(n_kv_heads)], dim=1)
    if cache is not None:
        if any(c.shape[1] != n_kv_heads for c in cache):
            raise ValueError("cache of the wrong number of heads")
        if any(c.shape != (b, n_kv_heads, cache[0].shape[2], dh) for c in cache):
            raise ValueError("cache of the wrong batch, length or d_head")
        k = torch.cat([cache[0].double(), k], dim=2)
        v = torch.cat([cache[1].double(), v], dim=2)
    T = k.shape[2]
    heads = []
    for i in range(n_heads):
        q_i = x @ W_q.double()[:, i * dh:(i + 1) * dh]
        s = q_i @ k[:, i // rep].transpose(1, 2) / dh ** 0.5
        s = s.masked_fill(torch.ones(L, T, dtype=torch.bool).tril(T - L).logical_not(), float("-inf"))
        heads.append(s.softmax(-1) @ v[:, i // rep])
    out = (torch.cat(heads, dim=-1) @ W_o.double()).to(x_new.dtype)
    return out, (k.to(x_new.dtype), v.to(x_new.dtype))
''',
    },
    "ex5_kv_bytes": {
        "math.prod": '''def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_value=2):
    return math.prod([2, n_layers, n_kv_heads, d_head, seq_len, batch, bytes_per_value])
''',
        "per token, then times the tokens": '''def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, bytes_per_value=2):
    per_token = 2 * n_kv_heads * d_head * bytes_per_value      # a key and a value per kv head
    return int(per_token * n_layers) * (seq_len * batch)
''',
    },
    "ex6_mean_pool": {
        "unflatten and flatten": '''def mean_pool_heads(weight, n_heads, n_groups):
    return weight.unflatten(0, (n_groups, n_heads // n_groups, -1)).mean(dim=1).flatten(0, 1)
''',
        "a loop over groups in float64": '''def mean_pool_heads(weight, n_heads, n_groups):
    d_head = weight.shape[0] // n_heads
    r = n_heads // n_groups
    groups = []
    for j in range(n_groups):
        block = weight[j * r * d_head:(j + 1) * r * d_head].double()
        groups.append(sum(block[i * d_head:(i + 1) * d_head] for i in range(r)) / r)
    return torch.cat(groups).to(weight.dtype)
''',
    },
}
