"""Checkers of the chapter on tokens and pretraining: right answers pass, usual mistakes get their hint."""

from collections import Counter

import pytest
import torch
from attnbook import attention
from attnbook.exercises import ExerciseFailed
from attnbook.exercises import tokens_and_pretraining as ex
from exercise_helpers import assert_fails_with, stub


def right_pairs(words):
    counts = Counter()
    for word, n in words.items():
        for a, b in zip(word, word[1:]):
            counts[(a, b)] += n
    return counts  # a Counter is fine


def test_count_pairs_checker():
    assert ex.check_count_pairs(right_pairs)
    assert not ex.check_count_pairs(stub)
    assert_fails_with(
        ex.check_count_pairs, lambda words: Counter(p for w in words for p in zip(w, w[1:])), "each word counts once"
    )
    assert_fails_with(
        ex.check_count_pairs,
        lambda words: (
            Counter({p: n for w, n in words.items() for p in set(zip(w, w[1:]))})
            and {p: sum(n for w, n in words.items() if p in set(zip(w, w[1:]))) for w in words for p in zip(w, w[1:])}
        ),
        "counts twice",
    )
    assert_fails_with(
        ex.check_count_pairs,
        lambda words: {k: v + 1 for k, v in right_pairs(words).items()},
        "your pairs are right but some counts are not",
    )


def right_corrupt(ids, chosen, u, random_ids, mask_id):
    inputs = torch.where(chosen & (u < 0.8), torch.full_like(ids, mask_id), ids)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, inputs)
    return inputs, torch.where(chosen, ids, torch.full_like(ids, -100))


def test_bert_corruption_checker():
    assert ex.check_bert_corruption(right_corrupt)
    assert not ex.check_bert_corruption(stub)
    wrong = {
        "IGNORE_INDEX": lambda i, c, u, r, m: (right_corrupt(i, c, u, r, m)[0], i.clone()),
        "only the chosen positions": lambda i, c, u, r, m: (
            right_corrupt(i, torch.ones_like(c), u, r, m)[0],
            right_corrupt(i, c, u, r, m)[1],
        ),
        "original tokens": lambda i, c, u, r, m: (
            right_corrupt(i, c, u, r, m)[0],
            torch.where(c, right_corrupt(i, c, u, r, m)[0], -100),
        ),
        "every chosen token became the mask": lambda i, c, u, r, m: (torch.where(c, m, i), torch.where(c, i, -100)),
        "wrong way round": lambda i, c, u, r, m: right_corrupt(
            i, c, torch.where(u < 0.8, u * 0.1 / 0.8 + 0.8, (u - 0.8) * 8.0), r, m
        ),
    }
    for hint, fn in wrong.items():
        assert_fails_with(ex.check_bert_corruption, fn, hint)


def right_masks(S, T):
    return (
        torch.ones(S, S, dtype=torch.bool),
        torch.ones(T, T, dtype=torch.bool).tril(),
        torch.ones(T, S, dtype=torch.bool),
    )


def test_family_masks_checker():
    assert ex.check_family_masks(right_masks)
    assert not ex.check_family_masks(stub)
    ones = lambda a, b: torch.ones(a, b, dtype=torch.bool)  # noqa: E731
    wrong = {
        "encoder is bidirectional": lambda S, T: (attention.causal_mask(S), attention.causal_mask(T), ones(T, S)),
        "must be causal": lambda S, T: (ones(S, S), ones(T, T), ones(T, S)),
        "cross-attention is not causal": lambda S, T: (
            ones(S, S),
            attention.causal_mask(T),
            attention.causal_mask(T, S),
        ),
        "shape (T, S)": lambda S, T: (ones(S, S), attention.causal_mask(T), ones(S, T)),
        "must be boolean": lambda S, T: tuple(m.float() for m in right_masks(S, T)),
    }
    for hint, fn in wrong.items():
        assert_fails_with(ex.check_family_masks, fn, hint)


def test_lora_parameters_checker():
    assert ex.check_lora_parameters(12 * 2 * 8 * (768 + 768))
    assert ex.check_lora_parameters(2 * 2 * 4 * 128, d_model=64, n_layers=2, r=4)
    assert not ex.check_lora_parameters(...)
    for answer, hint in [
        (12 * 8 * 1536, "one matrix per layer"),
        (12 * 2 * 8 * 768, "A alone"),
        (12 * 2 * 768 * 768, "full update"),
        (2 * 8 * 1536, "single layer"),
    ]:
        assert_fails_with(ex.check_lora_parameters, answer, hint)
    with pytest.raises(ExerciseFailed, match="too small"):
        ex.check_lora_parameters(10)
