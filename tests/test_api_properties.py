"""The whole public API under generated good and bad input: an error that names the argument, or a result
that is finite and equal to the reference.

Every function and class in the ``__all__`` of attention, positional, blocks, models, flash, vit, rnn,
seq2seq, measure, graphs, audio, contrastive, lora, bpe, pretrain, data, train, train_lm and export has a
:class:`Spec` (the methods a chapter calls, such as ``GPT.generate`` or ``BPETokenizer.encode``, have their
own): how to build a valid call from a few drawn sizes, and what each argument is (a floating tensor,
token ids, a mask, an adjacency matrix, an integer, a text, a path...). Hypothesis draws the sizes, a seed
and one change to the call:

- none: the valid call itself;
- ``float16`` / ``bfloat16``: the whole call (module and floating inputs) in half precision;
- one argument changed: a rank too many or too few, a wrong width, another dtype (float64, float16,
  bfloat16, integer, boolean), a list instead of a tensor, an empty sequence, a batch or length that
  disagrees with the other arguments, a NaN somewhere, values 10^4 times larger; for masks a float or
  integer mask or a wrong shape; for adjacency matrices an asymmetric or non-square one, 0/1 numbers, a
  2 or a NaN, a node more; for ids a float, a negative or too large id; for integers zero, negative, a
  float, a bool or a string; for texts bytes, a number, a list or None; for paths a missing file, a
  folder, a number or a file of the wrong kind; for random generators a plain seed.

Then exactly one of these must hold:

- the call raises a ``TypeError`` or ``ValueError`` (``FileNotFoundError`` for a path) from a ``raise`` in
  the library (not from inside PyTorch, onnxruntime or Python) whose message names the argument (a shape
  change may name the argument it disagrees with); a valid call (no change, or half precision) must not
  raise;
- the call returns, and every floating tensor in the result is finite and equal to the reference within
  a tolerance of the least precise dtype of the call or its result, relative to the largest reference
  value; everything else (ids, strings, counts) exactly equal. The reference is an independent computation
  where one exists: attention one query at a time over the keys it may attend, for every attention
  function and layer; the softmax, the log-sum-exp, the masked mean, cosine similarities and contrastive
  losses written out; networkx and scipy for adjacency masks, Laplacians, their eigenvalues and shortest
  paths; NumPy's FFT for spectrograms and NumPy for signals; Hugging Face ``tokenizers`` for pre-tokens,
  BPE training and encoding, and ``transformers``' masked-language-model collator; the unadapted layer
  (B = 0) or W + (alpha / r) B A for LoRA; BPE by its definition (every pair recounted before each merge);
  PyTorch's own functions; counts as formulas. Else the same call in float64 (modules copied to float64),
  or, where no value can be computed beforehand (random draws, trained models, generated data sets), a
  check of what the result must satisfy. The reference is non-finite only where the mathematics says so
  (the log-sum-exp of a query with no key) or where a NaN put into an input reaches in plain arithmetic
  over the allowed positions only: the result must be non-finite exactly there, so a NaN in a masked
  position must not reach anything (masked positions are inert).

Not covered, as they compute no values to compare: ``viz`` (every function returns a plotly or matplotlib
figure of values the library computed; test_viz* check the figures, and the pages are looked at),
``widgets`` (ipywidgets explorers around those figures, test_widgets*) and ``style`` (the book's colours).
The two ONNX exports take seconds each: their specs draw only changed calls, and their valid calls are
checked against onnxruntime in test_export.

``test_every_public_entry_point_has_a_spec`` checks that no public function or class is left out (or is
excluded, with a reason, in ``EXCLUDED``), the anchors check each spec's valid call deterministically, and
``test_statistics`` prints how many cases this run generated.
"""
from __future__ import annotations

import atexit
import collections
import copy
import dataclasses
import functools
import hashlib
import inspect
import itertools
import json
import math
import os
import pathlib
import random
import re
import shutil
import tempfile
import traceback
import unicodedata
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from attnbook import (attention, audio, blocks, bpe, contrastive, data, export, flash, graphs, lora, measure, models,
                      positional, pretrain, rnn, seq2seq, train, train_lm, vit)
from attnbook.data import Vocab

MODULES = {"attention": attention, "positional": positional, "blocks": blocks, "models": models, "flash": flash,
           "vit": vit, "rnn": rnn, "seq2seq": seq2seq, "measure": measure, "graphs": graphs,
           "audio": audio, "contrastive": contrastive, "lora": lora, "pretrain": pretrain,
           "bpe": bpe, "data": data, "train": train, "train_lm": train_lm,
           "export": export}
HALF = (torch.float16, torch.bfloat16)
# |result - reference| <= TOL * max(1, max |reference|), by the result's dtype
TOL = {torch.float64: 1e-8, torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 8e-2}
HUGE = 1e4
FILES = pathlib.Path(tempfile.mkdtemp(prefix="attnbook-api-"))  # files the calls read (removed at exit)
atexit.register(shutil.rmtree, FILES, ignore_errors=True)
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
                 scale: float = 1.0, list_ok: bool = False):
        self.shape, self.seq, self.batch, self.positive, self.scale = shape, seq, batch, positive, scale
        self.list_ok = list_ok  # a list of numbers is a valid value too
        self.corruptions = (("rank+", "rank-", "width", "float64", "float16", "bfloat16", "int", "bool", "list",
                             "nan", "huge") + (("empty", "length") if seq is not None else ())
                            + (("batch",) if batch is not None else ()))

    def make(self, g):
        x = torch.randn(*self.shape, generator=g) * self.scale
        return x.abs() + 0.1 if self.positive else x

    def corrupt(self, x, how, g):
        return _corrupt_tensor(x, how, self.seq, self.batch)


class Ids(Arg):
    """Integer token ids in [low, vocab) (low = 0 unless told: distances start at -1)."""

    def __init__(self, *shape, vocab: int, seq: int | None = -1, batch: int | None = 0, low: int = 0,
                 list_ok: bool = False):
        self.shape, self.vocab, self.seq, self.batch, self.low = shape, vocab, seq, batch, low
        self.list_ok = list_ok  # a list of ids is a valid value too
        self.corruptions = (("float", "negative", "too large", "rank+", "rank-", "list")
                            + (("empty", "length") if seq is not None else ()) + (("batch",) if batch is not None else ()))

    def make(self, g):
        return torch.randint(self.low, self.vocab, self.shape, generator=g)

    def corrupt(self, x, how, g):
        if how == "float":
            return x.float()
        if how in ("negative", "too large"):
            x = x.clone()
            if x.numel():
                x.view(-1)[int(torch.randint(x.numel(), (1,), generator=g))] = \
                    self.low - 1 if how == "negative" else self.vocab
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

    def __init__(self, value: int, *, corruptions: tuple[str, ...] | None = None):
        self.value = value
        if corruptions is not None:
            self.corruptions = corruptions

    def make(self, g):
        return self.value

    def corrupt(self, v, how, g):
        return {"zero": 0, "negative": -v - 1, "float": v + 0.5, "bool": True, "str": str(v)}[how]


class Num(Arg):
    """A real-number argument (a temperature, a scale, a base)."""

    corruptions = ("zero", "negative", "not a number", "infinite", "str")

    def __init__(self, value: float, *, corruptions: tuple[str, ...] | None = None):
        self.value = value
        if corruptions is not None:
            self.corruptions = corruptions

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


class Text(Arg):
    """A string (a text, a name): ``value``, or ``length`` characters drawn from ``alphabet``. Changed, it is
    bytes, a number, a list of strings, None, or another of ``corruptions``."""

    def __init__(self, value: str | None = None, *, length: int = 0, alphabet: str = "",
                 corruptions: tuple[str, ...] = ("bytes", "number", "list", "none")):
        self.value, self.length, self.alphabet, self.corruptions = value, length, alphabet, corruptions

    def make(self, g):
        if self.value is not None:
            return self.value
        return "".join(self.alphabet[i] for i in torch.randint(len(self.alphabet), (self.length,), generator=g))

    def corrupt(self, v, how, g):
        return {"bytes": v.encode(), "number": 3, "list": [v], "none": None, "empty": "",
                "unknown": "\u2603 no such thing"}[how]


class Texts(Arg):
    """A list of strings (words, tokens); changed, one string, numbers among them, a nested list or no string."""

    def __init__(self, values, *, corruptions: tuple[str, ...] = ("one str", "numbers", "nested", "empty")):
        self.values, self.corruptions = list(values), corruptions

    def make(self, g):
        return list(self.values)

    def corrupt(self, v, how, g):
        return {"one str": " ".join(v), "numbers": [3] + v[1:], "nested": [v], "empty": []}[how]


class Adjacency(Arg):
    """The symmetric boolean adjacency matrix of a random graph (N, N), or of a batch of graphs (B, N, N).

    Changed: made asymmetric, not square, 0/1 floats or integers (valid), an entry 2 or NaN, a rank more
    or less, a list, a node more, or (batches) a graph more."""

    def __init__(self, *shape, p: float = 0.4, loops: bool = False):
        self.shape, self.p, self.loops = shape, p, loops
        self.corruptions = ("asymmetric", "not square", "float", "int", "two", "nan", "rank+", "rank-", "list",
                            "size") + (("batch",) if len(shape) == 3 else ())

    def make(self, g):
        upper = (torch.rand(*self.shape, generator=g) < self.p).triu(0 if self.loops else 1)
        return upper | upper.transpose(-2, -1)

    def corrupt(self, a, how, g):
        if how == "asymmetric":
            if a.shape[-1] < 2:
                return a[..., :0]
            a = a.clone()
            a[..., 0, 1] = ~a[..., 1, 0]
            return a
        if how in ("two", "nan"):
            a = a.to(torch.float32 if how == "nan" else torch.long)
            a[..., 0, 0] = math.nan if how == "nan" else 2
            return a
        if how == "size":
            return F.pad(a, (0, 1, 0, 1))
        return {"not square": lambda: a[..., :-1], "float": lambda: a.float(), "int": lambda: a.long(),
                "rank+": lambda: a.unsqueeze(0), "rank-": lambda: a[0], "list": lambda: a.tolist(),
                "batch": lambda: torch.cat([a, a[:1]])}[how]()


class Edges(Arg):
    """A list of ``m`` edges (i, j) between ``n`` nodes; changed, a node out of range or negative, floats,
    triples, a flat list, a string; or a tensor (E, 2) (valid)."""

    corruptions = ("out of range", "negative", "float", "triples", "flat", "str", "tensor")

    def __init__(self, n: int, m: int):
        self.n, self.m = n, m

    def make(self, g):
        return [tuple(e) for e in torch.randint(self.n, (self.m, 2), generator=g).tolist()]

    def corrupt(self, v, how, g):
        if how in ("out of range", "negative"):
            return [(0, self.n if how == "out of range" else -1)] + v[1:]
        if how == "tensor":
            return torch.tensor(v, dtype=torch.long).reshape(-1, 2)
        return {"float": lambda: [(i + 0.5, j) for i, j in v] or [(0.5, 0)],
                "triples": lambda: [(i, j, j) for i, j in v] or [(0, 0, 0)],
                "flat": lambda: [x for e in v for x in e] or [0], "str": lambda: "0-1"}[how]()


class IntLists(Arg):
    """Lists of integers in [0, high) (token sequences) of the given lengths; changed, an empty list among
    them, no list at all, floats, strings, a flat list, a negative id."""

    corruptions = ("empty sequence", "none", "float", "str", "flat", "negative")

    def __init__(self, lengths, *, high: int):
        self.lengths, self.high = list(lengths), high

    def make(self, g):
        return [torch.randint(self.high, (n,), generator=g).tolist() for n in self.lengths]

    def corrupt(self, v, how, g):
        return {"empty sequence": lambda: [[]] + v[1:], "none": lambda: [], "float": lambda: [[x + 0.5 for x in s] for s in v],
                "str": lambda: ["abc"] + v[1:], "flat": lambda: v[0], "negative": lambda: [[-1] + v[0][1:]] + v[1:]}[how]()


class IntPair(Arg):
    """A pair of integers (low, high); changed, one or three numbers, floats, strings, or in reverse order."""

    corruptions = ("one", "three", "float", "str", "reversed")

    def __init__(self, low: int, high: int):
        self.pair = (low, high)

    def make(self, g):
        return self.pair

    def corrupt(self, v, how, g):
        low, high = v
        return {"one": (low,), "three": (low, high, high), "float": (low + 0.5, high), "str": ("a", "b"),
                "reversed": (high + 1, low)}[how]


class Counts(Arg):
    """A mapping {str: count}; changed, a list of its keys, a negative or fractional count, a key that is no str."""

    corruptions = ("list", "negative", "float", "key")

    def __init__(self, counts: dict):
        self.counts = dict(counts)

    def make(self, g):
        return dict(self.counts)

    def corrupt(self, v, how, g):
        first = next(iter(v), "a")
        if how == "list":
            return list(v)
        if how == "key":
            return {**v, 3: 1}
        return {**v, first: -1 if how == "negative" else 1.5}


