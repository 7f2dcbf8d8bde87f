"""Checkers of the chapter on transformers beyond text: right answers pass, usual mistakes get their hint."""

import torch
import torch.nn.functional as F
from attnbook import audio, graphs
from attnbook.exercises import beyond_text as ex
from exercise_helpers import assert_fails_with, stub


def test_masked_mean_checker():
    def right(h, keep):
        real = keep.unsqueeze(-1)  # (B, n, 1)
        return h.masked_fill(~real, 0.0).sum(1) / real.sum(1).clamp(min=1)

    def nan_for_empty_or_nan_padding(h, keep):
        w = keep.unsqueeze(-1).to(h.dtype)  # (B, n, 1)
        return (h * w).sum(1) / w.sum(1)

    assert ex.check_masked_mean(right)
    assert ex.check_masked_mean(
        lambda h, keep: torch.stack([x[k].mean(0) if k.any() else x.new_zeros(x.shape[-1]) for x, k in zip(h, keep)])
    )
    assert_fails_with(ex.check_masked_mean, nan_for_empty_or_nan_padding, "no real element")
    assert not ex.check_masked_mean(stub)
    assert_fails_with(ex.check_masked_mean, lambda h, keep: h.mean(1), "padding is averaged in")
    assert_fails_with(ex.check_masked_mean, lambda h, keep: (h * keep.unsqueeze(-1)).sum(1) / h.shape[1], "count")
    assert_fails_with(ex.check_masked_mean, lambda h, keep: (h * keep.unsqueeze(-1)).sum(1), "the sum")
    assert_fails_with(ex.check_masked_mean, lambda h, keep: (h * keep).sum(1) / keep.sum(1), "unsqueeze")


def test_adjacency_mask_checker():
    def right(edges, n):
        mask = torch.eye(n, dtype=torch.bool)
        for i, j in edges:
            mask[i, j] = mask[j, i] = True
        return mask

    assert ex.check_adjacency_mask(right)
    assert ex.check_adjacency_mask(lambda e, n: graphs.adjacency_mask(graphs.adjacency_from_edges(e, n)))
    assert not ex.check_adjacency_mask(stub)

    def no_loops(edges, n):
        return right(edges, n) & ~torch.eye(n, dtype=torch.bool)

    def one_way(edges, n):
        mask = torch.eye(n, dtype=torch.bool)
        for i, j in edges:
            mask[i, j] = True
        return mask

    assert_fails_with(ex.check_adjacency_mask, no_loops, "attend to itself")
    assert_fails_with(ex.check_adjacency_mask, one_way, "undirected")
    assert_fails_with(ex.check_adjacency_mask, lambda e, n: ~right(e, n), "inverted")
    assert_fails_with(ex.check_adjacency_mask, lambda e, n: right(e, n).float(), "boolean")
    assert_fails_with(ex.check_adjacency_mask, lambda e, n: torch.ones(n, n, dtype=torch.bool), "on test case 1")


def test_shortest_paths_checker():
    def bfs(A):
        n = A.shape[0]
        d = torch.full((n, n), -1, dtype=torch.long)
        for s in range(n):
            d[s, s], frontier = 0, [s]
            while frontier:
                nxt = []
                for u in frontier:
                    for v in A[u].nonzero().flatten().tolist():
                        if d[s, v] < 0:
                            d[s, v] = d[s, u] + 1
                            nxt.append(v)
                frontier = nxt
        return d

    assert ex.check_shortest_paths(bfs)
    assert ex.check_shortest_paths(graphs.shortest_path_distances)
    assert not ex.check_shortest_paths(stub)
    assert_fails_with(ex.check_shortest_paths, lambda A: bfs(A).clamp(min=0), "not 0")
    assert_fails_with(ex.check_shortest_paths, lambda A: bfs(A).masked_fill(bfs(A) < 0, A.shape[0]), "not N")
    assert_fails_with(ex.check_shortest_paths, lambda A: torch.where(bfs(A) >= 0, bfs(A) + 1, -1), "counts edges")

    def neighbours_only(A):
        d = torch.where(A, 1, -1)
        d.fill_diagonal_(0)
        return d

    assert_fails_with(ex.check_shortest_paths, neighbours_only, "breadth-first")
    assert_fails_with(
        ex.check_shortest_paths,
        lambda A: bfs(A).masked_fill(torch.eye(A.shape[0], dtype=torch.bool), -1),
        "itself is 0",
    )


