"""attnbook.circuits: a hand-built induction circuit with known circuits and scores, every circuit against the
model's own layers evaluated on the tokens, the logit attribution against a forward pass written out, and the
scores against their definitions computed another way (NumPy's eigenvalues, norms written out)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from attnbook import circuits, interpret

V, T = 5, 8  # the hand-built model's letters and positions


def orthonormal_directions(D, n, seed=0):
    """n orthonormal directions of R^D, each with mean 0 (LayerNorm's centring leaves them as they are)."""
    X = torch.randn(D, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    Q, _ = torch.linalg.qr(X - X.mean(dim=0))  # columns in the span of centred vectors: orthogonal to (1, ..., 1)
    return Q.T  # (n, D)


def hand_built(c=40.0):
    """A two-layer, one-head-per-layer induction model written by hand in three orthogonal subspaces of the
    stream: the letters (s_tok), the predecessors (s_prev) and the positions (s_pos).

    Layer 1 attends from t to t - 1 through the positions and writes the letter it reads into s_prev:
    W_QK1 = c sum_t s_pos_t s_pos_{t-1}^T, W_OV1 = sum_i s_tok_i s_prev_i^T. Layer 2 matches the query's letter
    against the predecessor written into the key and copies the key's letter: W_QK2 = c sum_i s_tok_i
    s_prev_i^T, W_OV2 = sum_i s_tok_i s_tok_i^T. The unembedding reads s_tok.
    """
    D = 2 * V + T + 2
    dirs = orthonormal_directions(D, 2 * V + T)
    s_tok, s_prev, s_pos = dirs[:V], dirs[V : 2 * V], dirs[2 * V :]  # (V, D), (V, D), (T, D)
    config = interpret.AttentionOnlyConfig(V, T, n_layers=2, n_heads=1, d_model=D)
    model = interpret.AttentionOnly(config).double().eval()
    eye = torch.eye(D, dtype=torch.float64)

    def set_head(layer, W_Q, W_K, W_V, W_O):  # row convention (D, Dh) and (Dh, D), Dh = D
        attn = model.attns[layer]
        with torch.no_grad():
            for linear, W in ((attn.W_q, W_Q), (attn.W_k, W_K), (attn.W_v, W_V), (attn.W_o, W_O)):
                linear.weight.copy_(W.T)

    e = eye[: max(V, T)]  # head-space directions
    set_head(
        0,
        c * s_pos[1:].T @ e[1:T],  # query t -> e_t
        s_pos[:-1].T @ e[1:T],  # key t - 1 -> e_t
        s_tok.T @ e[:V],
        e[:V].T @ s_prev,
    )
    set_head(1, c * s_tok.T @ e[:V], s_prev.T @ e[:V], s_tok.T @ e[:V], e[:V].T @ s_tok)
    with torch.no_grad():
        model.embed.weight.copy_(s_tok)
        model.positions.weight.copy_(s_pos)
        model.unembed.weight.copy_(s_tok)
    return model, c


def test_the_hand_built_model_is_an_induction_model():
    model, _ = hand_built()
    ids = interpret.repeated_tokens(16, T // 2, V, distinct=True, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits, weights = model(ids, return_weights=True)
    assert interpret.previous_token_score(weights[0]).item() > 0.95
    # every query of the repeat finds the letter after its earlier occurrence, but the first: position 0 has no
    # predecessor, attends to itself and so also holds its own letter as one, and that query splits in two
    M = T // 2
    assert interpret.prefix_matching_score(weights[1]).item() == pytest.approx(1 - 0.5 / M, abs=0.01)
    first, repeat = interpret.repeat_losses(logits, ids)
    assert repeat < first - 0.5


def test_circuits_of_the_hand_built_model_have_their_known_values():
    model, c = hand_built()
    eye = torch.eye(V, dtype=torch.float64)
    # the induction head's OV circuit is the identity: it copies every letter, and only it
    ov = circuits.ov_circuit(model, 1, 0)
    torch.testing.assert_close(ov, eye)
    assert circuits.diagonal_top1(ov).item() == 1.0
    assert circuits.copying_score(ov).item() == pytest.approx(1.0)
    # its queries ignore a key's own letter, and find the letter the previous-token head wrote into it
    torch.testing.assert_close(circuits.qk_circuit(model, 1, 0), torch.zeros(V, V, dtype=torch.float64))
    torch.testing.assert_close(circuits.qk_circuit(model, 1, 0, keys_through=(0, 0)), c * eye)
    # composition: K = |sum_i s_tok_i s_tok_i^T|_F / (sqrt(V) sqrt(V)) = 1 / sqrt(V); nothing through Q or V
    scores = circuits.composition_scores(model, (0, 0), (1, 0))
    assert scores["K"].item() == pytest.approx(1 / math.sqrt(V))
    assert scores["Q"].item() == pytest.approx(0.0, abs=1e-12)
    assert scores["V"].item() == pytest.approx(0.0, abs=1e-12)


def trained_like(seed=0, d_model=12, n_heads=3):
    """A random attention-only model with LayerNorm scales and biases away from 1 and 0."""
    torch.manual_seed(seed)
    config = interpret.AttentionOnlyConfig(7, 10, n_layers=2, n_heads=n_heads, d_model=d_model)
    model = interpret.AttentionOnly(config).double().eval()
    with torch.no_grad():
        for norm in [*model.norms, model.norm_f]:
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.normal_(0, 0.3)
    return model


def head_slice(attn, head):
    return slice(head * attn.d_head, (head + 1) * attn.d_head)


def test_ov_and_qk_circuits_equal_the_models_layers_evaluated_on_the_tokens():
    """Each token's centred embedding, scaled by the norm's gamma, through the layer's own nn.Linear modules:
    the head's values, its slice of W_o (centred), the final norm's gamma and the unembedding."""
    model = trained_like()
    E = model.embed.weight - model.embed.weight.mean(-1, keepdim=True)  # (V, D)
    for layer in range(2):
        attn, gamma = model.attns[layer], model.norms[layer].weight
        for head in range(3):
            rows = head_slice(attn, head)
            with torch.no_grad():
                heads = torch.zeros(7, 12, dtype=torch.float64)
                heads[:, rows] = attn.W_v(gamma * E)[:, rows]  # only this head's values reach W_o
                written = attn.W_o(heads)
                written = written - written.mean(-1, keepdim=True)  # (V, D)
                expected_ov = model.unembed(model.norm_f.weight * written)  # (V, V)
                q = attn.W_q(gamma * E)[:, rows]
                expected_qk = q @ attn.W_k(gamma * E)[:, rows].T
            torch.testing.assert_close(circuits.ov_circuit(model, layer, head), expected_ov)
            torch.testing.assert_close(circuits.qk_circuit(model, layer, head), expected_qk)
            if layer == 1:
                earlier = model.attns[0]
                for h1 in range(3):
                    with torch.no_grad():
                        heads = torch.zeros(7, 12, dtype=torch.float64)
                        r1 = head_slice(earlier, h1)
                        heads[:, r1] = earlier.W_v(model.norms[0].weight * E)[:, r1]
                        key = earlier.W_o(heads)
                        key = gamma * (key - key.mean(-1, keepdim=True))  # what the key of layer 2 reads
                        expected = q @ attn.W_k(key)[:, rows].T
                    torch.testing.assert_close(circuits.qk_circuit(model, 1, head, keys_through=(0, h1)), expected)


def test_composition_scores_equal_their_definition():
    model = trained_like()
    for h1 in range(3):
        for h2 in range(3):
            _, OV1 = circuits.head_circuits(model, 0, h1)
            QK2, OV2 = circuits.head_circuits(model, 1, h2)
            fro = lambda M: math.sqrt(float((M**2).sum()))  # noqa: E731
            got = circuits.composition_scores(model, (0, h1), (1, h2))
            assert got["Q"].item() == pytest.approx(fro(OV1 @ QK2) / (fro(OV1) * fro(QK2)))
            assert got["K"].item() == pytest.approx(fro(QK2 @ OV1.T) / (fro(OV1) * fro(QK2)))
            assert got["V"].item() == pytest.approx(fro(OV1 @ OV2) / (fro(OV1) * fro(OV2)))
    # 1 when W_A reads exactly what W_B writes (rank one, aligned), 0 when it reads nothing of it
    u, v, w = torch.randn(3, 6, dtype=torch.float64).unbind()
    assert circuits.composition_score(torch.outer(u, v), torch.outer(v, w)).item() == pytest.approx(1.0)
    v2 = torch.randn(6, dtype=torch.float64)
    v2 = v2 - (v2 @ v) / (v @ v) * v
    assert circuits.composition_score(torch.outer(u, v2), torch.outer(v, w)).item() == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="earlier must be a head of a layer before later's"):
        circuits.composition_scores(model, (1, 0), (1, 1))
    with pytest.raises(ValueError, match="keys_through must be a head of a layer before layer 0"):
        circuits.qk_circuit(model, 0, 0, keys_through=(0, 1))


def test_random_composition_score_is_the_mean_over_its_draws():
    got = circuits.random_composition_score(16, 4, samples=50, generator=torch.Generator().manual_seed(3))
    X = torch.randn(50, 4, 16, 4, generator=torch.Generator().manual_seed(3))
    scores = [circuits.composition_score(x[0] @ x[1].T, x[2] @ x[3].T) for x in X]
    assert got.item() == pytest.approx(torch.stack(scores).mean().item(), rel=1e-5)
    assert 0.0 < got.item() < 1.0
    # wider heads share more directions: the baseline grows with d_head / d_model
    wide = circuits.random_composition_score(16, 16, samples=50, generator=torch.Generator().manual_seed(3))
    assert wide > got


def test_diagonal_top1_and_copying_score():
    eye = torch.eye(6, dtype=torch.float64)
    cycle = eye.roll(1, dims=1)  # every row's largest entry off the diagonal
    assert circuits.diagonal_top1(eye).item() == 1.0 and circuits.diagonal_top1(cycle).item() == 0.0
    assert circuits.copying_score(eye).item() == pytest.approx(1.0)
    assert circuits.copying_score(-eye).item() == pytest.approx(-1.0)
    rotation = torch.tensor([[0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)  # eigenvalues +i and -i
    assert circuits.copying_score(rotation).item() == pytest.approx(0.0, abs=1e-12)
    M = torch.randn(9, 9, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    eig = np.linalg.eigvals(M.numpy())
    assert circuits.copying_score(M).item() == pytest.approx(eig.sum().real / np.abs(eig).sum())
    assert circuits.copying_score(M.float()).dtype == torch.float32
    with pytest.raises(ValueError, match="circuit must be a square matrix"):
        circuits.copying_score(torch.ones(2, 3))


def forward_by_hand(model, ids):
    """The model written out, one head at a time: every part of the last residual stream, and the logits."""
    B, T = ids.shape
    x = model.embed.weight[ids] + model.positions.weight[:T]
    parts = [model.embed.weight[ids], model.positions.weight[:T].expand(B, T, -1)]
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    for norm, attn in zip(model.norms, model.attns):
        h = F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias)
        layer_out = 0
        for head in range(attn.n_heads):
            rows = head_slice(attn, head)
            q, k, v = (W.weight[rows] for W in (attn.W_q, attn.W_k, attn.W_v))
            scores = (h @ q.T) @ (h @ k.T).transpose(1, 2) / math.sqrt(attn.d_head)
            w = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
            out = (w @ (h @ v.T)) @ attn.W_o.weight[:, rows].T  # (B, T, D)
            parts.append(out)
            layer_out = layer_out + out
        x = x + layer_out
    logits = F.layer_norm(x, x.shape[-1:], model.norm_f.weight, model.norm_f.bias) @ model.unembed.weight.T
    return parts, x, logits


def test_direct_logit_attribution_sums_to_the_logits_and_matches_each_head_by_hand():
    model = trained_like()
    ids = torch.randint(7, (3, 10), generator=torch.Generator().manual_seed(1))
    got, names = circuits.direct_logit_attribution(model, ids)
    assert names == ["embedding", "positions"] + [f"L{l}H{h}" for l in (1, 2) for h in (1, 2, 3)] + ["bias"]
    assert got.shape == (3, 10, len(names), 7)
    parts, x, logits = forward_by_hand(model, ids)
    torch.testing.assert_close(got.sum(dim=2), logits)
    with torch.no_grad():
        torch.testing.assert_close(got.sum(dim=2), model(ids))
    sigma = (x.var(-1, unbiased=False, keepdim=True) + model.norm_f.eps).sqrt()
    for c, part in enumerate(parts):
        expected = ((part - part.mean(-1, keepdim=True)) / sigma * model.norm_f.weight) @ model.unembed.weight.T
        torch.testing.assert_close(got[:, :, c], expected.detach())
    torch.testing.assert_close(got[:, :, -1], (model.norm_f.bias @ model.unembed.weight.T).expand(3, 10, 7).detach())


def test_circuits_refuse_other_models_and_heads():
    from attnbook import models

    gpt = models.GPT(models.TransformerConfig(vocab_size=7, block_size=8, n_layers=1, n_heads=2, d_model=8))
    with pytest.raises(TypeError, match="model must be an interpret.AttentionOnly"):
        circuits.ov_circuit(gpt, 0, 0)
    model = trained_like()
    with pytest.raises(ValueError, match="layer and head names layer 2, head 0"):
        circuits.ov_circuit(model, 2, 0)
    with pytest.raises(ValueError, match="ids has length T=11, longer than the model's block_size=10"):
        circuits.direct_logit_attribution(model, torch.zeros(1, 11, dtype=torch.long))
