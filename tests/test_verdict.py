"""The grader's own comparison (grader/course_grading/verdict.py), on records made by the checks."""

from __future__ import annotations

import math

import pytest
import torch

from course_grading import execution, sandbox, verdict
from course_utils import checks, records


def _records(monkeypatch, fn) -> list[dict]:
    """The records the checks send while ``fn`` runs (as a graded kernel would)."""
    sent = []
    monkeypatch.setenv(checks.RECORD_FLAG, "1")
    monkeypatch.setattr("IPython.display.publish_display_data", lambda data, **kw: sent.append(data))
    try:
        fn()
    except checks.CheckFailed:
        pass
    return [d[verdict.RECORD_MIME] for d in sent]


def _reference(records, fixed=True) -> list[dict]:
    return [{"kind": r["kind"], "what": r["what"], "atol": r["atol"], "rtol": r["rtol"],
             "expected": r["expected"], "fixed": fixed} for r in records]


def test_values_travel_as_plain_data_and_come_back_exact():
    for t in (torch.randn(2, 3, dtype=torch.float64), torch.tensor([1, -2, 3]), torch.tensor([True, False]),
              torch.zeros(0, 4), torch.tensor(2.5), torch.randn(3, dtype=torch.complex64)):
        back = verdict.decode(checks.encode_value(t))
        want = torch.view_as_real(t) if t.is_complex() else t
        assert torch.equal(back, want.to(torch.float64)), t
    assert verdict.decode(checks.encode_value([1, 2])) == "[1, 2]"
    assert verdict.decode(checks.encode_value(torch.float32)) == "torch.float32"


def test_malformed_records_never_agree():
    good = checks.encode_value(torch.ones(2))
    for bad in ({"dtype": "torch.float32", "shape": [3], "f64": good["f64"]},     # bytes for 2 values, shape 3
                {"dtype": "torch.float32", "shape": [2], "f64": "not base64!"},
                {"dtype": "torch.float32", "shape": [-1], "f64": good["f64"]},
                {"shape": [2]}, "a string", None, {"py": 3}):
        assert not verdict.agree("close", bad, good, 1e-5, 1e-4), bad
        assert not verdict.agree("equal", good, bad, None, None), bad


def test_a_correct_answer_is_confirmed(monkeypatch):
    q = torch.randn(3, 4, dtype=torch.float64)
    want = q @ q.T / 2

    def test():
        checks.expect_close(q @ q.T / 2, want, "scores")
        checks.expect_dtype(q, torch.float64, "dtype")
        checks.expect_equal([1, 2], [1, 2], "a list")

    rec = _records(monkeypatch, test)
    assert [r["kind"] for r in rec] == ["close", "dtype", "equal"]   # a value check's record carries its shape
    assert verdict.judge(rec, _reference(rec)) is None


def test_wrong_values_fail_outside_even_when_the_kernel_passed_them(monkeypatch):
    q = torch.randn(3, 4)
    right, wrong = q @ q.T / 2, q @ q.T
    reference = _reference(_records(monkeypatch, lambda: checks.expect_close(right, right, "scores")))
    monkeypatch.setattr(checks, "_compare_close", lambda *a: None)       # the kernel's comparison switched off
    rec = _records(monkeypatch, lambda: checks.expect_close(wrong, right, "scores"))
    assert "compares the values itself" in verdict.judge(rec, reference)


def test_the_tolerance_is_the_references_not_the_kernels(monkeypatch):
    right = torch.ones(3)
    reference = _reference(_records(monkeypatch, lambda: checks.expect_close(right, right, "x")))
    rec = _records(monkeypatch, lambda: checks.expect_close(right + 0.5, right, "x", atol=1.0))
    assert verdict.judge(rec, reference) is not None
    rec = _records(monkeypatch, lambda: checks.expect_close(right + 1e-7, right, "x"))
    assert verdict.judge(rec, reference) is None


def test_the_kernels_expected_value_is_never_used_where_it_is_fixed(monkeypatch):
    right = torch.arange(4.0)
    reference = _records(monkeypatch, lambda: checks.expect_close(right, right, "x"))
    wrong = torch.zeros(4)
    rec = _records(monkeypatch, lambda: checks.expect_close(wrong, wrong, "x"))   # answer and "expected" agree
    assert "compares the values itself" in verdict.judge(rec, _reference(reference, fixed=True))
    forged = [dict(r, actual=reference[0]["expected"], expected=None) for r in rec]   # actual := the right value
    assert verdict.judge(forged, _reference(reference, fixed=True)) is None         # (what withholding is for)
    # where the expected value depends on the learner's code, only its shape must match
    assert verdict.judge(rec, _reference(reference, fixed=False)) is None
    rec = _records(monkeypatch, lambda: checks.expect_close(torch.zeros(5), torch.zeros(5), "x"))
    assert "does not hold" in verdict.judge(rec, _reference(reference, fixed=False))   # another shape


def test_missing_added_or_renamed_checks_fail(monkeypatch):
    t = torch.ones(2)
    rec = _records(monkeypatch, lambda: (checks.expect_close(t, t, "a"), checks.expect_close(t, t, "b")))
    reference = _reference(rec)
    assert "received 0 of the 2" in verdict.judge([], reference)
    assert "received 3 of the 2" in verdict.judge(rec + rec[:1], reference)
    renamed = [dict(r) for r in rec]
    renamed[1]["what"] = "c"
    assert "another check" in verdict.judge(renamed, reference)
    assert "no reference" in verdict.judge(rec, None)


