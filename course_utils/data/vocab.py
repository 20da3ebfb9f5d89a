"""The token conventions and the vocabulary every task uses.

``<pad>`` = 0, ``<sos>`` = 1, ``<eos>`` = 2, ``<unk>`` = 3 in every vocabulary; a pair is
``(source tokens, target tokens)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["EOS", "EOS_ID", "PAD", "PAD_ID", "SOS", "SOS_ID", "UNK", "UNK_ID", "SPECIALS", "Pair", "Vocab"]


PAD, SOS, EOS, UNK = "<pad>", "<sos>", "<eos>", "<unk>"
SPECIALS = (PAD, SOS, EOS, UNK)
PAD_ID, SOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3

Pair = tuple[list[str], list[str]]


class Vocab:
    """A token <-> id mapping whose first four ids are ``<pad> <sos> <eos> <unk>``.

    >>> v = Vocab("abc")
    >>> v.encode("cab", add_eos=True)
    [6, 4, 5, 2]
    >>> v.decode([6, 4, 5, 2, 0])
    ['c', 'a', 'b']
    """

    def __init__(self, tokens: Iterable[str]):
        self.itos: list[str] = list(SPECIALS)
        for tok in tokens:
            if tok not in self.itos:
                self.itos.append(tok)
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}

    @classmethod
    def from_sequences(cls, seqs: Iterable[Sequence[str]]) -> Vocab:
        """Build a vocabulary from every token of ``seqs``, in sorted order."""
        return cls(sorted({tok for seq in seqs for tok in seq}))

    def __len__(self) -> int:
        return len(self.itos)

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens: {' '.join(self.itos[:12])}{' ...' if len(self) > 12 else ''})"

    pad_id, sos_id, eos_id, unk_id = PAD_ID, SOS_ID, EOS_ID, UNK_ID

    def encode(self, tokens: Sequence[str], add_sos: bool = False, add_eos: bool = False) -> list[int]:
        """Map tokens to ids (unknown tokens to ``<unk>``), optionally framed by sos/eos."""
        ids = [self.stoi.get(t, UNK_ID) for t in tokens]
        return ([SOS_ID] if add_sos else []) + ids + ([EOS_ID] if add_eos else [])

    def decode(self, ids: Iterable[int], strip: bool = True) -> list[str]:
        """Map ids back to tokens. With ``strip``, stop at ``<eos>`` and drop pad/sos."""
        out = []
        for i in ids:
            i = int(i)
            if strip and i == EOS_ID:
                break
            if strip and i in (PAD_ID, SOS_ID):
                continue
            out.append(self.itos[i] if 0 <= i < len(self.itos) else UNK)
        return out
