"""attnbook.viz figures of the chapter beyond text: graphs and spectrograms."""

import numpy as np
import pytest
import torch
from attnbook import graphs, viz


def test_graph_figure_draws_every_edge_once_and_every_node():
    A = graphs.adjacency_from_edges([(0, 1), (1, 2), (2, 0), (3, 4)], 5)
    fig = viz.graph_figure(A, node_color=[0, 1, 0, 1, 0], node_text=list("abcde"))
    edges, nodes = fig.data
    assert len(edges.x) == 3 * 4  # 4 edges, each (start, end, gap)
    assert len(nodes.x) == 5 and "node 3<br>d" in nodes.hovertext
    fig = viz.graph_figure(A, positions=torch.arange(10.0).view(5, 2))
    np.testing.assert_allclose(fig.data[1].x, [0, 2, 4, 6, 8])
    with pytest.raises(ValueError, match=r"positions must be \(N, 2\)"):
        viz.graph_figure(A, positions=torch.zeros(4, 2))


def test_spectrogram_grid_has_one_panel_per_spectrogram_with_physical_axes():
    S = torch.rand(3, 8, 16)
    fig = viz.spectrogram_grid(S, ["a", "b", "c"], sample_rate=4000, hop_length=32, n_fft=16, cols=2, patch_size=4)
    assert len(fig.data) == 3
    np.testing.assert_allclose(fig.data[0].y, np.arange(8) * 250.0)  # bin f is f * rate / n_fft Hz
    np.testing.assert_allclose(fig.data[0].x[1], 32 / 4000)  # frame t is at t * hop / rate seconds
    assert len(fig.layout.shapes) == 3 * ((8 // 4 + 1) + (16 // 4 + 1))
    with pytest.raises(ValueError, match=r"expected 3 titles"):
        viz.spectrogram_grid(S, ["a"], sample_rate=4000, hop_length=32, n_fft=16)


def test_graph_figure_lays_out_each_component_apart():
    A = graphs.adjacency_from_edges([(i, (i + 1) % 6) for i in range(6)] + [(6, 7), (7, 8), (8, 6)], 10)
    x = np.array(viz.graph_figure(A).data[1].x)
    assert x[:6].max() < x[6:9].min() < x[6:9].max() < x[9]  # the ring, then the triangle, then the lone node


def test_image_attention_slider_can_put_two_panels_to_a_row():
    images = torch.rand(2, 1, 8, 16)
    maps = {"layer 1": torch.rand(2, 2, 4), "layer 2": torch.rand(2, 2, 4), "rollout": torch.rand(2, 2, 4)}
    fig = viz.image_attention_slider(images, maps, cols=2)
    assert fig.layout.height == 2 * 250 + 80
    assert fig.layout.xaxis4.anchor == "y4" and fig.layout.yaxis3.domain[1] < fig.layout.yaxis1.domain[0]  # row 2
    assert not any(trace.showlegend for trace in fig.data if trace.type == "contour")
    one_row = viz.image_attention_slider(images, maps)
    assert one_row.layout.yaxis4.domain == one_row.layout.yaxis1.domain


def test_graph_figure_draws_a_ring_as_a_convex_polygon():
    ring = [0, 2, 4, 1, 3]  # a ring whose node numbers are not in ring order
    A = graphs.adjacency_from_edges([(ring[i], ring[(i + 1) % 5]) for i in range(5)], 5)
    fig = viz.graph_figure(A)
    xy = np.stack([fig.data[1].x, fig.data[1].y], axis=1)[ring + ring[:1]]  # the nodes in ring order
    angles = np.unwrap(np.arctan2(*(xy - xy[:5].mean(0)).T[::-1]))
    steps = np.diff(angles)
    assert np.all(steps > 0) or np.all(steps < 0)  # every edge turns the same way: no crossing edges
    assert abs(abs(angles[-1] - angles[0]) - 2 * np.pi) < 1e-6  # once round