def test_nan_never_passes_for_a_number(monkeypatch):
    want = torch.ones(2)
    reference = _reference(_records(monkeypatch, lambda: checks.expect_close(want, want, "x")))
    rec = _records(monkeypatch, lambda: checks.expect_close(torch.tensor([1.0, math.nan]), want, "x"))
    assert verdict.judge(rec, reference) is not None


def test_python_values_compare_as_equal_does(monkeypatch):
    reference = _reference(_records(monkeypatch, lambda: checks.expect_equal(1, 1, "n")))
    assert verdict.judge(_records(monkeypatch, lambda: checks.expect_equal(1.0, 1, "n")), reference) is None
    assert verdict.judge(_records(monkeypatch, lambda: checks.expect_equal(2, 1, "n")), reference) is not None


def test_a_withheld_expected_value_never_reaches_the_kernel_or_its_records(monkeypatch):
    right = torch.arange(6.0).reshape(2, 3)
    reference = _reference(_records(monkeypatch, lambda: (checks.expect_close(right, right, "x"),
                                                          checks.expect_equal(right.long(), right.long(), "y"))))
    w = checks.WITHHELD

    def test(got):
        checks.expect_close(got, w[0], "x")          # what a stripped hidden test runs: no comparison in the kernel
        checks.expect_equal(got.long(), w[1].long(), "y")

    rec = _records(monkeypatch, lambda: test(right))
    assert all("expected" not in r for r in rec) and verdict.judge(rec, reference) is None
    rec = _records(monkeypatch, lambda: test(right + 1))
    assert verdict.failing(rec, reference) == ["check 1 of 2 (x)", "check 2 of 2 (y)"]
    # where the expected value depends on the learner's code, a record without it cannot pass
    assert verdict.judge(_records(monkeypatch, lambda: test(right)), _reference(reference, fixed=False)) is not None
    for needs_content in (len, bool, list, float):
        with pytest.raises(TypeError, match="withheld"):
            needs_content(w)


def test_record_only_is_the_grader_s_public_switch(monkeypatch):
    """The reference run's second pass makes the checks send without judging, through
    ``records.record_only``: the code the grader sends the kernel calls it, and sets nothing private."""
    wrong = torch.zeros(2)

    def every_check():
        checks.expect_close(wrong, torch.ones(2), "x")
        checks.expect_equal(1, 2, "n")
        checks.expect_equal(wrong, torch.ones(2), "t")
        checks.expect_shape(wrong, (3,), "s")
        checks.expect_dtype(wrong, torch.int64, "d")

    records.record_only(True)
    try:
        assert records.is_record_only()
        every_check()   # nothing fails while the checks only record ...
        sent = _records(monkeypatch, every_check)
    finally:
        records.record_only(False)
    assert [r["kind"] for r in sent] == ["close", "equal", "equal", "shape", "dtype"]   # ... and all send
    assert not records.is_record_only()
    with pytest.raises(checks.CheckFailed):
        checks.expect_close(wrong, torch.ones(2), "x")
    assert "records.record_only(True)" in execution.TAINT and "records.record_only(False)" in execution.UNTAINT
    assert "_record_only" not in execution.TAINT + execution.UNTAINT


def test_the_checks_re_export_the_record_format():
    """Hidden tests and older code find the record format's names in ``checks`` still; ``records``
    exports them (tests/test_exports.py: no name exported twice)."""
    for name in ("RECORD_FLAG", "RECORD_MAX_VALUES", "RECORD_MIME", "WITHHELD", "Withheld", "encode_value"):
        assert getattr(checks, name) is getattr(records, name) and name not in checks.__all__


def test_long_reprs_are_compared_as_text_never_parsed(monkeypatch):
    import ast

    calls = []
    real = ast.literal_eval
    monkeypatch.setattr(ast, "literal_eval", lambda text: calls.append(len(text)) or real(text))
    assert verdict.agree("equal", {"py": "1"}, {"py": "1.0"}, None, None)
    big = "[" + "1, " * 1_000_000 + "]"
    assert not verdict.agree("equal", {"py": big}, {"py": "[1]"}, None, None)
    assert not verdict.agree("equal", {"py": "{'a': 1}"}, {"py": "{'a': 1.0}"}, None, None)   # not a number
    assert max(calls) <= verdict.LITERAL_CHARS


def test_nothing_is_sent_outside_grading(monkeypatch):
    monkeypatch.delenv(checks.RECORD_FLAG, raising=False)
    sent = []
    monkeypatch.setattr("IPython.display.publish_display_data", lambda data, **kw: sent.append(data))
    checks.expect_close(torch.ones(2), torch.ones(2), "x")
    assert sent == []


@pytest.mark.parametrize("source, names", [
    ("def f(x):\n    return x\n\nclass M:\n    pass\n\nY = 3\nz: int = 4\n", ["M", "Y", "f", "z"]),
    ("import torch\nfor i in range(3):\n    pass\n", []),
    ("def broken(:\n", []),
])
def test_answer_names_are_what_the_answer_cells_define(source, names):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source, metadata={"nbgrader": {"solution": True}}),
                nbformat.v4.new_code_cell("def not_an_answer(): pass")]
    assert sandbox.answer_names(nb) == names
