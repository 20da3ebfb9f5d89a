"""The learner's time per chapter, estimated from what the chapter asks of them (issue 52).

Not a measurement of learners: an estimate from counts taken in each solution notebook, with the
rates below as its stated basis. ``python tools/learner_time.py`` writes ``tools/learner_time.md``
(the counts, the rates and the estimate per chapter) and the estimates into the last column of the
README's chapter table; ``tests/test_docs.py`` fails when either is stale. A class that times its own
walk-through should replace the rates with what it measured.

What is counted, per chapter:

* prose: the words of the Markdown cells a learner reads (not the model answers of the written
  questions, which the release strips; HTML comments and the URLs of links dropped);
* given code: the non-blank lines of the code cells a learner runs and reads (not the test cells,
  whose hidden parts the release strips, and not the exercises' solutions);
* exercises: the autograded answer cells, and the lines of their model solutions, which stand for
  the code a learner writes (between ``### BEGIN SOLUTION`` and ``### END SOLUTION``, without blank
  lines and comments);
* written questions: the manually graded answer cells.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tools" / "learner_time.md"

#: The rates of the estimate (minutes), each with its basis.
RATES = {
    "prose_words_per_minute": (120, "careful reading of technical prose with formulas, about half the speed of ordinary reading"),
    "code_lines_per_minute": (20, "reading given code and its printed output while running it cell by cell"),
    "minutes_per_exercise": (10, "reading an exercise's prompt and its visible tests before writing"),
    "minutes_per_solution_line": (3, "writing one line of the answer and making it pass the visible tests"),
    "minutes_per_written_question": (15, "a written answer tied to the chapter's printed numbers"),
}


def _rate(name: str) -> int:
    return RATES[name][0]


def _prose_words(source: str) -> int:
    text = re.sub(r"<!--.*?-->", " ", source, flags=re.S)
    text = re.sub(r"\]\([^)]*\)", "]", text)                 # a link's target is not read
    return len(text.split())


def _code_lines(source: str) -> int:
    return sum(1 for line in source.splitlines() if line.strip())


def _solution_lines(source: str) -> int:
    inside, n = False, 0
    for line in source.splitlines():
        stripped = line.strip()
        if stripped == "### BEGIN SOLUTION":
            inside = True
        elif stripped == "### END SOLUTION":
            inside = False
        elif inside and stripped and not stripped.startswith("#"):
            n += 1
    return n


def counts(notebook: Path) -> dict[str, int]:
    """The counts of one chapter's solution notebook (see the module's docstring)."""
    c = dict.fromkeys(("prose_words", "code_lines", "exercises", "solution_lines", "written"), 0)
    for cell in nbformat.read(notebook, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        solution, grade = meta.get("solution", False), meta.get("grade", False)
        if cell.cell_type == "markdown":
            if solution and grade:
                c["written"] += 1                      # the model answer: stripped from the release
            else:
                c["prose_words"] += _prose_words(cell.source)
        elif solution:
            c["exercises"] += 1
            c["solution_lines"] += _solution_lines(cell.source)
            c["code_lines"] += _code_lines(cell.source) - _solution_lines(cell.source)
        elif not grade:
            c["code_lines"] += _code_lines(cell.source)
    return c


def minutes(c: dict[str, int]) -> float:
    """The estimate in minutes from a chapter's counts and :data:`RATES`."""
    return (c["prose_words"] / _rate("prose_words_per_minute") + c["code_lines"] / _rate("code_lines_per_minute")
            + c["exercises"] * _rate("minutes_per_exercise")
            + c["solution_lines"] * _rate("minutes_per_solution_line")
            + c["written"] * _rate("minutes_per_written_question"))


def hours(c: dict[str, int]) -> str:
    """The estimate as the README states it: to the nearest half hour, e.g. ``≈ 4.5 h``."""
    half_hours = max(1, round(minutes(c) / 30))
    return f"≈ {half_hours / 2:g} h"


def chapters() -> dict[str, dict[str, int]]:
    """Counts per chapter, in order, from ``solutions/chNN_*/chNN_*.ipynb``."""
    return {p.stem: counts(p) for p in sorted(ROOT.glob("solutions/ch*/ch*.ipynb")) if p.stem == p.parent.name}


def table() -> str:
    """``tools/learner_time.md``: the basis, then one row per chapter."""
    lines = ["# The learner's time per chapter (an estimate)", "",
             "Written by `python tools/learner_time.py` (its docstring says what is counted); the README's",
             "chapter table quotes the last column. Not a measurement of learners: the counts of each chapter",
             "times these rates, which a class that times its own walk-through should replace.", "",
             "| rate | value | basis |", "|---|---:|---|"]
    lines += [f"| {name.replace('_', ' ')} | {value} | {why} |" for name, (value, why) in RATES.items()]
    lines += ["", "| chapter | prose words | given code lines | exercises | solution lines | written | minutes | estimate |",
              "|---|---:|---:|---:|---:|---:|---:|---|"]
    total = {}
    for name, c in chapters().items():
        lines.append(f"| {name} | {c['prose_words']} | {c['code_lines']} | {c['exercises']} | {c['solution_lines']} "
                     f"| {c['written']} | {minutes(c):.0f} | {hours(c)} |")
        total = {k: total.get(k, 0) + v for k, v in c.items()}
    lines.append(f"| all | {total['prose_words']} | {total['code_lines']} | {total['exercises']} "
                 f"| {total['solution_lines']} | {total['written']} | {minutes(total):.0f} | {hours(total)} |")
    return "\n".join(lines) + "\n"


def readme_with_estimates(text: str) -> str:
    """The README's text with each chapter row's last cell set to its estimate (:func:`hours`)."""
    estimates = {name: hours(c) for name, c in chapters().items()}
    row = re.compile(r"^(\| \d+ \| \[`(ch\d\d_\w+)`\].*\| )[^|]+( \|)$", flags=re.M)
    return row.sub(lambda m: m.group(1) + estimates[m.group(2)] + m.group(3), text)


if __name__ == "__main__":
    OUT.write_text(table(), encoding="utf-8")
    readme = ROOT / "README.md"
    readme.write_text(readme_with_estimates(readme.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)} and the README's time column", file=sys.stderr)
