"""Unit tests of course_utils.rnn_attention (chapter 2): scores against the papers' formulas
written out as loops, masking, local-m windows, and the model's decoding protocol."""

import copy

import pytest
import torch
import torch.nn.functional as F

from course_utils import decoding
from course_utils import rnn_attention as ra
from course_utils.data import PAD_ID


def _rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


# ------------------------------------------------------------------ scores = hand formulas
def test_additive_score_is_bahdanaus_formula():
    B, S, n, na = 2, 5, 4, 3
    s, H = _rand(B, n), _rand(B, S, n, seed=1)
    W, U, v = _rand(na, n, seed=2), _rand(na, n, seed=3), _rand(na, seed=4)
    UH = H @ U.T
    got = ra.additive_score(s, UH, W, v)
    want = torch.empty(B, S, dtype=torch.float64)
    for b in range(B):
        for j in range(S):
            want[b, j] = v @ torch.tanh(W @ s[b] + U @ H[b, j])
    torch.testing.assert_close(got, want)
    # many queries at once = one query at a time
    s3 = _rand(B, 3, n, seed=5)
    many = ra.additive_score(s3, UH, W, v)
    for t in range(3):
        torch.testing.assert_close(many[:, t], ra.additive_score(s3[:, t], UH, W, v))


def test_luong_scores_are_the_formulas():
    B, S, d = 2, 4, 3
    h, K, Wa = _rand(B, d), _rand(B, S, d, seed=1), _rand(d, d, seed=2)
    Wc, va = _rand(5, 2 * d, seed=3), _rand(5, seed=4)
    dot, gen, cat = ra.dot_score(h, K), ra.general_score(h, K, Wa), ra.concat_score(h, K, Wc, va)
    for b in range(B):
        for j in range(S):
            torch.testing.assert_close(dot[b, j], h[b] @ K[b, j])
            torch.testing.assert_close(gen[b, j], h[b] @ Wa @ K[b, j])
            torch.testing.assert_close(cat[b, j], va @ torch.tanh(Wc @ torch.cat([h[b], K[b, j]])))
    # general = dot against keys projected once; concat = additive with W_a split in two
    torch.testing.assert_close(gen, ra.dot_score(h, K @ Wa.T))
    torch.testing.assert_close(cat, ra.additive_score(h, K @ Wc[:, d:].T, Wc[:, :d], va))


def test_location_score_is_luongs_formula_and_ignores_the_keys():
    B, S, d, max_len = 2, 4, 3, 6
    h, Wa = _rand(B, d), _rand(max_len, d, seed=1)
    got = ra.location_score(h, Wa, S)
    assert got.shape == (B, S)
    for b in range(B):
        for j in range(S):
            torch.testing.assert_close(got[b, j], Wa[j] @ h[b])
    # softmax(W_a h_t) over the real positions: the weights depend on the query only
    K1, K2 = _rand(B, S, d, seed=2), _rand(B, S, d, seed=3)
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    _, w1 = ra.attend(got, K1, mask)
    _, w2 = ra.attend(got, K2, mask)
    torch.testing.assert_close(w1, w2)
    torch.testing.assert_close(w1[1, :2], torch.softmax(got[1, :2], -1))
    # several queries at once
    h3 = _rand(B, 5, d, seed=4)
    torch.testing.assert_close(ra.location_score(h3, Wa, S)[:, 2], ra.location_score(h3[:, 2], Wa, S))
    with pytest.raises(ValueError, match="src_len"):
        ra.location_score(h, Wa, 7)
    with pytest.raises(ValueError, match="W_a must be"):
        ra.location_score(h, _rand(6, 4), 3)


def test_general_score_with_rectangular_matrix():
    h, K, Wa = _rand(2, 3), _rand(2, 4, 5, seed=1), _rand(3, 5, seed=2)
    got = ra.general_score(h, K, Wa)
    assert got.shape == (2, 4)
    torch.testing.assert_close(got[1, 2], h[1] @ Wa @ K[1, 2])


