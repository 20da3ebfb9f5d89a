"""The repository's promises: pins agree, CI runs the README's command, every chapter is complete."""

import re
import tomllib
from pathlib import Path

from course_utils import grading

ROOT = Path(__file__).resolve().parent.parent


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


def test_ci_runs_the_readme_test_command_then_the_portable_run():
    commands = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines()
                if ln.strip() and not ln.lstrip().startswith("#")]
    makes = [c for c in commands if c.startswith("make ")]
    assert makes == ["make test", "make test-portable"], commands
    assert "test-portable:" in (ROOT / "Makefile").read_text()
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
