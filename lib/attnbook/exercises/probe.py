"""Asking a wrong answer more questions, to say what kind of mistake it makes.

When an answer's result differs from the reference's and none of the exercise's listed mistakes matches,
:func:`explain` finds the kind of difference: the exercise's own diagnoses; the result's form and values
(:mod:`attnbook.exercises.diagnose`); then probes that call the answer again on changed arguments:

- two arguments swapped: with the two exchanged, the answer gives the reference's result;
- an argument ignored: changing it leaves the answer's result as it was, while the reference's changes;
- a batch mixed up: the answer is right on each example of the batch taken alone;
- the use of one argument wrong: with it set to zeros, the answer becomes right;
- which of several named results are wrong; right in float64 only; wrong only on large values.

:func:`explain_error` does the same for an answer that raised. The probes' calls are deterministic, so the
grader's record of an answer's calls replays them (:mod:`attnbook.grading.replay`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from . import diagnose, diagnose_error, diagnose_number
from .compare import ORDINAL, Difference, clone_args, difference, tensors

__all__ = ["Case", "explain", "explain_error", "WHOLE"]

WHOLE = {"mistake", "batch", "swapped", "unused", "argument", "part", "float32", "large values"}  # whole-call kinds


@dataclass
class Case:
    """One case as check_function runs it: its number, the arguments, the tolerance, the float64 case it copies."""

    number: int
    args: tuple
    atol: float
    rtol: float
    float32_of: int | None = None
    kept: tuple = ()


def explain(fn, reference, case: Case, diff: Difference, explain, parts, results, names) -> tuple[str, str]:
    """(kind, hint) for a wrong result that no listed mistake matches; ``results``: the whole (got, expected)."""
    if diff.kind not in ("values", "number", "other"):
        return diff.kind, diff.text
    for hook in explain:
        try:
            hint = hook(*results, *clone_args(case.kept))
        except Exception:  # noqa: BLE001 - a diagnosis that does not apply to this result
            hint = None
        if hint:
            return "mistake", hint
    if _batch_probe(fn, reference, case):
        return "batch", _BATCH_HINT
    if diff.kind == "values":
        found = diagnose.values(diff.got, diff.expected, case.kept, case.atol, case.rtol)
        if found is not None:
            return found
    if diff.kind == "number":
        named = parts(*clone_args(case.kept)) if parts else None
        found = diagnose_number.number(float(diff.got), float(diff.expected), args=case.kept, parts=named)
        if found is not None:
            return found
    if case.float32_of is not None and diff.kind == "values":
        return "float32", (
            f"your function is right on test case {case.float32_of} in float64 but not on the same inputs in "
            "float32: a step that loses float32's precision (a difference of nearly equal numbers, a long sum), "
            "or a constant or tensor made in float64 and converted"
        )
    swapped = _swap_probe(fn, reference, case)
    if swapped is not None:
        return "swapped", swapped
    unused = _unused_probe(fn, reference, case)
    if unused is not None:
        return "unused", unused
    argument = _argument_probe(fn, reference, case)
    if argument is not None:
        return "argument", (
            f"your result becomes right when {argument} is all zeros: the mistake is in how your code uses it "
            "(a sign, a transpose, a term with it left out or added twice, the wrong one of two)"
        )
    part = _wrong_parts(*results, names, case)
    if part is not None:
        return "part", part
    largest = _largest(case.kept)
    if case.number > 1 and largest >= 50 and diff.kind == "values":
        return "large values", (
            f"your function is right on the earlier cases but not on this one, whose inputs reach {largest:.3g}: "
            "a step that loses precision or saturates for large values (subtract the maximum before exp)"
        )
    return "generic", diff.text


def _wrong_parts(got, expected, names: Sequence[str], case: Case) -> str | None:
    """Which of several named results are wrong while the others are right."""
    if not names or not isinstance(expected, (tuple, list)) or len(names) != len(expected):
        return None
    wrong = [n for g, e, n in zip(got, expected, names) if difference(g, e, case.atol, case.rtol) is not None]
    if not wrong or len(wrong) == len(names):
        return None
    right = [n for n in names if n not in wrong]

    def listed(items):
        return ", ".join(items[:-1]) + (" and " if len(items) > 1 else "") + items[-1]

    verb = "is" if len(right) == 1 else "are"
    return (
        f"your {listed(right)} {verb} right, but not your {listed(wrong)}: the mistake is in the step that "
        f"makes {listed(wrong)}"
    )


_BATCH_HINT = (
    "your function is right on each example of this case's batch taken alone, but not on the whole batch: it "
    "mixes the examples (a maximum, sum or mean over the whole tensor instead of over each row, a reshape or "
    "transpose that moves the batch dimension, or a size read from the wrong dimension)"
)


def _largest(args: Sequence[Any]) -> float:
    return max((t.abs().max().item() for t in tensors(list(args)) if t.is_floating_point() and t.numel()), default=0.0)


def _batch_probe(fn: Callable, reference: Callable, case: Case) -> bool:
    """Whether ``fn`` is right on each example of the case's batch alone (a batch of at most 16).

    The batch is the first dimension of the tensor arguments that have the size B > 1 of the first one's;
    it is taken as a batch only if the reference on each example alone gives that example's part of the
    reference's result on the whole case.
    """
    tensors = [t for t in case.kept if isinstance(t, torch.Tensor) and t.dim() >= 1]
    if not tensors or not 2 <= tensors[0].shape[0] <= 16:
        return False
    B = tensors[0].shape[0]

    def example(i):
        return tuple(
            a[i : i + 1] if isinstance(a, torch.Tensor) and a.dim() >= 1 and a.shape[0] == B else a for a in case.kept
        )

    def part(result, i):
        if isinstance(result, torch.Tensor) and result.dim() >= 1 and result.shape[0] == B:
            return result[i : i + 1]
        if isinstance(result, (tuple, list)):
            parts = [part(r, i) for r in result]
            return None if any(p is None for p in parts) else type(result)(parts)
        return None

    try:
        whole = reference(*clone_args(case.kept))
        singles = [(example(i), reference(*clone_args(example(i)))) for i in range(B)]
    except Exception:  # noqa: BLE001 - a reference that does not take one example: no batch to probe
        return False
    for i, (_, alone) in enumerate(singles):
        expected = part(whole, i)
        if expected is None or difference(alone, expected, case.atol, case.rtol) is not None:
            return False
    for args, alone in singles:
        try:
            got = fn(*clone_args(args))
        except Exception:  # noqa: BLE001 - wrong on one example too
            return False
        if difference(got, alone, case.atol, case.rtol) is not None:
            return False
    return True


def _argument_probe(fn: Callable, reference: Callable, case: Case) -> str | None:
    """The arguments whose use is wrong, found by setting float tensor arguments to zeros one at a time.

    Where zeros in one argument make ``fn`` agree with the reference (and the reference's result is not
    trivial: neither all zeros nor NaN), the mistake is in how the code uses that argument, or one that no
    longer matters once it is zero (its partner in a product). Their names, when that is at most two of
    the arguments; otherwise None.
    """
    floats = [i for i, a in enumerate(case.kept) if isinstance(a, torch.Tensor) and a.is_floating_point()]
    floats = [i for i in floats if case.kept[i].numel() and bool(case.kept[i].abs().max() > 0)]
    if len(floats) < 2:
        return None
    suspects: set[int] = set()
    for i in floats:
        args = list(clone_args(case.kept))
        args[i] = torch.zeros_like(args[i])
        try:
            expected = reference(*clone_args(args))
        except Exception:  # noqa: BLE001 - zeros are not a valid value of this argument
            continue
        outputs = [t for t in tensors(expected) if t.is_floating_point()]
        if not outputs or any(not torch.isfinite(t).all() or not t.abs().max() > 0 for t in outputs):
            continue
        try:
            got = fn(*clone_args(args))
        except Exception:  # noqa: BLE001
            continue
        if difference(got, expected, case.atol, case.rtol) is None:
            suspects |= {i} | _irrelevant(reference, args, expected, [j for j in floats if j != i])
    if not suspects or len(suspects) > 2:
        return None
    return " or ".join(_name(reference, i) for i in sorted(suspects))


def _name(reference: Callable, i: int) -> str:
    names = _parameters(reference)
    return f"your {ORDINAL.get(i + 1, f'argument number {i + 1}, the')} argument" + (
        f" ({names[i]})" if i < len(names) else ""
    )


def _agrees(fn: Callable, args: Sequence[Any], expected: Any, case: Case) -> bool:
    try:
        return difference(fn(*clone_args(args)), expected, case.atol, case.rtol) is None
    except Exception:  # noqa: BLE001 - the answer does not even run on these arguments
        return False


def _swap_probe(fn: Callable, reference: Callable, case: Case) -> str | None:
    """Two arguments whose roles the answer swaps: called with the two exchanged, it gives the reference's result."""
    args = case.kept
    if len(args) > 7:
        return None
    expected = reference(*clone_args(args))
    for i in range(len(args)):
        for j in range(i + 1, len(args)):
            if isinstance(args[i], torch.Tensor) != isinstance(args[j], torch.Tensor) and not all(
                isinstance(a, (torch.Tensor, float)) for a in (args[i], args[j])
            ):
                continue
            swapped = list(args)
            swapped[i], swapped[j] = args[j], args[i]
            if _agrees(fn, swapped, expected, case):
                return (
                    f"your function uses {_name(reference, i)} where {_name(reference, j)} belongs and the other "
                    "way round: the two are swapped (in the order of the parameters, or where the code uses them)"
                )
    return None


