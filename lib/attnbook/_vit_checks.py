"""The input checks of :mod:`attnbook.vit` and :mod:`attnbook.vit_experiment`: images, patch sizes, grids,
configurations and attention weights. Each error names the argument, what was expected and what was given.
"""

from __future__ import annotations

import torch
from torch import nn

from . import _checks


def check_pair(name: str, value) -> tuple[int, int]:
    """An int n as (n, n), or a pair of positive ints."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return (_checks.positive_int(f"{name}[0]", value[0]), _checks.positive_int(f"{name}[1]", value[1]))
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer or a pair (height, width) of integers, got {value!r}")
    return (_checks.positive_int(name, value),) * 2


def check_divisible(name: str, what: str, size: int, patch_size: int) -> None:
    if size % patch_size:
        lower, upper = (size // patch_size) * patch_size, (size // patch_size + 1) * patch_size
        fix = f"crop or resize to {lower} or pad to {upper}" if lower else f"resize or pad to {upper}"
        raise ValueError(
            f"the image {what} of {name} is {size}, not divisible by patch_size={patch_size} "
            f"({size} = {size // patch_size} * {patch_size} + {size % patch_size}); {fix}"
        )


def check_choice(name: str, value, options) -> None:
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(repr(o) for o in options)}, got {value!r}")


def check_grid_size(image_size, patch_size) -> tuple[int, int]:
    """An image size (an int or (H, W)) whose sides are multiples of the patch size; returns (H, W)."""
    height, width = check_pair("image_size", image_size)
    _checks.positive_int("patch_size", patch_size)
    check_divisible("image_size", "height", height, patch_size)
    check_divisible("image_size", "width", width, patch_size)
    return height, width


def check_images(
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
    check_divisible("images", "height", images.shape[-2], patch_size)
    check_divisible("images", "width", images.shape[-1], patch_size)
    if module is not None:
        _checks.like("images", images, module)
    return images


def check_patchify(images, patch_size) -> None:
    _checks.positive_int("patch_size", patch_size)
    check_images(images, patch_size)


def check_unpatchify(patches, patch_size, image_size, in_channels) -> tuple[tuple[int, int], int]:
    """Patches (B, T, C * P * P) of images of ``image_size``; returns (H, W) and C."""
    P = _checks.positive_int("patch_size", patch_size)
    H, W = check_pair("image_size", image_size)
    check_grid_size((H, W), P)
    grid_h, grid_w = H // P, W // P
    _checks.tensor("patches", patches, ndim=3)
    _, T, K = patches.shape
    C = K // (P * P) if in_channels is None else _checks.positive_int("in_channels", in_channels)
    if T != grid_h * grid_w or K != C * P * P:
        raise ValueError(
            f"patches must have shape (B, T={grid_h * grid_w}, C*P*P={C * P * P}) for {H} x {W} images "
            f"with patch_size={P}, got shape {_checks.shape_str(patches.shape)}"
        )
    return (H, W), C


def check_embedding_sizes(in_channels, patch_size, d_model) -> None:
    _checks.positive_int("in_channels", in_channels)
    _checks.positive_int("patch_size", patch_size)
    _checks.positive_int("d_model", d_model)


def check_config(c, choices: dict[str, tuple[str, ...]]) -> tuple[int, int]:
    """Every field of a ViTConfig (``choices``: the options of its string fields); returns its image size as
    (H, W)."""
    image_size = check_pair("image_size", c.image_size)
    for name in ("patch_size", "in_channels", "n_classes", "d_model", "n_layers", "n_heads"):
        _checks.positive_int(name, getattr(c, name))
    check_grid_size(image_size, c.patch_size)
    if c.d_model % c.n_heads:
        raise ValueError(f"d_model must be divisible by n_heads, got d_model={c.d_model} and n_heads={c.n_heads}")
    if c.d_ff is not None:
        _checks.positive_int("d_ff", c.d_ff)
    if _checks.positive_float("dropout", c.dropout, allow_zero=True) >= 1:
        raise ValueError(f"dropout must be in [0, 1), got {c.dropout}")
    for name, options in choices.items():
        check_choice(name, getattr(c, name), options)
    if c.positions == "sinusoidal2d" and c.d_model % 4:
        raise ValueError(
            f"positions='sinusoidal2d' needs d_model divisible by 4 (sine/cosine pairs for rows and "
            f"for columns), got d_model={c.d_model}"
        )
    _checks.positive_float("eps", c.eps)
    return image_size


def check_weights(weights) -> list[torch.Tensor]:
    """Attention weights: one (B, H, T, T) tensor, or a non-empty list of them of one shape; returns a list."""
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


def check_grid(weights: list[torch.Tensor], grid) -> tuple[int, int]:
    """A patch grid (Hg, Wg) that, with a class token, makes the T tokens of the weights."""
    grid_h, grid_w = check_pair("grid", tuple(grid))
    T = weights[0].shape[-1]
    if T != grid_h * grid_w + 1:
        raise ValueError(
            f"the weights have T={T} tokens, but a class token and a {grid_h} x {grid_w} "
            f"grid of patches make {grid_h * grid_w + 1}"
        )
    return grid_h, grid_w


def check_maps(weights, grid) -> tuple[list[torch.Tensor], tuple[int, int]]:
    weights = check_weights(weights)
    return weights, check_grid(weights, grid)


def check_rollout(weights, grid, residual) -> tuple[list[torch.Tensor], tuple[int, int], float]:
    weights = check_weights(weights)
    residual = _checks.positive_float("residual", residual, allow_zero=True)
    if residual > 1:
        raise ValueError(f"residual must be in [0, 1], got {residual}")
    return weights, check_grid(weights, grid), residual
