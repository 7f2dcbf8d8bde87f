"""Tokenizers, vocabularies, the eng-fra pairs and the synthetic tasks of attnbook.data (chapter 03)."""

from __future__ import annotations

import calendar
from collections import Counter
from datetime import date

import pytest
from attnbook import data
from hypothesis import given, settings
from hypothesis import strategies as st


def test_tokenize_words_punctuation_clitics_and_spaces():
    assert data.tokenize("I'm tired.") == ["i", "'m", "tired", "."]
    assert data.tokenize("Don't go!") == ["don", "'t", "go", "!"]
    # French: elided words keep their apostrophe; typographic apostrophes and narrow no-break spaces normalised
    assert data.tokenize("J\u2019ai froid\u202f!", "fr") == ["j'", "ai", "froid", "!"]
    assert data.tokenize("Qu'est-ce que c'est ?", "fr") == ["qu'", "est", "-", "ce", "que", "c'", "est", "?"]
    assert data.tokenize("Ça va.", "fr", lower=False) == ["Ça", "va", "."]
    assert data.tokenize("May 3,", "chars", lower=False) == list("May 3,")
    assert data.tokenize("") == [] and data.tokenize("   ") == []


def test_detokenize_inverts_tokenize():
    assert data.detokenize(["i", "'m", "tired", "."]) == "i'm tired."
    assert data.detokenize(["j'", "ai", "froid", "!"], "fr") == "j'ai froid !"  # French keeps the space before !
    assert data.detokenize(["qu'", "est", "-", "ce", "?"], "fr") == "qu'est-ce ?"
    assert data.detokenize(list("1992-08-03"), "chars") == "1992-08-03"
    # an English apostrophe that ends a word keeps the space after it
    assert data.detokenize(data.tokenize("The dogs' bones.")) == "the dogs' bones."


@settings(max_examples=min(60, settings.default.max_examples), deadline=None)
@given(
    st.lists(st.sampled_from(["the", "cat", "sat", "é", "l'", "a", ".", ",", "!", "?", "'s", "-", "x1"]), max_size=12),
    st.sampled_from(["en", "fr"]),
)
def test_tokenize_is_stable_on_detokenized_text(tokens, lang):
    # tokenising the detokenised text of a tokenisation gives the same tokens again (a fixed point)
    once = data.tokenize(data.detokenize(tokens, lang), lang)
    assert data.tokenize(data.detokenize(once, lang), lang) == once


def test_bad_tokenizer_arguments():
    with pytest.raises(ValueError, match="lang must be"):
        data.tokenize("hello", "de")
    with pytest.raises(TypeError, match="text must be a str"):
        data.tokenize(["hello"])
    with pytest.raises(ValueError, match="lang must be"):
        data.detokenize(["a"], "xx")


def test_vocab_specials_unknown_and_decode():
    vocab = data.Vocab(["cat", "sat", "cat"])
    assert vocab.itos[:4] == ["<pad>", "<unk>", "<bos>", "<eos>"]
    assert (vocab.pad_id, vocab.unk_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2, 3)
    assert len(vocab) == 6 and "cat" in vocab and "dog" not in vocab
    assert vocab.encode(["cat", "dog", "sat"]) == [4, vocab.unk_id, 5]  # unknown word -> <unk>
    assert vocab.encode([]) == []
    assert vocab.decode([2, 4, 0, 5, 3, 4]) == ["cat", "sat"]  # drops <bos> and <pad>, stops at <eos>
    assert vocab.decode([]) == []
    with pytest.raises(ValueError, match=r"ids must hold token ids in \[0, \d+\), got values from"):
        vocab.decode([99])
    with pytest.raises(TypeError, match="tokenize it first"):
        vocab.encode("cat")
    with pytest.raises(TypeError, match="tokens must be strings"):
        data.Vocab(["a", 3])


def test_vocab_build_orders_by_frequency_and_drops_rare_tokens():
    sequences = [["b", "a", "a"], ["c", "a", "b"], ["d"]]
    vocab = data.Vocab.build(sequences)
    assert vocab.itos[4:] == ["a", "b", "c", "d"]
    rare_dropped = data.Vocab.build(sequences, min_freq=2)
    assert rare_dropped.itos[4:] == ["a", "b"]
    assert rare_dropped.encode(["c"]) == [rare_dropped.unk_id]
    with pytest.raises(ValueError, match="min_freq"):
        data.Vocab.build(sequences, min_freq=0)


