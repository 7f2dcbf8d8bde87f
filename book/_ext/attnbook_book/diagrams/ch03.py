"""Chapter 3, Bahdanau attention: the fixed-context bottleneck against attention, and one step of additive
attention."""

from __future__ import annotations

from . import diagram
from .svg import SMALL, Diagram

WEIGHTS = [0.08, 0.62, 0.22, 0.08]  # an illustrative row of attention weights a_{2,i}


def _encoder(d: Diagram, top: float):
    """Inputs x_1..x_4 and bidirectional annotations h_1..h_4; returns the annotation boxes."""
    hs = []
    for i in range(4):
        x = 36 + i * 78
        xb = d.box(x + 5, top + 70, 44, 28, f"$x_{i + 1}$")
        hb = d.box(x, top, 54, 34, f"$h_{i + 1}$", role="hidden")
        d.arrow([xb.top, hb.bottom])
        hs.append(hb)
    for a, b in zip(hs, hs[1:]):
        d.arrow([(a.x1, a.cy - 7), (b.x, b.cy - 7)], role="hidden")
        d.arrow([(b.x, b.cy + 7), (a.x1, a.cy + 7)], role="hidden")
    return hs


def _decoder(d: Diagram, top: float, x0: float = 470):
    ss = []
    for t in range(3):
        x = x0 + t * 76
        sb = d.box(x, top, 60, 34, f"$s_{t + 1}$", role="hidden")
        yb = d.box(x + 20, top - 64, 40, 28, f"$y_{t + 1}$")
        d.arrow([(yb.cx, sb.y), yb.bottom])
        ss.append(sb)
    for a, b in zip(ss, ss[1:]):
        d.arrow([a.right, b.left], role="hidden")
    return ss


@diagram
def seq2seq_bottleneck() -> Diagram:
    d = Diagram("seq2seq_bottleneck", 720, 590, "Sequence to sequence: a fixed context against attention")
    # top: one context vector for every step
    d.text(20, 22, "Fixed context: the decoder sees one vector $c$ at every step", anchor="start", bold=True)
    hs = _encoder(d, 150)
    ss = _decoder(d, 150)
    c = d.box(378, 150, 40, 34, "$c$", role="hidden")
    # c = [forward state at the end; backward state at the start], equation eq-fixed-decoder
    d.arrow([hs[-1].right, c.left], role="hidden")
    d.arrow([hs[0].top, (hs[0].cx, 140), (c.cx, 140), c.top], role="hidden", radius=6)
    d.text(c.cx, 124, "the bottleneck", bold=True, size=SMALL)
    d.text(150, 128, "encoder", muted=True, size=SMALL)
    d.text(588, 244, "decoder", muted=True, size=SMALL)
    d.line([c.bottom, (c.cx, 214), (ss[-1].x + 9, 214)])
    for sb in ss:
        d.arrow([(sb.x + 9, 214), (sb.x + 9, sb.y1)])
        if sb is not ss[-1]:
            d.dot(sb.x + 9, 214)
    # bottom: a context c_t per step, a weighted average of all annotations
    top = 300
    d.text(20, top + 2, "Attention: step $t$ averages all the $h_i$ with its own weights", anchor="start", bold=True)
    hs = _encoder(d, top + 150)
    ss = _decoder(d, top + 150)
    pool = d.circle(400, top + 84, 14, "$\\Sigma$")
    d.text(pool.cx, pool.y - 16, "$c_2 = \\sum_i a_{2,i}\\, h_i$", size=SMALL)
    for h, w in zip(hs, WEIGHTS):
        d.arrow([h.top, (h.cx, top + 84), pool.left], role="weight", width=1 + 6 * w, head=False, radius=10)
    d.arrow([pool.right, (ss[1].x + 9, pool.cy), (ss[1].x + 9, ss[1].y)])
    for h, w in zip(hs, WEIGHTS):
        d.text(h.cx + 20, top + 116, f"{w:.2f}", size=SMALL, role="weight")
    d.text(
        20,
        top + 276,
        "line width: the attention weight $a_{2,i}$; every step $t$ gets its own weights and $c_t$",
        anchor="start",
        size=SMALL,
        muted=True,
    )
    return d


