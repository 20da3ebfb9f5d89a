"""Rubrics of the written questions: read from the instructor's source, shown to the grader, marked by part.

**The format.** Every manually graded cell of a chapter (an nbgrader cell with ``grade`` and
``solution``: a written answer) holds, inside its ``### BEGIN SOLUTION``/``### END SOLUTION``, the
model answer and then its rubric, the last thing before ``### END SOLUTION``::

    **Rubric** (for the grader, 2 points):

    - **1 point** for the cause: ... (half of it for ...).
    - **1 point** for a change of architecture ...

one ``- **N point(s)**`` item per part, its text continued on lines indented by two spaces; the parts'
points sum to the header's, which is the cell's ``points`` (:func:`rubrics` raises
:class:`RubricError` otherwise; ``tests/test_grading_rubric.py`` holds every chapter to it). The
learner's release never holds it: it is inside the solution region, which the release strips.

**Beside the answer, for the grader** (:func:`add_rubric_cells`): once nbgrader has autograded a
submission, the grader inserts after each written answer of the autograded notebook (the notebook
that formgrader's manual-grading page renders) a Markdown cell with that question's rubric and model
answer, taken from the chapter's source in the course (``solutions/``), never from the submission. The
cell has no ``nbgrader`` metadata, so the gradebook (its cells, their ids, points and checksums) does
not see it; its ``course_grading`` metadata carries the rubric's parts, and only the grader writes it
(intake keeps no metadata of a learner's cell).

**Marks by part** (:func:`part_marks`): the grader gives the cell's score in formgrader as always and
may start the comment with one mark per part, in the rubric's order: ``marks: 1, 0.5``. Without such a
line a full score marks every part full and a score of 0 every part 0; any other score, or a line that
does not fit the rubric (another count of marks, a mark above its part's points, marks that do not sum
to the score), is shown as the total alone, with a note. Nothing of it can fail the feedback.

**In the feedback** (:class:`RubricMarks`, a step of ``GenerateFeedback``): a rubric cell of an answer
that has its hand mark becomes the list of the parts with the mark of each; one of an answer not yet
marked is removed, so the rubric reaches a learner only with their mark.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

from course_utils.messages import notebook_language, speaking, tr

META = "course_grading"        # the rubric cell's metadata key: {"rubric": grade_id, "parts": [[points, text], ...]}
_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"
HEADER = re.compile(rf"^\*\*Rubric\*\* \(for the grader, {_NUMBER} points?\):[ \t]*$", re.M)
PART = re.compile(rf"^- \*\*{_NUMBER} points?\*\* (\S.*)$")
_SOLUTION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)


class RubricError(ValueError):
    """A written question whose rubric is missing or does not fit the format or the cell's points."""


@dataclass(frozen=True)
class Rubric:
    grade_id: str
    points: float
    parts: tuple[tuple[float, str], ...]     # (points, what the answer must contain)
    answer: str                               # the model answer, as the source has it


def _nbgrader(cell) -> dict:
    """A cell's ``nbgrader`` metadata ({} where it has none, or none that is a mapping)."""
    meta = cell.get("metadata", {}) if isinstance(cell, dict) else {}
    meta = meta.get("nbgrader", {}) if isinstance(meta, dict) else {}
    return meta if isinstance(meta, dict) else {}


def is_written(cell) -> bool:
    """A manually graded answer cell (nbgrader's ``grade`` and ``solution``): a written question."""
    meta = _nbgrader(cell)
    return bool(meta.get("grade") and meta.get("solution") and isinstance(meta.get("grade_id"), str))


