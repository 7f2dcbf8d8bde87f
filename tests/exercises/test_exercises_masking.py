"""Checkers of the chapter on masking: right answers pass, usual mistakes get their hint."""

import pytest
import torch
from attnbook import attention
from attnbook.exercises import ExerciseFailed
from attnbook.exercises import masking as ex
from exercise_helpers import stub


def test_causal_mask_checker():
    assert ex.check_causal_mask(lambda T: torch.tril(torch.ones(T, T, dtype=torch.bool)))
    assert ex.check_causal_mask(lambda T: torch.arange(T)[None, :] <= torch.arange(T)[:, None])
    assert not ex.check_causal_mask(stub)
    wrong = {
        "inverted": lambda T: torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1),
        "diagonal is missing": lambda T: torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1),
        "see the future": lambda T: torch.triu(torch.ones(T, T, dtype=torch.bool)),
        "must be boolean": lambda T: torch.tril(torch.ones(T, T)),  # right numbers, wrong type
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_causal_mask(fn)
    with pytest.raises(ExerciseFailed, match=r"on test case 1, expected shape \(4, 4\), got shape \(4, 5\)"):
        ex.check_causal_mask(lambda T: torch.ones(T, T + 1, dtype=torch.bool) if T == 4 else attention.causal_mask(T))


def right_decoder(lengths, T):
    j = torch.arange(T)
    return (j[None, None, :] < torch.tensor(lengths)[:, None, None]) & (j[None, :] <= j[:, None])


def test_decoder_mask_checker():
    assert ex.check_decoder_mask(right_decoder)
    assert ex.check_decoder_mask(lambda lengths, T: attention.padding_mask(lengths, T) & attention.causal_mask(T))
    assert not ex.check_decoder_mask(stub)
    causal = lambda T: attention.causal_mask(T)  # noqa: E731
    pad = lambda lengths, T: attention.padding_mask(lengths, T)  # noqa: E731
    wrong = {
        "combined with OR": lambda lengths, T: pad(lengths, T) | causal(T),
        "only the causal part": lambda lengths, T: causal(T).expand(len(lengths), T, T),
        "only the padding part": lambda lengths, T: pad(lengths, T).expand(len(lengths), T, T),
        "padding part is inverted": lambda lengths, T: ~pad(lengths, T) & causal(T),
        "off by one": lambda lengths, T: (
            (torch.arange(T)[None, None] <= torch.tensor(lengths)[:, None, None]) & causal(T)
        ),
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_decoder_mask(fn)
    with pytest.raises(ExerciseFailed, match="must be boolean"):
        ex.check_decoder_mask(lambda lengths, T: right_decoder(lengths, T).long())


def right_softmax(scores, mask):
    any_allowed = mask.any(-1, keepdim=True)
    w = torch.softmax(scores.masked_fill(~(mask | ~any_allowed), float("-inf")), -1)
    return w.masked_fill(~any_allowed, 0.0)


def test_safe_masked_softmax_checker():
    assert ex.check_safe_masked_softmax(right_softmax)
    assert ex.check_safe_masked_softmax(attention.masked_softmax)
    assert not ex.check_safe_masked_softmax(stub)
    wrong = {
        "comes out as NaN": lambda s, m: torch.softmax(s.masked_fill(~m, float("-inf")), -1),
        "equal weight on every": lambda s, m: torch.softmax(s.masked_fill(~m, -1e9), -1),
        "zeroed after the softmax": lambda s, m: torch.softmax(s, -1).masked_fill(~m, 0.0),
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_safe_masked_softmax(fn)
    with pytest.raises(ExerciseFailed, match="values differ"):
        ex.check_safe_masked_softmax(lambda s, m: right_softmax(s, m).masked_fill(~m, 0.0) * 0.5)


def test_allowed_count_checker():
    assert ex.check_allowed_count(55)
    assert not ex.check_allowed_count(...)
    for answer, hint in [(45, "diagonal counts too"), (100, "every entry"), (50, "diagonal belongs")]:
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_allowed_count(answer)
    with pytest.raises(ExerciseFailed, match="too small"):
        ex.check_allowed_count(30)


def test_safe_masked_softmax_checks_the_gradients():
    # right values, NaN gradient: the additive -inf mask, then nan_to_num
    def additive_then_nan_to_num(scores, mask):
        bias = torch.zeros_like(scores).masked_fill(~mask, float("-inf"))
        return torch.softmax(scores + bias, dim=-1).nan_to_num(0.0)

    # right values, and backward raises: NaN zeroed in place in the softmax's output
    def zeroed_in_place(scores, mask):
        w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        w[torch.isnan(w)] = 0.0
        return w

    def masks_the_callers_scores(scores, mask):
        any_allowed = mask.any(dim=-1, keepdim=True)
        weights = scores.masked_fill_(~(mask | ~any_allowed), float("-inf")).softmax(dim=-1)
        return weights.masked_fill(~any_allowed, 0.0)

    with pytest.raises(ExerciseFailed, match="gradient is NaN for a row with no allowed key"):
        ex.check_safe_masked_softmax(additive_then_nan_to_num)
    with pytest.raises(ExerciseFailed, match="backward pass through your function raised RuntimeError"):
        ex.check_safe_masked_softmax(zeroed_in_place)
    with pytest.raises(ExerciseFailed, match="changed its first argument in place"):
        ex.check_safe_masked_softmax(masks_the_callers_scores)
