"""attnbook.positional: the formulas, the rotation and relative-offset properties, the modules, and clear errors."""

import math

import pytest
import torch
from attnbook import positional
from attnbook.attention import MultiHeadAttention
from attnbook.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    SinusoidalPositionalEncoding2D,
    sinusoidal,
    sinusoidal_2d,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def formula(n_positions, d_model, base=10000.0, offset=0):
    """PE[pos, 2i] = sin(pos / base^(2i/d)), PE[pos, 2i+1] = cos(pos / base^(2i/d)), written out entry by entry."""
    pe = torch.empty(n_positions, d_model, dtype=torch.float64)
    for row in range(n_positions):
        pos = row + offset
        for i in range(d_model // 2):
            pe[row, 2 * i] = math.sin(pos / base ** (2 * i / d_model))
            pe[row, 2 * i + 1] = math.cos(pos / base ** (2 * i / d_model))
    return pe


def block_rotation(k, d_model, base=10000.0):
    """T_k with PE(pos + k) = T_k PE(pos): one 2 x 2 rotation by k * w_i per (sin, cos) pair."""
    T = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i, w in enumerate(positional.frequencies(d_model, base=base).tolist()):
        c, s = math.cos(k * w), math.sin(k * w)
        T[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
    return T


# --- the sinusoidal formula -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n,d,base,offset", [(1, 2, 10000.0, 0), (7, 8, 10000.0, 0), (5, 16, 100.0, 3), (9, 6, 10000.0, 40)]
)
def test_sinusoidal_equals_the_formula(n, d, base, offset):
    pe = sinusoidal(n, d, base=base, offset=offset, dtype=torch.float64)
    assert pe.shape == (n, d)
    torch.testing.assert_close(pe, formula(n, d, base, offset), atol=1e-12, rtol=0)


def test_frequency_index_runs_from_zero_to_half_width_minus_one():
    w = positional.frequencies(8)
    assert w.shape == (4,)  # i = 0, 1, 2, 3 = d/2 - 1, not d/2 + 1 values
    torch.testing.assert_close(w, torch.tensor([10000.0 ** (-2 * i / 8) for i in range(4)], dtype=torch.float64))
    assert w[0] == 1.0 and torch.all(w[1:] < w[:-1])  # wavelengths grow geometrically


def test_even_dimensions_are_sines_odd_are_cosines():
    pe = sinusoidal(50, 12, dtype=torch.float64)
    assert torch.all(pe[0, 0::2] == 0) and torch.all(pe[0, 1::2] == 1)  # sin 0 = 0, cos 0 = 1
    torch.testing.assert_close(pe[:, 0::2] ** 2 + pe[:, 1::2] ** 2, torch.ones(50, 6, dtype=torch.float64))
    torch.testing.assert_close(pe.norm(dim=-1), torch.full((50,), math.sqrt(6), dtype=torch.float64))


def test_dtype_device_and_offset():
    assert sinusoidal(3, 4).dtype == torch.float32
    assert sinusoidal(3, 4, dtype=torch.float64).dtype == torch.float64
    torch.testing.assert_close(sinusoidal(4, 8, offset=6), sinusoidal(10, 8)[6:])
    theta = positional.angles(torch.tensor([[0, 1], [2, 3]]), 6)
    assert theta.shape == (2, 2, 3)
    torch.testing.assert_close(theta[1, 1], 3 * positional.frequencies(6))


def test_positions_are_distinct():
    pe = sinusoidal(2000, 64, dtype=torch.float64)
    distances = torch.cdist(pe, pe) + torch.eye(2000, dtype=torch.float64) * 1e9
    assert distances.min() > 1e-3


@settings(max_examples=min(40, settings.default.max_examples), deadline=None)
@given(k=st.integers(-60, 60), half_width=st.integers(1, 16), base=st.sampled_from([100.0, 10000.0]))
def test_shift_by_k_is_a_fixed_rotation(k, half_width, base):
    """PE(pos + k) = T_k PE(pos) for every pos, with T_k orthogonal and independent of pos."""
    d = 2 * half_width
    pe = sinusoidal(200, d, base=base, dtype=torch.float64)
    T = block_rotation(k, d, base)
    lo, hi = max(0, -k), min(200, 200 - k)
    torch.testing.assert_close(pe[lo + k : hi + k], pe[lo:hi] @ T.T, atol=1e-9, rtol=0)
    torch.testing.assert_close(T @ T.T, torch.eye(d, dtype=torch.float64), atol=1e-12, rtol=0)


@settings(max_examples=min(25, settings.default.max_examples), deadline=None)
@given(half_width=st.integers(1, 32), p=st.integers(0, 300), q=st.integers(0, 300), shift=st.integers(0, 300))
def test_dot_product_depends_only_on_the_offset(half_width, p, q, shift):
    d = 2 * half_width
    pe = sinusoidal(700, d, dtype=torch.float64)
    dot = pe[p] @ pe[q]
    torch.testing.assert_close(dot, pe[p + shift] @ pe[q + shift], atol=1e-9, rtol=0)
    torch.testing.assert_close(dot, torch.cos((p - q) * positional.frequencies(d)).sum(), atol=1e-9, rtol=0)
    assert dot <= d / 2 + 1e-9  # largest at p = q


# --- 2D ---------------------------------------------------------------------------------------------


def test_sinusoidal_2d_is_rows_then_columns_in_row_major_order():
    H, W, D = 3, 5, 16
    pe = sinusoidal_2d(H, W, D, dtype=torch.float64)
    assert pe.shape == (H * W, D)
    rows, cols = sinusoidal(H, D // 2, dtype=torch.float64), sinusoidal(W, D // 2, dtype=torch.float64)
    for r in range(H):
        for c in range(W):
            torch.testing.assert_close(pe[r * W + c], torch.cat([rows[r], cols[c]]))
    # the order of the patches of a (B, D, H, W) feature map flattened as in a patch embedding
    grid = torch.stack(torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij"))  # (2, H, W): row, column
    tokens = grid[None].flatten(2).transpose(1, 2)[0]  # (H * W, 2)
    for n, (r, c) in enumerate(tokens.tolist()):
        torch.testing.assert_close(pe[n], torch.cat([rows[r], cols[c]]))


def test_2d_similarity_depends_only_on_the_displacement():
    pe = sinusoidal_2d(6, 6, 32, dtype=torch.float64).view(6, 6, 32)
    sim = torch.einsum("abd,ced->abce", pe, pe)  # (6, 6, 6, 6)
    torch.testing.assert_close(sim[1, 2, 3, 5], sim[2, 0, 4, 3])  # the same displacement (+2, +3)
    assert torch.argmax(sim[2, 3].flatten()) == 2 * 6 + 3


# --- modules -----------------------------------------------------------------------------------------


def test_sinusoidal_module_adds_the_table_and_extends_beyond_max_len():
    enc = SinusoidalPositionalEncoding(8, max_len=10)
    x = torch.randn(2, 6, 8)
    torch.testing.assert_close(enc(x), x + sinusoidal(6, 8))
    torch.testing.assert_close(enc(x, offset=3), x + sinusoidal(9, 8)[3:])
    long = torch.randn(1, 25, 8)
    torch.testing.assert_close(enc(long), long + sinusoidal(25, 8))  # a formula knows every position
    torch.testing.assert_close(enc(long[:, :4], offset=21), long[:, :4] + sinusoidal(25, 8)[21:])
    assert len(enc.state_dict()) == 0  # the table is a non-persistent buffer
    assert enc.pe.shape == (10, 8)
    assert enc(x.double()).dtype == torch.float64
    torch.testing.assert_close(enc(x[0]), x[0] + sinusoidal(6, 8))  # (T, D) without a batch


def test_sinusoidal_module_dropout_only_in_training():
    enc = SinusoidalPositionalEncoding(8, dropout=0.5)
    x = torch.randn(4, 6, 8)
    torch.testing.assert_close(enc.eval()(x), x + sinusoidal(6, 8))
    out = enc.train()(x)
    assert (out == 0).any() and not torch.allclose(out, x + sinusoidal(6, 8))


def test_learned_embedding_adds_its_rows_and_learns():
    torch.manual_seed(0)
    emb = LearnedPositionalEmbedding(8, max_len=12)
    assert emb.weight.shape == (12, 8) and emb.weight.requires_grad
    assert 0.01 < emb.weight.std().item() < 0.04  # N(0, 0.02^2)
    x = torch.randn(3, 5, 8)
    torch.testing.assert_close(emb(x), x + emb.weight[:5])
    torch.testing.assert_close(emb(x, offset=7), x + emb.weight[7:12])
    emb(x, offset=2).sum().backward()
    assert (
        torch.all(emb.weight.grad[2:7] == 3)
        and torch.all(emb.weight.grad[:2] == 0)
        and torch.all(emb.weight.grad[7:] == 0)
    )
    assert list(emb.state_dict()) == ["weight"]


def test_2d_module():
    enc = SinusoidalPositionalEncoding2D(16, 3, 4)
    x = torch.randn(2, 12, 16)
    torch.testing.assert_close(enc(x), x + sinusoidal_2d(3, 4, 16))
    assert len(enc.state_dict()) == 0


def test_adding_positions_breaks_permutation_equivariance():
    torch.manual_seed(1)
    mha = MultiHeadAttention(16, 4).eval()
    enc = SinusoidalPositionalEncoding(16)
    x = torch.randn(1, 7, 16)
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    torch.testing.assert_close(mha(x[:, perm]), mha(x)[:, perm])  # without positions: equivariant
    assert not torch.allclose(mha(enc(x[:, perm])), mha(enc(x))[:, perm], atol=1e-3)


# --- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make,error,match",
    [
        (lambda: sinusoidal(4, 7), ValueError, r"d_model must be divisible by 2 .*got d_model=7"),
        (lambda: sinusoidal(0, 8), ValueError, r"n_positions must be an integer >= 1, got 0"),
        (lambda: sinusoidal(4, 8, offset=-1), ValueError, r"offset must be a non-negative integer .*got -1"),
        (lambda: sinusoidal(4, 8, base=0.0), ValueError, r"base must be > 0, got 0.0"),
        (
            lambda: sinusoidal_2d(2, 2, 6),
            ValueError,
            r"d_model must be divisible by 4 .*rows and for columns.*got d_model=6",
        ),
        (lambda: positional.angles(torch.tensor([True]), 4), TypeError, r"positions must be integers or real numbers"),
        (lambda: SinusoidalPositionalEncoding(5), ValueError, r"d_model must be divisible by 2"),
        (lambda: SinusoidalPositionalEncoding(8, max_len=0), ValueError, r"max_len must be an integer >= 1, got 0"),
        (
            lambda: SinusoidalPositionalEncoding(8)(torch.randn(2, 3, 6)),
            ValueError,
            r"x must have width d_model=8 in its last dimension, got shape \(2, 3, 6\)",
        ),
        (
            lambda: SinusoidalPositionalEncoding(8)(torch.ones(2, 3, 8, dtype=torch.long)),
            TypeError,
            r"x must be a floating-point tensor, got dtype torch.int64",
        ),
        (
            lambda: SinusoidalPositionalEncoding(8)(torch.randn(8)),
            ValueError,
            r"x must have at least 2 dimensions, got shape \(8\)",
        ),
        (
            lambda: SinusoidalPositionalEncoding(8)(torch.randn(2, 3, 8), offset=1.5),
            ValueError,
            r"offset must be a non-negative integer",
        ),
        (
            lambda: LearnedPositionalEmbedding(8, 10)(torch.randn(2, 11, 8)),
            ValueError,
            r"positions 0 to 9 only \(max_len=10\); got 11 positions starting at offset 0",
        ),
        (
            lambda: LearnedPositionalEmbedding(8, 10)(torch.randn(2, 4, 8), offset=8),
            ValueError,
            r"got 4 positions starting at offset 8",
        ),
        (
            lambda: SinusoidalPositionalEncoding2D(8, 2, 3)(torch.randn(1, 5, 8)),
            ValueError,
            r"x must have height \* width = 2 \* 3 = 6 tokens in dimension -2, got shape \(1, 5, 8\)",
        ),
    ],
)
def test_bad_input_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_encodings_carry_no_gradient_into_the_table_and_keep_gradients_of_x():
    enc = SinusoidalPositionalEncoding(8)
    x = torch.randn(2, 3, 8, requires_grad=True)
    (enc(x) ** 2).sum().backward()
    torch.testing.assert_close(x.grad, 2 * (x + sinusoidal(3, 8)).detach())
    assert not enc.pe.requires_grad and len(list(enc.parameters())) == 0


# --- figures of the chapter (attnbook.viz, attnbook.widgets) ----------------------------------------


def test_waveform_figure_has_every_combination_precomputed():
    from attnbook import viz

    d_models = (16, 64)
    fig = viz.positional_waveform_figure(d_models, dims=[0, 5, 40], n_positions=30, d_model=64, dim=5)
    assert len(fig.data) == 2 and [t.visible for t in fig.data] == [False, True]
    dim_slider, d_slider = fig.layout.sliders
    assert [s.label for s in dim_slider.steps] == ["0", "5", "40"] and dim_slider.active == 1
    assert [s.label for s in d_slider.steps] == ["16", "64"] and d_slider.active == 1
    step = dim_slider.steps[2].args[0]  # dimension 40: beyond d_model = 16, the sine of pair 20 for 64
    assert all(v is None for v in step["y"][0]) and "no dimension 40" in step["name"][0]
    expected = sinusoidal(30, 64, dtype=torch.float64)[:, 40].numpy()
    assert max(abs(a - b) for a, b in zip(step["y"][1], expected)) < 1e-4
    assert "sin of pair i = 20" in step["name"][1]
    assert d_slider.steps[0].args[0]["visible"] == [True, False]
    with pytest.raises(ValueError, match=r"d_model=32 must be one of \[16, 64\]"):
        viz.positional_waveform_figure(d_models, dims=[0], d_model=32, dim=0)


def test_waveform_mpl_signed_heatmap_and_live_explorer():
    import matplotlib.pyplot as plt
    from attnbook import viz, widgets

    fig = viz.positional_waveform_mpl(32, 3, n_positions=20)
    line = fig.axes[0].lines[0]
    assert (
        max(abs(a - b) for a, b in zip(line.get_ydata(), sinusoidal(20, 32, dtype=torch.float64)[:, 3].numpy())) < 1e-4
    )
    plt.close(fig)
    heat = viz.signed_heatmap(torch.tensor([[1.0, -3.0], [2.0, 0.0]]))
    assert heat.data[0].zmin == -3.0 and heat.data[0].zmax == 3.0
    with pytest.raises(ValueError, match="z must be a matrix"):
        viz.signed_heatmap(torch.zeros(3))
    box = widgets.positional_encoding_explorer(n_positions=20, d_model=32, dim=3, d_models=(16, 32))
    dim_slider, d_slider, image = box.children[1], box.children[2], box.children[3]
    first = image.value
    dim_slider.value = 10
    assert image.value != first  # moving a slider redraws
    d_slider.value = 16
    assert len(image.value) > 0
