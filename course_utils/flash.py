"""Attention as production computes it: the online softmax and FlashAttention's tiling (chapter 8).

Chapter 3's attention builds the whole ``L_q x L_k`` score matrix, softmaxes it and keeps it for
the backward pass: memory O(L^2). Two ideas remove it.

* **The online softmax**: a softmax's normaliser in one pass, with a running maximum ``m`` and a
  running normaliser ``denom`` (Milakov & Gimelshein 2018, "Online normalizer calculation for
  softmax"); carrying a running (unnormalised) output ``acc`` along as well makes a
  softmax-weighted sum over blocks of keys one pass too (Rabe & Staats 2021, "Self-attention Does
  Not Need O(n^2) Memory"). When a block raises the maximum from ``m`` to ``m'``, everything
  accumulated so far is rescaled by ``exp(m - m')`` (:func:`online_softmax_update`). No
  ``L_k``-long row stored.
* **Tiling with recomputation** (Dao et al. 2022, "FlashAttention"): queries are cut into blocks
  too; each ``(block_q, block_k)`` tile of scores lives only while it is used, and the backward pass
  recomputes each tile's probabilities instead of storing them (:class:`FlashAttentionFunction`).
  The form here is FlashAttention-2's (Dao 2023, Algorithms 1 and 2): query blocks outermost, the
  output divided by the normaliser once at the end, and one log-sum-exp per query kept (O(L)), from
  which the backward pass recomputes ``P = exp(S - lse)``.

This is the *algorithm*, written in PyTorch on the CPU: every tile is a separate PyTorch call, so it
is slower than one fused kernel here. What a real kernel adds is where the speed comes from: the
loop over tiles runs inside one GPU kernel, each tile stays in on-chip SRAM (registers and shared
memory), and the scores never travel to the GPU's main memory (HBM) at all.
"""

from __future__ import annotations

import math

import torch

from ._validate import check_int

