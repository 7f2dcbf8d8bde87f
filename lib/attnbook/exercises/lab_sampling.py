"""Checkers for the lab's sampling: next-token probabilities and generation, compared with the library's."""

from __future__ import annotations

import torch

from ..models import GPT, TransformerConfig
from . import Mistake, Result, check_function
from .lab_modules import seeded

__all__ = ["check_next_token_probs", "check_generate"]


def _probs(logits, temperature=1.0, top_k=None):
    if top_k is not None:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.softmax(logits / temperature, dim=-1)


def check_next_token_probs(fn) -> Result:
    """``fn(logits, temperature, top_k)``: softmax(logits / τ) restricted to the k largest (top_k=None: all)."""
    g = torch.Generator().manual_seed(2)
    cases = [
        (torch.randn(2, 7, generator=g), 1.0, None),
        (torch.randn(3, 10, generator=g) * 2, 0.5, None),
        (torch.randn(2, 10, generator=g), 1.0, 3),
        (torch.randn(4, 6, generator=g), 2.0, 2),
        (torch.randn(2, 5, generator=g, dtype=torch.float64), 0.7, 2),  # float64 logits stay float64
        (torch.randn(3, 6, generator=g, dtype=torch.float64) * 10 - 1e5, 1.0, 3),  # a shift changes nothing
    ]

    def kept(z, k, fill=float("-inf"), strict=True):
        if k is None:
            return z
        kth = torch.topk(z, k, -1).values[..., -1:]
        return z.masked_fill(z < kth if strict else z <= kth, fill)

    mistakes = [
        Mistake(
            "the k-th largest logit is dropped too: keep the logits >= the k-th (mask those < it, not <=).",
            lambda z, t, k: torch.softmax(kept(z, k, strict=False) / t, dim=-1),
        ),
        Mistake(
            "the dropped logits are set to 0, but exp(0) still gives them probability: set them to -inf.",
            lambda z, t, k: torch.softmax(kept(z, k, fill=0.0) / t, dim=-1),
        ),
        Mistake(
            "the softmax is missing: turn the (scaled, kept) logits into probabilities that sum to 1.",
            lambda z, t, k: kept(z, k) / t,
        ),
        Mistake(
            "the logits are multiplied by the temperature; divide them: softmax(logits / τ).",
            lambda z, t, k: _probs(z * t * t, t, k),
        ),
        Mistake(
            "top_k is ignored: keep the k largest logits and set the others to -inf before the softmax.",
            lambda z, t, k: _probs(z, t, None),
        ),
        Mistake(
            "the logits outside the top k are set to a finite number (-1e4): where the kept logits are lower "
            "still (a softmax is unchanged by a shift, so logits near -1e5 are valid), the dropped tokens get the "
            "probability. Use float('-inf').",
            lambda z, t, k: torch.softmax(
                (z if k is None else z.masked_fill(z < torch.topk(z, k, -1).values[..., -1:], -1e4)) / t, dim=-1
            ),
        ),
        Mistake(
            "the k largest are kept after the softmax without renormalising: mask the logits (-inf) "
            "before the softmax so the kept probabilities sum to 1.",
            lambda z, t, k: (
                _probs(z, t, None)
                if k is None
                else _probs(z, t, None).masked_fill(z < torch.topk(z, k, -1).values[..., -1:], 0.0)
            ),
        ),
        Mistake(
            "the softmax is over the wrong axis: the probabilities of the V tokens must sum to 1 (dim=-1).",
            lambda z, t, k: torch.softmax(torch.log(_probs(z, 1.0, k)) / t, dim=0),
        ),
    ]
    return check_function(
        fn, exercise="next-token probabilities", reference=_probs, cases=cases, mistakes=mistakes, gradients=True
    )


def check_generate(fn, model: GPT | None = None) -> Result:
    """``fn(model, idx, max_new_tokens, block_size, temperature, top_k, generator)`` must append sampled tokens
    one at a time, cropping the context to block_size; with a seeded generator its draws are the reference's.
    """
    exercise = "generation"
    if model is None:
        with seeded(3):
            model = GPT(TransformerConfig(vocab_size=13, block_size=6, n_layers=1, n_heads=2, d_model=16)).eval()
    T = model.config.block_size
    g = torch.Generator().manual_seed(4)
    cases = [  # (prompt, new tokens, temperature, top_k, the generator's seed)
        (torch.randint(13, (1, 3), generator=g), 5, 1.0, 1, 0),  # top_k=1: the most likely token
        (torch.randint(13, (2, T + 4), generator=g), 4, 1.0, None, 1),  # a prompt longer than block_size
        (torch.randint(13, (3, 2), generator=g), 6, 1.0, None, 2),  # sampled from every token
        (torch.randint(13, (2, 4), generator=g), 6, 2.0, 4, 3),  # a high temperature among the top 4
        (torch.randint(13, (2, 3), generator=g), 5, 0.5, None, 4),
    ]

    def run(idx, n, temperature, top_k, seed):
        generator = torch.Generator().manual_seed(seed)
        with seeded(10_000 + seed):  # an answer that draws from the global random state draws the same each run
            return fn(model, idx.clone(), n, T, temperature=temperature, top_k=top_k, generator=generator)

    run.__wrapped__ = fn  # so that an error's hint quotes the learner's line, not this one

    def sample(case, **changes):
        idx, n, temperature, top_k, seed = case
        options = {"temperature": temperature, "top_k": top_k, "generator": torch.Generator().manual_seed(seed)}
        with seeded(10_000 + seed):
            return model.generate(idx, n, **(options | changes))

    def reference(*case):
        return sample(case)

    return check_function(
        run,
        exercise=exercise,
        reference=reference,
        cases=cases,
        mistakes=[
            Mistake(
                "only the new tokens are returned; return the prompt followed by them.",
                lambda *case: sample(case)[:, case[0].shape[1] :],
            ),
            Mistake(
                "your draws do not come from the generator you are given: pass it on, "
                "torch.multinomial(probs, 1, generator=generator), so that a seeded generator gives the same "
                "tokens every time.",
                lambda *case: sample(case, generator=None),
            ),
            Mistake(
                "your function always takes the most likely token: sample the next token with "
                "torch.multinomial(probs, 1, generator=generator), probs from next_token_probs(logits, "
                "temperature, top_k).",
                lambda *case: sample(case, temperature=0),
            ),
            Mistake(
                "the temperature is ignored: divide the logits by it (next_token_probs(logits, temperature, top_k)).",
                lambda *case: sample(case, temperature=1.0),
            ),
            Mistake(
                "top_k is ignored: keep only the k most likely tokens before sampling.",
                lambda *case: sample(case, top_k=None),
            ),
        ],
        error_hints=[
            (
                "longer than the model's block_size",
                "the context grows past block_size: feed the model only the last "
                "block_size tokens, idx[:, -block_size:].",
            )
        ],
    )
