"""Chapter 6, masking: the causal mask and padding masks as grids over (query, key)."""

from __future__ import annotations

from . import diagram
from .svg import SMALL, Diagram

WORDS = ["the", "cat", "sat", "on", "it"]
CELL = 40


def _axes(
    d: Diagram, g, keys: list[str], queries: list[str], *, key_title: str = "key $j$", query_title: str = "query $i$"
):
    for j, w in enumerate(keys):
        d.text(g.x + (j + 0.5) * CELL, g.y - 12, w, size=SMALL)
    for i, w in enumerate(queries):
        d.text(g.x - 8, g.y + (i + 0.5) * CELL, w, size=SMALL, anchor="end")
    d.text(g.cx, g.y - 34, key_title, size=SMALL, muted=True)
    d.text(g.x - 44, g.y - 34, query_title, size=SMALL, muted=True)


@diagram
def causal_mask() -> Diagram:
    d = Diagram("causal_mask", 720, 350, "The causal mask")
    n = len(WORDS)
    future = [[j > i for j in range(n)] for i in range(n)]
    m = d.grid(
        110,
        80,
        n,
        n,
        CELL,
        role="weight",
        values=[[0.12] * n for _ in range(n)],
        blocked=future,
        labels=[["$-\\infty$" if j > i else "0" for j in range(n)] for i in range(n)],
    )
    _axes(d, m, WORDS, WORDS)
    d.text(m.cx, m.y1 + 22, "the mask $M$, added to the scores", size=SMALL)
    weights = [[1 / (i + 1) if j <= i else 0.0 for j in range(n)] for i in range(n)]
    a = d.grid(
        470,
        80,
        n,
        n,
        CELL,
        role="weight",
        values=weights,
        blocked=future,
        labels=[[f"{weights[i][j]:.2f}" if j <= i else "0" for j in range(n)] for i in range(n)],
    )
    _axes(d, a, WORDS, WORDS)
    d.text(a.cx, a.y1 + 22, "weights after the softmax", size=SMALL)
    d.arrow([(m.x1 + 40, m.cy), (a.x - 64, a.cy)])
    d.text((m.x1 + a.x) / 2 - 12, m.cy - 16, "softmax", size=SMALL)
    d.grid(110, 324, 1, 1, 16, role="weight", values=[[0.12]])
    d.text(134, 332, "may attend ($j \\le i$, True in code)", size=SMALL, anchor="start", muted=True)
    d.grid(420, 324, 1, 1, 16, role="weight", values=[[0]], blocked=[[True]])
    d.text(444, 332, "future key: weight exactly 0", size=SMALL, anchor="start", muted=True)
    return d


@diagram
def padding_masks() -> Diagram:
    d = Diagram("padding_masks", 720, 340, "A padding mask, and a padding mask combined with the causal mask")
    n, length = 5, 3
    keys = ["the", "cat", "sat", "pad", "pad"]
    pad = [[j >= length for j in range(n)] for i in range(n)]
    p = d.grid(110, 80, n, n, CELL, role="weight", values=[[0.12] * n for _ in range(n)], blocked=pad)
    _axes(d, p, keys, keys)
    d.text(p.cx, p.y1 + 22, "padding: keys $j < 3$, the length", size=SMALL)
    d.text(p.cx, p.y1 + 42, "shape $(B, 1, T_k)$, the same for every query", size=SMALL, muted=True)
    both = [[j >= length or j > i for j in range(n)] for i in range(n)]
    c = d.grid(430, 80, n, n, CELL, role="weight", values=[[0.12] * n for _ in range(n)], blocked=both)
    _axes(d, c, keys, keys)
    d.text(c.cx, c.y1 + 22, "padding & causal", size=SMALL)
    d.text(c.cx, c.y1 + 42, "$(B, 1, T) \\;\\&\\; (T, T) \\to (B, T, T)$", size=SMALL, muted=True)
    for i in range(length, n):
        d.text(c.x1 + 8, c.y + (i + 0.5) * CELL, "ignored", size=SMALL, anchor="start", muted=True)
    d.text(c.x1 + 8, c.y + (n + 0.1) * CELL - 2, "by the loss", size=SMALL, anchor="start", muted=True)
    return d
