import re

import pytest
import torch
import torch.nn.functional as F

from course_utils import checks, rnn
from course_utils.rnn import rnn_forward as aliased_reference


def test_expect_close_names_the_first_wrong_position():
    with pytest.raises(AssertionError, match=r"index \(1, 0\): got 5, expected 3"):
        checks.expect_close(torch.tensor([[1.0, 2], [5, 4]]), torch.tensor([[1.0, 2], [3, 4]]), "x")
    with pytest.raises(AssertionError, match=r"expected shape \(2\), got \(3\)"):
        checks.expect_close(torch.zeros(3), torch.zeros(2), "x")
    with pytest.raises(AssertionError, match="NaN"):
        checks.expect_close(torch.tensor([float("nan")]), torch.zeros(1), "x")
    checks.expect_close(torch.tensor([1.0]), torch.tensor([1.0 + 1e-7]), "x")


def test_call_reports_unfinished_exercises():
    def todo():
        raise NotImplementedError()
    with pytest.raises(AssertionError, match="not implemented yet"):
        checks.call(todo)


def test_run_checks_prints_or_names_the_failing_check(capsys):
    checks.run_checks("f", [("a", lambda: None), ("b", lambda: None)])
    assert "all 2 checks passed" in capsys.readouterr().out
    with pytest.raises(AssertionError, match=r"f: 1 of 2 checks failed\n  \u2717 check 2/2 \(bad\): wrong"):
        checks.run_checks("f", [("ok", lambda: None), ("bad", lambda: checks.expect_equal(1, 2, "wrong"))])


def test_run_checks_reports_every_failing_check_with_its_hint():
    def crash():
        return {}["missing"]
    with pytest.raises(checks.CheckFailed) as info:
        checks.run_checks("g", [("first", lambda: checks.expect_equal(1, 2, "one")),
                                ("fine", lambda: None),
                                ("third", lambda: (_ for _ in ()).throw(checks.CheckFailed("divide by sqrt(d_k) = 3"))),
                                ("crash", crash)])
    msg = str(info.value)
    assert msg.startswith("g: 3 of 4 checks failed")
    assert "check 1/4 (first): one: expected 2, got 1" in msg
    assert "check 3/4 (third): divide by sqrt(d_k) = 3" in msg, "a later check's hint is hidden"
    assert "check 4/4 (crash) raised KeyError: 'missing' (line" in msg and 'return {}["missing"]' in msg
    assert "fine" not in msg


def test_an_exercise_not_done_yet_is_said_once_not_per_check():
    def todo(*args):
        raise NotImplementedError()
    with pytest.raises(checks.CheckFailed) as info:
        checks.run_checks("todo", [(f"check {i}", lambda: checks.call(todo, 1)) for i in range(4)])
    msg = str(info.value)
    assert msg == ("todo: todo is not implemented yet: replace `raise NotImplementedError()` with your code")


def test_a_failed_check_shows_without_a_traceback_in_ipython():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shown = []
    original = shell._showtraceback
    shell._showtraceback = lambda etype, evalue, stb: shown.append(stb)
    try:
        shell.run_cell("from course_utils import checks\n"
                       "checks.run_checks('h', [('bad', lambda: checks.expect_equal(1, 2, 'x'))])")
    finally:
        shell._showtraceback = original
    assert shown == [["CheckFailed: h: 1 of 1 checks failed\n  \u2717 check 1/1 (bad): x: expected 2, got 1"]]


def test_forbid_catches_aliases_and_restores():
    x, h = torch.zeros(1, 2, 3), torch.zeros(1, 4)
    W, U, b = torch.zeros(4, 3), torch.zeros(4, 4), torch.zeros(4)
    with checks.forbid(rnn.rnn_forward):
        with pytest.raises(AssertionError, match="your answer calls course_utils.rnn.rnn_forward"):
            aliased_reference(x, h, W, U, b)
    assert aliased_reference(x, h, W, U, b)[0].shape == (1, 2, 4)
    with checks.forbid((F, "scaled_dot_product_attention")):
        with pytest.raises(AssertionError, match="scaled_dot_product_attention"):
            F.scaled_dot_product_attention(x, x, x)
    assert F.scaled_dot_product_attention(x, x, x).shape == x.shape


def test_forbid_works_on_closures():
    def outer():
        y = 3
        def inner():
            return y
        return inner
    f = outer()
    with checks.forbid(f):
        with pytest.raises(AssertionError):
            f()
    assert f() == 3


def test_learner_or_reference(capsys):
    def todo(x):
        raise NotImplementedError()
    def ref(x):
        return x
    def broken(x):
        return x.nope
    def good(x):
        return x
    def wrong(x):
        return x + 1
    assert checks.learner_or_reference(todo, ref, lambda f: f(1)) is ref
    assert checks.learner_or_reference(broken, ref, lambda f: f(1)) is ref
    assert checks.learner_or_reference(wrong, ref, lambda f: f(1)) is ref
    assert checks.learner_or_reference(good, ref, lambda f: f(1)) is good
    out = capsys.readouterr().out
    assert "not implemented yet" in out and "AttributeError" in out and "your implementation" in out
    assert "different result" in out


