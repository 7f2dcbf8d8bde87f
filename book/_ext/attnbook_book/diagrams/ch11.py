"""Chapter 11, modern tweaks: post-norm against pre-norm, multi-head, grouped-query and multi-query
attention, the KV cache, mixture-of-experts routing, and rotary position embeddings."""

from __future__ import annotations

import math

from . import diagram
from .parts import post_norm_unit, pre_norm_unit
from .svg import SMALL, Diagram, _n


@diagram
def pre_vs_post_norm() -> Diagram:
    d = Diagram("pre_vs_post_norm", 720, 520, "A post-norm and a pre-norm block")
    y_in = 452
    d.text(180, 20, "Post-norm (2017)", bold=True)
    d.text(180, 42, "$x_{l+1} = \\operatorname{LN}(x_l + F(x_l))$", size=SMALL, muted=True)
    x = d.box(90, y_in, 180, 30, "$x_l$", shape="tensor")
    _, y = post_norm_unit(d, 180, x.y, "attention", w=180, h=30, norm_h=28)
    _, y = post_norm_unit(d, 180, y, "feed-forward", w=180, h=30, norm_h=28)
    d.arrow([(180, y), (180, y - 34)])
    d.text(196, y - 28, "$x_{l+1}$", anchor="start")
    d.text(180, y - 54, "the stream itself is normalised", size=SMALL, role="norm")
    # pre-norm: the stream runs straight through, the branches are normalised at their entrance
    sx, bx = 420, 570
    d.text(540, 20, "Pre-norm (GPT-2 and later)", bold=True)
    d.text(540, 42, "$x_{l+1} = x_l + F(\\operatorname{LN}(x_l))$", size=SMALL, muted=True)
    x = d.box(sx - 50, y_in, 100, 30, "$x_l$", shape="tensor")
    _, y = pre_norm_unit(d, sx, bx, x.y, "attention", w=170, h=30)
    _, y = pre_norm_unit(d, sx, bx, y, "feed-forward", w=170, h=30)
    d.arrow([(sx, y), (sx, y - 34)], residual=True)
    d.text(sx + 16, y - 28, "$x_{l+1}$", anchor="start")
    fin = d.box(sx - 70, y - 100, 140, 28, "final LayerNorm", shape="norm", size=SMALL, dashed=True)
    d.text(sx + 78, fin.cy - 9, "once, after", size=SMALL, anchor="start", muted=True)
    d.text(sx + 78, fin.cy + 9, "the last block", size=SMALL, anchor="start", muted=True)
    d.legend(200, 506, [({"residual": True}, "residual path: pre-norm leaves it untouched")])
    return d


