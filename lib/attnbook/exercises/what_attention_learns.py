"""Checkers for the exercises of the chapter on what attention learns."""

from __future__ import annotations

import torch

from .. import interpret
from . import Mistake, Result, check_function

__all__ = ["check_prefix_matching", "check_without_head", "check_rollout"]


def _causal_weights(B, H, T, g, dtype=torch.float64):
    """Random causal attention weights (B, H, T, T): each row a softmax over the keys it may see."""
    scores = torch.randn(B, H, T, T, generator=g, dtype=dtype) * 2
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)


def _prefix_cases():
    g = torch.Generator().manual_seed(16)
    return [(_causal_weights(B, H, 2 * L, g),) for B, H, L in [(2, 3, 4), (1, 2, 6), (3, 4, 5)]]


def _offset_score(weights, shift, first=None):
    """The mean weight from queries first .. 2L - 1 to the key shift positions back."""
    L = weights.shape[-1] // 2
    t = torch.arange(L if first is None else first, 2 * L)
    return weights[:, :, t, t - shift].mean(dim=(0, 2))


def check_prefix_matching(fn) -> Result:
    """``fn(weights)``: weights (B, H, 2L, 2L) -> (H,), each head's prefix-matching score."""
    mistakes = [
        Mistake(
            "that is the weight on the earlier occurrence of the same token (t - L); an induction head looks "
            "one position further, at the token that followed it: t - L + 1.",
            lambda w: _offset_score(w, w.shape[-1] // 2),
        ),
        Mistake(
            "the key is one position too far: the token at t - L + 1 follows the earlier occurrence at t - L.",
            lambda w: _offset_score(w, w.shape[-1] // 2 - 2),
        ),
        Mistake(
            "the queries of the first half have no earlier occurrence to find: average over t = L .. 2L - 1 only.",
            lambda w: _offset_score(w, w.shape[-1] // 2 - 1, first=w.shape[-1] // 2 - 1),
        ),
        Mistake(
            "the result should have one score per head, (H,): average over the batch and the queries, "
            "not over the heads.",
            lambda w: interpret.prefix_matching_score(w).mean().expand(w.shape[1]),
        ),
    ]
    error_hints = [("out of bounds", "the key t - L + 1 must be a position of the sequence: t runs from L to 2L - 1.")]
    return check_function(
        fn,
        exercise="the prefix-matching score",
        reference=interpret.prefix_matching_score,
        cases=_prefix_cases(),
        mistakes=mistakes,
        error_hints=error_hints,
    )


def _without_head(W_o, head, n_heads, *, rows=False, shift=0, width_from_rows=False):
    Dh = W_o.shape[0 if width_from_rows else 1] // n_heads
    if not 0 <= head + shift < n_heads:
        raise ValueError("no such head")  # this mistake cannot be made on this case
    out = W_o.clone()
    block = slice((head + shift) * Dh, (head + shift + 1) * Dh)
    if rows:
        out[block, :] = 0.0
    else:
        out[:, block] = 0.0
    return out


def _head_cases():
    g = torch.Generator().manual_seed(7)
    square = [
        (torch.randn(D, D, generator=g, dtype=torch.float64), head, H)
        for D, H, head in [(8, 2, 1), (12, 3, 0), (16, 4, 2), (16, 4, 3)]
    ]
    # W_o maps the heads' H * Dh features to d_model: not square when H * Dh != d_model
    return square + [(torch.randn(6, 12, generator=g, dtype=torch.float64), 1, 3)]


def check_without_head(fn) -> Result:
    """``fn(W_o, head, n_heads)``: a copy of an ``nn.Linear`` weight (D, H * Dh) without head ``head``'s inputs."""
    mistakes = [
        Mistake(
            "those are the head's rows, its outputs: an nn.Linear weight is (out, in), and the heads are the "
            "inputs of W_o, so zero the columns head*Dh to (head+1)*Dh - 1.",
            lambda W, h, H: _without_head(W, h, H, rows=True),
        ),
        Mistake(
            "the block is one head off: head h (counted from 0) owns the columns h*Dh to (h+1)*Dh - 1.",
            lambda W, h, H: _without_head(W, h, H, shift=-1),
        ),
        Mistake(
            "the block is one head off: head h (counted from 0) owns the columns h*Dh to (h+1)*Dh - 1.",
            lambda W, h, H: _without_head(W, h, H, shift=1),
        ),
        Mistake("nothing was removed: set the head's columns of the copy to zero.", lambda W, h, H: W.clone()),
        Mistake(
            "the head's width comes from the rows, W_o.shape[0] // n_heads, which is right only for a square "
            "W_o: the heads are the columns (the inputs), so Dh = W_o.shape[1] // n_heads.",
            lambda W, h, H: _without_head(W, h, H, width_from_rows=True),
        ),
    ]
    return check_function(
        fn,
        exercise="removing a head",
        reference=_without_head,
        cases=_head_cases(),
        mistakes=mistakes,
        atol=0.0,
        rtol=0.0,
    )


def _rollout(weights, *, residual=True, order="left", reduce="mean", alpha=0.5):
    T = weights[0].shape[-1]
    eye = torch.eye(T, dtype=weights[0].dtype)
    out = eye
    for w in weights:
        a = w.mean(dim=1) if reduce == "mean" else w.sum(dim=1)
        step = alpha * a + (1 - alpha) * eye if residual else a
        out = step @ out if order == "left" else out @ step
    return out


def _rollout_cases():
    g = torch.Generator().manual_seed(3)
    sizes = [(2, 2, 5, 2), (1, 3, 6, 3), (2, 1, 4, 1)]  # the last: a model of one layer
    return [([_causal_weights(B, H, T, g) for _ in range(L)],) for B, H, T, L in sizes]


def check_rollout(fn) -> Result:
    """``fn(weights)``: a list of (B, H, T, T), first layer first -> the attention rollout (B, T, T)."""
    mistakes = [
        Mistake(
            "the residual path is missing: mix each layer's weights with the identity, 0.5 * A + 0.5 * I, "
            "before multiplying.",
            lambda ws: _rollout(ws, residual=False),
        ),
        Mistake(
            "the product is in the wrong order: each new layer goes on the left, A_L ... A_2 A_1 "
            "(rollout = layer @ rollout).",
            lambda ws: _rollout(ws, order="right"),
        ),
        Mistake(
            "the heads are summed: average them (w.mean(dim=1)), so that every row still sums to 1.",
            lambda ws: _rollout(ws, reduce="sum"),
        ),
        Mistake(
            "the identity gets all the weight it should share: 0.5 * A + 0.5 * I, not A + I.",
            lambda ws: _rollout(ws) * 2 ** len(ws),  # (A + I) = 2 (0.5 A + 0.5 I) in every layer
        ),
    ]
    return check_function(
        fn,
        exercise="attention rollout",
        reference=_rollout,
        cases=_rollout_cases(),
        mistakes=mistakes,
    )
