"""The glossary's terms, and the check that a translation uses them.

``GLOSSARY.md`` pairs each Chinese term with the English one (its headings: ``## 注意力 · attention``).
:data:`TERMS` is that pairing in the form a check can use: each row names the glossary heading it
comes from, the English forms to look for (plurals and spellings) and the Chinese forms that count
as the glossary's (the term itself, and a form the glossary gives in its heading or definition).
``tests/test_i18n.py`` ties the two both ways: every heading of the glossary has its rows, and
every row's heading is in the glossary.

:func:`missing_terms` says which terms an English entry uses that its translation does not. The
English is read without its formulas, code and link targets. A translator who has a reason not to use
a term in one entry says so in a translator comment, ``# term: <english> -- <reason>``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from course_utils.i18n.segments import CODE_SPAN, INLINE_MATH, LINK_TARGET

__all__ = ["Term", "TERMS", "prose", "used_terms", "missing_terms", "variant_faults", "glossary_headings",
           "taught_in", "uses", "first_use", "with_english", "chinese_words"]


@dataclass(frozen=True)
class Term:
    heading: str                  # the glossary heading (its Chinese side, before " · ")
    english: tuple[str, ...]      # forms searched for, case-insensitively, as whole words
    chinese: tuple[str, ...]      # any of these in the translation counts
    variants: tuple[str, ...] = ()  # other names of the same idea, which a translation of it must not use


def _t(heading: str, english: str, chinese: str, variants: str = "") -> Term:
    return Term(heading, tuple(english.split("|")), tuple(chinese.split("|")),
                tuple(v for v in variants.split("|") if v))


TERMS: tuple[Term, ...] = (
    _t("注意力", "attention", "注意力"),
    _t("查询、键、值 (Q, K, V)", "query|queries", "查询"),
    _t("缩放点积注意力", "scaled dot-product attention", "缩放点积注意力"),
    _t("注意力分数（对齐分数）", "attention score|attention scores", "注意力分数"),
    _t("注意力分数（对齐分数）", "alignment score|alignment scores", "对齐分数"),
    _t("加性注意力", "additive attention", "加性注意力"),
    _t("乘性注意力", "multiplicative attention", "乘性注意力"),
    _t("上下文向量", "context vector|context vectors", "上下文向量"),
    _t("编码器-解码器（序列到序列）", "encoder-decoder|encoder-decoders", "编码器-解码器"),
    _t("编码器-解码器（序列到序列）", "sequence to sequence|sequence-to-sequence", "序列到序列"),
    _t("编码器", "encoder|encoders", "编码器"),
    _t("解码器", "decoder|decoders", "解码器"),
    _t("循环神经网络", "recurrent neural network|recurrent neural networks", "循环神经网络"),
    _t("循环神经网络", "recurrent network|recurrent networks", "循环神经网络|循环网络"),
    _t("梯度消失 / 梯度爆炸", "vanishing gradient|vanishing gradients", "梯度消失"),
    _t("梯度消失 / 梯度爆炸", "exploding gradient|exploding gradients", "梯度爆炸"),
    _t("梯度裁剪", "gradient clipping", "梯度裁剪"),
    _t("自回归", "autoregression|autoregressive|autoregressively", "自回归"),
    _t("教师强制", "teacher forcing", "教师强制"),
    _t("贪心搜索", "greedy search", "贪心搜索"),
    _t("贪心搜索", "greedy decoding", "贪心搜索|贪心解码"),
    _t("束搜索", "beam search", "束搜索"),
    _t("信息瓶颈", "information bottleneck", "信息瓶颈"),
    _t("掩码", "mask|masks", "掩码"),
    _t("填充掩码", "padding mask|padding masks", "填充掩码"),
    _t("因果掩码", "causal mask|causal masks", "因果掩码"),
    _t("软注意力 / 硬注意力 / 局部注意力", "soft attention", "软注意力"),
    _t("软注意力 / 硬注意力 / 局部注意力", "hard attention", "硬注意力"),
    _t("软注意力 / 硬注意力 / 局部注意力", "local attention", "局部注意力"),
    _t("自注意力", "self-attention", "自注意力"),
    _t("交叉注意力", "cross-attention", "交叉注意力"),
    _t("置换等变", "permutation equivariance|permutation equivariant|permutation-equivariant", "置换等变"),
    _t("多头注意力", "multi-head attention", "多头注意力"),
    _t("多查询注意力", "multi-query attention", "多查询注意力"),
    _t("分组查询注意力", "grouped-query attention", "分组查询注意力"),
    _t("键值缓存", "key-value cache|KV cache|KV caches|key/value cache", "键值缓存|KV 缓存"),
    _t("分页键值缓存", "paged KV cache|paged KV caches|paged key-value cache|paged cache|paged caches", "分页键值缓存|分页 KV 缓存|分页缓存"),
    _t("块表", "block table|block tables", "块表"),
    _t("写时复制", "copy-on-write", "写时复制"),
    _t("推测解码", "speculative decoding", "推测解码"),
    _t("草稿模型", "draft model|draft models", "草稿模型"),
    _t("接受率", "acceptance rate|acceptance rates", "接受率"),
    _t("多头潜在注意力", "multi-head latent attention", "多头潜在注意力"),
    _t("位置编码", "positional encoding|positional encodings", "位置编码"),
    _t("正弦位置编码", "sinusoidal positional encoding|sinusoidal encoding", "正弦位置编码"),
    _t("相对位置编码", "relative positional encoding|relative position encoding", "相对位置编码"),
    _t("旋转位置编码", "rotary positional embedding|rotary position embedding|rotary embedding", "旋转位置编码"),
    _t("卷积 / 感受野", "convolution|convolutions", "卷积"),
    _t("卷积 / 感受野", "receptive field|receptive fields", "感受野"),
    _t("稀疏注意力 / 滑动窗口注意力", "sparse attention", "稀疏注意力"),
    _t("稀疏注意力 / 滑动窗口注意力", "sliding-window attention|sliding window attention", "滑动窗口注意力"),
    _t("滚动缓冲区", "rolling buffer|rolling buffers|rolling-buffer", "滚动缓冲区"),
    _t("Transformer", "Transformer|Transformers", "Transformer"),
    _t("残差连接与层归一化", "residual connection|residual connections", "残差连接"),
    _t("残差连接与层归一化", "layer normalisation|layer normalization", "层归一化"),
    _t("前馈网络", "feed-forward network|feed-forward networks|position-wise feed-forward network", "前馈网络"),
    _t("标签平滑", "label smoothing", "标签平滑"),
    _t("学习率预热", "learning-rate warmup|learning rate warmup|warmup", "预热"),
    _t("掩码语言模型", "masked language modelling|masked language modeling|masked language model", "掩码语言模型"),
    _t("语言模型（仅解码器）", "language model|language models", "语言模型"),
    _t("语言模型（仅解码器）", "decoder-only", "仅解码器"),
    _t("前缀语言模型", "prefix language model|prefix LM|prefix LMs", "前缀语言模型|前缀 LM"),
    _t("温度 / top-k / top-p 采样", "temperature", "温度"),
    _t("视觉 Transformer（图像块）", "Vision Transformer|Vision Transformers", "视觉 Transformer"),
    _t("视觉 Transformer（图像块）", "patch|patches", "图像块"),
    # One name per idea where the chapters, translated in separate passes, had drifted (issue 50).
    _t("完全匹配率", "exact match|exact matches|exact-match", "完全匹配", "精确匹配"),
    _t("块", "block|blocks", "块", "模块"),
    _t("模块", "module|modules|submodule|submodules|sub-module|sub-modules", "模块"),
    _t("假设（束搜索）", "hypothesis|hypotheses", "假设", "候选序列"),
    _t("分类词元", "class token|class tokens|CLS token", "分类词元", "类别词元"),
    _t("注意力展开", "attention rollout|rollout", "注意力展开", "注意力 rollout"),
    _t("平均池化", "mean pooling|mean-pooling|mean-pool|mean-pooled|mean-pools", "平均池化", "均值池化"),
    _t("二次编码", "quadratic encoding|quadratic encodings", "二次编码", "二次型编码"),
    _t("批次", "batch|batches|batch size|batch sizes", "批次", "批量大小|批量 |批大小"),
    _t("墙钟时间", "wall-clock|wall clock", "墙钟", "挂钟"),
    _t("被掩码的", "masked", "被掩码|带掩码|加掩码|做掩码|掩码语言模型", "被掩盖|被遮住|被遮盖|遮盖|被屏蔽"),
    _t("笔记本", "notebook|notebooks", "笔记本", "notebook"),
    _t("保存的这次运行", "stored run|stored runs", "保存的这次运行|保存的那次运行", "存档的那次运行|存档的这次运行|存档的运行"),
)

EXEMPT = re.compile(r"^term:\s*(.+?)\s+--\s+\S", re.M)
PLACEHOLDERS = re.compile(r"⟨q\d+⟩|<[^>]+>")
# A shape written as a tuple of names, ``(batch, S, d)``, and an f-string's field, ``{batch}``: names, not words.
SHAPE = re.compile(r"\(\s*[\w.]+\s*(?:,\s*[\w.]*\s*)+\)|\{[^{}\n]*\}")


def prose(text: str) -> str:
    """``text`` without formulas, code spans, link targets, HTML and quoted-number placeholders."""
    for pattern in (INLINE_MATH, CODE_SPAN, PLACEHOLDERS, SHAPE):
        text = pattern.sub(" ", text)
    return LINK_TARGET.sub("]", text)


def _pattern(form: str) -> re.Pattern:
    flags = 0 if any(c.isupper() for c in form[1:]) or form == "Transformer" else re.I
    return re.compile(rf"(?<![\w-]){re.escape(form)}(?![\w-])", flags)


_PATTERNS = [(t, [_pattern(f) for f in t.english]) for t in TERMS]


def used_terms(english: str) -> list[Term]:
    """The terms an English text uses (a longer term that contains a shorter one counts as both)."""
    text = prose(english)
    return [t for t, patterns in _PATTERNS if any(p.search(text) for p in patterns)]


def missing_terms(english: str, translation: str, comments: list[str] = ()) -> list[str]:
    """The English forms of the terms ``english`` uses whose Chinese the translation lacks, less the
    ones a translator comment exempts (``term: <english> -- <reason>``)."""
    exempt = {m.group(1).lower() for c in comments for m in EXEMPT.finditer(c)}
    text = prose(translation)
    out = []
    for t in used_terms(english):
        if any(zh in text for zh in t.chinese):
            continue
        if exempt & {f.lower() for f in t.english}:
            continue
        out.append(t.english[0])
    return out


# An English gloss after a Chinese term, ``注意力（attention）``: not a use of the English as a name.
GLOSS = re.compile(r"[（(][^（）()\u4e00-\u9fff]*[）)]")


def variant_faults(english: str, translation: str, comments: list[str] = ()) -> list[tuple[str, str]]:
    """``(term, variant)`` for each term ``english`` uses whose translation names it by another name
    than the glossary's (``精确匹配`` for exact match), less the exempt ones. An English gloss in
    parentheses is not a variant: ``笔记本（notebook）`` is the glossary's form at first use; nor is
    another term's own name where the English uses that term too (``子模块`` beside "block" when the
    English also says "modules")."""
    exempt = {m.group(1).lower() for c in comments for m in EXEMPT.finditer(c)}
    text = GLOSS.sub(" ", prose(translation))
    used = used_terms(english)
    own = {zh for t in used for zh in t.chinese}
    out = []
    for t in used:
        if exempt & {f.lower() for f in t.english}:
            continue
        for v in t.variants:
            if any(v in zh for zh in own):
                continue
            if (v.lower() in text.lower()) if v.isascii() else (v in text):
                out.append((t.english[0], v.strip()))
    return out


def glossary_headings(glossary: str) -> list[str]:
    """The Chinese side of every term heading of GLOSSARY.md."""
    return [m.group(1).strip() for m in re.finditer(r"^## (.+?) · ", glossary, re.M)]


def taught_in(glossary: str) -> dict[str, str]:
    """Glossary heading -> the chapter that teaches the term: the first one its "Taught in" line links
    (``notebooks/chNN_x/...``). A heading whose line links no chapter is left out."""
    out = {}
    for m in re.finditer(r"^## (.+?) · .*?\n(?:.*\n)*?- \*\*Taught in / 章节：\*\*(.*)$", glossary, re.M):
        chapter = re.search(r"notebooks/(ch\d\d_\w+)/", m.group(2))
        if chapter:
            out[m.group(1).strip()] = chapter.group(1)
    return out


def uses(zh: str, text: str) -> list[int]:
    """Where ``text`` uses the Chinese form ``zh`` as a word of its own: not inside a longer Chinese
    form of another term (块 in 模块 or 图像块, 语言模型 in 前缀语言模型)."""
    longer = [z for t in TERMS for z in t.chinese if zh in z and z != zh]
    covered = set()
    for z in longer:
        for m in re.finditer(re.escape(z), text):
            covered.update(range(m.start(), m.end()))
    return [m.start() for m in re.finditer(re.escape(zh), text) if m.start() not in covered]


def first_use(term: Term, entries) -> tuple[str, str] | None:
    """The first ``(english, translation)`` of ``entries`` (in the chapter's order) whose translation
    uses a Chinese form of ``term`` in running text (a heading or a table is not where a term is
    introduced; where it is used only in headings, the first heading); None if there is none."""
    entries = list(entries)
    for headings in (False, True):
        for english, translation in entries:
            if translation.lstrip().startswith(("#", "|")) != headings:
                continue
            if any(uses(zh, prose(translation).replace("**", "")) for zh in term.chinese):
                return english, translation
    return None


def with_english(term: Term, translation: str) -> bool:
    """Whether a use of a Chinese form of ``term`` in ``translation`` is followed by its English in
    parentheses (``贪心搜索（greedy search）``; the parentheses may hold more: ``（exact match，即 ...）``)."""
    text = prose(translation).replace("**", "")
    forms = {f for t in TERMS if t.heading == term.heading for f in t.english}   # 循环神经网络（recurrent neural network）
    english = "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))
    gloss = re.compile(rf"[^（(。，；\n]{{0,12}}[（(][^（）()]*?(?<!\w)(?:{english})(?!\w)[^（）()]*[）)]", re.I)
    return any(gloss.match(text, at + len(zh)) for zh in term.chinese for at in uses(zh, text))


def chinese_words() -> list[str]:
    """Every Chinese form of the terms, once each (the site's Chinese search indexes them as words)."""
    return sorted({zh for t in TERMS for zh in t.chinese if re.search(r"[\u4e00-\u9fff]", zh) and " " not in zh})
