"""DPO: the loss against a direct evaluation of its formula and against TRL's DPOTrainer on the same
log-probabilities (values, logged reward margins and gradients), the implicit reward, and bad input."""

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from attnbook import chat, models, preference


def direct_dpo(pc, pr, rc, rr, beta):
    """-1/B sum log(1 / (1 + exp(-beta ((pc - rc) - (pr - rr))))), one pair at a time in Python floats."""
    total = 0.0
    for a, b, c, d in zip(pc.tolist(), pr.tolist(), rc.tolist(), rr.tolist()):
        margin = beta * ((a - c) - (b - d))
        total += math.log1p(math.exp(-margin)) if margin > -30 else -margin  # log(1 + e^-m)
    return total / len(pc)


@pytest.mark.parametrize("beta", [0.01, 0.1, 1.0, 5.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dpo_loss_is_its_formula(beta, dtype):
    g = torch.Generator().manual_seed(0)
    pc, pr, rc, rr = (-20 * torch.rand(7, generator=g, dtype=dtype) for _ in range(4))
    loss = preference.dpo_loss(pc, pr, rc, rr, beta)
    assert loss.dtype == dtype and loss.shape == ()
    assert loss.item() == pytest.approx(direct_dpo(pc, pr, rc, rr, beta), rel=1e-5)


def test_dpo_loss_is_finite_for_huge_margins_and_log2_at_the_reference():
    big = torch.tensor([1e4, -1e4], dtype=torch.float64)
    zero = torch.zeros(2, dtype=torch.float64)
    loss = preference.dpo_loss(big, zero, zero, zero, 1.0)
    assert torch.isfinite(loss) and loss.item() == pytest.approx(1e4 / 2)  # one pair costs 0, the other 1e4
    same = torch.tensor([-3.0, -7.0])
    assert preference.dpo_loss(same, same - 2, same, same - 2, 0.5).item() == pytest.approx(math.log(2))


def test_dpo_gradient_is_beta_sigma_minus_margin():
    """d loss / d log pi(y_w) = -beta sigma(-margin) / B, and the opposite for y_l; none for the reference."""
    g = torch.Generator().manual_seed(1)
    pc, pr, rc, rr = (-10 * torch.rand(5, generator=g, dtype=torch.float64) for _ in range(4))
    pc.requires_grad_(True)
    pr.requires_grad_(True)
    beta = 0.3
    preference.dpo_loss(pc, pr, rc, rr, beta).backward()
    weight = torch.sigmoid(-beta * ((pc - rc) - (pr - rr))).detach()
    torch.testing.assert_close(pc.grad, -beta * weight / 5)
    torch.testing.assert_close(pr.grad, beta * weight / 5)


def test_implicit_reward_and_sequence_kl():
    p, r = torch.tensor([-1.0, -4.0]), torch.tensor([-2.0, -2.0])
    torch.testing.assert_close(preference.implicit_reward(p, r, 0.5), torch.tensor([0.5, -1.0]))
    assert preference.sequence_kl(p, r).item() == pytest.approx(-0.5)
    assert preference.sequence_kl(p, r, 2.0).item() == pytest.approx(-1.0)


def test_sequence_kl_estimates_the_kl_of_two_distributions():
    """On answers drawn from pi, the mean log-ratio converges to KL(pi || pi_ref)."""
    pi, ref = torch.tensor([0.6, 0.3, 0.1]), torch.tensor([0.2, 0.5, 0.3])
    draws = torch.multinomial(pi, 200_000, replacement=True, generator=torch.Generator().manual_seed(0))
    estimate = preference.sequence_kl(pi.log()[draws], ref.log()[draws])
    exact = (pi * (pi / ref).log()).sum()
    assert estimate.item() == pytest.approx(exact.item(), abs=5e-3)


# --- against TRL ------------------------------------------------------------------------------------------------


def _trl_loss(model, ids, mask, ref_chosen, ref_rejected, beta):
    """TRL's DPOTrainer._compute_loss (its loss_type "sigmoid", standard DPO) on the log-probabilities our
    model gives: the trainer's state is a namespace, and the model returns TRL's fused-head outputs."""
    trl = pytest.importorskip("trl")

    class Outputs:
        def __init__(self, input_ids, labels, **_):
            logits = model(input_ids)  # (2B, T, V)
            logp = torch.log_softmax(logits, -1)
            target = labels[:, 1:].clamp(min=0)
            token = logp[:, :-1].gather(-1, target[..., None]).squeeze(-1)  # (2B, T - 1)
            self.log_probs = token * (labels[:, 1:] != -100)
            self.entropy = -(logp.exp() * logp).sum(-1)[:, :-1].detach()
            self.mean_logits = logits.mean(-1)[:, :-1].detach()
            self.is_top1 = logits[:, :-1].argmax(-1) == target

    trainer = SimpleNamespace(
        model=SimpleNamespace(training=True),
        accelerator=SimpleNamespace(device="cpu", gather_for_metrics=lambda x: x, gather=lambda x: x),
        aux_loss_enabled=False,
        ld_alpha=None,
        precompute_ref_logps=True,
        f_divergence_type="reverse_kl",
        loss_types=["sigmoid"],
        loss_weights=[1.0],
        beta=beta,
        use_weighting=False,
        label_smoothing=0.0,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _total_train_tokens=0,
        _tp_size=1,
    )
    inputs = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "completion_mask": mask.long(),
        "ref_chosen_logps": ref_chosen,
        "ref_rejected_logps": ref_rejected,
    }
    loss = trl.DPOTrainer._compute_loss(trainer, lambda **kw: Outputs(**kw), inputs, False)
    return loss, trainer._metrics["train"]


def test_dpo_loss_equals_trls_on_the_same_log_probabilities():
    torch.manual_seed(0)
    config = models.TransformerConfig(vocab_size=11, block_size=12, n_layers=1, n_heads=2, d_model=16)
    policy = models.GPT(config)
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    chosen = [[2, 3, 10], [5, 10], [1, 10]]
    rejected = [[4, 10], [6, 6, 6, 10], [7, 7, 10]]
    ids, mask = chat.pad_answers(prompts * 2, chosen + rejected, pad=10)
    ref_chosen, ref_rejected = -5 * torch.rand(3), -5 * torch.rand(3)
    beta = 0.2

    trl_loss, metrics = _trl_loss(policy, ids, mask, ref_chosen, ref_rejected, beta)
    trl_grads = torch.autograd.grad(trl_loss, list(policy.parameters()))
    logps = chat.sequence_logprobs(policy, ids, mask)
    ours = preference.dpo_loss(logps[:3], logps[3:], ref_chosen, ref_rejected, beta)
    our_grads = torch.autograd.grad(ours, list(policy.parameters()))

    torch.testing.assert_close(ours, trl_loss)
    for a, b in zip(our_grads, trl_grads):
        torch.testing.assert_close(a, b)
    margin = preference.implicit_reward(logps[:3], ref_chosen, beta) - preference.implicit_reward(
        logps[3:], ref_rejected, beta
    )
    assert metrics["rewards/margins"][0] == pytest.approx(margin.mean().item(), rel=1e-5)
    assert metrics["logps/chosen"][0] == pytest.approx(logps[:3].mean().item(), rel=1e-5)


# --- bad input ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda x: preference.dpo_loss(x, x, x, x[:2], 0.1), ValueError, r"same shape \(B,\).*ref_rejected \(2\)"),
        (lambda x: preference.dpo_loss(x, x, x, x, 0.0), ValueError, r"beta"),
        (lambda x: preference.dpo_loss(x, x, x.double(), x, 0.1), TypeError, r"ref_chosen"),
        (lambda x: preference.dpo_loss(x[:, None], x, x, x, 0.1), ValueError, r"policy_chosen must have 1 dim"),
        (lambda x: preference.dpo_loss(x.long(), x, x, x, 0.1), TypeError, r"policy_chosen must be a floating"),
        (lambda x: preference.implicit_reward(x.tolist(), x, 0.1), TypeError, r"policy_logps must be a torch.Tensor"),
        (lambda x: preference.sequence_kl(x, x, -1.0), ValueError, r"beta"),
    ],
)
def test_bad_input_names_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call(torch.randn(3))
