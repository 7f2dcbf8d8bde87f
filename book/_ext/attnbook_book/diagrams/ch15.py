"""Chapter 15, beyond text: attention with a mask and a score bias, sets, where a graph's structure goes,
a spectrogram cut into patches, and two ways to combine images and text."""

from __future__ import annotations

import math

from . import diagram
from .svg import SMALL, Diagram, _n

N = 4  # tokens in the small grids


def _matrix(d: Diagram, x, y, title, shape, **grid):
    g = d.grid(x, y, N, N, 24, **grid)
    d.text(g.cx, g.y - 14, title, size=SMALL)
    d.text(g.cx, g.y1 + 16, shape, size=SMALL, muted=True)
    return g


@diagram
def biased_attention() -> Diagram:
    d = Diagram("biased_attention", 720, 250, "Attention with a mask and a score bias")
    scores = [[0.3, 0.5, 0.2, 0.4], [0.6, 0.2, 0.5, 0.3], [0.2, 0.4, 0.3, 0.6], [0.5, 0.3, 0.6, 0.2]]
    bias = [[0.8, 0.4, 0.1, 0.4], [0.4, 0.8, 0.4, 0.1], [0.1, 0.4, 0.8, 0.4], [0.4, 0.1, 0.4, 0.8]]
    mask = [
        [False, False, True, False],
        [False, False, False, True],
        [True, False, False, False],
        [False, True, False, False],
    ]
    y = 60
    s = _matrix(d, 20, y, "$q_i \\cdot k_j / \\sqrt{D_h}$", "the scores", role="weight", values=scores)
    d.text(s.x1 + 20, s.cy, "+")
    b = _matrix(d, s.x1 + 40, y, "bias $b_{ij}$", "about pairs", role="position", values=bias)
    d.text(b.x1 + 20, b.cy, "$\\odot$")
    m = _matrix(
        d,
        b.x1 + 40,
        y,
        "mask $M_{ij}$",
        "who sees whom",
        role="weight",
        values=[[0.0] * N for _ in range(N)],
        blocked=mask,
    )
    d.arrow([(m.x1 + 22, m.cy), (m.x1 + 96, m.cy)])
    d.text(m.x1 + 59, m.cy - 16, "softmax", size=SMALL)
    weights = [[0.0 if mask[i][j] else 0.25 + 0.5 * bias[i][j] * scores[i][j] for j in range(N)] for i in range(N)]
    a = _matrix(d, m.x1 + 104, y, "weights $a_{ij}$", "then times $V$", role="weight", values=weights, blocked=mask)
    del a
    d.text(
        360,
        206,
        "The tokens $X$ give the queries, keys and values; the bias adds a number to the score of each pair",
        size=SMALL,
        muted=True,
    )
    d.text(
        360,
        226,
        "(here larger on the diagonal); the mask removes pairs, whose weight is exactly 0.",
        size=SMALL,
        muted=True,
    )
    return d


@diagram
def set_models() -> Diagram:
    d = Diagram("set_models", 720, 344, "Deep Sets and a set transformer")
    for x0, title in (
        (20, "Deep Sets: $\\rho\\big(\\mathrm{mean}_i\\, \\phi(x_i)\\big)$"),
        (380, "A set transformer: attention, then mean"),
    ):
        d.text(x0, 20, title, anchor="start", bold=True, size=SMALL)
    values = ["3", "41", "7", "19"]
    for x0, attend in ((40, False), (400, True)):
        xs = [x0 + i * 70 for i in range(4)]
        elems = [d.box(x, 276, 50, 30, v, size=SMALL) for x, v in zip(xs, values)]
        if attend:
            att = d.box(
                x0,
                186,
                260,
                46,
                ["self-attention, no positions", ("every element looks at every other", SMALL)],
                shape="layer",
            )
            for e in elems:
                d.arrow([e.top, (e.cx, att.y1)])
            outs = [d.box(x, 130, 50, 26, "", role="value") for x in xs]
            for o in outs:
                d.arrow([(o.cx, att.y), o.bottom])
        else:
            outs = []
            for x, e in zip(xs, elems):
                phi = d.box(x, 190, 50, 34, "$\\phi$", shape="layer")
                d.arrow([e.top, phi.bottom])
                o = d.box(x, 130, 50, 26, "", role="value")
                d.arrow([phi.top, o.bottom])
                outs.append(o)
        mean = d.box(x0 + 80, 70, 100, 28, "mean", shape="op", size=SMALL)
        for o in outs:
            d.line([o.top, (o.cx, 112), (mean.cx, 112)], radius=6)
        d.arrow([(mean.cx, 112), mean.bottom])
        head = d.box(x0 + 80, 30, 100, 28, "$\\rho$" if not attend else "head", shape="layer", size=SMALL)
        d.arrow([mean.top, head.bottom])
        d.text(x0 + 200, 44, "the largest", anchor="start", size=SMALL, muted=True)
    d.text(360, 330, "a set of numbers, in any order: the answer must not depend on the order", size=SMALL, muted=True)
    return d


