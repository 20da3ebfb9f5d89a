"""Prose and code cannot drift: every ``course_utils`` and ``course_grading`` name the text mentions exists.

The chapters (their Markdown and comments), the README, the docs and the docstrings and comments of
the package and the grader's, the tools and the tests send readers to names in ``course_utils`` and in
the grader's package ``course_grading``. A rename that leaves a mention behind fails here, not in a
learner's hands. Three forms are resolved:

* a dotted name, ``course_utils.multihead.MultiHeadAttention`` or ``course_grading.sandbox.Box``;
* a module's name with a list, `` `course_utils.llama` (`rms_norm`, `SwiGLU`) ``: each listed name
  is an attribute of the module;
* a short dotted name in backticks whose first part is a module of the package, `` `conv_attention.kernel_to_heads` ``.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import course_utils

ROOT = Path(__file__).resolve().parent.parent
TEXTS = sorted([*ROOT.glob("solutions/ch*/ch*.py"), ROOT / "README.md", ROOT / "CONTRIBUTING.md",
                *ROOT.glob("docs/*.md"), *ROOT.glob("course_utils/**/*.py"), *ROOT.glob("grader/**/*.py"),
                *ROOT.glob("tools/*.py"),
                *ROOT.glob("tests/*.py")])
TEXTS.remove(Path(__file__).resolve())   # its own examples name what does not exist
DOTTED = re.compile(r"\b(course_utils|course_grading)((?:\.[A-Za-z_]\w*)+)")
LISTED = re.compile(r"`(course_utils|course_grading)\.(\w+(?:\.\w+)*)`\s*\(((?:`\w+`[,;]?\s*(?:and\s+|or\s+)?)+)")
SHORT = re.compile(r"`(\w+)\.(\w+(?:\.\w+)*)(?:\(\))?`")
MODULES = {m.name for m in pkgutil.iter_modules(course_utils.__path__)}


def _resolve(dotted: str) -> bool:
    """Whether ``dotted`` (``course_utils.…`` or ``course_grading.…``) names a module or an attribute
    (of an attribute, ...)."""
    top, *parts = dotted.split(".")
    obj, path = importlib.import_module(top), top
    for part in parts:
        try:
            obj = getattr(obj, part) if hasattr(obj, part) else importlib.import_module(f"{path}.{part}")
        except ImportError:
            return False
        path = f"{path}.{part}"
    return True


def _mentions(text: str) -> list[str]:
    text = re.sub(r"\n[ \t]*#+ ?", "\n", text)                     # a chapter's Markdown, a comment block
    found = [m.group(1) + re.sub(r"\.py$", "", m.group(2)) for m in DOTTED.finditer(text)
             if not re.fullmatch(r"\.(po|mo)", m.group(2))]   # a file: its module (a catalogue file is no name)
    for m in LISTED.finditer(text):
        found += [f"{m.group(1)}.{m.group(2)}.{name}" for name in re.findall(r"`(\w+)`", m.group(3))]
    found += [f"course_utils.{m.group(1)}.{m.group(2)}" for m in SHORT.finditer(text)
              if m.group(1) in MODULES and m.group(2) != "py"]                    # `blocks.py` is a file
    return list(dict.fromkeys(found))


def test_the_three_forms_are_found():
    text = ("see `course_utils.llama` (`rms_norm`, `SwiGLU` and `gone`), course_utils.checks.expect_close, "
            "`conv_attention.kernel_to_heads`, course_grading.sandbox.Box and `torch.nn.functional`")
    assert _mentions(text) == ["course_utils.llama", "course_utils.checks.expect_close", "course_grading.sandbox.Box",
                               "course_utils.llama.rms_norm", "course_utils.llama.SwiGLU", "course_utils.llama.gone",
                               "course_utils.conv_attention.kernel_to_heads"]
    assert _resolve("course_grading.sandbox.Box") and not _resolve("course_grading.sandbox.Gone")


@pytest.mark.parametrize("path", TEXTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_mentioned_course_utils_name_exists(path):
    missing = [name for name in _mentions(path.read_text(encoding="utf-8")) if not _resolve(name)]
    assert not missing, f"{path.relative_to(ROOT)} names what course_utils or course_grading does not have: " + \
        ", ".join(missing)
