"""Recurrent networks from scratch: RNN, LSTM and GRU cells, a layer that runs a cell over a sequence,
and measurements of how gradients flow back through time.

The cells name their parameters after the book's equations (``W_xh``, ``W_hh``, ...) but keep PyTorch's
layout: the LSTM's four gate blocks are stacked in the order i, f, g, o and the GRU's three in the order
r, z, n, exactly as in ``torch.nn.LSTMCell`` and ``torch.nn.GRUCell``. ``from_torch`` copies the weights of
a PyTorch cell (or a one-layer, one-direction ``nn.RNN``/``nn.LSTM``/``nn.GRU``), so that every cell here
can be checked equal to PyTorch's.

A cell's *state* is ``h`` for the RNN and the GRU and the pair ``(h, c)`` for the LSTM. The gradient-flow
functions see it as one flat vector s of width S (S = H, or S = 2H for the LSTM with h first, then c).

Chapters: vanishing gradients (RNNCell, Recurrent, state_jacobians, jacobian_chain, gradient_norms);
LSTM and GRU (LSTMCell, GRUCell, set_forget_bias, SequenceRegressor).
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
    "flatten_state",
    "unflatten_state",
    "state_jacobians",
    "jacobian_chain",
    "gradient_norms",
]

State = torch.Tensor | tuple
_NONLINEARITIES = {"tanh": torch.tanh, "relu": torch.relu, "linear": lambda a: a}


# --- input checks ---------------------------------------------------------------------------------


def _check_x(cell: nn.Module, x) -> torch.Tensor:
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


def _uniform_(cell: nn.Module, hidden_size: int) -> None:
    """PyTorch's initialisation for recurrent cells: every parameter uniform in [-1/sqrt(H), 1/sqrt(H)]."""
    bound = 1.0 / math.sqrt(hidden_size)
    with torch.no_grad():
        for p in cell.parameters():
            p.uniform_(-bound, bound)


def _torch_weights(module: nn.Module, kind: type) -> tuple[torch.Tensor, ...]:
    """(weight_ih, weight_hh, bias_ih, bias_hh) of a PyTorch cell or of a one-layer, one-direction layer."""
    if isinstance(module, kind):
        names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    elif isinstance(module, nn.RNNBase):
        if module.num_layers != 1 or module.bidirectional or getattr(module, "proj_size", 0):
            raise ValueError(
                "from_torch copies a single cell: the layer must have num_layers=1, "
                f"bidirectional=False and no projection, got {module}"
            )
        names = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
    else:
        raise TypeError(
            f"module must be a torch.nn.{kind.__name__} or a one-layer torch.nn.{kind.__name__[:-4]}, "
            f"got {type(module).__name__}"
        )
    if not getattr(module, "bias", True):
        raise ValueError("from_torch needs a PyTorch module with bias=True")
    return tuple(getattr(module, n).detach() for n in names)


# --- cells ---------------------------------------------------------------------------------------


