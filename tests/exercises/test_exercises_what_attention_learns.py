"""Checkers of the chapter on what attention learns: right answers pass, usual mistakes get their hint, stubs are
"not attempted"."""

import torch
from attnbook import attribution, interpret
from attnbook.exercises import what_attention_learns as ex
from exercise_helpers import assert_fails_with, stub


def prefix(weights, shift=1, first=None):
    L = weights.shape[-1] // 2
    t = torch.arange(L if first is None else first, 2 * L)
    return weights[:, :, t, t - L + shift].mean(dim=(0, 2))


def test_prefix_matching_checker():
    assert ex.check_prefix_matching(prefix)
    assert ex.check_prefix_matching(interpret.prefix_matching_score)

    def looped(weights):  # another correct way: one query at a time
        B, H, T, _ = weights.shape
        L = T // 2
        return sum(weights[:, :, t, t - L + 1] for t in range(L, T)).mean(0) / L

    assert ex.check_prefix_matching(looped)
    assert not ex.check_prefix_matching(stub)
    assert_fails_with(ex.check_prefix_matching, lambda w: prefix(w, shift=0), "same token (t - L)")
    assert_fails_with(ex.check_prefix_matching, lambda w: prefix(w, shift=2), "one position too far")
    assert_fails_with(ex.check_prefix_matching, lambda w: prefix(w, first=w.shape[-1] // 2 - 1), "first half")
    assert_fails_with(ex.check_prefix_matching, lambda w: prefix(w).mean().expand(w.shape[1]), "one score per head")
    assert_fails_with(ex.check_prefix_matching, lambda w: prefix(w)[:1], "expected shape")


def without(W_o, head, n_heads, rows=False, shift=0):
    Dh = W_o.shape[1] // n_heads
    out = W_o.clone()
    block = slice((head + shift) * Dh, (head + shift + 1) * Dh)
    if rows:
        out[block] = 0.0
    else:
        out[:, block] = 0.0
    return out


def test_without_head_checker():
    assert ex.check_without_head(without)

    def by_mask(W_o, head, n_heads):  # another correct way: a 0/1 mask over the inputs
        keep = torch.ones(n_heads, dtype=W_o.dtype)
        keep[head] = 0.0
        return W_o * keep.repeat_interleave(W_o.shape[1] // n_heads)

    assert ex.check_without_head(by_mask)
    assert not ex.check_without_head(stub)
    assert_fails_with(ex.check_without_head, lambda W, h, H: without(W, h, H, rows=True), "rows")
    assert_fails_with(ex.check_without_head, lambda W, h, H: without(W, h, H, shift=-1), "one head off")
    assert_fails_with(ex.check_without_head, lambda W, h, H: W.clone(), "nothing was removed")
    assert_fails_with(ex.check_without_head, lambda W, h, H: W * 0, "values differ")


def rollout(weights, residual=True, left=True, mean=True, plus=False):
    T = weights[0].shape[-1]
    eye = torch.eye(T, dtype=weights[0].dtype)
    out = eye
    for w in weights:
        a = w.mean(1) if mean else w.sum(1)
        step = (a + eye if plus else 0.5 * a + 0.5 * eye) if residual else a
        out = step @ out if left else out @ step
    return out


def test_rollout_checker():
    assert ex.check_rollout(rollout)
    assert ex.check_rollout(attribution.attention_rollout)
    assert not ex.check_rollout(stub)
    assert_fails_with(ex.check_rollout, lambda ws: rollout(ws, residual=False), "residual path is missing")
    assert_fails_with(ex.check_rollout, lambda ws: rollout(ws, left=False), "wrong order")
    assert_fails_with(ex.check_rollout, lambda ws: rollout(ws, mean=False), "heads are summed")
    assert_fails_with(ex.check_rollout, lambda ws: rollout(ws, plus=True), "not A + I")


def test_without_head_rejects_changing_the_callers_weight_and_the_width_from_the_rows():
    def in_place(W_o, head, n_heads):  # the caller's model would lose the head for good
        Dh = W_o.shape[1] // n_heads
        W_o[:, head * Dh : (head + 1) * Dh] = 0.0
        return W_o

    def width_from_rows(W_o, head, n_heads):  # right only for a square W_o
        Dh = W_o.shape[0] // n_heads
        out = W_o.clone()
        out[:, head * Dh : (head + 1) * Dh] = 0.0
        return out

    assert_fails_with(ex.check_without_head, in_place, "changed its first argument in place")
    assert_fails_with(ex.check_without_head, width_from_rows, "Dh = W_o.shape[1] // n_heads")
