"""The chapters' diagrams, drawn by code with matplotlib (they render offline, in JupyterLab and on
a web page): the encoder-decoder, the attention decoder's steps, the roles of queries, keys and
values, splitting and merging heads, the KV cache, head groups, the Transformer, Post-LN and
Pre-LN, the decoder blocks of the three families.

Every function draws on a given (or new) matplotlib ``Axes`` and returns it. Nothing here calls
``plt.show()``. (Plots of results are :mod:`course_utils.plots`.)

The labels are in the learner's language (``COURSE_LANG``, :mod:`course_utils.messages`): each
English label is a message of the catalogue, looked up once the diagram is drawn, and drawn in a
font with Chinese glyphs (:data:`CJK_FONTS`; where none is installed the labels stay English,
rather than turn into empty boxes).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import font_manager
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from .messages import language, tr

__all__ = [
    "CJK_FONTS",
    "LABELS",
    "cjk_font",
    "draw_attention_decoder_steps",
    "draw_decoder_blocks",
    "draw_encoder_decoder",
    "draw_head_groups",
    "draw_kv_cache",
    "draw_post_pre_ln",
    "draw_qkv_roles",
    "draw_split_merge_heads",
    "draw_transformer",
]


# Fonts with Chinese glyphs, the first installed one used (Debian's fonts-wqy-zenhei, Noto/Source Han,
# macOS's and Windows' own); matplotlib's DejaVu Sans draws the Latin letters and the math beside it.
CJK_FONTS = ("WenQuanYi Zen Hei", "Noto Sans CJK SC", "Source Han Sans SC", "PingFang SC", "Microsoft YaHei", "SimHei")


# The diagrams' fixed English labels: each is a message of the catalogue, which _localised looks up
# (labels with numbers in them go through tr() where they are drawn).
LABELS = (
    'encoder states (keys = values)',
    'Bahdanau: score with $s_{i-1}$, the context enters the GRU',
    'Luong: GRU first, score with the new $h_t$, then $\\tilde h_t$',
    'chapter 6/7 block',
    'x + learned position',
    'MHA (+ bias)',
    'ReLU FFN 4d (+ bias)',
    'LLaMA-style block',
    'x (no position added)',
    'GQA, RoPE on q, k',
    'encoder (reads the source)',
    'decoder (writes the target)',
    'targets; red dashes: teacher forcing feeds the correct token',
    'queries',
    'keys/values',
    'computed in this call, appended to the cache',
    'read from the cache',
    'position ->  (the cache keeps un-repeated key/value heads: n_kv_heads x d_head numbers per position and layer)',
    'Post-LN (the paper)',
    'out',
    'sub-layer',
    'Pre-LN (GPT-2 and later)',
    '$X$: $n$ tokens ($n \\times d$)',
    'self-attention: Q, K and V from the same sequence',
    '$X_{dec}$: $T$ decoder states',
    '$X_{enc}$: $S$ encoder states',
    'cross-attention: Q from the decoder, K and V from the encoder',
    'weights (L, L)',
    'out (L, d_head)',
    'split_heads:\nview (L, h, d_head),\ntranspose -> (h, L, d_head)',
    'merge_heads:\ntranspose -> (L, h, d_head),\nreshape (L, d_model)',
    'then @ W_o mixes the heads',
    'each head: its own softmax over the keys',
    'source tokens',
    'embedding x sqrt(d_model)\n+ positional encoding',
    'multi-head self-attention',
    'add & norm',
    'feed-forward',
    'target tokens, shifted right\n(<sos> y1 y2 ...)',
    'masked multi-head self-attention',
    'cross-attention (K, V from encoder)',
    'linear -> softmax',
    'next-token probabilities',
    'encoder',
    'decoder',
)


# File names of those fonts, to find one installed after matplotlib built its font cache.
_CJK_FILES = ("wqy", "notosanscjk", "sourcehansans", "pingfang", "msyh", "simhei")


@functools.lru_cache(maxsize=1)
def cjk_font() -> str | None:
    """The first of :data:`CJK_FONTS` that matplotlib can use on this machine, or None. A font
    installed after matplotlib built its font cache is found among the system's fonts and added."""
    def first() -> str | None:
        installed = {f.name for f in font_manager.fontManager.ttflist}
        return next((name for name in CJK_FONTS if name in installed), None)

    if first() is None:
        for path in font_manager.findSystemFonts():
            if any(hint in Path(path).name.lower().replace("-", "") for hint in _CJK_FILES):
                with contextlib.suppress(Exception):   # a font file matplotlib cannot read is no font
                    font_manager.fontManager.addfont(path)
    return first()


