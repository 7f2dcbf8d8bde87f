"""The whole public API under generated good and bad input: an error that names the argument, or a result
that is finite and equal to the reference.

Every function and module in the ``__all__`` of attention, positional, blocks, models, flash, vit, rnn,
seq2seq and measure has a :class:`Spec`: how to build a valid call from a few drawn sizes, and what each
argument is (a floating tensor, token ids, a mask, an integer...). Hypothesis draws the sizes, a seed and
one change to the call:

- none: the valid call itself;
- ``float16`` / ``bfloat16``: the whole call (module and floating inputs) in half precision;
- one argument changed: a rank too many or too few, a wrong width, another dtype (float64, float16,
  bfloat16, integer, boolean), a list instead of a tensor, an empty sequence, a batch or length that
  disagrees with the other arguments, a NaN somewhere, values 10^4 times larger; for masks a float or
  integer mask or a wrong shape; for integers zero, negative, a float, a bool or a string.

Then exactly one of these must hold:

- the call raises a ``TypeError`` or ``ValueError`` from a ``raise`` in the library (not from inside
  PyTorch) whose message names the argument (a shape change may name the argument it disagrees with);
  a valid call (no change, or half precision) must not raise;
- the call returns, and every floating tensor in the result is finite and equal to the reference within
  a tolerance of the least precise dtype of the call, relative to the largest reference value. The
  reference is an independent float64 computation where one exists (attention one query at a time over
  the keys it may attend, for every attention function and layer; the softmax, the log-sum-exp and the
  masked mean written out; PyTorch's own functions; counts written as formulas), else the same call in
  float64 (modules copied to float64). The reference is non-finite only where the mathematics says so
  (the log-sum-exp of a query with no key) or where a NaN put into an input reaches in plain arithmetic
  over the allowed positions only: the result must be non-finite exactly there, so a NaN in a masked
  position must not reach anything (masked positions are inert).

``test_every_public_entry_point_has_a_spec`` checks that no public function or module is left out (or is
excluded with a reason), the anchors check each spec's valid call deterministically, and
``test_statistics`` prints how many cases this run generated.
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import inspect
import math
import re
import itertools
import traceback
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from attnbook import attention, blocks, flash, measure, models, positional, rnn, seq2seq, vit
from attnbook.data import Vocab

MODULES = {"attention": attention, "positional": positional, "blocks": blocks, "models": models, "flash": flash,
           "vit": vit, "rnn": rnn, "seq2seq": seq2seq, "measure": measure}
HALF = (torch.float16, torch.bfloat16)
# |result - reference| <= TOL * max(1, max |reference|), by the result's dtype
TOL = {torch.float64: 1e-8, torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 8e-2}
HUGE = 1e4
STATS: collections.Counter = collections.Counter()  # (spec, outcome) -> generated cases


# --- what an argument is, and how it can be wrong ---------------------------------------------------------

class Arg:
    """An argument of a call: how to make a valid value and the ways it can be changed."""

    corruptions: tuple[str, ...] = ()

    def make(self, g: torch.Generator):
        raise NotImplementedError

    def corrupt(self, value, how: str, g: torch.Generator):
        raise NotImplementedError


class Const(Arg):
    """A value passed as it is (a flag, a fixed structure)."""

    def __init__(self, value):
        self.value = value

    def make(self, g):
        return self.value


class Tensor(Arg):
    """A floating tensor; ``seq`` is its sequence dimension (None: none), ``batch`` its batch dimension."""

    def __init__(self, *shape, seq: int | None = None, batch: int | None = 0, positive: bool = False,
                 scale: float = 1.0):
        self.shape, self.seq, self.batch, self.positive, self.scale = shape, seq, batch, positive, scale
        self.corruptions = (("rank+", "rank-", "width", "float64", "float16", "bfloat16", "int", "bool", "list",
                             "nan", "huge") + (("empty", "length") if seq is not None else ())
                            + (("batch",) if batch is not None else ()))

    def make(self, g):
        x = torch.randn(*self.shape, generator=g) * self.scale
        return x.abs() + 0.1 if self.positive else x

    def corrupt(self, x, how, g):
        return _corrupt_tensor(x, how, self.seq, self.batch)


class Ids(Arg):
    """Integer token ids in [0, vocab)."""

    def __init__(self, *shape, vocab: int, seq: int | None = -1, batch: int | None = 0):
        self.shape, self.vocab, self.seq, self.batch = shape, vocab, seq, batch
        self.corruptions = (("float", "negative", "too large", "rank+", "rank-", "list")
                            + (("empty", "length") if seq is not None else ()) + (("batch",) if batch is not None else ()))

    def make(self, g):
        return torch.randint(self.vocab, self.shape, generator=g)

    def corrupt(self, x, how, g):
        if how == "float":
            return x.float()
        if how in ("negative", "too large"):
            x = x.clone()
            if x.numel():
                x.view(-1)[int(torch.randint(x.numel(), (1,), generator=g))] = -1 if how == "negative" else self.vocab
            return x
        return _corrupt_tensor(x, how, self.seq, self.batch)


class Mask(Arg):
    """A boolean mask, True = may attend."""

    corruptions = ("float", "int", "shape", "rank", "list")

    def __init__(self, *shape, p: float = 0.75):
        self.shape, self.p = shape, p

    def make(self, g):
        return torch.rand(*self.shape, generator=g) < self.p

    def corrupt(self, m, how, g):
        if how in ("float", "int"):
            return m.to(torch.float32 if how == "float" else torch.long)
        if how == "shape":
            return m[..., :-1] if m.shape[-1] > 1 else torch.cat([m, m], -1)
        if how == "rank":
            return m[None, None, None]
        return m.tolist()


class Int(Arg):
    """An integer argument (a size, a count, an offset)."""

    corruptions = ("zero", "negative", "float", "bool", "str")

    def __init__(self, value: int):
        self.value = value

    def make(self, g):
        return self.value

    def corrupt(self, v, how, g):
        return {"zero": 0, "negative": -v - 1, "float": v + 0.5, "bool": True, "str": str(v)}[how]


class Num(Arg):
    """A real-number argument (a temperature, a scale, a base)."""

    corruptions = ("zero", "negative", "not a number", "infinite", "str")

    def __init__(self, value: float):
        self.value = value

    def make(self, g):
        return self.value

    def corrupt(self, v, how, g):
        return {"zero": 0.0, "negative": -v - 1.0, "not a number": math.nan, "infinite": math.inf, "str": str(v)}[how]


class Choice(Arg):
    """A name among options (an activation, a norm, a part)."""

    corruptions = ("unknown", "not a string")

    def __init__(self, value: str):
        self.value = value

    def make(self, g):
        return self.value

    def corrupt(self, v, how, g):
        return "no-such-kind" if how == "unknown" else 3


class Obj(Arg):
    """An object argument (a model, a cell, a callable, a config): changed, it is an object of the wrong type."""

    corruptions = ("wrong type",)

    def __init__(self, value):
        self.value = value

    def make(self, g):
        return self.value

    def corrupt(self, v, how, g):
        return [1, 2, 3]


class IntList(Arg):
    """A list of integers (lengths, token ids, positions)."""

    corruptions = ("zero", "too large", "float", "empty", "nested", "str")

    def __init__(self, values, *, high: int):
        self.values, self.high = list(values), high

    def make(self, g):
        return list(self.values)

    def corrupt(self, v, how, g):
        if how == "zero":
            return [0] + v[1:]
        if how == "too large":
            return v[:-1] + [self.high + 1]
        if how == "float":
            return [x + 0.5 for x in v]
        if how == "empty":
            return []
        return [v] if how == "nested" else "abc"


class Pair(Arg):
    """A pair of tensors (an LSTM state (h, c)); changed, one of them is changed or it is not a pair."""

    def __init__(self, first: Tensor, second: Tensor):
        self.parts = (first, second)
        self.corruptions = ("one element", "three elements") + tuple(f"second: {how}" for how in second.corruptions
                                                                     if how != "nan")

    def make(self, g):
        return tuple(p.make(g) for p in self.parts)

    def corrupt(self, v, how, g):
        if how == "one element":
            return (v[0],)
        if how == "three elements":
            return (*v, v[0])
        return (v[0], self.parts[1].corrupt(v[1], how.removeprefix("second: "), g))


class FloatList(Arg):
    """A list of real numbers (data points)."""

    corruptions = ("zero", "negative", "not a number", "shorter", "empty", "str")

    def __init__(self, values):
        self.values = list(values)

    def make(self, g):
        return list(self.values)

    def corrupt(self, v, how, g):
        if how in ("zero", "negative", "not a number"):
            return [{"zero": 0.0, "negative": -1.0, "not a number": math.nan}[how]] + v[1:]
        return {"shorter": v[:-1], "empty": [], "str": "abc"}[how]


def _corrupt_tensor(x: torch.Tensor, how: str, seq, batch):
    if how == "rank+":
        return x.unsqueeze(0)
    if how == "rank-":
        return x[0] if x.dim() > 0 and x.shape[0] else x.reshape(-1)[:0]
    if how == "width":
        return torch.cat([x, x[..., :1]], dim=-1)
    if how in ("float64", "float16", "bfloat16"):
        return x.to(getattr(torch, how))
    if how == "int":
        return (x * 3).long()
    if how == "bool":
        return x > 0
    if how == "list":
        return x.tolist()
    if how == "huge":
        return x * HUGE
    if how == "empty":
        return x.narrow(seq, 0, 0)
    if how == "length":
        return x.narrow(seq, 0, x.shape[seq] - 1) if x.shape[seq] > 1 else torch.cat([x, x], dim=seq)
    if how == "batch":
        return torch.cat([x, x.narrow(batch, 0, 1)], dim=batch)
    raise AssertionError(how)


# --- a spec per entry point ---------------------------------------------------------------------------

@dataclass
class Spec:
    """How to call one public entry point with valid arguments, and what to compare its result with.

    ``build(s)`` gets the drawn sizes ``s`` and returns (the callable, {argument name: Arg}).
    ``reference(fn, **args)`` computes the expected result from the callable and the arguments converted to
    float64 (default: the callable itself); ``check(result, args)`` replaces the comparison for results no
    reference can give (timings).
    """

    target: Any
    sizes: dict[str, tuple[int, int]]
    build: Callable[[SimpleNamespace], tuple[Callable, dict[str, Arg]]]
    reference: Callable | None = None
    check: Callable | None = None
    # whether the whole call also runs in float16 and bfloat16 (not for results that are arg-maxes of the
    # nearly equal logits of an untrained model, generated tokens or accuracies: half-precision rounding
    # changes the choice, which is no error)
    half: bool = True


SPECS: dict[str, Spec] = {}


def spec(name: str, target, sizes: dict, **kwargs):
    def register(build):
        SPECS[name] = Spec(target, sizes, build, **kwargs)
        return build
    return register


def _module(factory):
    """A module built with a fixed seed, in eval mode (no dropout)."""
    torch.manual_seed(0)
    return factory().eval()


def _rows(allowed, *tensors):
    """Every (batch index, query i, allowed key indices) of a mask (..., Tq, Tk) broadcast with ``tensors``."""
    batch = torch.broadcast_shapes(allowed.shape[:-2], *(t.shape[:-2] for t in tensors))
    allowed = allowed.expand(*batch, *allowed.shape[-2:])
    for index in itertools.product(*map(range, batch)):
        for i in range(allowed.shape[-2]):
            yield index, i, allowed[index][i].nonzero().flatten()


def _naive_softmax(scores, mask):
    """The masked softmax one row at a time, over the allowed entries only (the others are 0)."""
    out = torch.zeros(torch.broadcast_shapes(scores.shape, mask.shape), dtype=scores.dtype)
    scores = scores.expand_as(out)
    for index, i, keys in _rows(mask.expand_as(out)):
        if len(keys):
            out[index][i, keys] = torch.softmax(scores[index][i, keys], 0)
    return out


def _naive_attention(q, k, v, allowed, scale=None, bias=None):
    """Attention one query at a time over the keys it may attend, in plain float64 (the reference):
    (out (..., Tq, Dv), weights (..., Tq, Tk)); a query with no allowed key gives zeros."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    bias = torch.zeros(1, 1, dtype=torch.float64) if bias is None else bias
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], allowed.shape[:-2], bias.shape[:-2])
    q, k, v = (x.expand(*batch, *x.shape[-2:]) for x in (q, k, v))
    bias = bias.expand(*batch, q.shape[-2], k.shape[-2])
    out = torch.zeros(*batch, q.shape[-2], v.shape[-1], dtype=torch.float64)
    weights = torch.zeros(*batch, q.shape[-2], k.shape[-2], dtype=torch.float64)
    for index, i, keys in _rows(allowed.expand(*batch, q.shape[-2], k.shape[-2])):
        if len(keys):
            w = torch.softmax((k[index][keys] @ q[index][i]) * scale + bias[index][i, keys], 0)  # (n,)
            out[index][i] = w @ v[index][keys]
            weights[index][i, keys] = w
    return out, weights


