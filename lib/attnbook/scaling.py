"""Scaling laws: fitting L(x) = L_inf + (x_c / x)^alpha, its uncertainty, and compute-optimal model sizes.

- :func:`saturating_power_law` is the law itself: a power law in x (parameters, tokens or compute) that
  levels off at an irreducible loss ``L_inf``.
- :func:`fit_scaling_law` fits it by least squares on the losses. For a fixed exponent the law is linear
  in its two other unknowns (L_inf and x_c^alpha), so they have a closed form; what remains is a
  one-dimensional search over alpha (a profile fit).
- :func:`bootstrap_scaling_law` refits on resampled data (seeds, or points) to give alpha an uncertainty.
- :func:`isoflop_optimum` finds the best model size at one compute budget by a parabola in log N (the
  second approach of Hoffmann et al., 2022); :func:`loss_at_compute` reads a model's loss at a budget off
  its runs of several lengths; :func:`compute_optimal_frontier` does both for a range of budgets.

Chapter: scaling and practice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "saturating_power_law",
    "ScalingFit",
    "fit_scaling_law",
    "Bootstrap",
    "bootstrap_scaling_law",
    "isoflop_optimum",
    "loss_at_compute",
    "FrontierPoint",
    "compute_optimal_frontier",
]


def _positive_array(name: str, values, *, ndim: tuple[int, ...] = (1,)) -> np.ndarray:
    try:
        array = np.asarray(values.tolist() if hasattr(values, "tolist") else values, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(values).__name__}") from None
    if array.ndim not in ndim:
        raise ValueError(f"{name} must have {' or '.join(str(n) for n in ndim)} dimension(s), got shape {array.shape}")
    if array.size == 0 or not np.all(np.isfinite(array)) or np.any(array <= 0):
        raise ValueError(f"{name} must hold finite positive numbers, got {array.tolist()}")
    return array


def saturating_power_law(x, L_inf: float, x_c: float, alpha: float):
    """L(x) = L_inf + (x_c / x)^alpha, for numbers or NumPy arrays x > 0.

    Chapter: scaling and practice.
    """
    return L_inf + (x_c / np.asarray(x, dtype=float)) ** alpha


@dataclass(frozen=True)
class ScalingFit:
    """The fitted law L(x) = L_inf + (x_c / x)^alpha and the root-mean-square error of the fit."""

    L_inf: float
    x_c: float
    alpha: float
    rmse: float

    def __call__(self, x):
        return saturating_power_law(x, self.L_inf, self.x_c, self.alpha)


def _fit_at(alpha: float, x: np.ndarray, y: np.ndarray, floor: bool) -> tuple[float, float, float]:
    """The best (L_inf, c = x_c^alpha) for a fixed alpha, and the sum of squared errors."""
    u = x**-alpha  # the law is y = L_inf + c * u
    if floor:
        A = np.stack([np.ones_like(u), u], axis=1)
        (L_inf, c), *_ = np.linalg.lstsq(A, y, rcond=None)
        if L_inf < 0:  # a negative loss floor means no floor: refit without one
            L_inf = 0.0
            c = float(u @ y / (u @ u))
    else:
        L_inf, c = 0.0, float(u @ y / (u @ u))
    c = max(float(c), 1e-300)
    residual = y - L_inf - c * u
    return float(L_inf), c, float(residual @ residual)


def fit_scaling_law(
    x: Sequence[float], loss: Sequence[float], *, floor: bool = True, alpha_range: tuple[float, float] = (1e-3, 4.0)
) -> ScalingFit:
    """Fit L(x) = L_inf + (x_c / x)^alpha to (x, loss) by least squares on the losses.

    With ``floor=False``, L_inf = 0 (Kaplan et al.'s pure power law). The search over alpha scans a
    logarithmic grid over ``alpha_range``, then refines the best cell by golden-section search.

    Shapes:
        x, loss: (n,) positive numbers, n >= 3 (n >= 2 without a floor), at least 3 distinct x

    Chapter: scaling and practice.
    """
    x = _positive_array("x", x)
    y = _positive_array("loss", loss)
    if x.shape != y.shape:
        raise ValueError(f"x and loss must have the same length, got {x.size} and {y.size}")
    needed = 3 if floor else 2
    if len(set(x.tolist())) < needed:
        raise ValueError(f"fit_scaling_law needs at least {needed} distinct x values, got x = {x.tolist()}")
    lo, hi = alpha_range
    if not 0 < lo < hi:
        raise ValueError(f"alpha_range must be (low, high) with 0 < low < high, got {alpha_range}")
    scale = float(np.exp(np.mean(np.log(x))))  # fit in x / scale: keeps x^-alpha of order 1
    xs = x / scale

    def sse(a: float) -> float:
        return _fit_at(a, xs, y, floor)[2]

    grid = np.exp(np.linspace(math.log(lo), math.log(hi), 200))
    errors = [sse(a) for a in grid]
    i = int(np.argmin(errors))
    a, b = math.log(grid[max(i - 1, 0)]), math.log(grid[min(i + 1, len(grid) - 1)])
    ratio = (math.sqrt(5) - 1) / 2
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = sse(math.exp(c)), sse(math.exp(d))
    for _ in range(80):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = sse(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = sse(math.exp(d))
    alpha = math.exp((a + b) / 2)
    L_inf, coef, err = _fit_at(alpha, xs, y, floor)
    x_c = scale * coef ** (1 / alpha)  # c (x/scale)^-alpha = (x_c / x)^alpha
    return ScalingFit(L_inf=L_inf, x_c=float(x_c), alpha=float(alpha), rmse=math.sqrt(err / y.size))


@dataclass(frozen=True)
class Bootstrap:
    """The fit to all the data and the fits to resampled data (their exponents in ``alphas``)."""

    fit: ScalingFit
    alphas: np.ndarray
    L_infs: np.ndarray

    def interval(self, level: float = 0.9) -> tuple[float, float]:
        """The central ``level`` percentile interval of the resampled exponents."""
        if not 0 < level < 1:
            raise ValueError(f"level must be in (0, 1), got {level}")
        tail = 100 * (1 - level) / 2
        low, high = np.percentile(self.alphas, [tail, 100 - tail])
        return float(low), float(high)

    @property
    def std(self) -> float:
        """The standard deviation of the resampled exponents (the bootstrap standard error)."""
        return float(np.std(self.alphas, ddof=1))


def bootstrap_scaling_law(
    x: Sequence[float], loss, *, n_boot: int = 500, seed: int = 0, floor: bool = True
) -> Bootstrap:
    """Fit the law, then refit it ``n_boot`` times on resampled data.

    ``loss`` of shape (n,) resamples the n points with replacement (at least 3 distinct x in each draw).
    ``loss`` of shape (n, S), S seeds per x, keeps every x and resamples, for each x, S of its seeds with
    replacement, fitting the mean over them: the spread then says how much the exponent depends on the
    luck of the seeds.

    Shapes:
        x: (n,); loss: (n,) or (n, S)

    Chapter: scaling and practice.
    """
    x = _positive_array("x", x)
    y = _positive_array("loss", loss, ndim=(1, 2))
    if y.shape[0] != x.size:
        raise ValueError(f"loss must have one row per x: x has {x.size} values, loss has shape {y.shape}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 10:
        raise ValueError(f"n_boot must be an integer >= 10, got {n_boot!r}")
    rng = np.random.default_rng(seed)
    fit = fit_scaling_law(x, y.mean(axis=1) if y.ndim == 2 else y, floor=floor)
    alphas, floors = [], []
    while len(alphas) < n_boot:
        if y.ndim == 2:
            picks = rng.integers(0, y.shape[1], size=y.shape)  # (n, S) seed indices
            xb, yb = x, np.take_along_axis(y, picks, axis=1).mean(axis=1)
        else:
            idx = rng.integers(0, x.size, size=x.size)
            if len(set(x[idx].tolist())) < 3:
                continue
            xb, yb = x[idx], y[idx]
        b = fit_scaling_law(xb, yb, floor=floor)
        alphas.append(b.alpha)
        floors.append(b.L_inf)
    return Bootstrap(fit=fit, alphas=np.array(alphas), L_infs=np.array(floors))


def isoflop_optimum(n_params: Sequence[float], loss: Sequence[float]) -> tuple[float, float]:
    """The model size with the lowest loss at one compute budget: a parabola in ln N through the points.

    Returns (N_opt, the parabola's loss there). The parabola must open upwards (the points must have a
    minimum inside their range); otherwise the optimum is not bracketed and an error says so.

    Shapes:
        n_params, loss: (n,), n >= 3 distinct sizes

    Chapter: scaling and practice.
    """
    n = _positive_array("n_params", n_params)
    y = _positive_array("loss", loss)
    if n.shape != y.shape:
        raise ValueError(f"n_params and loss must have the same length, got {n.size} and {y.size}")
    if len(set(n.tolist())) < 3:
        raise ValueError(f"isoflop_optimum needs at least 3 distinct sizes, got {n.tolist()}")
    u = np.log(n)
    a, b, c = np.polyfit(u, y, 2)
    if a <= 0:
        raise ValueError(
            "the losses have no minimum inside the sizes given (the parabola in ln N opens "
            "downwards): add smaller and larger models at this compute budget"
        )
    u_opt = -b / (2 * a)
    if not u.min() <= u_opt <= u.max():
        raise ValueError(
            f"the parabola's minimum, N = {math.exp(u_opt):.3g}, lies outside the sizes given "
            f"({n.min():.3g} to {n.max():.3g}): the optimum is not bracketed at this budget"
        )
    return float(math.exp(u_opt)), float(a * u_opt**2 + b * u_opt + c)


def loss_at_compute(
    n_params: float,
    tokens: Sequence[float],
    loss: Sequence[float],
    compute: float,
    *,
    flops_per_param_token: float = 6.0,
) -> float | None:
    """The loss of a model of ``n_params`` parameters at a compute budget, from its runs of several lengths.

    The budget buys D = compute / (6 N) tokens; the loss there is interpolated linearly in ln D between
    the runs (each trained with its own schedule to its own length). Outside the runs' range: None.

    Shapes:
        tokens, loss: (k,), the runs of this model

    Chapter: scaling and practice.
    """
    d = _positive_array("tokens", tokens)
    y = _positive_array("loss", loss)
    if d.shape != y.shape:
        raise ValueError(f"tokens and loss must have the same length, got {d.size} and {y.size}")
    for name, value in (("n_params", n_params), ("compute", compute), ("flops_per_param_token", flops_per_param_token)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite positive number, got {value!r}")
    order = np.argsort(d)
    u, y = np.log(d[order]), y[order]
    target = math.log(compute / (flops_per_param_token * n_params))
    if target < u[0] - 1e-12 or target > u[-1] + 1e-12:
        return None
    return float(np.interp(target, u, y))


@dataclass(frozen=True)
class FrontierPoint:
    """The best size at one compute budget, and the isoFLOP profile it was read from."""

    compute: float
    n_opt: float
    loss_opt: float
    sizes: tuple[float, ...]
    losses: tuple[float, ...]


def compute_optimal_frontier(
    n_params: Sequence[float],
    tokens: Sequence[float],
    loss: Sequence[float],
    budgets: Sequence[float],
    *,
    flops_per_param_token: float = 6.0,
) -> list[FrontierPoint]:
    """The compute-optimal size at each budget C, from a grid of runs (sizes x token budgets).

    For each C, every size whose runs span D = C / (6N) gives its loss there (:func:`loss_at_compute`);
    this is the isoFLOP profile. Where its lowest point is inside the profile (not at its smallest or
    largest size), a parabola in ln N through that point and its two neighbours gives N_opt
    (:func:`isoflop_optimum`). Budgets whose optimum is not bracketed are left out.

    Shapes:
        n_params, tokens, loss: (r,), one entry per run (e.g. the mean over seeds); budgets: (c,)

    Chapter: scaling and practice.
    """
    n = _positive_array("n_params", n_params)
    d = _positive_array("tokens", tokens)
    y = _positive_array("loss", loss)
    if not n.shape == d.shape == y.shape:
        raise ValueError(
            f"n_params, tokens and loss must have one entry per run, got lengths {n.size}, {d.size}, {y.size}"
        )
    frontier = []
    for c in _positive_array("budgets", budgets):
        profile = []
        for size in sorted(set(n.tolist())):
            runs = n == size
            if runs.sum() < 2:
                continue
            value = loss_at_compute(size, d[runs], y[runs], float(c), flops_per_param_token=flops_per_param_token)
            if value is not None:
                profile.append((size, value))
        if len(profile) < 3:
            continue
        best = min(range(len(profile)), key=lambda i: profile[i][1])
        if best in (0, len(profile) - 1):
            continue
        window = profile[best - 1 : best + 2]
        try:
            n_opt, l_opt = isoflop_optimum([p[0] for p in window], [p[1] for p in window])
        except ValueError:
            continue
        frontier.append(
            FrontierPoint(float(c), n_opt, l_opt, tuple(p[0] for p in profile), tuple(p[1] for p in profile))
        )
    return frontier
