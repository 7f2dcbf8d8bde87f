"""Checkers of the chapter on what attention learns: right answers pass, usual mistakes get their hint, stubs are
"not attempted"."""

import math

import torch
from attnbook import attribution, interpret
from attnbook.exercises import what_attention_learns as ex
from exercise_helpers import assert_fails_with, stub


def prefix(weights, shift=1, first=None):
    M = weights.shape[-1] // 2
    t = torch.arange(M if first is None else first, 2 * M)
    return weights[:, :, t, t - M + shift].mean(dim=(0, 2))


def test_prefix_matching_checker():
    assert ex.check_prefix_matching(prefix)
    assert ex.check_prefix_matching(interpret.prefix_matching_score)

    def looped(weights):  # another correct way: one query at a time
        B, H, T, _ = weights.shape
        M = T // 2
        return sum(weights[:, :, t, t - M + 1] for t in range(M, T)).mean(0) / M

    assert ex.check_prefix_matching(looped)
    assert not ex.check_prefix_matching(stub)
    assert_fails_with(ex.check_prefix_matching, lambda w: prefix(w, shift=0), "same token (t - M)")
    assert_fails_with(ex.check_prefix_matching, lambda w: prefix(w, shift=2), "one position too far")
    assert_fails_with(ex.check_prefix_matching, lambda w: prefix(w, first=w.shape[-1] // 2 - 1), "t = M .. 2M - 1")
    assert_fails_with(ex.check_prefix_matching, lambda w: prefix(w).mean().expand(w.shape[1]), "one score per head")
    assert_fails_with(ex.check_prefix_matching, lambda w: prefix(w)[:1], "where (3,) is expected")
    # the hints use the page's M for the half length (L is the number of layers in the book)
    assert_fails_with(ex.check_prefix_matching, lambda w: prefix(w, shift=2), "t - M + 1 follows")

    def past_the_end(weights):
        t = torch.arange(weights.shape[-1] // 2, weights.shape[-1])
        return weights[:, :, t, t + 1].mean(dim=(0, 2))

    assert_fails_with(ex.check_prefix_matching, past_the_end, "t runs from M to 2M - 1")


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
    assert_fails_with(ex.check_without_head, lambda W, h, H: W - without(W, h, H), "keeps only the head")
    assert_fails_with(ex.check_without_head, lambda W, h, H: without(W, h, H, shift=1), "one head off")
    assert_fails_with(ex.check_without_head, lambda W, h, H: W * 0, "all zeros")


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


def ov(E, W_v, W_o, W_U, head, n_heads, transpose_v=True, o_rows=False, transpose_u=True, width=None, shift=0):
    Dh = (width or W_o.shape[1]) // n_heads
    rows = slice((head + shift) * Dh, (head + shift + 1) * Dh)
    W_V = W_v[rows].T if transpose_v else W_v[rows]
    W_O = W_o[rows] if o_rows else W_o[:, rows].T
    return E @ W_V @ W_O @ (W_U.T if transpose_u else W_U)


def test_ov_circuit_checker():
    assert ex.check_ov_circuit(ov)

    def by_layers(E, W_v, W_o, W_U, head, n_heads):  # another correct way: the layers themselves, one head kept
        Dh = W_v.shape[0] // n_heads
        keep = torch.zeros(W_v.shape[0], dtype=E.dtype)
        keep[head * Dh : (head + 1) * Dh] = 1.0
        values = torch.nn.functional.linear(E, W_v) * keep  # (V, H * Dh): only this head's values
        return torch.nn.functional.linear(torch.nn.functional.linear(values, W_o), W_U)

    def by_einsum(E, W_v, W_o, W_U, head, n_heads):  # and with the heads as an axis
        H = n_heads
        W_V = W_v.view(H, -1, W_v.shape[1])[head]  # (Dh, D)
        W_O = W_o.view(W_o.shape[0], H, -1)[:, head]  # (D, Dh)
        return torch.einsum("vd,kd,ek,ue->vu", E, W_V, W_O, W_U)

    assert ex.check_ov_circuit(by_layers)
    assert ex.check_ov_circuit(by_einsum)
    assert not ex.check_ov_circuit(stub)
    assert_fails_with(ex.check_ov_circuit, lambda *a: ov(*a, transpose_v=False), "x @ weight.T")
    assert_fails_with(ex.check_ov_circuit, lambda *a: ov(*a, o_rows=True), "rows of W_o")
    assert_fails_with(ex.check_ov_circuit, lambda *a: ov(*a).T, "paper's order")
    assert_fails_with(ex.check_ov_circuit, lambda *a: ov(*a, shift=-1), "one head off")
    assert_fails_with(ex.check_ov_circuit, lambda *a: ov(*a, width=a[2].shape[0]), "W_o.shape[1] // n_heads")
    assert_fails_with(ex.check_ov_circuit, lambda E, Wv, Wo, WU, h, H: E @ Wv.T @ Wo.T @ WU.T, "every head")
    assert_fails_with(
        ex.check_ov_circuit, lambda *a: ov(*a) / math.sqrt(a[2].shape[1] // a[5]), "values are not scaled"
    )

    def float64_always(*a):  # the table must keep the weights' dtype
        return ov(*(x.double() if isinstance(x, torch.Tensor) else x for x in a))

    def in_place(E, W_v, W_o, W_U, head, n_heads):  # the caller's embedding must stay as it was
        E -= E.mean(-1, keepdim=True)
        return ov(E, W_v, W_o, W_U, head, n_heads)

    assert_fails_with(ex.check_ov_circuit, float64_always, "dtype")
    assert_fails_with(ex.check_ov_circuit, in_place, "changed its first argument in place")


def test_ov_circuit_checker_names_the_errors_of_an_entrywise_product_and_a_float_width():
    def entrywise(E, W_v, W_o, W_U, head, n_heads):
        Dh = W_o.shape[1] // n_heads
        rows = slice(head * Dh, (head + 1) * Dh)
        return E @ W_v[rows].T * W_o[:, rows].T @ W_U.T

    def float_width(E, W_v, W_o, W_U, head, n_heads):
        Dh = W_o.shape[1] / n_heads
        rows = slice(head * Dh, (head + 1) * Dh)
        return E @ W_v[rows].T @ W_o[:, rows].T @ W_U.T

    assert_fails_with(ex.check_ov_circuit, entrywise, "chain of matrix products")
    assert_fails_with(ex.check_ov_circuit, float_width, "with //")
