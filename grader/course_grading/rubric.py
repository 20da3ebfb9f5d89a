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

**In the learner's language** (:func:`translated_rubrics`): for a submission in another language
(:func:`~course_utils.messages.notebook_language`: the Chinese release's notebooks say ``zh_CN``), the
rubric's header and parts are translated block by block from the chapter's catalogue
(``locale/<lang>/LC_MESSAGES/<chapter>.po``, of the course the source comes from) and read in that
language's form (:data:`FORMS`: ``**评分标准**（供评分者使用，共 2 分）：`` and ``- **1 分**给……``). The
parts are kept in the rubric cell's metadata and listed in the feedback, under its own words in the
language (``tr``). A header or part that is not translated or fuzzy, a translation that does not read
in the form, or whose parts' points are not the English ones in the same order, leaves the English
parts, never an error. The rubric cell itself stays in the instructor's language, the English source,
whatever the submission's: the instructor marks against that one authoritative text (a translation can
lag behind it) in the order the ``marks:`` line follows, and formgrader is English; for a submission in
another language the cell adds the parts as the learner will read them, or why they stay English.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

from course_utils.messages import notebook_language, speaking, tr

# The rubric cell's metadata key: {"rubric": grade_id, "points": N, "parts": [[points, text], ...]}, and for a
# submission in another language "translations": {lang: [[points, text], ...]} where the catalogue has them.
META = "course_grading"
_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"
HEADER = re.compile(rf"^\*\*Rubric\*\* \(for the grader, {_NUMBER} points?\):[ \t]*$", re.M)
PART = re.compile(rf"^- \*\*{_NUMBER} points?\*\* (\S.*)$")
_SOLUTION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)


@dataclass(frozen=True)
class Form:
    """How a rubric is written in one language: its header and a part's line (group 1: the points; a part's
    group 2: its text), how a part's continuation line joins it, and a part's line as an example."""
    header: re.Pattern
    part: re.Pattern
    join: str
    example: str


ENGLISH = Form(HEADER, PART, " ", "- **N point(s)** for ...")
# The rubric as the chapters' catalogues translate it (locale/zh_CN/LC_MESSAGES/chNN_*.po): the header
# "**评分标准**（供评分者使用，共 2 分）：" and one "- **1 分**给原因：..." per part; full- or half-width
# brackets, commas and colons, with spaces or none, are all read.
FORMS = {
    "zh_CN": Form(re.compile(rf"^\*\*评分标准\*\*\s*[（(]\s*供评分者使用\s*[，,]\s*共\s*{_NUMBER}\s*分\s*[）)]"
                             r"\s*[：:]?[ \t]*$", re.M),
                  re.compile(rf"^- \*\*\s*{_NUMBER}\s*分\s*\*\*\s*(\S.*)$"), "", "- **N 分**给……"),
}


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
    parts = parse_rubric(m.group(1)[head.start():], grade_id, points)
    return Rubric(grade_id, points, parts, m.group(1)[:head.start()].strip())


def parse_rubric(text: str, grade_id: str, points: float, form: Form = ENGLISH) -> tuple[tuple[float, str], ...]:
    """The parts of a rubric written in ``form`` (``text``: its header, then its parts and nothing else),
    for a question worth ``points``; :class:`RubricError` if it is out of the format or its points disagree."""
    head = form.header.match(text)
    if head is None:
        raise RubricError(f"{grade_id}: the rubric does not start with its header ({form.header.pattern!r})")
    parts: list[list] = []
    for line in text[head.end():].splitlines():
        part = form.part.match(line)
        if part:
            parts.append([float(part.group(1)), part.group(2).strip()])
        elif line.startswith("  ") and line.strip() and parts:
            parts[-1][1] += form.join + line.strip()
        elif line.strip():
            raise RubricError(f"{grade_id}: the rubric's line {line.strip()[:60]!r} is neither a part "
                              f"('{form.example}') nor its continuation (indented by two spaces)")
    total = sum(p for p, _ in parts)
    if not parts or any(p <= 0 for p, _ in parts):
        raise RubricError(f"{grade_id}: the rubric needs at least one part, each worth more than 0 points")
    if abs(float(head.group(1)) - points) > 1e-9 or abs(total - points) > 1e-9:
        raise RubricError(f"{grade_id}: the rubric's header says {float(head.group(1)):g} points and its parts "
                          f"sum to {total:g}, but the cell is worth {points:g}")
    return tuple((p, t) for p, t in parts)


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


