"""The training runs of the scaling grid: the lab's recipe (:mod:`attnbook.train_lm`) resized to a model shape
and a budget of training tokens, and the peak learning rate by width. The fits of the scaling laws to
what the grid measures are in :mod:`attnbook.scaling`.

Chapter: scaling and practice (14).
"""

from __future__ import annotations

from . import _checks
from .train_lm import RECIPES, TrainConfig

__all__ = ["peak_lr", "recipe"]


def peak_lr(d_model: int) -> float:
    """The peak learning rate of the scaling grid for a model of width ``d_model``: 0.03 * (16 / d_model)^0.75.

    Fitted to short sweeps at widths 16, 32 and 96 (``benchmarks/README.md``): narrower models take larger
    steps.

    Chapter: scaling and practice.
    """
    _checks.positive_int("d_model", d_model)
    return 0.03 * (16 / d_model) ** 0.75


def recipe(
    n_layers: int, d_model: int, n_heads: int, tokens: int, *, seed: int = 0, batch_size: int = 16, block_size: int = 64
) -> TrainConfig:
    """The book's recipe resized for the scaling grid: a model shape and a budget of training tokens.

    Everything else is the lab's recipe; the rule that changes with the size is the peak learning rate
    (:func:`peak_lr`); the schedule fits the budget: ``tokens // (batch_size * block_size)`` steps, warmup
    over the first 5% (at least 5 steps), cosine decay to a tenth of the peak at the last step.

    Chapter: scaling and practice.
    """
    _check_budget(tokens, batch_size, block_size)
    steps = tokens // (batch_size * block_size)
    return RECIPES["book"].replace(
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        batch_size=batch_size,
        block_size=block_size,
        steps=steps,
        lr=peak_lr(d_model),
        warmup_steps=max(5, steps // 20),
        min_lr_factor=0.1,
        seed=seed,
        eval_every=steps,
        checkpoint_every=steps,
        sample_chars=0,
    )


def _check_budget(tokens, batch_size, block_size) -> None:
    """A budget of tokens that buys at least 10 steps of batch_size x block_size tokens."""
    for name, value in (("tokens", tokens), ("batch_size", batch_size), ("block_size", block_size)):
        _checks.positive_int(name, value)
    if tokens // (batch_size * block_size) < 10:
        raise ValueError(f"tokens must buy at least 10 steps of {batch_size} x {block_size} tokens, got {tokens}")
