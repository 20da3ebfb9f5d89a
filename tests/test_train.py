import dataclasses
import math

import pytest
import torch
from torch import nn

from course_utils import budget, classify, data, lengthtask, progress, rnn, textlm, train


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
    hist = train.train_seq2seq(model, pairs, v, v, train.TrainConfig(300, lr=1e-2, clip=1.0), batch_size=64,
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
    assert {"steps", "batch_size", "lr"} <= set(lengthtask.LENGTH_TASK_BUDGET)


def test_defaults_reproduce_a_plain_adam_loop():
    """``train_seq2seq`` with ``TrainConfig``'s defaults and ``clip=1.0`` is plain Adam + clipping at 1:
    the exact same losses."""
    pairs = data.make_sequence_pairs(300, 2, 4, task="copy", n_symbols=4, seed=0)
    v = data.sequence_vocab(4)
    train.set_seed(0)
    model = rnn.Seq2Seq(len(v), len(v), emb_dim=8, hidden=12)
    manual = rnn.Seq2Seq(len(v), len(v), emb_dim=8, hidden=12)
    manual.load_state_dict(model.state_dict())
    hist = train.train_seq2seq(model, pairs, v, v, train.TrainConfig(12, clip=1.0), batch_size=32, device="cpu",
                               progress=False)
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
    hist = train.train_seq2seq(model, pairs, v, v, train.TrainConfig(5, schedule=train.PerStep(lambda step: 0.01 * step)),
                               device="cpu", progress=False, label_smoothing=0.1)
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


def test_mean_exact_match_and_error_by_position_by_hand():
    pairs = [(list("ab"), list("ba")), (list("abc"), list("cba")), (list("abc"), list("cba"))]
    preds = [list("ba"), list("cb"), list("xba")]
    scores = train.score_predictions(preds, pairs)
    assert lengthtask.mean_exact_match(scores, 2, 3) == (1.0 + 0.0) / 2
    with pytest.raises(ValueError, match="source length"):
        lengthtask.mean_exact_match(scores, 2, 4)
    # position 0: right, right, wrong ("x"); 1: right everywhere; 2 (only the length-3 pairs):
    # missing in "cb", right in "xba"
    assert lengthtask.error_by_position(preds, pairs) == [1 / 3, 0.0, 1 / 2]
    assert lengthtask.error_by_position(preds, pairs, lengths=[3]) == [1 / 2, 0.0, 1 / 2]


def test_budget_picks_the_smaller_one_only_while_nbgrader_runs(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert not budget.grading() and budget.pick(300, grading=20) == 300
    assert budget.pick([1, 2], grading=[1]) == [1, 2]
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert budget.grading() and budget.pick(300, grading=20) == 20
    monkeypatch.setenv("NBGRADER_EXECUTION", "")
    assert not budget.grading() and budget.pick(300, grading=20) == 300
    with pytest.raises(TypeError):
        budget.pick(300, 20)          # the grading budget is named at every call site


def test_length_task_helpers_shrink_under_grading_and_train(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert lengthtask.length_task_config().steps == 3
    assert lengthtask.length_task_config(steps=2).steps == 2
    monkeypatch.delenv("NBGRADER_EXECUTION")
    budget = lengthtask.LENGTH_TASK_BUDGET
    assert lengthtask.length_task_config() == train.TrainConfig(budget["steps"], lr=budget["lr"], clip=1.0)
    tr, te, v = data.length_task(n_train=200, n_test=40)
    make = lambda: rnn.Seq2Seq(len(v), len(v), emb_dim=8, hidden=16)  # noqa: E731
    m1, h1 = lengthtask.train_on_length_task(make, tr, v, lengthtask.length_task_config(steps=3), progress=False, device="cpu")
    m2, h2 = lengthtask.train_on_length_task(make, tr, v, lengthtask.length_task_config(steps=3), progress=False, device="cpu")
    assert len(h1.loss) == 3 and h1.loss == h2.loss            # same seed, same batches
    acc = lengthtask.teacher_forced_accuracy(m1, te, v, v)
    assert 0.0 <= acc <= 1.0


def test_teacher_forced_accuracy_counts_eos_and_ignores_padding():
    class Oracle(nn.Module):
        """Predicts the right target token everywhere except at position 0."""
        def __init__(self):
            super().__init__()
            self.p = nn.Parameter(torch.zeros(1))
            self.target = None

        def forward(self, src, src_lengths, tgt_in):
            logits = torch.nn.functional.one_hot(self.target, 8).float()
            logits[:, 0] = torch.nn.functional.one_hot(torch.full_like(self.target[:, 0], 7), 8).float()
            return logits

    v = data.Vocab(list("abcd"))
    pairs = [(list("ab"), list("ba")), (list("abc"), list("cba"))]
    oracle = Oracle()
    oracle.target = data.make_batch(pairs, v, v).tgt_out
    # positions: 3 + 4 = 7 (eos included), 2 wrong (position 0 of each)
    assert lengthtask.teacher_forced_accuracy(oracle, pairs, v, v) == 5 / 7
    assert lengthtask.teacher_forced_predictions(oracle, pairs, v, v) == [list("da"), list("dba")]


def test_progress_bar_is_one_display_updated_in_place():
    import sys
    import types
    assert progress.progress_file(True) is sys.stdout           # outside a notebook kernel: plain stdout
    line = progress.DisplayLine.__new__(progress.DisplayLine)      # without IPython's display machinery
    shown = []
    line.handle = types.SimpleNamespace(update=lambda data, raw: shown.append(data["text/plain"]))
    line.write("\rtraining:  10%|#   | 1/10")
    line.write("\rtraining: 100%|####| 10/10\n")
    line.write("\n")
    assert shown == ["training:  10%|#   | 1/10", "training: 100%|####| 10/10"]


# --- the one loop -----------------------------------------------------------------------------

class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(7, 4)
        self.norm = nn.LayerNorm(4)
        self.proj = nn.Linear(4, 7)
        self.head = nn.Linear(4, 7, bias=False)
        self.head.weight = self.embed.weight            # tied: counts as an embedding

    def forward(self, x):
        h = self.norm(self.embed(x))
        return self.proj(h) + self.head(h)


def _batches(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        x = torch.randint(0, 7, (8, 5), generator=g)
        yield x, x.roll(1, dims=1)


def test_weight_decay_only_on_weight_matrices():
    model = _Tiny()
    decayed, plain = train.param_groups(model, 0.1)
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert [id(p) for p in decayed["params"]] == [id(model.proj.weight)]
    assert {id(p) for p in plain["params"]} == {id(model.embed.weight), id(model.norm.weight), id(model.norm.bias),
                                                id(model.proj.bias)}
    assert len(decayed["params"]) + len(plain["params"]) == len(list(model.parameters()))
    # a parameter without gradient keeps its value under decay only where it is not decayed
    torch.manual_seed(0)
    model = _Tiny()
    bias, weight = model.proj.bias.detach().clone(), model.proj.weight.detach().clone()
    train.fit(model, _batches(3), lambda m, b: (m(b[0]) * 0).sum(), train.TrainConfig(3, lr=0.1, weight_decay=0.5))
    torch.testing.assert_close(model.proj.bias, bias)
    torch.testing.assert_close(model.proj.weight, weight * (1 - 0.1 * 0.5) ** 3)


def test_fit_equals_a_plain_adam_loop_and_records_its_schedule():
    """The same bits as ``torch.optim.Adam``'s defaults (on the CPU, its loop over tensors): fit's
    ``foreach`` AdamW must not move any number a chapter stored."""
    def loss_fn(m, b):
        return nn.functional.cross_entropy(m(b[0]).flatten(0, 1), b[1].flatten())

    torch.manual_seed(0)
    ours = _Tiny()
    hist = train.fit(ours, _batches(6), loss_fn, train.TrainConfig(6, schedule=train.PerStep(lambda s: 0.01 * s), betas=(0.9, 0.98),
                                                                 eps=1e-9))
    torch.manual_seed(0)
    ref = _Tiny()
    opt = torch.optim.Adam(ref.parameters(), lr=0.01, betas=(0.9, 0.98), eps=1e-9)
    for s, b in enumerate(_batches(6), start=1):
        opt.param_groups[0]["lr"] = 0.01 * s
        loss = loss_fn(ref, b)
        opt.zero_grad()
        loss.backward()
        opt.step()
    for p, q in zip(ours.parameters(), ref.parameters()):
        assert torch.equal(p, q)
    assert hist.lr == [0.01 * s for s in range(1, 7)] and hist.steps == 6 and not ours.training


def test_fit_clips_stops_when_batches_run_out_or_time_is_up_and_says_what_is_wrong():
    def loss_fn(m, b):
        return 100 * nn.functional.cross_entropy(m(b[0]).flatten(0, 1), b[1].flatten())

    hist = train.fit(_Tiny(), _batches(3), loss_fn, train.TrainConfig(10, clip=0.5))
    assert hist.steps == 3 and all(n > 0.5 for n in hist.grad_norm)     # recorded before clipping
    assert train.fit(_Tiny(), _batches(5), loss_fn, train.TrainConfig(5, max_seconds=0.0)).steps == 1
    with pytest.raises(ValueError, match="no parameters"):
        train.fit(nn.ReLU(), _batches(1), loss_fn, train.TrainConfig(1))
    with pytest.raises(TypeError, match="TrainConfig"):
        train.fit(_Tiny(), _batches(1), loss_fn, 1)


def test_train_config_says_what_is_wrong_and_replace_keeps_the_rest():
    for bad, match in (({"steps": -1}, "steps"), ({"steps": 2.5}, "steps"), ({"lr": 0.0}, "lr"),
                       ({"clip": 0}, "clip"), ({"eval_every": 0}, "eval_every")):
        with pytest.raises(ValueError, match=match):
            train.TrainConfig(**{"steps": 10, **bad})
    cfg = train.TrainConfig(100, lr=1e-3, clip=1.0, betas=(0.9, 0.98))
    short = dataclasses.replace(cfg, steps=5)
    assert (short.steps, short.lr, short.clip, short.betas) == (5, 1e-3, 1.0, (0.9, 0.98))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.steps = 3


def test_a_schedule_is_a_function_of_the_config_and_follows_replace():
    """Issue 51: a schedule made for 100 steps, replaced to 20, decays over 20 (a closure made for 100
    would have kept 100); fit sets exactly ``config.lr_of(step)`` before each step. One field sets the
    learning rate: ``schedule`` (a function of the step alone is a ``PerStep``); ``lr_at`` is gone."""
    cfg = train.TrainConfig(100, lr=0.01, schedule=train.WarmupCosine(5, floor=0.1))
    short = dataclasses.replace(cfg, steps=20)
    assert [short.lr_of(s) for s in range(1, 21)] == [0.01 * train.warmup_cosine(s, 20, 5, 0.1) for s in range(1, 21)]
    assert short.lr_of(21) == pytest.approx(0.001) and cfg.lr_of(21) > 0.009     # the floor at the end
    fixed = train.TrainConfig(100, lr=0.01, schedule=train.WarmupCosine(5, total=100))
    assert dataclasses.replace(fixed, steps=20).lr_of(20) == fixed.lr_of(20)
    noam = train.TrainConfig(10, schedule=train.Noam(64, 4, 2.0))
    assert [noam.lr_of(s) for s in range(1, 11)] == [train.noam_lr(s, 64, 4, 2.0) for s in range(1, 11)]
    hist = train.fit(_Tiny(), _batches(6), train.next_token_loss, dataclasses.replace(cfg, steps=6))
    assert hist.lr == [dataclasses.replace(cfg, steps=6).lr_of(s) for s in range(1, 7)]
    per_step = train.TrainConfig(3, schedule=train.PerStep(lambda s: s / 10))
    assert train.TrainConfig(3, lr=0.5).lr_of(2) == 0.5 and per_step.lr_of(2) == 0.2
    assert dataclasses.replace(per_step, steps=30).lr_of(20) == 2.0 and per_step.scheduled
    assert "lr_at" not in {f.name for f in dataclasses.fields(train.TrainConfig)}
    with pytest.raises(TypeError, match="PerStep takes a function of the step"):
        train.PerStep(0.1)
    with pytest.raises(TypeError, match="schedule must be callable"):
        train.TrainConfig(3, schedule=0.1)


def test_the_training_wrappers_take_a_train_config():
    for call in (lambda: textlm.train_lm(nn.Linear(2, 2), torch.arange(100), 30),
                 lambda: classify.train_classifier(nn.Linear(2, 2), torch.zeros(4, 2), torch.zeros(4).long(), 3),
                 lambda: lengthtask.train_on_length_task(lambda: nn.Linear(2, 2), [], None, {"steps": 3})):
        with pytest.raises(TypeError, match="config must be a train.TrainConfig"):
            call()


def test_noam_lr():
    assert train.noam_lr(1, 64, 100) == pytest.approx(64 ** -0.5 * 100 ** -1.5)
    peak = train.noam_lr(100, 64, 100)
    assert peak == pytest.approx(1 / math.sqrt(64 * 100))
    assert max(train.noam_lr(s, 64, 100) for s in range(1, 1000)) == pytest.approx(peak)
    assert train.noam_lr(400, 64, 100) == pytest.approx(peak / 2)
    assert train.noam_lr(50, 64, 100, factor=2) == pytest.approx(2 * train.noam_lr(50, 64, 100))
    with pytest.raises(ValueError, match="from 1"):
        train.noam_lr(0, 64, 100)


def _old_textlm_lr(step, steps, warmup, lr=3e-3):
    """textlm.train_lm's schedule as it was written inline before it moved here."""
    frac = min(1.0, step / max(1, warmup))
    decay = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - 1) / max(1, steps)))
    return lr * min(frac, decay)


def _old_vit_lr(step, total, warmup_steps, lr=3e-3):
    """classify.train_classifier's schedule as it was written inline before it moved here."""
    s = step - 1
    if s < warmup_steps:
        return lr * ((s + 1) / warmup_steps)
    return lr * (0.5 * (1 + math.cos(math.pi * min(1.0, (s - warmup_steps) / max(1, total - warmup_steps)))))


@pytest.mark.parametrize("total, warmup", [(300, 20), (50, 0), (7, 10), (1, 1)])
def test_warmup_cosine_is_the_schedules_the_chapters_trained_with(total, warmup):
    """The same floats, bit for bit, as the two schedules it replaced (the chapters' stored runs stay)."""
    for step in range(1, total + 5):
        assert 3e-3 * train.warmup_cosine(step, total, warmup, floor=0.1, overlap=True) == \
            _old_textlm_lr(step, total, warmup)
        assert 3e-3 * train.warmup_cosine(step, total, warmup) == _old_vit_lr(step, total, warmup)


def test_warmup_cosine_by_hand():
    f = [train.warmup_cosine(s, 14, 4, floor=0.1) for s in range(1, 16)]
    assert f[:4] == [0.25, 0.5, 0.75, 1.0] and f[4] == 1.0                 # the ramp, then the peak
    assert f[9] == pytest.approx(0.1 + 0.9 * 0.5)                         # half-way down the cosine
    assert f[14] == pytest.approx(0.1) and min(f) == pytest.approx(0.1)   # the floor, and never below it
    assert all(a >= b for a, b in zip(f[4:], f[5:]))
    g = [train.warmup_cosine(s, 14, 4, floor=0.1, overlap=True) for s in range(1, 16)]
    assert g[:3] == f[:3] and g[4] < 1.0                                   # the cosine started at step 1
    for bad in ({"step": 0}, {"floor": 1.5}):
        with pytest.raises(ValueError, match="step|floor"):
            train.warmup_cosine(**{"step": 1, "total": 10, **bad})


def test_sequence_loss_skips_padding_as_the_one_ignore_label():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 6)
    targets = torch.tensor([[5, 2, 0, 0], [3, 1, 4, 0]])
    marked = targets.masked_fill(targets == data.PAD_ID, train.IGNORE_INDEX)
    want = nn.functional.cross_entropy(logits.flatten(0, 1), marked.flatten())   # -100: its default
    assert torch.equal(train.sequence_loss(logits, targets), want)
    assert torch.equal(train.sequence_loss(logits, marked), want)               # already marked: the same


