"""Answer checkers for the exercises: run a learner's function on test cases and say what is wrong.

A checker compares the learner's answer with a reference on several cases. When they differ, it runs
known wrong versions ("mistakes") on the same cases; if the answer matches one of them, the hint for
that mistake is given. Otherwise the exercise's own diagnoses, then the checking helpers', say what kind of
mistake the difference shows (:mod:`.probe`, :mod:`.diagnose`: a wrong dtype or shape, a transposed
result, a missing scale, the wrong axis, a batch mixed up, an ignored or swapped argument, ...), and only
failing those, which case failed and where the values differ. :class:`ExerciseFailed`'s ``kind`` says which.

- A correct answer returns a :class:`Result` that displays as a tick.
- An exercise that is not attempted yet (the stub still raises ``NotImplementedError``, or the answer is
  ``...``) returns a :class:`Result` that says so, without an error: student notebooks run end to end.
- A wrong answer raises :class:`ExerciseFailed`, whose notebook display is the hint alone, with no
  traceback from inside the library or PyTorch.

What :func:`check_function` compares on every case: the result's type, shape, dtype (an integer tensor
where integers are expected, float32 where float32 was given) and values; that the answer leaves the
caller's arguments as they were (it is called on the case's own tensors); each float64 case again in
float32; and, where an exercise asks for it, the gradients, finite where the reference's are.

Each chapter's checkers live in a submodule named after the chapter, e.g.
``attnbook.exercises.queries_keys_values``.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from . import diagnose_number, probe
from .compare import (
    ORDINAL,
    as_float32,
    changed_argument,
    clone_args,
    describe,
    difference,
    keeps_float32,
    like,
    tensors,
)
from .probe import Case

__all__ = [
    "ExerciseFailed",
    "Result",
    "Mistake",
    "check_function",
    "check_number",
    "number_tolerance",
    "clone_args",
    "gradient_weights",
    "weighted_gradients",
]


class ExerciseFailed(AssertionError):
    """A wrong answer. Its message is the hint; notebooks show only the hint, not a traceback.

    ``kind`` says what the hint names: ``"mistake"`` (one of the exercise's usual mistakes, or the checker's
    own words), a kind of difference a diagnosis recognised (``"dtype"``, ``"shape"``, ``"batch"``,
    ``"factor"``, ... see :mod:`attnbook.exercises.diagnose`), or ``"generic"`` when the hint can only say
    on which case and where the values differ.
    """

    def __init__(self, exercise: str, hint: str, kind: str = "mistake"):
        super().__init__(f"{exercise}: {hint}")
        self.exercise = exercise
        self.hint = hint
        self.kind = kind

    def _render_traceback_(self) -> list[str]:  # used by IPython instead of the traceback
        return [f"\u2717 {self.exercise}: not yet right.", f"  Hint: {self.hint}"]


@dataclass(frozen=True)
class Result:
    """The outcome of a check that did not fail: passed, or not attempted yet."""

    exercise: str
    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        mark = "\u2713" if self.passed else "\u2026"
        return f"{mark} {self.exercise}: {self.message}"


class Mistake(NamedTuple):
    """A usual wrong version of the answer, with the hint to give when the learner's output matches it."""

    hint: str
    wrong: Callable[..., Any]


def gradient_weights(t: torch.Tensor) -> torch.Tensor:
    """The fixed weights w of the sum (w * out).sum() whose gradient a checker compares: one set per shape."""
    seed = sum((i + 1) * 7919 * int(n) for i, n in enumerate(t.shape)) % 2**31
    g = torch.Generator().manual_seed(seed)
    return torch.randn(tuple(t.shape), generator=g, dtype=torch.float64).to(dtype=t.dtype, device=t.device)


