"""The stored run as a learner may see it: the executed solution's outputs, less what a stub could not print.

The chapters' text quotes "the stored run", the run ``make execute`` stored in
``solutions/chNN_*/chNN_*.ipynb``. The learner sees that run in two places: on the course site
(``site/prepare.py``) and in their own notebook before they run a cell (the release,
``course_grading.course.new_course``, copies these outputs into ``notebooks/``). Both use
:func:`learner_version`: nbgrader's own ``ClearSolutions`` and ``ClearHiddenTests`` (the steps that
make the student release), with the outputs kept except those the exercise stub could not have
produced: the outputs of cells that held a solution or hidden tests, and of every test cell (its "all
checks passed" came from the solution), are dropped; a probe's verdict
(``checks.learner_or_reference``: "agrees with the reference on a probe: the experiments below use
your implementation") becomes the line the stub prints, the rest of that cell's output kept.
"""
from __future__ import annotations

import copy
import re

import nbformat
from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions

from course_utils.messages import notebook_language, speaking, tr

__all__ = ["HIDDEN_BEGIN", "LEARNER_VERDICT", "SOLUTION_BEGIN", "STUB_VERDICT", "add_stored_outputs",
           "is_test_cell", "learner_version", "stub_verdicts", "stubs"]

HIDDEN_BEGIN = "### BEGIN HIDDEN TESTS"
SOLUTION_BEGIN = "### BEGIN SOLUTION"
_MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")

# checks.learner_or_reference's verdicts: what the solution printed, and what the stub prints.
LEARNER_VERDICT = re.compile(r"^\[([^\]\n]+)\] agrees with the reference on a probe: "
                             r"the experiments below use your implementation$", re.M)
STUB_VERDICT = r"[\1] not implemented yet: the experiments below use the course_utils reference"


def stubs(lang: str | None = None) -> dict:
    """nbgrader's ``ClearSolutions`` settings for the release in ``lang``: its Python code stub (the
    comment in ``lang``, then ``raise NotImplementedError()``, which the grader and the workspace look
    for) and its written answer's placeholder, from the course's messages (:mod:`course_utils.messages`)."""
    with speaking(lang or "en"):
        code, text = tr("# YOUR CODE HERE"), tr("YOUR ANSWER HERE")
    return {"code_stub": {**ClearSolutions().code_stub, "python": f"{code}\nraise NotImplementedError()"},
            "text_stub": text}


def is_test_cell(cell: nbformat.NotebookNode) -> bool:
    """An nbgrader test cell: graded, with tests and no solution ("autograder tests")."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def stub_verdicts(output: nbformat.NotebookNode) -> None:
    """Turn the learner's probe verdict in one output into the line the stub prints, in place."""
    if output.get("output_type") == "stream":
        output["text"] = LEARNER_VERDICT.sub(STUB_VERDICT, output.get("text", ""))
    elif isinstance(output.get("data", {}).get("text/plain"), str):
        output["data"]["text/plain"] = LEARNER_VERDICT.sub(STUB_VERDICT, output["data"]["text/plain"])


def learner_version(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` with nbgrader's ClearSolutions and ClearHiddenTests applied, outputs kept where the
    stub would have printed them too (in place; returns ``nb``). A translated chapter (its metadata's
    ``course.language``) gets the stubs of its language, as its release does (:func:`stubs`).

    Cleared: the outputs of cells that held a solution or hidden tests, and of every test cell
    (they were made by the solution). A probe's "use your implementation" verdict becomes the stub's
    "not implemented yet" line. Raises ValueError if a marker survives (nbgrader's markers changed or
    were mistyped).
    """
    held = set()
    for i, cell in enumerate(nb.cells):
        if SOLUTION_BEGIN in cell.source or HIDDEN_BEGIN in cell.source or is_test_cell(cell):
            held.add(i)
    ClearSolutions(**stubs(notebook_language(nb))).preprocess(nb, {})   # a translated chapter: its stubs
    ClearHiddenTests().preprocess(nb, {})
    for i, cell in enumerate(nb.cells):
        if i in held and cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        elif cell.cell_type == "code":
            for output in cell.outputs:
                stub_verdicts(output)
        for marker in _MARKERS:
            if marker in cell.source:
                raise ValueError(f"cell {i} still holds {marker!r} after nbgrader's preprocessors")
    return nb


def add_stored_outputs(released: nbformat.NotebookNode, solution: nbformat.NotebookNode) -> int:
    """Give each code cell of ``released`` (nbgrader's student version of ``solution``) the stored
    output of its cell in :func:`learner_version` of ``solution``, in place; return how many cells got one.

    Cells are paired by their id and must be the same cell of the learner's version (kind and source),
    so an output never lands under code that did not print it; test cells and the cells that held a
    solution keep no output. Raises ValueError when the two notebooks' cells do not pair one to one.
    """
    learner = learner_version(copy.deepcopy(solution))
    if [c.get("id") for c in learner.cells] != [c.get("id") for c in released.cells]:
        raise ValueError("the release's cells are not the solution's cells (ids differ): "
                         "regenerate both from the same text source (make sync, then make release)")
    given = 0
    for mine, stored in zip(released.cells, learner.cells):
        if mine.cell_type != "code":
            continue
        if stored.cell_type != "code" or stored.source != mine.source:
            raise ValueError(f"cell {mine.get('id')} of the release differs from the solution's learner "
                             "version: regenerate the release (make release)")
        mine.outputs = copy.deepcopy(stored.outputs)
        mine.execution_count = stored.execution_count if stored.outputs else None
        given += bool(stored.outputs)
    return given
