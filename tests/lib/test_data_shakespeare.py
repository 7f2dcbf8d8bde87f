"""attnbook.data, the lab's part: the character tokenizer, the Tiny Shakespeare splits and LM batches."""

import pytest
import torch
from attnbook import data
from attnbook.data import CharTokenizer
from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=min(50, settings.default.max_examples), deadline=None)
@given(st.text(alphabet="abcdefgh \n!", min_size=1, max_size=50))
def test_encode_decode_round_trip(text):
    tok = CharTokenizer.from_text("abcdefgh \n!")
    ids = tok.encode(text)
    assert ids.dtype == torch.long and ids.shape == (len(text),)
    assert tok.decode(ids) == text and tok.decode(ids.tolist()) == text


def test_vocabulary_is_sorted_and_unique():
    tok = CharTokenizer.from_text("hello world")
    assert tok.chars == " dehlorw" and tok.vocab_size == 8 == len(tok)
    assert tok.encode("hello").tolist() == [3, 2, 4, 4, 5]


def test_unknown_characters_are_named():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(ValueError, match=r"2 character\(s\) outside the vocabulary: 'x', 'é'"):
        tok.encode("abxcé")
    with pytest.raises(ValueError, match=r"ids must hold token ids in \[0, \d+\), got values from"):
        tok.decode([0, 3])
    with pytest.raises(TypeError, match="text must be a str"):
        tok.encode(["a"])
    with pytest.raises(ValueError, match="non-empty"):
        CharTokenizer.from_text("")


def test_shakespeare_splits(monkeypatch):
    splits = data.load_shakespeare()
    assert splits.tokenizer.vocab_size == 65
    n = len(splits.train) + len(splits.val)
    assert n == 1_115_394 and len(splits.train) == int(0.9 * n)
    # the split is by position: the validation part is the end of the text
    text = data.fetch("tinyshakespeare").read_text(encoding="utf-8")
    assert splits.tokenizer.decode(splits.val[-20:]) == text[-20:]
    with pytest.raises(ValueError, match="val_fraction"):
        data.load_shakespeare(val_fraction=1.0)


def test_lm_batch_targets_are_inputs_shifted_by_one():
    ids = torch.arange(100)
    g = torch.Generator().manual_seed(0)
    x, y = data.lm_batch(ids, 5, 8, generator=g)
    assert x.shape == y.shape == (5, 8)
    assert torch.equal(y, x + 1)  # with ids = 0, 1, 2, ...: the next token is the next id
    assert torch.equal(x[:, 1:], x[:, :-1] + 1)  # windows are contiguous
    x2, _ = data.lm_batch(ids, 5, 8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)
    with pytest.raises(ValueError, match="needs at least 9"):
        data.lm_batch(torch.arange(8), 2, 8)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        data.lm_batch(ids, 0, 8)
