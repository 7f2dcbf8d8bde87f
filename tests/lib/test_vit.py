"""The vision transformer: patches, the two patch embeddings, the classifier, attention maps, bad input."""

import math

import pytest
import torch
import torch.nn.functional as F
from attnbook import data, measure, positional, vit, vit_experiment
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

SMALL = dict(image_size=8, patch_size=2, in_channels=1, n_classes=10, d_model=32, n_layers=2, n_heads=4, d_ff=64)


def tiny(**changes) -> vit.ViT:
    torch.manual_seed(0)
    return vit.ViT(vit.ViTConfig(**{**SMALL, **changes}))


# --- patches ------------------------------------------------------------------------------------------


@settings(max_examples=min(25, settings.default.max_examples), deadline=None)
@given(b=st.integers(1, 3), c=st.integers(1, 3), gh=st.integers(1, 4), gw=st.integers(1, 4), p=st.integers(1, 4))
def test_patchify_equals_unfold_and_unpatchify_inverts_it(b, c, gh, gw, p):
    images = torch.randn(b, c, gh * p, gw * p, dtype=torch.float64)
    patches = vit.patchify(images, p)
    assert patches.shape == (b, gh * gw, c * p * p)
    torch.testing.assert_close(patches, F.unfold(images, p, stride=p).transpose(1, 2))
    torch.testing.assert_close(vit.unpatchify(patches, p, (gh * p, gw * p)), images)


def test_patches_are_listed_row_by_row_and_hold_their_pixels():
    images = torch.arange(2 * 4 * 6, dtype=torch.float32).reshape(1, 2, 4, 6)  # (B, C, H, W)
    patches = vit.patchify(images, 2)  # grid 2 x 3
    # patch 4 is grid row 1, column 1: rows 2-3, columns 2-3 of each channel, channel first
    expected = images[0, :, 2:4, 2:4].reshape(-1)
    torch.testing.assert_close(patches[0, 4], expected)


def test_imagenet_shapes():
    images = torch.zeros(2, 3, 224, 224)
    assert vit.patchify(images, 16).shape == (2, 196, 768)
    assert vit.grid_size(224, 16) == (14, 14)
    assert vit.n_tokens(224, 16) == 197
    assert vit.n_tokens((224, 320), 16, class_token=False) == 14 * 20


# --- the two patch embeddings -------------------------------------------------------------------------


@settings(max_examples=min(20, settings.default.max_examples), deadline=None)
@given(c=st.integers(1, 3), p=st.integers(1, 4), g=st.integers(1, 3), d=st.integers(1, 16), bias=st.booleans())
def test_linear_and_conv_patch_embeddings_are_equal_on_shared_weights(c, p, g, d, bias):
    torch.manual_seed(0)
    linear = vit.LinearPatchEmbedding(c, p, d, bias=bias).double()
    conv = vit.ConvPatchEmbedding.from_linear(linear)
    images = torch.randn(2, c, g * p, (g + 1) * p, dtype=torch.float64)
    torch.testing.assert_close(conv(images), linear(images))
    assert conv(images).shape == (2, g * (g + 1), d)


def test_from_linear_shares_parameters_and_gradients():
    linear = vit.LinearPatchEmbedding(3, 4, 8)
    conv = vit.ConvPatchEmbedding.from_linear(linear)
    assert conv.E.weight.data_ptr() == linear.E.weight.data_ptr()
    with torch.no_grad():
        linear.E.weight.add_(1.0)  # a change to the linear weights shows in the convolution
    images = torch.randn(1, 3, 8, 8)
    torch.testing.assert_close(conv(images), linear(images))
    conv(images).sum().backward()
    assert linear.E.weight.grad is not None and linear.E.weight.grad.abs().sum() > 0


def test_conv_patch_embedding_equals_plain_conv2d():
    emb = vit.ConvPatchEmbedding(3, 4, 8)
    images = torch.randn(2, 3, 8, 12)
    ref = F.conv2d(images, emb.E.weight, emb.E.bias, stride=4)  # (B, D, 2, 3)
    torch.testing.assert_close(emb(images), ref.flatten(2).transpose(1, 2))


# --- the classifier -----------------------------------------------------------------------------------


