"""The Vision Transformer (ViT): an image cut into patches, each patch a token, a transformer encoder on top.

An image of shape (C, H, W) is cut into non-overlapping P x P patches, a grid of Hg x Wg = (H / P) x (W / P)
patches. Each patch is flattened to C * P * P numbers and mapped to a D-dimensional token by one shared
linear map E (equation 1 of Dosovitskiy et al., 2021)::

    z_0 = [x_class; x_1 E; ...; x_T E] + E_pos        (T = Hg * Wg patches, then pre-norm encoder blocks)

- :func:`patchify` / :func:`unpatchify`: images <-> sequences of flattened patches, each patch flattened
  channel by channel, ``(c, i, j)``, the layout of ``torch.nn.Conv2d``'s kernels and of ``F.unfold``;
- :class:`LinearPatchEmbedding` (patchify, then a ``Linear``) and :class:`ConvPatchEmbedding` (a ``Conv2d``
  with kernel size and stride P): the same map, written two ways;
- :class:`ViTConfig` (with the paper's presets) and :class:`ViT`, the classifier (class token or mean
  pooling; learned, 2D sinusoidal or no positions);
- :func:`class_attention_maps` and :func:`attention_rollout`: where the class token looks, as a grid;
- :class:`SmallCNN`: the convolutional network the chapter compares the ViT with;
- :func:`fit_classifier` and :func:`accuracy`: the training recipe of the chapter's experiments.

Chapter: vision transformers (10).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import _checks, train
from .blocks import EncoderBlock
from .positional import sinusoidal_2d

__all__ = [
    "grid_size",
    "n_tokens",
    "patchify",
    "unpatchify",
    "LinearPatchEmbedding",
    "ConvPatchEmbedding",
    "POOLS",
    "POSITIONS",
    "PATCH_EMBEDDINGS",
    "PRESETS",
    "ViTConfig",
    "ViT",
    "vit_parameter_count",
    "class_attention_maps",
    "attention_rollout",
    "SmallCNN",
    "accuracy",
    "fit_classifier",
]

POOLS = ("cls", "mean")
POSITIONS = ("learned", "sinusoidal2d", "none")
PATCH_EMBEDDINGS = ("conv", "linear")

# name -> (n_layers, d_model, d_ff, n_heads), Table 1 of Dosovitskiy et al. (2021)
PRESETS: dict[str, tuple[int, int, int, int]] = {
    "base": (12, 768, 3072, 12),
    "large": (24, 1024, 4096, 16),
    "huge": (32, 1280, 5120, 16),
}


# --- Input checks --------------------------------------------------------------------------------------


def _pair(name: str, value) -> tuple[int, int]:
    """An int n as (n, n), or a pair of positive ints."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return (_checks.positive_int(f"{name}[0]", value[0]), _checks.positive_int(f"{name}[1]", value[1]))
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer or a pair (height, width) of integers, got {value!r}")
    return (_checks.positive_int(name, value),) * 2


