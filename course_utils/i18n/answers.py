"""``solutions/model_answers.<lang>.md``: the written questions and their model answers, for instructors.

A chapter's written answers are graded by hand against the model answer in its solution notebook,
which is English. For an instructor who grades in another language, ``make translations`` writes
every question with its model answer and its points, chapter by chapter, from the chapters'
catalogues (the model answers are entries of them: ``catalogue.is_model_answer``). Numbers quoted
from the stored run are shown as plain numbers. ``tests/test_i18n.py`` checks that the committed
file equals a fresh one.
"""
from __future__ import annotations

from pathlib import Path

from course_utils.i18n import catalogue, notebooks, segments

__all__ = ["answers_path", "model_answers", "write", "HEADINGS"]

# The file's own words, per language: its title and introduction, and the label of a model answer.
HEADINGS = {
    "zh_CN": ("# 简答题参考答案（供教师使用）",
              "本文件由 `make translations` 根据各章的翻译目录生成，请勿手工编辑。每道简答题先给出题目，再给出"
              "参考答案及其分值；答案中的数字引自课程保存的这次运行。英文原文在 `solutions/` 下各章的笔记本中。",
              "参考答案（{points} 分）"),
}


def answers_path(root: Path, lang: str) -> Path:
    return root / "solutions" / f"model_answers.{lang}.md"


def _plain(text: str) -> str:
    """``text`` with each quoted number shown as the number alone."""
    return segments.QUOTE.sub(lambda m: m.group("value"), text).strip()


def _questions(nb) -> list[tuple[str, str, float]]:
    """``(question, model answer, points)`` of every written question of a (translated) chapter: the
    question is the last paragraph of the markdown cell before its answer cell."""
    found = []
    for before, cell in zip(nb.cells, nb.cells[1:]):
        if catalogue.is_model_answer(cell) and before.cell_type == "markdown":
            question = before.source.strip().split("\n\n")[-1]
            points = cell.metadata["nbgrader"].get("points", 0)
            found.append((_plain(question), _plain(catalogue.model_answer_text(cell.source)), points))
    return found


def model_answers(root: Path, lang: str) -> str:
    """The whole file in ``lang``: each chapter's title, then its questions and model answers."""
    title, intro, label = HEADINGS[lang]
    parts = [title, intro]
    for nb in notebooks.translated_chapters(root, lang).values():
        questions = _questions(nb)
        if questions:
            parts.append("#" + nb.cells[0].source.strip().split("\n")[0])
        for question, answer, points in questions:
            parts += [question, f"**{label.format(points=f'{points:g}')}**", answer]
    return "\n\n".join(parts) + "\n"


def write(root: Path, lang: str) -> Path:
    path = answers_path(root, lang)
    path.write_text(model_answers(root, lang), encoding="utf-8")
    return path
