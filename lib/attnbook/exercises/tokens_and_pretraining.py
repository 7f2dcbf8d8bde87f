"""Checkers for the exercises of the chapter on tokens and pretraining: BPE's pair counts, BERT's masking
rule, the masks of the three families, and LoRA's parameter count."""

from __future__ import annotations

from collections import Counter

import torch

from .. import attention
from ..pretrain import IGNORE_INDEX
from . import ExerciseFailed, Mistake, Result, check_function, check_number

__all__ = ["check_count_pairs", "check_bert_corruption", "check_family_masks", "check_lora_parameters"]


# --- BPE: counting adjacent pairs ------------------------------------------------------------------------


def _count_pairs(words):
    counts = Counter()
    for word, n in words.items():
        for pair in zip(word, word[1:]):
            counts[pair] += n
    return dict(counts)


def _count_pairs_once_per_word(words):
    counts = Counter()
    for word in words:
        for pair in zip(word, word[1:]):
            counts[pair] += 1
    return dict(counts)


def _count_distinct_pairs(words):
    counts = Counter()
    for word, n in words.items():
        for pair in set(zip(word, word[1:])):
            counts[pair] += n
    return dict(counts)


def _as_plain_dict(fn):
    def wrapped(words):
        out = fn(words)
        return {tuple(k): v for k, v in dict(out).items()} if hasattr(out, "items") else out

    return wrapped


def check_count_pairs(fn) -> Result:
    """``fn(words)``: words maps a tuple of symbols to its count; return {(a, b): number of adjacent a, b}."""
    cases = [
        ({("l", "o", "w"): 5, ("l", "o", "w", "e", "r"): 2, ("n", "e", "w", "e", "s", "t"): 6},),
        ({("a", "a", "a"): 3, ("b", "a", "a"): 1},),
        ({("Ġ", "t", "h", "e"): 10, ("t", "h", "e", "e"): 1, ("Ġ", "t", "o"): 4},),
    ]
    mistakes = [
        Mistake(
            "each word counts once: multiply every pair of a word by how often the word occurs (words[word]).",
            _count_pairs_once_per_word,
        ),
        Mistake(
            "a pair that occurs twice in one word counts twice (for example ('a', 'a') in 'a a a'); "
            "do not turn the pairs of a word into a set.",
            _count_distinct_pairs,
        ),
    ]
    return check_function(
        _as_plain_dict(fn), exercise="counting BPE pairs", reference=_count_pairs, cases=cases, mistakes=mistakes
    )


# --- BERT's corruption rule -------------------------------------------------------------------------------


def _corrupt(ids, chosen, u, random_ids, mask_id):
    inputs = ids.clone()
    inputs[chosen & (u < 0.8)] = mask_id
    swap = chosen & (u >= 0.8) & (u < 0.9)
    inputs[swap] = random_ids[swap]
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
    return inputs, labels


def check_bert_corruption(fn) -> Result:
    """``fn(ids, chosen, u, random_ids, mask_id)`` -> (inputs, labels) with BERT's 80/10/10 rule.

    ``chosen`` marks the positions to predict; ``u`` holds one uniform number in [0, 1) per position:
    u < 0.8 gives the mask, 0.8 <= u < 0.9 the random token, u >= 0.9 keeps the token.
    """
    g = torch.Generator().manual_seed(13)
    cases = []
    for shape in [(2, 12), (4, 9)]:
        ids = torch.randint(3, 40, shape, generator=g)
        chosen = torch.rand(shape, generator=g) < 0.4
        u = torch.rand(shape, generator=g)
        u[0, :2], chosen[0, :2] = torch.tensor([0.8, 0.9]), True  # the bands' edges: 0.8 is random, 0.9 kept
        random_ids = torch.randint(3, 40, shape, generator=g)
        cases.append((ids, chosen, u, random_ids, 1))

    def labels_everywhere(ids, chosen, u, r, m):
        return _corrupt(ids, chosen, u, r, m)[0], ids.clone()

    def everywhere(ids, chosen, u, r, m):
        return _corrupt(ids, torch.ones_like(chosen), u, r, m)[0], _corrupt(ids, chosen, u, r, m)[1]

    def labels_from_inputs(ids, chosen, u, r, m):
        inputs, _ = _corrupt(ids, chosen, u, r, m)
        return inputs, torch.where(chosen, inputs, torch.full_like(ids, IGNORE_INDEX))

    def all_masked(ids, chosen, u, r, m):
        return _corrupt(ids, chosen, torch.zeros_like(u), r, m)

    def swapped_shares(ids, chosen, u, r, m):  # 10% mask, 80% random
        return _corrupt(ids, chosen, torch.where(u < 0.8, u * 0.1 / 0.8 + 0.8, (u - 0.8) * 8.0), r, m)

    mistakes = [
        Mistake(
            "labels must be IGNORE_INDEX (-100) at the positions that were not chosen: the loss is computed "
            "only where the model has to predict.",
            labels_everywhere,
        ),
        Mistake("only the chosen positions may change; the others stay as they are.", everywhere),
        Mistake(
            "the labels are the original tokens (ids), not the corrupted inputs: the model must recover "
            "what was there.",
            labels_from_inputs,
        ),
        Mistake(
            "every chosen token became the mask: 10% must become a random token (0.8 <= u < 0.9) and 10% "
            "stay unchanged (u >= 0.9).",
            all_masked,
        ),
        Mistake(
            "the shares are the wrong way round: u < 0.8 gives the mask (80%), 0.8 <= u < 0.9 a random token (10%).",
            swapped_shares,
        ),
    ]
    return check_function(fn, exercise="BERT's 80/10/10 rule", reference=_corrupt, cases=cases, mistakes=mistakes)


