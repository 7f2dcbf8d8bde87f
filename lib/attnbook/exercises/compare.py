"""Comparing an answer's result with the reference's: copies of the arguments, the float32 copy of a case,
arguments changed in place, and how two results differ (type, shape, dtype, values), in a sentence."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from . import diagnose

__all__ = ["clone_args", "tensors", "as_float32", "changed_argument", "Difference", "difference", "describe"]


ORDINAL = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", 6: "sixth"}


def describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    return f"{type(x).__name__} {x!r}"[:120]


def clone_args(args: Sequence[Any]) -> tuple:
    """Copies of the arguments (tensors, and the tensors in lists and tuples), to compare or to hand on."""

    def copy(a):
        if isinstance(a, torch.Tensor):
            return a.detach().clone()
        if isinstance(a, (tuple, list)):
            return type(a)(copy(v) for v in a)
        return a

    return tuple(copy(a) for a in args)


def tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for item in x for t in tensors(item)]
    return []


def as_float32(args: Sequence[Any]) -> tuple | None:
    """The case with its float64 tensors in float32, or None if it has none."""
    if not any(isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in tensors(list(args))):
        return None

    def convert(x):
        if isinstance(x, torch.Tensor):
            return x.to(torch.float32) if x.dtype == torch.float64 else x
        if isinstance(x, (tuple, list)):
            return type(x)(convert(v) for v in x)
        return x

    return tuple(convert(a) for a in args)


def changed_argument(before: Sequence[Any], after: Sequence[Any]) -> int | None:
    """The position (from 1) of the first argument whose tensors the call changed, or None."""
    for number, (b, a) in enumerate(zip(before, after), start=1):
        for x, y in zip(tensors(b), tensors(a)):
            if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(x.nan_to_num(0.5), y.nan_to_num(0.5)):
                return number
    return None


class Difference(NamedTuple):
    """How a result differs from the expected one: which result of several, what was compared, a sentence."""

    part: str  # "" or "result 1: "
    kind: str  # a kind of diagnose.form ("type", "shape", "dtype", "count type"), or "values", "number", "other"
    text: str
    got: Any
    expected: Any


def difference(
    got: Any, expected: Any, atol: float, rtol: float, args: Sequence[Any] = (), integers: bool = False
) -> Difference | None:
    """None when ``got`` equals ``expected`` within tolerance, else how they differ (with ``integers``, a
    float where an int is expected differs too)."""
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            text = f"your function returns {describe(got)}; it should return {len(expected)} results"
            return Difference("", "type", text, got, expected)
        for i, (g, e) in enumerate(zip(got, expected)):
            diff = difference(g, e, atol, rtol, args, integers)
            if diff is not None:
                return diff._replace(part=f"result {i}: {diff.part}")
        return None
    form = diagnose.form(got, expected, args, integers)
    if form is not None:
        return Difference("", form.kind, form.hint, got, expected)
    if isinstance(expected, torch.Tensor):
        if got.dtype == torch.bool or not got.is_floating_point():
            if torch.equal(got, expected):
                return None
            text = "some entries differ from the expected ones" + diagnose.where(got, expected, atol, rtol)
            return Difference("", "values", text, got, expected)
        g, e = got.detach().cpu().to(torch.float64), expected.detach().cpu().to(torch.float64)
        if torch.allclose(g, e, atol=atol, rtol=rtol, equal_nan=True) and torch.equal(g.isnan(), e.isnan()):
            return None
        err = (g - e).abs().nan_to_num(float("inf")).max().item()
        where = diagnose.where(g, e, atol, rtol)
        text = f"values differ from the expected ones (largest absolute difference {err:.3g}){where}"
        return Difference("", "values", text, got, expected)
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return Difference("", "type", f"your function returns {describe(got)}; expected a number", got, expected)
        if math.isclose(got, expected, rel_tol=rtol, abs_tol=atol):
            return None
        return Difference("", "number", f"expected about {expected:.6g}, got {got:.6g}", got, expected)
    return None if got == expected else Difference("", "other", f"expected {expected!r}, got {got!r}", got, expected)


def like(got: Any, expected: Any) -> Any:
    """``got`` with each float tensor in the float dtype of the corresponding tensor of ``expected``."""
    if isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor):
        both = got.is_floating_point() and expected.is_floating_point()
        return got.to(expected.dtype) if both else got
    if isinstance(got, (tuple, list)) and isinstance(expected, (tuple, list)) and len(got) == len(expected):
        return type(got)(like(g, e) for g, e in zip(got, expected))
    return got


def keeps_float32(reference: Callable, args: Sequence[Any]) -> bool:
    """A case in float64 always counts; its float32 copy only where the reference gives float32 for it."""
    if not any(t.dtype == torch.float32 for t in tensors(list(args))):
        return True
    try:
        out = reference(*clone_args(args))
    except Exception:  # noqa: BLE001 - a reference that only takes float64 (modules of that dtype in the case)
        return False
    return all(t.dtype != torch.float64 for t in tensors(out))
