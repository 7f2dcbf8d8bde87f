"""attnbook.viz.heads: the figures carry the numbers they were given, in the right places, and refuse bad shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attnbook import viz
from attnbook.style import color


def test_phase_change_figure_has_two_panels_on_the_same_steps():
    steps = [0, 25, 50]
    fig = viz.phase_change_figure(
        steps,
        {"first half": [3.3, 3.3, 3.4], "repeat": [3.2, 2.0, 0.5]},
        {"prefix L2H1": torch.tensor([0.0, 0.4, 0.9]), "previous L1H2": [0.1, 0.3, 0.6]},
        chance=3.26,
        title="t",
    )
    names = [trace.name for trace in fig.data]
    assert names == ["first half", "repeat", "prefix L2H1", "previous L1H2"]
    assert [trace.yaxis for trace in fig.data] == ["y", "y", "y2", "y2"]  # losses above, scores below
    assert all(list(trace.x) == steps for trace in fig.data)
    np.testing.assert_allclose(fig.data[2].y, [0.0, 0.4, 0.9], atol=1e-7)
    assert fig.data[3].line.dash == "dot"  # previous-token scores dotted
    assert fig.layout.xaxis2.matches == "x" or fig.layout.xaxis.matches == "x2"  # one shared x-axis
    assert any(shape.y0 == 3.26 for shape in fig.layout.shapes)  # the chance line
    assert tuple(fig.layout.yaxis2.range) == (0, 1)
    with pytest.raises(ValueError, match="one value per step"):
        viz.phase_change_figure(steps, {"repeat": [1, 2]}, {"s": [0, 0, 0]})
    with pytest.raises(ValueError, match="scores must name at least one curve"):
        viz.phase_change_figure(steps, {"repeat": [1, 2, 3]}, {})


def test_head_grid_writes_every_value():
    values = [[0.1, 0.7, 0.02], [0.0, 0.3, 0.5]]
    fig = viz.head_grid(values, value_name="loss increase", text_format=".3f", title="t")
    heat = fig.data[0]
    np.testing.assert_allclose(heat.z, values)
    assert list(heat.y) == ["layer 1", "layer 2"] and list(heat.x) == ["head 1", "head 2", "head 3"]
    assert heat.texttemplate == "%{z:.3f}" and heat.colorbar.title.text == "loss increase"
    with pytest.raises(ValueError, match="values must be a matrix"):
        viz.head_grid([0.1, 0.2])


def test_attribution_figure_scales_each_method_and_outlines_the_truth():
    maps = {"attention": torch.tensor([0.1, 0.6, 0.3]), "ablation": torch.tensor([-2.0, 0.5, 1.0])}
    fig = viz.attribution_figure(maps, ["a", "b", "a"], truth=1, title="t")
    heat = fig.data[0]
    # each row over its largest value; a negative score (the replacement made the prediction likelier) drawn as 0
    np.testing.assert_allclose(heat.z, [[1 / 6, 1.0, 0.5], [0.0, 0.5, 1.0]], rtol=1e-6)
    np.testing.assert_allclose(heat.customdata, [[0.1, 0.6, 0.3], [-2.0, 0.5, 1.0]], rtol=1e-6)  # the raw values
    assert list(heat.y) == ["attention", "ablation"]
    assert len(set(heat.x)) == 3  # repeated tokens stay distinct columns
    (outline,) = fig.layout.shapes
    assert (outline.x0, outline.x1) == (0.5, 1.5) and outline.line.color == color("value")
    with pytest.raises(ValueError, match="truth must be a position in \\[0, 3\\)"):
        viz.attribution_figure(maps, ["a", "b", "a"], truth=3)
    with pytest.raises(ValueError, match="one value per token"):
        viz.attribution_figure(maps, ["a", "b"])


def test_circuit_slider_shows_each_table_on_its_own_signed_scale():
    tables = {"L2H1": torch.eye(3) * 2.0, "L2H2": -torch.ones(3, 3) * 0.5}
    fig = viz.circuit_slider(tables, ["a", "b", "c"], title="OV", row_title="attended", col_title="logit")
    heat = fig.data[0]
    np.testing.assert_allclose(heat.z, np.eye(3) * 2.0)
    assert (heat.zmin, heat.zmax) == (-2.0, 2.0) and list(heat.x) == list(heat.y) == ["a", "b", "c"]
    steps = fig.layout.sliders[0].steps
    assert [s.label for s in steps] == ["L2H1", "L2H2"]
    np.testing.assert_allclose(steps[1].args[0]["z"][0], -np.ones((3, 3)) * 0.5)
    assert steps[1].args[0]["zmax"] == [0.5] and steps[1].args[1]["title.text"] == "OV: L2H2"
    assert fig.layout.xaxis.title.text == "logit" and fig.layout.yaxis.title.text == "attended"
    assert fig.layout.yaxis.autorange == "reversed"  # the first label on top, as in a table
    with pytest.raises(ValueError, match="tables\\['L2H1'\\] must be \\(2, 2\\)"):
        viz.circuit_slider(tables, ["a", "b"])
