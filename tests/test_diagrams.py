"""The diagrams that course_utils.diagrams draws by code."""

import matplotlib
import pytest

from course_utils import diagrams

matplotlib.use("Agg")


def test_draw_qkv_roles_draws_two_panels():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axes = diagrams.draw_qkv_roles()
    assert len(axes) == 2 and all(len(ax.patches) >= 6 for ax in axes)
    plt.close("all")


def test_draw_split_merge_heads_and_kv_cache():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = diagrams.draw_split_merge_heads(seq=3, n_heads=4, d_head=2)
    # 4 head blocks of 3 x 2 and their 3 x 3 weights, the outputs, and the two 3 x 8 matrices
    assert len(ax.patches) == 4 * (6 + 9 + 6) + 2 * 24
    ax = diagrams.draw_kv_cache(prompt=4, steps=3)
    assert len(ax.patches) == (4 + 5 + 6 + 7) + 2
    plt.close("all")


@pytest.mark.parametrize("draw", ["draw_transformer", "draw_decoder_blocks", "draw_post_pre_ln"])
def test_the_chapters_diagrams_draw_on_a_new_or_given_axes(draw):
    import matplotlib.pyplot as plt
    ax = getattr(diagrams, draw)()
    assert ax.patches, f"{draw} drew no boxes"
    fig, given = plt.subplots()
    assert getattr(diagrams, draw)(given) is given and given.patches
    plt.close("all")


def test_head_groups_connect_each_query_head_to_its_key_value_head():
    import matplotlib.pyplot as plt
    ax = diagrams.draw_head_groups(None, 8, 2, "GQA-2")
    assert len(ax.patches) == 8 + 2 and len(ax.lines) == 8 and ax.get_title() == "GQA-2"
    plt.close("all")


def test_no_chapter_draws_its_own_diagram_toolkit():
    """Diagrams are drawn by course_utils.diagrams, the one drawing toolkit: no chapter adds patches itself."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    found = [p.name for p in sorted(root.glob("solutions/ch*/ch*.py"))
             if "add_patch(" in p.read_text() or "FancyBboxPatch" in p.read_text()]
    assert not found, f"chapters drawing boxes by hand (move the diagram into course_utils.diagrams): {found}"


def _every_diagram():
    """Each diagram drawn once: the list of its axes."""
    import matplotlib.pyplot as plt
    drawn = []
    for name in diagrams.__all__:
        if name.startswith("draw_"):
            result = diagrams.draw_head_groups(None, 8, 2, "GQA") if name == "draw_head_groups" else getattr(diagrams, name)()
            drawn.append((name, list(result) if isinstance(result, (tuple, list)) or not hasattr(result, "texts") else [result]))
    plt.close("all")
    return drawn


def _words(text: str) -> list[str]:
    """The English prose words of a label: outside $math$, neither a name with an underscore nor a
    model's or layer's proper name."""
    import re
    names = {"GRU", "LayerNorm", "RMSNorm", "MHA", "GQA", "RoPE", "SwiGLU", "ReLU", "FFN", "LLaMA", "Bahdanau",
             "Luong", "softmax", "out", "view", "transpose", "reshape", "sqrt", "Post", "Pre", "LN", "GPT", "sos", "eos"}
    text = re.sub(r"\$[^$]*\$", "", text)
    return [w for w in re.findall(r"(?<![\w@])[A-Za-z]{3,}(?![\w(])", text) if w not in names]


def test_the_labels_read_in_chinese_in_a_font_with_chinese_glyphs(monkeypatch):
    """With COURSE_LANG=zh_CN every label with English words is drawn translated (course_utils.messages),
    in the CJK font; English is unchanged without it."""
    from course_utils import messages
    monkeypatch.setattr(diagrams, "cjk_font", lambda: "WenQuanYi Zen Hei")
    english = _every_diagram()
    with messages.speaking("zh_CN"):
        chinese = _every_diagram()
    untranslated = []
    for (name, en_axes), (_, zh_axes) in zip(english, chinese):
        for en_ax, zh_ax in zip(en_axes, zh_axes):
            for en, zh in zip((*en_ax.texts, en_ax.title), (*zh_ax.texts, zh_ax.title)):
                if _words(en.get_text()) and zh.get_text() == en.get_text():
                    untranslated.append(f"{name}: {en.get_text()!r}")
                if zh.get_text():
                    assert zh.get_fontfamily()[0] == "WenQuanYi Zen Hei", f"{name}: {zh.get_text()!r} in {zh.get_fontfamily()}"
    assert not untranslated, f"labels drawn in English under COURSE_LANG=zh_CN: {untranslated}"
    assert any("编码器" in t.get_text() for _, axes in chinese for ax in axes for t in ax.texts)


def test_without_a_chinese_font_the_labels_stay_english(monkeypatch):
    """Chinese text in a font without its glyphs draws empty boxes: English then, as without COURSE_LANG."""
    from course_utils import messages
    monkeypatch.setattr(diagrams, "cjk_font", lambda: None)
    english = [t.get_text() for _, axes in _every_diagram() for ax in axes for t in ax.texts]
    with messages.speaking("zh_CN"):
        labels = [t.get_text() for _, axes in _every_diagram() for ax in axes for t in ax.texts]
    fixed = [en for en, zh in zip(english, labels) if en in diagrams.LABELS]
    assert fixed and all(en in labels for en in fixed)


def test_the_chinese_font_is_found_where_debian_installs_it():
    import os
    if not os.path.exists("/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc"):
        pytest.skip("fonts-wqy-zenhei is not installed (make browser-tool installs it)")
    assert diagrams.cjk_font() == "WenQuanYi Zen Hei"
