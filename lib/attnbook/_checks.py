"""Input checks shared by the library: errors that name the argument, what was expected and what was given."""

from __future__ import annotations

import functools
import inspect
import math
import threading
from collections.abc import Sequence

import torch


def shape_str(shape: Sequence[int]) -> str:
    """Format a shape as ``(2, 5, 8)``."""
    return "(" + ", ".join(str(int(s)) for s in shape) + ")"


def tensor(
    name: str,
    x,
    *,
    min_ndim: int | None = None,
    ndim: int | None = None,
    floating: bool = False,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Check that ``x`` is a tensor of the right rank and kind; return it unchanged."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {shape_str(x.shape)} ({x.dim()} dimensions)")
    if min_ndim is not None and x.dim() < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions, got shape {shape_str(x.shape)} ({x.dim()} dimensions)"
        )
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
        raise ValueError(
            f"{name} must be broadcastable to {what} = {shape_str(target)}, got shape {shape_str(x.shape)}"
        )


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
        raise TypeError(
            f"{name} has dtype {x.dtype} but the {owner}'s parameters are {ref.dtype}; convert one of "
            f"them ({name}.to({ref.dtype}) or {owner}.to({x.dtype}))"
        )
    if x.device != ref.device:
        raise ValueError(
            f"{name} is on {x.device} but the {owner}'s parameters are on {ref.device}; move one of "
            f"them ({name}.to(device) or {owner}.to(device))"
        )
    return x


def features(
    name: str, x, width: int, *, module=None, width_name: str = "d_model", min_ndim: int = 1, ndim: int | None = None
) -> torch.Tensor:
    """Check a floating tensor of vectors (..., width) (with the dtype and device of ``module``); return it."""
    tensor(name, x, min_ndim=min_ndim, ndim=ndim, floating=True)
    if x.shape[-1] != width:
        raise ValueError(f"{name} must have width {width_name}={width}, got shape {shape_str(x.shape)}")
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
            raise ValueError(
                f"{first_name} and {name} must have the same {what}, got {first_name} "
                f"{shape_str(first.shape)} and {name} {shape_str(x.shape)}"
            )


def attention_mask(
    name: str, mask, target: Sequence[int], *, dims: str = "(B, H, Tq, Tk)", device: torch.device | None = None
) -> torch.Tensor:
    """Check a boolean attention mask (True = may attend) of rank 2 (Tq, Tk), 3 (B, Tq, Tk) or 4 (B, H, Tq, Tk)
    against the scores' shape ``target`` = (B, H, Tq, Tk) (and the queries' ``device``); return it ready to
    broadcast against the scores (a rank-3 mask gets a head dimension)."""
    tensor(name, mask, dtype=torch.bool)
    if device is not None and mask.device != device:
        raise ValueError(f"{name} is on {mask.device} but the inputs are on {device}; move it ({name}.to(device))")
    letters = dims.strip("()").split(", ")
    if mask.dim() not in (2, 3, 4):
        raise ValueError(
            f"{name} must have 2 ({', '.join(letters[2:])}), 3 ({letters[0]}, {', '.join(letters[2:])}) "
            f"or 4 {dims} dimensions, got shape {shape_str(mask.shape)}"
        )
    full = mask.unsqueeze(1) if mask.dim() == 3 else mask  # rank 3: the same mask for every head
    try:
        out = torch.broadcast_shapes(tuple(full.shape), tuple(target))
    except RuntimeError:
        out = None
    if out is None or tuple(out) != tuple(target):
        raise ValueError(
            f"{name} must be broadcastable to {dims} = {shape_str(target)}, got shape {shape_str(mask.shape)}"
        )
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


def instance(name: str, value, kind, what: str, *, optional: bool = False):
    """Check that ``value`` is an instance of ``kind`` (described as ``what``), or None if ``optional``; return it."""
    if (value is None and optional) or isinstance(value, kind):
        return value
    raise TypeError(f"{name} must be {what}{' or None' if optional else ''}, got {type(value).__name__}")


def module(name: str, value, kind=torch.nn.Module, what: str = "a torch.nn.Module"):
    """Check that ``value`` is a module (of ``kind``); return it."""
    return instance(name, value, kind, what)


def generator(name: str, value) -> torch.Generator | None:
    """Check that ``value`` is a ``torch.Generator`` or None; return it."""
    return instance(
        name, value, torch.Generator, "a torch.Generator (e.g. torch.Generator().manual_seed(0))", optional=True
    )


