"""Chapter 12, the lab: the character-level GPT end to end, with the sizes of the book's recipe
(``attnbook.train_lm.RECIPES["book"]``)."""

from __future__ import annotations

from attnbook.train_lm import RECIPES

from . import diagram
from .parts import pre_norm_height, pre_norm_unit
from .svg import SMALL, Diagram

VOCAB = 65  # the distinct characters of Tiny Shakespeare (the lab counts them; a test checks this number)


@diagram
def lab_gpt() -> Diagram:
    c = RECIPES["book"].model_config(VOCAB)
    T, D, H, F, L, V = c.block_size, c.d_model, c.n_heads, c.d_ff, c.n_layers, c.vocab_size
    d = Diagram("lab_gpt", 720, 700, "The lab's GPT, with the sizes of the book's recipe")
    sx, bx = 250, 430
    chars = d.box(sx - 110, 656, 220, 30, f"characters $(B, T)$, $T = {T}$", shape="tensor", size=SMALL)
    tok = d.box(sx - 190, 596, 170, 34, ["token embedding", (f"${V} \\times {D}$", SMALL)], shape="layer", size=SMALL)
    pos = d.box(
        sx + 20, 596, 170, 34, ["position embedding", (f"${T} \\times {D}$", SMALL)], role="position", size=SMALL
    )
    d.arrow([(tok.cx, chars.y), tok.bottom])
    d.arrow([(pos.cx, chars.y), pos.bottom])
    add = d.circle(sx, 560, 11, "+")
    d.arrow([tok.top, (tok.cx, add.cy), add.left], radius=6)
    d.arrow([pos.top, (pos.cx, add.cy), add.right], radius=6, role="position")
    d.text(sx - 72, 522, f"$(B, T, D)$, $D = {D}$", anchor="end", size=SMALL, muted=True)
    unit_h = pre_norm_height(h=44)
    top = add.y - 2 * unit_h - 40
    d.box(sx - 60, top, 400, add.y - top - 8, shape="panel")
    d.text(sx + 330, top + 16, f"$\\times L$, $L = {L}$ blocks", anchor="end", size=SMALL, muted=True)
    _, y = pre_norm_unit(
        d, sx, bx, add.y, ["causal self-attention", (f"$H = {H}$ heads of $D_h = {D // H}$", SMALL)], w=210, h=44
    )
    _, y = pre_norm_unit(d, sx, bx, y, ["feed-forward, ReLU", (f"${D} \\to {F} \\to {D}$", SMALL)], w=210, h=44)
    fin = d.box(sx - 70, top - 56, 140, 28, "LayerNorm", shape="norm")
    d.arrow([(sx, y), fin.bottom], residual=True)
    out = d.box(sx - 90, fin.y - 60, 180, 34, ["output layer", (f"${D} \\to {V}$", SMALL)], shape="layer", size=SMALL)
    d.arrow([fin.top, out.bottom])
    d.arrow([out.top, (sx, 30)])
    d.text(sx + 12, 24, f"logits $(B, T, V)$, $V = {V}$: a score for each next character", anchor="start", size=SMALL)
    # weight tying: the output layer reuses the token embedding matrix
    d.line([tok.left, (36, tok.cy), (36, out.cy), out.left], role="param", dashed=True, width=1.4)
    d.text(44, (tok.cy + out.cy) / 2 - 9, "the same", anchor="start", size=SMALL, role="param")
    d.text(44, (tok.cy + out.cy) / 2 + 9, "matrix", anchor="start", size=SMALL, role="param")
    return d
