import pytest
import torch

from course_utils import attention, decoding, families, multihead
from course_utils.blocks import TransformerBlock
from course_utils.data import PAD_ID, SOS_ID
from course_utils.lm import DecoderLM, LMConfig

# --- masks ------------------------------------------------------------------------------------

def test_the_three_patterns_by_hand():
    assert families.bidirectional_mask(3).all() and families.bidirectional_mask(3).shape == (3, 3)
    assert families.causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    want = [[True, True, False, False],
            [True, True, False, False],
            [True, True, True, False],
            [True, True, True, True]]
    assert families.prefix_lm_mask(4, 2).tolist() == want
    assert torch.equal(families.prefix_lm_mask(5, 0), attention.causal_mask(5))
    assert torch.equal(families.prefix_lm_mask(5, 5), families.bidirectional_mask(5))
    assert torch.equal(families.prefix_lm_mask(5, 1), attention.causal_mask(5))   # a prefix of one changes nothing


def test_prefix_lm_mask_per_sequence():
    lens = torch.tensor([0, 2, 4])
    m = families.prefix_lm_mask(4, lens)
    assert m.shape == (3, 1, 4, 4) and m.dtype == torch.bool
    for b, n in enumerate(lens.tolist()):
        assert torch.equal(m[b, 0], families.prefix_lm_mask(4, n))
    for bad in (5, -1, 1.5, True):
        with pytest.raises(ValueError, match="prefix_len"):
            families.prefix_lm_mask(4, bad)
    with pytest.raises(ValueError, match="prefix lengths"):
        families.prefix_lm_mask(4, torch.tensor([1, 6]))


def test_prefix_lm_mask_works_in_attention():
    # With a prefix-LM mask, changing a token after the prefix leaves the prefix's outputs alone,
    # while changing a prefix token changes every output.
    torch.manual_seed(0)
    mha = multihead.MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 5, 8)
    mask = families.prefix_lm_mask(5, 3)
    out, _ = mha(x, mask=mask)
    y = x.clone()
    y[0, 4] += 1.0
    out_y, _ = mha(y, mask=mask)
    torch.testing.assert_close(out_y[:, :4], out[:, :4])
    z = x.clone()
    z[0, 2] += 1.0
    out_z, _ = mha(z, mask=mask)
    assert not torch.allclose(out_z[:, 0], out[:, 0])       # position 0 sees prefix position 2


# --- MLM corruption ---------------------------------------------------------------------------

def test_mlm_corruption_proportions_on_a_large_batch():
    V, MASK = 50, 3
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(4, V, (400, 250), generator=g)
    tokens[:, -20:] = PAD_ID                                   # padding is never chosen
    inputs, labels = families.mlm_corrupt(tokens, MASK, V, generator=torch.Generator().manual_seed(1))
    chosen = labels != families.IGNORE_INDEX
    maskable = tokens != PAD_ID
    n = int(maskable.sum())
    assert not chosen[~maskable].any()
    assert abs(chosen.sum().item() / n - 0.15) < 0.005
    assert torch.equal(labels[chosen], tokens[chosen])         # labels are the original tokens
    assert torch.equal(inputs[~chosen], tokens[~chosen])       # nothing else changes
    c = int(chosen.sum())
    masked = (inputs == MASK) & chosen
    changed = (inputs != tokens) & chosen & ~masked            # replaced by a different random token
    kept = (inputs == tokens) & chosen
    assert abs(masked.sum().item() / c - 0.8) < 0.01
    # a random token equals the original with probability 1 / (V - 4), so "kept" is 10% plus that share
    p_same = 1 / (V - 4)
    assert abs(changed.sum().item() / c - 0.1 * (1 - p_same)) < 0.01
    assert abs(kept.sum().item() / c - (0.1 + 0.1 * p_same)) < 0.01
    assert inputs[changed].min() >= 4 and inputs[changed].max() < V   # random tokens are regular tokens


