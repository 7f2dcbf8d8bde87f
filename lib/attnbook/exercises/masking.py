"""Checkers for the exercises of the chapter on masking."""

from __future__ import annotations

import torch

from .. import attention
from . import ExerciseFailed, Mistake, Result, check_function, check_number

__all__ = ["check_causal_mask", "check_decoder_mask", "check_safe_masked_softmax", "check_allowed_count"]


_BOOL_HINT = (
    "the mask must be boolean (dtype torch.bool), not numbers: a float mask means something else to "
    "attention functions (it is added to the scores). Build it with a comparison or convert it with .bool()."
)


def _require_bool(result: Result, fn, args, exercise: str) -> Result:
    """The values are compared as numbers; a mask must also *be* boolean."""
    if result.passed:
        out = fn(*args)
        if isinstance(out, torch.Tensor) and out.dtype != torch.bool:
            raise ExerciseFailed(exercise, _BOOL_HINT)
    return result


def check_causal_mask(fn) -> Result:
    """``fn(T)``: the (T, T) boolean mask with True where query i may attend to key j, i.e. j <= i."""

    def tri(T, diagonal=0, upper=False):
        ones = torch.ones(T, T, dtype=torch.bool)
        return torch.triu(ones, diagonal) if upper else torch.tril(ones, diagonal)

    mistakes = [
        Mistake(
            "the mask is inverted: in this book (and in F.scaled_dot_product_attention) True means "
            "'may attend'. torch.triu(..., diagonal=1) marks the *forbidden* keys, the convention of "
            "nn.MultiheadAttention's attn_mask; use torch.tril instead.",
            lambda T: tri(T, 1, upper=True),
        ),
        Mistake("the diagonal is missing: a token may attend to itself (key j = i is allowed).", lambda T: tri(T, -1)),
        Mistake(
            "this mask lets each query see the future (j >= i) and not the past; it must be lower triangular (j <= i).",
            lambda T: tri(T, 0, upper=True),
        ),
    ]
    result = check_function(
        fn,
        exercise="causal mask",
        reference=lambda T: attention.causal_mask(T),
        cases=[(4,), (7,), (1,)],
        mistakes=mistakes,
    )
    return _require_bool(result, fn, (4,), "causal mask")


def check_decoder_mask(fn) -> Result:
    """``fn(lengths, T)``: (B, T, T) boolean, True where key j <= query i and j < lengths[b]."""

    def padding(lengths, T):
        return attention.padding_mask(lengths, T)  # (B, 1, T)

    def reference(lengths, T):
        return (padding(lengths, T) & attention.causal_mask(T)).expand(len(lengths), T, T)  # (B, T, T)

    def B(lengths):
        return len(lengths)

    mistakes = [
        Mistake(
            "the two masks are combined with OR; a key is allowed only if *both* masks allow it (&).",
            lambda lengths, T: (padding(lengths, T) | attention.causal_mask(T)).expand(B(lengths), T, T),
        ),
        Mistake(
            "only the causal part is there: keys at padded positions (j >= lengths[b]) must be masked too.",
            lambda lengths, T: attention.causal_mask(T).expand(B(lengths), T, T),
        ),
        Mistake(
            "only the padding part is there: queries must not see later keys (j > i) either.",
            lambda lengths, T: padding(lengths, T).expand(B(lengths), T, T),
        ),
        Mistake(
            "the padding part is inverted: the real tokens are the first lengths[b] positions (j < length).",
            lambda lengths, T: (~padding(lengths, T) & attention.causal_mask(T)).expand(B(lengths), T, T),
        ),
        Mistake(
            "off by one: a sequence of length n has real tokens at positions 0 to n - 1, so the condition "
            "is j < n, not j <= n.",
            lambda lengths, T: (
                (torch.arange(T)[None, None, :] <= torch.as_tensor(lengths)[:, None, None]) & attention.causal_mask(T)
            ),
        ),
    ]
    cases = [([3, 5], 5), ([1, 4, 2], 6), ([6], 6)]
    result = check_function(fn, exercise="decoder mask", reference=reference, cases=cases, mistakes=mistakes)
    return _require_bool(result, fn, cases[0], "decoder mask")


def check_safe_masked_softmax(fn) -> Result:
    """``fn(scores, mask)``: softmax over allowed keys; a row with no allowed key must give zeros, not NaN."""

    def naive(scores, mask):
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)

    def big_negative(scores, mask):
        return torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)

    def zeroed_after(scores, mask):
        return torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0)

    g = torch.Generator().manual_seed(3)
    cases = []
    for shape in [(4, 5), (2, 3, 6)]:
        scores = torch.randn(*shape, generator=g, dtype=torch.float64)
        mask = torch.rand(*shape, generator=g) > 0.4
        mask[..., 0, :] = False  # a query that may attend to nothing
        mask[..., 1, :] = True
        cases.append((scores, mask))
    mistakes = [
        Mistake(
            "a row with no allowed key comes out as NaN: every score is -inf, so the softmax divides 0 by 0. "
            "Find those rows (mask.any(dim=-1)) and set their weights to zero.",
            naive,
        ),
        Mistake(
            "with -1e9 instead of -inf, a row with no allowed key gets equal weight on every (forbidden) "
            "key instead of zeros. Find those rows (mask.any(dim=-1)) and set their weights to zero.",
            big_negative,
        ),
        Mistake(
            "the weights are zeroed after the softmax, so the allowed ones no longer sum to 1; mask the "
            "scores before the softmax.",
            zeroed_after,
        ),
    ]
    big = torch.tensor([[1000.0, -1000.0, 3.0], [50.0, 0.0, -50.0]], dtype=torch.float64)  # exp overflows
    cases.append((big, torch.tensor([[True, True, False], [False, False, False]])))
    return check_function(
        fn,
        exercise="masked softmax without NaN",
        reference=attention.masked_softmax,
        cases=cases,
        mistakes=mistakes,
        gradients=True,
        gradient_hint=(
            "the weights are right but their gradient is NaN for a row with no allowed key: replacing the NaN "
            "after the softmax (nan_to_num, or w[torch.isnan(w)] = 0) leaves it in the backward pass, which "
            "then spreads through the network. Give the softmax a finite row (let an empty row allow every key, "
            "mask | ~any_allowed), then zero that row's weights with masked_fill."
        ),
    )


def check_allowed_count(answer, T: int = 10) -> Result:
    """How many entries of a T x T causal mask are True (allowed)."""
    return check_number(
        answer,
        exercise=f"allowed entries of a {T} x {T} causal mask",
        expected=T * (T + 1) / 2,
        rel_tol=1e-9,
        mistakes=[
            ("the diagonal counts too: every token may attend to itself.", T * (T - 1) / 2),
            ("that is every entry; only the entries on and below the diagonal are allowed.", float(T * T)),
            ("half the matrix is not quite it: the diagonal belongs to the allowed part.", T * T / 2),
        ],
    )
