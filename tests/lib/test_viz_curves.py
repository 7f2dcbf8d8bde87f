"""attnbook.viz.curves_slider and curves_mpl: every slider position is in the figure, shapes are checked."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from attnbook import viz  # noqa: E402


def test_curves_slider_holds_every_position():
    x = np.arange(5)
    steps = [[x * a, x + a] for a in (1.0, 2.0, 3.0)]
    fig = viz.curves_slider(
        x,
        steps,
        ["times", "plus"],
        ["a=1", "a=2", "a=3"],
        prefix="a: ",
        active=1,
        titles=["one", "two", "three"],
        log_y=True,
        y_range=(0.1, 100),
    )
    assert [trace.name for trace in fig.data] == ["times", "plus"]
    np.testing.assert_allclose(fig.data[0].y, x * 2.0)  # starts at the active position
    slider = fig.layout.sliders[0]
    assert slider.active == 1 and len(slider.steps) == 3
    for step, a in zip(slider.steps, (1.0, 2.0, 3.0)):
        np.testing.assert_allclose(step.args[0]["y"][0], x * a)
        np.testing.assert_allclose(step.args[0]["y"][1], x + a)
    assert slider.steps[2].args[1]["title.text"] == "three"
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis.exponentformat == "power"
    np.testing.assert_allclose(fig.layout.yaxis.range, [-1, 2])


def test_curves_slider_accepts_tensors():
    x = torch.arange(4.0)
    fig = viz.curves_slider(x, [[torch.ones(4)]], ["one"], ["only"])
    np.testing.assert_allclose(fig.data[0].y, np.ones(4))


def test_curves_slider_bad_shapes():
    x = np.arange(5)
    with pytest.raises(ValueError, match="slider position 0 must have 2 curves of shape"):
        viz.curves_slider(x, [[x]], ["a", "b"], ["s"])
    with pytest.raises(ValueError, match="slider position 1 must have 1 curves"):
        viz.curves_slider(x, [[x], [np.arange(4)]], ["a"], ["s", "t"])
    with pytest.raises(ValueError, match="expected 1 step_labels"):
        viz.curves_slider(x, [[x]], ["a"], ["s", "t"])
    with pytest.raises(ValueError, match="at least one slider position"):
        viz.curves_slider(x, [], ["a"], [])


def test_curves_mpl_draws_each_curve():
    fig = viz.curves_mpl(
        np.arange(3), {"a": [1, 2, 3], "b": torch.tensor([3.0, 2.0, 1.0])}, log_y=True, y_range=(0.5, 5)
    )
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["a", "b"]
    assert ax.get_yscale() == "log"
    np.testing.assert_allclose(ax.get_lines()[1].get_ydata(), [3, 2, 1])
