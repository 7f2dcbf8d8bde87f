"""The key to the book's pictures, shown on the notation page: what each colour and shape means."""

from __future__ import annotations

from . import diagram
from .svg import SMALL, Diagram


@diagram
def visual_language() -> Diagram:
    d = Diagram("visual_language", 720, 330, "The colours and shapes of the book's diagrams")
    d.text(20, 20, "Colours: what a tensor is", anchor="start", bold=True)
    roles = [
        ("query", "queries"),
        ("key", "keys"),
        ("value", "values, outputs"),
        ("weight", "scores, weights"),
        ("hidden", "recurrent states"),
        ("position", "positions"),
    ]
    for k, (role, text) in enumerate(roles):
        x, y = 20 + (k % 3) * 236, 46 + (k // 3) * 40
        d.box(x, y, 44, 26, "", role=role)
        d.text(x + 54, y + 13, text, anchor="start", size=SMALL)
    d.text(20, 146, "Shapes: what an operation is", anchor="start", bold=True)
    x, y = 20, 170
    d.box(x, y, 120, 30, "learned layer", shape="layer", size=SMALL)
    d.box(x + 236, y, 120, 30, "normalisation", shape="norm", size=SMALL)
    d.box(x + 472, y, 120, 30, "no parameters", shape="op", size=SMALL)
    d.circle(x + 11, 238, 11, "+")
    d.text(x + 30, 238, "sum", anchor="start", size=SMALL)
    d.circle(x + 247, 238, 11, ".")
    d.text(x + 266, 238, "element-wise product", anchor="start", size=SMALL)
    d.grid(x + 472, 226, 1, 3, 24, role="weight", values=[[0.1, 0.45, 0.9]], blocked=None)
    d.grid(x + 544, 226, 1, 1, 24, blocked=[[True]])
    d.text(x + 576, 238, "weights, masked", anchor="start", size=SMALL)
    y = 290
    d.arrow([(x, y), (x + 44, y)])
    d.text(x + 54, y, "data, forwards", anchor="start", size=SMALL)
    d.arrow([(x + 236, y), (x + 280, y)], residual=True)
    d.text(x + 290, y, "residual path", anchor="start", size=SMALL)
    d.arrow([(x + 472, y), (x + 516, y)], role="grad", dashed=True)
    d.text(x + 526, y, "gradients", anchor="start", size=SMALL)
    d.text(360, 318, "Shapes of tensors are written in muted text, as $(B, T, D)$.", size=SMALL, muted=True)
    return d
