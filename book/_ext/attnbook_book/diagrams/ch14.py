"""Chapter 14, scaling and practice: the FLOPs of a token, the activations a block keeps, the memory of a
training step, activation checkpointing, the bits of float32, float16 and bfloat16, the loop of loss
scaling, and QK normalisation against an entropy collapse."""

from __future__ import annotations

import math

from . import diagram
from .svg import SMALL, Diagram

NL = "n_{\\text{layer}}"  # the number of blocks, as the chapter writes it (L is the loss there)


@diagram
def flops_per_token() -> Diagram:
    d = Diagram("flops_per_token", 720, 656, "The FLOPs one token costs in a forward pass through a transformer")
    sx, bx, lx = 130, 310, 452  # the residual stream, the branches' centre, the ledger
    d.text(lx, 22, "forward FLOPs per token", anchor="start", bold=True)
    d.text(lx, 44, "$2mn$ for an $m \\times n$ matrix", anchor="start", size=SMALL, muted=True)

    def ledger(y, cost, role, note):
        t = d.text(lx, y, cost, anchor="start", role=role)
        d.text(lx + 84, y, note, anchor="start", size=SMALL, muted=True)
        return t

    x = d.box(sx - 100, 596, 200, 30, "a token: width $D$", shape="tensor", size=SMALL)
    d.box(20, 112, 690, 470, shape="panel")
    d.text(696, 132, f"one block, $\\times\\, {NL}$", anchor="end", size=SMALL, muted=True)
    # attention: three matrices, two products with the T keys and values of the window, one more matrix
    d.dot(sx, 562, "line", 4.5)
    d.line([(sx, 562), (bx + 70, 562)])
    wq, wk, wv = (
        d.box(bx - 100 + 70 * i, 506, 60, 34, name, shape="layer") for i, name in enumerate(["$W_Q$", "$W_K$", "$W_V$"])
    )
    for w in (wq, wk, wv):
        d.arrow([(w.cx, 562), w.bottom])
    ledger(523, "$3 \\times 2D^2$", "param", "three $D \\times D$ matrices")
    scores = d.box(196, 440, 154, 30, "$q \\cdot k_j$ for $T$ keys", shape="op", size=SMALL)
    d.arrow([wq.top, (wq.cx, scores.y1)], role="query")
    d.arrow([wk.top, (wk.cx, scores.y1)], role="key")
    ledger(455, "$2TD$", "weight", "$T$ products, no weights")
    pool = d.box(196, 384, 224, 30, "$\\sum_j a_j\\, v_j$ over $T$ values", shape="op", size=SMALL)
    d.arrow([(scores.x + 77, scores.y), (scores.x + 77, pool.y1)], role="weight")
    d.arrow([wv.top, (wv.cx, pool.y1)], role="value")
    ledger(399, "$2TD$", "weight", "$T$ values, no weights")
    wo = d.box(bx - 60, 328, 120, 30, "$W_O$", shape="layer")
    d.arrow([(wo.cx, pool.y), wo.bottom], role="value")
    ledger(343, "$2D^2$", "param", "$D \\times D$")
    add1 = d.circle(sx, 300, 11, "+")
    d.arrow([wo.top, (wo.cx, add1.cy), add1.right], radius=8)
    # the feed-forward network
    d.dot(sx, 274, "line", 4.5)
    w1 = d.box(bx - 90, 214, 180, 32, "$W_1$, ReLU", shape="layer")
    d.arrow([(sx, 274), (bx, 274), w1.bottom], radius=8)
    ledger(230, "$2DF$", "param", "$D \\times F$")
    w2 = d.box(bx - 90, 158, 180, 32, "$W_2$", shape="layer")
    d.arrow([w1.top, w2.bottom])
    ledger(174, "$2DF$", "param", "$F \\times D$")
    add2 = d.circle(sx, 134, 11, "+")
    d.arrow([w2.top, (w2.cx, add2.cy), add2.right], radius=8)
    d.arrow([(sx, x.y), add1.bottom], residual=True)
    d.arrow([add1.top, add2.bottom], residual=True)
    # the output layer, once
    out = d.box(sx - 90, 60, 180, 32, "output layer", shape="layer", size=SMALL)
    d.arrow([add2.top, out.bottom], residual=True)
    ledger(76, "$2DV$", "param", "$D \\times V$, once")
    d.arrow([out.top, (sx, 18)])
    d.text(sx + 12, 22, "$V$ scores", anchor="start", size=SMALL)
    d.text(lx - 172, 594, f"forward: $2N + 4\\,{NL} T D + 2DV$", anchor="start", size=SMALL)
    d.text(lx - 172, 618, f"with $N = {NL}\\,(4D^2 + 2DF)$, the weights", anchor="start", size=SMALL, muted=True)
    d.text(lx - 172, 638, "training: three times the forward pass, about $6N$", anchor="start", size=SMALL)
    return d


