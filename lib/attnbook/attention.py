"""Attention: scaled dot-product attention, masks, and additive (Bahdanau) scoring.

Masks are boolean with True = "this query may attend to this key", broadcastable to the
scores' shape (..., Tq, Tk), the same convention as ``torch.nn.functional.scaled_dot_product_attention``.
A query row with no allowed key gets all-zero weights (and so a zero output), never NaN.

A *score bias* b is a float tensor of the same broadcastable shape that is added to the scaled scores,
softmax(q . k / sqrt(Dk) + b_ij): relative positions, graph distances, any structure between tokens i and
j that the scores should see. A float ``attn_mask`` of ``F.scaled_dot_product_attention`` is such a bias.

Conventions every attention path of the library follows (the functions here, :class:`MultiHeadAttention`
on both paths, :class:`GroupedQueryAttention`, ``flash.flash_attention``):

- **Causal masks are top-left aligned**: query i may attend to key j iff j <= i + offset, with offset 0
  unless one is given explicitly (:func:`causal_mask`, PyTorch's ``is_causal=True``). A KV cache gives the
  offset itself: the new queries follow the T_past cached positions, so offset = T_past.
- **Masked positions are inert**: a NaN or infinity in a key or value that a query may not attend never
  reaches that query's output, nor any gradient (the non-finite entries are replaced with ``where``
  before the products, so that no 0 * NaN is ever formed). A non-finite number that a query may attend
  (in its own query, an allowed key, or an entry of an allowed value) makes the output NaN where it
  would reach it without masks; a query with no allowed key still gives zeros.
- **Half precision**: float16 and bfloat16 inputs give outputs of their own dtype, but the explicit path
  forms the scores, the softmax and the weighted sum in float32 (as fused kernels do), so scores beyond
  65504 do not overflow.
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


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype attention is computed in: float32 for half-precision inputs (as fused kernels do), else their own."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dimension that puts exactly zero weight where ``mask`` is False.

    Rows where every entry is masked come out as all zeros (not NaN), and their gradient is zero. Masked
    scores are never read: a NaN or infinity there changes nothing, in the weights or in the gradient.
    Half-precision scores are normalised in float32 and returned in their own dtype.

    Shapes:
        scores: (..., Tq, Tk)
        mask:   boolean, broadcastable to (..., Tq, Tk); True = may attend
        return: (..., Tq, Tk), each row sums to 1 (or is all zeros)

    Chapter: queries, keys and values (softmax); masking (the -inf fill).
    """
    _checks.tensor("scores", scores, min_ndim=1, floating=True)
    work = _work_dtype(scores.dtype)
    if mask is None:
        return torch.softmax(scores, dim=-1, dtype=work).to(scores.dtype)
    _checks.tensor("mask", mask, dtype=torch.bool)
    _checks.broadcastable("mask", mask, scores.shape, "the scores' shape (..., Tq, Tk)")
    any_allowed = mask.any(dim=-1, keepdim=True)  # (..., Tq, 1)
    # Masked scores become -inf; a row with no allowed key becomes a row of zeros, so that its softmax
    # stays finite (it is zeroed afterwards). masked_fill and where select, they never multiply: no NaN
    # in a masked score can reach the values or the gradients.
    filled = torch.where(any_allowed, scores.masked_fill(~mask, float("-inf")), 0.0)  # (..., Tq, Tk)
    weights = torch.softmax(filled, dim=-1, dtype=work)  # (..., Tq, Tk)
    return weights.masked_fill(~mask, 0.0).to(scores.dtype)  # masked weights are exactly 0, even beside a NaN


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
            f"and k {_checks.shape_str(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of keys Tk (dimension -2), got k {_checks.shape_str(k.shape)} "
            f"and v {_checks.shape_str(v.shape)}"
        )
    for name, x, what in (("q", q, "queries Tq"), ("k", k, "keys Tk")):
        if x.shape[-2] == 0:
            raise ValueError(f"{name} is an empty sequence: it has 0 {what}, shape {_checks.shape_str(x.shape)}")
    if q.shape[-1] == 0 or v.shape[-1] == 0:
        raise ValueError(
            f"q, k and v need a non-zero width, got q {_checks.shape_str(q.shape)} and v {_checks.shape_str(v.shape)}"
        )
    if same_batch and not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(
            f"q, k and v must have the same batch dimensions (...), got q {_checks.shape_str(q.shape)}, "
            f"k {_checks.shape_str(k.shape)} and v {_checks.shape_str(v.shape)}"
        )
    if k.shape[:-2] != v.shape[:-2]:
        raise ValueError(
            f"k and v must have the same batch dimensions, got k {_checks.shape_str(k.shape)} "
            f"and v {_checks.shape_str(v.shape)}"
        )
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of q and k must be broadcastable, got q {_checks.shape_str(q.shape)} "
            f"and k {_checks.shape_str(k.shape)}"
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
    q, k, v, poisoned = _inert(q, k, v, mask)
    out, weights = _explicit(q, k, v, mask, scale, score_bias=score_bias)  # (..., Tq, Dv), (..., Tq, Tk)
    out, weights = _poison(poisoned, out, weights)
    return (out, weights) if return_weights else out


