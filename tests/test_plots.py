"""The diagrams that course_utils.plots draws by code."""


def test_draw_qkv_roles_draws_two_panels():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_utils import plots
    axes = plots.draw_qkv_roles()
    assert len(axes) == 2 and all(len(ax.patches) >= 6 for ax in axes)
    plt.close("all")
