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


# --- chapter 7: prompts and sampling ---------------------------------------------------------

def history_step(V, seed):
    """A 'model' whose next-token distribution depends on the whole prefix fed so far (kept in
    the state as a running hash), so that a wrong prefill changes the result."""
    g = torch.Generator().manual_seed(seed)
    table = torch.log_softmax(torch.randn(7, V, V, generator=g) * 2, dim=-1)

    def step(prev, state):
        h = (state["h"] * 3 + prev) % 7
        return table[h, prev], {"h": h}
    return step


def test_top_k_keeps_exactly_k_even_with_ties():
    logits = torch.tensor([[1.0, 3.0, 3.0, 3.0, 0.0, 2.0], [5.0, 4.0, 3.0, 2.0, 1.0, 0.0]])
    for k in range(1, 7):
        out = decoding.filter_top_k(logits, k)
        kept = torch.isfinite(out)
        assert kept.sum(-1).tolist() == [k, k]
        torch.testing.assert_close(out[kept], logits[kept])    # kept logits are unchanged
        # every kept logit is >= every dropped one
        for row in range(2):
            if k < 6:
                assert logits[row][kept[row]].min() >= logits[row][~kept[row]].max()
    assert torch.isfinite(decoding.filter_top_k(logits, 1)).nonzero()[:, 1].tolist()[1] == 0
    assert torch.equal(decoding.filter_top_k(logits, 99), logits)


def _nucleus_size_by_brute_force(probs, p):
    """The smallest number of most probable tokens whose mass reaches p."""
    ranked = sorted(probs.tolist(), reverse=True)
    for n in range(1, len(ranked) + 1):
        if sum(ranked[:n]) >= p - 1e-7:
            return n
    return len(ranked)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("p", [1e-6, 0.1, 0.5, 0.9, 0.99])
def test_top_p_keeps_the_smallest_set_with_enough_mass(seed, p):
    logits = torch.randn(12, generator=torch.Generator().manual_seed(seed)) * 2
    out = decoding.filter_top_p(logits, p)
    kept = torch.isfinite(out)
    probs = torch.softmax(logits, -1)
    assert int(kept.sum()) == _nucleus_size_by_brute_force(probs, p)
    assert float(probs[kept].sum()) >= p - 1e-6
    assert probs[kept].min() >= probs[~kept].max() if (~kept).any() else True
    torch.testing.assert_close(out[kept], logits[kept])


def test_top_p_edge_cases():
    logits = torch.log(torch.tensor([[0.4, 0.3, 0.3], [0.5, 0.25, 0.25]]))
    # ties: 0.4 + 0.3 = 0.7 >= 0.5, so exactly two tokens, the tie going to the lower id
    assert torch.isfinite(decoding.filter_top_p(logits, 0.5)).tolist() == [[True, True, False], [True, False, False]]
    # p = 1 keeps everything, a tiny p only the most probable token
    assert torch.isfinite(decoding.filter_top_p(logits, 1.0)).all()
    assert torch.isfinite(decoding.filter_top_p(logits, 1e-9)).sum(-1).tolist() == [1, 1]
    # a mass exactly equal to p is enough: 0.5 reaches 0.5
    assert torch.isfinite(decoding.filter_top_p(logits[1:], 0.5)).sum().item() == 1
    # tokens already removed (-inf, e.g. by top-k) stay removed
    masked = torch.tensor([[0.0, float("-inf"), 0.0]])
    assert torch.isfinite(decoding.filter_top_p(masked, 0.99)).tolist() == [[True, False, True]]
    for bad in (0, -0.1, 1.5, True):
        with pytest.raises(ValueError, match="top_p"):
            decoding.filter_top_p(logits, bad)
    with pytest.raises(ValueError, match="top_k"):
        decoding.filter_top_k(logits, 0)


def test_sampling_distribution_applies_temperature_then_filters():
    log_probs = torch.log_softmax(torch.tensor([2.0, 1.0, 0.5, -1.0]), -1)
    torch.testing.assert_close(decoding.sampling_distribution(log_probs), torch.softmax(log_probs, -1))
    torch.testing.assert_close(decoding.sampling_distribution(log_probs, temperature=0.5),
                               torch.softmax(log_probs * 2, -1))
    # top_k=2 then renormalised
    want = torch.softmax(torch.tensor([2.0, 1.0]), -1)
    torch.testing.assert_close(decoding.sampling_distribution(log_probs, top_k=2)[:2], want)
    assert decoding.sampling_distribution(log_probs, top_k=2)[2:].tolist() == [0.0, 0.0]
    assert decoding.sampling_distribution(log_probs, temperature=0).tolist() == [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="temperature"):
        decoding.sampling_distribution(log_probs, temperature=-1)


@pytest.mark.parametrize("temperature", [0, 1e-4])
def test_temperature_towards_zero_is_greedy(temperature):
    table = random_table(9, 5)
    state = {"n": torch.zeros(6)}
    g_tokens, g_scores = decoding.greedy_decode(markov_step(table), state, max_len=7)
    gen = torch.Generator().manual_seed(0)
    s_tokens, s_scores = decoding.sample_decode(markov_step(table), state, max_len=7, temperature=temperature,
                                                generator=gen)
    assert torch.equal(s_tokens, g_tokens)
    torch.testing.assert_close(s_scores, g_scores)


@pytest.mark.parametrize("settings", [dict(), dict(temperature=0.7), dict(top_k=3), dict(top_p=0.8),
                                      dict(temperature=1.5, top_k=4, top_p=0.9)])
