"""Checkers for the exercises of the chapter on transformers beyond text (sets, graphs, sound, modalities)."""

from __future__ import annotations

import torch

from .. import audio, blocks, contrastive, graphs
from . import ExerciseFailed, Mistake, Result, check_function, clone_args

__all__ = [
    "check_masked_mean",
    "check_adjacency_mask",
    "check_shortest_paths",
    "check_spectrogram_shape",
    "check_clip_loss",
    "check_agent_mask",
]


def _require_bool(fn, case, exercise: str) -> None:
    """A mask of numbers equal to 0/1 would compare equal to the right one: say that masks are boolean."""
    try:
        out = fn(*clone_args(case))
    except Exception:  # not attempted, or an error: check_function reports it
        return
    if isinstance(out, torch.Tensor) and out.dtype != torch.bool:
        raise ExerciseFailed(
            exercise,
            f"the mask must be boolean (True = may attend), got dtype {out.dtype}: "
            f"build it with dtype=torch.bool or from comparisons.",
        )


def check_masked_mean(fn) -> Result:
    """``fn(h, keep)``: h (B, n, D), keep (B, n) bool; the (B, D) mean of each set over its real elements."""
    g = torch.Generator().manual_seed(15)
    cases = []
    for sizes, n, d in (([3, 1, 4], 4, 5), ([2, 2], 3, 2), ([5], 5, 3)):  # the last set has no padding
        keep = torch.arange(n) < torch.tensor(sizes)[:, None]  # (B, n)
        h = torch.randn(len(sizes), n, d, generator=g, dtype=torch.float64)
        cases.append((h, keep))
    keep = torch.tensor([[True, False, True], [False, False, False]])  # the second set is empty
    h = torch.randn(2, 3, 4, generator=g, dtype=torch.float64)
    h[0, 1] = float("nan")  # whatever the padding holds
    cases.append((h, keep))

    def weights(keep, h):
        return keep.unsqueeze(-1).to(h.dtype)  # (B, n, 1)

    mistakes = [
        Mistake(
            "the padding is averaged in: the mean must run over the real elements only (keep is True), "
            "so multiply by the mask before summing and divide by the number of real elements.",
            lambda h, keep: h.mean(dim=1),
        ),
        Mistake(
            "the padding is left out of the sum but not out of the count: divide by the number of real "
            "elements of each set, keep.sum(1), not by n.",
            lambda h, keep: (h * weights(keep, h)).sum(1) / h.shape[1],
        ),
        Mistake(
            "that is the sum of the real elements; divide by how many there are to get their mean.",
            lambda h, keep: (h * weights(keep, h)).sum(1),
        ),
        Mistake(
            "NaN comes out for a set whose padding holds a NaN (0 * NaN is NaN) or that has no real element "
            "(0 / 0): zero the padding with masked_fill, and divide by the count clamped to at least 1, so that "
            "an empty set gives zeros, as blocks.masked_mean does.",
            lambda h, keep: (h * weights(keep, h)).sum(1) / weights(keep, h).sum(1),
        ),
    ]
    return check_function(
        fn,
        exercise="the mean of a padded set",
        reference=blocks.masked_mean,
        cases=cases,
        mistakes=mistakes,
        error_hints=[
            (
                "must match the size of tensor",
                "keep is (B, n) and h is (B, n, D): give keep a last axis, "
                "keep.unsqueeze(-1), so that it multiplies every feature of an element.",
            ),
        ],
        gradients=True,
    )


def _reference_mask(edges, n_nodes):
    return graphs.adjacency_mask(graphs.adjacency_from_edges(edges, n_nodes))


def check_adjacency_mask(fn) -> Result:
    """``fn(edges, n_nodes)``: the (N, N) boolean attention mask of an undirected graph, self-loops included."""
    cases = [
        ([(0, 1), (1, 2), (2, 3)], 4),  # a path
        ([(0, 1), (1, 2), (2, 0), (3, 4)], 6),  # a triangle, an edge, an isolated node
        ([(4, 0), (0, 2), (2, 4), (1, 3)], 5),  # edges listed with the larger node first
    ]

    def one_way(edges, n):
        A = torch.zeros(n, n, dtype=torch.bool)
        for i, j in edges:
            A[i, j] = True
        return A | torch.eye(n, dtype=torch.bool)

    mistakes = [
        Mistake(
            "each node must also attend to itself (a self-loop on the diagonal), as in a graph attention "
            "layer: without it a node's own features are lost after one layer, and an isolated node attends "
            "to nothing.",
            lambda e, n: graphs.adjacency_mask(graphs.adjacency_from_edges(e, n), self_loops=False),
        ),
        Mistake(
            "the graph is undirected: an edge (i, j) lets i attend to j *and* j attend to i, so set both "
            "mask[i, j] and mask[j, i].",
            one_way,
        ),
        Mistake(
            "the mask is inverted: in this book (and in F.scaled_dot_product_attention) True means 'may attend'.",
            lambda e, n: ~_reference_mask(e, n),
        ),
    ]
    _require_bool(fn, cases[0], "adjacency mask")
    return check_function(fn, exercise="adjacency mask", reference=_reference_mask, cases=cases, mistakes=mistakes)


