"""Checkers of the chapter from a model of text to an assistant: right answers pass (written several ways),
each usual mistake gets its hint, answers that change their inputs, lose the gradient or the dtype fail, and
stubs are "not attempted"."""

import torch
import torch.nn.functional as F
from attnbook import grpo, preference
from attnbook.exercises import text_to_assistant as ex
from exercise_helpers import assert_fails_with, stub

# --- the targets of instruction tuning ----------------------------------------------------------------------------


def targets(ids, mask):
    return ids[:, 1:].masked_fill(~mask[:, 1:], -100)


def test_sft_targets_checker():
    assert ex.check_sft_targets(targets)

    def with_where(ids, mask):  # another correct way
        return torch.where(mask[:, 1:], ids[:, 1:], torch.full_like(ids[:, 1:], -100))

    assert ex.check_sft_targets(with_where)
    assert not ex.check_sft_targets(stub)
    assert_fails_with(ex.check_sft_targets, lambda i, m: i[:, :-1].masked_fill(~m[:, 1:], -100), "not shifted")
    assert_fails_with(ex.check_sft_targets, lambda i, m: i[:, 1:].masked_fill(~m[:, :-1], -100), "one position off")
    assert_fails_with(ex.check_sft_targets, lambda i, m: i[:, 1:].masked_fill(m[:, 1:], -100), "wrong way round")
    assert_fails_with(ex.check_sft_targets, lambda i, m: i[:, 1:].masked_fill(~m[:, 1:], 0), "not 0")
    assert_fails_with(
        ex.check_sft_targets, lambda i, m: F.pad(targets(i, m), (0, 1), value=-100), "T - 1 targets per row"
    )

    def in_place(ids, mask):
        ids[:, 1:][~mask[:, 1:]] = -100
        return ids[:, 1:]

    assert_fails_with(ex.check_sft_targets, in_place, "changed")
    assert_fails_with(ex.check_sft_targets, lambda i, m: targets(i, m).float(), "dtype torch.float32")


# --- the DPO loss ----------------------------------------------------------------------------------------------


def dpo(pc, pr, rc, rr, beta):
    return -F.logsigmoid(beta * ((pc - rc) - (pr - rr))).mean()


def test_dpo_loss_checker():
    assert ex.check_dpo_loss(dpo)
    assert ex.check_dpo_loss(preference.dpo_loss)
    assert ex.check_dpo_loss(lambda pc, pr, rc, rr, b: F.softplus(-b * (pc - pr - rc + rr)).mean())
    assert not ex.check_dpo_loss(stub)
    assert_fails_with(ex.check_dpo_loss, lambda pc, pr, rc, rr, b: -F.logsigmoid(b * (pc - pr)).mean(), "reference")
    assert_fails_with(ex.check_dpo_loss, lambda pc, pr, rc, rr, b: dpo(pr, pc, rr, rc, b), "wrong sign")
    assert_fails_with(
        ex.check_dpo_loss, lambda pc, pr, rc, rr, b: -b * F.logsigmoid(pc - rc - pr + rr).mean(), "inside the log"
    )
    assert_fails_with(ex.check_dpo_loss, lambda pc, pr, rc, rr, b: dpo(pc, pr, rc, rr, b) * len(pc), "not a sum")
    assert_fails_with(ex.check_dpo_loss, lambda pc, pr, rc, rr, b: dpo(pc, pr, rc, rr, 1.0), "beta is missing")
    assert_fails_with(ex.check_dpo_loss, lambda pc, pr, rc, rr, b: dpo(pc.detach(), pr, rc, rr, b), "do not detach")
    assert_fails_with(ex.check_dpo_loss, lambda pc, pr, rc, rr, b: dpo(pc, pr.detach(), rc, rr, b), "do not detach")
    assert_fails_with(ex.check_dpo_loss, lambda pc, pr, rc, rr, b: dpo(pc, pr, rr, rc, b), "references are swapped")
    naive = lambda pc, pr, rc, rr, b: -torch.log(torch.sigmoid(b * (pc - rc - pr + rr))).mean()  # noqa: E731
    assert_fails_with(ex.check_dpo_loss, naive, "F.logsigmoid")
    assert_fails_with(
        ex.check_dpo_loss, lambda *a: torch.tensor(dpo(*a).item(), dtype=a[0].dtype), "carries no gradient"
    )
    assert_fails_with(ex.check_dpo_loss, lambda *a: dpo(*a).double(), "torch.float32")

    def shifts_the_reference(pc, pr, rc, rr, b):
        rc -= rr  # changes the caller's tensor
        return -F.logsigmoid(b * ((pc - pr) - rc)).mean()

    assert_fails_with(ex.check_dpo_loss, shifts_the_reference, "changed")


