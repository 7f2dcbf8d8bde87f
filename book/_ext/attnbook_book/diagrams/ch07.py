"""Chapter 7, multi-head attention: project, split into heads, attend per head, concatenate, W_O."""

from __future__ import annotations

from . import diagram
from .svg import SMALL, Diagram

H = 4  # heads drawn


@diagram
def multi_head_attention() -> Diagram:
    d = Diagram("multi_head_attention", 720, 600, "Multi-head attention, step by step, with the shapes")
    cx, sx = 200, 372  # the pipeline's centre, and where the shapes are written

    def shape(y, text, note=""):
        d.text(sx, y, text, anchor="start", size=SMALL, muted=True)
        if note:
            d.text(sx, y + 18, note, anchor="start", size=SMALL, muted=True)

    x = d.box(cx - 90, 552, 180, 32, "$X$", shape="tensor")
    shape(568, "$(B, T, D)$")
    proj = d.box(cx - 110, 488, 220, 32, "$[\\,W_Q \\;\\; W_K \\;\\; W_V\\,]$", shape="layer")
    shape(504, "one product with a $D \\times 3D$ matrix")
    d.arrow([x.top, proj.bottom])
    # Q, K, V, each cut into H heads of width D_h
    stacks = {}
    for k, (name, role) in enumerate([("Q", "query"), ("K", "key"), ("V", "value")]):
        sx_k = cx - 130 + k * 90
        stacks[name] = d.stack(sx_k, 404, 66, 32, H, f"${name}$", role=role)
        d.arrow([(sx_k + 33, proj.y), (sx_k + 33, 436)])
    shape(
        396,
        "$(B, T, D) \\to (B, T, H, D_h) \\to (B, H, T, D_h)$",
        "a reshape and a transpose: $H$ heads of width $D_h$",
    )
    att = d.stack(
        cx - 130, 300, 246, 40, H, "$\\operatorname{softmax}(Q_h K_h^\\top / \\sqrt{D_h})\\, V_h$", shape="op"
    )
    for s in stacks.values():
        d.arrow([(s.cx, s.y - 3 * 6), (s.cx, att.y1)])
    shape(300, "every head attends on its own:", "weights $(B, H, T, T)$")
    heads = d.stack(cx - 60, 216, 120, 32, H, "heads", role="value")
    d.arrow([(heads.cx, att.y - 3 * 6), heads.bottom])
    shape(224, "$(B, H, T, D_h)$")
    # concatenate: transpose back and put the heads side by side
    cat_y, cw = 138, 45
    for h in range(H):
        d.box(cx - 2 * cw + h * cw, cat_y, cw, 32, f"{h + 1}", role="value", size=SMALL)
    d.arrow([(heads.cx, heads.y - 3 * 6), (cx, cat_y + 32)])
    shape(146, "concatenate: $(B, T, H \\cdot D_h) = (B, T, D)$")
    wo = d.box(cx - 60, 76, 120, 32, "$W_O$", shape="layer")
    d.arrow([(cx, cat_y), wo.bottom])
    shape(92, "$D \\times D$: mixes the heads")
    out = d.box(cx - 90, 18, 180, 32, "output", role="value")
    d.arrow([wo.top, out.bottom])
    shape(34, "$(B, T, D)$")
    return d
