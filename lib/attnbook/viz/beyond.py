"""Beyond text: graphs and spectrograms.

Chapter: beyond text.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .core import _one_channel, to_numpy

__all__ = ["graph_figure", "spectrogram_grid"]


def graph_figure(
    adjacency,
    *,
    positions=None,
    node_color=None,
    node_text=None,
    title: str = "",
    height: int = 360,
    colorscale: str = "Viridis",
):
    """A graph drawn as nodes and edges, each node hoverable with its number (and ``node_text``).

    ``positions`` are the nodes' (x, y) coordinates; without them each connected component is laid out on
    its own with networkx's Kamada-Kawai layout (which draws a ring as a ring), side by side.
    ``node_color`` gives each node a number or a colour.

    Shapes:
        adjacency: (N, N) symmetric, bool or 0/1; positions: (N, 2); node_color, node_text: N entries
    """
    import plotly.graph_objects as go

    A = to_numpy(adjacency) != 0
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"adjacency must be a square matrix (N, N), got shape {A.shape}")
    n = A.shape[0]
    if positions is None:
        positions = _component_layout(A)
    pos = to_numpy(positions)
    if pos.shape != (n, 2):
        raise ValueError(f"positions must be (N, 2) = ({n}, 2), got shape {pos.shape}")
    xs, ys = [], []
    for i, j in zip(*np.nonzero(np.triu(A, 1))):
        xs += [pos[i, 0], pos[j, 0], None]
        ys += [pos[i, 1], pos[j, 1], None]
    text = [f"node {i}" + ("" if node_text is None else f"<br>{node_text[i]}") for i in range(n)]
    color = "#4c78a8" if node_color is None else list(node_color)
    fig = go.Figure(
        [
            go.Scatter(
                x=xs, y=ys, mode="lines", line={"color": "#9e9e9e", "width": 1.5}, hoverinfo="skip", showlegend=False
            ),
            go.Scatter(
                x=pos[:, 0],
                y=pos[:, 1],
                mode="markers+text",
                text=[str(i) for i in range(n)],
                textposition="middle center",
                textfont={"color": "white", "size": 9},
                marker={"size": 20, "color": color, "colorscale": colorscale, "line": {"width": 1, "color": "white"}},
                hovertext=text,
                hoverinfo="text",
                showlegend=False,
            ),
        ]
    )
    fig.update_layout(
        title=title,
        height=height,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        xaxis={"visible": False},
        yaxis={"visible": False, "scaleanchor": "x"},
    )
    return fig


def _component_layout(A: np.ndarray) -> np.ndarray:
    """(N, 2) positions: each connected component laid out alone, scaled by its size, left to right."""
    import networkx as nx

    graph = nx.from_numpy_array(A.astype(int))
    pos = np.zeros((A.shape[0], 2))
    x = 0.0
    for nodes in sorted(nx.connected_components(graph), key=lambda c: (-len(c), min(c))):
        nodes = sorted(nodes)
        radius = np.sqrt(len(nodes))
        if len(nodes) > 1:
            sub = graph.subgraph(nodes)
            start = nx.spectral_layout(sub) if len(nodes) > 2 else None  # a ring comes out as a circle, in order
            layout = nx.kamada_kawai_layout(sub, pos=start)
            xy = np.array([layout[i] for i in nodes])
            xy = xy / max(np.abs(xy).max(), 1e-9) * radius
        else:
            xy = np.zeros((1, 2))
        pos[nodes] = xy + [x + radius, 0.0]
        x += 2 * radius + 1.0
    return pos


def spectrogram_grid(
    spectrograms,
    titles: Sequence[str],
    *,
    sample_rate: float,
    hop_length: int,
    n_fft: int,
    cols: int = 4,
    title: str = "",
    patch_size: int | None = None,
    height_per_row: int = 210,
):
    """Spectrograms side by side, time (s) across and frequency (Hz) up, on one colour scale.

    With ``patch_size`` the borders of the P x P patches a transformer reads are drawn on each.

    Shapes:
        spectrograms: (n, F, T) with F frequency bins (from 0 Hz up) and T frames
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    S = _one_channel(spectrograms, "spectrograms must be (n, F, T) or (n, 1, F, T)")
    n, F, T = S.shape
    if len(titles) != n:
        raise ValueError(f"expected {n} titles, got {len(titles)}")
    rows = -(-n // cols)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=list(titles),
        horizontal_spacing=0.02,
        vertical_spacing=0.12,
        shared_xaxes=True,
        shared_yaxes=True,
    )
    t = np.arange(T) * hop_length / sample_rate  # (T,) seconds, the centre of each frame
    f = np.arange(F) * sample_rate / n_fft  # (F,) Hz
    lo, hi = float(S.min()), float(S.max())
    for k in range(n):
        r, c = divmod(k, cols)
        fig.add_trace(
            go.Heatmap(
                z=S[k],
                x=t,
                y=f,
                zmin=lo,
                zmax=hi,
                colorscale="Viridis",
                showscale=k == 0,
                colorbar={"title": "log(1 + |X|)"},
                hovertemplate="%{x:.3f} s, %{y:.0f} Hz: %{z:.2f}<extra></extra>",
            ),
            row=r + 1,
            col=c + 1,
        )
        if patch_size:
            dt, df = hop_length / sample_rate, sample_rate / n_fft
            for i in range(0, F + 1, patch_size):
                fig.add_shape(
                    type="line",
                    x0=t[0] - dt / 2,
                    x1=t[-1] + dt / 2,
                    y0=(i - 0.5) * df,
                    y1=(i - 0.5) * df,
                    line={"color": "white", "width": 1},
                    row=r + 1,
                    col=c + 1,
                )
            for j in range(0, T + 1, patch_size):
                fig.add_shape(
                    type="line",
                    x0=(j - 0.5) * dt,
                    x1=(j - 0.5) * dt,
                    y0=-df / 2,
                    y1=(F - 0.5) * df,
                    line={"color": "white", "width": 1},
                    row=r + 1,
                    col=c + 1,
                )
    fig.update_xaxes(title_text="time (s)", row=rows, col=1)
    fig.update_yaxes(title_text="frequency (Hz)", row=1, col=1)
    fig.update_layout(title=title, height=height_per_row * rows + 80, margin={"l": 10, "r": 10, "t": 70, "b": 10})
    return fig