def test_bad_shapes_say_what_is_wrong():
    with pytest.raises(ValueError, match="same size"):
        ra.dot_score(torch.zeros(2, 3), torch.zeros(2, 4, 5))
    with pytest.raises(ValueError, match="W must be"):
        ra.additive_score(torch.zeros(2, 3), torch.zeros(2, 4, 5), torch.zeros(3, 3),
                          torch.zeros(5))
    with pytest.raises(ValueError, match="batch"):
        ra.dot_score(torch.zeros(3, 4), torch.zeros(2, 5, 4))
    with pytest.raises(ValueError, match="query must be"):
        ra.dot_score(torch.zeros(4), torch.zeros(2, 5, 4))
    with pytest.raises(ValueError, match="W_a must be"):
        ra.concat_score(torch.zeros(2, 3), torch.zeros(2, 4, 3), torch.zeros(5, 5), torch.zeros(5))
    with pytest.raises(TypeError, match="bool"):
        ra.attend(torch.zeros(2, 4), torch.zeros(2, 4, 3), torch.ones(2, 4))
    with pytest.raises(ValueError, match="window"):
        ra.AttentionSeq2Seq(10, 10, 4, 6, score="dot", window=-1)
    with pytest.raises(ValueError, match="score must be"):
        ra.AttentionSeq2Seq(10, 10, 4, 6, score="cosine")


# ------------------------------------------------------------------ masking
def test_padding_never_gets_weight():
    scores, values = _rand(2, 5), _rand(2, 5, 3, seed=1)
    mask = torch.tensor([[True, True, True, False, False], [True] * 5])
    ctx, w = ra.attend(scores, values, mask)
    assert (w[0, 3:] == 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close(w[0, :3], torch.softmax(scores[0, :3], -1))
    # whatever sits at padded positions (huge scores, NaN-free garbage values) changes nothing
    scores2, values2 = scores.clone(), values.clone()
    scores2[0, 3:], values2[0, 3:] = 1e4, 1e6
    ctx2, w2 = ra.attend(scores2, values2, mask)
    torch.testing.assert_close(ctx2, ctx)
    torch.testing.assert_close(w2, w)


def test_all_padding_row_gives_zeros_not_nan():
    scores, values = _rand(2, 4), _rand(2, 4, 3, seed=1)
    mask = torch.tensor([[False] * 4, [True, True, False, False]])
    ctx, w = ra.attend(scores, values, mask)
    assert not torch.isnan(w).any() and not torch.isnan(ctx).any()
    assert (w[0] == 0).all() and (ctx[0] == 0).all()       # no uniform weight over padding
    torch.testing.assert_close(w[1].sum(), torch.tensor(1.0, dtype=torch.float64))


def test_dot_attention_equals_pytorch_sdpa_with_scale_one():
    q, K, V = _rand(3, 4).float(), _rand(3, 6, 4, seed=1).float(), _rand(3, 6, 5, seed=2).float()
    lengths = torch.tensor([6, 2, 4])
    mask = torch.arange(6)[None, :] < lengths[:, None]
    ctx, _ = ra.attend(ra.dot_score(q, K), V, mask)
    want = F.scaled_dot_product_attention(q[:, None], K, V, attn_mask=mask[:, None],
                                          scale=1.0)[:, 0]
    torch.testing.assert_close(ctx, want)
    Wa = _rand(4, 4, seed=3).float()
    ctx_g, _ = ra.attend(ra.general_score(q, K, Wa), V, mask)
    want_g = F.scaled_dot_product_attention(q[:, None], K @ Wa.T, V, attn_mask=mask[:, None],
                                            scale=1.0)[:, 0]
    torch.testing.assert_close(ctx_g, want_g)


def test_local_m_mask_by_hand():
    lengths = torch.tensor([6, 3])
    m = ra.local_m_mask(torch.tensor([1, 5]), lengths, D=1, src_len=6)
    assert m.tolist() == [[True, True, True, False, False, False],
                          [False, True, True, False, False, False]]   # t=5 clamped to position 2
    m0 = ra.local_m_mask(torch.tensor([0, 0]), lengths, D=0, src_len=6)
    assert m0.sum(-1).tolist() == [1, 1]
    many = ra.local_m_mask(torch.arange(4).expand(2, 4), lengths, D=2, src_len=6)
    assert many.shape == (2, 4, 6)
    for t in range(4):
        assert torch.equal(many[:, t], ra.local_m_mask(torch.full((2,), t), lengths, 2, 6))
    wide = ra.local_m_mask(torch.tensor([3, 3]), lengths, D=10, src_len=6)
    assert wide.sum(-1).tolist() == [6, 3]


# ------------------------------------------------------------------ the model
CONFIGS = [dict(score="additive"), dict(score="dot"), dict(score="general"), dict(score="concat"),
           dict(score="general", window=1), dict(score="additive", window=2),
           dict(score="general", input_feeding=True),
           dict(score="dot", window=0, input_feeding=True)]


def _batch():
    src = torch.tensor([[4, 5, 6, 7, 8], [9, 10, 4, PAD_ID, PAD_ID]])
    return src, torch.tensor([5, 3]), torch.tensor([[1, 4, 5, 6], [1, 7, 8, 9]])


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_decode_step_equals_teacher_forcing(cfg):
    torch.manual_seed(0)
    model = ra.AttentionSeq2Seq(11, 12, emb_dim=6, hidden=8, **cfg).eval()
    src, lengths, tgt_in = _batch()
    logits, weights = model.forward_with_weights(src, lengths, tgt_in)
    assert logits.shape == (2, 4, 12) and weights.shape == (2, 4, 5)
    state = model.encode(src, lengths)
    for t in range(tgt_in.shape[1]):
        logp, state = model.decode_step(tgt_in[:, t], state)
        torch.testing.assert_close(logp, torch.log_softmax(logits[:, t], -1), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(state["weights"], weights[:, t], atol=1e-6, rtol=1e-5)
    assert (weights[1, :, 3:] == 0).all()                           # padding gets no weight
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4))
    if cfg.get("window") is not None:
        D = cfg["window"]
        for t in range(4):
            assert (weights[0, t, max(0, t - D) + 0: t + D + 1].sum() - 1).abs() < 1e-5


