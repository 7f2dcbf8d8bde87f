"""What kind of mistake a wrong result shows, said in a learner's words: the diagnoses of the checkers.

When an answer's result differs from the reference's and none of the exercise's listed mistakes matches,
:func:`attnbook.exercises.check_function` and :func:`~attnbook.exercises.check_number` ask this module what
kind of difference it is. Each diagnosis looks only at the result, the expected result and the case's
arguments (the probes that call the answer again live in :mod:`attnbook.exercises`):

- the result's form: a wrong type, a wrong dtype, a wrong shape (transposed, a dimension squeezed away or
  added, the batch dimension lost, one dimension of the wrong size and which input that size comes from);
- its values: NaN or inf where the reference is finite (an all-masked row, large inputs, float32), the
  transpose of the right result, the right result times a constant (a missing or doubled scale, a sign),
  weights that sum to 1 along the wrong dimension or not at all, the right result plus one of the inputs
  or a constant (a missing or doubled term), the right result shifted by one position, a difference only
  on the rows a mask leaves empty, or only where the result must be 0;
- a mask: inverted, transposed, its diagonal wrong;
- a number: a float where a count must be an int, the sign, a factor (2, the square root of an input's
  size, an input itself), off by one or two, the square or the square root, close but not within the
  precision the question asks for, a named part of the count left out or counted twice;
- an error: what a few of PyTorch's and Python's messages mean for the code that raised them.

Each diagnosis is a :class:`Diagnosis`: its kind (a short name, for reports) and its hint.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

__all__ = ["Diagnosis", "form", "values", "dtype", "shape", "where"]


class Diagnosis(NamedTuple):
    """A kind of mistake ("shape", "factor", ...) and the hint that says it."""

    kind: str
    hint: str


def _tensors(args: Sequence[Any]) -> list[tuple[int, torch.Tensor]]:
    """(position from 1, tensor) for every tensor argument, those in lists and tuples included."""
    out = []
    for i, a in enumerate(args, start=1):
        if isinstance(a, torch.Tensor):
            out.append((i, a))
        elif isinstance(a, (list, tuple)):
            out += [(i, t) for t in a if isinstance(t, torch.Tensor)]
    return out


_ORDINAL = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", 6: "sixth", 7: "seventh"}


def _nth(i: int) -> str:
    return _ORDINAL.get(i, f"number {i}")


# --- the form of the result ------------------------------------------------------------------------------


def form(got: Any, expected: Any, args: Sequence[Any], integers: bool = False) -> Diagnosis | None:
    """A difference of type, dtype or shape between ``got`` and ``expected`` (tensors or numbers); with
    ``integers``, a float where the expected number is an int."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return Diagnosis(
                "type",
                f"your function returns {_describe(got)}; it should return a tensor of shape "
                f"{tuple(expected.shape)} (dtype {expected.dtype})",
            )
        if got.shape != expected.shape:
            return Diagnosis("shape", shape(tuple(got.shape), tuple(expected.shape), args))
        if got.dtype != expected.dtype:
            return Diagnosis("dtype", dtype(got.dtype, expected.dtype))
        return None
    if isinstance(expected, bool):
        return None
    if integers and type(expected) is int and isinstance(got, float) and got == expected:
        return Diagnosis(
            "count type",
            f"your function returns the float {got!r} where the count {expected} is expected: a count is a "
            "whole number (an int); use integer division, //, rather than /, or int(...)",
        )
    return None


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of {len(x)}"
    return f"{type(x).__name__} {x!r}"[:120]


def dtype(got: torch.dtype, expected: torch.dtype) -> str:
    """The hint for a result of the wrong dtype."""
    if expected.is_floating_point and got.is_floating_point:
        return (
            f"your result has dtype {got} where {expected} is expected: the result keeps the inputs' dtype "
            f"(create new tensors with dtype=x.dtype, or with torch.zeros_like and similar, and do not convert)"
        )
    if expected == torch.bool:
        return (
            f"your result has dtype {got}, but a mask must be boolean (dtype torch.bool): build it with "
            "comparisons or convert it with .bool()"
        )
    if expected == torch.long and got.is_floating_point:
        return (
            f"your result has dtype {got} where integers (torch.long) are expected: indices and counts are "
            "integers (integer division //, argmax, torch.arange without a float)"
        )
    kind = {torch.long: "integers (torch.long)"}.get(expected, str(expected))
    return f"your result has dtype {got}; expected {kind}"


