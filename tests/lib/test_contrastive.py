"""attnbook.contrastive: CLIP's loss against the formula written out, retrieval accuracy, the dual encoder."""

import math

import pytest
import torch
from attnbook import contrastive
from torch import nn


def direct_clip_loss(I, T, scale):
    """The loss written out pair by pair: -log of each match's softmax probability, both ways, averaged."""
    B = I.shape[0]
    cos = torch.tensor(
        [[float(torch.dot(I[i], T[j]) / (I[i].norm() * T[j].norm())) for j in range(B)] for i in range(B)],
        dtype=torch.float64,
    )
    logits = scale * cos
    image_to_text = [-(logits[i, i] - torch.logsumexp(logits[i], 0)) for i in range(B)]
    text_to_image = [-(logits[j, j] - torch.logsumexp(logits[:, j], 0)) for j in range(B)]
    return (sum(image_to_text) / B + sum(text_to_image) / B) / 2


@pytest.mark.parametrize("B,E,scale", [(2, 3, 1.0), (5, 8, 14.3), (7, 4, 0.5)])
def test_clip_loss_equals_the_formula(B, E, scale):
    g = torch.Generator().manual_seed(B)
    I, T = torch.randn(B, E, generator=g, dtype=torch.float64), torch.randn(B, E, generator=g, dtype=torch.float64)
    torch.testing.assert_close(contrastive.clip_loss(I, T, scale), direct_clip_loss(I, T, scale))
    torch.testing.assert_close(
        contrastive.clip_loss(I, T, torch.tensor(scale, dtype=torch.float64)), direct_clip_loss(I, T, scale)
    )


def test_clip_loss_limits_and_groups():
    g = torch.Generator().manual_seed(0)
    I = torch.randn(6, 5, generator=g, dtype=torch.float64)
    same = torch.ones(6, 5, dtype=torch.float64)
    torch.testing.assert_close(
        contrastive.clip_loss(same, 2 * same, 7.0), torch.tensor(math.log(6), dtype=torch.float64)
    )  # nothing tells pairs apart: ln B
    assert contrastive.clip_loss(torch.eye(4), torch.eye(4), 100.0) < 1e-3  # perfect matches, sharp scale
    assert contrastive.clip_loss(torch.eye(4), torch.eye(4).flip(0), 100.0) > 50  # every pair mismatched
    # groups: the mean of each group's own loss; the norms of the embeddings do not matter
    T = torch.randn(6, 5, generator=g, dtype=torch.float64)
    grouped = contrastive.clip_loss(I.view(2, 3, 5), 3 * T.view(2, 3, 5), 2.0)
    torch.testing.assert_close(
        grouped, (contrastive.clip_loss(I[:3], T[:3], 2.0) + contrastive.clip_loss(I[3:], T[3:], 2.0)) / 2
    )


def test_clip_logits_are_scaled_cosines():
    I, T = torch.tensor([[3.0, 0.0], [1.0, 1.0]]), torch.tensor([[0.0, 2.0], [5.0, 0.0], [1.0, 1.0]])
    expected = 10 * torch.tensor([[0.0, 1.0, 2**-0.5], [2**-0.5, 2**-0.5, 1.0]])
    torch.testing.assert_close(contrastive.clip_logits(I, T, 10.0), expected)


def test_retrieval_accuracy():
    sim = torch.tensor([[0.9, 0.1, 0.5], [0.2, 0.3, 0.8], [0.6, 0.7, 0.1], [0.1, 0.2, 0.3]])
    targets = torch.tensor([0, 1, 1, 0])
    assert contrastive.retrieval_accuracy(sim, targets) == 0.5  # rows 0 and 2 are right
    assert contrastive.retrieval_accuracy(sim, targets, k=2) == 0.75
    assert contrastive.retrieval_accuracy(sim, targets, k=3) == 1.0


def test_dual_encoder_trains_to_match_pairs():
    torch.manual_seed(0)
    model = contrastive.DualEncoder(nn.Linear(4, 8), nn.Embedding(4, 8), 8, 8, 6)
    assert math.isclose(model.scale.item(), 1 / 0.07, rel_tol=1e-5)
    images, texts = torch.eye(4), torch.arange(4)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(100):
        loss = model(images, texts)
        opt.zero_grad()
        loss.backward()
        opt.step()
    sim = contrastive.clip_logits(model.encode_images(images), model.encode_texts(texts))
    assert contrastive.retrieval_accuracy(sim, torch.arange(4)) == 1.0
    assert loss < 0.05 and model.scale.item() <= 100.0
    torch.testing.assert_close(model(images.repeat(2, 1), texts.repeat(2), groups=2), model(images, texts))
    with pytest.raises(ValueError, match=r"cannot be cut into groups=3"):
        model(images, texts, groups=3)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: contrastive.clip_loss(torch.randn(3, 4), torch.randn(3, 5)), r"the same width"),
        (lambda: contrastive.clip_loss(torch.randn(3, 4), torch.randn(2, 4)), r"as many images as texts"),
        (
            lambda: contrastive.retrieval_accuracy(torch.randn(3, 4), torch.zeros(2, dtype=torch.long)),
            r"targets must have one entry per query",
        ),
    ],
)
def test_bad_input_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_retrieval_accuracy_is_the_exact_fraction():
    similarity = torch.eye(5, dtype=torch.float64)
    assert contrastive.retrieval_accuracy(similarity, torch.tensor([0, 1, 2, 0, 0])) == 3 / 5
