"""Training utilities: seeds, device choice, a progress bar, and one training loop that records history.

Chapter: every chapter that trains a model; the loop itself is read in the lab (chapter 12).
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from . import _checks

__all__ = [
    "seed_everything",
    "pick_device",
    "progress",
    "History",
    "fit",
    "shuffled_batches",
    "accuracy",
    "inverse_sqrt_schedule",
    "cosine_schedule",
]


def seed_everything(seed: int = 0) -> int:
    """Seed Python's, NumPy's and PyTorch's (CPU and every GPU) random generators; return the seed."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return seed


def pick_device(prefer: str | None = None) -> torch.device:
    """The best available device: CUDA, then Apple MPS, then CPU.

    ``prefer`` (or the environment variable ``ATTNBOOK_DEVICE``) forces one, e.g. ``"cpu"``;
    asking for a device that is not available raises an error that says so.
    """
    if prefer is not None and not isinstance(prefer, (str, torch.device)):
        raise TypeError(f"prefer must be a device name such as 'cpu' or 'cuda', got {type(prefer).__name__}")
    prefer = prefer or os.environ.get("ATTNBOOK_DEVICE") or None
    if prefer is not None:
        try:
            device = torch.device(prefer)
        except RuntimeError:
            raise ValueError(
                f"prefer (or ATTNBOOK_DEVICE) must name a device such as 'cpu', 'cuda' or 'mps', got {prefer!r}"
            ) from None
        available = {
            "cpu": True,
            "cuda": torch.cuda.is_available(),
            "mps": hasattr(torch.backends, "mps") and torch.backends.mps.is_available(),
        }.get(device.type, False)
        if not available:
            raise ValueError(f"device {prefer!r} was asked for (prefer or ATTNBOOK_DEVICE) but is not available here")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if hasattr(torch.backends, "mps") and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def progress(iterable: Iterable | None = None, *, total: int | None = None, desc: str | None = None, **kwargs):
    """A progress bar (tqdm): a widget in Jupyter and Colab, text in a terminal.

    Set the environment variable ``ATTNBOOK_PROGRESS=0`` to hide it.
    """
    from tqdm.auto import tqdm

    if total is not None:
        _checks.positive_int("total", total, minimum=0)
    if desc is not None:
        _checks.text("desc", desc)
    kwargs.setdefault("disable", os.environ.get("ATTNBOOK_PROGRESS", "1") == "0")
    kwargs.setdefault("mininterval", 0.5)
    return tqdm(iterable, total=total, desc=desc, **kwargs)


@dataclass
class History:
    """What a training run recorded: the loss and learning rate at every step, evaluations now and then.

    ``seconds`` is the run's wall-clock time, which other programs on a busy machine inflate;
    ``cpu_seconds`` the processor time the process used meanwhile (all its threads), which they do not.
    """

    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    eval_step: list[int] = field(default_factory=list)
    evals: dict[str, list[float]] = field(default_factory=dict)
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    diverged: bool = False

    def record_eval(self, step: int, metrics: dict[str, float]) -> None:
        self.eval_step.append(step)
        for name, value in metrics.items():
            self.evals.setdefault(name, []).append(float(value))

    def smoothed_loss(self, window: int = 20) -> list[float]:
        """The mean of the training loss over the last ``window`` steps at each step (fewer at the start), for plots.

        A non-finite loss (a diverged step) shows only in the ``window`` means that include it.
        """
        window = _checks.positive_int("window", window)
        wrong = [v for v in self.loss if isinstance(v, bool) or not isinstance(v, (int, float))]
        if wrong:
            raise TypeError(f"loss must hold numbers (one training loss per step), got {wrong[0]!r}")
        return [sum(self.loss[max(0, i + 1 - window) : i + 1]) / min(i + 1, window) for i in range(len(self.loss))]


