"""Byte-level BPE: the same merges, ids and encodings as Hugging Face `tokenizers` trained with the same settings."""

import json
from collections import Counter

import pytest
from attnbook import bpe, data
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import pre_tokenizers

MIXED = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n  Two  spaces, tabs\tand 1234 digits; "
    "I'm sure you'll say 'tis so. Señor Müller's café — 東京 😀!\r\n"
)


@pytest.fixture(scope="module")
def shakespeare():
    text = data.fetch("tinyshakespeare").read_text(encoding="utf-8")
    n = int(len(text) * 0.9)
    return text[:n], text[n:]


def naive_merges(text, n_merges):
    """BPE as the definition says: recount every pair of every word before each merge."""
    vocab = sorted(bpe.bytes_to_unicode().values())
    ids = {t: i for i, t in enumerate(vocab)}
    words = {tuple(w): c for w, c in bpe.word_counts(text).items()}
    merges = []
    for _ in range(n_merges):
        pairs = Counter()
        for w, c in words.items():
            for p in zip(w, w[1:]):
                pairs[p] += c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], ids[p[0]], ids[p[1]]))
        merges.append(best)
        if best[0] + best[1] not in ids:
            ids[best[0] + best[1]] = len(ids)
        new = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(best[0] + best[1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] = new.get(tuple(out), 0) + c
        words = new
    return merges


def test_byte_table_is_gpt2s():
    table = bpe.bytes_to_unicode()
    assert len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("a")] == "a"
    assert set(table.values()) == set(pre_tokenizers.ByteLevel.alphabet())


def test_pretokenize_matches_huggingface_byte_level():
    hf = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    for text in [MIXED, "hello world", "  leading", "trailing   ", "a\n\nb", "don't I'VE", "x1y22 z"]:
        assert bpe.pretokenize(text) == [piece for piece, _ in hf.pre_tokenize_str(text)], text


def test_merge_pair_resolves_overlaps_from_the_left():
    assert bpe.merge_pair([1, 1, 1], 1, 1, 9) == [9, 1]
    assert bpe.merge_pair([1, 1, 1, 1], 1, 1, 9) == [9, 9]
    assert bpe.merge_pair([2, 1, 2, 1], 1, 2, 9) == [2, 9, 1]


def test_incremental_training_equals_the_naive_definition():
    text = "low lower lowest newer newest wider widest low low " * 3 + MIXED
    tok = bpe.BPETokenizer.train(text, 256 + 40)
    assert tok.merges == naive_merges(text, 40)


def test_same_merges_ids_and_encodings_as_huggingface_on_shakespeare(shakespeare):
    train_text, val_text = shakespeare
    specials = ["[PAD]", "[MASK]"]
    ours = bpe.BPETokenizer.train(train_text, 1500, specials=specials)
    hf = bpe.train_hf(train_text, 1500, specials=specials)
    assert bpe.hf_merges(hf) == ours.merges
    assert hf.get_vocab() == ours.token_to_id  # same tokens, same ids
    assert ours.vocab_size == 1500 and ours.token_to_id["[PAD]"] == 0 and ours.token_to_id["[MASK]"] == 1
    sample = val_text[:20000] + MIXED
    ids = ours.encode(sample)
    assert ids == hf.encode(sample).ids
    assert ours.decode(ids) == sample == hf.decode(ids)
    assert len(sample) / len(ids) > 2.0  # subwords: well over two characters per token on held-out text


def test_smaller_vocabularies_are_prefixes_of_larger_ones(shakespeare):
    text = shakespeare[0][:100_000]
    small, large = bpe.BPETokenizer.train(text, 400), bpe.BPETokenizer.train(text, 700)
    assert large.merges[: len(small.merges)] == small.merges
    assert bpe.BPETokenizer(large.merges[: len(small.merges)]).id_to_token == small.id_to_token


@settings(max_examples=min(25, settings.default.max_examples), deadline=None)
@given(
    st.lists(st.text(alphabet="abcé ", min_size=1, max_size=12), min_size=1, max_size=12),
    st.integers(min_value=1, max_value=40),
)
def test_random_corpora_agree_with_huggingface(texts, n_merges):
    ours = bpe.BPETokenizer.train(texts, 256 + n_merges)
    hf = bpe.train_hf(texts, 256 + n_merges)
    assert bpe.hf_merges(hf) == ours.merges
    assert hf.get_vocab() == ours.token_to_id
    for text in texts:
        assert ours.encode(text) == hf.encode(text).ids


def test_no_unknown_characters_and_exact_round_trip(shakespeare):
    tok = bpe.BPETokenizer.train(shakespeare[0][:50_000], 400)
    for text in ["Señor 😀", "東京", "\x00\x7f control", MIXED, ""]:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        assert ids == tok.to_hf().encode(text).ids
    assert len(tok.encode("😀")) == 4  # four UTF-8 bytes, none merged: never an unknown token
    assert tok.decode(tok.encode("é")[:1]) == "\ufffd"  # half a character decodes to the replacement character


def test_specials_save_load_and_hf_twin(tmp_path, shakespeare):
    tok = bpe.BPETokenizer.train(shakespeare[0][:30_000], 300, specials=["[PAD]", "[MASK]", "[CLS]"])
    assert [tok.token_to_id[s] for s in ("[PAD]", "[MASK]", "[CLS]")] == [0, 1, 2]
    assert tok.encode("[MASK]") != [1]  # special tokens are never read from the text
    ids = [2] + tok.encode("to be") + [1]
    assert tok.decode(ids) == "[CLS]to be[MASK]" and tok.decode(ids, skip_specials=True) == "to be"
    path = tok.save(tmp_path / "tok.json")
    again = bpe.BPETokenizer.load(path)
    assert again.merges == tok.merges and again.id_to_token == tok.id_to_token
    assert json.loads(path.read_text(encoding="utf-8"))["kind"] == "byte-level BPE"
    assert tok.to_hf().encode(MIXED).ids == tok.encode(MIXED)


def test_bad_input_gets_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="vocab_size must be an integer >= the starting vocabulary"):
        bpe.BPETokenizer.train("abc", 100)
    with pytest.raises(TypeError, match="text must be a str"):
        bpe.BPETokenizer([]).encode(b"bytes")
    with pytest.raises(ValueError, match=r"ids must hold token ids in \[0, 256\), got values from 300 to 300"):
        bpe.BPETokenizer([]).decode([300])
    with pytest.raises(ValueError, match=r"merges\[0\] = \('ab', 'c'\) must be a pair of tokens defined before it"):
        bpe.BPETokenizer([("ab", "c")])
    with pytest.raises(ValueError, match="specials must be distinct"):
        bpe.BPETokenizer([], ["[PAD]", "[PAD]"])
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ValueError, match="not a byte-level BPE tokenizer"):
        bpe.BPETokenizer.load(tmp_path / "x.json")
