"""Figures. Every function returns a figure and shows nothing by itself.

Plotly figures carry every state of their sliders inside the figure (precomputed steps), so the sliders
keep working in the static HTML book with no kernel. Matplotlib figures are what the live
``attnbook.widgets`` explorers redraw.

Colours come from ``attnbook.style``, the book's visual language: ``color("weight")`` for attention weights,
``color("position")`` for positions and so on, the same colours as in the diagrams.

Chapter: queries, keys and values (heatmaps, temperature); later chapters add their own figures.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .style import WEIGHT_SCALE, color

__all__ = [
    "color",
    "glue",
    "to_numpy",
    "add_slider",
    "attention_heatmap",
    "attention_heatmap_slider",
    "softmax_temperature_figure",
    "heatmap_mpl",
    "bars_mpl",
    "describe_mpl",
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
        z=z, x=x, y=y, zmin=0.0, zmax=zmax, colorscale=WEIGHT_SCALE,
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
    fig = go.Figure(go.Bar(x=x, y=w0, text=[f"{v:.2f}" for v in w0], textposition="outside",
                           marker_color=color("weight"), hovertemplate="%{x}: %{y:.3f}<extra></extra>"))
    fig.update_layout(title=title, yaxis_range=[0, 1.1], yaxis_title="weight", xaxis_type="category")
    steps = []
    for t in temperatures:
        w = weights(t)
        steps.append({"label": f"{t:.3g}", "data": {"y": [w], "text": [[f"{v:.2f}" for v in w]]},
                      "layout": {}})
    return add_slider(fig, steps, prefix="τ = ", active=start)


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


# --- Curves with a slider (gradient norms against the lag, learning curves) ---------------------------
# Chapter: vanishing gradients (gradient norms for a slider over the spectral radius).

__all__ += ["curves_slider", "curves_mpl"]


def curves_slider(x, steps, names: Sequence[str], step_labels: Sequence[str], *, prefix: str = "",
                  titles: Sequence[str] | None = None, title: str = "", x_title: str = "", y_title: str = "",
                  log_y: bool = False, y_range: Sequence[float] | None = None, active: int = 0,
                  dashes: Sequence[str | None] | None = None):
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
            raise ValueError(f"slider position {i} must have {len(names)} curves of shape {xs.shape}, got "
                             f"{[curve.shape for curve in step]}")
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
    slider_steps = [{"label": str(label), "data": {"y": step}, "layout": {"title.text": titles[i]}}
                    for i, (label, step) in enumerate(zip(step_labels, data))]
    return add_slider(fig, slider_steps, prefix=prefix, active=active)


def curves_mpl(x, curves: dict[str, Any], *, title: str = "", x_title: str = "", y_title: str = "",
               log_y: bool = False, y_range: Sequence[float] | None = None, ax=None):
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


# --- Positional encodings: the waveform explorer and signed heatmaps ------------------------------------
# Chapter: self-attention and positional encoding.

__all__ += ["positional_waveform_figure", "positional_waveform_mpl", "signed_heatmap"]

_PE_DIMS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128,
            160, 192, 224, 256, 320, 384, 448, 510, 511)


def _pe_dimension(pe: np.ndarray, d_model: int, dim: int, base: float) -> tuple[np.ndarray | None, str]:
    """One column of a sinusoidal PE table and a legend name saying which wave it is."""
    if dim >= d_model:
        return None, f"d_model = {d_model} has no dimension {dim}"
    i = dim // 2
    wavelength = 2 * np.pi * base ** (2 * i / d_model)
    kind = "sin" if dim % 2 == 0 else "cos"
    return np.round(pe[:, dim], 4), f"d_model = {d_model}, dimension {dim} = {kind} of pair i = {i}, wavelength {wavelength:.4g}"


def positional_waveform_figure(d_models: Sequence[int] = (16, 32, 64, 128, 256, 512), dims: Sequence[int] | None = None,
                               *, n_positions: int = 100, base: float = 10000.0, d_model: int = 64, dim: int = 4):
    """The value of one dimension of the sinusoidal encoding against the position, with two sliders.

    One slider picks the dimension, the other d_model; every combination is precomputed (one trace per
    d_model, restyled by the dimension slider), so both sliders work in the static HTML book.
    The legend names the wave: sine or cosine, its pair index i, and its wavelength in positions.
    """
    import plotly.graph_objects as go
    import torch

    from . import positional

    d_models = [int(d) for d in d_models]
    dims = [int(j) for j in (dims if dims is not None else [j for j in _PE_DIMS if j < max(d_models)])]
    if d_model not in d_models or dim not in dims:
        raise ValueError(f"d_model={d_model} must be one of {d_models} and dim={dim} one of {dims}")
    positions = np.arange(n_positions)
    tables = {d: to_numpy(positional.sinusoidal(n_positions, d, base=base, dtype=torch.float64)) for d in d_models}
    fig = go.Figure()
    for d in d_models:
        y, name = _pe_dimension(tables[d], d, dim, base)
        fig.add_scatter(x=positions, y=y if y is not None else [None] * n_positions, name=name,
                        mode="lines+markers", marker={"size": 4}, line_color=color("position"),
                        visible=d == d_model, showlegend=True,
                        hovertemplate="position %{x}<br>value %{y:.3f}<extra></extra>")
    fig.update_layout(title="One dimension of the sinusoidal positional encoding", xaxis_title="position",
                      yaxis_title="PE[position, dimension]", yaxis_range=[-1.15, 1.15],
                      legend={"orientation": "h", "y": -0.25}, height=520, margin={"b": 200})
    dim_steps = []
    for j in dims:
        ys, names = zip(*(_pe_dimension(tables[d], d, j, base) for d in d_models))
        dim_steps.append({"method": "restyle", "label": str(j),
                          "args": [{"y": [y if y is not None else [None] * n_positions for y in ys],
                                    "name": list(names)}]})
    d_steps = [{"method": "restyle", "label": str(d), "args": [{"visible": [e == d for e in d_models]}]}
               for d in d_models]
    fig.update_layout(sliders=[
        {"active": dims.index(dim), "currentvalue": {"prefix": "dimension: "}, "pad": {"t": 90}, "steps": dim_steps},
        {"active": d_models.index(d_model), "currentvalue": {"prefix": "d_model: "}, "pad": {"t": 170},
         "steps": d_steps},
    ])
    return fig


def positional_waveform_mpl(d_model: int, dim: int, *, n_positions: int = 100, base: float = 10000.0, ax=None):
    """Matplotlib version of one dimension of the sinusoidal encoding (for the live explorer)."""
    import matplotlib.pyplot as plt
    import torch

    from . import positional

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


def signed_heatmap(z, *, title: str = "", x_title: str = "", y_title: str = "", x=None, y=None,
                   colorscale: str = "RdBu", zmax: float | None = None, hover: str = "value"):
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
    fig = go.Figure(go.Heatmap(z=m, x=x, y=y, colorscale=colorscale, zmin=-top, zmax=top,
                               hovertemplate=f"{y_title or 'row'} %{{y}}<br>{x_title or 'column'} %{{x}}<br>"
                                             f"{hover} %{{z:.3f}}<extra></extra>"))
    fig.update_layout(title=title, xaxis_title=x_title, yaxis_title=y_title, yaxis_autorange="reversed")
    return fig


# --- Images, patches and where a vision transformer looks --------------------------------------------
# Chapter: vision transformers (10).

__all__ += ["patch_grid_figure", "image_attention_slider", "grid_similarity_figure"]


def patch_grid_figure(image, patch_size: int, *, title: str = "", numbers: bool = True):
    """An image with the borders of its P x P patches drawn on it, each patch labelled with its token index.

    ``image`` is (H, W, 3) RGB (uint8 or floats in [0, 1]) or (H, W) grey. Patches are numbered row by
    row, the order in which a vision transformer reads them.

    Shapes:
        image: (H, W, 3) or (H, W), with H and W multiples of patch_size
    """
    import plotly.graph_objects as go

    img = to_numpy(image)
    if img.ndim not in (2, 3) or (img.ndim == 3 and img.shape[-1] != 3):
        raise ValueError(f"image must be (H, W, 3) RGB or (H, W) grey, got shape {img.shape}")
    H, W = img.shape[:2]
    if H % patch_size or W % patch_size:
        raise ValueError(f"the image size {H} x {W} is not divisible by patch_size={patch_size}")
    if img.ndim == 2:
        trace = go.Heatmap(z=img, colorscale="Greys", showscale=False, hoverinfo="skip")
    else:
        rgb = img * 255 if img.max() <= 1.0 else img
        trace = go.Image(z=rgb.clip(0, 255).astype(np.uint8), hoverinfo="skip")
    fig = go.Figure(trace)
    line = {"color": "white", "width": 1}
    for r in range(0, H + 1, patch_size):
        fig.add_shape(type="line", x0=-0.5, x1=W - 0.5, y0=r - 0.5, y1=r - 0.5, line=line)
    for c in range(0, W + 1, patch_size):
        fig.add_shape(type="line", x0=c - 0.5, x1=c - 0.5, y0=-0.5, y1=H - 0.5, line=line)
    if numbers:
        gw = W // patch_size
        centres = [(r, c) for r in range(H // patch_size) for c in range(gw)]
        fig.add_scatter(x=[c * patch_size + (patch_size - 1) / 2 for _, c in centres],
                        y=[r * patch_size + (patch_size - 1) / 2 for r, _ in centres],
                        text=[str(r * gw + c) for r, c in centres], mode="text",
                        textfont={"color": "white", "size": 9}, hovertemplate="token %{text}<extra></extra>",
                        showlegend=False)
    fig.update_layout(title=title, width=min(700, 3 * W + 120), height=min(700, 3 * H + 120),
                      xaxis={"visible": False, "range": [-0.5, W - 0.5]},
                      yaxis={"visible": False, "autorange": "reversed", "scaleanchor": "x"},
                      margin={"l": 10, "r": 10, "t": 50, "b": 10})
    return fig


def _one_channel(x, message: str) -> np.ndarray:
    """A stack of one-channel images (n, H, W) from (n, H, W) or (n, 1, H, W); else a ValueError with ``message``."""
    a = to_numpy(x)
    if a.ndim == 4 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 3:
        raise ValueError(f"{message}, got shape {to_numpy(x).shape}")
    return a


def image_attention_slider(images, maps: dict[str, Any], *, step_labels: Sequence[str] | None = None,
                           prefix: str = "", titles: Sequence[str] | None = None, outline: float = 0.3,
                           cols: int | None = None, height: int | None = None):
    """Grey images next to attention maps over their patches, one panel per map, with a slider over the images.

    Each map is a grid of patch weights (Hg, Wg) for a grid of P x P patches, P = H / Hg, drawn as a heatmap
    at the patches' places, with the outline of the image (the contour at level ``outline``) on top. All
    panels and all slider positions share one colour scale, from 0 to the largest weight of any map, so
    that panels and images can be compared. The panels sit in one row, or ``cols`` to a row (wide images,
    such as spectrograms, read better two to a row).

    Shapes:
        images: (n, H, W) or (n, 1, H, W)
        maps:   {name: (n, Hg, Wg)}, with H and W multiples of Hg and Wg
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    imgs = _one_channel(images, "images must be (n, H, W) or (n, 1, H, W) grey images")
    n, H, W = imgs.shape
    grids = {name: to_numpy(m) for name, m in maps.items()}
    for name, m in grids.items():
        if m.ndim != 3 or m.shape[0] != n or H % m.shape[1] or W % m.shape[2]:
            raise ValueError(f"maps[{name!r}] must be (n={n}, Hg, Wg) with Hg dividing {H} and Wg dividing {W}, "
                             f"got shape {m.shape}")
    step_labels = [str(i) for i in range(n)] if step_labels is None else [str(s) for s in step_labels]
    if len(step_labels) != n:
        raise ValueError(f"expected {n} step_labels, got {len(step_labels)}")
    titles = list(titles) if titles is not None else [f"{prefix}{s}" for s in step_labels]
    top = max([float(m.max()) for m in grids.values()] + [1e-12])

    def upsample(m):  # (Hg, Wg) -> (H, W): each patch's weight on each of its pixels
        return np.kron(m, np.ones((H // m.shape[0], W // m.shape[1])))

    names = list(grids)
    n_panels = 1 + len(names)
    cols = n_panels if cols is None else max(1, min(int(cols), n_panels))
    n_rows = -(-n_panels // cols)

    def place(k):  # panel k (1 = the image) -> (row, col)
        return {"row": (k - 1) // cols + 1, "col": (k - 1) % cols + 1}

    fig = make_subplots(rows=n_rows, cols=cols, subplot_titles=["image"] + names, horizontal_spacing=0.03,
                        vertical_spacing=0.12)
    fig.add_trace(go.Heatmap(z=imgs[0], colorscale="Greys", showscale=False,
                             hovertemplate="pixel value %{z:.2f}<extra></extra>"), **place(1))
    outline_style = {"coloring": "none", "start": outline, "end": outline, "size": 1.0}
    for k, name in enumerate(names, start=2):
        fig.add_trace(go.Heatmap(z=upsample(grids[name][0]), colorscale="Inferno", zmin=0.0, zmax=top,
                                 showscale=k == 2, colorbar={"title": "weight", "x": 1.02},
                                 hovertemplate=f"{name}<br>weight %{{z:.3f}}<extra></extra>"), **place(k))
        fig.add_trace(go.Contour(z=imgs[0], contours=outline_style, line={"color": "#4fc3f7", "width": 2},
                                 showscale=False, showlegend=False, hoverinfo="skip", line_smoothing=1.0), **place(k))
    for k in range(1, len(names) + 2):
        fig.update_xaxes(visible=False, **place(k))
        fig.update_yaxes(visible=False, autorange="reversed", scaleanchor=f"x{'' if k == 1 else k}", **place(k))
    fig.update_layout(title=titles[0], height=height or 250 * n_rows + 80, margin={"l": 10, "r": 10, "t": 80, "b": 10})
    steps = []
    for i in range(n):
        z = [imgs[i]]
        for name in names:
            z += [upsample(grids[name][i]), imgs[i]]
        steps.append({"label": step_labels[i], "data": {"z": z}, "layout": {"title.text": titles[i]}})
    return add_slider(fig, steps, prefix=prefix)


def grid_similarity_figure(similarity, grid: Sequence[int], *, title: str = "", zmin: float = -1.0,
                           zmax: float = 1.0, gap: int = 1):
    """Tiles of a grid's self-similarity: tile (r, c) shows how similar cell (r, c) is to every cell of the grid.

    For N = Hg * Wg cells (patch positions) and an N x N similarity matrix (e.g. the cosine similarity of
    their position embeddings), the figure is an Hg x Wg arrangement of Hg x Wg maps, the layout of
    Figure 7 (centre) of Dosovitskiy et al. (2021).

    Shapes:
        similarity: (N, N) with N = Hg * Wg
    """
    import plotly.graph_objects as go

    s = to_numpy(similarity)
    gh, gw = (int(v) for v in grid)
    N = gh * gw
    if s.shape != (N, N):
        raise ValueError(f"similarity must be (N, N) with N = {gh} * {gw} = {N}, got shape {s.shape}")
    th, tw = gh + gap, gw + gap
    canvas = np.full((gh * th - gap, gw * tw - gap), np.nan)
    for i in range(N):
        r, c = divmod(i, gw)
        canvas[r * th:r * th + gh, c * tw:c * tw + gw] = s[i].reshape(gh, gw)
    fig = go.Figure(go.Heatmap(z=canvas, colorscale="Viridis", zmin=zmin, zmax=zmax, hoverongaps=False,
                               colorbar={"title": "similarity"},
                               hovertemplate="similarity %{z:.2f}<extra></extra>"))
    fig.update_layout(title=title, width=620, height=520, margin={"l": 10, "r": 10, "t": 50, "b": 10},
                      xaxis={"visible": False}, yaxis={"visible": False, "autorange": "reversed", "scaleanchor": "x"})
    return fig


# --- Beyond text: graphs and spectrograms -------------------------------------------------------------------
# Chapter: beyond text.

__all__ += ["graph_figure", "spectrogram_grid"]


def graph_figure(adjacency, *, positions=None, node_color=None, node_text=None, title: str = "",
                 height: int = 360, colorscale: str = "Viridis"):
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
    fig = go.Figure([
        go.Scatter(x=xs, y=ys, mode="lines", line={"color": "#9e9e9e", "width": 1.5}, hoverinfo="skip",
                   showlegend=False),
        go.Scatter(x=pos[:, 0], y=pos[:, 1], mode="markers+text", text=[str(i) for i in range(n)],
                   textposition="middle center", textfont={"color": "white", "size": 9},
                   marker={"size": 20, "color": color, "colorscale": colorscale, "line": {"width": 1, "color": "white"}},
                   hovertext=text, hoverinfo="text", showlegend=False),
    ])
    fig.update_layout(title=title, height=height, margin={"l": 10, "r": 10, "t": 50, "b": 10},
                      xaxis={"visible": False}, yaxis={"visible": False, "scaleanchor": "x"})
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


def spectrogram_grid(spectrograms, titles: Sequence[str], *, sample_rate: float, hop_length: int, n_fft: int,
                     cols: int = 4, title: str = "", patch_size: int | None = None, height_per_row: int = 210):
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
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=list(titles), horizontal_spacing=0.02,
                        vertical_spacing=0.12, shared_xaxes=True, shared_yaxes=True)
    t = np.arange(T) * hop_length / sample_rate  # (T,) seconds, the centre of each frame
    f = np.arange(F) * sample_rate / n_fft  # (F,) Hz
    lo, hi = float(S.min()), float(S.max())
    for k in range(n):
        r, c = divmod(k, cols)
        fig.add_trace(go.Heatmap(z=S[k], x=t, y=f, zmin=lo, zmax=hi, colorscale="Viridis", showscale=k == 0,
                                 colorbar={"title": "log(1 + |X|)"},
                                 hovertemplate="%{x:.3f} s, %{y:.0f} Hz: %{z:.2f}<extra></extra>"),
                      row=r + 1, col=c + 1)
        if patch_size:
            dt, df = hop_length / sample_rate, sample_rate / n_fft
            for i in range(0, F + 1, patch_size):
                fig.add_shape(type="line", x0=t[0] - dt / 2, x1=t[-1] + dt / 2, y0=(i - 0.5) * df, y1=(i - 0.5) * df,
                              line={"color": "white", "width": 1}, row=r + 1, col=c + 1)
            for j in range(0, T + 1, patch_size):
                fig.add_shape(type="line", x0=(j - 0.5) * dt, x1=(j - 0.5) * dt, y0=-df / 2, y1=(F - 0.5) * df,
                              line={"color": "white", "width": 1}, row=r + 1, col=c + 1)
    fig.update_xaxes(title_text="time (s)", row=rows, col=1)
    fig.update_yaxes(title_text="frequency (Hz)", row=1, col=1)
    fig.update_layout(title=title, height=height_per_row * rows + 80, margin={"l": 10, "r": 10, "t": 70, "b": 10})
    return fig


# --- Masks side by side, and accuracy against the amount of labelled data -----------------------------
# Chapter: from text to tokens, and pretraining (13).

__all__ += ["mask_panels", "accuracy_by_size"]


def mask_panels(masks: dict[str, Any], labels: dict[str, tuple[Sequence[str], Sequence[str]]] | None = None, *,
                title: str = ""):
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
        fig.add_trace(go.Heatmap(z=z, x=x, y=y, zmin=0, zmax=1, showscale=False,
                                 colorscale=[[0, "#f2f2f2"], [1, "#2b6cb0"]], xgap=1, ygap=1,
                                 hovertemplate="query %{y}<br>key %{x}<br>may attend: %{z}<extra></extra>"),
                      row=1, col=i)
        fig.update_xaxes(title_text="key", type="category", row=1, col=i)
        fig.update_yaxes(title_text="query" if i == 1 else None, type="category", autorange="reversed", row=1, col=i)
    fig.update_layout(title=title, height=380, margin={"t": 110})
    return fig


def accuracy_by_size(results: dict[str, dict[int, Sequence[float]]], *, title: str = "",
                     x_title: str = "labelled examples (log scale)", y_title: str = "test accuracy",
                     chance: float | None = None):
    """Accuracy against the number of labelled examples: the mean over seeds with error bars (lowest to highest).

    ``results`` maps a curve's name to {number of examples: [accuracy of each seed]}.
    """
    import plotly.graph_objects as go

    fig = go.Figure()
    for name, by_size in results.items():
        sizes = sorted(by_size)
        means = [float(np.mean(by_size[n])) for n in sizes]
        fig.add_scatter(x=sizes, y=means, name=name, mode="lines+markers",
                        error_y={"type": "data", "symmetric": False,
                                 "array": [max(by_size[n]) - m for n, m in zip(sizes, means)],
                                 "arrayminus": [m - min(by_size[n]) for n, m in zip(sizes, means)]},
                        hovertemplate="%{x} examples: %{y:.1%}<extra>" + name + "</extra>")
    if chance is not None:
        fig.add_hline(y=chance, line_dash="dot", annotation_text="chance")
    sizes = sorted({n for by_size in results.values() for n in by_size})
    fig.update_layout(title=title, xaxis_type="log", xaxis_title=x_title, yaxis_title=y_title,
                      yaxis_tickformat=".0%", xaxis_tickvals=sizes, xaxis_ticktext=[f"{n:,}" for n in sizes])
    return fig
