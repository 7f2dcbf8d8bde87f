"""Chapter 9, flash attention: the GPU's memory hierarchy and what each algorithm moves through it, and the
loops of tiled attention over blocks of Q, K and V."""

from __future__ import annotations

from . import diagram
from .svg import SMALL, Diagram


def _matrix(d: Diagram, x, y, w, h, label, role):
    return d.box(x, y, w, h, label, role=role, size=SMALL)


@diagram
def memory_hierarchy() -> Diagram:
    d = Diagram("memory_hierarchy", 720, 456, "What standard and flash attention move between HBM and SRAM")
    for x0, title in ((16, "Standard attention"), (372, "Flash attention")):
        d.text(x0 + 166, 20, title, bold=True)
        d.box(x0, 40, 332, 150, shape="panel")
        d.text(x0 + 12, 58, "HBM: 40 or 80 GiB, 1.5 to 2 TB/s", anchor="start", size=SMALL, muted=True)
        d.box(x0 + 16, 286, 300, 110, shape="panel", dashed=True)
        d.text(x0 + 166, 366, "on-chip SRAM: 192 KiB per SM,", size=SMALL, muted=True)
        d.text(x0 + 166, 384, "about 10 times faster", size=SMALL, muted=True)
    # standard: Q, K, V, O and the T x T matrices S and P all live in HBM and pass through SRAM
    names = [("$Q$", "query"), ("$K$", "key"), ("$V$", "value"), ("$O$", "value")]
    q, k, v, o = (_matrix(d, 33 + i * 34, 76, 26, 100, n, r) for i, (n, r) in enumerate(names))
    s = _matrix(d, 180, 76, 70, 100, "$S$", "weight")
    p = _matrix(d, 262, 76, 70, 100, "$P$", "weight")
    tile = d.box(96, 300, 206, 34, "tiles of $S$ and $P$", role="weight", size=SMALL)
    d.arrow([(q.cx + 17, q.y1), (q.cx + 17, tile.cy), tile.left], role="line", radius=8)
    d.text(q.cx + 26, 236, "$Q$, $K$, $V$", anchor="start", size=SMALL)
    d.arrow([s.bottom, (s.cx, tile.y)], role="weight", tail=True)
    d.arrow([p.bottom, (p.cx, tile.y)], role="weight", tail=True)
    d.text(182, 424, "writes and reads $S$ and $P$: four passes over", size=SMALL)
    d.text(182, 442, "$T^2$ numbers through the slow memory", size=SMALL)
    # flash: S and P never leave the chip; Q, K, V are read in tiles, O is written once
    x0 = 372
    srcs = [_matrix(d, x0 + 33 + i * 60, 76, 30, 100, n, r) for i, (n, r) in enumerate(names)]
    for src, (label, role) in zip(srcs, [("$Q_i$", "query"), ("$K_j$", "key"), ("$V_j$", "value"), ("$O_i$", "value")]):
        t = d.box(src.cx - 20, 300, 40, 30, label, role=role, size=SMALL)
        if label == "$O_i$":
            d.arrow([t.top, src.bottom], role=role)
        else:
            d.arrow([src.bottom, t.top], role=role)
    d.text(x0 + 166, 344, "$S_{ij}$, $P_{ij}$, $m$, $\\ell$, $\\tilde O$ stay on the chip", size=SMALL)
    d.text(x0 + 166, 424, "reads $Q$, $K$, $V$ in tiles and writes $O$:", size=SMALL)
    d.text(x0 + 166, 442, "no $T \\times T$ matrix ever reaches HBM", size=SMALL)
    return d


