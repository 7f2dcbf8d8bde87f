"""Checkers of the chapter on the transformer block: right answers pass, usual mistakes get their hint."""

import math

import pytest
import torch
from attnbook.exercises import ExerciseFailed
from attnbook.exercises import transformer_block as ex
from exercise_helpers import stub


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta


def test_layer_norm_checker():
    assert ex.check_layer_norm(layer_norm)
    assert not ex.check_layer_norm(stub)
    centred = lambda x: x - x.mean(-1, keepdim=True)  # noqa: E731
    wrong = {
        "D - 1": lambda x, g, b, e: g * centred(x) / torch.sqrt(x.var(-1, keepdim=True) + e) + b,
        "inside the square root": lambda x, g, b, e: g * centred(x) / (x.std(-1, unbiased=False, keepdim=True) + e) + b,
        "wrong dimension": lambda x, g, b, e: g * (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + e) + b,
        "gamma and beta are not applied": lambda x, g, b, e: (
            centred(x) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + e)
        ),
        "RMSNorm": lambda x, g, b, e: g * x / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + e) + b,
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_layer_norm(fn)


def test_post_norm_block_checker():
    def right(x, attn, ffn, norm_1, norm_2):
        z = norm_1(x + attn(x))
        return norm_2(z + ffn(z))

    assert ex.check_post_norm_block(right)
    assert not ex.check_post_norm_block(stub)
    wrong = {
        "pre-norm block": lambda x, a, f, n1, n2: (lambda z: z + f(n2(z)))(x + a(n1(x))),
        "feed-forward sub-layer has no residual": lambda x, a, f, n1, n2: n2(f(n1(x + a(x)))),
        "a common one-line formula": lambda x, a, f, n1, n2: f(n1(x + a(x))),
        "attention sub-layer has no residual": lambda x, a, f, n1, n2: (lambda z: n2(z + f(z)))(n1(a(x))),
        "norms are swapped": lambda x, a, f, n1, n2: (lambda z: n1(z + f(z)))(n2(x + a(x))),
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_post_norm_block(fn)


def test_lrate_checker():
    assert ex.check_lrate(lambda n, d, w: d**-0.5 * min(n**-0.5, n * w**-1.5))
    assert ex.check_lrate(lambda n, d, w: min(1 / math.sqrt(n), n / math.sqrt(w**3)) / math.sqrt(d))
    assert not ex.check_lrate(stub)

    # the formula on tensors, in float32 (a relative error of about 1e-7): right, at the precision of its dtype
    def in_float32(n, d, w):
        return d**-0.5 * torch.minimum(torch.tensor(float(n)) ** -0.5, n * torch.tensor(float(w)) ** -1.5)

    result = ex.check_lrate(in_float32)
    assert result.passed, result.message
    wrong = {
        "-1.5, not -0.5": lambda n, d, w: d**-0.5 * min(n**-0.5, n * w**-0.5),
        "not the maximum": lambda n, d, w: d**-0.5 * max(n**-0.5, n * w**-1.5),
        "not sqrt": lambda n, d, w: d**0.5 * min(n**-0.5, n * w**-1.5),
        "is missing": lambda n, d, w: min(n**-0.5, n * w**-1.5),
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_lrate(fn)


def test_gpt_parameters_checker():
    right = lambda V, T, L, D: L * (12 * D * D + 13 * D) + 2 * D + V * D + T * D  # noqa: E731
    assert ex.check_gpt_parameters(right)
    assert not ex.check_gpt_parameters(stub)
    wrong = {
        "12 L D\\^2 weight-matrix term": lambda V, T, L, D: 12 * L * D * D,
        "tied weights": lambda V, T, L, D: right(V, T, L, D) + V * D,
        "position table": lambda V, T, L, D: right(V, T, L, D) - T * D,
        "biases and LayerNorms are missing": lambda V, T, L, D: 12 * L * D * D + V * D + T * D,
        "not 8 D\\^2": lambda V, T, L, D: right(V, T, L, D) - 4 * L * D * D,
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_gpt_parameters(fn)


def test_forward_flops_checker():
    assert ex.check_forward_flops(350e9)
    assert not ex.check_forward_flops(...)
    for hint, value in {"cost of training": 1.05e12, "multiply and an add": 175e9, "per token": 7.2e14}.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_forward_flops(value)
