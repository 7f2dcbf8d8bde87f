"""Curves with a slider (gradient norms against the lag, learning curves) and accuracy against data size."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .core import add_slider, to_numpy

__all__ = ["curves_slider", "curves_mpl", "accuracy_by_size"]


def curves_slider(
    x,
    steps,
    names: Sequence[str],
    step_labels: Sequence[str],
    *,
    prefix: str = "",
    titles: Sequence[str] | None = None,
    title: str = "",
    x_title: str = "",
    y_title: str = "",
    log_y: bool = False,
    y_range: Sequence[float] | None = None,
    active: int = 0,
    dashes: Sequence[str | None] | None = None,
):
    """Line plots whose y-values change with a slider; every slider position is precomputed.

    ``steps[i][j]`` is curve j at slider position i. ``y_range`` is in data units (also for ``log_y``).

    Shapes:
        x:        (N,)
        steps:    a list of slider positions, each a list of len(names) curves of shape (N,)
    """
    import plotly.graph_objects as go

    xs = to_numpy(x).reshape(-1)
    if not steps:
        raise ValueError("steps must contain at least one slider position")
    data = [[to_numpy(curve).reshape(-1) for curve in step] for step in steps]
    for i, step in enumerate(data):
        if len(step) != len(names) or any(curve.shape != xs.shape for curve in step):
            raise ValueError(
                f"slider position {i} must have {len(names)} curves of shape {xs.shape}, got "
                f"{[curve.shape for curve in step]}"
            )
    if len(step_labels) != len(data):
        raise ValueError(f"expected {len(data)} step_labels, got {len(step_labels)}")
    titles = list(titles) if titles is not None else [title] * len(data)
    dashes = list(dashes) if dashes is not None else [None] * len(names)
    fig = go.Figure()
    for j, name in enumerate(names):
        fig.add_scatter(x=xs, y=data[active][j], name=name, mode="lines", line={"dash": dashes[j]})
    layout = {"title": titles[active], "xaxis_title": x_title, "yaxis_title": y_title}
    if log_y:
        layout["yaxis_type"] = "log"
        layout["yaxis_exponentformat"] = "power"  # 10^-12, not plotly's SI prefixes (1p)
    if y_range is not None:
        low, high = (float(v) for v in y_range)
        layout["yaxis_range"] = [np.log10(low), np.log10(high)] if log_y else [low, high]
    fig.update_layout(**layout)
    slider_steps = [
        {"label": str(label), "data": {"y": step}, "layout": {"title.text": titles[i]}}
        for i, (label, step) in enumerate(zip(step_labels, data))
    ]
    return add_slider(fig, slider_steps, prefix=prefix, active=active)


def curves_mpl(
    x,
    curves: dict[str, Any],
    *,
    title: str = "",
    x_title: str = "",
    y_title: str = "",
    log_y: bool = False,
    y_range: Sequence[float] | None = None,
    ax=None,
):
    """A matplotlib figure of several named curves over the same x; returns the figure.

    Shapes:
        x:      (N,)
        curves: {name: (N,)}
    """
    import matplotlib.pyplot as plt

    xs = to_numpy(x).reshape(-1)
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.5, 3.5))
    else:
        fig = ax.figure
    for name, y in curves.items():
        ax.plot(xs, to_numpy(y).reshape(-1), label=name)
    if log_y:
        ax.set_yscale("log")
    if y_range is not None:
        ax.set_ylim(*y_range)
    ax.set_xlabel(x_title)
    ax.set_ylabel(y_title)
    ax.set_title(title)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return fig


def accuracy_by_size(
    results: dict[str, dict[int, Sequence[float]]],
    *,
    title: str = "",
    x_title: str = "labelled examples (log scale)",
    y_title: str = "test accuracy",
    chance: float | None = None,
):
    """Accuracy against the number of labelled examples: the mean over seeds with error bars (lowest to highest).

    ``results`` maps a curve's name to {number of examples: [accuracy of each seed]}.
    """
    import plotly.graph_objects as go

    fig = go.Figure()
    for name, by_size in results.items():
        sizes = sorted(by_size)
        means = [float(np.mean(by_size[n])) for n in sizes]
        fig.add_scatter(
            x=sizes,
            y=means,
            name=name,
            mode="lines+markers",
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [max(by_size[n]) - m for n, m in zip(sizes, means)],
                "arrayminus": [m - min(by_size[n]) for n, m in zip(sizes, means)],
            },
            hovertemplate="%{x} examples: %{y:.1%}<extra>" + name + "</extra>",
        )
    if chance is not None:
        fig.add_hline(y=chance, line_dash="dot", annotation_text="chance")
    sizes = sorted({n for by_size in results.values() for n in by_size})
    fig.update_layout(
        title=title,
        xaxis_type="log",
        xaxis_title=x_title,
        yaxis_title=y_title,
        yaxis_tickformat=".0%",
        xaxis_tickvals=sizes,
        xaxis_ticktext=[f"{n:,}" for n in sizes],
    )
    return fig
