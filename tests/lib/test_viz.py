"""attnbook.viz: figures that carry their slider states, and glue for numbers in the prose."""

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from attnbook import glue, viz
from matplotlib.figure import Figure


def test_attention_heatmap_rows_are_queries():
    w = torch.softmax(torch.randn(2, 3), -1)
    fig = viz.attention_heatmap(w, ["a", "b", "c"], ["q1", "q2"])
    assert isinstance(fig, go.Figure)
    heat = fig.data[0]
    np.testing.assert_allclose(np.array(heat.z), w.numpy(), rtol=1e-6)
    assert list(heat.x) == ["a", "b", "c"] and list(heat.y) == ["q1", "q2"]
    with pytest.raises(ValueError, match=r"weights must be a matrix \(Tq, Tk\), got shape \(3,\)"):
        viz.attention_heatmap(torch.ones(3))


def test_repeated_labels_stay_distinct():
    fig = viz.attention_heatmap(torch.eye(3), ["the", "cat", "the"], ["x", "y", "z"])
    x = list(fig.data[0].x)
    assert len(set(x)) == 3 and [label.strip("\u200b") for label in x] == ["the", "cat", "the"]
    with pytest.raises(ValueError, match=r"expected 3 labels, got 2"):
        viz.attention_heatmap(torch.eye(3), ["a", "b"])


def test_heatmap_slider_steps_hold_every_matrix():
    mats = [torch.rand(2, 3), torch.rand(4, 5), torch.rand(1, 1)]
    fig = viz.attention_heatmap_slider(mats, step_labels=["one", "two", "three"], prefix="sentence: ")
    steps = fig.layout.sliders[0].steps
    assert [s.label for s in steps] == ["one", "two", "three"]
    for step, m in zip(steps, mats):
        assert step.method == "update"
        np.testing.assert_allclose(np.array(step.args[0]["z"][0]), m.numpy(), rtol=1e-6)
        assert len(step.args[0]["x"][0]) == m.shape[1] and len(step.args[0]["y"][0]) == m.shape[0]


def test_temperature_figure_steps_are_softmaxes():
    scores = torch.tensor([2.0, 0.5, -1.0])
    temps = [0.1, 1.0, 10.0]
    fig = viz.softmax_temperature_figure(scores, ["a", "b", "c"], temps)
    steps = fig.layout.sliders[0].steps
    assert fig.layout.sliders[0].active == 1  # starts at τ = 1
    for step, t in zip(steps, temps):
        np.testing.assert_allclose(step.args[0]["y"][0], torch.softmax(scores / t, -1).numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="temperatures must all be > 0"):
        viz.softmax_temperature_figure(scores, temperatures=[1.0, 0.0])


def test_add_slider_needs_steps():
    with pytest.raises(ValueError, match="steps must contain at least one step"):
        viz.add_slider(go.Figure(), [], prefix="x")


def test_matplotlib_figures():
    assert isinstance(viz.heatmap_mpl(torch.rand(3, 4), title="t"), Figure)
    assert isinstance(viz.bars_mpl([0.2, 0.8], ["a", "b"]), Figure)


def test_glue_emits_a_hidden_record(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    published = []
    shell.display_pub.publish = lambda data, metadata=None, **kw: published.append((data, metadata))
    glue.glue("answer", torch.tensor(0.25))
    data, metadata = published[-1]
    assert data == {"application/papermill.record/text/plain": "0.25"}
    assert metadata["scrapbook"] == {"name": "answer", "mime_prefix": "application/papermill.record/"}
