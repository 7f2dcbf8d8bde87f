"""Checkpoints of ``train_lm`` runs: reading one back (``torch.load`` with ``weights_only=True``), checking
that it fits the model and the run, and loading the trained model with its tokenizer.

Chapter: the lab (12).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from .. import data
from ..models import GPT, TransformerConfig

__all__ = ["CHECKPOINT_FORMAT", "CheckpointError", "load_checkpoint", "load_model"]

CHECKPOINT_FORMAT = "attnbook.train_lm/1"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: missing, corrupted, or made for another model or run."""


def _config_differences(saved: dict, current: dict, *, ignore=()) -> str:
    keys = sorted((set(saved) | set(current)) - set(ignore))
    diffs = [
        f"{k}: checkpoint {saved.get(k)!r}, now {current.get(k)!r}" for k in keys if saved.get(k) != current.get(k)
    ]
    return "; ".join(diffs)


def _read_checkpoint(path, *, map_location=None) -> dict:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a path (a str or a pathlib.Path), got {type(path).__name__}")
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at path {str(path)!r}")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # truncated files, other pickles, random bytes: all refused the same way
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CheckpointError(
            f"path {str(path)!r} is not a readable checkpoint (corrupted or not written by "
            f"attnbook.train_lm): {message}"
        ) from None
    required = {
        "format",
        "step",
        "train_seconds",
        "world_size",
        "train_config",
        "model_config",
        "chars",
        "model",
        "optimizer",
    }
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT or not required <= set(ckpt):
        found = ckpt.get("format") if isinstance(ckpt, dict) else type(ckpt).__name__
        raise CheckpointError(
            f"path {str(path)!r} is not an attnbook.train_lm checkpoint (expected format "
            f"{CHECKPOINT_FORMAT!r}, found {found!r})"
        )
    return ckpt


def _load_model_state(model: torch.nn.Module, state: dict, path) -> None:
    ours = model.state_dict()
    missing = sorted(set(ours) - set(state))
    unexpected = sorted(set(state) - set(ours))
    shapes = [
        f"{k}: checkpoint {tuple(state[k].shape)}, model {tuple(ours[k].shape)}"
        for k in sorted(set(ours) & set(state))
        if tuple(state[k].shape) != tuple(ours[k].shape)
    ]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing[:5])}")
        if unexpected:
            parts.append(f"unexpected {', '.join(unexpected[:5])}")
        if shapes:
            parts.append("different shapes " + "; ".join(shapes[:5]))
        raise CheckpointError(f"{path} does not fit this model: " + "; ".join(parts))
    model.load_state_dict(state)


def load_checkpoint(path: str | os.PathLike, *, map_location="cpu") -> dict:
    """Read and check a checkpoint of ``train_lm`` (``torch.load`` with ``weights_only=True``)."""
    return _read_checkpoint(path, map_location=map_location)


def load_model(path: str | os.PathLike, *, device="cpu") -> tuple[GPT, data.CharTokenizer]:
    """The trained model (in eval mode) and its tokenizer from a ``train_lm`` checkpoint."""
    ckpt = _read_checkpoint(path, map_location=device)
    try:
        config = TransformerConfig(**ckpt["model_config"])
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{path} holds an invalid model configuration: {error}") from None
    model = GPT(config).to(device)
    _load_model_state(model, ckpt["model"], path)
    return model.eval(), data.CharTokenizer(ckpt["chars"])
