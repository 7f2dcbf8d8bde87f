"""Half precision: every module the chapters use runs in float16 and bfloat16, finite and close to float32.

Each case builds a module (or a function) in float32, converts a copy to the half-precision dtype, and
compares its output with the float32 module *holding the same rounded weights* on the *same rounded
inputs*: the only difference left is the arithmetic. Inputs are large where overflow is the danger:
attention scores far beyond float16's largest number (65504) and RMSNorm inputs whose squares overflow.

Tolerance: |half - float32| <= TOL[dtype] * max(1, max |float32|), elementwise: about four unit roundoffs
of the dtype (float16 keeps 11 significant bits, unit roundoff 4.9e-4; bfloat16 8, 3.9e-3). The largest
error measured over these cases is below two thirds of that bound in both dtypes.
"""

import copy

import pytest
import torch
from attnbook import attention, blocks, flash, models, positional, vit
from torch import nn

TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
HALF = [torch.float16, torch.bfloat16]


def _randn(*shape, scale=1.0, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def _ids(*shape, vocab=17, seed=0):
    return torch.randint(vocab, shape, generator=torch.Generator().manual_seed(seed))


class Fn(nn.Module):
    """A function of the library as a module without parameters (so that every case is called alike)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


class Called(nn.Module):
    """A module called with fixed keyword arguments; returns its first output."""

    def __init__(self, module, **kwargs):
        super().__init__()
        self.module, self.kwargs = module, kwargs

    def forward(self, *args):
        out = self.module(*args, **self.kwargs)
        return out[0] if isinstance(out, tuple) else out


def _seeded(factory):
    torch.manual_seed(0)
    return factory().eval()


def _config(**changes):
    return models.TransformerConfig(
        **{**dict(vocab_size=17, block_size=16, n_layers=2, n_heads=2, d_model=16, d_ff=32), **changes}
    )


def QKV():
    return (
        _randn(2, 2, 6, 32, scale=80, seed=1),
        _randn(2, 2, 7, 32, scale=80, seed=2),
        _randn(2, 2, 7, 32, seed=3),
    )


def QKV_TYPICAL():
    return (_randn(2, 2, 6, 32, seed=1), _randn(2, 2, 7, 32, seed=2), _randn(2, 2, 7, 32, seed=3))


def X(scale=1.0):
    return (_randn(2, 6, 16, scale=scale, seed=4),)


# name -> (module factory, inputs); the inputs' floating tensors are rounded to the dtype under test
CASES = {
    "scaled_dot_product_attention (scores up to 1e5)": (lambda: Fn(attention.scaled_dot_product_attention), QKV),
    "scaled_dot_product_attention, causal mask": (
        lambda: Fn(lambda q, k, v: attention.scaled_dot_product_attention(q, k, v, attention.causal_mask(6, 7))),
        QKV,
    ),
    "scaled_dot_product_attention (typical scores)": (lambda: Fn(attention.scaled_dot_product_attention), QKV_TYPICAL),
    "masked_softmax": (
        lambda: Fn(lambda s: attention.masked_softmax(s, attention.causal_mask(6, 7))),
        lambda: (_randn(2, 6, 7, scale=1e4, seed=5),),
    ),
    "softmax_with_temperature": (
        lambda: Fn(lambda s: attention.softmax_with_temperature(s, 0.5)),
        lambda: (_randn(3, 7, scale=100, seed=6),),
    ),
    "flash_attention": (
        lambda: Fn(lambda q, k, v: flash.flash_attention(q, k, v, causal=True, block_q=4, block_k=3)),
        QKV,
    ),
    "flash_attention (typical scores)": (
        lambda: Fn(lambda q, k, v: flash.flash_attention(q, k, v, block_q=4, block_k=3)),
        QKV_TYPICAL,
    ),
    "AdditiveAttention": (
        lambda: attention.AdditiveAttention(16, 12, 8),
        lambda: (_randn(2, 3, 16, seed=7), _randn(2, 5, 12, seed=8), _randn(2, 5, 4, seed=9)),
    ),
    "MultiHeadAttention, fast path": (
        lambda: Called(attention.MultiHeadAttention(16, 2), is_causal=True),
        lambda: X(scale=30),
    ),
    "MultiHeadAttention, explicit path": (
        lambda: Called(attention.MultiHeadAttention(16, 2), is_causal=True, return_weights=True),
        lambda: X(scale=30),
    ),
    "MultiHeadAttention, explicit path, scores beyond 65504": (
        lambda: Called(attention.MultiHeadAttention(16, 2), return_weights=True),
        lambda: X(scale=200),
    ),
    "MultiHeadAttention, fast path, scores beyond 65504": (
        lambda: Called(attention.MultiHeadAttention(16, 2)),
        lambda: X(scale=200),
    ),
    "GroupedQueryAttention with RoPE": (
        lambda: Called(attention.GroupedQueryAttention(16, 4, 2, rope=True), is_causal=True),
        lambda: X(scale=30),
    ),
    "GroupedQueryAttention, explicit path": (
        lambda: Called(attention.GroupedQueryAttention(16, 4, 1), is_causal=True, return_weights=True),
        lambda: X(scale=30),
    ),
    "EncoderBlock, post-norm": (lambda: blocks.EncoderBlock(16, 2, 32), lambda: X(scale=10)),
    "EncoderBlock, pre-norm, RMSNorm, SwiGLU, GQA": (
        lambda: blocks.EncoderBlock(16, 2, 32, norm_position="pre", norm="rmsnorm", mlp="swiglu", n_kv_heads=1),
        lambda: X(scale=10),
    ),
    "DecoderBlock": (
        lambda: blocks.DecoderBlock(16, 2, 32),
        lambda: (_randn(2, 6, 16, seed=10), _randn(2, 4, 16, seed=11)),
    ),
    "RMSNorm (squares beyond 65504)": (lambda: blocks.RMSNorm(16), lambda: X(scale=300)),
    "torch.nn.RMSNorm (the reference)": (lambda: nn.RMSNorm(16, eps=1e-5), lambda: X(scale=300)),
    "LayerNorm (make_norm)": (lambda: blocks.make_norm("layernorm", 16), lambda: X(scale=300)),
    "FeedForward": (lambda: blocks.FeedForward(16, 32, activation="gelu"), X),
    "ConvFeedForward": (lambda: blocks.ConvFeedForward(16, 32), X),
    "SwiGLU": (lambda: blocks.SwiGLU(16, 32), X),
    "MixtureOfExperts": (lambda: blocks.MixtureOfExperts(16, 32, n_experts=4, top_k=2), X),
    "SinusoidalPositionalEncoding": (lambda: positional.SinusoidalPositionalEncoding(16, 32), X),
    "LearnedPositionalEmbedding": (lambda: positional.LearnedPositionalEmbedding(16, 32), X),
    "SinusoidalPositionalEncoding2D": (lambda: positional.SinusoidalPositionalEncoding2D(16, 2, 3), X),
    "apply_rope": (lambda: Fn(lambda x: positional.apply_rope(x, offset=3)), lambda: (_randn(2, 2, 6, 8, seed=12),)),
    "GPT": (lambda: models.GPT(_config()), lambda: (_ids(2, 9),)),
    "GPT, modern (RMSNorm, SwiGLU, RoPE, GQA)": (
        lambda: models.GPT(_config(norm="rmsnorm", mlp="swiglu", positional="rope", n_kv_heads=1)),
        lambda: (_ids(2, 9),),
    ),
    "Encoder": (
        lambda: models.Encoder(_config(norm_position="post", positional="sinusoidal")),
        lambda: (_ids(2, 7), attention.padding_mask([7, 4])),
    ),
    "Decoder": (lambda: models.Decoder(_config()), lambda: (_ids(2, 5), _randn(2, 7, 16, seed=13))),
    "EncoderDecoder": (
        lambda: models.EncoderDecoder(_config()),
        lambda: (_ids(2, 7), _ids(2, 5, seed=1), attention.padding_mask([7, 3])),
    ),
    "ViT": (
        lambda: vit.ViT(
            vit.ViTConfig(image_size=8, patch_size=4, in_channels=1, n_classes=5, d_model=16, n_layers=2, n_heads=2)
        ),
        lambda: (_randn(2, 1, 8, 8, seed=14),),
    ),
    "ViT, linear patches, mean pooling, 2D positions": (
        lambda: vit.ViT(
            vit.ViTConfig(
                image_size=8,
                patch_size=4,
                in_channels=1,
                n_classes=5,
                d_model=16,
                n_layers=1,
                n_heads=2,
                pool="mean",
                positions="sinusoidal2d",
                patch_embedding="linear",
            )
        ),
        lambda: (_randn(2, 1, 8, 8, seed=15),),
    ),
}


def _to(inputs, dtype):
    return tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)


@pytest.mark.parametrize("dtype", HALF, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("case", list(CASES))
def test_half_precision_is_finite_and_close_to_float32(case, dtype):
    factory, make_inputs = CASES[case]
    half = _seeded(factory).to(dtype)
    reference = copy.deepcopy(half).float()  # the same (rounded) weights, float32 arithmetic
    inputs = _to(make_inputs(), dtype)
    with torch.no_grad():
        out = half(*inputs)
        expected = reference(*_to(inputs, torch.float32))
    assert out.dtype == dtype, f"{case}: {out.dtype}"
    assert torch.isfinite(out).all(), f"{case}: not finite in {dtype}"
    assert torch.isfinite(expected).all()
    bound = TOL[dtype] * max(1.0, expected.abs().max().item())
    error = (out.float() - expected).abs().max().item()
    assert error <= bound, f"{case}: {dtype} differs from float32 by {error:.3g} > {bound:.3g}"


def test_the_explicit_path_in_float16_would_overflow_without_float32_scores():
    """What the float32 scores protect against: the same product formed in float16 is infinite."""
    q, k, v = (x.half() for x in QKV())
    assert not torch.isfinite(q @ k.transpose(-2, -1)).all()
    assert torch.isfinite(attention.scaled_dot_product_attention(q, k, v)).all()
    x = X(scale=300)[0].half()
    assert not torch.isfinite(x.pow(2)).all()  # the square of the old RMSNorm overflowed
    torch.testing.assert_close(blocks.RMSNorm(16).half()(x), nn.RMSNorm(16, eps=1e-5).half()(x))


@pytest.mark.parametrize("dtype", HALF, ids=["float16", "bfloat16"])
def test_half_precision_gradients_are_finite(dtype):
    torch.manual_seed(0)
    model = models.GPT(_config(norm="rmsnorm")).to(dtype)
    loss = model.loss(_ids(2, 9), _ids(2, 9, seed=1))
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters())
