"""attnbook.attention: equal to PyTorch's references, invariants, property tests, and clear errors."""

import math

import pytest
import torch
import torch.nn.functional as F
from attnbook.attention import (
    AdditiveAttention,
    AdditiveScore,
    MultiHeadAttention,
    causal_mask,
    masked_softmax,
    padding_mask,
    scaled_dot_product_attention,
    softmax_with_temperature,
)
from hypothesis import given, settings
from hypothesis import strategies as st

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-4), torch.float64: dict(atol=1e-10, rtol=1e-9)}


def qkv(batch, t_q, t_k, d_k, d_v, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(*batch, t_q, d_k, generator=g, dtype=dtype),
        torch.randn(*batch, t_k, d_k, generator=g, dtype=dtype),
        torch.randn(*batch, t_k, d_v, generator=g, dtype=dtype),
    )


# --- scaled dot-product attention -----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "batch,t_q,t_k,d_k,d_v",
    [((), 1, 1, 1, 1), ((), 5, 7, 8, 3), ((2,), 4, 4, 16, 16), ((2, 3), 6, 9, 4, 5), ((1, 2, 2), 3, 2, 8, 8)],
)
def test_equals_torch_sdpa(dtype, batch, t_q, t_k, d_k, d_v):
    q, k, v = qkv(batch, t_q, t_k, d_k, d_v, dtype)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v), **TOL[dtype]
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equals_torch_sdpa_with_masks_and_scale(dtype):
    q, k, v = qkv((2, 3), 6, 9, 8, 5, dtype, seed=1)
    g = torch.Generator().manual_seed(2)
    masks = [
        torch.rand(2, 3, 6, 9, generator=g) > 0.5,  # full shape
        torch.rand(6, 9, generator=g) > 0.3,  # broadcast over batch and heads
        torch.rand(2, 1, 1, 9, generator=g) > 0.3,  # key padding style
    ]
    for mask in masks:
        mask = mask | (torch.arange(9) == 0)  # every query row may attend to key 0
        for scale in (None, 0.1, 2.0):
            torch.testing.assert_close(
                scaled_dot_product_attention(q, k, v, mask, scale=scale),
                F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale),
                **TOL[dtype],
            )


def test_causal_mask_equals_is_causal():
    q, k, v = qkv((2,), 7, 7, 8, 8)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, causal_mask(7)), F.scaled_dot_product_attention(q, k, v, is_causal=True)
    )
    # Tq != Tk: top-left alignment, as F.scaled_dot_product_attention's is_causal
    q, k, v = qkv((2,), 3, 5, 8, 8)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, causal_mask(3, 5)),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
    )


def test_weights_rows_sum_to_one_and_output_is_weighted_average():
    q, k, v = qkv((3,), 4, 6, 5, 2, torch.float64)
    out, w = scaled_dot_product_attention(q, k, v, return_weights=True)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 4, dtype=torch.float64))
    assert (w > 0).all()
    torch.testing.assert_close(out, w @ v)
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(5), dim=-1)
    torch.testing.assert_close(w, expected)


def test_masked_keys_get_zero_weight_and_all_masked_rows_give_zeros():
    q, k, v = qkv((2,), 4, 5, 3, 3, torch.float64)
    mask = torch.ones(2, 4, 5, dtype=torch.bool)
    mask[0, 1] = False  # query 1 of sequence 0 may attend to nothing
    mask[1, :, 3:] = False
    q.requires_grad_(True)
    out, w = scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    assert torch.equal(w[0, 1], torch.zeros(5, dtype=torch.float64))
    assert torch.equal(out[0, 1], torch.zeros(3, dtype=torch.float64))
    assert torch.equal(w[1, :, 3:], torch.zeros(4, 2, dtype=torch.float64))
    torch.testing.assert_close(w[1].sum(-1), torch.ones(4, dtype=torch.float64))
    out.sum().backward()
    assert torch.isfinite(q.grad).all()
    assert torch.equal(q.grad[0, 1], torch.zeros(3, dtype=torch.float64))


def test_masked_softmax_without_mask_is_softmax():
    x = torch.randn(3, 7)
    torch.testing.assert_close(masked_softmax(x), torch.softmax(x, dim=-1))


