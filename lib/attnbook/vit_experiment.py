"""The training recipe of the vision-transformer chapter's experiments, apart from the model (as labml keeps
``vit/experiment.py`` beside ``vit/__init__.py``):

- :class:`SmallCNN`: the convolutional network the chapter compares the ViT with;
- :func:`random_affine`: small random rotations, shifts and zooms (data augmentation);
- :func:`fit_classifier`: AdamW, cross-entropy and a cosine schedule over random batches of images;
- :func:`accuracy`: the share of images classified right (the loop is :func:`attnbook.train.accuracy`).

The input checks are at the end of the module.

Chapter: vision transformers (10); sounds as images in beyond text (15).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from . import _checks, train
from ._vit_checks import check_images

__all__ = ["SmallCNN", "random_affine", "fit_classifier", "accuracy"]


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
        widths = _check_cnn_args(in_channels, n_classes, widths)  # a list of ints
        self.in_channels = in_channels
        layers, c = [], in_channels
        for i, w in enumerate(widths):
            layers += [nn.Conv2d(c, w, kernel_size=3, padding=1), nn.BatchNorm2d(w), nn.ReLU()]
            if i == 0:
                layers.append(nn.MaxPool2d(2))  # halves H and W once
            c = w
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c, n_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        check_images(images, 2, self.in_channels, module=self)  # H and W even, for the max-pool
        x = self.features(images)  # (B, widths[-1], H / 2, W / 2)
        return self.head(x.mean(dim=(2, 3)))  # (B, n_classes)


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
    rotate, shift, scale = _check_affine(images, rotate, shift, scale)  # floats >= 0
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
    _check_labelled_images(images, labels, steps=steps, batch_size=batch_size)
    batch_size = min(batch_size, images.shape[0])
    augment = dict(augment or {})
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    indices = train.shuffled_batches(images.shape[0], batch_size, generator=g)

    def batch(_step: int):
        idx = next(indices)
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


def accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, *, batch_size: int = 512) -> float:
    """The fraction of ``images`` (B, C, H, W) whose arg-max logit is their label (B,); in eval mode.

    Chapter: vision transformers.
    """
    _check_labelled_images(images, labels, model=model, batch_size=batch_size)
    device = next(model.parameters()).device
    batches = (
        (images[i : i + batch_size].to(device), labels[i : i + batch_size].to(device))
        for i in range(0, images.shape[0], batch_size)
    )
    return train.accuracy(model, batches)


# --- input checks ------------------------------------------------------------------------------------


def _check_cnn_args(in_channels, n_classes, widths) -> list[int]:
    _checks.positive_int("in_channels", in_channels)
    _checks.positive_int("n_classes", n_classes)
    widths = [_checks.positive_int("widths[i]", w) for w in widths]
    if not widths:
        raise ValueError("widths must name at least one convolution width")
    return widths


def _check_affine(images, rotate, shift, scale) -> tuple[float, float, float]:
    """A batch of images (B, C, H, W) and three amounts >= 0; returns the amounts as floats."""
    _checks.tensor("images", images, ndim=4, floating=True)
    return tuple(
        _checks.positive_float(n, v, allow_zero=True)
        for n, v in (("rotate", rotate), ("shift", shift), ("scale", scale))
    )


def _check_labelled_images(images, labels, *, model=None, steps=None, batch_size) -> None:
    """Images (N, C, H, W) and their labels (N,) (and a model, a number of steps, a batch size)."""
    if model is not None and not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    _checks.tensor("images", images, ndim=4, floating=True)
    _checks.tensor("labels", labels, ndim=1)
    if labels.shape[0] != images.shape[0]:
        raise ValueError(f"images and labels must have the same length, got {images.shape[0]} and {labels.shape[0]}")
    if steps is not None:
        _checks.positive_int("steps", steps)
    _checks.positive_int("batch_size", batch_size)
