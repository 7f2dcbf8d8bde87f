"""Images: scikit-learn's bundled handwritten digits, split, and class-balanced nested subsets of them.

Chapter: vision transformers (10).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import _checks

__all__ = ["ImageSplits", "load_digits", "balanced_subset"]


@dataclass(frozen=True)
class ImageSplits:
    """Images split into a training and a test set.

    Shapes:
        x_train: (N_train, C, H, W) float32; y_train: (N_train,) long; likewise x_test, y_test
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: tuple[str, ...]


def load_digits(*, test_fraction: float = 0.2, seed: int = 0) -> ImageSplits:
    """scikit-learn's handwritten digits: 1,797 grey 8 x 8 images of the digits 0-9, shipped with scikit-learn.

    Pixel values (0 to 16) are scaled to [0, 1]. The split is stratified (each digit has the same share
    in both sets) and fixed by ``seed``. No download is needed.

    Shapes:
        images (N, 1, 8, 8) float32, labels (N,) long

    Chapter: vision transformers.
    """
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    _checks.fraction("test_fraction", test_fraction)
    _checks.positive_int("seed", seed, minimum=0)
    digits = sklearn_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # (N, 1, 8, 8)
    labels = torch.tensor(digits.target, dtype=torch.long)  # (N,)
    train_idx, test_idx = train_test_split(
        range(len(labels)), test_size=test_fraction, stratify=digits.target, random_state=seed
    )
    train_idx, test_idx = torch.tensor(train_idx), torch.tensor(test_idx)
    return ImageSplits(
        images[train_idx],
        labels[train_idx],
        images[test_idx],
        labels[test_idx],
        tuple(str(c) for c in digits.target_names),
    )


def balanced_subset(labels: torch.Tensor, n: int, *, seed: int = 0) -> torch.Tensor:
    """The indices of ``n`` examples, as evenly spread over the classes as the class sizes allow.

    Subsets are nested: with the same ``seed``, the subset of size n is part of every larger one (the
    indices are the first n of one fixed order that takes the classes in turn).

    Shapes:
        labels: (N,) integer class labels
        return: (n,) long indices into labels

    Chapter: vision transformers (training-set size experiment).
    """
    if not isinstance(labels, torch.Tensor) or labels.dim() != 1 or labels.is_floating_point():
        raise ValueError(
            "labels must be a 1-D tensor of integer class labels"
            + (
                f", got shape {tuple(labels.shape)} and dtype {labels.dtype}"
                if isinstance(labels, torch.Tensor)
                else f", got {type(labels).__name__}"
            )
        )
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= labels.numel():
        raise ValueError(f"n must be an integer from 1 to {labels.numel()} (the number of labels), got {n!r}")
    g = torch.Generator().manual_seed(_checks.positive_int("seed", seed, minimum=0))
    per_class = [torch.nonzero(labels == c).flatten() for c in labels.unique()]
    per_class = [idx[torch.randperm(idx.numel(), generator=g)] for idx in per_class]  # shuffled within each class
    order = [int(idx[r]) for r in range(max(i.numel() for i in per_class)) for idx in per_class if r < idx.numel()]
    return torch.tensor(order[:n], dtype=torch.long)
