"""Shared pieces of the figures: arrays, labels, sliders and the matplotlib basics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..style import WEIGHT_SCALE, color

__all__ = ["to_numpy", "add_slider", "heatmap_mpl", "bars_mpl", "describe_mpl"]


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
        sliders=[
            {
                "active": active,
                "currentvalue": {"prefix": prefix},
                "pad": {"t": 50},
                "steps": slider_steps,
            }
        ]
    )
    return fig


def _heatmap_trace(z: np.ndarray, x: list[str], y: list[str], zmax: float | None):
    import plotly.graph_objects as go

    return go.Heatmap(
        z=z,
        x=x,
        y=y,
        zmin=0.0,
        zmax=zmax,
        colorscale=WEIGHT_SCALE,
        texttemplate="%{z:.2f}" if z.size <= 144 else None,
        hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>",
    )


def heatmap_mpl(weights, x_labels=None, y_labels=None, *, title: str = "", ax=None, annotate: bool = True):
    """A matplotlib heatmap of a (Tq, Tk) weight matrix; returns the figure."""
    import matplotlib.pyplot as plt

    z = to_numpy(weights)
    if ax is None:
        fig, ax = plt.subplots(figsize=(0.6 * z.shape[1] + 2, 0.5 * z.shape[0] + 1.5))
    else:
        fig = ax.figure
    ax.imshow(z, cmap=WEIGHT_SCALE, vmin=0.0, vmax=max(1.0, float(z.max())))
    ax.set_xticks(range(z.shape[1]), _labels(x_labels, z.shape[1]), rotation=45, ha="right")
    ax.set_yticks(range(z.shape[0]), _labels(y_labels, z.shape[0]))
    if annotate and z.size <= 144:
        for i in range(z.shape[0]):
            for j in range(z.shape[1]):
                ax.text(
                    j,
                    i,
                    f"{z[i, j]:.2f}",
                    ha="center",
                    va="center",
                    color="white" if z[i, j] > 0.5 else "black",
                    fontsize=8,
                )
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
    bars = ax.bar(range(v.size), v, color=color("weight"))
    ax.bar_label(bars, fmt="%.2f")
    ax.set_xticks(range(v.size), _labels(labels, v.size))
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def describe_mpl(fig) -> str:
    """Alt text for a matplotlib figure, read from the figure itself: its titles, axes and named curves.

    For example ``"Plot: Gradient norm against the lag. || dh_T / dh_t || (log scale) against lag k; curves:
    linear RNN, tanh RNN."``, so that a picture drawn by a live explorer says what it shows.
    """
    suptitle = fig._suptitle.get_text().strip() if getattr(fig, "_suptitle", None) is not None else ""
    parts = [f"{suptitle}." if suptitle else ""]
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>" or not (ax.has_data() or ax.get_title()):
            continue
        kind = "Heatmap" if ax.images else "Bar chart" if ax.patches and not ax.lines else "Plot"
        text = f"{kind}: {ax.get_title().strip()}." if ax.get_title().strip() else f"{kind}."
        y, x = ax.get_ylabel().strip(), ax.get_xlabel().strip()
        if y and ax.get_yscale() == "log":
            y += " (log scale)"
        if x and y:
            text += f" {y} against {x}."
        names = [line.get_label() for line in ax.lines if not line.get_label().startswith("_")]
        if names:
            text += f" Curves: {', '.join(names)}."
        elif kind == "Bar chart":
            labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
            heights = [bar.get_height() for bar in ax.patches]
            if labels and len(labels) == len(heights):
                text += " " + ", ".join(f"{lab} {h:.2f}" for lab, h in zip(labels, heights)) + "."
        parts.append(text)
    return " ".join(p for p in parts if p) or "A figure."


def _one_channel(x, message: str) -> np.ndarray:
    """A stack of one-channel images (n, H, W) from (n, H, W) or (n, 1, H, W); else a ValueError with ``message``."""
    a = to_numpy(x)
    if a.ndim == 4 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 3:
        raise ValueError(f"{message}, got shape {to_numpy(x).shape}")
    return a