__all__ = ["FlashAttentionFunction", "flash_attention", "naive_attention", "online_softmax",
           "online_softmax_update", "tiled_backward", "tiled_forward"]


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Chapter 3's attention with the full ``(..., L_q, L_k)`` probability matrix (kept for backward).

    ``causal``: query ``i`` sees keys ``j <= i`` (top-left aligned, as ``is_causal=True``).
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])             # (..., L_q, L_k)
    if causal:
        L_q, L_k = scores.shape[-2:]
        keep = torch.ones(L_q, L_k, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def online_softmax(x: torch.Tensor, block: int = 4) -> torch.Tensor:
    """``softmax(x, -1)`` of ``(..., n)`` computed with one streaming pass for the normaliser
    (running maximum and sum over blocks of ``block`` entries), then one pass to write it."""
    m = torch.full(x.shape[:-1] + (1,), float("-inf"), dtype=x.dtype, device=x.device)
    s = torch.zeros_like(m)
    for start in range(0, x.shape[-1], block):
        chunk = x[..., start:start + block]
        m_new = torch.maximum(m, chunk.amax(-1, keepdim=True))
        s = s * torch.exp(m - m_new) + torch.exp(chunk - m_new).sum(-1, keepdim=True)
        m = m_new
    return torch.exp(x - m) / s


def online_softmax_update(m: torch.Tensor, denom: torch.Tensor, acc: torch.Tensor, scores: torch.Tensor,
                          v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fold one block of keys into the running state of a softmax-weighted sum.

    Args:
        m: ``(..., L_q, 1)`` running maximum of the scores seen so far (``-inf`` before any).
        denom: ``(..., L_q, 1)`` running sum of ``exp(score - m)``.
        acc: ``(..., L_q, d_v)`` running sum of ``exp(score - m) * v``.
        scores: ``(..., L_q, B)`` this block's scores (``-inf`` where masked); v: ``(..., B, d_v)``.
    Returns:
        The new ``(m, denom, acc)``; after the last block, ``acc / denom`` is ``softmax(all scores) @ V``.
        A row whose scores are all ``-inf`` so far keeps ``m = -inf``, ``denom = 0``, ``acc = 0``.
    """
    m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
    safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)   # all -inf so far: no shift
    scale = torch.exp(m - safe)                                             # rescales the old state
    p = torch.exp(scores - safe)                                            # (..., L_q, B)
    return m_new, denom * scale + p.sum(-1, keepdim=True), acc * scale + p @ v


def _check(q, k, v, block_q, block_k):
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)) or q.dim() < 2:
        raise ValueError("q, k, v must be tensors (..., L, d)")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q (..., L_q, d), k (..., L_k, d), v (..., L_k, d_v) must agree, got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        check_int(b, name, 1)


def _tile_scores(q_blk, k_blk, scale, causal, i0, j0):
    s = q_blk @ k_blk.transpose(-2, -1) * scale                            # (..., bq, bk)
    if causal:
        qi = torch.arange(i0, i0 + q_blk.shape[-2], device=q_blk.device)[:, None]
        kj = torch.arange(j0, j0 + k_blk.shape[-2], device=q_blk.device)[None, :]
        s = s.masked_fill(kj > qi, float("-inf"))
    return s


def _forward(q, k, v, causal, block_q, block_k):
    """Tiled forward: ``(out (..., L_q, d_v), lse (..., L_q, 1))``, never more than one tile of scores."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    L_q, L_k = q.shape[-2], k.shape[-2]
    outs, lses = [], []
    for i0 in range(0, L_q, block_q):
        q_blk = q[..., i0:i0 + block_q, :]
        bq = q_blk.shape[-2]
        m = q.new_full(q.shape[:-2] + (bq, 1), float("-inf"))
        denom = q.new_zeros(q.shape[:-2] + (bq, 1))
        acc = q.new_zeros(q.shape[:-2] + (bq, v.shape[-1]))
        k_end = min(L_k, i0 + bq) if causal else L_k                       # causal: later tiles are all masked
        for j0 in range(0, k_end, block_k):
            s = _tile_scores(q_blk, k[..., j0:j0 + block_k, :], scale, causal, i0, j0)
            m, denom, acc = online_softmax_update(m, denom, acc, s, v[..., j0:j0 + block_k, :])
        outs.append(torch.where(denom > 0, acc / denom.clamp_min(torch.finfo(denom.dtype).tiny), torch.zeros_like(acc)))
        lses.append(m + torch.log(denom))                                     # log-sum-exp of the row's scores
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-2)


def tiled_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  block_q: int = 64, block_k: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention-2's forward pass (chapter 8, exercise 6): ``(out, lse)``.

    Args:
        q: ``(..., L_q, d)``; k: ``(..., L_k, d)``; v: ``(..., L_k, d_v)``.
        causal: query ``i`` sees keys ``j <= i``; a key tile entirely after a query tile's last
            query is never computed.
        block_q, block_k: tile sizes (positive ints; the last tile may be ragged).
    Returns:
        ``out (..., L_q, d_v)``, equal to ``F.scaled_dot_product_attention(q, k, v, is_causal=causal)``,
        and ``lse (..., L_q, 1)``, each row's log-sum-exp of its (scaled, masked) scores.
    """
    _check(q, k, v, block_q, block_k)
    return _forward(q, k, v, bool(causal), block_q, block_k)


def _backward(q, k, v, out, lse, d_out, causal, block_q, block_k):
    """Tiled backward: ``(dq, dk, dv)``, each tile's probabilities recomputed as ``exp(S - lse)``."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    D = (d_out * out).sum(-1, keepdim=True)                                 # (..., L_q, 1) = rowsum(dP * P)
    L_q, L_k = q.shape[-2], k.shape[-2]
    for i0 in range(0, L_q, block_q):
        sl_q = slice(i0, i0 + block_q)
        q_blk, do_blk, lse_blk, D_blk = q[..., sl_q, :], d_out[..., sl_q, :], lse[..., sl_q, :], D[..., sl_q, :]
        k_end = min(L_k, i0 + q_blk.shape[-2]) if causal else L_k
        for j0 in range(0, k_end, block_k):
            sl_k = slice(j0, j0 + block_k)
            s = _tile_scores(q_blk, k[..., sl_k, :], scale, causal, i0, j0)
            p = torch.exp(s - lse_blk)                                      # recomputed probabilities
            dv[..., sl_k, :] += p.transpose(-2, -1) @ do_blk
            dp = do_blk @ v[..., sl_k, :].transpose(-2, -1)
            ds = p * (dp - D_blk)                                           # softmax backward
            dq[..., sl_q, :] += ds @ k[..., sl_k, :] * scale
            dk[..., sl_k, :] += ds.transpose(-2, -1) @ q_blk * scale
    return dq, dk, dv


def tiled_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                   d_out: torch.Tensor, causal: bool = False, block_q: int = 64,
                   block_k: int = 64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashAttention's backward pass by tiles (chapter 8, exercise 7): ``(dq, dk, dv)``.

    Args:
        q: ``(..., L_q, d)``; k: ``(..., L_k, d)``; v: ``(..., L_k, d_v)``, as given to the forward pass.
        out: ``(..., L_q, d_v)`` and lse: ``(..., L_q, 1)``, what :func:`tiled_forward` returned.
        d_out: ``(..., L_q, d_v)``, the gradient of the loss with respect to ``out``.
        causal, block_q, block_k: as in :func:`tiled_forward` (the same tiles, the same skipping).
    Returns:
        The gradients of the loss with respect to ``q``, ``k`` and ``v`` (their shapes and dtypes):
        each tile's probabilities are recomputed as ``P = exp(S - lse)`` and never more than one
        tile is held; ``D = rowsum(d_out * out)`` stands for ``rowsum(dP * P)`` in the softmax's
        backward ``dS = P * (dP - D)``.
    """
    _check(q, k, v, block_q, block_k)
    for name, t, shape in (("out", out, (*q.shape[:-1], v.shape[-1])), ("lse", lse, (*q.shape[:-1], 1)),
                           ("d_out", d_out, (*q.shape[:-1], v.shape[-1]))):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape:
            raise ValueError(f"{name} must be a tensor of shape {shape}, got {getattr(t, 'shape', t)}")
    return _backward(q, k, v, out, lse, d_out, bool(causal), block_q, block_k)


class FlashAttentionFunction(torch.autograd.Function):
    """Tiled attention whose backward pass recomputes each tile (Dao et al. 2022), in PyTorch.

    The forward pass is FlashAttention-2's (Dao 2023, Algorithm 1: query tiles outermost, one
    log-sum-exp per query); the backward pass recomputes ``P = exp(S - lse)`` tile by tile as
    FlashAttention-2's Algorithm 2 does, but with the query tiles outermost (the paper puts the key
    tiles outermost and accumulates ``dQ``). Saves ``q, k, v, out`` and the log-sum-exp
    ``(..., L_q, 1)``: O(L) memory. The backward pass is :func:`tiled_backward`'s, or the one given."""

    @staticmethod
    def forward(ctx, q, k, v, causal, block_q, block_k, tiled=_forward, backward=None):
        out, lse = tiled(q, k, v, causal, block_q, block_k)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.block_q, ctx.block_k = causal, block_q, block_k
        ctx.backward_fn = backward or _backward
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = ctx.backward_fn(q, k, v, out, lse, d_out, ctx.causal, ctx.block_q, ctx.block_k)
        return dq, dk, dv, None, None, None, None, None


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    block_q: int = 64, block_k: int = 64, forward=None, backward=None) -> torch.Tensor:
    """Attention by tiles, equal to ``F.scaled_dot_product_attention(q, k, v, is_causal=causal)``
    in value and gradient, with O(L) memory kept for the backward pass instead of O(L^2).

    Args:
        q: ``(..., L_q, d)``; k: ``(..., L_k, d)``; v: ``(..., L_k, d_v)``.
        causal: query ``i`` sees keys ``j <= i`` (top-left aligned, as ``is_causal=True``); tiles
            entirely above the diagonal are skipped.
        block_q, block_k: tile sizes (any positive ints; the last tile may be ragged).
        forward: the tiled forward pass, called as ``forward(q, k, v, causal, block_q, block_k)``
            and returning ``(out, lse)`` as :func:`tiled_forward` does (chapter 8 passes the
            learner's); the backward pass recomputes the probabilities from its ``lse``.
        backward: the tiled backward pass, called as
            ``backward(q, k, v, out, lse, d_out, causal, block_q, block_k)`` and returning
            ``(dq, dk, dv)`` as :func:`tiled_backward` does (chapter 8 passes the learner's).
    """
    _check(q, k, v, block_q, block_k)
    return FlashAttentionFunction.apply(q, k, v, bool(causal), block_q, block_k, forward or _forward, backward)