@diagram
def gqa_mqa() -> Diagram:
    d = Diagram("gqa_mqa", 720, 290, "Multi-head, grouped-query and multi-query attention")
    H = 8
    for k, (title, h_kv) in enumerate([("multi-head", 8), ("grouped-query", 2), ("multi-query", 1)]):
        cx = 120 + k * 240
        d.text(cx, 22, title, bold=True)
        d.text(cx, 42, f"$H_{{kv}} = {h_kv}$", size=SMALL, muted=True)
        qs = [d.box(cx - 96 + i * 24, 70, 18, 26, "", role="query") for i in range(H)]
        span = 192 / h_kv
        kvs = []
        for g in range(h_kv):
            gx = cx - 96 + g * span + span / 2 - 3
            kb = d.box(gx - 10, 190, 10, 30, "", role="key")
            vb = d.box(gx, 190, 10, 30, "", role="value")
            kvs.append((kb, vb))
        for i, q in enumerate(qs):
            kb, vb = kvs[i // (H // h_kv)]
            d.line([q.bottom, (vb.x, kb.y)], width=1.2)
        d.text(cx, 244, f"cache per token: ${2 * h_kv}\\, D_h$ numbers", size=SMALL)
    d.text(
        360,
        276,
        "query heads (purple) read the key (orange) and value (green) head of their group",
        size=SMALL,
        muted=True,
    )
    return d


@diagram
def kv_cache() -> Diagram:
    d = Diagram("kv_cache", 720, 440, "A generation step with a KV cache")
    cols = [330 + 62 * j for j in range(4)]
    cw, ch = 56, 26
    weights = [0.1, 0.15, 0.3, 0.45]
    ky, wy, vy = 232, 170, 108
    for j, x in enumerate(cols):
        d.box(x - cw / 2, ky, cw, ch, f"$k_{j + 1}$", role="key", size=SMALL)
        d.grid(x - cw / 2, wy, 1, 1, (cw, ch), role="weight", values=[[weights[j]]], labels=[[f"{weights[j]:.2f}"]])
        d.box(x - cw / 2, vy, cw, ch, f"$v_{j + 1}$", role="value", size=SMALL)
        d.arrow([(x, ky), (x, wy + ch)], role="weight")
        d.line([(x, wy), (x, vy + ch)], role="weight")
    for y in (ky, vy):  # the entries of this step
        d.box(cols[-1] - cw / 2, y, cw, ch, shape="frame", role="line")
    d.text(cols[-1] + cw / 2 + 10, ky + ch / 2, "keys", size=SMALL, anchor="start", role="key")
    d.text(cols[-1] + cw / 2 + 10, wy + ch / 2, "weights", size=SMALL, anchor="start", role="weight")
    d.text(cols[-1] + cw / 2 + 10, vy + ch / 2, "values", size=SMALL, anchor="start", role="value")
    d.text((cols[0] + cols[2]) / 2, 296, "kept from earlier steps: the cache", size=SMALL, muted=True)
    # the new token: only its query, key and value are computed
    x = d.box(110, 370, 560, 30, "the new token $x_4$ (after the layers below)", shape="tensor", size=SMALL)
    wq = d.box(122, 316, 56, 28, "$W_Q$", shape="layer")
    wk = d.box(cols[-1] - 28, 316, 56, 28, "$W_K$", shape="layer")
    wv = d.box(596, 316, 56, 28, "$W_V$", shape="layer")
    for w in (wq, wk, wv):
        d.arrow([(w.cx, x.y), w.bottom])
    d.arrow([wk.top, (wk.cx, ky + ch)], role="key")
    d.arrow([wv.top, (wv.cx, vy - 16), (cols[-1], vy - 16), (cols[-1], vy)], role="value", radius=8)
    q = d.box(110, ky, 80, ch, "$q_4$", role="query", size=SMALL)
    d.arrow([wq.top, q.bottom], role="query")
    d.arrow([q.right, (cols[0] - cw / 2, ky + ch / 2)], role="query")
    d.text(246, ky - 12, "compare with every key", size=SMALL, role="query")
    pool = d.circle(250, vy + ch / 2, 14, "$\\Sigma$")
    d.arrow([(cols[0] - cw / 2, vy + ch / 2), pool.right], role="value")
    out = d.box(110, vy, 80, ch, "output", role="value", size=SMALL)
    d.arrow([pool.left, out.right], role="value")
    d.arrow([out.top, (out.cx, 56)])
    d.text(out.cx, 44, "on to the next layer, then the next token $x_5$", size=SMALL, anchor="start")
    d.box(110, 414, 20, 20, shape="frame", role="line")
    d.text(138, 424, "new at this step, appended to the cache", size=SMALL, anchor="start", muted=True)
    return d


@diagram
def moe_routing() -> Diagram:
    d = Diagram("moe_routing", 720, 330, "Routing a token to the experts of a mixture of experts")
    probs = [0.10, 0.55, 0.25, 0.10]
    chosen = {1, 2}  # the A = 2 most probable
    ys = [66 + 62 * e for e in range(4)]
    x = d.box(16, 146, 56, 32, "$x$", shape="tensor")
    router = d.box(102, 136, 126, 52, ["router", ("linear, softmax", SMALL)], shape="layer")
    d.arrow([x.right, router.left])
    d.text(280, 30, "$p_e(x)$", role="weight")
    d.text(420, 30, "$E = 4$ experts", bold=True, size=SMALL)
    pool = d.circle(580, 162, 16, "$\\Sigma$")
    for e, (y, p) in enumerate(zip(ys, probs)):
        cell = d.grid(254, y, 1, 1, (52, 30), role="weight", values=[[p]], labels=[[f"{p:.2f}"]])
        d.arrow([router.right, (236, router.cy), (236, y + 15), cell.left], radius=6)
        take = e in chosen
        ex = d.box(360, y - 2, 120, 34, f"$\\mathrm{{FFN}}_{e + 1}$", shape="layer", dashed=not take)
        if take:
            d.arrow([cell.right, ex.left], role="weight", width=1.4 + 5 * p)
            d.arrow([ex.right, (530, ex.cy), (530, pool.cy), pool.left], role="value", radius=8, touches=())
    d.text(420, 316, "only the top $A = 2$ experts run for this token", size=SMALL, muted=True)
    d.arrow([pool.right, (660, pool.cy)], role="value")
    d.text(690, pool.cy - 18, "$\\sum p_e \\mathrm{FFN}_e(x)$", anchor="end", size=SMALL, role="value")
    return d


@diagram
def rope() -> Diagram:
    d = Diagram("rope", 720, 360, "Rotary position embeddings: each pair of a query or key turns with the position")
    base, dh, m, n = 100.0, 8, 2, 5
    omegas = [base ** (-2 * i / dh) for i in range(dh // 2)]
    content = {"query": [0.4, 1.3, 2.2, 0.9], "key": [1.1, 0.2, 2.7, 1.8]}
    r = 36
    xs = [250 + 110 * i for i in range(dh // 2)]
    for i, (x, om) in enumerate(zip(xs, omegas)):
        d.text(x, 24, f"pair {i}", bold=True, size=SMALL)
        d.text(x, 42, f"$\\omega_{i} = {om:.2g}$", size=SMALL, muted=True)
    for _row, (role, pos, y, label) in enumerate(
        [("query", m, 120, f"$q$ at position $m = {m}$"), ("key", n, 250, f"$k$ at position $n = {n}$")]
    ):
        d.text(20, y, label, anchor="start", role=role)
        for i, (x, om) in enumerate(zip(xs, omegas)):
            d.path(
                f"M{_n(x - r)},{y}A{r},{r} 0 1 1 {_n(x + r)},{y}A{r},{r} 0 1 1 {_n(x - r)},{y}", role="mask", width=1
            )
            a0 = content[role][i]
            a1 = a0 + pos * om
            p0 = (x + r * math.sin(a0), y - r * math.cos(a0))
            p1 = (x + r * math.sin(a1), y - r * math.cos(a1))
            rr = r * 0.45
            s0 = (x + rr * math.sin(a0), y - rr * math.cos(a0))
            s1 = (x + rr * math.sin(a1), y - rr * math.cos(a1))
            large = 1 if (a1 - a0) % (2 * math.pi) > math.pi else 0
            d.path(
                f"M{_n(s0[0])},{_n(s0[1])}A{_n(rr)},{_n(rr)} 0 {large} 1 {_n(s1[0])},{_n(s1[1])}", role=role, width=1.4
            )
            d.path(f"M{x},{y}L{_n(p0[0])},{_n(p0[1])}", role="mask", width=1.6, dashed=True)
            d.path(f"M{x},{y}L{_n(p1[0])},{_n(p1[1])}", role=role, width=2.4)
            d.dot(p1[0], p1[1], role, 3.5)
        d.text(xs[-1] + 60, y, f"$\\times {pos}\\omega_i$", anchor="start", size=SMALL, role=role)
    d.text(
        360,
        318,
        "Pair $i$ of a vector at position $p$ turns by $p\\,\\omega_i$ (dashed: before). The dot product",
        size=SMALL,
        muted=True,
    )
    d.text(
        360,
        338,
        "$q'_m \\cdot k'_n$ sees only the difference of the angles: it depends on $n - m$ alone.",
        size=SMALL,
        muted=True,
    )
    return d
