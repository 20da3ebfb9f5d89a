import itertools

import pytest
import torch

from course_utils import decoding
from course_utils.data import EOS_ID, PAD_ID, SOS_ID


def markov_step(table):
    """A 'model' whose next-token log-probabilities depend only on the previous token."""
    def step(prev, state):
        return table[prev], {**state, "n": state["n"] + 1}
    return step


def random_table(V, seed, temperature=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(V, V, generator=g) / temperature, dim=-1)


def test_index_state_walks_nested_structures():
    state = {"h": torch.arange(6).view(3, 2), "pair": (torch.arange(3), None), "k": 5}
    out = decoding.index_state(state, torch.tensor([2, 0]))
    assert out["h"].tolist() == [[4, 5], [0, 1]]
    assert out["pair"][0].tolist() == [2, 0] and out["pair"][1] is None and out["k"] == 5
    assert decoding.state_batch_size(state) == 3


def test_greedy_follows_argmax_and_pads_after_eos():
    table = torch.full((5, 5), -10.0)
    table[SOS_ID, 4] = 0.0   # sos -> 4
    table[4, 3] = 0.0        # 4 -> 3
    table[3, EOS_ID] = 0.0   # 3 -> eos
    table[EOS_ID, 4] = 0.0   # (never used: finished rows are padded)
    table = torch.log_softmax(table, -1)
    tokens, scores = decoding.greedy_decode(markov_step(table), {"n": torch.zeros(2)}, max_len=6)
    assert tokens.tolist() == [[4, 3, EOS_ID]] * 2
    want = table[SOS_ID, 4] + table[4, 3] + table[3, EOS_ID]
    torch.testing.assert_close(scores, want.repeat(2))
    assert decoding.tokens_to_lists(tokens) == [[4, 3], [4, 3]]


def test_greedy_rows_that_end_at_different_steps_are_padded_and_stop_scoring():
    # Row 0: sos -> 4 -> eos (2 tokens); row 1: sos -> 3 -> 4 -> eos (3 tokens); each row
    # has its own table, chosen through the state.
    tables = torch.full((2, 5, 5), -10.0)
    tables[0, SOS_ID, 4], tables[0, 4, EOS_ID] = 0.0, 0.0
    tables[1, SOS_ID, 3], tables[1, 3, 4], tables[1, 4, EOS_ID] = 0.0, 0.0, 0.0
    tables[:, EOS_ID, 4] = 0.0   # what a finished row would write next if it were not padded
    tables = torch.log_softmax(tables, -1)

    def step(prev, state):
        return tables[state["row"], prev], state

    tokens, scores = decoding.greedy_decode(step, {"row": torch.arange(2)}, max_len=6)
    assert tokens.tolist() == [[4, EOS_ID, PAD_ID], [3, 4, EOS_ID]]
    want = torch.stack([tables[0, SOS_ID, 4] + tables[0, 4, EOS_ID],
                        tables[1, SOS_ID, 3] + tables[1, 3, 4] + tables[1, 4, EOS_ID]])
    torch.testing.assert_close(scores, want)


def test_greedy_stops_at_max_len():
    table = torch.log_softmax(torch.eye(5) * -5 + torch.tensor([0, 0, -9, 0, 3.0]), -1)
    tokens, _ = decoding.greedy_decode(markov_step(table), {"n": torch.zeros(1)}, max_len=4)
    assert tokens.shape == (1, 4) and EOS_ID not in tokens.tolist()[0]


@pytest.mark.parametrize("seed", range(20))
def test_beam_of_one_is_greedy(seed):
    table = random_table(7, seed)
    step = markov_step(table)
    tokens, score = decoding.greedy_decode(step, {"n": torch.zeros(1)}, max_len=8)
    (best,) = decoding.beam_search(step, {"n": torch.zeros(1)}, max_len=8, beam_size=1)
    greedy = tokens[0].tolist()
    if EOS_ID in greedy:  # keep up to and including the first eos (padding follows it)
        greedy = greedy[: greedy.index(EOS_ID) + 1]
    assert best.tokens == greedy
    assert best.score == pytest.approx(float(score[0]), abs=1e-5)


