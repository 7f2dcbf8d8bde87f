"""Pretraining then fine-tuning: BERT's masked language modelling, and a classifier on a pretrained encoder.

- :func:`mlm_mask` draws BERT's corruption: each ordinary token is chosen with probability 0.15; a chosen
  token becomes ``[MASK]`` with probability 0.8, a random token with probability 0.1, and stays as it is
  with probability 0.1. The model must predict the original token at every chosen position, and only there.
- :class:`MaskedLM` is an encoder-only transformer (:class:`attnbook.models.Encoder`: bidirectional, no
  causal mask) with BERT's prediction head; :class:`SequenceClassifier` puts a linear head on the mean of
  an encoder's token states, for fine-tuning.
- :func:`pad`, :func:`fit_classifier` and :func:`accuracy` feed, train and score a classifier on token
  sequences, and :func:`fit_mlm` pretrains; the chapter's small labelled task (real words against their
  letters shuffled) is :func:`attnbook.data.shuffled_word_task`.

Chapter: from text to tokens, and pretraining (13).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from . import _checks, train
from .attention import padding_mask
from .blocks import masked_mean
from .models import INITS, Encoder, TransformerConfig, _check_ids

__all__ = [
    "IGNORE_INDEX",
    "mlm_mask",
    "mlm_loss",
    "MLMHead",
    "MaskedLM",
    "SequenceClassifier",
    "pad",
    "fit_classifier",
    "accuracy",
    "fit_mlm",
]

IGNORE_INDEX = -100
"""The label of a position that is not predicted (``F.cross_entropy``'s default ``ignore_index``)."""


def mlm_mask(
    ids: torch.Tensor,
    *,
    mask_id: int,
    vocab_size: int,
    special_ids: Iterable[int] = (),
    p: float = 0.15,
    mask_prob: float = 0.8,
    random_prob: float = 0.1,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
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
    _checks.positive_int("vocab_size", vocab_size)
    _checks.token_ids("ids", ids, vocab_size, min_ndim=1)
    if _checks.positive_int("mask_id", mask_id, minimum=0) >= vocab_size:
        raise ValueError(f"mask_id must be a token id in [0, vocab_size={vocab_size}), got {mask_id}")
    special_ids = _checks.as_integers(
        "special_ids",
        list(special_ids) if isinstance(special_ids, (set, frozenset)) else special_ids,
        device=ids.device,
    )
    if special_ids.dim() > 1:
        raise ValueError(
            f"special_ids must be a flat list of token ids, got shape {_checks.shape_str(special_ids.shape)}"
        )
    for name, value in (("p", p), ("mask_prob", mask_prob), ("random_prob", random_prob)):
        _checks.probability(name, value)
    if mask_prob + random_prob > 1 + 1e-12:
        raise ValueError(f"mask_prob + random_prob must be at most 1, got {mask_prob} + {random_prob}")
    _checks.generator("generator", generator)
    labels = ids.clone()
    special = torch.isin(ids, special_ids)
    chance = torch.full(ids.shape, float(p)).masked_fill_(special.cpu(), 0.0)
    chosen = torch.bernoulli(chance, generator=generator).bool().to(ids.device)  # (B, T)
    labels[~chosen] = IGNORE_INDEX
    inputs = ids.clone()
    to_mask = (
        torch.bernoulli(torch.full(ids.shape, float(mask_prob)), generator=generator).bool().to(ids.device) & chosen
    )
    inputs[to_mask] = mask_id
    if mask_prob < 1 and random_prob > 0:
        share = random_prob / (1 - mask_prob)  # of the chosen tokens that were not masked
        to_random = (
            torch.bernoulli(torch.full(ids.shape, share), generator=generator).bool().to(ids.device) & chosen & ~to_mask
        )
        random_ids = torch.randint(vocab_size, ids.shape, dtype=torch.long, generator=generator).to(ids.device)
        inputs[to_random] = random_ids[to_random].to(ids.dtype)
    return inputs, labels


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the chosen positions only (labels != IGNORE_INDEX): logits (B, T, V), labels (B, T).

    With no chosen position (possible in a tiny batch) the loss is 0, not NaN."""
    _checks.tensor("logits", logits, ndim=3, floating=True)
    _checks.token_ids("labels", labels, logits.shape[-1], ndim=2, ignore_index=IGNORE_INDEX)
    if logits.shape[:2] != labels.shape:
        raise ValueError(
            f"logits (B, T, V) and labels (B, T) disagree: {_checks.shape_str(logits.shape)} "
            f"and {_checks.shape_str(labels.shape)}"
        )
    if not bool((labels != IGNORE_INDEX).any()):  # nothing to predict: a zero loss, not 0 / 0 = NaN
        return logits.flatten()[:0].sum()  # 0, still a function of logits (a NaN elsewhere does not reach it)
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
        V, D = _checks.module("embedding", embedding, nn.Embedding, "a torch.nn.Embedding").weight.shape
        self.dense = nn.Linear(D, D)
        self.norm = nn.LayerNorm(D, eps=eps)
        self.embedding = embedding  # shared with the encoder, not a copy
        self.bias = nn.Parameter(torch.zeros(V))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        _checks.features("h", h, self.dense.in_features, module=self)
        h = self.norm(F.gelu(self.dense(h)))  # (B, T, D)
        return F.linear(h, self.embedding.weight, self.bias)  # (B, T, V)


def _check_lengths(lengths, ids: torch.Tensor, ids_name: str = "ids") -> torch.Tensor:
    """The real lengths (B,) of the rows of ``ids`` (B, T): integers in [1, T]."""
    lengths = _checks.as_integers("lengths", lengths, device=ids.device)
    if tuple(lengths.shape) != tuple(ids.shape[:1]):
        raise ValueError(
            f"lengths must have one entry per sequence of {ids_name}, shape ({ids.shape[0]},), "
            f"got shape {_checks.shape_str(lengths.shape)}"
        )
    if lengths.numel() and (int(lengths.min()) < 1 or int(lengths.max()) > ids.shape[1]):
        raise ValueError(
            f"lengths must lie in [1, T={ids.shape[1]}] (T = the width of {ids_name}), got {lengths.tolist()}"
        )
    return lengths


def _src_mask(encoder: Encoder, ids: torch.Tensor, lengths, ids_name: str = "ids") -> torch.Tensor | None:
    """Checks the token ids (B, T) for ``encoder``; the padding mask (B, 1, T) of ``lengths`` (None: no padding)."""
    _check_ids(ids_name, ids, encoder.vocab_size, encoder.config.block_size)
    if lengths is None:
        return None
    return padding_mask(_check_lengths(lengths, ids, ids_name), ids.shape[1], device=ids.device)  # (B, 1, T)


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
        return self.head(self.encoder(ids, _src_mask(self.encoder, ids, lengths)))  # (B, T, V)

    def loss(self, inputs: torch.Tensor, labels: torch.Tensor, lengths=None) -> torch.Tensor:
        """The masked-LM loss of corrupted ``inputs`` (B, T) against ``labels`` (B, T) from :func:`mlm_mask`.

        Equal to ``mlm_loss(self(inputs, lengths), labels)``, but the head scores only the chosen positions
        (about 15% of them), which saves most of the output layer's work.
        """
        mask = _src_mask(self.encoder, inputs, lengths, "inputs")  # (B, 1, T) or None
        _checks.token_ids("labels", labels, self.config.vocab_size, ndim=2, ignore_index=IGNORE_INDEX)
        if labels.shape != inputs.shape:
            raise ValueError(
                f"inputs and labels must have the same shape (B, T), got "
                f"{_checks.shape_str(inputs.shape)} and {_checks.shape_str(labels.shape)}"
            )
        h = self.encoder(inputs, mask)  # (B, T, D)
        chosen = labels != IGNORE_INDEX  # (B, T)
        if not bool(chosen.any()):  # nothing to predict (possible in a tiny batch): a zero loss, not NaN
            return h.flatten()[:0].sum()  # 0, still a function of the model
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
        mask = _src_mask(self.encoder, ids, lengths)  # (B, 1, T) or None
        h = self.encoder(ids, mask)  # (B, T, D)
        return self.head(masked_mean(h, None if mask is None else mask[:, 0]))  # (B, D) -> (B, n_classes)


def pad(
    sequences: Sequence[Sequence[int]], pad_id: int, *, max_len: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences as one padded batch: ids (B, T) filled with ``pad_id``, and lengths (B,).

    Sequences longer than ``max_len`` are cut to it; T is the longest (cut) length.

    Chapter: from text to tokens, and pretraining.
    """
    sequences = _check_sequences("sequences", sequences)
    pad_id = _checks.positive_int("pad_id", pad_id, minimum=0)
    if max_len is not None:
        _checks.positive_int("max_len", max_len)
        sequences = [s[:max_len] for s in sequences]
    lengths = [len(s) for s in sequences]
    ids = torch.full((len(sequences), max(lengths)), pad_id, dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = s
    return ids, torch.tensor(lengths)


def _check_sequences(name: str, sequences, vocab_size: int | None = None) -> list[torch.Tensor]:
    """A non-empty list of non-empty token sequences (lists or 1-D tensors of ids in [0, vocab_size)), as tensors."""
    if isinstance(sequences, (str, bytes, torch.Tensor)) or not isinstance(sequences, Sequence):
        raise TypeError(f"{name} must be a list of token sequences (lists of ids), got {type(sequences).__name__}")
    if not sequences:
        raise ValueError(f"{name} is empty")
    out = []
    for i, s in enumerate(sequences):
        ids = _checks.as_integers(f"{name}[{i}]", s, what="a list of token ids")
        if ids.dim() != 1 or ids.numel() == 0:
            raise ValueError(
                f"{name}[{i}] must be a non-empty list of token ids (every sequence needs at least one "
                f"token), got {s!r:.60}"
            )
        if vocab_size is not None:
            _checks.token_ids(f"{name}[{i}]", ids, vocab_size)
        out.append(ids.long())
    return out


def _check_task(model, ids, lengths, labels) -> None:
    _checks.module("model", model)
    _checks.tensor("ids", ids, ndim=2)
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(f"ids must hold integer token ids, got dtype {ids.dtype}")
    _checks.tensor("lengths", lengths, ndim=1)
    _checks.token_ids("labels", labels, None, ndim=1, what="class indices")
    if not ids.shape[0] == lengths.shape[0] == labels.shape[0]:
        raise ValueError(
            f"ids, lengths and labels must have one row per example, got {ids.shape[0]}, "
            f"{lengths.shape[0]} and {labels.shape[0]}"
        )
    if ids.shape[0] == 0:
        raise ValueError(f"ids holds no example: shape {_checks.shape_str(ids.shape)}")
    _check_lengths(lengths, ids)


def _scores(model, x, lens, y) -> torch.Tensor:
    """The logits (B, C) of a batch, its labels checked against the C classes."""
    logits = model(x, lens)  # (B, C)
    _checks.token_ids("labels", y, logits.shape[-1], what="class indices")
    return logits


def _check_steps(steps, warmup, *, clip: bool = False) -> None:
    """``steps`` >= 1 optimiser steps, ``warmup`` >= 0 of them (fewer than ``steps`` unless ``clip``: then cut)."""
    _checks.positive_int("steps", steps)
    if _checks.positive_int("warmup", warmup, minimum=0) >= steps and not clip:
        raise ValueError(f"warmup must be smaller than steps, got {warmup} and {steps}")


def fit_classifier(
    model: nn.Module,
    ids: torch.Tensor,
    lengths: torch.Tensor,
    labels: torch.Tensor,
    *,
    steps: int,
    batch_size: int = 32,
    lr: float = 1e-3,
    weight_decay: float = 0.01,
    warmup: int = 0,
    seed: int = 0,
    quiet: bool = True,
) -> train.History:
    """Fine-tune a sequence classifier with AdamW, cross-entropy and a cosine learning-rate schedule.

    Only the parameters with ``requires_grad`` are trained (freeze the encoder to train the head alone).
    Batches are drawn without replacement, an epoch at a time, with an order fixed by ``seed``.

    Shapes:
        ids: (N, T) token ids, lengths: (N,), labels: (N,) class indices

    Chapter: from text to tokens, and pretraining.
    """
    _check_task(model, ids, lengths, labels)
    n = ids.shape[0]
    batch_size = min(_checks.positive_int("batch_size", batch_size), n)
    _check_steps(steps, warmup)
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(_checks.positive_int("seed", seed, minimum=0))
    indices = train.shuffled_batches(n, batch_size, generator=g)

    def batch(_step: int):
        idx = next(indices)
        T = int(lengths[idx].max())
        return ids[idx, :T].to(device), lengths[idx].to(device), labels[idx].to(device)

    def loss_fn(m, b):
        x, lens, y = b
        return F.cross_entropy(_scores(m, x, lens, y), y)

    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameter (every requires_grad is False)")
    optimizer = torch.optim.AdamW(
        params,
        lr=_checks.positive_float("lr", lr),
        weight_decay=_checks.positive_float("weight_decay", weight_decay, allow_zero=True),
    )
    schedule = train.cosine_schedule(steps, warmup_steps=warmup, min_factor=0.0)
    return train.fit(
        model, batch, loss_fn, steps=steps, optimizer=optimizer, schedule=schedule, desc="fine-tuning", quiet=quiet
    )


@torch.no_grad()
def accuracy(
    model: nn.Module, ids: torch.Tensor, lengths: torch.Tensor, labels: torch.Tensor, *, batch_size: int = 512
) -> float:
    """The fraction of sequences whose arg-max logit is their label; in eval mode.

    Chapter: from text to tokens, and pretraining.
    """
    _check_task(model, ids, lengths, labels)
    batch_size = _checks.positive_int("batch_size", batch_size)
    device = next(model.parameters()).device

    def batches():  # (ids cut to the longest sequence of the batch, lengths, labels)
        for start in range(0, ids.shape[0], batch_size):
            lens = lengths[start : start + batch_size]
            x = ids[start : start + batch_size, : int(lens.max())]
            yield x.to(device), lens.to(device), labels[start : start + batch_size].to(device)

    return train.accuracy(model, batches())


def fit_mlm(
    model: MaskedLM,
    sequences: Sequence[Sequence[int]],
    *,
    pad_id: int,
    mask_id: int,
    steps: int,
    batch_size: int = 256,
    lr: float = 3e-3,
    weight_decay: float = 0.01,
    warmup: int = 20,
    p: float = 0.15,
    seed: int = 0,
    desc: str = "pretraining",
    quiet: bool = False,
) -> train.History:
    """Pretrain a :class:`MaskedLM` on token sequences (unlabelled) with BERT's masking, AdamW and a cosine schedule.

    Each step draws ``batch_size`` sequences at random (with replacement), pads them, corrupts them with
    :func:`mlm_mask` (padding is never chosen) and minimises :meth:`MaskedLM.loss`.

    Chapter: from text to tokens, and pretraining.
    """
    _checks.module("model", model, MaskedLM, "an attnbook.pretrain.MaskedLM")
    V = model.config.vocab_size
    block = model.config.block_size
    _check_sequences("sequences", sequences, V)
    for name, value in (("pad_id", pad_id), ("mask_id", mask_id)):
        if _checks.positive_int(name, value, minimum=0) >= V:
            raise ValueError(f"{name} must be a token id in [0, vocab_size={V}), got {value}")
    batch_size = _checks.positive_int("batch_size", batch_size)
    _checks.probability("p", p)
    _check_steps(steps, warmup, clip=True)
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(_checks.positive_int("seed", seed, minimum=0))

    def batch(_step: int):
        idx = torch.randint(len(sequences), (batch_size,), generator=g).tolist()
        ids, lengths = pad([sequences[i] for i in idx], pad_id, max_len=block)  # (B, T), (B,)
        inputs, labels = mlm_mask(ids, mask_id=mask_id, vocab_size=V, special_ids=[pad_id], p=p, generator=g)
        return inputs.to(device), labels.to(device), lengths.to(device)

    def loss_fn(m, b):
        inputs, labels, lengths = b
        return m.loss(inputs, labels, lengths)

    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=_checks.positive_float("lr", lr),
        weight_decay=_checks.positive_float("weight_decay", weight_decay, allow_zero=True),
    )
    schedule = train.cosine_schedule(steps, warmup_steps=min(warmup, steps - 1), min_factor=0.1)
    return train.fit(model, batch, loss_fn, steps=steps, optimizer=optimizer, schedule=schedule, desc=desc, quiet=quiet)
