"""Hidden tests reach a submission's kernel without their expected values (grader/course_grading/withhold.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from course_grading import withhold
from course_grading.withhold import BLOCK, bound_names, strip_expected

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


# --- Every hidden probe drawn from the secret (issue 48, cause 7) -----------------------------------
#
# The grader rewrites a literal ``manual_seed(N)`` of a hidden test (``withhold._SEED``) into a seed
# derived from the class's secret, and nothing else. So a hidden test's random inputs are secret only
# if each of them comes from such a literal. The rule, checked on the AST of every hidden block:
#
# 1. every ``manual_seed(...)`` is called on a fresh ``torch.Generator()`` (never the global RNG, which
#    the learner's code can reseed), and its argument is either an integer literal the rewrite matches,
#    or an expression *derived from the secret*;
# 2. no ``torch.Generator()`` is used unseeded (its default seed is public);
# 3. every random draw (``torch.rand``/``randn``/``randint``/``randperm``/``*_like``/``normal``/
#    ``bernoulli``/``multinomial``/``poisson`` and the in-place samplers ``uniform_``, ``normal_`` ...)
#    passes ``generator=`` an expression derived from the secret; every ``seed=`` keyword likewise;
# 4. nothing else makes randomness: no ``random.*``, ``np.random.*``/``numpy.random.*``,
#    ``torch.seed``, ``set_rng_state``, ``set_state``, ``dropout`` (none of them is rewritten);
# 5. every hidden block holds at least one rewritten literal seed (a random probe), unless it is in
#    ``NO_RANDOM_PROBE`` with its reason: only a block whose input domain is finite and enumerated in
#    full may be there (a table of it is no shortcut: it is the answer). Today the list is empty.
#
# "Derived from the secret": an expression that contains a literal ``manual_seed(N)`` call or a name
# derived from the secret. A name is derived from the secret when *every* binding of it in the block
# is: assignments (also tuple targets, ``with ... as``, ``:=``) from such an expression, loop and
# comprehension targets over one, a function's parameter when every call of the function in the block
# passes one (or the default is one), a lambda's parameter when its default is one. Names are not told
# apart by scope (a ``seed`` parameter of two helpers is one name: both must be derived), and the set is
# the largest that satisfies this, so a helper may pass ``seed + 1`` on to another.

_RNG_DRAWS = {"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "normal",
              "bernoulli", "multinomial", "poisson", "uniform_", "normal_", "random_", "bernoulli_",
              "exponential_", "geometric_", "cauchy_", "log_normal_"}
_RNG_OTHER = {"seed", "set_rng_state", "set_state", "dropout", "dropout_", "default_rng", "RandomState",
              "Random", "shuffle"}   # (fork_rng only saves and restores: allowed)
NO_RANDOM_PROBE: dict[tuple[str, int], str] = {}   # (chapter, hidden test number) -> why no random probe


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _is_literal_seed(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and _name(node.func) == "manual_seed" and len(node.args) == 1
            and not node.keywords and isinstance(node.args[0], ast.Constant)
            and type(node.args[0].value) is int)


def _target_names(target: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]


def _defaults(args: ast.arguments) -> dict[str, ast.AST]:
    positional = args.posonlyargs + args.args
    names = [p.arg for p in positional][len(positional) - len(args.defaults):]
    out = dict(zip(names, args.defaults))
    out.update({p.arg: d for p, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    return out


def _argument(call: ast.Call, i: int, param: ast.arg, positional: bool, default: ast.AST | None) -> ast.AST | None:
    """What ``call`` passes for the ``i``-th parameter ``param`` (None: cannot tell)."""
    kw = {k.arg: k.value for k in call.keywords}
    if any(isinstance(x, ast.Starred) for x in call.args) or None in kw:
        return None
    if positional and i < len(call.args):
        return call.args[i]
    return kw.get(param.arg, default)


def _parameter_bindings(func: ast.AST, sites: list[ast.Call]) -> list[tuple[str, ast.AST | None]]:
    """(parameter, what it is bound to) for every call site of ``func`` (a lambda: its defaults only)."""
    a = func.args
    positional, defaults = a.posonlyargs + a.args, _defaults(a)
    out = [(p.arg, None) for p in (a.vararg, a.kwarg) if p is not None]
    for i, p in enumerate(positional + a.kwonlyargs):
        if isinstance(func, ast.Lambda) or not sites:
            out.append((p.arg, defaults.get(p.arg)))
        out += [(p.arg, _argument(c, i, p, p in positional, defaults.get(p.arg))) for c in sites]
    return out


def _bindings(tree: ast.AST) -> dict[str, list[ast.AST | None]]:
    """Every name a hidden block binds, with the expressions it is bound to (None: unknown)."""
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    calls: dict[str, list[ast.Call]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions:
            calls.setdefault(node.func.id, []).append(node)
    pairs: list[tuple[str, ast.AST | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            pairs += [(n, node.value) for t in node.targets for n in _target_names(t)]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
            pairs += [(n, node.value) for n in _target_names(node.target)]
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            pairs += [(n, node.iter) for n in _target_names(node.target)]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            pairs += [(n, node.context_expr) for n in _target_names(node.optional_vars)]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            pairs += _parameter_bindings(node, calls.get(getattr(node, "name", None), []))
    bindings: dict[str, list[ast.AST | None]] = {}
    for name, value in pairs:
        bindings.setdefault(name, []).append(value)
    return bindings


def _secret_names(tree: ast.AST) -> set[str]:
    """The names of a hidden block derived from the secret (see the rule above)."""
    bindings = _bindings(tree)
    secret = set(bindings)          # the greatest fixed point: ``seed`` bound to ``seed + 1`` in a helper stays
    while True:
        out = {n for n in secret if not all(v is not None and _derived(v, secret) for v in bindings[n])}
        if not out:
            return secret
        secret -= out


def _derived(node: ast.AST, secret: set[str]) -> bool:
    return any(_is_literal_seed(n) or (isinstance(n, ast.Name) and n.id in secret) for n in ast.walk(node))


def _seed_faults(node: ast.Call, secret: set[str], code: str) -> list[str]:
    receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
    faults = []
    if not (isinstance(receiver, ast.Call) and _name(receiver.func) == "Generator"):
        faults.append(f"{code}: seeds something other than a fresh torch.Generator()")
    if not _is_literal_seed(node) and not (len(node.args) == 1 and _derived(node.args[0], secret)):
        faults.append(f"{code}: a seed neither literal nor derived from a literal manual_seed(N)")
    return faults


def _call_faults(node: ast.Call, secret: set[str]) -> list[str]:
    """Why one call of a hidden block makes randomness the secret does not decide."""
    name, dotted, code = _name(node.func), _dotted(node.func), ast.unparse(node)[:80]
    faults = []
    if name == "manual_seed":
        faults += _seed_faults(node, secret, code)
    elif name in _RNG_DRAWS and (dotted.startswith(("torch.", "F.")) or isinstance(node.func, ast.Attribute)):
        gen = next((k.value for k in node.keywords if k.arg == "generator"), None)
        if gen is None or not _derived(gen, secret):
            faults.append(f"{code}: a random draw whose generator is not drawn from a literal manual_seed(N)")
    elif name in _RNG_OTHER or dotted.startswith(("random.", "np.random.", "numpy.random.")):
        faults.append(f"{code}: randomness the grader does not rewrite")
    faults += [f"{code}: seed= neither literal-seeded nor derived from a literal manual_seed(N)"
               for k in node.keywords if k.arg == "seed" and not _derived(k.value, secret)]
    return faults


def probe_faults(block: str) -> list[str]:
    """Why a hidden block's random inputs are not all drawn from the secret (empty: they are)."""
    tree = ast.parse(block)
    secret = _secret_names(tree)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    faults = [f for node in calls for f in _call_faults(node, secret)]
    seeded = {id(n.func.value) for n in calls if _name(n.func) == "manual_seed" and isinstance(n.func, ast.Attribute)}
    faults += [f"{ast.unparse(n)}: an unseeded generator (its default seed is public)"
               for n in calls if _name(n.func) == "Generator" and id(n) not in seeded]
    literal_seeds = sum(_is_literal_seed(n) for n in calls)
    if literal_seeds != len(withhold._SEED.findall(block)):
        faults.append("a literal manual_seed(N) the rewrite does not match (write it in decimal, one argument)")
    if not literal_seeds:
        faults.append("no literal manual_seed(N): no input of it is drawn from the secret")
    return faults


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.parent.name)
def test_every_hidden_probe_is_drawn_from_the_secret(path):
    """Each hidden test's random inputs come from a literal ``manual_seed(N)`` the grader rewrites, and
    each hidden test has one (issue 48, cause 7): a table computed at home from the public repository
    scores nothing in a class with a secret."""
    bad = []
    for n, block in enumerate(_hidden_blocks(path), 1):
        faults = probe_faults(block)
        if (path.parent.name, n) in NO_RANDOM_PROBE:
            faults = [f for f in faults if not f.startswith("no literal manual_seed")]
        bad += [f"{path.parent.name}, hidden test {n}: {f}" for f in dict.fromkeys(faults)]
    assert not bad, "\n".join(bad)


