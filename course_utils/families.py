"""The Transformer's families, cut from chapter 6's layers: encoder-only (BERT), decoder-only (GPT).

(The encoder-decoder family is :class:`course_utils.transformer.Seq2SeqTransformer`; the ViT,
an encoder-only model over image patches, is :mod:`course_utils.vit`.)

* The three attention patterns as boolean masks (True = may attend): :func:`bidirectional_mask`
  (encoder-only), :func:`~course_utils.attention.causal_mask` (decoder-only) and
  :func:`~course_utils.attention.prefix_lm_mask` (both :mod:`course_utils.attention`'s, found here too; bidirectional
  over a prefix, causal after it: the pattern of an encoder-decoder folded into one stack, as in
  T5's prefix-LM variant and UniLM).
* Masked language modelling (Devlin et al., 2019): :func:`mlm_corrupt` picks 15 % of the tokens
  and replaces 80 % of those by ``[MASK]``, 10 % by a random token and leaves 10 % as they are;
  :func:`mlm_loss` scores only the picked positions.
* :class:`EncoderOnly`: token and learned position embeddings
  (:class:`~course_utils.blocks.TokenEmbedding`), a :class:`~course_utils.blocks.TransformerStack`,
  an MLM head and an optional classification head on the first token (``[CLS]``).
* The decoder-only model is the course's one :class:`course_utils.lm.DecoderLM`, GPT-style with
  ``DecoderLM(LMConfig.gpt(vocab_size, ...))`` (the same stack with a causal mask, a language-model head, a
  parallel :meth:`~course_utils.lm.DecoderLM.prefill` of a prompt and a cached
  :meth:`~course_utils.lm.DecoderLM.decode_step` that follows the protocol of
  :mod:`course_utils.decoding`); :func:`lm_training_batch` and :func:`greedy_complete` pose a
  seq2seq task to it as prompt -> completion (a seq2seq decoder is a conditional language model).

A decoder-only block *is* an encoder block under a causal mask (there is no cross-attention to
feed), so both models use the same :class:`~course_utils.blocks.TransformerBlock`; only the mask
differs, and the decoder passes its key/value caches to the stack. Shapes:
tokens ``(batch, L)``, states ``(batch, L, d_model)``, masks ``(L_q, L_k)`` or
``(batch, 1, L_q, L_k)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import check_config, check_int
from .attention import causal_mask, combine_masks, prefix_lm_mask  # noqa: F401  (see below)
from .blocks import BlockConfig, TokenEmbedding, TransformerStack
from .data import EOS_ID, PAD_ID
from .decoding import greedy_decode, tokens_to_lists
from .lm import DecoderLM
from .train import IGNORE_INDEX

# causal_mask, prefix_lm_mask and IGNORE_INDEX are attention's and train's, exported there; chapter 7
# names them here (families.prefix_lm_mask is its exercise's reference), so they stay importable here
# (tests/test_exports.py, COMPATIBILITY).
__all__ = [
    "EncoderConfig", "EncoderOnly", "bidirectional_mask", "greedy_complete",
    "lm_training_batch", "mlm_corrupt", "mlm_loss",
]



# --- the three attention patterns -----------------------------------------------------------

def bidirectional_mask(L: int, device=None) -> torch.Tensor:
    """``(L, L)`` all True: every position attends to every position (BERT, ViT, an encoder)."""
    check_int(L, "L")
    return torch.ones(L, L, dtype=torch.bool, device=device)


# --- masked language modelling --------------------------------------------------------------

def mlm_corrupt(tokens: torch.Tensor, mask_id: int, vocab_size: int, maskable: torch.Tensor | None = None,
                p: float = 0.15, p_mask: float = 0.8, p_random: float = 0.1, first_regular_id: int = 4,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption of a batch for masked language modelling (Devlin et al., 2019, §3.1).

    Each maskable position is *chosen* independently with probability ``p``. Of the chosen ones,
    a fraction ``p_mask`` becomes ``mask_id``, ``p_random`` a random regular token (drawn
    uniformly from ``first_regular_id .. vocab_size - 1``, so it may equal the original) and the
    rest keep their token. The model must predict the original token at every chosen position,
    and only there; because some chosen tokens are left unchanged, it cannot tell which visible
    tokens will be scored and must keep a good representation of every position, and because
    ``[MASK]`` never occurs at fine-tuning time, not all chosen tokens are ``[MASK]``.

    Args:
        tokens: ``(batch, L)`` token ids.
        maskable: bool ``(batch, L)``, where a token may be chosen (default: ``tokens >= first_regular_id``,
            i.e. not padding, ``<sos>``, ``<eos>``, ``<unk>``, ``[CLS]``/``[MASK]`` if they sit below it).
        generator: a seeded ``torch.Generator`` for reproducible corruption.
    Returns:
        ``(inputs (batch, L), labels (batch, L))``: the corrupted tokens, and the original token at
        chosen positions, :data:`IGNORE_INDEX` elsewhere.
    """
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point():
        raise ValueError("tokens must be a (batch, L) integer tensor")
    for name, q in (("p", p), ("p_mask", p_mask), ("p_random", p_random)):
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"{name} must be a probability in [0, 1], got {q}")
    if p_mask + p_random > 1.0:
        raise ValueError(f"p_mask + p_random must be <= 1 (the rest is kept), got {p_mask} + {p_random}")
    if not first_regular_id < vocab_size:
        raise ValueError(f"no regular token to draw: first_regular_id={first_regular_id}, vocab_size={vocab_size}")
    maskable = tokens >= first_regular_id if maskable is None else maskable
    if maskable.shape != tokens.shape or maskable.dtype != torch.bool:
        raise ValueError(f"maskable must be a bool tensor of the tokens' shape {tuple(tokens.shape)}")

    def uniform() -> torch.Tensor:
        return torch.rand(tokens.shape, generator=generator, device=tokens.device)

    chosen = maskable & (uniform() < p)
    action = uniform()                                        # one draw decides mask / random / keep
    to_mask = chosen & (action < p_mask)
    to_random = chosen & (action >= p_mask) & (action < p_mask + p_random)
    random_tokens = torch.randint(first_regular_id, vocab_size, tokens.shape, generator=generator,
                                  device=tokens.device)
    inputs = tokens.masked_fill(to_mask, mask_id)
    inputs = torch.where(to_random, random_tokens, inputs)
    labels = tokens.masked_fill(~chosen, IGNORE_INDEX)
    return inputs, labels


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the chosen positions only: ``logits (batch, L, V)``, ``labels
    (batch, L)`` with :data:`IGNORE_INDEX` at positions that do not count."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX)