def _changed_value(a: Any) -> Any:
    if isinstance(a, torch.Tensor) and a.is_floating_point():
        return a * 1.7 + 0.3
    if isinstance(a, torch.Tensor) and a.dtype == torch.bool and a.dim() >= 1:
        flipped = a.clone()
        flipped.view(-1)[: max(1, a.numel() // 3)] ^= True
        return flipped
    if isinstance(a, float):
        return a * 1.7 + 0.3
    return None


def _unused_probe(fn: Callable, reference: Callable, case: Case) -> str | None:
    """An argument the answer ignores: changing it leaves the answer's result as it was, not the reference's."""
    try:
        before = fn(*clone_args(case.kept))
    except Exception:  # noqa: BLE001
        return None
    for i, a in enumerate(case.kept):
        new = _changed_value(a)
        if new is None:
            continue
        args = list(clone_args(case.kept))
        args[i] = new
        try:
            expected = reference(*clone_args(args))
        except Exception:  # noqa: BLE001 - not a valid value of this argument
            continue
        if not all(torch.isfinite(t).all() for t in tensors(expected) if t.is_floating_point()):
            continue
        if difference(expected, reference(*clone_args(case.kept)), 1e-9, 1e-7) is None:
            continue  # the reference does not react to this change either
        if _agrees(fn, args, before, case) and not _agrees(fn, args, expected, case):
            return (
                f"your result does not change when {_name(reference, i)} changes: your code does not use it "
                "(or uses another argument in its place)"
            )
    return None


def _irrelevant(reference: Callable, args: list, expected: Any, others: list[int]) -> set[int]:
    """The arguments among ``others`` that the reference's result on ``args`` no longer depends on."""
    out = set()
    for j in others:
        changed = list(clone_args(args))
        changed[j] = changed[j] * 1.5 + 0.25
        try:
            if difference(reference(*clone_args(changed)), expected, 1e-9, 1e-7) is None:
                out.add(j)
        except Exception:  # noqa: BLE001
            out.add(j)
    return out


def _parameters(fn: Callable) -> list[str]:
    try:
        return [p.name for p in inspect.signature(fn).parameters.values()]
    except (TypeError, ValueError):
        return []


def explain_error(fn: Callable, reference: Callable, case: Case, error: Exception) -> tuple[str, str] | None:
    """(kind, sentence) for an answer that raised on ``case``, or None."""
    swapped = _swap_probe(fn, reference, case)
    if swapped is not None:
        return "swapped", f"{swapped[:1].upper()}{swapped[1:]}."
    if _batch_probe(fn, reference, case):
        return "batch", (
            "It runs right on each example of this case's batch alone, but not on the whole batch: a size read "
            "from the wrong dimension, or a reshape that assumes a batch of one."
        )
    meaning = diagnose_error.error(str(error))
    if case.float32_of is not None and not meaning:
        meaning = (
            f"it runs on test case {case.float32_of} in float64 but not in float32: a tensor made in float64 "
            "(torch.float64, or numpy) mixed with float32 ones; make new tensors with dtype=x.dtype"
        )
    return ("error", f"That means {meaning}.") if meaning else None