class FilePath(Arg):
    """A path to a file; changed, a file that does not exist, a folder, a number, or a file of the wrong kind."""

    def __init__(self, path, *, wrong=None):
        self.path, self.wrong = path, wrong
        self.corruptions = ("missing", "folder", "number") + (("wrong content",) if wrong is not None else ())

    def make(self, g):
        return self.path

    def corrupt(self, v, how, g):
        from pathlib import Path
        return {"missing": lambda: Path(v).with_name("no-such-file.json"), "folder": lambda: Path(v).parent,
                "number": lambda: 3, "wrong content": lambda: self.wrong}[how]()


class Gen(Arg):
    """A ``torch.Generator`` with a drawn seed; changed, a plain seed (an int) instead of a generator."""

    corruptions = ("a seed",)

    def make(self, g):
        return torch.Generator().manual_seed(int(torch.randint(2 ** 31, (1,), generator=g)))

    def corrupt(self, v, how, g):
        return 0


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
    # generated cases per run (fewer where one call takes long)
    examples: int = 15
    # where the valid call is checked instead, when it takes seconds (an ONNX export): the properties then draw
    # only changed calls, and the anchor checks a bad call only
    valid_call_in: str | None = None


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
def _garbage_file() -> pathlib.Path:
    """A file of bytes that are neither UTF-8 nor JSON."""
    path = FILES / "garbage.bin"
    path.write_bytes(bytes(range(256)) * 3)
    return path


# graphs ---------------------------------------------------------------------------------------------------

def _nx_graph(adjacency):
    """One graph (N, N) (bool or 0/1) as a networkx graph on the nodes 0 .. N-1, self-loops left out."""
    import networkx as nx
    graph = nx.Graph()
    graph.add_nodes_from(range(adjacency.shape[-1]))
    graph.add_edges_from((i, j) for i, j in (adjacency != 0).nonzero().tolist() if i < j)
    return graph


def _each_graph(adjacency, f):
    """f applied to every graph (N, N) of a batch (..., N, N), the results stacked back into (..., ...)."""
    graphs = adjacency.reshape(-1, *adjacency.shape[-2:])
    out = torch.stack([f(a) for a in graphs]) if len(graphs) else torch.zeros(0, *adjacency.shape[-2:])
    return out.reshape(*adjacency.shape[:-2], *out.shape[1:])


def _nx_laplacian(adjacency, normalized):
    import networkx as nx
    graph = _nx_graph(adjacency)
    matrix = (nx.normalized_laplacian_matrix if normalized else nx.laplacian_matrix)(graph, nodelist=range(len(graph)))
    return torch.tensor(matrix.toarray(), dtype=torch.float64)


def _nx_distances(adjacency):
    import networkx as nx
    n = adjacency.shape[-1]
    out = torch.full((n, n), -1, dtype=torch.long)
    for i, lengths in nx.all_pairs_shortest_path_length(_nx_graph(adjacency)):
        for j, d in lengths.items():
            out[i, j] = d
    return out


def _neighbour_mask(adjacency, nodes, self_loops):
    """Node i may attend to node j: j is a neighbour of i in networkx (i != j), or i = j with self-loops; both real."""
    def one(a):
        graph = _nx_graph(a)
        return torch.tensor([[j in graph[i] if i != j else self_loops for j in graph] for i in graph],
                            dtype=torch.bool).reshape(a.shape)
    mask = _each_graph(adjacency, one)
    return mask if nodes is None else mask & nodes[:, :, None] & nodes[:, None, :]


GRAPH = dict(B=(1, 3), N=(1, 6), batched=(0, 1), normalized=(0, 1), loops=(0, 1))


def _adjacency(s):
    return Adjacency(*((s.B,) if s.batched else ()), s.N, s.N, loops=bool(s.loops))


@spec("graphs.adjacency_from_edges", graphs.adjacency_from_edges, dict(N=(1, 6), E=(0, 6)), half=False,
      reference=lambda call, edges, n_nodes: torch.tensor(
          __import__("networkx").to_numpy_array(_graph_of_edges(edges, n_nodes), nodelist=range(n_nodes)) != 0))
def _(s):
    return graphs.adjacency_from_edges, dict(edges=Edges(s.N, s.E), n_nodes=Int(s.N))


def _graph_of_edges(edges, n):
    import networkx as nx
    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(tuple(e) for e in torch.as_tensor(edges).reshape(-1, 2).tolist())
    return graph


@spec("graphs.adjacency_mask", graphs.adjacency_mask, {**GRAPH, "nodes": (0, 1)}, half=False,
      reference=lambda call, adjacency, nodes, self_loops: _neighbour_mask(adjacency, nodes, self_loops))
def _(s):
    batched = s.batched or s.nodes
    return graphs.adjacency_mask, dict(
        adjacency=Adjacency(*((s.B,) if batched else ()), s.N, s.N, loops=bool(s.loops)),
        nodes=Mask(s.B, s.N) if s.nodes else Const(None), self_loops=Const(bool(s.normalized)))


@spec("graphs.laplacian", graphs.laplacian, GRAPH, half=False,
      reference=lambda call, adjacency, normalized: _each_graph(adjacency, lambda a: _nx_laplacian(a, normalized)))
def _(s):
    return graphs.laplacian, dict(adjacency=_adjacency(s), normalized=Const(bool(s.normalized)))


def _check_eigenvectors(out, args):
    """Eigenvalues equal to scipy's for the networkx Laplacian (after the first; zeros past N - 1), and the
    vectors orthonormal eigenvectors of it (an eigenvector is defined up to its sign, and a basis of a repeated
    eigenvalue's space is not unique: compared through L u = lambda u)."""
    import scipy.linalg
    vectors, values = out
    k, L = args["k"], _nx_laplacian(args["adjacency"], args["normalized"])
    N = L.shape[0]
    assert vectors.shape == (N, k) and values.shape == (k,) and vectors.dtype == values.dtype == torch.float64
    assert torch.isfinite(vectors).all() and torch.isfinite(values).all()
    expected = torch.zeros(k, dtype=torch.float64)
    real = torch.tensor(scipy.linalg.eigvalsh(L.numpy()))[1:k + 1]
    expected[:len(real)] = real
    torch.testing.assert_close(values, expected, atol=1e-8, rtol=0)
    n = len(real)
    u = vectors[:, :n]
    torch.testing.assert_close(u.T @ u, torch.eye(n, dtype=torch.float64), atol=1e-8, rtol=0)
    torch.testing.assert_close(L @ u, u * values[:n], atol=1e-8, rtol=0)
    assert not vectors[:, n:].any()


@spec("graphs.laplacian_eigenvectors", graphs.laplacian_eigenvectors, {**GRAPH, "k": (1, 4)}, half=False,
      check=_check_eigenvectors)
def _(s):
    return graphs.laplacian_eigenvectors, dict(adjacency=Adjacency(s.N, s.N, loops=bool(s.loops)), k=Int(s.k),
                                               normalized=Const(bool(s.normalized)))


@spec("graphs.shortest_path_distances", graphs.shortest_path_distances, GRAPH, half=False,
      reference=lambda call, adjacency: _each_graph(adjacency, _nx_distances))
def _(s):
    return graphs.shortest_path_distances, dict(adjacency=_adjacency(s))


def _distance_bias_reference(call, distances):
    """b[..., h, i, j] = table[h, min(d, max_distance)], or table[h, max_distance + 1] for d = -1, one entry at a time."""
    table, top = call.table, call.max_distance
    out = torch.zeros(*distances.shape[:-2], table.shape[0], *distances.shape[-2:], dtype=table.dtype)
    for index in itertools.product(*map(range, distances.shape)):
        d = int(distances[index])
        for h in range(table.shape[0]):
            out[(*index[:-2], h, *index[-2:])] = table[h, top + 1 if d == -1 else min(d, top)]
    return out


@spec("graphs.DistanceBias", graphs.DistanceBias, dict(B=(1, 2), N=(1, 4), H=(1, 3), top=(1, 3), batched=(0, 1)),
      reference=_distance_bias_reference)
def _(s):
    bias = _module(lambda: graphs.DistanceBias(s.H, s.top))
    with torch.no_grad():
        bias.table.normal_(generator=torch.Generator().manual_seed(s.H))  # a trained table (it starts at zero)
    return bias, dict(distances=Ids(*((s.B,) if s.batched else ()), s.N, s.N, vocab=s.top + 3, low=-1,
                                    batch=0 if s.batched else None))


def _check_two_rings(out, args):
    """Every graph: two disjoint rings of low..high nodes in all, padding after them, two marked nodes, the label
    1 exactly when both marks lie on one ring (then at least min_gap edges apart), networkx's view of it."""
    import networkx as nx
    n, (low, high) = args["n_graphs"], args["n_nodes"]
    assert out.adjacency.shape == (n, high, high) and out.nodes.shape == out.features.shape == (n, high)
    assert out.labels.shape == out.n_nodes.shape == (n,)
    for b in range(n):
        size = int(out.n_nodes[b])
        assert low <= size <= high and out.nodes[b, :size].all() and not out.nodes[b, size:].any()
        assert not out.adjacency[b, size:].any() and not out.adjacency[b, :, size:].any()
        graph = _nx_graph(out.adjacency[b, :size, :size])
        rings = [sorted(c) for c in nx.connected_components(graph)]
        assert len(rings) == 2 and all(graph.degree(v) == 2 for v in graph), "two rings"
        assert min(map(len, rings)) >= 3 and max(map(len, rings)) >= args["min_ring"]
        marks = out.features[b].nonzero().flatten().tolist()
        assert len(marks) == 2 and set(out.features[b].tolist()) <= {0, 1}
        same = any(set(marks) <= set(r) for r in rings)
        assert int(out.labels[b]) == int(same)
        if same:
            assert nx.shortest_path_length(graph, *marks) >= args["min_gap"]


@spec("graphs.two_ring_graphs", graphs.two_ring_graphs, dict(n=(1, 4), ring=(3, 4), gap=(1, 2), extra=(0, 2),
                                                             more=(0, 2)), half=False, check=_check_two_rings)
def _(s):
    low = max(3, 2 * s.gap) + s.ring + s.extra
    return graphs.two_ring_graphs, dict(n_graphs=Int(s.n), n_nodes=IntPair(low, low + s.more), min_ring=Int(s.ring),
                                        min_gap=Int(s.gap), seed=Int(s.extra + 1))


@spec("graphs.GraphTransformer", graphs.GraphTransformer,
      dict(B=(1, 3), N=(1, 5), mask=(0, 1), encoding=(0, 2), weights=(0, 1)))
def _(s):
    encoding = graphs.ENCODINGS[s.encoding]
    model = _module(lambda: graphs.GraphTransformer(graphs.MASKS[s.mask], encoding, n_node_types=3, d_model=8,
                                                    n_heads=2, n_layers=1, k=2, max_distance=2, d_ff=8))
    return model, dict(
        features=Ids(s.B, s.N, vocab=3), adjacency=Adjacency(s.B, s.N, s.N), nodes=Mask(s.B, s.N),
        eigenvectors=Tensor(s.B, s.N, 2, seq=1) if encoding == "laplacian" else Const(None),
        distances=Ids(s.B, s.N, s.N, vocab=4, low=-1) if encoding == "distance" else Const(None),
        return_weights=Const(bool(s.weights)))


# audio ----------------------------------------------------------------------------------------------------

def _stft_frames(call, n_samples, hop_length, n_fft=None, center=True):
    """The number of frames torch.stft gives (zero padding: only the count matters); an even n_fft by default."""
    n_fft = 2 if n_fft is None else n_fft
    x = torch.zeros(n_samples, dtype=torch.float64)
    return torch.stft(x, n_fft, hop_length, window=torch.ones(n_fft, dtype=torch.float64), center=center,
                      pad_mode="constant", return_complex=True).shape[-1]


@spec("audio.n_frames", audio.n_frames, dict(n=(1, 40), hop=(1, 8), n_fft=(1, 12), center=(0, 1), given=(0, 1)),
      reference=_stft_frames, half=False)
def _(s):
    n = max(s.n, s.n_fft) if not s.center else s.n
    return audio.n_frames, dict(n_samples=Int(n), hop_length=Int(s.hop),
                                n_fft=Int(s.n_fft) if s.given or not s.center else Const(None),
                                center=Const(bool(s.center)))


