"""Images, patches and where a vision transformer looks.

Chapter: the vision transformer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .core import _one_channel, add_slider, to_numpy

__all__ = ["patch_grid_figure", "image_attention_slider", "grid_similarity_figure"]


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
        fig.add_scatter(
            x=[c * patch_size + (patch_size - 1) / 2 for _, c in centres],
            y=[r * patch_size + (patch_size - 1) / 2 for r, _ in centres],
            text=[str(r * gw + c) for r, c in centres],
            mode="text",
            textfont={"color": "white", "size": 9},
            hovertemplate="token %{text}<extra></extra>",
            showlegend=False,
        )
    fig.update_layout(
        title=title,
        width=min(700, 3 * W + 120),
        height=min(700, 3 * H + 120),
        xaxis={"visible": False, "range": [-0.5, W - 0.5]},
        yaxis={"visible": False, "autorange": "reversed", "scaleanchor": "x"},
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )
    return fig


def image_attention_slider(
    images,
    maps: dict[str, Any],
    *,
    step_labels: Sequence[str] | None = None,
    prefix: str = "",
    titles: Sequence[str] | None = None,
    outline: float = 0.3,
    cols: int | None = None,
    height: int | None = None,
):
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
            raise ValueError(
                f"maps[{name!r}] must be (n={n}, Hg, Wg) with Hg dividing {H} and Wg dividing {W}, got shape {m.shape}"
            )
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

    fig = make_subplots(
        rows=n_rows, cols=cols, subplot_titles=["image"] + names, horizontal_spacing=0.03, vertical_spacing=0.12
    )
    fig.add_trace(
        go.Heatmap(z=imgs[0], colorscale="Greys", showscale=False, hovertemplate="pixel value %{z:.2f}<extra></extra>"),
        **place(1),
    )
    outline_style = {"coloring": "none", "start": outline, "end": outline, "size": 1.0}
    for k, name in enumerate(names, start=2):
        fig.add_trace(
            go.Heatmap(
                z=upsample(grids[name][0]),
                colorscale="Inferno",
                zmin=0.0,
                zmax=top,
                showscale=k == 2,
                colorbar={"title": "weight", "x": 1.02},
                hovertemplate=f"{name}<br>weight %{{z:.3f}}<extra></extra>",
            ),
            **place(k),
        )
        fig.add_trace(
            go.Contour(
                z=imgs[0],
                contours=outline_style,
                line={"color": "#4fc3f7", "width": 2},
                showscale=False,
                showlegend=False,
                hoverinfo="skip",
                line_smoothing=1.0,
            ),
            **place(k),
        )
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


def grid_similarity_figure(
    similarity, grid: Sequence[int], *, title: str = "", zmin: float = -1.0, zmax: float = 1.0, gap: int = 1
):
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
        canvas[r * th : r * th + gh, c * tw : c * tw + gw] = s[i].reshape(gh, gw)
    fig = go.Figure(
        go.Heatmap(
            z=canvas,
            colorscale="Viridis",
            zmin=zmin,
            zmax=zmax,
            hoverongaps=False,
            colorbar={"title": "similarity"},
            hovertemplate="similarity %{z:.2f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=title,
        width=620,
        height=520,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        xaxis={"visible": False},
        yaxis={"visible": False, "autorange": "reversed", "scaleanchor": "x"},
    )
    return fig
