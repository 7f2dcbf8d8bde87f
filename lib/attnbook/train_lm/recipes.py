"""The two recipes of the lab: nanoGPT's CPU recipe for Shakespeare's characters, and the book's.

Chapter: the lab (12).
"""

from __future__ import annotations

from .config import TrainConfig

__all__ = ["RECIPES"]

# nanoGPT's CPU recipe for Shakespeare characters (its README: 4 layers, 4 heads, width 128, context 64,
# batch 12, no dropout, 2,000 iterations; its config file: AdamW lr 1e-3 with 100 warmup steps, cosine decay
# to 1e-4, betas (0.9, 0.99), weight decay 0.1, gradient clipping at 1, no biases, GELU, pre-norm).
# "book" is the recipe the lab teaches: see the lab chapter and benchmarks/README.md for why each choice.
RECIPES: dict[str, TrainConfig] = {
    "nanogpt": TrainConfig(),
    "book": TrainConfig(
        n_layers=2,
        n_heads=4,
        d_model=96,
        block_size=64,
        mlp="relu",
        batch_size=24,
        steps=900,
        lr=6e-3,
        warmup_steps=40,
        min_lr_factor=0.05,
        eval_every=50,
        checkpoint_every=100,
    ),
}
