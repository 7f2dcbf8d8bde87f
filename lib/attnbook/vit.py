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
- :func:`class_attention_maps` and :func:`attention_rollout`: where the class token looks, as a grid.

The training recipe of the chapter's experiments (the CNN baseline, augmentation, training, accuracy) is in
:mod:`attnbook.vit_experiment`; the input checks, one call at the start of each public function, are in
``attnbook._vit_checks``.

Chapter: vision transformers (10).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn

from . import _checks, attribution
from ._vit_checks import (
    check_choice,
    check_config,
    check_embedding_sizes,
    check_grid_size,
    check_images,
    check_maps,
    check_patchify,
    check_rollout,
    check_unpatchify,
)
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
]

POOLS = ("cls", "mean")
POSITIONS = ("learned", "sinusoidal2d", "none")
PATCH_EMBEDDINGS = ("conv", "linear")
_CHOICES = {"pool": POOLS, "positions": POSITIONS, "patch_embedding": PATCH_EMBEDDINGS}  # ViTConfig's options

# name -> (n_layers, d_model, d_ff, n_heads), Table 1 of Dosovitskiy et al. (2021)
PRESETS: dict[str, tuple[int, int, int, int]] = {
    "base": (12, 768, 3072, 12),
    "large": (24, 1024, 4096, 16),
    "huge": (32, 1280, 5120, 16),
}


# --- Patches -------------------------------------------------------------------------------------------


def grid_size(image_size, patch_size: int) -> tuple[int, int]:
    """The patch grid (Hg, Wg) = (H / P, W / P) of an image of size H x W (an int for a square image).

    Raises a ValueError when a side is not a multiple of the patch size.

    Chapter: vision transformers.
    """
    H, W = check_grid_size(image_size, patch_size)
    return H // patch_size, W // patch_size


