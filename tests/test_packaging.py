"""The repository's promises: pins agree, CI runs the README's command, every chapter is complete."""

import json
import re
import tomllib
from pathlib import Path

import pytest
from notebook_helpers import chapter_slugs

import course_grading as grading

ROOT = Path(__file__).resolve().parent.parent
GRADER_FILES = sorted((ROOT / "grader" / "course_grading").rglob("*.py"))   # the grader's own package


def _pyproject_pins() -> dict[str, str]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = meta["dependencies"] + meta["optional-dependencies"]["dev"]
    pins = {}
    for spec in specs:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==([0-9][A-Za-z0-9.+]*)", spec)
        assert m, f"pyproject.toml: {spec!r} is not pinned with =="
        pins[m.group(1).lower()] = m.group(2)
    return pins


def _conda_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "environment.yml").read_text().splitlines():
        m = re.match(r"\s+- ([A-Za-z0-9_.-]+)==(\S+)\s*$", line)
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def test_environment_yml_has_the_same_pins_as_pyproject():
    assert _conda_pins() == _pyproject_pins()
    assert "python=3.11" in (ROOT / "environment.yml").read_text()


def test_torch_is_pinned_to_the_local_cpu_build():
    assert _pyproject_pins()["torch"] == "2.13.0"


def test_ci_runs_the_readme_test_command_then_the_portable_run_then_the_browser_tests():
    commands = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines()
                if ln.strip() and not ln.lstrip().startswith("#")]
    makes = [c for c in commands if c.startswith("make ")]
    blocking = [c for c in makes if "||" not in c]
    assert blocking == ["make test", "make test-portable", "make test-browser"], commands
    # the translation gate runs after make test, reported and non-blocking (docs/translating.md)
    [gate] = [c for c in makes if "||" in c]
    assert gate.startswith("make test-translations ||") and makes.index(gate) == 1, commands
    assert "test-translations:" in (ROOT / "Makefile").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert "test-portable:" in makefile and "test-browser: site browser-tool" in makefile
    readme = (ROOT / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme


def test_every_chapter_is_complete_and_listed():
    readme = (ROOT / "README.md").read_text()
    chapters = grading.chapters(ROOT)
    assert chapters, "no chapters in solutions/"
    for ch in chapters:
        src = grading.chapter_notebook(ch, ROOT)
        assert (ROOT / "notebooks" / ch / src.name).exists(), f"{ch}: no student release"
        assert (ROOT / "tests" / "wrong_answers" / f"{ch}.py").exists(), f"{ch}: no wrong answer for the grading test"
        assert ch in readme, f"{ch} is missing from README's chapter table"


def test_gradebook_is_never_committed():
    ignored = (ROOT / ".gitignore").read_text().split()
    assert "gradebook.db" in ignored and ".venv/" in ignored


def _makefile_rule(target: str) -> str:
    """The prerequisites and recipe of one Makefile target (up to the next blank line)."""
    text = (ROOT / "Makefile").read_text()
    m = re.search(rf"^{re.escape(target)}:(.*?)(?:\n\n|\Z)", text, re.M | re.S)
    assert m, f"Makefile has no target {target}"
    return m.group(1)


def test_site_packages_are_pinned_and_only_in_their_own_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    site = extras["site"]
    names = set()
    for spec in site:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==([0-9][A-Za-z0-9.+]*)", spec)
        assert m, f"pyproject.toml, site extra: {spec!r} is not pinned with =="
        names.add(m.group(1).lower())
    assert {"sphinx", "myst-nb", "sphinx-book-theme", "playwright"} <= names
    assert not names & set(_pyproject_pins()), "a site package is also a course or dev dependency"
    # make lab and make test never install the site extra; make site and make test-browser do.
    for target in ("lab", "test", "install"):
        rule = _makefile_rule(target)
        assert "SITE_STAMP" not in rule and ".[dev,site]" not in rule, f"make {target} installs the site extra"
    assert "$(SITE_STAMP)" in _makefile_rule("site")
    assert "'.[dev,site]'" in _makefile_rule("$(SITE_STAMP)")


def test_browser_tests_are_out_of_make_test():
    pytest_ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "tests_site" not in pytest_ini["testpaths"]
    assert (ROOT / "tests_site" / "test_site_browser.py").exists()
    rule = _makefile_rule("test-browser")
    assert re.search(r"-m pytest\b.* tests_site\b", rule), rule
    # two workers, a test module each at a time: a module's fixtures (a JupyterLab, a graded class) made once
    assert "--dist loadfile" in rule, rule


def test_make_lab_ships_its_jupyterlab_defaults():
    rule = _makefile_rule("lab")
    assert 'JUPYTER_CONFIG_PATH="$(LAB_CONFIG)"' in rule, rule
    makefile = (ROOT / "Makefile").read_text()
    assert "LAB_CONFIG := $(if $(COURSE_LANG),$(CURDIR)/lab/$(COURSE_LANG):)$(CURDIR)/lab/learner:$(CURDIR)/lab" in makefile
    chinese = json.loads((ROOT / "lab/zh_CN/labconfig/default_setting_overrides.json").read_text())
    assert chinese["@jupyterlab/translation-extension:plugin"]["locale"] == "zh_CN"
    # the instructor's Lab reads lab/instructor first: formgrader safe to open (formgrader_guard.py)
    assert 'JUPYTER_CONFIG_PATH="$(CURDIR)/lab/instructor:$(CURDIR)/lab"' in _makefile_rule("instructor-lab")
    instructor = json.loads((ROOT / "lab/instructor/jupyter_server_config.json").read_text())
    assert instructor["ServerApp"]["jpserver_extensions"] == {"course_grading.formgrader_guard": True}
    overrides = json.loads((ROOT / "lab/labconfig/default_setting_overrides.json").read_text())
    news = overrides["@jupyterlab/apputils-extension:notification"]
    assert news["fetchNews"] == "false" and news["checkForUpdates"] is False


def test_site_build_outputs_are_ignored_and_documented():
    ignored = (ROOT / ".gitignore").read_text().split()
    assert "site/_build/" in ignored and "site/_vendor/" in ignored
    readme = (ROOT / "README.md").read_text()
    assert "make site" in readme and "site/_build/html" in readme and "GLOSSARY.md" in readme


def _heading_anchors(chapter: str) -> set[str]:
    """The anchors of a chapter's markdown headings (tests/notebook_helpers.heading_slugs)."""
    return chapter_slugs((ROOT / "solutions" / chapter / f"{chapter}.py").read_text())


def test_glossary_links_point_to_headings_that_exist():
    """Every ``notebooks/chNN/chNN.ipynb#anchor`` link of GLOSSARY.md and README.md names a heading
    of that chapter (the site build fails on a broken one; this finds it without Sphinx, e.g.
    after an exercise's points change its heading)."""
    links = []
    for doc in ("GLOSSARY.md", "README.md"):
        text = (ROOT / doc).read_text()
        links += [(doc, *m) for m in re.findall(r"notebooks/(ch\d\d_\w+)/\1\.ipynb#([^)\s]+)", text)]
    assert len(links) > 50, f"only {len(links)} chapter links found: has the link format changed?"
    anchors = {}
    broken = []
    for doc, chapter, anchor in links:
        if chapter not in anchors:
            anchors[chapter] = _heading_anchors(chapter)
        if anchor not in anchors[chapter]:
            broken.append(f"{doc}: {chapter}#{anchor}")
    assert not broken, "links to headings that do not exist:\n" + "\n".join(broken)


def test_every_public_module_declares_all_and_the_names_exist():
    import importlib
    import pkgutil

    import course_utils
    names = [info.name for info in pkgutil.walk_packages(course_utils.__path__, "course_utils.")]
    assert "course_utils.data.vocab" in names
    for name in names:
        if name.rsplit(".", 1)[-1].startswith("_"):
            continue
        module = importlib.import_module(name)
        assert hasattr(module, "__all__"), f"{name} has no __all__"
        missing = [n for n in module.__all__ if not hasattr(module, n)]
        assert not missing, f"{name}.__all__ names what it does not define: {missing}"


def test_one_block_one_stack_and_no_hidden_hooks():
    """Issue 18: the course has one Transformer block and one stack, built on by every model;
    no module slips arguments in through a forward hook, and attention weights have one flag."""
    sources = {p.name: p.read_text() for p in (ROOT / "course_utils").glob("*.py")}
    blocks_defined = [name for name, text in sources.items()
                      if re.search(r"^class \w*(Block|Layer)\(nn\.Module\)", text, re.M)]
    assert blocks_defined == ["blocks.py"], f"Transformer blocks are defined in {blocks_defined}"
    stacks = [name for name, text in sources.items() if re.search(r"nn\.ModuleList\(.*Block", text)]
    assert stacks == ["blocks.py"], f"stacks of blocks are built in {stacks}"
    for name, text in sources.items():
        assert "register_forward_pre_hook" not in text, f"{name} registers a forward pre-hook"
        assert "return_attention" not in text, f"{name} still has return_attention (the flag is need_weights)"


def _module_name(path: Path) -> str:
    """The dotted name of a module of the package or the grader's (a package's ``__init__.py`` is the
    package; the grader's package lives in grader/)."""
    parts = path.relative_to(ROOT / "grader" if path.is_relative_to(ROOT / "grader") else ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node, importer: str, is_package: bool, modules) -> set[str]:
    """The modules of ``modules`` an import statement imports, relative imports resolved:
    ``from X import y`` imports the module ``X.y`` where there is one, else the name ``y`` of ``X``."""
    import ast
    if isinstance(node, ast.Import):
        return {a.name for a in node.names} & set(modules)
    if not isinstance(node, ast.ImportFrom):
        return set()
    base = node.module or ""
    if node.level:
        package = importer.split(".")[:len(importer.split(".")) - node.level + is_package]
        base = ".".join(package + ([base] if base else []))
    found = {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
    return found & set(modules)


def _import_graph() -> dict[str, set[str]]:
    """``{module: the package's modules it imports}`` for every module of ``course_utils`` and its
    subpackages, and of the grader's package ``course_grading``; an import inside a function counts as
    much as one at the top."""
    import ast
    modules = {_module_name(p): p for p in [*sorted((ROOT / "course_utils").rglob("*.py")), *GRADER_FILES]}
    return {name: {m for node in ast.walk(ast.parse(path.read_text()))
                   for m in _imported(node, name, path.name == "__init__.py", modules)} - {name}
            for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first again at the end), or ``None``."""
    done: set[str] = set()

    def visit(node, path):
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        for dep in sorted(graph.get(node, ())):
            found = visit(dep, path + [node])
            if found:
                return found
        done.add(node)
        return None

    return next((c for c in (visit(n, []) for n in sorted(graph)) if c), None)


def test_the_import_graph_of_the_package_has_no_cycle():
    """No module of the package, subpackages included (``data``, ``i18n``), or of the grader's package
    imports one that imports it back, even from inside a function; no teaching module imports the grader."""
    graph = _import_graph()
    assert {"course_utils.checks", "course_grading.execution", "course_utils.data.vocab",
            "course_utils.i18n"} <= set(graph)
    teaching_to_grader = sorted(f"{m} -> {d}" for m, deps in graph.items() if m.startswith("course_utils")
                                for d in deps if d.startswith("course_grading"))
    assert not teaching_to_grader, f"the teaching package imports the grader: {teaching_to_grader}"
    assert "course_utils.i18n.notebooks" in graph["course_grading.course"]   # imported inside a function
    assert "course_grading.sandbox" in graph["course_grading.execution"]
    cycle = _cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_function_of_the_package_is_longer_than_60_lines():
    """Issue 34: a function of ``course_utils`` or of the grader (subpackages, methods and nested
    functions included) is at most 60 lines from its ``def`` to its last line, docstring included; a
    longer one is split into helpers with one idea each (ruff's C901 bounds how much one of them branches)."""
    import ast
    long = []
    for path in [*sorted((ROOT / "course_utils").rglob("*.py")), *GRADER_FILES]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "functions over 60 lines: " + "; ".join(long)


def test_one_training_loop():
    """Issue 18: every model trains through train.fit; a notebook writes its own loop only where the
    loop is the lesson (chapter 1's look inside Adam's update, chapter 4's search for the best
    softmax weights, chapter 5's fit of head centres)."""
    makes_optimizer = re.compile(r"torch\.optim\.(Adam|AdamW|SGD)\(")
    package = sorted(p.name for p in (ROOT / "course_utils").glob("*.py") if makes_optimizer.search(p.read_text()))
    assert package == ["train.py"], f"optimisers are built outside train.fit in {package}"
    chapters = sorted(p.parent.name for p in (ROOT / "solutions").glob("ch*/ch*.py")
                      if makes_optimizer.search(p.read_text()))
    assert chapters == ["ch01_seq2seq_rnn", "ch04_multihead_mqa_gqa", "ch05_attention_as_convolution"], \
        f"chapters with a loop of their own: {chapters}"


def _layout_entry(layout: str, folder: str) -> str:
    """The entry of ``folder`` (``course_utils/i18n/``) in docs/layout.md's tree: its line and the
    indented lines after it."""
    lines = layout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(folder + " ")), None)
    assert start is not None, f"docs/layout.md's tree has no entry {folder}"
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return "\n".join(lines[start:end])


def test_the_docs_name_every_module_of_the_package():
    """docs/layout.md names every module of the package (issue 51): the teaching modules and data's in
    its module list (the README's until issue 32), each subpackage's modules in its entry of the tree
    (a chapter's domain module as chNN). A new module fails here until the page says what it holds."""
    layout = (ROOT / "docs" / "layout.md").read_text()
    listing = layout[layout.index("`course_utils` modules:"):].split("\n\n")[0]
    package = ROOT / "course_utils"
    modules = [*package.glob("*.py"), *(package / "data").glob("*.py")]
    missing = [str(p.relative_to(ROOT)) for p in modules if p.stem != "__init__" and f"`{p.stem}`" not in listing]
    for sub in sorted(p.parent for p in package.glob("*/__init__.py")):
        if sub.name == "data":
            continue
        entry = _layout_entry(layout, f"course_utils/{sub.name}/")
        for p in sorted(sub.glob("*.py")):
            name = "chNN" if re.fullmatch(r"ch\d\d", p.stem) else p.stem
            if p.stem not in ("__init__", "__main__") and not re.search(rf"(?<![\w/]){name}(?!\w)", entry):
                missing.append(str(p.relative_to(ROOT)))
    assert not missing, f"docs/layout.md does not name {missing}"


@pytest.mark.parametrize("tool", ["spread_ch04_conversion", "spread_ch06"])
def test_the_spread_tools_find_the_cells_they_run(tool):
    """tools/spread_ch04_conversion.py and tools/spread_ch06.py run their chapter's own cells, found
    by a marker each: a reworded cell must not leave the tool without them."""
    import importlib
    import sys
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        module = importlib.import_module(tool)
    finally:
        sys.path.pop(0)
    cells = re.split(r"\n(?=# %%)", module.SOURCE.read_text())
    for marker in module.CELLS:
        assert sum(marker in c for c in cells) == 1, f"{module.SOURCE.name} has no single cell with {marker!r}"


def test_experiments_shrink_through_budget_alone():
    """While nbgrader grades, budgets shrink through ``budget.pick(full, grading=small)``, not through
    ternaries on a flag written at every call site."""
    found = [f"{p.name}:{i}" for p in sorted((ROOT / "solutions").glob("ch*/ch*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"if (not )?GRADING else|train\.grading|NBGRADER_EXECUTION", line)]
    assert not found, f"a budget chosen by hand (use budget.pick): {found}"


def test_one_integer_check():
    """Integer arguments are checked by ``_validate.check_int`` alone, so every message reads the same."""
    copies = [f"{p.name}:{i}" for p in sorted((ROOT / "course_utils").glob("*.py")) if p.name != "_validate.py"
              for i, line in enumerate(p.read_text().splitlines(), 1)
              if re.search(r"isinstance\(\w+, bool\) or not isinstance\(\w+, int\)", line)]
    assert not copies, f"an integer check written by hand (use course_utils._validate.check_int): {copies}"


def test_check_int_accepts_ints_in_range_and_names_what_is_wrong():
    from course_utils._validate import check_int
    assert check_int(0, "n") == 0 and check_int(5, "n", 1, 5) == 5
    for bad, pattern in ((True, r"n must be an int >= 0, got True"), (2.0, "got 2.0"), (-1, "got -1"),
                         ("3", "got '3'")):
        with pytest.raises(ValueError, match=pattern):
            check_int(bad, "n")
    with pytest.raises(ValueError, match=r"k must be an int in \[1, 4\] \(the vocabulary\), got 5"):
        check_int(5, "k", 1, 4, "the vocabulary")


def test_every_subpackage_is_installed():
    """pyproject's package list names every directory of course_utils with an __init__.py, so a
    non-editable install (a wheel) holds all of them."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "course_utils").rglob("__init__.py")}
    assert found == listed, f"pyproject lists {sorted(listed)}, the tree has {sorted(found)}"


def test_no_chapter_rebinds_a_module_it_imports():
    """A chapter that assigns to the name of a course_utils module it imported (``budget = ...``)
    breaks every later cell that calls the module; ruff does not see it across cells."""
    import ast
    found = []
    for path in sorted((ROOT / "solutions").glob("ch*/ch*.py")):
        tree = ast.parse(path.read_text())
        modules = {alias.asname or alias.name for node in ast.walk(tree)
                   if isinstance(node, ast.ImportFrom) and node.module == "course_utils" for alias in node.names}
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, (ast.AnnAssign, ast.AugAssign, ast.For)) else []
            names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            found += [f"{path.name}:{node.lineno} {name}" for name in names & modules]
    assert not found, f"chapters rebinding an imported course_utils module: {found}"
