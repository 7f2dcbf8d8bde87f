"""The additive score bias of attnbook.attention: softmax(q . k / sqrt(Dk) + b_ij), against PyTorch's float masks."""

import math

import pytest
import torch
import torch.nn.functional as F
from attnbook.attention import (
    GroupedQueryAttention,
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)
from attnbook.blocks import EncoderBlock
from test_multi_head_attention import per_head_loop

TOL64 = dict(atol=1e-10, rtol=1e-9)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("bias_shape", [(6, 9), (2, 3, 6, 9), (2, 1, 1, 9), (1, 3, 6, 1)])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_function_equals_torch_float_mask(bias_shape, scale):
    q, k, v = randn(2, 3, 6, 4, seed=1), randn(2, 3, 9, 4, seed=2), randn(2, 3, 9, 5, seed=3)
    bias = randn(*bias_shape, seed=4) * 3
    out, w = scaled_dot_product_attention(q, k, v, score_bias=bias, scale=scale, return_weights=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale), **TOL64)
    s = 1 / math.sqrt(4) if scale is None else scale
    torch.testing.assert_close(w, torch.softmax(q @ k.transpose(-2, -1) * s + bias, dim=-1), **TOL64)


def test_function_with_bias_and_boolean_mask():
    q, k, v = randn(2, 5, 4, seed=1), randn(2, 7, 4, seed=2), randn(2, 7, 3, seed=3)
    bias = randn(2, 5, 7, seed=4)
    mask = (torch.rand(2, 5, 7, generator=torch.Generator().manual_seed(5)) > 0.4) | (torch.arange(7) == 2)
    out, w = scaled_dot_product_attention(q, k, v, mask, score_bias=bias, return_weights=True)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(~mask, float("-inf")))
    torch.testing.assert_close(out, ref, **TOL64)
    assert torch.equal(w[~mask], torch.zeros_like(w[~mask]))  # the bias never revives a masked key


def test_zero_bias_and_row_constant_bias_change_nothing():
    q, k, v = randn(3, 6, 8, seed=1), randn(3, 6, 8, seed=2), randn(3, 6, 8, seed=3)
    plain = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, score_bias=torch.zeros(6, 6, dtype=q.dtype)), plain
    )
    # softmax is unchanged by adding the same number to a whole row: only differences between keys count
    row_constant = randn(3, 6, 1, seed=4).expand(3, 6, 6)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, score_bias=row_constant), plain, **TOL64)
    # a large bias on one key makes every query look at it
    favour = torch.zeros(6, 6, dtype=q.dtype)
    favour[:, 4] = 1e3
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, score_bias=favour), v[:, 4:5].expand(3, 6, 8))


def test_multi_head_per_head_bias_both_paths_equal_a_loop():
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3).double().eval()
    x = randn(2, 5, 12, seed=1)
    bias = randn(2, 3, 5, 5, seed=2) * 2
    mask = padding_mask([5, 3]).expand(2, 5, 5)  # (B, T, T)
    for m in (None, mask):
        expected = per_head_loop(mha, x, x, m, bias)
        out, _ = mha(x, mask=m, score_bias=bias, return_weights=True)
        torch.testing.assert_close(out, expected, **TOL64)
        torch.testing.assert_close(mha(x, mask=m, score_bias=bias), expected, **TOL64)


def test_multi_head_bias_equals_torch_multihead_attention_float_mask():
    torch.manual_seed(1)
    mha = MultiHeadAttention(8, 2).double().eval()
    ref = torch.nn.MultiheadAttention(8, 2, batch_first=True).double().eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mha.W_q.weight, mha.W_k.weight, mha.W_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([mha.W_q.bias, mha.W_k.bias, mha.W_v.bias]))
        ref.out_proj.load_state_dict(mha.W_o.state_dict())
    x = randn(3, 6, 8, seed=3)
    bias = randn(6, 6, seed=4)
    out, w = mha(x, score_bias=bias, return_weights=True)
    ref_out, ref_w = ref(x, x, x, attn_mask=bias, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, **TOL64)
    torch.testing.assert_close(w, ref_w, **TOL64)
    # with a causal mask too: PyTorch's float mask carries -inf above the diagonal
    out = mha(x, score_bias=bias, is_causal=True)
    ref_out = ref(x, x, x, attn_mask=bias.masked_fill(~causal_mask(6), float("-inf")), need_weights=False)[0]
    torch.testing.assert_close(out, ref_out, **TOL64)