def _localised(*axes):
    """The axes' words in the learner's language, in a font that has their glyphs (English where no
    such font is installed). Returns the first axes."""
    font = cjk_font() if language() is not None else None
    if font:   # WenQuanYi has one weight (500): matplotlib would log a fallback for every label drawn
        logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    for ax in axes if font else ():
        for text in (*ax.texts, ax.title):
            if text.get_text():                    # gettext's "" is the catalogue's header
                text.set_text(tr(text.get_text()))
            text.set_fontfamily([font, "DejaVu Sans"])
    return axes[0]


_COLOURS = {"enc": "#cfe2f3", "dec": "#fde9c9", "vec": "#d9ead3", "tok": "white", "att": "#ead1dc"}


def _box(ax, x, y, text, kind="tok", w=0.8, h=0.5, fontsize=10):
    ax.add_patch(plt.Rectangle((x - w / 2, y - h / 2), w, h, facecolor=_COLOURS[kind],
                               edgecolor="0.3", linewidth=1))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize)


def _arrow(ax, start, end, colour="0.3", style="-|>", dashed=False, rad=0.0):
    ax.annotate("", xy=end, xytext=start,
                arrowprops=dict(arrowstyle=style, color=colour, lw=1.2, shrinkA=14, shrinkB=14,
                                linestyle="--" if dashed else "-", connectionstyle=f"arc3,rad={rad}"))


def _canvas(ax, width, height):
    ax = ax if ax is not None else plt.subplots(figsize=(width, height))[1]
    ax.set_aspect("equal")
    ax.axis("off")
    return ax


def draw_encoder_decoder(src: Sequence[str] = ("a", "b", "c"), tgt: Sequence[str] = ("c", "b", "a"), ax=None):
    """The chapter-1 encoder-decoder trained with teacher forcing.

    Encoder cells read ``src`` left to right; the final state becomes the context ``c``; the
    decoder starts from ``c`` and at step t reads the *correct* previous target token
    (``<sos>`` first) and is trained to predict the next one (``<eos>`` last).
    """
    n, m = len(src), len(tgt)
    ax = _canvas(ax, 1.1 * (n + m + 2), 3.6)
    for i, tok in enumerate(src):
        _box(ax, i, 0, tok)
        _box(ax, i, 1.2, f"$h_{i + 1}$", "enc")
        _arrow(ax, (i, 0), (i, 1.2))
        if i:
            _arrow(ax, (i - 1, 1.2), (i, 1.2))
    cx = n + 0.2
    _box(ax, cx, 1.2, "$c$", "vec", w=0.6)
    _arrow(ax, (n - 1, 1.2), (cx, 1.2))
    ins, outs = ["<sos>", *tgt], [*tgt, "<eos>"]
    for t in range(m + 1):
        x = n + 1.4 + t * 1.1
        _box(ax, x, 0, ins[t], w=0.9, fontsize=9)
        _box(ax, x, 1.2, f"$s_{t + 1}$", "dec")
        _box(ax, x, 2.4, outs[t], w=0.9, fontsize=9)
        _arrow(ax, (x, 0), (x, 1.2))
        _arrow(ax, (x, 1.2), (x, 2.4))
        _arrow(ax, (cx, 1.2) if t == 0 else (x - 1.1, 1.2), (x, 1.2))
        if t < m:  # teacher forcing: the correct token, not the prediction, is the next input
            _arrow(ax, (x + 0.3, 2.2), (x + 1.0, 0.2), colour="tab:red", dashed=True)
    ax.text((n - 1) / 2, -0.75, "encoder (reads the source)", ha="center", fontsize=10)
    ax.text(n + 1.4 + m * 0.55, -0.75, "decoder (writes the target)", ha="center", fontsize=10)
    ax.text(n + 1.4 + m * 0.55, 3.05, "targets; red dashes: teacher forcing feeds the correct token",
            ha="center", fontsize=9, color="tab:red")
    ax.set_xlim(-0.7, n + 1.4 + m * 1.1 + 0.7)
    ax.set_ylim(-1.0, 3.3)
    return _localised(ax)