def _sdpa_reference(call, q, k, v, mask=None, scale=None, score_bias=None, return_weights=False):
    out, weights = _naive_attention(q, k, v, torch.ones(1, 1, dtype=torch.bool) if mask is None else mask, scale,
                                    score_bias)
    return (out, weights) if return_weights else out


def _naive_heads(layer, query, key, value, mask=None, is_causal=False, return_weights=False, score_bias=None):
    """Multi-head or grouped-query attention from its weights: projections, heads one query at a time, W_o."""
    B, Tq, D = query.shape
    H, Dh = layer.n_heads, layer.d_head
    H_kv = getattr(layer, "n_kv_heads", H)
    q = F.linear(query, layer.W_q.weight, layer.W_q.bias).view(B, Tq, H, Dh).transpose(1, 2)  # (B, H, Tq, Dh)
    k, v = (F.linear(x, W.weight, W.bias).view(B, x.shape[1], H_kv, Dh).transpose(1, 2).repeat_interleave(H // H_kv, 1)
            for x, W in ((key, layer.W_k), (value, layer.W_v)))  # (B, H, Tk, Dh)
    if getattr(layer, "rope", False):
        q, k = positional.apply_rope(q), positional.apply_rope(k)
    allowed = torch.ones(Tq, key.shape[1], dtype=torch.bool)
    if mask is not None:
        allowed = allowed & (mask.unsqueeze(1) if mask.dim() == 3 else mask)
    if is_causal:
        allowed = allowed & torch.ones(Tq, key.shape[1], dtype=torch.bool).tril()
    if score_bias is not None and score_bias.dim() == 3:
        score_bias = score_bias.unsqueeze(1)  # (B, 1, Tq, Tk): every head
    heads, weights = _naive_attention(q, k, v, allowed, bias=score_bias)  # (B, H, Tq, Dh)
    out = F.linear(heads.transpose(1, 2).reshape(B, Tq, D), layer.W_o.weight, layer.W_o.bias)
    return (out, weights) if return_weights else out


# attention ------------------------------------------------------------------------------------------------

SEQ = dict(B=(1, 3), Tq=(1, 5), Tk=(1, 5), D=(1, 6))


@spec("attention.check_qkv", attention.check_qkv, SEQ)
def _(s):
    return attention.check_qkv, dict(q=Tensor(s.B, s.Tq, s.D, seq=1), k=Tensor(s.B, s.Tk, s.D, seq=1),
                                     v=Tensor(s.B, s.Tk, s.D + 1, seq=1), mask=Mask(s.B, s.Tq, s.Tk))


@spec("attention.masked_softmax", attention.masked_softmax, SEQ,
      reference=lambda call, scores, mask: _naive_softmax(scores, mask))
def _(s):
    return attention.masked_softmax, dict(scores=Tensor(s.B, s.Tq, s.Tk, seq=-1), mask=Mask(s.B, s.Tq, s.Tk))


@spec("attention.softmax_with_temperature", attention.softmax_with_temperature, SEQ,
      reference=lambda call, scores, temperature: torch.softmax(scores / temperature, -1))
def _(s):
    return attention.softmax_with_temperature, dict(scores=Tensor(s.B, s.Tk, seq=-1), temperature=Num(0.7))


@spec("attention.scaled_dot_product_attention", attention.scaled_dot_product_attention, {**SEQ, "bias": (0, 1)},
      reference=_sdpa_reference)
def _(s):
    return attention.scaled_dot_product_attention, dict(
        q=Tensor(s.B, 2, s.Tq, s.D, seq=2), k=Tensor(s.B, 2, s.Tk, s.D, seq=2), v=Tensor(s.B, 2, s.Tk, 3, seq=2),
        mask=Mask(s.B, 1, s.Tq, s.Tk), score_bias=Tensor(s.Tq, s.Tk, seq=1, batch=None) if s.bias else Const(None))


@spec("attention.causal_mask", attention.causal_mask, dict(Tq=(1, 6), Tk=(1, 6), offset=(-2, 2)),
      reference=lambda call, t_q, t_k, offset: torch.ones(t_q, t_k, dtype=torch.bool).tril(offset))
def _(s):
    return attention.causal_mask, dict(t_q=Int(s.Tq), t_k=Int(s.Tk), offset=Int(s.offset))


@spec("attention.padding_mask", attention.padding_mask, dict(B=(1, 4), Tk=(3, 6)),
      reference=lambda call, lengths, t_k: torch.tensor([[[j < n for j in range(t_k)]] for n in lengths]))
def _(s):
    return attention.padding_mask, dict(lengths=IntList([min(s.Tk, 1 + b) for b in range(s.B)], high=s.Tk),
                                        t_k=Int(s.Tk))


@spec("attention.AdditiveScore", attention.AdditiveScore, SEQ)
def _(s):
    return _module(lambda: attention.AdditiveScore(s.D, s.D + 1, 4)), dict(
        query=Tensor(s.B, s.Tq, s.D, seq=1), keys=Tensor(s.B, s.Tk, s.D + 1, seq=1))


@spec("attention.AdditiveAttention", attention.AdditiveAttention, SEQ)
def _(s):
    return _module(lambda: attention.AdditiveAttention(s.D, s.D + 1, 4)), dict(
        query=Tensor(s.B, s.Tq, s.D, seq=1), keys=Tensor(s.B, s.Tk, s.D + 1, seq=1),
        values=Tensor(s.B, s.Tk, 3, seq=1), mask=Mask(s.B, 1, s.Tk))


MHA_SIZES = dict(B=(1, 3), Tq=(1, 5), Tk=(1, 5), H=(1, 3), Dh=(1, 3), causal=(0, 1), bias=(0, 1))


def _attention_call(s, layer, **extra):
    D = s.H * s.Dh
    bias = Tensor(s.B, s.H, s.Tq, s.Tk, seq=2) if s.bias else Const(None)  # one bias per head
    return layer, dict(query=Tensor(s.B, s.Tq, D, seq=1), key=Tensor(s.B, s.Tk, D, seq=1),
                       value=Tensor(s.B, s.Tk, D, seq=1), mask=Mask(s.B, s.Tq, s.Tk), is_causal=Const(bool(s.causal)),
                       score_bias=bias, **{k: Const(v) for k, v in extra.items()})


@spec("attention.MultiHeadAttention (fast path)", attention.MultiHeadAttention, MHA_SIZES, reference=_naive_heads)
def _(s):
    return _attention_call(s, _module(lambda: attention.MultiHeadAttention(s.H * s.Dh, s.H)))


@spec("attention.MultiHeadAttention (explicit path)", attention.MultiHeadAttention, MHA_SIZES,
      reference=_naive_heads)
def _(s):
    return _attention_call(s, _module(lambda: attention.MultiHeadAttention(s.H * s.Dh, s.H)), return_weights=True)


@spec("attention.GroupedQueryAttention", attention.GroupedQueryAttention,
      {**MHA_SIZES, "kv": (0, 1), "rope": (0, 1), "weights": (0, 1)}, reference=_naive_heads)
def _(s):
    s = SimpleNamespace(**{**vars(s), "H": s.H * 2, "Dh": s.Dh * 2})  # H divisible by H_kv, Dh even for RoPE
    layer = _module(lambda: attention.GroupedQueryAttention(s.H * s.Dh, s.H, 2 if s.kv else 1, rope=bool(s.rope)))
    return _attention_call(s, layer, return_weights=bool(s.weights))



# positional -----------------------------------------------------------------------------------------------

POS = dict(B=(1, 3), T=(1, 5), half_D=(1, 4), offset=(0, 3))


@spec("positional.frequencies", positional.frequencies, POS,
      reference=lambda call, d_model, base: base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model))
