"""attnbook.models: the config, GPT (causality, loss at init, counts, generation), the encoder-decoder, evaluation."""

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from attnbook import measure, models, positional
from attnbook.attention import padding_mask
from attnbook.models import GPT, EncoderDecoder, TransformerConfig
from hypothesis import given, settings
from hypothesis import strategies as st

TOL = dict(atol=1e-5, rtol=1e-4)


def tiny(**changes):
    return TransformerConfig(**{**dict(vocab_size=11, block_size=16, n_layers=2, n_heads=2, d_model=16), **changes})


def ids(B, T, V=11, seed=0):
    return torch.randint(V, (B, T), generator=torch.Generator().manual_seed(seed))


# --- the configuration ----------------------------------------------------------------------------


def test_config_is_frozen_and_fills_d_ff():
    config = tiny()
    assert config.d_ff == 64
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 32
    changed = config.replace(n_layers=3)
    assert changed.n_layers == 3 and config.n_layers == 2 and changed.d_ff == 64
    assert TransformerConfig(**config.to_dict()) == config


@pytest.mark.parametrize(
    "changes,match",
    [
        (dict(vocab_size=0), "vocab_size must be an integer >= 1"),
        (dict(d_model=10, n_heads=4), "d_model must be divisible by n_heads"),
        (dict(norm="batchnorm"), "norm must be one of"),
        (dict(norm_position="after"), "norm_position must be one of 'post', 'pre'"),
        (dict(mlp="swish"), "mlp must be one of"),
        (dict(positional="rotary-ish"), "positional must be one of"),
        (dict(init="zeros"), "init must be one of"),
        (dict(dropout=1.5), r"dropout must be in \[0, 1\)"),
    ],
)
def test_config_errors(changes, match):
    with pytest.raises(ValueError, match=match):
        tiny(**changes)


def test_model_needs_a_config():
    with pytest.raises(TypeError, match="TransformerConfig"):
        GPT({"vocab_size": 11})


# --- GPT ------------------------------------------------------------------------------------------


@settings(max_examples=min(15, settings.default.max_examples), deadline=None)
@given(T=st.integers(2, 16), t=st.integers(0, 15), seed=st.integers(0, 100))
def test_gpt_is_causal(T, t, seed):
    t = min(t, T - 1)
    torch.manual_seed(seed)
    model = GPT(tiny()).eval()
    x = ids(2, T, seed=seed)
    y = x.clone()
    y[:, t] = (y[:, t] + 1) % 11  # change token t: the logits before t must not move
    a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :t], b[:, :t], **TOL)
    assert not torch.allclose(a[:, t:], b[:, t:])


def test_gpt_loss_at_init_is_near_ln_vocab_and_it_overfits_one_batch():
    torch.manual_seed(0)
    model = GPT(tiny(vocab_size=65, block_size=8))
    x = ids(4, 8, V=65)
    y = torch.roll(x, -1, dims=1)
    loss0 = model.loss(x, y).item()
    assert abs(loss0 - math.log(65)) < 0.1
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        loss = model.loss(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1 * loss0


def gpt_parameter_formula(V, T, L, D, F_, bias=True, tied=True):
    """12 L D^2 for D_ff = 4D, written out: attention 4 D^2, FFN 2 D F, norms and biases, embeddings."""
    per_layer = 4 * D * D + 2 * D * F_ + (4 * D + F_ + D + 2 * 2 * D if bias else 2 * D)
    final_norm = 2 * D if bias else D
    return L * per_layer + final_norm + V * D * (1 if tied else 2) + T * D


@pytest.mark.parametrize(
    "changes",
    [
        dict(),
        dict(bias=False),
        dict(tie_weights=False),
        dict(d_ff=40),
        dict(n_layers=3, d_model=24, n_heads=3),
        dict(positional="sinusoidal"),
    ],
)
def test_parameter_count_formula(changes):
    c = tiny(**changes)
    model = GPT(c)
    T_table = c.block_size if c.positional == "learned" else 0
    assert measure.count_parameters(model) == gpt_parameter_formula(
        c.vocab_size, T_table, c.n_layers, c.d_model, c.d_ff, c.bias, c.tie_weights
    )


def test_tied_weights_are_one_tensor():
    model = GPT(tiny())
    assert model.lm_head.weight is model.embed.token.weight
    assert GPT(tiny(tie_weights=False)).lm_head.weight is not GPT(tiny(tie_weights=False)).embed.token.weight


def test_return_weights_matches_and_is_causal():
    model = GPT(tiny()).eval()
    x = ids(2, 9)
    logits, weights = model(x, return_weights=True)
    torch.testing.assert_close(logits, model(x), **TOL)
    assert len(weights) == 2 and weights[0].shape == (2, 2, 9, 9)
    assert all(torch.all(w.triu(1) == 0) for w in weights)


def test_generate_crops_long_contexts_and_greedy_is_argmax():
    torch.manual_seed(0)
    model = GPT(tiny(block_size=8)).eval()
    prompt = ids(1, 20)  # longer than block_size: cropped, not an error
    out = model.generate(prompt, 5, temperature=0)
    assert out.shape == (1, 25) and torch.equal(out[:, :20], prompt)
    # greedy by hand, cropping as documented
    seq = prompt.clone()
    for _ in range(5):
        nxt = model(seq[:, -8:])[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], 1)
    assert torch.equal(out, seq)
    assert torch.equal(model.generate(prompt, 5, top_k=1), out)  # top-1 sampling is greedy
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(model.generate(prompt[0], 6, generator=g1), model.generate(prompt[0], 6, generator=g2))
    assert model.training is False