def _catalogue(source: Path, lang: str) -> tuple[dict[str, str] | None, str]:
    """The translations (msgid -> msgstr; fuzzy and empty entries left out) of the chapter of ``source``
    (``<course>/solutions/<chapter>/<chapter>.ipynb``) in ``lang``, from the course it comes from (a
    throwaway course's origin), and the catalogue's path; None where there is none or it cannot be read."""
    chapter = Path(source).parent.name
    name = f"the {lang} catalogue of {chapter}"
    try:      # babel (course_utils[dev], which the grader depends on) and the catalogue: never an error
        from course_grading.course import origin
        from course_utils.i18n import catalogue

        root = origin(Path(source).resolve().parents[2])
        path = catalogue.po_path(root, lang, chapter)
        name = path.relative_to(root).as_posix()
        return (catalogue.translations(catalogue.read(path)) if path.is_file() else None), name
    except Exception:
        return None, name


def _translated(cell_source: str, rubric: Rubric, table: dict[str, str], lang: str, where: str):
    """The parts of ``rubric`` in ``lang`` (its answer cell's ``cell_source`` translated block by block from
    ``table``, then read in the language's :data:`FORMS`), or why it stays English (a str)."""
    from course_utils.i18n import catalogue, notebooks

    body = catalogue.model_answer_text(cell_source)
    head = HEADER.search(body)
    missing: list[str] = []
    try:
        text = notebooks.translate_markdown(body[head.start():], table, missing, lang=lang, mark=False)
        if missing:
            return f"not translated (or fuzzy) in {where}: {missing[0][:50]!r}"
        parts = parse_rubric(text.strip(), rubric.grade_id, rubric.points, FORMS[lang])
    except Exception as e:     # RubricError, a placeholder the English block lacks, anything a catalogue holds
        return f"its translation in {where} does not parse ({str(e)[:200]})"
    if [p for p, _ in parts] != [p for p, _ in rubric.parts]:
        return (f"the points of its translation's parts in {where} ({', '.join(f'{p:g}' for p, _ in parts)}) "
                f"differ from the English ones ({', '.join(f'{p:g}' for p, _ in rubric.parts)})")
    return parts


def translated_rubrics(source: Path, english: dict[str, Rubric], lang: str) -> dict[str, tuple | str]:
    """``{grade_id: parts}`` of each rubric of ``english`` (the rubrics of the chapter's solution notebook
    ``source``) in ``lang``, from the chapter's catalogue ``locale/<lang>/LC_MESSAGES/<chapter>.po``; where
    a rubric cannot be had in ``lang`` (no catalogue or no rubric form for it, its header or parts not
    translated or fuzzy, a translation that does not parse or whose parts' points are not the English
    ones, in the same order), why it stays English, a str. Never raises for a catalogue's content."""
    if lang not in FORMS:
        return {gid: f"no rubric form known for {lang}" for gid in english}
    table, where = _catalogue(source, lang)
    if table is None:
        return {gid: f"no catalogue {where} that can be read" for gid in english}
    out: dict[str, tuple | str] = {}
    for cell in nbformat.read(source, as_version=4).cells:
        gid = _nbgrader(cell).get("grade_id")
        if is_written(cell) and gid in english:
            out[gid] = _translated(cell.source, english[gid], table, lang, where)
    return out


def _part_lines(parts) -> str:
    return "\n".join(f"- **part {i} ({p:g} point{'s' if p != 1 else ''})** {text}" for i, (p, text) in enumerate(parts, 1))


