"""models.GPT.from_hf: the book's GPT with Hugging Face GPT-2 weights gives GPT-2's logits (no download)."""

import pytest
import torch
from attnbook import blocks, models
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model
from transformers.activations import NewGELUActivation


def random_gpt2(**changes):
    """A small GPT-2 with random weights, made larger than at initialisation so that every detail shows."""
    settings = dict(vocab_size=97, n_positions=24, n_embd=32, n_layer=3, n_head=4, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**{**settings, **changes})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model


def test_gelu_tanh_is_gpt2s_gelu_new():
    x = torch.linspace(-6, 6, 1001)
    ffn = blocks.make_mlp("gelu_tanh", 1, 1)
    with torch.no_grad():
        ffn.W_1.weight.fill_(1.0), ffn.W_1.bias.zero_(), ffn.W_2.weight.fill_(1.0), ffn.W_2.bias.zero_()
        torch.testing.assert_close(ffn(x[:, None])[:, 0], NewGELUActivation()(x))
    assert models.TransformerConfig(vocab_size=5).mlp == "gelu"  # the default is unchanged


@pytest.mark.parametrize("changes", [{}, {"n_inner": 48}, {"layer_norm_epsilon": 1e-3}])
def test_equal_logits_with_huggingface_gpt2(changes):
    hf = random_gpt2(**changes)
    ours = models.GPT.from_hf(hf)
    ids = torch.randint(0, 97, (3, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected, got = hf(ids).logits, ours(ids)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert ours.config.mlp == "gelu_tanh" and ours.config.eps == hf.config.layer_norm_epsilon
    assert ours.lm_head.weight is ours.embed.token.weight


def test_from_a_state_dict_with_or_without_the_transformer_prefix():
    hf = random_gpt2()
    ids = torch.randint(0, 97, (2, 10))
    with torch.no_grad():
        expected = hf(ids).logits
        for state in (
            hf.state_dict(),
            GPT2Model(hf.config).state_dict()
            | {k[len("transformer.") :]: v for k, v in hf.state_dict().items() if k.startswith("transformer.")},
        ):
            torch.testing.assert_close(models.GPT.from_hf(state, n_heads=4)(ids), expected, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="n_heads must be given"):
        models.GPT.from_hf(hf.state_dict())


def test_every_detail_matters():
    """Exact GELU instead of tanh, or Conv1D weights not transposed, would give other logits."""
    hf = random_gpt2()
    ids = torch.randint(0, 97, (2, 16))
    ours = models.GPT.from_hf(hf)
    exact = models.GPT(ours.config.replace(mlp="gelu")).eval()
    exact.load_state_dict(ours.state_dict())
    with torch.no_grad():
        assert (exact(ids) - hf(ids).logits).abs().max() > 1e-3
        ours.blocks[0].ffn.W_1.weight.copy_(
            hf.transformer.h[0].mlp.c_fc.weight.reshape(ours.blocks[0].ffn.W_1.weight.shape)
        )
        assert (ours(ids) - hf(ids).logits).abs().max() > 1e-3


def test_generation_matches_huggingface_greedy():
    hf = random_gpt2()
    ours = models.GPT.from_hf(hf)
    prompt = torch.tensor([[5, 17, 42]])
    theirs = hf.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(ours.generate(prompt, 8, temperature=0), theirs)


def test_unsupported_configs_are_refused():
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        models.GPT.from_hf(random_gpt2(scale_attn_by_inverse_layer_idx=True))
    with pytest.raises(ValueError, match="activation_function"):
        models.GPT.from_hf(random_gpt2(activation_function="relu"))
    with pytest.raises(TypeError, match="source must be"):
        models.GPT.from_hf(3)
    with pytest.raises(ValueError, match="not a GPT-2 state dict"):
        models.GPT.from_hf({"weight": torch.zeros(2)}, n_heads=1)