def _all_sequences(table, max_len):
    """Every finished sequence (ending at its first eos) up to max_len, with its log-prob."""
    V = table.shape[0]
    out = []
    for L in range(1, max_len + 1):
        for body in itertools.product([t for t in range(V) if t != EOS_ID], repeat=L - 1):
            seq = list(body) + [EOS_ID]
            prev, s = SOS_ID, 0.0
            for t in seq:
                s += float(table[prev, t])
                prev = t
            out.append((s, seq))
    return out


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_wide_beam_finds_the_exact_best_sequence(seed, alpha):
    table = random_table(5, seed, temperature=0.7)
    max_len = 4
    exact = max(_all_sequences(table, max_len), key=lambda x: x[0] / len(x[1]) ** alpha)
    hyps = decoding.beam_search(markov_step(table), {"n": torch.zeros(1)}, max_len=max_len,
                                beam_size=5 ** max_len, alpha=alpha)
    assert hyps[0].finished and hyps[0].tokens == exact[1]
    assert hyps[0].normalized == pytest.approx(exact[0] / len(exact[1]) ** alpha, abs=1e-5)


def test_beam_escapes_the_greedy_trap():
    # From sos, token 4 looks best (0.6 vs 0.4) but is followed by a flat distribution;
    # token 3 is followed by eos with certainty. Greedy takes 4; beam 2 finds [3, eos].
    V = 6
    table = torch.full((V, V), 1e-9)
    table[SOS_ID, 4], table[SOS_ID, 3] = 0.6, 0.4
    table[4, :] = 1.0 / V
    table[3, EOS_ID] = 1.0
    table = torch.log(table / table.sum(-1, keepdim=True))
    step = markov_step(table)
    tokens, g_score = decoding.greedy_decode(step, {"n": torch.zeros(1)}, max_len=3)
    hyps = decoding.beam_search(step, {"n": torch.zeros(1)}, max_len=3, beam_size=2)
    assert tokens[0, 0] == 4
    assert hyps[0].tokens == [3, EOS_ID]
    assert hyps[0].score > float(g_score[0])


def test_beam_scores_are_the_sum_of_token_log_probs():
    table = random_table(6, 3)
    for h in decoding.beam_search(markov_step(table), {"n": torch.zeros(1)}, max_len=6, beam_size=3, alpha=0.7):
        prev, s = SOS_ID, 0.0
        for t in h.tokens:
            s += float(table[prev, t])
            prev = t
        assert h.score == pytest.approx(s, abs=1e-5)
        assert h.normalized == pytest.approx(s / len(h.tokens) ** 0.7, abs=1e-5)


def test_beam_wider_than_the_candidates_keeps_them_all():
    # V = 5 tokens, max_len = 2: after one step only 5 candidates exist, so a beam of 50 keeps
    # every one of them and returns every sequence of length <= 2, never a duplicate.
    table = random_table(5, seed=3)
    hyps = decoding.beam_search(markov_step(table), {"n": torch.zeros(1)}, max_len=2, beam_size=50)
    seqs = [tuple(h.tokens) for h in hyps]
    assert len(seqs) == len(set(seqs))
    finished = {s for s, h in zip(seqs, hyps) if h.finished}
    assert finished == {(EOS_ID,)} | {(t, EOS_ID) for t in range(5) if t != EOS_ID}
    assert len(hyps) == len(finished) + 4 * 4   # unfinished: two non-eos tokens
    scores = [h.normalized for h in hyps if h.finished]
    assert scores == sorted(scores, reverse=True)


def test_beam_search_rejects_batches():
    with pytest.raises(ValueError, match="one sentence"):
        decoding.beam_search(markov_step(random_table(5, 0)), {"n": torch.zeros(2)}, max_len=3)
    with pytest.raises(ValueError, match="beam_size"):
        decoding.beam_search(markov_step(random_table(5, 0)), {"n": torch.zeros(1)}, max_len=3, beam_size=0)
