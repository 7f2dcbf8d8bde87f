"""Attention: scaled dot-product attention, masks, additive (Bahdanau) scores, multi-head and grouped-query layers.

Masks are boolean with True = "this query may attend to this key", broadcastable to the scores' shape
(..., Tq, Tk), the convention of ``torch.nn.functional.scaled_dot_product_attention``. A *score bias* B is a
float tensor of the same broadcastable shape added to the scaled scores, softmax(q . k / sqrt(Dk) + b_ij):
relative positions, graph distances, any structure between tokens i and j (PyTorch's float ``attn_mask``).

Conventions every attention path follows (the functions here, both paths of :class:`MultiHeadAttention`,
:class:`GroupedQueryAttention`, ``flash.flash_attention``):

- **Causal masks are top-left aligned**: query i may attend key j iff j <= i + offset, with offset 0 unless
  given (:func:`causal_mask`, PyTorch's ``is_causal=True``). A KV cache gives the offset itself: the new
  queries follow the T_past cached positions, so offset = T_past.
- **Masked keys get exactly zero weight**: the softmax never reads a masked score, and a query with no
  allowed key gets zero weights and a zero output, never NaN. As in PyTorch, a NaN or an infinity in a masked
  key or value is not filtered out (no host synchronisation to look for one): 0 * NaN is NaN.
- **Half precision**: float16 and bfloat16 inputs give outputs of their own dtype; the explicit path forms the
  scores, the softmax and the weighted sum in float32, as fused kernels do.

Each function and ``forward`` names its input checks (``@checked_by``, the checks in ``_attention_checks``);
they run once, at the boundary: a layer inside a model does not check again what the model checked.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ._attention_checks import (
    _check_additive_attention,
    _check_additive_score,
    _check_append,
    _check_causal_mask,
    _check_heads,
    _check_keys,
    _check_masked_softmax,
    _check_padding_mask,
    _check_sdpa,
    _check_temperature,
    _check_widths,
    check_layer_inputs,
    check_qkv,
)
from ._checks import checked_by
from ._numerics import NEG_INF, work_dtype
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


@checked_by(_check_masked_softmax)
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
    work = work_dtype(scores.dtype)
    if mask is None:
        return torch.softmax(scores, dim=-1, dtype=work).to(scores.dtype)
    any_allowed = mask.any(dim=-1, keepdim=True)  # (..., Tq, 1)
    # Masked scores become -inf; a row with no allowed key becomes a row of zeros, so that its softmax
    # stays finite (it is zeroed afterwards). masked_fill and where select, they never multiply: no NaN
    # in a masked score can reach the weights or the gradients.
    filled = torch.where(any_allowed, scores.masked_fill(~mask, NEG_INF), 0.0)  # (..., Tq, Tk)
    weights = torch.softmax(filled, dim=-1, dtype=work)  # (..., Tq, Tk)
    return weights.masked_fill(~mask, 0.0).to(scores.dtype)  # masked weights are exactly 0


@checked_by(_check_temperature)
def softmax_with_temperature(scores: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(scores / temperature) over the last dimension.

    Low temperatures sharpen the distribution towards a one-hot on the largest score (hard lookup);
    high temperatures flatten it towards uniform.

    Shapes:
        scores: (..., N)
        return: (..., N)

    Chapter: queries, keys and values (hard lookup as the limit of soft lookup).
    """
    return torch.softmax(scores / temperature, dim=-1)


