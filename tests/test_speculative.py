"""Speculative decoding: the emitted tokens are distributed exactly as the target's (enumerated for a
vocabulary of 4, gamma = 1 and 2, float64, tolerance 1e-15: sums of products in another order),
and by sampling through `accept` (5 standard errors); greedy speculative decoding equals greedy
decoding token for token (bitwise: the same ids) with two small random course decoders."""

import copy
import itertools
import math

import pytest
import torch

from course_utils.decoding import greedy_decode
from course_utils.lm import DecoderLM, LMConfig
from course_utils.speculative import (
    accept,
    expected_tokens_per_step,
    residual_distribution,
    speculative_generate,
    verify_draft,
)

V = 4


def _dist(g, *shape):
    return torch.softmax(2 * torch.randn(*shape, V, generator=g, dtype=torch.float64), -1)


def _first_token(p1, q1):
    """P(first emitted token = y): the draft draws x ~ q1, kept with min(1, p/q), else residual."""
    a = torch.minimum(torch.ones(V, dtype=torch.float64), p1 / q1)
    return sum(q1[x] * (a[x] * torch.eye(V, dtype=torch.float64)[x] + (1 - a[x]) * residual_distribution(p1, q1))
               for x in range(V))


@pytest.mark.parametrize("seed", range(5))
def test_one_step_distribution_exact_gamma1(seed):
    g = torch.Generator().manual_seed(seed)
    p1, q1 = _dist(g), _dist(g)
    torch.testing.assert_close(_first_token(p1, q1), p1, rtol=0, atol=1e-15)


@pytest.mark.parametrize("seed", range(5))
def test_one_step_distribution_exact_gamma2(seed):
    """Joint of the first two tokens emitted, p2 and q2 depending on the first token: equal to
    p1(y1) p2(y2 | y1). A step that stops after y1 (rejected) lets the next step draw y2, whose first
    token is distributed as p2(. | y1) (the gamma = 1 result)."""
    g = torch.Generator().manual_seed(100 + seed)
    p1, q1, p2, q2 = _dist(g), _dist(g), _dist(g, V), _dist(g, V)        # p2[x1] = p2(. | x1)
    joint = torch.zeros(V, V, dtype=torch.float64)
    for x1, x2 in itertools.product(range(V), range(V)):
        a1 = min(1.0, float(p1[x1] / q1[x1]))
        a2 = min(1.0, float(p2[x1, x2] / q2[x1, x2]))
        w = q1[x1] * q2[x1, x2]
        joint[x1, x2] += w * a1 * a2                                       # both kept
        joint[x1] += w * a1 * (1 - a2) * residual_distribution(p2[x1], q2[x1])   # x1 kept, x2 corrected
        for y1 in range(V):                                                # x1 rejected: y1, then a fresh step
            joint[y1] += w * (1 - a1) * residual_distribution(p1, q1)[y1] * _first_token(p2[y1], q2[y1])
    torch.testing.assert_close(joint, p1[:, None] * p2, rtol=0, atol=1e-15)


def test_accept_sampling_matches_target():
    g = torch.Generator().manual_seed(0)
    p, q = _dist(g, 3), _dist(g, 2)
    n = 10000
    counts = torch.zeros(V, dtype=torch.float64)
    for _ in range(n):
        x = torch.multinomial(q[0], 1, generator=g)
        xs = torch.cat([x, torch.multinomial(q[1], 1, generator=g)])
        kept, nxt = accept(p, q, xs, g)
        counts[kept[0] if len(kept) else nxt] += 1
    se = (p[0] * (1 - p[0]) / n).sqrt()
    assert ((counts / n - p[0]).abs() <= 5 * se).all(), (counts / n, p[0])


def test_accept_edge_cases():
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.0, 1.0, 0, 0], [0, 0, 1.0, 0]], dtype=torch.float64)
    kept, nxt = accept(p, p[:1], torch.tensor([1]), g)                # p == q: always kept, bonus from p[1]
    assert kept.tolist() == [1] and nxt == 2
    kept, nxt = accept(p, torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64), torch.tensor([0]), g)
    assert kept.tolist() == [] and nxt == 1                           # p(x) = 0: rejected, residual = p


def test_expected_tokens_per_step():
    assert expected_tokens_per_step(0.0, 5) == 1.0 and expected_tokens_per_step(1.0, 5) == 6.0
    assert math.isclose(expected_tokens_per_step(0.8, 4), sum(0.8 ** i for i in range(5)))


