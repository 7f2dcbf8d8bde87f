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


def test_arguments_are_copied_between_learner_and_reference():
    def mutating(x):
        x.mul_(2)
        return x

    assert check_function(mutating, exercise="double", reference=reference, cases=CASES)


def test_check_number():
    assert check_number(8.0, exercise="n", expected=8.0)
    assert check_number(torch.tensor(8.05), exercise="n", expected=8.0, rel_tol=0.01)
    with pytest.raises(ExerciseFailed, match="variance"):
        check_number(64, exercise="n", expected=8.0, mistakes=[("that is the variance", 64.0)])
    with pytest.raises(ExerciseFailed, match="too large"):
        check_number(9.5, exercise="n", expected=8.0)
    with pytest.raises(ExerciseFailed, match="expected a number, got str"):
        check_number("8", exercise="n", expected=8.0)
