"""Attention weights as heatmaps (with a slider), softmax temperature, signed heatmaps and masks.

Chapters: queries, keys and values; masking; multi-head attention.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..style import color
from .core import _heatmap_trace, _labels, add_slider, to_numpy

__all__ = [
    "attention_heatmap",
    "attention_heatmap_slider",
    "softmax_temperature_figure",
    "signed_heatmap",
    "mask_panels",
]


def attention_heatmap(
    weights,
    x_labels=None,
    y_labels=None,
    *,
    title: str = "Attention weights",
    x_title: str = "key",
    y_title: str = "query",
    zmax: float | None = 1.0,
):
    """A heatmap of attention weights: one row per query, one column per key.

    Shapes:
        weights: (Tq, Tk)
    """
    import plotly.graph_objects as go

    z = to_numpy(weights)
    if z.ndim != 2:
        raise ValueError(f"weights must be a matrix (Tq, Tk), got shape {z.shape}")
    x, y = _labels(x_labels, z.shape[1]), _labels(y_labels, z.shape[0])
    fig = go.Figure(_heatmap_trace(z, x, y, zmax))
    fig.update_layout(
        title=title,
        xaxis_title=x_title,
        yaxis_title=y_title,
        yaxis_autorange="reversed",
        xaxis_type="category",
        yaxis_type="category",
    )
    return fig


def attention_heatmap_slider(
    weights_list,
    x_labels_list=None,
    y_labels_list=None,
    step_labels=None,
    *,
    prefix: str = "",
    titles: Sequence[str] | None = None,
    x_title: str = "key",
    y_title: str = "query",
    zmax: float | None = 1.0,
):
    """Several attention heatmaps in one figure with a slider to move between them.

    The matrices may differ in size (different sentences, heads, layers).

    Shapes:
        weights_list: a list of (Tq_i, Tk_i)
    """
    mats = [to_numpy(w) for w in weights_list]
    n = len(mats)
    if n == 0:
        raise ValueError("weights_list is empty")
    x_list = [_labels(None if x_labels_list is None else x_labels_list[i], m.shape[1]) for i, m in enumerate(mats)]
    y_list = [_labels(None if y_labels_list is None else y_labels_list[i], m.shape[0]) for i, m in enumerate(mats)]
    step_labels = [str(i) for i in range(n)] if step_labels is None else [str(s) for s in step_labels]
    titles = list(titles) if titles is not None else [f"{prefix}{s}" for s in step_labels]
    fig = attention_heatmap(mats[0], x_list[0], y_list[0], title=titles[0], x_title=x_title, y_title=y_title, zmax=zmax)
    steps = [
        {
            "label": step_labels[i],
            "data": {"z": [mats[i]], "x": [x_list[i]], "y": [y_list[i]]},
            "layout": {"title.text": titles[i]},
        }
        for i in range(n)
    ]
    return add_slider(fig, steps, prefix=prefix)


def softmax_temperature_figure(scores, labels=None, temperatures=None, *, title: str = "softmax(scores / τ)"):
    """Bars of softmax(scores / τ) with a slider over the temperature τ (log-spaced by default).

    Shapes:
        scores: (N,)
    """
    import plotly.graph_objects as go

    s = to_numpy(scores).reshape(-1)
    temperatures = np.geomspace(0.02, 20, 31) if temperatures is None else np.asarray(temperatures, dtype=float)
    if np.any(temperatures <= 0):
        raise ValueError(f"temperatures must all be > 0, got {temperatures.tolist()}")
    x = _labels(labels, s.size)

    def weights(t: float) -> np.ndarray:
        e = np.exp((s - s.max()) / t)
        return e / e.sum()

    start = int(np.argmin(np.abs(np.log(temperatures))))  # the step closest to τ = 1
    w0 = weights(temperatures[start])
    fig = go.Figure(
        go.Bar(
            x=x,
            y=w0,
            text=[f"{v:.2f}" for v in w0],
            textposition="outside",
            marker_color=color("weight"),
            hovertemplate="%{x}: %{y:.3f}<extra></extra>",
        )
    )
    fig.update_layout(title=title, yaxis_range=[0, 1.1], yaxis_title="weight", xaxis_type="category")
    steps = []
    for t in temperatures:
        w = weights(t)
        steps.append({"label": f"{t:.3g}", "data": {"y": [w], "text": [[f"{v:.2f}" for v in w]]}, "layout": {}})
    return add_slider(fig, steps, prefix="τ = ", active=start)


def signed_heatmap(
    z,
    *,
    title: str = "",
    x_title: str = "",
    y_title: str = "",
    x=None,
    y=None,
    colorscale: str = "RdBu",
    zmax: float | None = None,
    hover: str = "value",
):
    """A heatmap of a matrix with positive and negative entries, on a diverging colour scale centred on zero.

    Shapes:
        z: (rows, columns)
    """
    import plotly.graph_objects as go

    m = to_numpy(z)
    if m.ndim != 2:
        raise ValueError(f"z must be a matrix, got shape {m.shape}")
    top = float(np.abs(m).max()) if zmax is None else float(zmax)
    m = m.astype(np.float32)  # single precision is plenty for colours and hover text, and half the page weight
    fig = go.Figure(
        go.Heatmap(
            z=m,
            x=x,
            y=y,
            colorscale=colorscale,
            zmin=-top,
            zmax=top,
            hovertemplate=f"{y_title or 'row'} %{{y}}<br>{x_title or 'column'} %{{x}}<br>"
            f"{hover} %{{z:.3f}}<extra></extra>",
        )
    )
    fig.update_layout(title=title, xaxis_title=x_title, yaxis_title=y_title, yaxis_autorange="reversed")
    return fig


def mask_panels(
    masks: dict[str, Any], labels: dict[str, tuple[Sequence[str], Sequence[str]]] | None = None, *, title: str = ""
):
    """Boolean attention masks side by side, one panel each: a filled cell is a key the query may attend to.

    ``labels`` maps a panel's name to (key labels, query labels).

    Shapes:
        each mask: (Tq, Tk), True = may attend
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if not masks:
        raise ValueError("masks is empty")
    titles = [name.replace(": ", ":<br>") for name in masks]  # two short lines each, so neighbours do not overlap
    fig = make_subplots(rows=1, cols=len(masks), subplot_titles=titles, horizontal_spacing=0.08)
    for i, (name, mask) in enumerate(masks.items(), start=1):
        z = to_numpy(mask)
        if z.ndim != 2:
            raise ValueError(f"mask {name!r} must be a matrix (Tq, Tk), got shape {z.shape}")
        keys, queries = (labels or {}).get(name, (None, None))
        x, y = _labels(keys, z.shape[1]), _labels(queries, z.shape[0])
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=x,
                y=y,
                zmin=0,
                zmax=1,
                showscale=False,
                colorscale=[[0, "#f2f2f2"], [1, "#2b6cb0"]],
                xgap=1,
                ygap=1,
                hovertemplate="query %{y}<br>key %{x}<br>may attend: %{z}<extra></extra>",
            ),
            row=1,
            col=i,
        )
        fig.update_xaxes(title_text="key", type="category", row=1, col=i)
        fig.update_yaxes(title_text="query" if i == 1 else None, type="category", autorange="reversed", row=1, col=i)
    fig.update_layout(title=title, height=380, margin={"t": 110})
    return fig
