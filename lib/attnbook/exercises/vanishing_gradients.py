"""Checkers for the exercises of the chapter on vanishing and exploding gradients."""

from __future__ import annotations

import math

import torch

from . import Mistake, Result, check_function, check_number

__all__ = ["check_input_gradient", "check_step_jacobian", "check_gradient_norm", "check_clip_grad_norm"]

DT = torch.float64


def _randn(g: torch.Generator, *shape, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=DT) * scale


# --- how far back an input reaches ----------------------------------------------------------------------


def _input_gradient(W_xh, W_hh, T):
    return torch.linalg.matrix_power(W_hh, T - 1) @ W_xh  # (H, D)


def _input_gradient_cases():
    g = torch.Generator().manual_seed(11)
    cases = []
    for D, H, T in [(4, 4, 6), (3, 5, 1), (2, 6, 12)]:  # D = H first, so that a product in the wrong order still runs
        cases.append((_randn(g, H, D), _randn(g, H, H, scale=1 / H**0.5), T))
    return cases


def check_input_gradient(fn) -> Result:
    """``fn(W_xh, W_hh, T)`` must return d h_T / d x_1 = W_hh^(T-1) W_xh for a linear RNN (an (H, D) matrix)."""
    mistakes = [
        Mistake(
            "one factor of W_hh too many: x_1 enters h_1 through W_xh, and h_1 reaches h_T through T - 1 "
            "steps, so the answer is W_hh^(T-1) W_xh.",
            lambda W_xh, W_hh, T: torch.linalg.matrix_power(W_hh, T) @ W_xh,
        ),
        Mistake(
            "one factor of W_hh too few: from h_1 to h_T there are T - 1 steps, each multiplying by W_hh.",
            lambda W_xh, W_hh, T: torch.linalg.matrix_power(W_hh, max(T - 2, 0)) @ W_xh,
        ),
        Mistake(
            "W_xh is missing: that is d h_T / d h_1; the input x_1 first goes through W_xh.",
            lambda W_xh, W_hh, T: torch.linalg.matrix_power(W_hh, T - 1),
        ),
        Mistake(
            "the product is in the wrong order: the chain rule puts the step nearest to h_T on the left, "
            "W_hh^(T-1) @ W_xh.",
            lambda W_xh, W_hh, T: W_xh @ torch.linalg.matrix_power(W_hh, T - 1),
        ),
        Mistake(
            "W_hh ** (T - 1) raises each entry to a power; use the matrix power, "
            "torch.linalg.matrix_power(W_hh, T - 1).",
            lambda W_xh, W_hh, T: (W_hh ** (T - 1)) @ W_xh,
        ),
        Mistake(
            "that uses the transpose of W_hh: the Jacobian of h_t = W_hh h_{t-1} + ... is W_hh itself.",
            lambda W_xh, W_hh, T: torch.linalg.matrix_power(W_hh.T, T - 1) @ W_xh,
        ),
        Mistake(
            "W_hh^(T-1) * W_xh multiplies entry by entry; the chain rule multiplies matrices: use @.",
            lambda W_xh, W_hh, T: torch.linalg.matrix_power(W_hh, T - 1) * W_xh,
        ),
        Mistake(
            "W_xh and W_hh are swapped: W_hh (H x H) is raised to the power, W_xh (H x D) maps the input in.",
            lambda W_xh, W_hh, T: torch.linalg.matrix_power(W_xh, T - 1) @ W_hh,
        ),
    ]

    def power(got, expected, W_xh, W_hh, T):  # W_hh^k W_xh with another k
        for k in range(3 * T + 3):
            if k != T - 1 and torch.allclose(got, torch.linalg.matrix_power(W_hh, k) @ W_xh, rtol=1e-4, atol=1e-5):
                return (
                    f"your result is W_hh^{k} W_xh for T = {T}: the power must be T - 1 = {T - 1}, one factor of "
                    "W_hh for each step from h_1 to h_T."
                )
        return None

    return check_function(
        fn,
        exercise="how far back an input reaches",
        reference=_input_gradient,
        cases=_input_gradient_cases(),
        mistakes=mistakes,
        explain=[power],
    )


# --- the Jacobian of one step -------------------------------------------------------------------------


