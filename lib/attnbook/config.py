"""The configuration of a transformer model: one frozen dataclass names everything a model is made of.

:class:`TransformerConfig` (``models.TransformerConfig``) in the style of nanoGPT's ``GPTConfig``: widths,
depths, the norm and where it sits, the MLP, the positional encoding, the initialisation. Each choice is a
name in a registry (``blocks.NORMS``, ``blocks.MLPS``, ``positional.POSITIONALS``, :data:`INITS`), so that a
new kind is registered rather than added as a new argument. The models are in :mod:`attnbook.models`.

Chapter: the transformer block; the lab; modern tweaks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from . import _checks
from .blocks import NORM_POSITIONS
from .positional import POSITIONALS
from .positionwise import MLPS, NORMS

__all__ = ["TransformerConfig", "INITS"]


def _init_gpt2(model: nn.Module, n_layers: int) -> None:
    """GPT-2's initialisation: N(0, 0.02) weights, zero biases, residual projections scaled by 1/sqrt(2L)."""
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            std = 0.02 / math.sqrt(2 * n_layers) if name.endswith(("W_o.weight", "ffn.W_2.weight")) else 0.02
            nn.init.normal_(p, mean=0.0, std=std)
        elif name.endswith("bias") and "norm" not in name:
            nn.init.zeros_(p)


def _init_xavier(model: nn.Module, n_layers: int) -> None:
    """Glorot-uniform weight matrices (the PyTorch and Annotated Transformer choice for the 2017 model)."""
    for p in model.parameters():
        if p.dim() >= 2:
            nn.init.xavier_uniform_(p)


# name -> function(model, n_layers) that initialises the parameters in place
INITS: dict[str, Callable[[nn.Module, int], None]] = {
    "gpt2": _init_gpt2,
    "xavier": _init_xavier,
    "torch": lambda model, n_layers: None,  # keep PyTorch's defaults
}


@dataclass(frozen=True)
class TransformerConfig:
    """Everything that defines a transformer model; frozen, so a config can be shared and saved safely.

    Change a field with ``dataclasses.replace(config, n_layers=6)`` (or ``config.replace(...)``).
    ``d_ff`` defaults to 4 * d_model. For an encoder-decoder, ``src_vocab_size`` defaults to ``vocab_size``
    and ``n_encoder_layers`` to ``n_layers``.

    Chapter: the transformer block; the lab; modern tweaks.
    """

    vocab_size: int
    block_size: int = 256  # the longest context the model accepts (positions 0 .. block_size - 1)
    n_layers: int = 4
    n_heads: int = 4
    d_model: int = 128
    d_ff: int | None = None
    dropout: float = 0.0
    bias: bool = True
    norm: str = "layernorm"  # a key of blocks.NORMS
    norm_position: str = "pre"  # "post" (2017) or "pre" (GPT-2 and later)
    mlp: str = "gelu"  # a key of blocks.MLPS
    positional: str = "learned"  # a key of positional.POSITIONALS
    tie_weights: bool = True  # the output projection shares the token embedding matrix
    scale_embeddings: bool = False  # multiply token embeddings by sqrt(d_model), as the 2017 paper does
    init: str = "gpt2"  # a key of INITS
    eps: float = 1e-5
    src_vocab_size: int | None = None
    n_encoder_layers: int | None = None
    n_kv_heads: int | None = None  # key/value heads of grouped-query attention (None: multi-head attention)
    qk_norm: bool = False  # LayerNorm on each head's queries and keys (scaling and practice)

    def __post_init__(self):
        _check_config_fields(self)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)  # the FFN is four times as wide as the model

    def replace(self, **changes) -> TransformerConfig:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def block_kwargs(self) -> dict:
        """The keyword arguments of ``EncoderBlock`` / ``DecoderBlock`` that this config sets."""
        return dict(
            d_model=self.d_model,
            n_heads=self.n_heads,
            d_ff=self.d_ff,
            dropout=self.dropout,
            mlp=self.mlp,
            norm=self.norm,
            norm_position=self.norm_position,
            bias=self.bias,
            eps=self.eps,
            n_kv_heads=self.n_kv_heads,
            rope=self.positional == "rope",
            qk_norm=self.qk_norm,
        )


# --- input checks -----------------------------------------------------------------------------------------


def _check_config_fields(config: TransformerConfig) -> None:
    """The checks of :class:`TransformerConfig`."""
    for name in ("vocab_size", "block_size", "n_layers", "n_heads", "d_model"):
        _checks.positive_int(name, getattr(config, name))
    if config.d_model % config.n_heads:
        raise ValueError(
            f"d_model must be divisible by n_heads, got d_model={config.d_model} and n_heads={config.n_heads}"
        )
    if config.d_ff is not None:
        _checks.positive_int("d_ff", config.d_ff)
    if config.n_kv_heads is not None and config.n_heads % _checks.positive_int("n_kv_heads", config.n_kv_heads):
        raise ValueError(
            f"n_heads must be divisible by n_kv_heads, got n_heads={config.n_heads} and n_kv_heads={config.n_kv_heads}"
        )
    for name in ("src_vocab_size", "n_encoder_layers"):
        if getattr(config, name) is not None:
            _checks.positive_int(name, getattr(config, name))
    _checks.dropout("dropout", config.dropout)
    for name, options in (
        ("norm", NORMS),
        ("norm_position", NORM_POSITIONS),
        ("mlp", MLPS),
        ("positional", POSITIONALS),
        ("init", INITS),
    ):
        _checks.choice(name, getattr(config, name), tuple(options))
    _checks.positive_float("eps", config.eps)
