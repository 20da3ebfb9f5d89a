"""The grader is a package of its own (issue 51): ``course_grading`` in grader/, beside the teaching
package ``course_utils``, which imports without it; installed by make install and make test, never by
a learner's make lab; its docs page (docs/grader.md) lists its modules and its size per release."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GRADER = ROOT / "grader"
PACKAGE = GRADER / "course_grading"
PAGE = ROOT / "docs" / "grader.md"

# Run in a fresh interpreter: course_grading cannot be imported (a finder first on sys.meta_path
# refuses it and every submodule), then every module of course_utils is imported.
WITHOUT_GRADER = r"""
import importlib, importlib.abc, pkgutil, sys

class NoGrader(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "course_grading" or name.startswith("course_grading."):
            raise ModuleNotFoundError(f"No module named {name!r} (made unimportable)", name=name)
        return None

sys.meta_path.insert(0, NoGrader())
try:
    import course_grading  # noqa: F401
    raise SystemExit("course_grading was importable")
except ModuleNotFoundError:
    pass
import course_utils
names = [i.name for i in pkgutil.walk_packages(course_utils.__path__, "course_utils.") if not i.name.endswith("__main__")]
for name in names:
    importlib.import_module(name)
{THE_REAL_PACKAGE}
assert not [m for m in sys.modules if m.startswith("course_grading")]
print(len(names), "modules")
"""
THE_REAL_PACKAGE = 'assert "course_utils.domains.ch03" in names and "course_utils.i18n.catalogue" in names, names'
WITHOUT_GRADER = WITHOUT_GRADER.replace("{THE_REAL_PACKAGE}", THE_REAL_PACKAGE)


def test_course_utils_imports_without_the_grader():
    """Every module of the teaching package imports where the grader cannot be imported (a learner's
    make lab installs none)."""
    proc = subprocess.run([sys.executable, "-c", WITHOUT_GRADER], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert re.search(r"^\d+ modules$", proc.stdout, re.M), proc.stdout


def test_the_blocker_would_see_a_teaching_module_that_imports_the_grader(tmp_path):
    """The check above fails on the fault it names: a course_utils module importing course_grading."""
    fake = tmp_path / "course_utils"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "leaky.py").write_text("from course_grading import sandbox\n")
    script = WITHOUT_GRADER.replace(THE_REAL_PACKAGE, "")
    proc = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n" + script],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode != 0 and "made unimportable" in proc.stderr, proc.stdout + proc.stderr[-2000:]


def _modules() -> list[str]:
    return sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))


def test_the_docs_page_lists_every_module_and_no_other():
    text = PAGE.read_text(encoding="utf-8")
    table = text[text.index("## Its modules"):text.index("## Its size")]
    listed = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert sorted(listed) == _modules(), (f"docs/grader.md's table: missing {sorted(set(_modules()) - set(listed))}, "
                                          f"gone {sorted(set(listed) - set(_modules()))}")
    assert len(listed) == len(set(listed))
    doc = (PACKAGE / "__init__.py").read_text()
    assert sorted(set(re.findall(r":mod:`~course_grading\.(\w+)`", doc))) == _modules(), "course_grading's docstring"


def _version(pyproject: Path) -> str:
    return tomllib.loads(pyproject.read_text())["project"]["version"]


def test_the_size_of_the_current_release_is_the_computed_row():
    """One row of the size table is computed (its numbers in count markers, compared with the package
    by tests/test_docs.py): the current version's. Older versions' rows are plain numbers."""
    text = PAGE.read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+\.\d+\.\d+)[^|]* \| (.*) \| (.*) \|$", text[text.index("## Its size"):], re.M)
    computed = [v for v, modules, lines in rows if "<!-- n:grader_modules -->" in modules
                and "<!-- n:grader_lines -->" in lines]
    assert computed == [_version(GRADER / "pyproject.toml")], rows
    assert [v for v, *_ in rows][-1] == computed[0], "the current version's row comes last"
    for v, modules, lines in rows:
        if v != computed[0]:
            assert re.fullmatch(r"\d+", modules) and re.fullmatch(r"[\d,]+", lines), f"{v}: {modules} | {lines}"


def test_the_grader_is_a_distribution_of_its_own():
    """grader/pyproject.toml: the package course_grading (every subpackage listed), the course's version,
    depending on course_utils; its own pins pinned with == and not also the course's."""
    meta = tomllib.loads((GRADER / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "course_grading"
    assert _version(GRADER / "pyproject.toml") == _version(ROOT / "pyproject.toml")
    found = {".".join(p.parent.relative_to(GRADER).parts) for p in PACKAGE.rglob("__init__.py")}
    assert set(meta["tool"]["setuptools"]["packages"]) == found
    deps = meta["project"]["dependencies"]
    assert "course_utils[dev]" in deps
    course = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert not [p for p in course["tool"]["setuptools"]["packages"] if "grading" in p]
    theirs = {re.split(r"[=<>\[]", d)[0].lower() for d in
              course["project"]["dependencies"] + [d for ds in course["project"]["optional-dependencies"].values() for d in ds]}
    for spec in deps:
        if spec.startswith("course_utils"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==([0-9][A-Za-z0-9.+]*)", spec)
        assert m, f"grader/pyproject.toml: {spec!r} is not pinned with =="
        assert m.group(1).lower() not in theirs, f"{m.group(1)} is pinned twice (the grader's and the course's)"


def _rule(makefile: str, target: str) -> str:
    """A Makefile rule: its line ``target: prerequisites`` and its recipe."""
    m = re.search(rf"^{re.escape(target)}:(.*)\n((?:\t.*\n)*)", makefile, re.M)
    assert m, f"the Makefile has no rule {target}"
    return m.group(0)


def test_make_lab_installs_no_grader_and_make_test_does():
    makefile = (ROOT / "Makefile").read_text()
    course, grader = _rule(makefile, "$(COURSE_STAMP)"), _rule(makefile, "$(STAMP)")
    assert "-e '.[dev]'" in course and "grader" not in course
    assert "$(COURSE_STAMP)" in grader.splitlines()[0] and "pip install --quiet -e ./grader" in grader
    assert "sandbox-tool" in grader and "sandbox-tool" not in course
    for target in ("lab", "update"):          # the learner's: make lab runs make update first
        line = _rule(makefile, target).splitlines()[0]
        assert "$(STAMP)" not in line, f"make {target} installs the grader"
    assert "update" in _rule(makefile, "lab").splitlines()[0]
    assert "$(COURSE_STAMP)" in _rule(makefile, "update").splitlines()[0]
    for target in ("install", "test", "unit", "lint", "instructor-lab", "grade", "autograde", "release", "sync"):
        assert "$(STAMP)" in _rule(makefile, target).splitlines()[0], f"make {target} does not install the grader"
    assert re.search(r"^execute: sync$", makefile, re.M)
    assert "ruff check course_utils grader " in _rule(makefile, "lint")