def _ring(n):
    return graphs.adjacency_from_edges([(i, (i + 1) % n) for i in range(n)], n)


def check_shortest_paths(fn) -> Result:
    """``fn(adjacency)``: (N, N) shortest-path lengths in edges, 0 on the diagonal, -1 between components."""
    two_parts = torch.zeros(7, 7, dtype=torch.bool)
    two_parts[:4, :4] = graphs.adjacency_from_edges([(0, 1), (1, 2), (2, 3)], 4)
    two_parts[4:, 4:] = _ring(3)
    tree = graphs.adjacency_from_edges([(0, 1), (0, 2), (1, 3), (1, 4), (2, 5)], 6)
    cases = [(_ring(6),), (tree,), (two_parts,)]
    reference = graphs.shortest_path_distances

    def unreachable_as(value):
        return lambda A: reference(A).masked_fill(reference(A) < 0, value)

    def one_hop_only(A):
        d = A.long()
        d.fill_diagonal_(0)
        return d.masked_fill(~A & ~torch.eye(A.shape[0], dtype=torch.bool), -1)

    mistakes = [
        Mistake("nodes in different connected components have no path: give them -1, not 0.", unreachable_as(0)),
        Mistake(
            "nodes in different connected components have no path: give them -1 (graphs.UNREACHABLE), not "
            "N or a large number.",
            unreachable_as(7),
        ),
        Mistake(
            "the distance counts edges, not nodes: neighbours are 1 apart, a node is 0 from itself.",
            lambda A: torch.where(reference(A) >= 0, reference(A) + 1, reference(A)),
        ),
        Mistake(
            "only the neighbours got a distance: keep expanding the frontier, step by step, until no new "
            "node is reached (breadth-first search).",
            one_hop_only,
        ),
        Mistake(
            "the distance of a node to itself is 0.",
            lambda A: reference(A).masked_fill(torch.eye(A.shape[0], dtype=torch.bool), -1),
        ),
    ]
    return check_function(fn, exercise="shortest paths", reference=reference, cases=cases, mistakes=mistakes)


