"""attnbook.attention.MultiHeadAttention: symmetries, the two paths, masks, causality, padding, and errors.

Equality with torch.nn.MultiheadAttention on copied weights is in tests/lib/test_attention.py.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from attnbook import attention, blocks
from attnbook.attention import MultiHeadAttention, causal_mask, padding_mask
from hypothesis import given, settings
from hypothesis import strategies as st

TOL64 = dict(atol=1e-10, rtol=1e-9)


def make(d_model, n_heads, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    return MultiHeadAttention(d_model, n_heads).to(dtype).eval()


def per_head_loop(mha, x, mem, mask=None, bias=None):
    """Multi-head attention as H separate single-head attentions on column slices of the weights.

    ``bias`` (B, H, Tq, Tk), if given, is added to each head's scaled scores.
    """
    Dh = mha.d_head
    heads = []
    for h in range(mha.n_heads):
        cols = slice(h * Dh, (h + 1) * Dh)
        q = x @ mha.W_q.weight[cols].T + mha.W_q.bias[cols]  # (B, Tq, Dh)
        k = mem @ mha.W_k.weight[cols].T + mha.W_k.bias[cols]  # (B, Tk, Dh)
        v = mem @ mha.W_v.weight[cols].T + mha.W_v.bias[cols]  # (B, Tk, Dh)
        s = q @ k.transpose(-2, -1) / math.sqrt(Dh)  # (B, Tq, Tk)
        if bias is not None:
            s = s + bias[:, h]
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        heads.append(torch.softmax(s, dim=-1) @ v)  # (B, Tq, Dh)
    return mha.W_o(torch.cat(heads, dim=-1))  # (B, Tq, D)


shapes = st.tuples(st.integers(1, 3), st.integers(1, 9), st.sampled_from([(4, 1), (8, 2), (12, 3), (16, 4), (8, 8)]))


@settings(max_examples=min(30, settings.default.max_examples), deadline=None)
@given(shape=shapes, seed=st.integers(0, 10_000), causal_first=st.booleans())
def test_self_attention_is_permutation_equivariant(shape, seed, causal_first):
    """F(sigma(X)) = sigma(F(X)) on both paths, for any permutation sigma of the positions."""
    B, T, (D, H) = shape
    mha = make(D, H, seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, D, generator=g, dtype=torch.float64)
    perm = torch.randperm(T, generator=g)
    torch.testing.assert_close(mha(x[:, perm]), mha(x)[:, perm], **TOL64)
    out, w = mha(x, return_weights=True)
    out_p, w_p = mha(x[:, perm], return_weights=True)
    torch.testing.assert_close(out_p, out[:, perm], **TOL64)
    torch.testing.assert_close(w_p, w[:, :, perm][:, :, :, perm], **TOL64)  # weights: rows and columns permuted


@settings(max_examples=min(20, settings.default.max_examples), deadline=None)
@given(shape=shapes, t_k=st.integers(1, 9), seed=st.integers(0, 10_000))
def test_cross_attention_ignores_the_order_of_the_keys(shape, t_k, seed):
    """Permuting keys and values together leaves every query's output unchanged (invariance)."""
    B, T_q, (D, H) = shape
    mha = make(D, H, seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T_q, D, generator=g, dtype=torch.float64)
    mem = torch.randn(B, t_k, D, generator=g, dtype=torch.float64)
    perm = torch.randperm(t_k, generator=g)
    torch.testing.assert_close(mha(x, mem[:, perm]), mha(x, mem), **TOL64)


@settings(max_examples=min(30, settings.default.max_examples), deadline=None)
@given(
    shape=shapes,
    t_k=st.integers(1, 9),
    seed=st.integers(0, 10_000),
    kind=st.sampled_from(["none", "2d", "3d", "padding", "4d"]),
    is_causal=st.booleans(),
)
def test_fast_path_equals_explicit_path_and_per_head_loop(shape, t_k, seed, kind, is_causal):
    B, T_q, (D, H) = shape
    mha = make(D, H, seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T_q, D, generator=g, dtype=torch.float64)
    mem = torch.randn(B, t_k, D, generator=g, dtype=torch.float64)
    mask = {
        "none": None,
        "2d": torch.rand(T_q, t_k, generator=g) > 0.3,
        "3d": torch.rand(B, T_q, t_k, generator=g) > 0.3,
        "padding": padding_mask(torch.randint(1, t_k + 1, (B,), generator=g), t_k),
        "4d": torch.rand(B, H, T_q, t_k, generator=g) > 0.3,
    }[kind]
    fast = mha(x, mem, mask=mask, is_causal=is_causal)
    explicit, w = mha(x, mem, mask=mask, is_causal=is_causal, return_weights=True)
    torch.testing.assert_close(fast, explicit, **TOL64)
    full = torch.ones(B, H, T_q, t_k, dtype=torch.bool)
    if mask is not None:
        full = full & (mask.unsqueeze(1) if mask.dim() == 3 else mask)
    if is_causal:
        full = full & causal_mask(T_q, t_k)
    assert torch.all(w[~full] == 0)  # forbidden keys get exactly zero weight
    rows = full.any(-1)  # queries with at least one allowed key: weights sum to one; the others are zeros
    torch.testing.assert_close(w.sum(-1)[rows], torch.ones(int(rows.sum()), dtype=torch.float64), **TOL64)
    assert torch.all(w.sum(-1)[~rows] == 0) and not torch.isnan(fast).any()
    if kind in ("none", "2d", "3d", "padding") and rows.all():
        loop_mask = None if kind == "none" and not is_causal else full[:, 0]
        torch.testing.assert_close(per_head_loop(mha, x, mem, loop_mask), fast, **TOL64)