def test_eng_fra_pairs_and_attribution():
    pairs = data.load_eng_fra()
    assert len(pairs) == 5000
    assert all(p.source and p.target for p in pairs)
    assert all("CC-BY 2.0 (France)" in p.attribution and "tatoeba.org" in p.attribution for p in pairs)
    assert len({p.source for p in pairs}) == 2597  # the figure the data README gives
    # the tokenizer is reversible on almost every sentence (a few "8:30", "$5" and quotes lose their spacing)
    same = sum(
        data.detokenize(data.tokenize(s, lang), lang) == data.normalize_text(s).lower()
        for p in pairs
        for s, lang in ((p.source, "en"), (p.target, "fr"))
    )
    assert same >= 0.99 * 2 * len(pairs)


def test_load_eng_fra_reports_a_malformed_line(tmp_path):
    bad = tmp_path / "pairs.txt"
    bad.write_text("Go.\tVa !\tCC-BY\nno tab here\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 2"):
        data.load_eng_fra(bad)


def test_split_by_source_keeps_every_sentence_on_one_side():
    pairs = [data.SentencePair(f"s{i % 40}", f"t{i}") for i in range(120)]  # 40 sources, 3 translations each
    train, test = data.split_by_source(pairs, 0.25, seed=1)
    assert len(train) + len(test) == len(pairs)
    assert not {p.source for p in train} & {p.source for p in test}
    assert len({p.source for p in test}) == 10
    assert all(Counter(p.source for p in test)[s] == 3 for s in {p.source for p in test})
    assert data.split_by_source(pairs, 0.25, seed=1) == (train, test)  # deterministic
    assert data.split_by_source(pairs, 0.25, seed=2) != (train, test)
    with pytest.raises(ValueError, match="test_fraction"):
        data.split_by_source(pairs, 1.5)


@settings(max_examples=min(30, settings.default.max_examples), deadline=None)
@given(st.integers(1, 8), st.integers(0, 12), st.sampled_from(["copy", "reverse", "add1"]), st.integers(0, 10**6))
def test_digit_pairs(min_len, extra, task, seed):
    max_len = min_len + extra
    pairs = data.digit_pairs(25, min_len, max_len, task=task, seed=seed)
    assert pairs == data.digit_pairs(25, min_len, max_len, task=task, seed=seed)
    for source, target in pairs:
        assert min_len <= len(source) <= max_len and source.isdigit()
        expected = {"copy": source, "reverse": source[::-1], "add1": "".join(str((int(c) + 1) % 10) for c in source)}[
            task
        ]
        assert target == expected


def test_digit_pairs_cover_the_lengths_and_reject_bad_arguments():
    lengths = Counter(len(s) for s, _ in data.digit_pairs(2000, 5, 40, seed=0))
    assert set(lengths) == set(range(5, 41))
    with pytest.raises(ValueError, match="min_len must be <= max_len"):
        data.digit_pairs(3, 9, 4)
    with pytest.raises(ValueError, match="task must be"):
        data.digit_pairs(3, 1, 4, task="sort")
    with pytest.raises(ValueError, match="min_len must be a positive integer"):
        data.digit_pairs(3, 0, 4)


def test_date_pairs_reorder_into_iso_dates():
    months = list(calendar.month_name)[1:]  # English names in the C locale the tests run in
    pairs = data.date_pairs(600, seed=5)
    assert pairs == data.date_pairs(600, seed=5)
    shapes = Counter()
    for source, target in pairs:
        d = date.fromisoformat(target)
        assert 1900 <= d.year <= 2099
        long_form = f"{months[d.month - 1]} {d.day}, {d.year}"
        day_first = f"{d.day} {months[d.month - 1]} {d.year}"
        numeric = f"{d.day:02d}.{d.month:02d}.{d.year}"
        assert source in (long_form, day_first, numeric)
        shapes[[long_form, day_first, numeric].index(source)] += 1
    assert all(shapes[i] > 100 for i in range(3))  # all three formats occur
    assert all(s.startswith(tuple(months)) for s, _ in data.date_pairs(20, formats=["long"], seed=1))
    with pytest.raises(ValueError, match="formats must be"):
        data.date_pairs(3, formats=["roman"])
    with pytest.raises(ValueError, match="years must be"):
        data.date_pairs(3, years=(2000, 1990))
