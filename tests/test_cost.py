"""course_utils.cost: timing with warm-up and median, bytes saved for backward, calls counted."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from course_utils import cost, rnn


def test_seconds_per_call_is_the_median_after_warmup():
    calls = []
    ticks = itertools.count()
    # the clock advances by one per reading, except the second timed call, which takes 10
    durations = iter([1, 10, 1, 2, 3])
    now = [0.0]

    def clock():
        next(ticks)
        return now[0]

    def fn(x):
        calls.append(x)
        now[0] += next(durations) if len(calls) > 2 else 0.0   # the 2 warm-up calls take no time

    got = cost.seconds_per_call(fn, "a", repeats=5, warmup=2, clock=clock)
    # timed calls take 1, 10, 1, 2, 3 -> median 2; the first two calls were warm-up
    assert len(calls) == 7
    assert got == 2


def test_seconds_per_call_measures_real_time():
    t = cost.seconds_per_call(lambda: sum(range(20000)), repeats=3)
    assert 0 < t < 5


@pytest.mark.parametrize("bad", [dict(repeats=0), dict(warmup=-1)])
def test_seconds_per_call_rejects_bad_counts(bad):
    with pytest.raises(ValueError, match="repeats"):
        cost.seconds_per_call(lambda: None, **bad)


def test_saved_bytes_of_known_operations():
    x = torch.randn(100, requires_grad=True)
    y = torch.randn(100, requires_grad=True)
    assert cost.saved_bytes(torch.exp, x) == 100 * 4                   # exp saves its result
    assert cost.saved_bytes(torch.mul, x, y) == 2 * 100 * 4             # mul saves both inputs
    assert cost.saved_bytes(torch.mul, x, x) == 100 * 4                 # the same tensor counts once
    assert cost.saved_bytes(torch.add, x, y) == 0                       # add needs nothing
    assert cost.saved_bytes(torch.exp, x.detach()) == 0                 # no grad, nothing saved
    assert cost.saved_bytes(torch.exp, x.double()) == 100 * 8


def test_saved_bytes_of_naive_attention():
    def naive(q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1) @ v

    for L in (64, 128):
        q, k, v = (torch.randn(L, 8, requires_grad=True) for _ in range(3))
        # q, k and v (L x 8 each) and the L x L weights, in float32; the weights are saved twice
        # (by the softmax and by the last product) but counted once
        assert cost.saved_bytes(naive, q, k, v) == 4 * (L * L + 3 * L * 8)


def test_count_torch_calls():
    x = torch.randn(3, 4)
    assert cost.count_torch_calls(lambda t: (t @ t.T).exp().sum(), x) == 4   # matmul, .T, exp, sum
    W_xh, W_hh, b = torch.randn(4, 4), torch.randn(4, 4), torch.zeros(4)
    counts = [cost.count_torch_calls(rnn.rnn_forward, torch.randn(1, L, 4), torch.zeros(1, 4), W_xh, W_hh, b)
              for L in (4, 8, 16)]
    assert counts[2] - counts[1] == 2 * (counts[1] - counts[0]) > 0      # linear in the length


def test_torch_threads_restores():
    old = torch.get_num_threads()
    with cost.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == old
    with pytest.raises(ValueError):
        with cost.torch_threads(0):
            pass


def test_machine_names_the_processor_threads_and_torch():
    text = cost.machine()
    assert torch.__version__ in text and "logical CPUs" in text and "torch thread" in text
    with cost.torch_threads(1):
        assert "1 torch thread," in cost.machine()


def test_largest_tensor_sees_every_result_made_inside_the_block():
    q, k = torch.randn(2, 40, 4), torch.randn(2, 40, 4)
    with cost.LargestTensor() as small:
        for j in range(0, 40, 8):
            q[:, :8] @ k[:, j:j + 8].transpose(-2, -1)
    with cost.LargestTensor() as big:
        q @ k.transpose(-2, -1)
    assert (small.numel, big.numel, big.call) == (2 * 8 * 8, 2 * 40 * 40, "matmul")   # slices count at their own size
