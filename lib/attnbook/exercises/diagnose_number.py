"""What kind of mistake a wrong number shows: a named part of a count left out or counted twice, the sign,
a factor (2, an input, a power of 2 or 10, a simple fraction such as 9/8), off by one, the square or the
square root, or a near miss outside the precision the question asks for. Used by
:func:`attnbook.exercises.check_number` and for the numbers a function returns."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from .diagnose import Diagnosis, integer_arguments

__all__ = ["number"]


def number(
    got: float, expected: float, *, args: Sequence[Any] = (), parts: dict[str, float] | None = None, tolerance=""
) -> Diagnosis | None:
    """A diagnosis of a wrong number: a named part, a sign, a factor, an offset, a square, a near miss."""
    if not (math.isfinite(got) and math.isfinite(expected)) or expected == 0:
        return None
    diff = got - expected

    def near(a, b):
        return abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1e-300)

    for name, part in (parts or {}).items():
        for k, words in ((-1, "leaves out"), (1, "counts twice"), (-2, "leaves out twice"), (2, "counts three times")):
            if part and near(diff, k * part):
                return Diagnosis("term", f"your answer {words} {name} ({part:,.6g})")
    if near(got, -expected):
        return Diagnosis("sign", "your answer has the wrong sign")
    if expected > 0 and got > 0:
        if near(got, expected**2) or near(got**2, expected):
            return Diagnosis(
                "square", f"your answer is the {'square' if got > expected else 'square root'} of the expected one"
            )
    ratio = got / expected
    for n in sorted(integer_arguments(args)):
        for value, words in (
            (n, f"{n}"),
            (1 / n, f"1/{n}"),
            (math.sqrt(n), f"sqrt({n})"),
            (1 / math.sqrt(n), f"1/sqrt({n})"),
        ):
            if near(ratio, value):
                return Diagnosis(
                    "factor",
                    f"your answer is {words} times the expected one, where {n} is one of the inputs: a factor too "
                    "many or too few",
                )
    for k in range(2, 1025):
        if near(ratio, k) or near(ratio * k, 1):
            words = {2: "twice", 4: "four times"}.get(k, f"{k} times") if ratio > 1 else f"1/{k} of"
            return Diagnosis(
                "factor", f"your answer is {words} the expected one{_factor_meaning(k)}: a factor too many or too few"
            )
    for base, unit in ((2, "2^10 = 1024 between KiB, MiB and GiB"), (10, "1000 between thousands, millions, billions")):
        exponent = round(math.log(ratio, base)) if ratio > 0 else 0
        if abs(exponent) >= 2 and near(ratio, float(base) ** exponent):
            size = f"{base}^{abs(exponent)}"
            return Diagnosis(
                "factor",
                f"your answer is {size} times too {'large' if exponent > 0 else 'small'}: a size squared or left "
                f"out, a power (**) written as a product, or a unit ({unit})",
            )
    fraction = Fraction(ratio).limit_denominator(16)
    if 1 < fraction.numerator <= 64 and 1 < fraction.denominator and near(ratio, float(fraction)):
        p, q = fraction.numerator, fraction.denominator
        return Diagnosis(
            "factor",
            f"your answer is {p}/{q} of the expected one: a factor of your product is off (a {p} where a {q} "
            "belongs, or a count one too large or too small)",
        )
    if expected == int(expected) and got == int(got) and 1 <= abs(diff) <= 3:
        return Diagnosis(
            "off by one",
            f"your answer is off by {diff:+g}: a count with one too many or too few (an end counted twice, "
            "a +1 left out)",
        )
    if abs(diff) < 0.05 * abs(expected):
        return Diagnosis(
            "near",
            f"your answer is {abs(diff):,.6g} {'above' if diff > 0 else 'below'} the expected value (a relative "
            f"difference of {abs(diff) / abs(expected):.2g}): close, but the question asks for "
            f"{tolerance or 'the exact value'}; "
            "a constant slightly off (a 63 for a 64), a rounding too early, or a small term left out or counted twice",
        )
    return None


def _factor_meaning(k: int) -> str:
    return {
        2: " (for instance a multiply-add, which counts as 2 operations, or a term counted twice)",
        8: " (for instance bits for bytes, or a count of 8 used twice or left out)",
        1024: " (for instance 1024, not 1000, between KiB, MiB and GiB)",
    }.get(k, "")