@diagram
def activation_memory() -> Diagram:
    d = Diagram("activation_memory", 720, 622, "What one pre-norm block keeps for the backward pass")
    sx, ox, cx0 = 60, 200, 318  # the residual stream, the operations' centre, where the kept tensors start
    u = 40  # the width of D numbers in the picture; F = 4D
    d.text(ox, 20, "one pre-norm block", bold=True)
    d.text(cx0, 20, "kept for the backward pass, per token", anchor="start", bold=True)

    def chips(x, y, items, h=28):
        """Tensors side by side from x, centred on y: (label, width, role); returns the right end."""
        for label, w, role in items:
            d.box(x, y - h / 2, w, h, label, role=role, size=SMALL)
            x += w + 6
        return x - 6

    def stats(x, y):
        return chips(x, y, [("$\\mu$", 30, "norm"), ("$1/\\sigma$", 40, "norm")])

    bands = {}  # name -> (top, bottom)
    y = 58
    for name, h in (("ffn2", 76), ("ffn1", 104), ("attn", 124), ("qkv", 104)):
        bands[name] = (y, y + h)
        d.box(12, y, 696, h, shape="panel")
        y += h + 26

    def norm_then_matrix(band, label):
        """A LayerNorm on a branch of the stream, then a learned layer; returns both boxes."""
        top, bot = bands[band]
        d.dot(sx, bot - 8, "line", 4.5)
        ln = d.box(ox - 70, bot - 48, 140, 24, "LayerNorm", shape="norm", size=SMALL)
        w = d.box(ox - 70, top + 12, 140, 28, label, shape="layer", size=SMALL)
        d.arrow([(sx, bot - 8), (ox, bot - 8), ln.bottom], radius=6)
        d.arrow([ln.top, w.bottom])
        return ln, w

    def add_above(band, w):
        add = d.circle(sx, bands[band][0] - 13, 11, "+")
        d.arrow([w.top, (w.cx, add.cy), add.right], radius=6)
        return add

    # the first norm and the three matrices keep the block's input and the norm's output
    ln1, wqkv = norm_then_matrix("qkv", "$W_Q$, $W_K$, $W_V$")
    end = chips(cx0, ln1.cy, [("$x$", u, None), ("$\\mathrm{LN}(x)$", u + 30, None)])
    end = stats(end + 14, ln1.cy)
    d.text(end + 12, ln1.cy, "$2D + 2$", anchor="start", size=SMALL, muted=True)
    d.text(
        cx0, wqkv.cy, "$W_Q$, $W_K$, $W_V$ keep their input, $\\mathrm{LN}(x)$", anchor="start", size=SMALL, muted=True
    )
    # attention keeps Q, K, V and its output; then either a log-sum-exp per head, or two T x T matrices
    top, bot = bands["attn"]
    att = d.box(ox - 70, bot - 40, 140, 28, "attention", shape="op", size=SMALL)
    wo = d.box(ox - 70, top + 12, 140, 28, "$W_O$", shape="layer", size=SMALL)
    d.arrow([wqkv.top, att.bottom])
    d.arrow([att.top, wo.bottom], role="value")
    row = top + 24
    end = chips(cx0, row, [("$Q$", u, "query"), ("$K$", u, "key"), ("$V$", u, "value"), ("$O$", u, "value")])
    d.text(end + 12, row, "$4D$; $O$ is the input of $W_O$", anchor="start", size=SMALL, muted=True)
    row = top + 62
    d.box(cx0, row - 11, 24, 22, "", role="weight")
    d.text(cx0 + 60, row, "fused kernel: $H$ log-sum-exps, one per head", anchor="start", size=SMALL)
    row = top + 96
    d.grid(cx0, row - 12, 4, 4, 6, role="weight", values=[[0.35] * 4] * 4)
    d.grid(
        cx0 + 30,
        row - 12,
        4,
        4,
        6,
        role="weight",
        values=[[0.35] * 4] * 4,
        blocked=[[c > r for c in range(4)] for r in range(4)],
    )
    d.text(cx0 + 60, row, "or explicit: $P$ and masked weights, $2HT$", anchor="start", size=SMALL)
    add1 = add_above("attn", wo)
    # the second norm and W_1; then the hidden layer, kept once for ReLU and W_2
    ln2, w1 = norm_then_matrix("ffn1", "$W_1$")
    end = chips(cx0, ln2.cy, [("$x'$", u, None), ("$\\mathrm{LN}(x')$", u + 34, None)])
    end = stats(end + 14, ln2.cy)
    d.text(end + 12, ln2.cy, "$2D + 2$", anchor="start", size=SMALL, muted=True)
    d.text(cx0, w1.cy, "$x'$: the stream after attention", anchor="start", size=SMALL, muted=True)
    top, bot = bands["ffn2"]
    w2 = d.box(ox - 70, top + 12, 140, 28, "ReLU, $W_2$", shape="layer", size=SMALL)
    d.arrow([w1.top, w2.bottom])
    end = chips(cx0, w2.cy, [("hidden $h$", 4 * u, None)])
    d.text(end + 12, w2.cy, "$F$", anchor="start", size=SMALL, muted=True)
    d.text(cx0, w2.y1 + 20, "one tensor serves ReLU and $W_2$", anchor="start", size=SMALL, muted=True)
    add2 = add_above("ffn2", w2)
    x = d.box(sx - 44, 560, 88, 30, "input $x$", shape="tensor", size=SMALL)
    d.arrow([x.top, add1.bottom], residual=True)
    d.arrow([add1.top, add2.bottom], residual=True)
    d.arrow([add2.top, (sx, 12)], residual=True)
    d.text(cx0, 566, "in all, with the fused kernel: $8D + F$ numbers per token,", anchor="start", size=SMALL)
    d.text(cx0, 586, "and $H + 4$ statistics in float32", anchor="start", size=SMALL)
    d.text(cx0, 608, "the sums on the residual stream keep nothing", anchor="start", size=SMALL, muted=True)
    return d


