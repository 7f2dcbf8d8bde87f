"""API property specs: graphs, sound, contrastive learning, LoRA, pretraining and BPE (the harness is in harness.py)."""

import collections
import functools
import itertools
import math
import re

import torch
import torch.nn.functional as F
from attnbook import (
    attribution,
    audio,
    blocks,
    bpe,
    circuits,
    contrastive,
    data,
    graph_experiment,
    graphs,
    interpret,
    lora,
    models,
    pretrain,
    train,
)
from harness import (
    FILES,
    Adjacency,
    Arg,
    Choice,
    Const,
    Counts,
    Edges,
    FilePath,
    Gen,
    Ids,
    Int,
    IntList,
    IntLists,
    Mask,
    Num,
    Obj,
    Tensor,
    Text,
    Texts,
    _module,
    spec,
)
from specs_models import MODEL_VARIANTS, _config
from specs_tools import _garbage_file
from torch import nn

# graphs ---------------------------------------------------------------------------------------------------


def _nx_graph(adjacency):
    """One graph (N, N) (bool or 0/1) as a networkx graph on the nodes 0 .. N-1, self-loops left out."""
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(range(adjacency.shape[-1]))
    graph.add_edges_from((i, j) for i, j in (adjacency != 0).nonzero().tolist() if i < j)
    return graph


def _each_graph(adjacency, f):
    """f applied to every graph (N, N) of a batch (..., N, N), the results stacked back into (..., ...)."""
    graphs = adjacency.reshape(-1, *adjacency.shape[-2:])
    out = torch.stack([f(a) for a in graphs]) if len(graphs) else torch.zeros(0, *adjacency.shape[-2:])
    return out.reshape(*adjacency.shape[:-2], *out.shape[1:])


def _nx_laplacian(adjacency, normalized):
    import networkx as nx

    graph = _nx_graph(adjacency)
    matrix = (nx.normalized_laplacian_matrix if normalized else nx.laplacian_matrix)(graph, nodelist=range(len(graph)))
    return torch.tensor(matrix.toarray(), dtype=torch.float64)


def _nx_distances(adjacency):
    import networkx as nx

    n = adjacency.shape[-1]
    out = torch.full((n, n), -1, dtype=torch.long)
    for i, lengths in nx.all_pairs_shortest_path_length(_nx_graph(adjacency)):
        for j, d in lengths.items():
            out[i, j] = d
    return out


def _neighbour_mask(adjacency, nodes, self_loops):
    """Node i may attend to node j: j is a neighbour of i in networkx (i != j), or i = j with self-loops; both real."""

    def one(a):
        graph = _nx_graph(a)
        return torch.tensor(
            [[j in graph[i] if i != j else self_loops for j in graph] for i in graph], dtype=torch.bool
        ).reshape(a.shape)

    mask = _each_graph(adjacency, one)
    return mask if nodes is None else mask & nodes[:, :, None] & nodes[:, None, :]


GRAPH = dict(B=(1, 3), N=(1, 6), batched=(0, 1), normalized=(0, 1), loops=(0, 1))


def _adjacency(s):
    return Adjacency(*((s.B,) if s.batched else ()), s.N, s.N, loops=bool(s.loops))


@spec(
    "graphs.adjacency_from_edges",
    graphs.adjacency_from_edges,
    dict(N=(1, 6), E=(0, 6)),
    half=False,
    reference=lambda call, edges, n_nodes: torch.tensor(
        __import__("networkx").to_numpy_array(_graph_of_edges(edges, n_nodes), nodelist=range(n_nodes)) != 0
    ),
)
def _(s):
    return graphs.adjacency_from_edges, dict(edges=Edges(s.N, s.E), n_nodes=Int(s.N))


def _graph_of_edges(edges, n):
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(tuple(e) for e in torch.as_tensor(edges).reshape(-1, 2).tolist())
    return graph


@spec(
    "graphs.adjacency_mask",
    graphs.adjacency_mask,
    {**GRAPH, "nodes": (0, 1)},
    half=False,
    reference=lambda call, adjacency, nodes, self_loops: _neighbour_mask(adjacency, nodes, self_loops),
)
def _(s):
    batched = s.batched or s.nodes
    return graphs.adjacency_mask, dict(
        adjacency=Adjacency(*((s.B,) if batched else ()), s.N, s.N, loops=bool(s.loops)),
        nodes=Mask(s.B, s.N) if s.nodes else Const(None),
        self_loops=Const(bool(s.normalized)),
    )


@spec(
    "graphs.laplacian",
    graphs.laplacian,
    GRAPH,
    half=False,
    reference=lambda call, adjacency, normalized: _each_graph(adjacency, lambda a: _nx_laplacian(a, normalized)),
)
def _(s):
    return graphs.laplacian, dict(adjacency=_adjacency(s), normalized=Const(bool(s.normalized)))


def _check_eigenvectors(out, args):
    """Eigenvalues equal to scipy's for the networkx Laplacian (after the first; zeros past N - 1), and the
    vectors orthonormal eigenvectors of it (an eigenvector is defined up to its sign, and a basis of a repeated
    eigenvalue's space is not unique: compared through L u = lambda u)."""
    import scipy.linalg

    vectors, values = out
    k, L = args["k"], _nx_laplacian(args["adjacency"], args["normalized"])
    N = L.shape[0]
    assert vectors.shape == (N, k) and values.shape == (k,) and vectors.dtype == values.dtype == torch.float64
    assert torch.isfinite(vectors).all() and torch.isfinite(values).all()
    expected = torch.zeros(k, dtype=torch.float64)
    real = torch.tensor(scipy.linalg.eigvalsh(L.numpy()))[1 : k + 1]
    expected[: len(real)] = real
    torch.testing.assert_close(values, expected, atol=1e-8, rtol=0)
    n = len(real)
    u = vectors[:, :n]
    torch.testing.assert_close(u.T @ u, torch.eye(n, dtype=torch.float64), atol=1e-8, rtol=0)
    torch.testing.assert_close(L @ u, u * values[:n], atol=1e-8, rtol=0)
    assert not vectors[:, n:].any()


@spec(
    "graphs.laplacian_eigenvectors",
    graphs.laplacian_eigenvectors,
    {**GRAPH, "k": (1, 4)},
    half=False,
    check=_check_eigenvectors,
)
def _(s):
    return graphs.laplacian_eigenvectors, dict(
        adjacency=Adjacency(s.N, s.N, loops=bool(s.loops)), k=Int(s.k), normalized=Const(bool(s.normalized))
    )


@spec(
    "graphs.shortest_path_distances",
    graphs.shortest_path_distances,
    GRAPH,
    half=False,
    reference=lambda call, adjacency: _each_graph(adjacency, _nx_distances),
)
def _(s):
    return graphs.shortest_path_distances, dict(adjacency=_adjacency(s))


def _distance_bias_reference(call, distances):
    """b[..., h, i, j] = table[h, min(d, max_distance)], or table[h, max_distance + 1] for d = -1, one entry at
    a time.
    """
    table, top = call.table, call.max_distance
    out = torch.zeros(*distances.shape[:-2], table.shape[0], *distances.shape[-2:], dtype=table.dtype)
    for index in itertools.product(*map(range, distances.shape)):
        d = int(distances[index])
        for h in range(table.shape[0]):
            out[(*index[:-2], h, *index[-2:])] = table[h, top + 1 if d == -1 else min(d, top)]
    return out


@spec(
    "graphs.DistanceBias",
    graphs.DistanceBias,
    dict(B=(1, 2), N=(1, 4), H=(1, 3), top=(1, 3), batched=(0, 1)),
    reference=_distance_bias_reference,
)
def _(s):
    bias = _module(lambda: graphs.DistanceBias(s.H, s.top))
    with torch.no_grad():
        bias.table.normal_(generator=torch.Generator().manual_seed(s.H))  # a trained table (it starts at zero)
    return bias, dict(
        distances=Ids(*((s.B,) if s.batched else ()), s.N, s.N, vocab=s.top + 3, low=-1, batch=0 if s.batched else None)
    )


