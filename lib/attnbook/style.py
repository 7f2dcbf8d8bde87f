"""The book's visual language: one colour for each kind of thing, in the diagrams and in the plots.

The same colour means the same thing everywhere: queries are purple, keys orange, values green,
attention scores and weights blue (heatmaps use the sequential "Blues" scale), recurrent states cyan,
positions pink, normalisation olive, learned layers (parameters) brown, gradients red and masked-out
entries grey. The base colours are the ten of matplotlib's "tab10" (D3's category10), chosen to read
on white and on the dark page; ``color(role)`` is the colour of a role in a plot, ``COLORWAY`` the ten in
a fixed order for plots that cycle through them.

Diagrams draw shapes with a pale ``fill`` and a darker ``stroke`` derived from each base colour, in a
light and a dark variant (``theme("light")``, ``theme("dark")``), so that they follow the book's colour
mode. Plots follow it in the HTML book through ``PLOTLY_DARK``, the layout changes the book applies to a
plotly figure in dark mode. ``PLOTLY_PHONE`` is the one place that decides how every plotly figure is laid
out on a narrow screen (legend below the plot, small margins, fewer ticks); the book applies it in the
browser, so the figures themselves keep their desktop layout and Jupyter shows them as they are.

Chapter: every chapter's figures; the diagrams' shapes are described in the README ("Writing a chapter").
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ROLES", "COLORWAY", "WEIGHT_SCALE", "color", "theme", "PLOTLY_DARK", "PLOTLY_PHONE", "mix"]

# role -> (base colour, what it marks), in the order of matplotlib's "tab10" cycle.
ROLES: dict[str, tuple[str, str]] = {
    "weight": ("#1f77b4", "attention scores and weights"),
    "key": ("#ff7f0e", "keys"),
    "value": ("#2ca02c", "values, and what attention returns"),
    "grad": ("#d62728", "gradients and the backward pass"),
    "query": ("#9467bd", "queries"),
    "param": ("#8c564b", "learned layers: weight matrices, embeddings"),
    "position": ("#e377c2", "positions and positional encodings"),
    "mask": ("#7f7f7f", "masked-out entries (may not attend)"),
    "norm": ("#bcbd22", "normalisation: LayerNorm, RMSNorm"),
    "hidden": ("#17becf", "recurrent states: hidden state, cell state"),
}
COLORWAY: list[str] = [base for base, _ in ROLES.values()]
WEIGHT_SCALE = "Blues"  # the sequential scale of attention-weight heatmaps

# Neutral colours of the two modes: text, muted text, lines, the paper of a diagram, its neutral boxes.
_NEUTRAL = {
    "light": {
        "ink": "#1f2933",
        "muted": "#57616b",
        "line": "#3e4c59",
        "paper": "#ffffff",
        "data-f": "#ffffff",
        "data-s": "#52606d",
        "op-f": "#ffffff",
        "op-s": "#3e4c59",
        "on-strong": "#ffffff",
        "hatch": "#9aa5b1",
        "panel-f": "#f4f6f8",
        "panel-s": "#9aa5b1",
    },
    "dark": {
        "ink": "#e4e9ef",
        "muted": "#a3adb8",
        "line": "#b8c2cc",
        "paper": "#14181e",
        "data-f": "#1e242c",
        "data-s": "#9aa5b1",
        "op-f": "#1e242c",
        "op-s": "#b8c2cc",
        "on-strong": "#0f1318",
        "hatch": "#5f6b78",
        "panel-f": "#1a2028",
        "panel-s": "#56616e",
    },
}
_DARK_PAPER = "#14181e"  # the page background of the book's dark mode (pydata-sphinx-theme)


def _rgb(hex_colour: str) -> tuple[float, float, float]:
    h = hex_colour.lstrip("#")
    if len(h) != 6:
        raise ValueError(f"expected a colour as #rrggbb, got {hex_colour!r}")
    return tuple(int(h[i : i + 2], 16) / 255 for i in (0, 2, 4))  # type: ignore[return-value]


def mix(a: str, b: str, t: float) -> str:
    """The colour ``t`` of the way from ``a`` to ``b`` (both #rrggbb)."""
    ra, rb = _rgb(a), _rgb(b)
    return "#" + "".join(f"{round(255 * (x + (y - x) * t)):02x}" for x, y in zip(ra, rb))


def color(role: str) -> str:
    """The plot colour of ``role`` (one of ``ROLES``): the base colour, readable on light and dark paper."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {sorted(ROLES)}, got {role!r}")
    return ROLES[role][0]


@dataclass(frozen=True)
class Shade:
    fill: str  # pale (light mode) or deep (dark mode) tint for areas
    stroke: str  # outlines, lines and coloured text


def _shade(base: str, mode: str) -> Shade:
    if mode == "light":
        return Shade(fill=mix(base, "#ffffff", 0.80), stroke=mix(base, "#000000", 0.38))
    return Shade(fill=mix(base, _DARK_PAPER, 0.70), stroke=mix(base, "#ffffff", 0.35))


def theme(mode: str) -> dict[str, str]:
    """Every colour a diagram uses in ``mode`` ("light" or "dark"), as CSS custom-property values.

    Keys are ``ink``, ``muted``, ``line``, ``paper``, ``data-f``/``data-s`` (neutral boxes), ``op-f``/``op-s``
    (operations without parameters), ``panel-f``/``panel-s`` (groups of shapes), ``on-strong`` (text on a
    strong fill), ``hatch`` (masked cells), and ``<role>-f`` / ``<role>-s`` for every role.
    """
    if mode not in _NEUTRAL:
        raise ValueError(f"mode must be 'light' or 'dark', got {mode!r}")
    out = dict(_NEUTRAL[mode])
    for role, (base, _) in ROLES.items():
        shade = _shade(base, mode)
        out[f"{role}-f"], out[f"{role}-s"] = shade.fill, shade.stroke
    return out


# Layout changes that make a plotly figure legible on the dark page (applied in the browser, then undone
# when the reader switches back); trace colours stay, since the base colours read on both backgrounds.
PLOTLY_DARK: dict[str, object] = {
    "paper_bgcolor": "rgba(0,0,0,0)",
    "plot_bgcolor": "#1e252e",
    "font_color": "#dde3ea",
    "axis": {"gridcolor": "#323c48", "zerolinecolor": "#4b5765", "linecolor": "#4b5765"},
    "slider": {"bgcolor": "#323c48", "activebgcolor": "#8a97a6", "bordercolor": "#4b5765", "tickcolor": "#8a97a6"},
    "legend_bgcolor": "rgba(0,0,0,0)",
}


# How a plotly figure is laid out when its column is narrower than ``width`` px (a phone): the page applies
# these layout changes in the browser and undoes them when the column is wide again, so each figure
# function describes its desktop layout only. The goal: at 390 px the plot keeps at least two thirds of the
# figure's width, and no title, tick label, legend entry or annotation runs into another.
PLOTLY_PHONE: dict[str, object] = {
    "width": 600,  # column width (px) below which a figure takes the phone layout
    "font_size": 11,  # the figure's text, tick labels and legend
    "title_size": 13,  # the figure's title (wrapped onto several lines when it is wider than the figure)
    "annotation_size": 11,  # annotations, subplot titles among them (wrapped when they run into each other)
    "margin": {"l": 8, "r": 8, "t": 36, "b": 8},  # the axes' labels push these out as far as they need
    "legend": {"orientation": "h", "x": 0, "xanchor": "left", "y": 0, "yanchor": "bottom", "yref": "container"},
    "nticks": 5,  # at most this many ticks on a linear axis
    "log_dtick": 1,  # log axes spanning two decades or more: a tick at each power of ten only
    "colorbar_thickness": 10,  # px: colour bars stay on the right, thin and close to the plot
    "colorbar_xpad": 4,
    "title_standoff": 6,  # px between an axis's tick labels and its title
}
