"""The input checks of :mod:`attnbook.attention`: every argument of its functions and layers, with errors that
name the argument, what was expected and what was given.

A layer inside a model runs inside ``_checks.trusted()``: the checks of its call return at once (a
constructor's always run). They return what the code needs ready (a scale, a mask with a head dimension...).
``check_qkv`` is public (``attention.check_qkv``): the book's own attention functions call it too.
"""

from __future__ import annotations

import math

import torch

from . import _checks


def check_qkv(q, k, v, mask=None, *, same_batch: bool = False, score_bias=None) -> tuple[int, ...]:
    """Check queries, keys, values (a mask, a score bias) for attention; return the scores' shape (..., Tq, Tk).

    The attention functions of the book call this, so that bad input gets the same clear error everywhere.
    ``same_batch`` asks q, k and v to have identical batch dimensions (no broadcasting).

    Shapes:
        q: (..., Tq, Dk), k: (..., Tk, Dk), v: (..., Tk, Dv); mask: boolean, broadcastable to (..., Tq, Tk);
        score_bias: floating point, broadcastable to (..., Tq, Tk)
    """
    shape = _checks.shape_str
    for name, x in (("q", q), ("k", k), ("v", v)):
        _checks.tensor(name, x, min_ndim=2, floating=True)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must have the same dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on the same device, got q {q.device}, k {k.device}, v {v.device}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dimension Dk, got q {shape(q.shape)} and k {shape(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of keys Tk (dimension -2), got k {shape(k.shape)} "
            f"and v {shape(v.shape)}"
        )
    for name, x, what in (("q", q, "queries Tq"), ("k", k, "keys Tk")):
        if x.shape[-2] == 0:
            raise ValueError(f"{name} is an empty sequence: it has 0 {what}, shape {shape(x.shape)}")
    if q.shape[-1] == 0 or v.shape[-1] == 0:
        raise ValueError(f"q, k and v need a non-zero width, got q {shape(q.shape)} and v {shape(v.shape)}")
    if same_batch and not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(
            f"q, k and v must have the same batch dimensions (...), got q {shape(q.shape)}, "
            f"k {shape(k.shape)} and v {shape(v.shape)}"
        )
    if k.shape[:-2] != v.shape[:-2]:
        raise ValueError(f"k and v must have the same batch dimensions, got k {shape(k.shape)} and v {shape(v.shape)}")
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of q and k must be broadcastable, got q {shape(q.shape)} and k {shape(k.shape)}"
        ) from None
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


def _check_masked_softmax(scores, mask) -> None:
    if _checks.checking():
        _checks.tensor("scores", scores, min_ndim=1, floating=True)
        if mask is not None:
            _checks.tensor("mask", mask, dtype=torch.bool)
            _checks.broadcastable("mask", mask, scores.shape, "the scores' shape (..., Tq, Tk)")


def _check_temperature(scores, temperature) -> float:
    if not _checks.checking():
        return temperature
    _checks.tensor("scores", scores, min_ndim=1, floating=True)
    return _checks.positive_float("temperature", temperature)


def _check_sdpa(q, k, v, mask, scale, score_bias, dropout) -> float:
    """The checks of :func:`scaled_dot_product_attention`; return the scale, 1 / sqrt(Dk) by default."""
    if _checks.checking():
        check_qkv(q, k, v, mask, score_bias=score_bias)
        _check_dropout(dropout)
        if scale is not None:
            scale = _checks.positive_float("scale", scale, allow_zero=True)
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale


def _check_dropout(dropout) -> float:
    return _checks.dropout("dropout", dropout)


def _check_causal_mask(t_q, t_k, offset) -> int:
    """The checks of :func:`causal_mask`; return Tk (Tq by default)."""
    if not _checks.checking():
        return t_q if t_k is None else t_k
    _checks.positive_int("t_q", t_q)
    t_k = t_q if t_k is None else _checks.positive_int("t_k", t_k)
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(f"offset must be an integer, got {offset!r}")
    return t_k


