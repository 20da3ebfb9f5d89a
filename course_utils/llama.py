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
* **Grouped-query attention** with the :class:`~course_utils.kvcache.KVCache` of chapter 4 (the
  cache holds the rotated, un-repeated key heads), pre-norm residual blocks, no biases anywhere.

Every part lives where its idea does: RMSNorm, SwiGLU, the block and the stack in
:mod:`course_utils.blocks`; RoPE in :mod:`course_utils.positional`, applied by chapter 4's
:class:`~course_utils.multihead.MultiHeadAttention` (``rope=True``). Two layouts of RoPE exist. The
paper and Meta's code rotate the *interleaved* pairs ``(2i, 2i+1)``
(:func:`course_utils.positional.apply_rope`); Hugging Face's Llama rotates the *split halves* ``(i, i
+ d/2)`` (:func:`course_utils.positional.apply_rope_half`). They are one rotation on permuted
features: :func:`course_utils.positional.interleaved_to_half` is the permutation, and Hugging Face's
conversion script applies it to the rows of each head of ``W_q`` and ``W_k``.

The model is the course's one decoder-only LM, :class:`course_utils.lm.DecoderLM`, in its
LLaMA-style configuration (:meth:`course_utils.lm.LMConfig.llama`; :func:`DecoderConfig` and
:data:`ModernDecoder` are the chapter's names for them). It follows the decoding protocol of
:mod:`course_utils.decoding` (``init_state``, ``prefill``, ``decode_step``);
:func:`greedy_generate` lays greedy decoding out as Hugging Face's ``generate``;
:func:`load_hf_llama` copies the weights of a ``transformers`` ``LlamaForCausalLM`` into it
(tests/test_llama.py: logits within 1e-5, the same greedy tokens). For the ablations of chapter
8, :func:`DecoderConfig` can swap each modern part back for its chapter 6 counterpart
(``norm="layer"``, ``ffn="relu"``, ``positions="learned"|"sinusoidal"``, ``n_kv_heads=n_heads``).
"""

from __future__ import annotations

import copy

import torch

from course_utils.blocks import RMSNorm, SwiGLU
from course_utils.decoding import greedy_decode
from course_utils.lm import DecoderLM, LMConfig

__all__ = ["DecoderConfig", "ModernDecoder", "config_from_hf", "float32_tolerance", "from_hf", "greedy_agrees",
           "greedy_generate", "hf_key_to_ours", "load_hf_llama", "with_parts"]

#: The LLaMA-style decoder is the course's one decoder-only model, :class:`course_utils.lm.DecoderLM`,
#: built from :meth:`LMConfig.llama <course_utils.lm.LMConfig.llama>`: ``ModernDecoder(cfg)`` is ``DecoderLM(cfg)``.
ModernDecoder = DecoderLM


def DecoderConfig(vocab_size: int = 256, **changes) -> LMConfig:
    """The :class:`~course_utils.lm.LMConfig` of a LLaMA-style decoder: ``LMConfig.llama(vocab_size,
    **changes)`` (:meth:`~course_utils.lm.LMConfig.llama`), a thin constructor. ``changes``:
    ``d_model`` (64), ``n_layers`` (2), ``n_heads`` (4), ``n_kv_heads`` (``None``: MHA), ``d_ff``
    (``None``: :func:`~course_utils.blocks.swiglu_hidden` for SwiGLU, ``4 * d_model`` for ReLU),
    ``rope_base``, ``eps`` (1e-6), ``max_len`` (512), ``tie_weights``, and the ablations' switches
    ``norm="layer"``, ``ffn="relu"``, ``positions="learned"|"sinusoidal"|"none"``."""
    return LMConfig.llama(vocab_size, **changes)


@torch.no_grad()
def greedy_generate(model: DecoderLM, prompt: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """Prompt ``(batch, P)`` followed by ``max_new_tokens`` greedy tokens: ``(batch, P + n)``,
    laid out as Hugging Face's ``generate(do_sample=False)`` (no end-of-sequence stop): the prompt
    and :func:`course_utils.decoding.greedy_decode`'s tokens (one prefill pass, then cached steps)."""
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must be (batch, P) with P >= 1, got {tuple(getattr(prompt, 'shape', ()))}")
    if max_new_tokens == 0:
        return prompt
    tokens, _ = greedy_decode(model, model.init_state(prompt.shape[0], prompt.device), max_new_tokens,
                              eos_id=-1, prompt=prompt)
    return torch.cat([prompt, tokens], dim=1)


# --- Hugging Face's Llama --------------------------------------------------------------------

def config_from_hf(hf_config) -> LMConfig:
    """An :class:`~course_utils.lm.LMConfig` (LLaMA-style) equal to a ``transformers.LlamaConfig`` (``rope_theta`` lives in
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
    return LMConfig.llama(vocab_size=hf_config.vocab_size, d_model=hf_config.hidden_size,
                          n_layers=hf_config.num_hidden_layers, n_heads=hf_config.num_attention_heads,
                          n_kv_heads=hf_config.num_key_value_heads, d_ff=hf_config.intermediate_size,
                          rope_base=float(theta), eps=hf_config.rms_norm_eps,
                          tie_weights=bool(getattr(hf_config, "tie_word_embeddings", False)))


HF_NAMES = {
    "self_attn.q_proj": "self_attn.q_proj", "self_attn.k_proj": "self_attn.k_proj",
    "self_attn.v_proj": "self_attn.v_proj", "self_attn.o_proj": "self_attn.out_proj",
    "mlp.gate_proj": "ff.gate_proj", "mlp.up_proj": "ff.up_proj", "mlp.down_proj": "ff.down_proj",
    "input_layernorm": "norm1", "post_attention_layernorm": "norm2",
}


def hf_key_to_ours(key: str) -> str:
    """``model.layers.3.self_attn.o_proj.weight`` -> ``stack.layers.3.self_attn.out_proj.weight``, etc.

    Only Llama's parameters have a counterpart: the leaf must be ``weight`` (a quantised
    checkpoint's ``weight_scale``, ``qweight``, ``scales`` ... and any ``bias`` raise), the module one
    of :data:`HF_NAMES` under its own parent and the layer number digits. Anything else raises
    ``KeyError``: a made-up name would only fail later, when the weights are loaded.
    """
    fixed = {"lm_head.weight": "lm_head.weight", "model.embed_tokens.weight": "embed.table.weight",
             "model.norm.weight": "stack.norm.weight"}
    if key in fixed:
        return fixed[key]
    parts = key.split(".")
    if len(parts) >= 5 and parts[:2] == ["model", "layers"] and parts[2].isdigit() and parts[-1] == "weight":
        inner = ".".join(parts[3:-1])
        if inner in HF_NAMES:
            return f"stack.layers.{parts[2]}.{HF_NAMES[inner]}.weight"
    raise KeyError(f"no counterpart for Hugging Face's {key!r}")


def load_hf_llama(model: DecoderLM, hf_state_dict: dict) -> DecoderLM:
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
    if model.cfg.tie_weights:
        mapped.setdefault("lm_head.weight", mapped.get("embed.table.weight"))
    missing = sorted(set(ours) - set(mapped))
    if missing:
        raise KeyError(f"the Hugging Face state dict does not fill {missing}")
    model.load_state_dict(mapped)
    return model


def from_hf(hf_model) -> DecoderLM:
    """The course's LLaMA-style :class:`~course_utils.lm.DecoderLM` holding the weights of a ``transformers`` ``LlamaForCausalLM``."""
    model = DecoderLM(config_from_hf(hf_model.config))
    return load_hf_llama(model, hf_model.state_dict()).to(next(hf_model.parameters()).dtype).eval()



def with_parts(model: DecoderLM, rms_norm=None, swiglu=None, rope=None) -> DecoderLM:
    """``model`` computing with other functions in place of the course's (chapter 8 assembles the
    learner's parts into the decoder): ``rms_norm(x, weight, eps)`` in every RMSNorm,
    ``swiglu(x, W_gate, W_up, W_down)`` in every SwiGLU feed-forward, ``rope(x (B, H, L, d_head),
    offset, base)`` in every self-attention. ``None`` leaves a part as it is. Returns ``model``."""
    for module in model.modules():
        if rms_norm is not None and isinstance(module, RMSNorm):
            module.fn = rms_norm
        elif swiglu is not None and isinstance(module, SwiGLU):
            module.fn = swiglu
        elif rope is not None and getattr(module, "rope", False) and hasattr(module, "rotate"):
            module.rotate = rope
    return model


# --- Equal to float32's rounding ---------------------------------------------------------------

@torch.no_grad()
def float32_tolerance(model: DecoderLM, tokens: torch.Tensor, factor: float = 8.0) -> float:
    """How far two correct float32 implementations of ``model``'s logits on ``tokens`` ``(batch, L)``
    may differ on this machine: ``factor`` times the float32 forward's own rounding error (its logits
    against the same weights run in float64), and never less than ``factor`` units in the last place
    of the largest logit.

    Two implementations that compute the same sums in another order (or with another CPU's vector
    code) round differently, each by about that error; a fixed 1e-5 is exact only where both round
    alike. A wrong model (a missing norm weight, another RoPE layout) is off by orders of magnitude more.
    """
    logits = model(tokens)
    exact = copy.deepcopy(model).double()(tokens)
    rounding = (logits.double() - exact).abs().max().item()
    ulp = torch.finfo(torch.float32).eps * logits.abs().max().item()
    return factor * max(rounding, ulp)


def greedy_agrees(want: torch.Tensor, got: torch.Tensor, want_logits: torch.Tensor, prompt_len: int,
                  tol: float) -> bool:
    """Two greedy generations ``(batch, P + n)`` agree: token for token, or up to a step where the
    reference's two best logits lie within ``tol`` of each other (a near tie that float32 rounding may
    break either way; after it the two continue from different text). ``want_logits`` ``(batch, P + n,
    vocab)``: the reference's logits over ``want`` itself (position ``t`` predicts token ``t + 1``)."""
    if want.shape != got.shape:
        return False
    for row in range(want.shape[0]):
        differs = (want[row, prompt_len:] != got[row, prompt_len:]).nonzero()
        if len(differs):
            step = prompt_len + int(differs[0]) - 1
            best = want_logits[row, step].topk(2).values
            if (best[0] - best[1]).item() > tol:
                return False
    return True
