"""Backpropagation through time, measured: the step Jacobians of a recurrent cell, their products, and how
much a gradient grows or shrinks on its way back k steps.

A cell's state (``h``, or ``(h, c)`` for the LSTM, see :mod:`attnbook.rnn`) is seen here as one flat vector
s of width S (S = H, or S = 2H for the LSTM with h first, then c). Along one sequence, the step Jacobian
J_t = d s_t / d s_{t-1} is computed by automatic differentiation, and the gradient that reaches step T - k
from step T is multiplied by J_T J_{T-1} ... J_{T-k+1}. The input checks are at the end of the module.

Chapters: vanishing gradients (state_jacobians, jacobian_chain, gradient_norms); LSTM and GRU (the
gradient highway).
"""

from __future__ import annotations

import torch

from . import _checks
from .rnn import Cell, LSTMCell, State, _check_cell, _check_shape_of_sequence

__all__ = ["flatten_state", "unflatten_state", "state_jacobians", "jacobian_chain", "gradient_norms"]


def flatten_state(state: State) -> torch.Tensor:
    """The state as one tensor: h (B, H) stays as it is, (h, c) becomes [h, c] of shape (B, 2H)."""
    _check_state(state)
    return _flatten(state)


def unflatten_state(cell: Cell, s: torch.Tensor) -> State:
    """The inverse of :func:`flatten_state` for ``cell``: (B, S) -> h, or (h, c) for an LSTM."""
    _check_flat_state(cell, s)
    return _unflatten(cell, s)


def _flatten(state: State) -> torch.Tensor:
    return torch.cat(tuple(state), dim=-1) if isinstance(state, (tuple, list)) else state  # (B, S)


def _unflatten(cell: Cell, s: torch.Tensor) -> State:
    return tuple(s.split(cell.hidden_size, dim=-1)) if isinstance(cell, LSTMCell) else s  # (B, H) or 2 x (B, H)


def state_jacobians(cell: Cell, x: torch.Tensor, state: State | None = None) -> torch.Tensor:
    r"""The step Jacobians J_t = d s_t / d s_{t-1} along one sequence, computed by automatic differentiation.

    s is the cell's flat state (h, or [h, c] for an LSTM). J_t depends on x_t and on where the state is.

    Shapes:
        x:      (T, D), one sequence
        state:  the initial state of that sequence (h (H,), or (h, c)); zeros when omitted
        return: (T, S, S); entry t-1 is J_t, for t = 1 ... T

    Chapter: vanishing gradients.
    """
    s_0 = _check_jacobian_input(cell, x, state)  # (S,): the initial state, flat
    s = s_0.detach()
    T, S = x.shape[0], cell.state_size
    previous = []  # s_0 ... s_{T-1}: where each step starts
    with torch.no_grad():
        for x_t in x:  # (D,)
            previous.append(s)
            s = _flatten(cell._step(x_t[None], _unflatten(cell, s[None])))[0]  # (S,)
    # All T Jacobians with one batched step: S copies of each s_{t-1}; the backward pass of copy i with
    # the output gradient e_i gives row i of J_t.
    with torch.enable_grad():
        s_in = torch.stack(previous).repeat_interleave(S, dim=0).requires_grad_(True)  # (T*S, S)
        x_in = x.detach().repeat_interleave(S, dim=0)  # (T*S, D)
        s_out = _flatten(cell._step(x_in, _unflatten(cell, s_in)))  # (T*S, S)
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
    _check_jacobians(jacobians)
    T, S, _ = jacobians.shape
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
    ``"c"`` (d c_T / d c_{T-k}: every path from c_{T-k} to c_T, through h and the gates too, not only the
    product of forget gates along the "gradient highway").

    Shapes:
        x:      (T, D), one sequence
        return: (T + 1,)

    Chapter: vanishing gradients; LSTM and GRU (the gradient highway).
    """
    chain = jacobian_chain(state_jacobians(cell, x, state))  # (T + 1, S, S)
    _check_part(cell, part)
    if part != "state" and isinstance(cell, LSTMCell):
        H = cell.hidden_size
        block = slice(0, H) if part == "h" else slice(H, 2 * H)
        chain = chain[:, block, block]  # (T + 1, H, H)
    # half precision has no matrix norm kernel: float32; a non-finite product (from a NaN in x) has norm NaN
    work = torch.float32 if chain.dtype in (torch.float16, torch.bfloat16) else chain.dtype
    finite = torch.isfinite(chain).flatten(1).all(dim=1)  # (T + 1,)
    norms = torch.linalg.matrix_norm(torch.where(finite[:, None, None], chain, 0.0).to(work), ord=2)  # (T + 1,)
    return norms.masked_fill(~finite, float("nan"))  # (T + 1,)


# --- input checks ------------------------------------------------------------------------------------


def _check_state(state) -> None:
    """h (..., H), or a pair (h, c) of one shape, dtype and device."""
    if not isinstance(state, (tuple, list)):
        _checks.tensor("state", state, min_ndim=1, floating=True)
        return
    if len(state) != 2:
        raise ValueError(f"state must be h or a pair (h, c), got a {type(state).__name__} of length {len(state)}")
    h = _checks.tensor("state[0] (h)", state[0], min_ndim=1, floating=True)
    c = _checks.tensor("state[1] (c)", state[1], floating=True)
    if h.shape != c.shape or h.dtype != c.dtype or h.device != c.device:
        raise ValueError(
            f"state (h, c) must hold two tensors of one shape, dtype and device, got h "
            f"{_checks.shape_str(h.shape)} {h.dtype} and c {_checks.shape_str(c.shape)} {c.dtype}"
        )


def _check_flat_state(cell, s) -> None:
    _check_cell(cell)
    _checks.tensor("s", s, min_ndim=1, floating=True)
    if s.shape[-1] != cell.state_size:
        raise ValueError(
            f"s must have the cell's flat state width S = {cell.state_size} in its last dimension, "
            f"got shape {_checks.shape_str(s.shape)}"
        )


def _check_jacobian_input(cell, x, state) -> torch.Tensor:
    """A cell, one sequence x (T, input_size) with the cell's dtype and device, and the sequence's initial
    state; returns that state flat, (S,) (zeros when it is None)."""
    _check_cell(cell)
    _check_shape_of_sequence(cell, x, batched=False)
    if state is None:
        s = torch.zeros(cell.state_size, dtype=x.dtype, device=x.device)  # (S,)
    else:
        _check_state(state)
        s = _flatten(state)
        if tuple(s.shape) not in ((cell.state_size,), (1, cell.state_size)):
            what = "(h, c), each (hidden_size,)" if isinstance(cell, LSTMCell) else "h of shape (hidden_size,)"
            raise ValueError(
                f"state must be one sequence's state {what}, flat width S = {cell.state_size}, "
                f"got {_checks.shape_str(s.shape)}"
            )
        s = s.reshape(cell.state_size).to(x)
    _checks.like("x", x, cell, owner="cell")
    return s


def _check_jacobians(jacobians) -> None:
    _checks.tensor("jacobians", jacobians, ndim=3, floating=True)
    T, S, S2 = jacobians.shape
    if S != S2 or T == 0:
        raise ValueError(f"jacobians must have shape (T, S, S) with T >= 1, got {_checks.shape_str(jacobians.shape)}")


def _check_part(cell, part) -> None:
    if part not in ("state", "h", "c"):
        raise ValueError(f"part must be 'state', 'h' or 'c', got {part!r}")
    if part == "c" and not isinstance(cell, LSTMCell):
        raise ValueError(f"part='c' needs an LSTMCell (only the LSTM has a cell state), got {type(cell).__name__}")