def _(s):
    return positional.frequencies, dict(d_model=Int(2 * s.half_D), base=Num(100.0))


@spec("positional.angles", positional.angles, POS)
def _(s):
    return positional.angles, dict(positions=IntList(range(s.offset, s.offset + s.T), high=100),
                                   d_model=Int(2 * s.half_D))


@spec("positional.sinusoidal", positional.sinusoidal, POS)
def _(s):
    return positional.sinusoidal, dict(n_positions=Int(s.T), d_model=Int(2 * s.half_D), offset=Int(s.offset))


@spec("positional.sinusoidal_2d", positional.sinusoidal_2d, dict(h=(1, 3), w=(1, 3), quarter_D=(1, 3)))
def _(s):
    return positional.sinusoidal_2d, dict(height=Int(s.h), width=Int(s.w), d_model=Int(4 * s.quarter_D))


@spec("positional.SinusoidalPositionalEncoding", positional.SinusoidalPositionalEncoding, POS)
def _(s):
    return _module(lambda: positional.SinusoidalPositionalEncoding(2 * s.half_D, max_len=6)), dict(
        x=Tensor(s.B, s.T, 2 * s.half_D, seq=1), offset=Int(s.offset))


@spec("positional.LearnedPositionalEmbedding", positional.LearnedPositionalEmbedding, POS)
def _(s):
    return _module(lambda: positional.LearnedPositionalEmbedding(2 * s.half_D, max_len=8)), dict(
        x=Tensor(s.B, s.T, 2 * s.half_D, seq=1), offset=Int(s.offset))


@spec("positional.SinusoidalPositionalEncoding2D", positional.SinusoidalPositionalEncoding2D,
      dict(B=(1, 3), h=(1, 3), w=(1, 3), quarter_D=(1, 3)))
def _(s):
    return _module(lambda: positional.SinusoidalPositionalEncoding2D(4 * s.quarter_D, s.h, s.w)), dict(
        x=Tensor(s.B, s.h * s.w, 4 * s.quarter_D, seq=1))


@spec("positional.apply_rope", positional.apply_rope, POS)
def _(s):
    return positional.apply_rope, dict(x=Tensor(s.B, 2, s.T, 2 * s.half_D, seq=2), offset=Int(s.offset))


# blocks ---------------------------------------------------------------------------------------------------

BLOCK = dict(B=(1, 3), T=(1, 4), S=(1, 4), H=(1, 2), Dh=(1, 3), variant=(0, 3))
VARIANTS = [dict(), dict(norm_position="pre", mlp="gelu"), dict(norm="rmsnorm", mlp="swiglu", norm_position="pre"),
            dict(mlp="moe", norm_position="pre")]


@spec("blocks.make_norm", blocks.make_norm, dict(D=(1, 6), kind=(0, 1)))
def _(s):
    return blocks.make_norm, dict(kind=Choice(["layernorm", "rmsnorm"][s.kind]), d_model=Int(s.D))


@spec("blocks.make_mlp", blocks.make_mlp, dict(D=(1, 6), F=(1, 6), kind=(0, 3)))
def _(s):
    return blocks.make_mlp, dict(kind=Choice(["relu", "gelu", "swiglu", "moe"][s.kind]), d_model=Int(s.D),
                                 d_ff=Int(s.F))


@spec("blocks.FeedForward", blocks.FeedForward, dict(B=(1, 3), T=(1, 4), D=(1, 6), F=(1, 6)))
def _(s):
    return _module(lambda: blocks.FeedForward(s.D, s.F, activation="gelu")), dict(x=Tensor(s.B, s.T, s.D, seq=1))


@spec("blocks.ConvFeedForward", blocks.ConvFeedForward, dict(B=(1, 3), T=(1, 4), D=(1, 6), F=(1, 6)))
def _(s):
    return _module(lambda: blocks.ConvFeedForward(s.D, s.F)), dict(x=Tensor(s.B, s.T, s.D, seq=1))


@spec("blocks.RMSNorm", blocks.RMSNorm, dict(B=(1, 3), T=(1, 4), D=(1, 6)))
def _(s):
    return _module(lambda: blocks.RMSNorm(s.D)), dict(x=Tensor(s.B, s.T, s.D, seq=1))


@spec("blocks.SwiGLU", blocks.SwiGLU, dict(B=(1, 3), T=(1, 4), D=(1, 6), F=(1, 6)))
def _(s):
    return _module(lambda: blocks.SwiGLU(s.D, s.F)), dict(x=Tensor(s.B, s.T, s.D, seq=1))


