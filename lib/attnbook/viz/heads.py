"""What heads do: a phase change during training, a number per head, a head's circuit over the vocabulary, and
where attribution methods point.

Chapter: what attention learns (16).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..style import COLORWAY, WEIGHT_SCALE, color
from .attention import signed_heatmap
from .core import _labels, add_slider, to_numpy

__all__ = ["phase_change_figure", "head_grid", "circuit_slider", "attribution_figure"]


def phase_change_figure(
    steps,
    losses: dict[str, Sequence[float]],
    scores: dict[str, Sequence[float]],
    *,
    chance: float | None = None,
    title: str = "",
    loss_title: str = "loss (nats)",
    score_title: str = "score",
):
    """Losses (top) and head scores (bottom) against the same training steps, in two panels sharing the x-axis.

    ``chance`` draws the loss of a uniform guess, ln V, as a dotted line in the top panel.

    Shapes:
        steps: (N,); every curve of ``losses`` and ``scores``: (N,)
    """
    from plotly.subplots import make_subplots

    xs = to_numpy(steps).reshape(-1)
    for group, curves in (("losses", losses), ("scores", scores)):
        if not curves:
            raise ValueError(f"{group} must name at least one curve")
        for name, y in curves.items():
            if to_numpy(y).reshape(-1).shape != xs.shape:
                raise ValueError(f"{group}[{name!r}] must have one value per step ({len(xs)}), got {len(to_numpy(y))}")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.5, 0.5])
    for i, (name, y) in enumerate(losses.items()):
        fig.add_scatter(x=xs, y=to_numpy(y), name=name, mode="lines", line={"color": COLORWAY[i % 10]}, row=1, col=1)
    for i, (name, y) in enumerate(scores.items()):
        dash = "dot" if "previous" in name else None
        fig.add_scatter(
            x=xs,
            y=to_numpy(y),
            name=name,
            mode="lines",
            line={"color": COLORWAY[(i + len(losses)) % 10], "dash": dash},
            row=2,
            col=1,
        )
    if chance is not None:
        fig.add_hline(
            y=chance,
            line_dash="dot",
            line_width=1,
            annotation_text="chance, ln V",
            annotation_position="bottom left",
            row=1,
            col=1,
        )
    fig.update_yaxes(title_text=loss_title, rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text=score_title, range=[0, 1], row=2, col=1)
    fig.update_xaxes(title_text="training step", row=2, col=1)
    fig.update_layout(title=title, height=560, legend={"tracegroupgap": 4})
    return fig


def head_grid(
    values,
    *,
    title: str = "",
    value_name: str = "value",
    text_format: str = ".2f",
    zmin: float | None = 0.0,
    zmax: float | None = None,
):
    """A number per head (a score, a loss increase): one row per layer, one column per head, values written in.

    Shapes:
        values: (n_layers, n_heads)
    """
    import plotly.graph_objects as go

    z = to_numpy(values)
    if z.ndim != 2 or 0 in z.shape:
        raise ValueError(f"values must be a matrix (n_layers, n_heads), got shape {z.shape}")
    layers = [f"layer {i + 1}" for i in range(z.shape[0])]
    heads = [f"head {i + 1}" for i in range(z.shape[1])]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=heads,
            y=layers,
            zmin=zmin,
            zmax=zmax,
            colorscale=WEIGHT_SCALE,
            texttemplate=f"%{{z:{text_format}}}",
            colorbar={"title": {"text": value_name}},
            hovertemplate=f"%{{y}}, %{{x}}<br>{value_name} %{{z:{text_format}}}<extra></extra>",
        )
    )
    fig.update_layout(title=title, yaxis_autorange="reversed", height=200 + 70 * z.shape[0])
    return fig


def circuit_slider(
    tables: dict[str, object],
    labels: Sequence[str],
    *,
    title: str = "",
    row_title: str = "row",
    col_title: str = "column",
    value_name: str = "value",
):
    """Tables over the vocabulary (a head's OV or QK circuit), one at a time with a slider, each on a diverging
    scale centred on zero and as wide as its own largest entry.

    Shapes:
        every table: (V, V); labels: (V,)
    """
    if not tables:
        raise ValueError("tables must name at least one table")
    mats = [to_numpy(t).astype(np.float32) for t in tables.values()]
    names = list(tables)
    for name, m in zip(names, mats):
        if m.shape != (len(labels), len(labels)):
            raise ValueError(
                f"tables[{name!r}] must be ({len(labels)}, {len(labels)}), one row per label, got {m.shape}"
            )
    tops = [float(np.abs(m).max()) or 1.0 for m in mats]
    x = list(labels)
    fig = signed_heatmap(
        mats[0],
        title=f"{title}: {names[0]}" if title else names[0],
        x_title=col_title,
        y_title=row_title,
        x=x,
        y=x,
        zmax=tops[0],
        hover=value_name,
    )
    fig.update_layout(
        height=620,
        xaxis={"type": "category", "dtick": 1},
        yaxis={"type": "category", "dtick": 1, "autorange": "reversed"},
    )
    steps = [
        {
            "label": name,
            "data": {"z": [m], "zmin": [-top], "zmax": [top]},
            "layout": {"title.text": f"{title}: {name}" if title else name},
        }
        for name, m, top in zip(names, mats, tops)
    ]
    return add_slider(fig, steps, prefix="")


def attribution_figure(
    maps: dict[str, Sequence[float]],
    tokens: Sequence[str],
    *,
    truth: int | None = None,
    title: str = "",
    x_title: str = "input position (token)",
):
    """Where each method points, for one prediction: one row per method, each scaled to its largest value.

    A negative score (a token whose replacement made the prediction more likely) is drawn as 0, as it is not
    evidence that the input matters for the prediction; the hover text gives every score with its sign.
    ``truth`` (a position) outlines the input the prediction is copied from.

    Shapes:
        every map: (T,), over the T input tokens
    """
    import plotly.graph_objects as go

    if not maps:
        raise ValueError("maps must name at least one method")
    rows = [to_numpy(m).reshape(-1) for m in maps.values()]
    x = _labels([f"{i}:{t}" for i, t in enumerate(tokens)], len(tokens))
    for name, row in zip(maps, rows):
        if row.shape != (len(tokens),):
            raise ValueError(f"maps[{name!r}] must have one value per token ({len(tokens)}), got {row.shape}")
    z = np.stack([np.clip(r, 0, None) / max(r.max(), 1e-12) for r in rows])  # (methods, T), each row in [0, 1]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=x,
            y=list(maps),
            zmin=0.0,
            zmax=1.0,
            colorscale=WEIGHT_SCALE,
            colorbar={"title": {"text": "share of the row's largest"}},
            customdata=np.stack(rows),
            hovertemplate="%{y}<br>input %{x}<br>%{customdata:.3g}<extra></extra>",
        )
    )
    if truth is not None:
        if not 0 <= truth < len(tokens):
            raise ValueError(f"truth must be a position in [0, {len(tokens)}), got {truth}")
        fig.add_shape(
            type="rect",
            x0=truth - 0.5,
            x1=truth + 0.5,
            y0=-0.5,
            y1=len(maps) - 0.5,
            line={"color": color("value"), "width": 3},
        )
    fig.update_layout(
        title=title,
        xaxis_title=x_title,
        xaxis_type="category",
        yaxis_autorange="reversed",
        height=120 + 46 * len(maps),
    )
    return fig