def _check_padding_mask(lengths, t_k, device) -> tuple[torch.Tensor, int]:
    """The checks of :func:`padding_mask`; return the lengths as a tensor and Tk (the longest by default)."""
    lengths = _checks.as_integers("lengths", lengths, what="a non-empty 1-D sequence of integers", device=device)
    if lengths.dim() != 1 or lengths.numel() == 0:
        raise ValueError(
            f"lengths must be a non-empty 1-D sequence of integers (one length per sequence), "
            f"got {lengths.dtype} of shape {_checks.shape_str(lengths.shape)}"
        )
    longest = int(lengths.max())
    t_k = longest if t_k is None else _checks.positive_int("t_k", t_k)
    if int(lengths.min()) < 1 or longest > t_k:
        raise ValueError(f"every length must be in [1, t_k={t_k}], got lengths {lengths.tolist()}")
    return lengths, t_k


def _check_widths(**widths) -> None:
    for name, value in widths.items():
        _checks.positive_int(name, value)


def _check_keys(score, keys) -> None:
    if _checks.checking():
        _checks.tensor("keys", keys, min_ndim=2, floating=True)
        if keys.shape[-1] != score.W_2.in_features:
            raise ValueError(
                f"keys must have width d_key={score.W_2.in_features}, got shape {_checks.shape_str(keys.shape)}"
            )


def _check_additive_score(score, query, keys, projected_keys) -> tuple[int, ...] | None:
    """The checks of :meth:`AdditiveScore.forward`; return the scores' shape (..., Tq, Tk)."""
    if not _checks.checking():
        return None
    _checks.features("query", query, score.W_1.in_features, module=score, width_name="d_query", min_ndim=2)
    _checks.features("keys", keys, score.W_2.in_features, module=score, width_name="d_key", min_ndim=2)
    if projected_keys is not None:  # W_2 keys, precomputed by project_keys (decoders reuse it every step)
        _checks.tensor("projected_keys", projected_keys, min_ndim=2, floating=True)
        expected = (*keys.shape[:-1], score.W_2.out_features)
        if tuple(projected_keys.shape) != expected:
            raise ValueError(
                f"projected_keys must have shape {_checks.shape_str(expected)} (keys' shape with "
                f"width d_attn), got {_checks.shape_str(projected_keys.shape)}"
            )
        _checks.like("projected_keys", projected_keys, score)
    for name, x, what in (("query", query, "queries Tq"), ("keys", keys, "keys Tk")):
        if x.shape[-2] == 0:
            raise ValueError(f"{name} is an empty sequence: it has 0 {what}, shape {_checks.shape_str(x.shape)}")
    try:
        batch = torch.broadcast_shapes(query.shape[:-2], keys.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of query and keys must be broadcastable, got query "
            f"{_checks.shape_str(query.shape)} and keys {_checks.shape_str(keys.shape)}"
        ) from None
    return (*batch, query.shape[-2], keys.shape[-2])


def _check_additive_attention(layer, query, keys, values, mask, projected_keys) -> None:
    if not _checks.checking():
        return
    scores_shape = _check_additive_score(layer.score, query, keys, projected_keys)  # (..., Tq, Tk)
    _checks.tensor("values", values, min_ndim=2, floating=True)
    _checks.like("values", values, layer)
    if keys.shape[-2] != values.shape[-2]:
        raise ValueError(
            f"keys and values must have the same number of positions Tk, got keys "
            f"{_checks.shape_str(keys.shape)} and values {_checks.shape_str(values.shape)}"
        )
    target = (*scores_shape[:-2], *values.shape[-2:])
    _checks.broadcastable("values", values, target, "the batch dimensions of the scores with (Tk, Dv)")
    if mask is not None:
        _checks.tensor("mask", mask, dtype=torch.bool)
        _checks.broadcastable("mask", mask, scores_shape, "the scores' shape (..., Tq, Tk)")


