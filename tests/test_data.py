import datetime as dt

import pytest
import torch

from course_utils import data


def test_vocab_specials_and_round_trip():
    v = data.Vocab("xyz")
    assert v.itos[:4] == ["<pad>", "<sos>", "<eos>", "<unk>"]
    ids = v.encode(list("zyx"), add_sos=True, add_eos=True)
    assert ids == [1, 6, 5, 4, 2]
    assert v.decode(ids) == ["z", "y", "x"]
    assert v.decode(ids + [0, 0], strip=False)[-2:] == ["<pad>", "<pad>"]
    assert v.encode(["q"]) == [data.UNK_ID]


def test_date_pairs_are_deterministic_and_correct():
    a = data.make_date_pairs(200, seed=3)
    assert a == data.make_date_pairs(200, seed=3)
    assert a != data.make_date_pairs(200, seed=4)
    src_v, tgt_v = data.date_vocabs()
    for src, tgt in a:
        iso = "".join(tgt)
        d = dt.date.fromisoformat(iso)
        assert data.DATE_FIRST <= d <= data.DATE_LAST
        assert data.UNK_ID not in src_v.encode(src), "".join(src)
        assert data.UNK_ID not in tgt_v.encode(tgt)


def test_every_date_format_is_unambiguous():
    # Each surface form must determine the date: no two dates share a source string.
    seen = {}
    d = data.DATE_FIRST
    while d <= data.DATE_LAST:
        for style in range(data.N_DATE_FORMATS):
            s = data.format_date(d, style)
            assert seen.setdefault(s, d) == d, f"{s!r} is both {seen[s]} and {d}"
        d += dt.timedelta(days=7)
    assert data.format_date(dt.date(2021, 3, 3), 0) == "wednesday, march 3rd 2021"
    assert data.format_date(dt.date(2021, 3, 3), 1) == "3/3/21"
    assert data.format_date(dt.date(2021, 3, 3), 2) == "3 Mar 2021"


@pytest.mark.parametrize("task", data.SEQUENCE_TASKS)
def test_sequence_pairs(task):
    pairs = data.make_sequence_pairs(500, 3, 9, task=task, n_symbols=6, seed=1)
    lengths = {len(s) for s, _ in pairs}
    assert lengths == set(range(3, 10))
    for s, t in pairs:
        expected = {"reverse": s[::-1], "copy": s, "sort": sorted(s)}[task]
        assert t == expected
        assert set(s) <= set("abcdef")


def test_bad_arguments_are_explained():
    with pytest.raises(ValueError, match="task must be one of"):
        data.make_sequence_pairs(1, 1, 2, task="rotate")
    with pytest.raises(ValueError, match="min_len"):
        data.make_sequence_pairs(1, 5, 2)
    with pytest.raises(ValueError, match="style"):
        data.format_date(dt.date(2000, 1, 1), 99)


def test_pad_sequences_pads_right_from_any_sequence_of_ids():
    """Lists, tuples, ranges and tensors, empty rows included: a (batch, max_len) long tensor padded
    with ``pad_id`` on the right, and the lengths."""
    out, lengths = data.pad_sequences([[5, 6, 7], (8,), torch.tensor([9, 10]), range(0), range(3, 5)], pad_id=1)
    assert out.dtype == lengths.dtype == torch.long
    assert out.tolist() == [[5, 6, 7], [8, 1, 1], [9, 10, 1], [1, 1, 1], [3, 4, 1]]
    assert lengths.tolist() == [3, 1, 2, 0, 2]
    out, lengths = data.pad_sequences([[], []])
    assert out.shape == (2, 0) and lengths.tolist() == [0, 0]
    with pytest.raises(ValueError, match="at least one sequence"):
        data.pad_sequences([])


def test_shift_targets_offset():
    dec_in, dec_out = data.shift_targets([[7, 8, 9], [5]])
    assert dec_in.tolist() == [[1, 7, 8, 9], [1, 5, 0, 0]]
    assert dec_out.tolist() == [[7, 8, 9, 2], [5, 2, 0, 0]]


def test_batches_cover_every_pair_once():
    pairs = data.make_sequence_pairs(103, 2, 6, seed=0)
    v = data.sequence_vocab()
    seen = 0
    for b in data.batches(pairs, v, v, batch_size=16, seed=0):
        assert b.src.shape[0] == b.tgt_in.shape[0] == b.src_lengths.shape[0]
        assert torch.equal(b.src_mask.sum(1), b.src_lengths)
        assert (b.tgt_in[:, 0] == data.SOS_ID).all()
        seen += b.src.shape[0]
    assert seen == 103


def test_split_has_no_leak():
    pairs = data.make_sequence_pairs(400, 2, 4, n_symbols=3, seed=0)
    train, test = data.split(pairs, 50)
    assert len(test) == 50
    assert not {tuple(s) for s, _ in test} & {tuple(s) for s, _ in train}