def shape(got: tuple, expected: tuple, args: Sequence[Any]) -> str:
    """The hint for a result of the wrong shape: how the two shapes differ, and where a wrong size comes from."""
    head = f"your result has shape {got} where {expected} is expected"
    if len(got) == len(expected) >= 2 and got[:-2] == expected[:-2] and got[-2:] == expected[::-1][:2]:
        return f"{head}: its last two dimensions are swapped (a transpose too many or too few)"
    if len(got) + 1 == len(expected):
        for d in range(len(expected)):
            if expected[:d] + expected[d + 1 :] == got:
                if expected[d] == 1:
                    return (
                        f"{head}: the dimension {d} of size 1 is gone (squeeze() without a dim removes every "
                        "dimension of size 1, a batch of one included; name the dim, or index with [..., None])"
                    )
                return (
                    f"{head}: dimension {d} (of size {expected[d]}) is missing: a reduction (sum, mean, max) "
                    "over a dimension that must stay, an index that picks one entry of it, or an elementwise * "
                    "where a matrix product @ is needed"
                )
    if len(got) == len(expected) + 1:
        for d in range(len(got)):
            if got[:d] + got[d + 1 :] == expected:
                if got[d] == 1:
                    return (
                        f"{head}: it has an extra dimension of size 1 at position {d} (keepdim=True where the "
                        "dimension must go, or an unsqueeze too many)"
                    )
                return f"{head}: it has an extra dimension {d} of size {got[d]}"
    if len(got) == len(expected):
        wrong = [d for d in range(len(got)) if got[d] != expected[d]]
        if len(wrong) == 1:
            d = wrong[0]
            return f"{head}: dimension {d} has size {got[d]} instead of {expected[d]}{_source(got[d], args)}"
    if math.prod(got) == math.prod(expected):
        return (
            f"{head}: the same number of entries in another arrangement (a view or reshape of a tensor "
            "whose dimensions are in another order: transpose first, then reshape)"
        )
    return f"{head}{_source_of_dims(got, expected, args)}"


def _source(size: int, args: Sequence[Any]) -> str:
    for i, t in _tensors(args):
        dims = [d for d in range(t.dim()) if t.shape[d] == size]
        if dims:
            d = dims[-1]
            return f", the size of dimension {d - t.dim()} of your {_nth(i)} argument (shape {tuple(t.shape)})"
    return ""


def _source_of_dims(got: tuple, expected: tuple, args: Sequence[Any]) -> str:
    missing = [s for s in expected if s not in got]
    return f" (your result has no dimension of size {missing[0]})" if missing and len(set(expected)) > 1 else ""


# --- the values ------------------------------------------------------------------------------------------


def values(got: torch.Tensor, expected: torch.Tensor, args: Sequence[Any], atol: float, rtol: float):
    """A diagnosis of two tensors of the same shape and dtype whose values differ, or None."""
    if expected.dtype == torch.bool:
        return _mask(got, expected, args)
    if not expected.is_floating_point():
        return _integers(got, expected)
    g, e = got.detach().cpu().double(), expected.detach().cpu().double()

    def close(a, b):
        return a.shape == b.shape and torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True)

    finite = torch.isfinite(e)
    if (~torch.isfinite(g) & finite).any():
        return _not_finite(g, e, args)
    if e.dim() >= 2 and e.shape[-1] == e.shape[-2] and close(g, e.mT):
        return Diagnosis(
            "transposed",
            "your result is the transpose of the expected one (its last two dimensions swapped): "
            "check which operand of each product is transposed, and the order of a transpose or view",
        )
    for found in (
        _factor(g, e, args, close),
        _normalisation(g, e, atol),
        _term(g, e, args, close),
        _row_factor(g, e, close),
    ):
        if found:
            return found
    shifted = _shift(g, e, close)
    if shifted:
        return shifted
    return _edges(g, e, args, atol, rtol)


def _factor(g, e, args, close) -> Diagnosis | None:
    denominator = (e * e).sum()
    if not torch.isfinite(denominator) or denominator == 0:
        return None
    c = ((g * e).sum() / denominator).item()
    if not math.isfinite(c) or abs(c - 1) < 1e-3 or not close(g, c * e):
        return None
    if abs(c) < 1e-9:
        return Diagnosis(
            "zero", "your result is all zeros: a step is left out, or a product with an empty or zero tensor"
        )
    if abs(c + 1) < 1e-3:
        return Diagnosis(
            "sign", "your result is the expected one with the opposite sign: a minus sign too many or too few"
        )
    return Diagnosis(
        "factor",
        f"your result is the expected one times {_ratio(c)}{_meaning(c, args)}: a scale is missing, doubled, "
        "or the wrong one",
    )