def test_generate_with_top_k_stays_in_the_top_k():
    torch.manual_seed(1)
    model = GPT(tiny()).eval()
    prompt = ids(3, 4)
    logits = model(prompt)[:, -1]
    allowed = torch.topk(logits, 3, dim=-1).indices
    g = torch.Generator().manual_seed(0)
    for _ in range(10):
        nxt = model.generate(prompt, 1, top_k=3, generator=g)[:, -1]
        assert all(nxt[b] in allowed[b] for b in range(3))


def test_gpt_input_errors():
    model = GPT(tiny(block_size=8))
    with pytest.raises(ValueError, match="longer than the model's block_size=8"):
        model(ids(1, 9))
    with pytest.raises(ValueError, match=r"must hold token ids in \[0, 11\)"):
        model(torch.tensor([[1, 2, 11]]))
    with pytest.raises(TypeError, match="integer token ids"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="idx must have 2 dimensions"):
        model(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        model.generate(ids(1, 3), 2, temperature=-1.0)
    with pytest.raises(ValueError, match=r"must hold token ids in \[0, 11\)"):
        model.generate(torch.tensor([[1, 20]]), 2)


# --- positions ------------------------------------------------------------------------------------


def test_sinusoidal_positions_follow_the_formula_and_are_not_saved():
    pe = positional.SinusoidalPositions(50, 8)
    p, i = 17, 3
    assert math.isclose(pe(50)[p, 2 * i].item(), math.sin(p / 10000 ** (2 * i / 8)), abs_tol=1e-6)
    assert math.isclose(pe(50)[p, 2 * i + 1].item(), math.cos(p / 10000 ** (2 * i / 8)), abs_tol=1e-6)
    model = GPT(tiny(positional="sinusoidal"))
    assert not any("position" in k for k in model.state_dict())


# --- encoder-decoder ------------------------------------------------------------------------------


def test_encoder_decoder_shapes_padding_and_causality():
    torch.manual_seed(0)
    config = tiny(
        norm_position="post",
        mlp="relu",
        positional="sinusoidal",
        init="xavier",
        src_vocab_size=7,
        n_encoder_layers=1,
        scale_embeddings=True,
    )
    model = EncoderDecoder(config).eval()
    src, tgt = ids(2, 6, V=7), ids(2, 5)
    logits = model(src, tgt)
    assert logits.shape == (2, 5, 11)
    assert len(model.encoder.blocks) == 1 and len(model.decoder.blocks) == 2
    # a padded source gives the same outputs as the unpadded one
    padded = torch.cat([src[:1], ids(1, 3, V=7, seed=5)], dim=1)  # (1, 9): 3 padding positions
    torch.testing.assert_close(model(padded, tgt[:1], padding_mask([6], 9)), model(src[:1], tgt[:1]), **TOL)
    # decoder causality
    other = tgt.clone()
    other[:, 3] = (other[:, 3] + 1) % 11
    torch.testing.assert_close(model(src, other)[:, :3], logits[:, :3], **TOL)


def test_encoder_decoder_learns_to_copy_and_greedy_decoding_reproduces_teacher_forcing():
    torch.manual_seed(0)
    config = tiny(vocab_size=8, norm_position="post", mlp="relu", init="xavier", n_layers=1, d_model=32, n_heads=4)
    model = EncoderDecoder(config)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    bos, eos = 0, 1
    for _step in range(200):
        src = torch.randint(2, 8, (32, 5))
        tgt_in = torch.cat([torch.full((32, 1), bos), src], 1)
        tgt_out = torch.cat([src, torch.full((32, 1), eos)], 1)
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    src = torch.randint(2, 8, (16, 5), generator=torch.Generator().manual_seed(9))
    out = model.greedy_decode(src, bos=bos, eos=eos, max_len=8)
    assert (out[:, :5] == src).float().mean() > 0.95
    assert torch.all(out[:, 5] == eos)


# --- evaluation -----------------------------------------------------------------------------------


def test_evaluate_lm_predicts_every_token_once():
    torch.manual_seed(0)
    model = GPT(tiny(block_size=5)).eval()
    seq = torch.randint(11, (23,))
    # by hand: windows [0:5], [5:10], ..., the last one shorter
    total, count = 0.0, 0
    for s in range(0, 22, 5):
        x, y = seq[s : s + 5], seq[s + 1 : s + 6]
        x = x[: len(y)]
        total += F.cross_entropy(model(x[None])[0], y, reduction="sum").item()
        count += len(y)
    assert count == 22
    assert math.isclose(models.evaluate_lm(model, seq, batch_size=2), total / count, rel_tol=1e-5)
    parts = [models.lm_loss_sum(model, seq, shard=(r, 3)) for r in range(3)]
    assert sum(c for _, c in parts) == 22
    assert math.isclose(sum(t for t, _ in parts), total, rel_tol=1e-5)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        models.evaluate_lm(model, seq[:1])


def test_lm_loss_shape_errors():
    with pytest.raises(ValueError, match="disagree"):
        models.lm_loss(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))
