"""Tests of the checkers of the chapter on LSTM and GRU: the right answer (and the library) passes, each
usual mistake gets its hint, a stub is "not attempted"."""

from __future__ import annotations

import math

import pytest
import torch
from attnbook import rnn
from attnbook.exercises import lstm_gru as ex
from exercise_helpers import assert_fails_with, stub
from torch import nn

# --- LSTM step ---------------------------------------------------------------------------------------


def right_lstm(x, h, c, W_x, W_h, b):
    i, f, g, o = (x @ W_x.T + h @ W_h.T + b).chunk(4, dim=-1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def torch_lstm(x, h, c, W_x, W_h, b):
    cell = nn.LSTMCell(x.shape[1], h.shape[1]).to(x.dtype)
    with torch.no_grad():
        cell.weight_ih.copy_(W_x), cell.weight_hh.copy_(W_h), cell.bias_ih.copy_(b), cell.bias_hh.zero_()
    return cell(x, (h, c))


def library_lstm(x, h, c, W_x, W_h, b):
    cell = rnn.LSTMCell(x.shape[1], h.shape[1]).to(x.dtype)
    with torch.no_grad():
        cell.W_x.copy_(W_x), cell.W_h.copy_(W_h), cell.b.copy_(b)
    return cell(x, (h, c))


def _lstm_variant(order="ifgo", act_c=torch.tanh, act_g=torch.tanh, use_i=True, old_c=False):
    def step(x, h, c, W_x, W_h, b):
        a = dict(zip(order, (x @ W_x.T + h @ W_h.T + b).chunk(4, dim=-1)))
        c_new = torch.sigmoid(a["f"]) * c + (torch.sigmoid(a["i"]) if use_i else 1.0) * act_g(a["g"])
        return torch.sigmoid(a["o"]) * act_c(c if old_c else c_new), c_new

    return step


@pytest.mark.parametrize("answer", [right_lstm, torch_lstm, library_lstm])
def test_lstm_right_answers_pass(answer):
    assert ex.check_lstm_step(answer)


def test_lstm_stub_is_not_attempted():
    assert "not attempted" in repr(ex.check_lstm_step(stub))


@pytest.mark.parametrize(
    "wrong, fragment",
    [
        (_lstm_variant(order="ifog"), "order i, f, o, g"),
        (_lstm_variant(act_c=lambda c: c), "goes through a tanh"),
        (_lstm_variant(old_c=True), "new cell state"),
        (_lstm_variant(use_i=False), "scaled by the input gate"),
        (_lstm_variant(act_g=torch.sigmoid), "candidate g uses tanh"),
    ],
)
def test_lstm_usual_mistakes_get_their_hint(wrong, fragment):
    assert_fails_with(ex.check_lstm_step, wrong, fragment)


# --- GRU step ------------------------------------------------------------------------------------------


def right_gru(x, h, W_x, W_h, b_x, b_h):
    xr, xz, xn = (x @ W_x.T + b_x).chunk(3, dim=-1)
    hr, hz, hn = (h @ W_h.T + b_h).chunk(3, dim=-1)
    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
    n = torch.tanh(xn + r * hn)
    return (1 - z) * n + z * h


def torch_gru(x, h, W_x, W_h, b_x, b_h):
    cell = nn.GRUCell(x.shape[1], h.shape[1]).to(x.dtype)
    with torch.no_grad():
        cell.weight_ih.copy_(W_x), cell.weight_hh.copy_(W_h), cell.bias_ih.copy_(b_x), cell.bias_hh.copy_(b_h)
    return cell(x, h)


def _gru_variant(swap_z=False, reset="after", bias_inside=True):
    def step(x, h, W_x, W_h, b_x, b_h):
        H = h.shape[1]
        xr, xz, xn = (x @ W_x.T + b_x).chunk(3, dim=-1)
        r = torch.sigmoid(xr + h @ W_h[:H].T + b_h[:H])
        z = torch.sigmoid(xz + h @ W_h[H : 2 * H].T + b_h[H : 2 * H])
        W_hn, b_hn = W_h[2 * H :], b_h[2 * H :]
        if reset == "before":
            n = torch.tanh(xn + (r * h) @ W_hn.T + b_hn)
        elif reset == "none":
            n = torch.tanh(xn + h @ W_hn.T + b_hn)
        else:
            n = torch.tanh(xn + (r * (h @ W_hn.T + b_hn) if bias_inside else r * (h @ W_hn.T) + b_hn))
        return z * n + (1 - z) * h if swap_z else (1 - z) * n + z * h

    return step


@pytest.mark.parametrize("answer", [right_gru, torch_gru])
def test_gru_right_answers_pass(answer):
    assert ex.check_gru_step(answer)


def test_gru_stub_is_not_attempted():
    assert "not attempted" in repr(ex.check_gru_step(stub))


@pytest.mark.parametrize(
    "wrong, fragment",
    [
        (_gru_variant(swap_z=True), "z and 1 - z are swapped"),
        (_gru_variant(reset="before"), "before the matrix product"),
        (_gru_variant(bias_inside=False), "b_hn, belongs inside"),
        (_gru_variant(reset="none"), "computed but not used"),
    ],
)
def test_gru_usual_mistakes_get_their_hint(wrong, fragment):
    assert_fails_with(ex.check_gru_step, wrong, fragment)


# --- forget bias ------------------------------------------------------------------------------------------


def test_forget_bias_right_answer_passes_and_keeps_half_in_a_real_lstm():
    f = 0.5 ** (1 / 100)
    b = math.log(f / (1 - f))
    assert ex.check_forget_bias(b)
    # measured: an LSTM cell with that forget bias, input gate shut, carries c for 100 steps
    cell = rnn.LSTMCell(1, 1, forget_bias=b).double()
    with torch.no_grad():
        cell.W_x.zero_()
        cell.W_h.zero_()
        cell.b[0] = -80.0  # i = 0: nothing is written
    state = (torch.zeros(1, 1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64))
    for _ in range(100):
        state = cell(torch.zeros(1, 1, dtype=torch.float64), state)
    assert abs(state[1].item() - 0.5) < 1e-6  # the bias was first stored in float32


def test_forget_bias_not_attempted():
    assert "not attempted" in repr(ex.check_forget_bias(...))


@pytest.mark.parametrize(
    "wrong, fragment",
    [
        (0.5 ** (1 / 100), "forget gate's value"),
        (math.log(2) / 100, "multiplied by f at every step"),
        (1.0, "usual initialisation"),
        (10.0, "too large"),
    ],
)
def test_forget_bias_mistakes(wrong, fragment):
    assert_fails_with(ex.check_forget_bias, wrong, fragment)


# --- parameter count ----------------------------------------------------------------------------------------


def test_gru_parameters_right_answer_is_pytorchs_count():
    count = sum(p.numel() for p in nn.GRU(10, 20).parameters())
    assert ex.check_gru_parameters(count)
    assert "not attempted" in repr(ex.check_gru_parameters(...))


@pytest.mark.parametrize(
    "module, fragment",
    [
        (nn.LSTM(10, 20), "LSTM's count"),
        (nn.RNN(10, 20), "vanilla RNN"),
        (nn.GRU(10, 20, bias=False), "biases are missing"),
    ],
)
def test_gru_parameters_mistakes(module, fragment):
    assert_fails_with(ex.check_gru_parameters, sum(p.numel() for p in module.parameters()), fragment)


def test_gru_parameters_one_bias_mistake():
    assert_fails_with(ex.check_gru_parameters, 3 * (20 * 10 + 20 * 20 + 20), "two bias vectors")
