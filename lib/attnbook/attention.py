"""Attention: scaled dot-product attention, masks, and additive (Bahdanau) scoring.

Masks are boolean with True = "this query may attend to this key", broadcastable to the
scores' shape (..., Tq, Tk), the same convention as ``torch.nn.functional.scaled_dot_product_attention``.
A query row with no allowed key gets all-zero weights (and so a zero output), never NaN.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from . import _checks

__all__ = [
    "masked_softmax",
    "softmax_with_temperature",
    "scaled_dot_product_attention",
    "causal_mask",
    "padding_mask",
    "AdditiveScore",
    "AdditiveAttention",
]


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dimension that puts exactly zero weight where ``mask`` is False.

    Rows where every entry is masked come out as all zeros (not NaN), and their gradient is zero.

    Shapes:
        scores: (..., Tq, Tk)
        mask:   boolean, broadcastable to (..., Tq, Tk); True = may attend
        return: (..., Tq, Tk), each row sums to 1 (or is all zeros)

    Chapter: queries, keys and values (softmax); masking (the -inf fill).
    """
    if mask is None:
        return torch.softmax(scores, dim=-1)
    any_allowed = mask.any(dim=-1, keepdim=True)  # (..., Tq, 1)
    # Rows with no allowed key are temporarily un-masked so that the softmax stays finite,
    # then zeroed: this keeps both the values and the gradients free of NaN.
    safe_mask = mask | ~any_allowed
    weights = torch.softmax(scores.masked_fill(~safe_mask, float("-inf")), dim=-1)
    return weights.masked_fill(~any_allowed, 0.0)


