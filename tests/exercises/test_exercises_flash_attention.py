"""Tests of the checkers of the chapter on the cost of attention and flash attention."""

from __future__ import annotations

import math

import pytest
import torch
from attnbook import flash
from attnbook.exercises import ExerciseFailed
from attnbook.exercises import flash_attention as ex
from exercise_helpers import assert_fails_with

# --- the online-softmax update ------------------------------------------------------------------------


def right_update(m, l, x):
    m_new = torch.maximum(m, x.amax(dim=-1))
    m_safe = torch.where(m_new == float("-inf"), 0.0, m_new)  # nothing but -inf yet: subtract 0
    return m_new, l * torch.exp(m - m_safe) + torch.exp(x - m_safe.unsqueeze(-1)).sum(dim=-1)


def test_online_update_rejects_nan_after_a_fully_masked_block():
    def nan_when_all_masked(m, l, x):
        m_new = torch.maximum(m, x.amax(dim=-1))
        return m_new, l * torch.exp(m - m_new) + torch.exp(x - m_new.unsqueeze(-1)).sum(dim=-1)

    assert_fails_with(ex.check_online_softmax_update, nan_when_all_masked, "only -inf scores")


def test_online_update_right_answers_pass():
    assert ex.check_online_softmax_update(right_update)
    assert ex.check_online_softmax_update(flash.online_softmax_update)


def test_online_update_stub_is_not_attempted():
    def stub(m, l, x):
        raise NotImplementedError

    result = ex.check_online_softmax_update(stub)
    assert not result and "not attempted" in repr(result)


@pytest.mark.parametrize(
    "wrong, fragment",
    [
        (
            lambda m, l, x: (
                torch.maximum(m, x.amax(-1)),
                l + torch.exp(x - torch.maximum(m, x.amax(-1))[..., None]).sum(-1),
            ),
            "multiply l by exp(m - m')",
        ),
        (
            lambda m, l, x: (
                torch.maximum(m, x.amax(-1)),
                l * torch.exp(torch.maximum(m, x.amax(-1)) - m)
                + torch.exp(x - torch.maximum(m, x.amax(-1))[..., None]).sum(-1),
            ),
            "upside down",
        ),
        (
            lambda m, l, x: (
                torch.maximum(m, x.amax(-1)),
                l * torch.exp(m - torch.maximum(m, x.amax(-1))) + torch.exp(x).sum(-1),
            ),
            "new maximum too",
        ),
        (
            lambda m, l, x: (
                x.amax(-1),
                l * torch.exp(m - x.amax(-1)) + torch.exp(x - x.amax(-1, keepdim=True)).sum(-1),
            ),
            "include the old one",
        ),
    ],
)
def test_online_update_usual_mistakes_get_their_hint(wrong, fragment):
    assert_fails_with(ex.check_online_softmax_update, wrong, fragment)


def test_online_update_crash_is_reported_without_a_traceback():
    def crashes(m, l, x):
        return m @ x.T, l  # (3,) @ (4, 3): the shapes do not match

    with pytest.raises(ExerciseFailed, match="raised RuntimeError"):
        ex.check_online_softmax_update(crashes)


# --- memory of the attention weights ------------------------------------------------------------------


def test_attention_memory():
    assert ex.check_attention_memory(6.0)
    assert ex.check_attention_memory(8 * 12 * 4096**2 * 4 / 2**30)
    assert not ex.check_attention_memory(...)
    gib = 2**30
    assert_fails_with(ex.check_attention_memory, 8 * 12 * 4096**2 * 4 / 1e9, "GB (10^9 bytes)")
    assert_fails_with(ex.check_attention_memory, 8 * 4096**2 * 4 / gib, "number of heads")
    assert_fails_with(ex.check_attention_memory, 12 * 4096**2 * 4 / gib, "batch size")
    assert_fails_with(ex.check_attention_memory, 3.0, "not 2")
    assert_fails_with(ex.check_attention_memory, 48.0, "bits")
    assert_fails_with(ex.check_attention_memory, 1.5, "multiplied by 4")
    assert_fails_with(ex.check_attention_memory, 100.0, "too large")
    assert_fails_with(ex.check_attention_memory, "6", "expected a number")


# --- merging partial results --------------------------------------------------------------------------


def right_merge(o1, lse1, o2, lse2):
    lse = torch.logaddexp(lse1, lse2)
    return torch.exp(lse1 - lse).unsqueeze(-1) * o1 + torch.exp(lse2 - lse).unsqueeze(-1) * o2, lse


def test_merge_right_answer_passes_and_stub_is_not_attempted():
    assert ex.check_merge_partial_attention(right_merge)

    def stub(o1, lse1, o2, lse2):
        raise NotImplementedError

    assert not ex.check_merge_partial_attention(stub)


