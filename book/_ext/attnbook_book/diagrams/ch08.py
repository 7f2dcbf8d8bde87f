"""Chapter 8, the transformer block: the (post-norm) encoder block, the feed-forward network as two 1x1
convolutions, and the whole encoder-decoder."""

from __future__ import annotations

from . import diagram
from .parts import post_norm_unit as _post_norm_unit
from .svg import SMALL, Diagram


@diagram
def encoder_block() -> Diagram:
    d = Diagram("encoder_block", 720, 410, "The transformer encoder block (post-norm)")
    cx = 240
    x = d.box(cx - 100, 362, 200, 32, "$x$: $(B, T, D)$", shape="tensor")
    d.box(80, 52, 320, 296, shape="panel")
    d.text(92, 68, "encoder block", anchor="start", size=SMALL, muted=True)
    _, y = _post_norm_unit(d, cx, x.y, "multi-head self-attention")
    d.text(424, 290, "attention routes information", anchor="start", size=SMALL)
    d.text(424, 308, "between positions", anchor="start", size=SMALL)
    _, y = _post_norm_unit(d, cx, y, ["feed-forward network", ("the same at every position", SMALL)], h=46)
    d.text(424, 150, "the feed-forward network computes", anchor="start", size=SMALL)
    d.text(424, 168, "on each position separately", anchor="start", size=SMALL)
    d.arrow([(cx, y), (cx, 14)])
    d.text(cx + 14, 22, "$y$: $(B, T, D)$", anchor="start")
    d.legend(424, 378, [({"residual": True}, "residual path")])
    return d


@diagram
def ffn_conv1x1() -> Diagram:
    d = Diagram("ffn_conv1x1", 720, 350, "The position-wise feed-forward network as two 1x1 convolutions")
    c, T, D, F = 20, 5, 4, 8
    t = T - 1  # the position followed through the kernels

    def sequence(x, y, rows, title, shape):
        g = d.grid(x, y, rows, T, c, role="data")
        d.box(g.x + t * c, g.y, c, rows * c, shape="frame")
        d.text(g.x, g.y - 14, title, anchor="start")
        d.text(g.x, g.y1 + 18, shape, size=SMALL, muted=True, anchor="start")
        return g

    g_in = sequence(50, 160, D, "input", "$(B, D, T)$")
    w1 = d.box(g_in.x1 + 34, 168, 90, 72, ["$W_1$", ("$(F, D, 1)$", SMALL)], shape="layer")
    g_h = sequence(w1.x1 + 34, 116, F, "after ReLU", "$(B, F, T)$")
    w2 = d.box(g_h.x1 + 34, 168, 90, 72, ["$W_2$", ("$(D, F, 1)$", SMALL)], shape="layer")
    g_out = sequence(w2.x1 + 34, 160, D, "output", "$(B, D, T)$")
    col = lambda g: g.x + (t + 0.5) * c  # noqa: E731
    d.arrow([(col(g_in), g_in.y), (col(g_in), 136), (w1.cx, 136), w1.top], radius=8)
    d.arrow([w1.bottom, (w1.cx, 314), (col(g_h), 314), (col(g_h), g_h.y1)], radius=8)
    d.arrow([(col(g_h), g_h.y), (col(g_h), 92), (w2.cx, 92), w2.top], radius=8)
    d.arrow([w2.bottom, (w2.cx, 314), (col(g_out), 314), (col(g_out), g_out.y1)], radius=8)
    d.text(360, 34, "Each kernel covers one position and all its channels;", size=SMALL, muted=True)
    d.text(360, 54, "the same weights slide over every position (the framed column is one).", size=SMALL, muted=True)
    d.text(360, 338, "rows: channels (features); columns: positions $t = 0, \\ldots, T - 1$", size=SMALL, muted=True)
    return d


def _embed(d: Diagram, cx: float, y: float, label: str, pe_side: float):
    """Tokens, their embedding and the positional encoding added to it; returns the y above the sum."""
    tokens = d.box(cx - 100, y, 200, 30, label, shape="tensor", size=SMALL)
    emb = d.box(cx - 70, y - 54, 140, 30, "embedding", shape="layer")
    add = d.circle(cx, emb.y - 26, 11, "+")
    pe = d.box(cx + pe_side * 100 - 60, add.cy - 15, 120, 30, "positions", role="position", size=SMALL)
    d.arrow([tokens.top, emb.bottom])
    d.arrow([emb.top, add.bottom])
    d.arrow([pe.left if pe_side > 0 else pe.right, add.right if pe_side > 0 else add.left], role="position")
    return add.y


@diagram
def encoder_decoder() -> Diagram:
    d = Diagram("encoder_decoder", 720, 700, "The encoder-decoder transformer")
    ex, dx = 180, 510
    unit = dict(h=30, norm_h=26)
    unit_h = 73 + unit["h"] + unit["norm_h"]
    # encoder: two post-norm units inside an "N x" panel
    y = _embed(d, ex, 650, "source tokens", -1) - 12
    d.box(ex - 150, y - 2 * unit_h - 34, 300, 2 * unit_h + 34 + 4, shape="panel")
    d.text(ex - 140, y - 2 * unit_h - 18, "$N \\times$ encoder block", anchor="start", size=SMALL, muted=True)
    _, y = _post_norm_unit(d, ex, y, "self-attention", **unit)
    _, enc_top = _post_norm_unit(d, ex, y, "feed-forward", **unit)
    # decoder: three units
    y = _embed(d, dx, 650, "target tokens, shifted right", 1) - 12
    d.box(dx - 150, y - 3 * unit_h - 34, 300, 3 * unit_h + 34 + 4, shape="panel")
    d.text(dx + 140, y - 3 * unit_h - 18, "$N \\times$ decoder block", anchor="end", size=SMALL, muted=True)
    _, y = _post_norm_unit(d, dx, y, "masked self-attention", side=1, **unit)
    cross, y = _post_norm_unit(d, dx, y, "cross-attention", side=1, **unit)
    _, y = _post_norm_unit(d, dx, y, "feed-forward", side=1, **unit)
    # the encoder's output (the memory) gives the keys and values of every decoder block's cross-attention
    d.arrow([(ex, enc_top), (ex, enc_top - 40), (335, enc_top - 40), (335, cross.cy), cross.left], radius=10)
    d.text(ex, enc_top - 76, "memory: the keys and values", size=SMALL, role="key")
    d.text(ex, enc_top - 58, "of every cross-attention", size=SMALL, role="key")
    lin = d.box(dx - 70, y - 60, 140, 30, "linear", shape="layer")
    d.arrow([(dx, y), lin.bottom])
    sm = d.box(dx - 50, lin.y - 50, 100, 28, "softmax", shape="op")
    d.arrow([lin.top, sm.bottom])
    d.arrow([sm.top, (dx, sm.y - 26)])
    d.text(dx, sm.y - 40, "probabilities of the next token", size=SMALL)
    return d