@checked_by(_check_sdpa)
def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    score_bias: torch.Tensor | None = None,
    dropout: float = 0.0,
    return_weights: bool = False,
):
    r"""Attention(Q, K, V) = softmax(Q K^T * scale + B) V, with scale = 1 / sqrt(Dk) by default and B = 0.

    ``score_bias`` B adds b_ij to the score of query i and key j after the scaling, as a float
    ``attn_mask`` does in ``F.scaled_dot_product_attention``; ``mask`` still decides which keys count.
    ``dropout`` drops weights (training), as ``dropout_p`` does there; the weights returned are those before it.

    Shapes:
        q:    (..., Tq, Dk)
        k:    (..., Tk, Dk)
        v:    (..., Tk, Dv)
        mask: boolean, broadcastable to (..., Tq, Tk); True = may attend
        score_bias: floating point, broadcastable to (..., Tq, Tk)
        return: out (..., Tq, Dv), and weights (..., Tq, Tk) when ``return_weights=True``

    Chapter: queries, keys and values; beyond text (the score bias: distances in a graph).
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    work = work_dtype(q.dtype)  # half precision: scores, softmax and sum in float32
    scores = (q.to(work) @ k.to(work).transpose(-2, -1)) * scale  # (..., Tq, Tk)
    if score_bias is not None:
        scores = scores + score_bias.to(work)  # (..., Tq, Tk)
    weights = masked_softmax(scores, mask)  # (..., Tq, Tk)
    out = F.dropout(weights, dropout) @ v.to(work)  # (..., Tq, Dv)
    out, weights = out.to(q.dtype), weights.to(q.dtype)
    return (out, weights) if return_weights else out


@checked_by(_check_causal_mask)
def causal_mask(t_q: int, t_k: int | None = None, *, offset: int = 0, device=None) -> torch.Tensor:
    """Boolean mask where query i may attend to key j iff j <= i + offset.

    With ``offset=0`` and Tq = Tk this is the lower-triangular mask of ``is_causal=True`` in
    ``F.scaled_dot_product_attention``. Use ``offset = Tk - Tq`` when the queries are the last Tq
    positions of a longer sequence (as when generating with a cache).

    Shapes:
        return: (Tq, Tk), dtype bool

    Chapter: masking.
    """
    t_k = t_q if t_k is None else t_k
    i = torch.arange(t_q, device=device).unsqueeze(1)  # (Tq, 1)
    j = torch.arange(t_k, device=device).unsqueeze(0)  # (1, Tk)
    return j <= i + offset  # (Tq, Tk)


@checked_by(_check_padding_mask)
def padding_mask(lengths, t_k: int | None = None, *, device=None) -> torch.Tensor:
    """Boolean mask that lets every query attend only to the first ``lengths[b]`` keys of sequence b.

    Shapes:
        lengths: (B,) integers in [1, Tk] (a list or a tensor)
        return:  (B, 1, Tk), dtype bool; broadcasts against scores (B, Tq, Tk).
                 For scores with a head dimension (B, H, Tq, Tk) use ``padding_mask(...).unsqueeze(1)``.

    Chapter: masking.
    """
    lengths = torch.as_tensor(lengths, device=device)  # (B,)
    t_k = int(lengths.max()) if t_k is None else t_k
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
        _check_widths(d_query=d_query, d_key=d_key, d_attn=d_attn)
        self.W_1 = nn.Linear(d_query, d_attn, bias=False)
        self.W_2 = nn.Linear(d_key, d_attn, bias=False)
        self.v = nn.Linear(d_attn, 1, bias=False)

    @checked_by(_check_keys)
    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """W_2 h_i for every key: compute it once per source sentence, pass it as ``projected_keys`` at each step.

        Shapes:
            keys:   (..., Tk, d_key)
            return: (..., Tk, d_attn)
        """
        return self.W_2(keys)  # (..., Tk, A)

    @checked_by(_check_additive_score)
    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, *, projected_keys: torch.Tensor | None = None
    ) -> torch.Tensor:
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

    @checked_by(_check_additive_attention)
    def forward(self, query, keys, values, mask=None, *, return_weights=False, projected_keys=None):
        scores = self.score(query, keys, projected_keys=projected_keys)  # (..., Tq, Tk)
        weights = masked_softmax(scores, mask)  # (..., Tq, Tk)
        context = weights @ values  # (..., Tq, Dv)
        return (context, weights) if return_weights else context


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

    The blocks of the library use :class:`GroupedQueryAttention`, which with ``n_kv_heads = n_heads`` is this
    layer (same parameter names, same outputs) with the options of later chapters.

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
        _, self.dropout, _ = _check_heads(d_model, n_heads, None, dropout)
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    @checked_by(check_layer_inputs)
    def forward(
        self, query, key=None, value=None, mask=None, *, is_causal=False, return_weights=False, score_bias=None
    ):
        key = query if key is None else key  # self-attention
        value = key if value is None else value
        B, T_q, D = query.shape
        T_k, H, Dh = key.shape[1], self.n_heads, self.d_head
        q, k, v = _project(self, query, key, value)  # each (B, T, D)
        q = q.view(B, T_q, H, Dh).transpose(1, 2)  # (B, H, Tq, Dh)
        k = k.view(B, T_k, H, Dh).transpose(1, 2)  # (B, H, Tk, Dh)
        v = v.view(B, T_k, H, Dh).transpose(1, 2)  # (B, H, Tk, Dh)
        dropout = self.dropout if self.training else 0.0
        heads, weights = _attend(q, k, v, mask, is_causal, dropout, return_weights, score_bias)  # (B, H, Tq, Dh)
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

    @checked_by(_check_append)
    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add (B, H_kv, T_new, Dh) keys and values; return all keys and values (B, H_kv, T_past + T_new, Dh)."""
        if self.k is not None:
            k = torch.cat([self.k, k], dim=2)  # (B, H_kv, T_past + T_new, Dh)
            v = torch.cat([self.v, v], dim=2)  # (B, H_kv, T_past + T_new, Dh)
        self.k, self.v = k, v
        return k, v