def test_mlm_corruption_is_reproducible_and_respects_maskable():
    tokens = torch.randint(4, 20, (8, 30), generator=torch.Generator().manual_seed(0))
    a = families.mlm_corrupt(tokens, 3, 20, generator=torch.Generator().manual_seed(5))
    b = families.mlm_corrupt(tokens, 3, 20, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    maskable = torch.zeros_like(tokens, dtype=torch.bool)
    maskable[:, 0] = True
    _, labels = families.mlm_corrupt(tokens, 3, 20, maskable=maskable, p=1.0)
    assert (labels[:, 0] == tokens[:, 0]).all() and (labels[:, 1:] == families.IGNORE_INDEX).all()
    inputs, _ = families.mlm_corrupt(tokens, 3, 20, p=1.0, p_mask=1.0, p_random=0.0)
    assert (inputs == 3).all()
    with pytest.raises(ValueError, match="p_mask"):
        families.mlm_corrupt(tokens, 3, 20, p_mask=0.95, p_random=0.1)


def test_mlm_loss_counts_only_chosen_positions():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)
    labels = torch.full((2, 5), families.IGNORE_INDEX)
    labels[0, 1], labels[1, 3] = 4, 6
    want = -(torch.log_softmax(logits[0, 1], -1)[4] + torch.log_softmax(logits[1, 3], -1)[6]) / 2
    torch.testing.assert_close(families.mlm_loss(logits, labels), want)
    logits2 = logits.clone()
    logits2[0, 0] += 100.0                                     # an unchosen position does not matter
    torch.testing.assert_close(families.mlm_loss(logits2, labels), want)


# --- encoder-only -----------------------------------------------------------------------------

def test_encoder_only_shapes_and_bidirectionality():
    torch.manual_seed(0)
    model = families.EncoderOnly(families.EncoderConfig(vocab_size=20, d_model=16, n_heads=4, n_layers=2, n_classes=3)).eval()
    assert all(type(layer) is TransformerBlock for layer in model.stack.layers)
    tokens = torch.randint(4, 20, (2, 7))
    assert model(tokens).shape == (2, 7, 20)
    assert model.classify(tokens).shape == (2, 3)
    states, weights = model.encode_with_weights(tokens)
    assert states.shape == (2, 7, 16) and len(weights) == 2 and weights[0].shape == (2, 4, 7, 7)
    # bidirectional: the first position's state depends on the last token
    t2 = tokens.clone()
    t2[:, -1] = (t2[:, -1] - 4 + 1) % 16 + 4
    assert not torch.allclose(model.encode(t2)[:, 0], states[:, 0])
    # a causal mask makes it one-directional
    causal = families.causal_mask(7)
    torch.testing.assert_close(model.encode(t2, mask=causal)[:, 0], model.encode(tokens, mask=causal)[:, 0])
    with pytest.raises(ValueError, match="n_classes"):
        families.EncoderOnly(families.EncoderConfig(vocab_size=20, d_model=16, n_heads=4)).classify(tokens)


def test_encoder_only_ignores_padding():
    torch.manual_seed(0)
    model = families.EncoderOnly(families.EncoderConfig(vocab_size=20, d_model=16, n_heads=4, n_layers=2)).eval()
    short = torch.randint(4, 20, (1, 5))
    padded = torch.cat([short, torch.full((1, 3), PAD_ID)], dim=1)
    torch.testing.assert_close(model.encode(padded)[:, :5], model.encode(short), atol=1e-5, rtol=1e-5)


# --- decoder-only -----------------------------------------------------------------------------

def _lm(use_cache=True, **kw):
    torch.manual_seed(0)
    return DecoderLM(LMConfig.gpt(23, d_model=16, n_heads=4, n_layers=2, max_len=40, use_cache=use_cache, **kw)).eval()


def test_decoder_only_is_causal():
    lm = _lm()
    assert all(type(layer) is TransformerBlock for layer in lm.stack.layers)
    tokens = torch.randint(4, 23, (2, 9))
    logits = lm(tokens)
    assert logits.shape == (2, 9, 23)
    t2 = tokens.clone()
    t2[:, 6] = (t2[:, 6] - 4 + 1) % 19 + 4
    logits2 = lm(t2)
    torch.testing.assert_close(logits2[:, :6], logits[:, :6])   # the past does not see the future
    assert not torch.allclose(logits2[:, 6:], logits[:, 6:])


