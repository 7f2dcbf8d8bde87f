"""Checkers for the exercises of the chapter on self-attention and positional encoding."""

from __future__ import annotations

import math

import torch

from .. import attention, positional
from . import Mistake, Result, check_function, check_number

__all__ = ["check_cross_attention", "check_sinusoidal_2d", "check_shift", "check_pe_self_dot"]


def _randn(g: torch.Generator, *shape):
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _cross_cases():
    g = torch.Generator().manual_seed(5)
    return [
        (_randn(g, 4, 6), _randn(g, 4, 6), _randn(g, 6, 6), _randn(g, 6, 6), _randn(g, 6, 6)),  # square: n = m, D = Dk
        (_randn(g, 3, 8), _randn(g, 5, 8), _randn(g, 8, 4), _randn(g, 8, 4), _randn(g, 8, 2)),
        (_randn(g, 2, 3, 8), _randn(g, 2, 7, 8), _randn(g, 8, 4), _randn(g, 8, 4), _randn(g, 8, 3)),
    ]


def _cross(X, Z, W_q, W_k, W_v, *, scale=None, dim=-1):
    Q, K, V = X @ W_q, Z @ W_k, Z @ W_v  # (..., n, Dk), (..., m, Dk), (..., m, Dv)
    scale = 1 / math.sqrt(Q.shape[-1]) if scale is None else scale
    return torch.softmax(Q @ K.transpose(-2, -1) * scale, dim=dim) @ V  # (..., n, Dv)


def check_cross_attention(fn) -> Result:
    """``fn(X, Z, W_q, W_k, W_v)``: queries from X (..., n, D), keys and values from Z (..., m, D)."""

    def reference(X, Z, W_q, W_k, W_v):
        return attention.scaled_dot_product_attention(X @ W_q, Z @ W_k, Z @ W_v)

    mistakes = [
        Mistake(
            "the keys and values come from X: that is self-attention. In cross-attention only the queries "
            "come from X; the keys and the values both come from Z (K = Z W_k, V = Z W_v).",
            lambda X, Z, W_q, W_k, W_v: _cross(X, X, W_q, W_k, W_v),
        ),
        Mistake(
            "the values come from X; they must come from Z, like the keys (each key has its value).",
            lambda X, Z, W_q, W_k, W_v: (
                torch.softmax((X @ W_q) @ (Z @ W_k).transpose(-2, -1) / math.sqrt(W_q.shape[-1]), -1) @ (X @ W_v)
            ),
        ),
        Mistake(
            "the roles are swapped: the queries must come from X and the keys and values from Z, so the "
            "output has one row per row of X.",
            lambda X, Z, W_q, W_k, W_v: _cross(Z, X, W_q, W_k, W_v),
        ),
        Mistake(
            "the scores are not scaled: divide by sqrt(Dk), the width of the projected queries and keys.",
            lambda X, Z, W_q, W_k, W_v: _cross(X, Z, W_q, W_k, W_v, scale=1.0),
        ),
        Mistake(
            "the scores are divided by sqrt(D), the width of the inputs; divide by sqrt(Dk), the width of "
            "the projected queries and keys (W_q.shape[-1]).",
            lambda X, Z, W_q, W_k, W_v: _cross(X, Z, W_q, W_k, W_v, scale=1 / math.sqrt(X.shape[-1])),
        ),
        Mistake(
            "the softmax is over the wrong axis: each query's weights over the keys must sum to 1 (dim=-1).",
            lambda X, Z, W_q, W_k, W_v: _cross(X, Z, W_q, W_k, W_v, dim=-2),
        ),
        Mistake(
            "the weights are transposed: in this book the inputs are rows, so the projection is X @ W_q "
            "(not X @ W_q.T).",
            lambda X, Z, W_q, W_k, W_v: _cross(X, Z, W_q.T, W_k.T, W_v.T),
        ),
    ]
    return check_function(
        fn,
        exercise="cross-attention",
        reference=reference,
        cases=_cross_cases(),
        mistakes=mistakes,
        error_hints=[
            (
                "cannot be multiplied",
                "check the shapes: X @ W_q is (..., n, Dk), "
                "Z @ W_k is (..., m, Dk), and the scores are Q @ K.transpose(-2, -1).",
            )
        ],
        gradients=True,
    )