def _check_heads(d_model, n_heads, n_kv_heads, dropout, rope=False, rope_base=10000.0) -> tuple[int, float, float]:
    """The checks of the constructors of the two layers; return H_kv (H by default), the dropout and the RoPE base."""
    _checks.positive_int("d_model", d_model)
    _checks.positive_int("n_heads", n_heads)
    n_kv_heads = n_heads if n_kv_heads is None else _checks.positive_int("n_kv_heads", n_kv_heads)
    if d_model % n_heads:
        raise ValueError(f"d_model must be divisible by n_heads, got d_model={d_model} and n_heads={n_heads}")
    if n_heads % n_kv_heads:
        raise ValueError(
            f"n_heads must be divisible by n_kv_heads (each key/value head serves a whole group "
            f"of query heads), got n_heads={n_heads} and n_kv_heads={n_kv_heads}"
        )
    if rope and (d_model // n_heads) % 2:
        raise ValueError(f"rope needs an even head width d_model / n_heads, got {d_model // n_heads}")
    return n_kv_heads, _check_dropout(dropout), _checks.positive_float("rope_base", rope_base)


def check_layer_inputs(layer, query, key, value, mask, score_bias, cache=None):
    """The checks of an attention layer's forward (widths, lengths, batch, dtype, the mask, the bias, the cache);
    blocks call it too, for the mask, the bias and the cache they pass on.

    Returns key and value (by default the query and the key), and the mask and the bias ready to broadcast
    against the scores (B, H, Tq, Tk): rank 3 (B, Tq, Tk) gets a head dimension (the same for every head).
    """
    key = query if key is None else key
    value = key if value is None else value
    if _checks.checking():
        for name, x in (("query", query), ("key", key), ("value", value)):
            _checks.sequence(name, x, layer.d_model, module=layer)
        if key is not value:
            _checks.same_size("batch size and length (B, Tk)", slice(0, 2), ("key", key), ("value", value))
        if key is not query:
            _checks.same_size("batch size B", slice(0, 1), ("query", query), ("key", key))
        if cache is not None and not isinstance(getattr(cache, "length", None), int):  # an attention.KVCache
            raise TypeError(f"cache must be an attnbook.attention.KVCache or None, got {type(cache).__name__}")
        past = 0 if cache is None else cache.length
        target = (query.shape[0], layer.n_heads, query.shape[1], past + key.shape[1])
        if mask is not None:
            _checks.attention_mask("mask", mask, target, device=query.device)
        if score_bias is not None:
            _checks.tensor("score_bias", score_bias, floating=True)
            if score_bias.dim() not in (2, 3, 4):
                raise ValueError(
                    "score_bias must have 2 (Tq, Tk), 3 (B, Tq, Tk) or 4 (B, H, Tq, Tk) dimensions, "
                    f"got shape {_checks.shape_str(score_bias.shape)}"
                )
            check_score_bias(_per_head(score_bias), target, "(B, H, Tq, Tk)")
    return key, value, _per_head(mask), _per_head(score_bias)


def _per_head(x):
    """A mask or a bias (B, Tq, Tk) as (B, 1, Tq, Tk), the same for every head; other ranks as they are."""
    return x.unsqueeze(1) if x is not None and x.dim() == 3 else x


def _check_append(cache, k) -> None:
    """The keys held must continue the new ones (B, H_kv, T_new, Dh): checked always (it is the cache's state)."""
    if cache.k is None:
        return
    expected = (k.shape[0], k.shape[1], cache.k.shape[2], k.shape[3])
    for name, held in (("cache.k", cache.k), ("cache.v", cache.v)):
        if tuple(held.shape) != expected:
            raise ValueError(
                f"{name} must have shape (B, H_kv, T_past, Dh) = {_checks.shape_str(expected)} "
                f"to match the new keys, got {_checks.shape_str(held.shape)}"
            )