def check_spectrogram_shape(fn) -> Result:
    """``fn(n_samples, n_fft, hop_length)``: (frequency bins, frames) of ``torch.stft`` with center=True."""
    cases = [(2016, 64, 32), (16000, 400, 160), (1000, 256, 100), (48, 16, 4)]

    def reference(n, n_fft, hop):
        return (n_fft // 2 + 1, audio.n_frames(n, hop))

    mistakes = [
        Mistake(
            "a real signal's spectrum is symmetric, so only the frequencies 0 .. n_fft / 2 are kept: "
            "n_fft // 2 + 1 bins, not n_fft.",
            lambda n, f, h: (f, 1 + n // h),
        ),
        Mistake(
            "the bins run from 0 Hz to half the sample rate, both included: n_fft // 2 + 1 of them.",
            lambda n, f, h: (f // 2, 1 + n // h),
        ),
        Mistake(
            "with center=True the signal is padded by n_fft // 2 on both sides, so that frame t is centred "
            "on sample t * hop_length: 1 + n_samples // hop_length frames.",
            lambda n, f, h: (f // 2 + 1, 1 + (n - f) // h),
        ),
        Mistake(
            "there is a frame at sample 0 too: 1 + n_samples // hop_length frames.",
            lambda n, f, h: (f // 2 + 1, n // h),
        ),
        Mistake("the shape is (frequency bins, frames), in that order.", lambda n, f, h: (1 + n // h, f // 2 + 1)),
    ]
    return check_function(fn, exercise="spectrogram shape", reference=reference, cases=cases, mistakes=mistakes)


def check_clip_loss(fn) -> Result:
    """``fn(image_embeddings, text_embeddings, scale)``: CLIP's symmetric contrastive loss (a scalar)."""
    g = torch.Generator().manual_seed(15)

    def pair(B, E):
        return torch.randn(B, E, generator=g, dtype=torch.float64), torch.randn(
            B, E, generator=g, dtype=torch.float64
        ) * 3

    cases = [(*pair(4, 3), 1.0), (*pair(6, 8), 10.0), (*pair(3, 5), 2.5)]
    F = torch.nn.functional

    def one_way(I, T, s):
        logits = contrastive.clip_logits(I, T, s)
        return F.cross_entropy(logits, torch.arange(I.shape[0]))

    def other_way(I, T, s):
        logits = contrastive.clip_logits(I, T, s)
        return F.cross_entropy(logits.T, torch.arange(I.shape[0]))

    def unnormalised(I, T, s):
        logits = s * I @ T.T
        t = torch.arange(I.shape[0])
        return (F.cross_entropy(logits, t) + F.cross_entropy(logits.T, t)) / 2

    def divided(I, T, s):
        return contrastive.clip_loss(I, T, 1 / s)

    def summed(I, T, s):
        return contrastive.clip_loss(I, T, s) * 2

    mistakes = [
        Mistake(
            "only one direction: CLIP averages two cross-entropies, each image choosing among the texts "
            "(rows of the logits) and each text choosing among the images (columns).",
            one_way,
        ),
        Mistake(
            "only one direction: CLIP averages two cross-entropies, each image choosing among the texts "
            "(rows of the logits) and each text choosing among the images (columns).",
            other_way,
        ),
        Mistake(
            "normalise each embedding to length one first (F.normalize(x, dim=-1)): the logits are scaled "
            "cosine similarities, so that the scale alone sets how sharp the softmax is.",
            unnormalised,
        ),
        Mistake("the scale multiplies the cosines (it is 1 / temperature); here it divides them.", divided),
        Mistake("average the two cross-entropies, (loss_images + loss_texts) / 2, rather than adding them.", summed),
    ]
    return check_function(
        fn, exercise="CLIP loss", reference=contrastive.clip_loss, cases=cases, mistakes=mistakes, gradients=True
    )


def agent_mask(n_agents: int, n_steps: int) -> torch.Tensor:
    """The reference: tokens listed time step by time step ((s, a) at index s * A + a); (s, a) may attend to
    (r, b) iff r <= s."""
    step = torch.arange(n_steps).repeat_interleave(n_agents)  # (S * A,): the time step of each token
    return step[None, :] <= step[:, None]  # (S*A, S*A)


def check_agent_mask(fn) -> Result:
    """``fn(n_agents, n_steps)``: the (S*A, S*A) mask of a multi-agent forecaster, tokens listed step by step."""
    cases = [(2, 3), (3, 4), (1, 5), (4, 1)]

    def agent_major(A, S):
        step = torch.arange(S).repeat(A)
        return step[None, :] <= step[:, None]

    def strictly_earlier(A, S):
        step = torch.arange(S).repeat_interleave(A)
        return (step[None, :] < step[:, None]) | torch.eye(A * S, dtype=torch.bool)

    def own_agent_only(A, S):
        agent = torch.arange(A).repeat(S)
        return agent_mask(A, S) & (agent[None, :] == agent[:, None])

    def token_causal(A, S):
        return torch.ones(A * S, A * S, dtype=torch.bool).tril()

    mistakes = [
        Mistake(
            "the tokens are listed time step by time step: token s * A + a is agent a at step s (you listed "
            "them agent by agent).",
            agent_major,
        ),
        Mistake(
            "an agent may also attend to the other agents at the same step (r <= s, not r < s): their "
            "positions at step s are known when forecasting step s + 1.",
            strictly_earlier,
        ),
        Mistake(
            "each agent must also see the other agents (that is what makes the forecast social): allow every "
            "token (r, b) with r <= s, whichever the agent b.",
            own_agent_only,
        ),
        Mistake(
            "a plain causal mask over the token index lets agent 0 at step s miss the other agents at step "
            "s; the rule is on the time steps: r <= s.",
            token_causal,
        ),
        Mistake("the mask is inverted: True means 'may attend'.", lambda A, S: ~agent_mask(A, S)),
    ]
    _require_bool(fn, cases[0], "multi-agent mask")
    return check_function(fn, exercise="multi-agent mask", reference=agent_mask, cases=cases, mistakes=mistakes)