def _row_factor(g, e, close) -> Diagnosis | None:
    """Each row (last dimension) of g is its row of e times a factor of its own."""
    if e.dim() == 0 or e.shape[-1] < 2:
        return None
    denominator = (e * e).sum(-1, keepdim=True)
    if not (denominator > 0).all():
        return None
    c = (g * e).sum(-1, keepdim=True) / denominator
    if close(g, c * e) and not close(c, torch.ones_like(c)):
        return Diagnosis(
            "row factor",
            "each row of your result is the expected row times a factor of its own: the divisor that normalises "
            "a row is wrong (a square root, a mean or sum over the wrong entries, an epsilon in the wrong place)",
        )
    return None


def _ratio(c: float) -> str:
    for k in range(2, 65):
        if abs(c - k) < 1e-3 * k:
            return str(k)
        if abs(c * k - 1) < 1e-3:
            return f"1/{k}"
    return f"{c:.4g}"


def _meaning(c: float, args: Sequence[Any]) -> str:
    """Which size of the inputs a factor c is, if any: (size, sqrt(size), 1/size, 1/sqrt(size))."""
    sizes = sorted({int(n) for _, t in _tensors(args) for n in t.shape if n > 1} | integer_arguments(args))
    for n in sizes:
        for value, words in (
            (math.sqrt(n), f"sqrt({n})"),
            (1 / math.sqrt(n), f"1/sqrt({n})"),
            (float(n), f"{n}"),
            (1 / n, f"1/{n}"),
        ):
            if abs(c - value) < 1e-3 * abs(value):
                return f" ({words}, where {n} is a size of your inputs)"
    return ""


def integer_arguments(args: Sequence[Any]) -> set[int]:
    """The whole numbers above 1 among the arguments (sizes, counts), which a factor may come from."""
    return {int(a) for a in args if isinstance(a, (int, float)) and not isinstance(a, bool) and a == int(a) and a > 1}


def _normalisation(g, e, atol) -> Diagnosis | None:
    """Weights: the expected rows sum to 1 (or 0, when empty) over the last dimension."""
    if e.dim() == 0 or (e < -atol).any() or e.shape[-1] < 2:
        return None
    rows = e.sum(-1)
    ones = (rows - 1).abs() < 1e-4
    if not ones.any() or not (ones | (rows.abs() < 1e-6)).all():
        return None
    if (g < -atol).any():
        return None
    for d in range(g.dim() - 1):
        if g.shape[d] > 1 and ((g.sum(d) - 1).abs() < 1e-4).all():
            return Diagnosis(
                "axis",
                f"your weights sum to 1 along dimension {d - g.dim()}, the expected ones along the last "
                "dimension: normalise over dim=-1",
            )
    if not ((g.sum(-1)[ones] - 1).abs() < 1e-4).all():
        return Diagnosis(
            "normalisation",
            "your rows do not sum to 1 over the last dimension where the expected ones do: a normalisation "
            "(a softmax, a division by the sum, the weights of a mix that add up to 1) is missing or wrong",
        )
    return None


def _term(g, e, args, close) -> Diagnosis | None:
    r = g - e
    for i, t in _tensors(args):
        if not t.is_floating_point() or t.dim() == 0:
            continue
        try:
            a = torch.broadcast_to(t.detach().double(), r.shape)
        except RuntimeError:
            continue
        for sign, words in ((1, "plus"), (-1, "minus")):
            if close(r, sign * a) and a.abs().max() > 0:
                return Diagnosis(
                    "term",
                    f"your result is the expected one {words} your {_nth(i)} argument: a term (a residual "
                    "connection, a bias) is added once too often or left out",
                )
    if r.numel() > 1 and r.abs().max() > 0 and close(r, torch.full_like(r, r.mean().item())):
        return Diagnosis(
            "term",
            f"your result is the expected one plus the constant {r.mean().item():.4g} everywhere: a constant "
            "term is added, or one is missing",
        )
    return None


def _shift(g, e, close) -> Diagnosis | None:
    for d in range(g.dim()):
        n = g.shape[d]
        if n < 3:
            continue
        later, earlier = g.narrow(d, 1, n - 1), e.narrow(d, 0, n - 1)
        for a, b, words in ((later, earlier, "later"), (g.narrow(d, 0, n - 1), e.narrow(d, 1, n - 1), "earlier")):
            if close(a, b) and not close(g.narrow(d, 0, n - 1), e.narrow(d, 0, n - 1)):
                return Diagnosis(
                    "off by one",
                    f"your result is the expected one shifted by one position along dimension {d - g.dim()} "
                    f"(each entry comes one place {words} than it should): an index or a slice is off by one",
                )
    return None


def _empty_rows(args: Sequence[Any], rows_shape: torch.Size) -> torch.Tensor | None:
    """The rows that a mask argument (or a row of -inf scores) leaves without any allowed entry."""
    for _, t in _tensors(args):
        if t.dim() == 0:
            continue
        if t.dtype == torch.bool:
            empty = ~t.any(-1)
        elif t.is_floating_point():
            empty = torch.isneginf(t).all(-1)
        else:
            continue
        try:
            empty = torch.broadcast_to(empty, rows_shape)
        except RuntimeError:
            continue
        if empty.any():
            return empty
    return None