def _explicit(q, k, v, mask, scale: float, dropout: float = 0.0, score_bias=None):
    """softmax(q k^T * scale + score_bias) v with the weights, in float32 for half-precision inputs; (out, weights)."""
    work = _work_dtype(q.dtype)
    scores = (q.to(work) @ k.to(work).transpose(-2, -1)) * scale  # (..., Tq, Tk)
    if score_bias is not None:
        scores = scores + score_bias.to(work)  # (..., Tq, Tk)
    weights = masked_softmax(scores, mask)  # (..., Tq, Tk)
    out = F.dropout(weights, dropout) @ v.to(work)  # (..., Tq, Dv)
    return out.to(q.dtype), weights.to(q.dtype)


def _inert(q, k, v, mask=None, offset: int | None = None):
    """Make the positions a query may not attend inert.

    Returns (q, k, v) with every NaN or infinity replaced by 0, and what :func:`_poison` then sets to NaN:
    (rows, weights, entries): the query rows (..., Tq) that may attend a key with a non-finite entry or
    whose own query has one, their allowed weights (..., Tq, Tk), and the entries (..., Tq, Dv) of the
    output that such a row or a non-finite value reaches. ``offset`` stands for the causal mask
    j <= i + offset when ``mask`` is None. Without any mask every query may attend every key, and with
    finite inputs (the usual case, found with one sum per tensor; on a GPU this waits for the device) there
    is nothing to do: the inputs come back as they are, with None.
    """
    if (mask is None and offset is None) or _tracing() or _finite(q, k, v):
        return q, k, v, None
    finite = [torch.isfinite(x) for x in (q, k, v)]
    bad_q = ~finite[0].all(dim=-1)  # (..., Tq)
    bad_k = ~finite[1].all(dim=-1)  # (..., Tk)
    bad_v = ~finite[2]  # (..., Tk, Dv)
    q, k, v = (torch.where(ok, x, 0.0) for x, ok in zip((q, k, v), finite))
    allowed = causal_mask(q.shape[-2], k.shape[-2], offset=offset, device=q.device) if mask is None else mask
    rows = (allowed & bad_k.unsqueeze(-2)).any(dim=-1) | (bad_q & allowed.any(dim=-1))  # (..., Tq)
    work = _work_dtype(v.dtype)
    entries = (allowed.to(work) @ bad_v.to(work)) > 0  # (..., Tq, Dv): an allowed key's value is non-finite there
    return q, k, v, (rows, rows.unsqueeze(-1) & allowed, entries | rows.unsqueeze(-1))


def _tracing() -> bool:
    """True while ``torch.compile`` or ``torch.export`` (``torch.onnx``) traces: a traced graph cannot branch on
    values, so it keeps the fused path as it is (there, a NaN in a masked position may spread as in PyTorch)."""
    compiler = getattr(torch, "compiler", None)
    return any(bool(getattr(compiler, name, lambda: False)()) for name in ("is_compiling", "is_exporting"))


def _finite(*tensors) -> bool:
    """Whether every entry of the tensors is finite, from their sums (a sum that overflows only costs the slow path)."""
    total = sum(x.detach().sum(dtype=_work_dtype(x.dtype)) for x in tensors)
    return bool(torch.isfinite(total))


