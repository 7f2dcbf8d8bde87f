"""The checkers of the chapter on Bahdanau attention: right answers pass, usual mistakes get their hint."""

from __future__ import annotations

import math

import pytest
import torch
from attnbook.exercises import ExerciseFailed
from attnbook.exercises import bahdanau_attention as ex
from exercise_helpers import stub

# --- Bahdanau attention -------------------------------------------------------------------------------


def attention(s_prev, H, mask, W_1, W_2, v, *, squash=torch.tanh, fill=float("-inf"), dim=-1, use_mask=True, raw=False):
    e = squash((s_prev @ W_1.T).unsqueeze(1) + H @ W_2.T) @ v  # (B, Ts)
    if use_mask:
        e = e.masked_fill(~mask, fill)
    a = torch.softmax(e, dim=dim)  # (B, Ts)
    mix = e.masked_fill(~mask, 0.0) if raw else a
    return (mix.unsqueeze(1) @ H).squeeze(1), a


def test_bahdanau_attention_right_answer_passes():
    assert ex.check_bahdanau_attention(attention).passed


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (dict(squash=lambda x: x), "skip the tanh"),
        (dict(use_mask=False), "mask is ignored"),
        (dict(fill=0.0), r"exp\(0\) = 1"),
        (dict(dim=0), "softmax runs over the batch"),
        (dict(raw=True), "raw scores"),
    ],
)
def test_bahdanau_attention_mistakes_get_their_hint(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_bahdanau_attention(lambda *args: attention(*args, **wrong))


def test_bahdanau_attention_shape_error_and_stub():
    # the hint speaks the page's names: annotations and d_attn (H and A mean other things in the book)
    with pytest.raises(ExerciseFailed, match=r"W_1 is \(d_attn, D\), so W_1 s is s_prev @ W_1.T"):
        ex.check_bahdanau_attention(lambda s, H, m, W_1, W_2, v: attention(s, H, m, W_1.T, W_2, v))

    def no_transpose(s_prev, annotations, mask, W_1, W_2, v):
        e = torch.tanh((s_prev @ W_1.T).unsqueeze(1) + annotations @ W_2) @ v  # (B, Ts): W_2 not transposed
        a = torch.softmax(e.masked_fill(~mask, float("-inf")), dim=-1)
        return (a.unsqueeze(1) @ annotations).squeeze(1), a

    with pytest.raises(ExerciseFailed, match=r"annotations @ W_2.T, of shape \(B, Ts, d_attn\)") as info:
        ex.check_bahdanau_attention(no_transpose)
    assert " H " not in info.value.hint and "(A," not in info.value.hint
    result = ex.check_bahdanau_attention(stub)
    assert not result.passed and "not attempted" in repr(result)


# --- beam step ----------------------------------------------------------------------------------------


def beam_step(scores, log_probs, k):
    total = scores[:, None] + log_probs  # (n, V)
    best, flat = total.flatten().topk(k)
    V = log_probs.shape[1]
    return flat // V, flat % V, best


def test_beam_step_right_answer_passes():
    assert ex.check_beam_step(beam_step).passed


def test_beam_step_mistakes_get_their_hint():
    def ignore_history(scores, log_probs, k):
        best, flat = log_probs.flatten().topk(k)
        rows = flat // log_probs.shape[1]
        return rows, flat % log_probs.shape[1], best + scores[rows]

    def best_per_row(scores, log_probs, k):
        best, tokens = (scores[:, None] + log_probs).max(dim=1)
        order = best.argsort(descending=True)[:k]
        return order, tokens[order], best[order]

    def swapped(scores, log_probs, k):
        rows, tokens, best = beam_step(scores, log_probs, k)
        return tokens, rows, best

    for wrong, hint in [
        (ignore_history, "sum of the log-probabilities"),
        (best_per_row, "several of the k best"),
        (swapped, "rows and tokens are swapped"),
    ]:
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_beam_step(wrong)
    assert "not attempted" in repr(ex.check_beam_step(stub))


# --- teacher forcing ----------------------------------------------------------------------------------


def shift_targets(targets, lengths, bos_id=2, eos_id=3, pad_id=0):
    B, T = targets.shape
    tgt_in = torch.full((B, T + 1), pad_id, dtype=targets.dtype)
    tgt_in[:, 0] = bos_id
    tgt_in[:, 1:] = targets
    tgt_out = torch.cat([targets, torch.full((B, 1), pad_id, dtype=targets.dtype)], dim=1)
    tgt_out[torch.arange(B), lengths] = eos_id
    return tgt_in, tgt_out


def test_shift_targets_right_answer_passes():
    assert ex.check_shift_targets(shift_targets).passed


def test_shift_targets_mistakes_get_their_hint():
    def eos_last(targets, lengths):
        tgt_in, _ = shift_targets(targets, lengths)
        return tgt_in, torch.cat([targets, torch.full_like(targets[:, :1], 3)], dim=1)

    def swapped(targets, lengths):
        return tuple(reversed(shift_targets(targets, lengths)))

    def no_bos(targets, lengths):
        _, tgt_out = shift_targets(targets, lengths)
        return torch.cat([targets, torch.zeros_like(targets[:, :1])], dim=1), tgt_out

    for wrong, hint in [
        (eos_last, "right after each sentence's last real token"),
        (swapped, "swapped"),
        (no_bos, "must start with <bos>"),
    ]:
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_shift_targets(wrong)
    assert "not attempted" in repr(ex.check_shift_targets(stub))


# --- bits ---------------------------------------------------------------------------------------------


def test_bottleneck_bits():
    assert ex.check_bottleneck_bits(40 * math.log2(10)).passed
    assert ex.check_bottleneck_bits(133).passed
    for wrong, hint in [
        (10.0**40, "base-2 logarithm"),
        (40, "one bit per digit"),
        (160, "binary-coded"),
        (40 * math.log(10), "nats"),
    ]:
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_bottleneck_bits(wrong)
    with pytest.raises(ExerciseFailed, match="too small"):
        ex.check_bottleneck_bits(100)
    assert "not attempted" in repr(ex.check_bottleneck_bits(...))