@spec("blocks.MixtureOfExperts", blocks.MixtureOfExperts, dict(B=(1, 3), T=(1, 4), D=(1, 6), E=(1, 4)))
def _(s):
    return _module(lambda: blocks.MixtureOfExperts(s.D, 4, n_experts=s.E, top_k=1 + s.E // 2)), dict(
        x=Tensor(s.B, s.T, s.D, seq=1))


@spec("blocks.EncoderBlock", blocks.EncoderBlock, {**BLOCK, "causal": (0, 1), "bias": (0, 1)})
def _(s):
    D = s.H * s.Dh
    return _module(lambda: blocks.EncoderBlock(D, s.H, 4, **VARIANTS[s.variant])), dict(
        x=Tensor(s.B, s.T, D, seq=1), mask=Mask(s.B, s.T, s.T), is_causal=Const(bool(s.causal)),
        score_bias=Tensor(s.B, s.T, s.T, seq=1) if s.bias else Const(None))


@spec("blocks.EncoderStack", blocks.EncoderStack, {**BLOCK, "L": (1, 2), "bias": (0, 1)})
def _(s):
    D = s.H * s.Dh
    return _module(lambda: blocks.EncoderStack(D, s.H, s.L, 4, **VARIANTS[s.variant])), dict(
        x=Tensor(s.B, s.T, D, seq=1), mask=Mask(s.B, 1, s.T),
        score_bias=Tensor(s.B, s.H, s.T, s.T, seq=2) if s.bias else Const(None))


def _naive_masked_mean(call, x, keep):
    """The mean of the kept tokens of each sequence, one sequence at a time (zeros when none is kept)."""
    return torch.stack([x[b][keep[b]].mean(dim=0) if keep[b].any() else torch.zeros(x.shape[-1], dtype=x.dtype)
                        for b in range(x.shape[0])])


@spec("blocks.masked_mean", blocks.masked_mean, dict(B=(1, 3), T=(1, 4), D=(1, 4)), reference=_naive_masked_mean)
def _(s):
    return blocks.masked_mean, dict(x=Tensor(s.B, s.T, s.D, seq=1), keep=Mask(s.B, s.T))


@spec("blocks.DecoderBlock", blocks.DecoderBlock, BLOCK)
def _(s):
    D = s.H * s.Dh
    return _module(lambda: blocks.DecoderBlock(D, s.H, 4, **VARIANTS[s.variant])), dict(
        x=Tensor(s.B, s.T, D, seq=1), memory=Tensor(s.B, s.S, D, seq=1), mask=Mask(s.T, s.T),
        memory_mask=Mask(s.B, 1, s.S))


@spec("blocks.register_moe", blocks.register_moe, dict(E=(1, 4), k=(1, 4)))
def _(s):
    return blocks.register_moe, dict(n_experts=Int(max(s.E, s.k)), top_k=Int(s.k), expert=Choice("relu"))


@spec("blocks.moe_aux_loss", blocks.moe_aux_loss, dict(B=(1, 3), T=(1, 4)))
def _(s):
    model = _module(lambda: models.GPT(_config(mlp="moe")))
    with torch.no_grad():
        model(torch.randint(11, (s.B, s.T)))  # the routing statistics of one batch
    return blocks.moe_aux_loss, dict(model=Obj(model))


# models ---------------------------------------------------------------------------------------------------

def _config(**changes):
    return models.TransformerConfig(**{**dict(vocab_size=11, block_size=6, n_layers=1, n_heads=2, d_model=8,
                                              d_ff=8), **changes})


MODEL = dict(B=(1, 3), T=(1, 6), S=(1, 6), variant=(0, 2))
MODEL_VARIANTS = [dict(), dict(norm_position="post", positional="sinusoidal"),
                  dict(norm="rmsnorm", mlp="swiglu", positional="rope", n_kv_heads=1)]


@spec("models.TransformerConfig", models.TransformerConfig, dict(V=(1, 20), L=(1, 3), H=(1, 3), Dh=(1, 3)))
def _(s):
    return models.TransformerConfig, dict(vocab_size=Int(s.V), n_layers=Int(s.L), n_heads=Int(s.H),
                                          d_model=Int(s.H * s.Dh), norm=Choice("rmsnorm"))


@spec("models.Encoder", models.Encoder, MODEL)
def _(s):
    return _module(lambda: models.Encoder(_config(**MODEL_VARIANTS[s.variant]))), dict(
        src=Ids(s.B, s.S, vocab=11), src_mask=Mask(s.B, 1, s.S))


@spec("models.Decoder", models.Decoder, MODEL)
def _(s):
    return _module(lambda: models.Decoder(_config(**MODEL_VARIANTS[s.variant]))), dict(
        tgt=Ids(s.B, s.T, vocab=11), memory=Tensor(s.B, s.S, 8, seq=1), memory_mask=Mask(s.B, 1, s.S))


@spec("models.EncoderDecoder", models.EncoderDecoder, MODEL)
def _(s):
    return _module(lambda: models.EncoderDecoder(_config(**MODEL_VARIANTS[s.variant]))), dict(
        src=Ids(s.B, s.S, vocab=11), tgt=Ids(s.B, s.T, vocab=11), src_mask=Mask(s.B, 1, s.S))


@spec("models.GPT", models.GPT, MODEL)
def _(s):
    return _module(lambda: models.GPT(_config(**MODEL_VARIANTS[s.variant]))), dict(idx=Ids(s.B, s.T, vocab=11))


@spec("models.GPT.generate", models.GPT.generate, {**MODEL, "new": (0, 4), "cache": (0, 1)}, half=False)
def _(s):
    model = _module(lambda: models.GPT(_config(**{**MODEL_VARIANTS[s.variant], "n_kv_heads": 1})))
    return model.generate, dict(idx=Ids(s.B, s.T, vocab=11), max_new_tokens=Int(s.new), temperature=Const(0.0),
                                use_cache=Const(bool(s.cache)))


@spec("models.lm_loss", models.lm_loss, dict(B=(1, 3), T=(1, 4), V=(1, 6)))
def _(s):
    return models.lm_loss, dict(logits=Tensor(s.B, s.T, s.V, seq=1), targets=Ids(s.B, s.T, vocab=s.V))


@spec("models.lm_loss_sum", models.lm_loss_sum, dict(N=(2, 14), T=(1, 6), batch=(1, 3)))
def _(s):
    model = _module(lambda: models.GPT(_config()))
    return models.lm_loss_sum, dict(model=Obj(model), ids=Ids(s.N, vocab=11, batch=None), block_size=Int(s.T),
                                    batch_size=Int(s.batch))


@spec("models.evaluate_lm", models.evaluate_lm, dict(N=(2, 14), T=(1, 6), batch=(1, 3)))
def _(s):
    model = _module(lambda: models.GPT(_config()))
    return models.evaluate_lm, dict(model=Obj(model), ids=Ids(s.N, vocab=11, batch=None), block_size=Int(s.T),
                                    batch_size=Int(s.batch))


def _tiny_gpt2():
    """A small Hugging Face GPT-2 with random weights (no download)."""
    from transformers import GPT2Config, GPT2LMHeadModel  # imported here: only these specs need it
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=11, n_positions=6, n_embd=8, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config).eval()


@spec("models.gpt2_config", models.gpt2_config, dict(V=(2, 20), L=(1, 3)))
def _(s):
    from transformers import GPT2Config
    config = GPT2Config(vocab_size=s.V, n_layer=s.L, n_embd=8, n_head=2, bos_token_id=0, eos_token_id=0)
    return models.gpt2_config, dict(hf_config=Obj(config))


@spec("models.gpt2_from_hf", models.gpt2_from_hf, dict(B=(1, 3), T=(1, 6)),
      reference=lambda call, source, idx: source(idx).logits)
def _(s):
    def gpt2_logits(source, idx):  # the converted model's logits, against GPT-2's own
        return models.gpt2_from_hf(source)(idx)
    return gpt2_logits, dict(source=Obj(_tiny_gpt2()), idx=Ids(s.B, s.T, vocab=11))

# flash ----------------------------------------------------------------------------------------------------

FLASH = dict(B=(1, 2), Tq=(1, 6), Tk=(1, 6), D=(1, 4), bq=(1, 4), bk=(1, 4), causal=(0, 1), offset=(-1, 2))


def _flash_args(s):
    return dict(q=Tensor(s.B, s.Tq, s.D, seq=1), k=Tensor(s.B, s.Tk, s.D, seq=1), v=Tensor(s.B, s.Tk, 3, seq=1),
                causal=Const(bool(s.causal)), offset=Int(s.offset) if s.causal else Const(None),
                block_q=Int(s.bq), block_k=Int(s.bk))


def _flash_allowed(q, k, causal, offset):
    return attention.causal_mask(q.shape[-2], k.shape[-2], offset=offset or 0) if causal else \
        torch.ones(1, 1, dtype=torch.bool)


def _flash_reference(call, q, k, v, causal, offset, block_q, block_k):
    return _naive_attention(q, k, v, _flash_allowed(q, k, causal, offset))[0]


def _flash_forward_reference(call, q, k, v, causal, offset, block_q, block_k):
    """The output and the log-sum-exp of each query's allowed scores (-inf for a query with none)."""
    out = _naive_attention(q, k, v, _flash_allowed(q, k, causal, offset))[0]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    allowed = _flash_allowed(q, k, causal, offset).expand_as(scores)
    lse = torch.full(scores.shape[:-1], -math.inf, dtype=torch.float64)
    for index, i, keys in _rows(allowed):
        if len(keys):
            lse[index][i] = torch.logsumexp(scores[index][i, keys], 0)
    return out, lse


@spec("flash.online_softmax_update", flash.online_softmax_update, dict(R=(1, 4), n=(1, 5)))
def _(s):
    return flash.online_softmax_update, dict(m=Tensor(s.R, batch=None), l=Tensor(s.R, batch=None, positive=True),
                                             x=Tensor(s.R, s.n, seq=1, batch=None))


@spec("flash.online_softmax", flash.online_softmax, dict(R=(1, 4), n=(1, 6), block=(1, 4)),
      reference=lambda call, x, block_size: torch.softmax(x, -1))
def _(s):
    return flash.online_softmax, dict(x=Tensor(s.R, s.n, seq=1), block_size=Int(s.block))


@spec("flash.flash_attention", flash.flash_attention, FLASH, reference=_flash_reference)
def _(s):
    return flash.flash_attention, _flash_args(s)


@spec("flash.flash_attention_forward", flash.flash_attention_forward, FLASH, reference=_flash_forward_reference)
def _(s):
    return flash.flash_attention_forward, _flash_args(s)


