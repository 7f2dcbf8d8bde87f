r"""Preference tuning with DPO (Rafailov et al., 2023): learn from pairs of answers, one preferred.

The objective of RLHF is a reward minus a KL penalty that keeps the policy near a frozen reference,
``max E[r(x, y)] - beta KL(pi || pi_ref)``. Its optimum is ``pi*(y|x) = pi_ref(y|x) exp(r(x, y) / beta) / Z(x)``,
so a reward can be written with the policy itself, ``r(x, y) = beta log pi(y|x) / pi_ref(y|x) + beta log Z(x)``
(the *implicit reward*); in the Bradley-Terry probability that y_w is preferred to y_l,
``sigma(r(x, y_w) - r(x, y_l))``, the Z(x) cancels, and its negative log-likelihood is the DPO loss:

    L = -log sigma(beta [log pi(y_w|x) / pi_ref(y_w|x) - log pi(y_l|x) / pi_ref(y_l|x)])

A pair's two answers can both lose probability while their difference grows: nothing in L keeps the
chosen answer itself likely (Pal et al., 2024; Razin et al., 2025). :func:`dpo_nll_loss` adds the chosen
answer's negative log-likelihood per token (:func:`chosen_nll`; DPO+NLL, Pang et al., 2024).

Every input is a sequence log-probability (:func:`attnbook.chat.sequence_logprobs`) of shape (B,).

Chapter: from a model of text to an assistant (17.1, preference tuning).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import _checks

__all__ = ["implicit_reward", "dpo_loss", "chosen_nll", "dpo_nll_loss", "sequence_kl"]


@_checks.checked_by("_check_reward")
def implicit_reward(policy_logps: torch.Tensor, ref_logps: torch.Tensor, beta: float) -> torch.Tensor:
    """beta log pi(y|x) / pi_ref(y|x): the reward the policy implies, up to beta log Z(x).

    Shapes:
        policy_logps, ref_logps: (B,) -> (B,)
    """
    return beta * (policy_logps - ref_logps)  # (B,)


@_checks.checked_by("_check_dpo")
def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """The DPO loss, the mean over the pairs of -log sigma(implicit reward margin).

    Shapes:
        each input: (B,) sequence log-probabilities of the chosen and the rejected answers
        return: () the mean over the B pairs
    """
    margin = implicit_reward(policy_chosen, ref_chosen, beta) - implicit_reward(policy_rejected, ref_rejected, beta)
    return -F.logsigmoid(margin).mean()  # (): -log sigma is softplus(-margin), stable for any margin


@_checks.checked_by("_check_chosen_nll")
def chosen_nll(policy_chosen: torch.Tensor, chosen_lengths: torch.Tensor) -> torch.Tensor:
    """The chosen answers' negative log-likelihood per token, the mean over the pairs: the instruction tuning
    loss on the chosen answers.

    Shapes:
        policy_chosen: (B,) sequence log-probabilities; chosen_lengths: (B,) their token counts -> ()
    """
    return -(policy_chosen / chosen_lengths).mean()  # ()


@_checks.checked_by("_check_dpo_nll")
def dpo_nll_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    chosen_lengths: torch.Tensor,
    beta: float,
    alpha: float = 1.0,
) -> torch.Tensor:
    """DPO plus ``alpha`` times the chosen answers' negative log-likelihood per token (Pang et al., 2024).

    Shapes:
        each log-probability: (B,); chosen_lengths: (B,) the chosen answers' token counts
        return: () the mean over the B pairs
    """
    nll = chosen_nll(policy_chosen, chosen_lengths)  # (): per token of the chosen answers
    return dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta) + alpha * nll


@_checks.checked_by("_check_reward")
def sequence_kl(policy_logps: torch.Tensor, ref_logps: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
    """KL(pi || pi_ref) estimated on answers sampled from pi: the mean of log pi(y|x) - log pi_ref(y|x)
    (times ``beta``, 1 by default, to read it in the units of the penalty).

    Shapes:
        policy_logps, ref_logps: (B,) for B answers drawn from the policy -> ()
    """
    return beta * (policy_logps - ref_logps).mean()  # ()


# --- checks --------------------------------------------------------------------------------------------------


def _check_logps(*named: tuple[str, torch.Tensor]) -> None:
    for name, x in named:
        _checks.tensor(name, x, ndim=1, floating=True)
    _checks.same_dtype(*named)
    sizes = {x.shape[0] for _, x in named}
    if len(sizes) > 1:
        shapes = ", ".join(f"{n} {_checks.shape_str(x.shape)}" for n, x in named)
        raise ValueError(f"the log-probabilities must all have the same shape (B,), got {shapes}")


def _check_reward(policy_logps, ref_logps, beta, **_) -> None:
    _check_logps(("policy_logps", policy_logps), ("ref_logps", ref_logps))
    _checks.positive_float("beta", beta)


def _check_dpo(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta, **_) -> None:
    _check_logps(
        ("policy_chosen", policy_chosen),
        ("policy_rejected", policy_rejected),
        ("ref_chosen", ref_chosen),
        ("ref_rejected", ref_rejected),
    )
    _checks.positive_float("beta", beta)


def _check_chosen_nll(policy_chosen, chosen_lengths, **_) -> None:
    _check_logps(("policy_chosen", policy_chosen))
    _check_lengths(policy_chosen, chosen_lengths)


def _check_dpo_nll(policy_chosen, policy_rejected, ref_chosen, ref_rejected, chosen_lengths, beta, alpha, **_) -> None:
    _check_dpo(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta)
    _check_lengths(policy_chosen, chosen_lengths)
    _checks.positive_float("alpha", alpha, allow_zero=True)


def _check_lengths(policy_chosen, chosen_lengths) -> None:
    _checks.tensor("chosen_lengths", chosen_lengths, ndim=1)
    if chosen_lengths.shape != policy_chosen.shape:
        raise ValueError(
            f"chosen_lengths must have one length per pair, (B,) = ({policy_chosen.shape[0]},), "
            f"got {_checks.shape_str(chosen_lengths.shape)}"
        )
    if chosen_lengths.dtype == torch.bool or bool((chosen_lengths <= 0).any()):
        raise ValueError("chosen_lengths must hold token counts >= 1")
