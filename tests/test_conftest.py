"""The xdist scopes of conftest.py: what must share a worker does, and the chapters' graded classes do not."""

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
