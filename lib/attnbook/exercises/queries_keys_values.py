"""Checkers for the exercises of the chapter on queries, keys and values."""

from __future__ import annotations

import math

import torch

from .. import attention
from . import Mistake, Result, check_function, check_number

__all__ = ["check_attention", "check_masked_attention", "check_softmax_temperature", "check_score_std"]

_TRANSPOSE_HINT = "the scores are q @ k^T: transpose the keys' last two dimensions, k.transpose(-2, -1)."


def _qkv(g: torch.Generator, *shape_q_k_v):
    return tuple(torch.randn(*s, generator=g, dtype=torch.float64) for s in shape_q_k_v)


def _attention_cases():
    g = torch.Generator().manual_seed(4)
    return [
        _qkv(g, (5, 4), (4, 4), (4, 3)),  # Tk = Dk: a missing transpose still runs, so it can be recognised
        _qkv(g, (2, 3, 8), (2, 6, 8), (2, 6, 5)),
        _qkv(g, (2, 2, 4, 16), (2, 2, 7, 16), (2, 2, 7, 16)),
    ]


def _softmax(x, dim=-1):
    return torch.softmax(x, dim=dim)


def check_attention(fn) -> Result:
    """``fn(q, k, v)`` must return softmax(q k^T / sqrt(Dk)) v for (..., Tq, Dk), (..., Tk, Dk), (..., Tk, Dv)."""

    def scores(q, k, scale):
        return q @ k.transpose(-2, -1) * scale

    mistakes = [
        Mistake(
            "the scores are not scaled: divide q @ k^T by sqrt(d_k), the width of the queries and keys.",
            lambda q, k, v: _softmax(scores(q, k, 1.0)) @ v,
        ),
        Mistake(
            "the scores are divided by d_k; divide by its square root, sqrt(d_k).",
            lambda q, k, v: _softmax(scores(q, k, 1 / q.shape[-1])) @ v,
        ),
        Mistake(
            "the softmax is over the wrong axis: each query's weights over the keys must sum to 1, "
            "so take the softmax over the last dimension (dim=-1).",
            lambda q, k, v: _softmax(scores(q, k, q.shape[-1] ** -0.5), dim=-2) @ v,
        ),
        Mistake(_TRANSPOSE_HINT, lambda q, k, v: _softmax(q @ k / math.sqrt(q.shape[-1])) @ v),
        Mistake(
            "the scores go straight into the weighted sum: turn them into weights with a softmax first.",
            lambda q, k, v: scores(q, k, q.shape[-1] ** -0.5) @ v,
        ),
    ]
    return check_function(
        fn,
        exercise="scaled dot-product attention",
        reference=attention.scaled_dot_product_attention,
        cases=_attention_cases(),
        mistakes=mistakes,
        error_hints=[("shapes cannot be multiplied", _TRANSPOSE_HINT), ("must match the size", _TRANSPOSE_HINT)],
        gradients=True,
    )


def _masked_cases():
    g = torch.Generator().manual_seed(6)
    cases = []
    for tq, tk, d in [(3, 4, 4), (5, 6, 8)]:
        q, k, v = _qkv(g, (tq, d), (tk, d), (tk, d))
        mask = torch.rand(tq, tk, generator=g) > 0.4
        mask[:, 0] = True  # every query may attend to at least one key
        cases.append((q, k, v, mask))
    q, k, v = _qkv(g, (2, 3, 4), (2, 5, 4), (2, 5, 2))
    cases.append((q, k, v, attention.padding_mask([2, 5])))  # a batch with a padded sequence
    return cases


