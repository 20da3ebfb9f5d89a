"""Relative positions, the quadratic encoding and attention as convolution (chapter 5).

(Rotary embeddings, RoPE, are in :mod:`course_utils.positional` with the other positional encodings.)

Chapter 5 of the course. A query at grid position ``q`` and a key at ``k`` are related by
the offset ``delta = k - q`` (key minus query). The quadratic encoding of Cordonnier, Loukas
and Jaggi (ICLR 2020, Lemma 2) gives head ``h``, with centre ``Delta`` and width ``alpha > 0``,

    r_delta = (||delta||^2, delta_1, ..., delta_D)      (the same for every head)
    v_h     = -alpha (1, -2 Delta_1, ..., -2 Delta_D)   (one per head)
    score   = v_h . r_delta = -alpha (||delta - Delta||^2 - ||Delta||^2),

which peaks at the key ``q + Delta`` and becomes one-hot there as ``alpha`` grows (the
``||Delta||^2`` term is the same for every key, so the softmax ignores it). With ``K*K`` heads
whose centres cover a ``K x K`` grid, and each head's value matrix times its block of the
output projection equal to one kernel slice (their Lemma 1), multi-head self-attention
computes a ``K x K`` convolution: :func:`conv_as_attention`.

Positions are ``(row, column)`` on a grid, numbered in row-major order; offsets are
integers. Shapes: ``offsets (L_q, L_k, D)``, ``center (D,)`` or ``(heads, D)``, scores
``(L_q, L_k)`` or ``(heads, L_q, L_k)``.
"""

from __future__ import annotations

import torch

from course_utils import attention, multihead
from course_utils._validate import check_int

__all__ = [
    "conv_as_attention", "conv_as_multihead", "grid_positions", "kernel_centers", "kernel_to_heads",
    "positional_attention", "quadratic_encoding", "quadratic_query", "quadratic_scores",
    "relative_offsets",
]


def grid_positions(height: int, width: int, device=None) -> torch.Tensor:
    """``(height*width, 2)`` integer ``(row, column)`` of every cell, in row-major order."""
    check_int(height, "height", 1)
    check_int(width, "width", 1)
    rows, cols = torch.meshgrid(torch.arange(height, device=device), torch.arange(width, device=device),
                                indexing="ij")
    return torch.stack([rows.reshape(-1), cols.reshape(-1)], dim=-1)


def relative_offsets(height: int, width: int, device=None) -> torch.Tensor:
    """Offsets key - query between every pair of cells of a ``height x width`` grid.

    Returns:
        ``(height*width, height*width, 2)`` int64: ``[i, j]`` is ``pos[j] - pos[i]`` where
        ``pos`` (:func:`grid_positions`) numbers the cells in row-major order, ``i`` the query
        and ``j`` the key.
    """
    pos = grid_positions(height, width, device)
    return pos[None, :, :] - pos[:, None, :]


def quadratic_encoding(offsets: torch.Tensor) -> torch.Tensor:
    """``r_delta = (||delta||^2, delta_1, ..., delta_D)`` for offsets ``(..., D)`` -> ``(..., 1 + D)``.

    Integer offsets give a float result (float32, or the default dtype).
    """
    if not isinstance(offsets, torch.Tensor) or offsets.dim() < 1:
        raise ValueError("offsets must be a tensor of shape (..., D), e.g. (L_q, L_k, 2)")
    d = offsets if offsets.is_floating_point() else offsets.to(torch.get_default_dtype())
    return torch.cat([(d * d).sum(-1, keepdim=True), d], dim=-1)