def test_permutation_equivariance():
    q, k, v = qkv((), 6, 8, 4, 3, torch.float64)
    perm_q, perm_k = torch.randperm(6), torch.randperm(8)
    out = scaled_dot_product_attention(q, k, v)
    # permuting the queries permutes the outputs; permuting keys and values together changes nothing
    torch.testing.assert_close(scaled_dot_product_attention(q[perm_q], k, v), out[perm_q])
    torch.testing.assert_close(scaled_dot_product_attention(q, k[perm_k], v[perm_k]), out)


@settings(max_examples=min(60, settings.default.max_examples), deadline=None)
@given(
    t_q=st.integers(1, 6),
    t_k=st.integers(1, 6),
    d_k=st.integers(1, 8),
    d_v=st.integers(1, 8),
    batch=st.integers(1, 3),
    seed=st.integers(0, 10_000),
    use_mask=st.booleans(),
)
def test_properties(t_q, t_k, d_k, d_v, batch, seed, use_mask):
    q, k, v = qkv((batch,), t_q, t_k, d_k, d_v, torch.float64, seed=seed)
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch, t_q, t_k, generator=g) > 0.5 if use_mask else None
    out, w = scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    assert out.shape == (batch, t_q, d_v) and w.shape == (batch, t_q, t_k)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    assert (w >= 0).all()
    sums = w.sum(-1)
    allowed = mask.any(-1) if mask is not None else torch.ones_like(sums, dtype=torch.bool)
    torch.testing.assert_close(sums[allowed], torch.ones_like(sums[allowed]))
    assert torch.equal(sums[~allowed], torch.zeros_like(sums[~allowed]))
    if mask is not None:
        assert torch.equal(w[~mask], torch.zeros_like(w[~mask]))
        rows = allowed  # where a row has an allowed key, PyTorch agrees
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        torch.testing.assert_close(out[rows], ref[rows])
    # the output lies in the convex hull of the values: each coordinate within the values' range
    lo, hi = v.min(dim=-2).values.unsqueeze(-2), v.max(dim=-2).values.unsqueeze(-2)
    inside = (out >= lo - 1e-9) & (out <= hi + 1e-9)
    assert inside[allowed].all()


def test_temperature_limits():
    s = torch.tensor([0.5, 2.0, -1.0, 1.9], dtype=torch.float64)
    torch.testing.assert_close(softmax_with_temperature(s, 1.0), torch.softmax(s, -1))
    torch.testing.assert_close(softmax_with_temperature(s, 1e-3), F.one_hot(torch.tensor(1), 4).double())
    torch.testing.assert_close(
        softmax_with_temperature(s, 1e6), torch.full((4,), 0.25, dtype=torch.float64), atol=1e-5, rtol=0
    )


# --- masks ------------------------------------------------------------------------------------------


def test_causal_mask():
    m = causal_mask(4)
    assert m.dtype == torch.bool and torch.equal(m, torch.ones(4, 4, dtype=torch.bool).tril())
    assert torch.equal(causal_mask(2, 4, offset=2), torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool))


def test_padding_mask():
    m = padding_mask([2, 4, 1])
    assert m.shape == (3, 1, 4)
    assert torch.equal(m[:, 0], torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool))
    assert padding_mask(torch.tensor([1, 2]), 5).shape == (2, 1, 5)


def test_padded_batch_equals_each_sequence_alone():
    g = torch.Generator().manual_seed(3)
    lengths = [3, 6, 1]
    seqs = [torch.randn(n, 4, generator=g, dtype=torch.float64) for n in lengths]
    x = torch.zeros(3, 6, 4, dtype=torch.float64)
    for i, s in enumerate(seqs):
        x[i, : len(s)] = s
    out = scaled_dot_product_attention(x, x, x, padding_mask(lengths, 6))
    for i, s in enumerate(seqs):
        torch.testing.assert_close(out[i, : len(s)], scaled_dot_product_attention(s, s, s))


# --- additive (Bahdanau) attention ------------------------------------------------------------------


def test_additive_score_equals_formula():
    torch.manual_seed(0)
    score = AdditiveScore(d_query=3, d_key=5, d_attn=7).double()
    s, h = torch.randn(2, 4, 3, dtype=torch.float64), torch.randn(2, 6, 5, dtype=torch.float64)
    e = score(s, h)
    assert e.shape == (2, 4, 6)
    W_1, W_2, v = score.W_1.weight, score.W_2.weight, score.v.weight[0]
    for b, t, i in [(0, 0, 0), (1, 3, 5), (0, 2, 4)]:
        torch.testing.assert_close(e[b, t, i], v @ torch.tanh(W_1 @ s[b, t] + W_2 @ h[b, i]))


