"""The rolling-buffer cache: decoding token by token equals the banded causal mask over the full
sequence. Not bitwise: the buffer holds the keys in slot order (i mod W), not position order, so the
softmax sums in another order; float64, tolerance 1e-12."""

import pytest
import torch
import torch.nn.functional as F

from course_utils.attention import scaled_dot_product_attention
from course_utils.rolling import (
    RollingKVCache,
    banded_causal_mask,
    receptive_field,
    rolling_attend,
    slot_positions,
)


@pytest.mark.parametrize("window", [1, 3, 5, 40])
def test_rolling_equals_banded(window):
    g = torch.Generator().manual_seed(window)
    H, L, D = 2, 17, 4
    q, k, v = (torch.randn(H, L, D, generator=g, dtype=torch.float64) for _ in range(3))
    full = F.scaled_dot_product_attention(q, k, v, attn_mask=banded_causal_mask(L, window))
    ours, _ = scaled_dot_product_attention(q, k, v, banded_causal_mask(L, window))
    torch.testing.assert_close(ours, full, rtol=0, atol=1e-12)
    cache = RollingKVCache(window, H, D, dtype=torch.float64)
    nbytes = cache.nbytes()
    steps = [cache.step(q[:, i:i + 1], k[:, i:i + 1], v[:, i:i + 1]) for i in range(L)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-12)
    assert cache.nbytes() == nbytes == 2 * H * window * D * 8      # flat in the length


def test_banded_mask_and_receptive_field():
    m = banded_causal_mask(6, 3)
    assert m.sum(1).tolist() == [1, 2, 3, 3, 3, 3]
    assert m[5].tolist() == [False, False, False, True, True, True]
    assert torch.equal(banded_causal_mask(6, 6), torch.ones(6, 6).tril().bool())
    assert receptive_field(0, 4096) == 1 and receptive_field(1, 4096) == 4096
    assert receptive_field(32, 4096) == 32 * 4095 + 1              # Mistral 7B: 32 layers, W = 4096


def test_receptive_field_measured():
    """The receptive field by composing masks: n layers of the window reach n * (W - 1) back."""
    L, W = 30, 4
    m = banded_causal_mask(L, W).double()
    reach = torch.eye(L, dtype=torch.float64)
    for n in range(1, 5):
        reach = (m @ reach).clamp(max=1)
        assert int(reach[L - 1].sum()) == receptive_field(n, W)


def test_bad_inputs():
    with pytest.raises(ValueError, match="window"):
        RollingKVCache(0, 2, 4)
    with pytest.raises(ValueError, match="window"):
        banded_causal_mask(4, 0)
    cache = RollingKVCache(3, 2, 4)
    with pytest.raises(ValueError, match=r"\(n_heads, 1, d_head\)"):
        cache.step(torch.zeros(2, 2, 4), torch.zeros(2, 1, 4), torch.zeros(2, 1, 4))
    with pytest.raises(TypeError, match="torch.Tensor"):
        cache.step(torch.zeros(2, 1, 4), None, torch.zeros(2, 1, 4))


def test_rolling_attend_writes_in_place_and_reads_the_filled_slots():
    g = torch.Generator().manual_seed(5)
    H, W, D = 2, 3, 4
    kb, vb = torch.randn(2, H, W, D, generator=g, dtype=torch.float64)       # stale values in every slot
    q, k, v = torch.randn(3, H, D, generator=g, dtype=torch.float64)
    out = rolling_attend(q, k, v, kb, vb, 0)                                  # one filled slot: its value
    assert torch.equal(kb[:, 0], k) and torch.equal(vb[:, 0], v)
    torch.testing.assert_close(out, v, rtol=0, atol=1e-15)
    rolling_attend(q, k, v, kb, vb, 7)                                        # 7 % 3: slot 1
    assert torch.equal(kb[:, 1], k)
    with pytest.raises(ValueError, match="pos"):
        rolling_attend(q, k, v, kb, vb, -1)
    with pytest.raises(ValueError, match="k_new"):
        rolling_attend(q, k[:1], v, kb, vb, 0)
    with pytest.raises(ValueError, match="v_buf"):
        rolling_attend(q, k, v, kb, vb[:, :2], 0)


def test_slot_positions_by_writing():
    """What each slot holds, against writing the positions into a list of W slots one by one."""
    for window in (1, 2, 3, 5, 8):
        slots = [-1] * window
        for pos in range(3 * window + 2):
            slots[pos % window] = pos
            got = slot_positions(pos, window)
            assert got.dtype == torch.long and got.tolist() == slots
            held = sorted(p for p in slots if p >= 0)
            assert held == torch.nonzero(banded_causal_mask(pos + 1, window)[pos]).flatten().tolist()
    assert slot_positions(10**12, 4096).max().item() == 10**12
    for bad, word in (((-1, 3), "pos"), ((2.0, 3), "pos"), ((True, 3), "pos"), ((2, 0), "window"), ((2, 1.0), "window")):
        with pytest.raises(ValueError, match=word):
            slot_positions(*bad)
