"""attnbook.interpret: every score and attribution against a reference computed another way (loops over the
positions, the model rebuilt from PyTorch's own layers, finite differences), the hooks against edited weights."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from attnbook import attribution, data, interpret, models
from torch import nn

V = 7


def attention_only(n_layers=2, n_heads=2, d_model=8, block_size=12, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    config = interpret.AttentionOnlyConfig(V, block_size, n_layers=n_layers, n_heads=n_heads, d_model=d_model)
    return interpret.AttentionOnly(config).to(dtype).eval()


def small_gpt(n_kv_heads=None, seed=0):
    torch.manual_seed(seed)
    config = models.TransformerConfig(
        vocab_size=V, block_size=12, n_layers=2, n_heads=2, d_model=8, n_kv_heads=n_kv_heads, bias=True
    )
    return models.GPT(config).double().eval()


def ids_of(B, T, seed=1):
    return torch.randint(V, (B, T), generator=torch.Generator().manual_seed(seed))


def causal_weights(B, H, T, seed=0):
    scores = torch.randn(B, H, T, T, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return torch.softmax(scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")), dim=-1)


# --- the model -------------------------------------------------------------------------------------------


def test_attention_only_equals_pytorch_layers_on_copied_weights():
    """The model, rebuilt from torch.nn.MultiheadAttention and torch.nn.LayerNorm with its weights, gives the
    same logits and weights: equation x_{l+1} = x_l + Attn(LN(x_l)), logits = LN_f(x_L) W_U."""
    model = attention_only(n_layers=3, n_heads=2, d_model=8)
    ids = ids_of(3, 10)
    T = ids.shape[1]
    x = model.embed.weight[ids] + model.positions.weight[:T]
    blocked = ~torch.ones(T, T, dtype=torch.bool).tril()  # PyTorch's convention: True = may not attend
    expected_weights = []
    for norm, layer in zip(model.norms, model.attns):
        theirs = nn.MultiheadAttention(8, 2, bias=False, batch_first=True).double()
        with torch.no_grad():
            theirs.in_proj_weight.copy_(torch.cat([layer.W_q.weight, layer.W_k.weight, layer.W_v.weight]))
            theirs.out_proj.weight.copy_(layer.W_o.weight)
        h = F.layer_norm(x, (8,), norm.weight, norm.bias)
        out, w = theirs(h, h, h, attn_mask=blocked, average_attn_weights=False)
        x = x + out
        expected_weights.append(w)
    expected = F.layer_norm(x, (8,), model.norm_f.weight, model.norm_f.bias) @ model.unembed.weight.T
    with torch.no_grad():
        logits, weights = model(ids, return_weights=True)
    torch.testing.assert_close(logits, expected.detach())
    for w, e in zip(weights, expected_weights):
        torch.testing.assert_close(w, e.detach())
    torch.testing.assert_close(model(ids), logits)  # the fast path (no weights) agrees


def test_attention_only_is_causal_and_refuses_bad_ids():
    model = attention_only()
    ids = ids_of(2, 9)
    changed = ids.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % V
    with torch.no_grad():
        torch.testing.assert_close(model(ids)[:, :5], model(changed)[:, :5])
    with pytest.raises(ValueError, match="idx has length T=13, longer than the model's block_size=12"):
        model(ids_of(1, 13))
    with pytest.raises(ValueError, match="idx must hold token ids in \\[0, 7\\)"):
        model(torch.full((1, 3), V))
    with pytest.raises(ValueError, match="d_model must be divisible by n_heads"):
        interpret.AttentionOnlyConfig(V, 8, n_heads=3, d_model=8)
    with pytest.raises(TypeError, match="config must be an interpret.AttentionOnlyConfig"):
        interpret.AttentionOnly(models.TransformerConfig(vocab_size=V))
    assert interpret.AttentionOnlyConfig(V, 8).replace(n_layers=1).n_layers == 1


# --- data and scores ------------------------------------------------------------------------------------


def test_repeated_tokens():
    g = torch.Generator().manual_seed(0)
    ids = interpret.repeated_tokens(50, 6, V, generator=g)
    assert ids.shape == (50, 12) and ids.min() >= 0 and ids.max() < V
    assert torch.equal(ids[:, :6], ids[:, 6:])
    assert any(len(set(row[:6].tolist())) < 6 for row in ids)  # drawn with replacement: repeats occur
    distinct = interpret.repeated_tokens(50, V, V, distinct=True, generator=g)
    assert all(sorted(row[:V].tolist()) == list(range(V)) for row in distinct)  # a permutation of the vocabulary
    again = interpret.repeated_tokens(50, 6, V, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again, ids)
    with pytest.raises(ValueError, match="half must be at most vocab_size=7 for distinct tokens"):
        interpret.repeated_tokens(2, 8, V, distinct=True)


def test_repeat_losses_against_a_loop_over_positions():
    ids = interpret.repeated_tokens(3, 5, V, generator=torch.Generator().manual_seed(2))
    logits = torch.randn(3, 10, V, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    first, repeat = [], []
    for b in range(3):
        for t in range(9):  # the prediction at t is of token t + 1
            loss = -torch.log_softmax(logits[b, t], -1)[ids[b, t + 1]]
            (first if t + 1 <= 5 else repeat).append(loss)
    got_first, got_repeat = interpret.repeat_losses(logits, ids)
    torch.testing.assert_close(got_first.double(), torch.stack(first).mean(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got_repeat.double(), torch.stack(repeat).mean(), rtol=1e-6, atol=1e-6)
    # a model that copies perfectly pays nothing on the repeat, and ln V on tokens it cannot know
    perfect = torch.zeros(3, 10, V, dtype=torch.float64)  # uniform, except a sure copy inside the repeat
    for t in range(5, 9):
        perfect[torch.arange(3), t, ids[:, t + 1]] = 1e4
    first, repeat = interpret.repeat_losses(perfect, ids)
    assert math.isclose(first.item(), math.log(V), rel_tol=1e-6) and repeat.item() < 1e-6
    with pytest.raises(ValueError, match="ids must be a batch of sequences of even length"):
        interpret.repeat_losses(logits[:, :9], ids[:, :9])


def test_prefix_matching_and_previous_token_scores_against_loops():
    B, H, L = 3, 4, 5
    w = causal_weights(B, H, 2 * L)
    prefix = torch.zeros(H, dtype=torch.float64)
    previous = torch.zeros(H, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for t in range(L, 2 * L):
                prefix[h] += w[b, h, t, t - L + 1] / (B * L)
            for t in range(1, 2 * L):
                previous[h] += w[b, h, t, t - 1] / (B * (2 * L - 1))
    torch.testing.assert_close(interpret.prefix_matching_score(w), prefix)
    torch.testing.assert_close(interpret.previous_token_score(w), previous)


def test_scores_of_hand_made_heads():
    L = 6
    T = 2 * L
    induction = torch.zeros(1, 1, T, T)
    induction[0, 0, :, 0] = 1.0  # the first half: anywhere allowed
    for t in range(L, T):
        induction[0, 0, t] = 0.0
        induction[0, 0, t, t - L + 1] = 1.0
    previous = torch.zeros(1, 1, T, T)
    previous[0, 0, 0, 0] = 1.0
    for t in range(1, T):
        previous[0, 0, t, t - 1] = 1.0
    uniform = torch.ones(T, T).tril()
    uniform = (uniform / uniform.sum(-1, keepdim=True))[None, None]
    assert interpret.prefix_matching_score(induction).item() == 1.0
    assert interpret.previous_token_score(previous).item() == 1.0
    assert interpret.prefix_matching_score(previous).item() == 0.0
    expected = sum(1 / (t + 1) for t in range(L, T)) / L  # about ln(2) / L
    assert math.isclose(interpret.prefix_matching_score(uniform).item(), expected, rel_tol=1e-6)
    with pytest.raises(ValueError, match="T = 2M, a half and its repeat"):
        interpret.prefix_matching_score(torch.ones(1, 1, 5, 5) / 5)


# --- interventions ----------------------------------------------------------------------------------------


def test_attention_layers_in_order():
    gpt = small_gpt()
    assert interpret.attention_layers(gpt) == [block.self_attn for block in gpt.blocks]
    model = attention_only(n_layers=3)
    assert interpret.attention_layers(model) == list(model.attns)
    gqa = small_gpt(n_kv_heads=1)  # grouped-query attention layers count too
    assert interpret.attention_layers(gqa) == [block.self_attn for block in gqa.blocks]


@pytest.mark.parametrize("make", [attention_only, small_gpt, lambda: small_gpt(n_kv_heads=1)], ids=["ao", "gpt", "gqa"])
def test_ablate_heads_equals_zeroing_the_columns_of_W_o(make):
    model = make()
    ids = ids_of(2, 9)
    with torch.no_grad():
        before = model(ids)
    for heads in ([(0, 1)], [(1, 0)], [(0, 0), (1, 1)], [(0, 0), (0, 1)]):
        edited = copy.deepcopy(model)
        layers = interpret.attention_layers(edited)
        for layer, head in heads:
            Dh = layers[layer].d_head
            with torch.no_grad():
                layers[layer].W_o.weight[:, head * Dh : (head + 1) * Dh] = 0.0
        with torch.no_grad(), interpret.ablate_heads(model, heads):
            got, weights = model(ids, return_weights=True)
            torch.testing.assert_close(got, edited(ids))
            torch.testing.assert_close(model(ids), got)  # the fast path too
        with torch.no_grad():
            torch.testing.assert_close(model(ids), before)  # the hook is gone after the block
    with pytest.raises(ValueError, match="heads names layer 2, head 0, but the model has 2 layers"):
        with interpret.ablate_heads(model, [(2, 0)]):
            pass
    with pytest.raises(TypeError, match="heads must be a list of \\(layer, head\\) pairs"):
        with interpret.ablate_heads(model, [1, 0]):
            pass
    with pytest.raises(ValueError, match="no attention layer"):
        with interpret.ablate_heads(nn.Linear(2, 2), [(0, 0)]):
            pass


def heads_by_hand(model, ids):
    """Each layer's heads side by side (the input of W_o), from an AttentionOnly model written out."""
    x = model.embed.weight[ids] + model.positions.weight[: ids.shape[1]]
    out = []
    for norm, attn in zip(model.norms, model.attns):
        h = F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias)
        _, w = attn(h, is_causal=True, return_weights=True)  # (B, H, T, T)
        B, T, D = h.shape
        v = attn.W_v(h).view(B, T, attn.n_heads, attn.d_head).transpose(1, 2)  # (B, H, T, Dh)
        z = (w @ v).transpose(1, 2).reshape(B, T, D)
        out.append(z)
        x = x + attn.W_o(z)
    return out