def test_additive_attention_weights_and_mask():
    torch.manual_seed(1)
    att = AdditiveAttention(d_query=4, d_key=6, d_attn=5).double()
    s, h = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 5, 6, dtype=torch.float64)
    mask = padding_mask([5, 2])
    ctx, w = att(s, h, h, mask, return_weights=True)
    assert ctx.shape == (2, 3, 6) and w.shape == (2, 3, 5)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, dtype=torch.float64))
    assert torch.equal(w[1, :, 2:], torch.zeros(3, 3, dtype=torch.float64))
    torch.testing.assert_close(w, torch.softmax(att.score(s, h).masked_fill(~mask, float("-inf")), -1))
    torch.testing.assert_close(ctx, w @ h)


# --- multi-head attention ---------------------------------------------------------------------------


def copy_to_torch(mha: MultiHeadAttention) -> torch.nn.MultiheadAttention:
    ref = torch.nn.MultiheadAttention(mha.d_model, mha.n_heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mha.W_q.weight, mha.W_k.weight, mha.W_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([mha.W_q.bias, mha.W_k.bias, mha.W_v.bias]))
        ref.out_proj.weight.copy_(mha.W_o.weight)
        ref.out_proj.bias.copy_(mha.W_o.bias)
    return ref.to(mha.W_q.weight.dtype)


@pytest.mark.parametrize("B,Tq,Tk,D,H", [(2, 5, 5, 8, 2), (1, 3, 7, 12, 3), (3, 4, 4, 16, 16), (2, 6, 6, 8, 1)])
def test_multi_head_equals_torch(B, Tq, Tk, D, H):
    torch.manual_seed(B * 100 + D)
    mha = MultiHeadAttention(D, H).double().eval()
    ref = copy_to_torch(mha).eval()
    x = torch.randn(B, Tq, D, dtype=torch.float64)
    mem = torch.randn(B, Tk, D, dtype=torch.float64)
    lengths = torch.randint(1, Tk + 1, (B,))
    pad = padding_mask(lengths, Tk)  # (B, 1, Tk), True = may attend
    # self-attention, cross-attention, with key padding, with a causal mask
    cases = [
        ((x,), dict(), (x, x, x), dict()),
        ((x, mem), dict(), (x, mem, mem), dict()),
        ((x, mem, mem, pad), dict(), (x, mem, mem), dict(key_padding_mask=~pad[:, 0])),
    ]
    if Tq == Tk:
        cases.append(((x,), dict(is_causal=True), (x, x, x), dict(attn_mask=~causal_mask(Tq))))
    for args, kwargs, ref_args, ref_kwargs in cases:
        out, w = mha(*args, **kwargs, return_weights=True)
        ref_out, ref_w = ref(*ref_args, **ref_kwargs, need_weights=True, average_attn_weights=False)
        torch.testing.assert_close(out, ref_out)
        torch.testing.assert_close(w, ref_w)
        torch.testing.assert_close(mha(*args, **kwargs), out)  # the fast path agrees with the explicit one


def test_multi_head_gradients_equal_torch():
    torch.manual_seed(5)
    mha = MultiHeadAttention(12, 4).double()
    ref = copy_to_torch(mha)
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    g = torch.randn(2, 5, 12, dtype=torch.float64)
    (mha(x, is_causal=True) * g).sum().backward()
    (ref(x, x, x, attn_mask=~causal_mask(5), need_weights=False)[0] * g).sum().backward()
    torch.testing.assert_close(mha.W_q.weight.grad, ref.in_proj_weight.grad[:12])
    torch.testing.assert_close(mha.W_v.weight.grad, ref.in_proj_weight.grad[24:])
    torch.testing.assert_close(mha.W_o.weight.grad, ref.out_proj.weight.grad)


def test_multi_head_parameters_do_not_grow_with_heads():
    counts = {h: sum(p.numel() for p in MultiHeadAttention(64, h).parameters()) for h in (1, 2, 8, 64)}
    assert len(set(counts.values())) == 1 and counts[1] == 4 * (64 * 64 + 64)


def test_multi_head_fully_masked_query_gives_zeros_on_both_paths():
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 3, 8)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False
    heads_zero = mha(x, mask=mask, return_weights=True)[1][0, :, 1]
    assert torch.equal(heads_zero, torch.zeros_like(heads_zero))
    torch.testing.assert_close(mha(x, mask=mask)[0, 1], mha.W_o.bias)  # zero heads -> only the output bias


