"""Answer checkers for the exercises: run a learner's function on test cases and say what is wrong.

A checker compares the learner's answer with a reference on several cases. When they differ, it runs
known wrong versions ("mistakes") on the same cases; if the answer matches one of them, the hint for
that mistake is given. Otherwise the hint says which case failed and how (shape, dtype, largest error).

- A correct answer returns a :class:`Result` that displays as a tick.
- An exercise that is not attempted yet (the stub still raises ``NotImplementedError``, or the answer is
  ``...``) returns a :class:`Result` that says so, without an error: student notebooks run end to end.
- A wrong answer raises :class:`ExerciseFailed`, whose notebook display is the hint alone, with no
  traceback from inside the library or PyTorch.

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

__all__ = ["ExerciseFailed", "Result", "Mistake", "check_function", "check_number", "clone_args"]


class ExerciseFailed(AssertionError):
    """A wrong answer. Its message is the hint; notebooks show only the hint, not a traceback."""

    def __init__(self, exercise: str, hint: str):
        super().__init__(f"{exercise}: {hint}")
        self.exercise = exercise
        self.hint = hint

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


def clone_args(args: Sequence[Any]) -> tuple:
    """Copies of the arguments, so that a function that modifies its inputs cannot spoil the next check."""
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    return f"{type(x).__name__} {x!r}"[:120]


def _difference(got: Any, expected: Any, atol: float, rtol: float) -> str | None:
    """None when ``got`` equals ``expected`` within tolerance, else a sentence saying how they differ."""
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            return f"expected {len(expected)} results, got {_describe(got)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            diff = _difference(g, e, atol, rtol)
            if diff is not None:
                return f"result {i}: {diff}"
        return None
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"expected {_describe(expected)}, got {_describe(got)}"
        if got.shape != expected.shape:
            return f"expected shape {tuple(expected.shape)}, got shape {tuple(got.shape)}"
        if got.dtype == torch.bool or expected.dtype == torch.bool:
            return None if torch.equal(got, expected) else "some entries differ from the expected ones"
        if not got.is_floating_point():
            got = got.to(expected.dtype)
        got, expected = got.detach().cpu().to(torch.float64), expected.detach().cpu().to(torch.float64)
        if torch.isnan(got).any() and not torch.isnan(expected).any():
            return "your result contains NaN"
        if torch.allclose(got, expected, atol=atol, rtol=rtol, equal_nan=True):
            return None
        err = (got - expected).abs().nan_to_num(float("inf")).max().item()
        return f"values differ from the expected ones (largest absolute difference {err:.3g})"
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return f"expected a number, got {_describe(got)}"
        if math.isclose(got, expected, rel_tol=rtol, abs_tol=atol):
            return None
        return f"expected about {expected:.6g}, got {got:.6g}"
    return None if got == expected else f"expected {expected!r}, got {got!r}"


def _where_it_raised(fn: Callable, error: BaseException) -> str:
    """The line of the learner's own code that raised, if the error came from inside it."""
    recorded = getattr(error, "_attnbook_where", None)  # an error replayed by the grader (attnbook.grading.replay)
    if isinstance(recorded, str):
        return recorded
    code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)  # a checker's wrapper names the learner's fn
    if code is None:
        return ""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == code.co_filename]
    if not frames:
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
) -> Result:
    """Run ``fn`` on each case and compare with ``reference``; see the module docstring.

    ``error_hints`` maps a fragment of an exception message to a hint, for errors the usual mistakes cause.
    """
    if not callable(fn):
        raise ExerciseFailed(exercise, f"expected a function, got {_describe(fn)}")
    for number, args in enumerate(cases, start=1):
        try:
            got = fn(*clone_args(args))
        except NotImplementedError:
            return Result(exercise, False, "not attempted yet: replace the `raise NotImplementedError` with your code.")
        except Exception as error:  # the learner's code raised: say what and where, not a traceback
            message = f"{type(error).__name__}: {error}".splitlines()[0]
            hint = next((h[:1].upper() + h[1:] for fragment, h in error_hints if fragment in str(error)), "")
            raise ExerciseFailed(
                exercise,
                f"on test case {number} your function raised {message}{_where_it_raised(fn, error)}."
                + (f" {hint}" if hint else ""),
            ) from None
        expected = reference(*clone_args(args))
        diff = _difference(got, expected, atol, rtol)
        if diff is None:
            continue
        for mistake in mistakes:
            try:
                wrong = mistake.wrong(*clone_args(args))
            except Exception:  # this mistake cannot even run on this case, so it is not the one
                continue
            if _difference(got, wrong, atol, rtol) is None:
                raise ExerciseFailed(exercise, mistake.hint)
        raise ExerciseFailed(exercise, f"on test case {number}, {diff}.")
    return Result(exercise, True, success)


def check_number(
    answer: Any,
    *,
    exercise: str,
    expected: float,
    rel_tol: float = 0.05,
    abs_tol: float = 0.0,
    mistakes: Sequence[tuple[str, float]] = (),
) -> Result:
    """Check a number the learner predicted; ``mistakes`` pairs a hint with the value a usual slip gives."""
    if answer is ... or answer is None:
        return Result(exercise, False, "not attempted yet: replace the `...` with your answer.")
    if isinstance(answer, torch.Tensor) and answer.numel() == 1:
        answer = answer.item()
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise ExerciseFailed(exercise, f"expected a number, got {_describe(answer)}")
    if math.isclose(answer, expected, rel_tol=rel_tol, abs_tol=abs_tol):
        return Result(exercise, True, f"{answer:.6g} is right (expected {expected:.6g}).")
    for hint, wrong in mistakes:
        if math.isclose(answer, wrong, rel_tol=rel_tol, abs_tol=abs_tol):
            raise ExerciseFailed(exercise, hint)
    direction = "too large" if answer > expected else "too small"
    raise ExerciseFailed(exercise, f"{answer:.6g} is {direction}.")