@pytest.mark.parametrize("norm_first", [True, False])
def test_decode_steps_equal_teacher_forcing(norm_first):
    lm = _lm(norm_first=norm_first)
    tokens = torch.randint(4, 23, (3, 8))
    want = torch.log_softmax(lm(tokens), -1)
    state = lm.init_state(3)
    for t in range(8):
        log_probs, state = lm.decode_step(tokens[:, t], state)
        torch.testing.assert_close(log_probs, want[:, t], atol=1e-5, rtol=1e-5)
    assert len(state) == 8 and [len(c) for c in state.layers] == [8, 8]


@pytest.mark.parametrize("n_kv_heads", [1, 2])
def test_grouped_kv_heads_and_gelu_decode_as_they_teacher_force(n_kv_heads):
    """Chapter 4's decoder: GQA/MQA key/value heads and a GELU feed-forward, preallocated caches."""
    torch.manual_seed(0)
    lm = DecoderLM(LMConfig.gpt(25, d_model=16, n_heads=4, n_layers=2, d_ff=24, max_len=16, n_kv_heads=n_kv_heads, ffn="gelu")).eval()
    attn, ff = lm.stack.layers[0].self_attn, lm.stack.layers[0].ff
    assert attn.n_kv_heads == n_kv_heads and attn.k_proj.out_features == n_kv_heads * 4
    assert ff.activation == "gelu" and ff.linear1.out_features == 24
    tokens = torch.randint(4, 23, (3, 8))
    want = torch.log_softmax(lm(tokens), -1)
    state = lm.prefill(tokens[:, :3])
    assert [c.capacity for c in state.layers] == [16, 16]             # preallocated for max_len
    for t in range(3, 8):
        log_probs, state = lm.decode_step(tokens[:, t], state)
        torch.testing.assert_close(log_probs, want[:, t], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="ffn must be one of"):            # BlockConfig checks it
        DecoderLM(LMConfig.gpt(25, ffn="tanh"))