def draw_attention_decoder_steps(axes=None):
    """One decoder step of Bahdanau et al. (2015) beside one of Luong et al. (2015).

    Bahdanau: the *previous* state ``s_{i-1}`` scores the encoder states, and the context
    ``c_i`` enters the recurrent step. Luong: the recurrent step runs first, its *new* state
    ``h_t`` scores, and ``c_t`` only enters the output through ``h~_t``. Returns the two axes.
    """
    if axes is None:
        axes = plt.subplots(1, 2, figsize=(12, 4.2))[1]
    ax_b, ax_l = (_canvas(a, 6, 4) for a in axes)
    for ax in (ax_b, ax_l):
        for j in range(3):
            _box(ax, j * 0.9, 0, f"$h_{j + 1}$", "enc", w=0.7)
    # Bahdanau
    _box(ax_b, 1.0 * 0.9, 1.4, r"$\alpha_{ij}$", "att", w=0.8)
    _box(ax_b, 0.9, 2.6, "$c_i$", "vec", w=0.7)
    _box(ax_b, 3.6, 1.4, "$s_{i-1}$", "dec", w=0.9)
    _box(ax_b, 3.6, 2.6, "GRU", "dec", w=0.9)
    _box(ax_b, 5.0, 2.6, "$y_{i-1}$", w=0.9)
    _box(ax_b, 3.6, 3.8, "$s_i$", "dec", w=0.9)
    _box(ax_b, 2.2, 4.8, r"out$([s_i; c_i])$", w=1.8)
    for j in range(3):
        _arrow(ax_b, (j * 0.9, 0), (0.9, 1.4))
    _arrow(ax_b, (3.6, 1.4), (0.9, 1.4), colour="tab:purple")
    _arrow(ax_b, (0.9, 1.4), (0.9, 2.6))
    _arrow(ax_b, (0.9, 2.6), (3.6, 2.6), colour="tab:purple")
    _arrow(ax_b, (3.6, 1.4), (3.6, 2.6))
    _arrow(ax_b, (5.0, 2.6), (3.6, 2.6))
    _arrow(ax_b, (3.6, 2.6), (3.6, 3.8))
    _arrow(ax_b, (3.6, 3.8), (2.2, 4.8))
    _arrow(ax_b, (0.9, 2.6), (2.2, 4.8))
    ax_b.set_title("Bahdanau: score with $s_{i-1}$, the context enters the GRU", fontsize=10)
    # Luong
    _box(ax_l, 3.6, 0, "$h_{t-1}$", "dec", w=0.9)
    _box(ax_l, 5.0, 0, "$y_{t-1}$", w=0.9)
    _box(ax_l, 3.6, 1.2, "GRU", "dec", w=0.9)
    _box(ax_l, 3.6, 2.4, "$h_t$", "dec", w=0.9)
    _box(ax_l, 0.9, 1.4, r"$\alpha_{ts}$", "att", w=0.8)
    _box(ax_l, 0.9, 2.6, "$c_t$", "vec", w=0.7)
    _box(ax_l, 2.2, 3.8, r"$\tilde h_t = \tanh(W_c[c_t; h_t])$", w=2.6, fontsize=9)
    _box(ax_l, 2.2, 4.8, r"out$(\tilde h_t)$", w=1.8)
    for j in range(3):
        _arrow(ax_l, (j * 0.9, 0), (0.9, 1.4))
    _arrow(ax_l, (3.6, 0), (3.6, 1.2))
    _arrow(ax_l, (5.0, 0), (3.6, 1.2))
    _arrow(ax_l, (3.6, 1.2), (3.6, 2.4))
    _arrow(ax_l, (3.6, 2.4), (0.9, 1.4), colour="tab:purple")
    _arrow(ax_l, (0.9, 1.4), (0.9, 2.6))
    _arrow(ax_l, (0.9, 2.6), (2.2, 3.8))
    _arrow(ax_l, (3.6, 2.4), (2.2, 3.8))
    _arrow(ax_l, (2.2, 3.8), (2.2, 4.8))
    ax_l.set_title(r"Luong: GRU first, score with the new $h_t$, then $\tilde h_t$", fontsize=10)
    for ax in (ax_b, ax_l):
        ax.text(0.9, -0.75, "encoder states (keys = values)", ha="center", fontsize=9)
        ax.set_xlim(-0.6, 5.7)
        ax.set_ylim(-1.0, 5.3)
    _localised(ax_b, ax_l)
    return ax_b, ax_l