def _poison(poisoned, out, weights=None):
    """Set to NaN what :func:`_inert` found a non-finite input reaches: entries of ``out`` (..., Tq, Dv), and
    the allowed weights (..., Tq, Tk) of the rows it reaches (masked weights stay 0)."""
    if poisoned is None:
        return out, weights
    _, weight_entries, entries = poisoned
    out = out.masked_fill(entries, float("nan"))
    return out, None if weights is None else weights.masked_fill(weight_entries, float("nan"))


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
            raise ValueError(
                f"keys must have width d_key={self.W_2.in_features}, got shape {_checks.shape_str(keys.shape)}"
            )
        return self.W_2(keys)  # (..., Tk, A)

    def check(self, query, keys, projected_keys=None) -> tuple[int, ...]:
        """Check the arguments of :meth:`forward`; return the scores' shape (..., Tq, Tk)."""
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
        try:
            batch = torch.broadcast_shapes(query.shape[:-2], keys.shape[:-2])
        except RuntimeError:
            raise ValueError(
                f"the batch dimensions of query and keys must be broadcastable, got query "
                f"{_checks.shape_str(query.shape)} and keys {_checks.shape_str(keys.shape)}"
            ) from None
        return (*batch, query.shape[-2], keys.shape[-2])

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, *, projected_keys: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check(query, keys, projected_keys)
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

    def forward(
        self,
        query,
        keys,
        values,
        mask=None,
        *,
        return_weights: bool = False,
        projected_keys: torch.Tensor | None = None,
    ):
        scores_shape = self.score.check(query, keys, projected_keys)  # (..., Tq, Tk)
        _checks.tensor("values", values, min_ndim=2, floating=True)
        _checks.like("values", values, self)
        if keys.shape[-2] != values.shape[-2]:
            raise ValueError(
                f"keys and values must have the same number of positions Tk, got keys "
                f"{_checks.shape_str(keys.shape)} and values {_checks.shape_str(values.shape)}"
            )
        _checks.broadcastable(
            "values",
            values,
            (*scores_shape[:-2], *values.shape[-2:]),
            "the batch dimensions of the scores with (Tk, Dv)",
        )
        if mask is not None:
            _checks.tensor("mask", mask, dtype=torch.bool)
            _checks.broadcastable("mask", mask, scores_shape, "the scores' shape (..., Tq, Tk)")
        poisoned = None
        if mask is not None:  # masked positions are inert (see the module docstring)
            n_keys = keys.shape[-1]
            if projected_keys is not None:
                keys = torch.cat([keys, projected_keys.to(keys.dtype)], dim=-1)  # cleaned together, split below
            query, keys, values, poisoned = _inert(query, keys, values, mask)
            keys, projected_keys = (keys, None) if projected_keys is None else (keys[..., :n_keys], keys[..., n_keys:])
        scores = self.score(query, keys, projected_keys=projected_keys)  # (..., Tq, Tk)
        weights = masked_softmax(scores, mask)  # (..., Tq, Tk)
        context = weights @ values  # (..., Tq, Dv)
        context, weights = _poison(poisoned, context, weights)
        return (context, weights) if return_weights else context


def _heads(q, k, v, mask, fused_causal: bool, p: float, return_weights: bool, score_bias=None):
    """The attention of every head, given projected q (B, H, Tq, Dh), k and v (B, H, Tk, Dh).

    PyTorch's fused kernel when the weights are not asked for (with zeros, not NaN, for a query that may
    attend to no key), else the explicit softmax; ``fused_causal`` is PyTorch's top-left ``is_causal``.
    ``score_bias`` (broadcastable to (B, H, Tq, Tk)) is added to the scaled scores; for the fused kernel it
    becomes a float ``attn_mask`` with -inf where ``mask`` is False. Masked positions are inert on both
    paths. Returns (heads (B, H, Tq, Dh), weights or None).
    """
    q, k, v, poisoned = _inert(q, k, v, mask, 0 if fused_causal else None)
    if return_weights:
        heads, weights = _explicit(
            q, k, v, mask, 1.0 / math.sqrt(q.shape[-1]), p, score_bias
        )  # (B, H, Tq, Dh), (B, H, Tq, Tk)
    else:
        attn_mask = mask
        if score_bias is not None:
            attn_mask = score_bias.to(q.dtype)  # (.., Tq, Tk) float: added to the scores by the kernel
            if mask is not None:  # rows with no allowed key stay finite here and are zeroed below
                allowed = mask | ~mask.any(dim=-1, keepdim=True)
                attn_mask = torch.where(allowed, attn_mask, float("-inf"))  # broadcast to both shapes
        heads, weights = (
            F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p, is_causal=fused_causal),
            None,
        )
        if mask is not None:  # a query with no allowed key gives zeros on every PyTorch version
            heads = heads.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return _poison(poisoned, heads, weights)  # (B, H, Tq, Dh)


