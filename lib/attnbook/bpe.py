"""Byte-pair encoding (BPE): learn merges from a text, then encode text as subword ids and decode them back.

Byte-level, as in GPT-2. Text is first turned into its UTF-8 bytes, so the 256 byte values are the
starting vocabulary and *every* string can be encoded: there is no unknown token. Each byte is written as
one printable character (GPT-2's table, :func:`bytes_to_unicode`: a space shows as ``Ġ``, a newline as
``Ċ``), so that tokens and merges can be read and saved as text.

Before merging, a regular expression splits the text into pre-tokens: a word with the space before it
(``" the"``), a number, a run of punctuation, a run of whitespace (:data:`GPT2_PATTERN`). Merges never
cross two pre-tokens, so a token never spans two words, and the space belongs to the word after it.

Training (:func:`learn_merges`) repeatedly merges the most frequent adjacent pair of tokens into a new
token (Sennrich et al., 2016). Ties go to the pair whose two ids are smallest, the rule of Hugging Face
``tokenizers``, with which the merges and ids agree (tested). Encoding applies the merges in the order they
were learned.

Chapter: from text to tokens, and pretraining (13).
"""

from __future__ import annotations

import heapq
import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path

from . import _checks

__all__ = [
    "GPT2_PATTERN",
    "bytes_to_unicode",
    "pretokenize",
    "word_counts",
    "merge_pair",
    "learn_merges",
    "BPETokenizer",
]

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
"""GPT-2's pre-tokenizer: English clitics, letters, digits, other symbols (each with an optional leading
space), and whitespace (a run of spaces before a word leaves its last space to the word)."""


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table from the 256 byte values to 256 printable characters.

    The printable bytes ``!`` to ``~``, ``¡`` to ``¬`` and ``®`` to ``ÿ`` stand for themselves; the others
    (control characters, the space, ...) get the characters from U+0100 on, in order: the space (byte 32)
    is ``Ġ`` (U+0120) and the newline (byte 10) ``Ċ`` (U+010A).
    """
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@lru_cache(maxsize=1)
def _unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


@lru_cache(maxsize=1)
def _pattern():
    import regex  # \p{L} and \p{N} (Unicode letters and numbers) need the `regex` module, not `re`

    return regex.compile(GPT2_PATTERN)


def _check_texts(name: str, texts) -> list[str]:
    """A text or several: a str, or an iterable of str (a list, the lines of a file), as a list of str."""
    if isinstance(texts, str):
        return [texts]
    if isinstance(texts, bytes) or not isinstance(texts, Iterable):
        raise TypeError(f"{name} must be a str or a list of str, got {type(texts).__name__}")
    return _checks.texts(name, list(texts), what="a str or a list of str")


def pretokenize(text: str) -> list[str]:
    """Split ``text`` with :data:`GPT2_PATTERN` and write each piece's bytes as printable characters.

    >>> pretokenize("Hello world!\\n")
    ['Hello', 'Ġworld', '!', 'Ċ']
    """
    table = bytes_to_unicode()
    return [
        "".join(table[b] for b in piece.encode("utf-8")) for piece in _pattern().findall(_checks.text("text", text))
    ]


def word_counts(texts: str | Iterable[str]) -> Counter:
    """How often each pre-token occurs in a text (or in several texts): what BPE trains on."""
    counts: Counter = Counter()
    for text in _check_texts("texts", texts):
        counts.update(pretokenize(text))
    return counts


def merge_pair(word: Sequence[int], a: int, b: int, new: int) -> list[int]:
    """Replace every occurrence of the pair (a, b) in ``word`` by ``new``, scanning left to right.

    Overlaps resolve from the left: merging (x, x) in x x x gives [xx, x].

    >>> merge_pair([1, 2, 1, 2, 2], 1, 2, 9)
    [9, 9, 2]
    """
    ids = _checks.as_integers("word", word, what="a list of token ids")
    if ids.dim() > 1:
        raise ValueError(f"word must be a flat list of token ids, got shape {_checks.shape_str(ids.shape)}")
    a, b, new = (_checks.positive_int(name, v, minimum=0) for name, v in (("a", a), ("b", b), ("new", new)))
    return _merge_pair(ids.tolist(), a, b, new)


def _merge_pair(word: Sequence[int], a: int, b: int, new: int) -> list[int]:
    """:func:`merge_pair` without the checks (the training loop calls it many times)."""
    out, i, n = [], 0, len(word)
    while i < n:
        if i + 1 < n and word[i] == a and word[i + 1] == b:
            out.append(new)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


def learn_merges(
    counts: dict[str, int], vocab: list[str], vocab_size: int, *, min_frequency: int = 0
) -> tuple[list[tuple[str, str]], list[str]]:
    """Learn BPE merges from pre-token counts until the vocabulary has ``vocab_size`` tokens.

    ``vocab`` is the starting vocabulary (special tokens, then the alphabet); each word of ``counts`` is
    split into single characters, which must all be in it. At each step the most frequent adjacent pair
    (counted over every word, times the word's count; overlapping occurrences all count) becomes a new
    token; ties go to the smallest (id of the left token, id of the right one). Training stops early when
    the best pair occurs fewer than ``max(1, min_frequency)`` times.

    The pair counts are kept up to date incrementally: after a merge only the words that contained the
    pair are re-counted, and a heap finds the next best pair (an entry whose count has dropped since it
    was pushed is pushed again with its new count when it surfaces).

    Returns the merges, as pairs of token strings in the order learned, and the final vocabulary
    (a list: position = id). Two merges can produce the same string; it then keeps its first id.
    """
    vocab = _checks.texts("vocab", vocab, what="a list of str (the starting tokens)")
    token_id = {t: i for i, t in enumerate(vocab)}
    if len(token_id) != len(vocab):
        raise ValueError(
            f"vocab must not contain a token twice, got {sorted(t for t in token_id if vocab.count(t) > 1)[:5]} "
            f"more than once"
        )
    if _checks.positive_int("vocab_size", vocab_size) < len(vocab):
        raise ValueError(
            f"vocab_size must be an integer >= the starting vocabulary ({len(vocab)} tokens), got {vocab_size!r}"
        )
    min_frequency = _checks.positive_int("min_frequency", min_frequency, minimum=0)
    if not isinstance(counts, Mapping):
        raise TypeError(f"counts must be a mapping {{word: count}} (see word_counts), got {type(counts).__name__}")
    words, freqs = [], []
    for word, count in counts.items():
        _checks.text("a word of counts", word)
        _checks.positive_int(f"counts[{word!r}]", count, minimum=0)
        missing = [c for c in word if c not in token_id]
        if missing:
            raise ValueError(
                f"vocab must hold every character of counts: the word {word!r} has characters outside it, {missing[:5]}"
            )
        words.append([token_id[c] for c in word])
        freqs.append(int(count))
    pair_count: dict[tuple[int, int], int] = defaultdict(int)
    where: dict[tuple[int, int], set[int]] = defaultdict(set)  # pair -> the words that contain it
    for i, word in enumerate(words):
        for pair in zip(word, word[1:]):
            pair_count[pair] += freqs[i]
            where[pair].add(i)
    heap = [(-c, a, b) for (a, b), c in pair_count.items()]  # max count first, then smallest ids
    heapq.heapify(heap)
    merges: list[tuple[str, str]] = []
    while len(vocab) < vocab_size and heap:
        neg, a, b = heapq.heappop(heap)
        count = pair_count.get((a, b), 0)
        if count != -neg:  # stale entry: the count dropped since it was pushed
            if count > 0:
                heapq.heappush(heap, (-count, a, b))
            continue
        if count < max(1, min_frequency):
            break
        new_token = vocab[a] + vocab[b]
        new = token_id.get(new_token)
        if new is None:
            new = token_id[new_token] = len(vocab)
            vocab.append(new_token)
        merges.append((vocab[a], vocab[b]))
        grown = set()
        for i in where.pop((a, b)):
            old = words[i]
            merged = _merge_pair(old, a, b, new)
            if len(merged) == len(old):
                continue
            f = freqs[i]
            for pair in zip(old, old[1:]):
                pair_count[pair] -= f
            for pair in zip(merged, merged[1:]):
                pair_count[pair] += f
                where[pair].add(i)
                if new in pair:
                    grown.add(pair)
            words[i] = merged
        pair_count.pop((a, b), None)
        for pair in grown:
            if pair_count[pair] > 0:
                heapq.heappush(heap, (-pair_count[pair], *pair))
    return merges, vocab


class BPETokenizer:
    """A byte-level BPE tokenizer: special tokens, the 256 bytes, then one token per merge.

    Ids: the special tokens first (in the order given), then the 256 byte characters of
    :func:`bytes_to_unicode` sorted by code point, then the merged tokens in the order they were learned.
    This is the layout Hugging Face ``tokenizers`` gives the same training, so the ids agree too.

    ``encode`` never meets an unknown character (every string is bytes) and does not look for special
    tokens in the text: add their ids yourself (``token_to_id["[CLS]"]``). ``decode`` joins the tokens'
    bytes and decodes them as UTF-8 (a sequence cut inside a character gives U+FFFD there).

    Shapes:
        encode(text): a list of T ids; decode(ids): a str

    Chapter: from text to tokens, and pretraining.
    """

    def __init__(self, merges: Iterable[Sequence[str]], specials: Sequence[str] = ()):
        specials = _checks.texts("specials", specials, what="a list of str (the special tokens)")
        if not all(specials) or len(set(specials)) != len(specials):
            raise ValueError(f"specials must be distinct non-empty strings, got {specials!r}")
        alphabet = sorted(bytes_to_unicode().values())
        clash = [s for s in specials if s in alphabet]
        if clash:
            raise ValueError(f"specials must not be single byte characters (those are tokens already), got {clash}")
        if isinstance(merges, (str, bytes)) or not isinstance(merges, Iterable):
            raise TypeError(f"merges must be a list of pairs of tokens, got {type(merges).__name__}")
        self.specials = specials
        self.id_to_token: list[str] = specials + alphabet
        self.token_to_id: dict[str, int] = {t: i for i, t in enumerate(self.id_to_token)}
        self.merges: list[tuple[str, str]] = []
        for number, pair in enumerate(merges):
            if isinstance(pair, str) or len(pair) != 2 or any(p not in self.token_to_id for p in pair):
                raise ValueError(f"merges[{number}] = {pair!r} must be a pair of tokens defined before it")
            a, b = pair
            self.merges.append((a, b))
            if a + b not in self.token_to_id:
                self.token_to_id[a + b] = len(self.id_to_token)
                self.id_to_token.append(a + b)
        self.ranks: dict[tuple[str, str], int] = {}
        for rank, pair in enumerate(self.merges):
            self.ranks.setdefault(pair, rank)
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def train(
        cls, text: str | Iterable[str], vocab_size: int, *, specials: Sequence[str] = (), min_frequency: int = 0
    ) -> BPETokenizer:
        """Learn merges from ``text`` (or several texts) until there are ``vocab_size`` tokens, specials included."""
        empty = cls([], specials)
        counts = word_counts(_check_texts("text", text))
        merges, _ = learn_merges(counts, empty.id_to_token, vocab_size, min_frequency=min_frequency)
        return cls(merges, specials)

    @property
    def vocab_size(self) -> int:
        return len(self.id_to_token)

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return (
            f"BPETokenizer({self.vocab_size} tokens: {len(self.specials)} special, 256 bytes, "
            f"{len(self.merges)} merges)"
        )

    def _encode_word(self, word: str) -> list[int]:
        """The ids of one pre-token: apply the learned merges, earliest learned first."""
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        parts = list(word)
        while len(parts) > 1:
            ranked = [(self.ranks.get(pair, -1), i) for i, pair in enumerate(zip(parts, parts[1:]))]
            ranked = [(r, i) for r, i in ranked if r >= 0]
            if not ranked:
                break
            a, b = self.merges[min(ranked)[0]]
            merged, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        ids = [self.token_to_id[p] for p in parts]
        if len(self._cache) < 200_000:
            self._cache[word] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``."""
        return [i for word in pretokenize(text) for i in self._encode_word(word)]

    def tokens(self, text: str) -> list[str]:
        """The tokens of ``text`` as printable strings (``Ġ`` is a space, ``Ċ`` a newline)."""
        return [self.id_to_token[i] for i in self.encode(text)]

    def decode(self, ids: Iterable[int], *, skip_specials: bool = False) -> str:
        """The text of a sequence of ids (a list or a 1-D tensor); special tokens appear as themselves."""
        ids = _checks.token_ids(
            "ids", _checks.as_integers("ids", ids, what="a list or 1-D tensor of token ids"), self.vocab_size
        )
        if ids.dim() != 1:
            raise ValueError(f"ids must be 1-D, got shape {_checks.shape_str(ids.shape)}")
        to_byte = _unicode_to_bytes()
        out, pending = [], bytearray()
        for i in ids.tolist():
            token = self.id_to_token[i]
            if i < len(self.specials):
                out.append(pending.decode("utf-8", errors="replace"))
                pending = bytearray()
                if not skip_specials:
                    out.append(token)
            else:
                pending.extend(to_byte[c] for c in token)
        out.append(pending.decode("utf-8", errors="replace"))
        return "".join(out)

    # --- saving, loading, and the Hugging Face twin ------------------------------------------------------

    def to_dict(self) -> dict:
        return {
            "kind": "byte-level BPE",
            "pattern": GPT2_PATTERN,
            "specials": self.specials,
            "merges": [list(m) for m in self.merges],
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write the tokenizer as JSON (specials and merges: the vocabulary follows from them)."""
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), ensure_ascii=False, indent=0), encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> BPETokenizer:
        """Read a tokenizer written by :meth:`save`."""
        path = _checks.file("path", path)
        try:
            spec = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"path {str(path)!r} is not a JSON file ({error})") from None
        if not isinstance(spec, dict) or spec.get("kind") != "byte-level BPE" or spec.get("pattern") != GPT2_PATTERN:
            raise ValueError(f"path {str(path)!r} is not a byte-level BPE tokenizer written by BPETokenizer.save")
        return cls([tuple(m) for m in spec["merges"]], spec["specials"])

    def to_hf(self):
        """The same tokenizer as a Hugging Face ``tokenizers.Tokenizer`` (fast, in Rust; needs ``tokenizers``)."""
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        hf = Tokenizer(models.BPE(vocab=dict(self.token_to_id), merges=list(self.merges)))
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        hf.decoder = decoders.ByteLevel()
        if self.specials:
            hf.add_special_tokens(self.specials)
        return hf


def train_hf(text: str | Iterable[str], vocab_size: int, *, specials: Sequence[str] = (), min_frequency: int = 0):
    """Hugging Face ``tokenizers`` trained with the settings of :meth:`BPETokenizer.train` (the reference).

    A byte-level pre-tokenizer without an added prefix space, every byte in the initial alphabet, the same
    special tokens, vocabulary size and minimum frequency.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    text = _check_texts("text", text)
    specials = _checks.texts("specials", specials, what="a list of str (the special tokens)")
    if _checks.positive_int("vocab_size", vocab_size) < 256 + len(specials):
        raise ValueError(
            f"vocab_size must be at least the 256 bytes and {len(specials)} special tokens, got {vocab_size}"
        )
    min_frequency = _checks.positive_int("min_frequency", min_frequency, minimum=0)
    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    hf.train_from_iterator(text, trainer=trainer)
    return hf


def hf_merges(hf) -> list[tuple[str, str]]:
    """The merges of a Hugging Face BPE tokenizer, in order, as pairs of token strings."""
    if not callable(getattr(hf, "to_str", None)):
        raise TypeError(f"hf must be a tokenizers.Tokenizer, got {type(hf).__name__}")
    model = json.loads(hf.to_str())["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"hf must be a BPE tokenizer, got a {model.get('type')} model")
    spec = model["merges"]
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in spec]


__all__ += ["train_hf", "hf_merges"]