@pytest.mark.parametrize("make", [attention_only, small_gpt, lambda: small_gpt(n_kv_heads=1)], ids=["ao", "gpt", "gqa"])
def test_mean_ablation_equals_the_heads_columns_of_W_o_turned_into_a_bias(make):
    """Replacing head h's input of W_o by its mean m_h is W_o without the head's columns, plus a bias W_o[:, h] m_h."""
    model = make()
    ids = ids_of(3, 9)
    means = interpret.mean_heads(model, ids)
    if isinstance(model, interpret.AttentionOnly):
        for got, z in zip(means, heads_by_hand(model, ids)):
            torch.testing.assert_close(got, z.mean(dim=(0, 1)))
    with torch.no_grad():
        before = model(ids)
    for heads in ([(0, 1)], [(1, 0)], [(0, 0), (1, 1)]):
        edited = copy.deepcopy(model)
        layers = interpret.attention_layers(edited)
        for layer, head in heads:
            W_o, Dh = layers[layer].W_o, layers[layer].d_head
            cols = slice(head * Dh, (head + 1) * Dh)
            bias = W_o.weight[:, cols] @ means[layer][cols]
            new = nn.Linear(W_o.in_features, W_o.out_features).double()
            with torch.no_grad():
                new.weight.copy_(W_o.weight)
                new.weight[:, cols] = 0.0
                new.bias.copy_(bias + (W_o.bias if W_o.bias is not None else 0.0))
            layers[layer].W_o = new
        with torch.no_grad(), interpret.ablate_heads(model, heads, means=means):
            torch.testing.assert_close(model(ids), edited(ids))
        with torch.no_grad():
            torch.testing.assert_close(model(ids), before)  # the hook is gone after the block