# --- The masks of the three families ----------------------------------------------------------------------


def _family_masks(S, T):
    return (torch.ones(S, S, dtype=torch.bool), attention.causal_mask(T), torch.ones(T, S, dtype=torch.bool))


def check_family_masks(fn) -> Result:
    """``fn(S, T)`` -> (encoder self-attention (S, S), decoder self-attention (T, T), cross-attention (T, S)).

    True = may attend. The encoder sees its whole source, the decoder its past, and every target position
    sees the whole source through cross-attention.
    """
    cases = [(4, 3), (5, 6), (1, 2)]
    mistakes = [
        Mistake(
            "the encoder is bidirectional: every source position may attend to every other one (all True).",
            lambda S, T: (attention.causal_mask(S), attention.causal_mask(T), torch.ones(T, S, dtype=torch.bool)),
        ),
        Mistake(
            "the decoder's self-attention must be causal: position t sees positions <= t only.",
            lambda S, T: (
                torch.ones(S, S, dtype=torch.bool),
                torch.ones(T, T, dtype=torch.bool),
                torch.ones(T, S, dtype=torch.bool),
            ),
        ),
        Mistake(
            "cross-attention is not causal: the whole source is known before decoding starts, so every "
            "target position may look at every source position.",
            lambda S, T: (torch.ones(S, S, dtype=torch.bool), attention.causal_mask(T), attention.causal_mask(T, S)),
        ),
        Mistake(
            "the cross-attention mask has one row per query (target position) and one column per key "
            "(source position): shape (T, S).",
            lambda S, T: (
                torch.ones(S, S, dtype=torch.bool),
                attention.causal_mask(T),
                torch.ones(S, T, dtype=torch.bool),
            ),
        ),
    ]
    result = check_function(
        fn, exercise="the masks of the three families", reference=_family_masks, cases=cases, mistakes=mistakes
    )
    if result.passed:
        out = fn(4, 3)
        if any(isinstance(m, torch.Tensor) and m.dtype != torch.bool for m in out):
            raise ExerciseFailed(
                "the masks of the three families",
                "the masks must be boolean (dtype torch.bool): True means 'may attend'.",
            )
    return result


# --- LoRA's parameter count -------------------------------------------------------------------------------


def check_lora_parameters(answer, *, d_model: int = 768, n_layers: int = 12, r: int = 8) -> Result:
    """Trainable numbers of LoRA with rank r on W_q and W_v (each d_model x d_model) of every layer."""
    per_matrix = r * (d_model + d_model)
    return check_number(
        answer,
        exercise="LoRA's trainable parameters",
        expected=n_layers * 2 * per_matrix,
        rel_tol=1e-9,
        mistakes=[
            (
                "that is half the answer: either one matrix per layer (LoRA adapts two here, W_q and W_v), or A "
                "alone (r x d_in; B, d_out x r, is trained too).",
                n_layers * per_matrix,
            ),
            (
                "that is the full update B A (d x d): LoRA trains its two thin factors, r (d_in + d_out) numbers.",
                n_layers * 2 * d_model * d_model,
            ),
            ("that is a single layer; the model has n_layers of them.", 2 * per_matrix),
        ],
    )
