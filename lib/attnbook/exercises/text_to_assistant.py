"""Checkers for the exercises of the chapter from a model of text to an assistant: the targets of instruction
tuning, the DPO loss, GRPO's group advantages and its clipped objective.

Besides the values, every checker compares what a wrong answer often gets wrong silently: the dtype of the
result (float32 stays float32, float64 float64), its gradients where the answer is a loss, and the caller's
tensors, which an answer must leave as they were.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from .. import grpo, preference
from . import Mistake, Result, check_function, clone_args

__all__ = ["check_sft_targets", "check_dpo_loss", "check_group_advantages", "check_clipped_objective"]

CHANGED = (
    "your function changed a tensor it was given (an in-place operation such as `+=`, `.sub_()` or an "
    "indexed assignment on an argument): work on a copy (`.clone()`) or build a new tensor."
)
UNCHANGED = "the arguments left as they were"
NO_GRAD = (
    "your result carries no gradient: the loss must stay a tensor built from the inputs by differentiable "
    "operations (no `.item()`, `.detach()`, `.tolist()` or `torch.tensor(...)` of computed values)."
)


def _observed(fn, grad_args: tuple[int, ...] = ()):
    """``fn`` wrapped to return what a checker compares: (result, its dtype, whether the arguments were left
    unchanged, then the gradient of a fixed random weighting of the result for each argument in ``grad_args``)."""

    @functools.wraps(fn)
    def run(*args):
        args = tuple(
            a.detach().clone().requires_grad_(i in grad_args)
            if isinstance(a, torch.Tensor) and a.is_floating_point()
            else a
            for i, a in enumerate(args)
        )
        before = clone_args([a.detach() if isinstance(a, torch.Tensor) else a for a in args])
        with torch.enable_grad():
            out = fn(*args)
        if not isinstance(out, torch.Tensor):
            return (out,)
        unchanged = all(torch.equal(a.detach(), b) for a, b in zip(args, before) if isinstance(a, torch.Tensor))
        observed = [out.detach(), f"a result of dtype {out.dtype}", UNCHANGED if unchanged else "an argument changed"]
        if grad_args and not out.requires_grad:
            observed += ["no gradient"] * len(grad_args)
        elif grad_args:
            weights = torch.linspace(0.5, 1.5, out.numel(), dtype=out.dtype).view(out.shape)
            inputs = [args[i] for i in grad_args]
            grads = torch.autograd.grad((out * weights).sum(), inputs, allow_unused=True)
            observed += [torch.zeros_like(x) if g is None else g for g, x in zip(grads, inputs)]
        return tuple(observed)

    return run


def _common_mistakes(reference, grad_args=()) -> list[Mistake]:
    """The right values with the input changed in place, or with no gradient: the hints for those two slips."""

    def changed(*args):
        out = list(_observed(reference, grad_args)(*args))
        out[2] = "an argument changed"
        return tuple(out)

    def detached(*args):
        return (*_observed(reference, grad_args)(*args)[:3], *["no gradient"] * len(grad_args))

    mistakes = [Mistake(CHANGED, changed)]
    if grad_args:
        mistakes.append(Mistake(NO_GRAD, detached))
    return mistakes


def _check(fn, exercise, reference, cases, mistakes, grad_args=(), **kwargs) -> Result:
    """check_function on what :func:`_observed` returns, for the answer, the reference and every mistake."""
    if not callable(fn):
        return check_function(fn, exercise=exercise, reference=reference, cases=cases)  # its error for a non-function
    wrapped = [Mistake(m.hint, _observed(m.wrong, grad_args)) for m in mistakes]
    error_hints = [*kwargs.pop("error_hints", []), ("in-place operation", CHANGED)]
    return check_function(
        _observed(fn, grad_args),
        exercise=exercise,
        reference=_observed(reference, grad_args),
        cases=cases,
        mistakes=wrapped + _common_mistakes(reference, grad_args),
        error_hints=error_hints,
        **kwargs,
    )


# --- the targets of instruction tuning ---------------------------------------------------------------------------


def _sft_targets(ids, answer_mask, *, shift=True, keep="answer", fill=-100, mask_shift=True):
    targets = ids[:, 1:] if shift else ids[:, :-1]
    mask = answer_mask[:, 1:] if mask_shift else answer_mask[:, :-1]
    mask = mask if keep == "answer" else ~mask
    return targets.masked_fill(~mask, fill)


def _sft_cases():
    g = torch.Generator().manual_seed(17)
    cases = []
    for B, T in [(1, 6), (3, 9), (2, 12)]:
        ids = torch.randint(0, 68, (B, T), generator=g)
        start = torch.randint(2, T - 1, (B, 1), generator=g)  # where each answer begins
        length = torch.randint(1, T, (B, 1), generator=g)
        t = torch.arange(T)
        cases.append((ids, (t >= start) & (t < start + length)))
    ids = torch.randint(0, 68, (2, 5), generator=g)
    cases.append((ids, torch.zeros(2, 5, dtype=torch.bool)))  # no answer at all: every target ignored
    cases.append((ids, torch.ones(2, 5, dtype=torch.bool)))  # all answer (the first token is still no target)
    return cases


def check_sft_targets(fn) -> Result:
    """``fn(ids, answer_mask)``: ids (B, T), answer mask (B, T) -> targets (B, T - 1), -100 off the answer."""
    mistakes = [
        Mistake(
            "the targets are not shifted: position t predicts the token t + 1, so the targets are ids[:, 1:].",
            functools.partial(_sft_targets, shift=False),
        ),
        Mistake(
            "the mask is one position off: target t is the token t + 1, so whether it counts is answer_mask[:, 1:].",
            functools.partial(_sft_targets, mask_shift=False),
        ),
        Mistake(
            "the mask is the wrong way round: keep the answer's tokens and set the prompt's to -100.",
            functools.partial(_sft_targets, keep="prompt"),
        ),
        Mistake(
            "ignored targets must be -100 (F.cross_entropy's ignore_index), not 0: 0 is a real token.",
            functools.partial(_sft_targets, fill=0),
        ),
        Mistake(
            "the result should have T - 1 targets per row: the last position has no next token to predict.",
            lambda ids, m: torch.cat([_sft_targets(ids, m), torch.full_like(ids[:, :1], -100)], dim=1),
        ),
    ]
    return _check(fn, "the targets of instruction tuning", _sft_targets, _sft_cases(), mistakes, atol=0.0, rtol=0.0)


# --- the DPO loss ---------------------------------------------------------------------------------------------


def _dpo_variant(
    pc, pr, rc, rr, beta, *, reference=True, swap=False, sign=1.0, beta_inside=True, reduce="mean", naive=False
):
    if swap:  # each answer against the other answer's reference log-probability
        rc, rr = rr, rc
    margin = (pc - rc) - (pr - rr) if reference else pc - pr
    margin = sign * margin
    if naive:
        per_pair = -torch.log(torch.sigmoid(beta * margin))
    else:
        per_pair = -F.logsigmoid(beta * margin) if beta_inside else -beta * F.logsigmoid(margin)
    return per_pair.mean() if reduce == "mean" else per_pair.sum()


def _dpo_cases():
    g = torch.Generator().manual_seed(1)
    cases = []
    for B, beta, scale, dtype in [(4, 0.1, 20, torch.float64), (1, 0.5, 5, torch.float32), (6, 2.0, 30, torch.float32)]:
        cases.append((*(-scale * torch.rand(B, generator=g, dtype=dtype) for _ in range(4)), beta))
    # a policy far from its reference: margins of -290 and +290 at beta = 1 (sigma underflows in float32)
    far = torch.tensor([-300.0, -10.0], dtype=torch.float32)
    cases.append((far, far.flip(0), torch.tensor([-50.0, -50.0]), torch.tensor([-50.0, -50.0]), 1.0))
    return cases


_DETACHED_POLICY = (
    "the loss must reach the policy's log-probabilities: do not detach pc or pr (the reference's are fixed inputs "
    "and get no gradient anyway)."
)


def check_dpo_loss(fn) -> Result:
    """``fn(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta)`` -> the mean DPO loss (and its
    gradients)."""
    mistakes = [
        Mistake(
            "the reference is missing: the margin compares log-ratios, (log pi(y_w) - log pi_ref(y_w)) - "
            "(log pi(y_l) - log pi_ref(y_l)), not the policy's log-probabilities alone.",
            functools.partial(_dpo_variant, reference=False),
        ),
        Mistake(
            "the margin has the wrong sign: the loss should fall as the chosen answer's log-ratio rises above "
            "the rejected one's.",
            functools.partial(_dpo_variant, sign=-1.0),
        ),
        Mistake(
            "beta multiplies the margin inside the log-sigmoid, -log sigma(beta * margin), not the loss outside it.",
            functools.partial(_dpo_variant, beta_inside=False),
        ),
        Mistake("average over the pairs (.mean()), not a sum.", functools.partial(_dpo_variant, reduce="sum")),
        Mistake(
            _DETACHED_POLICY,
            lambda pc, pr, rc, rr, beta: _dpo_variant(pc.detach(), pr, rc, rr, beta),
        ),
        Mistake(
            _DETACHED_POLICY,
            lambda pc, pr, rc, rr, beta: _dpo_variant(pc, pr.detach(), rc, rr, beta),
        ),
        Mistake(
            "beta is missing: the margin is beta times the difference of the two log-ratios.",
            lambda pc, pr, rc, rr, beta: _dpo_variant(pc, pr, rc, rr, 1.0),
        ),
        Mistake(
            "the references are swapped: each answer's log-ratio uses its own reference log-probability, "
            "log pi(y_w) - log pi_ref(y_w) and log pi(y_l) - log pi_ref(y_l).",
            functools.partial(_dpo_variant, swap=True),
        ),
    ]
    naive = Mistake(
        "log(sigmoid(x)) underflows to log(0) = -inf for a very negative margin: use F.logsigmoid(x) "
        "(or -F.softplus(-x)), which stays finite.",
        functools.partial(_dpo_variant, naive=True),
    )
    return _check(fn, "the DPO loss", preference.dpo_loss, _dpo_cases(), [*mistakes, naive], grad_args=(0, 1))


# --- GRPO's group advantages -------------------------------------------------------------------------------------


def _advantages(rewards, *, unbiased=True, per_group=True, divide=True, eps=1e-4, eps_in_sqrt=False, dims=None):
    dims = dims if dims is not None else -1 if per_group else (0, 1)
    mean = rewards.mean(dim=dims, keepdim=True)
    if eps_in_sqrt:  # as LayerNorm does: sqrt(var + eps)
        return (rewards - mean) / (rewards.var(dim=dims, keepdim=True, unbiased=unbiased) + eps).sqrt()
    std = rewards.std(dim=dims, keepdim=True, unbiased=unbiased)
    return (rewards - mean) / (std + eps) if divide else rewards - mean


def _advantage_cases():
    g = torch.Generator().manual_seed(2)
    cases = [
        (torch.randint(0, 2, (B, G), generator=g).to(dtype),)
        for B, G, dtype in [(3, 8, torch.float64), (2, 4, torch.float32)]
    ]
    cases.append((torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]),))  # uniform groups
    cases.append((torch.rand(2, 2, generator=g, dtype=torch.float64) * 1e6,))  # two answers, large rewards
    cases.append((torch.tensor([[0.0, 1e-3, 0.0, 2e-3], [0.5, 0.5, 0.5, 0.501]], dtype=torch.float64),))  # tiny spread
    return cases


def check_group_advantages(fn) -> Result:
    """``fn(rewards)``: rewards (B, G) -> advantages (B, G), (r - mean) / (std + 1e-4) within each group."""
    mistakes = [
        Mistake(
            "normalise within each group (each row: dim=-1, keepdim=True), not over the whole batch: an answer is "
            "compared with the other answers to its own prompt.",
            functools.partial(_advantages, per_group=False),
        ),
        Mistake(
            "normalise along each group's G answers (dim=-1), not across the prompts (dim=0).",
            functools.partial(_advantages, dims=0),
        ),
        Mistake(
            "add eps = 1e-4 to the std in the denominator, (r - mean) / (std + eps), not to the result.",
            lambda r: _advantages(r, eps=0.0) + 1e-4,
        ),
        Mistake(
            "the std is the sample standard deviation, with Bessel's correction (torch's default, unbiased=True).",
            functools.partial(_advantages, unbiased=False),
        ),
        Mistake(
            "divide by the group's std (plus 1e-4) too, not only subtract the mean.",
            functools.partial(_advantages, divide=False),
        ),
        Mistake(
            "divide by std + 1e-4, this exercise's value, added to the std (not 1e-8 or another size, not as a floor "
            "with clamp): with none, a group whose answers all score alike has std 0 and gives NaN.",
            functools.partial(_advantages, eps=0.0),
        ),
        Mistake(
            "add 1e-4 to the standard deviation, not to the variance under the square root (sqrt(var + eps) is "
            "LayerNorm's form): for rewards that barely differ, such as 0 and 0.001, the two differ tenfold.",
            functools.partial(_advantages, eps_in_sqrt=True),
        ),
    ]
    return _check(fn, "group advantages", grpo.group_advantages, _advantage_cases(), mistakes)


# --- the clipped objective ---------------------------------------------------------------------------------------


def _clipped(ratio, advantages, clip, *, kind="min"):
    A = advantages[:, None]
    if kind == "no clip":
        return ratio * A
    if kind == "clip only":
        return ratio.clamp(1 - clip, 1 + clip) * A
    if kind == "max":
        return torch.max(ratio * A, ratio.clamp(1 - clip, 1 + clip) * A)
    if kind == "clip A":
        return torch.min(ratio * A, ratio * A.clamp(-clip, clip))
    if kind == "detached clamp":
        return torch.min(ratio * A, ratio.detach().clamp(1 - clip, 1 + clip) * A)
    return torch.min(ratio * A, ratio.clamp(1 - clip, 1 + clip) * A)


def _clipped_cases():
    g = torch.Generator().manual_seed(3)
    cases = []
    for N, T, clip, dtype in [(4, 5, 0.2, torch.float64), (3, 2, 0.1, torch.float32), (2, 6, 0.5, torch.float64)]:
        ratio = torch.exp(0.6 * torch.randn(N, T, generator=g, dtype=dtype))  # ratios on both sides of the region
        A = torch.randn(N, generator=g, dtype=dtype)
        A[0] = -abs(A[0])
        A[-1] = abs(A[-1])
        cases.append((ratio, A, clip))
    return cases


def check_clipped_objective(fn) -> Result:
    """``fn(ratio, advantages, clip)``: ratio (N, T), advantages (N,) -> min(rho A, clip(rho) A), (N, T) (and its
    gradients)."""
    mistakes = [
        Mistake(
            "without the clip, one group can push the ratio as far as it likes: take the minimum of rho * A and "
            "clip(rho, 1 - clip, 1 + clip) * A.",
            functools.partial(_clipped, kind="no clip"),
        ),
        Mistake(
            "the clipped term alone is not the objective: where rho * A is the smaller of the two (a ratio that "
            "moved against the advantage), the minimum keeps it. Take torch.min of both terms.",
            functools.partial(_clipped, kind="clip only"),
        ),
        Mistake(
            "the maximum is optimistic: PPO and GRPO take the minimum, a pessimistic bound on the improvement.",
            functools.partial(_clipped, kind="max"),
        ),
        Mistake("clip the ratio rho, not the advantage.", functools.partial(_clipped, kind="clip A")),
        Mistake(
            "the values are right, not the gradient: inside [1 - clip, 1 + clip] the clipped term must pass the "
            "ratio's gradient on, so clamp ratio itself, not ratio.detach().",
            functools.partial(_clipped, kind="detached clamp"),
        ),
    ]
    error_hints = [
        ("must match the size", "each answer's advantage goes with every one of its tokens: advantages[:, None].")
    ]
    return _check(
        fn, "the clipped objective", _clipped, _clipped_cases(), mistakes, grad_args=(0,), error_hints=error_hints
    )