def test_mean_ablation_changes_nothing_where_a_head_always_writes_its_mean():
    """On one position of identical sequences every head's output is its mean: mean-ablation is a no-op, while
    zero-ablation changes the output."""
    model = attention_only()
    ids = torch.full((4, 1), 3)
    means = interpret.mean_heads(model, ids)
    with torch.no_grad():
        before = model(ids)
        with interpret.ablate_heads(model, [(0, 0), (1, 1)], means=means):
            torch.testing.assert_close(model(ids), before)
        with interpret.ablate_heads(model, [(0, 0), (1, 1)]):
            assert not torch.allclose(model(ids), before)


def test_ablate_heads_refuses_bad_means():
    model = attention_only()
    means = interpret.mean_heads(model, ids_of(2, 5))
    with pytest.raises(TypeError, match="means must be a list of 2 tensors, one per attention layer"):
        with interpret.ablate_heads(model, [(0, 0)], means=means[:1]):
            pass
    with pytest.raises(ValueError, match="means\\[1\\] must have H \\* Dh = 8 entries"):
        with interpret.ablate_heads(model, [(0, 0)], means=[means[0], means[1][:4]]):
            pass
    with pytest.raises(ValueError, match="ids has length T=13"):
        interpret.mean_heads(model, ids_of(1, 13))