@pytest.mark.parametrize("T_q,T_k", [(6, 6), (3, 7), (7, 3)])
def test_fused_causal_path_equals_the_built_mask(T_q, T_k):
    mha = make(16, 4, seed=3)
    x, mem = torch.randn(2, T_q, 16, dtype=torch.float64), torch.randn(2, T_k, 16, dtype=torch.float64)
    torch.testing.assert_close(mha(x, mem, is_causal=True), mha(x, mem, mask=causal_mask(T_q, T_k)), **TOL64)


def test_causal_outputs_do_not_depend_on_the_future():
    mha = make(16, 4, seed=4).float()
    x = torch.randn(2, 10, 16, requires_grad=True)
    out = mha(x, is_causal=True)
    out[:, 4].sum().backward()
    assert torch.all(x.grad[:, 5:] == 0) and torch.all(x.grad[:, :5].abs().sum(-1) > 0)
    changed = x.detach().clone()
    changed[:, 6:] = torch.randn(2, 4, 16)
    torch.testing.assert_close(mha(changed, is_causal=True)[:, :6], out[:, :6].detach())


def test_padded_batch_equals_each_sequence_alone():
    mha = make(12, 3, seed=5)
    lengths = [5, 2, 7]
    seqs = [torch.randn(1, n, 12, dtype=torch.float64) for n in lengths]
    batch = torch.full((3, 7, 12), 1e3, dtype=torch.float64)  # padding full of large junk
    for b, s in enumerate(seqs):
        batch[b, : lengths[b]] = s[0]
    for is_causal in (False, True):
        out = mha(batch, mask=padding_mask(lengths), is_causal=is_causal)
        for b, s in enumerate(seqs):
            torch.testing.assert_close(out[b, : lengths[b]], mha(s, is_causal=is_causal)[0], **TOL64)
    unmasked = mha(batch)
    assert not torch.allclose(unmasked[1, :2], mha(seqs[1])[0])  # without the mask the junk leaks in


def test_fully_masked_rows_have_zero_finite_gradients_on_both_paths():
    mha = make(8, 2, seed=6).float()
    mask = torch.tril(torch.ones(4, 4, dtype=torch.bool), diagonal=-1)  # the first query sees nothing
    for return_weights in (False, True):
        x = torch.randn(1, 4, 8, requires_grad=True)
        out = mha(x, mask=mask, return_weights=return_weights)
        out = out[0] if return_weights else out
        out.sum().backward()
        assert torch.isfinite(x.grad).all() and torch.isfinite(mha.W_q.weight.grad).all()
        torch.testing.assert_close(out[0, 0], mha.W_o.bias)
        mha.zero_grad()


def test_dropout_acts_on_the_weights_only_in_training():
    torch.manual_seed(7)
    mha = MultiHeadAttention(8, 2, dropout=0.5)
    x = torch.randn(2, 6, 8)
    mha.eval()
    torch.testing.assert_close(mha(x), mha(x))
    torch.testing.assert_close(mha(x), mha(x, return_weights=True)[0])
    mha.train()
    torch.manual_seed(1)
    a = mha(x)
    torch.manual_seed(2)
    assert not torch.allclose(a, mha(x))
    out, w = mha(x, return_weights=True)  # the weights returned are the softmax's, before dropout
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 6))
    assert not torch.allclose(out, mha.eval()(x))


def test_float32_matches_float64():
    mha64 = make(32, 4, seed=8)
    mha32 = make(32, 4, seed=8, dtype=torch.float32)
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    torch.testing.assert_close(
        mha32(x.float(), is_causal=True).double(), mha64(x, is_causal=True), atol=1e-5, rtol=1e-4
    )


def test_bias_false_has_no_biases():
    mha = MultiHeadAttention(8, 2, bias=False)
    assert [n for n, _ in mha.named_parameters()] == ["W_q.weight", "W_k.weight", "W_v.weight", "W_o.weight"]
    x = torch.randn(1, 3, 8)
    torch.testing.assert_close(mha(x), mha(x, return_weights=True)[0])
    assert torch.allclose(mha(torch.zeros(1, 3, 8)), torch.zeros(1, 3, 8))


