"""Chapter 5, self-attention and positional encoding: where Q, K and V come from, and the sinusoidal
encoding as pairs of coordinates that rotate with the position."""

from __future__ import annotations

import math

from . import diagram
from .svg import SMALL, Diagram, _n


def _projections(d: Diagram, sources: dict[str, object], x0: float, top: float):
    """W_Q, W_K, W_V boxes above their sources, and the Q, K, V they give; returns the three tensors."""
    out = {}
    for k, (name, role) in enumerate([("Q", "query"), ("K", "key"), ("V", "value")]):
        cx = x0 + k * 92
        w = d.box(cx - 32, top + 78, 64, 30, f"$W_{name}$", shape="layer")
        t = d.box(cx - 32, top + 24, 64, 30, f"${name}$", role=role)
        src = sources[name]
        d.arrow([(cx, src.y), w.bottom])
        d.arrow([w.top, t.bottom])
        out[name] = t
    return out


def _attend(d: Diagram, sources: dict, x: float, w: float, output: str) -> None:
    """Projections of the sources to Q, K and V, attention over them, and its output, in a panel at x."""
    qkv = _projections(d, sources, x + 32 + (w - 250) / 2, 136)
    att = d.box(x, 92, w, 34, "$\\operatorname{softmax}(QK^\\top / \\sqrt{d_k})\\, V$", shape="op")
    for t in qkv.values():
        d.arrow([t.top, (t.cx, att.y1)])
    y = d.box(x, 40, w, 30, output, role="value")
    d.arrow([att.top, y.bottom])


@diagram
def self_vs_cross_attention() -> Diagram:
    d = Diagram("self_vs_cross_attention", 720, 346, "Self-attention and cross-attention")
    for x0, title in (
        (20, "Self-attention: $Q$, $K$, $V$ from the same $X$"),
        (380, "Cross-attention: $Q$ from $X$, $K$ and $V$ from $Z$"),
    ):
        d.text(x0, 20, title, anchor="start", bold=True, size=SMALL)
    # self-attention: one sequence X of T tokens; cross-attention: queries from X, keys and values from Z
    x = d.box(54, 272, 250, 34, "$X$: $T$ tokens of width $D$", shape="tensor")
    _attend(d, {"Q": x, "K": x, "V": x}, 54, 250, "$Y$: one output per token ($T$)")
    xq = d.box(414, 272, 84, 34, "$X$: $T_q$", shape="tensor")
    z = d.box(510, 272, 176, 34, "$Z$: $T_k$ tokens", shape="tensor")
    _attend(d, {"Q": xq, "K": z, "V": z}, 414, 272, "$Y$: one output per query ($T_q$)")
    d.text(550, 332, "e.g. $X$ the words written so far, $Z$ the source", size=SMALL, muted=True)
    return d


@diagram
def sinusoidal_rotation() -> Diagram:
    d = Diagram(
        "sinusoidal_rotation", 720, 330, "The sinusoidal encoding: each pair of dimensions turns with the position"
    )
    r, cy, k, p0 = 78, 160, 3, 1
    # geometric frequencies, omega_i = omega_1 ** i as in eq-sinusoidal; omega_1 = 0.4 means a width of about 20
    for i, cx in enumerate([130, 360, 590]):
        omega = 0.4**i
        d.text(cx, 24, f"pair $i = {i}$", bold=True, size=SMALL)
        d.text(cx, 44, f"$\\omega_{i} = {omega:g}$", size=SMALL, muted=True)
        d.path(
            f"M{_n(cx - r - 10)},{cy}H{_n(cx + r + 10)}M{cx},{_n(cy - r - 10)}V{_n(cy + r + 10)}", role="mask", width=1
        )
        d.path(
            f"M{_n(cx - r)},{cy}A{r},{r} 0 1 1 {_n(cx + r)},{cy}A{r},{r} 0 1 1 {_n(cx - r)},{cy}",
            role="line",
            width=1.2,
        )

        def point(p):
            a = omega * p
            return cx + r * math.sin(a), cy - r * math.cos(a)

        # the shift by k positions: an arc of angle omega * k from p0 to p0 + k
        a0, a1 = omega * p0, omega * (p0 + k)
        rr = r * 0.55
        s0 = (cx + rr * math.sin(a0), cy - rr * math.cos(a0))
        s1 = (cx + rr * math.sin(a1), cy - rr * math.cos(a1))
        large = 1 if a1 - a0 > math.pi else 0
        d.path(
            f"M{cx},{cy}L{_n(s0[0])},{_n(s0[1])}A{_n(rr)},{_n(rr)} 0 {large} 1 {_n(s1[0])},{_n(s1[1])}Z",
            role="position",
            width=1.2,
            fill="position",
        )
        for p in range(0, 6):
            x, y = point(p)
            d.dot(x, y, "position" if p in (p0, p0 + k) else "line", 5 if p in (p0, p0 + k) else 3)
        for p, _out in ((p0, 1), (p0 + k, 1)):
            x, y = point(p)
            ox, oy = (x - cx) / r, (y - cy) / r
            d.text(
                x + 26 * ox + (12 if p == p0 + k and omega < 0.2 else 0),
                y + 16 * oy,
                f"$p = {p}$",
                size=SMALL,
                role="position",
                anchor="middle",
            )
        d.text(cx, cy + r + 30, f"angle $\\omega_{i} k = {omega * k:.2g}$", size=SMALL)
    d.text(
        360,
        292,
        "Each pair $(\\sin \\omega_i p, \\cos \\omega_i p)$ is a point on a circle; moving $k = 3$ positions on",
        size=SMALL,
        muted=True,
    )
    d.text(
        360,
        312,
        "rotates it by $\\omega_i k$, the same angle from every starting position $p$.",
        size=SMALL,
        muted=True,
    )
    return d
