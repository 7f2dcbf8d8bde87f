"""attnbook.exercises: the checker framework."""

import pytest
import torch
from attnbook.exercises import ExerciseFailed, Mistake, Result, check_function, check_number


def reference(x):
    return x * 2


CASES = [(torch.arange(3.0),), (torch.ones(2, 2),)]


def test_right_answer_passes():
    result = check_function(lambda x: x + x, exercise="double", reference=reference, cases=CASES)
    assert isinstance(result, Result) and result.passed and bool(result)
    assert repr(result).startswith("\u2713 double")


def test_stub_is_not_attempted_and_not_an_error():
    def stub(x):
        raise NotImplementedError

    result = check_function(stub, exercise="double", reference=reference, cases=CASES)
    assert not result and "not attempted" in result.message
    assert not check_number(..., exercise="n", expected=1.0)


def test_known_mistake_gets_its_hint():
    with pytest.raises(ExerciseFailed, match="you squared"):
        check_function(
            lambda x: x * x,
            exercise="double",
            reference=reference,
            cases=[(torch.tensor([3.0]),)],
            mistakes=[Mistake("you squared instead of doubling", lambda x: x * x)],
        )


def test_unknown_mistake_says_what_differs():
    with pytest.raises(ExerciseFailed, match=r"on test case 1, values differ .*largest absolute difference 1"):
        check_function(lambda x: x * 2 + 1, exercise="double", reference=reference, cases=CASES)
    with pytest.raises(ExerciseFailed, match=r"expected shape \(3,\), got shape \(1, 3\)"):
        check_function(lambda x: (x * 2)[None], exercise="double", reference=reference, cases=CASES)
    with pytest.raises(ExerciseFailed, match=r"expected a tensor of shape \(3,\) .* got list"):
        check_function(lambda x: [1, 2, 3], exercise="double", reference=reference, cases=CASES)
    with pytest.raises(ExerciseFailed, match=r"your result contains NaN"):
        check_function(lambda x: x * float("nan"), exercise="double", reference=reference, cases=CASES)


def test_learner_exception_is_reported_with_its_line_not_a_traceback():
    def broken(x):
        y = x.reshape(7)
        return y

    with pytest.raises(ExerciseFailed) as info:
        check_function(
            broken,
            exercise="double",
            reference=reference,
            cases=CASES,
            error_hints=[("invalid for input of size", "check the shapes")],
        )
    message = str(info.value)
    assert "raised RuntimeError" in message and "`y = x.reshape(7)`" in message and "Check the shapes" in message
    rendered = info.value._render_traceback_()
    assert rendered[0].startswith("\u2717 double") and all("File" not in line for line in rendered)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_an_answer_that_changes_the_callers_tensor_is_rejected_even_when_its_result_is_right():
    def mutating(x):
        x.mul_(2)
        return x

    with pytest.raises(ExerciseFailed, match="changed its first argument in place"):
        check_function(mutating, exercise="double", reference=reference, cases=CASES)

    def in_a_list(xs):
        xs[0].mul_(2)
        return xs[0]

    with pytest.raises(ExerciseFailed, match="changed its first argument in place"):
        check_function(in_a_list, exercise="double", reference=lambda xs: xs[0] * 2, cases=[([torch.ones(2)],)])


def test_dtypes_are_compared():
    with pytest.raises(ExerciseFailed, match="dtype torch.float64 where torch.float32 is expected"):
        check_function(lambda x: (x * 2).double(), exercise="double", reference=reference, cases=CASES)
    # float64-only code: right on float64 cases, caught on their float32 copies
    f64 = [(torch.arange(3.0, dtype=torch.float64),)]
    with pytest.raises(ExerciseFailed, match="dtype torch.float64 where torch.float32"):
        check_function(lambda x: x.double() * 2, exercise="double", reference=reference, cases=f64)
    with pytest.raises(ExerciseFailed, match=r"expected integers \(torch.long\)"):
        check_function(lambda n: torch.arange(n) * 1.0, exercise="range", reference=torch.arange, cases=[(3,)])
    # without a float input, any float dtype will do
    assert check_function(
        lambda n: torch.ones(n), exercise="ones", reference=lambda n: torch.ones(n).double(), cases=[(3,)]
    )


def test_gradients_are_compared_when_asked():
    def softmax(x):
        return torch.softmax(x, -1)

    def detached(x):
        return torch.softmax(x, -1).detach()

    def nan_gradient(x):  # the value is right; sqrt(0) has an infinite slope, times 0 is NaN
        return torch.softmax(x, -1) + 0 * torch.sqrt(x - x)

    def inplace_saved(x):
        w = torch.exp(x)
        w /= w.sum(-1, keepdim=True)
        return w

    cases = [(torch.randn(2, 3, dtype=torch.float64),)]
    assert check_function(softmax, exercise="softmax", reference=softmax, cases=cases, gradients=True)
    with pytest.raises(ExerciseFailed, match="carries no gradient"):
        check_function(detached, exercise="softmax", reference=softmax, cases=cases, gradients=True)
    with pytest.raises(ExerciseFailed, match="NaN where"):
        check_function(
            nan_gradient,
            exercise="softmax",
            reference=softmax,
            cases=cases,
            gradients=True,
            gradient_hint="NaN where the reference is finite",
        )
    with pytest.raises(ExerciseFailed, match="backward pass through your function raised RuntimeError"):
        check_function(inplace_saved, exercise="softmax", reference=softmax, cases=cases, gradients=True)


def test_check_number():
    assert check_number(8.0, exercise="n", expected=8.0)
    assert check_number(torch.tensor(8.05), exercise="n", expected=8.0, rel_tol=0.01)
    with pytest.raises(ExerciseFailed, match="variance"):
        check_number(64, exercise="n", expected=8.0, mistakes=[("that is the variance", 64.0)])
    with pytest.raises(ExerciseFailed, match="too large"):
        check_number(9.5, exercise="n", expected=8.0)
    with pytest.raises(ExerciseFailed, match="expected a number, got str"):
        check_number("8", exercise="n", expected=8.0)