def quadratic_query(center: torch.Tensor, alpha) -> torch.Tensor:
    """The per-head vector ``v_h = -alpha (1, -2 Delta)``: ``center (..., D)`` -> ``(..., 1 + D)``.

    ``alpha`` is a number or a tensor broadcastable to ``center.shape[:-1]`` (one per head).
    """
    center = torch.as_tensor(center)
    if center.dim() < 1:
        raise ValueError("center must have shape (D,) for one head or (heads, D)")
    if not center.is_floating_point():
        center = center.to(torch.get_default_dtype())
    alpha = torch.as_tensor(alpha, dtype=center.dtype, device=center.device)
    try:
        alpha = alpha.expand(center.shape[:-1])
    except RuntimeError:
        raise ValueError(f"alpha of shape {tuple(alpha.shape)} does not match the heads of center "
                         f"{tuple(center.shape)}: give one number or one per head") from None
    ones = torch.ones_like(center[..., :1])
    return -alpha[..., None] * torch.cat([ones, -2 * center], dim=-1)


def quadratic_scores(offsets: torch.Tensor, center, alpha) -> torch.Tensor:
    """Scores ``-alpha (||delta - Delta||^2 - ||Delta||^2)``, computed as ``v_h . r_delta``.

    Args:
        offsets: ``(L_q, L_k, D)`` offsets key - query (e.g. :func:`relative_offsets`).
        center: ``(D,)`` one head's centre ``Delta`` or ``(heads, D)``.
        alpha: a number, or ``(heads,)`` widths (larger = sharper).
    Returns:
        ``(L_q, L_k)`` for one head, ``(heads, L_q, L_k)`` for a batch of heads; the dtype of
        ``center`` (float) or the default dtype.
    """
    center = torch.as_tensor(center)
    if not isinstance(offsets, torch.Tensor) or offsets.dim() < 2:
        raise ValueError("offsets must be a tensor of shape (L_q, L_k, D)")
    if center.dim() not in (1, 2) or center.shape[-1] != offsets.shape[-1]:
        raise ValueError(f"center must have shape ({offsets.shape[-1]},) or (heads, "
                         f"{offsets.shape[-1]}) to match offsets {tuple(offsets.shape)}, "
                         f"got {tuple(center.shape)}")
    v = quadratic_query(center, alpha)                        # (heads, 1+D) or (1+D,)
    r = quadratic_encoding(offsets).to(v.dtype)               # (L_q, L_k, 1+D)
    if v.dim() == 1:
        return r @ v
    return torch.einsum("qkp,hp->hqk", r, v)


def kernel_centers(kernel_size: int, device=None) -> torch.Tensor:
    """``(K*K, 2)`` centres ``Delta``: the offsets of a ``K x K`` kernel's taps, row-major.

    Tap ``(i, j)`` of a kernel (``weight[..., i, j]``) reads the input at offset
    ``(i - K//2, j - K//2)`` from the output pixel, so head ``i*K + j`` is centred there.
    """
    check_int(kernel_size, "kernel_size", 1)
    if kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be odd (a centred kernel), got {kernel_size}")
    return grid_positions(kernel_size, kernel_size, device) - kernel_size // 2


