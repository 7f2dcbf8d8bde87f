"""Recurrent networks from scratch: RNN, LSTM and GRU cells, and a layer that runs a cell over a sequence.

The cells name their parameters after the book's equations (``W_xh``, ``W_hh``, ...) but keep PyTorch's
layout: the LSTM's four gate blocks are stacked in the order i, f, g, o and the GRU's three in the order
r, z, n, exactly as in ``torch.nn.LSTMCell`` and ``torch.nn.GRUCell``. ``from_torch`` copies the weights of
a PyTorch cell (or a one-layer, one-direction ``nn.RNN``/``nn.LSTM``/``nn.GRU``), so that every cell here
can be checked equal to PyTorch's.

A cell's ``forward`` checks its input, then takes one step, ``_step``: the cell's equations.
:class:`Recurrent` checks a whole sequence once and then calls ``_step`` at every time step. The input
checks are at the end of the module. How gradients flow back through a cell is measured in
:mod:`attnbook.bptt`.

A cell's *state* is ``h`` for the RNN and the GRU and the pair ``(h, c)`` for the LSTM.

Chapters: vanishing gradients (RNNCell, Recurrent); LSTM and GRU (LSTMCell, GRUCell, set_forget_bias,
SequenceRegressor).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from . import _checks

__all__ = [
    "RNNCell",
    "LSTMCell",
    "GRUCell",
    "Recurrent",
    "SequenceRegressor",
    "set_forget_bias",
]

State = torch.Tensor | tuple
_NONLINEARITIES = {"tanh": torch.tanh, "relu": torch.relu, "linear": lambda a: a}


def _uniform_(cell: nn.Module, hidden_size: int) -> None:
    """PyTorch's initialisation for recurrent cells: every parameter uniform in [-1/sqrt(H), 1/sqrt(H)]."""
    bound = 1.0 / math.sqrt(hidden_size)
    with torch.no_grad():
        for p in cell.parameters():
            p.uniform_(-bound, bound)


def _torch_weights(module: nn.Module, kind: type) -> tuple[torch.Tensor, ...]:
    """(weight_ih, weight_hh, bias_ih, bias_hh) of a PyTorch cell or of a one-layer, one-direction layer."""
    _check_torch_module(module, kind)
    suffix = "" if isinstance(module, kind) else "_l0"  # a layer names its first (and only) layer's weights _l0
    return tuple(getattr(module, name + suffix).detach() for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))


# --- cells ---------------------------------------------------------------------------------------


class _Cell(nn.Module):
    """What every cell has: an input of ``input_size`` numbers and a state of ``hidden_size`` numbers per
    sequence, zero at the start; ``forward`` checks the input once, then takes one step, ``_step``.

    ``nonlinearity`` is the plain RNN's phi (checked here with the sizes); the gated cells fix their own.
    """

    def __init__(self, input_size: int, hidden_size: int, nonlinearity: str = "tanh"):
        super().__init__()
        _check_cell_args(input_size, hidden_size, nonlinearity)
        self.input_size, self.hidden_size = input_size, hidden_size

    def forward(self, x: torch.Tensor, h: torch.Tensor | None = None, **options):
        """One step from the state h (B, H) (``options``: ``return_gates=True`` for the GRU)."""
        h = _check_step(self, x, h, "h")  # (B, H); zeros when omitted
        return self._step(x, h, **options)

    @property
    def state_size(self) -> int:
        return self.hidden_size

    def initial_state(self, batch_size: int, *, like: torch.Tensor | None = None) -> torch.Tensor:
        """The zero state (B, H), on the device and with the dtype of ``like`` (or of the parameters)."""
        ref = next(self.parameters()) if like is None else like
        return torch.zeros(batch_size, self.hidden_size, dtype=ref.dtype, device=ref.device)  # (B, H)


