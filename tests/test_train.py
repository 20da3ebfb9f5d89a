import pytest
import torch
from torch import nn

from course_utils import data, rnn, train


def test_sequence_loss_ignores_padding():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5)
    targets = torch.tensor([[4, 2, 0], [3, 4, 2]])
    keep = targets != 0
    manual = -torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0][keep].mean()
    torch.testing.assert_close(train.sequence_loss(logits, targets), manual)
    with pytest.raises(ValueError, match="must agree"):
        train.sequence_loss(logits, targets[:, :2])


def test_score_predictions_by_hand():
    pairs = [(list("ab"), list("ba")), (list("abc"), list("cba")), (list("abc"), list("cba"))]
    preds = [list("ba"), list("cb"), list("cbaa")]
    s = train.score_predictions(preds, pairs)
    # pair 1: 3/3 (b, a, eos); pair 2: 2/4 (eos comes early); pair 3: 3/4 (no eos at 3)
    assert s.token_accuracy == pytest.approx((3 + 2 + 3) / (3 + 4 + 4))
    assert s.exact_match == pytest.approx(1 / 3)
    assert s.by_length[2] == (1.0, 1.0)
    assert s.by_length[3] == (pytest.approx(5 / 8), 0.0)


def test_training_learns_a_short_copy_task():
    train.set_seed(0)
    pairs = data.make_sequence_pairs(2000, 2, 4, task="copy", n_symbols=4, seed=0)
    v = data.sequence_vocab(4)
    model = rnn.Seq2Seq(len(v), len(v), emb_dim=16, hidden=48)
    hist = train.train_seq2seq(model, pairs, v, v, steps=300, batch_size=64, lr=1e-2,
                               device="cpu", progress=False)
    assert len(hist.loss) == 300 and len(hist.grad_norm) == 300
    assert sum(hist.loss[-20:]) / 20 < 0.25 * sum(hist.loss[:20]) / 20
    assert max(hist.grad_norm) > 0
    scores = train.evaluate(model, pairs[:300], v, v)
    assert scores.exact_match > 0.8, scores
    assert set(scores.by_length) == {2, 3, 4}


def test_get_device_can_be_forced(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert train.get_device() == torch.device("cpu")
    assert train.get_device("meta") == torch.device("meta")
    monkeypatch.delenv("COURSE_DEVICE")
    want = "cuda" if torch.cuda.is_available() else None
    if want:
        assert train.get_device().type == want
    elif not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        assert train.get_device().type == "cpu"


def test_set_seed_makes_runs_repeatable():
    train.set_seed(5)
    a = nn.Linear(3, 3).weight.detach().clone()
    train.set_seed(5)
    b = nn.Linear(3, 3).weight.detach().clone()
    assert torch.equal(a, b)


def test_count_parameters():
    assert train.count_parameters(nn.Linear(3, 4)) == 16


def test_length_task_is_the_shared_setup():
    tr, te, v = data.length_task(n_train=300, n_test=50)
    assert len(te) == 50 and len(v) == 4 + data.LENGTH_TASK["n_symbols"]
    assert all(t == s[::-1] for s, t in tr + te)
    assert {"steps", "batch_size", "lr"} <= set(train.LENGTH_TASK_BUDGET)


def test_defaults_reproduce_a_plain_adam_loop():
    """``train_seq2seq`` with its defaults is plain Adam + clipping at 1: the exact same losses."""
    pairs = data.make_sequence_pairs(300, 2, 4, task="copy", n_symbols=4, seed=0)
    v = data.sequence_vocab(4)
    train.set_seed(0)
    model = rnn.Seq2Seq(len(v), len(v), emb_dim=8, hidden=12)
    manual = rnn.Seq2Seq(len(v), len(v), emb_dim=8, hidden=12)
    manual.load_state_dict(model.state_dict())
    hist = train.train_seq2seq(model, pairs, v, v, steps=12, batch_size=32, device="cpu", progress=False)
    opt = torch.optim.Adam(manual.parameters(), lr=3e-3)
    losses, step, epoch = [], 0, 0
    while step < 12:
        for batch in data.batches(pairs, v, v, 32, shuffle=True, seed=epoch):
            loss = train.sequence_loss(manual(batch.src, batch.src_lengths, batch.tgt_in), batch.tgt_out)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(manual.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
            step += 1
            if step == 12:
                break
        epoch += 1
    assert hist.loss == losses
    assert hist.lr == [3e-3] * 12


def test_schedule_and_label_smoothing():
    pairs = data.make_sequence_pairs(200, 2, 4, task="copy", n_symbols=4, seed=0)
    v = data.sequence_vocab(4)
    train.set_seed(0)
    model = rnn.Seq2Seq(len(v), len(v), emb_dim=8, hidden=12)
    hist = train.train_seq2seq(model, pairs, v, v, steps=5, device="cpu", progress=False,
                               lr_at=lambda step: 0.01 * step, label_smoothing=0.1, clip=None)
    assert hist.lr == pytest.approx([0.01, 0.02, 0.03, 0.04, 0.05])
    # label smoothing by hand: (1 - eps) * NLL of the target + eps * mean over the vocabulary of -log p
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5)
    targets = torch.tensor([[4, 2, 0], [3, 4, 2]])
    logp, keep = torch.log_softmax(logits, -1), targets != 0
    nll = -logp.gather(-1, targets[..., None])[..., 0]
    smooth = -logp.mean(-1)
    want = ((1 - 0.1) * nll + 0.1 * smooth)[keep].mean()
    torch.testing.assert_close(train.sequence_loss(logits, targets, label_smoothing=0.1), want)
    assert not torch.allclose(train.sequence_loss(logits, targets), want)
    with pytest.raises(ValueError, match="label_smoothing"):
        train.sequence_loss(logits, targets, label_smoothing=1.0)
