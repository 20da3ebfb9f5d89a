"""The xdist scopes of conftest.py: what must share a worker does, the chapters' graded classes do not, and
the costliest scopes go out first."""

from __future__ import annotations

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("root_conftest", Path(__file__).resolve().parent.parent / "conftest.py")
conftest = importlib.util.module_from_spec(spec)
spec.loader.exec_module(conftest)


def test_a_notebooks_cells_and_a_modules_tests_share_a_scope():
    nb = "solutions/ch03_scaled_dot_product/ch03_scaled_dot_product.ipynb"
    assert conftest.scope_of(f"{nb}::Cell 0") == conftest.scope_of(f"{nb}::Cell 12") == nb
    hostile = "tests/test_grading_hostile.py"
    assert {conftest.scope_of(f"{hostile}::test_{n}") for n in ("a", "b[x]")} == {hostile}


def test_each_chapters_graded_class_is_a_scope_of_its_own():
    mod = "tests/test_grading.py"
    ch03 = {conftest.scope_of(f"{mod}::{t}[ch03_scaled_dot_product]")
            for t in ("test_release_is_in_sync", "test_solution_scores_full_marks")}
    ch04 = conftest.scope_of(f"{mod}::test_release_is_in_sync[ch04_multihead_mqa_gqa]")
    assert len(ch03) == 1 and ch04 not in ch03
    assert mod in ch04 and mod in next(iter(ch03))


def test_the_costliest_scopes_go_out_first_and_the_small_modules_last():
    queue = ["tests/test_names.py", "solutions/ch06_transformer/ch06_transformer.ipynb", "tests/test_blocks.py",
             "tests/test_grading.py[ch03_scaled_dot_product]", "tests/test_grading_hostile.py",
             "tests/test_grading.py[ch01_seq2seq_rnn]", "solutions/ch01_seq2seq_rnn/ch01_seq2seq_rnn.ipynb",
             "tests/test_answers.py"]
    assert conftest.heaviest_first(queue) == [
        "tests/test_grading_hostile.py", "tests/test_grading.py[ch03_scaled_dot_product]",
        "tests/test_grading.py[ch01_seq2seq_rnn]", "solutions/ch06_transformer/ch06_transformer.ipynb",
        "solutions/ch01_seq2seq_rnn/ch01_seq2seq_rnn.ipynb", "tests/test_answers.py", "tests/test_names.py",
        "tests/test_blocks.py"]


def test_the_scheduler_hands_out_the_reordered_queue():
    """The scheduler conftest.py makes gives a worker the costliest scope first (xdist's own order would
    give it the module with the most tests)."""
    from collections import OrderedDict
    from types import SimpleNamespace

    config = SimpleNamespace(getvalue=lambda name: "loadscope", option=SimpleNamespace(loadscopereorder=True,
                                                                                       maxschedchunk=None))
    sched = conftest.pytest_xdist_make_scheduler(config, log=None)
    sched.workqueue = OrderedDict((s, {f"{s}::t": False}) for s in
                                  ("tests/test_names.py", "tests/test_grading.py[ch03]", "tests/test_grading_hostile.py"))
    sent = []

    class Node:   # a worker as the scheduler sees it (hashable)
        send_runtest_some = staticmethod(sent.append)

    node = Node()
    sched.registered_collections = {node: [f"{s}::t" for s in sched.workqueue]}
    sched._assign_work_unit(node)
    assert list(sched.assigned_work[node]) == ["tests/test_grading_hostile.py"] and sent == [[2]]
    assert list(sched.workqueue) == ["tests/test_grading.py[ch03]", "tests/test_names.py"]