@spec("flash.flash_attention_backward", flash.flash_attention_backward, FLASH)
def _(s):
    args = _flash_args(s)
    g = torch.Generator().manual_seed(0)
    q, k, v = (args[n].make(g) for n in "qkv")
    out, lse = flash.flash_attention_forward(q, k, v, causal=bool(s.causal), offset=args["offset"].make(g))
    return flash.flash_attention_backward, dict(grad_out=Tensor(*out.shape, seq=1), q=Const(q), k=Const(k),
                                                v=Const(v), out=Const(out), lse=Const(lse), **{
                                                    n: a for n, a in args.items() if n not in "qkv"})


IO = dict(n=(1, 40), d=(1, 8), capacity=(8, 12))  # 2^8 bytes hold the smallest tiles for d <= 8


@spec("flash.standard_attention_io", flash.standard_attention_io, IO)
def _(s):
    return flash.standard_attention_io, dict(n=Int(s.n), d=Int(s.d), capacity=Int(2 ** s.capacity))


@spec("flash.flash_attention_block_sizes", flash.flash_attention_block_sizes, IO)
def _(s):
    return flash.flash_attention_block_sizes, dict(d=Int(s.d), capacity=Int(2 ** s.capacity))


@spec("flash.flash_attention_io", flash.flash_attention_io, IO)
def _(s):
    return flash.flash_attention_io, dict(n=Int(s.n), d=Int(s.d), capacity=Int(2 ** s.capacity))



# vit ------------------------------------------------------------------------------------------------------

IMG = dict(B=(1, 3), C=(1, 2), gh=(1, 3), gw=(1, 3), P=(1, 3))


def _vit_config(s, **changes):
    return vit.ViTConfig(**{**dict(image_size=(s.gh * 2, s.gw * 2), patch_size=2, in_channels=s.C, n_classes=3,
                                   d_model=8, n_layers=1, n_heads=2), **changes})


@spec("vit.grid_size", vit.grid_size, IMG)
def _(s):
    return vit.grid_size, dict(image_size=Int(s.gh * s.P), patch_size=Int(s.P))


@spec("vit.n_tokens", vit.n_tokens, IMG)
def _(s):
    return vit.n_tokens, dict(image_size=Int(s.gw * s.P), patch_size=Int(s.P), class_token=Const(bool(s.C - 1)))


@spec("vit.patchify", vit.patchify, IMG)
def _(s):
    return vit.patchify, dict(images=Tensor(s.B, s.C, s.gh * s.P, s.gw * s.P), patch_size=Int(s.P))


@spec("vit.unpatchify", vit.unpatchify, IMG)
def _(s):
    return vit.unpatchify, dict(patches=Tensor(s.B, s.gh * s.gw, s.C * s.P * s.P, seq=1), patch_size=Int(s.P),
                                image_size=Const((s.gh * s.P, s.gw * s.P)), in_channels=Int(s.C))


@spec("vit.LinearPatchEmbedding", vit.LinearPatchEmbedding, IMG)
def _(s):
    return _module(lambda: vit.LinearPatchEmbedding(s.C, s.P, 4)), dict(
        images=Tensor(s.B, s.C, s.gh * s.P, s.gw * s.P))


@spec("vit.ConvPatchEmbedding", vit.ConvPatchEmbedding, IMG)
def _(s):
    return _module(lambda: vit.ConvPatchEmbedding(s.C, s.P, 4)), dict(images=Tensor(s.B, s.C, s.gh * s.P, s.gw * s.P))


@spec("vit.ViTConfig", vit.ViTConfig, IMG)
def _(s):
    return vit.ViTConfig, dict(image_size=Int(s.gh * s.P), patch_size=Int(s.P), in_channels=Int(s.C),
                               n_classes=Int(3), d_model=Int(8), n_layers=Int(1), n_heads=Int(2))


@spec("vit.ViT", vit.ViT, {**IMG, "pool": (0, 1), "positions": (0, 2)})
def _(s):
    config = _vit_config(s, pool=vit.POOLS[s.pool], positions=vit.POSITIONS[s.positions])
    return _module(lambda: vit.ViT(config)), dict(images=Tensor(s.B, s.C, s.gh * 2, s.gw * 2),
                                                  return_weights=Const(bool(s.pool)))


@spec("vit.vit_parameter_count", vit.vit_parameter_count, IMG,
      reference=lambda call, config: {**call(config), "total": sum(p.numel() for p in vit.ViT(config).parameters())})
def _(s):
    return vit.vit_parameter_count, dict(config=Obj(_vit_config(s)))


@spec("vit.class_attention_maps", vit.class_attention_maps, IMG)
def _(s):
    T = s.gh * s.gw + 1
    return vit.class_attention_maps, dict(weights=Tensor(s.B, 2, T, T, seq=2), grid=Const((s.gh, s.gw)))


@spec("vit.attention_rollout", vit.attention_rollout, IMG)
def _(s):
    T = s.gh * s.gw + 1
    return vit.attention_rollout, dict(weights=Tensor(s.B, 2, T, T, seq=2), grid=Const((s.gh, s.gw)),
                                       residual=Num(0.5))


@spec("vit.SmallCNN", vit.SmallCNN, IMG)
def _(s):
    return _module(lambda: vit.SmallCNN(s.C, 3, widths=(4, 4))), dict(images=Tensor(s.B, s.C, s.gh * 2, s.gw * 2))


@spec("vit.accuracy", vit.accuracy, IMG, half=False)
def _(s):
    return vit.accuracy, dict(model=Obj(_module(lambda: vit.SmallCNN(s.C, 3, widths=(4,)))),
                              images=Tensor(s.B, s.C, s.gh * 2, s.gw * 2), labels=Ids(s.B, vocab=3, seq=None),
                              batch_size=Int(2))


@spec("vit.random_affine", vit.random_affine, IMG)
def _(s):
    def random_affine(images, rotate, shift, scale):  # the same random draws for the call and its reference
        return vit.random_affine(images, rotate=rotate, shift=shift, scale=scale,
                                 generator=torch.Generator().manual_seed(0))
    return random_affine, dict(images=Tensor(s.B, s.C, s.gh * 2, s.gw * 2), rotate=Num(10.0), shift=Num(1.0),
                               scale=Num(0.1))


# rnn ------------------------------------------------------------------------------------------------------

RNN = dict(B=(1, 3), T=(1, 4), D=(1, 4), H=(1, 4), kind=(0, 2))
CELLS = [lambda D, H: rnn.RNNCell(D, H), lambda D, H: rnn.LSTMCell(D, H), lambda D, H: rnn.GRUCell(D, H)]


def _state(cell, *batch, g=None):
    """A (drawn) state for ``cell``: h, or (h, c) for an LSTM."""
    H = cell.hidden_size
    return (Tensor(*batch, H), Tensor(*batch, H)) if isinstance(cell, rnn.LSTMCell) else Tensor(*batch, H)


@spec("rnn.RNNCell", rnn.RNNCell, RNN)
def _(s):
    return _module(lambda: rnn.RNNCell(s.D, s.H)), dict(x=Tensor(s.B, s.D), h=Tensor(s.B, s.H))


@spec("rnn.LSTMCell", rnn.LSTMCell, RNN)
def _(s):
    cell = _module(lambda: rnn.LSTMCell(s.D, s.H))
    return cell, dict(x=Tensor(s.B, s.D), state=Pair(Tensor(s.B, s.H), Tensor(s.B, s.H)), return_gates=Const(True))


@spec("rnn.GRUCell", rnn.GRUCell, RNN)
def _(s):
    return _module(lambda: rnn.GRUCell(s.D, s.H)), dict(x=Tensor(s.B, s.D), h=Tensor(s.B, s.H),
                                                        return_gates=Const(True))


@spec("rnn.Recurrent", rnn.Recurrent, RNN)
def _(s):
    return _module(lambda: rnn.Recurrent(CELLS[s.kind](s.D, s.H))), dict(x=Tensor(s.B, s.T, s.D, seq=1))


@spec("rnn.SequenceRegressor", rnn.SequenceRegressor, RNN)
def _(s):
    return _module(lambda: rnn.SequenceRegressor(["rnn", "lstm", "gru"][s.kind], s.D, s.H)), dict(
        x=Tensor(s.B, s.T, s.D, seq=1))


@spec("rnn.set_forget_bias", rnn.set_forget_bias, RNN)
def _(s):
    def set_forget_bias(module, value):
        return rnn.set_forget_bias(module, value).b[module.hidden_size:2 * module.hidden_size]  # the forget gate
    return set_forget_bias, dict(module=Obj(_module(lambda: rnn.LSTMCell(s.D, s.H))), value=Num(1.0))


@spec("rnn.flatten_state", rnn.flatten_state, RNN)
def _(s):
    return rnn.flatten_state, dict(state=Pair(Tensor(s.B, s.H), Tensor(s.B, s.H)))


@spec("rnn.unflatten_state", rnn.unflatten_state, RNN)
def _(s):
    return rnn.unflatten_state, dict(cell=Obj(_module(lambda: CELLS[s.kind](s.D, s.H))),
                                     s=Tensor(s.B, s.H * (2 if s.kind == 1 else 1)))


