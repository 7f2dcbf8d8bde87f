"""Chapter 4, queries, keys and values: attention as a soft lookup, and the same computation as matrices."""

from __future__ import annotations

import math

from . import diagram
from .svg import SMALL, Diagram

SCORES = [2.0, 0.6, -0.8, 0.3]  # illustrative scores q . k_i / tau for four keys (tau: the temperature)


def _softmax(xs):
    m = max(xs)
    e = [math.exp(x - m) for x in xs]
    return [v / sum(e) for v in e]


@diagram
def soft_lookup() -> Diagram:
    d = Diagram("soft_lookup", 720, 330, "Attention as a soft lookup")
    weights = _softmax(SCORES)
    ys = [76 + 58 * i for i in range(4)]
    heads = [(60, "query"), (190, "keys"), (300, "scores"), (430, "weights"), (540, "values"), (660, "output")]
    for x, h in heads:
        d.text(x, 26, h, bold=True, size=SMALL)
    q = d.box(30, ys[1] + 1, 60, 36, "$q$", role="query")
    sm = d.box(354, ys[0], 30, ys[-1] + 36 - ys[0], "", shape="op")
    d.text(369, ys[0] - 14, "softmax", size=SMALL)
    pool = d.circle(660, (ys[1] + ys[2]) / 2 + 18, 16, "$\\Sigma$")
    for i, (y, s, a) in enumerate(zip(ys, SCORES, weights)):
        k = d.box(160, y, 60, 36, f"$k_{i + 1}$", role="key")
        d.arrow([q.right, (120, q.cy), (136, y + 18), k.left], radius=6)
        sc = d.box(270, y, 60, 36, f"{s:+.1f}".replace("-", "\u2212"), role="weight")
        d.arrow([k.right, sc.left])
        d.arrow([sc.right, (sm.x, y + 18)])
        cell = d.grid(400, y, 1, 1, (60, 36), role="weight", values=[[a]], labels=[[f"{a:.2f}"]], size=SMALL)
        d.line([(sm.x1, y + 18), cell.left])
        v = d.box(510, y, 60, 36, f"$v_{i + 1}$", role="value")
        d.text(485, y + 18, "$\\times$", size=SMALL)
        d.arrow([v.right, (610, v.cy), pool.left], role="value", width=1 + 6 * a, head=False, radius=10)
    d.arrow([pool.bottom, (660, 290)], role="value")
    d.text(660, 306, "$\\sum_i a_i v_i$", role="value")
    d.text(300, 312, "$s_i = q \\cdot k_i / \\tau$", size=SMALL, muted=True)
    d.text(430, 312, "$a_i = \\operatorname{softmax}(s)_i$", size=SMALL, muted=True)
    return d


@diagram
def attention_matrix() -> Diagram:
    d = Diagram("attention_matrix", 720, 400, "Attention in matrix form, with the shapes")
    c = 22  # cell size
    tq, tk, dk, dv = 3, 5, 4, 3
    top1, top2 = 40, 230

    def matrix(x, y, rows, cols, role, name, shape, values=None, then=None, at=None):
        """A matrix as a grid, named above, its shape below, and the operator that follows it."""
        g = d.grid(x, y, rows, cols, c, role=role, values=values)
        d.text(g.cx, g.y - 14, name, role=role)
        d.text(g.cx, g.y1 + 18, shape, size=SMALL, muted=True)
        if then:
            d.text(g.x1 + 22, at if at is not None else g.cy, then)
        return g

    qb = matrix(40, top1 + c, tq, dk, "query", "$Q$", "$(T_q, d_k)$", then="$\\times$")
    kb = matrix(qb.x1 + 44, top1, dk, tk, "key", "$K^\\top$", "$(d_k, T_k)$", then="$=$", at=qb.cy)
    sb = matrix(
        kb.x1 + 44,
        top1 + c,
        tq,
        tk,
        "weight",
        "$S = QK^\\top$",
        "$(T_q, T_k)$",
        values=[[0.18] * tk for _ in range(tq)],
    )
    d.text(sb.x1 + 16, sb.cy - 11, "one score per (query, key)", anchor="start", size=SMALL, muted=True)
    d.text(sb.x1 + 16, sb.cy + 11, "pair: a dot product of length $d_k$", anchor="start", size=SMALL, muted=True)
    # row 2: softmax(S / sqrt(d_k)) row by row, then times V
    rows = [[0.10, 0.55, 0.15, 0.12, 0.08], [0.30, 0.10, 0.10, 0.40, 0.10], [0.05, 0.05, 0.70, 0.10, 0.10]]
    ab_y = top2 + 2 * c - c * tq / 2 + 4
    op = d.box(
        40,
        ab_y + tq * c / 2 - 22,
        190,
        44,
        ["$\\operatorname{softmax}(S / \\sqrt{d_k})$", ("each row sums to 1", SMALL)],
        shape="op",
    )
    d.arrow([(sb.cx, sb.y1 + 30), (sb.cx, top2 - 36), (op.cx, top2 - 36), op.top])
    ab = matrix(op.x1 + 40, ab_y, tq, tk, "weight", "$A$", "$(T_q, T_k)$", values=rows, then="$\\times$")
    d.arrow([op.right, ab.left])
    vb = matrix(ab.x1 + 44, top2, tk, dv, "value", "$V$", "$(T_k, d_v)$", then="$=$", at=ab.cy)
    matrix(vb.x1 + 44, ab.y, tq, dv, "value", "output", "$(T_q, d_v)$")
    d.text(
        40,
        386,
        "Row $i$ of the output is the average of the rows of $V$ with the weights of row $i$ of $A$.",
        anchor="start",
        size=SMALL,
        muted=True,
    )
    return d
