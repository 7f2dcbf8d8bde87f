"""Synthetic tasks: digit strings to copy, reverse or shift, dates to rewrite in ISO form, the adding
problem (Hochreiter & Schmidhuber 1997, in the form later papers use), and real words against their letters
shuffled.

Chapters: sequence-to-sequence and Bahdanau attention (03: digits, dates); LSTM and GRU (02: the adding
problem); pretraining (13: the words of a text, the shuffled-word task).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from datetime import date, timedelta

import torch

from .. import _checks

__all__ = ["digit_pairs", "date_pairs", "adding_problem", "ADDING_BASELINE_MSE"]


def digit_pairs(n: int, min_len: int, max_len: int, *, task: str = "reverse", seed: int = 0) -> list[tuple[str, str]]:
    """``n`` random digit strings with lengths uniform in [min_len, max_len], and their transformation.

    task: "copy" (the string itself), "reverse" (the digits in reverse order) or "add1" (each digit plus
    one, modulo 10). The length is what the bottleneck experiment controls.

    >>> digit_pairs(2, 3, 5, seed=1)
    [('914', '419'), ('777', '777')]
    """
    transforms = {
        "copy": lambda s: s,
        "reverse": lambda s: s[::-1],
        "add1": lambda s: "".join(str((int(c) + 1) % 10) for c in s),
    }
    if task not in transforms:
        raise ValueError(f"task must be one of {sorted(transforms)}, got {task!r}")
    for name, value in (("n", n), ("min_len", min_len), ("max_len", max_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "n" else 1):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if min_len > max_len:
        raise ValueError(f"min_len must be <= max_len, got min_len={min_len}, max_len={max_len}")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s = "".join(rng.choice("0123456789") for _ in range(rng.randint(min_len, max_len)))
        out.append((s, transforms[task](s)))
    return out


_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_DATE_FORMATS = {
    "long": lambda d: f"{_MONTHS[d.month - 1]} {d.day}, {d.year}",  # August 3, 1992
    "day_first": lambda d: f"{d.day} {_MONTHS[d.month - 1]} {d.year}",  # 3 August 1992
    "numeric": lambda d: f"{d.day:02d}.{d.month:02d}.{d.year}",  # 03.08.1992
}


def date_pairs(
    n: int,
    *,
    formats: Sequence[str] = ("long", "day_first", "numeric"),
    years: tuple[int, int] = (1900, 2099),
    seed: int = 0,
) -> list[tuple[str, str]]:
    """``n`` random dates written for people, and the same dates in ISO form: a task that reorders its input.

    Formats: "long" ("August 3, 1992"), "day_first" ("3 August 1992"), "numeric" ("03.08.1992"); the
    target is always "1992-08-03" (year, month, day), so the output order differs from the input order.

    >>> date_pairs(1, formats=["long"], seed=3)
    [('May 25, 1985', '1985-05-25')]
    """
    formats = _checks.texts("formats", formats, what=f"a list of format names from {sorted(_DATE_FORMATS)}")
    unknown = [f for f in formats if f not in _DATE_FORMATS]
    if not formats or unknown:
        raise ValueError(f"formats must be a non-empty list from {sorted(_DATE_FORMATS)}, got {list(formats)}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    years = _checks.int_pair("years", years, what="(first, last)")
    if years[1] > 9999:
        raise ValueError(f"years must lie in [1, 9999] (what datetime can write), got {years}")
    first, last = date(years[0], 1, 1), date(years[1], 12, 31)
    if first > last:
        raise ValueError(f"years must be (first, last) with first <= last, got {years}")
    rng = random.Random(seed)
    span = (last - first).days
    out = []
    for _ in range(n):
        d = first + timedelta(days=rng.randint(0, span))
        out.append((_DATE_FORMATS[rng.choice(list(formats))](d), d.isoformat()))
    return out


ADDING_BASELINE_MSE = 1.0 / 6.0
"""Test MSE of always predicting the mean target 1: the variance of the sum of two U(0, 1) values, 2/12."""


def adding_problem(
    n: int, length: int, *, generator: torch.Generator | None = None, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` sequences of (value, marker) pairs and their targets, the sum of the two marked values.

    Values are uniform in [0, 1). Exactly two positions are marked with 1 (all others 0): one uniformly
    in the first half, positions [0, length // 2), one in the second half, [length // 2, length).
    The target's mean is 1 and its variance 1/6 (``ADDING_BASELINE_MSE``), the MSE of always predicting 1.

    Shapes:
        return: x (n, length, 2), float32, channel 0 the values and channel 1 the markers; y (n,)
    """
    for name, value, least in (("n", n, 1), ("length", length, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    _checks.generator("generator", generator)
    half = length // 2
    values = torch.rand(n, length, generator=generator)  # (n, T)
    first = torch.randint(0, half, (n,), generator=generator)  # (n,)
    second = torch.randint(half, length, (n,), generator=generator)  # (n,)
    markers = torch.zeros(n, length)  # (n, T)
    rows = torch.arange(n)
    markers[rows, first] = 1.0
    markers[rows, second] = 1.0
    x = torch.stack([values, markers], dim=-1)  # (n, T, 2)
    y = (values * markers).sum(dim=1)  # (n,)
    if device is not None:
        x, y = x.to(device), y.to(device)
    return x, y


def words_of(text: str, *, min_len: int = 1, max_len: int | None = None, lower: bool = True) -> list[str]:
    """The words of ``text`` in order (runs of the letters A-Z and a-z), lower-cased, of ``min_len`` to
    ``max_len`` letters.

    >>> words_of("To be, or not to be: that is the question.", min_len=3)
    ['not', 'that', 'the', 'question']

    Chapter: from text to tokens, and pretraining.
    """
    _checks.positive_int("min_len", min_len)
    if max_len is not None:
        _checks.positive_int("max_len", max_len)
    words = re.findall(r"[A-Za-z]+", _checks.text("text", text))
    if lower:
        words = [w.lower() for w in words]
    return [w for w in words if len(w) >= min_len and (max_len is None or len(w) <= max_len)]


def shuffled_word_task(words: Sequence[str], *, seed: int = 0, tries: int = 50) -> tuple[list[str], list[int]]:
    """A labelled task made from a list of words: is this a real word (label 0) or its letters shuffled (1)?

    Each distinct word is used once; about half of them, chosen at random, are replaced by a shuffle of
    their letters that is neither the word itself nor another word of the list (a word with no such
    shuffle, "noon", stays real). Both classes have exactly the same letters, so no single letter, and no
    bag of letters, tells them apart: only the order does.

    Returns (texts, labels) in a shuffled order fixed by ``seed``.

    Chapter: from text to tokens, and pretraining.
    """
    distinct = sorted(set(_checks.texts("words", words)))
    if not distinct:
        raise ValueError("words is empty")
    tries = _checks.positive_int("tries", tries)
    _checks.positive_int("seed", seed, minimum=0)
    known = set(distinct)
    rng = random.Random(seed)
    rng.shuffle(distinct)
    texts, labels = [], []
    for word in distinct:
        shuffled = None
        if rng.random() < 0.5:
            for _ in range(tries):
                candidate = "".join(rng.sample(word, len(word)))
                if candidate not in known:
                    shuffled = candidate
                    break
        texts.append(word if shuffled is None else shuffled)
        labels.append(0 if shuffled is None else 1)
    return texts, labels