def draw_qkv_roles(axes=None):
    """Where Q, K and V come from: self-attention (one sequence) beside cross-attention (Q from the
    decoder, K and V from the encoder), with the shapes of every matrix. Returns the two axes.

    Orange: the queries and the sequence they come from; blue: the keys, the values and their
    sequence; grey-brown: the one sequence that plays both roles in self-attention.
    """
    from matplotlib.patches import FancyBboxPatch

    def box(ax, x, y, w, text, color, h=0.9):
        ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.05", fc=color, ec="0.35"))
        ax.text(x, y, text, ha="center", va="center", fontsize=9.5)

    def arrow(ax, start, end, label=None):
        ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="-|>", color="0.35", lw=1.2))
        if label:
            ax.text((start[0] + end[0]) / 2 + 0.15, (start[1] + end[1]) / 2, label, fontsize=9, color="0.25")

    ask, read, both, math_ = "#fdd49e", "#c6dbef", "#d9d2c3", "#eeeeee"
    if axes is None:
        axes = plt.subplots(1, 2, figsize=(13, 4.4))[1]
    for ax, cross_case in zip(axes, (False, True)):
        if cross_case:
            box(ax, 2.0, 0.6, 3.2, "$X_{dec}$: $T$ decoder states", ask)
            box(ax, 7.0, 0.6, 4.6, "$X_{enc}$: $S$ encoder states", read)
            sources, n_q, n_k = ((2.0, 1.05), (7.0, 1.05), (7.0, 1.05)), "T", "S"
            ax.set_title("cross-attention: Q from the decoder, K and V from the encoder")
        else:
            box(ax, 5.0, 0.6, 6.0, "$X$: $n$ tokens ($n \\times d$)", both)
            sources, n_q, n_k = ((3.0, 1.05), (5.0, 1.05), (7.0, 1.05)), "n", "n"
            ax.set_title("self-attention: Q, K and V from the same sequence")
        for (x, name, w_name, color), src in zip(((2.0, "Q", "$W_Q$", ask), (5.0, "K", "$W_K$", read),
                                                  (8.0, "V", "$W_V$", read)), sources):
            rows = n_q if name == "Q" else n_k
            cols = "d_v" if name == "V" else "d_k"
            box(ax, x, 2.6, 2.4, f"${name}$ (${rows} \\times {cols}$)", color)
            arrow(ax, src, (x, 2.15), w_name)
        box(ax, 3.5, 4.3, 3.8, f"softmax$(QK^\\top/\\sqrt{{d_k}})$: ${n_q} \\times {n_k}$", math_)
        box(ax, 7.2, 5.8, 3.6, tr("output = weights $V$: ${rows} \\times d_v$", rows=n_q), math_)
        arrow(ax, (2.0, 3.05), (3.0, 3.85))
        arrow(ax, (5.0, 3.05), (4.0, 3.85))
        arrow(ax, (3.5, 4.75), (6.2, 5.35))
        arrow(ax, (8.0, 3.05), (7.8, 5.35))
        ax.set_xlim(-0.2, 10.2)
        ax.set_ylim(-0.1, 6.5)
        ax.axis("off")
    _localised(*axes)
    return axes