def _divisible(name: str, what: str, size: int, patch_size: int) -> int:
    if size % patch_size:
        lower, upper = (size // patch_size) * patch_size, (size // patch_size + 1) * patch_size
        fix = f"crop or resize to {lower} or pad to {upper}" if lower else f"resize or pad to {upper}"
        raise ValueError(
            f"the image {what} of {name} is {size}, not divisible by patch_size={patch_size} "
            f"({size} = {size // patch_size} * {patch_size} + {size % patch_size}); {fix}"
        )
    return size // patch_size


def grid_size(image_size, patch_size: int) -> tuple[int, int]:
    """The patch grid (Hg, Wg) = (H / P, W / P) of an image of size H x W (an int for a square image).

    Raises a ValueError when a side is not a multiple of the patch size.

    Chapter: vision transformers.
    """
    height, width = _pair("image_size", image_size)
    _checks.positive_int("patch_size", patch_size)
    return (
        _divisible("image_size", "height", height, patch_size),
        _divisible("image_size", "width", width, patch_size),
    )


def n_tokens(image_size, patch_size: int, *, class_token: bool = True) -> int:
    """The length of the sequence a ViT reads: (H / P) * (W / P) patches, plus one for a class token.

    Chapter: vision transformers.
    """
    grid_h, grid_w = grid_size(image_size, patch_size)
    return grid_h * grid_w + int(bool(class_token))


def _check_images(
    images, patch_size: int, in_channels: int | None = None, image_size=None, module: nn.Module | None = None
) -> torch.Tensor:
    """A batch of channels-first images (B, C, H, W) with H and W multiples of the patch size (and the dtype
    and device of ``module``'s parameters)."""
    _checks.tensor("images", images, floating=True)
    if images.dim() != 4:
        hint = " (a single image? add a batch dimension with images[None])" if images.dim() == 3 else ""
        raise ValueError(
            f"images must have 4 dimensions (B, C, H, W), got shape {_checks.shape_str(images.shape)}{hint}"
        )
    if in_channels is not None and images.shape[1] != in_channels:
        hint = " (channels-last images? use images.permute(0, 3, 1, 2))" if images.shape[-1] == in_channels else ""
        raise ValueError(
            f"images must have in_channels={in_channels} channels in dimension 1 (B, C, H, W), "
            f"got shape {_checks.shape_str(images.shape)}{hint}"
        )
    if image_size is not None and tuple(images.shape[-2:]) != tuple(image_size):
        raise ValueError(
            f"images must be {image_size[0]} x {image_size[1]} (the model's image_size: its position "
            f"embeddings are made for that grid), got shape {_checks.shape_str(images.shape)}"
        )
    _divisible("images", "height", images.shape[-2], patch_size)
    _divisible("images", "width", images.shape[-1], patch_size)
    if module is not None:
        _checks.like("images", images, module)
    return images


# --- Patches -------------------------------------------------------------------------------------------


def patchify(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """Cut images into non-overlapping P x P patches and flatten each one, channel by channel.

    Patches are listed row by row (row-major over the grid); within a patch the numbers are ordered
    (c, i, j), channel first, then row, then column: the order of a ``Conv2d`` kernel ``(D, C, P, P)``
    and of ``F.unfold(images, P, stride=P)``.

    Shapes:
        images: (B, C, H, W)
        return: (B, T, C * P * P) with T = (H / P) * (W / P)

    Chapter: vision transformers.
    """
    P = _checks.positive_int("patch_size", patch_size)
    _check_images(images, P)
    B, C, H, W = images.shape
    x = images.reshape(B, C, H // P, P, W // P, P)  # (B, C, Hg, P, Wg, P)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (B, Hg, Wg, C, P, P)
    return x.reshape(B, (H // P) * (W // P), C * P * P)  # (B, T, C*P*P)


def unpatchify(patches: torch.Tensor, patch_size: int, image_size, in_channels: int | None = None) -> torch.Tensor:
    """The inverse of :func:`patchify`: put flattened patches back in their places in the image.

    Shapes:
        patches: (B, T, C * P * P) with T = (H / P) * (W / P)
        return:  (B, C, H, W)

    Chapter: vision transformers.
    """
    P = _checks.positive_int("patch_size", patch_size)
    H, W = _pair("image_size", image_size)
    grid_h, grid_w = grid_size((H, W), P)
    _checks.tensor("patches", patches, ndim=3)
    B, T, K = patches.shape
    C = K // (P * P) if in_channels is None else _checks.positive_int("in_channels", in_channels)
    if T != grid_h * grid_w or K != C * P * P:
        raise ValueError(
            f"patches must have shape (B, T={grid_h * grid_w}, C*P*P={C * P * P}) for {H} x {W} images "
            f"with patch_size={P}, got shape {_checks.shape_str(patches.shape)}"
        )
    x = patches.reshape(B, grid_h, grid_w, C, P, P)  # (B, Hg, Wg, C, P, P)
    x = x.permute(0, 3, 1, 4, 2, 5)  # (B, C, Hg, P, Wg, P)
    return x.reshape(B, C, H, W)  # (B, C, H, W)


class LinearPatchEmbedding(nn.Module):
    """Patch embedding as in the paper's equation: flatten each patch, then one shared linear map E.

    Shapes:
        images: (B, C, H, W)
        return: (B, T, D), one token per patch, T = (H / P) * (W / P)

    Chapter: vision transformers.
    """

    def __init__(self, in_channels: int, patch_size: int, d_model: int, *, bias: bool = True):
        super().__init__()
        self.in_channels = _checks.positive_int("in_channels", in_channels)
        self.patch_size = _checks.positive_int("patch_size", patch_size)
        self.d_model = _checks.positive_int("d_model", d_model)
        self.E = nn.Linear(in_channels * patch_size**2, d_model, bias=bias)  # weight (D, C*P*P)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        _check_images(images, self.patch_size, self.in_channels, module=self)
        return self.E(patchify(images, self.patch_size))  # (B, T, D)

    def extra_repr(self) -> str:
        return f"in_channels={self.in_channels}, patch_size={self.patch_size}, d_model={self.d_model}"


class ConvPatchEmbedding(nn.Module):
    """The same patch embedding as a convolution: D filters of size C x P x P, moved with stride P.

    Because the stride equals the kernel size, the windows do not overlap and each output pixel is
    one patch's dot products with the D filters: exactly x_p E. ``ConvPatchEmbedding.from_linear(emb)``
    shares the parameters of a :class:`LinearPatchEmbedding` (a ``Linear`` weight (D, C*P*P) is a
    ``Conv2d`` kernel (D, C, P, P)).

    Shapes:
        images: (B, C, H, W)
        return: (B, T, D), patches in row-major order

    Chapter: vision transformers.
    """

    def __init__(self, in_channels: int, patch_size: int, d_model: int, *, bias: bool = True):
        super().__init__()
        self.in_channels = _checks.positive_int("in_channels", in_channels)
        self.patch_size = _checks.positive_int("patch_size", patch_size)
        self.d_model = _checks.positive_int("d_model", d_model)
        self.E = nn.Conv2d(in_channels, d_model, kernel_size=patch_size, stride=patch_size, bias=bias)

    @classmethod
    def from_linear(cls, embedding: LinearPatchEmbedding) -> ConvPatchEmbedding:
        """A ConvPatchEmbedding whose kernels are the (shared, not copied) parameters of ``embedding``."""
        if not isinstance(embedding, LinearPatchEmbedding):
            raise TypeError(f"embedding must be a LinearPatchEmbedding, got {type(embedding).__name__}")
        C, P, D = embedding.in_channels, embedding.patch_size, embedding.d_model
        conv = cls(C, P, D, bias=embedding.E.bias is not None)
        del conv.E.weight
        conv.E.weight = embedding.E.weight.view(D, C, P, P)  # (D, C, P, P): a view of the same storage
        if embedding.E.bias is not None:
            conv.E.bias = embedding.E.bias
        return conv

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        _check_images(images, self.patch_size, self.in_channels, module=self)
        x = self.E(images)  # (B, D, Hg, Wg)
        return x.flatten(2).transpose(1, 2)  # (B, T, D)

    def extra_repr(self) -> str:
        return f"in_channels={self.in_channels}, patch_size={self.patch_size}, d_model={self.d_model}"


# --- The classifier ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ViTConfig:
    """Everything that defines a ViT classifier; frozen. ``ViTConfig.preset("base", patch_size=16)`` is ViT-B/16.

    ``image_size`` is an int (square images) or (height, width); both sides must be multiples of
    ``patch_size``. ``d_ff`` (the MLP width) defaults to 4 * d_model. ``pool`` is ``"cls"`` (a learned
    class token, the paper's choice) or ``"mean"`` (the mean of the patch outputs). ``positions`` is
    ``"learned"`` (one trained vector per token, the paper's choice), ``"sinusoidal2d"`` (fixed row and
    column encodings, :func:`attnbook.positional.sinusoidal_2d`) or ``"none"``. The paper's LayerNorms
    use eps = 1e-6.

    Chapter: vision transformers.
    """

    image_size: int | tuple[int, int] = 224
    patch_size: int = 16
    in_channels: int = 3
    n_classes: int = 1000
    d_model: int = 768
    n_layers: int = 12
    n_heads: int = 12
    d_ff: int | None = None
    dropout: float = 0.0
    pool: str = "cls"
    positions: str = "learned"
    patch_embedding: str = "conv"
    eps: float = 1e-6

    def __post_init__(self):
        object.__setattr__(self, "image_size", _pair("image_size", self.image_size))
        for name in ("patch_size", "in_channels", "n_classes", "d_model", "n_layers", "n_heads"):
            _checks.positive_int(name, getattr(self, name))
        grid_size(self.image_size, self.patch_size)
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model must be divisible by n_heads, got d_model={self.d_model} and n_heads={self.n_heads}"
            )
        object.__setattr__(
            self, "d_ff", 4 * self.d_model if self.d_ff is None else _checks.positive_int("d_ff", self.d_ff)
        )
        p = _checks.positive_float("dropout", self.dropout, allow_zero=True)
        if p >= 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        for name, options in (("pool", POOLS), ("positions", POSITIONS), ("patch_embedding", PATCH_EMBEDDINGS)):
            if getattr(self, name) not in options:
                raise ValueError(
                    f"{name} must be one of {', '.join(repr(o) for o in options)}, got {getattr(self, name)!r}"
                )
        if self.positions == "sinusoidal2d" and self.d_model % 4:
            raise ValueError(
                f"positions='sinusoidal2d' needs d_model divisible by 4 (sine/cosine pairs for rows and "
                f"for columns), got d_model={self.d_model}"
            )
        _checks.positive_float("eps", self.eps)

    @classmethod
    def preset(cls, name: str, **changes) -> ViTConfig:
        """The configuration of ViT-Base, -Large or -Huge (Table 1 of the paper), with fields changed by ``changes``."""
        if name not in PRESETS:
            raise ValueError(f"name must be one of {', '.join(repr(p) for p in PRESETS)}, got {name!r}")
        n_layers, d_model, d_ff, n_heads = PRESETS[name]
        return cls(**{**dict(n_layers=n_layers, d_model=d_model, d_ff=d_ff, n_heads=n_heads), **changes})

    def replace(self, **changes) -> ViTConfig:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    @property
    def grid(self) -> tuple[int, int]:
        """The patch grid (Hg, Wg)."""
        return grid_size(self.image_size, self.patch_size)

    @property
    def n_patches(self) -> int:
        grid_h, grid_w = self.grid
        return grid_h * grid_w

    @property
    def n_tokens(self) -> int:
        """The sequence length T: the patches, plus the class token when ``pool == "cls"``."""
        return self.n_patches + int(self.pool == "cls")


class ViT(nn.Module):
    r"""The Vision Transformer classifier of Dosovitskiy et al. (2021).

    Patch embedding; a class token in front (``pool="cls"``); positions added; ``n_layers`` pre-norm
    encoder blocks with GELU MLPs (:class:`~attnbook.blocks.EncoderBlock`) and no mask, since every
    patch may look at every other; a final LayerNorm; the class token's output (or the mean of the patch
    outputs) through a linear head::

        z_0 = [x_class; x_1 E; ...; x_N E] + E_pos
        z'_l = MSA(LN(z_{l-1})) + z_{l-1},   z_l = MLP(LN(z'_l)) + z'_l,   l = 1 .. L
        y = head(LN(z_L)[class token])

    With ``positions="sinusoidal2d"`` the fixed encodings go to the patches only and the class token
    gets none; learned positions have a vector for the class token too, as in the paper.

    Shapes:
        images: (B, C, H, W) with (H, W) = config.image_size
        return: logits (B, n_classes); with ``return_weights=True`` also a list of ``n_layers`` attention
                weights (B, H, T, T), T = config.n_tokens (token 0 is the class token when pool == "cls")

    Chapter: vision transformers.
    """

    def __init__(self, config: ViTConfig):
        super().__init__()
        if not isinstance(config, ViTConfig):
            raise TypeError(f"config must be an attnbook.vit.ViTConfig, got {type(config).__name__}")
        self.config = c = config
        embedding = ConvPatchEmbedding if c.patch_embedding == "conv" else LinearPatchEmbedding
        self.patch_embed = embedding(c.in_channels, c.patch_size, c.d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c.d_model)) if c.pool == "cls" else None  # (1, 1, D)
        if c.positions == "learned":
            self.pos_embed = nn.Parameter(torch.randn(c.n_tokens, c.d_model) * 0.02)  # (T, D)
        else:
            pe = (
                sinusoidal_2d(*c.grid, c.d_model)
                if c.positions == "sinusoidal2d"
                else torch.zeros(c.n_patches, c.d_model)
            )
            self.register_buffer("patch_positions", pe, persistent=False)  # (T, D), fixed
        self.dropout = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            EncoderBlock(c.d_model, c.n_heads, c.d_ff, dropout=c.dropout, mlp="gelu", norm_position="pre", eps=c.eps)
            for _ in range(c.n_layers)
        )
        self.norm = nn.LayerNorm(c.d_model, eps=c.eps)
        self.head = nn.Linear(c.d_model, c.n_classes)

    def tokens(self, images: torch.Tensor) -> torch.Tensor:
        """The input sequence z_0: patch tokens with the class token in front, positions added.

        Shapes: images (B, C, H, W) -> (B, T, D)
        """
        c = self.config
        _checks.tensor("images", images, floating=True)
        _check_images(images, c.patch_size, c.in_channels, c.image_size, module=self)
        x = self.patch_embed(images)  # (B, T, D)
        if c.positions != "learned":
            x = x + self.patch_positions.to(x.dtype)  # (B, T, D); zeros for "none"
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1).to(x.dtype), x], dim=1)  # (B, 1 + T, D)
        if c.positions == "learned":
            x = x + self.pos_embed.to(x.dtype)  # (B, T, D)
        return self.dropout(x)  # (B, T, D)

    def forward(self, images: torch.Tensor, *, return_weights: bool = False):
        x = self.tokens(images)  # (B, T, D)
        weights = []
        for block in self.blocks:
            if return_weights:
                x, w = block(x, return_weights=True)  # no mask: every token attends to every token
                weights.append(w)  # (B, H, T, T)
            else:
                x = block(x)  # (B, T, D)
        x = self.norm(x)  # (B, T, D)
        features = x[:, 0] if self.config.pool == "cls" else x.mean(dim=1)  # (B, D)
        logits = self.head(features)  # (B, n_classes)
        return (logits, weights) if return_weights else logits