RING = 6


def _ring(d: Diagram, cx: float, cy: float, r: float, role_nodes=None, tags=None):
    pts = [(cx + r * math.sin(2 * math.pi * k / RING), cy - r * math.cos(2 * math.pi * k / RING)) for k in range(RING)]
    for k in range(RING):
        a, b = pts[k], pts[(k + 1) % RING]
        d.path(f"M{_n(a[0])},{_n(a[1])}L{_n(b[0])},{_n(b[1])}", role="line", width=1.6)
    for k, (x, y) in enumerate(pts):
        d.circle(x, y, 12, str(k + 1))
        if tags:
            tags(k, x, y)
    return pts


@diagram
def graph_structure() -> Diagram:
    d = Diagram("graph_structure", 720, 330, "Three places for a graph's structure: the mask, the tokens, the scores")
    titles = [(120, "in the mask"), (360, "in the tokens"), (600, "in the scores")]
    for x, t in titles:
        d.text(x, 20, t, bold=True)
    # the mask: A + I of a ring of six nodes
    blocked = [[min((i - j) % RING, (j - i) % RING) > 1 for j in range(RING)] for i in range(RING)]
    g = d.grid(60, 70, RING, RING, 20, role="weight", values=[[0.35] * RING for _ in range(RING)], blocked=blocked)
    for k in range(RING):
        d.text(g.x - 10, g.y + (k + 0.5) * 20, str(k + 1), size=SMALL, anchor="end")
        d.text(g.x + (k + 0.5) * 20, g.y - 10, str(k + 1), size=SMALL)
    d.text(g.cx, g.y1 + 20, "$M = A + I$", size=SMALL)
    d.text(g.cx, g.y1 + 40, "a node sees its neighbours", size=SMALL, muted=True)
    d.text(g.cx, g.y1 + 58, "one hop per layer", size=SMALL, muted=True)

    # the tokens: each node gets coordinates from the Laplacian's eigenvectors
    def coords(k, x, y):
        ox, oy = (x - 360) / 64, (y - 150) / 64
        d.box(x + 24 * ox - 10, y + 24 * oy - 6, 20, 12, "", role="position")

    _ring(d, 360, 150, 64, tags=coords)
    d.text(360, 258, "+ Laplacian eigenvectors", size=SMALL, role="position")
    d.text(360, 276, "coordinates added to each node", size=SMALL, muted=True)
    # the scores: a bias per shortest-path distance
    dist = [[min((i - j) % RING, (j - i) % RING) for j in range(RING)] for i in range(RING)]
    g = d.grid(
        540,
        70,
        RING,
        RING,
        20,
        role="position",
        values=[[0.8 - 0.25 * dist[i][j] for j in range(RING)] for i in range(RING)],
        labels=[[str(dist[i][j]) for j in range(RING)] for i in range(RING)],
    )
    d.text(g.cx, g.y1 + 20, "$b_{ij} = \\beta[\\mathrm{dist}(i, j)]$", size=SMALL)
    d.text(g.cx, g.y1 + 40, "every node sees every node,", size=SMALL, muted=True)
    d.text(g.cx, g.y1 + 58, "biased by distance", size=SMALL, muted=True)
    d.text(360, 314, "a ring of six nodes; cells of the grids: pairs of nodes", size=SMALL, muted=True)
    return d


