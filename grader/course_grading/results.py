"""What grading found: a score per graded cell, the faults and tampering of a submission."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from nbformat.notebooknode import NotebookNode

from course_grading.course import exercise_of
from course_utils.messages import tr

META = "course_grading"          # notebook metadata key: the faults and tampering found in a submission
FAULT = "GradingFault"           # the ename of the error put into graded cells a fault skipped
TAMPERING = "TamperingDetected"  # the ename of the error put into the graded cells of a tampered exercise
NOT_CONFIRMED = "NotConfirmedByGrader"  # the ename of a test the kernel passed but the grader's own comparison did not
RECORD = "grading.json"          # autograded/<student>/<chapter>/grading.json: what was graded, and why not
GRADER_VERSION = "5"             # part of every fingerprint: bump it to regrade everything


@dataclass
class CellGrade:
    """The grade of one graded cell of a submission."""

    grade_id: str
    score: float
    max_score: float
    manual: bool                  # a written answer, graded by hand
    error: str | None = None      # "Name: message" of the error the cell raised, if any

    @property
    def exercise(self) -> str:
        return exercise_of(self.grade_id)



@dataclass
class NotebookGrades:
    """Every graded cell of one submitted notebook, plus errors raised anywhere in it."""

    cells: list[CellGrade]
    errors: list[str] = field(default_factory=list)  # errors raised outside graded cells
    feedback: Path | None = None
    faults: list[str] = field(default_factory=list)  # why it was not graded as it stands (one line each)
    tampering: dict[str, list[str]] = field(default_factory=dict)  # test cell -> what was changed

    @property
    def auto_score(self) -> float:
        return sum(c.score for c in self.cells if not c.manual)

    @property
    def auto_max(self) -> float:
        return sum(c.max_score for c in self.cells if not c.manual)

    @property
    def reason(self) -> str:
        """One line for people: the faults, then tampering, or ``""``."""
        parts = list(self.faults)
        if self.tampering:
            exercises = sorted({exercise_of(g) for g in self.tampering})
            what = sorted({w for v in self.tampering.values() for w in v})
            parts.append(f"tampering detected in {', '.join(exercises)} (0 points there): {'; '.join(what)}")
        return " | ".join(parts)[:500]

    def by_exercise(self) -> dict[str, tuple[float, float, bool, list[str]]]:
        """``exercise -> (score, max_score, manual, errors)`` in notebook order."""
        out: dict[str, tuple[float, float, bool, list[str]]] = {}
        for c in self.cells:
            s, m, manual, errs = out.get(c.exercise, (0.0, 0.0, c.manual, []))
            out[c.exercise] = (s + c.score, m + c.max_score, manual, errs + ([c.error] if c.error else []))
        return out

    def table(self) -> str:
        """A per-exercise score table for people (with the faults under it, if any), in the language of
        the messages (:mod:`course_utils.messages`: ``make grade`` speaks the notebook's)."""
        rows = [(tr("exercise"), tr("score"), tr("status"))]
        for ex, (s, m, manual, errs) in self.by_exercise().items():
            status = (tr("graded by hand") if manual else tr("ok") if s == m else (errs[0] if errs else tr("failed")))
            rows.append((ex, f"{s:g} / {m:g}", status if len(status) <= 150 else status[:147] + "..."))
        rows.append((tr("total (autograded)"), f"{self.auto_score:g} / {self.auto_max:g}", ""))
        w0 = max(_width(r[0]) for r in rows)
        w1 = max(_width(r[1]) for r in rows)
        lines = [f"{_pad(a, w0)}  {_pad(b, w1, right=True)}  {c}".rstrip() for a, b, c in rows]
        lines.insert(1, "-" * _width(lines[0]))
        lines.insert(len(lines) - 1, "-" * _width(lines[0]))
        if self.reason:
            lines.append(tr("fault: {reason}", reason=self.reason))
        return "\n".join(lines)


def _width(text: str) -> int:
    """The columns ``text`` takes in a terminal: a wide (Chinese) character takes two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int, right: bool = False) -> str:
    fill = " " * max(0, width - _width(text))
    return fill + text if right else text + fill


def _errors_by_cell(nb: NotebookNode) -> tuple[dict[str, str], list[str]]:
    """Errors raised in a notebook: ``({grade_id: error} of graded cells, [errors elsewhere])``.

    Cells tagged ``raises-exception`` (a deliberate demonstration of an error) are skipped,
    except graded test cells: the release tags every visible test cell so that Run All goes on
    past a failing check, and their errors are still reported.
    """
    graded, elsewhere = {}, []
    for cell in nb.cells:
        if ("raises-exception" in cell.metadata.get("tags", [])
                and not cell.metadata.get("nbgrader", {}).get("grade")):
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                msg = f"{out.get('ename')}: {out.get('evalue')}"
                meta = cell.metadata.get("nbgrader", {})
                if meta.get("grade"):
                    graded.setdefault(meta["grade_id"], msg)
                else:
                    elsewhere.append(msg)
    return graded, elsewhere


