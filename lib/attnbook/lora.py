"""Low-rank adapters (LoRA): fine-tune a frozen linear layer through a trainable update of rank r.

A pretrained layer y = x W^T + b is kept frozen; LoRA adds a product of two thin matrices,

    y = x W^T + b + (alpha / r) x A^T B^T,      A: (r, d_in), B: (d_out, r),

so the layer's effective weight is W + (alpha / r) B A, a change of rank at most r (Hu et al., 2022).
B starts at zero, so the adapted model starts exactly as the pretrained one; A starts random. Only
r (d_in + d_out) numbers per layer are trained instead of d_in d_out, and after training the update
can be merged into W (:meth:`LoRALinear.merged`), so inference costs nothing extra.

Chapter: from text to tokens, and pretraining (13: adapting a pretrained model).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from . import _checks

__all__ = ["LoRALinear", "add_lora", "merge_lora", "freeze"]


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable low-rank update (alpha / r) B A.

    ``forward`` applies A and B to x one after the other (never forming a d_out x d_in matrix). Code that
    reads ``.weight`` and ``.bias`` directly, as the library's attention does to project queries, keys and
    values in one product, gets the effective weight W + (alpha / r) B A, so it computes the same thing.

    Shapes:
        base.weight: W (d_out, d_in); A: (r, d_in); B: (d_out, r)
        x:           (..., d_in)
        return:      (..., d_out)

    Chapter: from text to tokens, and pretraining.
    """

    def __init__(self, base: nn.Linear, r: int = 4, alpha: float | None = None):
        super().__init__()
        _checks.module("base", base, nn.Linear, "a torch.nn.Linear")
        self.r = _checks.positive_int("r", r)
        d_out, d_in = base.weight.shape
        if r > min(d_in, d_out):
            raise ValueError(f"r must be at most min(d_in, d_out) = {min(d_in, d_out)}, got {r}")
        self.alpha = float(r) if alpha is None else _checks.positive_float("alpha", alpha)
        self.scale = self.alpha / self.r
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.A = nn.Parameter(torch.empty(r, d_in, dtype=base.weight.dtype, device=base.weight.device))
        self.B = nn.Parameter(torch.zeros(d_out, r, dtype=base.weight.dtype, device=base.weight.device))
        nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))  # the initialisation of nn.Linear (and of the paper's code)

    @property
    def in_features(self) -> int:
        return self.base.in_features

    @property
    def out_features(self) -> int:
        return self.base.out_features

    @property
    def weight(self) -> torch.Tensor:
        """The effective weight W + (alpha / r) B A, shape (d_out, d_in)."""
        return self.base.weight + self.scale * (self.B @ self.A)

    @property
    def bias(self) -> torch.Tensor | None:
        return self.base.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _checks.features("x", x, self.in_features, module=self, width_name="d_in")
        update = (x @ self.A.t()) @ self.B.t()  # (..., r) then (..., d_out): never forms the d_out x d_in matrix
        return self.base(x) + self.scale * update  # (..., d_out)

    @torch.no_grad()
    def merged(self) -> nn.Linear:
        """A plain ``nn.Linear`` whose weight is W + (alpha / r) B A: the same outputs, no extra cost."""
        out = nn.Linear(
            self.in_features,
            self.out_features,
            bias=self.base.bias is not None,
            dtype=self.base.weight.dtype,
            device=self.base.weight.device,
        )
        out.weight.copy_(self.weight)
        if self.base.bias is not None:
            out.bias.copy_(self.base.bias)
        return out

    def extra_repr(self) -> str:
        return f"r={self.r}, alpha={self.alpha:g}"


def freeze(model: nn.Module) -> nn.Module:
    """Set ``requires_grad=False`` on every parameter of ``model``; return it."""
    for p in _checks.module("model", model).parameters():
        p.requires_grad_(False)
    return model


def add_lora(
    model: nn.Module, targets: Iterable[str] = ("W_q", "W_v"), *, r: int = 4, alpha: float | None = None
) -> list[str]:
    """Replace, in place, every ``nn.Linear`` whose attribute name is in ``targets`` by a :class:`LoRALinear`.

    The default targets are the query and value projections of the library's attention layers, the
    choice of the LoRA paper. The wrapped layers are frozen; nothing else is changed (call :func:`freeze`
    first to freeze the rest of the model). Returns the names of the adapted layers.

    Chapter: from text to tokens, and pretraining.
    """
    _checks.module("model", model)
    targets = set(
        _checks.texts(
            "targets",
            list(targets) if isinstance(targets, (set, frozenset)) else targets,
            what="a list of layer names, e.g. ('W_q', 'W_v')",
        )
    )
    if not targets:
        raise ValueError("targets must name at least one layer, e.g. ('W_q', 'W_v'), got none")
    replaced = []
    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            if name in targets and isinstance(child, nn.Linear):
                setattr(parent, name, LoRALinear(child, r, alpha))
                replaced.append(f"{parent_name}.{name}" if parent_name else name)
    if not replaced:
        raise ValueError(
            f"targets must name nn.Linear layers of the model, got {sorted(targets)}: the model has none of these names"
        )
    return replaced


def merge_lora(model: nn.Module) -> nn.Module:
    """Replace, in place, every :class:`LoRALinear` by its merged ``nn.Linear``; return the model."""
    for parent in list(_checks.module("model", model).modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, LoRALinear):
                setattr(parent, name, child.merged())
    return model