def _numpy_spectrogram(call, wave, n_fft, hop_length, log):
    """|rfft| of frames of n_fft samples hop_length apart, each times a periodic Hann window, the signal reflected
    by n_fft // 2 at both ends: NumPy, one frame at a time."""
    import numpy as np
    x = wave.numpy().reshape(-1, wave.shape[-1])
    pad = n_fft // 2
    x = np.pad(x, ((0, 0), (pad, pad)), mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    frames = [np.abs(np.fft.rfft(x[:, t:t + n_fft] * window, axis=-1)) for t in range(0, x.shape[1] - n_fft + 1, hop_length)]
    out = np.stack(frames, axis=-1)  # (N, n_fft // 2 + 1, n_frames)
    out = np.log1p(out) if log else out
    return torch.from_numpy(out).reshape(*wave.shape[:-1], *out.shape[1:])


@spec("audio.spectrogram", audio.spectrogram, dict(B=(1, 2), n=(6, 40), n_fft=(2, 10), hop=(1, 6), log=(0, 1)),
      reference=_numpy_spectrogram)
def _(s):
    return audio.spectrogram, dict(wave=Tensor(s.B, s.n, seq=1), n_fft=Int(s.n_fft), hop_length=Int(s.hop),
                                   log=Const(bool(s.log)))


def _numpy_tone(call, frequency, n_samples, sample_rate, phase):
    import numpy as np
    t = np.arange(n_samples) / sample_rate
    f = np.asarray(torch.as_tensor(frequency, dtype=torch.float64))[..., None]
    return torch.from_numpy(np.sin(2 * np.pi * f * t + phase))


def _numpy_chirp(call, f_start, f_end, n_samples, sample_rate, phase):
    import numpy as np
    t, duration = np.arange(n_samples) / sample_rate, n_samples / sample_rate
    f0, f1 = (np.asarray(torch.as_tensor(f, dtype=torch.float64))[..., None] for f in (f_start, f_end))
    return torch.from_numpy(np.sin(2 * np.pi * (f0 * t + (f1 - f0) * t ** 2 / (2 * duration)) + phase))


SOUND = dict(B=(1, 3), n=(1, 32), tensor=(0, 1))


@spec("audio.tone", audio.tone, SOUND, reference=_numpy_tone)
def _(s):
    frequency = Tensor(s.B, batch=None, positive=True, scale=900.0, list_ok=True) if s.tensor else Num(440.0)
    return audio.tone, dict(frequency=frequency, n_samples=Int(s.n), sample_rate=Num(4000.0), phase=Num(0.3))


@spec("audio.chirp", audio.chirp, SOUND, reference=_numpy_chirp)
def _(s):
    if s.tensor:
        f_start, f_end = (Tensor(s.B, positive=True, scale=900.0, list_ok=True) for _ in range(2))
    else:
        f_start, f_end = Num(300.0), Num(1200.0)
    return audio.chirp, dict(f_start=f_start, f_end=f_end, n_samples=Int(s.n), sample_rate=Num(4000.0),
                             phase=Num(0.3))


def _noise_reference(call, shape, kind, generator):
    """The same draws (a copy of the generator), then the formulas of the docstring in float64: white noise
    scaled to unit standard deviation; brown noise its cumulative sum, less the line from 0 to its end, less
    its mean, then scaled."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    x = torch.randn(*shape, generator=generator).double()
    if kind == "brown":
        x = x.cumsum(-1)
        x = x - torch.linspace(0, 1, x.shape[-1], dtype=torch.float64) * x[..., -1:]
        x = x - x.mean(-1, keepdim=True)
    return x / x.std(-1, keepdim=True)


class Shape(IntList):
    """A shape (a list of sizes); changed, a negative size, a float, a string, no size, one sample per row."""

    corruptions = ("negative", "float", "str", "none", "one sample")

    def corrupt(self, v, how, g):
        return {"negative": [-1] + v[1:], "float": [x + 0.5 for x in v], "str": "abc", "none": [],
                "one sample": v[:-1] + [1]}[how]


@spec("audio.noise", audio.noise, dict(B=(1, 3), n=(2, 40), kind=(0, 1), batched=(0, 1)), reference=_noise_reference,
      half=False)
def _(s):
    return audio.noise, dict(shape=Shape([s.B, s.n] if s.batched else [s.n], high=99),
                             kind=Choice(["white", "brown"][s.kind]), generator=Gen())


def _check_sounds(out, args):
    """(n, n_samples) float32 finite waves, labels balanced over the classes; each wave's standard deviation
    within [0.5 x 0.75, 2 x 1.25]: a sound of standard deviation 1 plus noise of exactly 1 / snr = 0.25, made
    louder or softer by at most 2 (at 32 samples or more every kind of sound has some: beeps are on part of
    the time)."""
    waves, labels = out
    n, n_samples = args["n"], args["n_samples"]
    assert waves.shape == (n, n_samples) and waves.dtype == torch.float32 and torch.isfinite(waves).all()
    assert labels.shape == (n,) and labels.dtype == torch.long
    counts = torch.bincount(labels, minlength=len(audio.SOUND_CLASSES))
    assert len(counts) == len(audio.SOUND_CLASSES) and int(counts.max() - counts.min()) <= 1
    std = waves.std(dim=-1)
    assert ((std > 0.5 * 0.75 - 1e-4) & (std < 2 * 1.25 + 1e-4)).all(), std


@spec("audio.sound_classes", audio.sound_classes, dict(n=(1, 9), n_samples=(32, 64)), check=_check_sounds, half=False)
def _(s):
    return audio.sound_classes, dict(n=Int(s.n), n_samples=Int(s.n_samples), sample_rate=Num(4000.0), snr=Num(4.0),
                                     seed=Int(s.n))


# contrastive ----------------------------------------------------------------------------------------------

def _unit(x):
    """Rows divided by their length (rows shorter than 1e-12 by 1e-12: F.normalize's convention), one at a time."""
    out = torch.zeros_like(x)
    for index in itertools.product(*map(range, x.shape[:-1])):
        out[index] = x[index] / max(float(x[index].detach().norm()), 1e-12)
    return out


def _naive_logits(image_embeddings, text_embeddings, scale):
    """scale * cos(image i, text j), one pair at a time."""
    a, b = _unit(image_embeddings), _unit(text_embeddings)
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a, b = a.expand(*batch, *a.shape[-2:]), b.expand(*batch, *b.shape[-2:])
    out = torch.zeros(*batch, a.shape[-2], b.shape[-2], dtype=a.dtype)
    for index in itertools.product(*map(range, batch)):
        for i in range(a.shape[-2]):
            for j in range(b.shape[-2]):
                out[index][i, j] = scale * (a[index][i] @ b[index][j])
    return out


def _naive_clip_loss(image_embeddings, text_embeddings, scale):
    """The mean over groups and directions of -log softmax(row)[its own column], written out."""
    logits = _naive_logits(image_embeddings, text_embeddings, scale)
    logits = logits.reshape(-1, *logits.shape[-2:])  # (G, B, B)
    losses = []
    for group in logits:
        for matrix in (group, group.T):
            losses += [torch.logsumexp(matrix[i], 0) - matrix[i, i] for i in range(len(matrix))]
    return torch.stack(losses).mean()


EMBED = dict(Bi=(1, 4), Bt=(1, 4), E=(1, 5), groups=(0, 2), tensor=(0, 1))


def _scale(s):
    return Const(torch.tensor(2.5)) if s.tensor else Num(2.5)


@spec("contrastive.clip_logits", contrastive.clip_logits, EMBED,
      reference=lambda call, image_embeddings, text_embeddings, scale: _naive_logits(
          image_embeddings, text_embeddings, float(scale)))
def _(s):
    lead = (s.groups,) if s.groups else ()
    return contrastive.clip_logits, dict(image_embeddings=Tensor(*lead, s.Bi, s.E, seq=len(lead)),
                                         text_embeddings=Tensor(*lead, s.Bt, s.E, seq=len(lead)), scale=_scale(s))


@spec("contrastive.clip_loss", contrastive.clip_loss, EMBED,
      reference=lambda call, image_embeddings, text_embeddings, scale: _naive_clip_loss(
          image_embeddings, text_embeddings, float(scale)))
def _(s):
    lead = (s.groups,) if s.groups else ()
    return contrastive.clip_loss, dict(image_embeddings=Tensor(*lead, s.Bi, s.E, seq=len(lead)),
                                       text_embeddings=Tensor(*lead, s.Bi, s.E, seq=len(lead)), scale=_scale(s))


def _naive_retrieval(call, similarity, targets, k):
    """A query is right when fewer than k candidates are more similar than its own."""
    hits = [int((similarity[q] > similarity[q, targets[q]]).sum()) < k for q in range(similarity.shape[0])]
    return sum(hits) / len(hits)


@spec("contrastive.retrieval_accuracy", contrastive.retrieval_accuracy, dict(Q=(1, 5), C=(1, 5), k=(1, 4)),
      reference=_naive_retrieval, half=False)
def _(s):
    return contrastive.retrieval_accuracy, dict(similarity=Tensor(s.Q, s.C), targets=Ids(s.Q, vocab=s.C, seq=None),
                                                k=Int(s.k))


def _dual_encoder_loss(model, images, text_inputs, groups):
    return model(images, text_inputs, groups=groups)


def _dual_encoder_reference(call, model, images, text_inputs, groups):
    """The CLIP loss of the two projections, in groups, with the scale exp(log_scale) capped at 100, written out."""
    a, b = images @ model.image_projection.weight.T, text_inputs @ model.text_projection.weight.T
    scale = min(float(model.log_scale.detach().exp()), 100.0)
    return _naive_clip_loss(a.reshape(groups, -1, a.shape[-1]), b.reshape(groups, -1, b.shape[-1]), scale)


@spec("contrastive.DualEncoder", contrastive.DualEncoder, dict(per=(1, 3), groups=(1, 2), Di=(1, 4), Dt=(1, 4),
                                                               E=(1, 4), t=(0, 1)),
      reference=_dual_encoder_reference)
def _(s):
    model = _module(lambda: contrastive.DualEncoder(nn.Identity(), nn.Identity(), s.Di, s.Dt, s.E,
                                                    temperature=[0.07, 0.005][s.t]))  # scales 1/0.07, then capped
    B = s.per * s.groups
    return _dual_encoder_loss, dict(model=Const(model), images=Tensor(B, s.Di), text_inputs=Tensor(B, s.Dt),
                                    groups=Int(s.groups))


# lora -----------------------------------------------------------------------------------------------------

LORA = dict(B=(1, 3), d_in=(1, 5), d_out=(1, 5), r=(1, 5), trained=(0, 1), bias=(0, 1), alpha=(0, 1))


def _lora_layer(s):
    """A LoRALinear of rank min(r, d_in, d_out) on a random nn.Linear; B = 0 (as made) or trained (random)."""
    def make():
        layer = lora.LoRALinear(nn.Linear(s.d_in, s.d_out, bias=bool(s.bias)), min(s.r, s.d_in, s.d_out),
                                alpha=[None, 3.0][s.alpha])
        if s.trained:
            nn.init.normal_(layer.B)
        return layer
    return _module(make)


def _lora_reference(call, x):
    """x (W + (alpha / r) B A)^T + b from the weights, in float64; with B = 0, the unadapted layer x W^T + b."""
    W, b = call.base.weight, call.base.bias
    if not call.B.any():
        return F.linear(x, W, b)
    return F.linear(x, W + call.alpha / call.r * call.B @ call.A, b)


@spec("lora.LoRALinear", lora.LoRALinear, LORA, reference=_lora_reference)
def _(s):
    return _lora_layer(s), dict(x=Tensor(s.B, 2, s.d_in, seq=1))


def _check_new_lora(out, args):
    """A fresh adapter: the base layer itself (frozen), A (r, d_in) and B = 0 (d_out, r) trainable, the effective
    weight equal to the base's."""
    base, r = args["base"], args["r"]
    assert isinstance(out, lora.LoRALinear) and out.base is base and out.r == r
    assert out.A.shape == (r, base.in_features) and out.B.shape == (base.out_features, r) and not out.B.any()
    assert out.A.requires_grad and out.B.requires_grad and not any(p.requires_grad for p in base.parameters())
    assert torch.equal(out.weight, base.weight) and torch.isfinite(out.A).all()
    assert out.scale == (r if args["alpha"] is None else args["alpha"]) / r


@spec("lora.LoRALinear (construction)", lora.LoRALinear, LORA, check=_check_new_lora)
def _(s):
    return lora.LoRALinear, dict(base=Obj(nn.Linear(s.d_in, s.d_out)), r=Int(min(s.r, s.d_in, s.d_out)),
                                 alpha=Num(2.0) if s.alpha else Const(None))


def _adapted_output(model, targets, r, alpha, x):
    """The names add_lora adapted, and the model's output after it (B = 0: unchanged)."""
    names = lora.add_lora(model, targets, r=r, alpha=alpha)
    return names, model(x)


def _adapted_reference(call, model, targets, r, alpha, x):
    """The linear layers named in targets (networkx-free: named_modules), and the unadapted model's output."""
    names = [n for n, m in model.named_modules() if n.rsplit(".", 1)[-1] in set(targets) and isinstance(m, nn.Linear)]
    return names, model(x)


@spec("lora.add_lora", lora.add_lora, dict(B=(1, 2), T=(1, 3), which=(0, 2), r=(1, 4)), reference=_adapted_reference)
def _(s):
    model = _module(lambda: blocks.EncoderBlock(8, 2, 8))
    targets = [("W_q", "W_v"), ("W_o",), ("W_k", "W_v", "no_such_layer")][s.which]
    return _adapted_output, dict(model=Obj(model), targets=Texts(targets, corruptions=("one str", "numbers", "empty")),
                                 r=Int(s.r), alpha=Num(2.0), x=Tensor(s.B, s.T, 8, seq=1))


def _merged_output(model, x):
    """merge_lora's model: no LoRALinear left, and its output."""
    merged = lora.merge_lora(model)
    return [type(m).__name__ for m in merged.modules() if isinstance(m, (lora.LoRALinear, nn.Linear))], merged(x)


def _merged_reference(call, model, x):
    """The adapted model before merging: where it has a LoRALinear the merged one has an nn.Linear; its output."""
    kinds = [type(m).__name__ for m in model.modules() if isinstance(m, (lora.LoRALinear, nn.Linear))
             and not any(m is l.base for l in model.modules() if isinstance(l, lora.LoRALinear))]
    return ["Linear" for _ in kinds], model(x)


@spec("lora.merge_lora", lora.merge_lora, dict(B=(1, 2), T=(1, 3), r=(1, 4)), reference=_merged_reference)
def _(s):
    def adapted():
        model = blocks.EncoderBlock(8, 2, 8)
        lora.add_lora(model, ("W_q", "W_v", "W_o"), r=s.r)
        for m in model.modules():
            if isinstance(m, lora.LoRALinear):
                nn.init.normal_(m.B)  # trained
        return model
    return _merged_output, dict(model=Obj(_module(adapted)), x=Tensor(s.B, s.T, 8, seq=1))


@spec("lora.freeze", lora.freeze, dict(D=(1, 4)), check=lambda out, args: (
        out is args["model"] and not any(p.requires_grad for p in out.parameters())))
def _(s):
    return lora.freeze, dict(model=Obj(blocks.FeedForward(s.D, 4)))


# pretrain -------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _hf_mlm_tokenizer(mask_id: int):
    """A Hugging Face tokenizer of 258 ids ([PAD], [MASK], the 256 bytes) whose mask token has id ``mask_id``."""
    from transformers import PreTrainedTokenizerFast
    tok = bpe.BPETokenizer([], specials=["[PAD]", "[MASK]"])
    return PreTrainedTokenizerFast(tokenizer_object=tok.to_hf(), pad_token="[PAD]", mask_token=tok.id_to_token[mask_id])


def _hf_mlm_mask(call, ids, mask_id, vocab_size, special_ids, p, mask_prob, random_prob, generator):
    """Hugging Face's DataCollatorForLanguageModeling with the same probabilities and generator state."""
    from transformers import DataCollatorForLanguageModeling
    collator = DataCollatorForLanguageModeling(_hf_mlm_tokenizer(mask_id), mlm_probability=p,
                                               mask_replace_prob=mask_prob, random_replace_prob=random_prob)
    collator.generator = generator
    return collator.torch_mask_tokens(ids.clone(), special_tokens_mask=torch.isin(ids, torch.tensor(special_ids)))


@spec("pretrain.mlm_mask", pretrain.mlm_mask, dict(B=(1, 3), T=(1, 6), mask=(0, 1), p=(0, 2)), reference=_hf_mlm_mask,
      half=False)
def _(s):
    return pretrain.mlm_mask, dict(ids=Ids(s.B, s.T, vocab=258), mask_id=Int(s.mask), vocab_size=Int(258),
                                   special_ids=IntList([0], high=257), p=Num([0.3, 0.7, 1.0][s.p]), mask_prob=Num(0.6),
                                   random_prob=Num(0.2), generator=Gen())


class Labels(Ids):
    """Token ids to predict, with IGNORE_INDEX (not predicted) at random positions."""

    def make(self, g):
        ids = super().make(g)
        return ids.masked_fill(torch.rand(ids.shape, generator=g) < 0.4, pretrain.IGNORE_INDEX)


def _naive_mlm_loss(call, logits, labels):
    """The mean of logsumexp(logits) - logit of the label over the predicted positions (0 when there is none)."""
    terms = [torch.logsumexp(logits[b, t], 0) - logits[b, t, labels[b, t]]
             for b in range(labels.shape[0]) for t in range(labels.shape[1]) if labels[b, t] != pretrain.IGNORE_INDEX]
    return torch.stack(terms).mean() if terms else torch.zeros((), dtype=logits.dtype)


@spec("pretrain.mlm_loss", pretrain.mlm_loss, dict(B=(1, 3), T=(1, 4), V=(1, 6)), reference=_naive_mlm_loss)
def _(s):
    return pretrain.mlm_loss, dict(logits=Tensor(s.B, s.T, s.V, seq=1), labels=Labels(s.B, s.T, vocab=s.V))


@spec("pretrain.MLMHead", pretrain.MLMHead, dict(B=(1, 3), T=(1, 4), V=(1, 6), D=(4, 8)))  # LayerNorm over D >= 4
def _(s):
    return _module(lambda: pretrain.MLMHead(nn.Embedding(s.V, s.D))), dict(h=Tensor(s.B, s.T, s.D, seq=1))


def _lengths_of(s, T):
    return IntList([max(1, T - b) for b in range(s.B)], high=T)


PRETRAIN = dict(B=(1, 3), T=(1, 6), variant=(0, 2), lengths=(0, 1))


@spec("pretrain.MaskedLM", pretrain.MaskedLM, PRETRAIN)
def _(s):
    return _module(lambda: pretrain.MaskedLM(_config(**MODEL_VARIANTS[s.variant]))), dict(
        ids=Ids(s.B, s.T, vocab=11), lengths=_lengths_of(s, s.T) if s.lengths else Const(None))


@spec("pretrain.MaskedLM.loss", pretrain.MaskedLM.loss, PRETRAIN,
      reference=lambda call, inputs, labels, lengths: _naive_mlm_loss(None, call.__self__(inputs, lengths), labels))
def _(s):
    model = _module(lambda: pretrain.MaskedLM(_config(**MODEL_VARIANTS[s.variant])))
    return model.loss, dict(inputs=Ids(s.B, s.T, vocab=11), labels=Labels(s.B, s.T, vocab=11),
                            lengths=_lengths_of(s, s.T) if s.lengths else Const(None))


@spec("pretrain.SequenceClassifier", pretrain.SequenceClassifier, {**PRETRAIN, "C": (1, 3)})
def _(s):
    return _module(lambda: pretrain.SequenceClassifier(models.Encoder(_config(**MODEL_VARIANTS[s.variant])), s.C)), \
        dict(ids=Ids(s.B, s.T, vocab=11), lengths=_lengths_of(s, s.T) if s.lengths else Const(None))


def _naive_pad(call, sequences, pad_id, max_len):
    cut = [list(x)[:max_len] if max_len is not None else list(x) for x in sequences]
    T = max(map(len, cut))
    return torch.tensor([x + [pad_id] * (T - len(x)) for x in cut]), torch.tensor([len(x) for x in cut])


@spec("pretrain.pad", pretrain.pad, dict(B=(1, 3), T=(1, 5), cut=(0, 1)), reference=_naive_pad, half=False)
def _(s):
    return pretrain.pad, dict(sequences=IntLists([1 + (s.T + b) % s.T for b in range(s.B)], high=11), pad_id=Int(3),
                              max_len=Int(max(1, s.T - 1)) if s.cut else Const(None))


def _classifier(s):
    return _module(lambda: pretrain.SequenceClassifier(models.Encoder(_config()), 3))


def _naive_accuracy(call, model, ids, lengths, labels, batch_size):
    """The share of sequences whose largest logit (one sequence at a time, cut to its length) is its label."""
    right = [int(model(ids[i:i + 1, :int(lengths[i])], lengths[i:i + 1]).argmax()) == int(labels[i])
             for i in range(ids.shape[0])]
    return sum(right) / len(right)


@spec("pretrain.accuracy", pretrain.accuracy, dict(N=(1, 5), T=(1, 6), batch=(1, 3)), reference=_naive_accuracy,
      half=False)
def _(s):
    return pretrain.accuracy, dict(model=Obj(_classifier(s)), ids=Ids(s.N, s.T, vocab=11),
                                   lengths=Ids(s.N, vocab=s.T + 1, low=1, seq=None), labels=Ids(s.N, vocab=3, seq=None),
                                   batch_size=Int(s.batch))


def _check_history(out, args):
    """A training run's history: one finite loss and learning rate per step."""
    assert isinstance(out, train.History) and out.step == list(range(args["steps"])) and not out.diverged
    assert len(out.loss) == len(out.lr) == args["steps"] and all(map(math.isfinite, out.loss + out.lr))


@spec("pretrain.fit_classifier", pretrain.fit_classifier, dict(N=(1, 5), T=(1, 6), steps=(1, 3), batch=(1, 3)),
      check=_check_history, half=False)
def _(s):
    return pretrain.fit_classifier, dict(model=Obj(_classifier(s)), ids=Ids(s.N, s.T, vocab=11),
                                         lengths=Ids(s.N, vocab=s.T + 1, low=1, seq=None),
                                         labels=Ids(s.N, vocab=3, seq=None), steps=Int(s.steps),
                                         batch_size=Int(s.batch), lr=Num(1e-3))


@spec("pretrain.fit_mlm", pretrain.fit_mlm, dict(N=(1, 4), T=(1, 8), steps=(1, 3), batch=(1, 3)),
      check=_check_history, half=False)
def _(s):
    return pretrain.fit_mlm, dict(model=Obj(_module(lambda: pretrain.MaskedLM(_config()))),
                                  sequences=IntLists([1 + (s.T + i) % s.T for i in range(s.N)], high=11),
                                  pad_id=Int(0), mask_id=Int(1), steps=Int(s.steps), batch_size=Int(s.batch),
                                  lr=Num(1e-3), quiet=Const(True))


WORDS = "abcXYZ é!,'-0 "


def _scanned_words(call, text, min_len, max_len, lower):
    """Runs of the ASCII letters, found one character at a time."""
    words, word = [], ""
    for c in text + " ":
        if "a" <= c <= "z" or "A" <= c <= "Z":
            word += c
        elif word:
            words.append(word)
            word = ""
    words = [w.lower() if lower else w for w in words]
    return [w for w in words if min_len <= len(w) and (max_len is None or len(w) <= max_len)]


@spec("pretrain.words_of", pretrain.words_of, dict(n=(0, 30), lo=(1, 3), hi=(0, 4), lower=(0, 1)),
      reference=_scanned_words, half=False)
def _(s):
    return pretrain.words_of, dict(text=Text(length=s.n, alphabet=WORDS), min_len=Int(s.lo),
                                   max_len=Int(s.hi) if s.hi else Const(None), lower=Const(bool(s.lower)))


def _check_shuffled_words(out, args):
    """One text per distinct word: label 0 the word itself, label 1 a rearrangement of its letters that is no
    word of the list; the letters of the two classes together are exactly those of the words."""
    texts, labels = out
    words = sorted(set(args["words"]))
    assert len(texts) == len(labels) == len(words) and set(labels) <= {0, 1}
    assert sorted(sorted(t) for t in texts) == sorted(sorted(w) for w in words)
    assert all((t in words) == (label == 0) for t, label in zip(texts, labels))


@spec("pretrain.shuffled_word_task", pretrain.shuffled_word_task, dict(n=(1, 6), seed=(0, 3)),
      check=_check_shuffled_words, half=False)
def _(s):
    vocabulary = ["stone", "notes", "onset", "tap", "pat", "apt", "noon", "a", "ab", "listen"]
    return pretrain.shuffled_word_task, dict(words=Texts(vocabulary[:s.n] * 2), seed=Int(s.seed), tries=Int(20))


# bpe ------------------------------------------------------------------------------------------------------

TEXT = "ab cé日\n 1'!sx"  # letters, an accent, a CJK character, spaces, a newline, a digit, a clitic's apostrophe
WRONG_TEXTS = ("bytes", "number", "none")  # for a text that may also be a list of texts


def _hf_pieces(text):
    """Hugging Face's byte-level pre-tokenizer (GPT-2's pattern, no prefix space): the pieces of ``text``."""
    from tokenizers import pre_tokenizers
    return [piece for piece, _ in pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True).pre_tokenize_str(text)]


def _check_byte_table(out, args):
    """256 distinct characters, Hugging Face's byte-level alphabet; the ASCII bytes as Hugging Face writes them;
    the printable bytes themselves and the others U+0100 on, in byte order."""
    from tokenizers import pre_tokenizers
    assert sorted(out) == list(range(256)) and set(out.values()) == set(pre_tokenizers.ByteLevel.alphabet())
    assert all([out[b]] == _hf_pieces(chr(b)) for b in range(128) if not chr(b).isspace() or chr(b) == " ")
    printable = [b for b in range(256) if chr(b).isprintable() and b != 32 and b != 173]
    assert all(out[b] == chr(b) for b in printable)
    others = [b for b in range(256) if b not in printable]
    assert [out[b] for b in others] == [chr(256 + i) for i in range(len(others))]


@spec("bpe.bytes_to_unicode", bpe.bytes_to_unicode, {}, check=_check_byte_table, half=False, examples=1)
def _(s):
    return bpe.bytes_to_unicode, {}


@spec("bpe.pretokenize", bpe.pretokenize, dict(n=(0, 24)), reference=lambda call, text: _hf_pieces(text), half=False)
def _(s):
    return bpe.pretokenize, dict(text=Text(length=s.n, alphabet=TEXT))


@spec("bpe.word_counts", bpe.word_counts, dict(n=(0, 24), several=(0, 1)), half=False,
      reference=lambda call, texts: collections.Counter(
          piece for text in ([texts] if isinstance(texts, str) else texts) for piece in _hf_pieces(text)))
def _(s):
    text = Text(length=s.n, alphabet=TEXT, corruptions=("bytes", "number", "none"))
    return bpe.word_counts, dict(texts=Texts(["ab cd", "a b", "日"]) if s.several else text)


def _replaced_pair(call, word, a, b, new):
    """Every (a, b) replaced left to right, without overlaps: str.replace on the ids written <id>."""
    written = "".join(f"<{i}>" for i in word).replace(f"<{a}><{b}>", f"<{new}>")
    return [int(i) for i in re.findall(r"<(-?\d+)>", written)]


@spec("bpe.merge_pair", bpe.merge_pair, dict(n=(0, 8), a=(0, 2), b=(0, 2)), reference=_replaced_pair, half=False)
def _(s):
    word = [(i * 7 + s.n) % 3 for i in range(s.n)]
    return bpe.merge_pair, dict(word=IntList(word, high=2), a=Int(s.a), b=Int(s.b), new=Int(9))


def _naive_merges(call, counts, vocab, vocab_size, min_frequency):
    """BPE by its definition: recount every adjacent pair of every word (times its count) before each merge;
    the most frequent pair wins, ties to the smallest (left id, right id); stop below max(1, min_frequency)."""
    vocab = list(vocab)
    ids = {t: i for i, t in enumerate(vocab)}
    words, freqs = [[ids[c] for c in w] for w in counts], list(counts.values())
    merges = []
    while len(vocab) < vocab_size:
        pairs = collections.Counter()
        for w, f in zip(words, freqs):
            for pair in zip(w, w[1:]):
                pairs[pair] += f
        if not pairs:
            break
        (a, b), count = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        if count < max(1, min_frequency):
            break
        if vocab[a] + vocab[b] not in ids:
            ids[vocab[a] + vocab[b]] = len(vocab)
            vocab.append(vocab[a] + vocab[b])
        merges.append((vocab[a], vocab[b]))
        words = [_replaced_pair(None, w, a, b, ids[vocab[a] + vocab[b]]) for w in words]
    return merges, vocab


def _counts_of(s):
    return dict(bpe.word_counts("".join(TEXT[(i * 5 + s.n) % len(TEXT)] for i in range(s.n))))


@spec("bpe.learn_merges", bpe.learn_merges, dict(n=(0, 30), more=(0, 8), freq=(0, 2)), reference=_naive_merges,
      half=False)
def _(s):
    alphabet = sorted(bpe.bytes_to_unicode().values())
    return bpe.learn_merges, dict(counts=Counts(_counts_of(s)), vocab=Texts(alphabet), vocab_size=Int(256 + s.more),
                                  min_frequency=Int(s.freq))


def _trained(text, vocab_size, specials, min_frequency):
    """The merges learned, and the tokenizer's ids of a fixed sample."""
    tokenizer = bpe.BPETokenizer.train(text, vocab_size, specials=specials, min_frequency=min_frequency)
    return tokenizer.merges, tokenizer.id_to_token, tokenizer.encode("a cab, 日 b1")


def _hf_trained(call, text, vocab_size, specials, min_frequency):
    """Hugging Face tokenizers trained with the same settings: its merges, vocabulary and ids of the sample."""
    hf = bpe.train_hf(text, vocab_size, specials=specials, min_frequency=min_frequency)
    vocab = sorted(hf.get_vocab().items(), key=lambda kv: kv[1])
    return bpe.hf_merges(hf), [t for t, _ in vocab], hf.encode("a cab, 日 b1").ids


@spec("bpe.BPETokenizer.train", bpe.BPETokenizer, dict(n=(0, 30), more=(0, 8), freq=(0, 2), specials=(0, 2)),
      reference=_hf_trained, half=False)
def _(s):
    specials = ["[PAD]", "[MASK]"][:s.specials]
    text = "".join(TEXT[(i * 5 + s.n) % len(TEXT)] for i in range(s.n))
    return _trained, dict(text=Text(text, corruptions=WRONG_TEXTS), vocab_size=Int(256 + s.specials + s.more),
                          specials=Texts(specials, corruptions=("one str", "numbers")), min_frequency=Int(s.freq))


class Merges(Arg):
    """A list of merges (pairs of tokens); changed, a merge of a token not yet defined, a triple, a string."""

    corruptions = ("undefined", "triple", "str")

    def __init__(self, merges):
        self.merges = list(merges)

    def make(self, g):
        return list(self.merges)

    def corrupt(self, v, how, g):
        return {"undefined": [("no such", "token")] + v, "triple": [("a", "b", "c")] + v, "str": "ab"}[how]


def _vocabulary(merges, specials):
    return bpe.BPETokenizer(merges, specials).id_to_token


def _vocabulary_reference(call, merges, specials):
    """The special tokens, Hugging Face's 256 byte characters sorted, then each merged token new so far."""
    from tokenizers import pre_tokenizers
    out = list(specials) + sorted(pre_tokenizers.ByteLevel.alphabet())
    return out + list(dict.fromkeys(a + b for a, b in merges if a + b not in out))


@spec("bpe.BPETokenizer", bpe.BPETokenizer, dict(n=(0, 30), more=(0, 8), specials=(0, 2)),
      reference=_vocabulary_reference, half=False)
def _(s):
    merges, _ = bpe.learn_merges(_counts_of(s), sorted(bpe.bytes_to_unicode().values()), 256 + s.more)
    return _vocabulary, dict(merges=Merges(merges), specials=Texts(["[PAD]", "[MASK]"][:s.specials],
                                                                   corruptions=("one str", "numbers")))


@functools.lru_cache(maxsize=None)
def _tokenizers():
    """A tokenizer trained on a small corpus, and Hugging Face's trained the same way."""
    corpus = "the cat sat on the mat; 日本 café 12 'tis the cat's\n" * 3
    return bpe.BPETokenizer.train(corpus, 290, specials=["[PAD]"]), bpe.train_hf(corpus, 290, specials=["[PAD]"])


@spec("bpe.BPETokenizer.encode", bpe.BPETokenizer.encode, dict(n=(0, 24)), half=False,
      reference=lambda call, text: _tokenizers()[1].encode(text).ids)
def _(s):
    return _tokenizers()[0].encode, dict(text=Text(length=s.n, alphabet=TEXT + "thecat"))


def _decoded_reference(call, ids, skip_specials):
    """Hugging Face's decoder (specials kept unless skipped; its pieces joined with nothing between)."""
    hf = _tokenizers()[1]
    ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
    pieces, run = [], []
    for i in ids + [None]:
        if i is None or i == 0:
            pieces.append(hf.decode(run))
            run = []
            if i == 0 and not skip_specials:
                pieces.append("[PAD]")
        else:
            run.append(i)
    return "".join(pieces)


@spec("bpe.BPETokenizer.decode", bpe.BPETokenizer.decode, dict(n=(0, 10), skip=(0, 1), as_list=(0, 1)),
      reference=_decoded_reference, half=False)
def _(s):
    V = len(_tokenizers()[0])
    ids = IntList(torch.randint(V, (s.n,), generator=torch.Generator().manual_seed(s.n)).tolist(), high=V - 1) \
        if s.as_list else Ids(s.n, vocab=V, seq=0, batch=None)
    return _tokenizers()[0].decode, dict(ids=ids, skip_specials=Const(bool(s.skip)))


def _merges_of_hf(call, text, vocab_size, specials, min_frequency):
    counts = bpe.word_counts(text)
    return _naive_merges(None, counts, list(specials) + sorted(bpe.bytes_to_unicode().values()), vocab_size,
                         min_frequency)[0]


@spec("bpe.train_hf", bpe.train_hf, dict(n=(0, 30), more=(0, 8), freq=(0, 2), specials=(0, 1)),
      reference=_merges_of_hf, half=False)
def _(s):
    text = "".join(TEXT[(i * 5 + s.n) % len(TEXT)] for i in range(s.n))
    return (lambda text, vocab_size, specials, min_frequency: bpe.hf_merges(
        bpe.train_hf(text, vocab_size, specials=specials, min_frequency=min_frequency))), dict(
        text=Text(text, corruptions=WRONG_TEXTS), vocab_size=Int(256 + s.specials + s.more),
        specials=Texts(["[PAD]"][:s.specials], corruptions=("one str", "numbers")), min_frequency=Int(s.freq))


@spec("bpe.hf_merges", bpe.hf_merges, dict(n=(0, 30), more=(0, 8)), half=False,
      reference=lambda call, hf: _naive_merges(None, bpe.word_counts(hf.text), sorted(bpe.bytes_to_unicode().values()),
                                               256 + hf.more, 0)[0])
def _(s):
    text = "".join(TEXT[(i * 5 + s.n) % len(TEXT)] for i in range(s.n))
    hf = bpe.train_hf(text, 256 + s.more)
    hf.text, hf.more = text, s.more  # what the reference retrains from
    return bpe.hf_merges, dict(hf=Obj(hf))


@spec("bpe.BPETokenizer.load", bpe.BPETokenizer.load, {}, half=False,
      reference=lambda call, path: _tokenizers()[0].id_to_token)
def _(s):
    path = _tokenizers()[0].save(FILES / "tokenizer.json")
    return (lambda path: bpe.BPETokenizer.load(path).id_to_token), dict(path=FilePath(path, wrong=_garbage_file()))


# data -----------------------------------------------------------------------------------------------------

def _check_fetched(out, args):
    """The path of a file with the dataset's sha256 (the packaged copy: no download)."""
    dataset = data.DATASETS[args["name"]]
    assert out.is_file() and str(out).endswith(dataset.path)
    assert hashlib.sha256(out.read_bytes()).hexdigest() == dataset.sha256 and out.stat().st_size == dataset.size


@spec("data.fetch", data.fetch, dict(which=(0, 1)), check=_check_fetched, half=False, examples=6)
def _(s):
    return data.fetch, dict(name=Choice(sorted(data.DATASETS)[s.which]), download=Const(False), timeout=Num(1.0))


@spec("data.cache_dir", data.cache_dir, {}, half=False, examples=1,
      reference=lambda call: pathlib.Path(os.environ.get("ATTNBOOK_CACHE") or pathlib.Path.home() / ".cache" / "attnbook"))
def _(s):
    return data.cache_dir, {}


@spec("data.packaged_dir", data.packaged_dir, {}, half=False, examples=1,
      reference=lambda call: pathlib.Path(data.__file__).resolve().parent / "data_files")
def _(s):
    return data.packaged_dir, {}


@spec("data.sha256_of", data.sha256_of, {}, half=False, examples=6,
      reference=lambda call, path: hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest())
def _(s):
    return data.sha256_of, dict(path=FilePath(_garbage_file()))


SENTENCE = "Jʼai  vu\u00a0l'homme, n'est-ce pas ? I'm “fine”. Café \u2009!"


def _normalized(call, text):
    """NFC, typographic apostrophes as ', every run of Unicode white space as one space (str.split), trimmed."""
    return " ".join(unicodedata.normalize("NFC", text).replace("\u2019", "'").replace("\u2018", "'").split())


@spec("data.normalize_text", data.normalize_text, dict(n=(0, 40)), reference=_normalized, half=False)
def _(s):
    return data.normalize_text, dict(text=Text(length=s.n, alphabet=SENTENCE + "\u2019\u2018\t\n"))


def _check_tokens(out, args):
    """Nothing lost or invented: the tokens joined are the normalized (lower-cased) text without its spaces;
    every token a run of word characters (with its clitic apostrophe: before it in English, after it in
    French) or one other character; characters for "chars"."""
    text = data.normalize_text(args["text"])
    text = text.lower() if args["lower"] else text
    if args["lang"] == "chars":
        assert out == list(text)
        return
    assert all(isinstance(t, str) and t and not t.isspace() for t in out)
    assert "".join(out) == "".join(text.split())
    for t in out:
        word = t.lstrip("'") if args["lang"] == "en" else t.rstrip("'")
        assert (len(t) == 1 and not t.isalnum() and t != "_") or re.fullmatch(r"\w+", word), t


@spec("data.tokenize", data.tokenize, dict(n=(0, 40), lang=(0, 2), lower=(0, 1)), check=_check_tokens, half=False)
def _(s):
    return data.tokenize, dict(text=Text(length=s.n, alphabet=SENTENCE), lang=Choice(["en", "fr", "chars"][s.lang]),
                               lower=Const(bool(s.lower)))


@spec("data.detokenize", data.detokenize, dict(n=(0, 40), lang=(0, 2)), half=False,
      reference=lambda call, tokens, lang: tokens)
def _(s):
    lang = ["en", "fr", "chars"][s.lang]
    text = "".join(SENTENCE[(i * 7 + s.n) % len(SENTENCE)] for i in range(s.n))
    return (lambda tokens, lang: data.tokenize(data.detokenize(tokens, lang), lang)), dict(
        tokens=Texts(data.tokenize(text, lang), corruptions=("one str", "numbers", "nested")), lang=Choice(lang))


def _vocab_of(tokens, ids):
    """The vocabulary built from tokens, then the encoding of tokens and the decoding of ids."""
    vocab = data.Vocab(tokens)
    return vocab.itos, vocab.encode(tokens + ["never seen"]), vocab.decode(ids)


def _vocab_reference(call, tokens, ids):
    """<pad> <unk> <bos> <eos>, then each new token in order; unknown tokens -> 1; decoding up to <eos>, without
    <pad> and <bos>."""
    itos = ["<pad>", "<unk>", "<bos>", "<eos>"] + [t for t in dict.fromkeys(tokens) if t not in ("<pad>", "<unk>", "<bos>", "<eos>")]
    ids = list(ids)
    ids = ids[:ids.index(3)] if 3 in ids else ids
    return itos, [itos.index(t) if t in itos else 1 for t in tokens + ["never seen"]], [itos[i] for i in ids if i not in (0, 2)]


@spec("data.Vocab", data.Vocab, dict(n=(0, 8), m=(0, 6)), reference=_vocab_reference, half=False)
def _(s):
    words = ["le", "chat", "<eos>", "est", "le", "noir"][:s.n] + ["un"] * (s.n > 6)
    return _vocab_of, dict(tokens=Texts(words, corruptions=("one str", "numbers", "nested")),
                           ids=IntList([(i * 3) % len(data.Vocab(words)) for i in range(s.m)], high=3))


def _built(sequences, min_freq):
    return data.Vocab.build(sequences, min_freq=min_freq).itos


def _built_reference(call, sequences, min_freq):
    counts = collections.Counter(t for seq in sequences for t in seq)
    kept = sorted((t for t in counts if counts[t] >= min_freq), key=lambda t: (-counts[t], t))
    return ["<pad>", "<unk>", "<bos>", "<eos>"] + [t for t in kept if t not in ("<pad>", "<unk>", "<bos>", "<eos>")]


class Sentences(Arg):
    """Tokenized sentences (lists of str); changed, sentences as plain strings, numbers among the tokens, none."""

    corruptions = ("strings", "numbers", "one list")

    def __init__(self, sentences):
        self.sentences = [list(x) for x in sentences]

    def make(self, g):
        return [list(x) for x in self.sentences]

    def corrupt(self, v, how, g):
        return {"strings": [" ".join(x) for x in v], "numbers": [[1, 2]] + v, "one list": [t for x in v for t in x]}[how]


@spec("data.Vocab.build", data.Vocab.build, dict(n=(0, 5), f=(1, 3)), reference=_built_reference, half=False)
def _(s):
    sentences = [["le", "chat"], ["le", "chien", "<pad>"], ["un", "chat"], ["le"], ["a", "b"]][:s.n]
    return _built, dict(sequences=Sentences(sentences), min_freq=Int(s.f))


def _check_pairs_file(out, args):
    """Every non-empty line of the file as a pair, in order, with its attribution."""
    lines = [line for line in pathlib.Path(args["path"]).read_text(encoding="utf-8").splitlines() if line.strip()]
    assert [(p.source, p.target, p.attribution) for p in out] == [tuple((line.split("\t") + [""])[:3]) for line in lines]


@spec("data.load_eng_fra", data.load_eng_fra, {}, check=_check_pairs_file, half=False, examples=6)
def _(s):
    path = FILES / "pairs.txt"
    path.write_text("Go.\tVa !\tCC-BY 2.0 (France) Attribution: tatoeba.org\n\nHi.\tSalut.\n", encoding="utf-8")
    bad = FILES / "pairs-bad.txt"
    bad.write_text("Go.\tVa !\none field only\n", encoding="utf-8")
    return data.load_eng_fra, dict(path=FilePath(path, wrong=bad))


def _check_split(out, args):
    """A partition of the pairs, no source sentence (normalized, lower case) on both sides, the test side
    max(1, round(test_fraction x distinct sources)) of them."""
    train_set, test_set = out
    key = lambda p: data.normalize_text(p.source if isinstance(p, data.SentencePair) else p[0]).lower()  # noqa: E731
    assert sorted(map(repr, train_set + test_set)) == sorted(map(repr, args["pairs"]))
    assert not {key(p) for p in train_set} & {key(p) for p in test_set}
    sources = {key(p) for p in args["pairs"]}
    assert len({key(p) for p in test_set}) == (max(1, round(args["test_fraction"] * len(sources))) if sources else 0)


class PairList(Arg):
    """Sentence pairs (SentencePair or (source, target) tuples); changed, strings, or pairs of numbers."""

    corruptions = ("strings", "numbers")

    def __init__(self, pairs):
        self.pairs = list(pairs)

    def make(self, g):
        return list(self.pairs)

    def corrupt(self, v, how, g):
        return ["Go."] + v if how == "strings" else [(1, 2)] + v


@spec("data.split_by_source", data.split_by_source, dict(n=(0, 8), f=(1, 8), tuples=(0, 1)), check=_check_split,
      half=False)
def _(s):
    sources = ["Go.", "go.", "Hi.", "Run!", "Wow!", "Hi.", "Fire!", "Help!"][:s.n]
    pairs = [(x, f"fr {i}") if s.tuples else data.SentencePair(x, f"fr {i}") for i, x in enumerate(sources)]
    return data.split_by_source, dict(pairs=PairList(pairs), test_fraction=Num(s.f / 10), seed=Int(s.n))


def _check_digit_pairs(out, args):
    """n pairs of digit strings of min_len..max_len digits, each target the task's transformation of its source."""
    transform = {"copy": lambda x: x, "reverse": lambda x: x[::-1],
                 "add1": lambda x: "".join("1234567890"[int(c)] for c in x)}[args["task"]]
    assert len(out) == args["n"]
    for source, target in out:
        assert source.isdigit() and args["min_len"] <= len(source) <= args["max_len"] and target == transform(source)


@spec("data.digit_pairs", data.digit_pairs, dict(n=(0, 5), lo=(1, 4), more=(0, 3), task=(0, 2)),
      check=_check_digit_pairs, half=False)
def _(s):
    return data.digit_pairs, dict(n=Int(s.n), min_len=Int(s.lo), max_len=Int(s.lo + s.more),
                                  task=Choice(["copy", "reverse", "add1"][s.task]), seed=Int(s.lo))


def _check_date_pairs(out, args):
    """n pairs: a date written in one of the formats, and the same date in ISO form, within the years."""
    import datetime
    patterns = {"long": "%B %d, %Y", "day_first": "%d %B %Y", "numeric": "%d.%m.%Y"}
    assert len(out) == args["n"]
    for source, target in out:
        day = datetime.date.fromisoformat(target)
        assert args["years"][0] <= day.year <= args["years"][1]
        assert any(datetime.datetime.strptime(source, patterns[f]).date() == day for f in args["formats"]
                   if _parses(source, patterns[f]))


def _parses(text, pattern):
    import datetime
    try:
        datetime.datetime.strptime(text, pattern)
        return True
    except ValueError:
        return False


@spec("data.date_pairs", data.date_pairs, dict(n=(0, 5), formats=(1, 3), y=(1900, 2000), span=(0, 50)),
      check=_check_date_pairs, half=False)
def _(s):
    formats = ["long", "day_first", "numeric"][:s.formats]
    return data.date_pairs, dict(n=Int(s.n), formats=Texts(formats, corruptions=("one str", "numbers", "empty")),
                                 years=IntPair(s.y, s.y + s.span), seed=Int(s.span))


@spec("data.CharTokenizer", data.CharTokenizer, dict(n=(1, 20)), half=False,
      reference=lambda call, text: "".join(sorted(set(text))))
def _(s):
    text = "".join(SENTENCE[(i * 7 + s.n) % len(SENTENCE)] for i in range(s.n))
    return (lambda text: data.CharTokenizer.from_text(text).chars), dict(
        text=Text(text, corruptions=("bytes", "number", "list", "none", "empty")))


CHARS = data.CharTokenizer(SENTENCE)


@spec("data.CharTokenizer.encode", data.CharTokenizer.encode, dict(n=(0, 20)), half=False,
      reference=lambda call, text: torch.tensor([CHARS.chars.index(c) for c in text], dtype=torch.long))
def _(s):
    return CHARS.encode, dict(text=Text(length=s.n, alphabet=SENTENCE, corruptions=("bytes", "number", "unknown")))


@spec("data.CharTokenizer.decode", data.CharTokenizer.decode, dict(n=(0, 20), as_list=(0, 1)), half=False,
      reference=lambda call, ids: "".join(CHARS.chars[i] for i in ids))
def _(s):
    V = len(CHARS)
    ids = [(i * 5 + s.n) % V for i in range(s.n)]
    return CHARS.decode, dict(ids=IntList(ids, high=V - 1) if s.as_list else Ids(s.n, vocab=V, seq=0, batch=None))


def _check_shakespeare(out, args):
    """Its 65 characters; the training ids then the validation ids are the whole text, cut at (1 - val_fraction)."""
    text = data.fetch("tinyshakespeare").read_text(encoding="utf-8")
    assert out.tokenizer.chars == "".join(sorted(set(text))) and len(out.tokenizer.chars) == 65
    n_train = int(len(text) * (1 - args["val_fraction"]))
    assert len(out.train) == n_train and len(out.val) == len(text) - n_train
    assert out.tokenizer.decode(out.train[:200]) == text[:200] and out.tokenizer.decode(out.val[-200:]) == text[-200:]


@spec("data.load_shakespeare", data.load_shakespeare, {}, check=_check_shakespeare, half=False, examples=3)
def _(s):
    return data.load_shakespeare, dict(val_fraction=Num(0.1), download=Const(False))


def _check_windows(out, args):
    """batch_size windows of block_size ids of the sequence, each target window the same one shifted by one."""
    x, y = out
    ids, B, T = args["ids"], args["batch_size"], args["block_size"]
    assert x.shape == y.shape == (B, T) and x.dtype == y.dtype == ids.dtype
    for row_x, row_y in zip(x, y):
        starts = [i for i in range(len(ids) - T) if torch.equal(ids[i:i + T], row_x) and torch.equal(ids[i + 1:i + T + 1], row_y)]
        assert starts, (row_x, row_y)


@spec("data.lm_batch", data.lm_batch, dict(N=(2, 12), B=(1, 3), T=(1, 4)), check=_check_windows, half=False)
def _(s):
    return data.lm_batch, dict(ids=Ids(max(s.N, s.T + 1), vocab=5, seq=0, batch=None), batch_size=Int(s.B),
                               block_size=Int(s.T), generator=Gen())


def _check_adding(out, args):
    """n sequences (length, 2): values in [0, 1), exactly one marker in each half; targets the marked sums."""
    x, y = out
    n, T = args["n"], args["length"]
    assert x.shape == (n, T, 2) and y.shape == (n,)
    values, markers = x[..., 0], x[..., 1]
    assert ((values >= 0) & (values < 1)).all() and set(markers.unique().tolist()) <= {0.0, 1.0}
    assert (markers[:, :T // 2].sum(1) == 1).all() and (markers[:, T // 2:].sum(1) == 1).all()
    torch.testing.assert_close(y.double(), (values.double() * markers.double()).sum(1), atol=1e-6, rtol=0)


@spec("data.adding_problem", data.adding_problem, dict(n=(1, 4), T=(2, 8)), check=_check_adding, half=False)
def _(s):
    return data.adding_problem, dict(n=Int(s.n), length=Int(s.T), generator=Gen())


def _check_digits(out, args):
    """scikit-learn's 1,797 digits / 16, split stratified: every image of the set once, each class in both halves
    in proportion."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    images = torch.cat([out.x_train, out.x_test])  # (N, 1, 8, 8)
    assert images.shape == (1797, 1, 8, 8) and out.classes == tuple(map(str, range(10)))
    expected = sorted(map(tuple, (torch.tensor(digits.images, dtype=torch.float32) / 16).reshape(-1, 64).tolist()))
    assert sorted(map(tuple, images.reshape(-1, 64).tolist())) == expected
    share = torch.bincount(out.y_test, minlength=10) / torch.bincount(torch.cat([out.y_train, out.y_test]))
    assert (share - args["test_fraction"]).abs().max() < 0.05


@spec("data.load_digits", data.load_digits, dict(f=(1, 5), seed=(0, 3)), check=_check_digits, half=False, examples=3)
def _(s):
    return data.load_digits, dict(test_fraction=Num(s.f / 10), seed=Int(s.seed))


def _check_subset(out, args):
    """n distinct indices, as many of each class as the classes allow (counts differ by at most one among the
    classes not used up); nested: the first n of a larger subset."""
    labels, n = args["labels"], args["n"]
    assert out.dtype == torch.long and out.shape == (n,) and len(set(out.tolist())) == n
    counts = collections.Counter(labels[out].tolist())
    sizes = collections.Counter(labels.tolist())
    open_classes = [c for c in sizes if counts[c] < sizes[c]]
    assert all(counts[c] >= max(counts.values(), default=0) - 1 for c in open_classes)
    if n < len(labels):
        assert torch.equal(data.balanced_subset(labels, n + 1, seed=args["seed"])[:n], out)


@spec("data.balanced_subset", data.balanced_subset, dict(N=(1, 10), C=(1, 4), n=(1, 10)), check=_check_subset,
      half=False)
def _(s):
    return data.balanced_subset, dict(labels=Ids(s.N, vocab=s.C, seq=0, batch=None), n=Int(min(s.n, s.N)),
                                      seed=Int(s.C))


# train ----------------------------------------------------------------------------------------------------

def _seeded_draws(seed):
    """What the generators give after seed_everything(seed): Python's, NumPy's and PyTorch's next draws."""
    import numpy as np
    out = train.seed_everything(seed)
    return out, random.random(), float(np.random.rand()), torch.rand(2, dtype=torch.float64)


def _seeded_reference(call, seed):
    import numpy as np
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return seed, random.random(), float(np.random.rand()), torch.rand(2, dtype=torch.float64)


@spec("train.seed_everything", train.seed_everything, dict(seed=(0, 99)), reference=_seeded_reference, half=False,
      examples=8)
def _(s):
    return _seeded_draws, dict(seed=Int(s.seed))


@spec("train.pick_device", train.pick_device, {}, reference=lambda call, prefer: torch.device("cpu"), half=False,
      examples=4)
def _(s):
    return train.pick_device, dict(prefer=Choice("cpu"))


@spec("train.progress", train.progress, dict(n=(0, 5)), half=False, examples=8,
      reference=lambda call, iterable, total, desc, disable: list(iterable))
def _(s):
    return (lambda iterable, total, desc, disable: list(train.progress(iterable, total=total, desc=desc,
                                                                       disable=disable))), dict(
        iterable=Const(range(s.n)), total=Int(max(s.n, 1)), desc=Text("steps"), disable=Const(True))


def _smoothed(loss, window):
    return train.History(loss=list(loss)).smoothed_loss(window)


def _trailing_means(call, loss, window):
    import numpy as np
    x = np.asarray(loss, dtype=np.float64)
    return [float(x[max(0, i - window + 1):i + 1].mean()) for i in range(len(x))]


@spec("train.History", train.History, dict(n=(0, 8), w=(1, 4)), reference=_trailing_means, half=False)
def _(s):
    return _smoothed, dict(loss=FloatList([float((3 * i) % 5) for i in range(s.n)]), window=Int(s.w))


def _check_fit(out, args):
    """steps finite losses, the learning rates of the schedule, an evaluation every eval_every steps and at the end."""
    steps, lr, every = args["steps"], args["lr"], args["eval_every"]
    assert isinstance(out, train.History) and out.step == list(range(steps)) and not out.diverged
    assert len(out.loss) == steps and all(map(math.isfinite, out.loss))
    assert out.lr == pytest.approx([lr * (0.5 ** i) for i in range(steps)])
    assert out.eval_step == [s for s in range(1, steps) if every and s % every == 0] + [steps]
    assert all(map(math.isfinite, out.evals["mse"]))


@spec("train.fit", train.fit, dict(steps=(1, 4), every=(0, 2), clip=(0, 1)), check=_check_fit, half=False)
def _(s):
    torch.manual_seed(0)
    x, y = torch.randn(8, 2), torch.randn(8, 1)
    return train.fit, dict(
        model=Obj(nn.Linear(2, 1)), batches=Const(lambda step: (x, y)),
        loss_fn=Obj(lambda model, batch: F.mse_loss(model(batch[0]), batch[1])), steps=Int(s.steps), lr=Num(0.01),
        schedule=Obj(lambda step: 0.5 ** step), grad_clip=Num(1.0) if s.clip else Const(None),
        evaluate=Obj(lambda model: {"mse": float(F.mse_loss(model(x), y))}), eval_every=Int(s.every),
        quiet=Const(True))


@spec("train.inverse_sqrt_schedule", train.inverse_sqrt_schedule, dict(d=(1, 64), w=(1, 6), n=(1, 12)), half=False,
      reference=lambda call, d_model, warmup_steps, n: [d_model ** -0.5 * min((k + 1) ** -0.5, (k + 1) * warmup_steps ** -1.5)
                                                        for k in range(n)])
def _(s):
    return (lambda d_model, warmup_steps, n: list(map(train.inverse_sqrt_schedule(d_model, warmup_steps), range(n)))), \
        dict(d_model=Int(s.d), warmup_steps=Int(s.w), n=Const(s.n))


def _cosine_reference(call, total_steps, warmup_steps, min_factor, n):
    def factor(k):
        if k < warmup_steps:
            return (k + 1) / (warmup_steps + 1)
        progress = min(1.0, (k - warmup_steps) / (total_steps - warmup_steps))
        return min_factor + (1 - min_factor) * (1 + math.cos(math.pi * progress)) / 2
    return [factor(k) for k in range(n)]


@spec("train.cosine_schedule", train.cosine_schedule, dict(total=(2, 10), w=(0, 4), m=(0, 5), n=(1, 14)),
      reference=_cosine_reference, half=False)
def _(s):
    return (lambda total_steps, warmup_steps, min_factor, n: list(map(
        train.cosine_schedule(total_steps, warmup_steps=warmup_steps, min_factor=min_factor), range(n)))), dict(
        total_steps=Int(s.total), warmup_steps=Int(min(s.w, s.total - 1)), min_factor=Num(s.m / 5), n=Const(s.n))


# train_lm -------------------------------------------------------------------------------------------------

TINY_RUN = dict(n_layers=1, n_heads=2, d_model=8, block_size=8, batch_size=2, steps=3, warmup_steps=1)


def _check_train_config(out, args):
    """The fields as given; the model's configuration from them."""
    assert isinstance(out, train_lm.TrainConfig)
    assert all(getattr(out, k) == v for k, v in args.items())
    model = out.model_config(65)
    assert (model.n_layers, model.d_model, model.block_size, model.mlp) == (out.n_layers, out.d_model, out.block_size, out.mlp)


@spec("train_lm.TrainConfig", train_lm.TrainConfig, dict(L=(1, 3), H=(1, 3), Dh=(1, 3), steps=(2, 9), w=(0, 1),
                                                         mlp=(0, 1)), check=_check_train_config, half=False)
def _(s):
    return train_lm.TrainConfig, dict(n_layers=Int(s.L), n_heads=Int(s.H), d_model=Int(s.H * s.Dh), block_size=Int(8),
                                      steps=Int(s.steps), warmup_steps=Int(s.w), lr=Num(1e-3), dropout=Num(0.1),
                                      val_fraction=Num(0.1), beta2=Num(0.99), mlp=Choice(["gelu", "relu"][s.mlp]))


@spec("train_lm.scaling_lr", train_lm.scaling_lr, dict(D=(1, 128)), half=False,
      reference=lambda call, d_model: 0.03 * (16 / d_model) ** 0.75)
def _(s):
    return train_lm.scaling_lr, dict(d_model=Int(s.D))


def _check_scaling_recipe(out, args):
    """The shape and seed as given; steps from the token budget; warmup 5% (at least 5); the width's learning rate."""
    assert isinstance(out, train_lm.TrainConfig)
    steps = args["tokens"] // (args["batch_size"] * args["block_size"])
    assert (out.n_layers, out.d_model, out.n_heads, out.seed) == (args["n_layers"], args["d_model"], args["n_heads"],
                                                                  args["seed"])
    assert (out.steps, out.warmup_steps, out.batch_size, out.block_size) == (
        steps, max(5, steps // 20), args["batch_size"], args["block_size"])
    assert out.lr == train_lm.scaling_lr(args["d_model"]) and out.min_lr_factor == 0.1


@spec("train_lm.scaling_recipe", train_lm.scaling_recipe, dict(L=(1, 4), H=(1, 3), Dh=(4, 16), k=(10, 400),
                                                               B=(1, 16), T=(1, 64), seed=(0, 3)),
      check=_check_scaling_recipe, half=False)
def _(s):
    return train_lm.scaling_recipe, dict(n_layers=Int(s.L), d_model=Int(s.H * s.Dh), n_heads=Int(s.H),
                                         tokens=Int(s.k * s.B * s.T), seed=Int(s.seed, corruptions=("negative", "float", "str")),
                                         batch_size=Int(s.B), block_size=Int(s.T))


def _check_optimizer(out, args):
    """AdamW: weight decay on the matrices (dim >= 2) only, every trainable parameter once, the config's settings."""
    model, config = args["model"], args["config"]
    assert isinstance(out, torch.optim.AdamW)
    decay, no_decay = out.param_groups
    params = {id(p): p for p in model.parameters() if p.requires_grad}
    assert {id(p) for p in decay["params"]} == {i for i, p in params.items() if p.dim() >= 2}
    assert {id(p) for p in no_decay["params"]} == {i for i, p in params.items() if p.dim() < 2}
    assert decay["weight_decay"] == config.weight_decay and no_decay["weight_decay"] == 0.0
    assert all(g["lr"] == config.lr and g["betas"] == (config.beta1, config.beta2) for g in out.param_groups)


@spec("train_lm.make_optimizer", train_lm.make_optimizer, dict(variant=(0, 2)), check=_check_optimizer, half=False,
      examples=6)
def _(s):
    model = models.GPT(_config(**MODEL_VARIANTS[s.variant]))
    return train_lm.make_optimizer, dict(model=Obj(model), config=Obj(train_lm.TrainConfig(**TINY_RUN)))


@functools.lru_cache(maxsize=None)
def _checkpoint() -> pathlib.Path:
    """The checkpoint of a tiny run before its first step (the trainer reads Tiny Shakespeare: made once)."""
    path = FILES / "ckpt.pt"
    train_lm.Trainer(train_lm.TrainConfig(**TINY_RUN), device="cpu").save(path)
    return path


def _wrong_checkpoint() -> pathlib.Path:
    path = FILES / "not-a-checkpoint.pt"
    torch.save({"format": "something else"}, path)
    return path


@spec("train_lm.load_checkpoint", train_lm.load_checkpoint, {}, half=False, examples=6,
      reference=lambda call, path, map_location: torch.load(path, map_location=map_location, weights_only=True))
def _(s):
    return train_lm.load_checkpoint, dict(path=FilePath(_checkpoint(), wrong=_wrong_checkpoint()),
                                          map_location=Const("cpu"))


def _loaded_model(path, device):
    """The rebuilt model's logits on a few ids, and its characters."""
    model, tokenizer = train_lm.load_model(path, device=device)
    return model(torch.tensor([[0, 5, 9, 1]])), tokenizer.chars


def _loaded_reference(call, path, device):
    """A GPT of the saved configuration with the saved weights (float64), and the saved characters."""
    ckpt = torch.load(path, weights_only=True)
    model = models.GPT(models.TransformerConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    return model.double().eval()(torch.tensor([[0, 5, 9, 1]])), ckpt["chars"]


@spec("train_lm.load_model", train_lm.load_model, {}, reference=_loaded_reference, half=False, examples=6)
def _(s):
    return _loaded_model, dict(path=FilePath(_checkpoint(), wrong=_wrong_checkpoint()), device=Const("cpu"))


# export ---------------------------------------------------------------------------------------------------

EXPORT_VOCAB = "\nabcdefgh"


@spec("export.export_dir", export.export_dir, {}, half=False, examples=1,
      reference=lambda call: pathlib.Path(os.environ.get("ATTNBOOK_EXPORT_DIR") or "exported"))
def _(s):
    return export.export_dir, {}


@functools.lru_cache(maxsize=None)
def _tiny_gpt():
    return _module(lambda: models.GPT(_config(vocab_size=len(EXPORT_VOCAB))))


def _check_exported(out, args):
    """The ONNX model run by onnxruntime gives the PyTorch model's logits and weights; the description says so."""
    import numpy as np
    model = args["model"]
    ids = torch.tensor([[1, 2, 0, 3]])
    with torch.no_grad():
        logits, weights = model.eval()(ids, return_weights=True)
    got = export.run_onnx(out.onnx_path, ids)
    np.testing.assert_allclose(got[0], logits.numpy(), atol=1e-5)
    np.testing.assert_allclose(got[1], torch.stack(weights, 1).numpy(), atol=1e-5)
    assert out.meta == export.load_meta(out.meta_path) and out.meta["vocab"] == args["vocab"]


WRONG_TEXT = ("bytes", "number", "none")


@spec("export.to_onnx", export.to_onnx, {}, check=_check_exported, half=False, examples=5,
      valid_call_in="tests/test_export.py (an export takes seconds)")
def _(s):
    return export.to_onnx, dict(
        model=Obj(_tiny_gpt()), name=Text("tiny", corruptions=("number", "unknown", "empty")),
        vocab=Text(EXPORT_VOCAB, corruptions=("number", "list", "empty")),
        title=Text("A tiny GPT", corruptions=WRONG_TEXT), prompt=Text("ab", corruptions=WRONG_TEXT),
        start=Text("\n", corruptions=("number", "empty", "unknown")),
        temperature=Num(0.8, corruptions=("negative", "not a number", "infinite", "str")), top_k=Int(3),
        max_new_tokens=Int(20), directory=Const(FILES / "exported"), opset=Int(18))


class Tagger(nn.Module):
    """Chapter 07's kind of model: per position, logits for each job, and one attention layer's weights."""

    def __init__(self, V: int, jobs: dict[str, int]):
        super().__init__()
        self.embed = nn.Embedding(V, 8)
        self.attention = attention.MultiHeadAttention(8, 2)
        self.heads = nn.ModuleDict({job: nn.Linear(8, n) for job, n in jobs.items()})

    def forward(self, ids):
        h, weights = self.attention(self.embed(ids), return_weights=True)  # (1, T, 8), (1, H, T, T)
        return {job: head(h) for job, head in self.heads.items()}, weights


class Jobs(Arg):
    """The jobs of a tagger {job: its labels as a string}; changed, no job, a job unknown to the model, labels of
    the wrong count, a list."""

    corruptions = ("none", "unknown job", "wrong count", "list")

    def __init__(self, jobs):
        self.jobs = dict(jobs)

    def make(self, g):
        return dict(self.jobs)

    def corrupt(self, v, how, g):
        first = next(iter(v))
        return {"none": {}, "unknown job": {**v, "other": "xy"}, "wrong count": {**v, first: v[first] + "z"},
                "list": list(v.values())}[how]


def _check_tagged(out, args):
    """onnxruntime's outputs equal the tagger's logits for each job and its weights."""
    import numpy as np
    model, jobs = args["model"], args["jobs"]
    ids = torch.tensor([[1, 2, 0]])
    with torch.no_grad():
        logits, weights = model.eval()(ids)
    got = export.run_onnx(out.onnx_path, ids)
    for i, job in enumerate(jobs):
        np.testing.assert_allclose(got[i], logits[job].numpy(), atol=1e-5)
    np.testing.assert_allclose(got[-1], weights.unsqueeze(1).numpy(), atol=1e-5)


@spec("export.tagger_to_onnx", export.tagger_to_onnx, {}, check=_check_tagged, half=False, examples=5,
      valid_call_in="tests/test_export.py (an export takes seconds)")
def _(s):
    jobs = {"vowel": "nv", "case": "lus"}
    return export.tagger_to_onnx, dict(
        model=Obj(_module(lambda: Tagger(len(EXPORT_VOCAB), {j: len(l) for j, l in jobs.items()}))),
        name=Text("tagger", corruptions=("number", "unknown", "empty")), vocab=Text(EXPORT_VOCAB, corruptions=(
            "number", "list", "empty")), jobs=Jobs(jobs), max_len=Int(6), title=Text("Tags", corruptions=WRONG_TEXT),
        directory=Const(FILES / "exported"), opset=Int(18))


@functools.lru_cache(maxsize=None)
def _described() -> pathlib.Path:
    """A description NAME.json and weights NAME.pt as to_onnx writes them (without the seconds of the ONNX export)."""
    model = _tiny_gpt()
    meta = {"format": export.FORMAT, "name": "tiny", "onnx": "tiny.onnx", "vocab": EXPORT_VOCAB,
            "config": model.config.to_dict()}
    path = FILES / "tiny.json"
    path.write_text(json.dumps(meta), encoding="utf-8")
    torch.save(model.state_dict(), FILES / "tiny.pt")
    return path


def _other_json() -> pathlib.Path:
    path = FILES / "other.json"
    path.write_text(json.dumps({"format": "something else"}), encoding="utf-8")
    return path


@spec("export.load_meta", export.load_meta, {}, half=False, examples=6,
      reference=lambda call, path: json.loads(pathlib.Path(path).read_text(encoding="utf-8")))
def _(s):
    return export.load_meta, dict(path=FilePath(_described(), wrong=_other_json()))


@spec("export.load_torch", export.load_torch, {}, half=False, examples=6,
      reference=lambda call, meta_path: _tiny_gpt().double()(torch.tensor([[1, 2, 0, 3]])))
def _(s):
    return (lambda meta_path: export.load_torch(meta_path)(torch.tensor([[1, 2, 0, 3]]))), dict(
        meta_path=FilePath(_described(), wrong=_other_json()))


ONNX_TABLE = torch.randn(9, 5, generator=torch.Generator().manual_seed(0))  # (V, C)


@functools.lru_cache(maxsize=None)
def _onnx_file() -> pathlib.Path:
    """A small ONNX model written with onnx.helper: ids (1, T) -> logits = table[ids] (1, T, 5), and their squares."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["logits"]), helper.make_node("Mul", ["logits", "logits"], ["weights"])],
        "lookup", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "T"])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, "T", 5]) for n in ("logits", "weights")],
        [numpy_helper.from_array(ONNX_TABLE.numpy(), "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    path = FILES / "lookup.onnx"
    onnx.save(model, str(path))
    return path


@spec("export.onnx_session", export.onnx_session, {}, half=False, examples=6,
      reference=lambda call, path: (["ids"], ["logits", "weights"]))
def _(s):
    return (lambda path: ([i.name for i in export.onnx_session(path).get_inputs()],
                          [o.name for o in export.onnx_session(path).get_outputs()])), dict(
        path=FilePath(_onnx_file(), wrong=_garbage_file()))


def _lookup_reference(call, session, ids):
    ids = torch.as_tensor(ids).reshape(1, -1)
    table = ONNX_TABLE.double()
    return table[ids], table[ids] ** 2


@spec("export.run_onnx", export.run_onnx, dict(T=(1, 5), flat=(0, 1)), half=False, reference=_lookup_reference)
def _(s):
    session = export.onnx_session(_onnx_file())
    return (lambda session, ids: tuple(torch.from_numpy(x) for x in export.run_onnx(session, ids))), dict(
        session=Obj(session), ids=Ids(s.T, vocab=9, seq=0, batch=None, list_ok=True) if s.flat
        else Ids(1, s.T, vocab=9, batch=None, list_ok=True))


def _prompt_reference(call, text, vocab, block_size, start):
    """Characters of vocab kept, others listed once; start for nothing kept; the last block_size characters."""
    kept = [c for c in text if c in vocab]
    dropped = list(dict.fromkeys(c for c in text if c not in vocab))
    chosen = kept or list(start)
    return export.Prompt([vocab.index(c) for c in chosen[-block_size:]], "".join(chosen[-block_size:]), dropped,
                         max(0, len(chosen) - block_size), not kept)


@spec("export.prompt_ids", export.prompt_ids, dict(n=(0, 12), block=(1, 6)), reference=_prompt_reference, half=False)
def _(s):
    return export.prompt_ids, dict(text=Text(length=s.n, alphabet=EXPORT_VOCAB + "XY"), vocab=Text(
        EXPORT_VOCAB, corruptions=("number", "list", "empty")), block_size=Int(s.block),
        start=Text("\n", corruptions=("number", "empty", "unknown")))


# --- running a case -----------------------------------------------------------------------------------

def _convert(value, dtype):
    """Floating tensors (also inside lists, tuples and dicts) and modules converted to ``dtype``; modules and
    random generators copied (so that the reference draws what the call draws)."""
    if isinstance(value, torch.Generator):
        return torch.Generator().set_state(value.get_state())
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
    assert isinstance(error, (TypeError, ValueError, FileNotFoundError)), \
        f"{spec_name}: {type(error).__name__} instead of a TypeError, ValueError or FileNotFoundError: {error}"
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
    """The least precise floating dtype among the tensors, parameters and buffers of a call and its result
    (float64 if none)."""
    dtypes = [x.dtype for _, x in _leaves(values) if isinstance(x, torch.Tensor) and x.is_floating_point()]
    for module in [fn] + [x for _, x in _leaves(values) if isinstance(x, nn.Module)]:
        if isinstance(module, nn.Module):
            dtypes += [p.dtype for p in (*module.parameters(), *module.buffers()) if p.is_floating_point()]
    return max(dtypes, key=lambda d: TOL[d], default=torch.float64)


SHAPE_CHANGES = {"rank+", "rank-", "width", "empty", "length", "batch", "shape", "rank"}


def changes_of(name: str, sizes: SimpleNamespace) -> list:
    """Every change a case of this spec can make: none, half precision, or one argument changed one way
    (only the last, for a spec whose valid call is checked elsewhere)."""
    _, args = SPECS[name].build(sizes)
    valid = [] if SPECS[name].valid_call_in else [None] + ([*HALF] if SPECS[name].half else [])
    return valid + [(k, how) for k, a in args.items() for how in a.corruptions]


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
        tensors = {k for k, v in args.items() if isinstance(v, (Tensor, Ids, Mask, IntList, Pair, Adjacency, IntLists))}
        names = {arg} | (tensors if how in SHAPE_CHANGES else set())
        _assert_clear_error(error, names, f"{name} with {arg} changed ({how})")
        STATS[name, "error"] += count
        return "error"
    if s.check is not None:
        s.check(out, values)
    else:
        expected = s.reference(fn64, **values64) if s.reference is not None else fn64(**values64)
        tol = TOL[_least_precise((values, out), fn)] * (100.0 if isinstance(change, tuple) and change[1] == "huge" else 1.0)
        _assert_equal_to_reference(out, expected, tol=tol)
    STATS[name, "result"] += count
    return "result"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_an_error_naming_the_argument_or_a_finite_result_equal_to_the_reference(name):
    @given(data=st.data())
    @settings(max_examples=SPECS[name].examples, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    def property_of_the_spec(data):
        sizes = SimpleNamespace(**{k: data.draw(st.integers(lo, hi), label=k)
                                   for k, (lo, hi) in SPECS[name].sizes.items()})
        seed = data.draw(st.integers(0, 2 ** 16), label="seed")
        change = data.draw(st.sampled_from(changes_of(name, sizes)), label="change")
        run_case(name, sizes, seed, change)

    property_of_the_spec()


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
    "graphs.GraphBatch": "the result type of two_ring_graphs",
    "data.Dataset": "the record of a data file in DATASETS, read by fetch",
    "data.DataNotAvailableError": "the error fetch raises when a file is nowhere (test_data)",
    "data.SentencePair": "the result type of load_eng_fra, passed to split_by_source here",
    "data.TextSplits": "the result type of load_shakespeare",
    "data.ImageSplits": "the result type of load_digits",
    "export.Exported": "the result type of to_onnx and tagger_to_onnx",
    "export.Prompt": "the result type of prompt_ids",
    "train_lm.Trainer": "one training run on Tiny Shakespeare (test_train_lm); its configuration is TrainConfig's, "
                        "its checkpoints load_checkpoint's",
    "train_lm.train_run": "trains and writes a run's folder (test_train_lm), from a TrainConfig",
    "train_lm.main": "the command line (test_train_lm: flags, configuration files, torchrun)",
    "train_lm.CheckpointError": "the error of a refused checkpoint, raised here by load_checkpoint and load_model",
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
    if SPECS[name].valid_call_in is None:
        assert run_case(name, sizes, 0, None, count=False) == "result"
    _, args = SPECS[name].build(sizes)
    bad = next(((k, "list") for k, a in args.items() if "list" in a.corruptions and not getattr(a, "list_ok", False)),
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
