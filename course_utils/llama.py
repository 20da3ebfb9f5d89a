"""A LLaMA-style decoder built from the course's parts (chapter 8).

What LLaMA-style decoders (Touvron et al. 2023) change in chapter 7's GPT-style decoder:

* **RMSNorm** (Zhang & Sennrich 2019) instead of LayerNorm: divide by the root mean square of the
  features, ``x / sqrt(mean(x**2) + eps) * weight``: no centring, no bias.
* **SwiGLU** (Shazeer 2020) instead of the ReLU feed-forward: ``down(silu(gate(x)) * up(x))``, three
  matrices without biases; the hidden size is about ``2/3 * 4 * d_model`` so that the parameter count
  matches a ReLU FFN of width ``4 * d_model``.
* **RoPE inside attention** (Su et al. 2021; chapter 5): queries and keys are rotated by their
  position after the projections, at every layer, nothing is added to the embeddings. With a KV
  cache the new positions start at the cache's length.
* **Grouped-query attention** with the :class:`~course_utils.attention.KVCache` of chapter 4 (the
  cache holds the rotated, un-repeated key heads), pre-norm residual blocks, no biases anywhere.

Two layouts of RoPE exist. The paper and Meta's code rotate the *interleaved* pairs ``(2i, 2i+1)``
(:func:`course_utils.relpos.apply_rope`); Hugging Face's Llama rotates the *split halves* ``(i, i +
d/2)`` (:func:`apply_rope_half`). They are one rotation on permuted features:
:func:`interleaved_to_half` is the permutation, and Hugging Face's conversion script applies it to the
rows of each head of ``W_q`` and ``W_k``.

:class:`ModernDecoder` follows the decoding protocol of :mod:`course_utils.decoding` (``init_state``,
``prefill``, ``decode_step``); :func:`load_hf_llama` copies the weights of a ``transformers``
``LlamaForCausalLM`` into it (tests/test_llama.py: logits within 1e-5, the same greedy tokens).
For the ablations of chapter 8, :class:`DecoderConfig` can swap each modern part back for its
chapter 6 counterpart (``norm="layer"``, ``ffn="relu"``, ``positions="learned"|"sinusoidal"``,
``n_kv_heads=n_heads``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from course_utils.attention import (
    KVCache,
    MultiHeadAttention,
    causal_mask,
    grouped_sdpa,
    merge_heads,
    split_heads,
)
from course_utils.transformer import FeedForward, LearnedPositions, SinusoidalPositions

__all__ = [
    "DecoderBlock", "DecoderConfig", "ModernDecoder", "RMSNorm", "RotaryAttention", "SwiGLU",
    "apply_rope_half", "config_from_hf", "greedy_generate", "interleaved_to_half", "load_hf_llama",
    "rms_norm", "rope_cos_sin", "rotate_half", "swiglu_hidden",
]

NORMS = ("rms", "layer")
FFNS = ("swiglu", "relu")
POSITIONS = ("rope", "learned", "sinusoidal", "none")


# --- RMSNorm ---------------------------------------------------------------------------------

def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(mean(x**2, -1) + eps) * weight`` over the last axis ``(..., d)``.

    Computed in float32 at least (as Hugging Face's ``LlamaRMSNorm``), returned in ``x``'s dtype.
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"rms_norm expects a floating-point tensor, got {type(x).__name__}")
    h = x.to(torch.promote_types(x.dtype, torch.float32))
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    h = h.to(x.dtype)
    return h if weight is None else weight * h


class RMSNorm(nn.Module):
    """Root-mean-square normalisation with a learned gain ``weight (d,)`` (initialised to 1)."""

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


# --- SwiGLU ----------------------------------------------------------------------------------

def swiglu_hidden(d_model: int, multiple_of: int = 8) -> int:
    """LLaMA's hidden size: ``2/3 * 4 * d_model`` rounded up to a multiple of ``multiple_of``
    (three matrices of that width hold as many weights as two of width ``4 * d_model``)."""
    h = int(2 * 4 * d_model / 3)
    return multiple_of * ((h + multiple_of - 1) // multiple_of)


class SwiGLU(nn.Module):
    """Gated feed-forward ``down(silu(gate(x)) * up(x))`` (Shazeer 2020), no biases: ``(..., d_model)``."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


# --- RoPE, split-halves layout ---------------------------------------------------------------

