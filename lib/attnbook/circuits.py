"""Reading a circuit from the weights: a head's QK and OV circuits, composition, direct logit attribution.

With its attention weights held fixed, an attention-only transformer (:class:`interpret.AttentionOnly`) is
linear in its residual stream, and each head is two matrices of the model's width (Elhage et al., 2021),
written here in the book's row convention (a token's vector x is a row):

- the **QK circuit** W_QK = W_Q^h (W_K^h)^T (D, D) decides where the head looks: the score of a query x_i
  against a key x_j is x_i W_QK x_j^T / sqrt(D_h);
- the **OV circuit** W_OV = W_V^h W_O^h (D, D) decides what it writes: for each unit of weight on key x_j
  the head adds x_j W_OV to the residual stream.

Multiplied by the token embedding and the unembedding they become tables over the vocabulary.
:func:`ov_circuit` says which logits go up when the head attends to each token; a head that copies has its
largest entries on the diagonal (:func:`diagonal_top1`) and mostly positive eigenvalues
(:func:`copying_score`). :func:`qk_circuit` says how much a query holding one token attends to a key
holding another, directly or through what an earlier head wrote into the key. :func:`composition_scores`
measure how much a later head reads what an earlier one writes, through its queries, keys or values, to be
compared with :func:`random_composition_score`. :func:`direct_logit_attribution` splits the logits into
the direct contributions of the embeddings and of every head.

LayerNorm is folded in as TransformerLens folds it: the scale of a norm goes into the weights that read
from it (W_Q, W_K and W_V; the final norm's into W_U), and its centring into the weights that write to the
residual stream (the token embedding and W_O, centred over D). Its division by the norm of the stream, one
positive number per position, and its bias are left out: a circuit is the part of a head's computation
that depends on the tokens.

Shapes:
    W_QK, W_OV: (D, D); a circuit over tokens: (V, V); ids: (B, T)

Chapter: what attention learns (16).
"""

from __future__ import annotations

import torch

from . import _checks
from .interpret import AttentionOnly, _check_heads, _check_ids

__all__ = [
    "head_circuits",
    "ov_circuit",
    "qk_circuit",
    "diagonal_top1",
    "copying_score",
    "composition_score",
    "composition_scores",
    "random_composition_score",
    "direct_logit_attribution",
]


