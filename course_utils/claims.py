"""Claims about measured numbers: an assert that names what it claims, and a record of the value.

A trained or sampled number is one draw of a distribution: another seed, or another CPU (whose
vector kernels round differently), gives another. A chapter therefore states an experiment's
result as a *claim* with a bound set from the spread over seeds and CPU kernels::

    claims.check("ch02: attention keeps long inputs right (exact match, lengths 12-14)",
                 long_acc, above=0.75)

An ordering is a claim about a difference (``check("...", a - b, above=0.1)``). A failed claim
raises ``AssertionError`` with the claim, the value and the bound, never a bare ``assert``.

``tools/claim_spread.py`` executes the chapters over several seeds and CPU kernels with the
environment variable ``COURSE_CLAIMS_LOG`` naming a file: then every check appends one JSON line
(claim, value, bounds, whether it held) and does not raise, so that one run measures every claim,
and the script prints each claim's spread against its bound.
"""
from __future__ import annotations

import json
import math
import os

__all__ = ["check"]

LOG_VARIABLE = "COURSE_CLAIMS_LOG"


def check(claim: str, value: float, *, above: float | None = None, below: float | None = None) -> None:
    """Assert ``above < value < below`` (either bound may be omitted), naming ``claim`` if not.

    ``value`` is a number (a Python float or int, a one-element tensor or array). Under
    ``COURSE_CLAIMS_LOG`` the claim is recorded instead of raising. Returns nothing, so that a
    check at the end of a cell prints nothing.
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
    if not holds:
        bound = " and ".join(b for b in (f"above {above:g}" if above is not None else "",
                                         f"below {below:g}" if below is not None else "") if b)
        raise AssertionError(f"claim failed: {claim}: measured {number:.4g}, expected {bound}. "
                             "This number varies with the seed and the CPU: the bound comes from its "
                             "spread over 5 seeds (tools/claim_spread.py); see the chapter's text.")