def _next_h(h_prev, x, W_xh, W_hh, b):
    return torch.tanh(W_xh @ x + W_hh @ h_prev + b)  # (H,)


def _step_jacobian(h_prev, x, W_xh, W_hh, b):
    h = _next_h(h_prev, x, W_xh, W_hh, b)
    return torch.diag(1 - h**2) @ W_hh  # (H, H)


def _jacobian_cases():
    g = torch.Generator().manual_seed(12)
    cases = []
    for D, H, scale in [(3, 4, 0.8), (2, 6, 1.5), (5, 5, 1.0)]:
        cases.append(
            (
                _randn(g, H, scale=0.5),
                _randn(g, D),
                _randn(g, H, D),
                _randn(g, H, H, scale=scale / H**0.5),
                _randn(g, H, scale=0.3),
            )
        )
    return cases


def check_step_jacobian(fn) -> Result:
    """``fn(h_prev, x, W_xh, W_hh, b)`` must return d h_t / d h_{t-1} = diag(1 - h_t^2) W_hh (an (H, H) matrix)."""

    def pre(h_prev, x, W_xh, W_hh, b):
        return W_xh @ x + W_hh @ h_prev + b

    mistakes = [
        Mistake(
            "this is W_hh alone, the Jacobian of a linear RNN; the tanh adds the factor diag(1 - h_t^2) on the left.",
            lambda h_prev, x, W_xh, W_hh, b: W_hh.clone(),
        ),
        Mistake(
            "the derivative of tanh is taken at the previous state; use the new state h_t = tanh(a_t), "
            "since tanh'(a_t) = 1 - h_t^2.",
            lambda h_prev, x, W_xh, W_hh, b: torch.diag(1 - h_prev**2) @ W_hh,
        ),
        Mistake(
            "the diagonal factor is on the wrong side: row i of the Jacobian is scaled by tanh'(a_i), "
            "so it is diag(1 - h_t^2) @ W_hh, not W_hh @ diag(1 - h_t^2).",
            lambda h_prev, x, W_xh, W_hh, b: W_hh @ torch.diag(1 - _next_h(h_prev, x, W_xh, W_hh, b) ** 2),
        ),
        Mistake(
            "this is the transpose: entry (i, j) is d h_t[i] / d h_{t-1}[j], so the result is "
            "diag(1 - h_t^2) @ W_hh, not its transpose.",
            lambda h_prev, x, W_xh, W_hh, b: _step_jacobian(h_prev, x, W_xh, W_hh, b).T,
        ),
        Mistake(
            "tanh'(a) is 1 - tanh(a)^2, not 1 - tanh(a).",
            lambda h_prev, x, W_xh, W_hh, b: torch.diag(1 - _next_h(h_prev, x, W_xh, W_hh, b)) @ W_hh,
        ),
        Mistake(
            "tanh'(a) is 1 - tanh(a)^2: square the new state h_t, not the pre-activation a_t.",
            lambda h_prev, x, W_xh, W_hh, b: torch.diag(1 - pre(h_prev, x, W_xh, W_hh, b) ** 2) @ W_hh,
        ),
        Mistake(
            "diag(1 - h_t^2) * W_hh multiplies entry by entry and keeps only W_hh's diagonal; the chain rule "
            "multiplies matrices: diag(1 - h_t^2) @ W_hh.",
            lambda h_prev, x, W_xh, W_hh, b: torch.diag(1 - _next_h(h_prev, x, W_xh, W_hh, b) ** 2) * W_hh,
        ),
        Mistake(
            "W_hh is missing: diag(1 - h_t^2) is the derivative of the tanh; the pre-activation's derivative "
            "with respect to h_{t-1} multiplies it, diag(1 - h_t^2) @ W_hh.",
            lambda h_prev, x, W_xh, W_hh, b: torch.diag(1 - _next_h(h_prev, x, W_xh, W_hh, b) ** 2),
        ),
    ]

    def diagonal(got, expected, h_prev, x, W_xh, W_hh, b):  # diag(s) @ W_hh with another s
        s = got / W_hh  # (H, H): every row constant if got = diag(s) W_hh
        if W_hh.abs().min() > 1e-3 and torch.allclose(s, s[:, :1].expand_as(s), rtol=1e-4, atol=1e-6):
            return (
                "your result has the right form, diag(s) @ W_hh, but its diagonal s is not tanh'(a_t) = 1 - h_t^2: "
                "check h_t = tanh(W_xh x + W_hh h_prev + b), with all three terms and tanh (not sigmoid), and "
                "the derivative 1 - h_t^2."
            )
        return None

    return check_function(
        fn,
        exercise="the Jacobian of one RNN step",
        reference=_step_jacobian,
        cases=_jacobian_cases(),
        mistakes=mistakes,
        explain=[diagonal],
    )


