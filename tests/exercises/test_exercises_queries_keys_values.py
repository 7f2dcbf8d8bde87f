"""Checkers of the chapter on queries, keys and values: right answers pass, usual mistakes get their hint."""

import math

import pytest
import torch
from attnbook.attention import scaled_dot_product_attention, softmax_with_temperature
from attnbook.exercises import ExerciseFailed
from attnbook.exercises import queries_keys_values as ex
from exercise_helpers import stub


def scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def test_attention_checker():
    assert ex.check_attention(lambda q, k, v: torch.softmax(scores(q, k), -1) @ v)
    assert not ex.check_attention(stub)
    wrong = {
        "not scaled": lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1), -1) @ v,
        "divided by d_k": lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1], -1) @ v,
        "wrong axis": lambda q, k, v: torch.softmax(scores(q, k), -2) @ v,
        "transpose the keys": lambda q, k, v: torch.softmax(q @ k / math.sqrt(q.shape[-1]), -1) @ v,
        "softmax first": lambda q, k, v: scores(q, k) @ v,
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_attention(fn)


@pytest.mark.filterwarnings("ignore:The use of `x.T` on tensors")
def test_attention_checker_explains_shape_errors_from_untransposed_keys():
    # k.T is right for a matrix but reverses every dimension of a batch, so torch fails on the batched
    # case: the checker reports the error and its line, with the hint about transposing the last two dims
    def dot_T(q, k, v):
        scores = q @ k.T / math.sqrt(q.shape[-1])
        return torch.softmax(scores, -1) @ v

    with pytest.raises(
        ExerciseFailed,
        match=r"test case 2 your function raised RuntimeError.*`scores = q @ k[.]T .*transpose the keys' last two",
    ):
        ex.check_attention(dot_T)


def test_masked_attention_checker():
    def right(q, k, v, mask):
        return torch.softmax(scores(q, k).masked_fill(~mask, float("-inf")), -1) @ v

    assert ex.check_masked_attention(right)
    assert ex.check_masked_attention(scaled_dot_product_attention)
    wrong = {
        "mask is ignored": lambda q, k, v, m: torch.softmax(scores(q, k), -1) @ v,
        "mask is inverted": lambda q, k, v, m: torch.softmax(scores(q, k).masked_fill(m, float("-inf")), -1) @ v,
        "set to 0": lambda q, k, v, m: torch.softmax(scores(q, k).masked_fill(~m, 0.0), -1) @ v,
        "no longer sum to 1": lambda q, k, v, m: torch.softmax(scores(q, k), -1).masked_fill(~m, 0.0) @ v,
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_masked_attention(fn)


def test_softmax_temperature_checker():
    assert ex.check_softmax_temperature(softmax_with_temperature)
    assert not ex.check_softmax_temperature(stub)
    wrong = {
        "multiplied by the temperature": lambda s, t: torch.softmax(s * t, -1),
        "wrong axis": lambda s, t: torch.softmax(s / t, 0),
        "overflows": lambda s, t: torch.exp(s / t) / torch.exp(s / t).sum(-1, keepdim=True),
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_softmax_temperature(fn)


def test_score_std_checker():
    assert ex.check_score_std(8)
    assert not ex.check_score_std(...)
    with pytest.raises(ExerciseFailed, match="variance"):
        ex.check_score_std(64)
    with pytest.raises(ExerciseFailed, match="after dividing"):
        ex.check_score_std(1)


def test_softmax_temperature_rejects_one_maximum_for_the_whole_tensor_and_the_row_minimum():
    def shifted(by):
        def softmax(scores, temperature):
            z = scores / temperature
            e = torch.exp(z - by(z))
            return e / e.sum(dim=-1, keepdim=True)

        return softmax

    with pytest.raises(ExerciseFailed, match="one maximum for the whole tensor"):
        ex.check_softmax_temperature(shifted(lambda z: z.max()))
    with pytest.raises(ExerciseFailed, match="each row's minimum"):
        ex.check_softmax_temperature(shifted(lambda z: z.min(dim=-1, keepdim=True).values))
    with pytest.raises(ExerciseFailed, match="carries no gradient"):
        ex.check_softmax_temperature(lambda s, t: softmax_with_temperature(s, t).detach())
    with pytest.raises(ExerciseFailed, match="dtype torch.float64 where torch.float32"):
        ex.check_softmax_temperature(lambda s, t: softmax_with_temperature(s.double(), t))
