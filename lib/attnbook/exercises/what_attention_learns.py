"""Checkers for the exercises of the chapter on what attention learns."""

from __future__ import annotations

import math

import torch

from .. import interpret
from . import Mistake, Result, check_function

__all__ = ["check_prefix_matching", "check_without_head", "check_ov_circuit", "check_rollout"]


def _causal_weights(B, H, T, g, dtype=torch.float64):
    """Random causal attention weights (B, H, T, T): each row a softmax over the keys it may see."""
    scores = torch.randn(B, H, T, T, generator=g, dtype=dtype) * 2
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)


def _prefix_cases():
    g = torch.Generator().manual_seed(16)
    return [(_causal_weights(B, H, 2 * M, g),) for B, H, M in [(2, 3, 4), (1, 2, 6), (3, 4, 5)]]


def _offset_score(weights, shift, first=None):
    """The mean weight from queries first .. 2M - 1 to the key shift positions back."""
    M = weights.shape[-1] // 2
    t = torch.arange(M if first is None else first, 2 * M)
    return weights[:, :, t, t - shift].mean(dim=(0, 2))


def check_prefix_matching(fn) -> Result:
    """``fn(weights)``: weights (B, H, 2M, 2M) -> (H,), each head's prefix-matching score."""
    mistakes = [
        Mistake(
            "that is the weight on the earlier occurrence of the same token (t - M); an induction head looks "
            "one position further, at the token that followed it: t - M + 1.",
            lambda w: _offset_score(w, w.shape[-1] // 2),
        ),
        Mistake(
            "the key is one position too far: the token at t - M + 1 follows the earlier occurrence at t - M.",
            lambda w: _offset_score(w, w.shape[-1] // 2 - 2),
        ),
        Mistake(
            "the queries of the first half have no earlier occurrence to find: average over t = M .. 2M - 1 only.",
            lambda w: _offset_score(w, w.shape[-1] // 2 - 1, first=w.shape[-1] // 2 - 1),
        ),
        Mistake(
            "the result should have one score per head, (H,): average over the batch and the queries, "
            "not over the heads.",
            lambda w: interpret.prefix_matching_score(w).mean().expand(w.shape[1]),
        ),
    ]
    error_hints = [("out of bounds", "the key t - M + 1 must be a position of the sequence: t runs from M to 2M - 1.")]
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
        for D, H, head in [(16, 4, 2), (8, 2, 1), (12, 3, 0), (16, 4, 3)]  # two heads: keep one = remove the other
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
            "that keeps only the head and removes every other one: zero the head's own columns, keep the rest.",
            lambda W, h, H: W - _without_head(W, h, H),
        ),
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


def _ov_circuit(
    E,
    W_v,
    W_o,
    W_U,
    head,
    n_heads,
    *,
    transpose_v=True,
    o_cols=True,
    transpose_o=True,
    transpose_u=True,
    width_from_rows=False,
    shift=0,
    every_head=False,
    scale=1.0,
):
    """E W_V^h W_O^h W_U^T of one head of a model without norms, and the usual ways to get it wrong."""
    Dh = W_o.shape[0 if width_from_rows else 1] // n_heads
    if not 0 <= head + shift < n_heads:
        raise ValueError("no such head")  # this mistake cannot be made on this case
    block = slice(None) if every_head else slice((head + shift) * Dh, (head + shift + 1) * Dh)
    W_V = W_v[block].T if transpose_v else W_v[block]  # (D, Dh): nn.Linear computes x @ weight.T
    W_O = W_o[:, block] if o_cols else W_o[block]  # the head's inputs of W_o are its columns
    W_O = W_O.T if transpose_o else W_O  # (Dh, D)
    return E @ W_V @ W_O @ (W_U.T if transpose_u else W_U) * scale  # (V, V)


def _ov_cases():
    g = torch.Generator().manual_seed(16)
    out = []
    # (V, D, H, Dh, head): V != D, a non-square W_o (D != H * Dh), the first, a middle and the last head, and a
    # case of one head with every size equal, where the untransposed weights still multiply
    for V, D, H, Dh, head in [(5, 8, 2, 4, 1), (7, 6, 2, 4, 0), (6, 9, 3, 3, 1), (4, 4, 1, 4, 0), (3, 8, 4, 2, 3)]:
        E, W_v, W_o, W_U = (
            torch.randn(*shape, generator=g, dtype=torch.float64)
            for shape in [(V, D), (H * Dh, D), (D, H * Dh), (V, D)]
        )
        out.append((E, W_v, W_o, W_U, head, H))
    return out


def check_ov_circuit(fn) -> Result:
    """``fn(E, W_v, W_o, W_U, head, n_heads)``: the embedding (V, D) and the nn.Linear weights of the value
    projection (H * Dh, D), the output projection (D, H * Dh) and the unembedding (V, D) -> head ``head``'s full
    OV circuit E W_V^h W_O^h W_U, (V, V), in the book's row convention."""
    linear = (
        "an nn.Linear weight is (out, in) and computes x @ weight.T: the head's W_V^h is W_v[rows].T (D, Dh), "
        "its W_O^h is W_o[:, rows].T (Dh, D), and the unembedding is W_U.T (D, V)."
    )
    mistakes = [
        Mistake(f"W_v is used without its transpose: {linear}", lambda *a: _ov_circuit(*a, transpose_v=False)),
        Mistake(
            "those are the head's rows of W_o, its outputs: the heads are the inputs of W_o, so the head's slice is "
            "the columns W_o[:, rows], transposed to (Dh, D).",
            lambda *a: _ov_circuit(*a, o_cols=False, transpose_o=False),
        ),
        Mistake(
            f"W_o's columns are used without their transpose: {linear}", lambda *a: _ov_circuit(*a, transpose_o=False)
        ),
        Mistake(
            f"the unembedding is used without its transpose: {linear}", lambda *a: _ov_circuit(*a, transpose_u=False)
        ),
        Mistake(
            "the table is transposed: that is the paper's order, W_U W_OV W_E, with tokens as columns. In the row "
            "convention, row i is the attended token: E @ W_V @ W_O @ W_U.T, so that [i, j] is the logit of j.",
            lambda *a: _ov_circuit(*a).T,
        ),
        Mistake(
            "that is the OV circuit of every head together: take only the head's slice, rows head*Dh to "
            "(head+1)*Dh - 1 of W_v and the same columns of W_o.",
            lambda *a: _ov_circuit(*a, every_head=True),
        ),
        Mistake(
            "the block is one head off: head h (counted from 0) owns the rows h*Dh to (h+1)*Dh - 1 of W_v and the "
            "same columns of W_o.",
            lambda *a: _ov_circuit(*a, shift=-1),
        ),
        Mistake(
            "the block is one head off: head h (counted from 0) owns the rows h*Dh to (h+1)*Dh - 1 of W_v and the "
            "same columns of W_o.",
            lambda *a: _ov_circuit(*a, shift=1),
        ),
        Mistake(
            "the head's width comes from W_o.shape[0] // n_heads, which is right only when D = H * Dh: the heads "
            "are W_o's inputs, so Dh = W_o.shape[1] // n_heads.",
            lambda *a: _ov_circuit(*a, width_from_rows=True),
        ),
        Mistake(
            "the 1 / sqrt(Dh) scales the scores of the QK circuit; the values are not scaled.",
            lambda *a: _ov_circuit(*a, scale=1 / math.sqrt(a[2].shape[1] // a[5])),
        ),
    ]
    error_hints = [
        ("shapes cannot be multiplied", f"The shapes do not fit: {linear}"),
        ("must match the size", "* multiplies entry by entry; the circuit is a chain of matrix products, @."),
        ("slice indices must be integers", "the head's width is an integer: Dh = W_o.shape[1] // n_heads, with //."),
    ]
    return check_function(
        fn,
        exercise="the OV circuit of a head",
        reference=_ov_circuit,
        cases=_ov_cases(),
        mistakes=mistakes,
        error_hints=error_hints,
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
