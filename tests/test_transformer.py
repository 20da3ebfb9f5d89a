import math

import pytest
import torch
from torch import nn

from course_utils import attention, data, decoding, positional, train
from course_utils import transformer as T


def _reference(norm_first, d_model=16, n_heads=4, n_layers=2, d_ff=24, seed=0):
    torch.manual_seed(seed)
    ref = nn.Transformer(d_model=d_model, nhead=n_heads, num_encoder_layers=n_layers, num_decoder_layers=n_layers,
                         dim_feedforward=d_ff, dropout=0.1, batch_first=True, norm_first=norm_first)
    for p in ref.parameters():   # LayerNorms start at (1, 0): perturb them so that a swap is caught
        with torch.no_grad():
            p.add_(0.1 * torch.randn_like(p))
    return ref.eval()


def test_sinusoidal_table_by_hand():
    pe = positional.sinusoidal_encoding(50, 8)
    assert pe.shape == (50, 8) and pe.dtype == torch.float32
    for pos in (0, 1, 7, 49):
        for i in range(4):
            angle = pos / 10000 ** (2 * i / 8)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    with pytest.raises(ValueError, match="even"):
        positional.sinusoidal_encoding(10, 7)
    with pytest.raises(ValueError, match="max_len"):
        positional.sinusoidal_encoding(-1, 8)


@pytest.mark.parametrize("k", [1, 5, 30])
def test_sinusoidal_shift_is_a_fixed_linear_map(k):
    d = 16
    pe = positional.sinusoidal_encoding(100, d).double()
    freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    M = torch.zeros(d, d, dtype=torch.float64)
    for i, w in enumerate(freq.tolist()):   # rotation by the angle k * w in each (sin, cos) pair
        c, s = math.cos(k * w), math.sin(k * w)
        M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
    torch.testing.assert_close(pe[:-k] @ M.T, pe[k:], atol=1e-5, rtol=0)   # every position, one M
    assert not torch.allclose(pe[:-k], pe[k:], atol=1e-2)                 # and the shift does move them


def test_positional_modules_add_the_right_rows():
    x = torch.zeros(2, 3, 8)
    torch.testing.assert_close(positional.SinusoidalPositions(8, 20)(x, offset=4)[1], positional.sinusoidal_encoding(20, 8)[4:7])
    learned = positional.LearnedPositions(8, 10)
    torch.testing.assert_close(learned(x, offset=2)[0], learned.embedding.weight[2:5])
    with pytest.raises(ValueError, match="max_len"):
        learned(torch.zeros(1, 11, 8))


def test_decoder_self_mask_by_hand():
    tgt = torch.tensor([[1, 5, 6], [1, 7, 0]])
    m = T.decoder_self_mask(tgt)
    assert m.shape == (2, 1, 3, 3) and m.dtype == torch.bool
    assert m[0, 0].int().tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    assert m[1, 0].int().tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 0]]