def weighted_gradients(result: Any, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor] | None:
    """The gradients of sum((gradient_weights(o) * o).sum()) over the float tensors o of ``result`` with
    respect to ``inputs`` (zeros for an input the result does not depend on); None if nothing requires grad."""
    outputs = [o for o in tensors(result) if o.is_floating_point() and o.requires_grad]
    if not outputs:
        return None
    total = sum((gradient_weights(o) * o).sum() for o in outputs)
    grads = torch.autograd.grad(total, list(inputs), allow_unused=True)
    return [torch.zeros_like(x) if g is None else g for x, g in zip(inputs, grads)]


def _where_it_raised(fn: Callable, error: BaseException) -> str:
    """The line of the learner's own code that raised, if the error came from inside it."""
    recorded = getattr(error, "_attnbook_where", None)  # an error replayed by the grader (attnbook.grading.replay)
    if isinstance(recorded, str):
        return recorded
    import inspect

    try:  # a checker's wrapper names the learner's fn; a decorator (torch.no_grad) wraps it too
        code = getattr(inspect.unwrap(fn), "__code__", None)
    except ValueError:
        code = None
    if code is None:
        return ""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == code.co_filename]
    if not frames or not frames[-1].line:
        return ""
    return f" (at the line `{frames[-1].line}`)"


def check_function(
    fn: Callable,
    *,
    exercise: str,
    reference: Callable,
    cases: Sequence[Sequence[Any]],
    mistakes: Sequence[Mistake] = (),
    error_hints: Sequence[tuple[str, str]] = (),
    atol: float = 1e-5,
    rtol: float = 1e-4,
    success: str = "correct on every test case.",
    float32: bool = True,
    gradients: bool | Sequence[int] = False,
    gradient_hint: str = "",
    integers: bool = False,
    explain: Sequence[Callable[..., str | None]] = (),
    parts: Callable[..., dict[str, float]] | None = None,
    names: Sequence[str] = (),
    first_case: int = 1,
) -> Result:
    """Run ``fn`` on each case and compare with ``reference``; see the module docstring.

    ``error_hints`` maps a fragment of an exception message to a hint, for errors the usual mistakes cause.
    ``float32`` adds a float32 copy of every case with float64 tensors (compared at float32's precision);
    ``gradients`` compares the gradients of a fixed weighted sum of the result with respect to every float
    tensor argument (True) or to the arguments at these positions (from 0); ``gradient_hint`` is the hint
    for a NaN gradient where the reference's is finite. ``integers``: where the reference returns an int
    (a count), the answer must too, not a float of the same value. ``explain``: the exercise's own diagnoses,
    each ``explain(got, expected, *args)`` returning a hint or None, asked after the listed mistakes;
    ``parts(*args)``: for a number result, the named terms it is the sum of (see :func:`check_number`);
    ``names``: the names of the results, for a function that returns several, to say which are wrong.
    ``first_case``: the number of the first case in the hints (a checker that calls check_function twice).

    A wrong result gets the hint of the first listed mistake it matches; otherwise a diagnosis of how it
    differs (:mod:`attnbook.exercises.diagnose`, and a probe of each example of a batch alone); otherwise
    the case and where the values differ.
    """
    if not callable(fn):
        raise ExerciseFailed(exercise, f"expected a function, got {describe(fn)}", "type")
    every = [Case(0, clone_args(args), atol, rtol) for args in cases]  # copies the answer may spoil, not the cases
    if float32:
        copies = [(i, c) for i, args in enumerate(cases, start=1) for c in [as_float32(args)] if c]
        every += [Case(0, c, max(atol, 1e-4), max(rtol, 1e-3), i) for i, c in copies]
        every = [case for case in every if keeps_float32(reference, case.args)]
    for number, case in enumerate(every, start=first_case):
        case.number, case.kept = number, clone_args(case.args)
        got = _call(fn, reference, case, exercise, error_hints)
        if isinstance(got, Result):
            return got
        changed = changed_argument(case.kept, case.args)
        if changed is not None:
            raise ExerciseFailed(
                exercise,
                f"your function changed its {ORDINAL.get(changed, f'argument number {changed}, the')} argument in "
                "place: the caller's tensor is no longer what it was. Work on a copy (x.clone()) or use operations "
                "that return a new tensor (masked_fill, not masked_fill_; x = x / t, not x /= t).",
                "in place",
            )
        expected = reference(*clone_args(case.kept))
        if not isinstance(fn, torch.nn.Module) and not any(t.is_floating_point() for t in tensors(list(case.kept))):
            got = like(got, expected)  # a function of sizes alone (an encoding, a mask): any float dtype will do
        diff = difference(got, expected, case.atol, case.rtol, case.kept, integers)
        if diff is not None:
            for mistake in mistakes:
                try:
                    wrong = mistake.wrong(*clone_args(case.kept))
                except Exception:  # this mistake cannot even run on this case, so it is not the one
                    continue
                if difference(got, wrong, case.atol, case.rtol) is None:
                    raise ExerciseFailed(exercise, mistake.hint)
            kind, hint = probe.explain(fn, reference, case, diff, explain, parts, (got, expected), names)
            part = "" if kind in probe.WHOLE else diff.part  # about the whole call, not one of its results
            raise ExerciseFailed(exercise, f"on test case {case.number}, {part}{hint.rstrip('.')}.", kind)
    for case in every if gradients else ():  # once every value is right
        _check_gradients(fn, reference, case, exercise, gradient_hint, gradients)
    return Result(exercise, True, success)


