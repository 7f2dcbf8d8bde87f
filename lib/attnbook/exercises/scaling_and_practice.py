"""Checkers for the exercises of the chapter on scaling and practice: compute, exponents, sizes, loss scales,
the entropy of attention."""

from __future__ import annotations

import math

import numpy as np
import torch

from . import Mistake, Result, check_function, check_number

__all__ = [
    "check_training_flops",
    "check_fit_exponent",
    "check_compute_optimal",
    "check_loss_scale",
    "check_attention_entropy",
]


def _training_flops(n_layers, d_model, n_tokens):
    return 6 * 12 * n_layers * d_model**2 * n_tokens


def check_training_flops(fn) -> Result:
    """``fn(n_layers, d_model, n_tokens)`` must return C = 6 N D with N = 12 n_layers d_model^2."""
    cases = [(4, 128, 2_000_000), (2, 96, 1_000), (12, 768, 300_000_000_000), (1, 16, 65_536)]
    mistakes = [
        Mistake(
            "that is the forward pass alone, 2 N per token: the backward pass costs twice as much again, "
            "so training costs 6 N per token.",
            lambda L, d, n: 2 * 12 * L * d * d * n,
        ),
        Mistake(
            "the parameters are missing the 12: each layer has 4 d^2 weights in attention (W_q, W_k, W_v, "
            "W_o) and 8 d^2 in the feed-forward network (d x 4d and 4d x d), N = 12 n_layers d^2.",
            lambda L, d, n: 6 * L * d * d * n,
        ),
        Mistake(
            "only the feed-forward weights are counted (8 d^2 per layer); attention adds 4 d^2 (W_q, W_k, W_v, W_o).",
            lambda L, d, n: 6 * 8 * L * d * d * n,
        ),
        Mistake(
            "the number of tokens is missing: 6 N is the cost of one training token; multiply by D.",
            lambda L, d, n: 6 * 12 * L * d * d,
        ),
        Mistake(
            "a multiply-add counts as 2 FLOPs, so the forward pass is 2 N per token and training 6 N, not 3 N.",
            lambda L, d, n: 3 * 12 * L * d * d * n,
        ),
    ]
    return check_function(
        fn,
        exercise="The compute of a training run",
        reference=_training_flops,
        cases=cases,
        mistakes=mistakes,
        rtol=1e-9,
        atol=0.0,
    )


def _fit_exponent(n, loss, floor):
    slope = np.polyfit(np.log(np.asarray(n, dtype=float)), np.log(np.asarray(loss, dtype=float) - floor), 1)[0]
    return float(-slope)


def check_fit_exponent(fn) -> Result:
    """``fn(n, loss, floor)`` must return alpha of loss = floor + (n_c / n)^alpha: minus the slope of
    ln(loss - floor) against ln n."""
    rng = np.random.default_rng(5)
    cases = []
    for alpha, floor, n_c, noise in ((0.3, 1.5, 2e3, 0.0), (0.076, 0.0, 8.8e13, 0.0), (0.5, 0.8, 1e4, 0.003)):
        n = np.geomspace(1e3, 1e6, 7)
        loss = floor + (n_c / n) ** alpha
        loss = loss * (1 + noise * rng.standard_normal(n.size))
        cases.append((n.tolist(), loss.tolist(), floor))
    mistakes = [
        Mistake(
            "the sign: the slope of ln(loss - floor) against ln n is -alpha, and alpha is positive.",
            lambda n, loss, floor: -_fit_exponent(n, loss, floor),
        ),
        Mistake(
            "the floor is not subtracted: fit ln(loss - floor), not ln(loss); with a floor the plain "
            "log-log plot is not a straight line.",
            lambda n, loss, floor: _fit_exponent(n, loss, 0.0),
        ),
        Mistake(
            "the fit is on ln(loss - floor) against n itself; use ln n (a power law is a straight line in "
            "log-log axes).",
            lambda n, loss, floor: float(-np.polyfit(np.asarray(n), np.log(np.asarray(loss) - floor), 1)[0]),
        ),
        Mistake(
            "loss - floor is not taken in logarithms: fit ln(loss - floor) against ln n.",
            lambda n, loss, floor: float(-np.polyfit(np.log(np.asarray(n)), np.asarray(loss) - floor, 1)[0]),
        ),
    ]
    return check_function(
        fn,
        exercise="Fitting an exponent",
        reference=_fit_exponent,
        cases=cases,
        mistakes=mistakes,
        rtol=1e-6,
        atol=1e-9,
    )


def _compute_optimal(compute, tokens_per_param):
    n = math.sqrt(compute / (6 * tokens_per_param))
    return n, tokens_per_param * n