@pytest.mark.parametrize("norm_first", [False, True])
def test_layers_equal_pytorch(norm_first):
    ref = _reference(norm_first)
    model = T.from_torch(ref)
    x, y = torch.randn(3, 5, 16), torch.randn(3, 4, 16)
    lengths = torch.tensor([5, 3, 1])
    ours_mask = attention.key_padding_mask(lengths, 5)
    # grad enabled: PyTorch takes its slow (reference) path, with no nested tensors
    want_enc = ref.encoder.layers[0](x, src_key_padding_mask=~ours_mask[:, 0, 0])
    got_enc = model.encoder.layers[0](x, mask=ours_mask).x
    torch.testing.assert_close(got_enc, want_enc, atol=1e-5, rtol=0)
    causal = nn.Transformer.generate_square_subsequent_mask(4, dtype=torch.bool)   # True = blocked
    want_dec = ref.decoder.layers[1](y, x, tgt_mask=causal, memory_key_padding_mask=~ours_mask[:, 0, 0])
    got_dec = model.decoder.layers[1](y, causal=True, memory=x, memory_mask=ours_mask).x
    torch.testing.assert_close(got_dec, want_dec, atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_whole_model_equals_nn_transformer(norm_first):
    ref = _reference(norm_first, seed=1)
    model = T.from_torch(ref, src_vocab=11, tgt_vocab=9).eval()
    src = torch.tensor([[4, 5, 6, 7, 8], [9, 10, 4, 0, 0], [5, 0, 0, 0, 0]])
    src_lengths = torch.tensor([5, 3, 1])
    tgt_in = torch.tensor([[1, 4, 5, 6], [1, 7, 8, 0], [1, 6, 0, 0]])
    with torch.no_grad():
        got = model(src, src_lengths, tgt_in)
        want = ref(model.embed_src(src), model.embed_tgt(tgt_in),
                   tgt_mask=nn.Transformer.generate_square_subsequent_mask(4, dtype=torch.bool),
                   src_key_padding_mask=src == 0, tgt_key_padding_mask=tgt_in == 0,
                   memory_key_padding_mask=src == 0)
        want = model.out(want)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    # and the masks matter: without the source padding mask the result changes
    with torch.no_grad():
        unmasked = model.out(ref(model.embed_src(src), model.embed_tgt(tgt_in),
                                 tgt_mask=nn.Transformer.generate_square_subsequent_mask(4, dtype=torch.bool)))
    assert (unmasked[1:] - got[1:]).abs().max() > 1e-3


def _model(**kw):
    torch.manual_seed(3)
    return T.Seq2SeqTransformer(T.Seq2SeqConfig(src_vocab=12, tgt_vocab=10, d_model=16, n_heads=4, n_layers=2, d_ff=32, **kw)).eval()


_SRC = torch.tensor([[4, 5, 6, 7, 8, 9], [10, 11, 4, 5, 0, 0], [6, 7, 0, 0, 0, 0]])
_LEN = torch.tensor([6, 4, 2])
_TGT = torch.tensor([[1, 4, 5, 6, 7], [1, 8, 9, 4, 5], [1, 6, 6, 7, 8]])


@pytest.mark.parametrize("kw", [dict(), dict(norm_first=True), dict(n_kv_heads=2), dict(n_kv_heads=1),
                                dict(positions="learned"), dict(share_layers=True)])
def test_cached_decoding_equals_teacher_forcing_and_recomputation(kw):
    model = _model(**kw)
    with torch.no_grad():
        want = torch.log_softmax(model(_SRC, _LEN, _TGT), -1)
        for use_cache in (True, False):
            model.use_cache = use_cache
            state = model.encode(_SRC, _LEN)
            got = []
            for t in range(_TGT.shape[1]):
                lp, state = model.decode_step(_TGT[:, t], state)
                got.append(lp)
            torch.testing.assert_close(torch.stack(got, 1), want, atol=1e-5, rtol=0)
            if use_cache:
                cache = state["cache"]
                assert len(cache) == len(cache.layers[0]) == _TGT.shape[1]   # self-attention: one per step
                assert len(cache.cross[0]) == _SRC.shape[1]                  # cross-attention: the source
                assert cache.layers[0] is not cache.cross[0]
            else:
                assert state["cache"].layers is None and state["cache"].cross is None
                assert torch.equal(state["cache"].tokens, _TGT)


def test_cross_attention_keys_are_computed_once_per_source():
    model = _model()
    calls = []
    model.decoder.layers[0].cross_attn.k_proj.register_forward_hook(lambda *a: calls.append(1))
    self_calls = []
    model.decoder.layers[0].self_attn.k_proj.register_forward_hook(lambda *a: self_calls.append(1))
    decoding.greedy_decode(model.decode_step, model.encode(_SRC, _LEN), max_len=6)
    assert len(calls) == 1 and len(self_calls) >= 2


def test_greedy_and_beam_search_same_with_and_without_cache():
    model = _model()
    results = {}
    for use_cache in (True, False):
        model.use_cache = use_cache
        tokens, scores = decoding.greedy_decode(model.decode_step, model.encode(_SRC, _LEN), max_len=7)
        beams = decoding.beam_search(model.decode_step, model.encode(_SRC[1:2], _LEN[1:2]), max_len=7, beam_size=3)
        results[use_cache] = tokens, scores, [(h.tokens, round(h.score, 4)) for h in beams]
    assert torch.equal(results[True][0], results[False][0])
    torch.testing.assert_close(results[True][1], results[False][1], atol=1e-5, rtol=0)
    assert results[True][2] == results[False][2] and len(results[True][2]) == 3


def test_forward_with_weights_shapes_and_rows():
    model = _model()
    with torch.no_grad():
        logits, w = model.forward_with_weights(_SRC, _LEN, _TGT)
        plain = model(_SRC, _LEN, _TGT)
    assert isinstance(plain, torch.Tensor) and logits.shape == (3, 5, 10)
    torch.testing.assert_close(logits, plain, atol=1e-5, rtol=0)      # explicit weights vs the fused kernel
    assert [t.shape for t in w.encoder] == [(3, 4, 6, 6)] * 2
    assert [t.shape for t in w.cross] == [(3, 4, 5, 6)] * 2
    torch.testing.assert_close(w.cross[1].sum(-1), torch.ones(3, 4, 5))
    assert w.cross[0][2, :, :, 2:].abs().max() == 0          # source padding gets no weight
    assert torch.triu(w.decoder_self[0][0], diagonal=1).abs().max() == 0   # nothing from the future


def test_weight_sharing_reuses_one_layer():
    plain, shared = _model(), _model(share_layers=True)
    assert shared.encoder.layers[0] is shared.encoder.layers[1]
    per_enc = train.count_parameters(plain.encoder.layers[0])
    per_dec = train.count_parameters(plain.decoder.layers[0])
    assert train.count_parameters(plain) - train.count_parameters(shared) == per_enc + per_dec


def test_without_positions_the_encoder_is_permutation_equivariant():
    model = _model(positions="none")
    src, lengths = torch.tensor([[4, 5, 6, 7]]), torch.tensor([4])
    perm = torch.tensor([2, 0, 3, 1])
    with torch.no_grad():
        a, _, _ = model.run_encoder(src, lengths)
        b, _, _ = model.run_encoder(src[:, perm], lengths)
        torch.testing.assert_close(a[:, perm], b, atol=1e-5, rtol=0)
        with_pos = _model()
        a, _, _ = with_pos.run_encoder(src, lengths)
        b, _, _ = with_pos.run_encoder(src[:, perm], lengths)
    assert (a[:, perm] - b).abs().max() > 1e-2


def test_noam_lr_is_the_training_module_s():
    assert T.noam_lr is train.noam_lr   # one definition, with the course's other schedules


def test_bad_arguments_say_what_is_wrong():
    with pytest.raises(ValueError, match="divisible"):
        T.Seq2SeqTransformer(T.Seq2SeqConfig(src_vocab=5, tgt_vocab=5, d_model=10, n_heads=4))
    with pytest.raises(ValueError, match="positions must be one of"):
        T.Seq2SeqTransformer(T.Seq2SeqConfig(src_vocab=5, tgt_vocab=5, d_model=8, n_heads=2, positions="rotary"))
    with pytest.raises(TypeError, match=r"Seq2SeqTransformer\(Seq2SeqConfig\(src_vocab=\.\.\."):
        T.Seq2SeqTransformer(5)


def test_trains_with_the_course_loop_on_any_token_pairs():
    pairs = data.make_sequence_pairs(1500, 2, 5, task="reverse", n_symbols=5, seed=0)
    v = data.sequence_vocab(5)
    train.set_seed(0)
    model = T.Seq2SeqTransformer(T.Seq2SeqConfig(src_vocab=len(v), tgt_vocab=len(v), d_model=32, n_heads=4, n_layers=1, d_ff=64))
    hist = train.train_seq2seq(model, pairs, v, v, train.TrainConfig(250, schedule=train.PerStep(lambda s: T.noam_lr(s, 32, 50)), clip=1.0),
                               batch_size=64, device="cpu", progress=False, label_smoothing=0.1)
    assert hist.lr[49] == pytest.approx(T.noam_lr(50, 32, 50))
    scores = train.evaluate(model, pairs[:200], v, v)
    assert scores.exact_match > 0.9, scores


def test_the_transformer_from_its_layer_functions_is_the_model():
    """``TransformerFromParts`` with the reference layer functions (chapter 6 passes the learner's):
    the model's logits at every real target position, the same training losses from the same seed,
    the model's own weights trained; a wrong layer function shows, and a wrong model is refused."""
    enc = lambda layer, x, mask: layer(x, mask=mask)[0]
    dec = lambda layer, y, memory, memory_mask: layer(y, causal=True, memory=memory, memory_mask=memory_mask).x
    model = _model(norm_first=True)
    parts = T.TransformerFromParts(model, enc, dec)
    src, lengths = torch.tensor([[4, 5, 6, 7], [8, 9, 0, 0]]), torch.tensor([4, 2])
    tgt_in = torch.tensor([[1, 4, 5], [1, 6, 0]])
    with torch.no_grad():
        real = tgt_in != 0
        torch.testing.assert_close(parts(src, lengths, tgt_in)[real], model(src, lengths, tgt_in)[real])
        wrong = T.TransformerFromParts(model, lambda layer, x, mask: x, dec)
        assert not torch.allclose(wrong(src, lengths, tgt_in)[real], model(src, lengths, tgt_in)[real])
    v = data.sequence_vocab(6)
    pairs = data.make_sequence_pairs(64, 2, 5, task="reverse", n_symbols=6, seed=1)
    losses = []
    for wrap in (lambda m: m, lambda m: T.TransformerFromParts(m, enc, dec)):
        torch.manual_seed(2)
        fresh = T.Seq2SeqTransformer(T.Seq2SeqConfig(src_vocab=len(v), tgt_vocab=len(v), d_model=16, n_heads=4))
        losses.append(train.train_seq2seq(wrap(fresh), pairs, v, v, train.TrainConfig(4, clip=1.0), batch_size=16,
                                          progress=False).loss)
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)
    with pytest.raises(TypeError, match="Seq2SeqTransformer"):
        T.TransformerFromParts(torch.nn.GRU(3, 3), enc, dec)