def test_the_probe_rule_flags_each_way_around_the_secret():
    ok = "g = torch.Generator().manual_seed(7)\ns = int(torch.randint(9, (), generator=g))\n" \
         "def f(seed):\n    return torch.randn(3, generator=torch.Generator().manual_seed(seed))\nf(s + 1)\n"
    assert probe_faults(ok) == []
    for bad in ("def f(seed):\n    return torch.randn(3, generator=torch.Generator().manual_seed(seed))\n"
                "f(3)\nf(torch.Generator().manual_seed(1).initial_seed())\n",          # one public call site
                "SEED = 5\ng = torch.Generator().manual_seed(SEED)\n",                  # a name, not a literal
                "g = torch.Generator().manual_seed(1)\nx = torch.randn(3)\n",           # the global RNG
                "g = torch.Generator().manual_seed(1)\nh = torch.Generator()\nx = torch.rand(2, generator=h)\n",
                "g = torch.Generator().manual_seed(1)\nx = np.random.default_rng(3).normal()\n",
                "g = torch.Generator().manual_seed(1)\nt = make(64, seed=5)\n",
                "g = torch.Generator().manual_seed(0x10)\n",                             # not what the rewrite matches
                "x = torch.ones(3)\n",                                                   # no random probe
                "torch.manual_seed(3)\nx = torch.randn(2)\n"):
        assert probe_faults(bad), bad