# --- group advantages -----------------------------------------------------------------------------------------------


def test_group_advantages_checker():
    assert ex.check_group_advantages(grpo.group_advantages)

    def looped(rewards):  # another correct way: one group at a time
        rows = [(r - r.mean()) / (r.std() + 1e-4) for r in rewards]
        return torch.stack(rows)

    assert ex.check_group_advantages(looped)
    assert not ex.check_group_advantages(stub)
    assert_fails_with(ex.check_group_advantages, lambda r: (r - r.mean()) / (r.std() + 1e-4), "within each group")
    assert_fails_with(
        ex.check_group_advantages,
        lambda r: (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True, unbiased=False) + 1e-4),
        "Bessel",
    )
    assert_fails_with(ex.check_group_advantages, lambda r: r - r.mean(-1, keepdim=True), "not only subtract")
    assert_fails_with(
        ex.check_group_advantages, lambda r: (r - r.mean(-1, keepdim=True)) / r.std(-1, keepdim=True), "gives NaN"
    )
    assert_fails_with(
        ex.check_group_advantages, lambda r: (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-8), "1e-8"
    )
    assert_fails_with(
        ex.check_group_advantages,
        lambda r: (r - r.mean(0, keepdim=True)) / (r.std(0, keepdim=True) + 1e-4),
        "not across the prompts",
    )
    assert_fails_with(
        ex.check_group_advantages,
        lambda r: (r - r.mean(-1, keepdim=True)) / r.std(-1, keepdim=True) + 1e-4,
        "not to the result",
    )
    assert_fails_with(  # LayerNorm's form: eps under the square root
        ex.check_group_advantages,
        lambda r: (r - r.mean(-1, keepdim=True)) / (r.var(-1, keepdim=True) + 1e-4).sqrt(),
        "under the square root",
    )

    def in_place(r):
        r -= r.mean(-1, keepdim=True)
        return r / (r.std(-1, keepdim=True) + 1e-4)

    assert_fails_with(ex.check_group_advantages, in_place, "changed")
    assert_fails_with(ex.check_group_advantages, lambda r: grpo.group_advantages(r.double()), "torch.float32")
    assert_fails_with(ex.check_group_advantages, lambda r: grpo.group_advantages(r)[:, :-1], "is expected")


# --- the clipped objective ------------------------------------------------------------------------------------------


def clipped(ratio, A, clip):
    A = A[:, None]
    return torch.min(ratio * A, ratio.clamp(1 - clip, 1 + clip) * A)


def test_clipped_objective_checker():
    assert ex.check_clipped_objective(clipped)

    def with_where(ratio, A, clip):  # another correct way: clip only on the side the advantage points to
        A = A[:, None]
        capped = torch.where(A > 0, ratio.clamp(max=1 + clip), ratio.clamp(min=1 - clip))
        return capped * A

    assert ex.check_clipped_objective(with_where)
    assert not ex.check_clipped_objective(stub)
    assert_fails_with(ex.check_clipped_objective, lambda r, A, c: r * A[:, None], "without the clip")
    assert_fails_with(
        ex.check_clipped_objective, lambda r, A, c: r.clamp(1 - c, 1 + c) * A[:, None], "clipped term alone"
    )
    assert_fails_with(
        ex.check_clipped_objective,
        lambda r, A, c: torch.max(r * A[:, None], r.clamp(1 - c, 1 + c) * A[:, None]),
        "take the minimum",
    )
    assert_fails_with(
        ex.check_clipped_objective,
        lambda r, A, c: torch.min(r * A[:, None], r * A[:, None].clamp(-c, c)),
        "not the advantage",
    )
    assert_fails_with(ex.check_clipped_objective, lambda r, A, c: clipped(r, A, c).detach(), "carries no gradient")
    assert_fails_with(
        ex.check_clipped_objective,
        lambda r, A, c: torch.min(r * A[:, None], r.detach().clamp(1 - c, 1 + c) * A[:, None]),
        "not ratio.detach()",
    )
    assert_fails_with(
        ex.check_clipped_objective, lambda r, A, c: torch.min(r * A, r.clamp(1 - c, 1 + c) * A), "advantages[:, None]"
    )