class RNNCell(_Cell):
    r"""The vanilla (Elman) RNN step h_t = phi(W_xh x_t + W_hh h_{t-1} + b_h), phi = tanh, relu or identity.

    Equal to ``torch.nn.RNNCell`` on copied weights (PyTorch's two biases add up to ``b_h``).

    Shapes:
        x:      (B, D)  with D = input_size
        h:      (B, H)  with H = hidden_size; zeros when omitted
        return: (B, H)

    Chapter: vanishing gradients.
    """

    def __init__(self, input_size: int, hidden_size: int, nonlinearity: str = "tanh"):
        super().__init__(input_size, hidden_size, nonlinearity)  # checks the sizes and the nonlinearity
        self.nonlinearity = nonlinearity
        self.W_xh = nn.Parameter(torch.empty(hidden_size, input_size))  # (H, D)
        self.W_hh = nn.Parameter(torch.empty(hidden_size, hidden_size))  # (H, H)
        self.b_h = nn.Parameter(torch.empty(hidden_size))  # (H,)
        _uniform_(self, hidden_size)

    def _step(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """h_t = phi(W_xh x_t + W_hh h_{t-1} + b_h), without input checks (forward and Recurrent check them)."""
        a = x @ self.W_xh.T + h @ self.W_hh.T + self.b_h  # (B, H)
        return _NONLINEARITIES[self.nonlinearity](a)  # (B, H)

    @classmethod
    def from_torch(cls, module: nn.Module) -> RNNCell:
        """A copy of a ``torch.nn.RNNCell`` (or a one-layer ``nn.RNN``) with the same weights."""
        W_ih, W_hh, b_ih, b_hh = _torch_weights(module, nn.RNNCell)
        cell = cls(W_ih.shape[1], W_ih.shape[0], module.nonlinearity).to(W_ih)
        with torch.no_grad():
            cell.W_xh.copy_(W_ih)
            cell.W_hh.copy_(W_hh)
            cell.b_h.copy_(b_ih + b_hh)
        return cell


class LSTMCell(_Cell):
    r"""The LSTM step with a forget gate (Hochreiter & Schmidhuber 1997; Gers et al. 2000).

        i, f, o = sigmoid(W_x[i,f,o] x_t + W_h[i,f,o] h_{t-1} + b[i,f,o]),  g = tanh(W_x[g] x_t + W_h[g] h_{t-1} + b[g])
        c_t = f * c_{t-1} + i * g,        h_t = o * tanh(c_t)

    The gate blocks of ``W_x`` (4H, D), ``W_h`` (4H, H) and ``b`` (4H,) are stacked in PyTorch's order
    i, f, g, o. Equal to ``torch.nn.LSTMCell`` on copied weights (its two biases add up to ``b``).
    ``forget_bias``, when given, sets the forget gate's bias to that value (see :func:`set_forget_bias`).

    Shapes:
        x:      (B, D)
        state:  (h, c), each (B, H); zeros when omitted
        return: (h, c), each (B, H); and a dict of the gates i, f, g, o, each (B, H), with ``return_gates=True``

    Chapter: LSTM and GRU.
    """

    def __init__(self, input_size: int, hidden_size: int, *, forget_bias: float | None = None):
        super().__init__(input_size, hidden_size)
        self.W_x = nn.Parameter(torch.empty(4 * hidden_size, input_size))  # (4H, D)
        self.W_h = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))  # (4H, H)
        self.b = nn.Parameter(torch.empty(4 * hidden_size))  # (4H,)
        _uniform_(self, hidden_size)
        if forget_bias is not None:
            set_forget_bias(self, forget_bias)

    @property
    def state_size(self) -> int:
        return 2 * self.hidden_size

    def initial_state(self, batch_size: int, *, like: torch.Tensor | None = None) -> tuple:
        zeros = super().initial_state(batch_size, like=like)  # (B, H)
        return zeros, zeros.clone()

    def forward(self, x: torch.Tensor, state: tuple | None = None, *, return_gates: bool = False):
        state = _check_step(self, x, state, "state")  # (h, c); zeros when omitted
        return self._step(x, state, return_gates=return_gates)

    def _step(self, x: torch.Tensor, state: tuple, *, return_gates: bool = False):
        """The gates, then c_t and h_t, without input checks (forward and Recurrent check them)."""
        h, c = state  # (B, H), (B, H)
        a = x @ self.W_x.T + h @ self.W_h.T + self.b  # (B, 4H)
        a_i, a_f, a_g, a_o = a.chunk(4, dim=-1)  # each (B, H)
        i = torch.sigmoid(a_i)  # (B, H) input gate
        f = torch.sigmoid(a_f)  # (B, H) forget gate
        g = torch.tanh(a_g)  # (B, H) candidate
        o = torch.sigmoid(a_o)  # (B, H) output gate
        c_new = f * c + i * g  # (B, H)
        h_new = o * torch.tanh(c_new)  # (B, H)
        if return_gates:
            return (h_new, c_new), {"i": i, "f": f, "g": g, "o": o}
        return h_new, c_new

    @classmethod
    def from_torch(cls, module: nn.Module) -> LSTMCell:
        """A copy of a ``torch.nn.LSTMCell`` (or a one-layer ``nn.LSTM``) with the same weights."""
        W_ih, W_hh, b_ih, b_hh = _torch_weights(module, nn.LSTMCell)
        cell = cls(W_ih.shape[1], W_hh.shape[1]).to(W_ih)
        with torch.no_grad():
            cell.W_x.copy_(W_ih)
            cell.W_h.copy_(W_hh)
            cell.b.copy_(b_ih + b_hh)
        return cell


