"""Contrastive learning of two modalities (CLIP): two encoders, one shared space, matching pairs pulled together.

An image encoder and a text encoder each map their input to a vector; both vectors are normalised to
length one and projected into the same space. In a batch of B matching (image, text) pairs, the B x B
cosine similarities, multiplied by a learned scale (the inverse of a temperature), are the logits of two
classification problems: for each image, which of the B texts is its own; for each text, which image.
The loss is the mean of the two cross-entropies (Radford et al., 2021, Figure 3):

    logits = s * normalize(I) normalize(T)^T,   loss = (CE(logits, diag) + CE(logits^T, diag)) / 2

Retrieval then means ranking by similarity; classifying an image "zero-shot" means comparing it with the
embeddings of the class names.

Chapter: beyond text (15).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import _checks

__all__ = ["clip_logits", "clip_loss", "retrieval_accuracy", "DualEncoder"]


def _pair(image_embeddings, text_embeddings, scale):
    _checks.tensor("image_embeddings", image_embeddings, min_ndim=2, floating=True)
    _checks.tensor("text_embeddings", text_embeddings, min_ndim=2, floating=True)
    if image_embeddings.shape[-1] != text_embeddings.shape[-1]:
        raise ValueError(
            f"image_embeddings and text_embeddings must have the same width (one shared space), got "
            f"{_checks.shape_str(image_embeddings.shape)} and {_checks.shape_str(text_embeddings.shape)}"
        )
    named = (("image_embeddings", image_embeddings), ("text_embeddings", text_embeddings))
    _checks.same_dtype(*named)
    _checks.broadcast(*((name, x[..., :1, :1]) for name, x in named), what="leading dimensions (...)")
    _checks.scalar("scale", scale)


def clip_logits(image_embeddings: torch.Tensor, text_embeddings: torch.Tensor, scale=1.0) -> torch.Tensor:
    """Cosine similarity of every image with every text, times ``scale`` (a number or a 0-d tensor).

    Shapes:
        image_embeddings: (..., Bi, E); text_embeddings: (..., Bt, E)
        return: (..., Bi, Bt); entry (i, j) = scale * cos(image i, text j)

    Chapter: beyond text.
    """
    _pair(image_embeddings, text_embeddings, scale)
    a = F.normalize(image_embeddings, dim=-1)  # (..., Bi, E), unit rows
    b = F.normalize(text_embeddings, dim=-1)  # (..., Bt, E)
    return scale * (a @ b.transpose(-2, -1))  # (..., Bi, Bt)


def clip_loss(image_embeddings: torch.Tensor, text_embeddings: torch.Tensor, scale=1.0) -> torch.Tensor:
    """CLIP's symmetric contrastive loss of B matching pairs: row i of each input belongs with row i of the other.

    The mean of the cross-entropy of picking each image's text among the B texts and of picking each
    text's image among the B images, with logits :func:`clip_logits`. At random (all similarities equal)
    it is ln B. Leading dimensions (...) are separate groups of B pairs, each contrasted only within
    itself (the loss is the mean over the groups): a batch in which two pairs share a caption would count
    the other's image as a wrong match.

    Shapes:
        image_embeddings, text_embeddings: (..., B, E), row i of one matching row i of the other
        return: a scalar

    Chapter: beyond text.
    """
    _pair(image_embeddings, text_embeddings, scale)
    if image_embeddings.shape[:-1] != text_embeddings.shape[:-1]:
        raise ValueError(
            f"clip_loss needs B matching pairs: as many images as texts, got image_embeddings "
            f"{_checks.shape_str(image_embeddings.shape)} and text_embeddings "
            f"{_checks.shape_str(text_embeddings.shape)}"
        )
    if image_embeddings.shape[-2] == 0:
        raise ValueError(
            f"image_embeddings and text_embeddings hold no pair (B = 0): shape "
            f"{_checks.shape_str(image_embeddings.shape)}"
        )
    logits = clip_logits(image_embeddings, text_embeddings, scale)  # (..., B, B)
    B = logits.shape[-1]
    logits = logits.reshape(-1, B, B)  # (G, B, B): G groups
    targets = torch.arange(B, device=logits.device).repeat(logits.shape[0])  # (G * B,): pairs on the diagonals
    by_image = F.cross_entropy(logits.reshape(-1, B), targets)  # each image picks among its group's texts
    by_text = F.cross_entropy(logits.transpose(-2, -1).reshape(-1, B), targets)  # each text among the images
    return (by_image + by_text) / 2


def retrieval_accuracy(similarity: torch.Tensor, targets: torch.Tensor, *, k: int = 1) -> float:
    """The fraction of queries (rows) whose right answer is among the k most similar candidates (columns).

    A query counts as right when fewer than k candidates are strictly more similar than its answer (ties
    count in its favour, so the result does not depend on how a sort orders equal values).

    Shapes:
        similarity: (Q, C), higher = more similar
        targets:    (Q,) the index of each query's right candidate
        return:     a float in [0, 1]

    Chapter: beyond text.
    """
    _checks.tensor("similarity", similarity, ndim=2, floating=True)
    _checks.token_ids("targets", targets, similarity.shape[1], ndim=1, what="candidate indices (columns of similarity)")
    k = _checks.positive_int("k", k)
    if targets.shape[0] != similarity.shape[0]:
        raise ValueError(
            f"targets must have one entry per query (row of similarity), got {targets.shape[0]} "
            f"for similarity {_checks.shape_str(similarity.shape)}"
        )
    if similarity.shape[0] == 0:
        raise ValueError(f"similarity has no query (row): shape {_checks.shape_str(similarity.shape)}")
    if not torch.isfinite(similarity).all():
        raise ValueError(
            "similarity must be finite (a NaN or infinity has no rank), got a non-finite entry at "
            f"{tuple((~torch.isfinite(similarity)).nonzero()[0].tolist())}"
        )
    own = similarity.gather(1, targets[:, None].to(similarity.device))  # (Q, 1): each query's right answer
    rank = (similarity > own).sum(dim=-1)  # (Q,): candidates strictly more similar
    return int((rank < k).sum()) / similarity.shape[0]


class DualEncoder(nn.Module):
    """Two encoders and a learned scale: each side's output projected to ``d_embed`` (CLIP's two towers).

    ``image_encoder(images)`` and ``text_encoder(*text_inputs)`` must each return one vector per example,
    (B, d_image) and (B, d_text). The scale s = exp(log_scale) starts at 1 / 0.07, as in CLIP, and is
    kept at most 100.

    Shapes:
        encode_images: images -> (B, d_embed); encode_texts: text inputs -> (B, d_embed)
        forward(images, *text_inputs, groups=1): the loss of B matching pairs, contrasted in ``groups``
        consecutive groups of B / groups pairs (see :func:`clip_loss`), a scalar

    Chapter: beyond text.
    """

    def __init__(
        self,
        image_encoder: nn.Module,
        text_encoder: nn.Module,
        d_image: int,
        d_text: int,
        d_embed: int,
        *,
        temperature: float = 0.07,
    ):
        super().__init__()
        self.image_encoder, self.text_encoder = image_encoder, text_encoder
        self.image_projection = nn.Linear(
            _checks.positive_int("d_image", d_image), _checks.positive_int("d_embed", d_embed), bias=False
        )
        self.text_projection = nn.Linear(_checks.positive_int("d_text", d_text), d_embed, bias=False)
        t = _checks.positive_float("temperature", temperature)
        self.log_scale = nn.Parameter(torch.tensor(math.log(1 / t)))

    @property
    def scale(self) -> torch.Tensor:
        return self.log_scale.clamp(max=math.log(100.0)).exp()

    def encode_images(self, images) -> torch.Tensor:
        features = _checks.features(
            "image_encoder(images)",
            self.image_encoder(images),
            self.image_projection.in_features,
            module=self.image_projection,
            width_name="d_image",
            ndim=2,
        )  # (B, d_image)
        return self.image_projection(features)  # (B, E)

    def encode_texts(self, *text_inputs) -> torch.Tensor:
        features = _checks.features(
            "text_encoder(*text_inputs)",
            self.text_encoder(*text_inputs),
            self.text_projection.in_features,
            module=self.text_projection,
            width_name="d_text",
            ndim=2,
        )  # (B, d_text)
        return self.text_projection(features)  # (B, E)

    def forward(self, images, *text_inputs, groups: int = 1) -> torch.Tensor:
        groups = _checks.positive_int("groups", groups)
        a, b = self.encode_images(images), self.encode_texts(*text_inputs)  # (B, E), (B, E)
        if a.shape[0] != b.shape[0]:
            raise ValueError(
                f"images and text_inputs must hold as many examples: image_encoder(images) gave "
                f"{a.shape[0]}, text_encoder(*text_inputs) gave {b.shape[0]}"
            )
        if a.shape[0] == 0 or a.shape[0] % groups:
            raise ValueError(
                f"the batch of {a.shape[0]} pairs (images and text_inputs) cannot be cut into "
                f"groups={groups} equal groups"
            )
        return clip_loss(a.view(groups, -1, a.shape[-1]), b.view(groups, -1, b.shape[-1]), self.scale)
