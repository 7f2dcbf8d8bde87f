"""Tests of attnbook.flash: online softmax, tiled attention (forward and backward), the IO model."""

from __future__ import annotations

import math

import pytest
import torch
from attnbook import attention, flash, measure, train
from hypothesis import given, settings
from hypothesis import strategies as st

DEVICE = train.pick_device()
TOL = {torch.float32: dict(atol=2e-5, rtol=1e-4), torch.float64: dict(atol=1e-10, rtol=1e-9)}


def naive(q, k, v, causal=False, offset=None):
    mask = None
    if causal:
        t_q, t_k = q.shape[-2], k.shape[-2]
        mask = attention.causal_mask(t_q, t_k, offset=t_k - t_q if offset is None else offset, device=q.device)
    return attention.scaled_dot_product_attention(q, k, v, mask)


def qkv(batch, t_q, t_k, d_k, d_v, dtype=torch.float64, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    make = lambda *s: torch.randn(*s, generator=g, dtype=dtype).to(DEVICE).requires_grad_(requires_grad)  # noqa: E731
    return make(*batch, t_q, d_k), make(*batch, t_k, d_k), make(*batch, t_k, d_v)


# --- the online softmax -------------------------------------------------------------------------------


@settings(max_examples=min(60, settings.default.max_examples), deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=0, max_size=2),
    n=st.integers(1, 40),
    block=st.integers(1, 50),
    spread=st.sampled_from([1.0, 30.0, 1000.0]),
    seed=st.integers(0, 2**16),
)
def test_online_softmax_equals_torch_softmax(shape, n, block, spread, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, n, generator=g, dtype=torch.float64) * spread
    torch.testing.assert_close(flash.online_softmax(x, block_size=block), torch.softmax(x, dim=-1))


def test_online_softmax_update_keeps_the_invariant():
    """After every block, l = sum of exp(x_j - m) over everything seen, and m = the largest score so far."""
    x = torch.tensor([[2.0, 1.0, 5.0, 3.0, 8.0, 0.5, 8.0]], dtype=torch.float64)
    m, l = torch.tensor([float("-inf")], dtype=torch.float64), torch.zeros(1, dtype=torch.float64)
    for t in range(x.shape[-1]):
        m, l = flash.online_softmax_update(m, l, x[:, t : t + 1])
        seen = x[:, : t + 1]
        assert m.item() == seen.max().item()
        torch.testing.assert_close(l, torch.exp(seen - m[:, None]).sum(-1))


def test_online_softmax_update_rows_of_minus_infinity_stay_finite():
    m = torch.full((2,), float("-inf"))
    l = torch.zeros(2)
    x = torch.tensor([[float("-inf"), float("-inf")], [0.0, float("-inf")]])
    m, l = flash.online_softmax_update(m, l, x)
    assert m[0].item() == float("-inf") and l[0].item() == 0.0
    assert m[1].item() == 0.0 and l[1].item() == 1.0
    assert not torch.isnan(l).any()


def test_online_softmax_bad_input():
    with pytest.raises(ValueError, match="block_size must be an integer >= 1, got 0"):
        flash.online_softmax(torch.randn(4), block_size=0)
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        flash.online_softmax(torch.arange(4))
    with pytest.raises(ValueError, match="at least one entry"):
        flash.online_softmax(torch.randn(3, 0))


# --- tiled attention: equal to naive attention ----------------------------------------------------------


@settings(max_examples=min(50, settings.default.max_examples), deadline=None)
@given(
    batch=st.sampled_from([(), (2,), (2, 3)]),
    t_q=st.integers(1, 70),
    t_k=st.integers(1, 70),
    d_k=st.sampled_from([1, 8, 16, 33, 64]),
    d_v=st.sampled_from([1, 8, 17]),
    block_q=st.integers(1, 80),
    block_k=st.integers(1, 80),
    causal=st.booleans(),
    offset_shift=st.integers(-5, 5),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**16),
)
def test_flash_attention_equals_naive_attention(
    batch, t_q, t_k, d_k, d_v, block_q, block_k, causal, offset_shift, dtype, seed
):
    q, k, v = qkv(batch, t_q, t_k, d_k, d_v, dtype, seed)
    offset = (t_k - t_q + offset_shift) if causal else None
    out = flash.flash_attention(q, k, v, causal=causal, offset=offset, block_q=block_q, block_k=block_k)
    assert out.shape == (*batch, t_q, d_v) and out.dtype == dtype
    torch.testing.assert_close(out, naive(q, k, v, causal, offset), **TOL[dtype])


