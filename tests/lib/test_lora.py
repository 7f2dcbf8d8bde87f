"""LoRA: zero-initialised B changes nothing, merged weights equal the adapter, r (d_in + d_out) parameters."""

import pytest
import torch
from attnbook import lora, measure, models, pretrain
from torch import nn


def test_zero_b_gives_the_base_layer_exactly():
    torch.manual_seed(0)
    base = nn.Linear(12, 7)
    x = torch.randn(3, 5, 12)
    expected = base(x)
    layer = lora.LoRALinear(base, r=3)
    assert torch.equal(layer(x), expected)
    assert (layer.A != 0).any()  # A is random: the gradient of B is not zero from the start
    layer(x).sum().backward()
    assert layer.B.grad.abs().sum() > 0 and layer.base.weight.grad is None


def test_merged_weights_equal_the_adapter_output():
    torch.manual_seed(0)
    layer = lora.LoRALinear(nn.Linear(12, 7), r=3, alpha=6.0)
    with torch.no_grad():
        layer.B.normal_()
    x = torch.randn(4, 12)
    torch.testing.assert_close(layer.merged()(x), layer(x))
    torch.testing.assert_close(layer.weight, layer.base.weight + 2.0 * layer.B @ layer.A)
    assert torch.linalg.matrix_rank(layer.weight - layer.base.weight).item() <= 3


@pytest.mark.parametrize("d_in, d_out, r", [(12, 7, 3), (64, 64, 4), (32, 128, 1)])
def test_trainable_parameters_are_r_times_d_in_plus_d_out(d_in, d_out, r):
    layer = lora.LoRALinear(nn.Linear(d_in, d_out), r=r)
    assert measure.count_parameters(layer, trainable_only=True) == r * (d_in + d_out)


def test_add_lora_to_an_encoder_trains_only_the_adapters_and_merges_back():
    torch.manual_seed(0)
    config = models.TransformerConfig(vocab_size=30, block_size=8, n_layers=2, n_heads=2, d_model=16)
    clf = pretrain.SequenceClassifier(models.Encoder(config), 2)
    lora.freeze(clf.encoder)
    names = lora.add_lora(clf.encoder, ("W_q", "W_v"), r=2)
    assert names == [
        "blocks.0.self_attn.W_q",
        "blocks.0.self_attn.W_v",
        "blocks.1.self_attn.W_q",
        "blocks.1.self_attn.W_v",
    ]
    head = 16 * 2 + 2
    assert measure.count_parameters(clf, trainable_only=True) == 4 * 2 * (16 + 16) + head
    ids = torch.randint(0, 30, (5, 8))
    frozen = {k: v.clone() for k, v in clf.state_dict().items() if not k.endswith((".A", ".B"))}
    pretrain.fit_classifier(clf, ids, torch.full((5,), 8), torch.tensor([0, 1, 0, 1, 1]), steps=3, lr=1e-2)
    changed = [k for k, v in clf.state_dict().items() if k in frozen and not torch.equal(frozen[k], v)]
    assert changed == ["head.weight", "head.bias"]
    clf.eval()
    before = clf(ids)
    lora.merge_lora(clf)
    assert not any(isinstance(m, lora.LoRALinear) for m in clf.modules())
    torch.testing.assert_close(clf(ids), before)


def test_errors():
    with pytest.raises(TypeError, match="base must be a torch.nn.Linear"):
        lora.LoRALinear(nn.Conv1d(2, 2, 1))
    with pytest.raises(ValueError, match="r must be at most min"):
        lora.LoRALinear(nn.Linear(4, 3), r=5)
    with pytest.raises(ValueError, match="targets must name nn.Linear layers of the model"):
        lora.add_lora(nn.Sequential(nn.Linear(2, 2)), ("W_q",))
