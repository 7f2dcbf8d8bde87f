"""Attention: scaled dot-product attention, masks, and additive (Bahdanau) scoring.

Masks are boolean with True = "this query may attend to this key", broadcastable to the
scores' shape (..., Tq, Tk), the same convention as ``torch.nn.functional.scaled_dot_product_attention``.
A query row with no allowed key gets all-zero weights (and so a zero output), never NaN.

A *score bias* b is a float tensor of the same broadcastable shape that is added to the scaled scores,
softmax(q . k / sqrt(Dk) + b_ij): relative positions, graph distances, any structure between tokens i and
j that the scores should see. A float ``attn_mask`` of ``F.scaled_dot_product_attention`` is such a bias.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import _checks
from .positional import apply_rope

__all__ = [
    "check_qkv",
    "masked_softmax",
    "softmax_with_temperature",
    "scaled_dot_product_attention",
    "causal_mask",
    "padding_mask",
    "AdditiveScore",
    "AdditiveAttention",
    "MultiHeadAttention",
    "KVCache",
    "GroupedQueryAttention",
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


def check_qkv(q, k, v, mask=None, *, same_batch: bool = False, score_bias=None) -> tuple[int, ...]:
    """Check queries, keys, values (a mask, a score bias) for attention; return the scores' shape (..., Tq, Tk).

    Every attention function of the book calls this, so that bad input gets the same clear error
    everywhere. ``same_batch`` asks q, k and v to have identical batch dimensions (no broadcasting).

    Shapes:
        q: (..., Tq, Dk), k: (..., Tk, Dk), v: (..., Tk, Dv); mask: boolean, broadcastable to (..., Tq, Tk);
        score_bias: floating point, broadcastable to (..., Tq, Tk)
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        _checks.tensor(name, x, min_ndim=2, floating=True)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must have the same dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on the same device, got q {q.device}, k {k.device}, v {v.device}")
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
    if same_batch and not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(
            f"q, k and v must have the same batch dimensions (...), got q {_checks.shape_str(q.shape)}, "
            f"k {_checks.shape_str(k.shape)} and v {_checks.shape_str(v.shape)}")
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
    if score_bias is not None:
        check_score_bias(score_bias, scores_shape, "the scores' shape (..., Tq, Tk)")
    return scores_shape