@pytest.mark.parametrize("pool", vit.POOLS)
@pytest.mark.parametrize("positions", vit.POSITIONS)
def test_vit_shapes_and_weights(pool, positions):
    model = tiny(pool=pool, positions=positions)
    images = torch.rand(3, 1, 8, 8)
    logits, weights = model(images, return_weights=True)
    T = 16 + (pool == "cls")
    assert logits.shape == (3, 10) and torch.isfinite(logits).all()
    assert len(weights) == 2 and all(w.shape == (3, 4, T, T) for w in weights)
    for w in weights:  # no mask: every row is a full distribution over all tokens
        torch.testing.assert_close(w.sum(-1), torch.ones(3, 4, T))
        assert (w > 0).all()
    torch.testing.assert_close(model(images), logits)  # the fast path gives the same logits


def test_vit_equals_a_reference_built_from_torch_layers():
    """The ViT forward pass, rebuilt from nn.TransformerEncoderLayer (pre-norm, GELU) with copied weights."""
    model = tiny(patch_embedding="linear").double()
    layers = []
    for block in model.blocks:
        ref = nn.TransformerEncoderLayer(
            32, 4, 64, dropout=0.0, activation="gelu", batch_first=True, norm_first=True, layer_norm_eps=1e-6
        ).double()
        with torch.no_grad():
            a = block.self_attn
            ref.self_attn.in_proj_weight.copy_(torch.cat([a.W_q.weight, a.W_k.weight, a.W_v.weight]))
            ref.self_attn.in_proj_bias.copy_(torch.cat([a.W_q.bias, a.W_k.bias, a.W_v.bias]))
            ref.self_attn.out_proj.load_state_dict(a.W_o.state_dict())
            ref.linear1.load_state_dict(block.ffn.W_1.state_dict())
            ref.linear2.load_state_dict(block.ffn.W_2.state_dict())
            ref.norm1.load_state_dict(block.norms[0].state_dict())
            ref.norm2.load_state_dict(block.norms[1].state_dict())
        layers.append(ref.eval())
    images = torch.rand(4, 1, 8, 8, dtype=torch.float64)
    x = F.unfold(images, 2, stride=2).transpose(1, 2) @ model.patch_embed.E.weight.T + model.patch_embed.E.bias
    x = torch.cat([model.cls_token.expand(4, 1, 32), x], dim=1) + model.pos_embed  # (B, 17, D)
    for layer in layers:
        x = layer(x)
    expected = model.head(model.norm(x)[:, 0])
    torch.testing.assert_close(model(images), expected)


def test_sinusoidal_2d_positions_go_to_the_patches_only():
    model = tiny(positions="sinusoidal2d")
    assert not any("pos" in name for name, _ in model.named_parameters())
    images = torch.rand(2, 1, 8, 8)
    tokens = model.tokens(images)
    expected = model.patch_embed(images) + positional.sinusoidal_2d(4, 4, 32)
    torch.testing.assert_close(tokens[:, 1:], expected)
    torch.testing.assert_close(tokens[:, 0], model.cls_token[0].expand(2, 32))


def shuffle_patches(images, perm, p=2):
    return vit.unpatchify(vit.patchify(images, p)[:, perm], p, images.shape[-2:])


@pytest.mark.parametrize("pool", vit.POOLS)
def test_without_positions_the_vit_cannot_tell_an_image_from_its_shuffled_patches(pool):
    model = tiny(positions="none", pool=pool).double()
    images = torch.rand(3, 1, 8, 8, dtype=torch.float64)
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(1))
    shuffled = shuffle_patches(images, perm)
    assert not torch.allclose(shuffled, images)
    torch.testing.assert_close(model(shuffled), model(images))
    with_positions = tiny(positions="learned", pool=pool).double()
    assert not torch.allclose(with_positions(shuffled), with_positions(images))


def test_parameter_counts_match_the_model_and_the_paper():
    for changes in ({}, {"pool": "mean"}, {"positions": "sinusoidal2d"}, {"positions": "none", "pool": "mean"}):
        config = vit.ViTConfig(**{**SMALL, **changes})
        assert vit.vit_parameter_count(config)["total"] == measure.count_parameters(vit.ViT(config))
    # ViT-B/16 at 224 x 224 with a 1000-class head: "86M" in Table 1 of the paper
    base = vit.ViTConfig.preset("base", patch_size=16)
    with torch.device("meta"):
        model = vit.ViT(base)
    assert measure.count_parameters(model) == vit.vit_parameter_count(base)["total"] == 86_567_656
    huge = vit.vit_parameter_count(vit.ViTConfig.preset("huge", patch_size=14))["total"]
    assert round(huge / 1e6) == 632