def rubric_cell(rubric: Rubric, source_name: str, lang: str | None = None, learner: tuple | str | None = None):
    """The Markdown cell shown to the grader beside the answer: the parts, how to mark them, the model answer.

    It is in the instructor's language, the course's source (English), whatever the submission's: the
    instructor marks against that one text, and the ``marks:`` line and formgrader are English. For a
    submission in another language ``lang`` it adds what the learner's feedback will list: ``learner``,
    the parts in ``lang`` (:func:`translated_rubrics`; kept in the metadata for :class:`RubricMarks`), or
    why the feedback lists them in English (a str)."""
    example = ", ".join(f"{p:g}" for p, _ in rubric.parts)
    text = (f"**Rubric of {rubric.grade_id}** ({rubric.points:g} points; the instructor's, from {source_name}; "
            f"inserted by the grader, not the learner's; the learner sees it only with their mark)\n\n"
            f"{_part_lines(rubric.parts)}\n\n"
            f"Marks by part: start your comment with `marks: {example}` (one mark per part, in this order, "
            f"summing to the score); a full or zero score needs none.")
    if lang and isinstance(learner, tuple):
        text += (f"\n\n**In the learner's feedback** (the submission is in {lang}) these parts are listed in "
                 f"its language, from the course's catalogue:\n\n{_part_lines(learner)}")
    elif lang and learner:
        text += (f"\n\n**In the learner's feedback** (the submission is in {lang}) the parts are listed in "
                 f"English: {learner}.")
    cell = nbformat.v4.new_markdown_cell(f"{text}\n\n**Model answer:**\n\n{rubric.answer}")
    meta = {"rubric": rubric.grade_id, "points": rubric.points, "parts": [[p, t] for p, t in rubric.parts]}
    if lang and isinstance(learner, tuple):
        meta["translations"] = {lang: [[p, t] for p, t in learner]}
    cell.metadata.update({"editable": False, "deletable": False, META: meta})
    return cell


def is_rubric_cell(cell) -> bool:
    """A rubric cell the grader inserted (its ``course_grading`` metadata names the question)."""
    meta = cell.get("metadata", {}) if isinstance(cell, dict) else {}
    meta = meta.get(META) if isinstance(meta, dict) else None
    return isinstance(meta, dict) and isinstance(meta.get("rubric"), str)


def add_rubric_cells(notebook: Path, source: Path) -> int:
    """Insert the rubric of each written question of ``source`` (the chapter's solution notebook) after its
    answer in the autograded ``notebook`` (replacing any rubric cells it had); how many were inserted.
    A submission in another language (:func:`~course_utils.messages.notebook_language`) gets the parts
    in its language too, for its feedback, where the chapter's catalogue has them (:func:`translated_rubrics`)."""
    found = rubrics(nbformat.read(source, as_version=4), strict=False)
    nb = nbformat.read(notebook, as_version=4)
    lang = notebook_language(nb)
    learner = translated_rubrics(source, found, lang) if lang and found else {}
    cells, added = [], 0
    for cell in nb.cells:
        if is_rubric_cell(cell):
            continue
        cells.append(cell)
        gid = _nbgrader(cell).get("grade_id")
        if is_written(cell) and gid in found:
            cells.append(rubric_cell(found.pop(gid), f"solutions/{source.parent.name}/{source.name}", lang,
                                     learner.get(gid)))
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


def learner_parts(meta: dict, lang: str | None) -> list:
    """The parts a rubric cell's metadata holds in ``lang`` (its ``translations``), where they are (points,
    text) pairs with the English parts' points in the same order; else the English parts."""
    english = meta["parts"]
    found = meta.get("translations")
    found = found.get(lang) if lang and isinstance(found, dict) else None
    try:
        if (isinstance(found, list) and len(found) == len(english)
                and all(isinstance(t, list) and len(t) == 2 and isinstance(t[1], str) and float(t[0]) == float(e[0])
                        for t, e in zip(found, english))):
            return found
    except (TypeError, ValueError, IndexError, KeyError):   # English parts that are not pairs: left to the caller
        pass
    return english


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
        lang = notebook_language(nb)
        with speaking(lang):
            for cell in nb.cells:
                if not is_rubric_cell(cell):
                    cells.append(cell)
                    continue
                meta = cell.metadata[META]
                gid = meta.get("rubric")
                if gid in marked and isinstance(meta.get("parts"), list):
                    score, comment = marked[gid]
                    try:
                        parts = learner_parts(meta, lang)
                        cells.append(nbformat.v4.new_markdown_cell(marks_markdown(gid, parts, score, comment)))
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