def check_score_bias(score_bias, target, what: str) -> torch.Tensor:
    """Check that ``score_bias`` is a finite floating-point tensor broadcastable to ``target``; return it."""
    _checks.tensor("score_bias", score_bias, floating=True)
    _checks.broadcastable("score_bias", score_bias, target, what)
    if not torch.isfinite(score_bias).all():
        raise ValueError("score_bias must be finite: forbid a key with the boolean mask (False), not with -inf")
    return score_bias


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    score_bias: torch.Tensor | None = None,
    return_weights: bool = False,
):
    r"""Attention(Q, K, V) = softmax(Q K^T * scale + B) V, with scale = 1 / sqrt(Dk) by default and B = 0.

    ``score_bias`` B adds b_ij to the score of query i and key j after the scaling, as a float
    ``attn_mask`` does in ``F.scaled_dot_product_attention``; ``mask`` still decides which keys count.

    Shapes:
        q:    (..., Tq, Dk)
        k:    (..., Tk, Dk)
        v:    (..., Tk, Dv)
        mask: boolean, broadcastable to (..., Tq, Tk); True = may attend
        score_bias: floating point, broadcastable to (..., Tq, Tk)
        return: out (..., Tq, Dv), and weights (..., Tq, Tk) when ``return_weights=True``

    Chapter: queries, keys and values; beyond text (the score bias: distances in a graph).
    """
    check_qkv(q, k, v, mask, score_bias=score_bias)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    else:
        scale = _checks.positive_float("scale", scale, allow_zero=True)
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., Tq, Tk)
    if score_bias is not None:
        scores = scores + score_bias.to(scores.dtype)  # (..., Tq, Tk)
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
    r"""Bahdanau's alignment score e_{t,i} = v^T tanh(W_1 s_{t-1} + W_2 h_i).

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

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """W_2 h_i for every key: compute it once per source sentence, pass it as ``projected_keys`` at each step.

        Shapes:
            keys:   (..., Tk, d_key)
            return: (..., Tk, d_attn)
        """
        _checks.tensor("keys", keys, min_ndim=2, floating=True)
        if keys.shape[-1] != self.W_2.in_features:
            raise ValueError(f"keys must have width d_key={self.W_2.in_features}, got shape "
                             f"{_checks.shape_str(keys.shape)}")
        return self.W_2(keys)  # (..., Tk, A)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, *,
                projected_keys: torch.Tensor | None = None) -> torch.Tensor:
        _checks.tensor("query", query, min_ndim=2, floating=True)
        _checks.tensor("keys", keys, min_ndim=2, floating=True)
        if projected_keys is not None:  # W_2 keys, precomputed by project_keys (decoders reuse it every step)
            _checks.tensor("projected_keys", projected_keys, min_ndim=2, floating=True)
            expected = (*keys.shape[:-1], self.W_2.out_features)
            if tuple(projected_keys.shape) != expected:
                raise ValueError(f"projected_keys must have shape {_checks.shape_str(expected)} (keys' shape with "
                                 f"width d_attn), got {_checks.shape_str(projected_keys.shape)}")
        if query.shape[-1] != self.W_1.in_features:
            raise ValueError(f"query must have width d_query={self.W_1.in_features}, got shape "
                             f"{_checks.shape_str(query.shape)}")
        if keys.shape[-1] != self.W_2.in_features:
            raise ValueError(f"keys must have width d_key={self.W_2.in_features}, got shape "
                             f"{_checks.shape_str(keys.shape)}")
        projected_q = self.W_1(query).unsqueeze(-2)  # (..., Tq, 1, A)
        if projected_keys is None:
            projected_keys = self.W_2(keys)  # (..., Tk, A)
        projected_k = projected_keys.unsqueeze(-3)  # (..., 1, Tk, A)
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

    def forward(self, query, keys, values, mask=None, *, return_weights: bool = False,
                projected_keys: torch.Tensor | None = None):
        _checks.tensor("values", values, min_ndim=2, floating=True)
        if keys.shape[-2] != values.shape[-2]:
            raise ValueError(
                f"keys and values must have the same number of positions Tk, got keys "
                f"{_checks.shape_str(keys.shape)} and values {_checks.shape_str(values.shape)}")
        scores = self.score(query, keys, projected_keys=projected_keys)  # (..., Tq, Tk)
        if mask is not None:
            _checks.tensor("mask", mask, dtype=torch.bool)
            _checks.broadcastable("mask", mask, scores.shape, "the scores' shape (..., Tq, Tk)")
        weights = masked_softmax(scores, mask)  # (..., Tq, Tk)
        context = weights @ values  # (..., Tq, Dv)
        return (context, weights) if return_weights else context



def _heads(q, k, v, mask, fused_causal: bool, p: float, return_weights: bool, score_bias=None):
    """The attention of every head, given projected q (B, H, Tq, Dh), k and v (B, H or H_kv, Tk, Dh).

    PyTorch's fused kernel when the weights are not asked for (with zeros, not NaN, for a query that may
    attend to no key), else the explicit softmax. ``score_bias`` (broadcastable to (B, H, Tq, Tk)) is added
    to the scaled scores; for the fused kernel it becomes a float ``attn_mask`` with -inf where ``mask`` is
    False. Returns (heads (B, H, Tq, Dh), weights or None).
    """
    if return_weights:
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, Tq, Tk)
        if score_bias is not None:
            scores = scores + score_bias.to(scores.dtype)
        weights = masked_softmax(scores, mask)  # (B, H, Tq, Tk)
        return F.dropout(weights, p) @ v, weights  # (B, H, Tq, Dh)
    attn_mask = mask
    if score_bias is not None:
        attn_mask = score_bias.to(q.dtype)  # (.., Tq, Tk) float: added to the scores by the kernel
        if mask is not None:  # rows with no allowed key stay finite here and are zeroed below
            allowed = mask | ~mask.any(dim=-1, keepdim=True)
            attn_mask = torch.where(allowed, attn_mask, float("-inf"))  # broadcast to both shapes
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p, is_causal=fused_causal)
    if mask is not None:  # a query with no allowed key gives zeros on every PyTorch version
        heads = heads.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return heads, None  # (B, H, Tq, Dh)


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention: H heads of width Dh = D / H, each attending in its own subspace.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W_o with head_h = Attention(Q W_q^h, K W_k^h, V W_v^h).
    The H per-head projections are stored together, as the columns of ``W_q``, ``W_k`` and ``W_v``
    (each D x D), so H heads cost the same parameters as one head of width D.

    Two paths with the same parameters: with ``return_weights=True`` the explicit path computes the
    (B, H, Tq, Tk) weights with :func:`scaled_dot_product_attention`; otherwise the fast path calls
    ``torch.nn.functional.scaled_dot_product_attention`` (fused kernels, no weights returned).

    ``score_bias`` is added to every head's scaled scores (see :func:`scaled_dot_product_attention`): one
    bias for all heads, or one per head (B, H, Tq, Tk), as the distance biases of graph transformers.

    Shapes:
        query: (B, Tq, D)
        key:   (B, Tk, D), defaults to query (self-attention)
        value: (B, Tk, D), defaults to key
        mask:  boolean, True = may attend; (Tq, Tk), (B, Tq, Tk) (e.g. ``padding_mask(lengths)``, which is
               (B, 1, Tk)) or (B, H, Tq, Tk); rank-2 and rank-3 masks apply to every head
        score_bias: floating point, with the same shapes as ``mask``
        return: (B, Tq, D), and weights (B, H, Tq, Tk) when ``return_weights=True``

    Chapter: multi-head attention; beyond text (the score bias).
    """

    def __init__(self, d_model: int, n_heads: int, *, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        _checks.positive_int("d_model", d_model)
        _checks.positive_int("n_heads", n_heads)
        if d_model % n_heads:
            raise ValueError(f"d_model must be divisible by n_heads, got d_model={d_model} and n_heads={n_heads}")
        self.dropout = _checks.positive_float("dropout", dropout, allow_zero=True)
        if self.dropout >= 1:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def _project(self, query, key, value):
        """Q, K, V = query W_q, key W_k, value W_v, as one matrix product when the inputs coincide."""
        layers = (self.W_q, self.W_k, self.W_v)
        inputs = (query, key, value)
        groups = [[0]]
        for i in (1, 2):  # group consecutive projections of the same tensor into one matmul
            (groups[-1].append(i) if inputs[i] is inputs[groups[-1][0]] else groups.append([i]))
        out = []
        for group in groups:
            weight = torch.cat([layers[i].weight for i in group])  # (len(group) * D, D)
            bias = None if layers[0].bias is None else torch.cat([layers[i].bias for i in group])
            out.extend(F.linear(inputs[group[0]], weight, bias).chunk(len(group), dim=-1))
        return out

    def _check(self, query, key, value, mask, score_bias=None):
        for name, x in (("query", query), ("key", key), ("value", value)):
            _checks.tensor(name, x, ndim=3, floating=True)
            if x.shape[-1] != self.d_model:
                raise ValueError(f"{name} must have width d_model={self.d_model}, got shape {_checks.shape_str(x.shape)}")
            if x.shape[1] == 0:
                raise ValueError(f"{name} is an empty sequence: shape {_checks.shape_str(x.shape)}")
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(f"key and value must have the same batch size and length (B, Tk), got key "
                             f"{_checks.shape_str(key.shape)} and value {_checks.shape_str(value.shape)}")
        if query.shape[0] != key.shape[0]:
            raise ValueError(f"query and key must have the same batch size B, got query "
                             f"{_checks.shape_str(query.shape)} and key {_checks.shape_str(key.shape)}")
        target = (query.shape[0], self.n_heads, query.shape[1], key.shape[1])
        return _head_mask(mask, target), _head_bias(score_bias, target)

    def forward(self, query, key=None, value=None, mask=None, *, is_causal: bool = False,
                return_weights: bool = False, score_bias=None):
        key = query if key is None else key
        value = key if value is None else value
        mask, score_bias = self._check(query, key, value, mask, score_bias)
        B, T_q, D = query.shape
        T_k = key.shape[1]
        # A causal mask alone goes to the fused kernel as is_causal=True (the same top-left aligned
        # triangle as causal_mask(Tq, Tk)); combined with another mask or a bias, or for the weights, it is built.
        fused_causal = is_causal and mask is None and score_bias is None and not return_weights
        if is_causal and not fused_causal:
            causal = causal_mask(T_q, T_k, device=query.device)  # (Tq, Tk)
            mask = causal if mask is None else mask & causal
        q, k, v = self._project(query, key, value)  # each (B, T, D)
        q = q.view(B, T_q, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, Tq, Dh)
        k = k.view(B, T_k, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, Tk, Dh)
        v = v.view(B, T_k, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, Tk, Dh)
        heads, weights = _heads(q, k, v, mask, fused_causal, self.dropout if self.training else 0.0,
                                return_weights, score_bias)  # (B, H, Tq, Dh)
        out = self.W_o(heads.transpose(1, 2).reshape(B, T_q, D))  # (B, Tq, D)
        return (out, weights) if return_weights else out


def _head_mask(mask, target):
    """A boolean mask of rank 2, 3 or 4 checked against (B, H, Tq, Tk); rank 3 gets a head dimension."""
    if mask is None:
        return None
    _checks.tensor("mask", mask, dtype=torch.bool)
    if mask.dim() not in (2, 3, 4):
        raise ValueError(f"mask must have 2 (Tq, Tk), 3 (B, Tq, Tk) or 4 (B, H, Tq, Tk) dimensions, "
                         f"got shape {_checks.shape_str(mask.shape)}")
    if mask.dim() == 3:
        mask = mask.unsqueeze(1)  # (B, 1, Tq, Tk): the same mask for every head
    _checks.broadcastable("mask", mask, target, "(B, H, Tq, Tk)")
    return mask


def _head_bias(score_bias, target):
    """A score bias of rank 2, 3 or 4 checked against (B, H, Tq, Tk); rank 3 gets a head dimension."""
    if score_bias is None:
        return None
    _checks.tensor("score_bias", score_bias, floating=True)
    if score_bias.dim() not in (2, 3, 4):
        raise ValueError(f"score_bias must have 2 (Tq, Tk), 3 (B, Tq, Tk) or 4 (B, H, Tq, Tk) dimensions, "
                         f"got shape {_checks.shape_str(score_bias.shape)}")
    if score_bias.dim() == 3:
        score_bias = score_bias.unsqueeze(1)  # (B, 1, Tq, Tk): the same bias for every head
    return check_score_bias(score_bias, target, "(B, H, Tq, Tk)")


class KVCache:
    """The keys and values one attention layer has computed so far, kept for generating the next tokens.

    Starts empty; :meth:`append` adds the keys and values of new positions and returns all of them.
    ``length`` is the number of positions held (the offset of the next token).

    Shapes:
        k, v: (B, H_kv, T_past, Dh) once something is appended (None before)

    Chapter: modern tweaks (KV cache).
    """

    def __init__(self):
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add (B, H_kv, T_new, Dh) keys and values; return all keys and values (B, H_kv, T_past + T_new, Dh)."""
        if self.k is not None:
            expected = (k.shape[0], k.shape[1], self.k.shape[2], k.shape[3])
            for name, held in (("cache.k", self.k), ("cache.v", self.v)):
                if tuple(held.shape) != expected:
                    raise ValueError(f"{name} must have shape (B, H_kv, T_past, Dh) = {_checks.shape_str(expected)} "
                                     f"to match the new keys, got {_checks.shape_str(held.shape)}")
            k = torch.cat([self.k, k], dim=2)  # (B, H_kv, T_past + T_new, Dh)
            v = torch.cat([self.v, v], dim=2)  # (B, H_kv, T_past + T_new, Dh)
        self.k, self.v = k, v
        return k, v


class GroupedQueryAttention(nn.Module):
    r"""Grouped-query attention: H query heads share H_kv key/value heads, H / H_kv queries per group.

    With ``n_kv_heads == n_heads`` it is :class:`MultiHeadAttention` (same parameter names, same output);
    with ``n_kv_heads == 1`` it is multi-query attention. ``W_k`` and ``W_v`` map D to H_kv * Dh, so
    the keys and values, and the KV cache, shrink by the factor H / H_kv. ``rope=True`` rotates queries
    and keys with :func:`attnbook.positional.apply_rope` (self-attention only). With a :class:`KVCache`
    the queries are the new positions, the keys and values those of the cache plus the new ones.
    ``score_bias`` is added to the scaled scores, as in :class:`MultiHeadAttention`.

    Shapes:
        query: (B, Tq, D); key, value: (B, Tk, D), default to query
        mask:  boolean, True = may attend, broadcastable to (B, H, Tq, Tk)
        score_bias: floating point, broadcastable to (B, H, Tq, Tk) (rank 3 applies to every head)
        return: (B, Tq, D), and weights (B, H, Tq, Tk) when ``return_weights=True``

    Chapter: modern tweaks (grouped-query attention, RoPE, KV cache).
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None, *, dropout: float = 0.0,
                 bias: bool = True, rope: bool = False, rope_base: float = 10000.0):
        super().__init__()
        _checks.positive_int("d_model", d_model)
        _checks.positive_int("n_heads", n_heads)
        n_kv_heads = n_heads if n_kv_heads is None else _checks.positive_int("n_kv_heads", n_kv_heads)
        if d_model % n_heads:
            raise ValueError(f"d_model must be divisible by n_heads, got d_model={d_model} and n_heads={n_heads}")
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads must be divisible by n_kv_heads (each key/value head serves a whole group "
                             f"of query heads), got n_heads={n_heads} and n_kv_heads={n_kv_heads}")
        self.dropout = _checks.positive_float("dropout", dropout, allow_zero=True)
        if self.dropout >= 1:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        if rope and self.d_head % 2:
            raise ValueError(f"rope needs an even head width d_model / n_heads, got {self.d_head}")
        self.rope, self.rope_base = bool(rope), _checks.positive_float("rope_base", rope_base)
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.W_v = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key=None, value=None, mask=None, *, is_causal: bool = False,
                return_weights: bool = False, cache: KVCache | None = None, score_bias=None):
        key = query if key is None else key
        value = key if value is None else value
        for name, x in (("query", query), ("key", key), ("value", value)):
            _checks.tensor(name, x, ndim=3, floating=True)
            if x.shape[-1] != self.d_model:
                raise ValueError(f"{name} must have width d_model={self.d_model}, got shape {_checks.shape_str(x.shape)}")
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be an attnbook.attention.KVCache, got {type(cache).__name__}")
        B, T_q, D = query.shape
        T_new = key.shape[1]
        past = 0 if cache is None else cache.length
        q = self.W_q(query).view(B, T_q, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, Tq, Dh)
        k = self.W_k(key).view(B, T_new, self.n_kv_heads, self.d_head).transpose(1, 2)  # (B, H_kv, Tk, Dh)
        v = self.W_v(value).view(B, T_new, self.n_kv_heads, self.d_head).transpose(1, 2)  # (B, H_kv, Tk, Dh)
        if self.rope:
            q = apply_rope(q, offset=past, base=self.rope_base)  # (B, H, Tq, Dh)
            k = apply_rope(k, offset=past, base=self.rope_base)  # (B, H_kv, Tk, Dh)
        if cache is not None:
            if cache.k is not None and cache.k.shape[0] != B:
                raise ValueError(f"cache.k must have shape (B={B}, H_kv={self.n_kv_heads}, T_past, Dh={self.d_head}), "
                                 f"got {_checks.shape_str(cache.k.shape)}")
            k, v = cache.append(k, v)  # (B, H_kv, T_past + Tk, Dh)
        T_k = k.shape[2]
        group = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(group, dim=1)  # (B, H, Tk, Dh): each key/value head serves `group` query heads
        v = v.repeat_interleave(group, dim=1)  # (B, H, Tk, Dh)
        mask = _head_mask(mask, (B, self.n_heads, T_q, T_k))
        score_bias = _head_bias(score_bias, (B, self.n_heads, T_q, T_k))
        fused_causal = is_causal and mask is None and score_bias is None and T_q == T_k and not return_weights
        if is_causal and not fused_causal:  # with a cache the queries are the last Tq of Tk positions
            causal = causal_mask(T_q, T_k, offset=T_k - T_q, device=query.device)  # (Tq, Tk)
            mask = causal if mask is None else mask & causal
        heads, weights = _heads(q, k, v, mask, fused_causal, self.dropout if self.training else 0.0,
                                return_weights, score_bias)  # (B, H, Tq, Dh)
        out = self.W_o(heads.transpose(1, 2).reshape(B, T_q, D))  # (B, Tq, D)
        return (out, weights) if return_weights else out
