"""What the grader takes from a submission is bounded (course_utils/grading/intake.py)."""

import nbformat

from course_utils.grading import intake


def _release():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("def f():\n    raise NotImplementedError()",
                                          metadata={"nbgrader": {"grade_id": "ex1", "solution": True}}),
                nbformat.v4.new_code_cell("assert f() == 1", metadata={"nbgrader": {"grade_id": "ex1-visible",
                                                                                    "grade": True}})]
    return nb


def test_the_learners_text_is_cut_per_cell_and_in_total():
    answer = "def f():\n    return 1\n"
    cells = [{"cell_type": "code", "source": answer, "metadata": {"nbgrader": {"grade_id": "ex1"}}},
             {"cell_type": "markdown", "source": "| a |\n" * 50_000},                        # 300 000 characters
             *({"cell_type": "markdown", "source": "x" * 90_000} for _ in range(12))]        # 1 080 000 in all
    nb, faults = intake.rebuild(cells, _release())
    assert nb.cells[0].source == answer                                  # a normal answer is untouched
    learner = [c.source for c in nb.cells if c.cell_type == "markdown"]
    assert len(learner[0]) < intake.MAX_CELL_CHARS + 200 and "cut by the grader" in learner[0]
    assert sum(map(len, learner)) < intake.MAX_TEXT_CHARS + len(learner) * 200
    assert "cut by the grader" in learner[-1] and any("were cut" in f for f in faults), faults
    assert [c.source for c in nb.cells if c.cell_type == "code"][1] == "assert f() == 1"   # the release's test