def function(name: str, value, *, optional: bool = False):
    """Check that ``value`` can be called (or is None if ``optional``); return it."""
    if (value is None and optional) or callable(value):
        return value
    raise TypeError(f"{name} must be a function{' or None' if optional else ''}, got {type(value).__name__}")


def text(name: str, value, *, nonempty: bool = False) -> str:
    """Check that ``value`` is a str (not empty if ``nonempty``); return it."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if nonempty and not value:
        raise ValueError(f"{name} must be a non-empty str, got ''")
    return value


def texts(name: str, values, *, what: str = "a list of str", nonempty: bool = False) -> list[str]:
    """Check that ``values`` is a list or tuple of str (not one str); return it as a list."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
        raise TypeError(f"{name} must be {what}, got {type(values).__name__}")
    wrong = [v for v in values if not isinstance(v, str)]
    if wrong:
        raise TypeError(f"{name} must be {what}, got an element {wrong[0]!r} ({type(wrong[0]).__name__})")
    if nonempty and not values:
        raise ValueError(f"{name} must not be empty")
    return list(values)


def file(name: str, path):
    """Check that ``path`` (a str or a path) names an existing file; return it as a ``pathlib.Path``."""
    import os
    from pathlib import Path

    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (a str or a pathlib.Path), got {type(path).__name__}")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{name} must be an existing file, got {str(path)!r} ({'a folder' if path.is_dir() else 'no such file'})"
        )
    return path


def real(name: str, value) -> float:
    """Check that ``value`` is a finite real number (a Python number or a one-element tensor); return it as a float."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex() and value.dtype != torch.bool:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def scalar(name: str, value, *, positive: bool = False):
    """Check that ``value`` is a finite real number or a one-element floating tensor (> 0 if ``positive``);
    return it unchanged (a tensor keeps its gradient)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or not value.is_floating_point():
            raise TypeError(
                f"{name} must be a number or a one-element floating tensor, got a tensor of dtype "
                f"{value.dtype} and shape {shape_str(value.shape)}"
            )
        number = float(value.detach())
        if not math.isfinite(number):
            raise ValueError(f"{name} must be finite, got {number}")
    else:
        number = real(name, value)
    if positive and not number > 0:
        raise ValueError(f"{name} must be > 0, got {number}")
    return value


def probability(name: str, value) -> float:
    """Check that ``value`` is a number in [0, 1]; return it as a float."""
    value = positive_float(name, value, allow_zero=True)
    if value > 1:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value}")
    return value


def numbers(name: str, values) -> torch.Tensor:
    """Finite real numbers: a number, a list of numbers or a real tensor, as a float64 tensor."""
    if isinstance(values, torch.Tensor):
        if values.is_complex() or values.dtype == torch.bool:
            raise TypeError(f"{name} must hold real numbers, got dtype {values.dtype}")
        out = values.detach().to(torch.float64)
    else:
        if isinstance(values, (bool, str, bytes)):
            raise TypeError(f"{name} must be a number or a tensor of numbers, got {values!r}")
        try:
            out = torch.as_tensor(values, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"{name} must be a number or a tensor of numbers, got {values!r:.80}") from None
    if not torch.isfinite(out).all():
        raise ValueError(f"{name} must be finite, got {values!r:.80}")
    return out


def token_ids(
    name: str,
    ids,
    vocab_size: int | None,
    *,
    ndim: int | None = None,
    min_ndim: int | None = None,
    ignore_index: int | None = None,
    what: str = "token ids",
    values: bool = True,
) -> torch.Tensor:
    """Check an integer tensor of ids in [0, vocab_size) (>= 0 if ``vocab_size`` is None; entries equal to
    ``ignore_index`` aside); return it. ``values=False`` checks the kind only (a traced tensor has no values)."""
    tensor(name, ids, ndim=ndim, min_ndim=min_ndim)
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer {what}, got dtype {ids.dtype}")
    if not values:
        return ids
    outside = ids < 0 if vocab_size is None else (ids < 0) | (ids >= vocab_size)
    if ignore_index is not None:
        outside &= ids != ignore_index
    if bool(outside.any()):  # one host sync per tensor of ids; the message reads the values only when it fails
        kept = ids if ignore_index is None else ids[ids != ignore_index]
        also = "" if ignore_index is None else f" (or {ignore_index}: not predicted)"
        where = ">= 0" if vocab_size is None else f"in [0, {vocab_size})"
        raise ValueError(
            f"{name} must hold {what} {where}{also}, got values from {int(kept.min())} to {int(kept.max())}"
        )
    return ids