@pytest.mark.parametrize(
    "call,error,match",
    [
        (
            lambda m, x: MultiHeadAttention(12, 5),
            ValueError,
            r"d_model must be divisible by n_heads, got d_model=12 and n_heads=5",
        ),
        (lambda m, x: MultiHeadAttention(8, 0), ValueError, r"n_heads must be an integer >= 1, got 0"),
        (lambda m, x: MultiHeadAttention(8, 2, dropout=1.0), ValueError, r"dropout must be in \[0, 1\), got 1.0"),
        (lambda m, x: m(x[0]), ValueError, r"query must have shape \(B, T, d_model=8\), got \(5, 8\)"),
        (lambda m, x: m(x.long()), TypeError, r"query must be a floating-point tensor, got dtype torch.int64"),
        (
            lambda m, x: m(x, torch.randn(3, 5, 8)),
            ValueError,
            r"query and key must have the same batch size B, got query \(2, 5, 8\) and key \(3, 5, 8\)",
        ),
        (
            lambda m, x: m(x, torch.randn(2, 6, 8), torch.randn(2, 4, 8)),
            ValueError,
            r"key and value must have the same batch size and length \(B, Tk\), "
            r"got key \(2, 6, 8\) and value \(2, 4, 8\)",
        ),
        (lambda m, x: m(x, mask=torch.ones(5, 5)), TypeError, r"mask must have dtype torch.bool, got torch.float32"),
        (
            lambda m, x: m(x, mask=torch.ones(5, dtype=torch.bool)),
            ValueError,
            r"mask must have 2 \(Tq, Tk\), 3 \(B, Tq, Tk\) or 4 \(B, H, Tq, Tk\) dimensions, got shape \(5\)",
        ),
        (
            lambda m, x: m(x, mask=torch.ones(5, 4, dtype=torch.bool)),
            ValueError,
            r"mask must be broadcastable to \(B, H, Tq, Tk\) = \(2, 2, 5, 5\), got shape \(5, 4\)",
        ),
        (
            lambda m, x: m(x, mask=torch.ones(2, 3, 5, 5, dtype=torch.bool)),
            ValueError,
            r"= \(2, 2, 5, 5\), got shape \(2, 3, 5, 5\)",
        ),
        (lambda m, x: m(x, mask=[[True]]), TypeError, r"mask must be a torch.Tensor, got list"),
    ],
)
def test_bad_input_errors(call, error, match):
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    with pytest.raises(error, match=match):
        call(mha, x)


def test_torch_reference_uses_the_opposite_boolean_convention():
    """nn.MultiheadAttention's boolean masks mean True = *blocked*: passing ours unchanged gives other numbers."""
    mha = make(8, 2, seed=9)
    ref = torch.nn.MultiheadAttention(8, 2, batch_first=True).double()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mha.W_q.weight, mha.W_k.weight, mha.W_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([mha.W_q.bias, mha.W_k.bias, mha.W_v.bias]))
        ref.out_proj.weight.copy_(mha.W_o.weight)
        ref.out_proj.bias.copy_(mha.W_o.bias)
    ref.eval()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    allowed = causal_mask(5)
    torch.testing.assert_close(ref(x, x, x, attn_mask=~allowed, need_weights=False)[0], mha(x, mask=allowed), **TOL64)
    assert not torch.allclose(
        ref(x, x, x, attn_mask=allowed, need_weights=False)[0][:, 1:], mha(x, mask=allowed)[:, 1:]
    )
    torch.testing.assert_close(
        F.scaled_dot_product_attention(x, x, x, attn_mask=allowed),
        F.scaled_dot_product_attention(x, x, x, is_causal=True),
    )  # F.sdpa: True = may attend


@pytest.mark.parametrize("return_weights", [False, True])
@pytest.mark.parametrize("kind", ["self", "cross", "causal", "padding", "bias"])
def test_the_teaching_class_equals_the_blocks_attention_with_as_many_kv_heads(kind, return_weights):
    """MultiHeadAttention (chapter 07) is GroupedQueryAttention with n_kv_heads = n_heads, the attention of every
    block: the same parameter names, and on copied weights the same outputs and weights, to the last bit."""
    torch.manual_seed(11)
    mha = attention.MultiHeadAttention(16, 4, dropout=0.1)
    gqa = attention.GroupedQueryAttention(16, 4, dropout=0.1)
    assert list(gqa.state_dict()) == list(mha.state_dict())
    gqa.load_state_dict(mha.state_dict())
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    calls = {
        "self": dict(query=x),
        "cross": dict(query=x, key=memory, value=memory, mask=attention.padding_mask([7, 3])),
        "causal": dict(query=x, is_causal=True),
        "padding": dict(query=x, mask=attention.padding_mask([5, 2]), is_causal=True),
        "bias": dict(query=x, score_bias=torch.randn(2, 4, 5, 5), mask=torch.rand(2, 5, 5) < 0.7),
    }
    for training in (False, True):  # in training mode, dropout draws the same numbers from the same seed
        outputs = []
        for layer in (mha, gqa):
            layer.train(training)
            torch.manual_seed(12)
            outputs.append(layer(**calls[kind], return_weights=return_weights))
        for ours, theirs in zip(*(out if return_weights else (out,) for out in outputs)):
            assert torch.equal(ours, theirs), (kind, training)
    every_block = [blocks.EncoderBlock(16, 4), blocks.DecoderBlock(16, 4), blocks.EncoderBlock(16, 4, rope=True)]
    assert all(isinstance(block.self_attn, attention.GroupedQueryAttention) for block in every_block)