# --- the models -----------------------------------------------------------------------------

@dataclass
class EncoderConfig(BlockConfig):
    """A :class:`~course_utils.blocks.BlockConfig` (every block's sizes and switches; Pre-LN by
    default here) and the BERT-style encoder around the blocks: ``vocab_size``, ``n_layers``,
    ``max_len`` (the learned positions' table), ``pad_id`` (padding keys are masked) and
    ``n_classes`` (a linear head on the first token's final state, for a ``[CLS]`` token; ``None``:
    no classification head)."""

    norm_first: bool = True
    vocab_size: int = 1
    n_layers: int = 2
    max_len: int = 128
    pad_id: int = PAD_ID
    n_classes: int | None = None

    def __post_init__(self):
        super().__post_init__()
        for name in ("vocab_size", "n_layers", "max_len"):
            check_int(getattr(self, name), name, 1)
        if self.n_classes is not None:
            check_int(self.n_classes, "n_classes", 1)


class EncoderOnly(nn.Module):
    """A BERT-style encoder: bidirectional self-attention over the whole (unpadded) sequence.

    ``EncoderOnly(cfg)``, ``cfg`` an :class:`EncoderConfig` (``EncoderConfig(vocab_size=20, d_model=16,
    n_classes=2)``); the config is ``model.cfg``, its fields are read there.

    Sub-modules: ``embed`` (:class:`~course_utils.blocks.TokenEmbedding`, learned positions),
    ``stack`` (:class:`~course_utils.blocks.TransformerStack`: ``stack.layers``, ``stack.norm``),
    ``mlm_head`` (``nn.Linear(d_model, vocab_size)``) and ``classifier``.
    """

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.cfg = check_config(cfg, EncoderConfig, "EncoderOnly", "EncoderOnly(EncoderConfig(vocab_size=..., d_model=...))")
        self.embed = TokenEmbedding.build(cfg.vocab_size, cfg.d_model, "learned", cfg.max_len, dropout=cfg.dropout)
        self.stack = TransformerStack(cfg.block_config(), cfg.n_layers)
        self.mlm_head = nn.Linear(cfg.d_model, cfg.vocab_size)
        self.classifier = nn.Linear(cfg.d_model, cfg.n_classes) if cfg.n_classes is not None else None

    def _encode(self, tokens: torch.Tensor, mask: torch.Tensor | None, need_weights: bool):
        keys = (tokens != self.cfg.pad_id)[:, None, None, :]                         # (batch, 1, 1, L)
        x, weights, _ = self.stack(self.embed(tokens), mask=combine_masks(keys, mask), need_weights=need_weights)
        return x, weights

    def encode(self, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``tokens (batch, L)`` -> states ``(batch, L, d_model)``.

        ``mask`` (default :func:`bidirectional_mask`) is combined with the padding of ``tokens``
        (no query attends to a ``pad_id`` key)."""
        return self._encode(tokens, mask, need_weights=False)[0]

    def encode_with_weights(self, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, list]:
        """As :meth:`encode`, and the attention weights: ``(states, [(batch, heads, L, L) per layer])``."""
        return self._encode(tokens, mask, need_weights=True)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """MLM logits ``(batch, L, vocab_size)``."""
        return self.mlm_head(self.encode(tokens))

    def classify(self, tokens: torch.Tensor) -> torch.Tensor:
        """Class logits ``(batch, n_classes)`` from the first token's (``[CLS]``) final state."""
        if self.classifier is None:
            raise ValueError("this EncoderOnly has no classification head: build it with n_classes=...")
        return self.classifier(self.encode(tokens)[:, 0])


# --- a seq2seq task as prompt -> completion, for a decoder-only model --------------------------

def lm_training_batch(prompts: list[list[int]], completions: list[list[int]], pad_id: int = PAD_ID,
                      loss_on_prompt: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forcing batch for a decoder-only LM from (prompt, completion) id lists.

    Each sequence is ``prompt + completion`` (put the separator at the end of the prompt and
    ``<eos>`` at the end of the completion), right-padded. Returns ``(inputs (B, T - 1),
    targets (B, T - 1))``: ``inputs = seq[:-1]``, ``targets = seq[1:]`` with
    :data:`IGNORE_INDEX` at padding and, unless ``loss_on_prompt``, wherever the target is still
    a prompt token (the model is scored on the completion only). Use with
    ``F.cross_entropy(logits.transpose(1, 2), targets)`` (its default ``ignore_index`` is -100).
    """
    if len(prompts) != len(completions) or not prompts:
        raise ValueError(f"need as many prompts as completions (and at least one), got {len(prompts)} "
                         f"and {len(completions)}")
    seqs = [list(p) + list(c) for p, c in zip(prompts, completions)]
    T = max(len(q) for q in seqs)
    if T < 2:
        raise ValueError("every sequence is shorter than 2 tokens: nothing to predict")
    tokens = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    targets = torch.full((len(seqs), T), IGNORE_INDEX, dtype=torch.long)
    for b, (p, q) in enumerate(zip(prompts, seqs)):
        tokens[b, :len(q)] = torch.tensor(q)
        first = 0 if loss_on_prompt else len(p)           # the first position whose token is scored
        targets[b, first:len(q)] = torch.tensor(q[first:])
    return tokens[:, :-1], targets[:, 1:]


@torch.no_grad()
def greedy_complete(lm: DecoderLM, prompts: list[list[int]], max_len: int,
                    eos_id: int = EOS_ID, prefix_lm: bool = False) -> list[list[int]]:
    """Greedy completions of prompts of any lengths: the prompts of each length are decoded as one
    batch (a parallel :meth:`~course_utils.lm.DecoderLM.prefill`, then cached steps). Returns, per prompt in
    the given order, the generated ids up to (not including) the first ``<eos>``.

    ``prefix_lm=True``: a prefix LM trained with ``prefix_len = len(prompt) - 1``: every prompt
    token but the last (the separator) is the bidirectional prefix."""
    device = next(lm.parameters()).device
    out: list[list[int] | None] = [None] * len(prompts)
    by_length: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        if not len(p):
            raise ValueError(f"prompt {i} is empty: a prompt needs at least one token")
        by_length.setdefault(len(p), []).append(i)
    for idx in by_length.values():
        group = torch.tensor([list(prompts[i]) for i in idx], dtype=torch.long, device=device)   # (b, P)
        state = lm.prefill(group[:, :-1], bidirectional=prefix_lm)
        tokens, _ = greedy_decode(lm, state, max_len, eos_id=eos_id, prompt=group[:, -1:])
        for i, row in zip(idx, tokens_to_lists(tokens, eos_id)):
            out[i] = row
    return out