def parse(source: str, grade_id: str, points: float) -> Rubric:
    """The rubric of the written answer cell ``grade_id`` worth ``points``, from its ``source``."""
    m = _SOLUTION.search(source)
    head = HEADER.search(m.group(1)) if m else None
    if head is None:
        raise RubricError(f"{grade_id}: no rubric: its solution must end with a line '**Rubric** (for the grader, "
                          f"{points:g} points):' and one line '- **N point(s)** for ...' per part")
    parts: list[list] = []
    for line in m.group(1)[head.end():].splitlines():
        part = PART.match(line)
        if part:
            parts.append([float(part.group(1)), part.group(2)])
        elif line.startswith("  ") and line.strip() and parts:
            parts[-1][1] += " " + line.strip()
        elif line.strip():
            raise RubricError(f"{grade_id}: the rubric's line {line.strip()[:60]!r} is neither a part "
                              "('- **N point(s)** for ...') nor its continuation (indented by two spaces)")
    total = sum(p for p, _ in parts)
    if not parts or any(p <= 0 for p, _ in parts):
        raise RubricError(f"{grade_id}: the rubric needs at least one part, each worth more than 0 points")
    if abs(float(head.group(1)) - points) > 1e-9 or abs(total - points) > 1e-9:
        raise RubricError(f"{grade_id}: the rubric's header says {float(head.group(1)):g} points and its parts "
                          f"sum to {total:g}, but the cell is worth {points:g}")
    return Rubric(grade_id, points, tuple((p, t) for p, t in parts), m.group(1)[:head.start()].strip())


def rubrics(nb, strict: bool = True) -> dict[str, Rubric]:
    """``{grade_id: Rubric}`` of every written question of ``nb`` (a source notebook). ``strict``: raise
    :class:`RubricError` naming every faulty question; else leave those out."""
    found, faults = {}, []
    for cell in nb.cells:
        if not is_written(cell):
            continue
        meta = cell.metadata["nbgrader"]
        try:
            found[meta["grade_id"]] = parse(cell.source, meta["grade_id"], float(meta.get("points", 0)))
        except RubricError as e:
            faults.append(str(e))
    if strict and faults:
        raise RubricError("; ".join(faults))
    return found


def rubric_cell(rubric: Rubric, source_name: str):
    """The Markdown cell shown to the grader beside the answer: the parts, how to mark them, the model answer."""
    parts = "\n".join(f"- **part {i} ({p:g} point{'s' if p != 1 else ''})** {text}"
                      for i, (p, text) in enumerate(rubric.parts, 1))
    example = ", ".join(f"{p:g}" for p, _ in rubric.parts)
    text = (f"**Rubric of {rubric.grade_id}** ({rubric.points:g} points; the instructor's, from {source_name}; "
            f"inserted by the grader, not the learner's; the learner sees it only with their mark)\n\n{parts}\n\n"
            f"Marks by part: start your comment with `marks: {example}` (one mark per part, in this order, "
            f"summing to the score); a full or zero score needs none.\n\n**Model answer:**\n\n{rubric.answer}")
    cell = nbformat.v4.new_markdown_cell(text)
    cell.metadata.update({"editable": False, "deletable": False,
                          META: {"rubric": rubric.grade_id, "points": rubric.points,
                                 "parts": [[p, t] for p, t in rubric.parts]}})
    return cell


def is_rubric_cell(cell) -> bool:
    """A rubric cell the grader inserted (its ``course_grading`` metadata names the question)."""
    meta = cell.get("metadata", {}) if isinstance(cell, dict) else {}
    meta = meta.get(META) if isinstance(meta, dict) else None
    return isinstance(meta, dict) and isinstance(meta.get("rubric"), str)


def add_rubric_cells(notebook: Path, source: Path) -> int:
    """Insert the rubric of each written question of ``source`` (the chapter's solution notebook) after its
    answer in the autograded ``notebook`` (replacing any rubric cells it had); how many were inserted."""
    found = rubrics(nbformat.read(source, as_version=4), strict=False)
    nb = nbformat.read(notebook, as_version=4)
    cells, added = [], 0
    for cell in nb.cells:
        if is_rubric_cell(cell):
            continue
        cells.append(cell)
        gid = _nbgrader(cell).get("grade_id")
        if is_written(cell) and gid in found:
            cells.append(rubric_cell(found.pop(gid), f"solutions/{source.parent.name}/{source.name}"))
            added += 1
    nb.cells = cells
    nbformat.write(nb, notebook)
    return added


_MARKS = re.compile(r"^\s*marks?\s*:\s*(.*)$", re.I)


