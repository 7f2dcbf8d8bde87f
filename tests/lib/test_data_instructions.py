"""The synthetic instructions: answers a program can check, held-out words and phrasings never in training,
every turn within the lab GPT's context."""

import pytest
from attnbook.data import instructions as I


@pytest.fixture(scope="module")
def words():
    return I.instruction_words()


def test_held_out_words_never_appear_in_training(words):
    train, held = words
    assert not set(train) & set(held) and len(held) == pytest.approx(0.25 * len(train), rel=0.05)
    assert all(3 <= len(w) <= 5 and w.isalpha() and w.islower() for w in train + held)


def test_answers_are_what_the_instruction_asks():
    assert I.answer_of("reverse", ["stone"]) == "enots"
    assert I.answer_of("capitals", ["stone"]) == "STONE"
    assert I.answer_of("nth word", ["a", "b", "c"], 1) == "b"
    assert I.answer_of("nth word", ["a", "b", "c", "d"], 3) == "d"  # "last"
    assert I.answer_of("count", ["a", "b", "c"]) == "three"
    assert I.answer_of("repeat", ["a", "b"]) == "a b"
    assert I.answer_of("initials", ["ab", "cd"]) == "ac"
    assert I.answer_of("last letter", ["stone"]) == "e"


def test_drawn_instructions_are_consistent_and_held_out_phrasings_differ(words):
    train, held = words
    drawn = I.instructions(500, train, seed=3)
    assert {d.kind for d in drawn} == set(I.SEEN_KINDS)
    for d in drawn:
        used = [w for w in d.prompt.replace(":", " ").replace(",", " ").replace("?", " ").split() if w in train]
        assert d.answer and all(c.isalpha() or c == " " for c in d.answer)
        if d.kind == "reverse":
            assert d.answer[::-1] in used
    trained = {p for k in I.SEEN_KINDS for p in I.KINDS[k].phrasings[:-1]}
    for d in I.instructions(100, held, phrasing="held out", seed=4):
        pattern = I.KINDS[d.kind].phrasings[-1]
        assert pattern not in trained and d.prompt.startswith(pattern.split("{")[0])
    assert I.instructions(20, train, seed=5) == I.instructions(20, train, seed=5)


def test_every_turn_fits_the_context_of_the_lab_gpt(words):
    train, _ = words
    longest = max(train, key=len)
    for kind in I.KINDS:
        k = I.KINDS[kind]
        ws = " ".join([longest] * k.n_words[1])
        for pattern in k.phrasings:
            prompt = pattern.format(w=longest, ws=ws, o="second")
            answer = I.answer_of(kind, [longest] * k.n_words[1], 1)
            assert len(prompt) + len(answer) + 4 <= 64, (kind, pattern)  # three template tokens and <|end|>


def test_bad_input_names_the_argument(words):
    with pytest.raises(ValueError, match="kinds"):
        I.instructions(3, words[0], kinds=["sing"])
    with pytest.raises(ValueError, match="phrasing"):
        I.instructions(3, words[0], phrasing="new")
    with pytest.raises(ValueError, match="kind"):
        I.answer_of("sing", ["a"])
