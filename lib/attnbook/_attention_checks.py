"""The input checks of :mod:`attnbook.attention`: every argument of its functions and layers, with errors that
name the argument, what was expected and what was given.

Each function and ``forward`` declares its checker with ``@_checks.checked_by(...)``, which calls it with the
arguments by name, at the boundary only (a layer inside a model is not checked again); a constructor calls its
checker itself. ``check_qkv`` is public (``attention.check_qkv``): the book's attention functions call it too.
"""

from __future__ import annotations

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
    scores_shape = (*_batch(("q", q), ("k", k)), q.shape[-2], k.shape[-2])
    if mask is not None:
        _checks.tensor("mask", mask, dtype=torch.bool)
        _checks.broadcastable("mask", mask, scores_shape, "the scores' shape (..., Tq, Tk)")
    if score_bias is not None:
        check_score_bias(score_bias, scores_shape, "the scores' shape (..., Tq, Tk)")
    return scores_shape


def _batch(queries: tuple[str, torch.Tensor], keys: tuple[str, torch.Tensor]) -> tuple[int, ...]:
    """The batch dimensions (...) that the queries (..., Tq, Dk) and the keys (..., Tk, Dk) broadcast to."""
    (q_name, q), (k_name, k) = queries, keys
    try:
        return tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]))
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of {q_name} and {k_name} must be broadcastable, got {q_name} "
            f"{_checks.shape_str(q.shape)} and {k_name} {_checks.shape_str(k.shape)}"
        ) from None


def check_score_bias(score_bias, target, what: str) -> torch.Tensor:
    """Check that ``score_bias`` is a finite floating-point tensor broadcastable to ``target``; return it."""
    _checks.tensor("score_bias", score_bias, floating=True)
    _checks.broadcastable("score_bias", score_bias, target, what)
    if not torch.isfinite(score_bias).all():
        raise ValueError("score_bias must be finite: forbid a key with the boolean mask (False), not with -inf")
    return score_bias


def _check_masked_softmax(scores, mask, **_) -> None:
    _checks.tensor("scores", scores, min_ndim=1, floating=True)
    if mask is not None:
        _checks.tensor("mask", mask, dtype=torch.bool)
        _checks.broadcastable("mask", mask, scores.shape, "the scores' shape (..., Tq, Tk)")


def _check_temperature(scores, temperature, **_) -> None:
    _checks.tensor("scores", scores, min_ndim=1, floating=True)
    _checks.positive_float("temperature", temperature)


def _check_sdpa(q, k, v, mask, scale, score_bias, dropout, **_) -> None:
    check_qkv(q, k, v, mask, score_bias=score_bias)
    _checks.dropout("dropout", dropout)
    if scale is not None:
        _checks.positive_float("scale", scale, allow_zero=True)


def _check_causal_mask(t_q, t_k, offset, **_) -> None:
    _checks.positive_int("t_q", t_q)
    if t_k is not None:
        _checks.positive_int("t_k", t_k)
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(f"offset must be an integer, got {offset!r}")


def _check_padding_mask(lengths, t_k, device, **_) -> None:
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


def _check_widths(**widths) -> None:
    """The widths of a constructor: integers >= 1."""
    for name, value in widths.items():
        _checks.positive_int(name, value)


def _check_keys(self, keys, **_) -> None:
    _checks.tensor("keys", keys, min_ndim=2, floating=True)
    if keys.shape[-1] != self.W_2.in_features:
        raise ValueError(
            f"keys must have width d_key={self.W_2.in_features}, got shape {_checks.shape_str(keys.shape)}"
        )


