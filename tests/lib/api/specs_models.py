"""API property specs: blocks, models and the vision transformer (the harness is in harness.py)."""

import torch
from attnbook import blocks, gpt2, models, vit, vit_experiment
from harness import Choice, Const, Ids, Int, Mask, Num, Obj, Tensor, _module, spec

# blocks ---------------------------------------------------------------------------------------------------

BLOCK = dict(B=(1, 3), T=(1, 4), S=(1, 4), H=(1, 2), Dh=(1, 3), variant=(0, 3))
VARIANTS = [
    dict(),
    dict(norm_position="pre", mlp="gelu"),
    dict(norm="rmsnorm", mlp="swiglu", norm_position="pre"),
    dict(mlp="moe", norm_position="pre"),
]


@spec("blocks.make_norm", blocks.make_norm, dict(D=(1, 6), kind=(0, 1)))
def _(s):
    return blocks.make_norm, dict(kind=Choice(["layernorm", "rmsnorm"][s.kind]), d_model=Int(s.D))


@spec("blocks.make_mlp", blocks.make_mlp, dict(D=(1, 6), F=(1, 6), kind=(0, 3)))
def _(s):
    return blocks.make_mlp, dict(
        kind=Choice(["relu", "gelu", "swiglu", "moe"][s.kind]), d_model=Int(s.D), d_ff=Int(s.F)
    )


@spec("blocks.FeedForward", blocks.FeedForward, dict(B=(1, 3), T=(1, 4), D=(1, 6), F=(1, 6)))
def _(s):
    return _module(lambda: blocks.FeedForward(s.D, s.F, activation="gelu")), dict(x=Tensor(s.B, s.T, s.D, seq=1))


@spec("blocks.ConvFeedForward", blocks.ConvFeedForward, dict(B=(1, 3), T=(1, 4), D=(1, 6), F=(1, 6)))
def _(s):
    return _module(lambda: blocks.ConvFeedForward(s.D, s.F)), dict(x=Tensor(s.B, s.T, s.D, seq=1))


@spec("blocks.RMSNorm", blocks.RMSNorm, dict(B=(1, 3), T=(1, 4), D=(1, 6)))
def _(s):
    return _module(lambda: blocks.RMSNorm(s.D)), dict(x=Tensor(s.B, s.T, s.D, seq=1))


@spec("blocks.SwiGLU", blocks.SwiGLU, dict(B=(1, 3), T=(1, 4), D=(1, 6), F=(1, 6)))
def _(s):
    return _module(lambda: blocks.SwiGLU(s.D, s.F)), dict(x=Tensor(s.B, s.T, s.D, seq=1))