@diagram
def checkpointing() -> Diagram:
    d = Diagram("checkpointing", 720, 512, "What activation checkpointing keeps and what it recomputes")
    bw = 100
    xs = [104 + 136 * k for k in range(4)]  # the blocks' left edges
    for title, top, h in (
        ("Without checkpointing: the forward pass keeps every block's activations", 20, 196),
        ("With checkpointing: only each block's input; the backward pass, at block 3", 244, 226),
    ):
        d.text(20, top, title, anchor="start", bold=True, size=SMALL)
        d.box(12, top + 14, 696, h, shape="panel")

    def row(y):
        """The input, four blocks and the loss, with the forward arrows; returns the blocks and the loss."""
        x0 = d.box(24, y, 50, 34, "$x_0$", shape="tensor", size=SMALL)
        blocks = [d.box(x, y, bw, 34, f"block {k + 1}", shape="layer", size=SMALL) for k, x in enumerate(xs)]
        loss = d.box(648, y, 52, 34, "$\\mathcal{L}$", shape="op")
        for a, b in zip([x0, *blocks], [*blocks, loss]):
            d.arrow([(a.x1, y + 11), (b.x, y + 11)])
        return x0, blocks, loss

    def backward(y, chain):
        for a, b in zip(chain, chain[1:]):
            d.arrow([(a.x, y + 24), (b.x1, y + 24)], role="grad", dashed=True)

    # without: every block's activations stay until the backward pass has used them
    y = 54
    x0, blocks, loss = row(y)
    backward(y, [loss, *reversed(blocks), x0])
    for b in blocks:
        d.box(b.x, y + 58, bw, 60, ["activations", ("$8D + F$ each", SMALL)], size=SMALL)
    d.text(
        360,
        200,
        "memory: the activations of all $n_{\\text{layer}}$ blocks, until the backward pass reaches each",
        size=SMALL,
        muted=True,
    )
    # with: the inputs only; block 4 is done, block 3 is recomputed from its input, then differentiated
    y = 282
    x0, blocks, loss = row(y)
    backward(y, [loss, blocks[3], blocks[2]])
    for k, b in enumerate(blocks[:3]):
        chip = d.box(b.x, y + 54, 36, 24, f"$x_{k}$", size=SMALL)
    acts = d.box(blocks[2].x, y + 96, bw, 56, ["activations", ("recomputed", SMALL)], size=SMALL, dashed=True)
    d.arrow([chip.right, (chip.x1 + 24, chip.cy), (chip.x1 + 24, acts.y)], radius=6)
    d.text(chip.x1 + 32, chip.cy, "forward again", anchor="start", size=SMALL)
    d.text(blocks[3].cx, y + 108, "done: freed", size=SMALL, muted=True)
    d.text((blocks[0].cx + blocks[1].cx) / 2, y + 108, "not reached yet: inputs only", size=SMALL, muted=True)
    d.text(
        360,
        456,
        "memory: the blocks' inputs and one block's activations; time: one more forward pass",
        size=SMALL,
        muted=True,
    )
    d.legend(150, 498, [({}, "forward pass"), ({"role": "grad", "dashed": True}, "backward pass: gradients")], gap=40)
    return d