# --- predict a gradient norm ----------------------------------------------------------------------------


def check_gradient_norm(answer, rho: float = 0.9, steps: int = 50) -> Result:
    """|| d h_T / d h_{T-steps} || for a linear RNN whose W_hh is rho times an orthogonal matrix."""
    return check_number(
        answer,
        exercise=f"gradient norm after {steps} steps at rho = {rho}",
        expected=rho**steps,
        significant=2,
        mistakes=[
            (
                f"that is rho^{steps - 1}: going back {steps} steps multiplies by W_hh {steps} times.",
                rho ** (steps - 1),
            ),
            (
                f"that is rho^{steps + 1}: going back {steps} steps multiplies by W_hh {steps} times, not {steps + 1}.",
                rho ** (steps + 1),
            ),
            ("the factors multiply, they do not add: the norm is rho^n, not n * rho.", rho * steps),
            (
                "that is the logarithm of the norm (n log rho); the question asks for the norm itself.",
                steps * math.log(rho),
            ),
            (f"{rho} is the norm after one step; after {steps} steps the factors multiply: rho^{steps}.", rho),
        ],
    )


# --- gradient clipping ------------------------------------------------------------------------------------


def _clip_reference(grads, max_norm):
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = min(1.0, max_norm / (total.item() + 1e-6))
    return [g * scale for g in grads]


def _clip_cases():
    g = torch.Generator().manual_seed(13)
    return [
        ([_randn(g, 3, 4, scale=5.0), _randn(g, 4, scale=5.0)], 1.0),  # large: must be scaled down
        ([_randn(g, 2, 2, scale=0.01), _randn(g, 5, scale=0.01)], 1.0),  # small: must be left alone
        ([_randn(g, 6, scale=10.0), _randn(g, 2, 3, scale=0.1), _randn(g, 1, scale=1.0)], 2.5),  # uneven sizes
        ([torch.zeros(3, 4, dtype=DT), torch.zeros(5, dtype=DT)], 1.0),  # a zero gradient: left as it is
    ]


def check_clip_grad_norm(fn) -> Result:
    """``fn(grads, max_norm)`` must return the gradients scaled together so that their global norm is <= max_norm."""

    def per_tensor(grads, max_norm):
        return [t * min(1.0, max_norm / (torch.linalg.vector_norm(t).item() + 1e-6)) for t in grads]

    def always(grads, max_norm):
        total = math.sqrt(sum(float((t**2).sum()) for t in grads))
        return [t * max_norm / total for t in grads]

    def summed_norms(grads, max_norm):
        total = sum(float(torch.linalg.vector_norm(t)) for t in grads)
        return [t * min(1.0, max_norm / total) for t in grads]

    mistakes = [
        Mistake(
            "each tensor is clipped on its own; clip by the global norm, sqrt of the sum of the squares of "
            "all entries of all gradients, and scale every tensor by the same factor.",
            per_tensor,
        ),
        Mistake(
            "entries are clamped one by one (value clipping), which changes the gradient's direction; "
            "scale the whole gradient instead.",
            lambda grads, max_norm: [t.clamp(-max_norm, max_norm) for t in grads],
        ),
        Mistake(
            "gradients whose norm is already below max_norm must be left unchanged: the factor is "
            "min(1, max_norm / norm).",
            always,
        ),
        Mistake(
            "the global norm is the square root of the sum of squares over every entry, not the sum of the "
            "tensors' norms.",
            summed_norms,
        ),
    ]
    return check_function(
        fn,
        exercise="gradient clipping by global norm",
        reference=_clip_reference,
        cases=_clip_cases(),
        mistakes=mistakes,
        atol=1e-6,
        rtol=1e-5,
    )