class GRUCell(_Cell):
    r"""The gated recurrent unit (Cho et al. 2014).

        r = sigmoid(W_x[r] x_t + b_x[r] + W_h[r] h_{t-1} + b_h[r])
        z = sigmoid(W_x[z] x_t + b_x[z] + W_h[z] h_{t-1} + b_h[z])
        n = tanh(W_x[n] x_t + b_x[n] + r * (W_h[n] h_{t-1} + b_h[n]))        (reset_after=True, PyTorch)
        n = tanh(W_x[n] x_t + b_x[n] + W_h[n] (r * h_{t-1}) + b_h[n])        (reset_after=False, Cho et al.)
        h_t = (1 - z) * n + z * h_{t-1}

    The gate blocks of ``W_x`` (3H, D), ``W_h`` (3H, H), ``b_x`` and ``b_h`` (3H,) are stacked in PyTorch's
    order r, z, n. With ``reset_after=True`` (the default) it equals ``torch.nn.GRUCell`` on copied weights;
    ``reset_after=False`` is the original formulation, where the reset gate acts before the matrix product.

    Shapes:
        x:      (B, D)
        h:      (B, H); zeros when omitted
        return: (B, H); and a dict of r, z, n, each (B, H), with ``return_gates=True``

    Chapter: LSTM and GRU.
    """

    def __init__(self, input_size: int, hidden_size: int, *, reset_after: bool = True):
        super().__init__(input_size, hidden_size)
        self.reset_after = bool(reset_after)
        self.W_x = nn.Parameter(torch.empty(3 * hidden_size, input_size))  # (3H, D)
        self.W_h = nn.Parameter(torch.empty(3 * hidden_size, hidden_size))  # (3H, H)
        self.b_x = nn.Parameter(torch.empty(3 * hidden_size))  # (3H,)
        self.b_h = nn.Parameter(torch.empty(3 * hidden_size))  # (3H,)
        _uniform_(self, hidden_size)

    def _step(self, x: torch.Tensor, h: torch.Tensor, *, return_gates: bool = False):
        """r, z, n, then h_t, without input checks (forward and Recurrent check them)."""
        H = self.hidden_size
        ax_r, ax_z, ax_n = (x @ self.W_x.T + self.b_x).chunk(3, dim=-1)  # each (B, H)
        W_hr_hz, W_hn = self.W_h[: 2 * H], self.W_h[2 * H :]  # (2H, H), (H, H)
        ah_r, ah_z = (h @ W_hr_hz.T + self.b_h[: 2 * H]).chunk(2, dim=-1)  # each (B, H)
        r = torch.sigmoid(ax_r + ah_r)  # (B, H)
        z = torch.sigmoid(ax_z + ah_z)  # (B, H)
        if self.reset_after:
            n = torch.tanh(ax_n + r * (h @ W_hn.T + self.b_h[2 * H :]))  # (B, H)
        else:
            n = torch.tanh(ax_n + (r * h) @ W_hn.T + self.b_h[2 * H :])  # (B, H)
        h_new = (1 - z) * n + z * h  # (B, H)
        if return_gates:
            return h_new, {"r": r, "z": z, "n": n}
        return h_new

    @classmethod
    def from_torch(cls, module: nn.Module) -> GRUCell:
        """A copy of a ``torch.nn.GRUCell`` (or a one-layer ``nn.GRU``) with the same weights."""
        W_ih, W_hh, b_ih, b_hh = _torch_weights(module, nn.GRUCell)
        cell = cls(W_ih.shape[1], W_hh.shape[1]).to(W_ih)
        with torch.no_grad():
            cell.W_x.copy_(W_ih)
            cell.W_h.copy_(W_hh)
            cell.b_x.copy_(b_ih)
            cell.b_h.copy_(b_hh)
        return cell