def _sci(x: float) -> str:
    """A number as TeX-like scientific notation with two significant digits: 3.4 x 10^38."""
    exponent = math.floor(math.log10(x))
    mantissa = x / 10**exponent
    if round(mantissa, 1) >= 10:
        mantissa, exponent = mantissa / 10, exponent + 1
    return f"${mantissa:.1f} \\times 10^{{{exponent}}}$"


@diagram
def float_formats() -> Diagram:
    import torch

    d = Diagram("float_formats", 720, 352, "The bits of float32, float16 and bfloat16")
    bit, x0 = 18, 122  # the width of one bit; where the sign bit starts
    d.text(20, 20, "one number, bit by bit", anchor="start", bold=True)
    formats = [("float32", torch.float32), ("float16", torch.float16), ("bfloat16", torch.bfloat16)]
    for k, (name, dtype) in enumerate(formats):
        info = torch.finfo(dtype)
        mantissa = int(round(-math.log2(info.eps)))  # the stored fraction bits: eps = 2^-mantissa
        exponent = info.bits - 1 - mantissa
        top = 56 + k * 96
        d.text(20, top + 22, name, anchor="start", bold=True)
        sign = d.box(x0, top, bit, 44, "", shape="tensor")
        d.text(sign.cx, top - 10, "sign", size=SMALL, muted=True)
        d.box(sign.x1, top, exponent * bit, 44, ["exponent", (f"{exponent} bits", SMALL)], size=SMALL)
        d.box(sign.x1 + exponent * bit, top, mantissa * bit, 44, ["mantissa", (f"{mantissa} bits", SMALL)], size=SMALL)
        d.text(
            sign.x1 + 8,
            top + 58,
            f"largest {_sci(info.max) if info.max > 1e6 else f'{info.max:,.0f}'},  smallest normal {_sci(info.tiny)},  "
            f"step after 1: $2^{{-{mantissa}}}$",
            anchor="start",
            size=SMALL,
            muted=True,
        )
    d.text(
        20,
        336,
        "bfloat16 keeps float32's exponent and range; float16 trades range for three more mantissa bits",
        anchor="start",
        size=SMALL,
        muted=True,
    )
    return d


@diagram
def loss_scaling() -> Diagram:
    import torch

    growth = torch.amp.GradScaler("cpu").get_growth_interval()
    d = Diagram("loss_scaling", 720, 404, "A training step with float16 and loss scaling")
    d.text(20, 20, "one step of mixed precision with a loss scale $s$", anchor="start", bold=True)
    master = d.box(20, 52, 200, 44, ["weights", ("float32, the master copy", SMALL)], shape="layer", size=SMALL)
    fwd = d.box(270, 52, 200, 44, ["forward pass", ("products in float16", SMALL)], shape="op", size=SMALL)
    loss = d.box(520, 52, 180, 44, ["loss $\\mathcal{L}$", ("in float32", SMALL)], shape="op", size=SMALL)
    step = d.box(20, 150, 200, 44, ["optimizer step", ("on the float32 weights", SMALL)], shape="op", size=SMALL)
    scaled = d.box(520, 150, 180, 44, "multiply by $s$", shape="op", size=SMALL)
    check = d.box(20, 248, 200, 44, "a gradient inf or NaN?", shape="op", size=SMALL)
    unscale = d.box(
        270, 248, 200, 44, ["divide by $s$", ("in float32", SMALL)], shape="op", size=SMALL, label_role="grad"
    )
    back = d.box(
        520,
        248,
        180,
        44,
        ["backward pass", ("gradients of $s\\mathcal{L}$", SMALL)],
        shape="op",
        size=SMALL,
        label_role="grad",
    )
    skip = d.box(20, 346, 200, 44, ["skip the step", ("halve $s$", SMALL)], shape="op", size=SMALL)
    d.arrow([master.right, fwd.left])
    d.arrow([fwd.right, loss.left])
    d.arrow([loss.bottom, scaled.top])
    d.arrow([scaled.bottom, back.top], role="grad", dashed=True)
    d.arrow([back.left, unscale.right], role="grad", dashed=True)
    d.arrow([unscale.left, check.right], role="grad", dashed=True)
    d.arrow([check.top, step.bottom])
    d.text(132, 221, "no", anchor="start", size=SMALL, muted=True)
    d.arrow([step.top, master.bottom])
    d.arrow([check.bottom, skip.top])
    d.text(132, 319, "yes", anchor="start", size=SMALL, muted=True)
    d.text(370, 162, f"after {growth:,} steps without", size=SMALL, muted=True)
    d.text(370, 182, "inf or NaN: double $s$", size=SMALL, muted=True)
    d.text(240, 368, "either way, the next batch starts again from the weights", anchor="start", size=SMALL, muted=True)
    return d