def _cells(ax, x0, y0, rows, cols, colours, size=0.32, label=None):
    """A ``rows x cols`` grid of squares from ``(x0, y0)`` (top left); ``colours[r][c]`` fills each."""
    for r in range(rows):
        for c in range(cols):
            ax.add_patch(plt.Rectangle((x0 + c * size, y0 - (r + 1) * size), size, size,
                                       facecolor=colours[r][c], edgecolor="0.35", linewidth=0.6))
    if label:
        ax.text(x0 + cols * size / 2, y0 + 0.12, label, ha="center", va="bottom", fontsize=8)


def draw_split_merge_heads(seq: int = 3, n_heads: int = 4, d_head: int = 2, ax=None):
    """Splitting ``(L, d_model)`` into heads, attention in each head, and merging back.

    Left: the projected queries of one sequence, ``(L, n_heads * d_head)``, columns coloured by
    the head that owns them. ``split_heads`` views them as ``(L, n_heads, d_head)`` and moves the
    head axis forward: ``n_heads`` matrices ``(L, d_head)``. Each head attends on its own (its
    own ``L x L`` weights), and ``merge_heads`` puts the heads' outputs side by side again,
    ``(L, d_model)``: the concatenation that ``W^O`` then mixes. Returns the ``Axes``.
    """
    colours = plt.cm.tab10.colors
    d_model, s = n_heads * d_head, 0.32
    gap = seq * s + 0.35
    x_heads = d_model * s + 2.9
    x_w = x_heads + d_head * s + 1.0
    x_out = x_w + seq * s + 1.0
    x_merge = x_out + d_head * s + 2.9
    ax = _canvas(ax, 14, 1.2 + 0.9 * n_heads)
    head_colour = [[colours[c // d_head] for c in range(d_model)] for _ in range(seq)]
    top = 0.25
    for x, text in ((d_model * s / 2, f"x @ W_q: (L={seq}, d_model={d_model})"), (x_heads + d_head * s / 2, "(L, d_head)"),
                    (x_w + seq * s / 2, "weights (L, L)"), (x_out + d_head * s / 2, "out (L, d_head)"),
                    (x_merge + d_model * s / 2, tr("merged: (L, d_model={d_model})", d_model=d_model))):
        ax.text(x, top, text, ha="center", va="bottom", fontsize=8)
    _cells(ax, 0, 0, seq, d_model, head_colour, s)
    for r in range(seq):
        ax.text(-0.1, -(r + 0.5) * s, tr("token {r}", r=r), ha="right", va="center", fontsize=7)
    arrow = dict(arrowstyle="-|>", color="0.3", lw=1)
    for h in range(n_heads):
        y = -h * gap
        ax.text(x_heads - 0.12, y - seq * s / 2, tr("head {h}", h=h), ha="right", va="center", fontsize=8, color=colours[h])
        _cells(ax, x_heads, y, seq, d_head, [[colours[h]] * d_head] * seq, s)
        w = np.linspace(0.15, 0.9, seq * seq).reshape(seq, seq)
        _cells(ax, x_w, y, seq, seq, [[plt.cm.Greys(v) for v in row] for row in w], s)
        _cells(ax, x_out, y, seq, d_head, [[colours[h]] * d_head] * seq, s)
        ax.annotate("", xy=(x_w - 0.1, y - seq * s / 2), xytext=(x_heads + d_head * s + 0.1, y - seq * s / 2), arrowprops=arrow)
        ax.annotate("", xy=(x_out - 0.1, y - seq * s / 2), xytext=(x_w + seq * s + 0.1, y - seq * s / 2), arrowprops=arrow)
    ax.annotate("", xy=(x_heads - 0.75, -seq * s / 2), xytext=(d_model * s + 0.1, -seq * s / 2), arrowprops=arrow)
    ax.text(d_model * s + 0.15, -seq * s - 0.15, "split_heads:\nview (L, h, d_head),\ntranspose -> (h, L, d_head)",
            ha="left", va="top", fontsize=7)
    ax.annotate("", xy=(x_merge - 0.1, -seq * s / 2), xytext=(x_out + d_head * s + 0.1, -seq * s / 2), arrowprops=arrow)
    ax.text(x_out + d_head * s + 0.3, -seq * s - 0.15, "merge_heads:\ntranspose -> (L, h, d_head),\nreshape (L, d_model)",
            ha="left", va="top", fontsize=7)
    _cells(ax, x_merge, 0, seq, d_model, head_colour, s)
    ax.text(x_merge + d_model * s / 2, -seq * s - 0.15, "then @ W_o mixes the heads", ha="center", va="top", fontsize=8)
    ax.text(x_w + seq * s / 2, -(n_heads - 1) * gap - seq * s - 0.1, "each head: its own softmax over the keys",
            ha="center", va="top", fontsize=8)
    ax.set_xlim(-1.0, x_merge + d_model * s + 0.3)
    ax.set_ylim(-(n_heads - 1) * gap - seq * s - 0.5, 0.6)
    return _localised(ax)


def draw_kv_cache(prompt: int = 4, steps: int = 3, ax=None):
    """Cached decoding: a prefill of ``prompt`` tokens, then ``steps`` steps of one token each.

    Each row is one call of the model. Dark squares: keys/values computed in that call and
    appended to the cache; light squares: keys/values read from the cache; the arrows show
    which keys the call's queries attend to (causal: every key at or before the query). The
    work per step is one token's projections, but the memory read grows with the cache.
    Returns the ``Axes``.
    """
    s = 0.5
    total = prompt + steps
    ax = _canvas(ax, 1.0 + 0.62 * total + 4.5, 0.75 * (steps + 1) + 1.2)
    for row in range(steps + 1):
        y = -row * 0.8
        n_new = prompt if row == 0 else 1
        start = 0 if row == 0 else prompt + row - 1
        for t in range(start + n_new):
            new = t >= start
            ax.add_patch(plt.Rectangle((t * s * 1.2, y), s, s, facecolor="#3d85c6" if new else "#cfe2f3",
                                       edgecolor="0.3", linewidth=0.8))
            ax.text(t * s * 1.2 + s / 2, y + s / 2, f"{t}", ha="center", va="center", fontsize=7,
                    color="white" if new else "black")
        what = (tr("prefill: {prompt} prompt tokens in one call (causal inside the prompt)", prompt=prompt) if row == 0
                else tr("step {row}: 1 new token; its query reads {keys} keys/values ({cached} cached)",
                        row=row, keys=start + 1, cached=start))
        ax.text((total + 0.3) * s * 1.2, y + s / 2, what, va="center", fontsize=8)
    ax.add_patch(plt.Rectangle((0, 0.85), s, s * 0.6, facecolor="#3d85c6", edgecolor="0.3"))
    ax.text(s * 1.3, 0.85 + s * 0.3, "computed in this call, appended to the cache", va="center", fontsize=8)
    ax.add_patch(plt.Rectangle((s * 14, 0.85), s, s * 0.6, facecolor="#cfe2f3", edgecolor="0.3"))
    ax.text(s * 15.3, 0.85 + s * 0.3, "read from the cache", va="center", fontsize=8)
    ax.text(0, -(steps + 1) * 0.8 + 0.25, "position ->  (the cache keeps un-repeated key/value heads: "
            "n_kv_heads x d_head numbers per position and layer)", fontsize=8)
    ax.set_xlim(-0.2, (total + 0.3) * s * 1.2 + 6.5)
    ax.set_ylim(-(steps + 1) * 0.8, 1.5)
    return _localised(ax)


def draw_head_groups(ax, n_heads: int, n_kv: int, title: str = ""):
    """Query heads (top row) connected to the key/value head they read (bottom row): MHA, GQA and MQA
    (chapter 4); query head ``i`` reads key/value head ``i // (n_heads // n_kv)``."""
    ax = ax if ax is not None else plt.subplots(figsize=(5, 2.4))[1]
    colours = plt.cm.tab10.colors
    r = n_heads // n_kv
    for i in range(n_heads):
        ax.add_patch(plt.Rectangle((i, 1.6), 0.8, 0.6, color=colours[(i // r) % 10], alpha=0.85))
    for j in range(n_kv):
        x0 = j * r + (r - 1) / 2                       # centre the kv head under its group
        ax.add_patch(plt.Rectangle((x0, 0), 0.8, 0.6, color=colours[j % 10]))
        for i in range(j * r, (j + 1) * r):
            ax.plot([i + 0.4, x0 + 0.4], [1.6, 0.6], color="0.4", lw=0.8)
    ax.text(-0.3, 1.9, "queries", ha="right", va="center")
    ax.text(-0.3, 0.3, "keys/values", ha="right", va="center")
    ax.set_xlim(-3.2, n_heads)
    ax.set_ylim(-0.2, 2.4)
    ax.set_title(title)
    ax.axis("off")
    return _localised(ax)


def draw_transformer(ax=None):
    """The encoder-decoder Transformer as boxes and arrows (Post-LN, as in the paper; chapter 6)."""
    ax = ax if ax is not None else plt.subplots(figsize=(8, 7.5))[1]
    def box(x, y, text, color, w=2.6, h=0.55):
        ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.04",
                                    fc=color, ec="0.3", lw=1))
        ax.text(x, y, text, ha="center", va="center", fontsize=9)

    def arrow(x0, y0, x1, y1, **kw):
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=10,
                                     color=kw.get("color", "0.2"), lw=1.2, connectionstyle=kw.get("cs", "arc3")))

    enc = [("source tokens", "white"), ("embedding x sqrt(d_model)\n+ positional encoding", "#fde9c9"),
           ("multi-head self-attention", "#cfe2f3"), ("add & norm", "#eeeeee"),
           ("feed-forward", "#d9ead3"), ("add & norm", "#eeeeee")]
    dec = [("target tokens, shifted right\n(<sos> y1 y2 ...)", "white"),
           ("embedding x sqrt(d_model)\n+ positional encoding", "#fde9c9"),
           ("masked multi-head self-attention", "#cfe2f3"), ("add & norm", "#eeeeee"),
           ("cross-attention (K, V from encoder)", "#f4cccc"), ("add & norm", "#eeeeee"),
           ("feed-forward", "#d9ead3"), ("add & norm", "#eeeeee"), ("linear -> softmax", "#fff2cc"),
           ("next-token probabilities", "white")]
    ys_e = [0.4 + 0.85 * i for i in range(len(enc))]
    ys_d = [0.4 + 0.85 * i for i in range(len(dec))]
    for (text, color), y in zip(enc, ys_e):
        box(1.6, y, text, color)
    for (text, color), y in zip(dec, ys_d):
        box(5.7, y, text, color, w=3.4)
    for ys, x in ((ys_e, 1.6), (ys_d, 5.7)):
        for a, b in zip(ys, ys[1:]):
            arrow(x, a + 0.3, x, b - 0.3)
    arrow(1.6, ys_e[-1] + 0.3, 3.95, ys_d[4], cs="arc3,rad=-0.25", color="#cc0000")
    for x, lo, hi, label in ((0.05, ys_e[2] - 0.4, ys_e[-1] + 0.4, "N x"), (7.55, ys_d[2] - 0.4, ys_d[7] + 0.4, "N x")):
        ax.add_patch(FancyBboxPatch((x, lo), 0.01, hi - lo, boxstyle="square,pad=0", fc="none", ec="0.5", ls="--"))
        ax.text(x + (-0.05 if x < 1 else 0.1), (lo + hi) / 2, label, ha="right" if x < 1 else "left", va="center")
    ax.text(1.6, ys_e[-1] + 0.75, "encoder", ha="center", fontsize=11, weight="bold")
    ax.text(5.7, ys_d[-1] + 0.6, "decoder", ha="center", fontsize=11, weight="bold")
    ax.set_xlim(-0.6, 8.3)
    ax.set_ylim(-0.1, ys_d[-1] + 0.9)
    ax.axis("off")
    return _localised(ax)


def draw_post_pre_ln(ax=None):
    """One sub-layer of each kind, bottom to top (chapter 6): Post-LN normalises the sum, so the
    residual path (grey) passes through a layer norm; Pre-LN normalises only the sub-layer's input,
    so the residual path goes straight through, and a last layer norm follows the last layer."""
    ax = ax if ax is not None else plt.subplots(figsize=(8, 4.6))[1]
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 6.4)
    ax.axis("off")
    cols = {"Post-LN (the paper)": (2.5, ["sub-layer", "+", "LayerNorm"]),
            "Pre-LN (GPT-2 and later)": (7.5, ["LayerNorm", "sub-layer", "+"])}
    for title, (x0, boxes) in cols.items():
        ax.text(x0, 6.1, title, ha="center", fontsize=12, weight="bold")
        ax.text(x0, 0.15, "x", ha="center", fontsize=11)
        ax.text(x0, 5.5, "out", ha="center", fontsize=11)
        ys = [1.2 + 1.4 * i for i in range(len(boxes))]
        for label, y in zip(boxes, ys):
            if label == "+":
                ax.add_patch(plt.Circle((x0, y + 0.25), 0.22, fc="white", ec="0.3"))
                ax.text(x0, y + 0.25, "+", ha="center", va="center")
            else:
                colour = "#f6d7a7" if label == "LayerNorm" else "#a7c7f6"
                ax.add_patch(plt.Rectangle((x0 - 1.3, y), 2.6, 0.5, fc=colour, ec="0.3"))
                ax.text(x0, y + 0.25, label, ha="center", va="center", fontsize=10)
        for a, b in zip([0.45, *[y + 0.5 for y in ys]], [*ys, 5.35]):   # the main path, bottom to top
            ax.annotate("", (x0, b), (x0, a), arrowprops=dict(arrowstyle="-|>", color="0.3"))
        plus = ys[boxes.index("+")] + 0.25                    # the residual path, around the sub-layer
        ax.plot([x0, x0 - 1.8, x0 - 1.8], [0.75, 0.75, plus], color="0.55", lw=1.5)
        ax.annotate("", (x0 - 0.22, plus), (x0 - 1.8, plus), arrowprops=dict(arrowstyle="-|>", color="0.55", lw=1.5))
    return _localised(ax)


def draw_decoder_blocks(ax=None):
    """Chapter 6/7's pre-norm block beside a LLaMA-style block, bottom to top, with the residual
    paths in grey (chapter 8)."""
    ax = ax if ax is not None else plt.subplots(figsize=(9, 5.2))[1]
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 7.4)
    ax.axis("off")
    cols = {"chapter 6/7 block": (2.5, ["LayerNorm", "MHA (+ bias)", "+", "LayerNorm", "ReLU FFN 4d (+ bias)", "+"],
                                  "x + learned position"),
            "LLaMA-style block": (7.5, ["RMSNorm", "GQA, RoPE on q, k", "+", "RMSNorm", "SwiGLU 8d/3", "+"],
                                  "x (no position added)")}
    for title, (x0, boxes, bottom) in cols.items():
        ax.text(x0, 7.1, title, ha="center", fontsize=12, weight="bold")
        ax.text(x0, 0.2, bottom, ha="center", fontsize=10)
        for i, label in enumerate(boxes):
            y = 0.9 + i * 1.0
            if label == "+":
                ax.add_patch(plt.Circle((x0, y + 0.25), 0.22, fc="white", ec="0.3"))
                ax.text(x0, y + 0.25, "+", ha="center", va="center")
            else:
                colour = "#f6d7a7" if "Norm" in label else "#a7c7f6" if ("MHA" in label or "GQA" in label) else "#b7e3b0"
                ax.add_patch(plt.Rectangle((x0 - 1.6, y), 3.2, 0.5, fc=colour, ec="0.3"))
                ax.text(x0, y + 0.25, label, ha="center", va="center", fontsize=9)
            ax.annotate("", (x0, y + 1.0), (x0, y + 0.5 if label != "+" else y + 0.47),
                        arrowprops=dict(arrowstyle="-|>", color="0.3"))
        for start, end in ((0.5, 3.15), (3.4, 6.15)):     # the residual paths
            ax.annotate("", (x0 - 0.22, end), (x0 - 1.9, start),
                        arrowprops=dict(arrowstyle="-|>", color="0.55", connectionstyle="angle,angleA=90,angleB=0"))
    return _localised(ax)
