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
