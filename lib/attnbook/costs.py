"""Cost models of the whole transformer: FLOPs per token, and the activation memory of a block.

- :func:`transformer_flops` predicts the FLOPs per token of a GPT: the 6N rule of Kaplan et al. (2020) and
  the terms it leaves out (attention over the context, the output layer).
- :func:`activation_bytes` predicts the bytes one block keeps for the backward pass, which
  ``measure.saved_tensor_bytes`` measures.

The generic instruments (time, memory, FLOP counts of any function) are in :mod:`attnbook.measure`.

Chapter: scaling and practice (14).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import _checks
from ._checks import checked_by
from .models import TransformerConfig
from .positionwise import MixtureOfExperts

__all__ = ["TransformerFlops", "transformer_flops", "activation_bytes"]


@dataclass(frozen=True)
class TransformerFlops:
    """Floating-point operations per token of a decoder-only transformer, forward pass, by term.

    ``dense`` is 2 per weight of the blocks' matrices (a multiply and an add), ``attention`` the two
    products Q K^T and A V over the full T x T matrix (4 T D per layer; a causal model that skipped the
    masked half would need half), ``deembedding`` the output layer (2 D V). ``n`` is Kaplan et al.'s N,
    the number of weights in the blocks' matrices.
    """

    n: int
    n_layers: int
    seq_len: int
    d_attn: int
    dense: int
    attention: int
    deembedding: int

    @property
    def forward(self) -> int:
        """All matrix products of a forward pass, per token."""
        return self.dense + self.attention + self.deembedding

    @property
    def training(self) -> int:
        """Forward and backward, per token: each product is computed once forward and twice backward."""
        return 3 * self.forward

    @property
    def six_n(self) -> int:
        """The rule of thumb C = 6N per training token (Kaplan et al., 2020, section 2.1)."""
        return 6 * self.n

    @property
    def kaplan_forward(self) -> int:
        """Kaplan et al.'s forward estimate, C_forward = 2N + 2 n_layer n_ctx d_attn (their Table 1)."""
        return 2 * self.n + 2 * self.n_layers * self.seq_len * self.d_attn


@checked_by("_check_transformer_flops")
def transformer_flops(model: torch.nn.Module, seq_len: int | None = None) -> TransformerFlops:
    """The FLOPs per token of a GPT-like model (:class:`attnbook.models.GPT`) on windows of ``seq_len`` tokens.

    N counts the weights of the matrices inside ``model.blocks`` (attention projections, feed-forward
    layers), not the norms' gains: per token, each weight is one multiply and one add. ``seq_len`` defaults
    to the model's context (``model.config.block_size``). A mixture-of-experts layer uses only some of its
    weights per token, so it is refused.

    Shapes:
        return: counts per token of a window of seq_len tokens (the attention term depends on seq_len)

    Chapter: scaling and practice.
    """
    config = model.config
    seq_len = config.block_size if seq_len is None else seq_len
    n = sum(
        m.weight.numel()
        for block in model.blocks
        for m in block.modules()
        if isinstance(m, (torch.nn.Linear, torch.nn.Conv1d))
    )
    d_attn = config.d_model  # the width of queries and keys: H heads of Dh = D / H
    return TransformerFlops(
        n=n,
        n_layers=config.n_layers,
        seq_len=seq_len,
        d_attn=d_attn,
        dense=2 * n,
        attention=config.n_layers * 4 * seq_len * d_attn,
        deembedding=2 * config.d_model * config.vocab_size,
    )


@checked_by("_check_activation_bytes")
def activation_bytes(
    config, batch_size: int, seq_len: int, *, attention: str = "fused", bytes_per_element: int = 4
) -> int:
    """The bytes one pre-norm block of the library keeps for the backward pass (its activations).

    Per token, in elements, for width D, feed-forward width F and H heads:

    - the block's input and the first norm's output, D + D (the norm and the projection keep their inputs);
    - the queries, keys and values, 3D, and the attention's output, D (kept by the output projection);
    - the second norm's input and output, D + D;
    - the feed-forward hidden layer: F with ReLU (its output is both what ReLU and W_2 keep), 2F with
      GELU (GELU keeps its input, W_2 its output);
    - small change: each norm's mean and reciprocal standard deviation (4 numbers), and with
      ``attention="fused"`` the fused kernel's log-sum-exp per head (H numbers);
    - with ``attention="explicit"`` (the path that returns weights) the T x T softmax output and the
      masked weights of every head, 2 H T per token, instead of the log-sum-exp.

    Norms' statistics and the log-sum-exp are kept in float32 whatever ``bytes_per_element`` says.

    Shapes:
        return: bytes for a batch of batch_size windows of seq_len tokens, one block

    Chapter: scaling and practice.
    """
    hidden = {"relu": 1, "gelu": 2}[config.mlp]  # the FFN keeps F numbers with ReLU, 2F with GELU
    D, F, H = config.d_model, config.d_ff, config.n_heads
    elements = 8 * D + hidden * F  # per token, at bytes_per_element
    small = 4 + (H if attention == "fused" else 0)  # per token, float32
    scores = 2 * H * seq_len if attention == "explicit" else 0  # per token, at bytes_per_element
    return batch_size * seq_len * ((elements + scores) * bytes_per_element + 4 * small)


# --- input checks -----------------------------------------------------------------------------------------


def _check_transformer_flops(model, seq_len, **_) -> None:
    """A dense GPT-like model."""
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "blocks") or not hasattr(model, "config"):
        raise TypeError(
            f"model must be a GPT-like model with .blocks and .config (attnbook.models.GPT), got {type(model).__name__}"
        )
    if any(isinstance(m, MixtureOfExperts) for m in model.modules()):
        raise ValueError(
            "model has mixture-of-experts layers, whose FLOPs per token depend on the routing; "
            "transformer_flops counts dense models only"
        )
    if seq_len is not None:
        _checks.positive_int("seq_len", seq_len)


def _check_activation_bytes(config, batch_size, seq_len, attention, bytes_per_element, **_) -> None:
    """A configuration of the block the formula knows, positive sizes, and a known attention path."""
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be an attnbook.models.TransformerConfig, got {type(config).__name__}")
    _checks.positive_int("batch_size", batch_size)
    _checks.positive_int("seq_len", seq_len)
    _checks.positive_int("bytes_per_element", bytes_per_element)
    if attention not in ("fused", "explicit"):
        raise ValueError(f"attention must be 'fused' or 'explicit', got {attention!r}")
    if (
        config.mlp not in ("relu", "gelu")
        or config.norm_position != "pre"
        or config.norm != "layernorm"
        or config.dropout
        or config.n_kv_heads is not None
        or config.positional == "rope"
        or config.bias
    ):
        raise ValueError(
            "activation_bytes knows the library's pre-norm LayerNorm block without biases, dropout, "
            "RoPE or grouped-query attention, with a 'relu' or 'gelu' feed-forward layer; got "
            f"mlp={config.mlp!r}, norm={config.norm!r}, norm_position={config.norm_position!r}, "
            f"bias={config.bias}, dropout={config.dropout}, positional={config.positional!r}, "
            f"n_kv_heads={config.n_kv_heads}"
        )
