"""Pretraining then fine-tuning: BERT's masked language modelling, and a classifier on a pretrained encoder.

- :func:`mlm_mask` draws BERT's corruption: each ordinary token is chosen with probability 0.15; a chosen
  token becomes ``[MASK]`` with probability 0.8, a random token with probability 0.1, and stays as it is
  with probability 0.1. The model must predict the original token at every chosen position, and only there.
- :class:`MaskedLM` is an encoder-only transformer (:class:`attnbook.models.Encoder`: bidirectional, no
  causal mask) with BERT's prediction head; :class:`SequenceClassifier` puts a linear head on the mean of
  an encoder's token states, for fine-tuning.
- :func:`pad`, :func:`fit_classifier` and :func:`accuracy` feed, train and score a classifier on token
  sequences; :func:`shuffled_word_task` makes the small labelled task of the chapter, and :func:`fit_mlm` pretrains.

Chapter: from text to tokens, and pretraining (13).
"""
from __future__ import annotations

import random
from typing import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from . import _checks, train
from .attention import padding_mask
from .blocks import masked_mean
from .models import INITS, Encoder, TransformerConfig

__all__ = ["IGNORE_INDEX", "mlm_mask", "mlm_loss", "MLMHead", "MaskedLM", "SequenceClassifier", "pad",
           "fit_classifier", "accuracy", "words_of", "shuffled_word_task", "fit_mlm"]

IGNORE_INDEX = -100
"""The label of a position that is not predicted (``F.cross_entropy``'s default ``ignore_index``)."""


def mlm_mask(ids: torch.Tensor, *, mask_id: int, vocab_size: int, special_ids: Iterable[int] = (),
             p: float = 0.15, mask_prob: float = 0.8, random_prob: float = 0.1,
             generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masked-language-model corruption of a batch of token ids; returns (inputs, labels).

    Each token whose id is not in ``special_ids`` (padding, ...) is chosen with probability ``p``. A chosen
    token is replaced by ``mask_id`` with probability ``mask_prob``, by a token drawn uniformly from the
    whole vocabulary with probability ``random_prob``, and kept otherwise. ``labels`` holds the original id
    at the chosen positions and :data:`IGNORE_INDEX` everywhere else.

    The random draws are made in the order of Hugging Face's ``DataCollatorForLanguageModeling``
    (which positions, which become the mask, which of the rest become random, the random ids), so with the
    same generator state both give the same result.

    Shapes:
        ids:    (B, T) token ids
        return: inputs (B, T), labels (B, T)

    Chapter: from text to tokens, and pretraining (masked language modelling).
    """
    _checks.tensor("ids", ids, min_ndim=1)
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise TypeError(f"ids must hold integer token ids, got dtype {ids.dtype}")
    _checks.positive_int("vocab_size", vocab_size)
    _checks.positive_int("mask_id", mask_id, minimum=0)
    for name, value in (("p", p), ("mask_prob", mask_prob), ("random_prob", random_prob)):
        if _checks.positive_float(name, value, allow_zero=True) > 1:
            raise ValueError(f"{name} must be a probability in [0, 1], got {value}")
    if mask_prob + random_prob > 1 + 1e-12:
        raise ValueError(f"mask_prob + random_prob must be at most 1, got {mask_prob} + {random_prob}")
    labels = ids.clone()
    special = torch.zeros_like(ids, dtype=torch.bool)
    for s in special_ids:
        special |= ids == int(s)
    chance = torch.full(ids.shape, float(p)).masked_fill_(special.cpu(), 0.0)
    chosen = torch.bernoulli(chance, generator=generator).bool().to(ids.device)  # (B, T)
    labels[~chosen] = IGNORE_INDEX
    inputs = ids.clone()
    to_mask = torch.bernoulli(torch.full(ids.shape, float(mask_prob)), generator=generator).bool().to(ids.device) & chosen
    inputs[to_mask] = mask_id
    if mask_prob < 1 and random_prob > 0:
        share = random_prob / (1 - mask_prob)  # of the chosen tokens that were not masked
        to_random = torch.bernoulli(torch.full(ids.shape, share), generator=generator).bool().to(ids.device) \
            & chosen & ~to_mask
        random_ids = torch.randint(vocab_size, ids.shape, dtype=torch.long, generator=generator).to(ids.device)
        inputs[to_random] = random_ids[to_random].to(ids.dtype)
    return inputs, labels


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the chosen positions only (labels != IGNORE_INDEX): logits (B, T, V), labels (B, T)."""
    _checks.tensor("logits", logits, ndim=3, floating=True)
    _checks.tensor("labels", labels, ndim=2)
    if logits.shape[:2] != labels.shape:
        raise ValueError(f"logits (B, T, V) and labels (B, T) disagree: {_checks.shape_str(logits.shape)} "
                         f"and {_checks.shape_str(labels.shape)}")
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)


