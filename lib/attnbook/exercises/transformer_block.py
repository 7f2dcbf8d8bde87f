"""Checkers for the exercises of the chapter on the transformer block."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..blocks import EncoderBlock
from ..measure import count_parameters
from ..models import GPT, TransformerConfig
from . import Mistake, Result, check_function, check_number

__all__ = ["check_layer_norm", "check_post_norm_block", "check_lrate", "check_gpt_parameters", "check_forward_flops"]


def _randn(g, *shape):
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def check_layer_norm(fn) -> Result:
    """``fn(x, gamma, beta, eps)`` must normalise each vector x[..., :] (mean 0, variance 1), then scale and shift."""
    g = torch.Generator().manual_seed(8)
    cases = []
    for shape in [(4, 6), (2, 3, 8), (5, 2)]:
        D = shape[-1]
        x = 3.0 + 2.0 * _randn(g, *shape)
        cases.append((x, 1.0 + 0.1 * _randn(g, D), 0.1 * _randn(g, D), 1e-5))
    x = 1.0 + 0.01 * _randn(g, 3, 5)  # a small spread and a large eps: where eps sits matters
    cases.append((x, 1.0 + 0.1 * _randn(g, 5), 0.1 * _randn(g, 5), 1e-3))
    cases.append(
        (
            torch.ones(2, 4, dtype=torch.float64),
            torch.ones(4, dtype=torch.float64),
            torch.zeros(4, dtype=torch.float64),
            1e-5,
        )
    )  # a constant vector: only eps keeps this finite

    def reference(x, gamma, beta, eps):
        return F.layer_norm(x, (x.shape[-1],), gamma, beta, eps)

    def centred(x):
        return x - x.mean(-1, keepdim=True)

    mistakes = [
        Mistake(
            "the variance is divided by D - 1 (torch.var's default, or torch.std): LayerNorm uses the "
            "population variance, the mean of the squared deviations (unbiased=False / correction=0).",
            lambda x, g_, b, e: g_ * centred(x) / torch.sqrt(x.var(-1, unbiased=True, keepdim=True) + e) + b,
        ),
        Mistake(
            "eps is added to the standard deviation, (x - mean) / (std + eps), a common slip; "
            "it belongs inside the square root: (x - mean) / sqrt(var + eps).",
            lambda x, g_, b, e: g_ * centred(x) / (x.var(-1, unbiased=False, keepdim=True).sqrt() + e) + b,
        ),
        Mistake(
            "the statistics are taken over the wrong dimension: LayerNorm normalises each vector over its "
            "own D features (dim=-1), not over the batch or the sequence.",
            lambda x, g_, b, e: (
                g_ * (x - x.mean(0, keepdim=True)) / torch.sqrt(x.var(0, unbiased=False, keepdim=True) + e) + b
            ),
        ),
        Mistake(
            "gamma and beta are not applied: after normalising, return gamma * x_hat + beta.",
            lambda x, g_, b, e: centred(x) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + e),
        ),
        Mistake(
            "the mean is not subtracted before dividing (that is RMSNorm's choice, not LayerNorm's).",
            lambda x, g_, b, e: g_ * x / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + e) + b,
        ),
    ]
    return check_function(
        fn, exercise="layer normalisation", reference=reference, cases=cases, mistakes=mistakes, gradients=True
    )


def _block_parts(seed: int, dtype=torch.float64):
    with torch.random.fork_rng(devices=[]):  # seeded, without touching the learner's random state
        torch.manual_seed(seed)
        block = EncoderBlock(8, 2, 16, norm_position="post").to(dtype).eval()
        with torch.no_grad():  # distinct gains and shifts, so that swapping the two norms shows
            for norm in block.norms:
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.normal_(0.0, 0.3)
    attn = lambda h: block.self_attn(h)  # noqa: E731
    return block, attn, block.ffn, block.norm_1, block.norm_2


def check_post_norm_block(fn) -> Result:
    """``fn(x, attn, ffn, norm_1, norm_2)``: the 2017 encoder block, norm_2(z + ffn(z)) with z = norm_1(x + attn(x))."""
    g = torch.Generator().manual_seed(3)
    parts = [_block_parts(s) for s in (0, 1)]
    cases = [
        (_randn(g, 2, 5, 8), *parts[0][1:]),
        (_randn(g, 1, 7, 8), *parts[1][1:]),
        (3.0 * _randn(g, 3, 4, 8), *parts[0][1:]),
        (_randn(g, 2, 3, 8).float(), *_block_parts(2, torch.float32)[1:]),  # a float32 block stays float32
    ]

    def reference(x, attn, ffn, n1, n2):
        z = n1(x + attn(x))
        return n2(z + ffn(z))

    mistakes = [
        Mistake(
            "this is the pre-norm block (x + attn(norm_1(x)), then + ffn(norm_2(.))); the 2017 block "
            "normalises after each residual sum: z = norm_1(x + attn(x)), out = norm_2(z + ffn(z)).",
            lambda x, a, f, n1, n2: (lambda z: z + f(n2(z)))(x + a(n1(x))),
        ),
        Mistake(
            "the feed-forward sub-layer has no residual connection: add its input back, norm_2(z + ffn(z)).",
            lambda x, a, f, n1, n2: n2(f(n1(x + a(x)))),
        ),
        Mistake(
            "this is FFN(LayerNorm(X + MultiHead(X))), a common one-line formula, which drops the second "
            "residual and the second LayerNorm; the block is norm_2(z + ffn(z)) with z = norm_1(x + attn(x)).",
            lambda x, a, f, n1, n2: f(n1(x + a(x))),
        ),
        Mistake(
            "the attention sub-layer has no residual connection: z = norm_1(x + attn(x)).",
            lambda x, a, f, n1, n2: (lambda z: n2(z + f(z)))(n1(a(x))),
        ),
        Mistake(
            "the norms are swapped: norm_1 belongs to the attention sub-layer, norm_2 to the FFN.",
            lambda x, a, f, n1, n2: (lambda z: n1(z + f(z)))(n2(x + a(x))),
        ),
    ]
    return check_function(
        fn, exercise="the post-norm encoder block", reference=reference, cases=cases, mistakes=mistakes
    )


def _lrate(n, d_model, warmup):
    return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)


def check_lrate(fn) -> Result:
    """``fn(n, d_model, warmup)``: the 2017 learning rate at step n >= 1."""
    cases = [
        (1, 512, 4000),
        (100, 512, 4000),
        (4000, 512, 4000),
        (20_000, 512, 4000),
        (50, 64, 100),
        (3000, 1024, 4000),
    ]
    mistakes = [
        Mistake(
            "during warmup the rate is n * warmup^-1.5 (it grows linearly with n); check the exponent of "
            "warmup: it is -1.5, not -0.5.",
            lambda n, d, w: d**-0.5 * min(n**-0.5, n * w**-0.5),
        ),
        Mistake(
            "the formula takes the minimum of the two terms, not the maximum.",
            lambda n, d, w: d**-0.5 * max(n**-0.5, n * w**-1.5),
        ),
        Mistake(
            "the factor in front is d_model^-0.5 = 1 / sqrt(d_model), not sqrt(d_model).",
            lambda n, d, w: d**0.5 * min(n**-0.5, n * w**-1.5),
        ),
        Mistake("the factor d_model^-0.5 is missing.", lambda n, d, w: min(n**-0.5, n * w**-1.5)),
    ]
    return check_function(
        fn,
        exercise="the 2017 learning-rate schedule",
        reference=_lrate,
        cases=cases,
        mistakes=mistakes,
        rtol=1e-9,
        atol=0.0,
    )


def _gpt_count(V, T, L, D):
    config = TransformerConfig(vocab_size=V, block_size=T, n_layers=L, d_model=D, n_heads=1)
    return count_parameters(GPT(config))


def check_gpt_parameters(fn) -> Result:
    """``fn(V, T, L, D)``: the parameter count of ``models.GPT`` (d_ff = 4D, biases, tied embeddings, learned
    positions).
    """
    cases = [(65, 64, 4, 128), (11, 16, 2, 16), (100, 32, 3, 24), (50257, 1024, 12, 768)]

    def reference(V, T, L, D):
        if V * D > 10**7:  # GPT-2 small: too big to build in a check; the formula the library tests verify
            return L * (12 * D * D + 13 * D) + 2 * D + V * D + T * D
        return _gpt_count(V, T, L, D)

    mistakes = [
        Mistake(
            "only the 12 L D^2 weight-matrix term: add the biases and LayerNorm parameters "
            "(13 D per layer), the final LayerNorm (2 D) and the embeddings (V D + T D).",
            lambda V, T, L, D: 12 * L * D * D,
        ),
        Mistake(
            "the output layer shares the token embedding matrix (tied weights): count V D once, not twice.",
            lambda V, T, L, D: L * (12 * D * D + 13 * D) + 2 * D + 2 * V * D + T * D,
        ),
        Mistake(
            "the learned position table (T x D) is missing.",
            lambda V, T, L, D: L * (12 * D * D + 13 * D) + 2 * D + V * D,
        ),
        Mistake(
            "the biases and LayerNorms are missing (13 D per layer and 2 D at the end).",
            lambda V, T, L, D: 12 * L * D * D + V * D + T * D,
        ),
        Mistake(
            "the feed-forward network has 2 * D * 4D = 8 D^2 weights per layer, so a layer has 12 D^2, not 8 D^2.",
            lambda V, T, L, D: L * (8 * D * D + 13 * D) + 2 * D + V * D + T * D,
        ),
    ]
    return check_function(
        fn, exercise="parameters of a GPT", reference=reference, cases=cases, mistakes=mistakes, atol=0.5, rtol=0.0
    )


def check_forward_flops(answer, n_params: float = 175e9) -> Result:
    """Forward-pass FLOPs per token of a model with ``n_params`` parameters (2 N, ignoring attention's scores)."""
    return check_number(
        answer,
        exercise="forward FLOPs per token of GPT-3",
        expected=2 * n_params,
        rel_tol=0.05,
        mistakes=[
            (
                "6 N is the cost of training (forward and backward); one forward pass is 2 N: a multiply and an "
                "add per weight.",
                6 * n_params,
            ),
            ("N counts the weights; each weight does a multiply and an add per token, 2 N FLOPs.", n_params),
            (
                "2 * 175e9 * 2048 is the cost of a forward pass over a whole context of 2,048 tokens (about 717 "
                "TFLOPs, not the 700 GFLOPs sometimes quoted); the question is per token.",
                2 * n_params * 2048,
            ),
        ],
    )