Cell = RNNCell | LSTMCell | GRUCell


class Recurrent(nn.Module):
    """Run a cell over a sequence, one step at a time (the readable loop; PyTorch's nn.RNN/LSTM/GRU are fused).

    Shapes:
        x:      (B, T, D)
        state:  the cell's initial state, ``h`` (B, H) or ``(h, c)``; zeros when omitted
        return: outputs (B, T, H), the hidden states h_1 ... h_T; and the final state (as the cell returns it)

    Chapter: vanishing gradients.
    """

    def __init__(self, cell: Cell):
        super().__init__()
        _check_cell(cell)
        self.cell = cell

    def forward(self, x: torch.Tensor, state: State | None = None):
        state = _check_sequence(self.cell, x, state)  # the state to start from: as given, or zeros
        outputs = []
        for x_t in x.unbind(1):  # (B, D) at t = 1 ... T
            state = self.cell._step(x_t, state)
            outputs.append(state[0] if isinstance(state, tuple) else state)  # h_t: (B, H)
        return torch.stack(outputs, dim=1), state  # (B, T, H)


# --- the model of the adding-problem experiment ----------------------------------------------------

_LAYERS = {"rnn": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}


class SequenceRegressor(nn.Module):
    """A recurrent layer read out from its last hidden state: one number per sequence (many-to-one).

    It uses PyTorch's fused ``nn.RNN`` (tanh), ``nn.LSTM`` or ``nn.GRU``, whose steps the cells of this module
    reproduce (``LSTMCell.from_torch(model.layer)`` gives the same LSTM as a readable cell).

    Args:
        kind: ``"rnn"``, ``"lstm"`` or ``"gru"``
        forget_bias: for the LSTM, the initial bias of the forget gate (None keeps PyTorch's initialisation)

    Shapes:
        x:      (B, T, input_size)
        return: (B,)

    Chapter: LSTM and GRU (the adding problem).
    """

    def __init__(self, kind: str, input_size: int, hidden_size: int, *, forget_bias: float | None = None):
        super().__init__()
        _check_regressor_args(kind, input_size, hidden_size, forget_bias)
        self.kind, self.input_size, self.hidden_size = kind, input_size, hidden_size
        self.layer = _LAYERS[kind](input_size, hidden_size, batch_first=True)
        self.readout = nn.Linear(hidden_size, 1)
        if forget_bias is not None:
            set_forget_bias(self.layer, forget_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_regressor_input(self, x)
        outputs, _ = self.layer(x)  # (B, T, H)
        return self.readout(outputs[:, -1]).squeeze(-1)  # (B,)


def set_forget_bias(module: nn.Module, value: float) -> nn.Module:
    """Set the forget gate's total bias of an LSTM to ``value``; return the module.

    Works on :class:`LSTMCell` (its ``b``), ``torch.nn.LSTMCell`` and ``torch.nn.LSTM`` (every layer and
    direction: the input-side bias gets ``value`` and the hidden-side bias 0, so that they add up to ``value``).

    Chapter: LSTM and GRU (the forget-gate bias).
    """
    _check_forget_bias(module, value)
    H = module.hidden_size
    with torch.no_grad():
        if isinstance(module, LSTMCell):
            module.b[H : 2 * H] = value  # gate order i, f, g, o
            return module
        for name, p in module.named_parameters():  # PyTorch's LSTM: two biases per layer and direction
            if name.startswith("bias_ih"):
                p[H : 2 * H] = value
            elif name.startswith("bias_hh"):
                p[H : 2 * H] = 0.0
    return module


# --- input checks ------------------------------------------------------------------------------------


def _check_sizes(input_size, hidden_size) -> None:
    _checks.positive_int("input_size", input_size)
    _checks.positive_int("hidden_size", hidden_size)


def _check_cell_args(input_size, hidden_size, nonlinearity) -> None:
    _check_sizes(input_size, hidden_size)
    if nonlinearity not in _NONLINEARITIES:
        raise ValueError(f"nonlinearity must be one of {sorted(_NONLINEARITIES)}, got {nonlinearity!r}")


def _check_x(cell: _Cell, x) -> torch.Tensor:
    """x must be a floating (B, input_size) tensor with the cell's dtype and device."""
    _checks.tensor("x", x, ndim=2, floating=True)
    if x.shape[1] != cell.input_size:
        raise ValueError(
            f"x must have shape (B, input_size) = (B, {cell.input_size}), got {_checks.shape_str(x.shape)}"
        )
    return _checks.like("x", x, cell, owner="cell")


def _check_hidden(name: str, h, x: torch.Tensor, hidden_size: int) -> torch.Tensor:
    """A hidden (or cell) state must be a (B, hidden_size) tensor matching x's batch, dtype and device."""
    _checks.tensor(name, h, floating=True)
    expected = (x.shape[0], hidden_size)
    if tuple(h.shape) != expected:
        raise ValueError(
            f"{name} must have shape (B, hidden_size) = {_checks.shape_str(expected)} "
            f"(B from x {_checks.shape_str(x.shape)}), got {_checks.shape_str(h.shape)}"
        )
    if h.dtype != x.dtype or h.device != x.device:
        raise TypeError(
            f"{name} must have the dtype and device of x ({x.dtype}, {x.device}), got {h.dtype} on {h.device}"
        )
    return h


def _check_step(cell: _Cell, x, state, name: str) -> State:
    """One step's input x (B, input_size) and state (``name``: h, or the pair (h, c) of an LSTM); returns the
    state to start from (zeros when it is None)."""
    _check_x(cell, x)
    if state is None:
        return cell.initial_state(x.shape[0], like=x)
    if not isinstance(cell, LSTMCell):
        return _check_hidden(name, state, x, cell.hidden_size)
    if not isinstance(state, (tuple, list)) or len(state) != 2:
        raise TypeError(
            f"state must be a pair (h, c) of (B, hidden_size) tensors, got {type(state).__name__}"
            + (f" of length {len(state)}" if isinstance(state, (tuple, list)) else "")
        )
    h = _check_hidden("state[0] (h)", state[0], x, cell.hidden_size)
    return h, _check_hidden("state[1] (c)", state[1], x, cell.hidden_size)


def _check_cell(cell) -> None:
    if not isinstance(cell, (RNNCell, LSTMCell, GRUCell)):
        raise TypeError(
            f"cell must be an attnbook.rnn RNNCell, LSTMCell or GRUCell, got {type(cell).__name__}"
            + (
                " (copy a PyTorch cell with RNNCell.from_torch, LSTMCell.from_torch or GRUCell.from_torch)"
                if isinstance(cell, nn.Module)
                else ""
            )
        )


def _check_shape_of_sequence(cell: _Cell, x, *, batched: bool) -> None:
    """x must be (B, T, D) (batched) or (T, D) with D = cell.input_size and T >= 1."""
    ndim, layout = (3, "(B, T, input_size)") if batched else (2, "(T, input_size)")
    _checks.tensor("x", x, ndim=ndim, floating=True)
    if x.shape[-1] != cell.input_size or x.shape[-2] == 0:
        what = layout.replace("input_size", str(cell.input_size))
        raise ValueError(f"x must have shape {what} with T >= 1, got {_checks.shape_str(x.shape)}")


def _check_sequence(cell: _Cell, x, state) -> State:
    """A batch of sequences x (B, T, input_size) for ``cell`` and its initial state; returns the state to
    start from (zeros when it is None)."""
    _check_shape_of_sequence(cell, x, batched=True)
    name = "state" if isinstance(cell, LSTMCell) else "h"
    return _check_step(cell, x[:, 0], state, name)  # the first step's input stands for every step's


def _check_regressor_args(kind, input_size, hidden_size, forget_bias) -> None:
    if kind not in _LAYERS:
        raise ValueError(f"kind must be one of {sorted(_LAYERS)}, got {kind!r}")
    if forget_bias is not None and kind != "lstm":
        raise ValueError(f"forget_bias applies to kind='lstm' only, got kind={kind!r}")
    _check_sizes(input_size, hidden_size)


def _check_regressor_input(model: SequenceRegressor, x) -> None:
    _checks.tensor("x", x, ndim=3, floating=True)
    if x.shape[-1] != model.input_size or x.shape[1] == 0:
        raise ValueError(
            f"x must have shape (B, T, input_size) = (B, T, {model.input_size}) with T >= 1, "
            f"got {_checks.shape_str(x.shape)}"
        )
    _checks.like("x", x, model)


def _check_forget_bias(module, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"value must be a finite number, got {value!r}")
    if not isinstance(module, (LSTMCell, nn.LSTMCell, nn.LSTM)):
        raise TypeError(
            f"module must be an LSTM (attnbook.rnn.LSTMCell, torch.nn.LSTMCell or torch.nn.LSTM), "
            f"got {type(module).__name__}"
        )
    if not isinstance(module, LSTMCell) and not module.bias:
        raise ValueError("the LSTM has bias=False, so its forget gate has no bias to set")


def _check_torch_module(module, kind: type) -> None:
    """A PyTorch cell of ``kind`` (nn.RNNCell, nn.LSTMCell, nn.GRUCell) with biases, or a one-layer,
    one-direction layer of the same family (nn.RNN, nn.LSTM, nn.GRU)."""
    layer = getattr(nn, kind.__name__[:-4])  # nn.RNNCell -> nn.RNN
    if not isinstance(module, (kind, layer)):
        raise TypeError(
            f"module must be a torch.nn.{kind.__name__} or a one-layer torch.nn.{layer.__name__}, "
            f"got {type(module).__name__}"
        )
    if isinstance(module, layer) and (module.num_layers != 1 or module.bidirectional or module.proj_size):
        raise ValueError(
            "from_torch copies a single cell: the layer must have num_layers=1, "
            f"bidirectional=False and no projection, got {module}"
        )
    if not module.bias:
        raise ValueError("from_torch needs a PyTorch module with bias=True")
