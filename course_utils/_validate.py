"""The checks shared by the modules (bad input gets a clear error): an integer argument, and the
config a model is built from."""

from __future__ import annotations

__all__ = ["check_config", "check_int"]


def check_int(value, name: str, low: int = 0, high: int | None = None, note: str = "") -> int:
    """Return ``value`` if it is an ``int`` (not a bool) in ``[low, high]``; otherwise raise
    ``ValueError`` naming ``name``, the range expected, ``note`` (why, in a few words) and the value
    received."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        expected = f"an int >= {low}" if high is None else f"an int in [{low}, {high}]"
        why = f" ({note})" if note else ""
        raise ValueError(f"{name} must be {expected}{why}, got {value!r}")
    return value


def check_config(cfg, config_class: type, model: str, example: str):
    """Return ``cfg`` if it is a ``config_class``; otherwise raise ``TypeError`` saying that ``model``
    is built from its config, how (``example``), and what was received. Every model of the course is
    ``Model(cfg)``: one way to build it, the config kept as ``model.cfg``."""
    if not isinstance(cfg, config_class):
        raise TypeError(f"{model} is built from a {config_class.__name__}: {example}; got "
                        f"{type(cfg).__name__} {cfg!r:.80}")
    return cfg