@spec("blocks.MixtureOfExperts", blocks.MixtureOfExperts, dict(B=(1, 3), T=(1, 4), D=(1, 6), E=(1, 4)))
def _(s):
    return _module(lambda: blocks.MixtureOfExperts(s.D, 4, n_experts=s.E, top_k=1 + s.E // 2)), dict(
        x=Tensor(s.B, s.T, s.D, seq=1)
    )


@spec("blocks.EncoderBlock", blocks.EncoderBlock, {**BLOCK, "causal": (0, 1), "bias": (0, 1)}, nan_spreads=True)
def _(s):
    D = s.H * s.Dh
    return _module(lambda: blocks.EncoderBlock(D, s.H, 4, **VARIANTS[s.variant])), dict(
        x=Tensor(s.B, s.T, D, seq=1),
        mask=Mask(s.B, s.T, s.T),
        is_causal=Const(bool(s.causal)),
        score_bias=Tensor(s.B, s.T, s.T, seq=1) if s.bias else Const(None),
    )


@spec("blocks.EncoderStack", blocks.EncoderStack, {**BLOCK, "L": (1, 2), "bias": (0, 1)}, nan_spreads=True)
def _(s):
    D = s.H * s.Dh
    return _module(lambda: blocks.EncoderStack(D, s.H, s.L, 4, **VARIANTS[s.variant])), dict(
        x=Tensor(s.B, s.T, D, seq=1),
        mask=Mask(s.B, 1, s.T),
        score_bias=Tensor(s.B, s.H, s.T, s.T, seq=2) if s.bias else Const(None),
    )


def _naive_masked_mean(call, x, keep):
    """The mean of the kept tokens of each sequence, one sequence at a time (zeros when none is kept)."""
    return torch.stack(
        [
            x[b][keep[b]].mean(dim=0) if keep[b].any() else torch.zeros(x.shape[-1], dtype=x.dtype)
            for b in range(x.shape[0])
        ]
    )


@spec("blocks.masked_mean", blocks.masked_mean, dict(B=(1, 3), T=(1, 4), D=(1, 4)), reference=_naive_masked_mean)
def _(s):
    return blocks.masked_mean, dict(x=Tensor(s.B, s.T, s.D, seq=1), keep=Mask(s.B, s.T))


@spec("blocks.DecoderBlock", blocks.DecoderBlock, BLOCK, nan_spreads=True)
def _(s):
    D = s.H * s.Dh
    return _module(lambda: blocks.DecoderBlock(D, s.H, 4, **VARIANTS[s.variant])), dict(
        x=Tensor(s.B, s.T, D, seq=1),
        memory=Tensor(s.B, s.S, D, seq=1),
        mask=Mask(s.T, s.T),
        memory_mask=Mask(s.B, 1, s.S),
    )


@spec("blocks.register_moe", blocks.register_moe, dict(E=(1, 4), k=(1, 4)))
def _(s):
    return blocks.register_moe, dict(n_experts=Int(max(s.E, s.k)), top_k=Int(s.k), expert=Choice("relu"))


@spec("blocks.moe_aux_loss", blocks.moe_aux_loss, dict(B=(1, 3), T=(1, 4)))
def _(s):
    model = _module(lambda: models.GPT(_config(mlp="moe")))
    with torch.no_grad():
        model(torch.randint(11, (s.B, s.T)))  # the routing statistics of one batch
    return blocks.moe_aux_loss, dict(model=Obj(model))


# models ---------------------------------------------------------------------------------------------------


def _config(**changes):
    return models.TransformerConfig(
        **{**dict(vocab_size=11, block_size=6, n_layers=1, n_heads=2, d_model=8, d_ff=8), **changes}
    )


MODEL = dict(B=(1, 3), T=(1, 6), S=(1, 6), variant=(0, 2))
MODEL_VARIANTS = [
    dict(),
    dict(norm_position="post", positional="sinusoidal"),
    dict(norm="rmsnorm", mlp="swiglu", positional="rope", n_kv_heads=1),
]


@spec("models.TransformerConfig", models.TransformerConfig, dict(V=(1, 20), L=(1, 3), H=(1, 3), Dh=(1, 3)))
def _(s):
    return models.TransformerConfig, dict(
        vocab_size=Int(s.V), n_layers=Int(s.L), n_heads=Int(s.H), d_model=Int(s.H * s.Dh), norm=Choice("rmsnorm")
    )


@spec("models.Encoder", models.Encoder, MODEL)
def _(s):
    return _module(lambda: models.Encoder(_config(**MODEL_VARIANTS[s.variant]))), dict(
        src=Ids(s.B, s.S, vocab=11), src_mask=Mask(s.B, 1, s.S)
    )


@spec("models.Decoder", models.Decoder, MODEL, nan_spreads=True)
def _(s):
    return _module(lambda: models.Decoder(_config(**MODEL_VARIANTS[s.variant]))), dict(
        tgt=Ids(s.B, s.T, vocab=11), memory=Tensor(s.B, s.S, 8, seq=1), memory_mask=Mask(s.B, 1, s.S)
    )


@spec("models.EncoderDecoder", models.EncoderDecoder, MODEL)
def _(s):
    return _module(lambda: models.EncoderDecoder(_config(**MODEL_VARIANTS[s.variant]))), dict(
        src=Ids(s.B, s.S, vocab=11), tgt=Ids(s.B, s.T, vocab=11), src_mask=Mask(s.B, 1, s.S)
    )


@spec("models.GPT", models.GPT, MODEL)
def _(s):
    return _module(lambda: models.GPT(_config(**MODEL_VARIANTS[s.variant]))), dict(idx=Ids(s.B, s.T, vocab=11))


@spec("models.GPT.generate", models.GPT.generate, {**MODEL, "new": (0, 4), "cache": (0, 1)}, half=False)
def _(s):
    model = _module(lambda: models.GPT(_config(**{**MODEL_VARIANTS[s.variant], "n_kv_heads": 1})))
    return model.generate, dict(
        idx=Ids(s.B, s.T, vocab=11), max_new_tokens=Int(s.new), temperature=Const(0.0), use_cache=Const(bool(s.cache))
    )


@spec("models.lm_loss", models.lm_loss, dict(B=(1, 3), T=(1, 4), V=(1, 6)))
def _(s):
    return models.lm_loss, dict(logits=Tensor(s.B, s.T, s.V, seq=1), targets=Ids(s.B, s.T, vocab=s.V))


@spec("models.lm_loss_sum", models.lm_loss_sum, dict(N=(2, 14), T=(1, 6), batch=(1, 3)))
def _(s):
    model = _module(lambda: models.GPT(_config()))
    return models.lm_loss_sum, dict(
        model=Obj(model), ids=Ids(s.N, vocab=11, batch=None), block_size=Int(s.T), batch_size=Int(s.batch)
    )


@spec("models.evaluate_lm", models.evaluate_lm, dict(N=(2, 14), T=(1, 6), batch=(1, 3)))
def _(s):
    model = _module(lambda: models.GPT(_config()))
    return models.evaluate_lm, dict(
        model=Obj(model), ids=Ids(s.N, vocab=11, batch=None), block_size=Int(s.T), batch_size=Int(s.batch)
    )


def _tiny_gpt2():
    """A small Hugging Face GPT-2 with random weights (no download)."""
    from transformers import GPT2Config, GPT2LMHeadModel  # imported here: only these specs need it

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=11, n_positions=6, n_embd=8, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config).eval()


