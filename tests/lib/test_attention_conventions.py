"""The conventions every attention path shares: top-left causal masks, zero weight on masked keys, copied dtypes.

Paths: ``attention.scaled_dot_product_attention`` with ``causal_mask``, ``MultiHeadAttention`` (explicit
path with ``return_weights=True`` and the fused fast path), ``GroupedQueryAttention`` and
``flash.flash_attention``. The reference is ``F.scaled_dot_product_attention(..., is_causal=True)``.
"""

import pytest
import torch
import torch.nn.functional as F
from attnbook import attention, blocks, flash
from attnbook.attention import GroupedQueryAttention, MultiHeadAttention, causal_mask, padding_mask
from torch import nn

TOL64 = dict(atol=1e-12, rtol=1e-10)
SHAPES = [(3, 5), (5, 5), (5, 3)]  # (Tq, Tk): fewer queries than keys, as many, more
NAN, INF = float("nan"), float("inf")


def _heads_reference(mha, query, key, n_kv_heads=None):
    """Multi-head (or grouped-query) attention written with PyTorch's is_causal=True on the projections."""
    B, Tq, D = query.shape
    H, Dh = mha.n_heads, mha.d_head
    H_kv = n_kv_heads or H
    q = mha.W_q(query).view(B, Tq, H, Dh).transpose(1, 2)  # (B, H, Tq, Dh)
    k = mha.W_k(key).view(B, key.shape[1], H_kv, Dh).transpose(1, 2).repeat_interleave(H // H_kv, 1)
    v = mha.W_v(key).view(B, key.shape[1], H_kv, Dh).transpose(1, 2).repeat_interleave(H // H_kv, 1)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, Tq, Dh)
    return mha.W_o(heads.transpose(1, 2).reshape(B, Tq, D))


# --- one causal convention ----------------------------------------------------------------------------


@pytest.mark.parametrize("t_q, t_k", SHAPES)
def test_every_causal_path_is_top_left_aligned_like_is_causal(t_q, t_k):
    g = torch.Generator().manual_seed(t_q * 10 + t_k)
    q, k, v = (torch.randn(2, 3, t, 8, generator=g, dtype=torch.float64) for t in (t_q, t_k, t_k))
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (2, 3, Tq, 8)
    mask = causal_mask(t_q, t_k)
    # PyTorch's is_causal is the boolean mask tril(ones(Tq, Tk)), and so is causal_mask(Tq, Tk)
    assert torch.equal(mask, torch.ones(t_q, t_k, dtype=torch.bool).tril())
    torch.testing.assert_close(attention.scaled_dot_product_attention(q, k, v, mask), reference, **TOL64)
    torch.testing.assert_close(flash.flash_attention(q, k, v, causal=True, block_q=2, block_k=2), reference, **TOL64)

    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).double()
    gqa = GroupedQueryAttention(16, 4, 4).double()
    gqa.load_state_dict(mha.state_dict())
    query = torch.randn(2, t_q, 16, generator=g, dtype=torch.float64)
    key = torch.randn(2, t_k, 16, generator=g, dtype=torch.float64)
    expected = _heads_reference(mha, query, key)
    outputs = {
        "MHA fast path": mha(query, key, is_causal=True),
        "MHA explicit path": mha(query, key, is_causal=True, return_weights=True)[0],
        "GQA (H_kv = H) fast path": gqa(query, key, is_causal=True),
        "GQA (H_kv = H) explicit path": gqa(query, key, is_causal=True, return_weights=True)[0],
    }
    for name, out in outputs.items():
        torch.testing.assert_close(out, expected, **TOL64, msg=lambda m: f"{name}: {m}")
    weights = mha(query, key, is_causal=True, return_weights=True)[1]  # (2, 4, Tq, Tk)
    assert torch.equal(weights != 0, mask.expand_as(weights))


@pytest.mark.parametrize("t_q, t_k", SHAPES)
def test_grouped_query_attention_with_fewer_kv_heads_follows_the_same_convention(t_q, t_k):
    torch.manual_seed(1)
    gqa = GroupedQueryAttention(16, 4, 2).double()
    query, key = torch.randn(2, t_q, 16, dtype=torch.float64), torch.randn(2, t_k, 16, dtype=torch.float64)
    expected = _heads_reference(gqa, query, key, n_kv_heads=2)
    torch.testing.assert_close(gqa(query, key, is_causal=True), expected, **TOL64)
    torch.testing.assert_close(gqa(query, key, is_causal=True, return_weights=True)[0], expected, **TOL64)


def test_the_cache_offset_is_the_explicit_bottom_right_alignment():
    """With a KV cache the new queries follow the cached positions: query i attends keys j <= i + T_past."""
    torch.manual_seed(2)
    gqa = GroupedQueryAttention(16, 4, 2).double()
    x = torch.randn(1, 7, 16, dtype=torch.float64)
    cache = attention.KVCache()
    first = gqa(x[:, :4], is_causal=True, cache=cache)  # positions 0..3
    rest = gqa(x[:, 4:], is_causal=True, cache=cache)  # positions 4..6, offset 4
    torch.testing.assert_close(torch.cat([first, rest], 1), gqa(x, is_causal=True), **TOL64)
    q, k, v = (torch.randn(3, 8, dtype=torch.float64) for _ in range(3))
    k, v = (
        torch.cat([torch.randn(4, 8, dtype=torch.float64), k]),
        torch.cat([torch.randn(4, 8, dtype=torch.float64), v]),
    )
    bottom_right = attention.scaled_dot_product_attention(q, k, v, causal_mask(3, 7, offset=4))
    torch.testing.assert_close(
        flash.flash_attention(q, k, v, causal=True, offset=4, block_q=2, block_k=3), bottom_right, **TOL64
    )


# --- from_torch keeps the dtype and the device ------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_blocks_from_torch_keep_float64(norm_first):
    torch.manual_seed(3)
    kw = dict(dim_feedforward=32, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=torch.float64)
    enc_layer = nn.TransformerEncoderLayer(16, 4, **kw).eval()
    dec_layer = nn.TransformerDecoderLayer(16, 4, **kw).eval()
    enc, dec = blocks.EncoderBlock.from_torch(enc_layer), blocks.DecoderBlock.from_torch(dec_layer)
    for block, layer in ((enc, enc_layer), (dec, dec_layer)):
        assert {p.dtype for p in block.parameters()} == {torch.float64}
        assert {p.device for p in block.parameters()} == {layer.linear1.weight.device}
        for (name, p), (_, p_ref) in zip(
            sorted(block.ffn.named_parameters()),
            sorted(
                {
                    "W_1.weight": layer.linear1.weight,
                    "W_1.bias": layer.linear1.bias,
                    "W_2.weight": layer.linear2.weight,
                    "W_2.bias": layer.linear2.bias,
                }.items()
            ),
        ):
            assert torch.equal(p, p_ref), name  # copied exactly, not rounded through float32
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    memory = torch.randn(2, 6, 16, dtype=torch.float64)
    causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    torch.testing.assert_close(enc.eval()(x), enc_layer(x), atol=1e-12, rtol=0)
    torch.testing.assert_close(dec.eval()(x, memory), dec_layer(x, memory, tgt_mask=causal), atol=1e-12, rtol=0)


# --- masked keys get zero weight ---------------------------------------------------------------------------
# Whatever a masked key or value holds, finite, it changes nothing (weights, outputs, gradients). Non-finite
# numbers there are not filtered out, as in PyTorch: filtering them without a host synchronisation costs about
# a tenth of a GPT training step on the CPU, and it changes what the book measures of memory and FLOPs.


def _changed(x, positions, value):
    """A copy of x (..., T, D) with the given positions (along dimension -2) set to ``value``, needing a gradient."""
    x = x.detach().clone()
    x[..., positions, :] = value
    return x.requires_grad_()


@pytest.mark.parametrize("value", [1e3, -1e3])
def test_masked_keys_and_values_reach_no_output_and_no_gradient(value):
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 4, 6, 8, generator=g, dtype=torch.float64) for _ in range(3))
    lengths = [6, 3]
    mask = padding_mask(lengths).unsqueeze(1)  # (2, 1, 1, 6)
    # the reference: the second sequence cut to its 3 keys
    qr, kr, vr = (x.clone().requires_grad_() for x in (q, k, v))
    ref = torch.cat(
        [
            attention.scaled_dot_product_attention(qr[:1], kr[:1], vr[:1]),
            attention.scaled_dot_product_attention(qr[1:], kr[1:, :, :3], vr[1:, :, :3]),
        ]
    )
    ref.pow(2).sum().backward()
    qp, kp, vp = q.clone().requires_grad_(), k.clone(), v.clone()
    kp[1, :, 3:] = value
    vp[1, :, 3:] = value
    kp.requires_grad_()
    vp.requires_grad_()
    out, weights = attention.scaled_dot_product_attention(qp, kp, vp, mask, return_weights=True)
    torch.testing.assert_close(out, ref, **TOL64)
    assert torch.all(weights[1, :, :, 3:] == 0)  # exactly zero, however large the masked scores
    out.pow(2).sum().backward()
    for ours, theirs in ((qp, qr), (kp, kr), (vp, vr)):
        torch.testing.assert_close(ours.grad, theirs.grad, **TOL64)
    assert torch.all(kp.grad[1, :, 3:] == 0) and torch.all(vp.grad[1, :, 3:] == 0)


