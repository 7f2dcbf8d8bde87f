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
    return m_new, l * torch.exp(m - m_new) + torch.exp(x - m_new.unsqueeze(-1)).sum(dim=-1)


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