def rope_cos_sin(positions: torch.Tensor, d_head: int, base: float = 10000.0,
                 dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos, sin`` of shape ``(seq, d_head)`` for the split-halves layout.

    Frequency ``theta_i = base ** (-2i / d_head)`` for ``i < d_head / 2``, repeated for both halves
    (``torch.cat([freqs, freqs])``, as Hugging Face's ``LlamaRotaryEmbedding``).
    """
    if d_head % 2:
        raise ValueError(f"RoPE needs an even head size, got d_head={d_head}")
    positions = torch.as_tensor(positions)
    if positions.dim() != 1:
        raise ValueError(f"positions must have shape (seq,), got {tuple(positions.shape)}")
    # float32 as Hugging Face computes it; float64 angles for float64 inputs (exact at large positions)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.int64, device=positions.device)
                               .to(work) / d_head))                                # (d/2,)
    angle = positions.to(work)[:, None] * inv_freq[None, :]                         # (seq, d/2)
    angle = torch.cat([angle, angle], dim=-1)                                       # (seq, d)
    return angle.cos().to(dtype), angle.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` on the two halves of the last axis."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope_half(x: torch.Tensor, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    """Rotate ``x (batch, heads, seq, d_head)`` by positions ``offset .. offset + seq - 1``,
    pairing feature ``i`` with ``i + d_head/2`` (Hugging Face's layout).

    ``offset`` is the number of positions already in the KV cache: a token decoded after a cache of
    ``T`` positions sits at position ``T``, not 0.
    """
    if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.shape[-1] % 2:
        raise ValueError(f"x must be a (..., seq, d_head) tensor with an even d_head, got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be an int >= 0 (the cache length), got {offset!r}")
    pos = torch.arange(offset, offset + x.shape[-2], device=x.device)
    cos, sin = rope_cos_sin(pos, x.shape[-1], base, dtype=x.dtype)
    return x * cos + rotate_half(x) * sin


def interleaved_to_half(d_head: int) -> torch.Tensor:
    """The permutation ``p`` (a ``(d_head,)`` index) with
    ``apply_rope_half(x[..., p]) == relpos.apply_rope(x)[..., p]``:
    ``p = [0, 2, 4, ..., d-2, 1, 3, ..., d-1]`` moves the interleaved pair ``(2i, 2i+1)`` to
    ``(i, i + d/2)``. Applied to the rows of each head of ``W_q`` and ``W_k``, it turns a model
    trained with one layout into the same model in the other (scores unchanged: a permutation of
    the features of both ``q`` and ``k`` leaves ``q . k`` as it is).
    """
    if d_head % 2 or d_head < 2:
        raise ValueError(f"d_head must be even and >= 2, got {d_head}")
    return torch.cat([torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)])


# --- the model -------------------------------------------------------------------------------

@dataclass
class DecoderConfig:
    """Sizes of a :class:`ModernDecoder`, and the switches the ablations flip.

    ``d_ff=None``: :func:`swiglu_hidden` for SwiGLU, ``4 * d_model`` for the ReLU FFN.
    """

    vocab_size: int = 256
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int | None = None   # None: n_heads (MHA)
    d_ff: int | None = None
    rope_base: float = 10000.0
    eps: float = 1e-6
    max_len: int = 512              # learned / sinusoidal tables only: RoPE has no limit
    tie_embeddings: bool = False
    norm: str = "rms"
    ffn: str = "swiglu"
    positions: str = "rope"

    def __post_init__(self):
        for name, allowed in (("norm", NORMS), ("ffn", FFNS), ("positions", POSITIONS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.d_ff is None:
            self.d_ff = swiglu_hidden(self.d_model) if self.ffn == "swiglu" else 4 * self.d_model


class RotaryAttention(MultiHeadAttention):
    """Chapter 4's :class:`~course_utils.attention.MultiHeadAttention` (GQA, ``KVCache``) with RoPE
    applied to the queries and keys after the projections, at positions offset by the cache length.
    Causal self-attention only. ``rope=False``: no rotation (for the ablations with absolute positions).

    ``rotate`` is the rotation used, ``rotate(x (batch, heads, seq, d_head), offset, base)``:
    :func:`apply_rope_half` unless set otherwise (chapter 8 plugs in the learner's version and the
    interleaved layout to compare them).
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, bias: bool = False,
                 rope: bool = True, rope_base: float = 10000.0):
        super().__init__(d_model, n_heads, n_kv_heads, bias=bias)
        self.rope, self.rope_base = rope, rope_base
        self.rotate = None

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """``x (batch, L_new, d_model)`` -> ``(batch, L_new, d_model)``; with a cache, the new
        positions follow the ``len(cache)`` cached ones (their keys are appended, rotated)."""
        self._check_input(x, "x")
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache, got {type(cache).__name__}")
        offset = 0 if cache is None else len(cache)
        q = split_heads(self.q_proj(x), self.n_heads)          # (B, H, L, dh)
        k = split_heads(self.k_proj(x), self.n_kv_heads)       # (B, G, L, dh)
        v = split_heads(self.v_proj(x), self.n_kv_heads)       # (B, G, L, dh)
        if self.rope:
            rotate = self.rotate or apply_rope_half
            q = rotate(q, offset, self.rope_base)
            k = rotate(k, offset, self.rope_base)
        if cache is not None:
            k, v = cache.append(k, v)                         # (B, G, offset + L, dh)
        mask = causal_mask(q.shape[2], k.shape[2], device=x.device)   # bottom-right aligned
        out = grouped_sdpa(q, k, v, mask)                     # (B, H, L, dh)
        return self.out_proj(merge_heads(out))


class DecoderBlock(nn.Module):
    """Pre-norm block: ``h = x + attn(norm1(x)); out = h + ffn(norm2(h))``."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        norm = (lambda: RMSNorm(cfg.d_model, cfg.eps)) if cfg.norm == "rms" else \
            (lambda: nn.LayerNorm(cfg.d_model, eps=cfg.eps))
        self.norm1, self.norm2 = norm(), norm()
        self.attn = RotaryAttention(cfg.d_model, cfg.n_heads, cfg.n_kv_heads, bias=False,
                                    rope=cfg.positions == "rope", rope_base=cfg.rope_base)
        self.ffn = SwiGLU(cfg.d_model, cfg.d_ff) if cfg.ffn == "swiglu" else FeedForward(cfg.d_model, cfg.d_ff)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        h = x + self.attn(self.norm1(x), cache)
        return h + self.ffn(self.norm2(h))


class ModernDecoder(nn.Module):
    """A LLaMA-style decoder-only language model: ``(batch, T)`` token ids -> ``(batch, T, vocab)``.

    Decoding protocol (:mod:`course_utils.decoding`)::

        state = model.init_state(batch)          # or model.prefill(prompt[:, :-1])
        log_probs, state = model.decode_step(prev_tokens, state)
    """

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        nn.init.normal_(self.embed.weight, std=0.02)
        if cfg.positions == "learned":
            self.pos = LearnedPositions(cfg.d_model, cfg.max_len)
        elif cfg.positions == "sinusoidal":
            self.pos = SinusoidalPositions(cfg.d_model, cfg.max_len)
        else:
            self.pos = None
        self.layers = nn.ModuleList(DecoderBlock(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.eps) if cfg.norm == "rms" else nn.LayerNorm(cfg.d_model, eps=cfg.eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor, caches: list[KVCache] | None = None) -> torch.Tensor:
        """``tokens (batch, T)`` -> logits ``(batch, T, vocab)``; with ``caches`` (one
        :class:`KVCache` per layer) the tokens follow the cached positions and the caches grow."""
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(f"tokens must be a (batch, T) tensor of int64 ids, got "
                             f"{tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__}")
        if caches is not None and len(caches) != len(self.layers):
            raise ValueError(f"one KVCache per layer: {len(self.layers)} layers, {len(caches)} caches")
        offset = 0 if not caches else len(caches[0])
        x = self.embed(tokens)                                  # (B, T, d_model)
        if self.pos is not None:
            x = self.pos(x, offset)
        for i, layer in enumerate(self.layers):
            x = layer(x, None if caches is None else caches[i])
        return self.lm_head(self.norm(x))

    def init_state(self, batch: int, device=None) -> dict:
        """An empty decoding state: the batch size and an empty KVCache per layer."""
        return {"batch": torch.zeros(batch, 0, device=device), "caches": [KVCache() for _ in self.layers]}

    @torch.no_grad()
    def prefill(self, prompt: torch.Tensor, state: dict | None = None) -> dict:
        """Run ``prompt (batch, P)`` in one pass, filling the caches; returns the state after it."""
        state = self.init_state(prompt.shape[0], prompt.device) if state is None else state
        if prompt.shape[1]:
            self(prompt, state["caches"])
        return state

    @torch.no_grad()
    def decode_step(self, prev_tokens: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
        """Feed ``prev_tokens (batch,)``; return ``(log_probs (batch, vocab), state)`` (caches grow)."""
        logits = self(prev_tokens[:, None], state["caches"])
        return torch.log_softmax(logits[:, -1].float(), dim=-1), state


@torch.no_grad()
def greedy_generate(model: ModernDecoder, prompt: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """Prompt ``(batch, P)`` followed by ``max_new_tokens`` greedy tokens: ``(batch, P + n)``,
    laid out as Hugging Face's ``generate(do_sample=False)`` (no end-of-sequence stop). The prompt
    is prefilled in one pass; each new token then costs one cached step."""
    if prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must be (batch, P) with P >= 1, got {tuple(prompt.shape)}")
    caches = [KVCache() for _ in model.layers]
    logits = model(prompt, caches)[:, -1]
    out = [prompt]
    for i in range(max_new_tokens):
        nxt = logits.argmax(-1, keepdim=True)                 # (B, 1)
        out.append(nxt)
        if i + 1 < max_new_tokens:
            logits = model(nxt, caches)[:, -1]
    return torch.cat(out, dim=1)


# --- Hugging Face's Llama --------------------------------------------------------------------

def config_from_hf(hf_config) -> DecoderConfig:
    """A :class:`DecoderConfig` equal to a ``transformers.LlamaConfig`` (``rope_theta`` lives in
    ``rope_parameters`` from transformers 5 on, on the config itself before)."""
    params = getattr(hf_config, "rope_parameters", None) or {}
    theta = params.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    rope_type = params.get("rope_type", "default")
    if rope_type != "default":
        raise ValueError(f"only the default RoPE is built here, this config uses rope_type={rope_type!r}")
    if getattr(hf_config, "attention_bias", False) or getattr(hf_config, "mlp_bias", False):
        raise ValueError("this decoder has no biases; the config has attention_bias or mlp_bias set")
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
    if head_dim * hf_config.num_attention_heads != hf_config.hidden_size:
        raise ValueError(f"head_dim={head_dim} * heads != hidden_size={hf_config.hidden_size}: not supported")
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        raise ValueError(f"SwiGLU uses silu, the config has hidden_act={hf_config.hidden_act!r}")
    return DecoderConfig(vocab_size=hf_config.vocab_size, d_model=hf_config.hidden_size,
                         n_layers=hf_config.num_hidden_layers, n_heads=hf_config.num_attention_heads,
                         n_kv_heads=hf_config.num_key_value_heads, d_ff=hf_config.intermediate_size,
                         rope_base=float(theta), eps=hf_config.rms_norm_eps,
                         tie_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)))


HF_NAMES = {
    "self_attn.q_proj": "attn.q_proj", "self_attn.k_proj": "attn.k_proj", "self_attn.v_proj": "attn.v_proj",
    "self_attn.o_proj": "attn.out_proj", "mlp.gate_proj": "ffn.gate_proj", "mlp.up_proj": "ffn.up_proj",
    "mlp.down_proj": "ffn.down_proj", "input_layernorm": "norm1", "post_attention_layernorm": "norm2",
}


def hf_key_to_ours(key: str) -> str:
    """``model.layers.3.self_attn.o_proj.weight`` -> ``layers.3.attn.out_proj.weight``, etc."""
    if key == "lm_head.weight":
        return key
    if key == "model.embed_tokens.weight":
        return "embed.weight"
    if key == "model.norm.weight":
        return "norm.weight"
    parts = key.split(".")
    if len(parts) == 6 and parts[:2] == ["model", "layers"]:
        inner = ".".join(parts[3:5])
        if inner in HF_NAMES:
            return f"layers.{parts[2]}.{HF_NAMES[inner]}.{parts[5]}"
    if len(parts) == 5 and parts[:2] == ["model", "layers"] and parts[3] in HF_NAMES:
        return f"layers.{parts[2]}.{HF_NAMES[parts[3]]}.{parts[4]}"
    raise KeyError(f"no counterpart for Hugging Face's {key!r}")


def load_hf_llama(model: ModernDecoder, hf_state_dict: dict) -> ModernDecoder:
    """Copy a ``LlamaForCausalLM`` state dict into ``model`` (same config: :func:`config_from_hf`).

    Every tensor must find its place with the same shape, and every parameter of ``model`` must
    be filled; a missing or extra key raises with its name. Returns ``model``.
    """
    ours = model.state_dict()
    mapped = {}
    for key, value in hf_state_dict.items():
        if "rotary_emb" in key:
            continue                                          # a buffer recomputed from the config
        name = hf_key_to_ours(key)
        if name not in ours:
            raise KeyError(f"{key} -> {name}: no such parameter in the course's model")
        if ours[name].shape != value.shape:
            raise ValueError(f"{key}: shape {tuple(value.shape)}, the course's {name} has {tuple(ours[name].shape)}")
        mapped[name] = value
    if model.cfg.tie_embeddings:
        mapped.setdefault("lm_head.weight", mapped.get("embed.weight"))
    missing = sorted(set(ours) - set(mapped))
    if missing:
        raise KeyError(f"the Hugging Face state dict does not fill {missing}")
    model.load_state_dict(mapped)
    return model


def from_hf(hf_model) -> ModernDecoder:
    """The course's :class:`ModernDecoder` holding the weights of a ``transformers`` ``LlamaForCausalLM``."""
    model = ModernDecoder(config_from_hf(hf_model.config))
    return load_hf_llama(model, hf_model.state_dict()).to(next(hf_model.parameters()).dtype).eval()


def config_fields() -> list[str]:
    """The names of :class:`DecoderConfig`'s fields (the ablation tool prints them)."""
    return [f.name for f in fields(DecoderConfig)]
