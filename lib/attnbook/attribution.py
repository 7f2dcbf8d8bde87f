"""Attributions: which input positions does each prediction of a language model depend on?

Three answers, each an (input position -> score) map for every prediction t, so that they can be compared
on a task whose answer is known (chapter 16) or drawn over an image (chapter 10):

- :func:`attention_rollout` (Abnar and Zuidema, 2020): the attention weights of every layer, with the
  residual path, multiplied through the stack;
- :func:`gradient_x_input`: each input token's embedding times the gradient of the prediction's
  log-probability with respect to it;
- :func:`token_ablation`: how much the prediction's log-probability falls when one input token is replaced.

Shapes:
    weights: a list of n_layers (B, H, T, T)
    ids, targets: (B, T) token ids
    return: (B, T, T), [b, t, j] = how much input j matters to prediction t

Chapters: inside a small ViT (10), what attention learns (16).
"""

from __future__ import annotations

import torch
from torch import nn

from . import _checks
from .interpret import _check_ids, _language_model, _wide

__all__ = ["attention_rollout", "gradient_x_input", "token_ablation"]


@_checks.checked_by("_check_rollout")
def attention_rollout(weights: list[torch.Tensor], *, residual: float = 0.5) -> torch.Tensor:
    r"""Attention rollout (Abnar and Zuidema, 2020): the weights of every layer multiplied through the stack.

    Each layer's weights are averaged over the heads and mixed with the identity for the residual path,
    :math:`\tilde A_l = r I + (1 - r) \bar A_l` with :math:`r` = ``residual``, and the rollout is
    :math:`\tilde A_L \cdots \tilde A_2 \tilde A_1`: row t says how much of input j reaches position t's
    output along the attention and residual paths. Every row sums to 1.

    Shapes:
        weights: a list of n_layers (B, H, T, T), first layer first; return: (B, T, T)
    """
    T = weights[0].shape[-1]
    eye = torch.eye(T, dtype=weights[0].dtype, device=weights[0].device)  # (T, T)
    rollout = eye
    for w in weights:
        mixed = residual * eye + (1 - residual) * w.mean(dim=1)  # (B, T, T): heads averaged, residual path
        rollout = mixed @ rollout  # (B, T, T)
    return rollout


def gradient_x_input(model: nn.Module, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    r"""Gradient times input: how much each input token's embedding moves the log-probability of each target.

    For prediction t (the log-probability :math:`\log p(y_t \mid \text{ids})`) and input position j with
    token embedding :math:`e_j`: :math:`s_{tj} = e_j \cdot \partial \log p(y_t) / \partial e_j`. One backward
    pass per position t. Positions j > t get 0 (the model is causal).

    Shapes:
        ids, targets: (B, T); return: (B, T, T), [b, t, j]
    """
    embedding, _ = _check_attribution(model, ids, targets)
    captured = {}

    def keep(module, args, output):
        output.requires_grad_(True)
        captured["e"] = output  # (B, T, D)
        return output

    hook = embedding.register_forward_hook(keep)
    try:
        with torch.enable_grad():
            logits = model(ids)  # (B, T, V)
            logp = torch.log_softmax(_wide(logits), dim=-1).gather(-1, targets[..., None])[..., 0]  # (B, T)
            e = captured["e"]
            rows = []
            for t in range(ids.shape[1]):
                (grad,) = torch.autograd.grad(logp[:, t].sum(), e, retain_graph=True)  # (B, T, D)
                rows.append((grad * e).sum(-1).detach())  # (B, T): e_j . d log p(y_t) / d e_j
    finally:
        hook.remove()
    return torch.stack(rows, dim=1)  # (B, T, T)


@torch.no_grad()
def token_ablation(model: nn.Module, ids: torch.Tensor, targets: torch.Tensor, replacement) -> torch.Tensor:
    r"""How much the log-probability of each target falls when one input token is replaced.

    :math:`s_{tj} = \log p(y_t \mid \text{ids}) - \log p(y_t \mid \text{ids with token } j \text{ replaced})`,
    one input position j at a time; ``replacement`` is the token put in (an int, or (B, T) ids, one per
    position). Positions j > t get 0 (the model is causal).

    Shapes:
        ids, targets: (B, T); replacement: int or (B, T); return: (B, T, T), [b, t, j]
    """
    _, replacement = _check_attribution(model, ids, targets, replacement)  # replacement: (B, T)
    B, T = ids.shape

    def log_probs(x):  # (N, T) -> (N, T): log p(y_t) at every position
        logits = _wide(model(x))  # (N, T, V)
        return torch.log_softmax(logits, dim=-1).gather(-1, targets.repeat(len(x) // B, 1)[..., None])[..., 0]

    base = log_probs(ids)  # (B, T)
    edited = ids.repeat(T, 1)  # (T * B, T): copy j holds ids with position j replaced
    rows = torch.arange(T * B, device=ids.device)
    cols = torch.arange(T, device=ids.device).repeat_interleave(B)  # (T * B,)
    edited[rows, cols] = replacement[rows % B, cols]
    after = log_probs(edited).view(T, B, T)  # (j, B, t)
    return (base[None] - after).permute(1, 2, 0)  # (B, t, j)


# --- checks ----------------------------------------------------------------------------------------------


def _check_rollout(weights, residual, **_) -> None:
    """A non-empty list of one (B, H, T, T) per layer, all of one shape; residual in [0, 1]."""
    if isinstance(weights, torch.Tensor) or not isinstance(weights, (list, tuple)) or not weights:
        raise TypeError(f"weights must be a non-empty list of (B, H, T, T) tensors, one per layer, got {weights!r:.60}")
    for i, w in enumerate(weights):
        _checks.tensor(f"weights[{i}]", w, ndim=4, floating=True)
        B, H, Tq, Tk = w.shape
        if Tq != Tk or min(B, H, Tq) == 0:
            raise ValueError(
                f"weights[{i}] must be self-attention weights (B, H, T, T) with B, H, T >= 1, "
                f"got shape {_checks.shape_str(w.shape)}"
            )
        _checks.same_size("shape (B, H, T, T)", slice(None), ("weights[0]", weights[0]), (f"weights[{i}]", w))
    residual = _checks.positive_float("residual", residual, allow_zero=True)
    if residual > 1:
        raise ValueError(f"residual must be in [0, 1], got {residual}")


def _check_attribution(model, ids, targets, replacement=None) -> tuple[nn.Embedding, torch.Tensor | None]:
    """A GPT or an AttentionOnly model, ids and targets (B, T), and replacement ids (one int or (B, T)); returns
    the model's token embedding and the replacement as (B, T) ids."""
    embedding, vocab_size, block_size = _language_model("model", model)
    _check_ids("ids", ids, vocab_size, block_size)
    _checks.token_ids("targets", targets, vocab_size, ndim=2)
    _checks.same_size("shape (B, T)", slice(None), ("ids", ids), ("targets", targets))
    if replacement is None:
        return embedding, None
    if isinstance(replacement, int) and not isinstance(replacement, bool):
        if not 0 <= replacement < vocab_size:
            raise ValueError(f"replacement must be a token id in [0, {vocab_size}), got {replacement}")
        return embedding, torch.full_like(ids, replacement)
    _checks.token_ids("replacement", replacement, vocab_size, ndim=2, what="token ids (or one int)")
    _checks.same_size("shape (B, T)", slice(None), ("ids", ids), ("replacement", replacement))
    return embedding, replacement
