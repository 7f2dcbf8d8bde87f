"""Checkers for the exercises of the chapter on multi-head attention."""

from __future__ import annotations

import math

import torch

from . import Mistake, Result, check_function, check_number

__all__ = ["check_split_heads", "check_multi_head_attention", "check_parameter_count", "check_weights_memory"]


def _split(x, n_heads):
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads).transpose(1, 2)  # (B, H, T, Dh)


def _split_cases():
    g = torch.Generator().manual_seed(2)
    return [
        (torch.randn(2, 5, 12, generator=g, dtype=torch.float64), 3),
        (torch.randn(1, 4, 8, generator=g, dtype=torch.float64), 2),
        (torch.randn(3, 6, 16, generator=g, dtype=torch.float64), 4),
    ]


def check_split_heads(fn) -> Result:
    """``fn(x, n_heads)``: (B, T, D) -> (B, H, T, Dh), head h holding columns h*Dh to (h+1)*Dh - 1."""

    def no_transpose_view(x, H):
        B, T, D = x.shape
        return x.reshape(B, H, T, D // H)

    def interleaved(x, H):
        B, T, D = x.shape
        return x.view(B, T, D // H, H).permute(0, 3, 1, 2)  # head h gets columns h, h + H, h + 2H, ...

    mistakes = [
        Mistake(
            "reshaping (B, T, D) straight to (B, H, T, Dh) mixes up tokens and heads: view it as "
            "(B, T, H, Dh) first, then swap the T and H axes with .transpose(1, 2).",
            no_transpose_view,
        ),
        Mistake(
            "each head takes every H-th column; head h must own the contiguous block of columns "
            "h*Dh to (h+1)*Dh - 1: view as (B, T, H, Dh), not (B, T, Dh, H).",
            interleaved,
        ),
        Mistake(
            "the axes are (B, T, H, Dh); the heads must come before the tokens: (B, H, T, Dh) (add .transpose(1, 2)).",
            lambda x, H: _split(x, H).transpose(1, 2),
        ),
    ]
    return check_function(
        fn, exercise="splitting into heads", reference=_split, cases=_split_cases(), mistakes=mistakes
    )


def _mha(x, W_q, W_k, W_v, W_o, n_heads, *, scale_width=None, merge="right", dim=-1, use_W_o=True):
    B, T, D = x.shape
    Dh = D // n_heads
    q, k, v = (_split(x @ W, n_heads) for W in (W_q, W_k, W_v))  # each (B, H, T, Dh)
    scores = q @ k.transpose(-2, -1) / math.sqrt(scale_width or Dh)  # (B, H, T, T)
    heads = torch.softmax(scores, dim=dim) @ v  # (B, H, T, Dh)
    if merge == "right":
        merged = heads.transpose(1, 2).reshape(B, T, D)  # (B, T, H*Dh)
    else:
        merged = heads.reshape(B, T, D)  # wrong: interleaves tokens and heads
    return merged @ W_o if use_W_o else merged


def _mha_cases():
    g = torch.Generator().manual_seed(9)
    cases = []
    for B, T, D, H in [(2, 5, 8, 2), (1, 7, 12, 3), (2, 4, 16, 4)]:
        x = torch.randn(B, T, D, generator=g, dtype=torch.float64)
        Ws = [torch.randn(D, D, generator=g, dtype=torch.float64) / math.sqrt(D) for _ in range(4)]
        cases.append((x, *Ws, H))
    return cases


def check_multi_head_attention(fn) -> Result:
    """``fn(x, W_q, W_k, W_v, W_o, n_heads)``: multi-head self-attention without biases, weights applied as x @ W."""
    mistakes = [
        Mistake(
            "the scores are divided by sqrt(D); each head works in width Dh = D / H, so divide by sqrt(Dh).",
            lambda x, Wq, Wk, Wv, Wo, H: _mha(x, Wq, Wk, Wv, Wo, H, scale_width=x.shape[-1]),
        ),
        Mistake(
            "the heads are merged without moving the head axis back: (B, H, T, Dh) must become "
            "(B, T, H, Dh) (.transpose(1, 2)) before the reshape to (B, T, D).",
            lambda x, Wq, Wk, Wv, Wo, H: _mha(x, Wq, Wk, Wv, Wo, H, merge="wrong"),
        ),
        Mistake(
            "the softmax is over the queries; it must be over the keys, the last axis (dim=-1). "
            "(softmax(S, dim=1) is right for a T x T matrix, not for H x T x T.)",
            lambda x, Wq, Wk, Wv, Wo, H: _mha(x, Wq, Wk, Wv, Wo, H, dim=-2),
        ),
        Mistake(
            "the output projection W_o is missing: multiply the merged heads by W_o.",
            lambda x, Wq, Wk, Wv, Wo, H: _mha(x, Wq, Wk, Wv, Wo, H, use_W_o=False),
        ),
    ]
    return check_function(
        fn, exercise="multi-head attention", reference=_mha, cases=_mha_cases(), mistakes=mistakes, gradients=(0,)
    )


def check_parameter_count(answer, d_model: int = 512, n_heads: int = 8) -> Result:
    """The number of parameters of MultiHeadAttention(d_model, n_heads) with biases."""
    D, H = d_model, n_heads
    return check_number(
        answer,
        exercise=f"parameters of multi-head attention, D = {D}, H = {H}",
        expected=4 * D * D + 4 * D,
        rel_tol=1e-9,
        mistakes=[
            (
                f"the heads share the D x D matrices (each head owns D/H of their columns), so the count does not "
                f"grow with H: there is no factor {H}.",
                H * (4 * D * D + 4 * D),
            ),
            ("the biases are missing: each of the four projections has D of them.", 4 * D * D),
            (
                "the output projection W_o counts too: four D x D matrices (and four bias vectors), not three.",
                3 * D * D + 3 * D,
            ),
            (f"each head's matrices are D x Dh with Dh = D/H = {D // H}, not Dh x Dh.", 4 * H * (D // H) ** 2 + 4 * D),
        ],
    )


def check_weights_memory(answer, seq_len: int = 4096, n_heads: int = 8) -> Result:
    """MiB needed to store float32 attention weights for one sequence of seq_len tokens in one layer with
    n_heads heads.
    """
    T, H = seq_len, n_heads
    expected = H * T * T * 4 / 2**20
    return check_number(
        answer,
        exercise=f"memory of the attention weights, H = {H}, T = {T}",
        expected=expected,
        rel_tol=1e-3,
        mistakes=[
            (f"every head has its own T x T weight matrix: multiply by H = {H}.", T * T * 4 / 2**20),
            ("that is the number of weights; float32 takes 4 bytes each.", H * T * T / 2**20),
            ("the answer is asked in MiB (2^20 bytes).", float(H * T * T * 4)),
            ("float32 takes 4 bytes, not 8.", H * T * T * 8 / 2**20),
            ("a MiB is 2^20 = 1,048,576 bytes, not 10^6.", H * T * T * 4 / 1e6),
        ],
    )
