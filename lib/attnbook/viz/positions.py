"""Positional encodings: the waveform explorer.

Chapter: self-attention and positional encoding.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..style import color
from .core import to_numpy

__all__ = ["positional_waveform_figure", "positional_waveform_mpl"]


_PE_DIMS = (
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    10,
    12,
    14,
    16,
    20,
    24,
    28,
    32,
    40,
    48,
    56,
    64,
    80,
    96,
    112,
    128,
    160,
    192,
    224,
    256,
    320,
    384,
    448,
    510,
    511,
)


def _pe_dimension(pe: np.ndarray, d_model: int, dim: int, base: float) -> tuple[np.ndarray | None, str]:
    """One column of a sinusoidal PE table and a legend name saying which wave it is."""
    if dim >= d_model:
        return None, f"d_model = {d_model} has no dimension {dim}"
    i = dim // 2
    wavelength = 2 * np.pi * base ** (2 * i / d_model)
    kind = "sin" if dim % 2 == 0 else "cos"
    return np.round(
        pe[:, dim], 4
    ), f"d_model = {d_model}, dimension {dim} = {kind} of pair i = {i}, wavelength {wavelength:.4g}"


def positional_waveform_figure(
    d_models: Sequence[int] = (16, 32, 64, 128, 256, 512),
    dims: Sequence[int] | None = None,
    *,
    n_positions: int = 100,
    base: float = 10000.0,
    d_model: int = 64,
    dim: int = 4,
):
    """The value of one dimension of the sinusoidal encoding against the position, with two sliders.

    One slider picks the dimension, the other d_model; every combination is precomputed (one trace per
    d_model, restyled by the dimension slider), so both sliders work in the static HTML book.
    The legend names the wave: sine or cosine, its pair index i, and its wavelength in positions.
    """
    import plotly.graph_objects as go
    import torch

    from .. import positional

    d_models = [int(d) for d in d_models]
    dims = [int(j) for j in (dims if dims is not None else [j for j in _PE_DIMS if j < max(d_models)])]
    if d_model not in d_models or dim not in dims:
        raise ValueError(f"d_model={d_model} must be one of {d_models} and dim={dim} one of {dims}")
    positions = np.arange(n_positions)
    tables = {d: to_numpy(positional.sinusoidal(n_positions, d, base=base, dtype=torch.float64)) for d in d_models}
    fig = go.Figure()
    for d in d_models:
        y, name = _pe_dimension(tables[d], d, dim, base)
        fig.add_scatter(
            x=positions,
            y=y if y is not None else [None] * n_positions,
            name=name,
            mode="lines+markers",
            marker={"size": 4},
            line_color=color("position"),
            visible=d == d_model,
            showlegend=True,
            hovertemplate="position %{x}<br>value %{y:.3f}<extra></extra>",
        )
    fig.update_layout(
        title="One dimension of the sinusoidal positional encoding",
        xaxis_title="position",
        yaxis_title="PE[position, dimension]",
        yaxis_range=[-1.15, 1.15],
        legend={"orientation": "h", "y": -0.25},
        height=520,
        margin={"b": 200},
    )
    dim_steps = []
    for j in dims:
        ys, names = zip(*(_pe_dimension(tables[d], d, j, base) for d in d_models))
        dim_steps.append(
            {
                "method": "restyle",
                "label": str(j),
                "args": [{"y": [y if y is not None else [None] * n_positions for y in ys], "name": list(names)}],
            }
        )
    d_steps = [
        {"method": "restyle", "label": str(d), "args": [{"visible": [e == d for e in d_models]}]} for d in d_models
    ]
    fig.update_layout(
        sliders=[
            {
                "active": dims.index(dim),
                "currentvalue": {"prefix": "dimension: "},
                "pad": {"t": 90},
                "steps": dim_steps,
            },
            {
                "active": d_models.index(d_model),
                "currentvalue": {"prefix": "d_model: "},
                "pad": {"t": 170},
                "steps": d_steps,
            },
        ]
    )
    return fig


def positional_waveform_mpl(d_model: int, dim: int, *, n_positions: int = 100, base: float = 10000.0, ax=None):
    """Matplotlib version of one dimension of the sinusoidal encoding (for the live explorer)."""
    import matplotlib.pyplot as plt
    import torch

    from .. import positional

    pe = to_numpy(positional.sinusoidal(n_positions, d_model, base=base, dtype=torch.float64))
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 3))
    else:
        fig = ax.figure
    y, name = _pe_dimension(pe, d_model, dim, base)
    if y is not None:
        ax.plot(np.arange(n_positions), y, ".-", markersize=3, color=color("position"))
    ax.set_ylim(-1.15, 1.15)
    ax.set_xlabel("position")
    ax.set_ylabel("PE[position, dimension]")
    ax.set_title(name, fontsize=9)
    fig.tight_layout()
    return fig
