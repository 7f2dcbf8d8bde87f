"""attnbook.blocks: equal to torch's TransformerEncoderLayer / TransformerDecoderLayer, FFN forms,
invariants, errors.
"""

import pytest
import torch
from attnbook import blocks
from attnbook.attention import padding_mask
from attnbook.blocks import ConvFeedForward, DecoderBlock, EncoderBlock, FeedForward
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

TOL = dict(atol=1e-5, rtol=1e-4)


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def torch_mask(mask):
    """Our boolean masks say 'may attend'; torch's boolean attention masks say 'may not'."""
    return ~mask


# --- the feed-forward network ---------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_ffn_is_two_1x1_convolutions_with_shared_weights(activation):
    ffn = FeedForward(8, 32, activation=activation)
    conv = ConvFeedForward.from_linear(ffn)
    x = randn(3, 5, 8)
    torch.testing.assert_close(conv(x), ffn(x), **TOL)
    # the weights are shared, not copied: changing the Linear changes the convolution
    with torch.no_grad():
        ffn.W_1.weight.mul_(2.0)
    torch.testing.assert_close(conv(x), ffn(x), **TOL)
    # and gradients through the convolution reach the Linear weights
    conv(x).sum().backward()
    assert ffn.W_1.weight.grad is not None and ffn.W_1.weight.grad.abs().sum() > 0


def test_ffn_equals_torch_linear_relu_linear():
    ffn = FeedForward(6, 24)
    ref = nn.Sequential(nn.Linear(6, 24), nn.ReLU(), nn.Linear(24, 6))
    ref[0].load_state_dict(ffn.W_1.state_dict())
    ref[2].load_state_dict(ffn.W_2.state_dict())
    x = randn(2, 7, 6)
    torch.testing.assert_close(ffn(x), ref(x), **TOL)


@settings(max_examples=min(25, settings.default.max_examples), deadline=None)
@given(B=st.integers(1, 3), T=st.integers(1, 9), shift=st.integers(-9, 9), seed=st.integers(0, 1000))
def test_ffn_is_position_wise_and_translation_equivariant(B, T, shift, seed):
    ffn = FeedForward(4, 8).double()
    x = randn(B, T, 4, seed=seed, dtype=torch.float64)
    torch.testing.assert_close(ffn(torch.roll(x, shift, dims=1)), torch.roll(ffn(x), shift, dims=1))
    # each position's output depends on that position only
    y = x.clone()
    y[:, 0] += 1.0
    assert torch.equal(ffn(y)[:, 1:], ffn(x)[:, 1:])


# --- encoder block = torch.nn.TransformerEncoderLayer ---------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_block_equals_torch(norm_first, activation):
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(
        16, 4, 32, dropout=0.1, activation=activation, batch_first=True, norm_first=norm_first
    ).eval()
    ours = EncoderBlock.from_torch(ref).eval()
    assert ours.norm_position == ("pre" if norm_first else "post")
    x = randn(3, 6, 16)
    torch.testing.assert_close(ours(x), ref(x), **TOL)
    lengths = [6, 3, 1]
    torch.testing.assert_close(
        ours(x, padding_mask(lengths)), ref(x, src_key_padding_mask=torch_mask(padding_mask(lengths)[:, 0])), **TOL
    )
    causal = torch.ones(6, 6).tril().bool()
    torch.testing.assert_close(ours(x, is_causal=True), ref(x, src_mask=torch_mask(causal)), **TOL)


def test_encoder_block_gradients_equal_torch():
    torch.manual_seed(1)
    ref = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).double()
    ours = EncoderBlock.from_torch(ref).double()
    x = randn(2, 5, 8, dtype=torch.float64)
    ours(x).pow(2).sum().backward()
    ref(x).pow(2).sum().backward()
    torch.testing.assert_close(ours.ffn.W_1.weight.grad, ref.linear1.weight.grad)
    torch.testing.assert_close(ours.self_attn.W_o.weight.grad, ref.self_attn.out_proj.weight.grad)
    torch.testing.assert_close(ours.self_attn.W_q.weight.grad, ref.self_attn.in_proj_weight.grad[:8])


def test_encoder_block_weights_and_causality():
    block = EncoderBlock(12, 3, norm_position="pre").eval()
    x = randn(2, 7, 12)
    out, w = block(x, is_causal=True, return_weights=True)
    assert out.shape == (2, 7, 12) and w.shape == (2, 3, 7, 7)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 7))
    assert torch.all(w.triu(1) == 0)
    torch.testing.assert_close(out, block(x, is_causal=True), **TOL)  # the two attention paths agree
    y = x.clone()
    y[:, 4:] = randn(2, 3, 12, seed=5)  # change the future: the past does not move
    torch.testing.assert_close(block(y, is_causal=True)[:, :4], out[:, :4], **TOL)


