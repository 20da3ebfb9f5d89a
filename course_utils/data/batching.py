"""Padding, the teacher-forcing offset, batches and a seeded train/test split.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from .vocab import EOS_ID, PAD_ID, SOS_ID, Pair, Vocab

__all__ = ["Batch", "batches", "make_batch", "pad_sequences", "shift_targets", "split"]


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int = PAD_ID) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists into a ``(batch, max_len)`` long tensor; also return the lengths ``(batch,)``."""
    if len(seqs) == 0:
        raise ValueError("pad_sequences needs at least one sequence")
    rows = [s.tolist() if isinstance(s, torch.Tensor) else list(s) for s in seqs]
    width = max(len(r) for r in rows)
    # one tensor from padded lists (a training step pads three), not a tensor copied in per row
    out = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], dtype=torch.long)
    return out, torch.tensor([len(r) for r in rows], dtype=torch.long)


def shift_targets(targets: Sequence[Sequence[int]], sos_id: int = SOS_ID, eos_id: int = EOS_ID,
                  pad_id: int = PAD_ID) -> tuple[torch.Tensor, torch.Tensor]:
    """The teacher-forcing offset: decoder input ``[<sos>, y1..yn]``, target ``[y1..yn, <eos>]``.

    Args:
        targets: ``batch`` lists of target ids, without sos/eos.
    Returns:
        ``(decoder_input, decoder_target)``, both ``(batch, max_len + 1)`` long tensors,
        right-padded with ``pad_id``. At every position t the decoder sees ``decoder_input[:, t]``
        and must predict ``decoder_target[:, t]``.
    """
    dec_in, _ = pad_sequences([[sos_id, *t] for t in targets], pad_id)
    dec_out, _ = pad_sequences([[*t, eos_id] for t in targets], pad_id)
    return dec_in, dec_out


@dataclass
class Batch:
    """One padded batch. ``src (B, S)``, ``src_lengths (B,)``, ``tgt_in`` and ``tgt_out (B, T)``."""

    src: torch.Tensor
    src_lengths: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor

    def to(self, device) -> Batch:
        return Batch(*(t.to(device) for t in (self.src, self.src_lengths, self.tgt_in, self.tgt_out)))

    @property
    def src_mask(self) -> torch.Tensor:
        """``(B, S)`` bool, True at real (non-pad) source positions."""
        return self.src != PAD_ID


def make_batch(pairs: Sequence[Pair], src_vocab: Vocab, tgt_vocab: Vocab) -> Batch:
    """Encode and pad a list of (source, target) token pairs into a :class:`Batch`."""
    src, src_lengths = pad_sequences([src_vocab.encode(s) for s, _ in pairs])
    tgt_in, tgt_out = shift_targets([tgt_vocab.encode(t) for _, t in pairs])
    return Batch(src, src_lengths, tgt_in, tgt_out)


def batches(pairs: Sequence[Pair], src_vocab: Vocab, tgt_vocab: Vocab, batch_size: int,
            shuffle: bool = True, seed: int = 0) -> Iterator[Batch]:
    """One pass over ``pairs`` in batches (the last one may be smaller)."""
    order = list(range(len(pairs)))
    if shuffle:
        random.Random(seed).shuffle(order)
    for start in range(0, len(order), batch_size):
        yield make_batch([pairs[i] for i in order[start:start + batch_size]], src_vocab, tgt_vocab)


def split(pairs: Sequence[Pair], n_test: int, seed: int = 0) -> tuple[list[Pair], list[Pair]]:
    """Split into (train, test) so that no test source string also occurs in train."""
    rng = random.Random(seed)
    order = list(range(len(pairs)))
    rng.shuffle(order)
    test = [pairs[i] for i in order[:n_test]]
    seen = {tuple(s) for s, _ in test}
    train = [pairs[i] for i in order[n_test:] if tuple(pairs[i][0]) not in seen]
    return train, test
