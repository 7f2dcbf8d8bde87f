"""A forward pass waits for the device at most twice (the check of the token ids), and never once per layer.

Counted on the CPU with a ``TorchDispatchMode``, which sees every operation a call runs: the operations whose
result Python needs as a value (``.item()``, ``int(t)``, ``bool(t)``: ``aten._local_scalar_dense``,
``aten.is_nonzero``, ``aten.item``) and those whose output shape depends on values (``aten.nonzero``). On a
GPU each of them stalls the launch queue until the device has caught up.
"""

import pytest
import torch
from attnbook import models, vit
from attnbook.attention import padding_mask
from torch.utils._python_dispatch import TorchDispatchMode

SYNCS = {
    torch.ops.aten._local_scalar_dense.default,
    torch.ops.aten.is_nonzero.default,
    torch.ops.aten.item.default,
    torch.ops.aten.nonzero.default,
}


class _Syncs(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func in SYNCS
        return func(*args, **(kwargs or {}))


def _syncs(fn) -> int:
    with _Syncs() as counter:
        fn()
    return counter.count


def _config(n_layers, **changes):
    return models.TransformerConfig(
        **{**dict(vocab_size=13, block_size=16, n_layers=n_layers, n_heads=2, d_model=16), **changes}
    )


def _calls(n_layers):
    """name -> (a call of a model with valid inputs, the most syncs it may make)."""
    torch.manual_seed(0)
    ids, tgt = torch.randint(13, (3, 10)), torch.randint(13, (3, 7))
    mask = padding_mask([10, 6, 3], 10)  # (B, 1, S)
    gpt = models.GPT(_config(n_layers))
    modern = models.GPT(_config(n_layers, norm="rmsnorm", mlp="swiglu", positional="rope", n_kv_heads=1))
    encoder = models.Encoder(_config(n_layers, norm_position="post"))
    translator = models.EncoderDecoder(_config(n_layers, norm_position="post"))
    classifier = vit.ViT(
        vit.ViTConfig(image_size=8, patch_size=4, in_channels=1, n_classes=3, d_model=16, n_layers=n_layers, n_heads=2)
    )
    images = torch.randn(3, 1, 8, 8)
    return {
        "GPT": (lambda: gpt(ids), 1),
        "GPT, its weights (the explicit path)": (lambda: gpt(ids, return_weights=True), 1),
        "GPT, a training step's loss and gradients": (lambda: gpt.loss(ids, ids).backward(), 2),
        "GPT with RoPE, GQA, RMSNorm and SwiGLU": (lambda: modern(ids), 1),
        "GPT with a KV cache": (lambda: modern(ids, caches=modern.new_caches()), 1),
        "Encoder with a padding mask": (lambda: encoder(ids, mask), 1),
        "EncoderDecoder with a padding mask": (lambda: translator(ids, tgt, mask), 2),
        "ViT": (lambda: classifier(images), 0),
    }


@pytest.mark.parametrize("name", list(_calls(1)))
def test_a_forward_pass_synchronises_at_most_twice_whatever_the_depth(name):
    counts = {}
    for n_layers in (2, 6):
        call, most = _calls(n_layers)[name]
        counts[n_layers] = _syncs(call)
    assert counts[2] == counts[6] <= most <= 2, f"{name}: {counts} host synchronisations for 2 and 6 layers"


def test_the_counter_sees_a_synchronisation():
    x = torch.randn(3)
    assert _syncs(lambda: x.sum().item()) == 1
    assert _syncs(lambda: bool(x.sum() > 0)) == 1
    assert _syncs(lambda: x.nonzero()) == 1
    assert _syncs(lambda: x * 2) == 0