def test_sampling_frequencies_match_the_filtered_distribution(settings):
    V, n = 8, 40000
    table = random_table(V, 11)
    want = decoding.sampling_distribution(table[SOS_ID], **settings)
    tokens, scores = decoding.sample_decode(markov_step(table), {"n": torch.zeros(n)}, max_len=1,
                                            generator=torch.Generator().manual_seed(1), **settings)
    freq = torch.bincount(tokens[:, 0], minlength=V).float() / n
    assert (freq[want == 0] == 0).all(), "a filtered-out token was drawn"
    # binomial standard error <= sqrt(0.25 / n) = 0.0025; allow 5 of them
    assert (freq - want).abs().max() < 0.0125, (freq, want)
    torch.testing.assert_close(scores, table[SOS_ID][tokens[:, 0]])   # the model's own log-probs


def test_sampling_is_reproducible_with_a_seeded_generator():
    table = random_table(9, 2)
    run = lambda seed: decoding.sample_decode(markov_step(table), {"n": torch.zeros(5)}, max_len=10, top_p=0.9,
                                              generator=torch.Generator().manual_seed(seed))[0]
    assert torch.equal(run(3), run(3))
    assert not torch.equal(run(3), run(4))


def test_sampled_sentences_are_padded_after_eos():
    table = random_table(5, 7, temperature=0.5)
    tokens, _ = decoding.sample_decode(markov_step(table), {"n": torch.zeros(200)}, max_len=12,
                                       generator=torch.Generator().manual_seed(0))
    seen_eos = False
    for row in tokens.tolist():
        if EOS_ID in row:
            seen_eos = True
            assert all(t == PAD_ID for t in row[row.index(EOS_ID) + 1:])
    assert seen_eos


@pytest.mark.parametrize("decoder", ["greedy", "sample", "beam"])
def test_prompt_decoding_equals_decoding_after_a_manual_prefill(decoder):
    V = 9
    step = history_step(V, 0)
    prompt = torch.tensor([[SOS_ID, 5, 6, 7, 4]])
    state = {"h": torch.zeros(1, dtype=torch.long)}
    _, prefilled = decoding.prefill(step, state, prompt[:, :-1])
    assert prefilled["h"].tolist() != state["h"].tolist()
    kw = dict(max_len=6)
    if decoder == "greedy":
        a = decoding.greedy_decode(step, state, prompt=prompt, prefill=decoding.stepwise(step), **kw)
        b = decoding.greedy_decode(step, prefilled, sos_id=4, **kw)
        c = decoding.greedy_decode(step, state, **kw)
    elif decoder == "sample":
        gen = lambda: torch.Generator().manual_seed(0)
        a = decoding.sample_decode(step, state, prompt=prompt, prefill=decoding.stepwise(step), generator=gen(), **kw)
        b = decoding.sample_decode(step, prefilled, sos_id=4, generator=gen(), **kw)
        c = decoding.sample_decode(step, state, generator=gen(), **kw)
    else:
        a = [(h.tokens, h.score) for h in decoding.beam_search(step, state, prompt=prompt, prefill=decoding.stepwise(step), beam_size=3, **kw)]
        b = [(h.tokens, h.score) for h in decoding.beam_search(step, prefilled, sos_id=4, beam_size=3, **kw)]
        c = [(h.tokens, h.score) for h in decoding.beam_search(step, state, beam_size=3, **kw)]
    assert repr(a) == repr(b)
    assert repr(a) != repr(c), "the prompt made no difference: the test cannot tell"


def test_prefill_returns_the_last_prediction():
    step = history_step(6, 1)
    state = {"h": torch.zeros(2, dtype=torch.long)}
    tokens = torch.tensor([[1, 2, 3], [3, 2, 1]])
    log_probs, s = decoding.prefill(step, state, tokens)
    _, s2 = decoding.prefill(step, state, tokens[:, :2])
    want, _ = step(tokens[:, 2], s2)
    torch.testing.assert_close(log_probs, want)
    assert decoding.prefill(step, state, tokens[:, :0])[0] is None


def test_prompt_is_checked():
    step = history_step(6, 1)
    state = {"h": torch.zeros(2, dtype=torch.long)}
    with pytest.raises(ValueError, match="rows"):
        decoding.greedy_decode(step, state, 3, prompt=torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="P >= 1"):
        decoding.greedy_decode(step, state, 3, prompt=torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        decoding.greedy_decode(step, state, 3, prompt=torch.zeros(2, 2))


@pytest.mark.parametrize("n_kv_heads", [4, 1])
def test_beam_search_with_kv_caches_equals_without(n_kv_heads):
    from course_utils.transformer import Seq2SeqConfig, Seq2SeqTransformer
    torch.manual_seed(0)
    model = Seq2SeqTransformer(Seq2SeqConfig(src_vocab=11, tgt_vocab=13, d_model=16, n_heads=4, n_layers=2, n_kv_heads=n_kv_heads)).eval()
    src, lengths = torch.randint(3, 11, (1, 6)), torch.tensor([6])
    results = []
    for use_cache in (True, False):
        model.use_cache = use_cache
        state = model.encode(src, lengths)
        hyps = decoding.beam_search(model.decode_step, state, max_len=8, beam_size=4)
        results.append([(h.tokens, round(h.score, 4)) for h in hyps])
    assert results[0] == results[1]
    assert len({tuple(t) for t, _ in results[0]}) == 4    # four different hypotheses were kept