class _Cell(nn.Module):
    """What every cell has: a state of ``hidden_size`` numbers per sequence, zero at the start."""

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
        super().__init__()
        self.input_size = _checks.positive_int("input_size", input_size)
        self.hidden_size = _checks.positive_int("hidden_size", hidden_size)
        if nonlinearity not in _NONLINEARITIES:
            raise ValueError(f"nonlinearity must be one of {sorted(_NONLINEARITIES)}, got {nonlinearity!r}")
        self.nonlinearity = nonlinearity
        self.W_xh = nn.Parameter(torch.empty(hidden_size, input_size))  # (H, D)
        self.W_hh = nn.Parameter(torch.empty(hidden_size, hidden_size))  # (H, H)
        self.b_h = nn.Parameter(torch.empty(hidden_size))  # (H,)
        _uniform_(self, hidden_size)

    def forward(self, x: torch.Tensor, h: torch.Tensor | None = None) -> torch.Tensor:
        _check_x(self, x)
        h = self.initial_state(x.shape[0], like=x) if h is None else _check_hidden("h", h, x, self.hidden_size)
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
        super().__init__()
        self.input_size = _checks.positive_int("input_size", input_size)
        self.hidden_size = _checks.positive_int("hidden_size", hidden_size)
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
        _check_x(self, x)
        if state is None:
            h, c = self.initial_state(x.shape[0], like=x)
        else:
            if not isinstance(state, (tuple, list)) or len(state) != 2:
                raise TypeError(
                    f"state must be a pair (h, c) of (B, hidden_size) tensors, got {type(state).__name__}"
                    + (f" of length {len(state)}" if isinstance(state, (tuple, list)) else "")
                )
            h = _check_hidden("state[0] (h)", state[0], x, self.hidden_size)
            c = _check_hidden("state[1] (c)", state[1], x, self.hidden_size)
        a = x @ self.W_x.T + h @ self.W_h.T + self.b  # (B, 4H)
        a_i, a_f, a_g, a_o = a.chunk(4, dim=-1)  # each (B, H)
        i, f, o = torch.sigmoid(a_i), torch.sigmoid(a_f), torch.sigmoid(a_o)
        g = torch.tanh(a_g)
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
        super().__init__()
        self.input_size = _checks.positive_int("input_size", input_size)
        self.hidden_size = _checks.positive_int("hidden_size", hidden_size)
        self.reset_after = bool(reset_after)
        self.W_x = nn.Parameter(torch.empty(3 * hidden_size, input_size))  # (3H, D)
        self.W_h = nn.Parameter(torch.empty(3 * hidden_size, hidden_size))  # (3H, H)
        self.b_x = nn.Parameter(torch.empty(3 * hidden_size))  # (3H,)
        self.b_h = nn.Parameter(torch.empty(3 * hidden_size))  # (3H,)
        _uniform_(self, hidden_size)

    def forward(self, x: torch.Tensor, h: torch.Tensor | None = None, *, return_gates: bool = False):
        _check_x(self, x)
        h = self.initial_state(x.shape[0], like=x) if h is None else _check_hidden("h", h, x, self.hidden_size)
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


