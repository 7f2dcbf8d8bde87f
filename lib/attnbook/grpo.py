r"""Reinforcement learning with a verifiable reward: GRPO, group relative policy optimisation (Shao et al., 2024).

For each prompt q the policy samples a *group* of G answers o_1 .. o_G; a program scores them, r_1 .. r_G.
No value network: each answer's advantage is its reward against its own group's,

    A_i = (r_i - mean(r)) / (std(r) + eps),

given to every token of o_i. The policy maximises (Shao et al., eq. 3)

    J = mean_i 1/|o_i| sum_t [ min(rho_it A_i, clip(rho_it, 1 - eps, 1 + eps) A_i) - beta KL_it ],

where rho_it = pi(o_it | q, o_i<t) / pi_old(o_it | ...) is the ratio to the policy that sampled the group,
clipped as in PPO, and KL_it = pi_ref / pi - log(pi_ref / pi) - 1 the per-token estimate of the KL from the
frozen reference (eq. 4: never negative, zero where the two agree). The loss is -J.

Shapes:
    rewards:                       (B, G) for B prompts and G answers each
    logps, old_logps, ref_logps:   (N, T) each token's log-probability (N = B G answers)
    mask:                          (N, T) True on the answer tokens

Chapter: from a model of text to an assistant (17.2, reinforcement learning with a verifiable reward).
"""

from __future__ import annotations

import torch

from . import _checks

__all__ = ["group_advantages", "kl_per_token", "grpo_loss", "clipped_share"]


@_checks.checked_by("_check_advantages")
def group_advantages(rewards: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """Each answer's reward against its group's: (r - mean) / (std + eps), the std with Bessel's correction.

    A group whose answers all score alike gets advantages 0: it teaches nothing.

    Shapes:
        rewards: (B, G) -> (B, G)
    """
    mean = rewards.mean(dim=-1, keepdim=True)  # (B, 1)
    std = rewards.std(dim=-1, keepdim=True)  # (B, 1)
    return (rewards - mean) / (std + eps)  # (B, G)


@_checks.checked_by("_check_kl")
def kl_per_token(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """pi_ref / pi - log(pi_ref / pi) - 1 at every token: an unbiased, never negative estimate of KL(pi || pi_ref)
    on tokens sampled from pi.

    Shapes:
        logps, ref_logps: (N, T) -> (N, T)
    """
    log_ratio = ref_logps - logps  # (N, T): log pi_ref / pi
    return torch.exp(log_ratio) - log_ratio - 1  # (N, T)


@_checks.checked_by("_check_grpo")
def grpo_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    ref_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip: float = 0.2,
    beta: float = 0.04,
) -> torch.Tensor:
    """-J of Shao et al.'s eq. 3: the clipped ratio times the advantage, less beta times the KL, averaged
    over each answer's tokens, then over the answers.

    Shapes:
        logps, old_logps, ref_logps, mask: (N, T); advantages: (N,) one per answer -> ()
    """
    ratio = torch.exp(logps - old_logps)  # (N, T): rho, 1 at the first step on a fresh group
    A = advantages[:, None]  # (N, 1): every token of an answer shares its advantage
    surrogate = torch.min(ratio * A, ratio.clamp(1 - clip, 1 + clip) * A)  # (N, T)
    per_token = surrogate - beta * kl_per_token(logps, ref_logps)  # (N, T)
    per_token = per_token.masked_fill(~mask, 0.0)  # (N, T): padding counts for nothing
    per_answer = per_token.sum(-1) / mask.sum(-1).clamp(min=1)  # (N,): 1/|o_i| sum over t
    return -per_answer.mean()  # (): -J


@torch.no_grad()
@_checks.checked_by("_check_grpo")
def clipped_share(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    ref_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip: float = 0.2,
    beta: float = 0.04,
) -> torch.Tensor:
    """The share of the answer tokens where the clip acts in :func:`grpo_loss` (the same arguments): the
    ratio is past 1 + clip with a positive advantage, or below 1 - clip with a negative one, so the token's
    surrogate gives no gradient.

    Shapes:
        logps, old_logps, ref_logps, mask: (N, T); advantages: (N,) -> ()
    """
    ratio = torch.exp(logps - old_logps)  # (N, T)
    A = advantages[:, None]  # (N, 1)
    clipped = ((A > 0) & (ratio > 1 + clip)) | ((A < 0) & (ratio < 1 - clip))  # (N, T)
    return (clipped & mask).sum().to(logps.dtype) / mask.sum().clamp(min=1)  # ()


# --- checks --------------------------------------------------------------------------------------------------


def _check_advantages(rewards, eps, **_) -> None:
    _checks.tensor("rewards", rewards, ndim=2, floating=True)
    if rewards.shape[1] < 2:
        raise ValueError(
            f"rewards must have at least 2 answers per group, (B, G >= 2), got {_checks.shape_str(rewards.shape)}"
        )
    _checks.positive_float("eps", eps, allow_zero=True)


def _check_kl(logps, ref_logps, **_) -> None:
    for name, x in (("logps", logps), ("ref_logps", ref_logps)):
        _checks.tensor(name, x, floating=True)
    _checks.same_dtype(("logps", logps), ("ref_logps", ref_logps))
    if ref_logps.shape != logps.shape:
        raise ValueError(
            f"ref_logps must have the shape of logps {_checks.shape_str(logps.shape)}, "
            f"got {_checks.shape_str(ref_logps.shape)}"
        )


def _check_grpo(logps, old_logps, ref_logps, advantages, mask, clip, beta, **_) -> None:
    named = [("logps", logps), ("old_logps", old_logps), ("ref_logps", ref_logps)]
    for name, x in named:
        _checks.tensor(name, x, ndim=2, floating=True)
    _checks.same_dtype(*named, ("advantages", _checks.tensor("advantages", advantages, ndim=1, floating=True)))
    _checks.tensor("mask", mask, ndim=2, dtype=torch.bool)
    for name, x in [*named[1:], ("mask", mask)]:
        if x.shape != logps.shape:
            raise ValueError(
                f"{name} must have the shape of logps {_checks.shape_str(logps.shape)}, "
                f"got {_checks.shape_str(x.shape)}"
            )
    if advantages.shape[0] != logps.shape[0]:
        raise ValueError(
            f"advantages must have one value per answer, (N,) = ({logps.shape[0]},), "
            f"got {_checks.shape_str(advantages.shape)}"
        )
    _checks.positive_float("clip", clip)
    _checks.positive_float("beta", beta, allow_zero=True)
