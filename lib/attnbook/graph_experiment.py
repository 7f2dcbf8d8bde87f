"""The training recipe of the graphs page's experiment, apart from the models (as :mod:`vit_experiment` is for
the vision transformer):

- :func:`structural_inputs`: the Laplacian eigenvectors and the shortest-path distances of a batch of
  graphs, what :class:`~attnbook.graphs.GraphTransformer` reads for its ``"laplacian"`` and ``"distance"``
  encodings;
- :func:`fit_graph_model`: AdamW and cross-entropy over random batches of graphs, with a warmup and a
  cosine decay, each eigenvector's sign flipped at random in every batch (an eigenvector is defined only
  up to its sign, so the model must not rely on one);
- :func:`graph_logits` and :func:`accuracy`.

The input checks are at the end of the module.

Chapter: beyond text (15), the graphs page.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import _checks, train
from .graphs import GraphBatch, laplacian_eigenvectors, shortest_path_distances

__all__ = ["structural_inputs", "graph_logits", "fit_graph_model", "accuracy"]


def structural_inputs(graphs: GraphBatch, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``k`` Laplacian eigenvectors of every graph (after the constant one), zero on the padding,
    and the shortest-path distances between every two nodes.

    Shapes:
        return: eigenvectors (B, N, k) float32, distances (B, N, N) int64 (-1: no path)

    Chapter: beyond text (graphs).
    """
    _check_graphs(graphs)
    k = _checks.positive_int("k", k)
    B, N = graphs.nodes.shape
    eigenvectors = torch.zeros(B, N, k)
    for b, n in enumerate(graphs.n_nodes.tolist()):
        eigenvectors[b, :n] = laplacian_eigenvectors(graphs.adjacency[b, :n, :n], k)[0].float()  # (n, k)
    return eigenvectors, shortest_path_distances(graphs.adjacency)


def graph_logits(model: nn.Module, graphs: GraphBatch, eigenvectors: torch.Tensor, distances: torch.Tensor):
    """The model's logits (B, n_classes) for a batch of graphs and their structural inputs, on its device.

    Chapter: beyond text (graphs).
    """
    _check_inputs(model, graphs, eigenvectors, distances)
    return _logits(model, graphs, eigenvectors, distances)


def _logits(model, graphs, eigenvectors, distances):
    device = next(model.parameters()).device
    inputs = (graphs.features, graphs.adjacency, graphs.nodes)
    return model(
        *(x.to(device) for x in inputs), eigenvectors=eigenvectors.to(device), distances=distances.to(device)
    )  # (B, n_classes)


def fit_graph_model(
    model: nn.Module,
    graphs: GraphBatch,
    eigenvectors: torch.Tensor,
    distances: torch.Tensor,
    *,
    steps: int = 300,
    batch_size: int = 64,
    lr: float = 3e-3,
    warmup: int = 30,
    seed: int = 0,
    desc: str = "training",
    quiet: bool = False,
) -> train.History:
    """Train a graph classifier on random batches of ``graphs`` (drawn with replacement) with AdamW,
    cross-entropy, a linear warmup over ``warmup`` steps and a cosine decay; every batch flips the sign of
    each graph's eigenvectors at random. Returns :func:`attnbook.train.fit`'s History.

    Chapter: beyond text (graphs).
    """
    _check_inputs(model, graphs, eigenvectors, distances)
    steps = _checks.positive_int("steps", steps)
    batch_size = _checks.positive_int("batch_size", batch_size)
    gen = torch.Generator().manual_seed(_checks.positive_int("seed", seed, minimum=0))
    k = eigenvectors.shape[-1]

    def batch(_step: int):
        idx = torch.randint(len(graphs), (batch_size,), generator=gen)
        signs = torch.randint(0, 2, (batch_size, 1, k), generator=gen) * 2 - 1  # (b, 1, k): +1 or -1
        return graphs[idx], eigenvectors[idx] * signs, distances[idx]

    def loss_fn(m, b):
        logits = _logits(m, *b)  # (b, n_classes)
        return F.cross_entropy(logits, b[0].labels.to(logits.device))

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = train.cosine_schedule(steps, warmup_steps=warmup)
    return train.fit(model, batch, loss_fn, steps=steps, optimizer=optimizer, schedule=schedule, desc=desc, quiet=quiet)


def accuracy(model: nn.Module, graphs: GraphBatch, eigenvectors: torch.Tensor, distances: torch.Tensor) -> float:
    """The fraction of ``graphs`` whose arg-max logit is their label; in eval mode, without gradients.

    Chapter: beyond text (graphs).
    """
    _check_inputs(model, graphs, eigenvectors, distances)
    model.eval()
    with torch.no_grad():
        predicted = _logits(model, graphs, eigenvectors, distances).argmax(-1).cpu()  # (B,)
    return (predicted == graphs.labels).float().mean().item()


# --- input checks ------------------------------------------------------------------------------------


def _check_graphs(graphs) -> None:
    if not isinstance(graphs, GraphBatch):
        raise TypeError(f"graphs must be a graphs.GraphBatch (from two_ring_graphs), got {type(graphs).__name__}")


def _check_inputs(model, graphs, eigenvectors, distances) -> None:
    """A model, a batch of B graphs padded to N nodes, eigenvectors (B, N, k) and distances (B, N, N)."""
    _checks.module("model", model)
    _check_graphs(graphs)
    B, N = graphs.nodes.shape
    _checks.tensor("eigenvectors", eigenvectors, ndim=3, floating=True)
    _checks.tensor("distances", distances, ndim=3)
    if tuple(eigenvectors.shape[:2]) != (B, N):
        raise ValueError(
            f"eigenvectors must have shape (B, N, k) with (B, N) = ({B}, {N}) as graphs, "
            f"got {_checks.shape_str(eigenvectors.shape)}"
        )
    if tuple(distances.shape) != (B, N, N):
        raise ValueError(
            f"distances must have shape (B, N, N) = ({B}, {N}, {N}) as graphs, got {_checks.shape_str(distances.shape)}"
        )