def _call(fn: Callable, reference: Callable, case: Case, exercise: str, error_hints) -> Any:
    """``fn(*case.args)``; a Result for the stub, ExerciseFailed (with where and a hint) for an error."""
    try:
        return fn(*case.args)
    except NotImplementedError as error:
        if not str(error):  # the stub's bare `raise NotImplementedError`, not an operation PyTorch lacks
            return Result(exercise, False, "not attempted yet: replace the `raise NotImplementedError` with your code.")
        return _raised(fn, reference, error, exercise, case, error_hints)
    except Exception as error:  # the learner's code raised: say what and where, not a traceback
        return _raised(fn, reference, error, exercise, case, error_hints)


def _raised(fn: Callable, reference: Callable, error: Exception, exercise: str, case: Case, error_hints) -> Any:
    message = f"{type(error).__name__}: {error}".splitlines()[0]
    head = f"on test case {case.number} your function raised {message}{_where_it_raised(fn, error)}."
    hint = next((h[:1].upper() + h[1:] for fragment, h in error_hints if fragment in str(error)), "")
    if hint:
        raise ExerciseFailed(exercise, f"{head} {hint}") from None
    found = probe.explain_error(fn, reference, case, error)
    if found is not None:
        raise ExerciseFailed(exercise, f"{head} {found[1]}", found[0]) from None
    raise ExerciseFailed(exercise, head, "generic") from None


def _leaves(args: Sequence[Any], which) -> tuple[tuple, list[torch.Tensor]]:
    copies = clone_args(args)
    chosen = [a for i, a in enumerate(copies) if which is True or i in which]
    leaves = [t for t in tensors(chosen) if t.is_floating_point()]
    for t in leaves:
        t.requires_grad_(True)
    return copies, leaves


