"""Checkers for the exercises of the chapter on LSTM and GRU."""

from __future__ import annotations

import math

import torch

from . import Mistake, Result, check_function, check_number

__all__ = ["check_lstm_step", "check_gru_step", "check_forget_bias", "check_gru_parameters"]

DT = torch.float64


def _randn(g: torch.Generator, *shape, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=DT) * scale


# --- one LSTM step -----------------------------------------------------------------------------------


def _lstm(x, h, c, W_x, W_h, b, order="ifgo", act_g=torch.tanh, act_c=torch.tanh, use_i=True, c_for_h="new"):
    a = dict(zip(order, (x @ W_x.T + h @ W_h.T + b).chunk(4, dim=-1)))  # each (B, H)
    i, f, o = torch.sigmoid(a["i"]), torch.sigmoid(a["f"]), torch.sigmoid(a["o"])
    g = act_g(a["g"])
    c_new = f * c + (i * g if use_i else g)  # (B, H)
    h_new = o * act_c(c_new if c_for_h == "new" else c)  # (B, H)
    return h_new, c_new


def _lstm_cases():
    g = torch.Generator().manual_seed(21)
    cases = []
    for B, D, H in [(2, 3, 4), (3, 1, 5), (1, 4, 2)]:
        cases.append(
            (
                _randn(g, B, D),
                _randn(g, B, H, scale=0.5),
                _randn(g, B, H),
                _randn(g, 4 * H, D),
                _randn(g, 4 * H, H, scale=0.5),
                _randn(g, 4 * H, scale=0.5),
            )
        )
    return cases


def check_lstm_step(fn) -> Result:
    """``fn(x, h, c, W_x, W_h, b)`` must return the LSTM's (h_t, c_t), with gate blocks in PyTorch's order i,
    f, g, o.
    """
    mistakes = [
        Mistake(
            "the gate blocks are read in the order i, f, o, g; PyTorch (and this book's library) stacks "
            "them as i, f, g, o: the third block is the candidate g, the fourth the output gate o.",
            lambda *a: _lstm(*a, order="ifog"),
        ),
        Mistake(
            "h_t = o * tanh(c_t): the cell state goes through a tanh before the output gate.",
            lambda *a: _lstm(*a, act_c=lambda c: c),
        ),
        Mistake("h_t uses the new cell state c_t, not the previous one c_{t-1}.", lambda *a: _lstm(*a, c_for_h="old")),
        Mistake(
            "the candidate g is scaled by the input gate: c_t = f * c_{t-1} + i * g.", lambda *a: _lstm(*a, use_i=False)
        ),
        Mistake(
            "the candidate g uses tanh (values in (-1, 1), so the cell can be pushed down as well as up); "
            "only i, f and o use the sigmoid.",
            lambda *a: _lstm(*a, act_g=torch.sigmoid),
        ),
    ]
    return check_function(
        fn,
        exercise="one LSTM step",
        reference=_lstm,
        cases=_lstm_cases(),
        mistakes=mistakes,
        error_hints=[("cannot be multiplied", "x is (B, D) and W_x is (4H, D): use x @ W_x.T.")],
        gradients=(0, 1, 2),
    )


# --- one GRU step -------------------------------------------------------------------------------------


def _gru(x, h, W_x, W_h, b_x, b_h, reset="after", z_weighs="old", bias_in_reset=True):
    H = h.shape[-1]
    ax = x @ W_x.T + b_x  # (B, 3H)
    r = torch.sigmoid(ax[:, :H] + h @ W_h[:H].T + b_h[:H])
    z = torch.sigmoid(ax[:, H : 2 * H] + h @ W_h[H : 2 * H].T + b_h[H : 2 * H])
    if reset == "after":
        hn = h @ W_h[2 * H :].T
        n = torch.tanh(ax[:, 2 * H :] + (r * (hn + b_h[2 * H :]) if bias_in_reset else r * hn + b_h[2 * H :]))
    elif reset == "before":
        n = torch.tanh(ax[:, 2 * H :] + (r * h) @ W_h[2 * H :].T + b_h[2 * H :])
    else:  # no reset gate
        n = torch.tanh(ax[:, 2 * H :] + h @ W_h[2 * H :].T + b_h[2 * H :])
    return (1 - z) * n + z * h if z_weighs == "old" else z * n + (1 - z) * h