def test_loss_at_initialisation_and_overfitting_one_batch():
    torch.manual_seed(0)
    model = tiny()
    images, labels = torch.rand(16, 1, 8, 8), torch.arange(16) % 10
    loss = F.cross_entropy(model(images), labels)
    assert abs(loss.item() - math.log(10)) < 0.5
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        opt.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
    assert loss.item() < 0.05


def test_fit_classifier_learns_digits_quickly():
    digits = data.load_digits()
    idx = data.balanced_subset(digits.y_train, 400)
    torch.manual_seed(0)
    model = vit_experiment.SmallCNN(1, 10, widths=(16, 32, 32))
    history = vit_experiment.fit_classifier(
        model,
        digits.x_train[idx],
        digits.y_train[idx],
        steps=150,
        batch_size=64,
        augment={"rotate": 5.0, "shift": 0.5, "scale": 0.05},
    )
    assert history.loss[-1] < history.loss[0]
    assert vit_experiment.accuracy(model, digits.x_test, digits.y_test) > 0.8


# --- attention maps -------------------------------------------------------------------------------------


def test_class_attention_maps_and_rollout():
    model = tiny()
    images = torch.rand(2, 1, 8, 8)
    _, weights = model(images, return_weights=True)
    maps = vit.class_attention_maps(weights, (4, 4))
    assert maps.shape == (2, 2, 4, 4)
    torch.testing.assert_close(maps[1, 0].reshape(-1), weights[1][0, :, 0, 1:].mean(0))
    rollout = vit.attention_rollout(weights, (4, 4))
    assert rollout.shape == (2, 4, 4) and (rollout >= 0).all() and (rollout.sum((-2, -1)) <= 1 + 1e-6).all()
    # with no residual and one layer, rollout is the head-averaged class-token row
    torch.testing.assert_close(vit.attention_rollout(weights[:1], (4, 4), residual=0.0), maps[0])
    # two layers without residual: the product of the head-averaged matrices
    a1, a2 = (w.mean(1) for w in weights)
    torch.testing.assert_close(
        vit.attention_rollout(weights, (4, 4), residual=0.0), (a2 @ a1)[:, 0, 1:].reshape(2, 4, 4)
    )


def test_rectangular_grid_maps_keep_rows_and_columns():
    model = tiny(image_size=(4, 8))
    _, weights = model(torch.rand(1, 1, 4, 8), return_weights=True)
    maps = vit.class_attention_maps(weights, (2, 4))
    torch.testing.assert_close(maps[0, 0, 1], weights[0][0, :, 0, 5:9].mean(0))


# --- the digits -------------------------------------------------------------------------------------------


def test_load_digits_and_balanced_subsets():
    digits = data.load_digits()
    assert digits.x_train.shape[1:] == (1, 8, 8) and digits.x_train.shape[0] + digits.x_test.shape[0] == 1797
    assert 0.0 <= digits.x_train.min() and digits.x_train.max() <= 1.0
    assert torch.bincount(digits.y_test).min() >= 35  # stratified: every digit is in the test set
    small, large = data.balanced_subset(digits.y_train, 50), data.balanced_subset(digits.y_train, 200)
    assert set(small.tolist()) <= set(large.tolist())  # nested
    assert torch.bincount(digits.y_train[small], minlength=10).tolist() == [5] * 10
    assert len(set(data.balanced_subset(digits.y_train, len(digits.y_train)).tolist())) == len(digits.y_train)
    with pytest.raises(ValueError, match="n must be an integer from 1 to"):
        data.balanced_subset(digits.y_train, 0)