@settings(max_examples=min(20, settings.default.max_examples), deadline=None)
@given(
    t_q=st.integers(1, 40),
    t_k=st.integers(1, 40),
    d_k=st.sampled_from([1, 4, 16]),
    d_v=st.sampled_from([1, 5]),
    block_q=st.integers(1, 20),
    block_k=st.integers(1, 20),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_flash_attention_gradients_equal_naive_gradients(t_q, t_k, d_k, d_v, block_q, block_k, causal, seed):
    q, k, v = qkv((2,), t_q, t_k, d_k, d_v, torch.float64, seed, requires_grad=True)
    offset = t_k - t_q if causal else None
    grad = torch.randn(2, t_q, d_v, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)).to(DEVICE)
    expected = torch.autograd.grad(naive(q, k, v, causal, offset), (q, k, v), grad)
    got = torch.autograd.grad(
        flash.flash_attention(q, k, v, causal=causal, offset=offset, block_q=block_q, block_k=block_k), (q, k, v), grad
    )
    for g_got, g_expected in zip(got, expected):
        torch.testing.assert_close(g_got, g_expected, atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize(
    "causal, t_q, t_k, offset",
    [(False, 5, 7, None), (True, 7, 7, None), (True, 4, 8, 4), (True, 8, 4, -4), (True, 7, 7, -3)],
)
def test_gradcheck_in_float64(causal, t_q, t_k, offset):
    q, k, v = qkv((), t_q, t_k, 4, 3, torch.float64, seed=t_q + t_k, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda q, k, v: flash.flash_attention(q, k, v, causal=causal, offset=offset, block_q=3, block_k=2), (q, k, v)
    )


def test_the_log_sum_exp_is_that_of_the_scores():
    q, k, v = qkv((3,), 20, 30, 8, 5)
    out, lse = flash.flash_attention_forward(q, k, v, block_q=7, block_k=6)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1))
    torch.testing.assert_close(out, naive(q, k, v))


def test_scale_is_used():
    q, k, v = qkv((), 10, 12, 8, 8)
    torch.testing.assert_close(
        flash.flash_attention(q, k, v, scale=0.3, block_q=3, block_k=5),
        attention.scaled_dot_product_attention(q, k, v, scale=0.3),
    )


def test_queries_with_no_allowed_key_give_zeros_and_zero_gradients():
    """With a negative offset, the first queries may attend to nothing: zero output, no NaN, as in attention.py."""
    q, k, v = qkv((), 8, 8, 4, 3, requires_grad=True)
    out = flash.flash_attention(q, k, v, causal=True, offset=-3, block_q=3, block_k=2)
    expected = naive(q, k, v, causal=True, offset=-3)
    torch.testing.assert_close(out, expected)
    assert torch.all(out[:3] == 0)
    out.sum().backward()
    assert not any(torch.isnan(t.grad).any() for t in (q, k, v))
    assert torch.all(q.grad[:3] == 0)


def test_half_precision_accumulates_in_float32():
    q, k, v = qkv((2,), 50, 60, 16, 16, torch.float32, seed=3)
    out = flash.flash_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), block_q=16, block_k=16)
    assert out.dtype == torch.bfloat16
    reference = naive(q.bfloat16().float(), k.bfloat16().float(), v.bfloat16().float())
    torch.testing.assert_close(out.float(), reference, atol=1e-2, rtol=1e-2)