# --- bad input: errors that name the argument and the shapes ----------------------------------------


@pytest.mark.parametrize(
    "args,kwargs,match",
    [
        (
            (torch.randn(4), torch.randn(3, 4), torch.randn(3, 2)),
            {},
            r"q must have at least 2 dimensions, got shape \(4\)",
        ),
        (
            (torch.randn(2, 4), torch.randn(3, 5), torch.randn(3, 2)),
            {},
            r"q and k must have the same last dimension Dk, got q \(2, 4\) and k \(3, 5\)",
        ),
        (
            (torch.randn(2, 4), torch.randn(3, 4), torch.randn(5, 2)),
            {},
            r"k and v must have the same number of keys Tk.*k \(3, 4\) and v \(5, 2\)",
        ),
        ((torch.randn(0, 4), torch.randn(3, 4), torch.randn(3, 2)), {}, r"q is an empty sequence.*\(0, 4\)"),
        ((torch.randn(2, 4), torch.randn(0, 4), torch.randn(0, 2)), {}, r"k is an empty sequence.*\(0, 4\)"),
        (
            (torch.randn(2, 4), torch.randn(3, 4), torch.randn(3, 2)),
            {"mask": torch.ones(2, 3)},
            r"mask must have dtype torch.bool, got torch.float32",
        ),
        (
            (torch.randn(2, 4), torch.randn(3, 4), torch.randn(3, 2)),
            {"mask": torch.ones(3, 2, dtype=torch.bool)},
            r"mask must be broadcastable to the scores' shape \(\.\.\., Tq, Tk\) = \(2, 3\), got shape \(3, 2\)",
        ),
        (
            (torch.randn(2, 2, 4), torch.randn(3, 3, 4), torch.randn(3, 3, 2)),
            {},
            r"batch dimensions of q and k must be broadcastable, got q \(2, 2, 4\) and k \(3, 3, 4\)",
        ),
        ((torch.randn(2, 4), torch.randn(3, 4).double(), torch.randn(3, 2)), {}, r"same dtype"),
        (
            (torch.ones(2, 4, dtype=torch.long), torch.randn(3, 4), torch.randn(3, 2)),
            {},
            r"q must be a floating-point tensor",
        ),
        (([[1.0]], torch.randn(3, 4), torch.randn(3, 2)), {}, r"q must be a torch.Tensor, got list"),
        ((torch.randn(2, 4), torch.randn(3, 4), torch.randn(3, 2)), {"scale": -1.0}, r"scale must be >= 0, got -1.0"),
    ],
)
def test_bad_input_errors(args, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        scaled_dot_product_attention(*args, **kwargs)


def test_bad_mask_and_module_arguments():
    with pytest.raises(ValueError, match=r"d_model must be divisible by n_heads, got d_model=10 and n_heads=3"):
        MultiHeadAttention(10, 3)
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"query must have shape \(B, T, d_model=8\), got \(2, 5, 6\)"):
        mha(torch.randn(2, 5, 6))
    with pytest.raises(
        ValueError,
        match=r"key and value must have the same batch size and length \(B, Tk\), "
        r"got key \(2, 5, 8\) and value \(2, 4, 8\)",
    ):
        mha(x, x, torch.randn(2, 4, 8))
    with pytest.raises(TypeError, match=r"mask must have dtype torch.bool, got torch.int64"):
        mha(x, mask=torch.ones(5, 5, dtype=torch.long))
    with pytest.raises(
        ValueError, match=r"mask must be broadcastable to \(B, H, Tq, Tk\) = \(2, 2, 5, 5\), got shape \(2, 1, 4\)"
    ):
        mha(x, mask=padding_mask([4, 2]))
    with pytest.raises(ValueError, match=r"lengths must be a non-empty 1-D sequence"):
        padding_mask([[1, 2]])
    with pytest.raises(ValueError, match=r"every length must be in \[1, t_k=3\], got lengths \[4, 2\]"):
        padding_mask([4, 2], 3)
    with pytest.raises(ValueError, match=r"t_q must be an integer >= 1, got 0"):
        causal_mask(0)
    with pytest.raises(ValueError, match=r"temperature must be > 0, got 0"):
        softmax_with_temperature(torch.randn(3), 0)
    with pytest.raises(ValueError, match=r"keys must have width d_key=6, got shape \(2, 5, 4\)"):
        AdditiveAttention(4, 6, 5)(torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 4))
