"""Hidden tests as the learner's kernel receives them: with their expected values taken out.

A hidden test computes what a right answer gives between ``### BEGIN EXPECTED`` and
``### END EXPECTED`` (inside its ``### BEGIN HIDDEN TESTS`` block). When a *submission* is graded,
:func:`strip_expected` replaces each such block by ``name = WITHHELD`` for every name the block
binds (``course_utils.records.Withheld``), before the cell is sent to the kernel: the code that
computes the expected values never runs where the learner's code runs, and no expected value
exists there. The checks then send the learner's values alone, and the grader compares them with
its reference run of the solution, which runs the blocks as written (``reference.py``,
``verdict.py``). A kernel that forges its records (``actual := expected``) has nothing to copy.

**Secret probes.** The repository learners clone holds the hidden tests, so their probe inputs (a
``torch.Generator().manual_seed(101)``) are public, and a learner could compute every expected value
at home and answer from a table. Where the instructor has a *probe secret* (:func:`probe_key`: the
variable ``COURSE_PROBE_SECRET``, else the file ``.grading-secret`` of the course, which ``make
autograde`` creates, mode 0600, git-ignored), :func:`seed_probes` replaces every seed a hidden test
passes to ``manual_seed`` by one derived from the secret and the chapter, in the reference run and in
every submission alike. The secret itself never enters a box; the derived seeds reach the kernel only
inside the hidden tests, after which nothing the kernel says reaches the feedback (``feedback.py``).
Only a literal ``manual_seed(N)`` is rewritten: every random input of a hidden test is drawn from one
(``tests/test_withhold.py`` checks the rule docs/grading.md states).
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import os
import re
import textwrap
from pathlib import Path

__all__ = ["BLOCK", "SECRET_FILE", "SECRET_VARIABLE", "bound_names", "probe_key", "seed_probes", "strip_expected"]

SECRET_VARIABLE = "COURSE_PROBE_SECRET"
SECRET_FILE = ".grading-secret"
_HIDDEN = re.compile(r"(### BEGIN HIDDEN TESTS\n)(.*?)(### END HIDDEN TESTS)", re.S)
_SEED = re.compile(r"(manual_seed\(\s*)(\d+)(\s*\))")

BLOCK = re.compile(r"^([ \t]*)### BEGIN EXPECTED[ \t]*\n(.*?)^[ \t]*### END EXPECTED[ \t]*$", re.S | re.M)
_WITHHELD = '__import__("course_utils.records", fromlist=["WITHHELD"]).WITHHELD'


class _Bound(ast.NodeVisitor):
    """The names a piece of code binds in the namespace it runs in (see :func:`bound_names`)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            self.names.append(node.id)

    def visit_alias(self, node: ast.alias) -> None:
        self.names.append((node.asname or node.name).split(".")[0])

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.names.append(node.name)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.AST) -> None:   # its name, not its locals
        self.names.append(node.name)

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.AST) -> None:       # a scope of its own: nothing bound here
        pass

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_Lambda


def bound_names(code: str) -> list[str]:
    """The names a block of code binds in the namespace it runs in: assignments, loop targets, defs,
    classes, imports and ``with``/``except`` targets, also inside ``if``/``for``/``with``/``try``;
    never the locals of a function or class it defines, nor a comprehension's variables."""
    visitor = _Bound()
    visitor.visit(ast.parse(code))
    return list(dict.fromkeys(n for n in visitor.names if n != "_"))


def strip_expected(source: str) -> str:
    """``source`` with every EXPECTED block replaced by its names bound to ``WITHHELD``.

    A block that does not parse raises ``SyntaxError`` (a course bug: the grader stops rather than
    send expected values to the kernel).
    """
    def replace(m: re.Match) -> str:
        indent, body = m.group(1), textwrap.dedent(m.group(2))
        names = bound_names(body)
        line = f"{' = '.join(names)} = {_WITHHELD}" if names else "pass"
        return f"{indent}{line}"
    return BLOCK.sub(replace, source)


def probe_key(course: Path, chapter: str) -> bytes | None:
    """The key of ``chapter``'s secret probes: HMAC of the instructor's secret, or ``None`` (public probes)."""
    secret = os.environ.get(SECRET_VARIABLE, "").encode()
    if not secret:
        path = Path(course) / SECRET_FILE
        try:
            secret = path.read_bytes().strip()
        except OSError:
            return None
    return hmac.new(secret, f"probes:{chapter}".encode(), hashlib.sha256).digest() if secret else None


def derived_seed(key: bytes, seed: int) -> int:
    """The seed that stands for ``seed`` under ``key`` (48 bits)."""
    return int.from_bytes(hmac.new(key, str(seed).encode(), hashlib.sha256).digest()[:6], "big")


def seed_probes(source: str, key: bytes | None) -> str:
    """``source`` with each ``manual_seed(N)`` of its hidden tests replaced by the seed derived from ``key``."""
    if key is None:
        return source

    def hidden(m: re.Match) -> str:
        body = _SEED.sub(lambda s: f"{s.group(1)}{derived_seed(key, int(s.group(2)))}{s.group(3)}", m.group(2))
        return m.group(1) + body + m.group(3)
    return _HIDDEN.sub(hidden, source)