def test_post_norm_output_is_normalised_and_pre_norm_keeps_the_residual_path():
    x = 5.0 + 3.0 * randn(2, 4, 8)
    post = EncoderBlock(8, 2, norm_position="post").eval()
    out = post(x)
    torch.testing.assert_close(out.mean(-1), torch.zeros(2, 4), atol=1e-5, rtol=0)
    pre = EncoderBlock(8, 2, norm_position="pre").eval()
    with torch.no_grad():  # zero the branches' last layers: a pre-norm block is then the identity
        for p in (pre.self_attn.W_o.weight, pre.self_attn.W_o.bias, pre.ffn.W_2.weight, pre.ffn.W_2.bias):
            p.zero_()
    torch.testing.assert_close(pre(x), x)


# --- decoder block = torch.nn.TransformerDecoderLayer ---------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_equals_torch(norm_first):
    torch.manual_seed(2)
    ref = nn.TransformerDecoderLayer(16, 4, 24, dropout=0.1, batch_first=True, norm_first=norm_first).eval()
    ours = DecoderBlock.from_torch(ref).eval()
    x, memory = randn(3, 5, 16, seed=1), randn(3, 7, 16, seed=2)
    causal = torch.ones(5, 5).tril().bool()
    lengths = [7, 4, 2]
    expected = ref(
        x, memory, tgt_mask=torch_mask(causal), memory_key_padding_mask=torch_mask(padding_mask(lengths)[:, 0])
    )
    got = ours(x, memory, memory_mask=padding_mask(lengths))
    torch.testing.assert_close(got, expected, **TOL)
    out, (w_self, w_cross) = ours(x, memory, memory_mask=padding_mask(lengths), return_weights=True)
    torch.testing.assert_close(out, expected, **TOL)
    assert w_self.shape == (3, 4, 5, 5) and w_cross.shape == (3, 4, 5, 7)
    assert torch.all(w_cross[1, :, :, 4:] == 0) and torch.all(w_self.triu(1) == 0)


def test_decoder_output_does_not_depend_on_padded_memory():
    block = DecoderBlock(8, 2).eval()
    x, memory = randn(1, 3, 8), randn(1, 4, 8, seed=3)
    padded = torch.cat([memory, randn(1, 2, 8, seed=9)], dim=1)  # two padding positions
    torch.testing.assert_close(block(x, padded, memory_mask=padding_mask([4], 6)), block(x, memory), **TOL)


# --- registries and errors ------------------------------------------------------------------------


def test_a_registered_norm_is_used_without_changing_signatures():
    class Scale(nn.Module):
        def __init__(self, d_model, *, eps, bias):
            super().__init__()
            self.g = nn.Parameter(torch.ones(d_model))

        def forward(self, x):
            return self.g * x

    blocks.NORMS["scale"] = Scale
    try:
        block = EncoderBlock(8, 2, norm="scale")
        assert isinstance(block.norm_1, Scale) and isinstance(block.norm_2, Scale)
    finally:
        del blocks.NORMS["scale"]


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(norm="batchnorm"), "norm must be one of 'layernorm'"),
        (dict(mlp="tanh"), "mlp must be one of"),
        (dict(norm_position="middle"), "norm_position must be one of 'post', 'pre'"),
        (dict(dropout=1.0), r"dropout must be in \[0, 1\)"),
        (dict(d_ff=0), "d_ff must be an integer >= 1"),
    ],
)
def test_bad_configuration_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EncoderBlock(8, 2, **kwargs)


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match="d_model must be divisible by n_heads"):
        DecoderBlock(10, 3)


def test_bad_inputs_errors():
    enc, dec = EncoderBlock(8, 2), DecoderBlock(8, 2)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, d_model=8\), got \(2, 5, 6\)"):
        enc(randn(2, 5, 6))
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, d_model=8\), got \(5, 8\)"):
        enc(randn(5, 8))
    with pytest.raises(ValueError, match=r"memory must have shape \(B, T, d_model=8\)"):
        dec(randn(2, 5, 8), randn(2, 4, 4))
    with pytest.raises(ValueError, match="same batch size"):
        dec(randn(2, 5, 8), randn(3, 4, 8))
    with pytest.raises(TypeError, match="TransformerEncoderLayer"):
        EncoderBlock.from_torch(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="mask must be broadcastable"):
        enc(randn(2, 5, 8), torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, d_model=8\), got \(5, 8\)"):
        ConvFeedForward(8, 16)(randn(5, 8))
