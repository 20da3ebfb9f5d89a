"""Hidden tests as the learner's kernel receives them: with their expected values taken out.

A hidden test computes what a right answer gives between ``### BEGIN EXPECTED`` and
``### END EXPECTED`` (inside its ``### BEGIN HIDDEN TESTS`` block). When a *submission* is graded,
:func:`strip_expected` replaces each such block by ``name = WITHHELD`` for every name the block
binds (``course_utils.checks.Withheld``), before the cell is sent to the kernel: the code that
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
_WITHHELD = '__import__("course_utils.checks", fromlist=["WITHHELD"]).WITHHELD'


def bound_names(code: str) -> list[str]:
    """The names a block of code binds in the namespace it runs in: assignments, loop targets, defs,
    classes, imports and ``with`` targets, also inside ``if``/``for``/``while``/``with``/``try``; never
    the locals of a function or class it defines, nor a comprehension's variables."""
    names: list[str] = []

    def targets(node: ast.AST) -> None:
        if isinstance(node, ast.Name):
            names.append(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for elt in node.elts:
                targets(elt)
        elif isinstance(node, ast.Starred):
            targets(node.value)

    def statements(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.append(node.name)
                continue
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    targets(t)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
                targets(node.target)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.extend((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if item.optional_vars is not None:
                        targets(item.optional_vars)
            for sub in ast.iter_child_nodes(node):   # a walrus anywhere in the statement binds here too
                for inner in ast.walk(sub):
                    if isinstance(inner, ast.NamedExpr):
                        targets(inner.target)
                    if isinstance(inner, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        break
            for field in ("body", "orelse", "finalbody"):
                statements(getattr(node, field, None) or [])
            for handler in getattr(node, "handlers", None) or []:
                if handler.name:
                    names.append(handler.name)
                statements(handler.body)

    statements(ast.parse(code).body)
    return list(dict.fromkeys(n for n in names if n != "_"))


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
