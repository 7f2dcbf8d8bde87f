"""The corpora the chapters read: the English-French sentence pairs (Tatoeba) and Tiny Shakespeare, their
splits, and random windows of a token sequence for language modelling.

Chapters: sequence-to-sequence and Bahdanau attention (03: eng-fra); the transformer block and the lab
(08, 12: Tiny Shakespeare).
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .. import _checks
from .files import fetch
from .text import CharTokenizer, normalize_text

__all__ = ["SentencePair", "load_eng_fra", "split_by_source", "TextSplits", "load_shakespeare", "lm_batch"]


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