def _edges(g, e, args, atol, rtol) -> Diagnosis | None:
    wrong = ~torch.isclose(g, e, atol=atol, rtol=rtol, equal_nan=True)
    if g.dim() >= 1:
        empty = _empty_rows(args, wrong.shape[:-1])
        if empty is not None and not (wrong.any(-1) & ~empty).any():
            return Diagnosis(
                "edge case",
                "your result is right except on the rows where every position is masked (a row that may "
                f"attend to nothing): there the expected result is {_value_words(e[empty])}; handle that case",
            )
    zeros = e == 0
    if zeros.any() and not (wrong & ~zeros).any():
        return Diagnosis(
            "edge case",
            "your result is right except where it must be exactly 0 (the positions a mask forbids, or "
            "padding): there yours is not 0",
        )
    return None


def _value_words(rows: torch.Tensor) -> str:
    if rows.numel() and (rows == 0).all():
        return "all zeros"
    return "finite"


def _not_finite(g, e, args) -> Diagnosis:
    bad = ~torch.isfinite(g) & torch.isfinite(e)
    what = "NaN" if torch.isnan(g[bad]).any() else "inf"
    if g.dim() >= 1:
        empty = _empty_rows(args, bad.shape[:-1])
        if empty is not None and not (bad.any(-1) & ~empty).any():
            return Diagnosis(
                "edge case",
                f"your result is {what} on the rows where every position is masked (a row that may attend to "
                "nothing: a softmax of only -inf is 0/0); the expected result there is "
                f"{_value_words(e[empty])}: handle such rows",
            )
    largest = max(
        (t.detach().abs().max().item() for _, t in _tensors(args) if t.is_floating_point() and t.numel()), default=0.0
    )
    if largest >= 50:
        return Diagnosis(
            "overflow",
            f"your result is {what} on inputs as large as {largest:.3g} where the expected one is finite: "
            "exp of a large number overflows (subtract the maximum first), and inf - inf or inf / inf is NaN",
        )
    return Diagnosis(
        "NaN",
        f"your result is {what} where the expected one is finite: a division by zero, a log of 0, a square "
        "root of a negative number, or inf - inf",
    )


def _mask(got, expected, args) -> Diagnosis | None:
    if torch.equal(got, ~expected):
        return Diagnosis("inverted", "your mask is inverted: True where it must be False and the other way round")
    if expected.dim() >= 2 and expected.shape[-1] == expected.shape[-2] and torch.equal(got, expected.mT):
        return Diagnosis("transposed", "your mask is the transpose of the expected one: rows are queries, columns keys")
    differ = got ^ expected
    if expected.dim() >= 2 and expected.shape[-1] == expected.shape[-2] > 1:
        eye = torch.eye(expected.shape[-1], dtype=torch.bool).expand_as(differ)
        if torch.equal(differ, eye & differ) and differ.any():
            return Diagnosis(
                "diagonal",
                "your mask is right except on its diagonal: a position with itself ("
                + ("must be allowed)" if expected[eye].all() else "must not be allowed)"),
            )
    shifted = _shift(got.double(), expected.double(), lambda a, b: torch.equal(a, b))
    if shifted:
        return shifted
    return _edges(got.double(), expected.double(), args, 0.0, 0.0)


def _integers(got, expected) -> Diagnosis | None:
    r = got.long() - expected.long()
    if r.numel() and (r == r.flatten()[0]).all() and r.flatten()[0] != 0:
        c = r.flatten()[0].item()
        return Diagnosis(
            "off by one", f"every entry of your result is the expected one {c:+d}: an index or count is off by {abs(c)}"
        )
    return _shift(got.double(), expected.double(), lambda a, b: torch.equal(a, b))


def where(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> str:
    """Where two tensors first differ, for the generic hint: '(at index (0, 2): 0.31 instead of 0.42)'."""
    if got.dim() == 0 or got.shape != expected.shape:
        return ""
    g, e = got.detach().cpu(), expected.detach().cpu()
    if g.is_floating_point():
        wrong = ~torch.isclose(g.double(), e.double(), atol=atol, rtol=rtol, equal_nan=True)
    else:
        wrong = g != e
    index = wrong.nonzero()
    if not len(index):
        return ""
    at = tuple(index[0].tolist())
    share = f"{int(wrong.sum())} of {wrong.numel()} entries differ; "
    return f" ({share}the first at index {at}: {g[at].item():.4g} instead of {e[at].item():.4g})"