def _seeded(block: str, key: bytes | None) -> str:
    """A hidden block (its text between the markers) as the grader sends it under probe key ``key``."""
    return withhold.seed_probes(f"### BEGIN HIDDEN TESTS\n{block}### END HIDDEN TESTS", key)


def _patchify_probes(key: bytes | None) -> list:
    """The images ch07's hidden patchify test hands the learner, under probe key ``key``."""
    import contextlib

    import torch
    import torch.nn.functional as F

    block = _hidden_blocks(REPO / "solutions" / "ch07_transformer_families" / "ch07_transformer_families.py")[3]
    assert "patchify (hidden)" in block
    seen = []

    class _Checks:
        @staticmethod
        def forbid(*_):
            return contextlib.nullcontext()

        @staticmethod
        def call(fn, images, patch):
            seen.append(images.clone())
            return fn(images, patch)

        expect_shape = expect_dtype = expect_close = staticmethod(lambda *a, **k: None)
        run_checks = staticmethod(lambda name, cases: [check() for _, check in cases])

    def patchify(images, patch):
        return F.unfold(images, kernel_size=patch, stride=patch).transpose(1, 2)

    ns = {"torch": torch, "F": F, "checks": _Checks, "patchify": patchify}
    exec(compile(strip_expected(_seeded(block, key)), "<hidden>", "exec"), ns)  # noqa: S102
    return seen


def test_a_table_computed_at_home_does_not_meet_a_classs_probes():
    """ch07's hidden patchify test (the cell a home-computed table passed, issue 48): the images a class
    with a secret sends differ from the public ones and from another class's, the same in every run."""
    import torch

    public = _patchify_probes(None)
    one, other = _patchify_probes(b"k" * 32), _patchify_probes(b"j" * 32)
    assert len(public) == len(one) == len(other) == 20
    assert [x.shape for x in public] == [x.shape for x in one] == [x.shape for x in other]
    assert not any(torch.equal(a, b) for a, b in zip(public, one))
    assert not any(torch.equal(a, b) for a, b in zip(one, other))
    assert all(torch.equal(a, b) for a, b in zip(one, _patchify_probes(b"k" * 32)))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.parent.name)
def test_every_hidden_test_changes_with_the_secret(path):
    """Each hidden test's text as the kernel receives it differs between two secrets and from the public one."""
    for n, block in enumerate(_hidden_blocks(path), 1):
        texts = {block, _seeded(block, b"k" * 32), _seeded(block, b"j" * 32)}
        assert len(texts) == 3, f"{path.parent.name}, hidden test {n}: the same in every class"


def _aliases(source: str) -> dict[str, str]:
    """``{name bound in the chapter: the dotted course_utils object it names}``, from its imports."""
    out = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("course_utils"):
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("course_utils") and a.asname:
                    out[a.asname] = a.name
    return out