def test_merge_really_merges_attention():
    """The reference the checker uses is attention over the concatenated keys."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, n, 8, generator=g, dtype=torch.float64) for n in (5, 12, 12))
    o1, lse1 = flash.flash_attention_forward(q, k[:, :7], v[:, :7])
    o2, lse2 = flash.flash_attention_forward(q, k[:, 7:], v[:, 7:])
    o, lse = flash.flash_attention_forward(q, k, v)
    merged, merged_lse = right_merge(o1, lse1, o2, lse2)
    torch.testing.assert_close(merged, o)
    torch.testing.assert_close(merged_lse, lse)


@pytest.mark.parametrize(
    "wrong, fragment",
    [
        (lambda o1, l1, o2, l2: ((o1 + o2) / 2, torch.logaddexp(l1, l2)), "not equally important"),
        (
            lambda o1, l1, o2, l2: (
                torch.exp(l1)[..., None] * o1 + torch.exp(l2)[..., None] * o2,
                torch.logaddexp(l1, l2),
            ),
            "divide by the total",
        ),
        (lambda o1, l1, o2, l2: (right_merge(o1, l1, o2, l2)[0], l1 + l2), "not lse1 + lse2"),
        (lambda o1, l1, o2, l2: (right_merge(o1, l1, o2, l2)[0], torch.maximum(l1, l2)), "larger than the maximum"),
    ],
)
def test_merge_usual_mistakes_get_their_hint(wrong, fragment):
    assert_fails_with(ex.check_merge_partial_attention, wrong, fragment)


def test_merge_shape_error_gets_the_unsqueeze_hint():
    def no_unsqueeze(o1, lse1, o2, lse2):
        lse = torch.logaddexp(lse1, lse2)
        return torch.exp(lse1 - lse) * o1 + torch.exp(lse2 - lse) * o2, lse

    assert_fails_with(ex.check_merge_partial_attention, no_unsqueeze, "unsqueeze(-1)")


# --- FLOPs --------------------------------------------------------------------------------------------


def test_attention_flops():
    n, d = 2048, 64
    assert ex.check_attention_flops(4 * n * n * d)
    assert ex.check_attention_flops(float(4 * n * n * d))
    assert not ex.check_attention_flops(...)
    assert_fails_with(ex.check_attention_flops, 2 * n * n * d, "count both products")
    assert_fails_with(ex.check_attention_flops, n * n * d, "multiply-adds of one product")
    assert_fails_with(ex.check_attention_flops, 4 * n * d * d, "projection")
    assert_fails_with(ex.check_attention_flops, 8 * n * n * d, "too large")
    assert math.isclose(4 * n * n * d, 1.073741824e9)


# --- causal linear attention --------------------------------------------------------------------------


def phi(x):
    return torch.nn.functional.elu(x) + 1


def right_causal_linear(q, k, v):
    fq, fk = phi(q), phi(k)
    kv = torch.cumsum(fk[:, :, None] * v[:, None, :], dim=0)  # (T, d, dv)
    return torch.einsum("td,tde->te", fq, kv) / (fq * torch.cumsum(fk, dim=0)).sum(-1, keepdim=True)


def test_causal_linear_right_answer_passes_and_stub_is_not_attempted():
    assert ex.check_causal_linear_attention(right_causal_linear)

    def stub(q, k, v):
        raise NotImplementedError

    assert not ex.check_causal_linear_attention(stub)


def test_causal_linear_reference_is_causal_and_equals_the_running_sums():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(7, 4, generator=g, dtype=torch.float64) for _ in range(3))
    out = right_causal_linear(q, k, v)
    v_later = v.clone()
    v_later[4:] += 10.0  # changing later values leaves the earlier outputs alone
    torch.testing.assert_close(right_causal_linear(q, k, v_later)[:4], out[:4])
    weights = phi(q[3]) @ phi(k[:4]).T  # output 3 by hand: a weighted mean of v_0 .. v_3
    torch.testing.assert_close(out[3], weights @ v[:4] / weights.sum())


def _full_sums(q, k, v):
    w = phi(q) @ phi(k).T
    return w @ v / w.sum(-1, keepdim=True)


def _shifted(q, k, v):
    w = (phi(q) @ phi(k).T).tril(-1)
    return torch.nan_to_num(w @ v / w.sum(-1, keepdim=True))


def _causal_softmax(q, k, v, scale=1.0):
    future = torch.ones(len(q), len(k), dtype=torch.bool).triu(1)
    return torch.softmax((q @ k.T * scale).masked_fill(future, float("-inf")), dim=-1) @ v


@pytest.mark.parametrize(
    "wrong, fragment",
    [
        (_full_sums, "torch.cumsum"),
        (_shifted, "j = t itself"),
        (lambda q, k, v: (phi(q) @ phi(k).T).tril() @ v, "add up to 1"),
        (lambda q, k, v: (q @ k.T).tril() @ v / (q @ k.T).tril().sum(-1, keepdim=True), "elu(x) + 1"),
        (_causal_softmax, "exp(q_t . k_j)"),
        (lambda q, k, v: _causal_softmax(q, k, v, q.shape[-1] ** -0.5), "sqrt(d)"),
    ],
)
def test_causal_linear_usual_mistakes_get_their_hint(wrong, fragment):
    assert_fails_with(ex.check_causal_linear_attention, wrong, fragment)
