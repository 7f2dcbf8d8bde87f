"""The induction-head experiment of chapter 16, apart from the model (as ``vit_experiment`` is apart from
``vit``): the recipe, the held-out probes, what is measured during training, and the training run.

- :data:`RECIPE`: a first half of 6 to 24 random letters, then its repeat; 400 steps of AdamW; the probes;
- :func:`probes`: sequences of four lengths drawn from a generator that no training run reads (its seed is
  not a training seed), each with a twin batch whose first halves have no repeated letter;
- :func:`measure`: the losses on the probes and every head's prefix-matching and previous-token scores;
- :func:`train`: an :class:`interpret.AttentionOnly` of one or more layers trained with the recipe, measured
  every ``eval_every`` steps;
- :func:`phase_change_step`: the first measured step with a loss on the repeat below ln(V) / 2.

The chapter's pages and ``benchmarks/bench_interpret.py`` (five seeds) run this same code.

Chapter: what attention learns (16).
"""

from __future__ import annotations

import math

import torch

from . import _checks, models
from . import train as training
from .interpret import (
    AttentionOnly,
    AttentionOnlyConfig,
    prefix_matching_score,
    previous_token_score,
    repeat_losses,
    repeated_tokens,
)

__all__ = ["RECIPE", "probes", "measure", "train", "phase_change_step"]

RECIPE = {
    "vocab_size": 26,  # the letters a to z
    "halves": [6, 24],  # each batch: a first half of 6 to 24 random letters, then its repeat
    "batch_size": 32,
    "steps": 400,
    "lr": 3e-3,
    "n_heads": 2,
    "d_model": 64,
    "eval_every": 25,
    "probe_size": 64,  # the probes: 64 sequences of each of these half lengths
    "probe_halves": [8, 12, 16, 20],
    "probe_seed": 1000,  # a training run of seed s reads torch.Generator().manual_seed(s): s < 1000
}


def probes(recipe: dict = RECIPE) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """{half: (sequences drawn as in training, sequences whose first half has no repeated letter)}.

    Shapes:
        each: (probe_size, 2 * half) token ids
    """
    g = torch.Generator().manual_seed(recipe["probe_seed"])
    n, V = recipe["probe_size"], recipe["vocab_size"]
    return {
        half: (repeated_tokens(n, half, V, generator=g), repeated_tokens(n, half, V, distinct=True, generator=g))
        for half in recipe["probe_halves"]
    }


@torch.no_grad()
def measure(model: AttentionOnly, probes: dict) -> dict[str, float]:
    """The losses on the probes, and every head's scores on their distinct twins, averaged over the lengths.

    Keys: "first half" and "repeat" (:func:`interpret.repeat_losses`), "prefix LlHh" for every head, and
    "previous L1Hh" for the heads of the first layer.
    """
    out = {}
    for ids, distinct in probes.values():
        first, repeat = repeat_losses(model(ids), ids)
        _, weights = model(distinct, return_weights=True)
        scores = {"first half": first, "repeat": repeat}
        for layer, w in enumerate(weights):
            for head, score in enumerate(prefix_matching_score(w)):
                scores[f"prefix L{layer + 1}H{head + 1}"] = score
        for head, score in enumerate(previous_token_score(weights[0])):
            scores[f"previous L1H{head + 1}"] = score
        for k, v in scores.items():  # the mean over the probe lengths
            out[k] = out.get(k, 0.0) + v.item() / len(probes)
    return out


def train(n_layers: int, seed: int, recipe: dict = RECIPE, *, steps: int | None = None, quiet: bool = False):
    """An attention-only model of ``n_layers`` layers trained with the recipe from ``seed``.

    Each batch has one first-half length, drawn at random, so that no fixed offset finds the copy. Returns
    the model (eval mode), the measured steps, the curves of :func:`measure` (one value per measured step)
    and the training time in seconds.
    """
    _checks.positive_int("n_layers", n_layers)
    if not 0 <= _checks.positive_int("seed", seed, minimum=0) < recipe["probe_seed"]:
        raise ValueError(f"seed must be below the probes' seed {recipe['probe_seed']}, got {seed}")
    V, (low, high) = recipe["vocab_size"], recipe["halves"]
    config = AttentionOnlyConfig(
        vocab_size=V, block_size=2 * high - 1, n_layers=n_layers, n_heads=recipe["n_heads"], d_model=recipe["d_model"]
    )
    held_out = probes(recipe)
    training.seed_everything(seed)
    model = AttentionOnly(config)
    data_gen = torch.Generator().manual_seed(seed)

    def batch(step):  # a first half of low to high letters, repeated
        half = int(torch.randint(low, high + 1, (1,), generator=data_gen))
        return repeated_tokens(recipe["batch_size"], half, V, generator=data_gen)

    def loss_fn(model, ids):  # predict every next letter
        return models.lm_loss(model(ids[:, :-1]), ids[:, 1:])

    def evaluate(model):
        return measure(model, held_out)

    start = evaluate(model)
    history = training.fit(
        model,
        batch,
        loss_fn,
        steps=steps or recipe["steps"],
        lr=recipe["lr"],
        evaluate=evaluate,
        eval_every=recipe["eval_every"],
        desc=f"{n_layers} layer(s), seed {seed}",
        quiet=quiet,
    )
    curves = {k: [start[k]] + v for k, v in history.evals.items()}
    return model.eval(), [0] + history.eval_step, curves, history.seconds


def phase_change_step(steps: list[int], repeat: list[float], vocab_size: int) -> int | None:
    """The first measured step at which the loss on the repeat is below ln(V) / 2 (None if it never is)."""
    return next((s for s, v in zip(steps, repeat) if v < math.log(vocab_size) / 2), None)