@pytest.mark.parametrize("score", ra.SCORES)
def test_model_ignores_padding(score):
    torch.manual_seed(1)
    model = ra.AttentionSeq2Seq(11, 12, emb_dim=6, hidden=8, score=score).eval()
    src, lengths, tgt_in = _batch()
    logits = model(src, lengths, tgt_in)
    alone = model(src[1:, :3], lengths[1:], tgt_in[1:])
    torch.testing.assert_close(logits[1:], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("score", ["additive", "general"])
def test_greedy_with_attention_records_the_weights_of_its_own_tokens(score):
    # The weights greedy_with_attention records while decoding must be the weights that the
    # teacher-forced forward (a different code path: for "general" one GRU call and one
    # batched attention) computes when it is fed the decoded tokens.
    torch.manual_seed(2)
    model = ra.AttentionSeq2Seq(11, 12, emb_dim=6, hidden=8, score=score).eval()
    src, lengths, _ = _batch()
    toks, ws = ra.greedy_with_attention(model, src, lengths, max_len=6)
    for b, (t, w) in enumerate(zip(toks, ws)):
        n = int(lengths[b])
        tgt_in = torch.tensor([[1] + t])                   # <sos> and the decoded tokens
        with torch.no_grad():
            logits, want = model.forward_with_weights(src[b:b + 1, :n], lengths[b:b + 1], tgt_in)
        assert w.shape == (min(len(t) + 1, 6), n)
        torch.testing.assert_close(w, want[0, : w.shape[0]])
        # and the tokens are the argmax of those teacher-forced logits (greedy, checked independently)
        assert logits[0, : len(t)].argmax(-1).tolist() == t
    hyps = decoding.beam_search(model.decode_step, model.encode(src[1:], lengths[1:]), max_len=6,
                                beam_size=1)
    assert hyps[0].tokens[: len(toks[1])] == toks[1]


def test_encode_state_is_batch_first():
    model = ra.AttentionSeq2Seq(11, 12, emb_dim=6, hidden=8, score="general", input_feeding=True)
    src, lengths, _ = _batch()
    state = model.encode(src, lengths)
    assert all(v.shape[0] == 2 for v in state.values())
    assert state["memory"].shape == (2, 5, 8) and state["mask"].dtype == torch.bool


def test_all_padding_row_has_finite_gradients():
    scores = _rand(2, 4).requires_grad_()
    values = _rand(2, 4, 3, seed=1).requires_grad_()
    mask = torch.tensor([[False] * 4, [True, False, True, False]])
    ctx, _ = ra.attend(scores, values, mask)
    ctx.sum().backward()
    assert torch.isfinite(scores.grad).all() and torch.isfinite(values.grad).all()
    assert (scores.grad[0] == 0).all() and (values.grad[0] == 0).all()


def test_local_window_beyond_the_source_never_empties_a_row():
    torch.manual_seed(3)
    model = ra.AttentionSeq2Seq(11, 12, emb_dim=6, hidden=8, score="dot", window=0).eval()
    src, lengths = torch.tensor([[4, 5, PAD_ID, PAD_ID]]), torch.tensor([2])
    tgt_in = torch.tensor([[1, 4, 5, 6, 7, 8]])          # a target longer than its source
    _, w = model.forward_with_weights(src, lengths, tgt_in)
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 6))
    assert (w[0, 2:, 1] == 1).all()                     # p_t clamped to the last real position


