"""What the grader takes from a submission is bounded (grader/course_grading/intake.py)."""

import nbformat

from course_grading import intake


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


# --- issue 48: a notebook's cost is bounded before it is parsed ------------------------------------

def test_the_size_limits_come_from_the_courses_own_notebooks():
    """The limits hold the largest real notebook with a wide margin, and are no larger than that margin."""
    from pathlib import Path
    repo = Path(__file__).resolve().parent.parent
    notebooks = [*repo.glob("solutions/*/*.ipynb"), *repo.glob("notebooks/*/*.ipynb"),
                 *repo.glob("notebooks-zh_CN/*/*.ipynb")]
    largest = max(p.stat().st_size for p in notebooks)
    marks, containers = (max(c) for c in zip(*(intake.json_counts(p.read_bytes()) for p in notebooks)))
    assert 8 * largest <= intake.MAX_NOTEBOOK_BYTES <= 32 * largest, (largest, intake.MAX_NOTEBOOK_BYTES)
    assert 8 * containers <= intake.MAX_JSON_CONTAINERS <= 32 * containers, (containers, intake.MAX_JSON_CONTAINERS)
    assert 8 * marks <= intake.MAX_JSON_VALUES, (marks, intake.MAX_JSON_VALUES)
    assert intake.OUTPUTS_NOTE_BYTES < intake.MAX_NOTEBOOK_BYTES


def test_json_counts_count_structure_outside_strings_only():
    assert intake.json_counts(b'{"a": [1, 2, "x,y:{["], "b": {}}') == (11, 3)   # 4 strings, 2 {, 1 [, 2 ',', 2 ':'
    assert intake.json_counts(b'"' + b"\\" * 10_000) == (0, 0)                 # a string that never ends
    assert intake.json_counts(b"," * 10, limit=3) == (4, 0)                      # counted up to the limit only
    assert intake.json_counts(b"[" * 10, containers=3) == (4, 4)


def _worst_shapes():
    """JSON texts at the limits, each as costly to parse as its shape allows."""
    n, c, size = intake.MAX_JSON_VALUES, intake.MAX_JSON_CONTAINERS, intake.MAX_NOTEBOOK_BYTES
    yield "short strings", b"[" + b",".join([b'"ab"'] * (n // 2 - 1)) + b"]"   # a string and its comma: two marks
    yield "floats", b"[" + b",".join([b"1.5"] * (n - 1)) + b"]"
    yield "empty objects", b"[" + b",".join([b"{}"] * (c - 1)) + b"]"
    yield "one astral string", b'["' + "\U0001F600".encode() * (size // 4 - 4) + b'"]'
    per = (size - 2 * c) // (n // 2)                                    # many strings filling the bytes
    yield "strings filling it", b"[" + b",".join([b'"' + b"x" * max(per - 3, 1) + b'"'] * (n // 2 - 1)) + b"]"


def test_parsing_the_worst_notebook_within_the_limits_costs_bounded_memory():
    import tracemalloc
    for name, raw in _worst_shapes():
        assert len(raw) <= intake.MAX_NOTEBOOK_BYTES, name
        tracemalloc.start()
        try:
            data = intake.parse_bounded(raw, name)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert data and peak < 150 * 2**20, (name, peak / 2**20)


def test_a_padded_notebook_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    """A notebook of empty objects (cheap on disk, 40 bytes of memory per byte once parsed) gets 0 and
    a reason, and is never given to the JSON parser; an ordinary one is parsed."""
    from pathlib import Path
    repo = Path(__file__).resolve().parent.parent
    chapter = "ch03_scaled_dot_product"
    release = repo / "notebooks" / chapter / f"{chapter}.ipynb"
    padded = tmp_path / "padded.ipynb"
    padded.write_bytes(b'{"cells": [], "metadata": {"pad": [' + b",".join([b'{"":{"":{}}}'] * 60_000) + b"]}}")
    assert padded.stat().st_size < intake.MAX_NOTEBOOK_BYTES
    parsed = []
    real = intake.json.loads
    def loads(text, *a, **k):
        parsed.append('"pad": [' in text[:100])   # the padding (the release, outputs and all, never starts so)
        return real(text, *a, **k)

    monkeypatch.setattr(intake.json, "loads", loads)
    faults = intake.intake(padded, chapter, release, tmp_path / "out" / "a.ipynb", repo)
    assert not any(parsed) and "JSON objects" in faults[0] and "graded as blank" in faults[0], faults
    faults = intake.intake(release, chapter, release, tmp_path / "out" / "b.ipynb", repo)
    assert parsed and not faults, faults


def test_a_notebook_over_the_size_limit_is_never_read(tmp_path):
    big = tmp_path / "big.ipynb"
    with big.open("wb") as f:
        f.truncate(intake.MAX_NOTEBOOK_BYTES + 1)
    import pytest
    with pytest.raises(intake.Refused, match="over the limit of 16 MiB"):
        intake.read_submission(big)