def n_tokens(image_size, patch_size: int, *, class_token: bool = True) -> int:
    """The length of the sequence a ViT reads: (H / P) * (W / P) patches, plus one for a class token.

    Chapter: vision transformers.
    """
    grid_h, grid_w = grid_size(image_size, patch_size)
    return grid_h * grid_w + int(bool(class_token))


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
    check_patchify(images, patch_size)
    P = patch_size
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
    (H, W), C = check_unpatchify(patches, patch_size, image_size, in_channels)
    P, B = patch_size, patches.shape[0]
    x = patches.reshape(B, H // P, W // P, C, P, P)  # (B, Hg, Wg, C, P, P)
    x = x.permute(0, 3, 1, 4, 2, 5)  # (B, C, Hg, P, Wg, P)
    return x.reshape(B, C, H, W)  # (B, C, H, W)


class _PatchEmbedding(nn.Module):
    """What both patch embeddings share: their sizes, and a ``forward`` that checks the images once and
    runs ``_forward``, the embedding itself (which :class:`ViT` calls after its own check)."""

    def __init__(self, in_channels: int, patch_size: int, d_model: int):
        super().__init__()
        check_embedding_sizes(in_channels, patch_size, d_model)
        self.in_channels, self.patch_size, self.d_model = in_channels, patch_size, d_model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        check_images(images, self.patch_size, self.in_channels, module=self)
        return self._forward(images)  # (B, T, D)

    def extra_repr(self) -> str:
        return f"in_channels={self.in_channels}, patch_size={self.patch_size}, d_model={self.d_model}"


class LinearPatchEmbedding(_PatchEmbedding):
    """Patch embedding as in the paper's equation: flatten each patch, then one shared linear map E.

    Shapes:
        images: (B, C, H, W)
        return: (B, T, D), one token per patch, T = (H / P) * (W / P)

    Chapter: vision transformers.
    """

    def __init__(self, in_channels: int, patch_size: int, d_model: int, *, bias: bool = True):
        super().__init__(in_channels, patch_size, d_model)
        self.E = nn.Linear(in_channels * patch_size**2, d_model, bias=bias)  # weight (D, C*P*P)

    def _forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.E(patchify(images, self.patch_size))  # (B, T, D)


class ConvPatchEmbedding(_PatchEmbedding):
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
        super().__init__(in_channels, patch_size, d_model)
        self.E = nn.Conv2d(in_channels, d_model, kernel_size=patch_size, stride=patch_size, bias=bias)

    @classmethod
    def from_linear(cls, embedding: LinearPatchEmbedding) -> ConvPatchEmbedding:
        """A ConvPatchEmbedding whose kernels are the (shared, not copied) parameters of ``embedding``."""
        _checks.instance("embedding", embedding, LinearPatchEmbedding, "a LinearPatchEmbedding")
        C, P, D = embedding.in_channels, embedding.patch_size, embedding.d_model
        conv = cls(C, P, D, bias=embedding.E.bias is not None)
        del conv.E.weight
        conv.E.weight = embedding.E.weight.view(D, C, P, P)  # (D, C, P, P): a view of the same storage
        if embedding.E.bias is not None:
            conv.E.bias = embedding.E.bias
        return conv

    def _forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.E(images)  # (B, D, Hg, Wg)
        return x.flatten(2).transpose(1, 2)  # (B, T, D)


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
        image_size = check_config(self, _CHOICES)  # (H, W)
        object.__setattr__(self, "image_size", image_size)
        object.__setattr__(self, "d_ff", 4 * self.d_model if self.d_ff is None else self.d_ff)

    @classmethod
    def preset(cls, name: str, **changes) -> ViTConfig:
        """The configuration of ViT-Base, -Large or -Huge (Table 1 of the paper), with fields changed by ``changes``."""
        check_choice("name", name, PRESETS)
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
        _checks.instance("config", config, ViTConfig, "an attnbook.vit.ViTConfig")
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
        check_images(images, c.patch_size, c.in_channels, c.image_size, module=self)
        x = self.patch_embed._forward(images)  # (B, T, D)
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
    _checks.instance("config", config, ViTConfig, "an attnbook.vit.ViTConfig")
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


def class_attention_maps(weights, grid) -> torch.Tensor:
    """The attention of the class token (token 0) to each patch, averaged over heads, as a grid per layer.

    Shapes:
        weights: a list of L tensors (B, H, T, T) (what ``ViT(..., return_weights=True)`` returns), or one
        grid:    (Hg, Wg) with T = Hg * Wg + 1
        return:  (L, B, Hg, Wg); row 0 of each head's weights without its entry for the class token itself

    Chapter: vision transformers.
    """
    weights, grid = check_maps(weights, grid)  # a list of L tensors; (Hg, Wg)
    w = torch.stack(weights)  # (L, B, H, T, T)
    return _to_grid(w[:, :, :, 0, :].mean(dim=2), grid)  # (L, B, Hg, Wg)


def attention_rollout(weights, grid, *, residual: float = 0.5) -> torch.Tensor:
    """Attention rollout (Abnar and Zuidema, 2020): how much each patch flows into the class token's output.

    :func:`attnbook.attribution.attention_rollout`: each layer's weights averaged over heads, mixed with the
    identity for the residual connection, A_l = residual * I + (1 - residual) * mean_h(W_l), and multiplied
    through the layers, R = A_L ... A_2 A_1. Row 0 of R (the class token), without its entry for itself, is
    returned as a grid.
    The rows of R sum to one, so the returned grid sums to at most one.

    Shapes:
        weights: a list of L tensors (B, H, T, T)
        grid:    (Hg, Wg) with T = Hg * Wg + 1
        return:  (B, Hg, Wg)

    Chapter: vision transformers.
    """
    weights, grid, residual = check_rollout(weights, grid, residual)  # a list of L tensors; (Hg, Wg); a float
    rollout = attribution.attention_rollout(weights, residual=residual)  # (B, T, T)
    return _to_grid(rollout[:, 0, :], grid)  # (B, Hg, Wg)


def _to_grid(row: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """A class token's row (..., T) without its own entry, as the patch grid (..., Hg, Wg)."""
    return row[..., 1:].reshape(*row.shape[:-1], *grid)  # (..., Hg, Wg)