def vit_parameter_count(config: ViTConfig) -> dict[str, int]:
    """The parameters of :class:`ViT` counted from its configuration, by part (plus ``"total"``).

    Per encoder block: attention 4 (D^2 + D), MLP 2 D F + F + D, two LayerNorms 4 D.

    Chapter: vision transformers.
    """
    if not isinstance(config, ViTConfig):
        raise TypeError(f"config must be an attnbook.vit.ViTConfig, got {type(config).__name__}")
    c = config
    D, F_, P, C = c.d_model, c.d_ff, c.patch_size, c.in_channels
    counts = {
        "patch embedding": C * P * P * D + D,
        "class token": D if c.pool == "cls" else 0,
        "position embeddings": c.n_tokens * D if c.positions == "learned" else 0,
        "attention (all layers)": c.n_layers * 4 * (D * D + D),
        "MLP (all layers)": c.n_layers * (2 * D * F_ + F_ + D),
        "LayerNorms": c.n_layers * 4 * D + 2 * D,
        "head": D * c.n_classes + c.n_classes,
    }
    counts["total"] = sum(counts.values())
    return counts


# --- Where the class token looks -----------------------------------------------------------------------


def _check_weights(weights) -> list[torch.Tensor]:
    if isinstance(weights, torch.Tensor):
        weights = [weights]
    weights = list(weights)
    if not weights:
        raise ValueError("weights is empty: pass the list of (B, H, T, T) attention weights, one per layer")
    for i, w in enumerate(weights):
        _checks.tensor(f"weights[{i}]", w, ndim=4, floating=True)
        if w.shape[-1] != w.shape[-2] or w.shape != weights[0].shape:
            raise ValueError(
                f"weights must all have one shape (B, H, T, T), got {_checks.shape_str(w.shape)} at index {i}"
            )
    return weights