@diagram
def spectrogram_patches() -> Diagram:
    d = Diagram("spectrogram_patches", 720, 300, "Sound as a spectrogram cut into patches")
    # a chirp: a wave whose frequency rises
    pts = []
    for k in range(161):
        t = k / 160
        pts.append((20 + 170 * t, 150 - 34 * math.sin(2 * math.pi * (3 * t + 6 * t * t))))
    d.path("M" + "L".join(f"{_n(x)},{_n(y)}" for x, y in pts), role="line", width=1.4)
    d.text(105, 96, "samples $x[m]$", size=SMALL)
    for k, x in enumerate((20, 52, 84, 116, 148)):  # overlapping frames
        d.path(f"M{x},{200 + 8 * (k % 2)}h40", role="weight", width=2)
    d.text(105, 232, "frames of $n_\\mathrm{fft}$,", size=SMALL, role="weight")
    d.text(105, 250, "$n_\\mathrm{hop}$ apart", size=SMALL, role="weight")
    d.arrow([(200, 150), (236, 150)])
    d.text(218, 132, "STFT", size=SMALL)
    # the spectrogram: frequency up, time across; a rising line of energy
    rows, cols, c = 8, 16, 14
    x0, y0 = 244, 94
    for r in range(rows):
        for q in range(cols):
            f = rows - 1 - r
            ridge = 1 + q * 0.42
            v = max(0.06, 1 - abs(f - ridge) / 1.6)
            d._body.append(
                f'<rect x="{_n(x0 + q * c)}" y="{_n(y0 + r * c)}" width="{c}" height="{c}" '
                f'class="t-line" fill-opacity="{_n(0.85 * v)}"/>'
            )
    for q in range(0, cols + 1, 4):
        d.line([(x0 + q * c, y0), (x0 + q * c, y0 + rows * c)], role="position", width=2)
    for r in range(0, rows + 1, 4):
        d.line([(x0, y0 + r * c), (x0 + cols * c, y0 + r * c)], role="position", width=2)
    d.text(x0 + cols * c / 2, y0 - 16, "spectrogram: frequency up, time across", size=SMALL)
    d.text(x0 + cols * c / 2, y0 + rows * c + 18, "patches of $8 \\times 8$ bins", size=SMALL, role="position")
    d.arrow([(x0 + cols * c + 10, 150), (x0 + cols * c + 44, 150)])
    toks = [d.box(524 + i * 24, 136, 20, 28, "", shape="tensor") for i in range(8)]
    d.text(610, 118, "8 tokens here,", size=SMALL)
    d.text(610, 184, "row by row", size=SMALL, muted=True)
    vit = d.box(524, 220, 188, 40, "the ViT of chapter 10", shape="layer", size=SMALL)
    d.arrow([toks[-1].bottom, (toks[-1].cx, vit.y)])
    d.text(712, 276, "class token, positions, encoder", size=SMALL, muted=True, anchor="end")
    return d


@diagram
def two_modalities() -> Diagram:
    d = Diagram("two_modalities", 720, 350, "Images and text in one sequence, or in two encoders")
    d.text(20, 20, "One sequence (ViLT)", anchor="start", bold=True)
    d.text(380, 20, "Two encoders, one space (CLIP)", anchor="start", bold=True)
    # one sequence: patches and words, each with a type vector, into one transformer
    xs = [30 + i * 40 for i in range(8)]
    for i, x in enumerate(xs):
        image = i < 4
        d.box(x, 270, 34, 28, "" if image else ["a", "7", "in", "ink"][i - 4], size=SMALL)
        d.box(x, 232, 34, 14, "", role="position")
        d.text(x + 17, 257, "+", size=SMALL)
    for i in range(4):  # the image patches drawn as small pictures
        d._body.append(
            f'<rect x="{_n(xs[i] + 9)}" y="277" width="16" height="14" class="t-line" '
            f'fill-opacity="{_n(0.2 + 0.2 * i)}"/>'
        )
    d.text(xs[1] + 37, 316, "image patches", size=SMALL, muted=True)
    d.text(xs[5] + 37, 316, "text tokens", size=SMALL, muted=True)
    enc = d.box(30, 150, 314, 44, ["one transformer", ("every token sees every token", SMALL)], shape="layer")
    for x in xs:
        d.arrow([(x + 17, 232), (x + 17, enc.y1)])
    d.text(187, 336, "+ a type and a position vector each", size=SMALL, role="position")
    d.arrow([(187, enc.y), (187, 110)])
    d.text(187, 96, "outputs that mix both", size=SMALL)
    # two encoders: an image vector and a text vector per pair, compared in a B x B matrix
    img = d.box(391, 270, 110, 28, "images", size=SMALL)
    txt = d.box(581, 270, 110, 28, "captions", size=SMALL)
    ie = d.box(384, 196, 124, 40, "image encoder", shape="layer", size=SMALL)
    te = d.box(574, 196, 124, 40, "text encoder", shape="layer", size=SMALL)
    d.arrow([img.top, ie.bottom])
    d.arrow([txt.top, te.bottom])
    sim = d.grid(
        500, 62, 4, 4, 20, role="weight", values=[[0.9 if i == j else 0.12 for j in range(4)] for i in range(4)]
    )
    d.arrow([ie.top, (ie.cx, sim.cy), sim.left], radius=8)
    d.arrow([te.top, (te.cx, sim.cy), sim.right], radius=8)
    d.text(sim.cx, 46, "similarities $s_{ij}$, $B \\times B$", size=SMALL)
    d.text(sim.cx, 160, "matching pairs:", size=SMALL, muted=True)
    d.text(sim.cx, 178, "the diagonal", size=SMALL, muted=True)
    return d