def test_parallel_prefill_equals_stepwise_prefill():
    lm = _lm()
    prompt = torch.randint(4, 23, (2, 6))
    fast = lm.prefill(prompt)
    _, slow = decoding.prefill(lm.decode_step, lm.init_state(2), prompt)
    assert len(fast) == len(slow) == 6
    for a, b in zip(fast.layers, slow.layers):
        torch.testing.assert_close(a.k, b.k, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(a.v, b.v, atol=1e-5, rtol=1e-5)
    nxt = torch.randint(4, 23, (2,))
    torch.testing.assert_close(lm.decode_step(nxt, fast)[0], lm.decode_step(nxt, slow)[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("how", ["greedy", "sample", "beam"])
def test_cached_generation_equals_uncached(how):
    results = []
    prompt = torch.tensor([[SOS_ID, 7, 9, 11], [SOS_ID, 5, 5, 6]])
    for use_cache in (True, False):
        lm = _lm(use_cache=use_cache)
        if how == "greedy":
            out = decoding.greedy_decode(lm, lm.init_state(2), max_len=12, prompt=prompt)
        elif how == "sample":
            out = decoding.sample_decode(lm, lm.init_state(2), max_len=12, prompt=prompt, top_k=5,
                                         temperature=1.3, generator=torch.Generator().manual_seed(0))
        else:
            hyps = decoding.beam_search(lm, lm.init_state(1), max_len=8, beam_size=3, prompt=prompt[:1])
            out = [(h.tokens, h.score) for h in hyps]
        results.append(out)
    if how == "beam":   # the same hypotheses; the scores equal up to rounding (prefill vs recomputation)
        assert [h for h, _ in results[0]] == [h for h, _ in results[1]]
        assert [s for _, s in results[0]] == pytest.approx([s for _, s in results[1]], abs=1e-4)
    else:
        assert torch.equal(results[0][0], results[1][0])
        torch.testing.assert_close(results[0][1], results[1][1], atol=1e-4, rtol=1e-4)
        assert results[0][0].shape[1] >= 8         # it really generated several tokens


def test_tied_weights_share_the_embedding():
    lm = _lm(tie_weights=True)
    assert lm.lm_head.weight is lm.embed.table.weight
    n_untied = sum(p.numel() for p in _lm().parameters())
    n_tied = sum(p.numel() for p in lm.parameters())
    assert n_untied - n_tied == 23 * 16 + 23


# --- the toy language (course_utils.data) -----------------------------------------------------

def test_toy_sentences_follow_the_grammar_and_labels():
    from course_utils import data
    sents = data.make_toy_sentences(3000, seed=0)
    assert sents == data.make_toy_sentences(3000, seed=0)
    assert sents != data.make_toy_sentences(3000, seed=1)
    vocab = data.toy_language_vocab()
    assert vocab.stoi[data.CLS] == 4 and vocab.stoi[data.MASK] == 5 and vocab.itos[data.TOY_FIRST_WORD_ID] != data.MASK
    labels = []
    for words, label in sents:
        assert data.toy_grammatical(words), words
        assert data.toy_sentiment(words) == label
        assert data.UNK_ID not in vocab.encode(words)
        labels.append(label)
    assert 0.45 < sum(labels) / len(labels) < 0.55
    assert 0.45 < sum("not" in w for w, _ in sents) / len(sents) < 0.55
    lengths = {len(w) for w, _ in sents}
    assert min(lengths) == 5 and max(lengths) == 13   # "a cat is sad ." .. "a cat is not very x and very y and very z ."


def test_toy_labels_by_hand_and_ungrammatical_sentences():
    from course_utils import data
    ok = {"a cat is happy .": 1, "some dogs are not kind and very warm .": 0, "the owl is not rude .": 1,
          "these bears are cold and mean .": 0}
    for s, label in ok.items():
        assert data.toy_grammatical(s.split()) and data.toy_sentiment(s.split()) == label
    bad = ["a cats is happy .", "some dog are kind .", "a cat are happy .", "a cat is happy and sad .",
           "a cat is happy", "a cat is very very happy .", "a cat is happy and .", "a cat is not .",
           "these cat is calm .", "a cat is happy kind ."]
    for s in bad:
        assert not data.toy_grammatical(s.split()), s
        assert data.toy_sentiment(s.split()) is None


def test_toy_sentences_can_hold_adjectives_out():
    from course_utils import data
    seen = ["happy", "kind", "sad", "cruel"]
    sents = data.make_toy_sentences(500, seed=0, adjectives=seen)
    used = {w for words, _ in sents for w in words if w in data.TOY_POSITIVE + data.TOY_NEGATIVE}
    assert used == set(seen)
    with pytest.raises(ValueError, match="unknown"):
        data.make_toy_sentences(5, adjectives=["purple"])


def test_multitask_pairs_name_their_task():
    from course_utils import data
    pairs = data.make_multitask_pairs(200, seed=0)
    assert pairs == data.make_multitask_pairs(200, seed=0) and len(pairs) == 600
    vocab = data.multitask_vocab()
    counts = {}
    for src, tgt in pairs:
        task = data.task_of((src, tgt))
        counts[task] = counts.get(task, 0) + 1
        body = src[1:]
        if task == "reverse":
            assert tgt == body[::-1]
        elif task == "sort":
            assert tgt == sorted(body)
        else:
            assert len(tgt) == 10 and tgt[4] == "-" and tgt[7] == "-"
        assert data.UNK_ID not in vocab.encode(src) + vocab.encode(tgt)
    assert counts == {"reverse": 200, "sort": 200, "date": 200}
    assert [data.task_of(p) for p in pairs[:30]] != sorted(data.task_of(p) for p in pairs[:30])   # mixed
    assert {data.task_of(p) for p in data.make_multitask_pairs(5, tasks=["date"])} == {"date"}
    with pytest.raises(ValueError, match="tasks"):
        data.make_multitask_pairs(5, tasks=["translate"])
    with pytest.raises(ValueError, match="prefix"):
        data.task_of((["a", "b"], ["b", "a"]))


# --- prompt -> completion ---------------------------------------------------------------------

def test_lm_training_batch_scores_only_the_completion():
    inputs, targets = families.lm_training_batch([[1, 7, 8, 5], [1, 9, 5]], [[10, 11, 2], [12, 2]])
    I = families.IGNORE_INDEX
    assert inputs.tolist() == [[1, 7, 8, 5, 10, 11], [1, 9, 5, 12, 2, PAD_ID]]
    assert targets.tolist() == [[I, I, I, 10, 11, 2], [I, I, 12, 2, I, I]]
    _, all_targets = families.lm_training_batch([[1, 7, 8, 5]], [[10, 2]], loss_on_prompt=True)
    assert all_targets.tolist() == [[7, 8, 5, 10, 2]]
    with pytest.raises(ValueError, match="as many"):
        families.lm_training_batch([[1]], [])


def test_greedy_complete_equals_greedy_decoding_one_prompt_at_a_time():
    lm = _lm()
    prompts = [[SOS_ID, 7, 9], [SOS_ID, 5], [SOS_ID, 8, 8], [SOS_ID, 4, 6, 10, 12]]
    got = families.greedy_complete(lm, prompts, max_len=6)
    for p, g in zip(prompts, got):
        tokens, _ = decoding.greedy_decode(lm, lm.init_state(1), 6, prompt=torch.tensor([p]))
        assert g == decoding.tokens_to_lists(tokens)[0]
    assert len({tuple(g) for g in got}) > 1


def test_prefix_lm_forward_matches_cached_and_uncached_decoding():
    """A prefix LM (forward(..., prefix_len=P)): the prompt prefilled bidirectionally, then cached
    causal steps, gives the teacher-forced logits; so does the uncached path; prefix 0 is causal."""
    torch.manual_seed(0)
    lm = DecoderLM(LMConfig.gpt(11, d_model=16, n_heads=2, n_layers=2, max_len=16)).eval()
    tokens = torch.randint(4, 11, (3, 9))
    P = 4
    with torch.no_grad():
        full = lm(tokens, prefix_len=P)
        assert torch.allclose(lm(tokens, prefix_len=0), lm(tokens), atol=1e-6)
        assert not torch.allclose(full[:, P - 1], lm(tokens)[:, P - 1], atol=1e-3)   # the prefix matters
        for use_cache in (True, False):
            m = DecoderLM(LMConfig.gpt(11, d_model=16, n_heads=2, n_layers=2, max_len=16, use_cache=use_cache)).eval()
            m.load_state_dict(lm.state_dict())
            state = m.prefill(tokens[:, :P], bidirectional=True)
            for t in range(P, tokens.shape[1]):
                log_probs, state = m.decode_step(tokens[:, t], state)
                assert torch.allclose(log_probs, full[:, t].log_softmax(-1), atol=1e-5), (use_cache, t)
    with pytest.raises(ValueError):
        lm.prefill(tokens[:, :2], state=lm.prefill(tokens[:, :2]), bidirectional=True)


def test_greedy_complete_prefix_lm_equals_recomputation():
    torch.manual_seed(1)
    lm = DecoderLM(LMConfig.gpt(12, d_model=16, n_heads=2, n_layers=2, max_len=24)).eval()
    prompts = [[1, 5, 6, 7, 9], [1, 8, 9], [1, 6, 6, 9]]
    got = families.greedy_complete(lm, prompts, max_len=6, prefix_lm=True)
    for p, out in zip(prompts, got):
        seq = list(p)
        with torch.no_grad():
            for _ in range(6):
                nxt = int(lm(torch.tensor([seq]), prefix_len=len(p) - 1)[0, -1].argmax())
                if nxt == families.EOS_ID:
                    break
                seq.append(nxt)
        assert seq[len(p):] == out
