"""No public name exported by two modules (issue 51): each name of the package is listed in the
``__all__`` of the one module that defines it, so a reader (and ``from module import *``) finds one
home per idea.

A module may still *import* another module's name for code that calls it there (chapter 7's
``families.prefix_lm_mask``); such an alias is not exported, and it is listed in
:data:`COMPATIBILITY` with its reason, checked to be the very same object.
"""

import importlib
import pkgutil
import re
from collections import defaultdict

import pytest

import course_grading
import course_utils

#: Names exported by two modules that are allowed, with why. Each entry: name -> (modules, reason).
ALLOWED = {
    # Different things under one name (not re-exports), in the teaching package and the grader's own
    # (course_grading, grader/): each module is its own namespace.
    "chapters": ({"course_utils.domains", "course_grading"},
                 "domains.chapters(): the declarations per chapter; grading.chapters(root): the chapter folders"),
    "exercise_of": ({"course_utils.domains", "course_grading"},
                    "domains.exercise_of(fn): a learner's function's declaration; grading.exercise_of(grade_id)"),
    "chapter_notebook": ({"course_grading", "course_utils.i18n.sources"},
                         "grading's path of a chapter's notebook; i18n.sources' notebook read from a root"),
    "decode": ({"course_grading.verdict", "course_utils.textlm"},
               "textlm.decode(ids): bytes to text; verdict.decode(record): a check's record to text"),
    # The command verbs of command-line modules (python -m course_utils.i18n update|write, make update).
    "update": ({"course_utils.i18n.catalogue", "course_utils.workspace"}, "a command of each module's CLI"),
    "write": ({"course_utils.i18n.catalogue", "course_utils.i18n.readme", "course_utils.i18n.answers"},
              "a command of each module's CLI (answers and readme write their generated file)"),
    "ENV": ({"course_grading.reference", "course_utils.messages"},
            "each module's own environment variable (the grader's reference run; COURSE_LANG)"),
    "LOCALE_DIR": ({"course_utils.i18n.catalogue", "course_utils.messages"},
                   "two catalogues' folders: the chapters' (locale/) and the package's own (course_utils/locale/)"),
}

#: Names a module keeps importable but does not export: module -> {name: (home module, reason)}.
COMPATIBILITY = {
    "course_utils.families": {
        "causal_mask": ("course_utils.attention", "chapter 7 draws families.causal_mask beside the other patterns"),
        "prefix_lm_mask": ("course_utils.attention", "chapter 7's exercise reference (domains/ch07.py) and hidden tests"),
        "IGNORE_INDEX": ("course_utils.train", "chapter 7's text and MLM code say families.IGNORE_INDEX"),
    },
    "course_utils.transformer": {
        "noam_lr": ("course_utils.train", "chapter 6's exercise reference (domains/ch06.py) and text: T.noam_lr"),
    },
    "course_utils.checks": {
        name: ("course_utils.records", "hidden tests and older code find the record format in checks")
        for name in ("RECORD_FLAG", "RECORD_MAX_VALUES", "RECORD_MIME", "WITHHELD", "Withheld", "encode_value")
    },
    "course_grading.verdict": {
        "RECORD_MIME": ("course_utils.records", "the grader's execution reads verdict.RECORD_MIME"),
    },
    "course_utils.train": {
        "Batch": ("course_utils.data", "train's loss functions take a data.Batch"),
    },
}


def _modules():
    """Every module of the teaching package's and the grader's (its own package, course_grading, whose
    ``__init__`` exports its names as course_utils' subpackages' do)."""
    out = {"course_grading": course_grading}
    for package in (course_utils, course_grading):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            out[info.name] = importlib.import_module(info.name)
    return out


def _facade(a: str, b: str, name: str, modules) -> bool:
    """``a`` is a package that re-exports ``name`` from its own submodule ``b`` (the data package):
    one public surface, the package, whose parts live in its submodules."""
    return b.startswith(a + ".") and hasattr(modules[a], "__path__") and \
        getattr(modules[a], name) is getattr(modules[b], name)


def _protocol(module_names, name: str) -> bool:
    """``CHAPTER`` and ``EXERCISES``: the names every chapter's module of the domains package declares,
    read by name."""
    chapter_module = re.compile(r"course_utils\.domains\.ch\d\d")
    return name in ("CHAPTER", "EXERCISES") and all(chapter_module.fullmatch(m) for m in module_names)


def test_no_name_is_exported_by_two_modules():
    modules = _modules()
    homes = defaultdict(list)
    for name, module in modules.items():
        for exported in getattr(module, "__all__", ()):
            homes[exported].append(name)
    twice = {}
    for name, where in homes.items():
        rest = [m for m in where if not any(_facade(other, m, name, modules) for other in where if other != m)]
        if len(rest) < 2 or _protocol(rest, name):
            continue
        if name in ALLOWED and set(rest) == ALLOWED[name][0]:
            continue
        twice[name] = rest
    assert not twice, f"names exported by two modules (export each from its home only): {twice}"


def test_the_allowed_and_compatibility_lists_hold_no_stale_entry():
    modules = _modules()
    for name, (where, _reason) in ALLOWED.items():
        assert all(name in getattr(modules[m], "__all__", ()) for m in where), name
    for module, names in COMPATIBILITY.items():
        for name, (home, _reason) in names.items():
            assert name not in modules[module].__all__, f"{module} exports {name}: it is {home}'s"
            assert name in modules[home].__all__, f"{home} does not export {name}"
            assert getattr(modules[module], name) is getattr(modules[home], name), f"{module}.{name}"


@pytest.mark.parametrize("name", ["noam_lr", "causal_mask", "IGNORE_INDEX", "Batch"])
def test_a_fixed_leftover_has_one_home(name):
    modules = _modules()
    assert sum(name in getattr(m, "__all__", ()) for m in modules.values() if not hasattr(m, "__path__")) == 1