def _check_gradients(fn, reference, case: Case, exercise, gradient_hint, which) -> None:
    number, atol, rtol = case.number, case.atol, case.rtol
    copies, leaves = _leaves(case.kept, which)
    with torch.enable_grad():
        expected = weighted_gradients(reference(*copies), leaves)
        if expected is None:
            return
        copies, leaves = _leaves(case.kept, which)
        try:
            got = weighted_gradients(fn(*copies), leaves)
        except Exception as error:  # noqa: BLE001 - an error in the backward pass
            message = f"{type(error).__name__}: {str(error).split(': [')[0]}".splitlines()[0][:160]
            raise ExerciseFailed(
                exercise,
                f"on test case {number} the backward pass through your function raised {message}. "
                "An in-place change (w[...] = 0, masked_fill_, +=) of a tensor that autograd saved for the "
                "backward pass breaks it: use operations that return a new tensor (masked_fill, torch.where).",
                "in place",
            ) from None
    if got is None:
        raise ExerciseFailed(
            exercise,
            f"on test case {number} your result carries no gradient: keep the computation in PyTorch "
            "(no .detach(), .item(), .numpy() or torch.no_grad()).",
            "gradient",
        )
    for g, e in zip(got, expected):
        if torch.isnan(g).any() and not torch.isnan(e).any():
            raise ExerciseFailed(
                exercise,
                gradient_hint
                or f"on test case {number} the gradient of your result is NaN where the expected one is finite: "
                "a NaN or inf that the forward pass hides (nan_to_num, a masked_fill or torch.where after a "
                "division by zero or an exp that overflows) still flows back; keep the forward pass free of them.",
                "gradient",
            )
        diff = difference(g, e, atol, rtol)
        if diff is not None:
            zero = not g.abs().max() > 0 and bool(e.abs().max() > 0)
            raise ExerciseFailed(
                exercise,
                f"on test case {number} your values are right but their gradient is not ({diff.text}): "
                + (
                    "no gradient reaches this argument, so part of the computation is cut from autograd "
                    "(.detach(), .data, a value copied into a new tensor, torch.no_grad())."
                    if zero
                    else "part of the computation is cut from autograd (.detach(), .data), or a value the forward "
                    "pass uses is computed apart from the inputs."
                ),
                "gradient",
            )


def number_tolerance(expected: float, *, rel_tol: float = 1e-9, abs_tol: float = 0.0, significant: int | None = None):
    """How far from ``expected`` a numeric answer may be: ``rel_tol`` of its size, at least ``abs_tol``, and,
    where the question asks for ``significant`` figures, half a unit of the last of them."""
    tol = max(rel_tol * abs(expected), abs_tol)
    if significant and expected:
        tol = max(tol, 0.5 * 10 ** (math.floor(math.log10(abs(expected))) - significant + 1))
    return tol


def check_number(
    answer: Any,
    *,
    exercise: str,
    expected: float,
    rel_tol: float = 1e-9,
    abs_tol: float = 0.0,
    significant: int | None = None,
    mistakes: Sequence[tuple[str, float]] = (),
    parts: dict[str, float] | None = None,
) -> Result:
    """Check a number the learner predicted; ``mistakes`` pairs a hint with the value a usual slip gives.

    An answer within :func:`number_tolerance` of ``expected`` is right: by default the exact value (up to
    floating-point rounding); ``significant=n`` where the question asks for n significant figures. ``parts``
    names the terms a count is the sum of, so that a hint can say which one an answer leaves out or counts twice.
    """
    if answer is ... or answer is None:
        return Result(exercise, False, "not attempted yet: replace the `...` with your answer.")
    if isinstance(answer, torch.Tensor) and answer.numel() == 1:
        answer = answer.item()
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise ExerciseFailed(exercise, f"expected a number, got {describe(answer)}", "type")
    tol = number_tolerance(expected, rel_tol=rel_tol, abs_tol=abs_tol, significant=significant)
    if abs(answer - expected) <= tol:
        return Result(exercise, True, f"{answer:.6g} is right (expected {expected:.6g}).")
    for hint, wrong in mistakes:
        if abs(answer - wrong) <= number_tolerance(wrong, rel_tol=rel_tol, abs_tol=abs_tol, significant=significant):
            raise ExerciseFailed(exercise, hint)
    precision = (
        f"{significant} significant figures"
        if significant
        else "the exact value"
        if tol <= 1e-6 * abs(expected)
        else ""
    )
    found = diagnose_number.number(float(answer), float(expected), parts=parts, tolerance=precision)
    if found is not None:
        raise ExerciseFailed(exercise, f"{answer:.6g}: {found.hint}.", found.kind)
    direction = "too large" if answer > expected else "too small"
    raise ExerciseFailed(exercise, f"{answer:.6g} is {direction}.", "generic")