def test_learner_or_reference_compares_tensors_and_structures(capsys):
    ref = lambda x: (torch.softmax(x, -1), [x.sum()])  # noqa: E731
    close = lambda x: (torch.softmax(x, -1) + 1e-7, [x.sum()])  # noqa: E731
    off = lambda x: (torch.softmax(x, -1).flip(-1), [x.sum()])  # noqa: E731
    short = lambda x: (torch.softmax(x, -1),)  # noqa: E731
    probe = lambda f: f(torch.tensor([[0.0, 1.0, 2.0]]))  # noqa: E731
    assert checks.learner_or_reference(close, ref, probe) is close
    assert checks.learner_or_reference(off, ref, probe) is ref
    assert checks.learner_or_reference(short, ref, probe) is ref
    assert checks.same_result(torch.ones(2, dtype=torch.bool), torch.ones(2, dtype=torch.bool))
    assert not checks.same_result(torch.ones(2, dtype=torch.bool), torch.zeros(2, dtype=torch.bool))
    assert not checks.same_result(torch.ones(2), torch.ones(3))
    assert checks.same_result({"a": 1.0}, {"a": 1.0 + 1e-9}) and not checks.same_result({"a": 1}, {"b": 1})


def test_expect_not_calling_sees_aliases_attributes_and_nested_code():
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    def by_alias(q):
        return sdpa(q, q, q)

    def by_attribute(x):
        return torch.softmax(x, -1)

    def nested(x):
        def inner(y):
            return F.scaled_dot_product_attention(y, y, y)
        return inner(x)

    def honest(x):
        return torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)

    for fn in (by_alias, nested):
        with pytest.raises(AssertionError, match="uses scaled_dot_product_attention"):
            checks.expect_not_calling(fn, F.scaled_dot_product_attention)
    with pytest.raises(AssertionError, match="uses softmax"):
        checks.expect_not_calling(by_attribute, torch.softmax)
    checks.expect_not_calling(honest, torch.softmax, F.scaled_dot_product_attention)


def test_call_fails_a_function_that_changes_its_inputs_in_place():
    # Issue 54: every visible and hidden test calls learner code through checks.call, which checks after
    # the call that every tensor handed in (inside lists and dicts, a module's parameters) is as it was.
    x, mask = torch.randn(2, 3), torch.tensor([[True, False, False], [False, False, True]])
    assert torch.equal(checks.call(lambda x, m: x.masked_fill(m, 0.0), x, mask), x.masked_fill(mask, 0.0))
    cases = {
        "x": lambda x, m: x.masked_fill_(m, 0.0),
        "q": lambda q: q.mul_(0.5),
        "pair[1]": lambda pair: pair[1].zero_(),
        "layer.weight": lambda layer, x: layer.weight.data.mul_(2) @ x,
        "t": lambda t: t.transpose_(0, 1),
    }
    args = {"x": (x.clone(), mask), "q": (torch.ones(3),), "pair[1]": ([torch.ones(1), torch.ones(2)],),
            "layer.weight": (torch.nn.Linear(2, 2), torch.ones(2)), "t": (torch.ones(2, 3),)}
    for where, fn in cases.items():
        with pytest.raises(checks.CheckFailed, match=rf"changed its input `{re.escape(where)}` in place"):
            checks.call(fn, *args[where])
    nan = torch.tensor([float("nan"), 1.0])
    checks.call(lambda a: a + 1, nan)             # NaN equals NaN here: an unchanged input passes


def test_call_records_every_call_while_recording_is_on():
    from course_utils import domains

    def f(a, b=2):
        if a < 0:
            raise ValueError("negative")
        return a + b
    checks.call(f, 0)                                   # not recording: nothing kept
    with domains.recording() as seen:
        checks.call(f, 1, b=3)
        with pytest.raises(ValueError):
            checks.call(f, -1)
    assert [(r["function"], r["raised"]) for r in seen] == [("f", None), ("f", "ValueError")]


def test_a_library_warning_comes_after_the_hint_without_its_file_path(capsys):
    # Issue 49: PyTorch's UserWarning (with the kernel's temporary cell path) printed above the course's hint.
    import warnings

    def answer(x):
        warnings.warn("To copy construct from a tensor, use sourceTensor.clone()", UserWarning, stacklevel=2)
        return x * 0
    with pytest.raises(checks.CheckFailed) as failed:
        checks.run_checks("answer", [("zero", lambda: checks.expect_close(checks.call(answer, torch.ones(2)),
                                                                          torch.ones(2), "out"))])
    lines = str(failed.value).splitlines()
    assert "wrong value" in lines[1] and lines[-1] == "  note: answer gave a UserWarning: To copy construct from a tensor, use sourceTensor.clone()"
    assert capsys.readouterr().err == ""
    checks.run_checks("answer", [("runs", lambda: checks.call(answer, torch.ones(2)))])
    assert capsys.readouterr().out.splitlines() == ["\u2713 answer: all 1 checks passed",
                                                    "note: answer gave a UserWarning: To copy construct from a tensor, use sourceTensor.clone()"]


def test_a_warning_with_an_empty_message_is_still_reported(capsys):
    import warnings

    def quiet(x):
        warnings.warn("", UserWarning, stacklevel=2)
        return x
    checks.call(quiet, torch.ones(1))
    assert capsys.readouterr().out == "note: quiet gave a UserWarning: \n"
