"""Claims about measured numbers: a check that names what it claims, and a record of the value.

A trained or sampled number is one draw of a distribution: another seed, or another CPU (whose
vector kernels round differently), gives another. A chapter therefore states an experiment's
result as a *claim* with a bound set from the spread over seeds and CPU profiles::

    claims.check("ch02: attention keeps long inputs right (exact match, lengths 12-14)",
                 long_acc, above=0.75)

An ordering is a claim about a difference (``check("...", a - b, above=0.1)``).

What a claim that does not hold does depends on who runs the chapter (``COURSE_CLAIMS``):

* ``strict`` (``make test``, CI, ``make execute``: the Makefile and ``conftest.py`` set it): it raises
  ``AssertionError`` with the claim, the value and the bound, so that a change that breaks a claim
  fails the tests;
* unset or ``inform`` (the learner's own kernel): it prints what it expected, what this run gave,
  the range measured over seeds and CPU profiles (``course_utils/claim_spread.json``, written by
  ``tools/claim_spread.py``) and what that means, and the chapter goes on. A claim that holds prints
  one line: the learner's value beside that measured range, so the learner reads their own run next
  to the runs the text describes (the stored run is the output the cell showed before they ran it).

``tools/claim_spread.py`` executes the chapters over seeds and CPU profiles with the environment
variable ``COURSE_CLAIMS_LOG`` naming a file: then every check appends one JSON line (claim, value,
bounds, whether it held) and neither raises nor prints, so that one run measures every claim.
"""
from __future__ import annotations

import json
import math
import os
from functools import cache
from pathlib import Path

__all__ = ["check", "measured_spread"]

LOG_VARIABLE = "COURSE_CLAIMS_LOG"
MODE_VARIABLE = "COURSE_CLAIMS"
MODES = ("strict", "inform")
SPREAD_FILE = Path(__file__).with_name("claim_spread.json")


@cache
def _spreads() -> dict:
    return json.loads(SPREAD_FILE.read_text(encoding="utf-8")) if SPREAD_FILE.exists() else {}


def measured_spread(claim: str) -> dict | None:
    """What ``tools/claim_spread.py`` measured for ``claim``: ``{"min", "max", "runs", "seeds",
    "profiles", "bound"}``, the claims checked in a loop under one name pooled; None if never measured."""
    rows = [v for k, v in _spreads().items() if k == claim or k.startswith(claim + " [#")]
    if not rows:
        return None
    return {"min": min(r["min"] for r in rows), "max": max(r["max"] for r in rows),
            "runs": sum(r["runs"] for r in rows), "seeds": max(r["seeds"] for r in rows),
            "profiles": rows[0]["profiles"], "bound": rows[0]["bound"]}


def _mode() -> str:
    mode = os.environ.get(MODE_VARIABLE, "") or "inform"
    if mode not in MODES:
        raise ValueError(f"{MODE_VARIABLE}={mode!r}: expected one of {', '.join(MODES)} (or unset: inform)")
    return mode


def _inform(claim: str, number: float, bound: str) -> str:
    """The learner's notice for a claim their run did not meet."""
    spread = measured_spread(claim)
    if spread is None:
        measured = "  Measured: this claim has no recorded spread yet (tools/claim_spread.py)."
    else:
        measured = (f"  Measured by the course: {spread['min']:.4g} to {spread['max']:.4g} over {spread['runs']} runs "
                    f"({spread['seeds']} seeds x CPU profiles {', '.join(spread['profiles'])}; "
                    "tools/claim_spread.md).")
    return "\n".join([
        f"Claim not met on this run: {claim}",
        f"  Expected: {bound}.",
        f"  Your run: {number:.4g}.",
        measured,
        "  What it means: a trained or sampled number depends on the seed and on how this CPU rounds floats, "
        "and this run fell outside the bound the course set from its measured spread. If you changed the "
        "code above, check that first; otherwise the chapter's text describes the runs the course measured, "
        "and this one is another draw. The chapter goes on.",
    ])


def _met(claim: str, number: float, bound: str) -> str:
    """The learner's line for a claim their run met: their value beside the measured range."""
    spread = measured_spread(claim)
    measured = "" if spread is None else (
        f"; the course measured {spread['min']:.4g} to {spread['max']:.4g} over {spread['runs']} runs "
        "(seeds x CPU profiles)")
    return f"Claim met on this run: {claim}: your run {number:.4g} (expected {bound}{measured})."


def check(claim: str, value: float, *, above: float | None = None, below: float | None = None) -> None:
    """Check ``above < value < below`` (either bound may be omitted), naming ``claim`` if it fails.

    ``value`` is a number (a Python float or int, a one-element tensor or array). Under
    ``COURSE_CLAIMS_LOG`` the claim is recorded instead; under ``COURSE_CLAIMS=strict`` a claim that
    does not hold raises ``AssertionError`` and one that holds is silent (the stored outputs are made
    so); otherwise it prints a notice, or the line of a claim met, and returns. Returns nothing.
    """
    if above is None and below is None:
        raise ValueError(f"claim {claim!r} needs a bound: above=..., below=... or both")
    try:
        number = float(value)
    except (TypeError, ValueError) as err:
        raise TypeError(f"claim {claim!r}: the value must be one number, got {type(value).__name__}") from err
    holds = not math.isnan(number) and (above is None or number > above) and (below is None or number < below)
    log = os.environ.get(LOG_VARIABLE)
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"claim": claim, "value": number, "above": above, "below": below,
                                "holds": holds}) + "\n")
        return
    mode = _mode()
    bound = " and ".join(b for b in (f"above {above:g}" if above is not None else "",
                                     f"below {below:g}" if below is not None else "") if b)
    if holds:
        if mode != "strict":
            print(_met(claim, number, bound))
        return
    if mode == "strict":
        raise AssertionError(f"claim failed: {claim}: measured {number:.4g}, expected {bound}. "
                             "This number varies with the seed and the CPU: the bound comes from its "
                             "spread over seeds and CPU profiles (tools/claim_spread.py); see the chapter's text.")
    print(_inform(claim, number, bound))