@_checks.checked_by("_check_head")
def head_circuits(model: AttentionOnly, layer: int, head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """W_QK = W_Q^h (W_K^h)^T and W_OV = W_V^h W_O^h of head ``head`` of layer ``layer``, LayerNorm folded in.

    Layers and heads count from 0.

    Shapes:
        return: W_QK (D, D), W_OV (D, D)
    """
    attn, gamma = model.attns[layer], model.norms[layer].weight  # gamma: (D,), the norm's scale
    rows = slice(head * attn.d_head, (head + 1) * attn.d_head)  # the head's outputs of W_q, W_k, W_v
    W_Q = gamma[:, None] * attn.W_q.weight[rows].T  # (D, Dh): nn.Linear computes x @ weight.T
    W_K = gamma[:, None] * attn.W_k.weight[rows].T  # (D, Dh)
    W_V = gamma[:, None] * attn.W_v.weight[rows].T  # (D, Dh)
    W_O = _centred(attn.W_o.weight[:, rows].T)  # (Dh, D): the next norm removes the mean over D
    return (W_Q @ W_K.T).detach(), (W_V @ W_O).detach()  # (D, D), (D, D)


@_checks.checked_by("_check_head")
def ov_circuit(model: AttentionOnly, layer: int, head: int) -> torch.Tensor:
    """The full OV circuit: [i, j] is how much the head raises the logit of token j, directly, for each unit of
    weight it puts on a position holding token i. A copying head's largest entry in row i is at j = i.

    It is E W_OV U, with E the token embedding (centred) and U = diag(gamma_f) W_U^T the unembedding.

    Shapes:
        return: (V, V)
    """
    _, W_OV = head_circuits(model, layer, head)
    return _embedding(model) @ W_OV @ _unembedding(model)  # (V, V)


@_checks.checked_by("_check_qk")
def qk_circuit(model: AttentionOnly, layer: int, head: int, *, keys_through=None) -> torch.Tensor:
    """The full QK circuit: [i, j] is the score (before the softmax, its scale and the norm) of a query holding
    token i against a key holding token j: E W_QK E^T.

    With ``keys_through`` = (layer, head) of an earlier layer, the key is instead what that head writes
    when it attends to token j, E W_OV' (K-composition): E W_QK (E W_OV')^T. An induction head's query for
    token i then prefers the key into which a previous-token head wrote i.

    Shapes:
        return: (V, V)
    """
    W_QK, _ = head_circuits(model, layer, head)
    E = _embedding(model)  # (V, D)
    keys = E if keys_through is None else E @ head_circuits(model, *keys_through)[1]  # (V, D)
    return E @ W_QK @ keys.T  # (V, V)


@_checks.checked_by("_check_circuit")
def diagonal_top1(circuit: torch.Tensor) -> torch.Tensor:
    """The fraction of rows whose largest entry is on the diagonal: for an OV circuit, the share of tokens
    whose own logit the head raises most (1 for a perfect copy, 1/V by chance).

    Shapes:
        circuit: (V, V); return: a scalar
    """
    V = circuit.shape[0]
    hits = circuit.argmax(dim=-1) == torch.arange(V, device=circuit.device)  # (V,)
    return hits.to(circuit.dtype).mean()


@_checks.checked_by("_check_circuit")
def copying_score(circuit: torch.Tensor) -> torch.Tensor:
    r"""Elhage et al.'s summary of a copying matrix: the eigenvalues' sum over the sum of their magnitudes,
    :math:`\sum_i \lambda_i / \sum_i |\lambda_i|`, from -1 (every eigenvalue negative) to 1 (every one
    positive). Complex eigenvalues come in conjugate pairs, so the sum is real.

    Shapes:
        circuit: (V, V); return: a scalar
    """
    eig = torch.linalg.eigvals(circuit.double())  # (V,), complex
    return (eig.sum().real / eig.abs().sum()).to(circuit.dtype)


@_checks.checked_by("_check_pair")
def composition_score(W_A: torch.Tensor, W_B: torch.Tensor) -> torch.Tensor:
    r"""How much of W_B's output W_A reads: :math:`\lVert W_A W_B \rVert_F / (\lVert W_A \rVert_F
    \lVert W_B \rVert_F)`, between 0 and 1 (Elhage et al., 2021).

    Shapes:
        W_A: (D, D'), W_B: (D', D''); return: a scalar
    """
    return torch.linalg.matrix_norm(W_A @ W_B) / (torch.linalg.matrix_norm(W_A) * torch.linalg.matrix_norm(W_B))


@_checks.checked_by("_check_composition")
def composition_scores(model: AttentionOnly, earlier: tuple[int, int], later: tuple[int, int]) -> dict:
    """How much head ``later`` = (layer, head) reads what head ``earlier`` writes, through its queries (Q),
    keys (K) and values (V): the composition score of the earlier head's W_OV with the later head's W_QK,
    W_QK^T or W_OV.

    In the row convention, what the earlier head writes is y W_OV1; read by the queries it is
    (y W_OV1) W_QK2, by the keys x W_QK2 (y W_OV1)^T, by the values (y W_OV1) W_OV2.

    Shapes:
        return: {"Q": scalar, "K": scalar, "V": scalar}
    """
    _, W_OV1 = head_circuits(model, *earlier)
    W_QK2, W_OV2 = head_circuits(model, *later)
    return {
        "Q": composition_score(W_OV1, W_QK2),
        "K": composition_score(W_OV1, W_QK2.T),
        "V": composition_score(W_OV1, W_OV2),
    }


@_checks.checked_by("_check_random")
def random_composition_score(
    d_model: int, d_head: int, *, samples: int = 200, generator: torch.Generator | None = None
) -> torch.Tensor:
    """The baseline of :func:`composition_scores`: the mean composition score of random matrices of a head's
    shapes, W_A = X_1 X_2^T and W_B = X_3 X_4^T with every X_k (d_model, d_head) of standard normal entries.

    Shapes:
        return: a scalar
    """
    X = torch.randn(samples, 4, d_model, d_head, generator=generator)  # (S, 4, D, Dh)
    W_A = X[:, 0] @ X[:, 1].transpose(1, 2)  # (S, D, D)
    W_B = X[:, 2] @ X[:, 3].transpose(1, 2)  # (S, D, D)
    return composition_score(W_A, W_B).mean()


@torch.no_grad()
@_checks.checked_by("_check_dla")
def direct_logit_attribution(model: AttentionOnly, ids: torch.Tensor) -> tuple[torch.Tensor, list[str]]:
    r"""Every logit split into the direct contributions of the model's parts, which sum to it.

    The last residual stream is a sum, x = E[ids] + P + (every head's output), and the final norm divides it by
    its norm :math:`\sigma` (one number per position, of the whole stream). With :math:`\sigma` as it is,
    each part c adds :math:`((c - \bar c) / \sigma \odot \gamma_f) W_U^T` to the logits, and the norm's bias
    :math:`\beta_f W_U^T`. The parts are named "embedding", "positions", "L1H1", "L1H2", ... and "bias".

    Shapes:
        ids: (B, T); return: (B, T, C, V), C = n_layers * n_heads + 3 parts, and their C names
    """
    B, T = ids.shape
    heads = []  # each layer's heads side by side, the input of its W_o: (B, T, H * Dh)
    hooks = [attn.W_o.register_forward_pre_hook(lambda m, args: heads.append(args[0])) for attn in model.attns]
    try:
        model(ids)
    finally:
        for hook in hooks:
            hook.remove()
    D, H = model.config.d_model, model.config.n_heads
    parts = [model.embed(ids), model.positions.weight[:T].expand(B, T, D)]  # (B, T, D) each
    for attn, z in zip(model.attns, heads):
        W_O = attn.W_o.weight.view(D, H, D // H)  # (D, H, Dh): head h's columns of W_o
        parts += torch.einsum("bthd,ehd->bthe", z.view(B, T, H, -1), W_O).unbind(dim=2)  # H of (B, T, D)
    parts = torch.stack(parts, dim=2)  # (B, T, C - 1, D)
    x = parts.sum(dim=2)  # (B, T, D): the last residual stream
    sigma = (x.var(-1, unbiased=False, keepdim=True) + model.norm_f.eps).sqrt()  # (B, T, 1)
    direct = (_centred(parts) / sigma[..., None]) @ _unembedding(model)  # (B, T, C - 1, V)
    bias = (model.norm_f.bias @ model.unembed.weight.T).expand(B, T, 1, -1)  # (B, T, 1, V)
    names = ["embedding", "positions"]
    names += [f"L{l + 1}H{h + 1}" for l in range(model.config.n_layers) for h in range(H)]
    return torch.cat([direct, bias], dim=2), names + ["bias"]


def _centred(W: torch.Tensor) -> torch.Tensor:
    """W with the mean of each row over the model's width removed, as the next LayerNorm removes it."""
    return W - W.mean(dim=-1, keepdim=True)


def _embedding(model: AttentionOnly) -> torch.Tensor:
    """The token embedding E, centred: (V, D)."""
    return _centred(model.embed.weight).detach()


def _unembedding(model: AttentionOnly) -> torch.Tensor:
    """The unembedding with the final norm's scale folded in, U = diag(gamma_f) W_U^T: (D, V)."""
    return (model.norm_f.weight[:, None] * model.unembed.weight.T).detach()


# --- checks ----------------------------------------------------------------------------------------------


def _check_model(model) -> None:
    _checks.instance("model", model, AttentionOnly, "an interpret.AttentionOnly (attention layers only)")


def _check_head(model, layer, head, **_) -> None:
    """An attention-only model and one of its heads."""
    _check_model(model)
    _check_heads("layer and head", [(layer, head)], model)


def _check_qk(model, layer, head, keys_through, **_) -> None:
    """A head; ``keys_through``, if given, a head of an earlier layer."""
    _check_head(model, layer, head)
    if keys_through is not None:
        _, ((earlier, _),) = _check_heads("keys_through", [keys_through], model)
        if earlier >= layer:
            raise ValueError(f"keys_through must be a head of a layer before layer {layer}, got layer {earlier}")


def _check_circuit(circuit, **_) -> None:
    """A finite square floating matrix of at least one row."""
    _checks.tensor("circuit", circuit, ndim=2, floating=True)
    if circuit.shape[0] != circuit.shape[1] or circuit.shape[0] == 0:
        raise ValueError(f"circuit must be a square matrix (V, V), got shape {_checks.shape_str(circuit.shape)}")
    if not torch.isfinite(circuit).all():
        raise ValueError("circuit must be finite: it holds a NaN or an infinity")


def _check_pair(W_A, W_B, **_) -> None:
    """Two floating matrices (or batches of them) that can be multiplied, W_A W_B."""
    _checks.tensor("W_A", W_A, min_ndim=2, floating=True)
    _checks.tensor("W_B", W_B, min_ndim=2, floating=True)
    _checks.same_dtype(("W_A", W_A), ("W_B", W_B))
    if W_A.shape[-1] != W_B.shape[-2] or 0 in W_A.shape or 0 in W_B.shape:
        raise ValueError(
            f"W_A (..., D, D') and W_B (..., D', D'') must be non-empty and multiply, got shapes "
            f"{_checks.shape_str(W_A.shape)} and {_checks.shape_str(W_B.shape)}"
        )


def _check_composition(model, earlier, later, **_) -> None:
    """Two heads of the model, ``earlier`` in a layer before ``later``'s."""
    _check_model(model)
    _, ((first, _),) = _check_heads("earlier", [earlier], model)
    _, ((second, _),) = _check_heads("later", [later], model)
    if first >= second:
        raise ValueError(f"earlier must be a head of a layer before later's (layer {second}), got layer {first}")


def _check_random(d_model, d_head, samples, generator, **_) -> None:
    _checks.positive_int("d_model", d_model)
    _checks.positive_int("d_head", d_head)
    _checks.positive_int("samples", samples)
    _checks.generator("generator", generator)


def _check_dla(model, ids, **_) -> None:
    """An attention-only model and token ids (B, T) it can read."""
    _check_model(model)
    _check_ids("ids", ids, model.config.vocab_size, model.config.block_size)
