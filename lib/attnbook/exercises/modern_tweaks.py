"""Checkers for the exercises of the chapter on modern tweaks (RMSNorm, SwiGLU, RoPE, the KV cache)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import positional
from . import Mistake, Result, check_function, check_number

__all__ = ["check_rmsnorm", "check_swiglu", "check_rope", "check_kv_cache_bytes"]


def _rmsnorm_reference(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def check_rmsnorm(fn) -> Result:
    """``fn(x, weight, eps)`` must return x / sqrt(mean(x^2) + eps) * weight over the last dimension."""
    g = torch.Generator().manual_seed(11)
    cases = []
    for shape, eps in (((4, 6), 1e-5), ((2, 3, 8), 0.5), ((5,), 2.0)):
        x = torch.randn(*shape, generator=g, dtype=torch.float64) * 2 + 1  # a non-zero mean, on purpose
        weight = torch.rand(shape[-1], generator=g, dtype=torch.float64) + 0.5
        cases.append((x, weight, eps))
    mistakes = [
        Mistake(
            "the mean is subtracted: that is LayerNorm. RMSNorm divides x itself by its root mean square.",
            lambda x, w, eps: (
                (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps) * w
            ),
        ),
        Mistake(
            "eps is added outside the square root; it goes inside: sqrt(mean(x^2) + eps).",
            lambda x, w, eps: x / (torch.sqrt(x.pow(2).mean(-1, keepdim=True)) + eps) * w,
        ),
        Mistake(
            "the weight (gamma) is missing: multiply the normalised vector by weight.",
            lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps),
        ),
        Mistake(
            "the squares are summed, not averaged: the root *mean* square divides by the width D.",
            lambda x, w, eps: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w,
        ),
        Mistake(
            "the mean is taken over the wrong dimension: normalise each vector over its last dimension.",
            lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + eps) * w,
        ),
    ]
    return check_function(
        fn, exercise="RMSNorm", reference=_rmsnorm_reference, cases=cases, mistakes=mistakes, gradients=True
    )


def _swiglu_reference(x, W_1, W_2, W_3):
    return (F.silu(x @ W_1) * (x @ W_2)) @ W_3


def check_swiglu(fn) -> Result:
    """``fn(x, W_1, W_2, W_3)`` must return (SiLU(x W_1) * (x W_2)) W_3, weights stored as (in, out)."""
    g = torch.Generator().manual_seed(12)
    cases = []
    for lead, d, h in (((5,), 4, 6), ((2, 3), 6, 16)):
        x = torch.randn(*lead, d, generator=g, dtype=torch.float64)
        cases.append((x, *(torch.randn(*s, generator=g, dtype=torch.float64) for s in ((d, h), (d, h), (h, d)))))
    mistakes = [
        Mistake(
            "the gate is a sigmoid: that is GLU. SwiGLU gates with SiLU(z) = z * sigmoid(z) (F.silu).",
            lambda x, a, b, c: (torch.sigmoid(x @ a) * (x @ b)) @ c,
        ),
        Mistake(
            "the gate is applied to x W_2; it belongs to x W_1: SiLU(x W_1) * (x W_2).",
            lambda x, a, b, c: ((x @ a) * F.silu(x @ b)) @ c,
        ),
        Mistake(
            "the gate is a ReLU (that is ReGLU); SwiGLU uses SiLU (F.silu).",
            lambda x, a, b, c: (F.relu(x @ a) * (x @ b)) @ c,
        ),
        Mistake(
            "the two branches are added; SwiGLU multiplies them element by element.",
            lambda x, a, b, c: (F.silu(x @ a) + (x @ b)) @ c,
        ),
    ]
    return check_function(
        fn,
        exercise="SwiGLU",
        reference=_swiglu_reference,
        cases=cases,
        mistakes=mistakes,
        error_hints=[("cannot be multiplied", "the weights are stored (in, out): use x @ W_1.")],
        gradients=True,
    )


def _rope_halves(x, offset):
    """The rotate-half layout (pairs i and i + Dh/2): a different convention from the book's."""
    Dh = x.shape[-1]
    theta = positional.angles(torch.arange(offset, offset + x.shape[-2]), Dh).to(x.dtype)  # (T, Dh/2)
    x1, x2 = x[..., : Dh // 2], x[..., Dh // 2 :]
    return torch.cat([x1 * theta.cos() - x2 * theta.sin(), x1 * theta.sin() + x2 * theta.cos()], dim=-1)


def check_rope(fn) -> Result:
    """``fn(x, offset)`` must rotate each pair (2i, 2i+1) of x at position p = offset + t by p * w_i."""
    g = torch.Generator().manual_seed(13)
    cases = [
        (torch.randn(5, 4, generator=g, dtype=torch.float64), 0),
        (torch.randn(2, 3, 6, 8, generator=g, dtype=torch.float64), 0),
        (torch.randn(1, 4, 16, generator=g, dtype=torch.float64), 7),
    ]

    def reference(x, offset):
        return positional.apply_rope(x, offset=offset)

    def wrong_sign(x, offset):  # rotating by -theta
        Dh = x.shape[-1]
        theta = positional.angles(torch.arange(offset, offset + x.shape[-2]), Dh).to(x.dtype)  # (T, Dh/2)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * theta.cos() + x2 * theta.sin(), -x1 * theta.sin() + x2 * theta.cos()], -1).flatten(-2)

    mistakes = [
        Mistake(
            "the pairs are (i, i + Dh/2) (the rotate-half layout); here a pair is two neighbours, (2i, 2i+1).",
            _rope_halves,
        ),
        Mistake(
            "the offset is ignored: the first row sits at position `offset`, not 0.",
            lambda x, offset: positional.apply_rope(x),
        ),
        Mistake(
            "the rotation goes the wrong way: out[2i] = x[2i] cos - x[2i+1] sin, out[2i+1] = x[2i] sin + x[2i+1] cos.",
            wrong_sign,
        ),
    ]
    return check_function(
        fn, exercise="rotary position embedding", reference=reference, cases=cases, mistakes=mistakes, gradients=True
    )


def check_kv_cache_bytes(answer) -> Result:
    """The KV cache of a 32-layer model, 32 query heads, 8 key/value heads of width 128, 4096 tokens, 2-byte numbers."""
    n_layers, n_heads, n_kv_heads, d_head, T, nbytes = 32, 32, 8, 128, 4096, 2
    right = 2 * n_layers * n_kv_heads * d_head * T * nbytes
    return check_number(
        answer,
        exercise="KV cache size",
        expected=right,
        rel_tol=1e-6,
        mistakes=[
            ("the cache holds keys *and* values: multiply by 2.", right / 2),
            ("only the 8 key/value heads are cached, not the 32 query heads.", right * n_heads / n_kv_heads),
            (
                "the same with the 32 query heads and keys only: count the 8 key/value heads, keys and values.",
                right * n_heads / n_kv_heads / 2,
            ),
            ("every layer has its own cache: multiply by the 32 layers.", right / n_layers),
        ],
    )