def _check_additive_score(self, query, keys, projected_keys, **_) -> tuple[int, ...]:
    """The checks of ``AdditiveScore.forward``; return the scores' shape (..., Tq, Tk)."""
    _checks.features("query", query, self.W_1.in_features, module=self, width_name="d_query", min_ndim=2)
    _checks.features("keys", keys, self.W_2.in_features, module=self, width_name="d_key", min_ndim=2)
    if projected_keys is not None:  # W_2 keys, precomputed by project_keys (decoders reuse it every step)
        _checks.tensor("projected_keys", projected_keys, min_ndim=2, floating=True)
        expected = (*keys.shape[:-1], self.W_2.out_features)
        if tuple(projected_keys.shape) != expected:
            raise ValueError(
                f"projected_keys must have shape {_checks.shape_str(expected)} (keys' shape with "
                f"width d_attn), got {_checks.shape_str(projected_keys.shape)}"
            )
        _checks.like("projected_keys", projected_keys, self)
    for name, x, what in (("query", query, "queries Tq"), ("keys", keys, "keys Tk")):
        if x.shape[-2] == 0:
            raise ValueError(f"{name} is an empty sequence: it has 0 {what}, shape {_checks.shape_str(x.shape)}")
    return (*_batch(("query", query), ("keys", keys)), query.shape[-2], keys.shape[-2])


def _check_additive_attention(self, query, keys, values, mask, projected_keys, **_) -> None:
    scores_shape = _check_additive_score(self.score, query, keys, projected_keys)  # (..., Tq, Tk)
    _checks.tensor("values", values, min_ndim=2, floating=True)
    _checks.like("values", values, self)
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
    return n_kv_heads, _checks.dropout("dropout", dropout), _checks.positive_float("rope_base", rope_base)


def check_layer_inputs(self, query, key, value, mask, score_bias, cache=None, **_) -> None:
    """The checks of an attention layer's forward: widths, lengths, batch, dtype, the mask, the bias, the cache
    (blocks check theirs with it, as they pass them on)."""
    key = query if key is None else key
    value = key if value is None else value
    for name, x in (("query", query), ("key", key), ("value", value)):
        _checks.sequence(name, x, self.d_model, module=self)
    if key is not value:
        _checks.same_size("batch size and length (B, Tk)", slice(0, 2), ("key", key), ("value", value))
    if key is not query:
        _checks.same_size("batch size B", slice(0, 1), ("query", query), ("key", key))
    check_cache("cache", cache, self, query.shape[0])
    past = 0 if cache is None else cache.length
    target = (query.shape[0], self.n_heads, query.shape[1], past + key.shape[1])
    if mask is not None:
        _checks.attention_mask("mask", mask, target, device=query.device)
    if score_bias is not None:
        _checks.tensor("score_bias", score_bias, floating=True)
        if score_bias.dim() not in (2, 3, 4):
            raise ValueError(
                "score_bias must have 2 (Tq, Tk), 3 (B, Tq, Tk) or 4 (B, H, Tq, Tk) dimensions, "
                f"got shape {_checks.shape_str(score_bias.shape)}"
            )
        per_head = score_bias.unsqueeze(1) if score_bias.dim() == 3 else score_bias
        check_score_bias(per_head, target, "(B, H, Tq, Tk)")


def check_cache(name: str, cache, layer, batch_size: int) -> None:
    """A KV cache (or None) for ``layer``: what it holds, (B, H_kv, T_past, Dh), must continue the new keys."""
    if cache is None:
        return
    if not isinstance(getattr(cache, "length", None), int):  # an attention.KVCache
        raise TypeError(f"{name} must be an attnbook.attention.KVCache or None, got {type(cache).__name__}")
    if cache.k is not None:
        _check_held(name, cache, (batch_size, layer.n_kv_heads, cache.length, layer.d_head))


def _check_append(self, k, v, **_) -> None:
    """The keys held must continue the new ones (B, H_kv, T_new, Dh)."""
    if self.k is not None:
        _check_held("cache", self, (k.shape[0], k.shape[1], self.length, k.shape[3]))


def _check_held(name: str, cache, expected: tuple[int, ...]) -> None:
    for part, held in (("k", cache.k), ("v", cache.v)):
        if tuple(held.shape) != expected:
            raise ValueError(
                f"{name}.{part} must have shape (B, H_kv, T_past, Dh) = {_checks.shape_str(expected)} "
                f"to match the new keys, got {_checks.shape_str(held.shape)}"
            )