def _to_grid(row: torch.Tensor, grid: Sequence[int]) -> torch.Tensor:
    grid_h, grid_w = _pair("grid", tuple(grid))
    if row.shape[-1] != grid_h * grid_w + 1:
        raise ValueError(
            f"the weights have T={row.shape[-1]} tokens, but a class token and a {grid_h} x {grid_w} "
            f"grid of patches make {grid_h * grid_w + 1}"
        )
    return row[..., 1:].reshape(*row.shape[:-1], grid_h, grid_w)  # (..., Hg, Wg)


def class_attention_maps(weights, grid) -> torch.Tensor:
    """The attention of the class token (token 0) to each patch, averaged over heads, as a grid per layer.

    Shapes:
        weights: a list of L tensors (B, H, T, T) (what ``ViT(..., return_weights=True)`` returns), or one
        grid:    (Hg, Wg) with T = Hg * Wg + 1
        return:  (L, B, Hg, Wg); row 0 of each head's weights without its entry for the class token itself

    Chapter: vision transformers.
    """
    w = torch.stack(_check_weights(weights))  # (L, B, H, T, T)
    return _to_grid(w[:, :, :, 0, :].mean(dim=2), grid)  # (L, B, Hg, Wg)


def attention_rollout(weights, grid, *, residual: float = 0.5) -> torch.Tensor:
    """Attention rollout (Abnar and Zuidema, 2020): how much each patch flows into the class token's output.

    Each layer's weights are averaged over heads, mixed with the identity for the residual connection,
    A_l = residual * I + (1 - residual) * mean_h(W_l), and multiplied through the layers,
    R = A_L ... A_2 A_1. Row 0 of R (the class token), without its entry for itself, is returned as a grid.
    The rows of R sum to one, so the returned grid sums to at most one.

    Shapes:
        weights: a list of L tensors (B, H, T, T)
        grid:    (Hg, Wg) with T = Hg * Wg + 1
        return:  (B, Hg, Wg)

    Chapter: vision transformers.
    """
    weights = _check_weights(weights)
    residual = _checks.positive_float("residual", residual, allow_zero=True)
    if residual > 1:
        raise ValueError(f"residual must be in [0, 1], got {residual}")
    T = weights[0].shape[-1]
    eye = torch.eye(T, dtype=weights[0].dtype, device=weights[0].device)  # (T, T)
    rollout = eye.expand(weights[0].shape[0], T, T)  # (B, T, T)
    for w in weights:
        a = residual * eye + (1 - residual) * w.mean(dim=1)  # (B, T, T), rows sum to 1
        rollout = a @ rollout  # (B, T, T)
    return _to_grid(rollout[:, 0, :], grid)  # (B, Hg, Wg)


