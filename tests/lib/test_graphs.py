"""attnbook.graphs: masks, Laplacians, eigenvectors and distances against networkx and numpy; the graph model."""

import math

import networkx as nx
import numpy as np
import pytest
import torch
from attnbook import graphs
from attnbook.attention import scaled_dot_product_attention
from hypothesis import given, settings
from hypothesis import strategies as st


def random_graph(n, p, seed):
    g = nx.gnp_random_graph(n, p, seed=seed)
    return g, torch.tensor(nx.to_numpy_array(g, nodelist=range(n)) > 0)


def test_adjacency_from_edges_and_mask():
    A = graphs.adjacency_from_edges([(0, 1), (1, 2)], 4)
    expected = torch.tensor([[0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(A, expected)
    assert torch.equal(graphs.adjacency_mask(A), expected | torch.eye(4, dtype=torch.bool))
    assert torch.equal(graphs.adjacency_mask(A, self_loops=False), expected)
    # padding nodes attend to nothing and are attended by nobody
    batch = torch.stack([A, A])
    nodes = torch.tensor([[True] * 4, [True, True, True, False]])
    mask = graphs.adjacency_mask(batch, nodes)
    assert not mask[1, 3].any() and not mask[1, :, 3].any() and mask[0, 3, 3]


def test_masked_attention_is_a_graph_attention_layer():
    """Attention with the adjacency mask = for each node, a softmax over itself and its neighbours only."""
    g, A = random_graph(9, 0.3, seed=1)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(9, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    out = scaled_dot_product_attention(q, k, v, graphs.adjacency_mask(A))
    for i in range(9):
        hood = [i] + sorted(g.neighbors(i))
        w = torch.softmax(torch.stack([q[i] @ k[j] for j in hood]) / 2.0, dim=0)  # sqrt(Dk) = 2
        torch.testing.assert_close(out[i], sum(w[n] * v[j] for n, j in enumerate(hood)))


@pytest.mark.parametrize("normalized", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_laplacian_equals_networkx(normalized, seed):
    g, A = random_graph(10, 0.3, seed)  # may have isolated nodes
    fn = nx.normalized_laplacian_matrix if normalized else nx.laplacian_matrix
    expected = fn(g, nodelist=range(10)).toarray()
    np.testing.assert_allclose(graphs.laplacian(A, normalized=normalized).numpy(), expected, atol=1e-12)


def test_laplacian_eigenvectors():
    g, A = random_graph(12, 0.35, seed=3)
    vectors, values = graphs.laplacian_eigenvectors(A, 4)
    L = graphs.laplacian(A)
    expected_values = np.sort(np.linalg.eigvalsh(nx.normalized_laplacian_matrix(g, nodelist=range(12)).toarray()))
    np.testing.assert_allclose(values.numpy(), expected_values[1:5], atol=1e-10)
    torch.testing.assert_close(L @ vectors, vectors * values)  # L v = lambda v
    torch.testing.assert_close(vectors.T @ vectors, torch.eye(4, dtype=torch.float64))


def test_laplacian_eigenvectors_of_a_ring_are_sines_and_cosines():
    n = 12
    A = graphs.adjacency_from_edges([(i, (i + 1) % n) for i in range(n)], n)
    vectors, values = graphs.laplacian_eigenvectors(A, 2)
    # the lowest non-constant frequency of a ring: eigenvalue 1 - cos(2 pi / n), a pair of them
    torch.testing.assert_close(values, torch.full((2,), 1 - math.cos(2 * math.pi / n), dtype=torch.float64))
    angle = 2 * math.pi * torch.arange(n, dtype=torch.float64) / n
    basis = torch.stack([angle.cos(), angle.sin()], dim=1) / math.sqrt(n / 2)  # (n, 2) orthonormal
    projection = basis @ basis.T
    torch.testing.assert_close(projection @ vectors, vectors)  # the same plane, whatever basis eigh picks


def test_laplacian_eigenvectors_of_a_small_graph_are_padded():
    A = graphs.adjacency_from_edges([(0, 1), (1, 2)], 3)
    vectors, values = graphs.laplacian_eigenvectors(A, 4)
    assert vectors.shape == (3, 4) and values.shape == (4,)
    assert torch.equal(vectors[:, 2:], torch.zeros(3, 2, dtype=torch.float64))


@settings(max_examples=min(25, settings.default.max_examples), deadline=None)
@given(n=st.integers(1, 12), p=st.floats(0.0, 0.6), seed=st.integers(0, 10_000))
def test_shortest_paths_equal_networkx(n, p, seed):
    g, A = random_graph(n, p, seed)
    d = graphs.shortest_path_distances(A)
    expected = torch.full((n, n), graphs.UNREACHABLE, dtype=torch.long)
    for i, lengths in nx.all_pairs_shortest_path_length(g):
        for j, length in lengths.items():
            expected[i, j] = length
    assert torch.equal(d, expected)
    assert torch.equal(graphs.shortest_path_distances(torch.stack([A, A]))[1], expected)  # batched


def test_distance_bias_looks_up_one_number_per_head_and_distance():
    bias = graphs.DistanceBias(n_heads=2, max_distance=3)
    with torch.no_grad():
        bias.table.copy_(torch.arange(10.0).view(2, 5))  # head 0: 0..4, head 1: 5..9
    d = torch.tensor([[0, 1, 5], [1, 0, -1], [5, -1, 0]])
    out = bias(d)  # (H, N, N)
    assert out.shape == (2, 3, 3)
    assert out[0, 0, 1] == 1 and out[0, 0, 2] == 3  # distances above max_distance share its entry
    assert out[0, 1, 2] == 4 and out[1, 1, 2] == 9  # unreachable has its own entry
    assert bias(d[None]).shape == (1, 2, 3, 3)
    with pytest.raises(TypeError, match="distances must be integers"):
        bias(d.float())


def test_two_ring_graphs():
    batch = graphs.two_ring_graphs(40, [10, 12], seed=3)
    assert batch.adjacency.shape == (40, 24, 24) and batch.labels.float().mean() == 0.5
    assert set(batch.n_nodes.tolist()) == {20, 24}
    for b in range(40):
        n = int(batch.n_nodes[b])
        A = batch.adjacency[b, :n, :n]
        assert torch.equal(A.sum(-1), torch.full((n,), 2))  # every node has two neighbours
        assert not batch.adjacency[b, n:].any() and not batch.nodes[b, n:].any()
        g = nx.from_numpy_array(A.numpy().astype(int))
        # two rings of the same size: a mark's ring size says nothing about the label
        assert sorted(map(len, nx.connected_components(g))) == [n // 2, n // 2]
        marks = batch.features[b].nonzero().flatten().tolist()
        assert len(marks) == 2
        same = nx.has_path(g, *marks)
        assert same == bool(batch.labels[b])
        if same:
            assert nx.shortest_path_length(g, *marks) >= 5


def test_two_ring_graphs_draw_only_the_ring_sizes_asked_for():
    """Sizes held out of training stay out: graphs of sizes 11 and 13 only, both labels at each size."""
    batch = graphs.two_ring_graphs(200, (11, 13), seed=0)
    assert batch.adjacency.shape[1] == 26
    for n in (22, 26):
        assert set(batch.labels[batch.n_nodes == n].tolist()) == {0, 1}
    assert set(batch.n_nodes.tolist()) == {22, 26}


@pytest.mark.parametrize(
    "mask,encoding",
    [("full", "none"), ("adjacency", "none"), ("full", "laplacian"), ("adjacency", "laplacian"), ("full", "distance")],
)
def test_graph_transformer_is_invariant_to_renumbering_the_nodes(mask, encoding):
    torch.manual_seed(0)
    model = graphs.GraphTransformer(mask, encoding, d_model=16, n_heads=2, n_layers=2).double().eval()
    batch = graphs.two_ring_graphs(4, (10, 11), seed=1)
    N = batch.adjacency.shape[1]
    eig = torch.zeros(4, N, 4, dtype=torch.float64)
    for b, n in enumerate(batch.n_nodes.tolist()):
        eig[b, :n] = graphs.laplacian_eigenvectors(batch.adjacency[b, :n, :n], 4)[0]
    dist = graphs.shortest_path_distances(batch.adjacency)
    perm = torch.randperm(N)
    out = model(batch.features, batch.adjacency, batch.nodes, eigenvectors=eig, distances=dist)
    moved = model(
        batch.features[:, perm],
        batch.adjacency[:, perm][:, :, perm],
        batch.nodes[:, perm],
        eigenvectors=eig[:, perm],
        distances=dist[:, perm][:, :, perm],
    )
    torch.testing.assert_close(moved, out)
    # and padding does not count: one graph alone, unpadded, gives the same logits
    n = int(batch.n_nodes[0])
    alone = model(
        batch.features[:1, :n],
        batch.adjacency[:1, :n, :n],
        batch.nodes[:1, :n],
        eigenvectors=eig[:1, :n],
        distances=dist[:1, :n, :n],
    )
    torch.testing.assert_close(alone, out[:1])


def test_message_passing_cannot_tell_the_two_kinds_of_graph_apart():
    """With the adjacency mask and 2 layers, each node sees 2 hops: both labels give the same logits per size."""
    torch.manual_seed(0)
    model = graphs.GraphTransformer("adjacency", "none", d_model=16, n_heads=2, n_layers=2).double().eval()
    batch = graphs.two_ring_graphs(60, (10, 11, 12), seed=2)
    logits = model(batch.features, batch.adjacency, batch.nodes)
    for n in batch.n_nodes.unique():
        rows = logits[batch.n_nodes == n]
        torch.testing.assert_close(rows, rows[:1].expand_as(rows))
    # with distances in the scores, the same graphs do get different logits
    model = graphs.GraphTransformer("full", "distance", d_model=16, n_heads=2, n_layers=2).double().eval()
    with torch.no_grad():
        model.distance_bias.table.normal_()
    logits = model(
        batch.features, batch.adjacency, batch.nodes, distances=graphs.shortest_path_distances(batch.adjacency)
    )
    rows = logits[batch.n_nodes == batch.n_nodes[0]]
    assert (rows - rows[:1]).abs().max() > 1e-3


@pytest.mark.parametrize(
    "call,error,match",
    [
        (lambda: graphs.adjacency_mask(torch.ones(3, 4)), ValueError, r"adjacency must be a square matrix"),
        (lambda: graphs.adjacency_mask(torch.tensor([[0, 1], [0, 0]])), ValueError, r"adjacency must be symmetric"),
        (lambda: graphs.adjacency_mask(torch.tensor([[0, 2], [2, 0]])), ValueError, r"booleans or 0/1"),
        (lambda: graphs.adjacency_from_edges([(0, 3)], 3), ValueError, r"node indices in \[0, n_nodes=3\)"),
        (
            lambda: graphs.laplacian_eigenvectors(torch.zeros(2, 3, 3, dtype=torch.bool), 2),
            ValueError,
            r"adjacency must be one graph \(N, N\)",
        ),
        (lambda: graphs.GraphTransformer("sparse"), ValueError, r"mask must be one of 'full', 'adjacency'"),
        (
            lambda: graphs.GraphTransformer("full", "laplacian")(
                torch.zeros(1, 3, dtype=torch.long),
                torch.zeros(1, 3, 3, dtype=torch.bool),
                torch.ones(1, 3, dtype=torch.bool),
            ),
            ValueError,
            r"encoding='laplacian' needs eigenvectors",
        ),
        (
            lambda: graphs.two_ring_graphs(4, (8, 10)),
            ValueError,
            r"ring_sizes must be at least max\(3, 2 \* min_gap\) = 10",
        ),
        (lambda: graphs.two_ring_graphs(4, []), ValueError, r"ring_sizes must be a list or range of ring sizes"),
    ],
)
def test_bad_input_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_the_smallest_gap_still_makes_rings_and_odd_inputs_are_refused():
    batch = graphs.two_ring_graphs(20, (3, 4), min_gap=1, seed=1)
    for b in range(len(batch)):
        n = int(batch.n_nodes[b])
        degrees = batch.adjacency[b, :n, :n].sum(-1)
        assert (degrees == 2).all(), "every node on a ring of at least 3 nodes (a ring of 2 is one edge)"
    with pytest.raises(ValueError, match=r"distances must be shortest-path lengths >= 0 or -1 \(unreachable\), got -2"):
        graphs.DistanceBias(2, 3)(torch.tensor([[0, -2], [-2, 0]]))
    with pytest.raises(
        TypeError,
        match=r"edges must be a list of pairs \(i, j\) of node indices or a tensor \(E, 2\), "
        r"got dtype torch.float32",
    ):
        graphs.adjacency_from_edges([(0.5, 1.0)], 3)
    with pytest.raises(
        ValueError, match=r"edges must be pairs \(i, j\) of node indices, shape \(E, 2\), got shape \(1, 3\)"
    ):
        graphs.adjacency_from_edges([(0, 1, 2)], 3)