def naive_layer_output(layer, x, head, new_weights):
    """A self-attention layer by hand, with head ``head``'s causal weights replaced: out = W_o [A_h V_h]_h."""
    B, T, D = x.shape
    H, Dh = layer.n_heads, layer.d_head
    H_kv = getattr(layer, "n_kv_heads", H)
    q = layer.W_q(x).view(B, T, H, Dh).transpose(1, 2)
    k = layer.W_k(x).view(B, T, H_kv, Dh).transpose(1, 2).repeat_interleave(H // H_kv, 1)
    v = layer.W_v(x).view(B, T, H_kv, Dh).transpose(1, 2).repeat_interleave(H // H_kv, 1)
    heads = []
    for h in range(H):
        scores = (q[:, h] @ k[:, h].transpose(-2, -1)) / math.sqrt(Dh)
        w = torch.softmax(scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")), dim=-1)
        heads.append((new_weights if h == head else w) @ v[:, h])
    return layer.W_o(torch.cat(heads, dim=-1))


@pytest.mark.parametrize("make", [attention_only, small_gpt, lambda: small_gpt(n_kv_heads=1)], ids=["ao", "gpt", "gqa"])
def test_edit_attention_against_the_layer_by_hand(make):
    model = make()
    ids = ids_of(2, 8)
    T = ids.shape[1]
    layers = interpret.attention_layers(model)
    new = causal_weights(2, 1, T, seed=5)[:, 0]  # (B, T, T)
    inputs = {}
    hook = layers[1].register_forward_pre_hook(lambda m, args, kwargs: inputs.update(x=args[0]), with_kwargs=True)
    with torch.no_grad():
        before, before_weights = model(ids, return_weights=True)
        with interpret.edit_attention(model, 1, 0, lambda w: new):
            got, got_weights = model(ids, return_weights=True)
            fast = model(ids)
    hook.remove()
    torch.testing.assert_close(fast, got)
    torch.testing.assert_close(got_weights[1][:, 0], new)  # the edited weights are what the model reports
    torch.testing.assert_close(got_weights[0], before_weights[0])  # earlier layers are untouched
    # the edited layer's output, by hand, then the rest of the model
    with torch.no_grad():
        layer_out = naive_layer_output(layers[1], inputs["x"], 0, new)

        def replace(module, args, kwargs, output):
            return (layer_out, output[1]) if isinstance(output, tuple) else layer_out

        hook = layers[1].register_forward_hook(replace, with_kwargs=True)
        expected = model(ids)
        hook.remove()
    torch.testing.assert_close(got, expected)
    with torch.no_grad(), interpret.edit_attention(model, 0, 1, lambda w: w):
        torch.testing.assert_close(model(ids), before)  # the identity edit changes nothing
    with pytest.raises(ValueError, match="edit must return the head's weights"):
        with torch.no_grad(), interpret.edit_attention(model, 0, 0, lambda w: w[0]):
            model(ids)


def test_edit_attention_needs_self_attention():
    layer_model = nn.Sequential()
    layer_model.attn = interpret.AttentionOnly(interpret.AttentionOnlyConfig(V, 8)).attns[0]
    x = torch.randn(1, 4, 64)
    with pytest.raises(ValueError, match="self-attention layer called without key"):
        with interpret.edit_attention(layer_model, 0, 0, lambda w: w):
            layer_model.attn(x, x, x)


# --- attributions ----------------------------------------------------------------------------------------


def test_attention_rollout_against_a_loop():
    weights = [causal_weights(2, 3, 5, seed=s) for s in range(3)]
    T = 5
    expected = torch.zeros(2, T, T, dtype=torch.float64)
    for b in range(2):
        r = torch.eye(T, dtype=torch.float64)
        for w in weights:
            a = torch.zeros(T, T, dtype=torch.float64)
            for i in range(T):
                for j in range(T):
                    a[i, j] = 0.5 * sum(w[b, h, i, j] for h in range(3)) / 3 + 0.5 * (i == j)
            r = a @ r
        expected[b] = r
    got = attribution.attention_rollout(weights)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got.sum(-1), torch.ones(2, T, dtype=torch.float64))  # rows sum to 1
    assert torch.all(got.triu(1) == 0)  # causal weights give a causal rollout
    with pytest.raises(TypeError, match="weights must be a non-empty list"):
        attribution.attention_rollout(weights[0])
    with pytest.raises(ValueError, match="must have the same shape"):
        attribution.attention_rollout([weights[0], weights[1][:, :2]])


@pytest.mark.parametrize("make", [attention_only, small_gpt], ids=["ao", "gpt"])
def test_gradient_x_input_against_finite_differences(make):
    """s_tj = e_j . d log p(y_t) / d e_j is the derivative of log p(y_t) when e_j is scaled by (1 + eps)."""
    model = make()
    ids, targets = ids_of(2, 6, seed=1), ids_of(2, 6, seed=2)
    got = attribution.gradient_x_input(model, ids, targets)
    embedding = model.embed if isinstance(model, interpret.AttentionOnly) else model.embed.token
    eps = 1e-5

    def log_probs(position, scale):
        def hook(module, args, output):
            output = output.clone()
            output[:, position] = output[:, position] * scale
            return output

        handle = embedding.register_forward_hook(hook)
        with torch.no_grad():
            logp = torch.log_softmax(model(ids), -1).gather(-1, targets[..., None])[..., 0]
        handle.remove()
        return logp  # (B, T)

    for j in range(6):
        derivative = (log_probs(j, 1 + eps) - log_probs(j, 1 - eps)) / (2 * eps)  # (B, T): every prediction t
        torch.testing.assert_close(got[:, :, j], derivative, atol=1e-6, rtol=1e-5)
    assert torch.all(got.triu(1) == 0)  # an input after the prediction does not reach it
    with pytest.raises(ValueError, match="ids and targets must have the same shape"):
        attribution.gradient_x_input(model, ids, targets[:, :5])
    with pytest.raises(TypeError, match="model must be an attnbook.models.GPT or an interpret.AttentionOnly"):
        attribution.gradient_x_input(nn.Linear(2, 2), ids, targets)


@pytest.mark.parametrize("make", [attention_only, small_gpt], ids=["ao", "gpt"])
def test_token_ablation_against_a_loop(make):
    model = make()
    ids, targets = ids_of(2, 6, seed=1), ids_of(2, 6, seed=2)
    replacement = (ids + 1) % V
    with torch.no_grad():
        base = torch.log_softmax(model(ids), -1).gather(-1, targets[..., None])[..., 0]
        expected = torch.zeros(2, 6, 6, dtype=torch.float64)
        for j in range(6):
            edited = ids.clone()
            edited[:, j] = replacement[:, j]
            after = torch.log_softmax(model(edited), -1).gather(-1, targets[..., None])[..., 0]
            expected[:, :, j] = base - after
    got = attribution.token_ablation(model, ids, targets, replacement)
    torch.testing.assert_close(got, expected)
    assert torch.all(got.triu(1) == 0)
    one = attribution.token_ablation(model, ids, targets, 3)  # one id for every position
    same = attribution.token_ablation(model, ids, targets, torch.full_like(ids, 3))
    torch.testing.assert_close(one, same)
    with pytest.raises(ValueError, match="replacement must be a token id in \\[0, 7\\)"):
        attribution.token_ablation(model, ids, targets, V)


# --- the lab's GPT ----------------------------------------------------------------------------------------


def test_the_shipped_lab_gpt_has_the_loss_it_was_saved_with():
    model, tokenizer = interpret.load_lab_gpt()
    saved = torch.load(data.packaged_dir() / interpret.LAB_GPT, weights_only=True)
    assert tokenizer.vocab_size == model.config.vocab_size == 65
    assert all(v.dtype == torch.float16 for v in saved["model"].values())  # half the size of float32
    splits = data.load_shakespeare()
    assert tokenizer.chars == splits.tokenizer.chars
    loss = models.evaluate_lm(model, splits.val)
    assert math.isclose(loss, saved["val_loss"], abs_tol=1e-6), (loss, saved["val_loss"])
    assert loss < 1.9  # the lab's recipe reaches below the target of the lab's benchmark


def test_load_lab_gpt_refuses_other_files(tmp_path):
    path = tmp_path / "other.pt"
    torch.save({"format": "something else"}, path)
    with pytest.raises(ValueError, match="is not a saved lab GPT"):
        interpret.load_lab_gpt(path)
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="is not a saved lab GPT"):
        interpret.load_lab_gpt(path)
    with pytest.raises(FileNotFoundError, match="path must be an existing file"):
        interpret.load_lab_gpt(tmp_path / "missing.pt")
