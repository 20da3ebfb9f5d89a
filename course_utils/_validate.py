"""The one check of an integer argument, shared by the modules (bad input gets a clear error)."""

from __future__ import annotations

__all__ = ["check_int"]


def check_int(value, name: str, low: int = 0, high: int | None = None, note: str = "") -> int:
    """Return ``value`` if it is an ``int`` (not a bool) in ``[low, high]``; otherwise raise
    ``ValueError`` naming ``name``, the range expected, ``note`` (why, in a few words) and the value
    received."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        expected = f"an int >= {low}" if high is None else f"an int in [{low}, {high}]"
        why = f" ({note})" if note else ""
        raise ValueError(f"{name} must be {expected}{why}, got {value!r}")
    return value
