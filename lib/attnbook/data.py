"""Datasets: named real-text files (fetched, verified by sha256, cached), synthetic tasks and tokenizers.

``fetch(name)`` looks in this order:

1. the folder named by the environment variable ``ATTNBOOK_DATA``, when it is set (an optional override);
2. the copy that ships inside the package (``attnbook/data_files/``, with its sources and licences);
3. the cache folder (``ATTNBOOK_CACHE``, default ``~/.cache/attnbook``), from an earlier download;
4. a download from the dataset's public source, checked against its sha256, then cached: only a fallback
   for an installation that lacks the packaged copy.

Every file is checked against its sha256 before it is returned.

Chapter: every chapter that trains on real text (03, 12).
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tempfile
import urllib.request
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import _checks

__all__ = ["DATASETS", "Dataset", "DataNotAvailableError", "fetch", "cache_dir", "packaged_dir", "sha256_of"]


class DataNotAvailableError(FileNotFoundError):
    """A dataset is neither in ``ATTNBOOK_DATA``, the package nor the cache, and could not be downloaded."""


@dataclass(frozen=True)
class Dataset:
    """A named data file: where it lives relative to a data folder, where to download it, its checksum."""

    name: str
    path: str  # relative to ATTNBOOK_DATA, the packaged data folder or the cache folder
    url: str
    sha256: str
    size: int
    source: str  # who made it, and under which licence
    extract: Callable[[bytes], bytes] | None = None  # turns the downloaded bytes into the file's bytes


def _first_lines_of_zip_member(member: str, n_lines: int) -> Callable[[bytes], bytes]:
    def extract(payload: bytes) -> bytes:
        with zipfile.ZipFile(io.BytesIO(payload)) as archive:
            with archive.open(member) as handle:
                lines = handle.read().splitlines(keepends=True)
        return b"".join(lines[:n_lines])

    return extract


DATASETS: dict[str, Dataset] = {
    d.name: d
    for d in [
        Dataset(
            name="tinyshakespeare",
            path="tinyshakespeare/input.txt",
            url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
            sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
            size=1_115_394,
            source="Tiny Shakespeare, collected by Andrej Karpathy for char-rnn (public-domain text).",
        ),
        Dataset(
            name="eng-fra",
            path="eng-fra/eng-fra.txt",
            url="https://www.manythings.org/anki/fra-eng.zip",
            sha256="d952b56a181da5270b7bb4ded3f3bbe61e67a9b1de0e0fbc1d46438c71fb55a7",
            size=562_864,
            source=(
                "English-French sentence pairs from the Tatoeba Project (tatoeba.org), as packaged by "
                "manythings.org/anki; licensed CC-BY 2.0 (France). Each line carries its attribution."
            ),
            extract=_first_lines_of_zip_member("fra.txt", 5000),
        ),
    ]
}


def packaged_dir() -> Path:
    """The folder of the data files that ship inside the package (see its README.md for sources and licences)."""
    return Path(__file__).resolve().with_name("data_files")


def cache_dir() -> Path:
    """The folder where downloads are kept: ``ATTNBOOK_CACHE`` or ``~/.cache/attnbook``."""
    return Path(os.environ.get("ATTNBOOK_CACHE") or Path.home() / ".cache" / "attnbook")


def sha256_of(path: Path) -> str:
    """The hex sha256 digest of a file."""
    path = _checks.file("path", path)
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download(url: str, timeout: float) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "attnbook (Attention, Step by Step)"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


def fetch(name: str, *, download: bool = True, timeout: float = 30.0) -> Path:
    """Return the path of a local, verified copy of dataset ``name`` (see the module docstring for the order)."""
    _checks.text("name", name)
    if name not in DATASETS:
        raise ValueError(f"name must be a known dataset ({', '.join(sorted(DATASETS))}), got {name!r}")
    timeout = _checks.positive_float("timeout", timeout)
    spec = DATASETS[name]

    offline = os.environ.get("ATTNBOOK_DATA")
    if offline:
        candidate = Path(offline) / spec.path
        if candidate.is_file():
            digest = sha256_of(candidate)
            if digest != spec.sha256:
                raise ValueError(
                    f"{candidate} (from ATTNBOOK_DATA) has sha256 {digest}, expected {spec.sha256}: "
                    "the file is not the one the book uses"
                )
            return candidate

    packaged = packaged_dir() / spec.path
    if packaged.is_file():
        digest = sha256_of(packaged)
        if digest == spec.sha256:
            return packaged
        warnings.warn(
            f"the packaged copy {packaged} has sha256 {digest}, expected {spec.sha256}; it is not used "
            "(reinstall attnbook to repair it)",
            RuntimeWarning,
            stacklevel=2,
        )

    cached = cache_dir() / spec.path
    if cached.is_file() and sha256_of(cached) == spec.sha256:
        return cached

    how_to = (
        f"To use an offline copy, put the file at <folder>/{spec.path} and set the environment "
        f"variable ATTNBOOK_DATA=<folder>, or download {spec.url} yourself"
        + (" and keep its described part" if spec.extract else "")
        + f" as {cached}."
    )
    if not download:
        raise DataNotAvailableError(
            f"dataset {name!r} ({spec.path}) is not available offline: it is neither in "
            f"the package's data folder ({packaged_dir()}) nor in the cache. {how_to}"
        )
    try:
        payload = _download(spec.url, timeout)
    except OSError as error:  # URLError, timeouts, refused connections
        raise DataNotAvailableError(
            f"dataset {name!r} ({spec.path}) is not available offline and the download from {spec.url} "
            f"failed ({error}). {how_to}"
        ) from None
    content = spec.extract(payload) if spec.extract else payload
    digest = hashlib.sha256(content).hexdigest()
    if digest != spec.sha256:
        raise ValueError(
            f"the download of {name!r} from {spec.url} has sha256 {digest}, expected "
            f"{spec.sha256}; it was not saved. {how_to}"
        )
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=cached.parent, delete=False) as handle:
        handle.write(content)
    shutil.move(handle.name, cached)
    return cached


# --- Tokenizers, vocabularies, sentence pairs and synthetic sequence-to-sequence tasks -------------------
# Chapter: sequence-to-sequence and Bahdanau attention.

import random  # noqa: E402
import re  # noqa: E402
import unicodedata  # noqa: E402
from collections.abc import Iterable, Sequence  # noqa: E402
from datetime import date, timedelta  # noqa: E402

__all__ += [
    "PAD",
    "UNK",
    "BOS",
    "EOS",
    "normalize_text",
    "tokenize",
    "detokenize",
    "Vocab",
    "SentencePair",
    "load_eng_fra",
    "split_by_source",
    "digit_pairs",
    "date_pairs",
]

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
        from collections import Counter

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


@dataclass(frozen=True)
class SentencePair:
    """One translation pair and its attribution (who wrote each sentence, under which licence)."""

    source: str
    target: str
    attribution: str = ""


def load_eng_fra(path: str | os.PathLike | None = None) -> list[SentencePair]:
    """The English-French pairs of ``fetch("eng-fra")`` (Tatoeba, CC-BY 2.0 France), in file order."""
    path = fetch("eng-fra") if path is None else _checks.file("path", path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise ValueError(f"path {str(path)!r} is not a UTF-8 text file ({error})") from None
    pairs = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2:
            raise ValueError(
                f"path {str(path)!r}, line {number}: expected English<TAB>French[<TAB>attribution], got {line!r}"
            )
        pairs.append(SentencePair(fields[0], fields[1], fields[2] if len(fields) > 2 else ""))
    return pairs


def split_by_source(pairs: Sequence, test_fraction: float = 0.1, *, seed: int = 0) -> tuple[list, list]:
    """Split pairs into (train, test) so that no source sentence of the test set occurs in training.

    Sentences with several translations keep all of them on the same side, so a test sentence is never
    seen in training and its translations can all serve as references.
    """
    _checks.fraction("test_fraction", test_fraction)
    _checks.positive_int("seed", seed, minimum=0)
    for i, pair in enumerate(pairs):
        if not isinstance(pair, SentencePair) and not (
            isinstance(pair, (tuple, list)) and len(pair) >= 2 and isinstance(pair[0], str)
        ):
            raise TypeError(
                f"pairs must be SentencePairs or (source, target) pairs of str, got pairs[{i}] = {pair!r:.60}"
            )

    def source_of(pair):
        return normalize_text(pair.source if isinstance(pair, SentencePair) else pair[0]).lower()

    sources = sorted({source_of(p) for p in pairs})
    random.Random(seed).shuffle(sources)
    test_sources = set(sources[: max(1, round(test_fraction * len(sources)))])
    train = [p for p in pairs if source_of(p) not in test_sources]
    test = [p for p in pairs if source_of(p) in test_sources]
    return train, test


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


# --- Characters as tokens: the tokenizer and the Tiny Shakespeare splits of the lab ---------------------
# Chapter: the transformer block (08) and the lab (12).

import torch  # noqa: E402

__all__ += ["CharTokenizer", "TextSplits", "load_shakespeare", "lm_batch"]


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


@dataclass(frozen=True)
class TextSplits:
    """A text encoded with its tokenizer and split into training and validation ids."""

    tokenizer: CharTokenizer
    train: torch.Tensor  # (N_train,) long
    val: torch.Tensor  # (N_val,) long


def load_shakespeare(*, val_fraction: float = 0.1, download: bool = True) -> TextSplits:
    """Tiny Shakespeare as characters: 65 of them, the first 90% for training and the last 10% for validation.

    The split is by position, not at random, so no validation passage is seen in training.
    """
    _checks.fraction("val_fraction", val_fraction)
    text = fetch("tinyshakespeare", download=download).read_text(encoding="utf-8")
    tokenizer = CharTokenizer.from_text(text)
    ids = tokenizer.encode(text)
    n_train = int(len(ids) * (1.0 - val_fraction))
    return TextSplits(tokenizer, ids[:n_train], ids[n_train:])


def lm_batch(
    ids: torch.Tensor, batch_size: int, block_size: int, *, generator: torch.Generator | None = None, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of random windows of a token sequence and the same windows shifted by one (the targets).

    Shapes:
        ids:    (N,) token ids, N > block_size
        return: x (B, T) and y (B, T) with y[b, t] = the token after x[b, t]
    """
    _checks.token_ids("ids", ids, None, ndim=1)
    _checks.generator("generator", generator)
    for name, value in (("batch_size", batch_size), ("block_size", block_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if ids.numel() <= block_size:
        raise ValueError(
            f"ids has {ids.numel()} tokens; a window of block_size={block_size} needs at least {block_size + 1}"
        )
    starts = torch.randint(ids.numel() - block_size, (batch_size,), generator=generator)  # (B,)
    offsets = torch.arange(block_size + 1)  # (T + 1,)
    windows = ids[starts[:, None] + offsets]  # (B, T + 1)
    x, y = windows[:, :-1], windows[:, 1:]  # (B, T), (B, T)
    if device is not None:
        x, y = x.to(device), y.to(device)
    return x, y


# --- The adding problem (Hochreiter & Schmidhuber 1997, in the form later papers use) ----------------
# Chapter: LSTM and GRU (02).

__all__ += ["adding_problem", "ADDING_BASELINE_MSE"]

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


# --- Images: scikit-learn's bundled handwritten digits ----------------------------------------------------
# Chapter: vision transformers (10).

__all__ += ["ImageSplits", "load_digits", "balanced_subset"]


@dataclass(frozen=True)
class ImageSplits:
    """Images split into a training and a test set.

    Shapes:
        x_train: (N_train, C, H, W) float32; y_train: (N_train,) long; likewise x_test, y_test
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: tuple[str, ...]


def load_digits(*, test_fraction: float = 0.2, seed: int = 0) -> ImageSplits:
    """scikit-learn's handwritten digits: 1,797 grey 8 x 8 images of the digits 0-9, shipped with scikit-learn.

    Pixel values (0 to 16) are scaled to [0, 1]. The split is stratified (each digit has the same share
    in both sets) and fixed by ``seed``. No download is needed.

    Shapes:
        images (N, 1, 8, 8) float32, labels (N,) long

    Chapter: vision transformers.
    """
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    _checks.fraction("test_fraction", test_fraction)
    _checks.positive_int("seed", seed, minimum=0)
    digits = sklearn_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # (N, 1, 8, 8)
    labels = torch.tensor(digits.target, dtype=torch.long)  # (N,)
    train_idx, test_idx = train_test_split(
        range(len(labels)), test_size=test_fraction, stratify=digits.target, random_state=seed
    )
    train_idx, test_idx = torch.tensor(train_idx), torch.tensor(test_idx)
    return ImageSplits(
        images[train_idx],
        labels[train_idx],
        images[test_idx],
        labels[test_idx],
        tuple(str(c) for c in digits.target_names),
    )


def balanced_subset(labels: torch.Tensor, n: int, *, seed: int = 0) -> torch.Tensor:
    """The indices of ``n`` examples, as evenly spread over the classes as the class sizes allow.

    Subsets are nested: with the same ``seed``, the subset of size n is part of every larger one (the
    indices are the first n of one fixed order that takes the classes in turn).

    Shapes:
        labels: (N,) integer class labels
        return: (n,) long indices into labels

    Chapter: vision transformers (training-set size experiment).
    """
    if not isinstance(labels, torch.Tensor) or labels.dim() != 1 or labels.is_floating_point():
        raise ValueError(
            "labels must be a 1-D tensor of integer class labels"
            + (
                f", got shape {tuple(labels.shape)} and dtype {labels.dtype}"
                if isinstance(labels, torch.Tensor)
                else f", got {type(labels).__name__}"
            )
        )
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= labels.numel():
        raise ValueError(f"n must be an integer from 1 to {labels.numel()} (the number of labels), got {n!r}")
    g = torch.Generator().manual_seed(_checks.positive_int("seed", seed, minimum=0))
    per_class = [torch.nonzero(labels == c).flatten() for c in labels.unique()]
    per_class = [idx[torch.randperm(idx.numel(), generator=g)] for idx in per_class]  # shuffled within each class
    order = [int(idx[r]) for r in range(max(i.numel() for i in per_class)) for idx in per_class if r < idx.numel()]
    return torch.tensor(order[:n], dtype=torch.long)
