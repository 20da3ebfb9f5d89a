"""The diagrams that course_utils.plots draws by code."""


def test_draw_qkv_roles_draws_two_panels():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_utils import plots
    axes = plots.draw_qkv_roles()
    assert len(axes) == 2 and all(len(ax.patches) >= 6 for ax in axes)
    plt.close("all")


def test_draw_split_merge_heads_and_kv_cache():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_utils import plots
    ax = plots.draw_split_merge_heads(seq=3, n_heads=4, d_head=2)
    # 4 head blocks of 3 x 2 and their 3 x 3 weights, the outputs, and the two 3 x 8 matrices
    assert len(ax.patches) == 4 * (6 + 9 + 6) + 2 * 24
    ax = plots.draw_kv_cache(prompt=4, steps=3)
    assert len(ax.patches) == (4 + 5 + 6 + 7) + 2
    plt.close("all")