# --- The convolutional baseline ------------------------------------------------------------------------


class SmallCNN(nn.Module):
    """A small convolutional classifier: 3 x 3 convolutions with batch norm and ReLU, one 2 x 2 max-pool,
    global average pooling, a linear head.

    Its layers are local (each output sees a 3 x 3 neighbourhood) and share their weights across
    positions (translation equivariance): the inductive biases the ViT lacks.

    Shapes:
        images: (B, C, H, W)
        return: logits (B, n_classes)

    Chapter: vision transformers (the baseline of the inductive-bias experiment).
    """

    def __init__(self, in_channels: int = 1, n_classes: int = 10, widths: Sequence[int] = (32, 64, 64)):
        super().__init__()
        self.in_channels = _checks.positive_int("in_channels", in_channels)
        _checks.positive_int("n_classes", n_classes)
        widths = [_checks.positive_int("widths[i]", w) for w in widths]
        if not widths:
            raise ValueError("widths must name at least one convolution width")
        layers, c = [], in_channels
        for i, w in enumerate(widths):
            layers += [nn.Conv2d(c, w, kernel_size=3, padding=1), nn.BatchNorm2d(w), nn.ReLU()]
            if i == 0:
                layers.append(nn.MaxPool2d(2))  # halves H and W once
            c = w
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c, n_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        _checks.tensor("images", images, floating=True)
        _check_images(images, 2, self.in_channels, module=self)
        x = self.features(images)  # (B, widths[-1], H / 2, W / 2)
        return self.head(x.mean(dim=(2, 3)))  # (B, n_classes)