def check_masked_attention(fn) -> Result:
    """``fn(q, k, v, mask)``: attention where query i may use key j only if ``mask[..., i, j]`` is True."""

    def plain(q, k, v, mask):
        return attention.scaled_dot_product_attention(q, k, v)

    def inverted(q, k, v, mask):
        return attention.scaled_dot_product_attention(q, k, v, ~mask)

    def zero_filled(q, k, v, mask):
        s = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, 0.0)
        return _softmax(s) @ v

    def weights_zeroed_after(q, k, v, mask):
        w = _softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, 0.0)
        return w @ v

    mistakes = [
        Mistake(
            "the mask is ignored: the output is what unmasked attention gives. Set the scores of "
            "forbidden keys to -inf before the softmax (scores.masked_fill(~mask, float('-inf'))).",
            plain,
        ),
        Mistake("the mask is inverted: True means 'may attend', so fill where the mask is False (~mask).", inverted),
        Mistake(
            "forbidden scores are set to 0, but exp(0) = 1 still gives them weight; set them to -inf.", zero_filled
        ),
        Mistake(
            "the weights of forbidden keys are zeroed after the softmax, so the rest no longer sum to 1; "
            "mask the scores before the softmax instead.",
            weights_zeroed_after,
        ),
    ]
    return check_function(
        fn,
        exercise="masked attention",
        reference=attention.scaled_dot_product_attention,
        cases=_masked_cases(),
        mistakes=mistakes,
        gradients=True,
    )


def check_softmax_temperature(fn) -> Result:
    """``fn(scores, temperature)`` must return softmax(scores / temperature) over the last dimension."""
    g = torch.Generator().manual_seed(8)
    cases = [
        (torch.tensor([2.1, 0.3, -0.5, 1.8], dtype=torch.float64), 1.0),
        (torch.randn(3, 5, generator=g, dtype=torch.float64), 0.25),
        (torch.randn(2, 6, generator=g, dtype=torch.float64) * 3, 10.0),
        (torch.tensor([1000.0, 999.0, 990.0], dtype=torch.float64), 1.0),  # large scores: needs the max trick
        # a batch with a large row and a small one: one maximum for the whole tensor underflows the small row
        (torch.tensor([[1000.0, 999.0, 990.0], [0.0, 1.0, -2.0]], dtype=torch.float64), 1.0),
        # a row whose scores spread over 2000: exp(z - min) overflows, exp(z - max) does not
        (torch.tensor([[1000.0, -1000.0, 0.0], [0.5, 0.2, -0.1]], dtype=torch.float64), 1.0),
    ]

    def shifted(s, t, by):
        z = s / t
        e = torch.exp(z - by(z))
        return e / e.sum(-1, keepdim=True)

    mistakes = [
        Mistake(
            "the scores are multiplied by the temperature; divide them by it, softmax(scores / τ).",
            lambda s, t: torch.softmax(s * t, dim=-1),
        ),
        Mistake(
            "the softmax is over the wrong axis: normalise over the last dimension (dim=-1).",
            lambda s, t: torch.softmax(s / t, dim=0),
        ),
        Mistake(
            "exp overflows for large scores: subtract each row's maximum before exp "
            "(softmax is unchanged by adding a constant to every score).",
            lambda s, t: torch.exp(s / t) / torch.exp(s / t).sum(-1, keepdim=True),
        ),
        Mistake(
            "one maximum for the whole tensor is subtracted, so a row far below it underflows to 0 / 0 (NaN): "
            "subtract each row's own maximum, z.max(dim=-1, keepdim=True).values.",
            lambda s, t: shifted(s, t, lambda z: z.max()),
        ),
        Mistake(
            "each row's minimum is subtracted: exp(z - min) still overflows when a row's scores spread widely; "
            "subtract the row's maximum, so that every exponent is <= 0.",
            lambda s, t: shifted(s, t, lambda z: z.min(dim=-1, keepdim=True).values),
        ),
    ]
    return check_function(
        fn,
        exercise="softmax with temperature",
        reference=attention.softmax_with_temperature,
        cases=cases,
        mistakes=mistakes,
        gradients=True,
    )


def check_score_std(answer, d_k: int = 64) -> Result:
    """The standard deviation of q . k for q, k with d_k independent standard-normal entries (before scaling)."""
    return check_number(
        answer,
        exercise=f"standard deviation of q.k for d_k = {d_k}",
        expected=math.sqrt(d_k),
        rel_tol=0.02,
        mistakes=[
            (f"{d_k} is the variance of q.k; the standard deviation is its square root.", float(d_k)),
            ("1 is the standard deviation after dividing by sqrt(d_k); the question asks before scaling.", 1.0),
        ],
    )
