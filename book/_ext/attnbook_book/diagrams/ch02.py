"""Chapter 2, LSTM and GRU: the two gated cells, with the symbols of their equations."""

from __future__ import annotations

from . import diagram
from .svg import SMALL, Diagram


def _highway(d: Diagram, y: float, x0: float, x_mul: float, x_add: float, x1: float, before: str, after: str):
    """The state carried along the top of a cell: multiplied by a gate at x_mul, added to at x_add."""
    mul, add = d.circle(x_mul, y, 12, "."), d.circle(x_add, y, 12, "+")
    for a, b in (((x0, y), mul.left), (mul.right, add.left), (add.right, (x1, y))):
        d.arrow([a, b], role="hidden", residual=True)
    d.text(x0, y - 20, before, anchor="start", role="hidden")
    d.text(x1, y - 20, after, anchor="end", role="hidden")
    return mul, add


def _gate(d: Diagram, cx: float, top: float, symbol: str, name: str):
    return d.box(cx - 42, top, 84, 48, [symbol, (name, SMALL)], shape="layer")


@diagram
def lstm_cell() -> Diagram:
    d = Diagram("lstm_cell", 720, 410, "The LSTM cell")
    hw, bus = 66, 330  # the cell-state highway and the input bus
    d.box(150, 28, 470, 332, shape="panel")
    d.text(610, 46, "LSTM cell", anchor="end", muted=True, size=SMALL)
    # the highway: c_{t-1} -> (x f_t) -> (+ i_t g_t) -> c_t
    f_mul, add = _highway(d, hw, 40, 215, 395, 690, "$c_{t-1}$", "$c_t$")
    # the gates, all reading [h_{t-1}, x_t]
    gates = {
        "f": _gate(d, 215, 230, "$\\sigma$", "forget"),
        "i": _gate(d, 305, 230, "$\\sigma$", "input"),
        "g": _gate(d, 395, 230, "$\\tanh$", "candidate"),
        "o": _gate(d, 495, 230, "$\\sigma$", "output"),
    }
    d.arrow([(40, bus), (500, bus)], head=False)
    d.text(40, bus + 18, "$h_{t-1}$", anchor="start", role="hidden")
    d.arrow([(110, 400), (110, bus)], head=False)
    d.text(122, 394, "$x_t$", anchor="start")
    d.dot(110, bus)
    for g in gates.values():
        d.arrow([(g.cx, bus), g.bottom])
    # f_t scales the old cell
    d.arrow([gates["f"].top, f_mul.bottom])
    d.text(gates["f"].cx + 8, 150, "$f_t$", anchor="start")
    # i_t * g_t is added
    ig = d.circle(395, 160, 12, ".")
    d.arrow([gates["i"].top, (305, ig.cy), ig.left])
    d.text(gates["i"].cx + 8, 200, "$i_t$", anchor="start")
    d.arrow([gates["g"].top, ig.bottom])
    d.text(gates["g"].cx + 8, 200, "$g_t$", anchor="start")
    d.arrow([ig.top, add.bottom])
    # h_t = o_t * tanh(c_t)
    tanh = d.box(540, 104, 56, 28, "$\\tanh$", shape="op")
    d.arrow([(tanh.cx, hw), tanh.top])
    d.dot(tanh.cx, hw, "hidden", 4.5)
    o_mul = d.circle(tanh.cx, 186, 12, ".")
    d.arrow([tanh.bottom, o_mul.top])
    d.arrow([gates["o"].top, (gates["o"].cx, o_mul.cy), o_mul.left])
    d.text(gates["o"].cx + 8, 206, "$o_t$", anchor="start")
    d.arrow([o_mul.right, (650, o_mul.cy), (650, bus), (690, bus)], role="hidden")
    d.text(690, bus + 18, "$h_t$", anchor="end", role="hidden")
    return d


@diagram
def gru_cell() -> Diagram:
    d = Diagram("gru_cell", 720, 450, "The GRU cell, in PyTorch's form")
    hw, hlane, xlane = 60, 370, 410
    d.box(120, 24, 540, 404, shape="panel")
    d.text(650, 42, "GRU cell", anchor="end", muted=True, size=SMALL)
    # the state highway: h_{t-1} -> (x z_t) -> (+ (1 - z_t) n_t) -> h_t
    z_mul, add = _highway(d, hw, 30, 300, 470, 700, "$h_{t-1}$", "$h_t$")
    # h_{t-1} also feeds the gates and the candidate (lane hlane); x_t runs along lane xlane
    d.dot(70, hw, "hidden", 4.5)
    d.line([(70, hw), (70, hlane), (620, hlane)], role="hidden")
    d.line([(90, 446), (90, xlane), (620, xlane)])
    d.text(102, 438, "$x_t$", anchor="start")
    z = d.box(263, 250, 74, 48, ["$\\sigma$", ("update", SMALL)], shape="layer")
    r = d.box(553, 250, 74, 48, ["$\\sigma$", ("reset", SMALL)], shape="layer")
    for gate in (z, r):
        d.arrow([(gate.cx - 14, hlane), (gate.cx - 14, gate.y1)], role="hidden")
        d.arrow([(gate.cx + 14, xlane), (gate.cx + 14, gate.y1)])
    # z_t keeps the old state, 1 - z_t weighs the candidate
    d.arrow([z.top, z_mul.bottom])
    d.text(z.cx + 8, 196, "$z_t$", anchor="start")
    d.dot(z.cx, 128)
    one_minus = d.box(352, 115, 58, 26, "$1 - z_t$", shape="op", size=SMALL)
    d.line([(z.cx, 128), one_minus.left])
    n_mul = d.circle(470, 128, 11, ".")
    d.arrow([one_minus.right, n_mul.left])
    d.arrow([n_mul.top, add.bottom])
    # the candidate n_t = tanh(W_xn x_t + r_t * (W_hn h_{t-1})): the reset acts after the product
    whn = d.box(435, 320, 70, 28, "$W_{hn}$", shape="layer")
    d.arrow([(whn.cx, hlane), whn.bottom], role="hidden")
    r_mul = d.circle(470, 274, 11, ".")
    d.arrow([whn.top, r_mul.bottom])
    d.arrow([r.left, r_mul.right])
    d.text(522, 260, "$r_t$")
    plus = d.circle(470, 228, 11, "+")
    d.arrow([r_mul.top, plus.bottom])
    wxn = d.box(365, 215, 68, 26, "$W_{xn}$", shape="layer")
    d.arrow([(wxn.cx, xlane), wxn.bottom])
    d.arrow([wxn.right, plus.left])
    tanh = d.box(442, 170, 56, 26, "$\\tanh$", shape="op")
    d.arrow([plus.top, tanh.bottom])
    d.arrow([tanh.top, n_mul.bottom])
    d.text(478, 154, "$n_t$", anchor="start")
    return d
