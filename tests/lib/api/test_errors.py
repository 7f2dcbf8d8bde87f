"""Focused facts: the errors the API properties found, one by one."""

import pytest
import torch
from attnbook import attention, blocks, models, positional
from specs_models import _config

# --- focused facts: the errors the properties found, one by one -----------------------------------------


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda s, m: attention.masked_softmax(s, m.float()),
            TypeError,
            r"mask must have dtype torch.bool, got torch.float32",
        ),
        (
            lambda s, m: attention.masked_softmax(s, m.long()),
            TypeError,
            r"mask must have dtype torch.bool, got torch.int64",
        ),
        (
            lambda s, m: attention.masked_softmax(s, m[:, :3]),
            ValueError,
            r"mask must be broadcastable to the scores' shape \(\.\.\., Tq, Tk\) = \(2, 4, 5\), got shape \(2, 3, 5\)",
        ),
        (
            lambda s, m: attention.masked_softmax(s.long(), m),
            TypeError,
            r"scores must be a floating-point tensor, got dtype torch.int64",
        ),
        (lambda s, m: attention.masked_softmax(s.tolist(), m), TypeError, r"scores must be a torch.Tensor, got list"),
        (lambda s, m: attention.masked_softmax(s, m.tolist()), TypeError, r"mask must be a torch.Tensor, got list"),
    ],
)
def test_masked_softmax_names_what_is_wrong(call, error, match):
    scores, mask = torch.randn(2, 4, 5), torch.rand(2, 4, 5) < 0.5
    with pytest.raises(error, match=match):
        call(scores, mask)


def test_grouped_query_attention_names_a_batch_or_length_mismatch():
    gqa = attention.GroupedQueryAttention(8, 4, 2)
    x = torch.randn(2, 5, 8)
    with pytest.raises(
        ValueError,
        match=r"query and key must have the same batch size B, got query \(2, 5, 8\) and "
        r"key \(3, 5, 8\)",
    ):
        gqa(x, torch.randn(3, 5, 8))
    with pytest.raises(
        ValueError,
        match=r"key and value must have the same batch size and length \(B, Tk\), got key "
        r"\(2, 6, 8\) and value \(2, 4, 8\)",
    ):
        gqa(x, torch.randn(2, 6, 8), torch.randn(2, 4, 8))


def test_feed_forward_names_a_wrong_width():
    with pytest.raises(ValueError, match=r"x must have width d_model=8, got shape \(2, 5, 6\)"):
        blocks.FeedForward(8, 16)(torch.randn(2, 5, 6))
    with pytest.raises(ValueError, match=r"x must have width d_model=8, got shape \(2, 5, 6\)"):
        blocks.SwiGLU(8, 16)(torch.randn(2, 5, 6))


@pytest.mark.parametrize(
    "make, call, name",
    [
        (lambda: attention.MultiHeadAttention(8, 2), lambda m, x: m(x), "query"),
        (lambda: attention.GroupedQueryAttention(8, 2, 1), lambda m, x: m(x), "query"),
        (lambda: blocks.EncoderBlock(8, 2), lambda m, x: m(x), "x"),
        (lambda: blocks.DecoderBlock(8, 2), lambda m, x: m(x, torch.randn(2, 3, 8)), "x"),
        (lambda: blocks.FeedForward(8, 16), lambda m, x: m(x), "x"),
        (lambda: blocks.RMSNorm(8), lambda m, x: m(x), "x"),
        (lambda: blocks.MixtureOfExperts(8, 16), lambda m, x: m(x), "x"),
        (lambda: positional.LearnedPositionalEmbedding(8, 16), lambda m, x: m(x), "x"),
    ],
)
def test_a_half_precision_input_to_a_float32_module_is_named(make, call, name):
    module = make()
    with pytest.raises(
        TypeError,
        match=rf"{name} has dtype torch.float16 but the {type(module).__name__}'s parameters "
        rf"are torch.float32; convert one of them \({name}.to\(torch.float32\) or "
        rf"{type(module).__name__}.to\(torch.float16\)\)",
    ):
        call(module, torch.randn(2, 5, 8).half())


def test_blocks_name_their_own_arguments_not_those_of_the_attention_inside():
    dec = blocks.DecoderBlock(8, 2)
    x, memory = torch.randn(2, 5, 8), torch.randn(2, 3, 8)
    with pytest.raises(
        TypeError,
        match=r"memory has dtype torch.float64 but the DecoderBlock's parameters are "
        r"torch.float32",
    ):
        dec(x, memory.double())
    with pytest.raises(
        ValueError,
        match=r"memory_mask must be broadcastable to \(B, H, Tq, Tk\) = \(2, 2, 5, 3\), "
        r"got shape \(2, 1, 4\)",
    ):
        dec(x, memory, memory_mask=attention.padding_mask([4, 2]))
    with pytest.raises(ValueError, match=r"^mask must be broadcastable to \(B, H, Tq, Tk\) = \(2, 2, 5, 5\)"):
        dec(x, memory, mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"memory must have shape \(B, T, d_model=8\), got \(2, 3, 6\)"):
        dec(x, torch.randn(2, 3, 6))
    with pytest.raises(ValueError, match=r"x and memory must have the same batch size B"):
        dec(x, torch.randn(3, 3, 8))
    enc = blocks.EncoderBlock(8, 2)
    with pytest.raises(TypeError, match=r"^x has dtype torch.float16"):
        enc(x.half())
    model = models.EncoderDecoder(_config(d_model=8))
    with pytest.raises(ValueError, match=r"^src_mask must be broadcastable"):
        model(torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long), attention.padding_mask([5, 2]))
    with pytest.raises(ValueError, match=r"^memory_mask must be broadcastable"):
        model.decoder(torch.zeros(2, 3, dtype=torch.long), torch.randn(2, 4, 8), attention.padding_mask([5, 2]))