def test_spectrogram_shape_checker():
    def measured(n, n_fft, hop):
        return tuple(audio.spectrogram(torch.randn(n), n_fft, hop).shape)

    assert ex.check_spectrogram_shape(lambda n, f, h: (f // 2 + 1, 1 + n // h))
    assert ex.check_spectrogram_shape(measured)
    assert not ex.check_spectrogram_shape(stub)
    assert_fails_with(ex.check_spectrogram_shape, lambda n, f, h: (f, 1 + n // h), "symmetric")
    assert_fails_with(ex.check_spectrogram_shape, lambda n, f, h: (f // 2, 1 + n // h), "both included")
    assert_fails_with(ex.check_spectrogram_shape, lambda n, f, h: (f // 2 + 1, 1 + (n - f) // h), "center=True")
    assert_fails_with(ex.check_spectrogram_shape, lambda n, f, h: (f // 2 + 1, n // h), "frame at sample 0")
    assert_fails_with(ex.check_spectrogram_shape, lambda n, f, h: (1 + n // h, f // 2 + 1), "in that order")


def test_clip_loss_checker():
    def right(I, T, scale):
        logits = scale * F.normalize(I, dim=-1) @ F.normalize(T, dim=-1).T
        target = torch.arange(I.shape[0])
        return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2

    assert ex.check_clip_loss(right)
    assert not ex.check_clip_loss(stub)

    def one_way(I, T, scale):
        logits = scale * F.normalize(I, dim=-1) @ F.normalize(T, dim=-1).T
        return F.cross_entropy(logits, torch.arange(I.shape[0]))

    def raw(I, T, scale):
        logits = scale * I @ T.T
        target = torch.arange(I.shape[0])
        return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2

    assert_fails_with(ex.check_clip_loss, one_way, "only one direction")
    assert_fails_with(ex.check_clip_loss, raw, "normalise")
    assert_fails_with(ex.check_clip_loss, lambda I, T, s: right(I, T, 1 / s), "divides")
    assert_fails_with(ex.check_clip_loss, lambda I, T, s: 2 * right(I, T, s), "average the two")


def test_agent_mask_checker():
    def right(A, T):
        step = torch.arange(A * T) // A  # token t * A + a is at step t
        return step[None, :] <= step[:, None]

    assert ex.check_agent_mask(right)
    assert not ex.check_agent_mask(stub)

    def agent_major(A, T):
        step = torch.arange(A * T) % T
        return step[None, :] <= step[:, None]

    def strict(A, T):
        step = torch.arange(A * T) // A
        return (step[None, :] < step[:, None]) | torch.eye(A * T, dtype=torch.bool)

    def own(A, T):
        agent = torch.arange(A * T) % A
        return right(A, T) & (agent[None, :] == agent[:, None])

    assert_fails_with(ex.check_agent_mask, agent_major, "time step by time step")
    assert_fails_with(ex.check_agent_mask, strict, "same step")
    assert_fails_with(ex.check_agent_mask, own, "other agents")
    assert_fails_with(
        ex.check_agent_mask, lambda A, T: torch.ones(A * T, A * T, dtype=torch.bool).tril(), "plain causal mask"
    )
    assert_fails_with(ex.check_agent_mask, lambda A, T: ~right(A, T), "inverted")
    assert_fails_with(ex.check_agent_mask, lambda A, T: right(A, T).long(), "boolean")