def _batches(source) -> Callable[[int], object]:
    if callable(source):
        return source
    iterator: Iterator | None = None

    def next_batch(_step: int):
        nonlocal iterator
        if iterator is None:
            iterator = iter(source)
        try:
            return next(iterator)
        except StopIteration:  # start the next epoch
            iterator = iter(source)
            return next(iterator)

    return next_batch


def fit(
    model: torch.nn.Module,
    batches,
    loss_fn: Callable[[torch.nn.Module, object], torch.Tensor],
    *,
    steps: int,
    optimizer: torch.optim.Optimizer | None = None,
    lr: float = 1e-3,
    schedule: Callable[[int], float] | None = None,
    grad_clip: float | None = None,
    evaluate: Callable[[torch.nn.Module], dict[str, float]] | None = None,
    eval_every: int = 0,
    desc: str = "training",
    stop_on_nonfinite: bool = True,
    quiet: bool = False,
) -> History:
    """Train ``model`` for ``steps`` optimiser steps and return the :class:`History`.

    Args:
        batches: a function ``step -> batch`` or an iterable of batches (restarted when exhausted).
        loss_fn: ``loss_fn(model, batch)`` returns the scalar loss to minimise.
        optimizer: defaults to AdamW(model.parameters(), lr).
        schedule: multiplies the base learning rate at each step (``step -> factor``).
        grad_clip: clip the global gradient norm to this value.
        evaluate: ``evaluate(model) -> {name: value}``, run in eval mode without gradients every
            ``eval_every`` steps (if > 0) and after the last step.
        stop_on_nonfinite: stop (and set ``history.diverged``) when the loss becomes inf or NaN.
        quiet: no progress bar (for many short runs inside an outer loop that shows its own).
    """
    steps = _checks.positive_int("steps", steps)
    _checks.module("model", model)
    _checks.function("loss_fn", loss_fn)
    _checks.function("schedule", schedule, optional=True)
    _checks.function("evaluate", evaluate, optional=True)
    eval_every = _checks.positive_int("eval_every", eval_every, minimum=0)
    if grad_clip is not None:
        grad_clip = _checks.positive_float("grad_clip", grad_clip)
    next_batch = _batches(batches)
    if optimizer is None:
        optimizer = torch.optim.AdamW(model.parameters(), lr=_checks.positive_float("lr", lr))
    base_lrs = [group["lr"] for group in optimizer.param_groups]
    history = History()

    def run_eval(step: int) -> None:
        was_training = model.training
        model.eval()
        with torch.no_grad():
            history.record_eval(step, evaluate(model))
        model.train(was_training)

    start, cpu_start = time.perf_counter(), time.process_time()
    model.train()
    bar = progress(range(steps), desc=desc, **({"disable": True} if quiet else {}))
    for step in bar:
        if schedule is not None:
            factor = float(schedule(step))
            for group, base in zip(optimizer.param_groups, base_lrs):
                group["lr"] = base * factor
        loss = loss_fn(model, next_batch(step))
        value = float(loss.detach())
        history.step.append(step)
        history.loss.append(value)
        history.lr.append(optimizer.param_groups[0]["lr"])
        if not math.isfinite(value) and stop_on_nonfinite:
            history.diverged = True
            break
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        if evaluate is not None and eval_every and (step + 1) % eval_every == 0 and step + 1 < steps:
            run_eval(step + 1)
        if step % 10 == 0:
            bar.set_postfix(loss=f"{value:.4f}", refresh=False)
    bar.close()
    if evaluate is not None and not history.diverged:
        run_eval(len(history.step))
    history.seconds = time.perf_counter() - start
    history.cpu_seconds = time.process_time() - cpu_start
    return history


def shuffled_batches(n: int, batch_size: int, *, generator: torch.Generator) -> Iterator[list[int]]:
    """Endless batches of ``batch_size`` indices into ``range(n)``, drawn without replacement an epoch at a
    time: a new random order (from ``generator``) whenever fewer than ``batch_size`` indices are left, the
    rest of the old epoch dropped.

    Chapter: vision transformers; from text to tokens, and pretraining.
    """
    _check_shuffled_batches(n, batch_size, generator)
    return _epochs(n, batch_size, generator)


