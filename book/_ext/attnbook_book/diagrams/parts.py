"""Pieces that several diagrams share: sub-layers on a residual path, normalised after the sum (post-norm)
or at the entrance of the branch (pre-norm)."""

from __future__ import annotations

from .svg import Box, Diagram


def post_norm_unit(
    d: Diagram,
    cx: float,
    y_in: float,
    label,
    *,
    w: float = 220,
    h: float = 34,
    side: float = -1,
    norm_label: str = "LayerNorm",
    norm_h: float = 30,
) -> tuple[Box, float]:
    """A sub-layer whose output is added to its input and then normalised, drawn upwards from y_in (its input);
    the residual path runs on the left (side -1) or the right (+1). Returns (the sub-layer box, the top y)."""
    res_x = cx + side * (w / 2 + 24)
    sub = d.box(cx - w / 2, y_in - 26 - h, w, h, label, shape="layer")
    add = d.circle(cx, sub.y - 24, 11, "+")
    norm = d.box(cx - w / 2, add.y - 12 - norm_h, w, norm_h, norm_label, shape="norm")
    d.arrow([(cx, y_in), sub.bottom])
    d.dot(cx, y_in - 11, "line", 4.5)
    edge = add.left if side < 0 else add.right
    d.arrow([(cx, y_in - 11), (res_x, y_in - 11), (res_x, add.cy), edge], residual=True, radius=10)
    d.arrow([sub.top, add.bottom])
    d.arrow([add.top, norm.bottom])
    return sub, norm.y


def post_norm_height(h: float = 34, norm_h: float = 30) -> float:
    """How tall ``post_norm_unit`` draws a unit."""
    return 73 + h + norm_h


def pre_norm_unit(
    d: Diagram,
    sx: float,
    bx: float,
    y_in: float,
    label,
    *,
    w: float = 200,
    h: float = 34,
    norm_label: str = "LayerNorm",
    norm_h: float = 26,
) -> tuple[Box, float]:
    """A sub-layer on a branch beside the residual stream (the vertical line at x = sx): the branch is
    normalised at its entrance and its output added back to the stream, which passes through untouched.
    Drawn upwards from y_in; the branch is centred on x = bx. Returns (the sub-layer box, the top y)."""
    y_branch = y_in - 12
    norm = d.box(bx - w / 2, y_branch - 22 - norm_h, w, norm_h, norm_label, shape="norm")
    sub = d.box(bx - w / 2, norm.y - 20 - h, w, h, label, shape="layer")
    add = d.circle(sx, sub.y - 22, 11, "+")
    d.dot(sx, y_branch, "line", 4.5)
    d.arrow([(sx, y_branch), (bx, y_branch), norm.bottom], radius=8)
    d.arrow([norm.top, sub.bottom])
    d.arrow([sub.top, (bx, add.cy), add.right if bx > sx else add.left], radius=8)
    d.arrow([(sx, y_in), add.bottom], residual=True)
    return sub, add.y


def pre_norm_height(h: float = 34, norm_h: float = 26) -> float:
    """How tall ``pre_norm_unit`` draws a unit (from its input to the top of its sum)."""
    return 12 + 22 + norm_h + 20 + h + 22 + 11