def check_compute_optimal(fn) -> Result:
    """``fn(compute, tokens_per_param)`` must return (N, D) with 6 N D = compute and D = tokens_per_param * N."""
    cases = [(5.76e23, 20.0), (1e18, 20.0), (3e14, 5.0)]
    mistakes = [
        Mistake(
            "N and D are swapped: return (parameters, tokens), and the model has fewer parameters than "
            "tokens (D = tokens_per_param * N).",
            lambda c, r: _compute_optimal(c, r)[::-1],
        ),
        Mistake(
            "the 6 is missing: the budget is C = 6 N D, so N = sqrt(C / (6 r)).",
            lambda c, r: (math.sqrt(c / r), r * math.sqrt(c / r)),
        ),
        Mistake(
            "C = 2 N D is the forward pass only; training costs C = 6 N D.",
            lambda c, r: (math.sqrt(c / (2 * r)), r * math.sqrt(c / (2 * r))),
        ),
        Mistake(
            "the square root is missing: from C = 6 N (r N) = 6 r N^2, N = sqrt(C / (6 r)).",
            lambda c, r: (c / (6 * r), c / 6),
        ),
    ]
    return check_function(
        fn,
        exercise="The compute-optimal size",
        reference=_compute_optimal,
        cases=cases,
        mistakes=mistakes,
        rtol=1e-6,
        atol=0.0,
    )


def check_loss_scale(answer) -> Result:
    """The smallest power of two that lifts a gradient of 3e-9 to fp16's smallest normal number, 2^-14."""
    expected = 2.0 ** math.ceil(math.log2(2.0**-14 / 3e-9))  # 2^15
    return check_number(
        answer,
        exercise="A loss scale",
        expected=expected,
        rel_tol=1e-9,
        mistakes=[
            (
                "that lifts the gradient above 2^-24, fp16's smallest subnormal number: it would no longer be zero, "
                "but it would keep only a bit or two of precision. Aim for the smallest normal number, 2^-14.",
                2.0 ** math.ceil(math.log2(2.0**-24 / 3e-9)),
            ),
            ("one power of two short: 3e-9 times that scale is still below 2^-14 = 6.1e-5.", expected / 2),
            (
                "the scale must be a power of two (multiplying by it is exact in floating point): round up to the "
                "next power of two, not the exact ratio.",
                2.0**-14 / 3e-9,
            ),
        ],
    )


def _entropy(weights):
    return -torch.special.xlogy(weights, weights).sum(-1).mean(dim=(0, 2))  # (H,)


def _causal_weights(b: int, h: int, t: int, seed: int, sharpness: float) -> torch.Tensor:
    """Attention weights (b, h, t, t) under a causal mask: zeros above the diagonal."""
    g = torch.Generator().manual_seed(seed)
    scores = sharpness * torch.randn(b, h, t, t, generator=g, dtype=torch.float64)
    allowed = torch.ones(t, t, dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)


def check_attention_entropy(fn) -> Result:
    """``fn(weights)``: weights (B, H, T, T), rows summing to 1 with zeros where masked; return the entropy
    -sum_j a_ij ln a_ij of each query's weights, averaged over the batch and the queries: shape (H,)."""
    one_hot = torch.zeros(1, 2, 4, 4, dtype=torch.float64)
    one_hot[..., 0] = 1.0  # every query on its first key: entropy 0
    uniform = torch.full((2, 1, 3, 5), 0.2, dtype=torch.float64)  # entropy ln 5
    cases = [(_causal_weights(2, 3, 6, 0, 1.0),), (_causal_weights(1, 4, 8, 1, 4.0),), (one_hot,), (uniform,)]
    mistakes = [
        Mistake(
            "a weight of 0 gives 0 * ln 0 = 0 * (-inf) = NaN in floating point, but it contributes 0 to the "
            "entropy (the limit of a ln a): use torch.special.xlogy(a, a), or torch.where(a > 0, a * a.log(), 0).",
            lambda w: -(w * w.log()).sum(-1).mean(dim=(0, 2)),
        ),
        Mistake(
            "the entropy in nats uses the natural logarithm (torch.log), not log2.",
            lambda w: _entropy(w) / math.log(2),
        ),
        Mistake(
            "the sign: ln a <= 0 for a weight a <= 1, so the entropy -sum_j a_j ln a_j is positive.",
            lambda w: -_entropy(w),
        ),
        Mistake(
            "the entropy of one query's weights is a sum over the keys (the last dimension), not a mean: "
            "sum over the keys, then average over the batch and the queries.",
            lambda w: -torch.special.xlogy(w, w).mean(-1).mean(dim=(0, 2)),
        ),
    ]
    return check_function(
        fn,
        exercise="The entropy of attention",
        reference=_entropy,
        cases=cases,
        mistakes=mistakes,
        rtol=1e-5,
        atol=1e-7,
        gradients=True,
    )