@spec("rnn.state_jacobians", rnn.state_jacobians, RNN)
def _(s):
    return rnn.state_jacobians, dict(cell=Obj(_module(lambda: CELLS[s.kind](s.D, s.H))),
                                     x=Tensor(s.T, s.D, seq=0, batch=None))


@spec("rnn.jacobian_chain", rnn.jacobian_chain, RNN)
def _(s):
    return rnn.jacobian_chain, dict(jacobians=Tensor(s.T, s.H, s.H, seq=0, batch=None))


@spec("rnn.gradient_norms", rnn.gradient_norms, {**RNN, "part": (0, 2)})
def _(s):
    cell = _module(lambda: rnn.LSTMCell(s.D, s.H))
    return rnn.gradient_norms, dict(cell=Obj(cell), x=Tensor(s.T, s.D, seq=0, batch=None),
                                    part=Choice(["state", "h", "c"][s.part]))


# seq2seq --------------------------------------------------------------------------------------------------

S2S = dict(B=(1, 3), Ts=(1, 5), Tt=(1, 4), attention=(0, 1))


def _seq2seq(s):
    return _module(lambda: seq2seq.Seq2Seq(9, 8, d_embed=4, d_hidden=4, attention=bool(s.attention)))


def _lengths(s):
    return IntList([max(1, s.Ts - b) for b in range(s.B)], high=s.Ts)


@spec("seq2seq.Encoder", seq2seq.Encoder, S2S)
def _(s):
    return _module(lambda: seq2seq.Encoder(9, 4, 3)), dict(src=Ids(s.B, s.Ts, vocab=9), lengths=_lengths(s))


@spec("seq2seq.Decoder", seq2seq.Decoder, S2S)
def _(s):
    model = _seq2seq(s)
    with torch.no_grad():
        memory = model.encode(torch.randint(9, (s.B, s.Ts)))
    return model.decoder, dict(tgt_in=Ids(s.B, s.Tt, vocab=8), memory=Const(memory))


@spec("seq2seq.Seq2Seq", seq2seq.Seq2Seq, S2S)
def _(s):
    return _seq2seq(s), dict(src=Ids(s.B, s.Ts, vocab=9), src_lengths=_lengths(s), tgt_in=Ids(s.B, s.Tt, vocab=8))


@spec("seq2seq.make_batch", seq2seq.make_batch, S2S)
def _(s):
    pairs = [([4 + (b + t) % 5 for t in range(s.Ts - b % s.Ts)], [4] * s.Tt) for b in range(s.B)]
    return seq2seq.make_batch, dict(pairs=Obj(pairs), pad_id=Int(0))


@spec("seq2seq.sequence_loss", seq2seq.sequence_loss, S2S)
def _(s):
    g = torch.Generator().manual_seed(1)
    pairs = [(torch.randint(4, 9, (s.Ts - b % s.Ts,), generator=g).tolist(),
              torch.randint(4, 8, (s.Tt,), generator=g).tolist()) for b in range(s.B)]
    return seq2seq.sequence_loss, dict(model=Obj(_seq2seq(s)), batch=Const(seq2seq.make_batch(pairs)))


@spec("seq2seq.greedy_decode", seq2seq.greedy_decode, S2S, half=False)
def _(s):
    return seq2seq.greedy_decode, dict(model=Obj(_seq2seq(s)), src=Ids(s.B, s.Ts, vocab=9),
                                       src_lengths=_lengths(s), max_len=Int(s.Tt))


@spec("seq2seq.beam_search", seq2seq.beam_search, S2S, half=False)
def _(s):
    return seq2seq.beam_search, dict(model=Obj(_seq2seq(s)), src=Ids(s.Ts, vocab=9, batch=None),
                                     beam_width=Int(s.B), max_len=Int(s.Tt))


@spec("seq2seq.score_sequence", seq2seq.score_sequence, S2S)
def _(s):
    return seq2seq.score_sequence, dict(model=Obj(_seq2seq(s)), src=Ids(s.Ts, vocab=9, batch=None),
                                        tokens=IntList([4 + t % 4 for t in range(s.Tt)], high=7))


@spec("seq2seq.translate", seq2seq.translate, S2S, half=False)
def _(s):
    words = ["le", "chat", "est", "noir", "un"]
    src_vocab, tgt_vocab = Vocab(words), Vocab(["the", "cat", "is", "black"])
    return seq2seq.translate, dict(model=Obj(_seq2seq(s)), tokens=Const(words[:s.Ts]), src_vocab=Obj(src_vocab),
                                   tgt_vocab=Obj(tgt_vocab), beam_width=Int(s.B), max_len=Int(s.Tt))


# measure --------------------------------------------------------------------------------------------------

def _check_timing(out, args):
    assert isinstance(out, measure.Timing) and len(out.times) == args["repeats"]
    assert all(math.isfinite(t) and t >= 0 for t in out.times)


@spec("measure.time_fn", measure.time_fn, dict(n=(1, 3), r=(1, 3)), check=_check_timing)
def _(s):
    return measure.time_fn, dict(fn=Obj(lambda: torch.ones(s.n).sum()), repeats=Int(s.r), warmup=Int(s.n - 1))


def _matmul(m, k, n):
    """A function that multiplies an (m, k) by a (k, n) matrix: 2 m k n flops, an (m, n) float32 result."""
    a, b = torch.ones(m, k), torch.ones(k, n)
    product = lambda: a @ b  # noqa: E731
    product.flops, product.bytes = 2 * m * k * n, 4 * m * n
    return product


@spec("measure.peak_memory", measure.peak_memory, dict(m=(1, 8), k=(1, 8), n=(1, 8)),
      reference=lambda call, fn: fn.bytes)
def _(s):
    return measure.peak_memory, dict(fn=Obj(_matmul(s.m, s.k, s.n)))


@spec("measure.flop_count", measure.flop_count, dict(m=(1, 8), k=(1, 8), n=(1, 8)),
      reference=lambda call, fn: fn.flops)
def _(s):
    return measure.flop_count, dict(fn=Obj(_matmul(s.m, s.k, s.n)))


@spec("measure.count_operations", measure.count_operations, dict(n=(1, 5)), reference=lambda call, fn: fn.n + 1)
def _(s):
    def ops():
        x = torch.zeros(3)
        for _ in range(s.n):
            x = x + 1  # one operation each
        return x
    ops.n = s.n
    return measure.count_operations, dict(fn=Obj(ops))


@spec("measure.count_parameters", measure.count_parameters, dict(D=(1, 5), F=(1, 5)),
      reference=lambda call, model: sum(p.numel() for p in model.parameters()))
def _(s):
    return measure.count_parameters, dict(model=Obj(blocks.FeedForward(s.D, s.F)))


@spec("measure.fit_power_law", measure.fit_power_law, dict(n=(2, 6), k=(1, 3)),
      reference=lambda call, x, y: (float(torch.tensor(y).log().diff()[0] / torch.tensor(x).log().diff()[0]),
                                  float(y[0] / x[0] ** (torch.tensor(y).log().diff()[0] / torch.tensor(x).log().diff()[0]))))
def _(s):
    x = [2.0 ** i for i in range(1, s.n + 1)]
    return measure.fit_power_law, dict(x=FloatList(x), y=FloatList([3.0 * v ** s.k for v in x]))


@spec("measure.format_bytes", measure.format_bytes, dict(e=(0, 4)),
      reference=lambda call, n: f"{n / 1024 ** min(3, int(math.log(max(n, 1), 1024))):.1f} "
                              f"{['B', 'KiB', 'MiB', 'GiB'][min(3, int(math.log(max(n, 1), 1024)))]}".replace(
          ".0 B", " B") if n >= 1024 else f"{n:.0f} B")
def _(s):
    return measure.format_bytes, dict(n=Num(3.0 * 1024 ** s.e))


def _gpt_for_counting(s):
    config = models.TransformerConfig(vocab_size=11, block_size=8, n_layers=s.L, n_heads=2, d_model=8 * s.D,
                                      bias=False, mlp="relu")
    return models.GPT(config)


@spec("measure.transformer_flops", measure.transformer_flops, dict(L=(1, 3), D=(1, 3), T=(1, 8)), half=False,
      reference=lambda call, model, seq_len: measure.TransformerFlops(
          n=12 * model.config.n_layers * model.config.d_model ** 2, n_layers=model.config.n_layers, seq_len=seq_len,
          d_attn=model.config.d_model, dense=24 * model.config.n_layers * model.config.d_model ** 2,
          attention=4 * model.config.n_layers * seq_len * model.config.d_model, deembedding=2 * model.config.d_model * 11))
def _(s):
    return measure.transformer_flops, dict(model=Obj(_gpt_for_counting(s)), seq_len=Int(s.T))


def _activation_bytes_reference(call, config, batch_size, seq_len, attention, bytes_per_element):
    D, F, H = config.d_model, config.d_ff, config.n_heads
    hidden = 1 if config.mlp == "relu" else 2
    if attention == "explicit":
        return batch_size * seq_len * ((8 * D + hidden * F + 2 * H * seq_len) * bytes_per_element + 16)
    return batch_size * seq_len * ((8 * D + hidden * F) * bytes_per_element + 4 * (H + 4))


