"""What the tests of the exercise checkers share: a stub answer and the check that a wrong one gets its hint."""

import pytest
from attnbook.exercises import ExerciseFailed


def stub(*args):
    """An answer cell that was not replaced: the checkers must report 'not attempted', not fail."""
    raise NotImplementedError


def assert_fails_with(check, answer, fragment):
    """``check(answer)`` raises ExerciseFailed, and its hint contains ``fragment``."""
    with pytest.raises(ExerciseFailed) as info:
        check(answer)
    assert fragment in info.value.hint, info.value.hint