def _check_attention_inputs(module, query, key, value, mask, score_bias=None, past: int = 0):
    """Check the inputs of an attention layer (widths, lengths, batch, dtype, the mask, the score bias); return
    the mask and the bias ready to broadcast against (B, H, Tq, Tk). ``past`` keys come from a cache before
    ``key``. (Blocks check their own arguments with the same functions first, under their own names.)
    """
    for name, x in (("query", query), ("key", key), ("value", value)):
        _checks.sequence(name, x, module.d_model, module=module)
    if key is not value:
        _checks.same_size("batch size and length (B, Tk)", slice(0, 2), ("key", key), ("value", value))
    if key is not query:
        _checks.same_size("batch size B", slice(0, 1), ("query", query), ("key", key))
    target = (query.shape[0], module.n_heads, query.shape[1], past + key.shape[1])
    if mask is not None:
        mask = _checks.attention_mask("mask", mask, target, device=query.device)
    return mask, _head_bias(score_bias, target)


def _head_bias(score_bias, target, name: str = "score_bias"):
    """A score bias of rank 2, 3 or 4 checked against (B, H, Tq, Tk); rank 3 gets a head dimension."""
    if score_bias is None:
        return None
    _checks.tensor(name, score_bias, floating=True)
    if score_bias.dim() not in (2, 3, 4):
        raise ValueError(
            f"{name} must have 2 (Tq, Tk), 3 (B, Tq, Tk) or 4 (B, H, Tq, Tk) dimensions, "
            f"got shape {_checks.shape_str(score_bias.shape)}"
        )
    if score_bias.dim() == 3:
        score_bias = score_bias.unsqueeze(1)  # (B, 1, Tq, Tk): the same bias for every head
    return check_score_bias(score_bias, target, "(B, H, Tq, Tk)")


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

    def forward(
        self,
        query,
        key=None,
        value=None,
        mask=None,
        *,
        is_causal: bool = False,
        return_weights: bool = False,
        score_bias=None,
    ):
        key = query if key is None else key
        value = key if value is None else value
        mask, score_bias = _check_attention_inputs(self, query, key, value, mask, score_bias)
        B, T_q, D = query.shape
        T_k = key.shape[1]
        # A causal mask alone goes to the fused kernel as is_causal=True (the same top-left aligned triangle
        # as causal_mask(Tq, Tk)); combined with another mask or a bias, or for the weights, it is built.
        fused_causal = is_causal and mask is None and score_bias is None and not return_weights
        if is_causal and not fused_causal:
            causal = causal_mask(T_q, T_k, device=query.device)  # (Tq, Tk)
            mask = causal if mask is None else mask & causal
        q, k, v = self._project(query, key, value)  # each (B, T, D)
        q = q.view(B, T_q, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, Tq, Dh)
        k = k.view(B, T_k, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, Tk, Dh)
        v = v.view(B, T_k, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, Tk, Dh)
        heads, weights = _heads(
            q, k, v, mask, fused_causal, self.dropout if self.training else 0.0, return_weights, score_bias
        )  # (B, H, Tq, Dh)
        out = self.W_o(heads.transpose(1, 2).reshape(B, T_q, D))  # (B, Tq, D)
        return (out, weights) if return_weights else out


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
                    raise ValueError(
                        f"{name} must have shape (B, H_kv, T_past, Dh) = {_checks.shape_str(expected)} "
                        f"to match the new keys, got {_checks.shape_str(held.shape)}"
                    )
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
    the queries are the new positions, the keys and values those of the cache plus the new ones, and
    ``is_causal`` lets query i attend keys j <= i + T_past (without a cache: the top-left triangle of
    :func:`causal_mask`, as in :class:`MultiHeadAttention`). ``score_bias`` is added to the scaled scores, as
    in :class:`MultiHeadAttention`. ``qk_norm=True`` applies a LayerNorm over each head's width to the
    queries and the keys before their dot products (QK normalisation, Dehghani et al. 2023): the attention
    logits then no longer grow with the size of W_q and W_k, only with the norms' learned gains.

    Shapes:
        query: (B, Tq, D); key, value: (B, Tk, D), default to query
        mask:  boolean, True = may attend; (Tq, Tk), (B, Tq, Tk) or (B, H, Tq, Tk); with a cache, Tk counts the
               cached positions too
        score_bias: floating point, broadcastable to (B, H, Tq, Tk) (rank 3 applies to every head)
        return: (B, Tq, D), and weights (B, H, Tq, Tk) when ``return_weights=True``

    Chapter: modern tweaks (grouped-query attention, RoPE, KV cache); scaling and practice (QK normalisation).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        rope: bool = False,
        rope_base: float = 10000.0,
        qk_norm: bool = False,
    ):
        super().__init__()
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
        self.qk_norm = bool(qk_norm)
        if self.qk_norm:  # one LayerNorm over Dh for the queries and one for the keys, shared by the heads
            self.q_norm = nn.LayerNorm(self.d_head, bias=bias)
            self.k_norm = nn.LayerNorm(self.d_head, bias=bias)

    def forward(
        self,
        query,
        key=None,
        value=None,
        mask=None,
        *,
        is_causal: bool = False,
        return_weights: bool = False,
        cache: KVCache | None = None,
        score_bias=None,
    ):
        key = query if key is None else key
        value = key if value is None else value
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be an attnbook.attention.KVCache, got {type(cache).__name__}")
        past = 0 if cache is None else cache.length
        mask, score_bias = _check_attention_inputs(self, query, key, value, mask, score_bias, past)
        B, T_q, D = query.shape
        T_new = key.shape[1]
        q = self.W_q(query).view(B, T_q, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, Tq, Dh)
        k = self.W_k(key).view(B, T_new, self.n_kv_heads, self.d_head).transpose(1, 2)  # (B, H_kv, Tk, Dh)
        v = self.W_v(value).view(B, T_new, self.n_kv_heads, self.d_head).transpose(1, 2)  # (B, H_kv, Tk, Dh)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)  # each head's queries and keys normalised over Dh
        if self.rope:
            q = apply_rope(q, offset=past, base=self.rope_base)  # (B, H, Tq, Dh)
            k = apply_rope(k, offset=past, base=self.rope_base)  # (B, H_kv, Tk, Dh)
        if cache is not None:
            if cache.k is not None and cache.k.shape[0] != B:
                raise ValueError(
                    f"cache.k must have shape (B={B}, H_kv={self.n_kv_heads}, T_past, Dh={self.d_head}), "
                    f"got {_checks.shape_str(cache.k.shape)}"
                )
            k, v = cache.append(k, v)  # (B, H_kv, T_past + Tk, Dh)
        T_k = k.shape[2]
        group = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(group, dim=1)  # (B, H, Tk, Dh): each key/value head serves `group` query heads
        v = v.repeat_interleave(group, dim=1)  # (B, H, Tk, Dh)
        # Causal masks are top-left aligned, as in MultiHeadAttention; with a cache the queries are the
        # positions after the T_past cached ones, so query i may attend keys j <= i + T_past.
        fused_causal = is_causal and mask is None and score_bias is None and past == 0 and not return_weights
        if is_causal and not fused_causal:
            causal = causal_mask(T_q, T_k, offset=past, device=query.device)  # (Tq, Tk)
            mask = causal if mask is None else mask & causal
        heads, weights = _heads(
            q, k, v, mask, fused_causal, self.dropout if self.training else 0.0, return_weights, score_bias
        )  # (B, H, Tq, Dh)
        out = self.W_o(heads.transpose(1, 2).reshape(B, T_q, D))  # (B, Tq, D)
        return (out, weights) if return_weights else out
