"""Smaller experiments while nbgrader grades a notebook.

The autograder executes every learner's notebook, so the chapters' experiments shrink there: a
training run takes a few steps instead of hundreds, and the claims that rest on the full run are
not checked (their cells start with ``if not GRADING:``). The exercises' tests run in full.

    GRADING = budget.grading()
    steps = budget.pick(300, grading=20)
"""

from __future__ import annotations

import os
from typing import TypeVar

__all__ = ["grading", "pick"]

T = TypeVar("T")

_ENV = "NBGRADER_EXECUTION"   # set by nbgrader while it executes a notebook


def grading() -> bool:
    """True while nbgrader executes the notebook (``nbgrader autograde`` or ``validate``), which
    sets ``NBGRADER_EXECUTION``."""
    return bool(os.environ.get(_ENV))


def pick(full: T, *, grading: T) -> T:
    """``full`` for the experiment, or the smaller ``grading`` budget while nbgrader runs."""
    return grading if os.environ.get(_ENV) else full