class GroupedQueryAttention(nn.Module):
    r"""Grouped-query attention: H query heads share H_kv key/value heads, H / H_kv query heads per group.

    ``W_k`` and ``W_v`` map D to H_kv * Dh, so the keys and values, and the KV cache, shrink by H / H_kv. With
    ``n_kv_heads = n_heads`` (the default) it is :class:`MultiHeadAttention`: the same parameters, the same
    outputs. It is the attention layer of every block of the library; its options, and where they come from:

    ==============  ================================================================  ====================
    option          what it does                                                      chapter
    ==============  ================================================================  ====================
    ``n_kv_heads``  H_kv key/value heads (1: multi-query attention)                   modern tweaks
    ``rope``        rotates queries and keys by their positions (``apply_rope``)      modern tweaks
    ``cache``       a :class:`KVCache`: the new queries attend the cached positions   modern tweaks
                    too; with ``is_causal``, query i attends keys j <= i + T_past
    ``qk_norm``     a LayerNorm over Dh on each head's queries and keys               scaling and practice
    ``score_bias``  added to the scaled scores (rank 3: the same for every head)      beyond text
    ==============  ================================================================  ====================

    Shapes:
        query: (B, Tq, D); key, value: (B, Tk, D), default to query
        mask:  boolean, True = may attend; (Tq, Tk), (B, Tq, Tk) or (B, H, Tq, Tk); with a cache, Tk counts the
               cached positions too
        score_bias: floating point, broadcastable to (B, H, Tq, Tk)
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
        n_kv_heads, self.dropout, self.rope_base = _check_heads(d_model, n_heads, n_kv_heads, dropout, rope, rope_base)
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        self.rope = bool(rope)
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.W_v = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.qk_norm = bool(qk_norm)
        if self.qk_norm:  # one LayerNorm over Dh for the queries and one for the keys, shared by the heads
            self.q_norm = nn.LayerNorm(self.d_head, bias=bias)
            self.k_norm = nn.LayerNorm(self.d_head, bias=bias)

    @checked_by(check_layer_inputs)
    def forward(
        self,
        query,
        key=None,
        value=None,
        mask=None,
        *,
        is_causal=False,
        return_weights=False,
        cache=None,
        score_bias=None,
    ):
        key = query if key is None else key  # self-attention
        value = key if value is None else value
        B, T_q, D = query.shape
        T_k, H, H_kv, Dh = key.shape[1], self.n_heads, self.n_kv_heads, self.d_head
        past = 0 if cache is None else cache.length  # the queries follow the T_past cached positions
        q, k, v = _project(self, query, key, value)  # (B, Tq, D), (B, Tk, H_kv * Dh), (B, Tk, H_kv * Dh)
        q = q.view(B, T_q, H, Dh).transpose(1, 2)  # (B, H, Tq, Dh)
        k = k.view(B, T_k, H_kv, Dh).transpose(1, 2)  # (B, H_kv, Tk, Dh)
        v = v.view(B, T_k, H_kv, Dh).transpose(1, 2)  # (B, H_kv, Tk, Dh)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)  # each head's queries and keys normalised over Dh
        if self.rope:
            q = apply_rope(q, offset=past, base=self.rope_base)  # (B, H, Tq, Dh)
            k = apply_rope(k, offset=past, base=self.rope_base)  # (B, H_kv, Tk, Dh)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, H_kv, T_past + Tk, Dh)
        if H_kv < H:  # each key/value head serves H / H_kv query heads
            k = k.repeat_interleave(H // H_kv, dim=1)  # (B, H, T_past + Tk, Dh)
            v = v.repeat_interleave(H // H_kv, dim=1)  # (B, H, T_past + Tk, Dh)
        dropout = self.dropout if self.training else 0.0
        heads, weights = _attend(q, k, v, mask, is_causal, dropout, return_weights, score_bias, past)  # (B, H, Tq, Dh)
        out = self.W_o(heads.transpose(1, 2).reshape(B, T_q, D))  # (B, Tq, D)
        return (out, weights) if return_weights else out


def _project(layer, query, key, value):
    """Q = query W_q, K = key W_k, V = value W_v; the projections of one same input in one matrix product."""
    if query is key is value:  # self-attention: [Q K V] = x [W_q W_k W_v]
        return _linear(query, layer.W_q, layer.W_k, layer.W_v)
    if key is value:  # cross-attention: [K V] = memory [W_k W_v]
        return (layer.W_q(query), *_linear(key, layer.W_k, layer.W_v))
    return layer.W_q(query), layer.W_k(key), layer.W_v(value)


def _linear(x, *layers):
    """x W^T + b of nn.Linear layers side by side, as one matrix product; their outputs, split."""
    weight = torch.cat([W.weight for W in layers])  # (sum of their outputs, D)
    bias = None if layers[0].bias is None else torch.cat([W.bias for W in layers])
    return F.linear(x, weight, bias).split([W.out_features for W in layers], dim=-1)


def _attend(q, k, v, mask, is_causal: bool, dropout: float, return_weights: bool, score_bias=None, past: int = 0):
    """The attention of every head: q (B, H, Tq, Dh), k and v (B, H, Tk, Dh) -> heads (B, H, Tq, Dh), weights.

    The causal logic of the layers: query i may attend keys j <= i + past (``past``: the positions a KV cache
    held before these queries). A causal mask alone goes to PyTorch's fused kernel as ``is_causal=True`` (the
    same top-left triangle as :func:`causal_mask`); with another mask, a bias, a cache, or for the weights,
    it is built. The weights take the explicit path (:func:`scaled_dot_product_attention`); otherwise the
    fused kernel runs, with ``score_bias`` as a float ``attn_mask`` that is -inf where ``mask`` is False.
    """
    mask, score_bias = _per_head(mask), _per_head(score_bias)
    fused_causal = is_causal and mask is None and score_bias is None and past == 0 and not return_weights
    if is_causal and not fused_causal:
        causal = causal_mask(q.shape[-2], k.shape[-2], offset=past, device=q.device)  # (Tq, Tk)
        mask = causal if mask is None else mask & causal
    if return_weights:
        return scaled_dot_product_attention(
            q, k, v, mask, score_bias=score_bias, dropout=dropout, return_weights=True
        )  # (B, H, Tq, Dh), (B, H, Tq, Tk)
    attn_mask = mask
    if score_bias is not None:
        attn_mask = score_bias.to(q.dtype)  # (.., Tq, Tk) float: added to the scores by the kernel
        if mask is not None:  # rows with no allowed key stay finite here and are zeroed below
            attn_mask = torch.where(mask | ~mask.any(dim=-1, keepdim=True), attn_mask, NEG_INF)
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout, is_causal=fused_causal)
    if mask is not None:  # a query with no allowed key gives zeros on every PyTorch version
        heads = heads.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return heads, None  # (B, H, Tq, Dh)


def _per_head(x):
    """A mask or a bias (B, Tq, Tk) as (B, 1, Tq, Tk), the same for every head; other ranks as they are."""
    return x.unsqueeze(1) if x is not None and x.dim() == 3 else x
