"""Tests of the checkers of the chapter on vanishing and exploding gradients: the right answer passes,
each usual mistake gets its hint, a stub is "not attempted"."""

from __future__ import annotations

import math

import pytest
import torch
from attnbook import bptt, rnn
from attnbook.exercises import vanishing_gradients as ex
from exercise_helpers import assert_fails_with, stub

# --- how far back an input reaches ----------------------------------------------------------------------


def right_input_gradient(W_xh, W_hh, T):
    return torch.linalg.matrix_power(W_hh, T - 1) @ W_xh


def autograd_input_gradient(W_xh, W_hh, T):
    """The answer measured: differentiate h_T of a linear RNN (the library's cell) with respect to x_1."""
    H, D = W_xh.shape
    cell = rnn.RNNCell(D, H, nonlinearity="linear").to(W_xh.dtype)
    with torch.no_grad():
        cell.W_xh.copy_(W_xh), cell.W_hh.copy_(W_hh), cell.b_h.zero_()

    def h_T(x_1):
        x = torch.cat([x_1[None, None], torch.zeros(1, T - 1, D, dtype=W_xh.dtype)], dim=1)  # (1, T, D)
        return rnn.Recurrent(cell)(x)[1][0]

    return torch.autograd.functional.jacobian(h_T, torch.zeros(D, dtype=W_xh.dtype))


def test_input_gradient_right_answers_pass():
    assert ex.check_input_gradient(right_input_gradient)
    assert ex.check_input_gradient(autograd_input_gradient)


def test_input_gradient_stub_is_not_attempted():
    result = ex.check_input_gradient(stub)
    assert not result and "not attempted" in repr(result)


@pytest.mark.parametrize(
    "wrong, fragment",
    [
        (lambda W_xh, W_hh, T: torch.linalg.matrix_power(W_hh, T) @ W_xh, "one factor of W_hh too many"),
        (lambda W_xh, W_hh, T: torch.linalg.matrix_power(W_hh, max(T - 2, 0)) @ W_xh, "one factor of W_hh too few"),
        (lambda W_xh, W_hh, T: torch.linalg.matrix_power(W_hh, T - 1), "W_xh is missing"),
        (lambda W_xh, W_hh, T: W_xh @ torch.linalg.matrix_power(W_hh, T - 1), "wrong order"),
        (lambda W_xh, W_hh, T: (W_hh ** (T - 1)) @ W_xh, "matrix power"),
        (lambda W_xh, W_hh, T: torch.linalg.matrix_power(W_hh.T, T - 1) @ W_xh, "transpose of W_hh"),
    ],
)
def test_input_gradient_usual_mistakes_get_their_hint(wrong, fragment):
    assert_fails_with(ex.check_input_gradient, wrong, fragment)


# --- the Jacobian of one step ---------------------------------------------------------------------------


def right_jacobian(h_prev, x, W_xh, W_hh, b):
    h = torch.tanh(W_xh @ x + W_hh @ h_prev + b)
    return torch.diag(1 - h**2) @ W_hh


def autograd_jacobian(h_prev, x, W_xh, W_hh, b):
    return torch.autograd.functional.jacobian(lambda h: torch.tanh(W_xh @ x + W_hh @ h + b), h_prev)


def _h(h_prev, x, W_xh, W_hh, b):
    return torch.tanh(W_xh @ x + W_hh @ h_prev + b)


def test_step_jacobian_right_answers_pass():
    assert ex.check_step_jacobian(right_jacobian)
    assert ex.check_step_jacobian(autograd_jacobian)


def test_step_jacobian_stub_is_not_attempted():
    assert "not attempted" in repr(ex.check_step_jacobian(stub))


@pytest.mark.parametrize(
    "wrong, fragment",
    [
        (lambda h_prev, x, W_xh, W_hh, b: W_hh, "linear RNN"),
        (lambda h_prev, x, W_xh, W_hh, b: torch.diag(1 - h_prev**2) @ W_hh, "previous state"),
        (lambda h_prev, x, W_xh, W_hh, b: W_hh @ torch.diag(1 - _h(h_prev, x, W_xh, W_hh, b) ** 2), "wrong side"),
        (lambda h_prev, x, W_xh, W_hh, b: right_jacobian(h_prev, x, W_xh, W_hh, b).T, "transpose"),
        (lambda h_prev, x, W_xh, W_hh, b: torch.diag(1 - _h(h_prev, x, W_xh, W_hh, b)) @ W_hh, "not 1 - tanh(a)"),
        (lambda h_prev, x, W_xh, W_hh, b: torch.diag(1 - (W_xh @ x + W_hh @ h_prev + b) ** 2) @ W_hh, "pre-activation"),
    ],
)
def test_step_jacobian_usual_mistakes_get_their_hint(wrong, fragment):
    assert_fails_with(ex.check_step_jacobian, wrong, fragment)


# --- a predicted gradient norm ---------------------------------------------------------------------------


def test_gradient_norm_right_answer_passes_and_matches_a_measurement():
    assert ex.check_gradient_norm(0.9**50)
    # the exercise's claim, measured: W_hh = 0.9 Q with Q orthogonal, a linear RNN, 50 steps back
    Q, _ = torch.linalg.qr(torch.randn(8, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    cell = rnn.RNNCell(1, 8, nonlinearity="linear").double()
    with torch.no_grad():
        cell.W_hh.copy_(0.9 * Q)
    measured = bptt.gradient_norms(cell, torch.zeros(50, 1, dtype=torch.float64))[50].item()
    assert ex.check_gradient_norm(measured)


def test_gradient_norm_not_attempted():
    assert "not attempted" in repr(ex.check_gradient_norm(...))


@pytest.mark.parametrize(
    "wrong, fragment",
    [
        (0.9**49, "rho^49"),
        (0.9**51, "rho^51"),
        (45.0, "multiply"),
        (50 * math.log(0.9), "logarithm"),
        (0.5, "too large"),
        (1e-6, "too small"),
    ],
)
def test_gradient_norm_mistakes(wrong, fragment):
    assert_fails_with(ex.check_gradient_norm, wrong, fragment)


# --- clipping --------------------------------------------------------------------------------------------


def right_clip(grads, max_norm):
    total = torch.sqrt(sum((g**2).sum() for g in grads))
    return [g * min(1.0, max_norm / total.item()) for g in grads]


def torch_clip(grads, max_norm):
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    return [p.grad for p in params]


def test_clip_right_answers_pass():
    assert ex.check_clip_grad_norm(right_clip)
    assert ex.check_clip_grad_norm(torch_clip)


def test_clip_stub_is_not_attempted():
    assert "not attempted" in repr(ex.check_clip_grad_norm(stub))


@pytest.mark.parametrize(
    "wrong, fragment",
    [
        (lambda grads, c: [g * min(1.0, c / g.norm().item()) for g in grads], "each tensor is clipped on its own"),
        (lambda grads, c: [g.clamp(-c, c) for g in grads], "clamped one by one"),
        (lambda grads, c: [g * c / torch.sqrt(sum((t**2).sum() for t in grads)) for g in grads], "left unchanged"),
        (lambda grads, c: [g * min(1.0, c / sum(t.norm().item() for t in grads)) for g in grads], "not the sum"),
    ],
)
def test_clip_usual_mistakes_get_their_hint(wrong, fragment):
    assert_fails_with(ex.check_clip_grad_norm, wrong, fragment)