def same_dtype(*named: tuple[str, torch.Tensor]) -> None:
    """Check that the tensors ``named`` = (name, tensor), ... have one dtype."""
    first_name, first = named[0]
    for name, x in named[1:]:
        if x.dtype != first.dtype:
            raise TypeError(
                f"{first_name} and {name} must have the same dtype, got {first.dtype} and {x.dtype}; "
                f"convert one of them ({name}.to({first.dtype}))"
            )


def broadcast(*named: tuple[str, torch.Tensor], what: str = "shapes") -> tuple[int, ...]:
    """The shape the tensors ``named`` = (name, tensor), ... broadcast to; a clear error if they do not."""
    try:
        return tuple(torch.broadcast_shapes(*(tuple(x.shape) for _, x in named)))
    except RuntimeError:
        shapes = ", ".join(f"{n} {shape_str(x.shape)}" for n, x in named)
        raise ValueError(
            f"{' and '.join(n for n, _ in named)} must have {what} that broadcast together, got {shapes}"
        ) from None


def int_pair(name: str, value, *, what: str = "(low, high)", minimum: int = 1) -> tuple[int, int]:
    """Check that ``value`` is a pair of integers >= ``minimum`` (a tuple or list of two); return it as a tuple."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{name} must be a pair {what} of integers, got {value!r}")
    return positive_int(f"{name}[0]", value[0], minimum=minimum), positive_int(f"{name}[1]", value[1], minimum=minimum)


def fraction(name: str, value) -> float:
    """Check that ``value`` is a number strictly between 0 and 1 (a share of a data set); return it as a float."""
    value = positive_float(name, value)
    if value >= 1:
        raise ValueError(f"{name} must be between 0 and 1, got {value}")
    return value


def dropout(name: str, value) -> float:
    """Check that ``value`` is a dropout probability in [0, 1); return it as a float."""
    p = positive_float(name, value, allow_zero=True)
    if p >= 1:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
    return p


def choice(name: str, value, options) -> str:
    """Check that ``value`` is one of ``options`` (say, the names of a registry); return it."""
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(repr(o) for o in options)}, got {value!r}")
    return value


# --- checking once, at the public boundary ----------------------------------------------------------------

_state = threading.local()


def checked_by(check):
    """Decorate a public function or ``forward`` with its checker, so that its body is only the computation.

    ``check`` (a function, or the name of one further down the function's module, where the checks are) gets
    the call's arguments by name (defaults filled in; ``**_`` takes those it does not look at) and raises a
    clear error for a bad one. It runs at the boundary only: while a checked call runs, the checked calls
    inside it (the layers of a model, a function a function calls, the tiles of a loop) skip their checks, as
    their inputs come from arguments checked already, and an error names an argument of the call the learner
    made. A constructor calls its checker itself: its checks run wherever it is called.
    """

    def decorate(fn):
        parameters = inspect.signature(fn).parameters.values()
        positional = [p.name for p in parameters if p.kind == p.POSITIONAL_OR_KEYWORD]
        defaults = {p.name: p.default for p in parameters if p.default is not p.empty}
        names = {p.name for p in parameters}
        if any(p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in parameters):
            raise TypeError(f"checked_by needs named parameters (no *args, **kwargs), not {fn.__qualname__}'s")

        @functools.wraps(fn)
        def checked_call(*args, **kwargs):
            if getattr(_state, "trusted", False):  # an outer call has checked the inputs
                return fn(*args, **kwargs)
            arguments = {**defaults, **dict(zip(positional, args)), **kwargs}
            if len(args) > len(positional) or len(arguments) < len(names) or not kwargs.keys() <= names:
                return fn(*args, **kwargs)  # a call that does not fit the signature: Python's own TypeError
            (fn.__globals__[check] if isinstance(check, str) else check)(**arguments)
            with trusted():
                return fn(*args, **kwargs)

        return checked_call

    return decorate


class trusted:
    """``with _checks.trusted():`` runs code whose inputs have been checked: the checked calls inside it skip
    their checks (see :func:`checked_by`)."""

    def __enter__(self):
        self.before = getattr(_state, "trusted", False)
        _state.trusted = True

    def __exit__(self, *exc):
        _state.trusted = self.before