def test_random_affine():
    images = torch.rand(4, 1, 8, 8)
    assert vit_experiment.random_affine(images) is images
    g = torch.Generator().manual_seed(0)
    moved = vit_experiment.random_affine(images, rotate=10.0, shift=1.0, scale=0.1, generator=g)
    assert moved.shape == images.shape and not torch.allclose(moved, images)
    # a whole-pixel shift of a single bright pixel moves it by one pixel
    dot = torch.zeros(1, 1, 8, 8)
    dot[0, 0, 3, 3] = 1.0
    theta_shift = vit_experiment.random_affine(dot, shift=1e-9)
    torch.testing.assert_close(theta_shift, dot, atol=1e-6, rtol=0)


# --- bad input --------------------------------------------------------------------------------------------


def test_image_sizes_not_divisible_by_the_patch_size():
    with pytest.raises(
        ValueError,
        match=r"image height of images is 225, not divisible by patch_size=16 .*crop or resize to 224 or pad to 240",
    ):
        vit.patchify(torch.zeros(1, 3, 225, 224), 16)
    with pytest.raises(ValueError, match="image width of image_size is 10, not divisible by patch_size=4"):
        vit.grid_size((8, 10), 4)
    with pytest.raises(ValueError, match="image height of image_size is 7, not divisible by patch_size=2"):
        vit.ViTConfig(**{**SMALL, "image_size": 7})
    with pytest.raises(ValueError, match="not divisible by patch_size"):
        vit.LinearPatchEmbedding(1, 3, 8)(torch.zeros(1, 1, 8, 8))


def test_wrong_channels_ranks_and_sizes():
    model = tiny()
    with pytest.raises(ValueError, match=r"in_channels=1 channels in dimension 1 .*got shape \(2, 3, 8, 8\)"):
        model(torch.zeros(2, 3, 8, 8))
    with pytest.raises(ValueError, match=r"channels-last images\? use images.permute\(0, 3, 1, 2\)"):
        vit.ConvPatchEmbedding(3, 2, 8)(torch.zeros(2, 8, 8, 3))
    with pytest.raises(ValueError, match=r"4 dimensions \(B, C, H, W\).*add a batch dimension"):
        model(torch.zeros(1, 8, 8))
    with pytest.raises(ValueError, match=r"images must be 8 x 8 \(the model's image_size"):
        model(torch.zeros(1, 1, 16, 16))
    with pytest.raises(TypeError, match="images must be a floating-point tensor"):
        model(torch.zeros(1, 1, 8, 8, dtype=torch.long))
    with pytest.raises(TypeError, match="images must be a torch.Tensor"):
        vit.patchify([[0.0]], 2)
    with pytest.raises(ValueError, match=r"patches must have shape \(B, T=16, C\*P\*P=4\)"):
        vit.unpatchify(torch.zeros(1, 15, 4), 2, 8)


def test_bad_configs():
    with pytest.raises(ValueError, match="d_model must be divisible by n_heads"):
        vit.ViTConfig(**{**SMALL, "n_heads": 5})
    with pytest.raises(ValueError, match="pool must be one of 'cls', 'mean'"):
        vit.ViTConfig(**{**SMALL, "pool": "max"})
    with pytest.raises(ValueError, match="positions must be one of"):
        vit.ViTConfig(**{**SMALL, "positions": "rope"})
    with pytest.raises(ValueError, match="sinusoidal2d' needs d_model divisible by 4"):
        vit.ViTConfig(**{**SMALL, "d_model": 30, "n_heads": 3, "positions": "sinusoidal2d"})
    with pytest.raises(ValueError, match="name must be one of 'base', 'large', 'huge'"):
        vit.ViTConfig.preset("giant")
    with pytest.raises(TypeError, match="config must be an attnbook.vit.ViTConfig"):
        vit.ViT({"d_model": 8})
    with pytest.raises(TypeError, match="embedding must be a LinearPatchEmbedding"):
        vit.ConvPatchEmbedding.from_linear(nn.Linear(4, 4))


def test_bad_attention_weights():
    with pytest.raises(ValueError, match=r"T=10 tokens, but a class token and a 4 x 4 grid of patches make 17"):
        vit.class_attention_maps([torch.rand(1, 2, 10, 10)], (4, 4))
    with pytest.raises(ValueError, match="weights is empty"):
        vit.attention_rollout([], (4, 4))
    with pytest.raises(ValueError, match=r"weights\[0\] must have 4 dimensions"):
        vit.class_attention_maps([torch.rand(17, 17)], (4, 4))
