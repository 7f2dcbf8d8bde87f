"""The whole public API under generated good and bad input: an error that names the argument, or a result
that is finite and equal to the reference.

Every function and class in the ``__all__`` of the modules in ``MODULES`` below (attention, positional,
blocks, models, flash, vit, rnn, seq2seq, the tools, the beyond-text and the post-training modules) has a
:class:`Spec` (the methods a chapter calls, such as ``GPT.generate`` or ``BPETokenizer.encode``, have
their own): how to build a valid call from a few drawn sizes, and what each argument is (a floating tensor,
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
  over the allowed positions only: the result must be non-finite exactly there. Attention (the specs with
  ``nan_spreads``) does not filter a NaN out of a masked key or value, as PyTorch's does not (0 * NaN is
  NaN): there the result must be non-finite at least where the reference is, and equal to it where finite.

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
import itertools
import math
import pathlib
import re
import shutil
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from attnbook import (
    attention,
    audio,
    blocks,
    bpe,
    bptt,
    chat,
    circuits,
    config,
    contrastive,
    costs,
    data,
    decoding,
    export,
    flash,
    gpt2,
    graph_experiment,
    graphs,
    grpo,
    interpret,
    lora,
    measure,
    models,
    positional,
    positionwise,
    post_training,
    preference,
    pretrain,
    rnn,
    scaling_grid,
    seq2seq,
    train,
    train_lm,
    vit,
    vit_experiment,
)
from attnbook.data import instructions
from torch import nn

MODULES = {
    "attention": attention,
    "positional": positional,
    "positionwise": positionwise,
    "blocks": blocks,
    "config": config,
    "models": models,
    "gpt2": gpt2,
    "flash": flash,
    "vit": vit,
    "vit_experiment": vit_experiment,
    "rnn": rnn,
    "bptt": bptt,
    "seq2seq": seq2seq,
    "decoding": decoding,
    "measure": measure,
    "costs": costs,
    "graphs": graphs,
    "graph_experiment": graph_experiment,
    "audio": audio,
    "contrastive": contrastive,
    "lora": lora,
    "pretrain": pretrain,
    "bpe": bpe,
    "data": data,
    "train": train,
    "train_lm": train_lm,
    "scaling_grid": scaling_grid,
    "export": export,
    "interpret": interpret,
    "chat": chat,
    "preference": preference,
    "grpo": grpo,
    "post_training": post_training,
    "instructions": instructions,
    "circuits": circuits,
}
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

    def __init__(
        self,
        *shape,
        seq: int | None = None,
        batch: int | None = 0,
        positive: bool = False,
        scale: float = 1.0,
        list_ok: bool = False,
    ):
        self.shape, self.seq, self.batch, self.positive, self.scale = shape, seq, batch, positive, scale
        self.list_ok = list_ok  # a list of numbers is a valid value too
        self.corruptions = (
            ("rank+", "rank-", "width", "float64", "float16", "bfloat16", "int", "bool", "list", "nan", "huge")
            + (("empty", "length") if seq is not None else ())
            + (("batch",) if batch is not None else ())
        )

    def make(self, g):
        x = torch.randn(*self.shape, generator=g) * self.scale
        return x.abs() + 0.1 if self.positive else x

    def corrupt(self, x, how, g):
        return _corrupt_tensor(x, how, self.seq, self.batch)


class Ids(Arg):
    """Integer token ids in [low, vocab) (low = 0 unless told: distances start at -1)."""

    def __init__(
        self, *shape, vocab: int, seq: int | None = -1, batch: int | None = 0, low: int = 0, list_ok: bool = False
    ):
        self.shape, self.vocab, self.seq, self.batch, self.low = shape, vocab, seq, batch, low
        self.list_ok = list_ok  # a list of ids is a valid value too
        self.corruptions = (
            ("float", "negative", "too large", "rank+", "rank-", "list")
            + (("empty", "length") if seq is not None else ())
            + (("batch",) if batch is not None else ())
        )

    def make(self, g):
        return torch.randint(self.low, self.vocab, self.shape, generator=g)

    def corrupt(self, x, how, g):
        if how == "float":
            return x.float()
        if how in ("negative", "too large"):
            x = x.clone()
            if x.numel():
                x.view(-1)[int(torch.randint(x.numel(), (1,), generator=g))] = (
                    self.low - 1 if how == "negative" else self.vocab
                )
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
        self.corruptions = ("one element", "three elements") + tuple(
            f"second: {how}" for how in second.corruptions if how != "nan"
        )

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

    def __init__(
        self,
        value: str | None = None,
        *,
        length: int = 0,
        alphabet: str = "",
        corruptions: tuple[str, ...] = ("bytes", "number", "list", "none"),
    ):
        self.value, self.length, self.alphabet, self.corruptions = value, length, alphabet, corruptions

    def make(self, g):
        if self.value is not None:
            return self.value
        return "".join(self.alphabet[i] for i in torch.randint(len(self.alphabet), (self.length,), generator=g))

    def corrupt(self, v, how, g):
        return {
            "bytes": v.encode(),
            "number": 3,
            "list": [v],
            "none": None,
            "empty": "",
            "unknown": "\u2603 no such thing",
        }[how]


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
        self.corruptions = (
            "asymmetric",
            "not square",
            "float",
            "int",
            "two",
            "nan",
            "rank+",
            "rank-",
            "list",
            "size",
        ) + (("batch",) if len(shape) == 3 else ())

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
        return {
            "not square": lambda: a[..., :-1],
            "float": lambda: a.float(),
            "int": lambda: a.long(),
            "rank+": lambda: a.unsqueeze(0),
            "rank-": lambda: a[0],
            "list": lambda: a.tolist(),
            "batch": lambda: torch.cat([a, a[:1]]),
        }[how]()


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
        return {
            "float": lambda: [(i + 0.5, j) for i, j in v] or [(0.5, 0)],
            "triples": lambda: [(i, j, j) for i, j in v] or [(0, 0, 0)],
            "flat": lambda: [x for e in v for x in e] or [0],
            "str": lambda: "0-1",
        }[how]()


class IntLists(Arg):
    """Lists of integers in [0, high) (token sequences) of the given lengths; changed, an empty list among
    them, no list at all, floats, strings, a flat list, a negative id."""

    corruptions = ("empty sequence", "none", "float", "str", "flat", "negative")

    def __init__(self, lengths, *, high: int):
        self.lengths, self.high = list(lengths), high

    def make(self, g):
        return [torch.randint(self.high, (n,), generator=g).tolist() for n in self.lengths]

    def corrupt(self, v, how, g):
        return {
            "empty sequence": lambda: [[]] + v[1:],
            "none": lambda: [],
            "float": lambda: [[x + 0.5 for x in s] for s in v],
            "str": lambda: ["abc"] + v[1:],
            "flat": lambda: v[0],
            "negative": lambda: [[-1] + v[0][1:]] + v[1:],
        }[how]()


class IntPair(Arg):
    """A pair of integers (low, high); changed, one or three numbers, floats, strings, or in reverse order."""

    corruptions = ("one", "three", "float", "str", "reversed")

    def __init__(self, low: int, high: int):
        self.pair = (low, high)

    def make(self, g):
        return self.pair

    def corrupt(self, v, how, g):
        low, high = v
        return {
            "one": (low,),
            "three": (low, high, high),
            "float": (low + 0.5, high),
            "str": ("a", "b"),
            "reversed": (high + 1, low),
        }[how]


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

        return {
            "missing": lambda: Path(v).with_name("no-such-file.json"),
            "folder": lambda: Path(v).parent,
            "number": lambda: 3,
            "wrong content": lambda: self.wrong,
        }[how]()


class Gen(Arg):
    """A ``torch.Generator`` with a drawn seed; changed, a plain seed (an int) instead of a generator."""

    corruptions = ("a seed",)

    def make(self, g):
        return torch.Generator().manual_seed(int(torch.randint(2**31, (1,), generator=g)))

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
    # attention: a NaN put into an input may reach more than in the reference (masked keys and values are
    # not filtered, as in PyTorch), never less
    nan_spreads: bool = False


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
    out, weights = _naive_attention(
        q, k, v, torch.ones(1, 1, dtype=torch.bool) if mask is None else mask, scale, score_bias
    )
    return (out, weights) if return_weights else out


def _naive_heads(layer, query, key, value, mask=None, is_causal=False, return_weights=False, score_bias=None):
    """Multi-head or grouped-query attention from its weights: projections, heads one query at a time, W_o."""
    B, Tq, D = query.shape
    H, Dh = layer.n_heads, layer.d_head
    H_kv = getattr(layer, "n_kv_heads", H)
    q = F.linear(query, layer.W_q.weight, layer.W_q.bias).view(B, Tq, H, Dh).transpose(1, 2)  # (B, H, Tq, Dh)
    k, v = (
        F.linear(x, W.weight, W.bias).view(B, x.shape[1], H_kv, Dh).transpose(1, 2).repeat_interleave(H // H_kv, 1)
        for x, W in ((key, layer.W_k), (value, layer.W_v))
    )  # (B, H, Tk, Dh)
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


def _overflowed(b: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """The float64 reference ``b`` as the result ``a``'s dtype can hold it: a value that dtype cannot
    represent is its infinity of the same sign. So is one within a factor 1e3 of the dtype's largest number
    where ``a`` holds that infinity: an intermediate (``beta * exp(r)``) overflowed first. Elsewhere ``b``."""
    big = torch.finfo(a.dtype).max
    near = (b.abs() > big / 1e3) & torch.isinf(a) & (torch.sign(a.double()) == torch.sign(b))
    beyond = b.abs() > big
    return torch.where(beyond | near, torch.sign(b) * math.inf, b)


def _assert_equal_to_reference(out, ref, *, tol: float, nan_spreads: bool = False):
    """Every leaf of ``out`` equals the reference's: floating tensors within ``tol`` relative to the largest
    reference value, non-finite exactly where the reference is (the float64 reference is non-finite only
    where the mathematics says so, or where a NaN in the input reaches; with ``nan_spreads``, at least
    there); everything else exactly."""
    got, want = list(_leaves(out)), list(_leaves(ref))
    assert [p for p, _ in got] == [p for p, _ in want], f"the result's structure differs: {got} vs {want}"
    for (path, a), (_, b) in zip(got, want):
        if isinstance(a, torch.Tensor):
            assert isinstance(b, torch.Tensor) and a.shape == b.shape, f"{path}: shape {tuple(a.shape)} vs {b}"
            if a.is_floating_point():
                b = _overflowed(b.double(), a)
                finite = torch.isfinite(b)
                wrong = torch.isfinite(a) != finite
                if nan_spreads:  # a NaN may reach more entries, never fewer; compare where both are finite
                    wrong = torch.isfinite(a) & ~finite
                    finite = finite & torch.isfinite(a)
                assert not wrong.any(), (
                    f"{path} is non-finite where the reference is not, or finite where it is "
                    f"not ({int(wrong.sum())} entries): {a} vs {b}"
                )
                infinite = ~torch.isfinite(b) & ~b.isnan() & ~(nan_spreads & a.isnan())
                assert torch.equal(a.double()[infinite], b[infinite]), f"{path}: infinities"
                if finite.any():
                    bound = tol * max(1.0, b[finite].abs().max().item())
                    error = (a.double() - b)[finite].abs().max().item()
                    assert error <= bound, f"{path} differs from the reference by {error:.3g} > {bound:.3g}"
            else:
                assert torch.equal(a, b.to(a.dtype)), f"{path}: {a} != {b}"
        elif isinstance(a, float):
            assert math.isclose(a, b, rel_tol=tol, abs_tol=tol) or (math.isnan(a) and math.isnan(b)), (
                f"{path}: {a} != {b}"
            )
        elif isinstance(a, nn.Module):
            assert type(a) is type(b), path
        else:
            assert a == b, f"{path}: {a!r} != {b!r}"


def _assert_clear_error(error: BaseException, names: set[str], spec_name: str):
    assert isinstance(error, (TypeError, ValueError, FileNotFoundError)), (
        f"{spec_name}: {type(error).__name__} instead of a TypeError, ValueError or FileNotFoundError: {error}"
    )
    frame = traceback.extract_tb(error.__traceback__)[-1]
    assert "attnbook" in frame.filename and (frame.line or "").lstrip().startswith("raise"), (
        f"{spec_name}: the error comes from inside {frame.filename}:{frame.lineno} ({frame.line}), "
        f"not from a check: {error}"
    )
    message = str(error)
    assert any(re.search(rf"(?<![\w.]){re.escape(n)}(?![\w(])", message) for n in names), (
        f"{spec_name}: the error does not name the argument ({' or '.join(sorted(names))}): {message}"
    )


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
        tol = TOL[_least_precise((values, out), fn)] * (
            100.0 if isinstance(change, tuple) and change[1] == "huge" else 1.0
        )
        spreads = s.nan_spreads and isinstance(change, tuple) and change[1] == "nan"
        _assert_equal_to_reference(out, expected, tol=tol, nan_spreads=spreads)
    STATS[name, "result"] += count
    return "result"