@spec("measure.activation_bytes", measure.activation_bytes, dict(B=(1, 3), T=(1, 6), D=(1, 3), e=(0, 1)), half=False,
      reference=_activation_bytes_reference)
def _(s):
    config = models.TransformerConfig(vocab_size=11, n_heads=2, d_model=8 * s.D, bias=False,
                                      mlp=("relu", "gelu")[s.e])
    return measure.activation_bytes, dict(config=Obj(config), batch_size=Int(s.B), seq_len=Int(s.T),
                                          attention=Choice(("fused", "explicit")[s.e]), bytes_per_element=Int(2 + 2 * s.e))


def _exp_of(n):
    """A function whose graph keeps one tensor of n float32 numbers for the backward pass (exp keeps its output)."""
    x = torch.ones(n, requires_grad=True)
    forward = lambda: torch.exp(x)  # noqa: E731
    forward.bytes = 4 * n
    return forward


@spec("measure.saved_tensor_bytes", measure.saved_tensor_bytes, dict(n=(1, 16)), half=False,
      reference=lambda call, fn, exclude: fn.bytes)
def _(s):
    return measure.saved_tensor_bytes, dict(fn=Obj(_exp_of(s.n)), exclude=Const(()))


def _entropy_reference(call, weights, start):
    w = weights[:, :, start:].double()
    return -(w * w.clamp_min(1e-30).log()).sum(-1).mean(dim=(0, 2))


@spec("measure.attention_entropy", measure.attention_entropy, dict(B=(1, 3), H=(1, 3), T=(2, 6)),
      reference=_entropy_reference)
def _(s):
    return measure.attention_entropy, dict(weights=Tensor(s.B, s.H, s.T, s.T, seq=2, positive=True, scale=0.3),
                                           start=Int(1))


# --- running a case -----------------------------------------------------------------------------------

