"""Figures. Every function returns a figure and shows nothing by itself.

Plotly figures carry every state of their sliders inside the figure (precomputed steps), so the sliders
keep working in the static HTML book with no kernel. Matplotlib figures are what the live
``attnbook.widgets`` explorers redraw.

Chapter: queries, keys and values (heatmaps, temperature); later chapters add their own figures.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = [
    "glue",
    "to_numpy",
    "add_slider",
    "attention_heatmap",
    "attention_heatmap_slider",
    "softmax_temperature_figure",
    "heatmap_mpl",
    "bars_mpl",
]


def glue(name: str, value) -> None:
    """Make a computed value available to the prose of the HTML book as ``{glue:text}`name```.

    It displays nothing in Jupyter or Colab (the same output format as ``myst_nb.glue(..., display=False)``,
    without needing myst-nb in the kernel). Numbers in the text thus always come from the executed cell.
    """
    from IPython.core.formatters import format_display_data
    from IPython.display import display

    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    bundle, metadata = format_display_data(value)
    prefix = "application/papermill.record/"
    metadata = {**metadata, "scrapbook": {"name": name, "mime_prefix": prefix}}
    display({prefix + mime: data for mime, data in bundle.items()}, raw=True, metadata=metadata)


def to_numpy(x) -> np.ndarray:
    """A tensor (on any device, with or without grad), array or nested list as a NumPy array."""
    if hasattr(x, "detach"):
        x = x.detach().to("cpu").float().numpy()
    return np.asarray(x, dtype=float)


def _labels(labels: Sequence[str] | None, n: int) -> list[str]:
    if labels is None:
        return [str(i) for i in range(n)]
    labels = [str(label) for label in labels]
    if len(labels) != n:
        raise ValueError(f"expected {n} labels, got {len(labels)}: {labels}")
    # plotly merges equal category labels; make repeated words ("the", "the") distinct
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label + "\u200b" * (seen[label] - 1))
    return out


def add_slider(fig, steps: Sequence[dict[str, Any]], *, prefix: str, active: int = 0):
    """Add a slider whose steps restyle the figure's traces and layout; return the figure.

    Each step is ``{"label": str, "data": {property: [value per trace]}, "layout": {path: value}}``.
    The steps hold all their data, so the slider works in a static page.
    """
    if not steps:
        raise ValueError("steps must contain at least one step")
    slider_steps = [
        {
            "method": "update",
            "label": str(step["label"]),
            "args": [step.get("data", {}), step.get("layout", {})],
        }
        for step in steps
    ]
    fig.update_layout(
        sliders=[{
            "active": active,
            "currentvalue": {"prefix": prefix},
            "pad": {"t": 50},
            "steps": slider_steps,
        }]
    )
    return fig


def _heatmap_trace(z: np.ndarray, x: list[str], y: list[str], zmax: float | None):
    import plotly.graph_objects as go

    return go.Heatmap(
        z=z, x=x, y=y, zmin=0.0, zmax=zmax, colorscale="Blues",
        texttemplate="%{z:.2f}" if z.size <= 144 else None,
        hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>",
    )


def attention_heatmap(weights, x_labels=None, y_labels=None, *, title: str = "Attention weights",
                      x_title: str = "key", y_title: str = "query", zmax: float | None = 1.0):
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
    fig.update_layout(title=title, xaxis_title=x_title, yaxis_title=y_title, yaxis_autorange="reversed",
                      xaxis_type="category", yaxis_type="category")
    return fig


def attention_heatmap_slider(weights_list, x_labels_list=None, y_labels_list=None, step_labels=None, *,
                             prefix: str = "", titles: Sequence[str] | None = None,
                             x_title: str = "key", y_title: str = "query", zmax: float | None = 1.0):
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
    fig = attention_heatmap(mats[0], x_list[0], y_list[0], title=titles[0], x_title=x_title, y_title=y_title,
                            zmax=zmax)
    steps = [
        {
            "label": step_labels[i],
            "data": {"z": [mats[i]], "x": [x_list[i]], "y": [y_list[i]]},
            "layout": {"title.text": titles[i]},
        }
        for i in range(n)
    ]
    return add_slider(fig, steps, prefix=prefix)


def softmax_temperature_figure(scores, labels=None, temperatures=None, *, title: str = "softmax(scores / T)"):
    """Bars of softmax(scores / T) with a slider over the temperature T (log-spaced by default).

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

    start = int(np.argmin(np.abs(np.log(temperatures))))  # the step closest to T = 1
    w0 = weights(temperatures[start])
    fig = go.Figure(go.Bar(x=x, y=w0, text=[f"{v:.2f}" for v in w0], textposition="outside",
                           hovertemplate="%{x}: %{y:.3f}<extra></extra>"))
    fig.update_layout(title=title, yaxis_range=[0, 1.1], yaxis_title="weight", xaxis_type="category")
    steps = []
    for t in temperatures:
        w = weights(t)
        steps.append({"label": f"{t:.3g}", "data": {"y": [w], "text": [[f"{v:.2f}" for v in w]]},
                      "layout": {}})
    return add_slider(fig, steps, prefix="T = ", active=start)


def heatmap_mpl(weights, x_labels=None, y_labels=None, *, title: str = "", ax=None, annotate: bool = True):
    """A matplotlib heatmap of a (Tq, Tk) weight matrix; returns the figure."""
    import matplotlib.pyplot as plt

    z = to_numpy(weights)
    if ax is None:
        fig, ax = plt.subplots(figsize=(0.6 * z.shape[1] + 2, 0.5 * z.shape[0] + 1.5))
    else:
        fig = ax.figure
    ax.imshow(z, cmap="Blues", vmin=0.0, vmax=max(1.0, float(z.max())))
    ax.set_xticks(range(z.shape[1]), _labels(x_labels, z.shape[1]), rotation=45, ha="right")
    ax.set_yticks(range(z.shape[0]), _labels(y_labels, z.shape[0]))
    if annotate and z.size <= 144:
        for i in range(z.shape[0]):
            for j in range(z.shape[1]):
                ax.text(j, i, f"{z[i, j]:.2f}", ha="center", va="center",
                        color="white" if z[i, j] > 0.5 else "black", fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def bars_mpl(values, labels=None, *, title: str = "", ylim=(0.0, 1.05), ax=None):
    """A matplotlib bar chart with the values written on the bars; returns the figure."""
    import matplotlib.pyplot as plt

    v = to_numpy(values).reshape(-1)
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(4.0, 0.8 * v.size + 1), 3))
    else:
        fig = ax.figure
    bars = ax.bar(range(v.size), v, color="#4c78a8")
    ax.bar_label(bars, fmt="%.2f")
    ax.set_xticks(range(v.size), _labels(labels, v.size))
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_title(title)
    fig.tight_layout()
    return fig
