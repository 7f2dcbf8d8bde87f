"""Answer checkers for the exercises: run a learner's function on test cases and say what is wrong.

A checker compares the learner's answer with a reference on several cases. When they differ, it runs
known wrong versions ("mistakes") on the same cases; if the answer matches one of them, the hint for
that mistake is given. Otherwise the hint says which case failed and how (shape, dtype, largest error).

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

__all__ = [
    "ExerciseFailed",
    "Result",
    "Mistake",
    "check_function",
    "check_number",
    "clone_args",
    "gradient_weights",
    "weighted_gradients",
]


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
    """Copies of the arguments (tensors, and the tensors in lists and tuples), to compare or to hand on."""

    def copy(a):
        if isinstance(a, torch.Tensor):
            return a.detach().clone()
        if isinstance(a, (tuple, list)):
            return type(a)(copy(v) for v in a)
        return a

    return tuple(copy(a) for a in args)


def gradient_weights(t: torch.Tensor) -> torch.Tensor:
    """The fixed weights w of the sum (w * out).sum() whose gradient a checker compares: one set per shape."""
    seed = sum((i + 1) * 7919 * int(n) for i, n in enumerate(t.shape)) % 2**31
    g = torch.Generator().manual_seed(seed)
    return torch.randn(tuple(t.shape), generator=g, dtype=torch.float64).to(dtype=t.dtype, device=t.device)


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for item in x for t in _tensors(item)]
    return []


def weighted_gradients(result: Any, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor] | None:
    """The gradients of sum((gradient_weights(o) * o).sum()) over the float tensors o of ``result`` with
    respect to ``inputs`` (zeros for an input the result does not depend on); None if nothing requires grad."""
    outputs = [o for o in _tensors(result) if o.is_floating_point() and o.requires_grad]
    if not outputs:
        return None
    total = sum((gradient_weights(o) * o).sum() for o in outputs)
    grads = torch.autograd.grad(total, list(inputs), allow_unused=True)
    return [torch.zeros_like(x) if g is None else g for x, g in zip(inputs, grads)]


def _as_float32(args: Sequence[Any]) -> tuple | None:
    """The case with its float64 tensors in float32, or None if it has none."""
    if not any(isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in _tensors(list(args))):
        return None

    def convert(x):
        if isinstance(x, torch.Tensor):
            return x.to(torch.float32) if x.dtype == torch.float64 else x
        if isinstance(x, (tuple, list)):
            return type(x)(convert(v) for v in x)
        return x

    return tuple(convert(a) for a in args)


def _changed(before: Sequence[Any], after: Sequence[Any]) -> int | None:
    """The position (from 1) of the first argument whose tensors the call changed, or None."""
    for number, (b, a) in enumerate(zip(before, after), start=1):
        for x, y in zip(_tensors(b), _tensors(a)):
            if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(x.nan_to_num(0.5), y.nan_to_num(0.5)):
                return number
    return None


_ORDINAL = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", 6: "sixth"}


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
        if got.dtype != expected.dtype:
            return _dtype_difference(got.dtype, expected.dtype)
        if got.dtype == torch.bool or not got.is_floating_point():
            return None if torch.equal(got, expected) else "some entries differ from the expected ones"
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


def _dtype_difference(got: torch.dtype, expected: torch.dtype) -> str:
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
    kind = {torch.long: "integers (torch.long)"}.get(expected, str(expected))
    return f"your result has dtype {got}; expected {kind}"


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
    float32: bool = True,
    gradients: bool | Sequence[int] = False,
    gradient_hint: str = "",
) -> Result:
    """Run ``fn`` on each case and compare with ``reference``; see the module docstring.

    ``error_hints`` maps a fragment of an exception message to a hint, for errors the usual mistakes cause.
    ``float32`` adds a float32 copy of every case with float64 tensors (compared at float32's precision);
    ``gradients`` compares the gradients of a fixed weighted sum of the result with respect to every float
    tensor argument (True) or to the arguments at these positions (from 0); ``gradient_hint`` is the hint
    for a NaN gradient where the reference's is finite.
    """
    if not callable(fn):
        raise ExerciseFailed(exercise, f"expected a function, got {_describe(fn)}")
    every = [(clone_args(args), atol, rtol) for args in cases]  # copies the answer may spoil, not the cases
    if float32:
        every += [(c, max(atol, 1e-4), max(rtol, 1e-3)) for args in cases for c in [_as_float32(args)] if c]
        every = [case for case in every if _keeps_float32(reference, case[0])]
    checked = []
    for number, (args, atol_, rtol_) in enumerate(every, start=1):
        kept = clone_args(args)
        got = _call(fn, args, exercise, number, error_hints)
        if isinstance(got, Result):
            return got
        changed = _changed(kept, args)
        if changed is not None:
            raise ExerciseFailed(
                exercise,
                f"your function changed its {_ORDINAL.get(changed, f'argument number {changed}, the')} argument in "
                "place: the caller's tensor is no longer what it was. Work on a copy (x.clone()) or use operations "
                "that return a new tensor (masked_fill, not masked_fill_; x = x / t, not x /= t).",
            )
        expected = reference(*clone_args(kept))
        if not isinstance(fn, torch.nn.Module) and not any(t.is_floating_point() for t in _tensors(list(kept))):
            got = _like(got, expected)  # a function of sizes alone (an encoding, a mask): any float dtype will do
        diff = _difference(got, expected, atol_, rtol_)
        if diff is not None:
            for mistake in mistakes:
                try:
                    wrong = mistake.wrong(*clone_args(kept))
                except Exception:  # this mistake cannot even run on this case, so it is not the one
                    continue
                if _difference(got, wrong, atol_, rtol_) is None:
                    raise ExerciseFailed(exercise, mistake.hint)
            raise ExerciseFailed(exercise, f"on test case {number}, {diff}.")
        checked.append((number, kept, atol_, rtol_))
    for number, kept, atol_, rtol_ in checked if gradients else ():  # once every value is right
        _check_gradients(fn, reference, kept, exercise, number, atol_, rtol_, gradient_hint, gradients)
    return Result(exercise, True, success)


def _keeps_float32(reference: Callable, args: Sequence[Any]) -> bool:
    """A case in float64 always counts; its float32 copy only where the reference gives float32 for it."""
    if not any(t.dtype == torch.float32 for t in _tensors(list(args))):
        return True
    try:
        out = reference(*clone_args(args))
    except Exception:  # noqa: BLE001 - a reference that only takes float64 (modules of that dtype in the case)
        return False
    return all(t.dtype != torch.float64 for t in _tensors(out))


def _like(got: Any, expected: Any) -> Any:
    """``got`` with each float tensor in the float dtype of the corresponding tensor of ``expected``."""
    if isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor):
        both = got.is_floating_point() and expected.is_floating_point()
        return got.to(expected.dtype) if both else got
    if isinstance(got, (tuple, list)) and isinstance(expected, (tuple, list)) and len(got) == len(expected):
        return type(got)(_like(g, e) for g, e in zip(got, expected))
    return got


def _call(fn: Callable, args: Sequence[Any], exercise: str, number: int, error_hints) -> Any:
    """``fn(*args)``; a Result for the stub, ExerciseFailed (with where and a hint) for an error."""
    try:
        return fn(*args)
    except NotImplementedError as error:
        if not str(error):  # the stub's bare `raise NotImplementedError`, not an operation PyTorch lacks
            return Result(exercise, False, "not attempted yet: replace the `raise NotImplementedError` with your code.")
        return _raised(fn, error, exercise, number, error_hints)
    except Exception as error:  # the learner's code raised: say what and where, not a traceback
        return _raised(fn, error, exercise, number, error_hints)


def _raised(fn: Callable, error: Exception, exercise: str, number: int, error_hints) -> Any:
    message = f"{type(error).__name__}: {error}".splitlines()[0]
    hint = next((h[:1].upper() + h[1:] for fragment, h in error_hints if fragment in str(error)), "")
    raise ExerciseFailed(
        exercise,
        f"on test case {number} your function raised {message}{_where_it_raised(fn, error)}."
        + (f" {hint}" if hint else ""),
    ) from None


def _leaves(args: Sequence[Any], which) -> tuple[tuple, list[torch.Tensor]]:
    copies = clone_args(args)
    chosen = [a for i, a in enumerate(copies) if which is True or i in which]
    leaves = [t for t in _tensors(chosen) if t.is_floating_point()]
    for t in leaves:
        t.requires_grad_(True)
    return copies, leaves


def _check_gradients(fn, reference, args, exercise, number, atol, rtol, gradient_hint, which) -> None:
    copies, leaves = _leaves(args, which)
    with torch.enable_grad():
        expected = weighted_gradients(reference(*copies), leaves)
        if expected is None:
            return
        copies, leaves = _leaves(args, which)
        try:
            got = weighted_gradients(fn(*copies), leaves)
        except Exception as error:  # noqa: BLE001 - an error in the backward pass
            message = f"{type(error).__name__}: {str(error).split(': [')[0]}".splitlines()[0][:160]
            raise ExerciseFailed(
                exercise,
                f"on test case {number} the backward pass through your function raised {message}. "
                "An in-place change (w[...] = 0, masked_fill_, +=) of a tensor that autograd saved for the "
                "backward pass breaks it: use operations that return a new tensor (masked_fill, torch.where).",
            ) from None
    if got is None:
        raise ExerciseFailed(
            exercise,
            f"on test case {number} your result carries no gradient: keep the computation in PyTorch "
            "(no .detach(), .item(), .numpy() or torch.no_grad()).",
        )
    for g, e in zip(got, expected):
        if torch.isnan(g).any() and not torch.isnan(e).any():
            raise ExerciseFailed(
                exercise, gradient_hint or f"on test case {number} the gradient of your result is NaN."
            )
        diff = _difference(g, e, atol, rtol)
        if diff is not None:
            raise ExerciseFailed(exercise, f"on test case {number}, the gradient of your result is wrong: {diff}.")


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