# --- Training recipe -----------------------------------------------------------------------------------


@torch.no_grad()
def accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, *, batch_size: int = 512) -> float:
    """The fraction of ``images`` (B, C, H, W) whose arg-max logit is their label (B,); in eval mode.

    Chapter: vision transformers.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    _checks.tensor("images", images, ndim=4, floating=True)
    _checks.tensor("labels", labels, ndim=1)
    if labels.shape[0] != images.shape[0]:
        raise ValueError(f"images and labels must have the same length, got {images.shape[0]} and {labels.shape[0]}")
    batch_size = _checks.positive_int("batch_size", batch_size)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    correct = 0
    for start in range(0, images.shape[0], batch_size):
        x = images[start : start + batch_size].to(device)
        y = labels[start : start + batch_size].to(device)
        correct += int((model(x).argmax(dim=-1) == y).sum())
    model.train(was_training)
    return correct / images.shape[0]


def random_affine(
    images: torch.Tensor,
    *,
    rotate: float = 0.0,
    shift: float = 0.0,
    scale: float = 0.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Rotate, move and zoom each image by a small random amount (data augmentation), with bilinear sampling.

    Each image gets its own angle in [-rotate, rotate] degrees, shift in [-shift, shift] pixels along each
    axis and zoom factor in [1 - scale, 1 + scale]; what comes in from outside the image is zero (the
    background of the digits). All zeros give the images back unchanged.

    Shapes:
        images: (B, C, H, W)
        return: (B, C, H, W)

    Chapter: vision transformers.
    """
    _checks.tensor("images", images, ndim=4, floating=True)
    rotate, shift, scale = (
        _checks.positive_float(n, v, allow_zero=True)
        for n, v in (("rotate", rotate), ("shift", shift), ("scale", scale))
    )
    if rotate == shift == scale == 0.0:
        return images
    B, _, H, W = images.shape

    def uniform(half_width):  # (B,) uniform in [-half_width, half_width]
        return (torch.rand(B, generator=generator, dtype=torch.float64) * 2 - 1) * half_width

    angle = uniform(math.radians(rotate))  # (B,)
    zoom = 1.0 + uniform(scale)  # (B,)
    cos, sin = torch.cos(angle) / zoom, torch.sin(angle) / zoom  # (B,), (B,)
    # a rotation in pixels, written in the coordinates of affine_grid, which run from -1 to 1 along each side
    theta = torch.stack(
        [
            torch.stack([cos, -sin * H / W, uniform(2 * shift / W)], dim=-1),
            torch.stack([sin * W / H, cos, uniform(2 * shift / H)], dim=-1),
        ],
        dim=1,
    )  # (B, 2, 3)
    grid = F.affine_grid(theta.to(images.dtype).to(images.device), list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)  # (B, C, H, W)


