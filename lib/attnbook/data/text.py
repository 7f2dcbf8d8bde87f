"""Text as tokens: normalising and splitting sentences into words (English, French) or characters,
vocabularies with the special tokens <pad>, <unk>, <bos> and <eos>, and the character tokenizer of the lab.

Chapters: sequence-to-sequence and Bahdanau attention (03: words); the transformer block and the lab
(08, 12: characters).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

import torch

from .. import _checks

__all__ = ["PAD", "UNK", "BOS", "EOS", "normalize_text", "tokenize", "detokenize", "Vocab", "CharTokenizer"]

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"

_TOKEN_PATTERNS = {
    "en": re.compile(r"'\w+|\w+|[^\w\s]"),  # clitics go right: "I'm" -> i 'm, "don't" -> don 't
    "fr": re.compile(r"\w+'|\w+|[^\w\s]"),  # elisions go left: "j'ai" -> j' ai, "l'accord" -> l' accord
}


def normalize_text(text: str) -> str:
    """Unicode NFC, typographic apostrophes as ', every kind of space (no-break, thin) as one plain space."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    text = unicodedata.normalize("NFC", text).replace("\u2019", "'").replace("\u2018", "'")
    return re.sub(r"\s+", " ", text.replace("\u00a0", " ").replace("\u2009", " ").replace("\u202f", " ")).strip()


def tokenize(text: str, lang: str = "en", *, lower: bool = True) -> list[str]:
    """Split a sentence into tokens: words and punctuation (``lang`` "en" or "fr"), or characters ("chars").

    >>> tokenize("I'm tired.")
    ['i', "'m", 'tired', '.']
    >>> tokenize("J'ai froid !", "fr")
    ["j'", 'ai', 'froid', '!']
    """
    if lang not in ("en", "fr", "chars"):
        raise ValueError(f"lang must be 'en', 'fr' or 'chars', got {lang!r}")
    text = normalize_text(text)
    if lower:
        text = text.lower()
    return list(text) if lang == "chars" else _TOKEN_PATTERNS[lang].findall(text)


def detokenize(tokens: Sequence[str], lang: str = "en") -> str:
    """Join tokens back into text (the inverse of :func:`tokenize` up to case and spacing), e.g. for BLEU."""
    if lang not in ("en", "fr", "chars"):
        raise ValueError(f"lang must be 'en', 'fr' or 'chars', got {lang!r}")
    tokens = _checks.texts("tokens", tokens, what="a list of tokens (str)")
    if lang == "chars":
        return "".join(tokens)
    text = re.sub(r" ?- ?", "-", " ".join(tokens))  # "est - ce" -> "est-ce"
    # an apostrophe joins the word it belongs to: English clitics the word before ("i 'm" -> "i'm", "dogs ' bones"
    # -> "dogs' bones"), French elisions the word after ("j' ai" -> "j'ai")
    text = text.replace(" '", "'") if lang == "en" else text.replace("' ", "'")
    # no space before closing punctuation; French typography keeps one before ! ? ; :
    return re.sub(r" ([.,)])" if lang == "fr" else r" ([.,!?;:)])", r"\1", text)


class Vocab:
    """A token <-> id mapping whose first ids are <pad> = 0, <unk> = 1, <bos> = 2, <eos> = 3.

    Unknown tokens encode as <unk>; decoding stops at <eos> and drops <pad> and <bos>.
    """

    specials = (PAD, UNK, BOS, EOS)
    pad_id, unk_id, bos_id, eos_id = 0, 1, 2, 3

    def __init__(self, tokens: Iterable[str]):
        self.itos: list[str] = list(self.specials)
        if isinstance(tokens, str):
            raise TypeError("tokens must be a list of str (tokens), got a str: tokenize it first")
        for token in tokens:
            if not isinstance(token, str):
                raise TypeError(f"tokens must be strings, got {token!r}")
            if token not in self.specials and token not in self.itos:
                self.itos.append(token)
        self.stoi: dict[str, int] = {token: i for i, token in enumerate(self.itos)}

    @classmethod
    def build(cls, sequences: Iterable[Sequence[str]], *, min_freq: int = 1) -> Vocab:
        """The tokens seen at least ``min_freq`` times, most frequent first (ties in alphabetical order)."""
        if isinstance(min_freq, bool) or not isinstance(min_freq, int) or min_freq < 1:
            raise ValueError(f"min_freq must be an integer >= 1, got {min_freq!r}")
        if isinstance(sequences, str):
            raise TypeError("sequences must be a list of token lists, got a str: tokenize it first")
        sequences = [
            _checks.texts(f"sequences[{i}]", s, what="a list of tokens (str): tokenize it first")
            for i, s in enumerate(sequences)
        ]
        counts = Counter(token for sequence in sequences for token in sequence)
        kept = sorted((t for t, n in counts.items() if n >= min_freq), key=lambda t: (-counts[t], t))
        return cls(kept)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token) -> bool:
        return token in self.stoi

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens: {self.itos[4:12]}...)"

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Token ids; a token not in the vocabulary becomes <unk>."""
        if isinstance(tokens, str):
            raise TypeError("tokens must be a list of tokens, got a str: tokenize it first")
        return [self.stoi.get(token, self.unk_id) for token in _checks.texts("tokens", list(tokens))]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens up to the first <eos>, without <pad> and <bos>; ids outside the vocabulary raise an error."""
        out = []
        for i in _check_ids_1d("ids", ids, len(self.itos)):
            if i == self.eos_id:
                break
            if i not in (self.pad_id, self.bos_id):
                out.append(self.itos[i])
        return out


class CharTokenizer:
    """One token per character: the vocabulary is the sorted set of characters of a text.

    ``encode`` refuses characters outside the vocabulary with an error that names them (there is no
    unknown token: a character model should only be given characters it has seen).
    """

    def __init__(self, chars: Iterable[str]):
        if not isinstance(chars, (str, list, tuple, set, frozenset)):
            raise TypeError(f"chars must be a str or a collection of single characters, got {type(chars).__name__}")
        chars = sorted(set(chars), key=str)
        if not chars or any(not isinstance(c, str) or len(c) != 1 for c in chars):
            raise ValueError("chars must be a non-empty collection of single characters")
        self.chars: str = "".join(chars)
        self.stoi: dict[str, int] = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls(_checks.text("text", text, nonempty=True))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def __len__(self) -> int:
        return len(self.chars)

    def __repr__(self) -> str:
        return f"CharTokenizer({self.vocab_size} characters: {self.chars!r})"

    def encode(self, text: str) -> torch.Tensor:
        """The ids of the characters of ``text``, a (len(text),) long tensor."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        unknown = sorted({c for c in text if c not in self.stoi})
        if unknown:
            raise ValueError(
                f"text has {len(unknown)} character(s) outside the vocabulary: "
                f"{', '.join(repr(c) for c in unknown[:20])}; the vocabulary is {self.chars!r}"
            )
        return torch.tensor([self.stoi[c] for c in text], dtype=torch.long)

    def decode(self, ids) -> str:
        """The text of a sequence of ids (a list or a 1-D tensor)."""
        return "".join(self.chars[i] for i in _check_ids_1d("ids", ids, len(self.chars)))


def _check_ids_1d(name: str, ids, vocab_size: int) -> list[int]:
    """Token ids (a list or a 1-D tensor of integers in [0, vocab_size)), as a list of ints."""
    ids = _checks.as_integers(name, ids, what="a list or 1-D tensor of token ids")
    if ids.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {_checks.shape_str(ids.shape)}")
    return _checks.token_ids(name, ids, vocab_size).tolist()
