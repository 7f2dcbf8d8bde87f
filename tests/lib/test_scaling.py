"""Tests of attnbook.scaling: the saturating power law, its fit (against SciPy), the bootstrap, isoFLOP optima."""

from __future__ import annotations

import math

import numpy as np
import pytest
from attnbook import measure, scaling
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import curve_fit

N = np.geomspace(3e3, 8e5, 8)  # the sizes of the book's grid, roughly


def test_the_law_at_the_scale_x_c_is_the_floor_plus_one():
    assert scaling.saturating_power_law(2e3, 1.5, 2e3, 0.3) == pytest.approx(2.5)
    assert scaling.saturating_power_law(np.array([1.0, 1e12]), 1.5, 1.0, 0.5).tolist() == pytest.approx(
        [2.5, 1.5 + 1e-6]
    )


@settings(max_examples=min(30, settings.default.max_examples), deadline=None)
@given(alpha=st.floats(0.05, 1.5), L_inf=st.floats(0.0, 3.0), x_c=st.floats(1e2, 1e5))
def test_fit_recovers_exact_parameters(alpha, L_inf, x_c):
    fit = scaling.fit_scaling_law(N, scaling.saturating_power_law(N, L_inf, x_c, alpha))
    assert fit.alpha == pytest.approx(alpha, rel=1e-4, abs=1e-5)
    assert fit.L_inf == pytest.approx(L_inf, abs=1e-4)
    assert fit.rmse < 1e-6


@pytest.mark.parametrize("alpha", [0.076, 0.3, 0.7])
def test_fit_recovers_alpha_from_noisy_data_within_tolerance(alpha):
    rng = np.random.default_rng(1)
    x = np.geomspace(1e3, 1e6, 12)
    floor = alpha > 0.1  # Kaplan et al.'s alpha_N = 0.076 comes from a law without a floor
    clean = scaling.saturating_power_law(x, 1.2 if floor else 0.0, 1e4 if floor else 8.8e13, alpha)
    noisy = clean * (1 + 0.002 * rng.standard_normal(x.size))
    fit = scaling.fit_scaling_law(x, noisy, floor=floor)
    assert abs(fit.alpha - alpha) < 0.1 * alpha


def test_fit_agrees_with_scipy_curve_fit():
    rng = np.random.default_rng(0)
    loss = scaling.saturating_power_law(N, 1.4, 2e3, 0.35) * (1 + 0.005 * rng.standard_normal(N.size))
    fit = scaling.fit_scaling_law(N, loss)
    (L_inf, x_c, alpha), _ = curve_fit(lambda n, a, b, c: a + (b / n) ** c, N, loss, p0=[1.0, 1e3, 0.3], maxfev=20000)
    assert fit.alpha == pytest.approx(alpha, rel=1e-4)
    assert fit.L_inf == pytest.approx(L_inf, rel=1e-4)
    assert fit.x_c == pytest.approx(x_c, rel=1e-3)
    assert fit(N) == pytest.approx(L_inf + (x_c / N) ** alpha, rel=1e-5)


def test_fit_without_a_floor_is_the_straight_line_of_a_log_log_plot():
    loss = 5.0 * N**-0.2
    fit = scaling.fit_scaling_law(N, loss, floor=False)
    slope, coefficient = measure.fit_power_law(N, loss)
    assert fit.L_inf == 0 and fit.alpha == pytest.approx(-slope, rel=1e-5)
    assert fit.x_c**fit.alpha == pytest.approx(coefficient, rel=1e-4)


def test_a_negative_floor_is_not_allowed():
    loss = 2.0 * N**-0.1 - 0.2  # the best unconstrained floor would be negative
    assert scaling.fit_scaling_law(N, loss).L_inf == 0.0


def test_fit_bad_input():
    with pytest.raises(ValueError, match="x and loss must have the same length, got 8 and 3"):
        scaling.fit_scaling_law(N, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="loss must hold finite positive numbers"):
        scaling.fit_scaling_law(N, [1.0] * 7 + [float("nan")])
    with pytest.raises(ValueError, match="at least 3 distinct x values"):
        scaling.fit_scaling_law([1.0, 1.0, 2.0], [3.0, 3.0, 2.0])
    with pytest.raises(TypeError, match="x must be a sequence of numbers, got str"):
        scaling.fit_scaling_law("abc", [1.0])
    with pytest.raises(ValueError, match="alpha_range must be"):
        scaling.fit_scaling_law(N, N**-0.1, alpha_range=(1.0, 0.5))


def test_bootstrap_over_seeds_covers_the_true_exponent_and_shrinks_with_less_noise():
    rng = np.random.default_rng(3)
    clean = scaling.saturating_power_law(N, 1.4, 2e3, 0.35)
    widths = []
    for noise in (0.02, 0.005):
        loss = clean[:, None] * (1 + noise * rng.standard_normal((N.size, 3)))  # 3 seeds per size
        boot = scaling.bootstrap_scaling_law(N, loss, n_boot=200, seed=0)
        low, high = boot.interval(0.95)
        assert low < 0.35 < high and low <= boot.fit.alpha <= high
        assert boot.alphas.shape == (200,) and boot.std > 0
        widths.append(high - low)
    assert widths[1] < widths[0] / 2