def test_a_nan_in_a_masked_key_gets_zero_weight_but_a_nan_in_a_masked_value_is_not_filtered():
    """The softmax never reads a masked score; the weighted sum multiplies masked values by 0, and 0 * NaN is NaN
    (as in PyTorch's F.scaled_dot_product_attention: no check for a NaN, which would wait for the device)."""
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(1, 4, 6, generator=g, dtype=torch.float64) for _ in range(3))
    mask = padding_mask([2], 4)  # (1, 1, 4): keys 2 and 3 are padding
    clean_out, clean_weights = attention.scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    out, weights = attention.scaled_dot_product_attention(q, _changed(k, [3], NAN), v, mask, return_weights=True)
    torch.testing.assert_close(weights, clean_weights, **TOL64)
    torch.testing.assert_close(out, clean_out, **TOL64)
    out = attention.scaled_dot_product_attention(q, k, _changed(v, [3], NAN), mask)
    assert torch.isnan(out).all()


def test_a_fully_masked_row_gives_zeros_and_zero_gradients():
    g = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(1, 3, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.zeros(1, 3, 5, dtype=torch.bool)
    k5, v5 = k.repeat(1, 2, 1)[:, :5], v.repeat(1, 2, 1)[:, :5]
    out, weights = attention.scaled_dot_product_attention(q, k5, v5, mask, return_weights=True)
    assert torch.equal(out, torch.zeros_like(out)) and torch.equal(weights, torch.zeros_like(weights))
    out.sum().backward()
    for x in (q, k, v):
        assert torch.equal(x.grad, torch.zeros_like(x))
    scores = torch.full((2, 3), NAN, requires_grad=True)  # the softmax does not even read the scores
    w = attention.masked_softmax(scores, torch.zeros(2, 3, dtype=torch.bool))
    w.sum().backward()
    assert torch.equal(w, torch.zeros(2, 3)) and torch.equal(scores.grad, torch.zeros(2, 3))
    torch.manual_seed(10)
    mha = MultiHeadAttention(8, 2).double()  # both paths of a layer, with a row of nothing to attend
    x = torch.randn(1, 3, 8, dtype=torch.float64)
    row_mask = torch.tensor([[True, True, True], [False, False, False], [True, False, True]])
    heads_zero = mha(x, mask=row_mask) - mha.W_o.bias  # the output layer's bias alone for the empty row
    torch.testing.assert_close(heads_zero[0, 1], torch.zeros(8, dtype=torch.float64), **TOL64)
    torch.testing.assert_close(mha(x, mask=row_mask, return_weights=True)[0], mha(x, mask=row_mask), **TOL64)


def test_masked_softmax_never_reads_masked_scores():
    g = torch.Generator().manual_seed(5)
    scores = torch.randn(3, 6, generator=g, dtype=torch.float64)
    mask = torch.rand(3, 6, generator=g) < 0.6
    mask[:, 0] = True
    poisoned = scores.masked_fill(~mask, NAN).requires_grad_()
    clean = scores.clone().requires_grad_()
    torch.testing.assert_close(attention.masked_softmax(poisoned, mask), attention.masked_softmax(clean, mask))
    upstream = torch.randn(3, 6, generator=g, dtype=torch.float64)
    (attention.masked_softmax(poisoned, mask) * upstream).sum().backward()
    (attention.masked_softmax(clean, mask) * upstream).sum().backward()
    torch.testing.assert_close(poisoned.grad, clean.grad)


def _causal_paths():
    torch.manual_seed(6)
    mha = MultiHeadAttention(16, 4).double()
    gqa = GroupedQueryAttention(16, 4, 2).double()
    return {
        "MHA fast path": lambda x: mha(x, is_causal=True),
        "MHA explicit path": lambda x: mha(x, is_causal=True, return_weights=True)[0],
        "GQA fast path": lambda x: gqa(x, is_causal=True),
        "GQA explicit path": lambda x: gqa(x, is_causal=True, return_weights=True)[0],
        "flash attention": lambda x: flash.flash_attention(x, x * 0.5, x.flip(-1), causal=True, block_q=2, block_k=2),
    }


@pytest.mark.parametrize("path", list(_causal_paths()))
def test_a_change_in_the_future_reaches_only_the_queries_that_may_attend_it(path):
    fn = _causal_paths()[path]
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    clean = fn(x)
    changed_input = _changed(x, [4], 1e3)  # position 4 of every sequence
    out = fn(changed_input)
    assert (out[:, 4:] - clean[:, 4:]).abs().amax(-1).gt(1e-6).all()  # the queries that attend position 4 see it
    torch.testing.assert_close(out[:, :4], clean[:, :4], **TOL64)  # the earlier ones are untouched
    out[:, :4].pow(2).sum().backward()
    assert torch.all(changed_input.grad[:, 4:] == 0)


def test_additive_attention_masked_positions_reach_nothing():
    torch.manual_seed(7)
    att = attention.AdditiveAttention(6, 5, 7).double()
    query = torch.randn(2, 3, 6, dtype=torch.float64)
    keys, values = torch.randn(2, 4, 5, dtype=torch.float64), torch.randn(2, 4, 3, dtype=torch.float64)
    mask = padding_mask([4, 2])  # (2, 1, 4)
    clean = att(query, keys, values, mask)
    keys_p, values_p = _changed(keys, [2, 3], 1e3).detach(), _changed(values, [2, 3], -1e3).detach()
    keys_p[0], values_p[0] = keys[0], values[0]  # only the padded positions of sequence 1 are changed
    keys_p.requires_grad_()
    values_p.requires_grad_()
    out = att(query, keys_p, values_p, mask)
    torch.testing.assert_close(out, clean, **TOL64)
    out.sum().backward()
    assert torch.all(keys_p.grad[1, 2:] == 0) and torch.all(values_p.grad[1, 2:] == 0)
