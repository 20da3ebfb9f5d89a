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
from torch import nn

from course_utils.blocks import BlockConfig, TokenEmbedding, TransformerStack
from course_utils.kvcache import KVCache, check_caches_match

__all__ = ["DecoderConfig", "ModernDecoder", "config_from_hf", "from_hf", "greedy_generate", "hf_key_to_ours",
           "load_hf_llama"]

NORMS = ("rms", "layer")
FFNS = ("swiglu", "relu")
POSITIONS = ("rope", "learned", "sinusoidal", "none")


# --- the model -------------------------------------------------------------------------------

@dataclass
class DecoderConfig:
    """Sizes of a :class:`ModernDecoder`, and the switches the ablations flip.

    ``d_ff=None``: :func:`~course_utils.blocks.swiglu_hidden` for SwiGLU, ``4 * d_model`` for the ReLU FFN.
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
        self.block_config()   # checks the sizes (d_model by n_heads, the widths) as a block would

    @property
    def ff_width(self) -> int:
        """The feed-forward's hidden width (``d_ff``, else the default of ``ffn``): :attr:`BlockConfig.ff_width`."""
        return self.block_config().ff_width

    @property
    def kv_heads(self) -> int:
        """The key/value heads (``n_kv_heads``, else ``n_heads``)."""
        return self.block_config().kv_heads


    def block_config(self) -> BlockConfig:
        """The :class:`~course_utils.blocks.BlockConfig` of every block: pre-norm, no attention biases,
        RoPE in self-attention when ``positions == "rope"``."""
        return BlockConfig(d_model=self.d_model, n_heads=self.n_heads, d_ff=self.d_ff, n_kv_heads=self.n_kv_heads,
                           norm_first=True, norm=self.norm, ffn=self.ffn, attention_bias=False,
                           rope=self.positions == "rope", rope_base=self.rope_base, eps=self.eps)


class ModernDecoder(nn.Module):
    """A LLaMA-style decoder-only language model: ``(batch, T)`` token ids -> ``(batch, T, vocab)``.

    A composition of the course's parts: ``embed`` (:class:`~course_utils.blocks.TokenEmbedding`,
    unscaled, ``N(0, 0.02^2)``; positions added only for the ``"learned"``/``"sinusoidal"``
    ablations), ``stack`` (:class:`~course_utils.blocks.TransformerStack` of pre-norm blocks with
    RMSNorm, SwiGLU, RoPE and GQA, and the final norm) and ``lm_head`` (no bias).

    Decoding protocol (:mod:`course_utils.decoding`)::

        state = model.init_state(batch)          # or model.prefill(prompt[:, :-1])
        log_probs, state = model.decode_step(prev_tokens, state)
    """

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = TokenEmbedding.build(cfg.vocab_size, cfg.d_model, cfg.positions, cfg.max_len,
                                          init_std=0.02, scale=False)
        self.stack = TransformerStack(cfg.block_config(), cfg.n_layers, final_norm=True)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed.table.weight

    @property
    def layers(self) -> nn.ModuleList:
        """The blocks, ``stack.layers``."""
        return self.stack.layers

    def forward(self, tokens: torch.Tensor, caches: list[KVCache] | None = None) -> torch.Tensor:
        """``tokens (batch, T)`` -> logits ``(batch, T, vocab)``; with ``caches`` (one
        :class:`KVCache` per layer) the tokens follow the cached positions and the caches grow."""
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(f"tokens must be a (batch, T) tensor of int64 ids, got "
                             f"{tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__}")
        offset = 0 if not caches else len(caches[0])
        x = self.stack(self.embed(tokens, offset), caches=caches, causal=True).x
        return self.lm_head(x)

    def init_state(self, batch: int, device=None) -> dict:
        """An empty decoding state: the batch size, an empty KVCache per layer and the number of
        positions fed (``fed``)."""
        return {"batch": torch.zeros(batch, 0, device=device), "caches": self.stack.new_caches(), "fed": 0}

    @torch.no_grad()
    def prefill(self, prompt: torch.Tensor, state: dict | None = None) -> dict:
        """Run ``prompt (batch, P)`` in one pass, filling the caches; returns the state after it."""
        state = self.init_state(prompt.shape[0], prompt.device) if state is None else state
        check_caches_match(state["caches"], state["fed"])
        if prompt.shape[1]:
            self(prompt, state["caches"])
        return {**state, "fed": state["fed"] + prompt.shape[1]}

    @torch.no_grad()
    def decode_step(self, prev_tokens: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
        """Feed ``prev_tokens (batch,)``; return ``(log_probs (batch, vocab), the next state)``. The
        caches advance in place: step the state returned, never the one passed in again."""
        check_caches_match(state["caches"], state["fed"])
        logits = self(prev_tokens[:, None], state["caches"])
        return torch.log_softmax(logits[:, -1].float(), dim=-1), {**state, "fed": state["fed"] + 1}


@torch.no_grad()
def greedy_generate(model: ModernDecoder, prompt: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """Prompt ``(batch, P)`` followed by ``max_new_tokens`` greedy tokens: ``(batch, P + n)``,
    laid out as Hugging Face's ``generate(do_sample=False)`` (no end-of-sequence stop). The prompt
    is prefilled in one pass; each new token then costs one cached step."""
    if prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must be (batch, P) with P >= 1, got {tuple(prompt.shape)}")
    caches = model.stack.new_caches()
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
    "self_attn.q_proj": "self_attn.q_proj", "self_attn.k_proj": "self_attn.k_proj",
    "self_attn.v_proj": "self_attn.v_proj", "self_attn.o_proj": "self_attn.out_proj",
    "mlp.gate_proj": "ff.gate_proj", "mlp.up_proj": "ff.up_proj", "mlp.down_proj": "ff.down_proj",
    "input_layernorm": "norm1", "post_attention_layernorm": "norm2",
}


def hf_key_to_ours(key: str) -> str:
    """``model.layers.3.self_attn.o_proj.weight`` -> ``stack.layers.3.self_attn.out_proj.weight``, etc."""
    if key == "lm_head.weight":
        return key
    if key == "model.embed_tokens.weight":
        return "embed.table.weight"
    if key == "model.norm.weight":
        return "stack.norm.weight"
    parts = key.split(".")
    if len(parts) == 6 and parts[:2] == ["model", "layers"]:
        inner = ".".join(parts[3:5])
        if inner in HF_NAMES:
            return f"stack.layers.{parts[2]}.{HF_NAMES[inner]}.{parts[5]}"
    if len(parts) == 5 and parts[:2] == ["model", "layers"] and parts[3] in HF_NAMES:
        return f"stack.layers.{parts[2]}.{HF_NAMES[parts[3]]}.{parts[4]}"
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
        mapped.setdefault("lm_head.weight", mapped.get("embed.table.weight"))
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
