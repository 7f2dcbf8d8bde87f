"""Hugging Face GPT-2 weights in the book's GPT: GPT-2 is the lab's GPT with a few choices fixed.

:func:`config_from_hf` reads a ``transformers`` ``GPT2Config`` as a :class:`~attnbook.models.TransformerConfig`;
:func:`from_hf` builds an :class:`~attnbook.models.GPT` with the weights of a GPT-2 model, its state dict or
a checkpoint name (``models.GPT.from_hf`` calls it). ``transformers`` is needed only for a checkpoint name.

Chapter: from text to tokens, and pretraining (13).
"""

from __future__ import annotations

import torch

from ._checks import checked_by
from .models import GPT, TransformerConfig

__all__ = ["config_from_hf", "from_hf"]

_GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}


@checked_by("_check_hf_config")
def config_from_hf(hf_config) -> TransformerConfig:
    """The :class:`TransformerConfig` of a Hugging Face ``GPT2Config``.

    GPT-2 is the library's GPT with: pre-norm LayerNorm (epsilon ``layer_norm_epsilon``), biases in every
    linear layer but the output one, the tanh approximation of GELU, learned positions, and an output layer
    tied to the token embedding. Options of GPT2Config that change the computation in other ways are refused.
    """
    return TransformerConfig(
        vocab_size=hf_config.vocab_size,
        block_size=hf_config.n_positions,
        n_layers=hf_config.n_layer,
        n_heads=hf_config.n_head,
        d_model=hf_config.n_embd,
        d_ff=hf_config.n_inner or 4 * hf_config.n_embd,
        dropout=0.0,
        bias=True,
        norm="layernorm",
        norm_position="pre",
        mlp=_GPT2_ACTIVATIONS[hf_config.activation_function],
        positional="learned",
        tie_weights=bool(getattr(hf_config, "tie_word_embeddings", True)),
        init="torch",
        eps=float(hf_config.layer_norm_epsilon),
    )


@torch.no_grad()
def from_hf(source, *, n_heads: int | None = None, eps: float = 1e-5, cls: type | None = None) -> GPT:
    """A :class:`GPT` with the weights of a Hugging Face GPT-2 model, state dict or checkpoint name.

    The mapping, layer by layer (GPT-2's names on the left):

    - ``wte`` -> ``embed.token``, ``wpe`` -> ``embed.position.table`` (learned positions);
    - ``h.i.ln_1``, ``h.i.ln_2`` -> ``blocks.i.norms.0``, ``.1``; ``ln_f`` -> ``norm_f``;
    - ``h.i.attn.c_attn`` -> ``W_q``, ``W_k``, ``W_v``: GPT-2's ``Conv1D`` computes x W + b with W of shape
      (in, out), the transpose of ``nn.Linear``'s (out, in) weight, and holds the three projections side by
      side, (D, 3D): split into three (D, D) blocks, each transposed;
    - ``h.i.attn.c_proj`` -> ``W_o``, ``h.i.mlp.c_fc`` -> ``ffn.W_1``, ``h.i.mlp.c_proj`` -> ``ffn.W_2``
      (transposed likewise);
    - ``lm_head`` is the token embedding (tied).

    Shapes:
        source's wte: (V, D), wpe: (block_size, D), c_attn.weight: (D, 3D), c_fc.weight: (D, F)
    """
    cls = GPT if cls is None else cls
    if isinstance(source, str):  # a checkpoint name: transformers downloads the model
        from transformers import GPT2LMHeadModel

        source = GPT2LMHeadModel.from_pretrained(source)
    state, config = _check_source(source, n_heads)  # GPT-2's weights by name, and the model's config if it has one
    if config is None:  # a state dict: the sizes are the weights' shapes
        n_layers = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("h."))
        (V, D), T = state["wte.weight"].shape, state["wpe.weight"].shape[0]
        tied = "lm_head.weight" not in state or torch.equal(state["lm_head.weight"], state["wte.weight"])
        config = TransformerConfig(
            vocab_size=V,
            block_size=T,
            n_layers=n_layers,
            n_heads=n_heads,
            d_model=D,
            d_ff=state["h.0.mlp.c_fc.weight"].shape[1],
            bias=True,
            norm_position="pre",
            mlp="gelu_tanh",
            positional="learned",
            tie_weights=tied,
            init="torch",
            eps=eps,
        )
    D = config.d_model
    ours = {
        "embed.token.weight": state["wte.weight"],
        "embed.position.table.weight": state["wpe.weight"],
        "norm_f.weight": state["ln_f.weight"],
        "norm_f.bias": state["ln_f.bias"],
        "lm_head.weight": state["wte.weight"] if config.tie_weights else state["lm_head.weight"],
    }
    for i in range(config.n_layers):
        h, b = f"h.{i}.", f"blocks.{i}."
        for name, w in zip(("W_q", "W_k", "W_v"), state[h + "attn.c_attn.weight"].split(D, dim=1)):  # 3 x (D, D)
            ours[b + f"self_attn.{name}.weight"] = w.t()  # Conv1D (in, out) -> Linear (out, in)
        for name, bias in zip(("W_q", "W_k", "W_v"), state[h + "attn.c_attn.bias"].split(D)):
            ours[b + f"self_attn.{name}.bias"] = bias
        for ours_name, theirs in (("self_attn.W_o", "attn.c_proj"), ("ffn.W_1", "mlp.c_fc"), ("ffn.W_2", "mlp.c_proj")):
            ours[b + ours_name + ".weight"] = state[h + theirs + ".weight"].t()
            ours[b + ours_name + ".bias"] = state[h + theirs + ".bias"]
        for j, ln in enumerate(("ln_1", "ln_2")):
            ours[b + f"norms.{j}.weight"] = state[h + ln + ".weight"]
            ours[b + f"norms.{j}.bias"] = state[h + ln + ".bias"]
    dtype = state["wte.weight"].dtype
    model = cls(config).to(dtype)
    model.load_state_dict({k: v.detach().clone() for k, v in ours.items()}, strict=True)
    if config.tie_weights:
        model.lm_head.weight = model.embed.token.weight
    return model.eval()