def test_fit_evaluates_before_every_n_steps_and_after_the_last_without_changing_training():
    def loss_fn(m, b):   # dropout while training: the global generator is drawn from at every step
        logits = nn.functional.dropout(m(b[0]), 0.5, training=m.training)
        return nn.functional.cross_entropy(logits.flatten(0, 1), b[1].flatten())

    held_out = next(_batches(1, seed=9))
    modes = []

    def evaluate(m):
        modes.append((m.training, torch.is_grad_enabled()))
        torch.rand(3)                                       # a draw from the global generator: forked
        return loss_fn(m, held_out).item()

    torch.manual_seed(0)
    model = _Tiny()
    hist = train.fit(model, _batches(7), loss_fn, train.TrainConfig(7, eval_every=3), evaluate=evaluate)
    torch.manual_seed(0)
    plain = _Tiny()
    ref = train.fit(plain, _batches(7), loss_fn, train.TrainConfig(7))
    assert hist.loss == ref.loss and all(torch.equal(p, q) for p, q in zip(model.parameters(), plain.parameters()))
    assert hist.eval_steps == [0, 3, 6, 7] and len(hist.eval_values) == 4
    assert hist.eval_values[-1] == pytest.approx(loss_fn(model, held_out).item())
    assert set(modes) == {(False, False)} and not model.training
    assert train.fit(_Tiny(), _batches(6), loss_fn, train.TrainConfig(6, eval_every=3),
                     evaluate=evaluate).eval_steps == [0, 3, 6]
    assert train.fit(_Tiny(), _batches(2), loss_fn, train.TrainConfig(2)).eval_steps == []


def test_epoch_means_weigh_each_step_by_its_batch():
    hist = train.History(loss=[1.0, 4.0, 2.0, 2.0, 3.0])
    assert hist.epoch_means([2, 2, 1]) == [(2 + 8 + 2) / 5, (4 + 6) / 4]