# ------------------------------------------------------------------ score modules and classes
@pytest.mark.parametrize("cls", [ra.AdditiveScore, ra.DotScore, ra.GeneralScore, ra.ConcatScore])
def test_score_module_keys_and_forward_are_the_formula(cls):
    torch.manual_seed(4)
    h = 5
    scorer = cls(h).double()
    memory, q, q3 = _rand(2, 4, h, seed=1), _rand(2, h, seed=2), _rand(2, 3, h, seed=3)
    got, got3 = scorer(q, scorer.keys(memory)), scorer(q3, scorer.keys(memory))
    if cls is ra.AdditiveScore:
        want = ra.additive_score(q, memory @ scorer.U_a.weight.T + scorer.U_a.bias,
                                 scorer.W_a.weight, scorer.v_a)
    elif cls is ra.DotScore:
        want = ra.dot_score(q, memory)
    elif cls is ra.GeneralScore:
        want = ra.general_score(q, memory, scorer.W_a.weight)
    else:
        want = ra.concat_score(q, memory, scorer.W_a.weight, scorer.v_a)
    assert got.shape == (2, 4) and got3.shape == (2, 3, 4)
    torch.testing.assert_close(got, want)
    for t in range(3):                                # several queries at once
        torch.testing.assert_close(got3[:, t], scorer(q3[:, t], scorer.keys(memory)))


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_factory_returns_the_class_built_directly(cfg):
    torch.manual_seed(6)
    made = ra.AttentionSeq2Seq(11, 12, 6, 8, **cfg)
    torch.manual_seed(6)
    if cfg["score"] == "additive":
        direct = ra.BahdanauSeq2Seq(11, 12, 6, 8, window=cfg.get("window"))
    else:
        direct = ra.LuongSeq2Seq(11, 12, 6, 8, **cfg)
    assert type(made) is type(direct) and isinstance(made, ra.AttentionSeq2SeqBase)
    assert isinstance(made, ra.BahdanauSeq2Seq) == (cfg["score"] == "additive")
    assert isinstance(made, ra.LuongSeq2Seq) == (cfg["score"] != "additive")
    assert (made.score, made.window, made.input_feeding, made.hidden) == (
        cfg["score"], cfg.get("window"), cfg.get("input_feeding", False), 8)
    assert list(made.state_dict()) == list(direct.state_dict())
    for (k, a), b in zip(made.state_dict().items(), direct.state_dict().values()):
        assert torch.equal(a, b), k
    src, lengths, tgt_in = _batch()
    assert torch.equal(made(src, lengths, tgt_in), direct(src, lengths, tgt_in))


def test_score_parameters_live_on_the_model_under_the_chapters_names():
    bahdanau = ra.AttentionSeq2Seq(11, 12, 6, 8, score="additive")
    assert list(bahdanau.state_dict())[:1] == ["v_a"]
    assert bahdanau.W_a.bias is None and bahdanau.U_a.bias is not None
    assert bahdanau.scorer.W_a is bahdanau.W_a and bahdanau.scorer.v_a is bahdanau.v_a
    concat = ra.AttentionSeq2Seq(11, 12, 6, 8, score="concat").double()  # moves stay shared
    assert concat.W_a.weight.shape == (8, 16) and concat.scorer.v_a is concat.v_a
    assert concat.scorer.v_a.dtype == torch.float64
    assert not any(n.startswith("scorer") for n in concat.state_dict())
    copied = copy.deepcopy(concat)
    assert copied.scorer.v_a is copied.v_a and copied.v_a is not concat.v_a
    assert "W_a.weight" not in ra.AttentionSeq2Seq(11, 12, 6, 8, score="dot").state_dict()
    with pytest.raises(ValueError, match="input_feeding is Luong's"):
        ra.AttentionSeq2Seq(10, 10, 4, 6, score="additive", input_feeding=True)
    with pytest.raises(ValueError, match="score must be one of"):
        ra.LuongSeq2Seq(10, 10, 4, 6, score="additive")


def test_no_switch_on_the_score_name_is_left():
    import inspect
    source = inspect.getsource(ra)
    assert "self.score ==" not in source and "self.score !=" not in source