@spec("gpt2.config_from_hf", gpt2.config_from_hf, dict(V=(2, 20), L=(1, 3)))
def _(s):
    from transformers import GPT2Config

    config = GPT2Config(vocab_size=s.V, n_layer=s.L, n_embd=8, n_head=2, bos_token_id=0, eos_token_id=0)
    return gpt2.config_from_hf, dict(hf_config=Obj(config))


@spec(
    "gpt2.from_hf",
    gpt2.from_hf,
    dict(B=(1, 3), T=(1, 6)),
    reference=lambda call, source, idx: source(idx).logits,
)
def _(s):
    def gpt2_logits(source, idx):  # the converted model's logits, against GPT-2's own
        return gpt2.from_hf(source)(idx)

    return gpt2_logits, dict(source=Obj(_tiny_gpt2()), idx=Ids(s.B, s.T, vocab=11))


# vit ------------------------------------------------------------------------------------------------------

IMG = dict(B=(1, 3), C=(1, 2), gh=(1, 3), gw=(1, 3), P=(1, 3))


def _vit_config(s, **changes):
    return vit.ViTConfig(
        **{
            **dict(
                image_size=(s.gh * 2, s.gw * 2),
                patch_size=2,
                in_channels=s.C,
                n_classes=3,
                d_model=8,
                n_layers=1,
                n_heads=2,
            ),
            **changes,
        }
    )


@spec("vit.grid_size", vit.grid_size, IMG)
def _(s):
    return vit.grid_size, dict(image_size=Int(s.gh * s.P), patch_size=Int(s.P))


@spec("vit.n_tokens", vit.n_tokens, IMG)
def _(s):
    return vit.n_tokens, dict(image_size=Int(s.gw * s.P), patch_size=Int(s.P), class_token=Const(bool(s.C - 1)))


@spec("vit.patchify", vit.patchify, IMG)
def _(s):
    return vit.patchify, dict(images=Tensor(s.B, s.C, s.gh * s.P, s.gw * s.P), patch_size=Int(s.P))