def test_bootstrap_over_points_and_reproducibility():
    rng = np.random.default_rng(4)
    loss = scaling.saturating_power_law(N, 1.0, 1e3, 0.5) * (1 + 0.01 * rng.standard_normal(N.size))
    a = scaling.bootstrap_scaling_law(N, loss, n_boot=50, seed=7)
    b = scaling.bootstrap_scaling_law(N, loss, n_boot=50, seed=7)
    assert np.array_equal(a.alphas, b.alphas)
    assert a.fit == scaling.fit_scaling_law(N, loss)


def test_bootstrap_bad_input():
    with pytest.raises(ValueError, match="loss must have one row per x: x has 8 values, loss has shape"):
        scaling.bootstrap_scaling_law(N, np.ones((3, 2)))
    with pytest.raises(ValueError, match="n_boot must be an integer >= 10"):
        scaling.bootstrap_scaling_law(N, N**-0.1, n_boot=3)
    with pytest.raises(ValueError, match="level must be in"):
        scaling.bootstrap_scaling_law(N, N**-0.1 + 1, n_boot=10).interval(95)


def test_isoflop_optimum_finds_the_vertex_of_a_parabola_in_log_n():
    sizes = np.geomspace(1e3, 1e6, 7)
    loss = 2.0 + 0.1 * (np.log(sizes) - math.log(3e4)) ** 2
    n_opt, l_opt = scaling.isoflop_optimum(sizes, loss)
    assert n_opt == pytest.approx(3e4, rel=1e-6) and l_opt == pytest.approx(2.0)


def test_isoflop_optimum_on_the_chinchilla_law_gives_the_exponent_beta_over_alpha_plus_beta():
    # L(N, D) = E + A / N^a + B / D^b at C = 6 N D has its optimum at N_opt ~ C^(b / (a + b)).
    E, A, B, a, b = 1.69, 406.4, 410.7, 0.34, 0.28  # Hoffmann et al. (2022), eq. (10)
    budgets = np.geomspace(1e18, 1e22, 5)
    optima = []
    for C in budgets:
        sizes = np.geomspace(1e7, 1e11, 121)
        loss = E + A / sizes**a + B / (C / (6 * sizes)) ** b
        best = int(np.argmin(loss))
        optima.append(scaling.isoflop_optimum(sizes[best - 3 : best + 4], loss[best - 3 : best + 4])[0])
    slope, _ = measure.fit_power_law(budgets, optima)
    assert slope == pytest.approx(b / (a + b), abs=0.01)


def test_isoflop_optimum_refuses_an_unbracketed_minimum():
    with pytest.raises(ValueError, match="no minimum inside the sizes"):
        scaling.isoflop_optimum([1e3, 1e4, 1e5], [2.0, 2.5, 2.7])
    with pytest.raises(ValueError, match="lies outside the sizes given"):
        scaling.isoflop_optimum([1e3, 1e4, 1e5], [3.0, 2.5, 2.2])
    with pytest.raises(ValueError, match="at least 3 distinct sizes"):
        scaling.isoflop_optimum([1e3, 1e3, 1e5], [3.0, 2.5, 2.2])


def test_loss_at_compute_interpolates_in_log_tokens():
    tokens, loss = [1e5, 1e6, 1e7], [3.0, 2.0, 1.5]
    assert scaling.loss_at_compute(1e3, tokens, loss, 6 * 1e3 * 1e6) == pytest.approx(2.0)
    assert scaling.loss_at_compute(1e3, tokens, loss, 6 * 1e3 * math.sqrt(1e5 * 1e6)) == pytest.approx(2.5)
    assert scaling.loss_at_compute(1e3, tokens, loss, 6 * 1e3 * 1e8) is None
    assert scaling.loss_at_compute(1e3, tokens[::-1], loss[::-1], 6e9) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="compute must be a finite positive number"):
        scaling.loss_at_compute(1e3, tokens, loss, -1.0)


def test_compute_optimal_frontier_of_a_grid_on_the_chinchilla_law():
    E, A, B, a, b = 1.69, 406.4, 410.7, 0.34, 0.28  # Hoffmann et al. (2022), eq. (10)
    sizes = np.geomspace(1e7, 1e10, 13)
    tokens = np.geomspace(1e8, 1e12, 17)
    n, d = np.meshgrid(sizes, tokens, indexing="ij")
    loss = E + A / n**a + B / d**b
    frontier = scaling.compute_optimal_frontier(n.ravel(), d.ravel(), loss.ravel(), np.geomspace(1e18, 1e21, 7))
    assert len(frontier) >= 5
    for point in frontier:
        assert min(point.sizes) < point.n_opt < max(point.sizes) and point.loss_opt <= min(point.losses) + 1e-3
    slope, _ = measure.fit_power_law([p.compute for p in frontier], [p.n_opt for p in frontier])
    assert slope == pytest.approx(b / (a + b), abs=0.03)


def test_compute_optimal_frontier_skips_budgets_without_a_bracketed_optimum():
    sizes = np.array([1e3, 1e4, 1e5])
    n, d = np.meshgrid(sizes, [1e5, 1e6, 1e7], indexing="ij")
    loss = 1.0 + 100 / n**0.5 + 0 * d  # data does not matter: the largest model always wins
    assert scaling.compute_optimal_frontier(n.ravel(), d.ravel(), loss.ravel(), [6e10, 6e11]) == []
    with pytest.raises(ValueError, match="one entry per run"):
        scaling.compute_optimal_frontier([1.0, 2.0], [1.0], [1.0], [1.0])