class MLMHead(nn.Module):
    """BERT's prediction head: a dense layer with GELU and LayerNorm, then scores against the token embeddings.

    logits = LN(GELU(h W + b)) E^T + c, with E the (V, D) input embedding matrix (shared, weight tying).

    Shapes:
        h:      (B, T, D) the encoder's output
        return: (B, T, V)

    Chapter: from text to tokens, and pretraining.
    """

    def __init__(self, embedding: nn.Embedding, eps: float = 1e-5):
        super().__init__()
        V, D = embedding.weight.shape
        self.dense = nn.Linear(D, D)
        self.norm = nn.LayerNorm(D, eps=eps)
        self.embedding = embedding  # shared with the encoder, not a copy
        self.bias = nn.Parameter(torch.zeros(V))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = self.norm(F.gelu(self.dense(h)))  # (B, T, D)
        return F.linear(h, self.embedding.weight, self.bias)  # (B, T, V)


def _src_mask(ids: torch.Tensor, lengths) -> torch.Tensor | None:
    """The padding mask (B, 1, T) of sequences of ``lengths`` (None: no padding)."""
    if lengths is None:
        return None
    lengths = torch.as_tensor(lengths, device=ids.device)
    if lengths.shape != ids.shape[:1]:
        raise ValueError(f"lengths must have one entry per sequence, shape ({ids.shape[0]},), "
                         f"got shape {_checks.shape_str(lengths.shape)}")
    return padding_mask(lengths, ids.shape[1], device=ids.device)  # (B, 1, T)


