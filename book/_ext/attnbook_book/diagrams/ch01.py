"""Chapter 1, vanishing gradients: the unrolled RNN, and backpropagation through time with truncation."""

from __future__ import annotations

from . import diagram
from .svg import SMALL, Diagram

CELL_W, CELL_H = 78, 42


def _unrolled(
    d: Diagram,
    x0: float,
    y_cell: float,
    steps: list[str],
    *,
    gap: float = 50,
    losses: bool = True,
    ellipsis_after: int | None = None,
):
    """Cells of an unrolled RNN from x0; returns the cell boxes (one per step label in ``steps``)."""
    cells, x = [], x0
    for k, t in enumerate(steps):
        cell = d.box(x, y_cell, CELL_W, CELL_H, "$\\tanh$", shape="layer")
        xin = d.box(cell.cx - 22, y_cell + CELL_H + 42, 44, 30, f"$x_{{{t}}}$")
        d.arrow([xin.top, cell.bottom])
        if losses:
            out = d.box(cell.cx - 22, y_cell - 42 - 30, 44, 30, f"$L_{{{t}}}$")
            d.arrow([cell.top, out.bottom])
        cells.append(cell)
        x += CELL_W + gap + (44 if ellipsis_after is not None and k == ellipsis_after else 0)
    return cells


@diagram
def rnn_unrolled() -> Diagram:
    d = Diagram("rnn_unrolled", 700, 272, "A recurrent network unrolled through time")
    steps = ["1", "2", "3", "T"]
    cells = _unrolled(d, 116, 120, steps, ellipsis_after=2)
    h0 = d.text(40, cells[0].cy - 14, "$h_0 = 0$", anchor="start")
    d.arrow([(40, cells[0].cy), cells[0].left], touches=())
    for k in range(len(cells) - 1):
        a, b = cells[k], cells[k + 1]
        if k == 2:  # the steps left out
            d.arrow([a.right, (a.x1 + 30, a.cy)], head=False)
            d.text((a.x1 + b.x) / 2, a.cy, "$\\ldots$")
            d.arrow([(b.x - 30, b.cy), b.left])
            d.text(b.x - 16, a.cy - 14, "$h_{T-1}$", role="hidden", size=SMALL)
            d.text(a.x1 + 14, a.cy - 14, "$h_3$", role="hidden", size=SMALL)
        else:
            d.arrow([a.right, b.left])
            d.text((a.x1 + b.x) / 2, a.cy - 14, f"$h_{k + 1}$", role="hidden", size=SMALL)
    d.arrow([cells[-1].right, (cells[-1].x1 + 44, cells[-1].cy)])
    d.text(cells[-1].x1 + 34, cells[-1].cy - 14, "$h_T$", role="hidden", size=SMALL)
    del h0
    y = cells[0].y1 + 42 + 30 + 18
    d.text(
        350,
        y,
        "the same $W_{hh}$, $W_{xh}$ and $b$ in every cell: $h_t = \\tanh(W_{hh} h_{t-1} + W_{xh} x_t + b)$",
        size=SMALL,
        muted=True,
    )
    return d


@diagram
def bptt_truncation() -> Diagram:
    d = Diagram("bptt_truncation", 700, 420, "Backpropagation through time, full and truncated")
    n, w, h, gap, x0 = 6, 62, 34, 42, 96
    xs = [x0 + k * (w + gap) for k in range(n)]

    def row(top: float, title: str, cut: int | None):
        d.text(20, top, title, anchor="start", bold=True)
        y_loss, y_h = top + 30, top + 102
        hs = []
        for k, x in enumerate(xs):
            loss = d.box(x + w / 2 - 20, y_loss, 40, 28, f"$L_{k + 1}$")
            hb = d.box(x, y_h, w, h, f"$h_{k + 1}$", role="hidden")
            d.arrow([(hb.cx - 9, hb.y), (loss.cx - 9, loss.y1)])  # forward: state -> loss
            d.arrow([(loss.cx + 9, loss.y1), (hb.cx + 9, hb.y)], role="grad", dashed=True)  # gradient back
            hs.append(hb)
        d.arrow([(x0 - 62, y_h + h / 2 - 6), (xs[0], y_h + h / 2 - 6)])
        d.text(x0 - 62, y_h - 8, "$h_0$", anchor="start", role="hidden", size=SMALL)
        for k in range(n - 1):
            a, b = hs[k], hs[k + 1]
            d.arrow([(a.x1, a.cy - 6), (b.x, b.cy - 6)])
            if cut is not None and k == cut - 1:
                xm = (a.x1 + b.x) / 2
                d.line([(xm, y_loss - 8), (xm, y_h + h + 22)], role="grad", dashed=True, width=1.4)
                d.text(xm, y_h + h + 34, "cut: $h$ carried, gradient stopped", size=SMALL, role="grad")
            else:
                d.arrow([(b.x, b.cy + 7), (a.x1, a.cy + 7)], role="grad", dashed=True)
        return hs

    row(22, "Full BPTT: every loss reaches back to the first step", None)
    row(212, "Truncated BPTT, chunks of $k = 3$ steps", 3)
    d.legend(96, 404, [({}, "forward pass"), ({"role": "grad", "dashed": True}, "gradient (backward pass)")])
    return d