def kernel_to_heads(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head value matrices and the output projection that turn ``K*K`` heads into a conv.

    Args:
        weight: ``(C_out, C_in, K, K)`` a ``conv2d`` kernel.
    Returns:
        ``w_val (K*K, C_in, C_out)``: head ``h = i*K + j`` gets the tap ``weight[:, :, i, j]``
        transposed; ``w_out (K*K*C_out, C_out)``: identity blocks stacked, so the output
        projection sums the heads. ``w_val[h] @ w_out[h*C_out:(h+1)*C_out]`` is the tap
        (Lemma 1 of Cordonnier et al.).
    """
    if not isinstance(weight, torch.Tensor) or weight.dim() != 4 or weight.shape[-1] != weight.shape[-2]:
        raise ValueError("weight must be a (C_out, C_in, K, K) tensor with a square kernel, got "
                         f"{tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__}")
    c_out, c_in, k, _ = weight.shape
    w_val = weight.permute(2, 3, 1, 0).reshape(k * k, c_in, c_out)
    w_out = torch.eye(c_out, dtype=weight.dtype, device=weight.device).repeat(k * k, 1)
    return w_val, w_out


def positional_attention(x_keys: torch.Tensor, bias: torch.Tensor, w_val: torch.Tensor,
                         w_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-head self-attention whose scores are positional only (``W_qry = W_key = 0``).

    Each head ``h`` averages the values ``x_keys @ w_val[h]`` with ``softmax(bias[h])``; the
    heads are concatenated (chapter 4's ``merge_heads``) and multiplied by ``w_out``. Queries
    and keys are zero (the content score ``q . k`` vanishes), so the scores are the bias alone:
    :func:`course_utils.attention.scaled_dot_product_attention` with its additive ``attn_bias``.

    Args:
        x_keys: ``(batch, L_k, C_in)`` the key (and value) tokens.
        bias: ``(heads, L_q, L_k)`` positional scores (e.g. :func:`quadratic_scores`).
        w_val: ``(heads, C_in, D_h)`` per-head value projections.
        w_out: ``(heads * D_h, D_out)`` the output projection.
    Returns:
        ``(out (batch, L_q, D_out), weights (heads, L_q, L_k))``.
    """
    if x_keys.dim() != 3 or bias.dim() != 3 or w_val.dim() != 3:
        raise ValueError(f"expected x_keys (batch, L_k, C_in), bias (heads, L_q, L_k), w_val (heads, C_in, D_h); "
                         f"got {tuple(x_keys.shape)}, {tuple(bias.shape)}, {tuple(w_val.shape)}")
    heads, _, l_k = bias.shape
    if x_keys.shape[1] != l_k or w_val.shape[0] != heads or w_val.shape[1] != x_keys.shape[2]:
        raise ValueError(f"shapes do not fit: x_keys {tuple(x_keys.shape)}, bias {tuple(bias.shape)}, "
                         f"w_val {tuple(w_val.shape)}")
    if w_out.shape[0] != heads * w_val.shape[2]:
        raise ValueError(f"w_out must have heads * D_h = {heads * w_val.shape[2]} rows, got {tuple(w_out.shape)}")
    values = torch.einsum("blc,hcd->bhld", x_keys, w_val)          # (batch, heads, L_k, D_h)
    q = x_keys.new_zeros(1, heads, bias.shape[1], 1)               # W_qry = W_key = 0
    k = x_keys.new_zeros(1, heads, l_k, 1)
    heads_out, weights = attention.scaled_dot_product_attention(q, k, values, attn_bias=bias)
    return multihead.merge_heads(heads_out) @ w_out, weights[0]    # (batch, L_q, D_out), (heads, L_q, L_k)


def conv_as_attention(image: torch.Tensor, weight: torch.Tensor, alpha: float,
                      zero_padding: bool = True) -> torch.Tensor:
    """A ``K x K`` convolution computed by ``K*K``-head self-attention with quadratic scores.

    Args:
        image: ``(batch, C_in, H, W)``.
        weight: ``(C_out, C_in, K, K)``, odd ``K``.
        alpha: the heads' common width; the result tends to the convolution as it grows
            (in float64 it agrees within 1e-5 from about ``alpha = 15``).
        zero_padding: add zero tokens around the image as extra keys, as
            ``F.conv2d(image, weight, padding=K // 2)`` pads with zeros. Without them, a head
            whose centre falls outside the image attends to the nearest pixel inside it.
    Returns:
        ``(batch, C_out, H, W)``, approximately ``F.conv2d(image, weight, padding=K // 2)``.
    """
    if not isinstance(image, torch.Tensor) or image.dim() != 4:
        raise ValueError(f"image must be a (batch, C_in, H, W) tensor, got "
                         f"{tuple(image.shape) if isinstance(image, torch.Tensor) else type(image).__name__}")
    if not isinstance(weight, torch.Tensor) or weight.dim() != 4 or weight.shape[1] != image.shape[1]:
        raise ValueError(f"weight must be (C_out, C_in={image.shape[1]}, K, K), got "
                         f"{tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__}")
    k = weight.shape[-1]
    if weight.shape[-2] != k or k % 2 == 0:
        raise ValueError(f"the kernel must be square with an odd side, got {tuple(weight.shape[-2:])}")
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    b, c_in, h, w = image.shape
    p = k // 2 if zero_padding else 0
    keys = torch.nn.functional.pad(image, (p, p, p, p))           # zero tokens around the image
    x_keys = keys.flatten(2).transpose(1, 2)                       # (batch, L_k, C_in)
    kpos = grid_positions(h + 2 * p, w + 2 * p, image.device)      # key positions, padded grid
    qpos = grid_positions(h, w, image.device) + p                  # queries: the image's own cells
    offsets = kpos[None, :, :] - qpos[:, None, :]                  # (L_q, L_k, 2)
    centers = kernel_centers(k, image.device).to(image.dtype)
    bias = quadratic_scores(offsets, centers, alpha)               # (K*K, L_q, L_k)
    w_val, w_out = kernel_to_heads(weight)
    out, _ = positional_attention(x_keys, bias, w_val, w_out)      # (batch, L_q, C_out)
    return out.transpose(1, 2).reshape(b, -1, h, w)


def conv_as_multihead(image: torch.Tensor, weight: torch.Tensor, alpha: float) -> torch.Tensor:
    """:func:`conv_as_attention` with chapter 4's ``multihead.MultiHeadAttention`` module.

    The module gets ``K*K`` heads of width ``d_head = max(C_out, ceil(C_in / K^2))``, zero
    query and key projections, value projections whose head ``h`` holds the tap of
    :func:`kernel_to_heads` (in its first ``C_out`` features) and an output projection that adds
    the heads. The tokens are the pixels of the zero-padded image (channels zero-padded to
    ``d_model``), so the zero tokens are queries too; their outputs are cropped away. The
    quadratic scores go in through the module's additive ``bias``.

    Args:
        image: ``(batch, C_in, H, W)``; weight: ``(C_out, C_in, K, K)``, odd ``K``; alpha > 0.
    Returns:
        ``(batch, C_out, H, W)``, approximately ``F.conv2d(image, weight, padding=K // 2)``.
    """
    if not isinstance(image, torch.Tensor) or image.dim() != 4 or not isinstance(weight, torch.Tensor) \
            or weight.dim() != 4 or weight.shape[1] != image.shape[1]:
        raise ValueError("expected image (batch, C_in, H, W) and weight (C_out, C_in, K, K)")
    b, c_in, h, w = image.shape
    c_out, _, k, _ = weight.shape
    heads, p = k * k, k // 2
    d_head = max(c_out, -(-c_in // heads))
    d_model = heads * d_head
    mha = multihead.MultiHeadAttention(d_model, heads, bias=False).to(device=image.device, dtype=image.dtype)
    w_val, w_out = kernel_to_heads(weight)                               # (K*K, C_in, C_out), (K*K*C_out, C_out)
    with torch.no_grad():
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            proj.weight.zero_()                                          # W_qry = W_key = 0
        v = mha.v_proj.weight.view(heads, d_head, d_model)              # nn.Linear: (out, in)
        v[:, :c_out, :c_in] = w_val.transpose(1, 2)
        o = mha.out_proj.weight.view(d_model, heads, d_head)
        o[:c_out, :, :c_out] = w_out.view(heads, c_out, c_out).permute(2, 0, 1)
    tokens = torch.nn.functional.pad(image, (p, p, p, p)).flatten(2).transpose(1, 2)     # (batch, L, C_in)
    tokens = torch.nn.functional.pad(tokens, (0, d_model - c_in))                         # (batch, L, d_model)
    centers = kernel_centers(k, image.device).to(image.dtype)
    bias = quadratic_scores(relative_offsets(h + 2 * p, w + 2 * p, image.device), centers, alpha)
    with torch.no_grad():
        out, _ = mha(tokens, attn_bias=bias[None])                            # (batch, L, d_model)
    out = out[..., :c_out].reshape(b, h + 2 * p, w + 2 * p, c_out)[:, p:p + h, p:p + w]
    return out.permute(0, 3, 1, 2)