def softmax_with_temperature(scores: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(scores / temperature) over the last dimension.

    Low temperatures sharpen the distribution towards a one-hot on the largest score (hard lookup);
    high temperatures flatten it towards uniform.

    Shapes:
        scores: (..., N)
        return: (..., N)

    Chapter: queries, keys and values (hard lookup as the limit of soft lookup).
    """
    _checks.tensor("scores", scores, min_ndim=1, floating=True)
    temperature = _checks.positive_float("temperature", temperature)
    return torch.softmax(scores / temperature, dim=-1)


def _check_attention_inputs(q, k, v, mask):
    for name, x in (("q", q), ("k", k), ("v", v)):
        _checks.tensor(name, x, min_ndim=2, floating=True)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must have the same dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last dimension Dk, got q {_checks.shape_str(q.shape)} "
            f"and k {_checks.shape_str(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of keys Tk (dimension -2), got k {_checks.shape_str(k.shape)} "
            f"and v {_checks.shape_str(v.shape)}")
    for name, x, what in (("q", q, "queries Tq"), ("k", k, "keys Tk")):
        if x.shape[-2] == 0:
            raise ValueError(f"{name} is an empty sequence: it has 0 {what}, shape {_checks.shape_str(x.shape)}")
    if q.shape[-1] == 0 or v.shape[-1] == 0:
        raise ValueError(
            f"q, k and v need a non-zero width, got q {_checks.shape_str(q.shape)} and v {_checks.shape_str(v.shape)}")
    if k.shape[:-2] != v.shape[:-2]:
        raise ValueError(
            f"k and v must have the same batch dimensions, got k {_checks.shape_str(k.shape)} "
            f"and v {_checks.shape_str(v.shape)}")
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of q and k must be broadcastable, got q {_checks.shape_str(q.shape)} "
            f"and k {_checks.shape_str(k.shape)}") from None
    scores_shape = (*batch, q.shape[-2], k.shape[-2])
    if mask is not None:
        _checks.tensor("mask", mask, dtype=torch.bool)
        _checks.broadcastable("mask", mask, scores_shape, "the scores' shape (..., Tq, Tk)")
    return scores_shape


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    return_weights: bool = False,
):
    r"""Attention(Q, K, V) = softmax(Q K^T * scale) V, with scale = 1 / sqrt(Dk) by default.

    Shapes:
        q:    (..., Tq, Dk)
        k:    (..., Tk, Dk)
        v:    (..., Tk, Dv)
        mask: boolean, broadcastable to (..., Tq, Tk); True = may attend
        return: out (..., Tq, Dv), and weights (..., Tq, Tk) when ``return_weights=True``

    Chapter: queries, keys and values.
    """
    _check_attention_inputs(q, k, v, mask)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    else:
        scale = _checks.positive_float("scale", scale, allow_zero=True)
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., Tq, Tk)
    weights = masked_softmax(scores, mask)  # (..., Tq, Tk)
    out = weights @ v  # (..., Tq, Dv)
    return (out, weights) if return_weights else out


def causal_mask(t_q: int, t_k: int | None = None, *, offset: int = 0, device=None) -> torch.Tensor:
    """Boolean mask where query i may attend to key j iff j <= i + offset.

    With ``offset=0`` and Tq = Tk this is the lower-triangular mask of ``is_causal=True`` in
    ``F.scaled_dot_product_attention``. Use ``offset = Tk - Tq`` when the queries are the last Tq
    positions of a longer sequence (as when generating with a cache).

    Shapes:
        return: (Tq, Tk), dtype bool

    Chapter: masking.
    """
    t_q = _checks.positive_int("t_q", t_q)
    t_k = t_q if t_k is None else _checks.positive_int("t_k", t_k)
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(f"offset must be an integer, got {offset!r}")
    i = torch.arange(t_q, device=device).unsqueeze(1)  # (Tq, 1)
    j = torch.arange(t_k, device=device).unsqueeze(0)  # (1, Tk)
    return j <= i + offset  # (Tq, Tk)


def padding_mask(lengths, t_k: int | None = None, *, device=None) -> torch.Tensor:
    """Boolean mask that lets every query attend only to the first ``lengths[b]`` keys of sequence b.

    Shapes:
        lengths: (B,) integers in [1, Tk] (a list or a tensor)
        return:  (B, 1, Tk), dtype bool; broadcasts against scores (B, Tq, Tk).
                 For scores with a head dimension (B, H, Tq, Tk) use ``padding_mask(...).unsqueeze(1)``.

    Chapter: masking.
    """
    lengths = torch.as_tensor(lengths, device=device)
    if lengths.dim() != 1 or lengths.numel() == 0 or lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise ValueError(
            f"lengths must be a non-empty 1-D sequence of integers (one length per sequence), "
            f"got {lengths.dtype} of shape {_checks.shape_str(lengths.shape)}")
    longest = int(lengths.max())
    t_k = longest if t_k is None else _checks.positive_int("t_k", t_k)
    if int(lengths.min()) < 1 or longest > t_k:
        raise ValueError(f"every length must be in [1, t_k={t_k}], got lengths {lengths.tolist()}")
    j = torch.arange(t_k, device=lengths.device)  # (Tk,)
    return (j.unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(1)  # (B, 1, Tk)


class AdditiveScore(nn.Module):
    r"""Bahdanau's alignment score e_{t,i} = v^T tanh(W_1 s_t + W_2 h_i).

    Args:
        d_query: width of the queries s (the decoder state)
        d_key:   width of the keys h (the encoder states)
        d_attn:  width of the hidden layer of the scoring network

    Shapes:
        query: (..., Tq, d_query)
        keys:  (..., Tk, d_key)
        return: scores (..., Tq, Tk)

    Chapter: sequence-to-sequence and Bahdanau attention.
    """

    def __init__(self, d_query: int, d_key: int, d_attn: int):
        super().__init__()
        for name, value in (("d_query", d_query), ("d_key", d_key), ("d_attn", d_attn)):
            _checks.positive_int(name, value)
        self.W_1 = nn.Linear(d_query, d_attn, bias=False)
        self.W_2 = nn.Linear(d_key, d_attn, bias=False)
        self.v = nn.Linear(d_attn, 1, bias=False)

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        _checks.tensor("query", query, min_ndim=2, floating=True)
        _checks.tensor("keys", keys, min_ndim=2, floating=True)
        if query.shape[-1] != self.W_1.in_features:
            raise ValueError(f"query must have width d_query={self.W_1.in_features}, got shape "
                             f"{_checks.shape_str(query.shape)}")
        if keys.shape[-1] != self.W_2.in_features:
            raise ValueError(f"keys must have width d_key={self.W_2.in_features}, got shape "
                             f"{_checks.shape_str(keys.shape)}")
        projected_q = self.W_1(query).unsqueeze(-2)  # (..., Tq, 1, A)
        projected_k = self.W_2(keys).unsqueeze(-3)  # (..., 1, Tk, A)
        return self.v(torch.tanh(projected_q + projected_k)).squeeze(-1)  # (..., Tq, Tk)


class AdditiveAttention(nn.Module):
    """Additive attention: Bahdanau scores, a (masked) softmax over the keys, a weighted sum of the values.

    Shapes:
        query:  (..., Tq, d_query)
        keys:   (..., Tk, d_key)
        values: (..., Tk, Dv)
        mask:   boolean, broadcastable to (..., Tq, Tk); True = may attend
        return: context (..., Tq, Dv), and weights (..., Tq, Tk) when ``return_weights=True``

    Chapter: sequence-to-sequence and Bahdanau attention.
    """

    def __init__(self, d_query: int, d_key: int, d_attn: int):
        super().__init__()
        self.score = AdditiveScore(d_query, d_key, d_attn)

    def forward(self, query, keys, values, mask=None, *, return_weights: bool = False):
        _checks.tensor("values", values, min_ndim=2, floating=True)
        if keys.shape[-2] != values.shape[-2]:
            raise ValueError(
                f"keys and values must have the same number of positions Tk, got keys "
                f"{_checks.shape_str(keys.shape)} and values {_checks.shape_str(values.shape)}")
        scores = self.score(query, keys)  # (..., Tq, Tk)
        if mask is not None:
            _checks.tensor("mask", mask, dtype=torch.bool)
            _checks.broadcastable("mask", mask, scores.shape, "the scores' shape (..., Tq, Tk)")
        weights = masked_softmax(scores, mask)  # (..., Tq, Tk)
        context = weights @ values  # (..., Tq, Dv)
        return (context, weights) if return_weights else context