class MaskedLM(nn.Module):
    """An encoder-only transformer with BERT's head: predicts every token from the whole sequence around it.

    The encoder is :class:`attnbook.models.Encoder` (token and position embeddings, bidirectional
    self-attention: each position sees every non-padding position, before and after it).

    Shapes:
        ids:     (B, T) token ids (corrupted by :func:`mlm_mask` when pretraining)
        lengths: (B,) the real lengths; positions from lengths[b] on are padding and are not attended to
        return:  logits (B, T, V)

    Chapter: from text to tokens, and pretraining.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.head = MLMHead(self.encoder.embed.token, eps=config.eps)
        INITS[config.init](self, config.n_layers)

    def forward(self, ids: torch.Tensor, lengths=None) -> torch.Tensor:
        return self.head(self.encoder(ids, _src_mask(ids, lengths)))  # (B, T, V)

    def loss(self, inputs: torch.Tensor, labels: torch.Tensor, lengths=None) -> torch.Tensor:
        """The masked-LM loss of corrupted ``inputs`` (B, T) against ``labels`` (B, T) from :func:`mlm_mask`.

        Equal to ``mlm_loss(self(inputs, lengths), labels)``, but the head scores only the chosen positions
        (about 15% of them), which saves most of the output layer's work.
        """
        _checks.tensor("labels", labels, ndim=2)
        if labels.shape != inputs.shape:
            raise ValueError(f"inputs and labels must have the same shape (B, T), got "
                             f"{_checks.shape_str(inputs.shape)} and {_checks.shape_str(labels.shape)}")
        h = self.encoder(inputs, _src_mask(inputs, lengths))  # (B, T, D)
        chosen = labels != IGNORE_INDEX  # (B, T)
        if not bool(chosen.any()):  # nothing to predict (possible in a tiny batch): a zero loss, not NaN
            return h.sum() * 0.0
        return F.cross_entropy(self.head(h[chosen]), labels[chosen])  # (n_chosen, V) against (n_chosen,)


class SequenceClassifier(nn.Module):
    """An encoder with a linear head on the mean of its token states: one label per sequence.

    ``encoder`` is an :class:`attnbook.models.Encoder`, fresh or pretrained (``MaskedLM(...).encoder``).
    The mean runs over the real tokens only (not the padding). BERT classifies from the state of a
    ``[CLS]`` token instead, which its pretraining also trained (on next-sentence prediction); with masked
    language modelling alone, the mean of the states is the better summary.

    Shapes:
        ids:     (B, T) token ids
        lengths: (B,) real lengths (None: no padding)
        return:  logits (B, n_classes)

    Chapter: from text to tokens, and pretraining.
    """

    def __init__(self, encoder: Encoder, n_classes: int):
        super().__init__()
        if not isinstance(encoder, Encoder):
            raise TypeError(f"encoder must be an attnbook.models.Encoder, got {type(encoder).__name__}")
        self.encoder = encoder
        self.head = nn.Linear(encoder.config.d_model, _checks.positive_int("n_classes", n_classes))

    def forward(self, ids: torch.Tensor, lengths=None) -> torch.Tensor:
        mask = _src_mask(ids, lengths)  # (B, 1, T) or None
        h = self.encoder(ids, mask)  # (B, T, D)
        return self.head(masked_mean(h, None if mask is None else mask[:, 0]))  # (B, D) -> (B, n_classes)


def pad(sequences: Sequence[Sequence[int]], pad_id: int, *, max_len: int | None = None
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences as one padded batch: ids (B, T) filled with ``pad_id``, and lengths (B,).

    Sequences longer than ``max_len`` are cut to it; T is the longest (cut) length.

    Chapter: from text to tokens, and pretraining.
    """
    if not sequences:
        raise ValueError("sequences is empty")
    if max_len is not None:
        _checks.positive_int("max_len", max_len)
        sequences = [s[:max_len] for s in sequences]
    lengths = [len(s) for s in sequences]
    if min(lengths) == 0:
        raise ValueError(f"sequence {lengths.index(0)} is empty; every sequence needs at least one token")
    ids = torch.full((len(sequences), max(lengths)), int(pad_id), dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, :len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return ids, torch.tensor(lengths)


def _check_task(ids, lengths, labels) -> None:
    _checks.tensor("ids", ids, ndim=2)
    _checks.tensor("lengths", lengths, ndim=1)
    _checks.tensor("labels", labels, ndim=1)
    if not ids.shape[0] == lengths.shape[0] == labels.shape[0]:
        raise ValueError(f"ids, lengths and labels must have one row per example, got {ids.shape[0]}, "
                         f"{lengths.shape[0]} and {labels.shape[0]}")


def fit_classifier(model: nn.Module, ids: torch.Tensor, lengths: torch.Tensor, labels: torch.Tensor, *,
                   steps: int, batch_size: int = 32, lr: float = 1e-3, weight_decay: float = 0.01,
                   warmup: int = 0, seed: int = 0, quiet: bool = True) -> train.History:
    """Fine-tune a sequence classifier with AdamW, cross-entropy and a cosine learning-rate schedule.

    Only the parameters with ``requires_grad`` are trained (freeze the encoder to train the head alone).
    Batches are drawn without replacement, an epoch at a time, with an order fixed by ``seed``.

    Shapes:
        ids: (N, T) token ids, lengths: (N,), labels: (N,) class indices

    Chapter: from text to tokens, and pretraining.
    """
    _check_task(ids, lengths, labels)
    n = ids.shape[0]
    batch_size = min(_checks.positive_int("batch_size", batch_size), n)
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    order: list[int] = []

    def batch(_step: int):
        nonlocal order
        if len(order) < batch_size:
            order = torch.randperm(n, generator=g).tolist()
        idx, order = order[:batch_size], order[batch_size:]
        T = int(lengths[idx].max())
        return ids[idx, :T].to(device), lengths[idx].to(device), labels[idx].to(device)

    def loss_fn(m, b):
        x, lens, y = b
        return F.cross_entropy(m(x, lens), y)

    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameter (every requires_grad is False)")
    optimizer = torch.optim.AdamW(params, lr=_checks.positive_float("lr", lr), weight_decay=weight_decay)
    schedule = train.cosine_schedule(steps, warmup_steps=warmup, min_factor=0.0)
    return train.fit(model, batch, loss_fn, steps=steps, optimizer=optimizer, schedule=schedule,
                     desc="fine-tuning", quiet=quiet)


@torch.no_grad()
def accuracy(model: nn.Module, ids: torch.Tensor, lengths: torch.Tensor, labels: torch.Tensor, *,
             batch_size: int = 512) -> float:
    """The fraction of sequences whose arg-max logit is their label; in eval mode.

    Chapter: from text to tokens, and pretraining.
    """
    _check_task(ids, lengths, labels)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    correct = 0
    for start in range(0, ids.shape[0], batch_size):
        lens = lengths[start:start + batch_size]
        x = ids[start:start + batch_size, :int(lens.max())].to(device)
        correct += int((model(x, lens.to(device)).argmax(-1).cpu() == labels[start:start + batch_size]).sum())
    model.train(was_training)
    return correct / ids.shape[0]


def words_of(text: str, *, min_len: int = 1, max_len: int | None = None, lower: bool = True) -> list[str]:
    """The words of ``text`` in order (runs of the letters A-Z and a-z), lower-cased, of ``min_len`` to ``max_len`` letters.

    >>> words_of("To be, or not to be: that is the question.", min_len=3)
    ['not', 'that', 'the', 'question']

    Chapter: from text to tokens, and pretraining.
    """
    import re

    _checks.positive_int("min_len", min_len)
    words = re.findall(r"[A-Za-z]+", _checks_text(text))
    if lower:
        words = [w.lower() for w in words]
    return [w for w in words if len(w) >= min_len and (max_len is None or len(w) <= max_len)]


def _checks_text(text) -> str:
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return text


def shuffled_word_task(words: Sequence[str], *, seed: int = 0, tries: int = 50) -> tuple[list[str], list[int]]:
    """A labelled task made from a list of words: is this a real word (label 0) or its letters shuffled (1)?

    Each distinct word is used once; about half of them, chosen at random, are replaced by a shuffle of
    their letters that is neither the word itself nor another word of the list (a word with no such
    shuffle, "noon", stays real). Both classes have exactly the same letters, so no single letter, and no
    bag of letters, tells them apart: only the order does.

    Returns (texts, labels) in a shuffled order fixed by ``seed``.

    Chapter: from text to tokens, and pretraining.
    """
    distinct = sorted(set(words))
    if not distinct:
        raise ValueError("words is empty")
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


def fit_mlm(model: MaskedLM, sequences: Sequence[Sequence[int]], *, pad_id: int, mask_id: int, steps: int,
            batch_size: int = 256, lr: float = 3e-3, weight_decay: float = 0.01, warmup: int = 20, p: float = 0.15,
            seed: int = 0, desc: str = "pretraining", quiet: bool = False) -> train.History:
    """Pretrain a :class:`MaskedLM` on token sequences (unlabelled) with BERT's masking, AdamW and a cosine schedule.

    Each step draws ``batch_size`` sequences at random (with replacement), pads them, corrupts them with
    :func:`mlm_mask` (padding is never chosen) and minimises :meth:`MaskedLM.loss`.

    Chapter: from text to tokens, and pretraining.
    """
    if not isinstance(model, MaskedLM):
        raise TypeError(f"model must be an attnbook.pretrain.MaskedLM, got {type(model).__name__}")
    if not sequences:
        raise ValueError("sequences is empty")
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    V = model.config.vocab_size
    block = model.config.block_size

    def batch(_step: int):
        idx = torch.randint(len(sequences), (batch_size,), generator=g).tolist()
        ids, lengths = pad([sequences[i] for i in idx], pad_id, max_len=block)  # (B, T), (B,)
        inputs, labels = mlm_mask(ids, mask_id=mask_id, vocab_size=V, special_ids=[pad_id], p=p, generator=g)
        return inputs.to(device), labels.to(device), lengths.to(device)

    def loss_fn(m, b):
        inputs, labels, lengths = b
        return m.loss(inputs, labels, lengths)

    optimizer = torch.optim.AdamW(model.parameters(), lr=_checks.positive_float("lr", lr), weight_decay=weight_decay)
    schedule = train.cosine_schedule(steps, warmup_steps=min(warmup, steps - 1), min_factor=0.1)
    return train.fit(model, batch, loss_fn, steps=steps, optimizer=optimizer, schedule=schedule, desc=desc,
                     quiet=quiet)
