"""The behavioural oracle: does a mutant behave like the solution on every input of the battery?

For a function answer, on each input: the result (type, shape, dtype, values within a tolerance, NaN where
the solution has none), the exception raised where the solution raises none, the caller's arguments left
unchanged, and, where the exercise's gradients matter, the gradient of a fixed weighted sum of the result
with respect to every float argument (finite where the solution's is, and no error in ``backward``).
An input on which the solution itself raises is not a valid input and is skipped.

For a class answer: the same parameters (names, shapes, which are shared), then the forward's outputs with
the same (randomised) weights loaded into both. For a number: the value, within the question's tolerance.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch
from attnbook.exercises import gradient_weights
from torch import nn

__all__ = ["outcome", "difference", "module_difference", "number_difference"]

# (rtol, atol relative to the largest of the solution's values), by dtype: float32 sums round at about 1e-7
TOLERANCE = {torch.float32: (2e-3, 2e-4), torch.float64: (1e-5, 1e-6)}
RTOL = 1e-5  # numbers


def _copy(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, torch.Generator):
        return torch.Generator().set_state(x.get_state())
    if isinstance(x, (list, tuple)):
        return type(x)(_copy(v) for v in x)
    if isinstance(x, dict):
        return {k: _copy(v) for k, v in x.items()}
    if isinstance(x, nn.Module):
        return copy.deepcopy(x)
    return x


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.nan_to_num(0.5), b.nan_to_num(0.5))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return True


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


def outcome(answer: Callable, args: tuple, grad: bool) -> dict:
    """What ``answer`` does on ``args``: its result or error, the arguments it changed, its gradients."""
    kept = _copy(args)
    given = _copy(args)
    try:
        result = answer(*given)
    except Exception as error:  # noqa: BLE001 - any error is behaviour
        return {"error": f"{type(error).__name__}"}
    if not isinstance(answer, nn.Module) and not any(t.is_floating_point() for t in _tensors(args)):
        result = _float64(result)  # a function of sizes alone: its float dtype is free
    out: dict = {
        "result": _copy(result),
        "changed": [i for i, (a, b) in enumerate(zip(kept, given)) if not _same(a, b)],
    }
    if grad:
        out["grad"] = _gradients(answer, args, grad)
    return out


def _float64(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.double() if x.is_floating_point() else x
    if isinstance(x, (list, tuple)):
        return type(x)(_float64(v) for v in x)
    return x


def _gradients(answer: Callable, args: tuple, which):
    leaves = _copy(args)
    chosen = [a for i, a in enumerate(leaves) if which is True or i in which]
    inputs = [t for t in _tensors(chosen) if t.is_floating_point()]
    for t in inputs:
        t.requires_grad_(True)
    try:
        result = answer(*leaves)
        outputs = [t for t in _tensors(result) if t.is_floating_point() and t.requires_grad]
        if not outputs:
            return "no gradient"
        total = sum((o * gradient_weights(o)).sum() for o in outputs)  # the checkers' weighted sum
        grads = torch.autograd.grad(total, inputs, allow_unused=True)
    except Exception as error:  # noqa: BLE001 - an error in backward (an in-place edit) is behaviour
        return f"error {type(error).__name__}"
    return [torch.zeros_like(t) if g is None else g.detach() for t, g in zip(inputs, grads)]


def _value_difference(got: Any, expected: Any) -> str | None:
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"returns {type(got).__name__}, not a tensor"
        if got.shape != expected.shape:
            return f"shape {tuple(got.shape)}, not {tuple(expected.shape)}"
        if got.dtype != expected.dtype:
            return f"dtype {got.dtype}, not {expected.dtype}"
        if not expected.is_floating_point():
            return None if torch.equal(got, expected) else "other values"
        g, e = got.double(), expected.double()
        if not torch.equal(torch.isnan(g), torch.isnan(e)):
            return "NaN where the solution has none" if torch.isnan(g).any() else "no NaN where the solution has"
        finite = e[torch.isfinite(e)]
        scale = finite.abs().max().item() if finite.numel() else 1.0
        rtol, atol = TOLERANCE.get(expected.dtype, TOLERANCE[torch.float32])
        if torch.allclose(g, e, rtol=rtol, atol=atol * max(scale, 1e-30), equal_nan=True):
            return None
        return f"values differ (largest difference {(g - e).abs().nan_to_num(math.inf).max().item():.3g})"
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected) or type(got) is not type(expected):
            return (
                f"returns {type(got).__name__} of {len(got) if hasattr(got, '__len__') else '?'}, not "
                f"{type(expected).__name__} of {len(expected)}"
            )
        for i, (a, b) in enumerate(zip(got, expected)):
            d = _value_difference(a, b)
            if d:
                return f"item {i}: {d}"
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict) or got.keys() != expected.keys():
            return "other keys"
        return next((f"[{k!r}]: {d}" for k in expected for d in [_value_difference(got[k], expected[k])] if d), None)
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        if isinstance(got, torch.Tensor) or isinstance(got, bool) or not isinstance(got, (int, float)):
            try:
                got = float(got)
            except (TypeError, ValueError, RuntimeError):
                return f"returns {type(got).__name__}, not a number"
        if type(expected) is int and type(got) is not int:
            return f"returns {type(got).__name__}, not an int"
        if math.isclose(got, expected, rel_tol=RTOL, abs_tol=0.0) or (math.isnan(got) and math.isnan(expected)):
            return None
        return f"{got!r}, not {expected!r}"
    return None if got == expected else f"{got!r}, not {expected!r}"


def difference(got: dict, expected: dict) -> str | None:
    """None when two outcomes agree, else how they differ."""
    if "error" in got:
        return f"raises {got['error']}"
    diff = _value_difference(got["result"], expected["result"])
    if diff:
        return diff
    if got["changed"] != expected["changed"]:
        return f"changes its argument(s) {got['changed']} in place"
    if "grad" in expected:
        g, e = got.get("grad"), expected["grad"]
        if isinstance(e, str) or isinstance(g, str):
            return None if g == e else f"gradient: {g if isinstance(g, str) else 'computed'}, not {e}"
        for i, (a, b) in enumerate(zip(g, e)):
            d = _value_difference(a, b)
            if d:
                return f"gradient of argument {i}: {d}"
    return None


# --- classes ------------------------------------------------------------------------------------------------


def _build(cls, init):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return cls(*init).eval()


def _structure(module: nn.Module):
    ids: dict[int, str] = {}
    out = []
    for name, p in module.named_parameters(remove_duplicate=False):
        out.append((name, tuple(p.shape), ids.setdefault(id(p), name)))
    return out


@torch.no_grad()
def module_difference(mutant_cls, reference_cls, init: tuple, inputs) -> str | None:
    """How a class answer differs from the solution's: construction, parameters, or forward outputs."""
    try:
        mutant = _build(mutant_cls, init)
    except Exception as error:  # noqa: BLE001
        return f"construction raises {type(error).__name__}"
    reference = _build(reference_cls, init)
    if not isinstance(mutant, nn.Module):
        return "not a module"
    if _structure(mutant) != _structure(reference):
        return "other parameters (names, shapes or sharing)"
    g = torch.Generator().manual_seed(1)
    for p in reference.parameters():
        p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    for name, p in reference.named_parameters():
        if "norm" in name and name.endswith("weight"):
            p.add_(1.0)
    mutant.load_state_dict(reference.state_dict())
    for item in inputs:
        args = tuple(a.to(torch.float32) if torch.is_tensor(a) and a.is_floating_point() else a for a in item.args)
        expected = outcome(reference, args, grad=False)
        if "error" in expected:
            continue
        diff = difference(outcome(mutant, args, grad=False), expected)
        if diff:
            return f"{item.label}: {diff}"
    return None


def number_difference(got: Any, expected: Any, tol: float) -> str | None:
    """How a numeric answer differs from the solution's value, beyond the question's tolerance."""
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        got = got.item()
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return f"{type(got).__name__}, not a number"
    if math.isclose(got, expected, rel_tol=max(tol, 1e-12), abs_tol=0.0):
        return None
    return f"{got:.6g}, not {expected:.6g}"
