"""Chapter 10, the vision transformer: an image cut into patches, embedded, given a class token and
positions, encoded, and classified from the class token."""

from __future__ import annotations

from . import diagram
from .svg import SMALL, Diagram, _n

SEVEN = ["111111", "000011", "000110", "001100", "001100", "001100"]  # a 6 x 6 picture of a seven


@diagram
def vit_pipeline() -> Diagram:
    d = Diagram("vit_pipeline", 720, 460, "The vision transformer, from pixels to a class")
    px, patch, gap_p = 16, 3, 5  # pixel size in the picture, 3 x 3 patches of 2 x 2 pixels, drawn apart
    ix, iy = 24, 252
    for r, row in enumerate(SEVEN):
        for c, v in enumerate(row):
            x = ix + c * px + (c // 2) * gap_p
            y = iy + r * px + (r // 2) * gap_p
            d._body.append(
                f'<rect x="{_n(x)}" y="{_n(y)}" width="{px}" height="{px}" '
                f'class="t-line" fill-opacity="{0.85 if v == "1" else 0.08}"/>'
            )
    side = px * len(SEVEN) + gap_p * (patch - 1)
    d.text(ix + side / 2, iy - 36, "an image, cut", size=SMALL)
    d.text(ix + side / 2, iy - 18, "into $T = 9$ patches", size=SMALL)
    # columns: the class token, then the nine patches in reading order
    x0, w, gap = 178, 44, 10
    cols = [x0 + k * (w + gap) for k in range(10)]
    flat = [d.box(x, 404, w, 30, f"{k}", shape="tensor", size=SMALL) for k, x in enumerate(cols[1:], start=1)]
    d.arrow([(ix + side / 2, iy + side), (ix + side / 2, 419), flat[0].left])
    d.text(ix, 446, "each patch flattened: $P^2 C$ numbers", size=SMALL, muted=True, anchor="start")
    emb = d.box(
        cols[1],
        344,
        cols[-1] + w - cols[1],
        32,
        "$E$: one linear map for every patch (a strided convolution)",
        shape="layer",
        size=SMALL,
    )
    for f in flat:
        d.arrow([f.top, (f.cx, emb.y1)])
    toks = [d.box(x, 286, w, 28, "", shape="tensor") for x in cols[1:]]
    for t in toks:
        d.arrow([(t.cx, emb.y), t.bottom])
    cls = d.box(cols[0], 286, w, 28, "cls", role="param", size=SMALL)
    d.text(cols[-1] + w, 446, "cls: the learned class token", size=SMALL, role="param", anchor="end")
    del cls
    pos = [d.box(x, 232, w, 24, f"{k}", role="position", size=SMALL) for k, x in enumerate(cols)]
    for x in cols:
        d.text(x + w / 2, 271, "+", size=SMALL)
    d.text(20, 150, "$+\\, E_{\\mathrm{pos}}$: a learned", size=SMALL, role="position", anchor="start")
    d.text(20, 168, "vector per position", size=SMALL, role="position", anchor="start")
    enc = d.box(
        cols[0],
        138,
        cols[-1] + w - cols[0],
        44,
        ["transformer encoder", ("$L$ pre-norm blocks, no mask", SMALL)],
        shape="layer",
    )
    for p in pos:
        d.arrow([(p.cx, p.y), (p.cx, enc.y1)])
    # only the class token's output goes to the head
    ln = d.box(cols[0] - 24, 86, w + 48, 26, "LayerNorm", shape="norm", size=SMALL)
    head = d.box(cols[0] - 24, 40, w + 48, 26, "head", shape="layer", size=SMALL)
    d.arrow([(cols[0] + w / 2, enc.y), ln.bottom])
    d.text(cols[0] + w / 2 + 12, 124, "$z_L^0$", anchor="start", size=SMALL)
    d.arrow([ln.top, head.bottom])
    d.arrow([head.right, (head.x1 + 40, head.cy)])
    d.text(head.x1 + 48, head.cy, "class scores (\u201c7\u201d)", anchor="start", size=SMALL)
    d.text(cols[3], 104, "the other outputs are not used by the head", size=SMALL, muted=True, anchor="start")
    return d