def _gru_cases():
    g = torch.Generator().manual_seed(22)
    cases = []
    for B, D, H in [(2, 3, 4), (3, 2, 5), (1, 4, 3)]:
        cases.append(
            (
                _randn(g, B, D),
                _randn(g, B, H, scale=0.7),
                _randn(g, 3 * H, D),
                _randn(g, 3 * H, H, scale=0.6),
                _randn(g, 3 * H, scale=0.5),
                _randn(g, 3 * H, scale=0.5),
            )
        )
    return cases


def check_gru_step(fn) -> Result:
    """``fn(x, h, W_x, W_h, b_x, b_h)`` must return the GRU's h_t as ``torch.nn.GRUCell`` computes it."""
    mistakes = [
        Mistake(
            "z and 1 - z are swapped: in PyTorch's convention (and Cho et al.'s) z keeps the old state, "
            "h_t = (1 - z) * n + z * h_{t-1}.",
            lambda *a: _gru(*a, z_weighs="new"),
        ),
        Mistake(
            "the reset gate is applied before the matrix product, W_hn (r * h), as in Cho et al.'s paper; "
            "nn.GRUCell applies it after: r * (W_hn h + b_hn).",
            lambda *a: _gru(*a, reset="before"),
        ),
        Mistake(
            "the hidden-side bias of the candidate, b_hn, belongs inside the reset gate: r * (W_hn h + b_hn).",
            lambda *a: _gru(*a, bias_in_reset=False),
        ),
        Mistake(
            "the reset gate r is computed but not used: it multiplies the recurrent term of the candidate.",
            lambda *a: _gru(*a, reset="none"),
        ),
    ]
    return check_function(
        fn,
        exercise="one GRU step",
        reference=_gru,
        cases=_gru_cases(),
        mistakes=mistakes,
        error_hints=[("cannot be multiplied", "x is (B, D) and W_x is (3H, D): use x @ W_x.T.")],
        gradients=(0, 1),
    )


# --- the forget-gate bias for a memory of a given length ----------------------------------------------


def check_forget_bias(answer, steps: int = 100, kept: float = 0.5) -> Result:
    """The forget-gate bias b with sigmoid(b)^steps = kept (inputs that leave the pre-activation at b)."""
    f = kept ** (1 / steps)
    expected = math.log(f / (1 - f))
    return check_number(
        answer,
        exercise=f"forget-gate bias that keeps {kept:.0%} after {steps} steps",
        expected=expected,
        rel_tol=0.002,
        mistakes=[
            (
                f"{f:.5f} is the forget gate's value f = {kept}^(1/{steps}); the bias b is the pre-activation with "
                "sigmoid(b) = f, so b = log(f / (1 - f)).",
                f,
            ),
            (
                "the cell is multiplied by f at every step, so after n steps it keeps f^n; solve sigmoid(b)^n = 1/2 "
                "for f first, then invert the sigmoid.",
                math.log(2) / steps,
            ),
            ("+1 is the usual initialisation, and it keeps sigmoid(1)^100, about 2.5e-14 of the cell, not half.", 1.0),
        ],
    )


# --- counting parameters ------------------------------------------------------------------------------------


def check_gru_parameters(answer, input_size: int = 10, hidden_size: int = 20) -> Result:
    """The number of parameters of ``torch.nn.GRU(input_size, hidden_size)``."""
    D, H = input_size, hidden_size
    block = H * D + H * H
    return check_number(
        answer,
        exercise=f"parameters of nn.GRU({D}, {H})",
        expected=3 * (block + 2 * H),
        rel_tol=0.0,
        abs_tol=0.5,
        mistakes=[
            ("that is an LSTM's count: it has four blocks (i, f, g, o), a GRU three (r, z, n).", 4 * (block + 2 * H)),
            (
                "PyTorch's GRU has two bias vectors per block, b_ih and b_hh (they are not redundant for the "
                "candidate, whose hidden bias sits inside the reset gate).",
                3 * (block + H),
            ),
            ("the biases are missing: each of the three blocks has two bias vectors of size H.", 3 * block),
            ("that is a vanilla RNN's count; a GRU has three blocks, r, z and n.", block + 2 * H),
        ],
    )
