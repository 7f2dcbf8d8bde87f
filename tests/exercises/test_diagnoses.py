"""The checkers' diagnoses: each kind of wrong answer gets a hint that names its kind of mistake.

Each test hands check_function (or check_number) a reference and an answer with one kind of mistake that no
listed mistake matches, and asserts the kind the hint is filed under (ExerciseFailed.kind) and the words
that say it to a learner (attnbook.exercises.diagnose, diagnose_number, diagnose_error and probe).
"""

import math

import pytest
import torch
from attnbook.exercises import ExerciseFailed, check_function, check_number

g = torch.Generator().manual_seed(0)


def randn(*shape):
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def failure(fn, reference, cases, **options) -> ExerciseFailed:
    with pytest.raises(ExerciseFailed) as info:
        check_function(fn, exercise="x", reference=reference, cases=cases, **options)
    return info.value


def assert_diagnosis(kind, fragment, fn, reference, cases, **options):
    failed = failure(fn, reference, cases, **options)
    assert failed.kind == kind, failed.hint
    assert fragment in failed.hint, failed.hint


def softmax(s):
    return torch.softmax(s, dim=-1)


def attention(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


ROWS = [(randn(3, 5),), (randn(2, 4, 6),)]
QKV = [(randn(3, 3, 4), randn(3, 5, 4), randn(3, 5, 6))]


# --- the form of the result -------------------------------------------------------------------------------


def test_dtype_and_type():
    assert_diagnosis("dtype", "dtype torch.float32 where torch.float64", lambda s: softmax(s).float(), softmax, ROWS)
    assert_diagnosis("type", "returns a list", lambda s: softmax(s).tolist(), softmax, ROWS)
    assert_diagnosis("type", "it should return 2 results", lambda s: s, lambda s: (s, s), ROWS)


def test_shapes():
    square = [(randn(4, 4),)]
    assert_diagnosis("shape", "last two dimensions are swapped", lambda s: softmax(s).T, softmax, [(randn(3, 5),)])
    one = [(randn(1, 3, 5),)]
    assert_diagnosis("shape", "dimension 0 of size 1 is gone (squeeze()", lambda s: softmax(s).squeeze(), softmax, one)
    assert_diagnosis(
        "shape", "dimension 1 (of size 5) is missing", lambda s: softmax(s).sum(1), softmax, [(randn(3, 5),)]
    )
    assert_diagnosis("shape", "extra dimension of size 1", lambda s: softmax(s)[None], softmax, square)
    sizes = "dimension 2 has size 4 instead of 6, the size of dimension -1 of your"
    assert_diagnosis("shape", sizes, lambda q, k, v: attention(q, k, k), attention, QKV)
    rearranged = "the same number of entries in another arrangement"
    assert_diagnosis("shape", rearranged, lambda s: softmax(s).reshape(3, 2, 4), softmax, [(randn(2, 3, 4),)])


def test_a_count_returned_as_a_float_when_the_exercise_wants_an_int():
    assert_diagnosis(
        "count type",
        "a count is a whole number",
        lambda n, p: n / p + 1,
        lambda n, p: n // p + 1,
        [(8, 2)],
        integers=True,
    )
    assert check_function(lambda n, p: n / p + 1, exercise="x", reference=lambda n, p: n // p + 1, cases=[(8, 2)])


# --- the values ----------------------------------------------------------------------------------------------


def test_nan_overflow_and_empty_rows():
    assert_diagnosis("NaN", "NaN where the expected one is finite", lambda s: (-s.abs() - 1).log(), lambda s: s, ROWS)
    big = [(randn(2, 5) * 1000,)]
    naive = lambda s: s.exp() / s.exp().sum(-1, keepdim=True)  # noqa: E731
    assert_diagnosis("overflow", "exp of a large number overflows", naive, softmax, big)
    mask = torch.tensor([[True, False, True], [False, False, False]])

    def safe(s, m):
        return torch.softmax(s.masked_fill(~m, float("-inf")), -1).nan_to_num(0.0)

    def unsafe(s, m):
        return torch.softmax(s.masked_fill(~m, float("-inf")), -1)

    assert_diagnosis("edge case", "rows where every position is masked", unsafe, safe, [(randn(2, 3), mask)])
    ones = lambda s, m: safe(s, m).masked_fill(~m.any(-1, keepdim=True), 1 / 3)  # noqa: E731
    assert_diagnosis(
        "edge case", "right except on the rows where every position is masked", ones, safe, [(randn(2, 3), mask)]
    )


def test_transposed_scaled_and_signed_results():
    square = [(randn(4, 4),)]
    assert_diagnosis("transposed", "the transpose of the expected one", lambda s: (s * 2).T, lambda s: s * 2, square)
    assert_diagnosis("factor", "times 2", lambda s: s * 4, lambda s: s * 2, ROWS)
    scale = "times 1/2 (1/sqrt(4), where 4 is a size of your inputs)"
    assert_diagnosis("factor", scale, lambda q, k, v: attention(q, k, v) / 2, attention, QKV)
    assert_diagnosis("sign", "opposite sign", lambda s: -2 * s, lambda s: s * 2, ROWS)
    assert_diagnosis("zero", "all zeros", lambda s: s * 0, lambda s: s * 2, ROWS)


def test_weights_along_the_wrong_axis_or_not_normalised():
    assert_diagnosis("axis", "sum to 1 along dimension -2", lambda s: torch.softmax(s, 0), softmax, [(randn(3, 5),)])
    assert_diagnosis("normalisation", "do not sum to 1", lambda s: s.exp(), softmax, ROWS)
    rows = "each row of your result is the expected row times a factor of its own"
    rms = lambda x: x / x.pow(2).mean(-1, keepdim=True).sqrt()  # noqa: E731
    assert_diagnosis("row factor", rows, lambda x: x / (x.pow(2).mean(-1, keepdim=True) + 1).sqrt(), rms, ROWS)


def test_a_term_too_many_or_too_few():
    block = lambda x, w: x + x @ w  # noqa: E731
    assert_diagnosis("term", "minus your first argument", lambda x, w: x @ w, block, [(randn(3, 4), randn(4, 4))])
    assert_diagnosis("term", "plus the constant 1", lambda s: s * 2 + 1, lambda s: s * 2, ROWS)


def test_off_by_one_position_and_integers():
    shifted = [(randn(2, 6),)]
    assert_diagnosis("off by one", "shifted by one position", lambda s: s.roll(1, -1) * 2, lambda s: s * 2, shifted)
    counts = lambda n: torch.arange(n) * 2  # noqa: E731
    assert_diagnosis("off by one", "the expected one +1", lambda n: torch.arange(n) * 2 + 1, counts, [(5,)])


def test_masks():
    causal = lambda T: torch.ones(T, T, dtype=torch.bool).tril()  # noqa: E731
    assert_diagnosis("inverted", "inverted", lambda T: ~causal(T), causal, [(4,)])
    assert_diagnosis("transposed", "transpose of the expected one", lambda T: causal(T).T, causal, [(4,)])
    assert_diagnosis("diagonal", "except on its diagonal", lambda T: causal(T).tril(-1), causal, [(4,)])


# --- probes: the answer called again --------------------------------------------------------------------


def test_an_answer_right_on_each_example_but_not_on_the_batch():
    def global_max(s):
        e = (s - s.max()).exp()
        return e / e.sum(-1, keepdim=True)

    rows = [(torch.tensor([[1000.0, 999.0], [0.0, 1.0]], dtype=torch.float64),)]
    assert_diagnosis("batch", "right on each example of this case's batch taken alone", global_max, softmax, rows)

    def batch_of_one(x):
        return x.view(1, x.shape[-1]) * 2

    assert_diagnosis("batch", "runs right on each example", batch_of_one, lambda x: x * 2, [(randn(3, 4),)])


def test_swapped_and_unused_arguments():
    assert_diagnosis(
        "swapped",
        "(k) where your third argument (v) belongs",
        lambda q, k, v: attention(q, v, k),
        attention,
        [(randn(3, 4), randn(5, 4), randn(5, 4))],
    )

    def temperature(s, t):
        return torch.softmax(s / t, -1)

    assert_diagnosis("swapped", "swapped", lambda s, t: torch.softmax(t / s, -1), temperature, [(randn(2, 3), 2.0)])
    assert_diagnosis(
        "unused",
        "does not change when your second argument (t) changes",
        lambda s, t: softmax(s),
        temperature,
        [(randn(2, 3), 2.0)],
    )


def test_the_argument_whose_use_is_wrong():
    def linear(x, W, b):
        return x @ W + b

    found = "right when your third argument (b) is all zeros"
    assert_diagnosis("argument", found, lambda x, W, b: x @ W - b, linear, [(randn(3, 4), randn(4, 2), randn(2))])


def test_which_named_result_is_wrong():
    def step(x, y):
        return x + y, x * y

    names = ("the sum", "the product")
    found = "your the sum is right, but not your the product"
    assert_diagnosis("part", found, lambda x, y: (x + y, x * y + x.sin()), step, [(randn(3), randn(3))], names=names)


def test_float32_only_and_large_values():
    cancel = lambda x: (x + 1e5) - 1e5  # noqa: E731  exact in float64, rounded in float32
    assert_diagnosis(
        "float32",
        "right on test case 1 in float64 but not on the same inputs in float32",
        cancel,
        lambda x: x,
        [(randn(5),)],
    )


def test_error_meanings():
    assert_diagnosis(
        "error", "the sizes of a matrix product do not line up", lambda q, k, v: attention(q, k.mT, v), attention, QKV
    )
    assert_diagnosis("error", "a dim this input does not have", lambda s: torch.softmax(s, 3), softmax, ROWS)


def test_gradients():
    assert_diagnosis("gradient", "carries no gradient", lambda s: softmax(s).detach(), softmax, ROWS, gradients=True)
    cut = lambda s: softmax(s.detach()) + 0 * s  # noqa: E731
    assert_diagnosis("gradient", "your values are right but their gradient is not", cut, softmax, ROWS, gradients=True)


def test_the_exercises_own_diagnosis_comes_first():
    def hook(got, expected, s):
        return "a hook's words." if got.shape == expected.shape else None

    assert_diagnosis(
        "mistake", "on test case 1, a hook's words.", lambda s: s * 4, lambda s: s * 2, ROWS, explain=[hook]
    )


# --- numbers ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "kind", "fragment"),
    [
        (-64.0, "sign", "wrong sign"),
        (128.0, "factor", "twice the expected"),
        (72.0, "factor", "9/8 of the expected"),
        (65.0, "off by one", "off by +1"),
        (4096.0, "square", "the square of the expected"),
        (64.5, "near", "close, but the question asks for the exact value"),
        (64 - 12.0, "term", "leaves out the biases (12)"),
        (64 / 2**11, "factor", "2^11 times too small"),
        (64e6, "factor", "10^6 times too large"),
    ],
)
def test_number_diagnoses(answer, kind, fragment):
    with pytest.raises(ExerciseFailed) as info:
        check_number(answer, exercise="n", expected=64.0, parts={"the biases": 12})
    assert info.value.kind == kind and fragment in info.value.hint, info.value.hint


def test_numbers_a_function_returns_are_diagnosed_with_its_arguments():
    assert_diagnosis(
        "factor",
        "1/8 times the expected one, where 8 is one of the inputs",
        lambda n, d: n,
        lambda n, d: n * d,
        [(5.0, 8)],
    )
    parts = lambda n, d: {"the d term": d}  # noqa: E731
    assert_diagnosis("term", "leaves out the d term", lambda n, d: n * d, lambda n, d: n * d + d, [(5, 8)], parts=parts)
