"""Plots of results used across the chapters: loss curves, accuracy against length, attention heat
maps, log-log scaling curves. (The chapters' diagrams drawn by code are :mod:`course_utils.diagrams`.)

Every function draws on a given (or new) matplotlib ``Axes`` and returns it, so a notebook
can combine them in one figure. Nothing here calls ``plt.show()``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

__all__ = ["plot_accuracy_by_length", "plot_attention", "plot_loglog", "plot_loss"]


def _axes(ax):
    return ax if ax is not None else plt.subplots(figsize=(6, 3.5))[1]


def plot_loss(histories: Mapping[str, object], ax=None, window: int = 20, log: bool = True):
    """Smoothed training loss of several runs (``{label: History}``) against the step."""
    ax = _axes(ax)
    for label, hist in histories.items():
        ax.plot(hist.smoothed(window), label=label)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel(f"loss (mean of {window} steps)")
    ax.legend()
    return ax


def plot_accuracy_by_length(results: Mapping[str, object], ax=None, metric: str = "exact",
                            train_range: tuple[int, int] | None = None):
    """Accuracy against source length for several models (``{label: Scores}``).

    ``metric`` is ``"exact"`` (whole sequence right) or ``"token"``. ``train_range`` shades
    the lengths seen in training.
    """
    ax = _axes(ax)
    k = 1 if metric == "exact" else 0
    for label, scores in results.items():
        lengths = sorted(scores.by_length)
        ax.plot(lengths, [scores.by_length[L][k] for L in lengths], marker="o", label=label)
    if train_range is not None:
        ax.axvspan(train_range[0] - 0.5, train_range[1] + 0.5, color="0.9", zorder=0, label="training lengths")
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("source length")
    ax.set_ylabel("exact match" if metric == "exact" else "token accuracy")
    ax.legend()
    return ax


def _visible(label: str) -> str:
    return "\u2423" if label == " " else label


def plot_attention(weights, query_labels: Sequence[str], key_labels: Sequence[str], ax=None,
                   title: str | None = None, cmap: str = "viridis", colorbar: bool = True,
                   vmax: float | None = None):
    """Heat map of one attention matrix ``(len(query_labels), len(key_labels))``.

    Rows are queries (e.g. output tokens), columns keys (e.g. input tokens); each row of
    softmax weights sums to one. The colour scale runs from 0 to ``vmax`` (default: the
    largest weight); give ``vmax=1.0`` to several maps that share one colour bar.
    """
    w = weights.detach().cpu().numpy() if isinstance(weights, torch.Tensor) else np.asarray(weights)
    if w.shape != (len(query_labels), len(key_labels)):
        raise ValueError(f"weights have shape {w.shape}, labels say "
                         f"({len(query_labels)}, {len(key_labels)})")
    if ax is None:
        ax = plt.subplots(figsize=(0.3 * len(key_labels) + 2, 0.3 * len(query_labels) + 1))[1]
    top = vmax if vmax is not None else max(float(w.max()), 1e-9)
    im = ax.imshow(w, cmap=cmap, vmin=0.0, vmax=top, aspect="auto")
    # A space would be an invisible tick label: show it as the open-box sign.
    ax.set_xticks(range(len(key_labels)), [_visible(k) for k in key_labels])
    ax.set_yticks(range(len(query_labels)), [_visible(q) for q in query_labels])
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query")
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    return ax


def plot_loglog(xs: Sequence[float], series: Mapping[str, Sequence[float]], ax=None,
                xlabel: str = "sequence length", ylabel: str = "time (s)"):
    """Several measurements on log-log axes, each labelled with its fitted slope.

    Returns ``(ax, slopes)`` where ``slopes[label]`` is the least-squares slope of
    ``log y`` against ``log x``.
    """
    ax = _axes(ax)
    slopes = {}
    lx = np.log(np.asarray(xs, dtype=float))
    for label, ys in series.items():
        slope = float(np.polyfit(lx, np.log(np.asarray(ys, dtype=float)), 1)[0])
        slopes[label] = slope
        ax.loglog(xs, ys, marker="o", label=f"{label} (slope {slope:.2f})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend()
    return ax, slopes