def part_marks(parts: list[tuple[float, str]], score: float, comment: str | None) -> tuple[list[float] | None, str]:
    """The mark of each part for an answer marked ``score`` with ``comment``, and a note ("" when none):
    from the comment's first line ``marks: a, b, ...`` where it fits the rubric, else from a full or zero
    score; ``None`` (the total alone) otherwise."""
    full = sum(p for p, _ in parts)
    first = (comment or "").strip().splitlines()[:1]
    m = _MARKS.match(first[0]) if first else None
    note = ""
    if m:
        words = [w for w in re.split(r"[\s,;/]+", m.group(1).strip()) if w]
        numbers = all(re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", w) for w in words)
        marks = [float(w) for w in words] if numbers else []
        if (len(marks) == len(parts) and all(0 <= mk <= p + 1e-9 for mk, (p, _) in zip(marks, parts))
                and abs(sum(marks) - score) < 1e-6):
            return marks, ""
        note = "the marks by part in the comment do not fit the rubric"
    if abs(score - full) < 1e-9:
        return [p for p, _ in parts], note
    if abs(score) < 1e-9:
        return [0.0 for _ in parts], note
    return None, note or "marked as a whole"


def strip_marks_line(comment: str | None) -> str | None:
    """The comment without its first line when that line is the marks by part (shown as the list instead)."""
    if not comment:
        return comment
    lines = comment.strip().splitlines()
    return "\n".join(lines[1:]).strip() if _MARKS.match(lines[0]) else comment


def marks_markdown(gid: str, parts, score: float, comment: str | None) -> str:
    """The feedback's list of the parts of ``gid``'s rubric with the mark of each (in the learner's language)."""
    marks, note = part_marks([(float(p), str(t)) for p, t in parts], score, comment)
    full = sum(float(p) for p, _ in parts)
    lines = [tr("**Your mark for {gid}, by part of the rubric** ({score} / {points} points):", gid=gid,
                score=f"{score:g}", points=f"{full:g}"), ""]
    for i, (p, text) in enumerate(parts):
        got = f"{marks[i]:g}" if marks is not None else "–"
        lines.append(f"- **{got} / {float(p):g}** {text}")
    if note:
        lines += ["", tr("(The marks by part were not recorded: the answer was marked as a whole.)")]
    return "\n".join(lines)


class RubricMarks(Preprocessor):
    """``GenerateFeedback``'s step: a rubric cell becomes the marks by part of its answer once the answer has
    its hand mark (from the gradebook), and is removed while it waits for one, or where the gradebook
    cannot say."""

    enabled = Bool(True)

    def preprocess(self, nb, resources):
        if not any(is_rubric_cell(c) for c in nb.cells):
            return nb, resources
        marked = _hand_marks(resources.get("nbgrader", {}))
        cells = []
        with speaking(notebook_language(nb)):
            for cell in nb.cells:
                if not is_rubric_cell(cell):
                    cells.append(cell)
                    continue
                meta = cell.metadata[META]
                gid = meta.get("rubric")
                if gid in marked and isinstance(meta.get("parts"), list):
                    score, comment = marked[gid]
                    try:
                        cells.append(nbformat.v4.new_markdown_cell(marks_markdown(gid, meta["parts"], score, comment)))
                    except (TypeError, ValueError):   # parts not (points, text) pairs: the total alone, as nbgrader shows it
                        continue
        for cell in cells:     # the marks line is shown as the list above, not twice
            meta = _nbgrader(cell)
            if meta.get("grade_id") in marked and isinstance(meta.get("comment"), str):
                meta["comment"] = strip_marks_line(meta["comment"])
        nb.cells = cells
        return nb, resources


def _hand_marks(info) -> dict[str, tuple[float, str | None]]:
    """``{grade_id: (hand mark, comment)}`` of the written answers of this feedback's submission that have
    their hand mark (none where the gradebook cannot be read)."""
    try:
        from nbgrader.api import Gradebook

        with Gradebook(info["db_url"]) as gb:
            nb = gb.find_submission_notebook(info["notebook"], info["assignment"], info["student"])
            comments = {c.name: c.comment for c in nb.comments}
            return {g.name: (float(g.manual_score), comments.get(g.name)) for g in nb.grades
                    if g.manual_score is not None and not g.needs_manual_grade}
    except Exception:   # no gradebook, no submission: no rubric reaches the learner
        return {}