def _epochs(n: int, batch_size: int, generator: torch.Generator) -> Iterator[list[int]]:
    order: list[int] = []
    while True:
        if len(order) < batch_size:  # a new epoch
            order = torch.randperm(n, generator=generator).tolist()
        batch, order = order[:batch_size], order[batch_size:]
        yield batch


@torch.no_grad()
def accuracy(model: torch.nn.Module, batches: Iterable[tuple]) -> float:
    """The fraction of examples whose largest logit is their label, the model in eval mode.

    ``batches`` yields tuples (inputs..., labels): the model's arguments, then the labels (b,) of the
    logits (b, C) it returns; a label outside [0, C) is an error.

    Chapter: vision transformers; from text to tokens, and pretraining.
    """
    _checks.module("model", model)
    was_training = model.training
    model.eval()
    correct = total = 0
    try:
        for *inputs, labels in batches:
            logits = model(*inputs)  # (b, C)
            _checks.token_ids("labels", labels, logits.shape[-1], what="class indices")
            correct += int((logits.argmax(dim=-1) == labels).sum())
            total += labels.numel()
    finally:
        model.train(was_training)
    return correct / total


def _check_shuffled_batches(n, batch_size, generator) -> None:
    _checks.positive_int("n", n)
    _checks.positive_int("batch_size", batch_size)
    if batch_size > n:
        raise ValueError(f"batch_size must be at most n={n} (a batch without repeats), got {batch_size}")
    _checks.instance(
        "generator", generator, torch.Generator, "a torch.Generator (e.g. torch.Generator().manual_seed(0))"
    )


# --- Learning-rate schedules ---------------------------------------------------------------------------
# Chapter: the transformer block (the 2017 schedule); the lab (warmup then cosine decay).


def inverse_sqrt_schedule(d_model: int, warmup_steps: int) -> Callable[[int], float]:
    r"""The learning rate of the 2017 transformer, lrate = d_model^-0.5 * min(n^-0.5, n * warmup^-1.5).

    ``n = step + 1`` counts optimiser steps from 1 (at n = 0 the formula would divide by zero). The rate
    grows linearly for ``warmup_steps`` steps, peaks at ``(d_model * warmup_steps) ** -0.5``, then decays
    as 1 / sqrt(n). It is the learning rate itself: use it with ``fit(..., lr=1.0, schedule=...)``.
    """
    d_model = _checks.positive_int("d_model", d_model)
    warmup_steps = _checks.positive_int("warmup_steps", warmup_steps)

    def lrate(step: int) -> float:
        n = step + 1
        return d_model**-0.5 * min(n**-0.5, n * warmup_steps**-1.5)

    return lrate


def cosine_schedule(total_steps: int, *, warmup_steps: int = 0, min_factor: float = 0.1) -> Callable[[int], float]:
    """A factor for the base learning rate: linear warmup, then a cosine from 1 down to ``min_factor``.

    ``factor(step)`` is ``(step + 1) / (warmup_steps + 1)`` during warmup, then
    ``min_factor + (1 - min_factor) * (1 + cos(pi * progress)) / 2`` with progress going from 0 to 1 between
    ``warmup_steps`` and ``total_steps``, and ``min_factor`` after (nanoGPT's schedule).
    """
    total_steps = _checks.positive_int("total_steps", total_steps)
    warmup_steps = _checks.positive_int("warmup_steps", warmup_steps, minimum=0)
    if warmup_steps >= total_steps:
        raise ValueError(f"warmup_steps must be smaller than total_steps, got {warmup_steps} and {total_steps}")
    min_factor = _checks.positive_float("min_factor", min_factor, allow_zero=True)
    if min_factor > 1:
        raise ValueError(f"min_factor must be in [0, 1], got {min_factor}")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        if step >= total_steps:
            return min_factor
        progress = (step - warmup_steps) / (total_steps - warmup_steps)
        return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor
