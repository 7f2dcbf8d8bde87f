"""GRPO against Shao et al. (2024): the group-normalised advantage, the KL estimator of their eq. 4 and the
objective of their eq. 3 written out one answer and one token at a time, gradients included."""

import math
import statistics

import pytest
import torch
from attnbook import grpo


def paper_advantages(rewards):
    """r~_i = (r_i - mean(r)) / std(r) for each group, with statistics' sample std and TRL's eps of 1e-4."""
    out = []
    for group in rewards.tolist():
        mean, std = statistics.mean(group), statistics.stdev(group)
        out.append([(r - mean) / (std + 1e-4) for r in group])
    return torch.tensor(out, dtype=rewards.dtype)


def test_group_advantages_are_the_groups_normalised_rewards():
    g = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 2, (5, 8), generator=g).double()
    rewards[0] = 1.0  # a group that all got it right
    rewards[1] = 0.0  # and one that all got it wrong
    A = grpo.group_advantages(rewards)
    torch.testing.assert_close(A, paper_advantages(rewards))
    assert torch.all(A[:2] == 0)  # nothing to learn from a group whose answers all score alike
    torch.testing.assert_close(A.sum(-1), torch.zeros(5, dtype=torch.float64), atol=1e-9, rtol=0)


def test_group_advantages_of_real_valued_rewards_and_their_scale():
    rewards = torch.tensor([[0.0, 1.0, 2.0, 3.0], [10.0, 10.0, 10.0, 30.0]])
    A = grpo.group_advantages(rewards, eps=0.0)
    torch.testing.assert_close(A, paper_advantages(rewards), atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(A.std(-1), torch.ones(2))  # each group's advantages have std 1
    torch.testing.assert_close(grpo.group_advantages(rewards * 100, eps=0.0), A)  # the reward's scale cancels


def test_kl_per_token_is_never_negative_zero_when_equal_and_unbiased():
    x = torch.randn(4, 6)
    assert torch.all(grpo.kl_per_token(x, x) == 0)
    assert torch.all(grpo.kl_per_token(x, torch.randn(4, 6)) >= 0)
    pi, ref = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64), torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    expected = (pi * grpo.kl_per_token(pi.log(), ref.log())).sum()  # E over tokens drawn from pi
    torch.testing.assert_close(expected, (pi * (pi / ref).log()).sum())  # = KL(pi || ref) exactly


def paper_objective(logps, old, ref, advantages, mask, clip, beta):
    """Eq. 3 of Shao et al. (2024) one answer and one token at a time:
    1/G sum_i 1/|o_i| sum_t { min(rho A, clip(rho, 1 - e, 1 + e) A) - beta (r - log r - 1) }, r = pi_ref / pi."""
    total = 0
    for i in range(logps.shape[0]):
        terms = []
        for t in range(logps.shape[1]):
            if not mask[i, t]:
                continue
            rho = torch.exp(logps[i, t] - old[i, t])
            A = advantages[i]
            surrogate = torch.minimum(rho * A, torch.clamp(rho, 1 - clip, 1 + clip) * A)
            r = torch.exp(ref[i, t] - logps[i, t])
            terms.append(surrogate - beta * (r - torch.log(r) - 1))
        total = total + sum(terms) / len(terms)
    return total / logps.shape[0]


@pytest.mark.parametrize("clip, beta", [(0.2, 0.04), (0.1, 0.0), (0.5, 1.0)])
def test_grpo_loss_is_minus_the_papers_objective_with_its_gradient(clip, beta):
    g = torch.Generator().manual_seed(0)
    N, T = 6, 5
    old = -3 * torch.rand(N, T, generator=g, dtype=torch.float64)
    logps = (old + 0.5 * torch.randn(N, T, generator=g, dtype=torch.float64)).requires_grad_(True)  # rho far from 1
    ref = -3 * torch.rand(N, T, generator=g, dtype=torch.float64)
    advantages = torch.randn(N, generator=g, dtype=torch.float64)
    mask = torch.rand(N, T, generator=g) < 0.7
    mask[:, 1] = True  # every answer has a token
    loss = grpo.grpo_loss(logps, old, ref, advantages, mask, clip=clip, beta=beta)
    (grad,) = torch.autograd.grad(loss, logps)
    expected = -paper_objective(logps, old, ref, advantages, mask, clip, beta)
    (expected_grad,) = torch.autograd.grad(expected, logps)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(grad, expected_grad)
    assert torch.all(grad[~mask] == 0)  # padding and prompt tokens get no gradient


def test_clipping_stops_the_gradient_beyond_the_trust_region():
    """With A > 0 a ratio above 1 + eps has no gradient left; with A < 0 a ratio below 1 - eps neither."""
    old = torch.zeros(2, 1, dtype=torch.float64)
    logps = torch.tensor([[math.log(1.5)], [math.log(0.5)]], dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, 1, dtype=torch.bool)
    loss = grpo.grpo_loss(logps, old, old, torch.tensor([1.0, -1.0], dtype=torch.float64), mask, clip=0.2, beta=0.0)
    (grad,) = torch.autograd.grad(loss, logps)
    assert torch.all(grad == 0)
    inside = torch.zeros(2, 1, dtype=torch.float64, requires_grad=True)  # ratio 1: inside the region
    loss = grpo.grpo_loss(inside, old, old, torch.tensor([1.0, -1.0], dtype=torch.float64), mask, clip=0.2, beta=0.0)
    (grad,) = torch.autograd.grad(loss, inside)
    torch.testing.assert_close(grad, torch.tensor([[-0.5], [0.5]], dtype=torch.float64))


def test_clipped_share_is_the_share_of_answer_tokens_the_clip_leaves_without_gradient():
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(16, 6, generator=g, dtype=torch.float64)
    logps = (old + 0.5 * torch.randn(16, 6, generator=g, dtype=torch.float64)).requires_grad_(True)
    advantages = torch.randn(16, generator=g, dtype=torch.float64)
    mask = torch.rand(16, 6, generator=g) < 0.8
    mask[:, 0] = True
    loss = grpo.grpo_loss(logps, old, old, advantages, mask, clip=0.2, beta=0.0)
    (grad,) = torch.autograd.grad(loss, logps)
    share = grpo.clipped_share(logps.detach(), old, old, advantages, mask, clip=0.2, beta=0.0)
    assert 0.1 < share.item() < 0.9
    assert share.item() == pytest.approx(((grad == 0) & mask).sum().item() / mask.sum().item())
    assert grpo.clipped_share(old, old, old, advantages, mask).item() == 0.0  # ratio 1: nothing clipped


def test_at_ratio_one_the_gradient_is_the_policy_gradient_with_the_group_baseline():
    """old = logps (one update per group): the gradient of -J without the KL is -A_i / (|o_i| N) for each token,
    the REINFORCE estimator with the group's mean as baseline."""
    g = torch.Generator().manual_seed(2)
    logps = (-2 * torch.rand(4, 3, generator=g, dtype=torch.float64)).requires_grad_(True)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]], dtype=torch.bool)
    A = torch.tensor([1.0, -0.5, 2.0, 0.0], dtype=torch.float64)
    loss = grpo.grpo_loss(logps, logps.detach(), logps.detach(), A, mask, beta=0.0)
    (grad,) = torch.autograd.grad(loss, logps)
    expected = -A[:, None] * mask / mask.sum(-1, keepdim=True) / 4
    torch.testing.assert_close(grad, expected)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda l, m, a: grpo.grpo_loss(l, l, l[:, :2], a, m), ValueError, r"ref_logps must have the shape of logps"),
        (lambda l, m, a: grpo.grpo_loss(l, l, l, a[:2], m), ValueError, r"advantages must have one value per answer"),
        (lambda l, m, a: grpo.grpo_loss(l, l, l, a, m.float()), TypeError, r"mask must have dtype torch.bool"),
        (lambda l, m, a: grpo.grpo_loss(l, l, l, a, m, clip=0.0), ValueError, r"clip"),
        (lambda l, m, a: grpo.grpo_loss(l, l, l, a, m, beta=-1.0), ValueError, r"beta"),
        (lambda l, m, a: grpo.grpo_loss(l, l.double(), l, a, m), TypeError, r"old_logps"),
        (lambda l, m, a: grpo.group_advantages(a), ValueError, r"rewards must have 2 dim"),
        (lambda l, m, a: grpo.group_advantages(a[:, None]), ValueError, r"at least 2 answers per group"),
        (lambda l, m, a: grpo.group_advantages(m), TypeError, r"rewards must be a floating"),
    ],
)
def test_bad_input_names_the_argument(call, error, match):
    logps = torch.randn(3, 4)
    with pytest.raises(error, match=match):
        call(logps, torch.ones(3, 4, dtype=torch.bool), torch.randn(3))