def _course_name(func: ast.AST, aliases: dict[str, str]) -> str | None:
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name) or func.id not in aliases:
        return None
    return ".".join([aliases[func.id], *reversed(parts)])


def _is_learner_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and _name(node.func) == "call"


def reference_calls_outside_expected(block: str, aliases: dict[str, str], references: set[str]) -> list[str]:
    """The calls of an exercise's reference (``course_utils.decoding.beam_search``) that a hidden test makes
    outside its EXPECTED blocks for anything but the learner's inputs: what they compute there (an expected
    value) would run in the learner's kernel. A reference call inside the arguments of ``checks.call``, or
    bound to a name that such arguments use, builds an input and is allowed."""
    tree = ast.parse(strip_expected(block))
    names = lambda node: {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}  # noqa: E731
    calls = [c for c in ast.walk(tree) if _is_learner_call(c)]
    inputs = set().union(*(names(a) for c in calls for a in [*c.args, *c.keywords]))
    bindings = [(set().union(*map(names, n.targets)), n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)]
    bindings += [(names(n.target), n.iter) for n in ast.walk(tree) if isinstance(n, (ast.For, ast.comprehension))]
    bindings += [(names(n.func.value), ast.Tuple(n.args)) for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and n.func.attr in ("append", "extend", "insert", "update")]
    grown = True
    while grown:            # a name that builds an input is an input too (through lists, dicts, loops)
        grown = False
        for targets, value in bindings:
            if targets & inputs and not names(value) <= inputs:
                inputs |= names(value)
                grown = True
    as_input = {id(n) for c in calls for a in [*c.args, *c.keywords] for n in ast.walk(a)}
    as_input |= {id(n) for targets, value in bindings if targets & inputs for n in ast.walk(value)}
    return [ast.unparse(node)[:80] for node in ast.walk(tree)
            if isinstance(node, ast.Call) and id(node) not in as_input and _course_name(node.func, aliases) in references]


def test_a_reference_called_outside_the_expected_block_is_found():
    aliases = _aliases("from course_utils import decoding\nfrom course_utils.attention import causal_mask as cm\n")
    refs = {"course_utils.decoding.beam_search", "course_utils.attention.causal_mask"}
    inside = "### BEGIN EXPECTED\n_w = decoding.beam_search(s, 1)\n### END EXPECTED\ncheck(got, _w)\n"
    outside = "_w = decoding.beam_search(s, 1)\nm = cm(3)\n### BEGIN EXPECTED\n_z = 1\n### END EXPECTED\n"
    as_inputs = "m = cm(3)\ngot = checks.call(f, x, mask=m)\ngot2 = checks.call(f, x, cm(4))\n"
    assert reference_calls_outside_expected(inside, aliases, refs) == []
    assert reference_calls_outside_expected(outside, aliases, refs) == ["decoding.beam_search(s, 1)", "cm(3)"]
    assert reference_calls_outside_expected(as_inputs, aliases, refs) == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.parent.name)
def test_no_hidden_test_runs_a_reference_in_the_learners_kernel(path):
    """The chapter's references (course_utils/domains: each exercise's drop-in stand-in) are called by a
    hidden test only inside its EXPECTED blocks: a value they compute elsewhere is an expected value the
    learner's kernel computes, and could change."""
    from course_utils import domains
    refs = {ex.reference.replace(":", ".") for ex in domains.declarations(path.parent.name[:4]) if ex.reference}
    aliases = _aliases(path.read_text())
    found = [f"hidden test {n}: {call}" for n, block in enumerate(_hidden_blocks(path), 1)
             for call in reference_calls_outside_expected(block, aliases, refs)]
    assert not found, f"{path.parent.name}: references called outside EXPECTED blocks:\n" + "\n".join(found)


def test_a_real_hidden_test_with_its_expected_markers_removed_is_found():
    """Chapter 1's beam-search hidden test, its EXPECTED markers deleted: the reference calls it makes for
    its expected values now run in the learner's kernel, and the rule names them."""
    from course_utils import domains
    path = REPO / "solutions" / "ch01_seq2seq_rnn" / "ch01_seq2seq_rnn.py"
    refs = {ex.reference.replace(":", ".") for ex in domains.declarations("ch01") if ex.reference}
    block = _hidden_blocks(path)[5]
    assert reference_calls_outside_expected(block, _aliases(path.read_text()), refs) == []
    unmarked = re.sub(r"[ \t]*### (BEGIN|END) EXPECTED\n", "", block)
    assert any("decoding.beam_search(" in c for c in reference_calls_outside_expected(unmarked, _aliases(path.read_text()), refs))