def _models():
    torch.manual_seed(0)
    target = DecoderLM(LMConfig.llama(20, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2)).double().eval()
    draft = DecoderLM(LMConfig.llama(20, d_model=16, n_heads=2, n_layers=1)).double().eval()
    return target, draft


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_greedy_speculative_equals_greedy(gamma):
    target, draft = _models()
    prompt = torch.tensor([[3, 7, 1, 12]])
    want, _ = greedy_decode(target, target.init_state(1), 25, eos_id=-1, prompt=prompt)
    got, stats = speculative_generate(target, draft, prompt, gamma, 25)
    assert torch.equal(got, want)
    assert stats["target_passes"] <= 25 and stats["drafted"] == gamma * stats["target_passes"]
    same, _ = speculative_generate(target, target, prompt, gamma, 25)     # a perfect draft: all kept
    assert torch.equal(same, want)


def test_sampling_runs_and_perfect_draft_accepts_all():
    target, draft = _models()
    prompt = torch.tensor([[3]])
    out, stats = speculative_generate(target, draft, prompt, 3, 12, greedy=False,
                                      generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 12) and 0 <= stats["accepted"] <= stats["drafted"]
    _, stats = speculative_generate(target, target, prompt, 3, 12, greedy=False,
                                    generator=torch.Generator().manual_seed(0))
    assert stats["accepted"] == stats["drafted"] and stats["target_passes"] == 3


def test_bad_inputs():
    p, q = torch.full((2, V), 0.25), torch.full((1, V), 0.25)
    with pytest.raises(ValueError, match="p must be"):
        accept(p[:1], q, torch.tensor([0]))
    with pytest.raises(ValueError, match="ids in"):
        accept(p, q, torch.tensor([V]))
    with pytest.raises(TypeError, match="torch.Tensor"):
        accept(p, q, [0])
    with pytest.raises(ValueError, match="alpha"):
        expected_tokens_per_step(1.5, 2)
    target, draft = _models()
    with pytest.raises(ValueError, match="gamma"):
        speculative_generate(target, draft, torch.tensor([[1]]), 0, 5)
    with pytest.raises(ValueError, match="prompt"):
        speculative_generate(target, draft, torch.tensor([[1], [2]]), 2, 5)
    other = DecoderLM(LMConfig.llama(30, d_model=16, n_heads=2, n_layers=1))
    with pytest.raises(ValueError, match="vocabulary"):
        speculative_generate(target, other, torch.tensor([[1]]), 2, 5)


@pytest.mark.parametrize("gamma", [2, 4])
def test_greedy_speculative_partial_acceptance(gamma):
    """A draft close to the target (its weights plus noise): some drafts kept, some rejected, the
    caches cropped mid-draft; still the target's greedy tokens."""
    target, _ = _models()
    with torch.no_grad():
        for w in target.parameters():
            w.mul_(8)                                         # a peaked target: not one token repeated
    draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for w in draft.parameters():
            w.add_(0.05 * torch.randn(w.shape, generator=g, dtype=w.dtype))
    prompt = torch.tensor([[3, 7, 1, 12]])
    want, _ = greedy_decode(target, target.init_state(1), 40, eos_id=-1, prompt=prompt)
    got, stats = speculative_generate(target, draft, prompt, gamma, 40)
    assert torch.equal(got, want)
    assert 0 < stats["accepted"] < stats["drafted"], stats


def test_verify_draft_rule():
    """Token i kept exactly when u[i] < p/q: u just below the ratio keeps it, just above rejects it;
    the distribution returned is the residual at the first rejection, else p[gamma]."""
    g = torch.Generator().manual_seed(3)
    p, q = _dist(g, 4), _dist(g, 3)
    xs = torch.tensor([0, 1, 2])
    ratio = torch.minimum(torch.ones(3, dtype=torch.float64), p[[0, 1, 2], xs] / q[[0, 1, 2], xs])
    assert verify_draft(p, q, xs, torch.zeros(3))[0] == 3                 # u = 0: every token kept
    for i in range(3):
        for eps, kept in ((-1e-9, True), (1e-9, False)):
            u = torch.zeros(3, dtype=torch.float64)
            u[i] = ratio[i] + eps
            if ratio[i] >= 1 and not kept:
                continue                                       # u < 1 <= p/q: always kept
            n, dist = verify_draft(p, q, xs, u)
            if kept:
                assert n == 3 and torch.equal(dist, p[3])
            else:
                assert n == i
                torch.testing.assert_close(dist, residual_distribution(p[i], q[i]))
    with pytest.raises(ValueError, match="u must be"):
        verify_draft(p, q, xs, torch.zeros(2))


def test_rejected_counts_steps():
    target, draft = _models()
    _, stats = speculative_generate(target, draft, torch.tensor([[3]]), 3, 20, greedy=False,
                                    generator=torch.Generator().manual_seed(0))
    full = stats["target_passes"] - stats["rejected"]                 # steps with every draft token kept
    assert stats["accepted"] >= 3 * full and stats["accepted"] <= 3 * full + 2 * stats["rejected"]