def test_causal_tiles_above_the_diagonal_are_skipped():
    """Causal attention visits the tiles on and below the diagonal only: 10 of the 16 here."""
    q, k, v = qkv((), 128, 128, 16, 16)
    full = measure.flop_count(lambda: flash.flash_attention(q, k, v, block_q=32, block_k=32))
    causal = measure.flop_count(lambda: flash.flash_attention(q, k, v, causal=True, block_q=32, block_k=32))
    assert full == 4 * 128 * 128 * 16
    assert causal == 4 * 16 * 32 * 32 * 10


# --- memory -------------------------------------------------------------------------------------------


@pytest.mark.skipif(DEVICE.type != "cpu", reason="the tensor-memory tracker measures CPU tensors")
def test_tiled_attention_memory_grows_linearly_and_stays_far_below_naive():
    peaks = {}
    for n in (512, 1024):
        q, k, v = qkv((), n, n, 32, 32, torch.float32)
        with torch.no_grad():
            naive_peak = measure.peak_memory(lambda: naive(q, k, v))
            peaks[n] = measure.peak_memory(lambda: flash.flash_attention(q, k, v, block_q=128, block_k=64))
        assert naive_peak >= 2 * n * n * 4  # the scores and the weights
        # the output and log-sum-exp, plus a few tiles and block-sized accumulators
        assert peaks[n] <= 4 * (n * 32 + n) + 4 * (6 * 128 * 64 + 6 * 128 * 32)
    assert peaks[1024] < 0.05 * naive_peak
    # everything but the output and the log-sum-exp has the size of a tile: doubling n adds exactly those
    assert peaks[1024] - peaks[512] == 4 * (32 + 1) * 512


def test_the_backward_pass_saves_no_weight_matrix():
    n = 256
    q, k, v = qkv((), n, n, 16, 16, torch.float32, requires_grad=True)
    out = flash.flash_attention(q, k, v, block_q=32, block_k=32)
    saved = out.grad_fn.saved_tensors
    assert sum(t.numel() for t in saved) == 3 * n * 16 + n * 16 + n  # q, k, v, the output and the log-sum-exp


# --- bad input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, shapes, error, match",
    [
        (
            {},
            ((4, 8), (5, 6), (5, 8)),
            ValueError,
            r"q and k must have the same last dimension Dk, got q \(4, 8\) and k \(5, 6\)",
        ),
        ({}, ((4, 8), (5, 8), (6, 8)), ValueError, r"k and v must have the same number of keys Tk"),
        ({}, ((2, 4, 8), (3, 5, 8), (3, 5, 8)), ValueError, r"same batch dimensions"),
        ({"block_q": 0}, ((4, 8), (4, 8), (4, 8)), ValueError, r"block_q must be an integer >= 1, got 0"),
        ({"block_k": -2}, ((4, 8), (4, 8), (4, 8)), ValueError, r"block_k must be an integer >= 1, got -2"),
        ({"block_k": 2.5}, ((4, 8), (4, 8), (4, 8)), TypeError, r"block_k must be an integer >= 1, got 2.5"),
        ({"offset": 1}, ((4, 8), (4, 8), (4, 8)), ValueError, r"offset only applies to causal attention"),
        ({"causal": True, "offset": 1.5}, ((4, 8), (4, 8), (4, 8)), TypeError, r"offset must be an integer"),
        ({"causal": 1}, ((4, 8), (4, 8), (4, 8)), TypeError, r"causal must be True or False"),
        ({"scale": -1.0}, ((4, 8), (4, 8), (4, 8)), ValueError, r"scale must be > 0"),
        ({}, ((0, 8), (4, 8), (4, 8)), ValueError, r"q is an empty sequence: it has 0 queries Tq, shape \(0, 8\)"),
        ({}, ((8,), (4, 8), (4, 8)), ValueError, r"q must have at least 2 dimensions, got shape \(8\)"),
    ],
)
def test_bad_input_gets_a_clear_error(kwargs, shapes, error, match):
    q, k, v = (torch.randn(*s) for s in shapes)
    with pytest.raises(error, match=match):
        flash.flash_attention(q, k, v, **kwargs)