@diagram
def additive_attention_step() -> Diagram:
    d = Diagram("additive_attention_step", 720, 620, "One decoding step of additive (Bahdanau) attention")
    cols = [260, 350, 440, 530]
    # the annotations, and their keys W_2 h_i
    hs = [d.box(x - 30, 530, 60, 32, f"$h_{i + 1}$", role="hidden") for i, x in enumerate(cols)]
    w2 = [d.box(x - 28, 468, 56, 28, "$W_2$", shape="layer") for x in cols]
    for h, w in zip(hs, w2):
        d.arrow([h.top, w.bottom])
    # the query: the previous decoder state s_{t-1}, through W_1, added to every key
    s = d.box(40, 530, 72, 32, "$s_{t-1}$", role="hidden")
    d.text(s.cx, 574, "the query", role="query", size=SMALL)
    w1 = d.box(48, 400, 56, 28, "$W_1$", shape="layer")
    d.arrow([s.top, w1.bottom])
    adds = [d.circle(x, 414, 11, "+") for x in cols]
    for w, a in zip(w2, adds):
        d.arrow([w.top, a.bottom])
    # one bus carries the same W_1 s_{t-1} to every sum: up between the columns, never through a sum
    trunk, bus = 180, 586
    d.line([w1.right, (trunk, w1.cy)])
    d.arrow([(trunk, w1.cy), adds[0].left])
    d.line([(trunk, w1.cy), (trunk, bus), (cols[-1] - 45, bus)], radius=6)
    d.dot(trunk, w1.cy)
    for x, a in zip(cols[1:], adds[1:]):
        d.arrow([(x - 45, bus), (x - 45, a.cy), a.left], radius=6)
        if x != cols[-1]:
            d.dot(x - 45, bus)
    d.text(trunk + 8, bus + 22, "the same $W_1 s_{t-1}$ goes to every sum", anchor="start", size=SMALL, muted=True)
    d.text(222, 482, "keys", role="key", size=SMALL, anchor="end")
    # score network: tanh, then v^T
    scores = []
    for x, a in zip(cols, adds):
        t = d.box(x - 26, 344, 52, 26, "$\\tanh$", shape="op")
        v = d.box(x - 26, 290, 52, 26, "$v^\\top$", shape="layer")
        e = d.box(x - 30, 232, 60, 30, f"$e_{{t,{cols.index(x) + 1}}}$", role="weight")
        d.arrow([a.top, t.bottom])
        d.arrow([t.top, v.bottom])
        d.arrow([v.top, e.bottom])
        scores.append(e)
    d.text(222, 247, "scores", role="weight", size=SMALL, anchor="end")
    soft = d.box(cols[0] - 30, 178, cols[-1] - cols[0] + 60, 28, "softmax over $i$", shape="op")
    for e in scores:
        d.arrow([e.top, (e.cx, soft.y1)])
    weights = d.grid(
        cols[0] - 30, 108, 1, 1, (60, 30), role="weight", values=[[WEIGHTS[0]]], labels=[[f"{WEIGHTS[0]:.2f}"]]
    )
    cells = [weights]
    for k, x in enumerate(cols[1:], start=1):
        cells.append(
            d.grid(x - 30, 108, 1, 1, (60, 30), role="weight", values=[[WEIGHTS[k]]], labels=[[f"{WEIGHTS[k]:.2f}"]])
        )
    for cell in cells:
        d.arrow([(cell.cx, soft.y), cell.bottom])
    d.text(222, 123, "weights $a_{t,i}$", role="weight", size=SMALL, anchor="end")
    # the context: the weighted average of the values h_i
    pool = d.circle(395, 60, 14, "$\\Sigma$")
    for cell in cells:
        d.line([cell.top, (cell.cx, 60)], role="weight")
    d.line([(cells[0].cx, 60), pool.left], role="weight")
    d.arrow([(cells[-1].cx, 60), pool.right], role="weight", head=False)
    d.line([(hs[-1].x1, hs[-1].cy), (680, hs[-1].cy), (680, 24), (pool.cx, 24)], role="hidden")
    d.arrow([(pool.cx, 24), pool.top], role="hidden")
    d.text(672, 380, "values $h_i$", role="value", size=SMALL, anchor="end")
    ctx = d.box(110, 44, 150, 32, "$c_t = \\sum_i a_{t,i} h_i$", role="value")
    d.arrow([pool.left, ctx.right])
    d.text(ctx.cx, 96, "to the decoder GRU", size=SMALL, muted=True)
    return d
