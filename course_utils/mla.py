"""Multi-head latent attention: keys and values rebuilt from one small latent per token (chapter 9).

DeepSeek-V2 (DeepSeek-AI, "DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts
Language Model", 2024, §2.1) caches, per token and layer, one latent ``c_KV = h W_DKV`` of size
``d_c`` and one *decoupled* RoPE key ``k_R = RoPE(h W_KR)`` of size ``d_h^R`` shared by all heads.
Head ``i``'s key is ``[c_KV W_UK_i ; k_R]`` and its value ``c_KV W_UV_i``; its query is ``[h W_Q_i ;
RoPE(h W_QR_i)]``. (The paper also compresses the queries through a latent ``c_Q``, which saves
activations in training, not cache; it is left out here.) RoPE cannot sit on the keys rebuilt from
the latent (the rotation would stand between ``W_UK`` and the query, blocking the absorption), hence
the separate rotated part.

**Absorption.** ``q_i . (c W_UK_i) = (q_i W_UK_i^T) . c``, so at inference ``W_UK`` is folded into
the query and attention scores the latents directly; and ``sum_s a_s (c_s W_UV_i) W_O_i = (sum_s a_s
c_s) (W_UV_i W_O_i)``, so ``W_UV`` is folded into the output projection. Keys and values are never
rebuilt: the cache holds only ``[c_KV, k_R]``, ``d_c + d_h^R`` values per token and layer. DeepSeek-V2
has ``n_h = 128`` heads of ``d_h = 128``, ``d_c = 512 = 4 d_h`` and ``d_h^R = 64 = d_h / 2``: 576 =
``4.5 d_h`` values, "equal to GQA with only 2.25 groups" (:func:`kv_bytes_per_token`).

The RoPE is the course's :func:`course_utils.positional.apply_rope_half` (Hugging Face's layout).
Shapes: ``h (batch, T, d_model)``; the cache ``c_kv (batch, T, d_c)`` and ``k_rope (batch, T, d_rope)``;
the weights as in :func:`mla_weights`.
"""

from __future__ import annotations

import math

import torch

from course_utils._validate import check_int
from course_utils.attention import causal_mask
from course_utils.positional import apply_rope_half

__all__ = ["kv_bytes_per_token", "mla_absorbed", "mla_cache", "mla_explicit", "mla_weights"]


def mla_weights(d_model: int, n_heads: int, d_head: int, d_c: int, d_rope: int,
                generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32) -> dict:
    """Random MLA weights (std ``1/sqrt(fan_in)``): ``W_DKV (d_model, d_c)``, ``W_UK`` and ``W_UV``
    ``(n_heads, d_c, d_head)``, ``W_KR (d_model, d_rope)``, ``W_Q (n_heads, d_model, d_head)``,
    ``W_QR (n_heads, d_model, d_rope)``, ``W_O (n_heads, d_head, d_model)``."""
    for v, name in ((d_model, "d_model"), (n_heads, "n_heads"), (d_head, "d_head"), (d_c, "d_c")):
        check_int(v, name, low=1)
    check_int(d_rope, "d_rope", low=2)
    if d_rope % 2:
        raise ValueError(f"d_rope must be even (RoPE rotates pairs), got {d_rope}")
    shapes = {"W_DKV": (d_model, d_c), "W_UK": (n_heads, d_c, d_head), "W_UV": (n_heads, d_c, d_head),
              "W_KR": (d_model, d_rope), "W_Q": (n_heads, d_model, d_head), "W_QR": (n_heads, d_model, d_rope),
              "W_O": (n_heads, d_head, d_model)}
    return {name: torch.randn(*s, generator=generator, dtype=dtype) / math.sqrt(s[-2]) for name, s in shapes.items()}


def _check_h(h, W: dict) -> None:
    if not isinstance(h, torch.Tensor):
        raise TypeError(f"h must be a torch.Tensor, got {type(h).__name__}")
    d_model = W["W_DKV"].shape[0]
    if h.dim() != 3 or h.shape[-1] != d_model:
        raise ValueError(f"h must be (batch, T, d_model) with d_model = {d_model}, got {tuple(h.shape)}")


def _rope(x: torch.Tensor, offset: int) -> torch.Tensor:
    """RoPE on ``x (batch, heads, T, d)`` at positions ``offset..``."""
    return apply_rope_half(x, offset=offset)


