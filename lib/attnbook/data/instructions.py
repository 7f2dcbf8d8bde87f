"""Synthetic instructions whose answers a program can check: reverse a word, write it in capitals, name the
n-th word of a list, count the words, repeat them; and, for testing only, kinds the training never shows.

Every instruction is built from words of Tiny Shakespeare (so that the lab's character-level GPT knows
their letters), split into words for training and words held out; every kind has phrasings for training and
one phrasing held out. :func:`instructions` draws them; :func:`answer_of` is the program that knows the
answer.

Chapter: from a model of text to an assistant (17).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import _checks
from .files import fetch
from .synthetic import words_of

__all__ = ["Instruction", "SEEN_KINDS", "UNSEEN_KINDS", "KINDS", "instruction_words", "instructions", "answer_of"]

ORDINALS = ("first", "second", "third", "last")
NUMBERS = ("one", "two", "three", "four")


@dataclass(frozen=True)
class Instruction:
    """One instruction: its kind, the text the user types, and the answer a program computes."""

    kind: str
    prompt: str
    answer: str


@dataclass(frozen=True)
class _Kind:
    phrasings: tuple[str, ...]  # the last one is held out of training
    n_words: tuple[int, int]  # how many words the instruction is about (low, high)
    answer: Callable[[list[str], int], str]  # (words, index) -> the answer


def _nth(words: list[str], i: int) -> str:
    return words[-1] if ORDINALS[i] == "last" else words[i]


KINDS: dict[str, _Kind] = {
    "reverse": _Kind(("reverse {w}", "{w} backwards", "spell {w} back to front"), (1, 1), lambda w, i: w[0][::-1]),
    "capitals": _Kind(("capitals: {w}", "shout {w}", "{w} in upper case"), (1, 1), lambda w, i: w[0].upper()),
    "nth word": _Kind(("{o} word of: {ws}", "the {o} word: {ws}", "which word is {o}: {ws}"), (3, 4), _nth),
    "count": _Kind(
        ("how many words: {ws}", "count: {ws}", "number of words in: {ws}"), (1, 4), lambda w, i: NUMBERS[len(w) - 1]
    ),
    "repeat": _Kind(("repeat: {ws}", "say again: {ws}", "echo: {ws}"), (2, 3), lambda w, i: " ".join(w)),
    # never in training: what does a model do with an instruction of a kind it has not seen?
    "initials": _Kind(("the first letters of: {ws}",) * 2, (2, 4), lambda w, i: "".join(x[0] for x in w)),
    "last letter": _Kind(("the last letter of {w}",) * 2, (1, 1), lambda w, i: w[0][-1]),
}
SEEN_KINDS = ("reverse", "capitals", "nth word", "count", "repeat")
UNSEEN_KINDS = ("initials", "last letter")


def instruction_words(*, held_out: float = 0.2, seed: int = 0) -> tuple[list[str], list[str]]:
    """The distinct lower-case words of 3 to 5 letters of Tiny Shakespeare, split into (training, held out).

    The held-out words never appear in a training instruction; each list is sorted.
    """
    fraction = _checks.fraction("held_out", held_out)
    _checks.positive_int("seed", seed, minimum=0)
    text = fetch("tinyshakespeare").read_text(encoding="utf-8")
    words = sorted(set(words_of(text, min_len=3, max_len=5)))
    random.Random(seed).shuffle(words)
    n = round(fraction * len(words))
    return sorted(words[n:]), sorted(words[:n])


def answer_of(kind: str, words: Sequence[str], index: int = 0) -> str:
    """The answer to an instruction of ``kind`` about ``words`` (``index``: which ordinal, for "nth word")."""
    _checks.choice("kind", kind, KINDS)
    words = _checks.texts("words", words, nonempty=True)
    low, high = KINDS[kind].n_words
    if not low <= len(words) <= high:
        raise ValueError(f"words must be {low} to {high} words for the kind {kind!r}, got {len(words)}")
    _checks.positive_int("index", index, minimum=0)
    if index >= len(ORDINALS):
        raise ValueError(f"index must name one of the ordinals {ORDINALS} (0 to {len(ORDINALS) - 1}), got {index}")
    return KINDS[kind].answer(words, index)


def instructions(
    n: int,
    words: Sequence[str],
    *,
    kinds: Sequence[str] = SEEN_KINDS,
    phrasing: str = "train",
    seed: int = 0,
) -> list[Instruction]:
    """``n`` instructions drawn at random: a kind from ``kinds``, its words from ``words``.

    ``phrasing="train"`` uses the phrasings of training; ``"held out"`` the one phrasing of each kind that
    training never shows.
    """
    _checks.positive_int("n", n, minimum=0)
    words = _checks.texts("words", words, nonempty=True)
    kinds = [_checks.choice("kinds", k, KINDS) for k in _checks.texts("kinds", kinds, nonempty=True)]
    _checks.choice("phrasing", phrasing, ("train", "held out"))
    _checks.positive_int("seed", seed, minimum=0)
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        kind = KINDS[name := rng.choice(kinds)]
        chosen = [rng.choice(words) for _ in range(rng.randint(*kind.n_words))]
        index = rng.randrange(len(ORDINALS))
        pattern = rng.choice(kind.phrasings[:-1]) if phrasing == "train" else kind.phrasings[-1]
        prompt = pattern.format(w=chosen[0], ws=" ".join(chosen), o=ORDINALS[index])
        out.append(Instruction(name, prompt, kind.answer(chosen, index)))
    return out