__all__ += ["random_affine"]


def fit_classifier(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 2e-3,
    weight_decay: float = 0.05,
    warmup: int = 0,
    label_smoothing: float = 0.0,
    augment: dict | None = None,
    seed: int = 0,
    desc: str = "training",
    evaluate=None,
    eval_every: int = 0,
) -> train.History:
    """Train an image classifier with AdamW, cross-entropy and a cosine learning-rate schedule.

    Batches of ``batch_size`` (at most the whole training set) are drawn without replacement from
    ``images`` (B, C, H, W) and moved to the model's device; ``augment``, if given, holds the keyword
    arguments of :func:`random_affine` applied to each batch (data augmentation). Returns
    :func:`attnbook.train.fit`'s History.

    Chapter: vision transformers.
    """
    _checks.tensor("images", images, ndim=4, floating=True)
    _checks.tensor("labels", labels, ndim=1)
    n = images.shape[0]
    if labels.shape[0] != n:
        raise ValueError(f"images and labels must have the same length, got {n} and {labels.shape[0]}")
    steps = _checks.positive_int("steps", steps)
    batch_size = min(_checks.positive_int("batch_size", batch_size), n)
    augment = dict(augment or {})
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    order: list[int] = []

    def batch(_step: int):
        nonlocal order
        if len(order) < batch_size:  # a new epoch: reshuffle
            order = torch.randperm(n, generator=g).tolist()
        idx, order = order[:batch_size], order[batch_size:]
        x = images[idx]  # (b, C, H, W)
        if augment:
            x = random_affine(x, generator=g, **augment)  # (b, C, H, W)
        return x.to(device), labels[idx].to(device)

    def loss_fn(m, xy):
        x, y = xy
        return F.cross_entropy(m(x), y, label_smoothing=label_smoothing)

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    schedule = train.cosine_schedule(steps, warmup_steps=warmup, min_factor=0.0)
    return train.fit(
        model,
        batch,
        loss_fn,
        steps=steps,
        optimizer=optimizer,
        schedule=schedule,
        desc=desc,
        evaluate=evaluate,
        eval_every=eval_every,
    )