def _check_two_rings(out, args):
    """Every graph: two disjoint rings of the same size, one of ring_sizes, padding after them, two marked nodes,
    the label 1 exactly when both marks lie on one ring (then at least min_gap edges apart), networkx's view."""
    import networkx as nx

    n, sizes = args["n_graphs"], args["ring_sizes"]
    high = 2 * max(sizes)
    assert out.adjacency.shape == (n, high, high) and out.nodes.shape == out.features.shape == (n, high)
    assert out.labels.shape == out.n_nodes.shape == (n,)
    for b in range(n):
        size = int(out.n_nodes[b])
        assert size // 2 in sizes and out.nodes[b, :size].all() and not out.nodes[b, size:].any()
        assert not out.adjacency[b, size:].any() and not out.adjacency[b, :, size:].any()
        graph = _nx_graph(out.adjacency[b, :size, :size])
        rings = [sorted(c) for c in nx.connected_components(graph)]
        assert len(rings) == 2 and all(graph.degree(v) == 2 for v in graph), "two rings"
        assert [len(r) for r in rings] == [size // 2, size // 2], "of the same size"
        marks = out.features[b].nonzero().flatten().tolist()
        assert len(marks) == 2 and set(out.features[b].tolist()) <= {0, 1}
        same = any(set(marks) <= set(r) for r in rings)
        assert int(out.labels[b]) == int(same)
        if same:
            assert nx.shortest_path_length(graph, *marks) >= args["min_gap"]


@spec(
    "graphs.two_ring_graphs",
    graphs.two_ring_graphs,
    dict(n=(1, 4), gap=(1, 2), extra=(0, 2), more=(0, 2)),
    half=False,
    check=_check_two_rings,
)
def _(s):
    low = max(3, 2 * s.gap) + s.extra
    sizes = IntList([low, low + s.more], high=0)
    sizes.corruptions = ("zero", "float", "empty", "nested", "str")  # any ring size above the least is valid
    return graphs.two_ring_graphs, dict(
        n_graphs=Int(s.n),
        ring_sizes=sizes,
        min_gap=Int(s.gap),
        seed=Int(s.extra + 1),
    )


def _small_rings(s):
    """s.B graphs of two rings of 3 or 4 nodes (N = 8 after padding)."""
    return graphs.two_ring_graphs(s.B, (3, 4), min_gap=1, seed=s.B)


@spec("graph_experiment.structural_inputs", graph_experiment.structural_inputs, dict(B=(1, 3), k=(1, 3)), half=False)
def _(s):
    return graph_experiment.structural_inputs, dict(graphs=Obj(_small_rings(s)), k=Int(s.k))


def _graph_model_call(s):
    """A distance-bias graph transformer, s.B graphs and structural inputs of the right shapes (N = 8)."""
    model = _module(lambda: graphs.GraphTransformer("full", "distance", d_model=8, n_heads=2, n_layers=1, k=2))
    return dict(
        model=Obj(model),
        graphs=Obj(_small_rings(s)),
        eigenvectors=Tensor(s.B, 8, 2, seq=1),
        distances=Ids(s.B, 8, 8, vocab=6, low=-1, seq=None),
    )


@spec("graph_experiment.graph_logits", graph_experiment.graph_logits, dict(B=(1, 3)), half=False)
def _(s):
    return graph_experiment.graph_logits, _graph_model_call(s)


@spec("graph_experiment.accuracy", graph_experiment.accuracy, dict(B=(1, 3)), half=False)
def _(s):
    return graph_experiment.accuracy, _graph_model_call(s)


@spec(
    "graphs.GraphTransformer",
    graphs.GraphTransformer,
    dict(B=(1, 3), N=(1, 5), mask=(0, 1), encoding=(0, 2), weights=(0, 1)),
    nan_spreads=True,
)
def _(s):
    encoding = graphs.ENCODINGS[s.encoding]
    model = _module(
        lambda: graphs.GraphTransformer(
            graphs.MASKS[s.mask],
            encoding,
            n_node_types=3,
            d_model=8,
            n_heads=2,
            n_layers=1,
            k=2,
            max_distance=2,
            d_ff=8,
        )
    )
    return model, dict(
        features=Ids(s.B, s.N, vocab=3),
        adjacency=Adjacency(s.B, s.N, s.N),
        nodes=Mask(s.B, s.N),
        eigenvectors=Tensor(s.B, s.N, 2, seq=1) if encoding == "laplacian" else Const(None),
        distances=Ids(s.B, s.N, s.N, vocab=4, low=-1) if encoding == "distance" else Const(None),
        return_weights=Const(bool(s.weights)),
    )


# audio ----------------------------------------------------------------------------------------------------


def _stft_frames(call, n_samples, hop_length, n_fft=None, center=True):
    """The number of frames torch.stft gives (zero padding: only the count matters); an even n_fft by default."""
    n_fft = 2 if n_fft is None else n_fft
    x = torch.zeros(n_samples, dtype=torch.float64)
    return torch.stft(
        x,
        n_fft,
        hop_length,
        window=torch.ones(n_fft, dtype=torch.float64),
        center=center,
        pad_mode="constant",
        return_complex=True,
    ).shape[-1]


@spec(
    "audio.n_frames",
    audio.n_frames,
    dict(n=(1, 40), hop=(1, 8), n_fft=(1, 12), center=(0, 1), given=(0, 1)),
    reference=_stft_frames,
    half=False,
)
def _(s):
    n = max(s.n, s.n_fft) if not s.center else s.n
    return audio.n_frames, dict(
        n_samples=Int(n),
        hop_length=Int(s.hop),
        n_fft=Int(s.n_fft) if s.given or not s.center else Const(None),
        center=Const(bool(s.center)),
    )


def _numpy_spectrogram(call, wave, n_fft, hop_length, log):
    """|rfft| of frames of n_fft samples hop_length apart, each times a periodic Hann window, the signal reflected
    by n_fft // 2 at both ends: NumPy, one frame at a time."""
    import numpy as np

    x = wave.numpy().reshape(-1, wave.shape[-1])
    pad = n_fft // 2
    x = np.pad(x, ((0, 0), (pad, pad)), mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    frames = [
        np.abs(np.fft.rfft(x[:, t : t + n_fft] * window, axis=-1)) for t in range(0, x.shape[1] - n_fft + 1, hop_length)
    ]
    out = np.stack(frames, axis=-1)  # (N, n_fft // 2 + 1, n_frames)
    out = np.log1p(out) if log else out
    return torch.from_numpy(out).reshape(*wave.shape[:-1], *out.shape[1:])


@spec(
    "audio.spectrogram",
    audio.spectrogram,
    dict(B=(1, 2), n=(6, 40), n_fft=(2, 10), hop=(1, 6), log=(0, 1)),
    reference=_numpy_spectrogram,
)
def _(s):
    return audio.spectrogram, dict(
        wave=Tensor(s.B, s.n, seq=1), n_fft=Int(s.n_fft), hop_length=Int(s.hop), log=Const(bool(s.log))
    )


def _numpy_tone(call, frequency, n_samples, sample_rate, phase):
    import numpy as np

    t = np.arange(n_samples) / sample_rate
    f = np.asarray(torch.as_tensor(frequency, dtype=torch.float64))[..., None]
    return torch.from_numpy(np.sin(2 * np.pi * f * t + phase))


def _numpy_chirp(call, f_start, f_end, n_samples, sample_rate, phase):
    import numpy as np

    t, duration = np.arange(n_samples) / sample_rate, n_samples / sample_rate
    f0, f1 = (np.asarray(torch.as_tensor(f, dtype=torch.float64))[..., None] for f in (f_start, f_end))
    return torch.from_numpy(np.sin(2 * np.pi * (f0 * t + (f1 - f0) * t**2 / (2 * duration)) + phase))


SOUND = dict(B=(1, 3), n=(1, 32), tensor=(0, 1))


@spec("audio.tone", audio.tone, SOUND, reference=_numpy_tone)
def _(s):
    frequency = Tensor(s.B, batch=None, positive=True, scale=900.0, list_ok=True) if s.tensor else Num(440.0)
    return audio.tone, dict(frequency=frequency, n_samples=Int(s.n), sample_rate=Num(4000.0), phase=Num(0.3))


@spec("audio.chirp", audio.chirp, SOUND, reference=_numpy_chirp)
def _(s):
    if s.tensor:
        f_start, f_end = (Tensor(s.B, positive=True, scale=900.0, list_ok=True) for _ in range(2))
    else:
        f_start, f_end = Num(300.0), Num(1200.0)
    return audio.chirp, dict(f_start=f_start, f_end=f_end, n_samples=Int(s.n), sample_rate=Num(4000.0), phase=Num(0.3))


def _noise_reference(call, shape, kind, generator):
    """The same draws (a copy of the generator), then the formulas of the docstring in float64: white noise
    scaled to unit standard deviation; brown noise its cumulative sum, less the line from 0 to its end, less
    its mean, then scaled."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    x = torch.randn(*shape, generator=generator).double()
    if kind == "brown":
        x = x.cumsum(-1)
        x = x - torch.linspace(0, 1, x.shape[-1], dtype=torch.float64) * x[..., -1:]
        x = x - x.mean(-1, keepdim=True)
    return x / x.std(-1, keepdim=True)


class Shape(IntList):
    """A shape (a list of sizes); changed, a negative size, a float, a string, no size, one sample per row."""

    corruptions = ("negative", "float", "str", "none", "one sample")

    def corrupt(self, v, how, g):
        return {
            "negative": [-1] + v[1:],
            "float": [x + 0.5 for x in v],
            "str": "abc",
            "none": [],
            "one sample": v[:-1] + [1],
        }[how]


@spec(
    "audio.noise",
    audio.noise,
    dict(B=(1, 3), n=(2, 40), kind=(0, 1), batched=(0, 1)),
    reference=_noise_reference,
    half=False,
)
def _(s):
    return audio.noise, dict(
        shape=Shape([s.B, s.n] if s.batched else [s.n], high=99),
        kind=Choice(["white", "brown"][s.kind]),
        generator=Gen(),
    )


def _check_sounds(out, args):
    """(n, n_samples) float32 finite waves, labels balanced over the classes; each wave's standard deviation
    within [0.5 x 0.75, 2 x 1.25]: a sound of standard deviation 1 plus noise of exactly 1 / snr = 0.25, made
    louder or softer by at most 2 (at 32 samples or more every kind of sound has some: beeps are on part of
    the time)."""
    waves, labels = out
    n, n_samples = args["n"], args["n_samples"]
    assert waves.shape == (n, n_samples) and waves.dtype == torch.float32 and torch.isfinite(waves).all()
    assert labels.shape == (n,) and labels.dtype == torch.long
    counts = torch.bincount(labels, minlength=len(audio.SOUND_CLASSES))
    assert len(counts) == len(audio.SOUND_CLASSES) and int(counts.max() - counts.min()) <= 1
    std = waves.std(dim=-1)
    assert ((std > 0.5 * 0.75 - 1e-4) & (std < 2 * 1.25 + 1e-4)).all(), std


@spec("audio.sound_classes", audio.sound_classes, dict(n=(1, 9), n_samples=(32, 64)), check=_check_sounds, half=False)
def _(s):
    return audio.sound_classes, dict(
        n=Int(s.n), n_samples=Int(s.n_samples), sample_rate=Num(4000.0), snr=Num(4.0), seed=Int(s.n)
    )


# contrastive ----------------------------------------------------------------------------------------------


def _unit(x):
    """Rows divided by their length (rows shorter than 1e-12 by 1e-12: F.normalize's convention), one at a time."""
    out = torch.zeros_like(x)
    for index in itertools.product(*map(range, x.shape[:-1])):
        out[index] = x[index] / max(float(x[index].detach().norm()), 1e-12)
    return out


def _naive_logits(image_embeddings, text_embeddings, scale):
    """scale * cos(image i, text j), one pair at a time."""
    a, b = _unit(image_embeddings), _unit(text_embeddings)
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a, b = a.expand(*batch, *a.shape[-2:]), b.expand(*batch, *b.shape[-2:])
    out = torch.zeros(*batch, a.shape[-2], b.shape[-2], dtype=a.dtype)
    for index in itertools.product(*map(range, batch)):
        for i in range(a.shape[-2]):
            for j in range(b.shape[-2]):
                out[index][i, j] = scale * (a[index][i] @ b[index][j])
    return out


def _naive_clip_loss(image_embeddings, text_embeddings, scale):
    """The mean over groups and directions of -log softmax(row)[its own column], written out."""
    logits = _naive_logits(image_embeddings, text_embeddings, scale)
    logits = logits.reshape(-1, *logits.shape[-2:])  # (G, B, B)
    losses = []
    for group in logits:
        for matrix in (group, group.T):
            losses += [torch.logsumexp(matrix[i], 0) - matrix[i, i] for i in range(len(matrix))]
    return torch.stack(losses).mean()


EMBED = dict(Bi=(1, 4), Bt=(1, 4), E=(1, 5), groups=(0, 2), tensor=(0, 1))


def _scale(s):
    return Const(torch.tensor(2.5)) if s.tensor else Num(2.5)


@spec(
    "contrastive.clip_logits",
    contrastive.clip_logits,
    EMBED,
    reference=lambda call, image_embeddings, text_embeddings, scale: _naive_logits(
        image_embeddings, text_embeddings, float(scale)
    ),
)
def _(s):
    lead = (s.groups,) if s.groups else ()
    return contrastive.clip_logits, dict(
        image_embeddings=Tensor(*lead, s.Bi, s.E, seq=len(lead)),
        text_embeddings=Tensor(*lead, s.Bt, s.E, seq=len(lead)),
        scale=_scale(s),
    )


@spec(
    "contrastive.clip_loss",
    contrastive.clip_loss,
    EMBED,
    reference=lambda call, image_embeddings, text_embeddings, scale: _naive_clip_loss(
        image_embeddings, text_embeddings, float(scale)
    ),
)
def _(s):
    lead = (s.groups,) if s.groups else ()
    return contrastive.clip_loss, dict(
        image_embeddings=Tensor(*lead, s.Bi, s.E, seq=len(lead)),
        text_embeddings=Tensor(*lead, s.Bi, s.E, seq=len(lead)),
        scale=_scale(s),
    )


def _naive_retrieval(call, similarity, targets, k):
    """A query is right when fewer than k candidates are more similar than its own."""
    hits = [int((similarity[q] > similarity[q, targets[q]]).sum()) < k for q in range(similarity.shape[0])]
    return sum(hits) / len(hits)


@spec(
    "contrastive.retrieval_accuracy",
    contrastive.retrieval_accuracy,
    dict(Q=(1, 5), C=(1, 5), k=(1, 4)),
    reference=_naive_retrieval,
    half=False,
)
def _(s):
    return contrastive.retrieval_accuracy, dict(
        similarity=Tensor(s.Q, s.C), targets=Ids(s.Q, vocab=s.C, seq=None), k=Int(s.k)
    )


def _dual_encoder_loss(model, images, text_inputs, groups):
    return model(images, text_inputs, groups=groups)


def _dual_encoder_reference(call, model, images, text_inputs, groups):
    """The CLIP loss of the two projections, in groups, with the scale exp(log_scale) capped at 100, written out."""
    a, b = images @ model.image_projection.weight.T, text_inputs @ model.text_projection.weight.T
    scale = min(float(model.log_scale.detach().exp()), 100.0)
    return _naive_clip_loss(a.reshape(groups, -1, a.shape[-1]), b.reshape(groups, -1, b.shape[-1]), scale)


@spec(
    "contrastive.DualEncoder",
    contrastive.DualEncoder,
    dict(per=(1, 3), groups=(1, 2), Di=(1, 4), Dt=(1, 4), E=(1, 4), t=(0, 1)),
    reference=_dual_encoder_reference,
)
def _(s):
    model = _module(
        lambda: contrastive.DualEncoder(nn.Identity(), nn.Identity(), s.Di, s.Dt, s.E, temperature=[0.07, 0.005][s.t])
    )  # scales 1/0.07, then capped
    B = s.per * s.groups
    return _dual_encoder_loss, dict(
        model=Const(model), images=Tensor(B, s.Di), text_inputs=Tensor(B, s.Dt), groups=Int(s.groups)
    )


# lora -----------------------------------------------------------------------------------------------------

LORA = dict(B=(1, 3), d_in=(1, 5), d_out=(1, 5), r=(1, 5), trained=(0, 1), bias=(0, 1), alpha=(0, 1))


def _lora_layer(s):
    """A LoRALinear of rank min(r, d_in, d_out) on a random nn.Linear; B = 0 (as made) or trained (random)."""

    def make():
        layer = lora.LoRALinear(
            nn.Linear(s.d_in, s.d_out, bias=bool(s.bias)), min(s.r, s.d_in, s.d_out), alpha=[None, 3.0][s.alpha]
        )
        if s.trained:
            nn.init.normal_(layer.B)
        return layer

    return _module(make)


def _lora_reference(call, x):
    """x (W + (alpha / r) B A)^T + b from the weights, in float64; with B = 0, the unadapted layer x W^T + b."""
    W, b = call.base.weight, call.base.bias
    if not call.B.any():
        return F.linear(x, W, b)
    return F.linear(x, W + call.alpha / call.r * call.B @ call.A, b)


@spec("lora.LoRALinear", lora.LoRALinear, LORA, reference=_lora_reference)
def _(s):
    return _lora_layer(s), dict(x=Tensor(s.B, 2, s.d_in, seq=1))


def _check_new_lora(out, args):
    """A fresh adapter: the base layer itself (frozen), A (r, d_in) and B = 0 (d_out, r) trainable, the effective
    weight equal to the base's."""
    base, r = args["base"], args["r"]
    assert isinstance(out, lora.LoRALinear) and out.base is base and out.r == r
    assert out.A.shape == (r, base.in_features) and out.B.shape == (base.out_features, r) and not out.B.any()
    assert out.A.requires_grad and out.B.requires_grad and not any(p.requires_grad for p in base.parameters())
    assert torch.equal(out.weight, base.weight) and torch.isfinite(out.A).all()
    assert out.scale == (r if args["alpha"] is None else args["alpha"]) / r


@spec("lora.LoRALinear (construction)", lora.LoRALinear, LORA, check=_check_new_lora)
def _(s):
    return lora.LoRALinear, dict(
        base=Obj(nn.Linear(s.d_in, s.d_out)),
        r=Int(min(s.r, s.d_in, s.d_out)),
        alpha=Num(2.0) if s.alpha else Const(None),
    )


def _adapted_output(model, targets, r, alpha, x):
    """The names add_lora adapted, and the model's output after it (B = 0: unchanged)."""
    names = lora.add_lora(model, targets, r=r, alpha=alpha)
    return names, model(x)


def _adapted_reference(call, model, targets, r, alpha, x):
    """The linear layers named in targets (networkx-free: named_modules), and the unadapted model's output."""
    names = [n for n, m in model.named_modules() if n.rsplit(".", 1)[-1] in set(targets) and isinstance(m, nn.Linear)]
    return names, model(x)


@spec("lora.add_lora", lora.add_lora, dict(B=(1, 2), T=(1, 3), which=(0, 2), r=(1, 4)), reference=_adapted_reference)
def _(s):
    model = _module(lambda: blocks.EncoderBlock(8, 2, 8))
    targets = [("W_q", "W_v"), ("W_o",), ("W_k", "W_v", "no_such_layer")][s.which]
    return _adapted_output, dict(
        model=Obj(model),
        targets=Texts(targets, corruptions=("one str", "numbers", "empty")),
        r=Int(s.r),
        alpha=Num(2.0),
        x=Tensor(s.B, s.T, 8, seq=1),
    )


def _merged_output(model, x):
    """merge_lora's model: no LoRALinear left, and its output."""
    merged = lora.merge_lora(model)
    return [type(m).__name__ for m in merged.modules() if isinstance(m, (lora.LoRALinear, nn.Linear))], merged(x)


def _merged_reference(call, model, x):
    """The adapted model before merging: where it has a LoRALinear the merged one has an nn.Linear; its output."""
    kinds = [
        type(m).__name__
        for m in model.modules()
        if isinstance(m, (lora.LoRALinear, nn.Linear))
        and not any(m is l.base for l in model.modules() if isinstance(l, lora.LoRALinear))
    ]
    return ["Linear" for _ in kinds], model(x)


@spec("lora.merge_lora", lora.merge_lora, dict(B=(1, 2), T=(1, 3), r=(1, 4)), reference=_merged_reference)
def _(s):
    def adapted():
        model = blocks.EncoderBlock(8, 2, 8)
        lora.add_lora(model, ("W_q", "W_v", "W_o"), r=s.r)
        for m in model.modules():
            if isinstance(m, lora.LoRALinear):
                nn.init.normal_(m.B)  # trained
        return model

    return _merged_output, dict(model=Obj(_module(adapted)), x=Tensor(s.B, s.T, 8, seq=1))


@spec(
    "lora.freeze",
    lora.freeze,
    dict(D=(1, 4)),
    check=lambda out, args: out is args["model"] and not any(p.requires_grad for p in out.parameters()),
)
def _(s):
    return lora.freeze, dict(model=Obj(blocks.FeedForward(s.D, 4)))


# pretrain -------------------------------------------------------------------------------------------------


@functools.cache
def _hf_mlm_tokenizer(mask_id: int):
    """A Hugging Face tokenizer of 258 ids ([PAD], [MASK], the 256 bytes) whose mask token has id ``mask_id``."""
    from transformers import PreTrainedTokenizerFast

    tok = bpe.BPETokenizer([], specials=["[PAD]", "[MASK]"])
    return PreTrainedTokenizerFast(tokenizer_object=tok.to_hf(), pad_token="[PAD]", mask_token=tok.id_to_token[mask_id])


def _hf_mlm_mask(call, ids, mask_id, vocab_size, special_ids, p, mask_prob, random_prob, generator):
    """Hugging Face's DataCollatorForLanguageModeling with the same probabilities and generator state."""
    from transformers import DataCollatorForLanguageModeling

    collator = DataCollatorForLanguageModeling(
        _hf_mlm_tokenizer(mask_id), mlm_probability=p, mask_replace_prob=mask_prob, random_replace_prob=random_prob
    )
    collator.generator = generator
    return collator.torch_mask_tokens(ids.clone(), special_tokens_mask=torch.isin(ids, torch.tensor(special_ids)))


@spec(
    "pretrain.mlm_mask",
    pretrain.mlm_mask,
    dict(B=(1, 3), T=(1, 6), mask=(0, 1), p=(0, 2)),
    reference=_hf_mlm_mask,
    half=False,
)
def _(s):
    return pretrain.mlm_mask, dict(
        ids=Ids(s.B, s.T, vocab=258),
        mask_id=Int(s.mask),
        vocab_size=Int(258),
        special_ids=IntList([0], high=257),
        p=Num([0.3, 0.7, 1.0][s.p]),
        mask_prob=Num(0.6),
        random_prob=Num(0.2),
        generator=Gen(),
    )


class Labels(Ids):
    """Token ids to predict, with IGNORE_INDEX (not predicted) at random positions."""

    def make(self, g):
        ids = super().make(g)
        return ids.masked_fill(torch.rand(ids.shape, generator=g) < 0.4, pretrain.IGNORE_INDEX)


def _naive_mlm_loss(call, logits, labels):
    """The mean of logsumexp(logits) - logit of the label over the predicted positions (0 when there is none)."""
    terms = [
        torch.logsumexp(logits[b, t], 0) - logits[b, t, labels[b, t]]
        for b in range(labels.shape[0])
        for t in range(labels.shape[1])
        if labels[b, t] != pretrain.IGNORE_INDEX
    ]
    return torch.stack(terms).mean() if terms else torch.zeros((), dtype=logits.dtype)


@spec("pretrain.mlm_loss", pretrain.mlm_loss, dict(B=(1, 3), T=(1, 4), V=(1, 6)), reference=_naive_mlm_loss)
def _(s):
    return pretrain.mlm_loss, dict(logits=Tensor(s.B, s.T, s.V, seq=1), labels=Labels(s.B, s.T, vocab=s.V))


@spec("pretrain.MLMHead", pretrain.MLMHead, dict(B=(1, 3), T=(1, 4), V=(1, 6), D=(4, 8)))  # LayerNorm over D >= 4
def _(s):
    return _module(lambda: pretrain.MLMHead(nn.Embedding(s.V, s.D))), dict(h=Tensor(s.B, s.T, s.D, seq=1))


def _lengths_of(s, T):
    return IntList([max(1, T - b) for b in range(s.B)], high=T)


PRETRAIN = dict(B=(1, 3), T=(1, 6), variant=(0, 2), lengths=(0, 1))


@spec("pretrain.MaskedLM", pretrain.MaskedLM, PRETRAIN)
def _(s):
    return _module(lambda: pretrain.MaskedLM(_config(**MODEL_VARIANTS[s.variant]))), dict(
        ids=Ids(s.B, s.T, vocab=11), lengths=_lengths_of(s, s.T) if s.lengths else Const(None)
    )


@spec(
    "pretrain.MaskedLM.loss",
    pretrain.MaskedLM.loss,
    PRETRAIN,
    reference=lambda call, inputs, labels, lengths: _naive_mlm_loss(None, call.__self__(inputs, lengths), labels),
)
def _(s):
    model = _module(lambda: pretrain.MaskedLM(_config(**MODEL_VARIANTS[s.variant])))
    return model.loss, dict(
        inputs=Ids(s.B, s.T, vocab=11),
        labels=Labels(s.B, s.T, vocab=11),
        lengths=_lengths_of(s, s.T) if s.lengths else Const(None),
    )


@spec("pretrain.SequenceClassifier", pretrain.SequenceClassifier, {**PRETRAIN, "C": (1, 3)})
def _(s):
    return _module(
        lambda: pretrain.SequenceClassifier(models.Encoder(_config(**MODEL_VARIANTS[s.variant])), s.C)
    ), dict(ids=Ids(s.B, s.T, vocab=11), lengths=_lengths_of(s, s.T) if s.lengths else Const(None))


def _naive_pad(call, sequences, pad_id, max_len):
    cut = [list(x)[:max_len] if max_len is not None else list(x) for x in sequences]
    T = max(map(len, cut))
    return torch.tensor([x + [pad_id] * (T - len(x)) for x in cut]), torch.tensor([len(x) for x in cut])


@spec("pretrain.pad", pretrain.pad, dict(B=(1, 3), T=(1, 5), cut=(0, 1)), reference=_naive_pad, half=False)
def _(s):
    return pretrain.pad, dict(
        sequences=IntLists([1 + (s.T + b) % s.T for b in range(s.B)], high=11),
        pad_id=Int(3),
        max_len=Int(max(1, s.T - 1)) if s.cut else Const(None),
    )


def _classifier(s):
    return _module(lambda: pretrain.SequenceClassifier(models.Encoder(_config()), 3))


def _naive_accuracy(call, model, ids, lengths, labels, batch_size):
    """The share of sequences whose largest logit (one sequence at a time, cut to its length) is its label."""
    right = [
        int(model(ids[i : i + 1, : int(lengths[i])], lengths[i : i + 1]).argmax()) == int(labels[i])
        for i in range(ids.shape[0])
    ]
    return sum(right) / len(right)


@spec(
    "pretrain.accuracy",
    pretrain.accuracy,
    dict(N=(1, 5), T=(1, 6), batch=(1, 3)),
    reference=_naive_accuracy,
    half=False,
)
def _(s):
    return pretrain.accuracy, dict(
        model=Obj(_classifier(s)),
        ids=Ids(s.N, s.T, vocab=11),
        lengths=Ids(s.N, vocab=s.T + 1, low=1, seq=None),
        labels=Ids(s.N, vocab=3, seq=None),
        batch_size=Int(s.batch),
    )


def _check_history(out, args):
    """A training run's history: one finite loss and learning rate per step."""
    assert isinstance(out, train.History) and out.step == list(range(args["steps"])) and not out.diverged
    assert len(out.loss) == len(out.lr) == args["steps"] and all(map(math.isfinite, out.loss + out.lr))


@spec(
    "pretrain.fit_classifier",
    pretrain.fit_classifier,
    dict(N=(1, 5), T=(1, 6), steps=(1, 3), batch=(1, 3)),
    check=_check_history,
    half=False,
)
def _(s):
    return pretrain.fit_classifier, dict(
        model=Obj(_classifier(s)),
        ids=Ids(s.N, s.T, vocab=11),
        lengths=Ids(s.N, vocab=s.T + 1, low=1, seq=None),
        labels=Ids(s.N, vocab=3, seq=None),
        steps=Int(s.steps),
        batch_size=Int(s.batch),
        lr=Num(1e-3),
    )


@spec(
    "pretrain.fit_mlm",
    pretrain.fit_mlm,
    dict(N=(1, 4), T=(1, 8), steps=(1, 3), batch=(1, 3)),
    check=_check_history,
    half=False,
)
def _(s):
    return pretrain.fit_mlm, dict(
        model=Obj(_module(lambda: pretrain.MaskedLM(_config()))),
        sequences=IntLists([1 + (s.T + i) % s.T for i in range(s.N)], high=11),
        pad_id=Int(0),
        mask_id=Int(1),
        steps=Int(s.steps),
        batch_size=Int(s.batch),
        lr=Num(1e-3),
        quiet=Const(True),
    )


WORDS = "abcXYZ é!,'-0 "


def _scanned_words(call, text, min_len, max_len, lower):
    """Runs of the ASCII letters, found one character at a time."""
    words, word = [], ""
    for c in text + " ":
        if "a" <= c <= "z" or "A" <= c <= "Z":
            word += c
        elif word:
            words.append(word)
            word = ""
    words = [w.lower() if lower else w for w in words]
    return [w for w in words if min_len <= len(w) and (max_len is None or len(w) <= max_len)]


@spec(
    "data.words_of",
    data.words_of,
    dict(n=(0, 30), lo=(1, 3), hi=(0, 4), lower=(0, 1)),
    reference=_scanned_words,
    half=False,
)
def _(s):
    return data.words_of, dict(
        text=Text(length=s.n, alphabet=WORDS),
        min_len=Int(s.lo),
        max_len=Int(s.hi) if s.hi else Const(None),
        lower=Const(bool(s.lower)),
    )


def _check_shuffled_words(out, args):
    """One text per distinct word: label 0 the word itself, label 1 a rearrangement of its letters that is no
    word of the list; the letters of the two classes together are exactly those of the words."""
    texts, labels = out
    words = sorted(set(args["words"]))
    assert len(texts) == len(labels) == len(words) and set(labels) <= {0, 1}
    assert sorted(sorted(t) for t in texts) == sorted(sorted(w) for w in words)
    assert all((t in words) == (label == 0) for t, label in zip(texts, labels))


@spec(
    "data.shuffled_word_task",
    data.shuffled_word_task,
    dict(n=(1, 6), seed=(0, 3)),
    check=_check_shuffled_words,
    half=False,
)
def _(s):
    vocabulary = ["stone", "notes", "onset", "tap", "pat", "apt", "noon", "a", "ab", "listen"]
    return data.shuffled_word_task, dict(words=Texts(vocabulary[: s.n] * 2), seed=Int(s.seed), tries=Int(20))


# bpe ------------------------------------------------------------------------------------------------------

TEXT = "ab cé日\n 1'!sx"  # letters, an accent, a CJK character, spaces, a newline, a digit, a clitic's apostrophe
WRONG_TEXTS = ("bytes", "number", "none")  # for a text that may also be a list of texts


def _hf_pieces(text):
    """Hugging Face's byte-level pre-tokenizer (GPT-2's pattern, no prefix space): the pieces of ``text``."""
    from tokenizers import pre_tokenizers

    return [
        piece for piece, _ in pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True).pre_tokenize_str(text)
    ]


def _check_byte_table(out, args):
    """256 distinct characters, Hugging Face's byte-level alphabet; the ASCII bytes as Hugging Face writes them;
    the printable bytes themselves and the others U+0100 on, in byte order."""
    from tokenizers import pre_tokenizers

    assert sorted(out) == list(range(256)) and set(out.values()) == set(pre_tokenizers.ByteLevel.alphabet())
    assert all([out[b]] == _hf_pieces(chr(b)) for b in range(128) if not chr(b).isspace() or chr(b) == " ")
    printable = [b for b in range(256) if chr(b).isprintable() and b != 32 and b != 173]
    assert all(out[b] == chr(b) for b in printable)
    others = [b for b in range(256) if b not in printable]
    assert [out[b] for b in others] == [chr(256 + i) for i in range(len(others))]


@spec("bpe.bytes_to_unicode", bpe.bytes_to_unicode, {}, check=_check_byte_table, half=False, examples=1)
def _(s):
    return bpe.bytes_to_unicode, {}


@spec("bpe.pretokenize", bpe.pretokenize, dict(n=(0, 24)), reference=lambda call, text: _hf_pieces(text), half=False)
def _(s):
    return bpe.pretokenize, dict(text=Text(length=s.n, alphabet=TEXT))


@spec(
    "bpe.word_counts",
    bpe.word_counts,
    dict(n=(0, 24), several=(0, 1)),
    half=False,
    reference=lambda call, texts: collections.Counter(
        piece for text in ([texts] if isinstance(texts, str) else texts) for piece in _hf_pieces(text)
    ),
)
def _(s):
    text = Text(length=s.n, alphabet=TEXT, corruptions=("bytes", "number", "none"))
    return bpe.word_counts, dict(texts=Texts(["ab cd", "a b", "日"]) if s.several else text)


def _replaced_pair(call, word, a, b, new):
    """Every (a, b) replaced left to right, without overlaps: str.replace on the ids written <id>."""
    written = "".join(f"<{i}>" for i in word).replace(f"<{a}><{b}>", f"<{new}>")
    return [int(i) for i in re.findall(r"<(-?\d+)>", written)]


@spec("bpe.merge_pair", bpe.merge_pair, dict(n=(0, 8), a=(0, 2), b=(0, 2)), reference=_replaced_pair, half=False)
def _(s):
    word = [(i * 7 + s.n) % 3 for i in range(s.n)]
    return bpe.merge_pair, dict(word=IntList(word, high=2), a=Int(s.a), b=Int(s.b), new=Int(9))


def _naive_merges(call, counts, vocab, vocab_size, min_frequency):
    """BPE by its definition: recount every adjacent pair of every word (times its count) before each merge;
    the most frequent pair wins, ties to the smallest (left id, right id); stop below max(1, min_frequency)."""
    vocab = list(vocab)
    ids = {t: i for i, t in enumerate(vocab)}
    words, freqs = [[ids[c] for c in w] for w in counts], list(counts.values())
    merges = []
    while len(vocab) < vocab_size:
        pairs = collections.Counter()
        for w, f in zip(words, freqs):
            for pair in zip(w, w[1:]):
                pairs[pair] += f
        if not pairs:
            break
        (a, b), count = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        if count < max(1, min_frequency):
            break
        if vocab[a] + vocab[b] not in ids:
            ids[vocab[a] + vocab[b]] = len(vocab)
            vocab.append(vocab[a] + vocab[b])
        merges.append((vocab[a], vocab[b]))
        words = [_replaced_pair(None, w, a, b, ids[vocab[a] + vocab[b]]) for w in words]
    return merges, vocab


def _counts_of(s):
    return dict(bpe.word_counts("".join(TEXT[(i * 5 + s.n) % len(TEXT)] for i in range(s.n))))


@spec(
    "bpe.learn_merges", bpe.learn_merges, dict(n=(0, 30), more=(0, 8), freq=(0, 2)), reference=_naive_merges, half=False
)
def _(s):
    alphabet = sorted(bpe.bytes_to_unicode().values())
    return bpe.learn_merges, dict(
        counts=Counts(_counts_of(s)), vocab=Texts(alphabet), vocab_size=Int(256 + s.more), min_frequency=Int(s.freq)
    )


def _trained(text, vocab_size, specials, min_frequency):
    """The merges learned, and the tokenizer's ids of a fixed sample."""
    tokenizer = bpe.BPETokenizer.train(text, vocab_size, specials=specials, min_frequency=min_frequency)
    return tokenizer.merges, tokenizer.id_to_token, tokenizer.encode("a cab, 日 b1")


def _hf_trained(call, text, vocab_size, specials, min_frequency):
    """Hugging Face tokenizers trained with the same settings: its merges, vocabulary and ids of the sample."""
    hf = bpe.train_hf(text, vocab_size, specials=specials, min_frequency=min_frequency)
    vocab = sorted(hf.get_vocab().items(), key=lambda kv: kv[1])
    return bpe.hf_merges(hf), [t for t, _ in vocab], hf.encode("a cab, 日 b1").ids


@spec(
    "bpe.BPETokenizer.train",
    bpe.BPETokenizer,
    dict(n=(0, 30), more=(0, 8), freq=(0, 2), specials=(0, 2)),
    reference=_hf_trained,
    half=False,
)
def _(s):
    specials = ["[PAD]", "[MASK]"][: s.specials]
    text = "".join(TEXT[(i * 5 + s.n) % len(TEXT)] for i in range(s.n))
    return _trained, dict(
        text=Text(text, corruptions=WRONG_TEXTS),
        vocab_size=Int(256 + s.specials + s.more),
        specials=Texts(specials, corruptions=("one str", "numbers")),
        min_frequency=Int(s.freq),
    )


class Merges(Arg):
    """A list of merges (pairs of tokens); changed, a merge of a token not yet defined, a triple, a string."""

    corruptions = ("undefined", "triple", "str")

    def __init__(self, merges):
        self.merges = list(merges)

    def make(self, g):
        return list(self.merges)

    def corrupt(self, v, how, g):
        return {"undefined": [("no such", "token")] + v, "triple": [("a", "b", "c")] + v, "str": "ab"}[how]


def _vocabulary(merges, specials):
    return bpe.BPETokenizer(merges, specials).id_to_token


def _vocabulary_reference(call, merges, specials):
    """The special tokens, Hugging Face's 256 byte characters sorted, then each merged token new so far."""
    from tokenizers import pre_tokenizers

    out = list(specials) + sorted(pre_tokenizers.ByteLevel.alphabet())
    return out + list(dict.fromkeys(a + b for a, b in merges if a + b not in out))


@spec(
    "bpe.BPETokenizer",
    bpe.BPETokenizer,
    dict(n=(0, 30), more=(0, 8), specials=(0, 2)),
    reference=_vocabulary_reference,
    half=False,
)
def _(s):
    merges, _ = bpe.learn_merges(_counts_of(s), sorted(bpe.bytes_to_unicode().values()), 256 + s.more)
    return _vocabulary, dict(
        merges=Merges(merges), specials=Texts(["[PAD]", "[MASK]"][: s.specials], corruptions=("one str", "numbers"))
    )


@functools.cache
def _tokenizers():
    """A tokenizer trained on a small corpus, and Hugging Face's trained the same way."""
    corpus = "the cat sat on the mat; 日本 café 12 'tis the cat's\n" * 3
    return bpe.BPETokenizer.train(corpus, 290, specials=["[PAD]"]), bpe.train_hf(corpus, 290, specials=["[PAD]"])


@spec(
    "bpe.BPETokenizer.encode",
    bpe.BPETokenizer.encode,
    dict(n=(0, 24)),
    half=False,
    reference=lambda call, text: _tokenizers()[1].encode(text).ids,
)
def _(s):
    return _tokenizers()[0].encode, dict(text=Text(length=s.n, alphabet=TEXT + "thecat"))


def _decoded_reference(call, ids, skip_specials):
    """Hugging Face's decoder (specials kept unless skipped; its pieces joined with nothing between)."""
    hf = _tokenizers()[1]
    ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
    pieces, run = [], []
    for i in ids + [None]:
        if i is None or i == 0:
            pieces.append(hf.decode(run))
            run = []
            if i == 0 and not skip_specials:
                pieces.append("[PAD]")
        else:
            run.append(i)
    return "".join(pieces)


@spec(
    "bpe.BPETokenizer.decode",
    bpe.BPETokenizer.decode,
    dict(n=(0, 10), skip=(0, 1), as_list=(0, 1)),
    reference=_decoded_reference,
    half=False,
)
def _(s):
    V = len(_tokenizers()[0])
    ids = (
        IntList(torch.randint(V, (s.n,), generator=torch.Generator().manual_seed(s.n)).tolist(), high=V - 1)
        if s.as_list
        else Ids(s.n, vocab=V, seq=0, batch=None)
    )
    return _tokenizers()[0].decode, dict(ids=ids, skip_specials=Const(bool(s.skip)))


def _merges_of_hf(call, text, vocab_size, specials, min_frequency):
    counts = bpe.word_counts(text)
    return _naive_merges(
        None, counts, list(specials) + sorted(bpe.bytes_to_unicode().values()), vocab_size, min_frequency
    )[0]


@spec(
    "bpe.train_hf",
    bpe.train_hf,
    dict(n=(0, 30), more=(0, 8), freq=(0, 2), specials=(0, 1)),
    reference=_merges_of_hf,
    half=False,
)
def _(s):
    text = "".join(TEXT[(i * 5 + s.n) % len(TEXT)] for i in range(s.n))
    return (
        lambda text, vocab_size, specials, min_frequency: bpe.hf_merges(
            bpe.train_hf(text, vocab_size, specials=specials, min_frequency=min_frequency)
        )
    ), dict(
        text=Text(text, corruptions=WRONG_TEXTS),
        vocab_size=Int(256 + s.specials + s.more),
        specials=Texts(["[PAD]"][: s.specials], corruptions=("one str", "numbers")),
        min_frequency=Int(s.freq),
    )


@spec(
    "bpe.hf_merges",
    bpe.hf_merges,
    dict(n=(0, 30), more=(0, 8)),
    half=False,
    reference=lambda call, hf: _naive_merges(
        None, bpe.word_counts(hf.text), sorted(bpe.bytes_to_unicode().values()), 256 + hf.more, 0
    )[0],
)
def _(s):
    text = "".join(TEXT[(i * 5 + s.n) % len(TEXT)] for i in range(s.n))
    hf = bpe.train_hf(text, 256 + s.more)
    hf.text, hf.more = text, s.more  # what the reference retrains from
    return bpe.hf_merges, dict(hf=Obj(hf))


@spec(
    "bpe.BPETokenizer.load",
    bpe.BPETokenizer.load,
    {},
    half=False,
    reference=lambda call, path: _tokenizers()[0].id_to_token,
)
def _(s):
    path = _tokenizers()[0].save(FILES / "tokenizer.json")
    return (lambda path: bpe.BPETokenizer.load(path).id_to_token), dict(path=FilePath(path, wrong=_garbage_file()))


# interpret (what attention learns) ----------------------------------------------------------------------

INTERPRET_V = 9


def _attention_only(n_layers=2):
    return _module(
        lambda: interpret.AttentionOnly(interpret.AttentionOnlyConfig(INTERPRET_V, 6, n_layers=n_layers, d_model=8))
    )


def _interpret_models(s):
    """An attention-only model, or a GPT (multi-head or grouped-query attention), of 2 layers of 2 heads."""
    if s.kind == 0:
        return _attention_only()
    extra = dict(n_kv_heads=1) if s.kind == 2 else {}
    return _module(lambda: models.GPT(_config(vocab_size=INTERPRET_V, n_layers=2, **extra)))


@spec("interpret.AttentionOnlyConfig", interpret.AttentionOnlyConfig, dict(V=(1, 20), L=(1, 3), H=(1, 3), Dh=(1, 3)))
def _(s):
    return interpret.AttentionOnlyConfig, dict(
        vocab_size=Int(s.V), block_size=Int(6), n_layers=Int(s.L), n_heads=Int(s.H), d_model=Int(s.H * s.Dh)
    )


def _naive_attention_only(model, idx):
    """The model from its parts: embeddings, then each layer's heads one query at a time (harness), residuals."""
    from harness import _naive_heads

    x = model.embed.weight[idx] + model.positions.weight[: idx.shape[1]]
    for norm, layer in zip(model.norms, model.attns):
        h = F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias)
        x = x + _naive_heads(layer, h, h, h, is_causal=True)
    return F.layer_norm(x, x.shape[-1:], model.norm_f.weight, model.norm_f.bias) @ model.unembed.weight.T


@spec(
    "interpret.AttentionOnly",
    interpret.AttentionOnly,
    dict(B=(1, 3), T=(1, 6), L=(1, 2)),
    reference=lambda call, idx: _naive_attention_only(call, idx),
)
def _(s):
    return _attention_only(s.L), dict(idx=Ids(s.B, s.T, vocab=INTERPRET_V))


def _check_repeated(out, args):
    """Two equal halves of ids in range; with distinct, no token twice in the first half."""
    n, L, V = args["n"], args["half"], args["vocab_size"]
    assert out.shape == (n, 2 * L) and out.dtype == torch.long and 0 <= out.min() and out.max() < V
    assert torch.equal(out[:, :L], out[:, L:])
    if args["distinct"]:
        assert all(len(set(row[:L].tolist())) == L for row in out)


@spec(
    "interpret.repeated_tokens",
    interpret.repeated_tokens,
    dict(n=(1, 4), L=(1, 6), V=(1, 9), distinct=(0, 1)),
    check=_check_repeated,
    half=False,
)
def _(s):
    return interpret.repeated_tokens, dict(
        n=Int(s.n),
        half=Int(s.L),
        vocab_size=Int(max(s.V, s.L) if s.distinct else s.V),
        distinct=Const(bool(s.distinct)),
        generator=Gen(),
    )


def _naive_repeat_losses(call, logits, ids):
    """-log softmax one prediction at a time: targets 1 .. L, and L + 1 .. 2L - 1."""
    L = ids.shape[1] // 2
    first, repeat = [], []
    for b in range(ids.shape[0]):
        for t in range(2 * L - 1):
            loss = -(logits[b, t, ids[b, t + 1]] - torch.logsumexp(logits[b, t], 0))
            (first if t + 1 <= L else repeat).append(loss)
    mean = lambda xs: torch.stack(xs).mean() if xs else torch.tensor(math.nan, dtype=logits.dtype)  # noqa: E731
    return mean(first), mean(repeat)


@spec(
    "interpret.repeat_losses",
    interpret.repeat_losses,
    dict(B=(1, 3), L=(1, 4), V=(1, 6)),
    reference=_naive_repeat_losses,
)
def _(s):
    return interpret.repeat_losses, dict(
        logits=Tensor(s.B, 2 * s.L, s.V, seq=1), ids=Ids(s.B, 2 * s.L, vocab=s.V, seq=1)
    )


def _naive_offset_score(call, weights, repeat=True):
    """Each head's mean weight on one key per query, one (batch, head, query) at a time."""
    B, H, T, _ = weights.shape
    L = T // 2
    queries = range(L, T) if repeat else range(1, T)
    out = torch.zeros(H, dtype=weights.dtype)
    for h in range(H):
        out[h] = sum(weights[b, h, t, t - L + 1 if repeat else t - 1] for b in range(B) for t in queries) / (
            B * len(queries)
        )
    return out


@spec(
    "interpret.prefix_matching_score",
    interpret.prefix_matching_score,
    dict(B=(1, 3), H=(1, 3), L=(1, 4)),
    reference=_naive_offset_score,
)
def _(s):
    return interpret.prefix_matching_score, dict(weights=Tensor(s.B, s.H, 2 * s.L, 2 * s.L, seq=2))


@spec(
    "interpret.previous_token_score",
    interpret.previous_token_score,
    dict(B=(1, 3), H=(1, 3), T=(2, 7)),
    reference=lambda call, weights: _naive_offset_score(call, weights, repeat=False),
)
def _(s):
    return interpret.previous_token_score, dict(weights=Tensor(s.B, s.H, s.T, s.T, seq=2))


@spec(
    "interpret.attention_layers",
    interpret.attention_layers,
    dict(kind=(0, 2)),
    half=False,
    reference=lambda call, model: [m for m in model.modules() if hasattr(m, "W_o") and hasattr(m, "n_heads")],
)
def _(s):
    return interpret.attention_layers, dict(model=Obj(_interpret_models(s)))


class Heads(Arg):
    """(layer, head) pairs; changed, a layer or head out of range or negative, no pairs, a string, floats."""

    corruptions = ("layer out of range", "head out of range", "negative", "not pairs", "str", "float")

    def __init__(self, pairs):
        self.pairs = list(pairs)

    def make(self, g):
        return list(self.pairs)

    def corrupt(self, v, how, g):
        return {
            "layer out of range": [(2, 0)],
            "head out of range": [(0, 2)],
            "negative": [(-1, 0)],
            "not pairs": [0, 1],
            "str": "0,1",
            "float": [(0.5, 1)],
        }[how]


def _run_ablated(model, heads, idx, means=None):
    with interpret.ablate_heads(model, heads, means=means):
        return model(idx)


def _naive_ablated(call, model, heads, idx, means=None):
    """The heads' columns of W_o zeroed in a copy of the model; with means, W_o[:, head] @ mean added as a bias."""
    import copy

    model = copy.deepcopy(model)
    layers = [m for m in model.modules() if hasattr(m, "W_o") and hasattr(m, "n_heads")]
    with torch.no_grad():
        for layer, head in heads:
            W_o, Dh = layers[layer].W_o, layers[layer].d_head
            cols = slice(head * Dh, (head + 1) * Dh)
            if means is not None:
                new = nn.Linear(W_o.in_features, W_o.out_features).to(W_o.weight.dtype)
                new.weight.copy_(W_o.weight)
                new.bias.copy_((W_o.bias if W_o.bias is not None else 0.0) + W_o.weight[:, cols] @ means[layer][cols])
                W_o = layers[layer].W_o = new
            W_o.weight[:, cols] = 0.0
        return model(idx)


@spec(
    "interpret.ablate_heads",
    interpret.ablate_heads,
    dict(kind=(0, 2), B=(1, 2), T=(1, 6), pick=(0, 3)),
    reference=_naive_ablated,
)
def _(s):
    choices = [[(0, 0)], [(1, 1)], [(0, 1), (1, 0)], []]
    return _run_ablated, dict(
        model=Obj(_interpret_models(s)), heads=Heads(choices[s.pick]), idx=Ids(s.B, s.T, vocab=INTERPRET_V)
    )


@spec("interpret.mean_heads", interpret.mean_heads, dict(kind=(0, 2), B=(1, 3), T=(1, 6)))
def _(s):
    return interpret.mean_heads, dict(model=Obj(_interpret_models(s)), ids=Ids(s.B, s.T, vocab=INTERPRET_V))


class Means(Arg):
    """Each layer's mean heads (H * Dh,); changed, one tensor, a layer fewer, a layer too narrow, integers."""

    corruptions = ("one tensor", "short", "width", "int")

    def __init__(self, means):
        self.means = means

    def make(self, g):
        return [m.clone() for m in self.means]

    def corrupt(self, v, how, g):
        return {
            "one tensor": lambda: v[0],
            "short": lambda: v[:1],
            "width": lambda: [v[0][:-1], *v[1:]],
            "int": lambda: [m.long() for m in v],
        }[how]()


@spec(
    "interpret.ablate_heads (mean-ablation)",
    interpret.ablate_heads,
    dict(kind=(0, 2), B=(1, 2), T=(1, 6), pick=(0, 2)),
    reference=_naive_ablated,
)
def _(s):
    choices = [[(0, 0)], [(1, 1)], [(0, 1), (1, 0)]]
    model = _interpret_models(s)
    means = interpret.mean_heads(model, torch.randint(INTERPRET_V, (3, 6), generator=torch.Generator().manual_seed(0)))
    return _run_ablated, dict(
        model=Obj(model),
        heads=Heads(choices[s.pick]),
        means=Means(means),
        idx=Ids(s.B, s.T, vocab=INTERPRET_V),
    )


def _uniform(w):
    """Uniform causal weights of the shape and dtype of ``w`` (B, T, T)."""
    allowed = torch.ones(w.shape[-2:], dtype=w.dtype).tril()
    return (allowed / allowed.sum(-1, keepdim=True)).expand_as(w)


def _run_edited(model, layer, head, idx):
    with interpret.edit_attention(model, layer, head, _uniform):
        return model(idx)


def _naive_edited(call, model, layer, head, idx):
    """The layer by hand (projections, every head one query at a time) with uniform weights for one head."""
    layers = [m for m in model.modules() if hasattr(m, "W_o") and hasattr(m, "n_heads")]
    target = layers[layer]

    def replace(module, args, kwargs, output):
        x = args[0]
        B, T, D = x.shape
        H, Dh = module.n_heads, module.d_head
        H_kv = getattr(module, "n_kv_heads", H)
        q = module.W_q(x).view(B, T, H, Dh).transpose(1, 2)
        k = module.W_k(x).view(B, T, H_kv, Dh).transpose(1, 2).repeat_interleave(H // H_kv, 1)
        v = module.W_v(x).view(B, T, H_kv, Dh).transpose(1, 2).repeat_interleave(H // H_kv, 1)
        if getattr(module, "qk_norm", False):
            q, k = module.q_norm(q), module.k_norm(k)
        if getattr(module, "rope", False):
            from attnbook import positional

            q, k = positional.apply_rope(q), positional.apply_rope(k)
        out = torch.zeros(B, H, T, Dh, dtype=x.dtype)
        for b in range(B):
            for h in range(H):
                for t in range(T):
                    if h == head:
                        w = torch.full((t + 1,), 1.0 / (t + 1), dtype=x.dtype)
                    else:
                        w = torch.softmax(k[b, h, : t + 1] @ q[b, h, t] / math.sqrt(Dh), 0)
                    out[b, h, t] = w @ v[b, h, : t + 1]
        return module.W_o(out.transpose(1, 2).reshape(B, T, D))

    hook = target.register_forward_hook(replace, with_kwargs=True)
    try:
        with torch.no_grad():
            return model(idx)
    finally:
        hook.remove()


@spec(
    "interpret.edit_attention",
    interpret.edit_attention,
    dict(kind=(0, 2), B=(1, 2), T=(1, 5), layer=(0, 1), head=(0, 1)),
    reference=_naive_edited,
)
def _(s):
    return _run_edited, dict(
        model=Obj(_interpret_models(s)),
        layer=Int(s.layer, corruptions=("negative", "float", "bool", "str")),
        head=Int(s.head, corruptions=("negative", "float", "bool", "str")),
        idx=Ids(s.B, s.T, vocab=INTERPRET_V),
    )


class LayerWeights(Arg):
    """Causal attention weights of ``n`` layers, each (B, H, T, T); changed, one tensor, no layer, layers of two
    shapes, integers, a layer of another rank."""

    corruptions = ("one tensor", "empty", "shapes", "int", "rank")

    def __init__(self, n, B, H, T):
        self.n, self.shape = n, (B, H, T, T)

    def make(self, g):
        T = self.shape[-1]
        allowed = torch.ones(T, T, dtype=torch.bool).tril()
        return [
            torch.softmax(torch.randn(self.shape, generator=g).masked_fill(~allowed, float("-inf")), -1)
            for _ in range(self.n)
        ]

    def corrupt(self, v, how, g):
        return {
            "one tensor": lambda: v[0],
            "empty": lambda: [],
            "shapes": lambda: v + [v[0][..., :-1, :-1]] if v[0].shape[-1] > 2 else v + [v[0][:, :1].repeat(1, 2, 1, 1)],
            "int": lambda: [w.long() for w in v],
            "rank": lambda: [w[0] for w in v],
        }[how]()


def _naive_rollout(call, weights):
    """prod_l (0.5 mean_h A_l + 0.5 I), the last layer on the left, one entry at a time."""
    B, H, T, _ = weights[0].shape
    out = torch.zeros(B, T, T, dtype=weights[0].dtype)
    for b in range(B):
        r = torch.eye(T, dtype=weights[0].dtype)
        for w in weights:
            a = torch.zeros(T, T, dtype=w.dtype)
            for i in range(T):
                for j in range(T):
                    a[i, j] = 0.5 * w[b, :, i, j].mean() + 0.5 * (i == j)
            r = torch.stack(
                [torch.stack([sum(a[i, m] * r[m, j] for m in range(T)) for j in range(T)]) for i in range(T)]
            )
        out[b] = r
    return out


@spec(
    "attribution.attention_rollout",
    attribution.attention_rollout,
    dict(n=(1, 3), B=(1, 2), H=(1, 3), T=(1, 5)),
    reference=_naive_rollout,
)
def _(s):
    return attribution.attention_rollout, dict(weights=LayerWeights(s.n, s.B, s.H, s.T))


def _naive_gradient_x_input(call, model, ids, targets):
    """The derivative of log p(y_t) when input j's embedding is scaled by (1 + eps): central differences."""
    embedding = model.embed if isinstance(model, interpret.AttentionOnly) else model.embed.token
    eps = 1e-6
    out = torch.zeros(*ids.shape, ids.shape[1], dtype=torch.float64)

    def log_probs(j, scale):
        def hook(module, args, output):
            output = output.clone()
            output[:, j] = output[:, j] * scale
            return output

        handle = embedding.register_forward_hook(hook)
        with torch.no_grad():
            logp = torch.log_softmax(model(ids), -1).gather(-1, targets[..., None])[..., 0]
        handle.remove()
        return logp

    for j in range(ids.shape[1]):
        out[:, :, j] = (log_probs(j, 1 + eps) - log_probs(j, 1 - eps)) / (2 * eps)
    return out


@spec(
    "attribution.gradient_x_input",
    attribution.gradient_x_input,
    dict(kind=(0, 1), B=(1, 2), T=(1, 5)),
    half=False,
    reference=_naive_gradient_x_input,
)
def _(s):
    return attribution.gradient_x_input, dict(
        model=Obj(_interpret_models(s)),
        ids=Ids(s.B, s.T, vocab=INTERPRET_V),
        targets=Ids(s.B, s.T, vocab=INTERPRET_V),
    )


def _naive_token_ablation(call, model, ids, targets, replacement):
    """One forward pass per replaced position."""
    with torch.no_grad():
        base = torch.log_softmax(model(ids), -1).gather(-1, targets[..., None])[..., 0]
        out = torch.zeros(*ids.shape, ids.shape[1], dtype=base.dtype)
        for j in range(ids.shape[1]):
            edited = ids.clone()
            edited[:, j] = replacement[:, j]
            out[:, :, j] = base - torch.log_softmax(model(edited), -1).gather(-1, targets[..., None])[..., 0]
    return out


@spec(
    "attribution.token_ablation",
    attribution.token_ablation,
    dict(kind=(0, 2), B=(1, 2), T=(1, 5)),
    half=False,
    reference=_naive_token_ablation,
)
def _(s):
    return attribution.token_ablation, dict(
        model=Obj(_interpret_models(s)),
        ids=Ids(s.B, s.T, vocab=INTERPRET_V),
        targets=Ids(s.B, s.T, vocab=INTERPRET_V),
        replacement=Ids(s.B, s.T, vocab=INTERPRET_V),
    )


LAB_IDS = torch.tensor([[20, 1, 43, 56]])  # four characters of the lab's vocabulary


def _lab_gpt_reference(call, path):
    """A GPT built from the file's configuration with its float16 weights, in float64."""
    saved = torch.load(path, map_location="cpu", weights_only=True)
    model = models.GPT(models.TransformerConfig(**saved["model_config"])).double()
    model.load_state_dict({k: v.double() for k, v in saved["model"].items()})
    with torch.no_grad():
        return model.eval()(LAB_IDS), saved["chars"]


@spec("interpret.load_lab_gpt", interpret.load_lab_gpt, {}, half=False, examples=5, reference=_lab_gpt_reference)
def _(s):
    def loaded(path):
        model, tokenizer = interpret.load_lab_gpt(path)
        with torch.no_grad():
            return model(LAB_IDS), tokenizer.chars

    return loaded, dict(path=FilePath(data.packaged_dir() / interpret.LAB_GPT, wrong=_garbage_file()))


# circuits (what attention learns: the circuit in the weights) -------------------------------------------

HEAD = ("negative", "float", "bool", "str")  # layer and head 0 are valid


@spec("circuits.head_circuits", circuits.head_circuits, dict(layer=(0, 1), head=(0, 1)))
def _(s):
    return circuits.head_circuits, dict(
        model=Obj(_attention_only()), layer=Int(s.layer, corruptions=HEAD), head=Int(s.head, corruptions=HEAD)
    )


@spec("circuits.ov_circuit", circuits.ov_circuit, dict(layer=(0, 1), head=(0, 1)))
def _(s):
    return circuits.ov_circuit, dict(
        model=Obj(_attention_only()), layer=Int(s.layer, corruptions=HEAD), head=Int(s.head, corruptions=HEAD)
    )


class HeadPair(Arg):
    """A (layer, head) pair; changed, out of range, negative, a string, floats."""

    corruptions = ("out of range", "negative", "str", "float")

    def __init__(self, pair):
        self.pair = pair

    def make(self, g):
        return self.pair

    def corrupt(self, v, how, g):
        return {"out of range": (v[0], 5), "negative": (v[0], -1), "str": "0,1", "float": (float(v[0]), 0.5)}[how]


@spec("circuits.qk_circuit", circuits.qk_circuit, dict(head=(0, 1), through=(0, 2)))
def _(s):
    args = dict(model=Obj(_attention_only()), layer=Int(1, corruptions=HEAD), head=Int(s.head, corruptions=HEAD))
    if s.through < 2:
        args["keys_through"] = HeadPair((0, s.through))
    return circuits.qk_circuit, args


@spec("circuits.diagonal_top1", circuits.diagonal_top1, dict(V=(1, 6)), half=False)
def _(s):
    return circuits.diagonal_top1, dict(circuit=Tensor(s.V, s.V, batch=None))


@spec("circuits.copying_score", circuits.copying_score, dict(V=(1, 6)))
def _(s):
    return circuits.copying_score, dict(circuit=Tensor(s.V, s.V, batch=None))


def _naive_composition(call, W_A, W_B):
    """|W_A W_B|_F / (|W_A|_F |W_B|_F), the sums of squares written out."""
    fro = lambda M: (M**2).sum(dim=(-2, -1)).sqrt()  # noqa: E731
    return fro(W_A @ W_B) / (fro(W_A) * fro(W_B))


@spec(
    "circuits.composition_score",
    circuits.composition_score,
    dict(D=(1, 5), E=(1, 5), F=(1, 5)),
    reference=_naive_composition,
)
def _(s):
    return circuits.composition_score, dict(W_A=Tensor(s.D, s.E, batch=None), W_B=Tensor(s.E, s.F, batch=None))


@spec("circuits.composition_scores", circuits.composition_scores, dict(h1=(0, 1), h2=(0, 1)))
def _(s):
    return circuits.composition_scores, dict(
        model=Obj(_attention_only()), earlier=HeadPair((0, s.h1)), later=HeadPair((1, s.h2))
    )


def _check_random_score(out, args):
    """A mean of scores in (0, 1] (1 for matrices of one entry)."""
    assert out.dim() == 0 and 0.0 < out.item() <= 1.0 + 1e-6


@spec(
    "circuits.random_composition_score",
    circuits.random_composition_score,
    dict(D=(1, 8), Dh=(1, 4), S=(1, 5)),
    check=_check_random_score,
    half=False,
)
def _(s):
    return circuits.random_composition_score, dict(
        d_model=Int(s.D), d_head=Int(s.Dh), samples=Int(s.S), generator=Gen()
    )


@spec("circuits.direct_logit_attribution", circuits.direct_logit_attribution, dict(B=(1, 3), T=(1, 6), L=(1, 2)))
def _(s):
    return circuits.direct_logit_attribution, dict(
        model=Obj(_attention_only(s.L)), ids=Ids(s.B, s.T, vocab=INTERPRET_V)
    )