@diagram
def qk_norm() -> Diagram:
    import torch

    d = Diagram("qk_norm", 720, 420, "Where QK normalisation sits in an attention head, and the collapse it prevents")
    d.text(150, 20, "one head with QK normalisation", bold=True, size=SMALL)
    x = d.box(90, 372, 120, 30, "input $x$", shape="tensor", size=SMALL)
    wq = d.box(20, 300, 80, 30, "$W_Q$", shape="layer")
    wk = d.box(110, 300, 80, 30, "$W_K$", shape="layer")
    wv = d.box(200, 300, 80, 30, "$W_V$", shape="layer")
    d.line([x.top, (x.cx, 350)])
    d.line([(wq.cx, 350), (wv.cx, 350)])
    for w in (wq, wk, wv):
        d.arrow([(w.cx, 350), w.bottom])
    nq = d.box(20, 236, 80, 30, "LN", shape="norm")
    nk = d.box(110, 236, 80, 30, "LN", shape="norm")
    d.arrow([wq.top, nq.bottom], role="query")
    d.arrow([wk.top, nk.bottom], role="key")
    scores = d.box(20, 168, 170, 34, "$q \\cdot k / \\sqrt{D_h}$", shape="op", size=SMALL)
    d.arrow([nq.top, (nq.cx, scores.y1)], role="query")
    d.arrow([nk.top, (nk.cx, scores.y1)], role="key")
    soft = d.box(20, 112, 170, 30, "softmax", shape="op", size=SMALL)
    d.arrow([scores.top, soft.bottom], role="weight")
    mix = d.box(60, 48, 220, 34, "$\\sum_j a_j v_j$", shape="op", size=SMALL)
    d.arrow([soft.top, (soft.cx, mix.y1)], role="weight")
    d.arrow([wv.top, (wv.cx, mix.y1)], role="value")
    d.text(200, 251, "new", anchor="start", size=SMALL, role="norm")
    # the attention of one query as its logits grow: spread out, then one-hot
    d.text(510, 20, "one query's weights as $W_Q$, $W_K$ grow", bold=True, size=SMALL)
    base = [0.9, 0.2, -0.3, 0.5, -0.6, 0.1]
    for k, factor in enumerate((1, 4, 16)):
        y = 60 + k * 74
        weights = torch.softmax(factor * torch.tensor(base, dtype=torch.float64), dim=0).tolist()
        entropy = -sum(w * math.log(w) for w in weights if w > 0)
        d.text(350, y + 17, f"logits $\\times {factor}$", anchor="start", size=SMALL)
        d.grid(446, y, 1, 6, (40, 34), role="weight", values=[weights], labels=[[f"{w:.2f}" for w in weights]])
        d.text(446, y + 50, f"entropy {entropy:.2f} nats", anchor="start", size=SMALL, muted=True)
    d.text(350, 300, "A one-hot row passes almost no gradient to $q$ and $k$:", anchor="start", size=SMALL, muted=True)
    d.text(350, 320, "the head stays stuck. With the norms, $q$ and $k$ keep", anchor="start", size=SMALL, muted=True)
    d.text(350, 340, "their size whatever $W_Q$ and $W_K$ become; only the", anchor="start", size=SMALL, muted=True)
    d.text(350, 360, "norms' gains can sharpen the weights.", anchor="start", size=SMALL, muted=True)
    return d