def _check_sequence(cell, x, *, batched: bool) -> torch.Tensor:
    """x must be (B, T, D) (batched) or (T, D) with D = cell.input_size and T >= 1."""
    ndim, layout = (3, "(B, T, input_size)") if batched else (2, "(T, input_size)")
    _checks.tensor("x", x, ndim=ndim, floating=True)
    if x.shape[-1] != cell.input_size or x.shape[-2] == 0:
        what = layout.replace("input_size", str(cell.input_size))
        raise ValueError(f"x must have shape {what} with T >= 1, got {_checks.shape_str(x.shape)}")
    return x


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
        _check_sequence(self.cell, x, batched=True)
        outputs = []
        for t in range(x.shape[1]):
            state = self.cell(x[:, t], state)
            outputs.append(state[0] if isinstance(state, tuple) else state)  # (B, H)
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
        if kind not in _LAYERS:
            raise ValueError(f"kind must be one of {sorted(_LAYERS)}, got {kind!r}")
        if forget_bias is not None and kind != "lstm":
            raise ValueError(f"forget_bias applies to kind='lstm' only, got kind={kind!r}")
        self.kind = kind
        self.input_size = _checks.positive_int("input_size", input_size)
        self.hidden_size = _checks.positive_int("hidden_size", hidden_size)
        self.layer = _LAYERS[kind](input_size, hidden_size, batch_first=True)
        self.readout = nn.Linear(hidden_size, 1)
        if forget_bias is not None:
            set_forget_bias(self.layer, forget_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _checks.tensor("x", x, ndim=3, floating=True)
        if x.shape[-1] != self.input_size or x.shape[1] == 0:
            raise ValueError(
                f"x must have shape (B, T, input_size) = (B, T, {self.input_size}) with T >= 1, "
                f"got {_checks.shape_str(x.shape)}"
            )
        _checks.like("x", x, self)
        outputs, _ = self.layer(x)  # (B, T, H)
        return self.readout(outputs[:, -1]).squeeze(-1)  # (B,)


def set_forget_bias(module: nn.Module, value: float) -> nn.Module:
    """Set the forget gate's total bias of an LSTM to ``value``; return the module.

    Works on :class:`LSTMCell` (its ``b``), ``torch.nn.LSTMCell`` and ``torch.nn.LSTM`` (every layer and
    direction: the input-side bias gets ``value`` and the hidden-side bias 0, so that they add up to ``value``).

    Chapter: LSTM and GRU (the forget-gate bias).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"value must be a finite number, got {value!r}")
    with torch.no_grad():
        if isinstance(module, LSTMCell):
            H = module.hidden_size
            module.b[H : 2 * H] = value  # gate order i, f, g, o
            return module
        if isinstance(module, (nn.LSTMCell, nn.LSTM)):
            if not module.bias:
                raise ValueError("the LSTM has bias=False, so its forget gate has no bias to set")
            H = module.hidden_size
            for name, p in module.named_parameters():
                if name.startswith("bias_ih"):
                    p[H : 2 * H] = value
                elif name.startswith("bias_hh"):
                    p[H : 2 * H] = 0.0
            return module
    raise TypeError(
        f"module must be an LSTM (attnbook.rnn.LSTMCell, torch.nn.LSTMCell or torch.nn.LSTM), "
        f"got {type(module).__name__}"
    )


# --- gradient flow ---------------------------------------------------------------------------------


def flatten_state(state: State) -> torch.Tensor:
    """The state as one tensor: h (B, H) stays as it is, (h, c) becomes [h, c] of shape (B, 2H)."""
    if isinstance(state, (tuple, list)):
        if len(state) != 2:
            raise ValueError(f"state must be h or a pair (h, c), got a {type(state).__name__} of length {len(state)}")
        h = _checks.tensor("state[0] (h)", state[0], min_ndim=1, floating=True)
        c = _checks.tensor("state[1] (c)", state[1], floating=True)
        if h.shape != c.shape or h.dtype != c.dtype or h.device != c.device:
            raise ValueError(
                f"state (h, c) must hold two tensors of one shape, dtype and device, got h "
                f"{_checks.shape_str(h.shape)} {h.dtype} and c {_checks.shape_str(c.shape)} {c.dtype}"
            )
        return torch.cat(state, dim=-1)  # (B, 2H)
    return _checks.tensor("state", state, min_ndim=1, floating=True)  # (B, H)


def unflatten_state(cell: Cell, s: torch.Tensor) -> State:
    """The inverse of :func:`flatten_state` for ``cell``: (B, S) -> h, or (h, c) for an LSTM."""
    _check_cell(cell)
    _checks.tensor("s", s, min_ndim=1, floating=True)
    if s.shape[-1] != cell.state_size:
        raise ValueError(
            f"s must have the cell's flat state width S = {cell.state_size} in its last dimension, "
            f"got shape {_checks.shape_str(s.shape)}"
        )
    if isinstance(cell, LSTMCell):
        return tuple(s.split(cell.hidden_size, dim=-1))  # (B, H), (B, H)
    return s


def _initial_flat_state(cell: Cell, x: torch.Tensor, state: State | None) -> torch.Tensor:
    if state is None:
        return torch.zeros(cell.state_size, dtype=x.dtype, device=x.device)  # (S,)
    s = flatten_state(tuple(state) if isinstance(state, list) else state)
    _checks.tensor("state", s, floating=True)
    if tuple(s.shape) not in ((cell.state_size,), (1, cell.state_size)):
        what = "(h, c), each (hidden_size,)" if isinstance(cell, LSTMCell) else "h of shape (hidden_size,)"
        raise ValueError(
            f"state must be one sequence's state {what}, flat width S = {cell.state_size}, "
            f"got {_checks.shape_str(s.shape)}"
        )
    return s.reshape(cell.state_size).to(x)


def state_jacobians(cell: Cell, x: torch.Tensor, state: State | None = None) -> torch.Tensor:
    r"""The step Jacobians J_t = d s_t / d s_{t-1} along one sequence, computed by automatic differentiation.

    s is the cell's flat state (h, or [h, c] for an LSTM). J_t depends on x_t and on where the state is.

    Shapes:
        x:      (T, D), one sequence
        state:  the initial state of that sequence (h (H,), or (h, c)); zeros when omitted
        return: (T, S, S); entry t-1 is J_t, for t = 1 ... T

    Chapter: vanishing gradients.
    """
    _check_cell(cell)
    _check_sequence(cell, x, batched=False)
    s = _initial_flat_state(cell, x, state).detach()  # (S,)
    T, S = x.shape[0], cell.state_size
    previous = []  # s_0 ... s_{T-1}: where each step starts
    with torch.no_grad():
        for t in range(T):
            previous.append(s)
            s = flatten_state(cell(x[t][None], unflatten_state(cell, s[None])))[0]  # (S,)
    # All T Jacobians with one batched step: S copies of each s_{t-1}; the backward pass of copy i with
    # the output gradient e_i gives row i of J_t.
    with torch.enable_grad():
        s_in = torch.stack(previous).repeat_interleave(S, dim=0).requires_grad_(True)  # (T*S, S)
        x_in = x.detach().repeat_interleave(S, dim=0)  # (T*S, D)
        s_out = flatten_state(cell(x_in, unflatten_state(cell, s_in)))  # (T*S, S)
        eye = torch.eye(S, dtype=x.dtype, device=x.device).repeat(T, 1)  # (T*S, S)
        (rows,) = torch.autograd.grad(s_out, s_in, grad_outputs=eye)  # (T*S, S)
    return rows.view(T, S, S)  # (T, S, S)


def jacobian_chain(jacobians: torch.Tensor) -> torch.Tensor:
    r"""The products d s_T / d s_{T-k} = J_T J_{T-1} ... J_{T-k+1} for k = 0 ... T (k = 0 gives the identity).

    Shapes:
        jacobians: (T, S, S), as :func:`state_jacobians` returns them
        return:    (T + 1, S, S); entry k is d s_T / d s_{T-k}

    Chapter: vanishing gradients.
    """
    _checks.tensor("jacobians", jacobians, ndim=3, floating=True)
    T, S, S2 = jacobians.shape
    if S != S2 or T == 0:
        raise ValueError(f"jacobians must have shape (T, S, S) with T >= 1, got {_checks.shape_str(jacobians.shape)}")
    product = torch.eye(S, dtype=jacobians.dtype, device=jacobians.device)  # (S, S)
    out = [product]
    for t in range(T - 1, -1, -1):
        product = product @ jacobians[t]  # (S, S): d s_T / d s_{t}
        out.append(product)
    return torch.stack(out)  # (T + 1, S, S)


def gradient_norms(cell: Cell, x: torch.Tensor, state: State | None = None, *, part: str = "state") -> torch.Tensor:
    r"""The spectral norms || d s_T / d s_{T-k} ||_2 for k = 0 ... T: how much a gradient at the last step
    can be amplified (or shrunk) on its way back k steps.

    ``part`` picks the block for an LSTM: ``"state"`` (all of [h, c]), ``"h"`` (d h_T / d h_{T-k}) or
    ``"c"`` (d c_T / d c_{T-k}, the path through the cell, the "gradient highway").

    Shapes:
        x:      (T, D), one sequence
        return: (T + 1,)

    Chapter: vanishing gradients; LSTM and GRU (the gradient highway).
    """
    chain = jacobian_chain(state_jacobians(cell, x, state))  # (T + 1, S, S)
    if part not in ("state", "h", "c"):
        raise ValueError(f"part must be 'state', 'h' or 'c', got {part!r}")
    if part != "state":
        if not isinstance(cell, LSTMCell):
            if part == "c":
                raise ValueError(
                    f"part='c' needs an LSTMCell (only the LSTM has a cell state), got {type(cell).__name__}"
                )
        else:
            H = cell.hidden_size
            block = slice(0, H) if part == "h" else slice(H, 2 * H)
            chain = chain[:, block, block]  # (T + 1, H, H)
    # half precision has no matrix norm kernel: float32; a non-finite product (from a NaN in x) has norm NaN
    work = torch.float32 if chain.dtype in (torch.float16, torch.bfloat16) else chain.dtype
    finite = torch.isfinite(chain).flatten(1).all(dim=1)  # (T + 1,)
    norms = torch.linalg.matrix_norm(torch.where(finite[:, None, None], chain, 0.0).to(work), ord=2)  # (T + 1,)
    return norms.masked_fill(~finite, float("nan"))  # (T + 1,)
