"""Input checks shared by the library: errors that name the argument, what was expected and what was given."""
from __future__ import annotations

import math
from typing import Sequence

import torch


def shape_str(shape: Sequence[int]) -> str:
    """Format a shape as ``(2, 5, 8)``."""
    return "(" + ", ".join(str(int(s)) for s in shape) + ")"


def tensor(name: str, x, *, min_ndim: int | None = None, ndim: int | None = None,
           floating: bool = False, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Check that ``x`` is a tensor of the right rank and kind; return it unchanged."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {shape_str(x.shape)} ({x.dim()} dimensions)")
    if min_ndim is not None and x.dim() < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions, got shape {shape_str(x.shape)} ({x.dim()} dimensions)")
    if floating and not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if dtype is not None and x.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype}, got {x.dtype}")
    return x


def positive_int(name: str, value, *, minimum: int = 1) -> int:
    """Check that ``value`` is an integer of at least ``minimum``; return it.

    A symbolic size (``torch.SymInt``, while ``torch.export`` or ``torch.onnx`` traces a model with a
    dynamic length) counts as an integer.
    """
    if isinstance(value, bool) or not isinstance(value, (int, torch.SymInt)):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return value


def positive_float(name: str, value, *, allow_zero: bool = False) -> float:
    """Check that ``value`` is a finite real number > 0 (or >= 0); return it as a float."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"{name} must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return float(value)


def broadcastable(name: str, x: torch.Tensor, target: Sequence[int], what: str) -> None:
    """Check that ``x`` broadcasts to ``target`` without enlarging it."""
    try:
        out = torch.broadcast_shapes(tuple(x.shape), tuple(target))
    except RuntimeError:
        out = None
    if out is None or tuple(out) != tuple(target):
        raise ValueError(f"{name} must be broadcastable to {what} = {shape_str(target)}, got shape {shape_str(x.shape)}")
