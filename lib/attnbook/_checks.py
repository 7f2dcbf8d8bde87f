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


def _reference(module) -> torch.Tensor | None:
    """The first floating-point parameter of ``module`` (None if it has none): its dtype and device rule."""
    for p in module.parameters():
        if p.is_floating_point():
            return p
    return None


def like(name: str, x: torch.Tensor, module, *, owner: str | None = None) -> torch.Tensor:
    """Check that ``x`` has the dtype and device of ``module``'s parameters; return it unchanged.

    A module with no floating-point parameters accepts any dtype and device.
    """
    ref = _reference(module)
    if ref is None:
        return x
    owner = owner or type(module).__name__
    if x.dtype != ref.dtype:
        raise TypeError(f"{name} has dtype {x.dtype} but the {owner}'s parameters are {ref.dtype}; convert one of "
                        f"them ({name}.to({ref.dtype}) or {owner}.to({x.dtype}))")
    if x.device != ref.device:
        raise ValueError(f"{name} is on {x.device} but the {owner}'s parameters are on {ref.device}; move one of "
                         f"them ({name}.to(device) or {owner}.to(device))")
    return x


def features(name: str, x, width: int, *, module=None, width_name: str = "d_model", min_ndim: int = 1,
             ndim: int | None = None) -> torch.Tensor:
    """Check a floating tensor of vectors (..., width) (with the dtype and device of ``module``); return it."""
    tensor(name, x, min_ndim=min_ndim, ndim=ndim, floating=True)
    if x.shape[-1] != width:
        raise ValueError(f"{name} must have width {width_name}={width}, "
                         f"got shape {shape_str(x.shape)}")
    if module is not None:
        like(name, x, module)
    return x


def sequence(name: str, x, width: int, *, module=None, width_name: str = "d_model") -> torch.Tensor:
    """Check a batch of sequences of vectors (B, T, width) with T >= 1 (and the dtype of ``module``); return it."""
    tensor(name, x, floating=True)
    if x.dim() != 3 or x.shape[-1] != width:
        raise ValueError(f"{name} must have shape (B, T, {width_name}={width}), got {shape_str(x.shape)}")
    if x.shape[1] == 0:
        raise ValueError(f"{name} is an empty sequence (T = 0): shape {shape_str(x.shape)}")
    if module is not None:
        like(name, x, module)
    return x


def same_size(what: str, dims: slice, *named: tuple[str, torch.Tensor]) -> None:
    """Check that the tensors ``named`` = (name, tensor), ... agree in the dimensions ``dims`` (called ``what``)."""
    first_name, first = named[0]
    for name, x in named[1:]:
        if x.shape[dims] != first.shape[dims]:
            raise ValueError(f"{first_name} and {name} must have the same {what}, got {first_name} "
                             f"{shape_str(first.shape)} and {name} {shape_str(x.shape)}")


def attention_mask(name: str, mask, target: Sequence[int], *, dims: str = "(B, H, Tq, Tk)",
                   device: torch.device | None = None) -> torch.Tensor:
    """Check a boolean attention mask (True = may attend) of rank 2 (Tq, Tk), 3 (B, Tq, Tk) or 4 (B, H, Tq, Tk)
    against the scores' shape ``target`` = (B, H, Tq, Tk) (and the queries' ``device``); return it ready to
    broadcast against the scores (a rank-3 mask gets a head dimension)."""
    tensor(name, mask, dtype=torch.bool)
    if device is not None and mask.device != device:
        raise ValueError(f"{name} is on {mask.device} but the inputs are on {device}; move it ({name}.to(device))")
    letters = dims.strip("()").split(", ")
    if mask.dim() not in (2, 3, 4):
        raise ValueError(f"{name} must have 2 ({', '.join(letters[2:])}), 3 ({letters[0]}, {', '.join(letters[2:])}) "
                         f"or 4 {dims} dimensions, got shape {shape_str(mask.shape)}")
    full = mask.unsqueeze(1) if mask.dim() == 3 else mask  # rank 3: the same mask for every head
    try:
        out = torch.broadcast_shapes(tuple(full.shape), tuple(target))
    except RuntimeError:
        out = None
    if out is None or tuple(out) != tuple(target):
        raise ValueError(f"{name} must be broadcastable to {dims} = {shape_str(target)}, "
                         f"got shape {shape_str(mask.shape)}")
    return full


def as_integers(name: str, values, *, what: str = "a list or tensor of integers", device=None) -> torch.Tensor:
    """``values`` (a list, tuple, range or tensor of integers) as an integer tensor; a clear error otherwise."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (torch.Tensor, list, tuple, range)):
        raise TypeError(f"{name} must be {what}, got {type(values).__name__}")
    if not isinstance(values, torch.Tensor) and len(values) == 0:
        return torch.zeros(0, dtype=torch.long, device=device)
    try:
        out = torch.as_tensor(values, device=device)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name} must be {what}, got {values!r}") from None
    if out.is_floating_point() or out.is_complex() or out.dtype == torch.bool:
        raise TypeError(f"{name} must be {what}, got dtype {out.dtype}")
    return out