def test_bias_gradients_agree_on_both_paths_and_masked_rows_stay_finite():
    torch.manual_seed(2)
    mha = MultiHeadAttention(8, 2).double()
    x = randn(2, 4, 8, seed=5)
    mask = torch.ones(2, 4, 4, dtype=torch.bool)
    mask[0, 1] = False  # a query that may attend to nothing
    grads = []
    for explicit in (True, False):
        bias = randn(2, 2, 4, 4, seed=6).requires_grad_(True)
        out = mha(x, mask=mask, score_bias=bias, return_weights=explicit)
        out = out[0] if explicit else out
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out[0, 1], mha.W_o.bias)  # zero heads: only the output bias
        out.pow(2).sum().backward()
        assert torch.isfinite(bias.grad).all()
        assert torch.equal(bias.grad[0, :, 1], torch.zeros_like(bias.grad[0, :, 1]))
        grads.append(bias.grad)
    torch.testing.assert_close(grads[0], grads[1], **TOL64)


def test_grouped_query_attention_takes_the_same_bias():
    torch.manual_seed(3)
    mha = MultiHeadAttention(8, 4).double().eval()
    gqa = GroupedQueryAttention(8, 4, n_kv_heads=4).double().eval()
    gqa.load_state_dict(mha.state_dict())
    x = randn(2, 5, 8, seed=7)
    bias = randn(2, 4, 5, 5, seed=8)
    torch.testing.assert_close(
        gqa(x, score_bias=bias, is_causal=True), mha(x, score_bias=bias, is_causal=True), **TOL64
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_bias_equals_torch_encoder_layer_float_mask(norm_first):
    torch.manual_seed(4)
    layer = (
        torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=norm_first).double().eval()
    )
    block = EncoderBlock.from_torch(layer).double().eval()
    x = randn(2, 5, 8, seed=9)
    bias = randn(5, 5, seed=10)
    torch.testing.assert_close(block(x, score_bias=bias), layer(x, src_mask=bias), **TOL64)


@pytest.mark.parametrize(
    "call,error,match",
    [
        (
            lambda q: scaled_dot_product_attention(q, q, q, score_bias=torch.ones(3, 3, dtype=torch.long)),
            TypeError,
            r"score_bias must be a floating-point tensor, got dtype torch.int64",
        ),
        (
            lambda q: scaled_dot_product_attention(q, q, q, score_bias=torch.ones(2, 3)),
            ValueError,
            r"score_bias must be broadcastable to the scores' shape \(\.\.\., Tq, Tk\) = \(3, 3\), got shape \(2, 3\)",
        ),
        (
            lambda q: scaled_dot_product_attention(q, q, q, score_bias=torch.full((3, 3), float("-inf"))),
            ValueError,
            r"score_bias must be finite.*boolean mask",
        ),
        (
            lambda q: MultiHeadAttention(4, 2)(q[None], score_bias=torch.ones(3, 3, 3, 3)),
            ValueError,
            r"score_bias must be broadcastable to \(B, H, Tq, Tk\) = \(1, 2, 3, 3\), got shape \(3, 3, 3, 3\)",
        ),
        (
            lambda q: MultiHeadAttention(4, 2)(q[None], score_bias=torch.ones(3)),
            ValueError,
            r"score_bias must have 2 \(Tq, Tk\), 3 \(B, Tq, Tk\) or 4 \(B, H, Tq, Tk\) dimensions, got shape \(3\)",
        ),
    ],
)
def test_bad_bias_errors(call, error, match):
    with pytest.raises(error, match=match):
        call(torch.randn(3, 4))