@spec("vit.unpatchify", vit.unpatchify, IMG)
def _(s):
    return vit.unpatchify, dict(
        patches=Tensor(s.B, s.gh * s.gw, s.C * s.P * s.P, seq=1),
        patch_size=Int(s.P),
        image_size=Const((s.gh * s.P, s.gw * s.P)),
        in_channels=Int(s.C),
    )


@spec("vit.LinearPatchEmbedding", vit.LinearPatchEmbedding, IMG)
def _(s):
    return _module(lambda: vit.LinearPatchEmbedding(s.C, s.P, 4)), dict(images=Tensor(s.B, s.C, s.gh * s.P, s.gw * s.P))


@spec("vit.ConvPatchEmbedding", vit.ConvPatchEmbedding, IMG)
def _(s):
    return _module(lambda: vit.ConvPatchEmbedding(s.C, s.P, 4)), dict(images=Tensor(s.B, s.C, s.gh * s.P, s.gw * s.P))


@spec("vit.ViTConfig", vit.ViTConfig, IMG)
def _(s):
    return vit.ViTConfig, dict(
        image_size=Int(s.gh * s.P),
        patch_size=Int(s.P),
        in_channels=Int(s.C),
        n_classes=Int(3),
        d_model=Int(8),
        n_layers=Int(1),
        n_heads=Int(2),
    )


@spec("vit.ViT", vit.ViT, {**IMG, "pool": (0, 1), "positions": (0, 2)})
def _(s):
    config = _vit_config(s, pool=vit.POOLS[s.pool], positions=vit.POSITIONS[s.positions])
    return _module(lambda: vit.ViT(config)), dict(
        images=Tensor(s.B, s.C, s.gh * 2, s.gw * 2), return_weights=Const(bool(s.pool))
    )


@spec(
    "vit.vit_parameter_count",
    vit.vit_parameter_count,
    IMG,
    reference=lambda call, config: {**call(config), "total": sum(p.numel() for p in vit.ViT(config).parameters())},
)
def _(s):
    return vit.vit_parameter_count, dict(config=Obj(_vit_config(s)))


@spec("vit.class_attention_maps", vit.class_attention_maps, IMG)
def _(s):
    T = s.gh * s.gw + 1
    return vit.class_attention_maps, dict(weights=Tensor(s.B, 2, T, T, seq=2), grid=Const((s.gh, s.gw)))


@spec("vit.attention_rollout", vit.attention_rollout, IMG)
def _(s):
    T = s.gh * s.gw + 1
    return vit.attention_rollout, dict(weights=Tensor(s.B, 2, T, T, seq=2), grid=Const((s.gh, s.gw)), residual=Num(0.5))


@spec("vit_experiment.SmallCNN", vit_experiment.SmallCNN, IMG)
def _(s):
    return _module(lambda: vit_experiment.SmallCNN(s.C, 3, widths=(4, 4))), dict(
        images=Tensor(s.B, s.C, s.gh * 2, s.gw * 2)
    )


@spec("vit_experiment.accuracy", vit_experiment.accuracy, IMG, half=False)
def _(s):
    return vit_experiment.accuracy, dict(
        model=Obj(_module(lambda: vit_experiment.SmallCNN(s.C, 3, widths=(4,)))),
        images=Tensor(s.B, s.C, s.gh * 2, s.gw * 2),
        labels=Ids(s.B, vocab=3, seq=None),
        batch_size=Int(2),
    )


@spec("vit_experiment.random_affine", vit_experiment.random_affine, IMG)
def _(s):
    def random_affine(images, rotate, shift, scale):  # the same random draws for the call and its reference
        return vit_experiment.random_affine(
            images, rotate=rotate, shift=shift, scale=scale, generator=torch.Generator().manual_seed(0)
        )

    return random_affine, dict(
        images=Tensor(s.B, s.C, s.gh * 2, s.gw * 2), rotate=Num(10.0), shift=Num(1.0), scale=Num(0.1)
    )
