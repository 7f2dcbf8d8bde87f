"""The checkers of the scaling-and-practice exercises: right answers pass, usual mistakes get their hint,
stubs are 'not attempted'.
"""

import math

import numpy as np
import pytest
import torch
from attnbook import measure
from attnbook.exercises import ExerciseFailed
from attnbook.exercises import scaling_and_practice as ex
from exercise_helpers import assert_fails_with, stub


def test_training_flops():
    assert ex.check_training_flops(lambda L, d, n: 6 * (12 * L * d * d) * n).passed
    assert ex.check_training_flops(lambda L, d, n: 72.0 * L * d**2 * n).passed  # a float is fine
    assert not ex.check_training_flops(stub).passed
    wrong = {
        "forward pass alone": lambda L, d, n: 2 * 12 * L * d * d * n,
        "missing the 12": lambda L, d, n: 6 * L * d * d * n,
        "only the feed-forward weights": lambda L, d, n: 48 * L * d * d * n,
        "forward pass alone, 2 N": lambda L, d, n: 24 * L * d * d * n,  # also 6 x the attention weights alone
        "the number of tokens is missing": lambda L, d, n: 72 * L * d * d,
        "not 3 N": lambda L, d, n: 36 * L * d * d * n,
    }
    for fragment, answer in wrong.items():
        assert_fails_with(ex.check_training_flops, answer, fragment)
    assert_fails_with(ex.check_training_flops, lambda L, d, n: 6 * 12 * L * d * n, "on test case 1")


def _alpha(n, loss, floor):
    return -np.polyfit(np.log(n), np.log(np.asarray(loss) - floor), 1)[0]


def test_fit_exponent():
    assert ex.check_fit_exponent(_alpha).passed
    # the slope from the two end points is right on the exact cases only: the noisy case tells them apart
    assert_fails_with(
        ex.check_fit_exponent,
        lambda n, loss, f: -math.log((loss[-1] - f) / (loss[0] - f)) / math.log(n[-1] / n[0]),
        "on test case 3",
    )
    assert not ex.check_fit_exponent(stub).passed
    wrong = {
        "the sign": lambda n, loss, f: -_alpha(n, loss, f),
        "the floor is not subtracted": lambda n, loss, f: _alpha(n, loss, 0.0),
        "use ln n": lambda n, loss, f: -np.polyfit(n, np.log(np.asarray(loss) - f), 1)[0],
        "not taken in logarithms": lambda n, loss, f: -np.polyfit(np.log(n), np.asarray(loss) - f, 1)[0],
    }
    for fragment, answer in wrong.items():
        assert_fails_with(ex.check_fit_exponent, answer, fragment)


def test_compute_optimal():
    right = lambda c, r: (math.sqrt(c / (6 * r)), r * math.sqrt(c / (6 * r)))  # noqa: E731
    assert ex.check_compute_optimal(right).passed
    # Chinchilla's budget gives about 70 billion parameters and 1.4 trillion tokens
    n, d = right(5.76e23, 20.0)
    assert 6.5e10 < n < 7.5e10 and 1.3e12 < d < 1.5e12
    assert not ex.check_compute_optimal(stub).passed
    wrong = {
        "swapped": lambda c, r: right(c, r)[::-1],
        "the 6 is missing": lambda c, r: (math.sqrt(c / r), r * math.sqrt(c / r)),
        "forward pass only": lambda c, r: (math.sqrt(c / (2 * r)), r * math.sqrt(c / (2 * r))),
        "square root is missing": lambda c, r: (c / (6 * r), c / 6),
    }
    for fragment, answer in wrong.items():
        assert_fails_with(ex.check_compute_optimal, answer, fragment)
    assert_fails_with(ex.check_compute_optimal, lambda c, r: math.sqrt(c / (6 * r)), "it should return 2 results")


def test_loss_scale():
    assert ex.check_loss_scale(2**15).passed and ex.check_loss_scale(32768.0).passed
    assert 3e-9 * 2**15 >= 2**-14 > 3e-9 * 2**14
    assert not ex.check_loss_scale(...).passed
    assert_fails_with(ex.check_loss_scale, 2**5, "smallest subnormal")
    assert_fails_with(ex.check_loss_scale, 2**14, "one power of two short")
    assert_fails_with(ex.check_loss_scale, 2**-14 / 3e-9, "power of two")
    assert_fails_with(ex.check_loss_scale, 2**20, "32 times the expected")
    with pytest.raises(ExerciseFailed, match="expected a number"):
        ex.check_loss_scale("32768")


def test_attention_entropy():
    def right(w):
        return -torch.special.xlogy(w, w).sum(-1).mean(dim=(0, 2))

    def with_where(w):  # another right way to take 0 ln 0 = 0
        return -torch.where(w > 0, w * w.log(), torch.zeros_like(w)).sum(-1).mean(dim=(0, 2))

    assert ex.check_attention_entropy(right).passed and ex.check_attention_entropy(with_where).passed
    # the exercise asks for the values: other right forms pass, whatever their gradient at a weight of 0
    # (where the entropy's derivative is infinite): the lab's clamped logarithm, a small offset,
    # torch.distributions and the library's own instrument
    other_right_forms = [
        lambda w: -(w * w.clamp_min(1e-12).log()).sum(-1).mean(dim=(0, 2)),
        lambda w: -(w * (w + 1e-9).log()).sum(-1).mean(dim=(0, 2)),
        lambda w: torch.distributions.Categorical(probs=w).entropy().mean(dim=(0, 2)),
        measure.attention_entropy,
    ]
    for answer in other_right_forms:
        result = ex.check_attention_entropy(answer)
        assert result.passed, result.message
    # equal to the library's instrument on weights from a model
    w = torch.softmax(torch.randn(3, 4, 7, 7), dim=-1)
    torch.testing.assert_close(right(w), measure.attention_entropy(w))
    assert not ex.check_attention_entropy(stub).passed
    wrong = {
        "NaN in floating point": lambda w: -(w * w.log()).sum(-1).mean(dim=(0, 2)),
        "natural logarithm": lambda w: right(w) / math.log(2),
        "the sign": lambda w: -right(w),
        "not a mean": lambda w: -torch.special.xlogy(w, w).mean(-1).mean(dim=(0, 2)),
    }
    for fragment, answer in wrong.items():
        assert_fails_with(ex.check_attention_entropy, answer, fragment)
    # one entropy per head: averaged over the batch and the queries
    assert_fails_with(ex.check_attention_entropy, lambda w: -torch.special.xlogy(w, w).sum(-1).mean(-1), "shape")
    assert_fails_with(ex.check_attention_entropy, lambda w: -torch.special.xlogy(w, w).sum(-1).mean(), "shape")
