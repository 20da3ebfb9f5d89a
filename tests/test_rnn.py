import pytest
import torch
from torch import nn

from course_utils import rnn
from course_utils.data import PAD_ID


def test_rnn_forward_equals_nn_rnn():
    torch.manual_seed(0)
    ref = nn.RNN(5, 7, batch_first=True)
    x = torch.randn(3, 6, 5)
    h0 = torch.randn(3, 7)
    want_states, want_h = ref(x, h0.unsqueeze(0))
    states, h = rnn.rnn_forward(x, h0, ref.weight_ih_l0, ref.weight_hh_l0, ref.bias_ih_l0 + ref.bias_hh_l0)
    torch.testing.assert_close(states, want_states)
    torch.testing.assert_close(h, want_h[0])


def test_encoder_ignores_padding():
    torch.manual_seed(0)
    enc = rnn.Encoder(12, 8, 16, bidirectional=True)
    seqs = [[4, 5, 6, 7, 8], [9, 10]]
    padded = torch.tensor([seqs[0], seqs[1] + [PAD_ID] * 3])
    states, ctx = enc(padded, torch.tensor([5, 2]))
    assert states.shape == (2, 5, 32) and ctx.shape == (2, 16)
    for i, s in enumerate(seqs):
        alone_states, alone_ctx = enc(torch.tensor([s]), torch.tensor([len(s)]))
        torch.testing.assert_close(ctx[i], alone_ctx[0])
        torch.testing.assert_close(states[i, : len(s)], alone_states[0])
    assert (states[1, 2:] == 0).all()


def test_encoder_context_is_bridged_final_states():
    torch.manual_seed(1)
    enc = rnn.Encoder(10, 4, 6, bidirectional=True)
    src = torch.tensor([[4, 5, 6]])
    states, ctx = enc(src, torch.tensor([3]))
    fwd_last, bwd_first = states[0, -1, :6], states[0, 0, 6:]
    want = torch.tanh(enc.bridge(torch.cat([fwd_last, bwd_first])))
    torch.testing.assert_close(ctx[0], want)


def test_decode_step_matches_teacher_forcing():
    torch.manual_seed(0)
    for every in (True, False):
        model = rnn.Seq2Seq(10, 9, emb_dim=8, hidden=12, context_every_step=every).eval()
        src, lengths = torch.tensor([[4, 5, 6, 7], [8, 9, 0, 0]]), torch.tensor([4, 2])
        tgt_in = torch.tensor([[1, 4, 5], [1, 6, 7]])
        logits = model(src, lengths, tgt_in)
        state = model.encode(src, lengths)
        for t in range(3):
            logp, state = model.decode_step(tgt_in[:, t], state)
            torch.testing.assert_close(logp, torch.log_softmax(logits[:, t], -1))


def test_context_every_step_changes_parameter_count():
    a = rnn.Seq2Seq(10, 10, emb_dim=8, hidden=16, context_every_step=True)
    b = rnn.Seq2Seq(10, 10, emb_dim=8, hidden=16, context_every_step=False)
    extra = sum(p.numel() for p in a.parameters()) - sum(p.numel() for p in b.parameters())
    assert extra == 3 * 16 * 16 + 10 * 16  # GRU input weights for the context, output layer columns


def test_gru_step_equals_nn_grucell():
    torch.manual_seed(3)
    cell = nn.GRUCell(5, 4)
    x, h = torch.randn(2, 5), torch.randn(2, 4)
    got = rnn.gru_step(x, h, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    torch.testing.assert_close(got, cell(x, h))


def test_lstm_step_equals_nn_lstmcell():
    torch.manual_seed(4)
    cell = nn.LSTMCell(5, 6)
    x, h, c = torch.randn(3, 5), torch.randn(3, 6), torch.randn(3, 6)
    want_h, want_c = cell(x, (h, c))
    got_h, got_c = rnn.lstm_step(x, h, c, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    torch.testing.assert_close(got_h, want_h)
    torch.testing.assert_close(got_c, want_c)
    # the forget gate matters: a different c_prev changes c' (not a copy of the GRU update)
    _, other_c = rnn.lstm_step(x, h, c + 1, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    assert not torch.allclose(other_c, got_c)


def test_lstm_forward_equals_nn_lstm():
    torch.manual_seed(5)
    ref = nn.LSTM(4, 7, batch_first=True)
    x, h0, c0 = torch.randn(2, 6, 4), torch.randn(2, 7), torch.randn(2, 7)
    want, (want_h, want_c) = ref(x, (h0[None], c0[None]))
    got, (h, c) = rnn.lstm_forward(x, h0, c0, ref.weight_ih_l0, ref.weight_hh_l0, ref.bias_ih_l0, ref.bias_hh_l0)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(h, want_h[0])
    torch.testing.assert_close(c, want_c[0])


def test_lstm_rejects_bad_shapes():
    import pytest
    with pytest.raises(ValueError, match="batch, seq, d_in"):
        rnn.lstm_forward(torch.zeros(4, 3), torch.zeros(4, 2), torch.zeros(4, 2), *[torch.zeros(1)] * 4)
    with pytest.raises(ValueError, match="one shape"):
        rnn.lstm_step(torch.zeros(2, 3), torch.zeros(2, 4), torch.zeros(2, 5), *[torch.zeros(1)] * 4)


def test_the_model_from_its_parts_is_the_model():
    """``Seq2SeqFromParts`` with the reference parts (chapter 1 passes the learner's): the same
    log-probabilities as ``Seq2Seq`` in teacher forcing and in decoding, the same training losses
    from the same seed, sharing the model's weights; a wrong part shows, and a wrong model is refused."""
    from course_utils import data, decoding, train

    torch.manual_seed(0)
    model = rnn.Seq2Seq(11, 9, emb_dim=6, hidden=8).eval()
    parts = rnn.Seq2SeqFromParts(model)
    src, lengths = torch.tensor([[4, 5, 6, 7], [8, 9, 0, 0]]), torch.tensor([4, 2])
    tgt_in = torch.tensor([[1, 4, 5], [1, 6, 0]])
    with torch.no_grad():
        torch.testing.assert_close(parts(src, lengths, tgt_in), torch.log_softmax(model(src, lengths, tgt_in), -1))
        want, _ = decoding.greedy_decode(model, model.encode(src, lengths), 6)
        got, _ = decoding.greedy_decode(parts, parts.encode(src, lengths), 6)
    assert torch.equal(want, got) and parts.decoder is model.decoder
    pairs = data.make_sequence_pairs(64, 2, 5, task="reverse", n_symbols=6, seed=1)
    vocab = data.sequence_vocab(6)
    losses = []
    for wrap in (lambda m: m, rnn.Seq2SeqFromParts):
        train.set_seed(3)
        fresh = rnn.Seq2Seq(len(vocab), len(vocab), emb_dim=6, hidden=8)
        losses.append(train.train_seq2seq(wrap(fresh), pairs, vocab, vocab, train.TrainConfig(4, clip=1.0),
                                          batch_size=16, progress=False).loss)
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)
    wrong = rnn.Seq2SeqFromParts(model, step=lambda d, p, h, c: rnn.decoder_step(d, p, h, torch.zeros_like(c)))
    with torch.no_grad():
        assert not torch.allclose(wrong(src, lengths, tgt_in), parts(src, lengths, tgt_in))
    with pytest.raises(TypeError, match="rnn.Seq2Seq"):
        rnn.Seq2SeqFromParts(nn.GRU(3, 3))
