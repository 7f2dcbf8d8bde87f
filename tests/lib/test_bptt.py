"""attnbook.bptt: the step Jacobians equal autograd and the theory (tanh RNN: diag(tanh') W_hh; linear RNN:
rho^k; LSTM: the cell-to-cell block is diag(f)), and bad input gets clear errors."""

from __future__ import annotations

import math

import pytest
import torch
from attnbook import bptt, rnn

DT = torch.float64


def _g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=_g(seed), dtype=DT)


# --- step Jacobians and their products -------------------------------------------------------------


@pytest.mark.parametrize("cls", [rnn.RNNCell, rnn.LSTMCell, rnn.GRUCell])
def test_state_jacobians_equal_autograd(cls):
    torch.manual_seed(2)
    cell = cls(3, 4).double()
    x = _randn(6, 3)
    J = bptt.state_jacobians(cell, x)  # (6, S, S)
    S = cell.state_size
    assert J.shape == (6, S, S)
    s = torch.zeros(S, dtype=DT)
    for t in range(6):

        def step(s_prev, t=t):
            return bptt.flatten_state(cell(x[t][None], bptt.unflatten_state(cell, s_prev[None])))[0]

        torch.testing.assert_close(J[t], torch.autograd.functional.jacobian(step, s))
        s = step(s).detach()


def test_jacobian_chain_equals_autograd_through_many_steps():
    torch.manual_seed(3)
    cell = rnn.LSTMCell(2, 3).double()
    x = _randn(8, 2)
    chain = bptt.jacobian_chain(bptt.state_jacobians(cell, x))  # (9, 6, 6)
    torch.testing.assert_close(chain[0], torch.eye(6, dtype=DT))
    # d s_8 / d s_3 by differentiating five steps at once
    s3 = bptt.flatten_state(rnn.Recurrent(cell)(x[None, :3])[1])[0].detach()

    def last_five(s):
        state = bptt.unflatten_state(cell, s[None])
        for t in range(3, 8):
            state = cell(x[t][None], state)
        return bptt.flatten_state(state)[0]

    torch.testing.assert_close(chain[5], torch.autograd.functional.jacobian(last_five, s3))


def test_tanh_rnn_jacobian_is_diag_tanh_prime_times_W_hh():
    cell = rnn.RNNCell(2, 5).double()
    x = _randn(4, 2)
    J = bptt.state_jacobians(cell, x)
    h, _ = rnn.Recurrent(cell)(x[None])  # (1, 4, 5)
    for t in range(4):
        torch.testing.assert_close(J[t], torch.diag(1 - h[0, t] ** 2) @ cell.W_hh)


@pytest.mark.parametrize("rho", [0.7, 1.0, 1.2])
def test_linear_rnn_gradient_norm_slope_is_log_spectral_radius(rho):
    torch.manual_seed(4)
    cell = rnn.RNNCell(1, 16, nonlinearity="linear").double()
    with torch.no_grad():
        W = torch.randn(16, 16, generator=_g(4), dtype=DT)
        cell.W_hh.copy_(W * rho / torch.linalg.eigvals(W).abs().max())
    norms = bptt.gradient_norms(cell, _randn(80, 1))  # (81,)
    for k in (0, 1, 7):
        torch.testing.assert_close(norms[k], torch.linalg.matrix_norm(torch.linalg.matrix_power(cell.W_hh, k), ord=2))
    lags = torch.arange(20, 81, dtype=DT)
    slope = torch.linalg.lstsq(torch.stack([lags, torch.ones_like(lags)], 1), norms[20:].log()[:, None]).solution[0]
    assert abs(slope.item() - math.log(rho)) < 0.01


def test_lstm_cell_to_cell_block_is_the_forget_gate():
    torch.manual_seed(5)
    cell = rnn.LSTMCell(2, 4, forget_bias=1.0).double()
    x = _randn(6, 2)
    J = bptt.state_jacobians(cell, x)  # (6, 8, 8)
    state = None
    for t in range(6):
        state, gates = cell(x[t][None], state, return_gates=True)
        torch.testing.assert_close(J[t, 4:, 4:], torch.diag(gates["f"][0]))  # d c_t / d c_{t-1}
        c = state[1][0]
        dh_dc = gates["o"][0] * (1 - torch.tanh(c) ** 2) * gates["f"][0]  # d h_t / d c_{t-1}, also diagonal
        torch.testing.assert_close(J[t, :4, 4:], torch.diag(dh_dc))
    # with a forget gate pinned at 1 and no input gate, the cell is carried unchanged: norm 1 at every lag
    with torch.no_grad():
        cell.b[4:8] = 60.0
        cell.b[0:4] = -60.0
    assert torch.allclose(bptt.gradient_norms(cell, x, part="c"), torch.ones(7, dtype=DT))


def test_gradient_norms_parts():
    cell = rnn.LSTMCell(2, 3).double()
    x = _randn(5, 2)
    assert bptt.gradient_norms(cell, x).shape == (6,)
    assert bptt.gradient_norms(cell, x, part="h").shape == (6,)
    with pytest.raises(ValueError, match="part must be"):
        bptt.gradient_norms(cell, x, part="gates")
    with pytest.raises(ValueError, match="part='c' needs an LSTMCell"):
        bptt.gradient_norms(rnn.GRUCell(2, 3).double(), x, part="c")


def test_bad_input_is_named():
    cell = rnn.LSTMCell(2, 3)
    with pytest.raises(ValueError, match=r"x must have shape \(T, 2\) with T >= 1, got \(0, 2\)"):
        bptt.state_jacobians(cell, torch.zeros(0, 2))
    with pytest.raises(ValueError, match=r"state must be one sequence's state.*S = 6, got \(2, 6\)"):
        bptt.state_jacobians(cell, torch.zeros(5, 2), (torch.zeros(2, 3), torch.zeros(2, 3)))
    with pytest.raises(TypeError, match="x has dtype torch.float64 but the cell's parameters are torch.float32"):
        bptt.state_jacobians(cell, torch.zeros(5, 2, dtype=DT))
    with pytest.raises(TypeError, match="cell must be an attnbook.rnn RNNCell, LSTMCell or GRUCell"):
        bptt.unflatten_state(torch.nn.LSTMCell(2, 3), torch.zeros(1, 6))
    with pytest.raises(ValueError, match=r"jacobians must have shape \(T, S, S\)"):
        bptt.jacobian_chain(torch.zeros(3, 4, 5))


def test_norms_on_the_test_device():
    from attnbook import train

    device = train.pick_device()
    for cls in (rnn.RNNCell, rnn.LSTMCell, rnn.GRUCell):
        cell = cls(2, 3).to(device)
        assert torch.isfinite(bptt.gradient_norms(cell, torch.randn(5, 2, device=device))).all()