def _convert(value, dtype):
    """Floating tensors (also inside lists, tuples and dicts) and modules converted to ``dtype``; modules copied."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, nn.Module):
        return copy.deepcopy(value).to(dtype)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_convert(v, dtype) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_convert(v, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _convert(v, dtype) for k, v in value.items()}
    return value


def _call(fn, values: dict):
    return fn(**values)


def _leaves(x, path="result"):
    """(path, value) of every tensor, number, string... in a result."""
    if isinstance(x, torch.Tensor) or x is None or isinstance(x, (bool, int, float, str, nn.Module)):
        yield path, x
    elif dataclasses.is_dataclass(x):
        yield from _leaves(dataclasses.asdict(x) if not hasattr(x, "_fields") else x._asdict(), path)
    elif isinstance(x, tuple) and hasattr(x, "_fields"):
        yield from _leaves(x._asdict(), path)
    elif isinstance(x, dict):
        for k in x:
            yield from _leaves(x[k], f"{path}[{k!r}]")
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from _leaves(v, f"{path}[{i}]")
    else:
        yield path, x


def _assert_equal_to_reference(out, ref, *, tol: float):
    """Every leaf of ``out`` equals the reference's: floating tensors within ``tol`` relative to the largest
    reference value, non-finite exactly where the reference is (the float64 reference is non-finite only
    where the mathematics says so, or where a NaN in the input reaches); everything else exactly."""
    got, want = list(_leaves(out)), list(_leaves(ref))
    assert [p for p, _ in got] == [p for p, _ in want], f"the result's structure differs: {got} vs {want}"
    for (path, a), (_, b) in zip(got, want):
        if isinstance(a, torch.Tensor):
            assert isinstance(b, torch.Tensor) and a.shape == b.shape, f"{path}: shape {tuple(a.shape)} vs {b}"
            if a.is_floating_point():
                b = b.double()
                finite = torch.isfinite(b)
                wrong = torch.isfinite(a) != finite
                assert not wrong.any(), f"{path} is non-finite where the reference is not, or finite where it is " \
                                        f"not ({int(wrong.sum())} entries): {a} vs {b}"
                assert torch.equal(a.double()[~finite & ~b.isnan()], b[~finite & ~b.isnan()]), f"{path}: infinities"
                if finite.any():
                    bound = tol * max(1.0, b[finite].abs().max().item())
                    error = (a.double() - b)[finite].abs().max().item()
                    assert error <= bound, f"{path} differs from the reference by {error:.3g} > {bound:.3g}"
            else:
                assert torch.equal(a, b.to(a.dtype)), f"{path}: {a} != {b}"
        elif isinstance(a, float):
            assert math.isclose(a, b, rel_tol=tol, abs_tol=tol) or (math.isnan(a) and math.isnan(b)), \
                f"{path}: {a} != {b}"
        elif isinstance(a, nn.Module):
            assert type(a) is type(b), path
        else:
            assert a == b, f"{path}: {a!r} != {b!r}"


def _assert_clear_error(error: BaseException, names: set[str], spec_name: str):
    assert isinstance(error, (TypeError, ValueError)), \
        f"{spec_name}: {type(error).__name__} instead of a TypeError or ValueError: {error}"
    frame = traceback.extract_tb(error.__traceback__)[-1]
    assert "attnbook" in frame.filename and (frame.line or "").lstrip().startswith("raise"), \
        f"{spec_name}: the error comes from inside {frame.filename}:{frame.lineno} ({frame.line}), not from a check: {error}"
    message = str(error)
    assert any(re.search(rf"(?<![\w.]){re.escape(n)}(?![\w(])", message) for n in names), \
        f"{spec_name}: the error does not name the argument ({' or '.join(sorted(names))}): {message}"


def _nan_at(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """A copy of ``x`` with a NaN at a random position."""
    x = x.clone()
    x.view(-1)[int(torch.randint(x.numel(), (1,), generator=g))] = math.nan
    return x


def _least_precise(values, fn) -> torch.dtype:
    """The least precise floating dtype among the tensors, parameters and buffers of a call (float64 if none)."""
    dtypes = [x.dtype for _, x in _leaves(values) if isinstance(x, torch.Tensor) and x.is_floating_point()]
    for module in [fn] + [x for _, x in _leaves(values) if isinstance(x, nn.Module)]:
        if isinstance(module, nn.Module):
            dtypes += [p.dtype for p in (*module.parameters(), *module.buffers()) if p.is_floating_point()]
    return max(dtypes, key=lambda d: TOL[d], default=torch.float64)


SHAPE_CHANGES = {"rank+", "rank-", "width", "empty", "length", "batch", "shape", "rank"}


def changes_of(name: str, sizes: SimpleNamespace) -> list:
    """Every change a case of this spec can make: none, half precision, or one argument changed one way."""
    _, args = SPECS[name].build(sizes)
    return ([None] + ([*HALF] if SPECS[name].half else [])
            + [(k, how) for k, a in args.items() for how in a.corruptions])


def run_case(name: str, sizes: SimpleNamespace, seed: int, change, *, count: bool = True) -> str:
    """One generated case: build the call, make the change, check the outcome; returns "error" or "result"."""
    s = SPECS[name]
    fn, args = s.build(sizes)
    g = torch.Generator().manual_seed(seed)
    values = {k: a.make(g) for k, a in args.items()}
    if isinstance(change, torch.dtype):  # the whole call in half precision
        fn, values = _convert(fn, change), _convert(values, change)
    elif change is not None:
        arg, how = change
        if how == "nan" and not values[arg].numel():
            return "skipped"
        values[arg] = _nan_at(values[arg], g) if how == "nan" else args[arg].corrupt(values[arg], how, g)
    fn64, values64 = _convert(fn, torch.float64), _convert(values, torch.float64)  # before the call changes state
    try:
        out = fn(**values)
    except Exception as error:  # noqa: BLE001 (the point is to look at what comes out)
        if change is None or isinstance(change, torch.dtype):
            raise AssertionError(f"{name}: a valid call ({change or 'float32'}) raised {error!r}") from error
        arg, how = change
        tensors = {k for k, v in args.items() if isinstance(v, (Tensor, Ids, Mask, IntList, Pair))}
        names = {arg} | (tensors if how in SHAPE_CHANGES else set())
        _assert_clear_error(error, names, f"{name} with {arg} changed ({how})")
        STATS[name, "error"] += count
        return "error"
    if s.check is not None:
        s.check(out, values)
    else:
        expected = s.reference(fn64, **values64) if s.reference is not None else fn64(**values64)
        tol = TOL[_least_precise(values, fn)] * (100.0 if isinstance(change, tuple) and change[1] == "huge" else 1.0)
        _assert_equal_to_reference(out, expected, tol=tol)
    STATS[name, "result"] += count
    return "result"


@pytest.mark.parametrize("name", sorted(SPECS))
@given(data=st.data())
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_an_error_naming_the_argument_or_a_finite_result_equal_to_the_reference(name, data):
    sizes = SimpleNamespace(**{k: data.draw(st.integers(lo, hi), label=k) for k, (lo, hi) in SPECS[name].sizes.items()})
    seed = data.draw(st.integers(0, 2 ** 16), label="seed")
    change = data.draw(st.sampled_from(changes_of(name, sizes)), label="change")
    run_case(name, sizes, seed, change)


# --- coverage and statistics --------------------------------------------------------------------------

EXCLUDED = {
    "attention.KVCache": "a container for keys and values, exercised through GroupedQueryAttention(cache=...) "
                         "(test_modern, test_attention_conventions)",
    "flash.FlashAttentionFunction": "the autograd function behind flash_attention, exercised through it",
    "flash.FastMemory": "the counter of the IO model, exercised through standard_attention_io and flash_attention_io",
    "flash.IOCount": "the result type of the IO model",
    "vit.fit_classifier": "trains for a number of steps (test_vit); its inputs go through the checks of accuracy",
    "seq2seq.Memory": "the result type of Seq2Seq.encode, passed to seq2seq.Decoder here",
    "seq2seq.Batch": "the result type of make_batch, passed to sequence_loss here",
    "seq2seq.Translation": "the result type of greedy_decode and beam_search",
    "seq2seq.PrefixTable": "a hand-made table of probabilities for the decoding examples (test_seq2seq)",
    "measure.Timing": "the result type of time_fn",
    "measure.TensorMemoryTracker": "the context manager behind peak_memory, exercised through it",
    "measure.TransformerFlops": "the result type of transformer_flops",
}


def _public():
    """Every function and class in the ``__all__`` of the modules under test, by qualified name."""
    for module_name, module in MODULES.items():
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                yield f"{module_name}.{name}", obj


def test_every_public_entry_point_has_a_spec():
    public = dict(_public())
    covered = {id(s.target) for s in SPECS.values()}
    missing = sorted(n for n, obj in public.items() if id(obj) not in covered and n not in EXCLUDED)
    assert not missing, f"public entry points without a spec: {missing}"
    assert not set(EXCLUDED) - set(public), "EXCLUDED names something that is no longer public"
    assert not {n for n, obj in public.items() if id(obj) in covered} & set(EXCLUDED)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_each_spec_accepts_its_valid_call_and_refuses_a_list(name):
    """Deterministic anchors of the properties: the valid call at the smallest sizes gives a result, and the
    first tensor argument passed as a list (or the first argument changed its first way) gives an error."""
    sizes = SimpleNamespace(**{k: max(lo, min(hi, 2)) for k, (lo, hi) in SPECS[name].sizes.items()})
    assert run_case(name, sizes, 0, None, count=False) == "result"
    _, args = SPECS[name].build(sizes)
    bad = next(((k, "list") for k, a in args.items() if "list" in a.corruptions),
               next(((k, a.corruptions[0]) for k, a in args.items() if a.corruptions), None))
    if bad is not None:
        outcome = run_case(name, sizes, 0, bad, count=False)
        assert outcome == "error" if bad[1] == "list" else outcome in ("error", "result")


def test_statistics(capsys):
    """How many cases the properties generated in this run (printed; every spec must have run)."""
    ran = {name for name, _ in STATS}
    if len(ran) < len(SPECS):
        pytest.skip("the statistics need the whole file")
    totals = collections.Counter()
    for (_, outcome), count in STATS.items():
        totals[outcome] += count
    entry_points = len({id(s.target) for s in SPECS.values()})
    with capsys.disabled():
        print(f"\nAPI properties: {entry_points} public entry points in {len(SPECS)} specs, "
              f"{sum(totals.values())} generated cases ({totals['error']} named errors, {totals['result']} results "
              f"equal to the reference)")


# --- focused facts: the errors the properties found, one by one -----------------------------------------

@pytest.mark.parametrize("call, error, match", [
    (lambda s, m: attention.masked_softmax(s, m.float()), TypeError, r"mask must have dtype torch.bool, got torch.float32"),
    (lambda s, m: attention.masked_softmax(s, m.long()), TypeError, r"mask must have dtype torch.bool, got torch.int64"),
    (lambda s, m: attention.masked_softmax(s, m[:, :3]), ValueError,
     r"mask must be broadcastable to the scores' shape \(\.\.\., Tq, Tk\) = \(2, 4, 5\), got shape \(2, 3, 5\)"),
    (lambda s, m: attention.masked_softmax(s.long(), m), TypeError, r"scores must be a floating-point tensor, got dtype torch.int64"),
    (lambda s, m: attention.masked_softmax(s.tolist(), m), TypeError, r"scores must be a torch.Tensor, got list"),
    (lambda s, m: attention.masked_softmax(s, m.tolist()), TypeError, r"mask must be a torch.Tensor, got list"),
])
def test_masked_softmax_names_what_is_wrong(call, error, match):
    scores, mask = torch.randn(2, 4, 5), torch.rand(2, 4, 5) < 0.5
    with pytest.raises(error, match=match):
        call(scores, mask)


def test_grouped_query_attention_names_a_batch_or_length_mismatch():
    gqa = attention.GroupedQueryAttention(8, 4, 2)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"query and key must have the same batch size B, got query \(2, 5, 8\) and "
                                         r"key \(3, 5, 8\)"):
        gqa(x, torch.randn(3, 5, 8))
    with pytest.raises(ValueError, match=r"key and value must have the same batch size and length \(B, Tk\), got key "
                                         r"\(2, 6, 8\) and value \(2, 4, 8\)"):
        gqa(x, torch.randn(2, 6, 8), torch.randn(2, 4, 8))


def test_feed_forward_names_a_wrong_width():
    with pytest.raises(ValueError, match=r"x must have width d_model=8, got shape \(2, 5, 6\)"):
        blocks.FeedForward(8, 16)(torch.randn(2, 5, 6))
    with pytest.raises(ValueError, match=r"x must have width d_model=8, got shape \(2, 5, 6\)"):
        blocks.SwiGLU(8, 16)(torch.randn(2, 5, 6))


@pytest.mark.parametrize("make, call, name", [
    (lambda: attention.MultiHeadAttention(8, 2), lambda m, x: m(x), "query"),
    (lambda: attention.GroupedQueryAttention(8, 2, 1), lambda m, x: m(x), "query"),
    (lambda: blocks.EncoderBlock(8, 2), lambda m, x: m(x), "x"),
    (lambda: blocks.DecoderBlock(8, 2), lambda m, x: m(x, torch.randn(2, 3, 8)), "x"),
    (lambda: blocks.FeedForward(8, 16), lambda m, x: m(x), "x"),
    (lambda: blocks.RMSNorm(8), lambda m, x: m(x), "x"),
    (lambda: blocks.MixtureOfExperts(8, 16), lambda m, x: m(x), "x"),
    (lambda: positional.LearnedPositionalEmbedding(8, 16), lambda m, x: m(x), "x"),
])
def test_a_half_precision_input_to_a_float32_module_is_named(make, call, name):
    module = make()
    with pytest.raises(TypeError, match=rf"{name} has dtype torch.float16 but the {type(module).__name__}'s parameters "
                                        rf"are torch.float32; convert one of them \({name}.to\(torch.float32\) or "
                                        rf"{type(module).__name__}.to\(torch.float16\)\)"):
        call(module, torch.randn(2, 5, 8).half())


def test_blocks_name_their_own_arguments_not_those_of_the_attention_inside():
    dec = blocks.DecoderBlock(8, 2)
    x, memory = torch.randn(2, 5, 8), torch.randn(2, 3, 8)
    with pytest.raises(TypeError, match=r"memory has dtype torch.float64 but the DecoderBlock's parameters are "
                                        r"torch.float32"):
        dec(x, memory.double())
    with pytest.raises(ValueError, match=r"memory_mask must be broadcastable to \(B, H, Tq, Tk\) = \(2, 2, 5, 3\), "
                                         r"got shape \(2, 1, 4\)"):
        dec(x, memory, memory_mask=attention.padding_mask([4, 2]))
    with pytest.raises(ValueError, match=r"^mask must be broadcastable to \(B, H, Tq, Tk\) = \(2, 2, 5, 5\)"):
        dec(x, memory, mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"memory must have shape \(B, T, d_model=8\), got \(2, 3, 6\)"):
        dec(x, torch.randn(2, 3, 6))
    with pytest.raises(ValueError, match=r"x and memory must have the same batch size B"):
        dec(x, torch.randn(3, 3, 8))
    enc = blocks.EncoderBlock(8, 2)
    with pytest.raises(TypeError, match=r"^x has dtype torch.float16"):
        enc(x.half())
    model = models.EncoderDecoder(_config(d_model=8))
    with pytest.raises(ValueError, match=r"^src_mask must be broadcastable"):
        model(torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long), attention.padding_mask([5, 2]))
    with pytest.raises(ValueError, match=r"^memory_mask must be broadcastable"):
        model.decoder(torch.zeros(2, 3, dtype=torch.long), torch.randn(2, 4, 8), attention.padding_mask([5, 2]))
