"""``make new-chapter`` (tools/new_chapter.py) makes a chapter that the course's tests accept.

In a temporary copy of the repository (its tracked and unignored files), the scaffold makes the next
chapter; then the chapter-level tests run there: its notebook under nbval, the release and grading
round trips, declared domains, mutants, withheld expected values, catalogues, the README's and the
site's tables. The one test a scaffold cannot pass is the checklist's size of a finished chapter (at
least five exercises and a written question): it must fail, and only it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SIZE_CHECK = "test_every_exercise_has_visible_and_hidden_tests"
# Tests that read every chapter without a chapter parameter, and so are not selected by its name.
WHOLE_COURSE = ["test_every_chapter_has_a_text_source", "test_not_yet_declared_is_empty",
                "test_prompts_carry_their_declarations", "test_references_resolve",
                "test_every_public_module_declares_all_and_the_names_exist", "test_docs",
                "test_the_chinese_readme_is_current"]


def _copy_of_the_repository(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def test_a_scaffolded_chapter_passes_the_chapter_tests_but_the_size_of_a_finished_one(tmp_path):
    repo = tmp_path / "repo"
    _copy_of_the_repository(repo)
    number = max(int(p.name[2:4]) for p in (ROOT / "solutions").glob("ch*")) + 1
    name = f"ch{number:02d}_sample_chapter"
    # The copy's teaching package and the copy's grader (its own package, in grader/), not the installed ones.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), str(repo / "grader")]), "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    made = subprocess.run([sys.executable, "tools/new_chapter.py", name, "A sample chapter"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=900)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    for path in (f"solutions/{name}/{name}.ipynb", f"notebooks/{name}/{name}.ipynb", f"notebooks-zh_CN/{name}/{name}.ipynb",
                 f"course_utils/domains/{name[:4]}.py", f"tests/correct_answers/{name}.py",
                 f"tests/wrong_answers/{name}.py", f"tools/mutants/{name}.toml", f"locale/zh_CN/LC_MESSAGES/{name}.po"):
        assert (repo / path).is_file(), f"the scaffold made no {path}"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-rf",
                          f"solutions/{name}", "tests", "-k", " or ".join([name, *WHOLE_COURSE])], cwd=repo, env=env,
                         capture_output=True, text=True, timeout=1200)
    failed = re.findall(r"^FAILED (\S+)", run.stdout, flags=re.M)
    assert failed == [f"tests/test_grading.py::{SIZE_CHECK}[{name}]"], run.stdout[-6000:]
    assert "has only 2 autograded exercises" in run.stdout, run.stdout[-3000:]
    assert re.search(r"\b\d{2,} passed", run.stdout), run.stdout[-3000:]


@pytest.mark.parametrize("bad", ["ch9_x", "chapter09", "ch01_seq2seq_rnn"])
def test_the_scaffold_refuses_a_bad_or_taken_name(bad):
    run = subprocess.run([sys.executable, "tools/new_chapter.py", bad, "Title"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode != 0 and ("must look like" in run.stderr or "exists already" in run.stderr), run.stderr