@diagram
def flash_tiles() -> Diagram:
    d = Diagram("flash_tiles", 720, 420, "The loops of tiled (flash) attention, with a causal mask")
    nb, b = 4, 44  # blocks per side, block size in the picture
    i_cur, j_cur = 2, 1  # the tile being computed
    sx, sy = 170, 120
    # Q in row blocks (the outer loop), K^T in column blocks (the inner loop)
    for i in range(nb):
        d.box(sx - 70, sy + i * b, 40, b, f"$Q_{i + 1}$", role="query", size=SMALL)
        d.box(sx + i * b, sy - 70, b, 40, f"$K_{i + 1}^\\top$", role="key", size=SMALL)
    d.box(sx - 70, sy + i_cur * b, 40, b, shape="frame", role="query")
    d.box(sx + j_cur * b, sy - 70, b, 40, shape="frame", role="key")
    # the tiles of S: skipped above the diagonal, masked inside on it, computed below
    sub = b / 4
    for i in range(nb):
        for j in range(nb):
            x, y = sx + j * b, sy + i * b
            if j > i:
                d.grid(x, y, 1, 1, b, blocked=[[True]])
            elif j == i:
                d.grid(
                    x,
                    y,
                    4,
                    4,
                    sub,
                    role="weight",
                    values=[[0.35] * 4 for _ in range(4)],
                    blocked=[[c > r for c in range(4)] for r in range(4)],
                )
            else:
                d.grid(x, y, 1, 1, b, role="weight", values=[[0.35]])
    d.box(sx + j_cur * b, sy + i_cur * b, b, b, shape="frame", role="weight")
    d.text(sx + (j_cur + 0.5) * b, sy + (i_cur + 0.5) * b, "$S_{ij}$", size=SMALL)
    d.text(sx + nb * b / 2, sy + nb * b + 18, "scores $S$, $T \\times T$, never stored whole", size=SMALL, muted=True)
    # the loops
    d.arrow([(sx - 84, sy + 4), (sx - 84, sy + nb * b - 4)], role="query", width=2)
    d.text(sx - 92, sy + nb * b / 2 - 10, "outer loop:", size=SMALL, anchor="end", role="query")
    d.text(sx - 92, sy + nb * b / 2 + 8, "block $i$", size=SMALL, anchor="end", role="query")
    d.arrow([(sx + 4, sy - 84), (sx + nb * b - 4, sy - 84)], role="key", width=2)
    d.text(sx + nb * b / 2, sy - 98, "inner loop: block $j \\le i$", size=SMALL, role="key")
    # V in row blocks, O in row blocks, and the running statistics of block i
    vx, ox = 430, 570
    for k in range(nb):
        d.box(vx, sy + k * b, 40, b, f"$V_{k + 1}$", role="value", size=SMALL)
        d.box(ox, sy + k * b, 40, b, f"$O_{k + 1}$", role="value", size=SMALL)
    d.box(vx, sy + j_cur * b, 40, b, shape="frame", role="value")
    d.box(ox, sy + i_cur * b, 40, b, shape="frame", role="value")
    d.text(vx + 20, sy - 18, "$V$", role="value")
    d.text(ox + 20, sy - 18, "$O$", role="value")
    d.text(ox + 60, sy + (i_cur + 0.5) * b - 9, "$m$, $\\ell$,", size=SMALL, anchor="start")
    d.text(ox + 60, sy + (i_cur + 0.5) * b + 9, "$\\tilde O$ of block $i$", size=SMALL, anchor="start")
    d.text(
        520,
        sy + nb * b + 40,
        "$\\tilde O_i \\leftarrow e^{m - m'} \\tilde O_i + \\exp(S_{ij} - m')\\, V_j$",
        size=SMALL,
    )
    d.text(520, sy + nb * b + 62, "after the last $j$: $O_i = \\tilde O_i / \\ell$", size=SMALL)
    # legend
    ly = 396
    d.grid(30, ly - 8, 1, 1, 16, blocked=[[True]])
    d.text(52, ly, "skipped (all masked)", size=SMALL, anchor="start", muted=True)
    d.grid(
        210,
        ly - 8,
        2,
        2,
        8,
        role="weight",
        values=[[0.35, 0.35], [0.35, 0.35]],
        blocked=[[False, True], [False, False]],
    )
    d.text(232, ly, "on the diagonal: masked inside", size=SMALL, anchor="start", muted=True)
    d.grid(460, ly - 8, 1, 1, 16, role="weight", values=[[0.35]])
    d.text(482, ly, "computed in SRAM", size=SMALL, anchor="start", muted=True)
    return d
