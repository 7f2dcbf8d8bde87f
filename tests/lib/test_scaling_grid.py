"""attnbook.scaling_grid: the lab's recipe resized to a model shape and a token budget, and the peak learning
rate by width."""

import pytest
from attnbook import scaling_grid, train_lm


def test_the_recipe_sizes_the_schedule_to_the_budget():
    config = scaling_grid.recipe(2, 48, 4, 2**17, seed=3)
    assert (config.n_layers, config.d_model, config.n_heads, config.seed) == (2, 48, 4, 3)
    assert config.steps * config.batch_size * config.block_size == 2**17 and config.steps == 128
    assert config.warmup_steps == 6 and config.min_lr_factor == 0.1
    assert config.lr == pytest.approx(0.03 * (16 / 48) ** 0.75)
    assert scaling_grid.peak_lr(16) == pytest.approx(0.03) and scaling_grid.peak_lr(96) < scaling_grid.peak_lr(32)
    for field in ("mlp", "bias", "tie_weights", "positional", "weight_decay", "grad_clip", "beta2"):
        assert getattr(config, field) == getattr(train_lm.RECIPES["book"], field)
    with pytest.raises(ValueError, match="tokens must buy at least 10 steps"):
        scaling_grid.recipe(1, 16, 2, 5_000)
    with pytest.raises(ValueError, match="d_model must be an integer >= 1, got 0"):
        scaling_grid.peak_lr(0)