def test_bad_types_get_a_clear_error():
    x = torch.randn(4, 8)
    with pytest.raises(TypeError, match="q, k and v must have the same dtype"):
        flash.flash_attention(x, x.double(), x)
    with pytest.raises(TypeError, match="k must be a floating-point tensor"):
        flash.flash_attention(x, torch.ones(4, 8, dtype=torch.long), x)
    with pytest.raises(TypeError, match="v must be a torch.Tensor, got list"):
        flash.flash_attention(x, x, [[1.0] * 8] * 4)


# --- the IO model -------------------------------------------------------------------------------------


def test_fast_memory_refuses_to_overflow():
    mem = flash.FastMemory(100, bytes_per_element=4)
    mem.load(20)
    mem.store(5, times=3)
    assert (mem.reads, mem.writes, mem.used) == (80, 60, 80)
    with pytest.raises(MemoryError, match="100 bytes"):
        mem.hold(10)


@pytest.mark.parametrize("n, d, capacity", [(1024, 64, 64 * 1024), (1000, 32, 20_000), (4096, 128, 256 * 1024)])
def test_flash_io_counts_match_the_loop_structure(n, d, capacity):
    b_r, b_c = flash.flash_attention_block_sizes(d, capacity)
    count = flash.flash_attention_io(n, d, capacity)
    elements = capacity // 4
    assert 1 <= b_c <= d and b_r * (2 * d + 2 + b_c) + 2 * b_c * d <= elements
    assert count.peak_fast <= capacity
    assert count.reads == 4 * (n * d + math.ceil(n / b_r) * 2 * n * d)  # Q once; K and V once per query block
    assert count.writes == 4 * (n * d + n)  # O and the log-sum-exp, once


def test_standard_io_reads_and_writes_the_matrices():
    n, d, capacity = 1024, 64, 64 * 1024
    count = flash.standard_attention_io(n, d, capacity)
    assert count.peak_fast <= capacity
    assert count.writes == 4 * (2 * n * n + n * d)  # S, P and O
    assert count.reads >= 4 * (2 * n * n + 3 * n * d)  # S, P and at least Q, K, V


def test_io_counts_follow_theorem_2():
    """Standard: Theta(N d + N^2); flash: Theta(N^2 d^2 / M), across N, d and M (d^2 <= M <= N d elements)."""
    std_ratios, flash_ratios = [], []
    for n in (512, 2048, 8192):
        for d in (32, 64, 128):
            for kib in (16, 32, 64, 128, 256, 512):
                m = kib * 1024 // 4  # elements of 4 bytes
                if not d * d <= m <= n * d:
                    continue
                std = flash.standard_attention_io(n, d, 4 * m).total / 4
                fl = flash.flash_attention_io(n, d, 4 * m).total / 4
                std_ratios.append(std / (n * d + n * n))
                flash_ratios.append(fl / (n * n * d * d / m))
    assert len(std_ratios) > 20
    assert 4 <= min(std_ratios) and max(std_ratios) / min(std_ratios) < 2.6
    assert 4 <= min(flash_ratios) and max(flash_ratios) / min(flash_ratios) < 2.6


def test_flash_io_falls_as_the_fast_memory_grows():
    sizes = [64, 128, 256, 512]
    totals = [flash.flash_attention_io(8192, 64, kib * 1024).total for kib in sizes]
    assert all(a > b for a, b in zip(totals, totals[1:]))
    slope, _ = measure.fit_power_law(sizes, totals)
    assert -1.15 < slope < -0.85


def test_io_model_bad_input():
    with pytest.raises(ValueError, match="too small for flash attention with d=64"):
        flash.flash_attention_io(1024, 64, 512)
    with pytest.raises(ValueError, match="too small for standard attention with d=64"):
        flash.standard_attention_io(1024, 64, 256)
    with pytest.raises(ValueError, match="n must be an integer >= 1, got 0"):
        flash.flash_attention_io(0, 64, 65536)
    with pytest.raises(TypeError, match="capacity must be an integer"):
        flash.FastMemory(1.5)
