"""attnbook.data.adding_problem: the adding problem's inputs and targets."""

from __future__ import annotations

import pytest
import torch
from attnbook import data
from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=min(25, settings.default.max_examples), deadline=None)
@given(n=st.integers(1, 40), length=st.integers(2, 60), seed=st.integers(0, 10_000))
def test_two_markers_one_per_half_and_the_target_is_their_sum(n, length, seed):
    x, y = data.adding_problem(n, length, generator=torch.Generator().manual_seed(seed))
    assert x.shape == (n, length, 2) and y.shape == (n,)
    values, markers = x[..., 0], x[..., 1]
    assert ((values >= 0) & (values < 1)).all()
    assert set(markers.unique().tolist()) <= {0.0, 1.0}
    half = length // 2
    assert (markers[:, :half].sum(1) == 1).all() and (markers[:, half:].sum(1) == 1).all()
    torch.testing.assert_close(y, (values * markers).sum(1))


def test_baseline_is_the_variance_of_the_target():
    _, y = data.adding_problem(200_000, 20, generator=torch.Generator().manual_seed(0))
    assert abs(y.mean().item() - 1.0) < 0.005
    assert abs(((y - 1.0) ** 2).mean().item() - data.ADDING_BASELINE_MSE) < 0.003
    assert abs(data.ADDING_BASELINE_MSE - 1 / 6) < 1e-12


def test_generator_makes_it_reproducible_and_positions_vary():
    a = data.adding_problem(50, 30, generator=torch.Generator().manual_seed(1))
    b = data.adding_problem(50, 30, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    first = a[0][..., 1][:, :15].argmax(1)
    second = a[0][..., 1][:, 15:].argmax(1)
    assert first.unique().numel() > 5 and second.unique().numel() > 5


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n": 0, "length": 10}, "n must be an integer >= 1, got 0"),
        ({"n": 4, "length": 1}, "length must be an integer >= 2, got 1"),
        ({"n": 4, "length": 10.0}, "length must be an integer >= 2, got 10.0"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        data.adding_problem(**kwargs)
