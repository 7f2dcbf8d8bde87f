"""The configuration of a training run of the lab's model: model, data, optimiser and logging.

Chapter: the lab (12).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import _checks
from ..models import TransformerConfig

__all__ = ["TrainConfig"]


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run of the lab's language model (model, data, optimiser, logging)."""

    # model
    n_layers: int = 4
    n_heads: int = 4
    d_model: int = 128
    d_ff: int | None = None
    block_size: int = 64
    dropout: float = 0.0
    bias: bool = False
    norm_position: str = "pre"
    mlp: str = "gelu"
    positional: str = "learned"
    tie_weights: bool = True
    qk_norm: bool = False
    # optimisation: AdamW, linear warmup then cosine decay to lr * min_lr_factor at `steps`
    batch_size: int = 12  # windows per process and step
    steps: int = 2000
    lr: float = 1e-3
    min_lr_factor: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0
    # data and bookkeeping
    dataset: str = "tinyshakespeare"
    val_fraction: float = 0.1
    seed: int = 1337
    eval_every: int = 250
    eval_batch_size: int = 64
    checkpoint_every: int = 250
    log_every: int = 10
    sample_chars: int = 500
    device: str = "auto"
    threads: int | None = None

    def __post_init__(self):
        _check_train_config(self)

    def model_config(self, vocab_size: int) -> TransformerConfig:
        """The model's :class:`~attnbook.models.TransformerConfig` for a vocabulary of ``vocab_size``."""
        return TransformerConfig(
            vocab_size=vocab_size,
            block_size=self.block_size,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            d_model=self.d_model,
            d_ff=self.d_ff,
            dropout=self.dropout,
            bias=self.bias,
            norm_position=self.norm_position,
            mlp=self.mlp,
            positional=self.positional,
            tie_weights=self.tie_weights,
            qk_norm=self.qk_norm,
        )

    def replace(self, **changes) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        if not isinstance(values, dict):
            raise TypeError(f"a training configuration must be a mapping of fields, got {type(values).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"unknown configuration field(s): {', '.join(unknown)}; known fields: {', '.join(sorted(known))}"
            )
        return cls(**values)


# --- input checks ------------------------------------------------------------------------------------


def _check_train_config(c: TrainConfig) -> None:
    """Every field; the model's fields are TransformerConfig's, which checks them."""
    for name in (
        "n_layers",
        "n_heads",
        "d_model",
        "block_size",
        "batch_size",
        "steps",
        "eval_every",
        "eval_batch_size",
        "checkpoint_every",
        "log_every",
    ):
        _checks.positive_int(name, getattr(c, name))
    for name in ("warmup_steps", "seed", "sample_chars"):
        _checks.positive_int(name, getattr(c, name), minimum=0)
    for name in ("d_ff", "threads"):
        if getattr(c, name) is not None:
            _checks.positive_int(name, getattr(c, name))
    _checks.positive_float("lr", c.lr)
    for name in ("min_lr_factor", "weight_decay", "grad_clip", "dropout"):
        _checks.positive_float(name, getattr(c, name), allow_zero=True)
    for name in ("beta1", "beta2", "val_fraction", "dropout"):
        if not 0.0 <= _checks.positive_float(name, getattr(c, name), allow_zero=True) < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {getattr(c, name)}")
    if c.min_lr_factor > 1:
        raise ValueError(f"min_lr_factor must be in [0, 1], got {c.min_lr_factor}")
    if c.warmup_steps >= c.steps:
        raise ValueError(f"warmup_steps must be smaller than steps, got {c.warmup_steps} and {c.steps}")
    if c.dataset != "tinyshakespeare":
        raise ValueError(f"dataset must be 'tinyshakespeare', got {c.dataset!r}")
    # the vocabulary comes from the data, known only when the text is read; any size lets TransformerConfig
    # check the rest (heads that divide the width, a known norm, MLP and positional encoding...)
    c.model_config(vocab_size=1)
