"""The graphs page's experiment: structural inputs per graph, training with random sign flips, accuracy."""

import pytest
import torch
from attnbook import graph_experiment, graphs


@pytest.fixture(scope="module")
def rings():
    return graphs.two_ring_graphs(12, (5, 6), min_gap=2, seed=4)  # 10 or 12 nodes, padded to 12


def test_structural_inputs_are_each_graphs_own_and_zero_on_the_padding(rings):
    eig, dist = graph_experiment.structural_inputs(rings, 3)
    assert eig.shape == (12, 12, 3) and eig.dtype == torch.float32 and dist.shape == (12, 12, 12)
    for b, n in enumerate(rings.n_nodes.tolist()):
        alone = graphs.laplacian_eigenvectors(rings.adjacency[b, :n, :n], 3)[0]
        torch.testing.assert_close(eig[b, :n], alone.float())
        assert not eig[b, n:].any()
        assert torch.equal(dist[b, :n, :n], graphs.shortest_path_distances(rings.adjacency[b, :n, :n]))
    assert torch.equal(dist, graphs.shortest_path_distances(rings.adjacency))


class Recorder(graphs.GraphTransformer):
    """A graph transformer that keeps the adjacency and eigenvectors of every batch it sees in training."""

    seen: list

    def forward(self, features, adjacency, nodes, **kw):
        if self.training:
            self.seen.append((adjacency.clone(), kw["eigenvectors"].clone()))
        return super().forward(features, adjacency, nodes, **kw)


def test_training_warms_up_decays_and_flips_each_eigenvectors_sign_at_random(rings):
    eig, dist = graph_experiment.structural_inputs(rings, 3)
    torch.manual_seed(0)
    model = Recorder("full", "distance", d_model=8, n_heads=2, n_layers=1, k=3)  # it is passed them all the same
    model.seen = []
    history = graph_experiment.fit_graph_model(
        model, rings, eig, dist, steps=30, batch_size=8, lr=1e-2, warmup=2, quiet=True
    )
    assert len(model.seen) == 30 and len(history.loss) == 30
    lr = history.lr  # a warmup to the peak over 2 steps, then a cosine decay
    assert lr[0] < lr[1] < lr[2] == pytest.approx(1e-2) and lr[-1] < 2e-3
    assert all(a >= b for a, b in zip(lr[2:], lr[3:]))
    signs = []
    for adjacency, flipped in model.seen:
        for a, e in zip(adjacency, flipped):
            i = next(i for i in range(len(rings)) if torch.equal(rings.adjacency[i], a))  # which graph
            for c in range(3):  # each column: the graph's eigenvector or its negative
                sign = 1 if torch.equal(e[:, c], eig[i, :, c]) else -1
                assert torch.equal(e[:, c], sign * eig[i, :, c])
                signs.append(sign)
    assert 0.3 < signs.count(1) / len(signs) < 0.7  # both signs, about equally often


def test_accuracy_is_the_share_of_graphs_whose_largest_logit_is_the_label(rings):
    eig, dist = graph_experiment.structural_inputs(rings, 2)
    torch.manual_seed(1)
    model = graphs.GraphTransformer("full", "distance", d_model=8, n_heads=2, n_layers=1, k=2)
    with torch.no_grad():
        model.distance_bias.table.normal_()
    logits = graph_experiment.graph_logits(model.eval(), rings, eig, dist)  # (12, 2)
    expected = (logits.argmax(-1) == rings.labels).float().mean().item()
    assert graph_experiment.accuracy(model.train(), rings, eig, dist) == expected
    assert not model.training  # accuracy evaluates in eval mode


def test_bad_inputs_name_the_argument(rings):
    eig, dist = graph_experiment.structural_inputs(rings, 2)
    model = graphs.GraphTransformer("full", "distance", d_model=8, n_heads=2, n_layers=1, k=2)
    with pytest.raises(TypeError, match="graphs must be a graphs.GraphBatch"):
        graph_experiment.structural_inputs(rings.adjacency, 2)
    with pytest.raises(ValueError, match=r"eigenvectors must have shape \(B, N, k\) with \(B, N\) = \(12, 12\)"):
        graph_experiment.accuracy(model, rings, eig[:3], dist)
    with pytest.raises(ValueError, match=r"distances must have shape \(B, N, N\) = \(12, 12, 12\)"):
        graph_experiment.fit_graph_model(model, rings, eig, dist[:, :5], steps=1)
