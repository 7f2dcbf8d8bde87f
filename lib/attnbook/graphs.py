"""Graphs as sets of tokens: the adjacency matrix as an attention mask, structural encodings, distance biases.

A graph with N nodes becomes N tokens, one per node, in an arbitrary order. Self-attention without
positions is permutation equivariant, which is what node labels without an order need. The structure
goes into the model in one of three places:

- **the mask**: :func:`adjacency_mask` lets each node attend only to itself and its neighbours, which makes
  an attention layer a graph attention layer (one round of message passing);
- **the tokens**: :func:`laplacian_eigenvectors`, the eigenvectors of the graph Laplacian, give each node
  coordinates that play the part of positions (Dwivedi and Bresson, 2020);
- **the scores**: :class:`DistanceBias` adds a learned number per head and per shortest-path distance,
  b_ij = b[d(i, j)], to the attention scores (Graphormer's spatial encoding, Ying et al., 2021), from
  :func:`shortest_path_distances`.

:class:`GraphTransformer` puts these together; :func:`two_ring_graphs` generates the chapter's task: are
two marked nodes on the same ring? Message passing over a few hops cannot tell.

Batches of graphs of different sizes are padded to N nodes: ``adjacency`` (B, N, N) and ``nodes``
(B, N), True for a real node.

Chapter: beyond text (15).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from . import _checks
from .blocks import EncoderStack, masked_mean

__all__ = [
    "adjacency_from_edges",
    "adjacency_mask",
    "laplacian",
    "laplacian_eigenvectors",
    "shortest_path_distances",
    "UNREACHABLE",
    "DistanceBias",
    "GraphBatch",
    "two_ring_graphs",
    "MASKS",
    "ENCODINGS",
    "GraphTransformer",
]

UNREACHABLE = -1  # the distance between nodes of different connected components


def _check_adjacency(adjacency, *, batched: bool | None = None) -> torch.Tensor:
    """A square, symmetric adjacency matrix (..., N, N) of bools or 0/1 numbers, returned as bool."""
    _checks.tensor("adjacency", adjacency)
    if adjacency.dim() < 2 or adjacency.shape[-1] != adjacency.shape[-2]:
        raise ValueError(
            f"adjacency must be a square matrix (N, N) or a batch (B, N, N), "
            f"got shape {_checks.shape_str(adjacency.shape)}"
        )
    if batched is True and adjacency.dim() != 3:
        raise ValueError(f"adjacency must be a batch (B, N, N), got shape {_checks.shape_str(adjacency.shape)}")
    if batched is False and adjacency.dim() != 2:
        raise ValueError(f"adjacency must be one graph (N, N), got shape {_checks.shape_str(adjacency.shape)}")
    if adjacency.dtype != torch.bool:
        if adjacency.is_complex():
            raise TypeError(f"adjacency must hold booleans or 0/1 entries, got dtype {adjacency.dtype}")
        other = ~torch.isin(adjacency, torch.tensor([0, 1], dtype=adjacency.dtype, device=adjacency.device))
        if other.any():
            raise ValueError(
                f"adjacency must hold booleans or 0/1 entries, got {adjacency[other][0].item()} at "
                f"{tuple(other.nonzero()[0].tolist())}"
            )
        adjacency = adjacency != 0
    asymmetric = adjacency != adjacency.transpose(-2, -1)
    if asymmetric.any():
        index = tuple(asymmetric.nonzero()[0].tolist())
        raise ValueError(
            f"adjacency must be symmetric (an undirected graph): adjacency[i, j] == adjacency[j, i], "
            f"got adjacency{list(index)} = {bool(adjacency[index])} but its mirror is "
            f"{bool(adjacency[index[:-2] + index[:-3:-1]])}"
        )
    return adjacency


def adjacency_from_edges(edges, n_nodes: int) -> torch.Tensor:
    """The symmetric boolean adjacency matrix of an undirected graph given as a list of edges (i, j).

    Shapes:
        edges:  (E, 2) node indices in [0, n_nodes), a tensor or a list of pairs
        return: (N, N) bool, no self-loops unless an edge (i, i) is listed

    Chapter: beyond text.
    """
    n = _checks.positive_int("n_nodes", n_nodes)
    e = _checks.as_integers("edges", edges, what="a list of pairs (i, j) of node indices or a tensor (E, 2)")
    if e.numel() == 0:
        e = e.reshape(0, 2)
    if e.dim() != 2 or e.shape[1] != 2:
        raise ValueError(
            f"edges must be pairs (i, j) of node indices, shape (E, 2), got shape {_checks.shape_str(e.shape)}"
        )
    if e.numel() and (int(e.min()) < 0 or int(e.max()) >= n):
        raise ValueError(
            f"edges must hold node indices in [0, n_nodes={n}), got values from {int(e.min())} to {int(e.max())}"
        )
    adjacency = torch.zeros(n, n, dtype=torch.bool)
    adjacency[e[:, 0], e[:, 1]] = True
    adjacency[e[:, 1], e[:, 0]] = True
    return adjacency


def adjacency_mask(
    adjacency: torch.Tensor, nodes: torch.Tensor | None = None, *, self_loops: bool = True
) -> torch.Tensor:
    """The attention mask of a graph: node i may attend to node j iff they are neighbours (or i = j).

    With ``self_loops`` each node also attends to itself, as a graph attention layer does (GAT). Padding
    nodes (``nodes`` False) attend to nothing and are attended by nobody.

    Shapes:
        adjacency: (N, N) or (B, N, N), symmetric, bool or 0/1
        nodes:     (B, N) bool, True = a real node (only with a batch)
        return:    the same shape as adjacency, bool, True = may attend

    Chapter: beyond text.
    """
    adjacency = _check_adjacency(adjacency)
    eye = torch.eye(adjacency.shape[-1], dtype=torch.bool, device=adjacency.device)
    mask = adjacency | eye if self_loops else adjacency & ~eye
    if nodes is not None:
        mask = mask & _pair_mask(nodes, adjacency)
    return mask


def _pair_mask(nodes: torch.Tensor, adjacency: torch.Tensor) -> torch.Tensor:
    """(B, N, N): True where both nodes are real."""
    _checks.tensor("nodes", nodes, ndim=2, dtype=torch.bool)
    if adjacency.dim() != 3 or tuple(nodes.shape) != tuple(adjacency.shape[:2]):
        raise ValueError(
            f"nodes must have shape (B, N) = {_checks.shape_str(adjacency.shape[:2])} for adjacency "
            f"{_checks.shape_str(adjacency.shape)}, got {_checks.shape_str(nodes.shape)}"
        )
    return nodes[:, :, None] & nodes[:, None, :]  # (B, N, N)


def laplacian(adjacency: torch.Tensor, *, normalized: bool = True) -> torch.Tensor:
    r"""The graph Laplacian L = D - A, or the normalized L = I - D^{-1/2} A D^{-1/2} (float64).

    D is the diagonal matrix of the degrees. An isolated node has a zero row and column in the
    normalized Laplacian (the convention of networkx). Self-loops are ignored.

    Shapes:
        adjacency: (N, N) or (B, N, N)
        return:    the same shape, float64

    Chapter: beyond text.
    """
    adjacency = _check_adjacency(adjacency)
    eye = torch.eye(adjacency.shape[-1], dtype=torch.bool, device=adjacency.device)
    A = (adjacency & ~eye).to(torch.float64)  # (..., N, N)
    degree = A.sum(dim=-1)  # (..., N)
    if not normalized:
        return torch.diag_embed(degree) - A
    inv_sqrt = torch.where(degree > 0, degree.clamp(min=1.0).rsqrt(), torch.zeros_like(degree))  # (..., N)
    return torch.diag_embed((degree > 0).to(torch.float64)) - inv_sqrt[..., :, None] * A * inv_sqrt[..., None, :]


def laplacian_eigenvectors(adjacency: torch.Tensor, k: int, *, normalized: bool = True):
    """The eigenvectors of the k smallest eigenvalues of the Laplacian after the first: positions for nodes.

    The first eigenvector (eigenvalue 0, constant on a connected graph up to the degree weighting) says
    nothing about where a node is and is skipped. The next ones vary slowly over the graph, like the low
    frequencies of a sinusoidal encoding over a sequence (on a ring they are exactly sines and cosines).
    Each is defined up to its sign (and a basis of an eigenspace of a repeated eigenvalue is not unique),
    which is why they are trained with random sign flips. A graph with at most k nodes after the first
    gets zero columns for the missing ones.

    Shapes:
        adjacency: (N, N), one graph
        return:    eigenvectors (N, k), float64, orthonormal columns; eigenvalues (k,) in increasing order

    Chapter: beyond text.
    """
    adjacency = _check_adjacency(adjacency, batched=False)
    k = _checks.positive_int("k", k)
    values, vectors = torch.linalg.eigh(laplacian(adjacency, normalized=normalized))  # ascending, (N,), (N, N)
    values, vectors = values[1 : k + 1], vectors[:, 1 : k + 1]  # skip the first
    n_missing = k - values.shape[0]
    if n_missing:
        vectors = torch.cat([vectors, vectors.new_zeros(vectors.shape[0], n_missing)], dim=1)  # (N, k)
        values = torch.cat([values, values.new_zeros(n_missing)])  # (k,)
    return vectors, values


def shortest_path_distances(adjacency: torch.Tensor) -> torch.Tensor:
    """The number of edges on a shortest path between every two nodes; ``UNREACHABLE`` (-1) if there is none.

    Breadth-first search from every node at once: the nodes first reached after s steps are at distance s.
    The distance of a node to itself is 0.

    Shapes:
        adjacency: (N, N) or (B, N, N)
        return:    the same shape, int64

    Chapter: beyond text.
    """
    adjacency = _check_adjacency(adjacency)
    N = adjacency.shape[-1]
    eye = torch.eye(N, dtype=torch.bool, device=adjacency.device)
    A = (adjacency & ~eye).to(torch.float32)  # (..., N, N)
    dist = torch.full(adjacency.shape, UNREACHABLE, dtype=torch.long, device=adjacency.device)
    reached = eye.expand_as(adjacency).clone()  # (..., N, N): row i = the nodes reached from i so far
    dist[reached] = 0
    for step in range(1, N):
        frontier = ((reached.to(torch.float32) @ A) > 0) & ~reached  # one more edge from what was reached
        if not frontier.any():
            break
        dist[frontier] = step
        reached |= frontier
    return dist


class DistanceBias(nn.Module):
    """A learned score bias per head and per shortest-path distance: b_ij = table[h, d(i, j)].

    Distances above ``max_distance`` share the last entry; unreachable pairs (-1) have an entry of their
    own. This is Graphormer's spatial encoding: attention can learn to prefer near or far nodes, in each
    head separately, on any graph size. The table starts at zero (no preference).

    Shapes:
        distances: (N, N) or (B, N, N) int, from :func:`shortest_path_distances`
        return:    (B, H, N, N) (or (H, N, N) for one graph), float

    Chapter: beyond text.
    """

    def __init__(self, n_heads: int, max_distance: int):
        super().__init__()
        self.n_heads = _checks.positive_int("n_heads", n_heads)
        self.max_distance = _checks.positive_int("max_distance", max_distance)
        self.table = nn.Parameter(torch.zeros(n_heads, max_distance + 2))  # distances 0..max, then unreachable

    def forward(self, distances: torch.Tensor) -> torch.Tensor:
        _checks.tensor("distances", distances, min_ndim=2)
        if distances.is_floating_point() or distances.is_complex() or distances.dtype == torch.bool:
            raise TypeError(
                f"distances must be integers (shortest-path lengths, -1 = unreachable), got dtype {distances.dtype}"
            )
        if distances.numel() and int(distances.min()) < UNREACHABLE:
            raise ValueError(
                f"distances must be shortest-path lengths >= 0 or {UNREACHABLE} (unreachable), got "
                f"{int(distances.min())}"
            )
        index = distances.clamp(max=self.max_distance)  # (..., N, N)
        index = torch.where(distances < 0, self.max_distance + 1, index)  # unreachable: the last entry
        bias = self.table[:, index]  # (H, ..., N, N)
        return bias.movedim(0, -3)  # (..., H, N, N)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, max_distance={self.max_distance}"


@dataclass
class GraphBatch:
    """Graphs padded to N nodes, with a type per node and a label per graph.

    Shapes:
        adjacency: (B, N, N) bool
        nodes:     (B, N) bool, True = a real node
        features:  (B, N) int64, the type of each node (0 on padding)
        labels:    (B,) int64
        n_nodes:   (B,) int64, the number of real nodes of each graph
    """

    adjacency: torch.Tensor
    nodes: torch.Tensor
    features: torch.Tensor
    labels: torch.Tensor
    n_nodes: torch.Tensor

    def __len__(self) -> int:
        return self.labels.shape[0]

    def __getitem__(self, index) -> GraphBatch:
        return GraphBatch(
            self.adjacency[index], self.nodes[index], self.features[index], self.labels[index], self.n_nodes[index]
        )


def _ring(nodes: list[int]) -> list[tuple[int, int]]:
    return [(nodes[i], nodes[(i + 1) % len(nodes)]) for i in range(len(nodes))]


def two_ring_graphs(n_graphs: int, ring_sizes=range(10, 15), *, min_gap: int = 5, seed: int = 0) -> GraphBatch:
    """Two rings of nodes with two marked nodes: label 1 if the marks are on the same ring, 0 if not.

    Each graph is two rings of the same size m, drawn uniformly from ``ring_sizes`` (a list or range of the
    sizes allowed, each >= max(3, 2 * ``min_gap``), so that test graphs can have sizes no training graph
    has): 2m nodes, every one with exactly two neighbours and on a ring of m nodes, whatever the label, so
    the size of a mark's ring says nothing about the answer. Two nodes are marked (type 1, the others
    type 0): both on the first ring, at least ``min_gap`` edges apart both ways round (label 1), or one on
    each ring (label 0). Node numbers are shuffled, so that the order of the tokens says nothing.

    A model that sees only L < min_gap hops around each node (L rounds of message passing) cannot
    answer: with m >= 2L + 1 every node's L-hop view is a path of 2L + 1 nodes holding at most one mark,
    and both kinds of graph of a given size have the same collection of such views.

    Shapes: see :class:`GraphBatch`; padded to N = 2 max(ring_sizes) nodes.

    Chapter: beyond text.
    """
    n_graphs = _checks.positive_int("n_graphs", n_graphs)
    min_gap = _checks.positive_int("min_gap", min_gap)
    smallest = max(3, 2 * min_gap)  # a ring, with room for two marks min_gap apart both ways round
    sizes = _check_ring_sizes(ring_sizes, smallest)
    g = torch.Generator().manual_seed(_checks.positive_int("seed", seed, minimum=0))
    N = 2 * int(sizes.max())
    adjacency = torch.zeros(n_graphs, N, N, dtype=torch.bool)
    nodes = torch.zeros(n_graphs, N, dtype=torch.bool)
    features = torch.zeros(n_graphs, N, dtype=torch.long)
    labels = torch.zeros(n_graphs, dtype=torch.long)
    ring = sizes[torch.randint(len(sizes), (n_graphs,), generator=g)]  # (B,) m of each graph

    def draw(lo: int, hi: int) -> int:  # uniform in [lo, hi]
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    for b in range(n_graphs):
        m = int(ring[b])
        order = torch.randperm(2 * m, generator=g).tolist()  # node numbers in random order
        first, second = order[:m], order[m:]
        start = draw(0, m - 1)
        same = b % 2 == 0
        if same:  # both marks on the first ring, at least min_gap edges apart both ways round
            marks = [first[start], first[(start + draw(min_gap, m - min_gap)) % m]]
        else:
            marks = [first[start], second[draw(0, m - 1)]]
        adjacency[b, : 2 * m, : 2 * m] = adjacency_from_edges(_ring(first) + _ring(second), 2 * m)
        nodes[b, : 2 * m] = True
        features[b, marks] = 1
        labels[b] = int(same)
    shuffle = torch.randperm(n_graphs, generator=g)
    return GraphBatch(adjacency[shuffle], nodes[shuffle], features[shuffle], labels[shuffle], 2 * ring[shuffle])


MASKS = ("full", "adjacency")
ENCODINGS = ("none", "laplacian", "distance")


class GraphTransformer(nn.Module):
    """A transformer over the nodes of a graph, told the graph's structure through its mask, its tokens or its scores.

    Each node's token is the embedding of its type. ``mask`` says who attends to whom:

    - ``"full"``: every node attends to every node of its graph (the graph's edges play no part);
    - ``"adjacency"``: each node attends to itself and its neighbours (:func:`adjacency_mask`), a graph
      attention network: one hop per layer.

    ``encoding`` says what else the model is told:

    - ``"none"``: nothing;
    - ``"laplacian"``: the first ``k`` Laplacian eigenvectors, mapped to D and added to the tokens
      (passed to ``forward`` as ``eigenvectors``, see :func:`laplacian_eigenvectors`);
    - ``"distance"``: a :class:`DistanceBias` on the scores of every layer (passed as ``distances``).

    Then an :class:`~attnbook.blocks.EncoderStack`, the mean of the real nodes' outputs, a linear head.

    Shapes:
        features:     (B, N) int node types; adjacency: (B, N, N) bool; nodes: (B, N) bool
        eigenvectors: (B, N, k) (``"laplacian"``); distances: (B, N, N) int (``"distance"``)
        return:       logits (B, n_classes); with ``return_weights=True`` also a list of (B, H, N, N)

    Chapter: beyond text.
    """

    def __init__(
        self,
        mask: str = "full",
        encoding: str = "none",
        *,
        n_node_types: int = 2,
        d_model: int = 32,
        n_heads: int = 4,
        n_layers: int = 2,
        n_classes: int = 2,
        k: int = 4,
        max_distance: int = 10,
        d_ff: int | None = None,
    ):
        super().__init__()
        for name, value, options in (("mask", mask, MASKS), ("encoding", encoding, ENCODINGS)):
            if value not in options:
                raise ValueError(f"{name} must be one of {', '.join(repr(o) for o in options)}, got {value!r}")
        self.mask, self.encoding = mask, encoding
        self.k = _checks.positive_int("k", k)
        self.n_node_types = _checks.positive_int("n_node_types", n_node_types)
        self.embed = nn.Embedding(n_node_types, d_model)
        self.eigen = nn.Linear(k, d_model) if encoding == "laplacian" else None
        self.distance_bias = DistanceBias(n_heads, max_distance) if encoding == "distance" else None
        self.encoder = EncoderStack(d_model, n_heads, n_layers, d_ff)
        self.head = nn.Linear(d_model, _checks.positive_int("n_classes", n_classes))

    def forward(
        self,
        features: torch.Tensor,
        adjacency: torch.Tensor,
        nodes: torch.Tensor,
        *,
        eigenvectors: torch.Tensor | None = None,
        distances: torch.Tensor | None = None,
        return_weights: bool = False,
    ):
        adjacency = _check_adjacency(adjacency, batched=True)
        B, N, _ = adjacency.shape
        pairs = _pair_mask(nodes, adjacency)  # (B, N, N): both nodes real
        _checks.token_ids("features", features, self.n_node_types, ndim=2, what="node types")
        if tuple(features.shape) != (B, N):
            raise ValueError(
                f"features must have shape (B, N) = {_checks.shape_str((B, N))} (one type per node), "
                f"got {_checks.shape_str(features.shape)}"
            )
        x = self.embed(features)  # (B, N, D)
        mask = pairs if self.mask == "full" else adjacency_mask(adjacency, nodes)  # (B, N, N)
        bias = None
        if self.encoding == "laplacian":
            if eigenvectors is None:
                raise ValueError("encoding='laplacian' needs eigenvectors (B, N, k) from laplacian_eigenvectors")
            _checks.tensor("eigenvectors", eigenvectors, ndim=3, floating=True)
            if tuple(eigenvectors.shape) != (B, N, self.k):
                raise ValueError(
                    f"eigenvectors must have shape (B, N, k) = {_checks.shape_str((B, N, self.k))}, "
                    f"got {_checks.shape_str(eigenvectors.shape)}"
                )
            x = x + self.eigen(_checks.like("eigenvectors", eigenvectors, self))  # (B, N, D)
        if self.encoding == "distance":
            if distances is None:
                raise ValueError("encoding='distance' needs distances (B, N, N) from shortest_path_distances")
            _checks.tensor("distances", distances)
            if tuple(distances.shape) != (B, N, N):
                raise ValueError(
                    f"distances must have shape (B, N, N) = {_checks.shape_str((B, N, N))}, "
                    f"got {_checks.shape_str(distances.shape)}"
                )
            bias = self.distance_bias(distances).to(x.dtype)  # (B, H, N, N)
        out = self.encoder(x, mask, score_bias=bias, return_weights=return_weights)
        h, weights = out if return_weights else (out, None)  # (B, N, D)
        logits = self.head(masked_mean(h, nodes))  # (B, n_classes)
        return (logits, weights) if return_weights else logits


def _check_ring_sizes(ring_sizes, smallest: int) -> torch.Tensor:
    """The ring sizes allowed, a non-empty list of integers >= ``smallest``, as a (K,) tensor without repeats."""
    what = "a list or range of ring sizes (integers)"
    sizes = _checks.as_integers("ring_sizes", ring_sizes, what=what)
    if sizes.dim() != 1 or sizes.numel() == 0:
        raise ValueError(f"ring_sizes must be {what}, at least one, got {ring_sizes!r}")
    if int(sizes.min()) < smallest:
        raise ValueError(
            f"ring_sizes must be at least max(3, 2 * min_gap) = {smallest} (a ring with room for two marks "
            f"min_gap apart both ways round), got {int(sizes.min())}"
        )
    return sizes.unique()
