"""The in-process harness runs every exercise's tests as the grader sends them too, expected values
withheld (``tools/exercise_runner.py``, ``grader/course_grading/withhold.py``).

The grader pairs a submission's check records with its reference run's, one by one. A hidden test
that needs the content of a value bound in its EXPECTED block (``zip`` over it, ``len``) raises in
a submission's kernel, or sends fewer checks, and every correct answer then loses the hidden points
under the real grader while the harness, which runs the tests as written, gives full marks: chapter
8's exercise 7 did exactly that. The harness's control run must catch it. Each case here is a
one-exercise chapter, run by ``run_answers`` in a child process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CHAPTER = '''\
# %%
import torch
from course_utils import checks

# %% nbgrader={{"grade": false, "grade_id": "ex1_double", "locked": false, "schema_version": 3, "solution": true}}
def double(x):
    return 2 * x

# %% nbgrader={{"grade": true, "grade_id": "ex1_double-visible", "locked": true, "points": 1, "schema_version": 3, "solution": false}}
checks.expect_close(double(torch.ones(2)), torch.full((2,), 2.0), "double of ones")

# %% nbgrader={{"grade": true, "grade_id": "ex1_double-hidden", "locked": true, "points": 1, "schema_version": 3, "solution": false}}
### BEGIN HIDDEN TESTS
_x = [torch.arange(3.0), torch.ones(2, 2)]
### BEGIN EXPECTED
_want = [2 * t for t in _x]
### END EXPECTED
{body}
### END HIDDEN TESTS
'''

BODIES = {
    "indexed": """
        for i in range(len(_x)):
            checks.expect_close(double(_x[i]), _want[i], f"case {i}")
        """,
    "zipped": """
        for i, (x, w) in enumerate(zip(_x, _want)):
            checks.expect_close(double(x), w, f"case {i}")
        """,
    "fewer": """
        for i in range(len(_x)):
            try:
                len(_want)
            except TypeError:
                continue
            checks.expect_close(double(_x[i]), _want[i], f"case {i}")
        """,
}

RUN = """
import sys
sys.path.insert(0, {tools!r})
import exercise_runner as runner
from pathlib import Path
root = Path({root!r})
ex = runner.exercises(runner.chapter_cells("ch01_fake", root))["ex1_double"]
try:
    out = runner.run_answers("ch01_fake", {{"ex1_double": [("again", ex.source)]}}, root=root)
except RuntimeError as err:
    print("RAISED", err)
else:
    print("GRADED", [o.full_marks for o in out["ex1_double"]])
"""


def _run(tmp_path: Path, body: str) -> str:
    folder = tmp_path / "solutions" / "ch01_fake"
    folder.mkdir(parents=True)
    (folder / "ch01_fake.py").write_text(CHAPTER.format(body=textwrap.dedent(body).strip()))
    script = RUN.format(tools=str(ROOT / "tools"), root=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_a_hidden_test_that_only_indexes_its_expected_values_passes(tmp_path):
    assert "GRADED [True]" in _run(tmp_path, BODIES["indexed"])


@pytest.mark.parametrize("kind, says", [
    ("zipped", "fail the solution"),
    ("fewer", "send other checks than as written: 1 against 3; check 2 is 'nothing' there, 'close case 0'"),
])
def test_a_hidden_test_the_grader_cannot_run_withheld_stops_the_harness(tmp_path, kind, says):
    out = _run(tmp_path, BODIES[kind])
    assert "RAISED ch01_fake ex1_double: its tests with the expected values withheld" in out, out
    assert says in out, out
