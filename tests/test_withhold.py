"""Hidden tests reach a submission's kernel without their expected values (course_utils/grading/withhold.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from course_utils.grading.withhold import BLOCK, bound_names, strip_expected

REPO = Path(__file__).resolve().parent.parent
SOURCES = sorted((REPO / "solutions").glob("ch*/ch*.py"))
HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)
VALUE_CHECKS = {"expect_close", "expect_equal"}


def test_a_block_becomes_its_names_bound_to_the_withheld_value():
    src = ("x = 1\n### BEGIN EXPECTED\ndef _ref(a):\n    return a * 2\n\n_want = [_ref(a) for a in range(3)]\n"
           "_w1, (_w2, _w3) = 1, (2, 3)\n### END EXPECTED\ncheck(_want[0])\nif x:\n"
           "    ### BEGIN EXPECTED\n    _z = 3\n    ### END EXPECTED\n    pass\n")
    out = strip_expected(src)
    assert "_ref(a)" not in out and "a * 2" not in out and "_z = 3" not in out
    assert "_ref = _want = _w1 = _w2 = _w3 = " in out and "    _z = " in out
    ast.parse(out)
    ns: dict = {"check": lambda v: ns.setdefault("seen", v)}
    exec(compile(out, "<stripped>", "exec"), ns)   # noqa: S102 (the test's own code)
    assert repr(ns["seen"]) == "<an expected value withheld by the grader>"


def test_bound_names_cover_the_ways_python_binds():
    code = ("import math as m\nfrom os import path\nfor i, (j, k) in []:\n    pass\nwith open('x') as f:\n"
            "    pass\nclass C:\n    pass\nn: int = 1\nn += 1\n")
    assert set(bound_names(code)) == {"m", "path", "i", "j", "k", "f", "C", "n"}


def _hidden_blocks(path: Path) -> list[str]:
    return HIDDEN.findall(path.read_text())


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.parent.name)
def test_every_hidden_test_computes_its_expected_values_where_the_grader_can_withhold_them(path):
    """Each hidden test has an EXPECTED block, every value check of it compares with a withheld name or
    with a value of the learner's own (a relation, an input after the call), and the stripped cell parses."""
    for n, block in enumerate(_hidden_blocks(path), 1):
        where = f"{path.parent.name}, hidden test {n}"
        assert BLOCK.search(block), f"{where}: no ### BEGIN EXPECTED block: its expected values reach the kernel"
        withheld = {name for m in BLOCK.finditer(block) for name in bound_names(_dedent(m.group(2)))}
        stripped = ast.parse(strip_expected(block))
        against_withheld = 0
        for node in ast.walk(stripped):
            if isinstance(node, ast.Call) and _name(node.func) in VALUE_CHECKS and len(node.args) >= 2:
                root = _root(node.args[1])
                against_withheld += root in withheld
        assert against_withheld, f"{where}: no value check compares with a withheld expected value"


def _dedent(text: str) -> str:
    import textwrap
    return textwrap.dedent(text)


def _name(func: ast.AST) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Subscript, ast.Attribute, ast.Call)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def test_a_helpers_own_locals_are_not_withheld():
    code = ("def _ref(x):\n    s = x * 2\n    return s\n\nclass _M:\n    y = 1\n\n"
            "_want = [w for w in range(3)]\nif True:\n    _z = 1\nelse:\n    _z2 = 2\n")
    assert bound_names(code) == ["_ref", "_M", "_want", "_z", "_z2"]