# --- input checks -----------------------------------------------------------------------------------------


def _check_hf_config(hf_config) -> None:
    """A GPT2Config whose options the library's GPT has."""
    if getattr(hf_config, "model_type", None) != "gpt2":
        raise ValueError(f"hf_config must be a GPT2Config, got model_type {getattr(hf_config, 'model_type', None)!r}")
    activation = hf_config.activation_function
    if activation not in _GPT2_ACTIVATIONS:
        raise ValueError(
            f"the GPT-2 activation_function must be one of {sorted(_GPT2_ACTIVATIONS)}, got {activation!r}"
        )
    if getattr(hf_config, "scale_attn_by_inverse_layer_idx", False) or not getattr(
        hf_config, "scale_attn_weights", True
    ):
        raise ValueError(
            "GPT2Config with scale_attn_by_inverse_layer_idx=True or scale_attn_weights=False "
            "scales attention differently from GPT-2 and has no counterpart here"
        )


def _check_source(source, n_heads) -> tuple[dict, TransformerConfig | None]:
    """A GPT-2 model or its state dict; return the state dict (without the "transformer." prefixes) and the
    model's configuration (None for a state dict, which then needs ``n_heads``)."""
    if hasattr(source, "config") and hasattr(source, "state_dict"):
        state, config = source.state_dict(), config_from_hf(source.config)
    elif isinstance(source, dict):
        state, config = source, None
    else:
        raise TypeError(
            f"source must be a transformers GPT-2 model, its state dict or a checkpoint name, "
            f"got {type(source).__name__}"
        )
    state = {(k[len("transformer.") :] if k.startswith("transformer.") else k): v for k, v in state.items()}
    for key in ("wte.weight", "wpe.weight", "ln_f.weight"):
        if key not in state:
            raise ValueError(f"source is not a GPT-2 state dict: it has no {key!r} (keys such as {sorted(state)[:4]})")
    if config is None and n_heads is None:
        raise ValueError("n_heads must be given with a state dict (the weights' shapes do not tell it)")
    return state, config