def mla_cache(h: torch.Tensor, W: dict, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """What MLA caches for the tokens ``h (batch, T, d_model)`` at positions ``offset..``: the latent
    ``c_kv (batch, T, d_c)`` and the rotated shared key ``k_rope (batch, T, d_rope)``."""
    _check_h(h, W)
    c_kv = h @ W["W_DKV"]
    k_rope = _rope((h @ W["W_KR"])[:, None], offset)[:, 0]
    return c_kv, k_rope


def _queries(h: torch.Tensor, W: dict, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``q_c (batch, heads, T, d_head)`` and the rotated ``q_r (batch, heads, T, d_rope)``."""
    q_c = torch.einsum("btm,hmd->bhtd", h, W["W_Q"])
    q_r = _rope(torch.einsum("btm,hmr->bhtr", h, W["W_QR"]), offset)
    return q_c, q_r


def _softmax_causal(scores: torch.Tensor, d_qk: int) -> torch.Tensor:
    """Scaled, causally masked softmax of ``scores (batch, heads, T_q, T_k)``: the queries are the
    last ``T_q`` positions."""
    mask = causal_mask(scores.shape[-2], scores.shape[-1], device=scores.device)
    return torch.softmax((scores / math.sqrt(d_qk)).masked_fill(~mask, float("-inf")), dim=-1)


def mla_explicit(h: torch.Tensor, W: dict) -> torch.Tensor:
    """Causal MLA over ``h (batch, T, d_model)`` with keys and values rebuilt per head from the
    latent (the training form). Returns ``(batch, T, d_model)``."""
    c_kv, k_rope = mla_cache(h, W)
    q_c, q_r = _queries(h, W, 0)
    k_c = torch.einsum("btc,hcd->bhtd", c_kv, W["W_UK"])
    v = torch.einsum("btc,hcd->bhtd", c_kv, W["W_UV"])
    q = torch.cat([q_c, q_r], dim=-1)
    k = torch.cat([k_c, k_rope[:, None].expand(-1, k_c.shape[1], -1, -1)], dim=-1)
    a = _softmax_causal(q @ k.transpose(-1, -2), q.shape[-1])
    return torch.einsum("bhtd,hdm->btm", a @ v, W["W_O"])


def mla_absorbed(h: torch.Tensor, c_kv: torch.Tensor, k_rope: torch.Tensor, W: dict) -> torch.Tensor:
    """MLA in the inference form: the queries of ``h (batch, T_q, d_model)``, the last ``T_q`` of the
    ``T`` cached positions, attend to the cache ``c_kv (batch, T, d_c)``, ``k_rope (batch, T, d_rope)``
    with ``W_UK`` absorbed into the query and ``W_UV`` into the output projection. Returns
    ``(batch, T_q, d_model)``, equal to :func:`mla_explicit`'s rows."""
    _check_h(h, W)
    T, T_q = c_kv.shape[1], h.shape[1]
    if c_kv.shape[:2] != k_rope.shape[:2] or c_kv.shape[0] != h.shape[0] or T < T_q:
        raise ValueError(f"the cache must hold at least the T_q = {T_q} query positions for batch {h.shape[0]}: "
                         f"c_kv {tuple(c_kv.shape)}, k_rope {tuple(k_rope.shape)}")
    q_c, q_r = _queries(h, W, T - T_q)
    q_lat = torch.einsum("bhtd,hcd->bhtc", q_c, W["W_UK"])            # W_UK absorbed: (batch, heads, T_q, d_c)
    # einsum over the shared latents: the heads fold into the query rows of one batched matmul (a
    # broadcast c_kv[:, None] would be copied once per head)
    scores = torch.einsum("bhtc,bsc->bhts", q_lat, c_kv) + torch.einsum("bhtr,bsr->bhts", q_r, k_rope)
    a = _softmax_causal(scores, W["W_Q"].shape[-1] + k_rope.shape[-1])
    W_OV = torch.einsum("hcd,hdm->hcm", W["W_UV"], W["W_O"])           # W_UV absorbed: (heads, d_c, d_model)
    return torch.einsum("bhtc,hcm->btm", torch.einsum("bhts,bsc->bhtc", a, c_kv), W_OV)


def kv_bytes_per_token(kind: str, n_heads: int, d_head: int, n_kv_heads: int | None = None,
                       d_c: int | None = None, d_rope: int | None = None, n_layers: int = 1,
                       bytes_per_value: int = 2) -> int:
    """Bytes cached per token: ``"mha"`` ``2 n_heads d_head``, ``"gqa"`` ``2 n_kv_heads d_head``,
    ``"mqa"`` ``2 d_head``, ``"mla"`` ``d_c + d_rope`` values, times ``n_layers`` and
    ``bytes_per_value`` (2: float16/bfloat16)."""
    check_int(n_heads, "n_heads", low=1)
    check_int(d_head, "d_head", low=1)
    check_int(n_layers, "n_layers", low=1)
    check_int(bytes_per_value, "bytes_per_value", low=1)
    if kind == "mla":
        if d_c is None or d_rope is None:
            raise ValueError("kind='mla' needs d_c and d_rope")
        values = check_int(d_c, "d_c", low=1) + check_int(d_rope, "d_rope", low=0)
    elif kind == "gqa":
        if n_kv_heads is None:
            raise ValueError("kind='gqa' needs n_kv_heads")
        values = 2 * check_int(n_kv_heads, "n_kv_heads", low=1, high=n_heads) * d_head
    elif kind in ("mha", "mqa"):
        values = 2 * (n_heads if kind == "mha" else 1) * d_head
    else:
        raise ValueError(f"kind must be 'mha', 'gqa', 'mqa' or 'mla', got {kind!r}")
    return values * n_layers * bytes_per_value