def check_sinusoidal_2d(fn) -> Result:
    """``fn(height, width, d_model)``: rows' encoding in the first half, columns' in the second, row-major."""

    def half(n, d):
        return positional.sinusoidal(n, d, dtype=torch.float64)

    def grid(height, width, d_model, row_first=True, row_major=True, interleave=False, same=False):
        rows, cols = half(height, d_model // 2), half(width, d_model // 2)  # (Hg, D/2), (Wg, D/2)
        r = rows[:, None, :].expand(height, width, -1)  # (Hg, Wg, D/2)
        c = r if same else cols[None, :, :].expand(height, width, -1)  # (Hg, Wg, D/2)
        first, second = (r, c) if row_first else (c, r)
        if interleave:
            out = torch.stack([first, second], dim=-1).flatten(-2)  # (Hg, Wg, D): alternate row and column
        else:
            out = torch.cat([first, second], dim=-1)  # (Hg, Wg, D)
        if not row_major:
            out = out.transpose(0, 1)  # (Wg, Hg, D): column by column
        return out.reshape(height * width, d_model)

    mistakes = [
        Mistake(
            "the halves are swapped: the first d_model/2 dimensions encode the row, the last d_model/2 the column.",
            lambda h, w, d: grid(h, w, d, row_first=False),
        ),
        Mistake(
            "the cells are listed column by column; list them row by row (cell (r, c) is token r * width + c), "
            "the order in which a patch embedding flattens an image.",
            lambda h, w, d: grid(h, w, d, row_major=False),
        ),
        Mistake(
            "the row and column values are interleaved dimension by dimension; put the row's encoding in "
            "the first half and the column's in the second (torch.cat on the last dimension).",
            lambda h, w, d: grid(h, w, d, interleave=True),
        ),
        Mistake(
            "both halves encode the row; the second half must encode the column.",
            lambda h, w, d: grid(h, w, d, same=True),
        ),
        Mistake(
            "each half must be the encoding of width d_model / 2 (sinusoidal(n, d_model // 2)), not the first "
            "half of a width-d_model encoding.",
            lambda h, w, d: torch.cat(
                [half(h, d)[:, None, : d // 2].expand(h, w, -1), half(w, d)[None, :, : d // 2].expand(h, w, -1)], -1
            ).reshape(h * w, d),
        ),
    ]
    cases = [(2, 3, 8), (4, 4, 16), (3, 5, 12)]
    return check_function(
        fn,
        exercise="2D sinusoidal encoding",
        cases=cases,
        mistakes=mistakes,
        reference=lambda h, w, d: positional.sinusoidal_2d(h, w, d, dtype=torch.float64),
        atol=1e-6,
        rtol=1e-5,
    )


def _rotate(pe, k, *, sign=1.0, exponent_step=2.0, halves=False):
    d = pe.shape[-1]
    w = 10000.0 ** (-exponent_step * torch.arange(d // 2, dtype=torch.float64) / d)  # (D/2,)
    c, s = torch.cos(k * w).to(pe.dtype), (sign * torch.sin(k * w)).to(pe.dtype)
    if halves:
        sin, cos = pe[..., : d // 2], pe[..., d // 2 :]
    else:
        sin, cos = pe[..., 0::2], pe[..., 1::2]  # (..., D/2) each
    new_sin, new_cos = sin * c + cos * s, cos * c - sin * s
    if halves:
        return torch.cat([new_sin, new_cos], dim=-1)
    return torch.stack([new_sin, new_cos], dim=-1).flatten(-2)  # (..., D)


def check_shift(fn) -> Result:
    """``fn(pe, k)``: from rows PE(p) of unknown positions p, return PE(p + k), for any integer k."""
    g = torch.Generator().manual_seed(11)
    cases = []
    for n, d, k in [(5, 8, 3), (4, 16, -7), (6, 12, 40), (3, 32, 1)]:
        positions = torch.randint(0, 500, (n,), generator=g)
        pe = positional.sinusoidal(600, d, dtype=torch.float64)[positions]  # (n, D)
        cases.append((pe, k))
    mistakes = [
        Mistake(
            "the rotation goes the wrong way: your function returns PE(p - k). With pairs (s, c) = "
            "(sin, cos), the new sine is s cos(k w) + c sin(k w) and the new cosine c cos(k w) - s sin(k w).",
            lambda pe, k: _rotate(pe, k, sign=-1.0),
        ),
        Mistake(
            "the pairs are the dimensions (2i, 2i+1) (sine in the even one, cosine in the odd one), "
            "not the first and the second half of the vector.",
            lambda pe, k: _rotate(pe, k, halves=True),
        ),
        Mistake(
            "the frequency of pair i is 10000^(-2i / d_model): the exponent has 2i, not i.",
            lambda pe, k: _rotate(pe, k, exponent_step=1.0),
        ),
    ]
    return check_function(
        fn,
        exercise="shifting a positional encoding",
        cases=cases,
        mistakes=mistakes,
        reference=lambda pe, k: _rotate(pe, k),
        atol=1e-6,
        rtol=1e-5,
    )


def check_pe_self_dot(answer, d_model: int = 128) -> Result:
    """PE(p) . PE(p) for the sinusoidal encoding of width d_model (the same for every position p)."""
    return check_number(
        answer,
        exercise=f"PE(p) . PE(p) for d_model = {d_model}",
        expected=d_model / 2,
        rel_tol=1e-6,
        mistakes=[
            (
                f"each of the {d_model // 2} (sin, cos) pairs contributes sin^2 + cos^2 = 1, not each dimension.",
                float(d_model),
            ),
            (
                "that is the length |PE(p)|; the dot product of a vector with itself is the square of its length.",
                math.sqrt(d_model / 2),
            ),
            ("the encodings are not normalised to length 1: count what each (sin, cos) pair contributes.", 1.0),
        ],
    )
