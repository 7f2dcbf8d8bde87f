"""attnbook.train, the schedules: the 2017 paper's warmup-then-inverse-square-root, and warmup-then-cosine."""

import math

import pytest
import torch
from attnbook import train


def test_inverse_sqrt_schedule_is_the_papers_formula():
    lrate = train.inverse_sqrt_schedule(512, 4000)
    for step in (0, 1, 100, 3998, 3999, 4000, 10_000, 100_000):
        n = step + 1
        assert math.isclose(lrate(step), 512**-0.5 * min(n**-0.5, n * 4000**-1.5))
    peak = max(lrate(s) for s in range(8000))
    assert math.isclose(peak, (512 * 4000) ** -0.5) and math.isclose(lrate(3999), peak)  # n = warmup
    assert lrate(0) > 0  # step 0 is n = 1: no division by zero
    assert lrate(15_999) == pytest.approx(peak / 2)  # n = 4 * warmup: half the peak


def test_cosine_schedule():
    f = train.cosine_schedule(100, warmup_steps=10, min_factor=0.1)
    assert f(0) == pytest.approx(1 / 11) and f(9) == pytest.approx(10 / 11)
    assert f(10) == pytest.approx(1.0) and f(55) == pytest.approx(0.55)
    assert f(100) == pytest.approx(0.1) and f(1000) == pytest.approx(0.1)
    values = [f(s) for s in range(10, 101)]
    assert all(a >= b for a, b in zip(values, values[1:]))  # decreasing after warmup
    with pytest.raises(ValueError, match="warmup_steps must be smaller than total_steps"):
        train.cosine_schedule(10, warmup_steps=10)
    with pytest.raises(ValueError, match=r"min_factor must be in \[0, 1\]"):
        train.cosine_schedule(10, min_factor=2.0)


def test_schedules_drive_fit():
    model = torch.nn.Linear(2, 1)
    history = train.fit(
        model,
        lambda s: torch.randn(4, 2),
        lambda m, x: m(x).pow(2).mean(),
        steps=5,
        lr=1.0,
        schedule=train.inverse_sqrt_schedule(16, 2),
    )
    assert history.lr == pytest.approx([train.inverse_sqrt_schedule(16, 2)(s) for s in range(5)])
