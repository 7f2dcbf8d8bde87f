"""Checkers for the lab: the pieces of a character-level GPT, each compared with the library on copied weights.

The modules (causal self-attention, the block, the model) are checked here, on the library's modules given the
learner's weights (:mod:`.lab_modules`); the sampling functions in :mod:`.lab_sampling`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import MultiHeadAttention
from ..blocks import EncoderBlock
from ..models import GPT, TransformerConfig
from . import ExerciseFailed, Mistake, Result, check_function
from .lab_modules import (
    NOT_ATTEMPTED,
    build,
    copy_attention,
    copy_block,
    has_bias,
    inputs,
    linear_layer,
    norm_layer,
    randomise,
    seeded,
)
from .lab_sampling import check_generate, check_next_token_probs

__all__ = ["check_causal_self_attention", "check_block", "check_mini_gpt", "check_next_token_probs", "check_generate"]


# --- 1. causal self-attention ---------------------------------------------------------------------


def check_causal_self_attention(cls, d_model: int = 16, n_heads: int = 4) -> Result:
    """``cls(d_model, n_heads)`` is causal multi-head self-attention with W_q, W_k, W_v, W_o (nn.Linear).

    Checked at (d_model, n_heads) and at 2 heads of width 6, where the number of heads and their width differ
    (at 16 and 4 both are 4, and a split with the two swapped would give the same result).
    """
    for size in dict.fromkeys([(d_model, n_heads), (12, 2)]):
        result = _check_attention(cls, *size)
        if not result.passed:
            return result
    return result


def _check_attention(cls, d_model: int, n_heads: int) -> Result:
    exercise = "causal self-attention"
    module = build(exercise, lambda: cls(d_model, n_heads))
    if module is None:
        return Result(exercise, False, NOT_ATTEMPTED)
    bias = has_bias(linear_layer(exercise, module, "W_q", d_model, d_model))
    with seeded(1):
        ref = MultiHeadAttention(d_model, n_heads, bias=bias).eval()
    copy_attention(exercise, module, ref, d_model, torch.Generator().manual_seed(2))
    H, Dh = n_heads, d_model // n_heads

    def heads(x, W):
        B, T, _ = x.shape
        return W(x).view(B, T, H, Dh).transpose(1, 2)  # (B, H, T, Dh)

    def attend(x, *, causal=True, scale=None, dim=-1, split=None, project=True, future=False, fill=float("-inf")):
        B, T, D = x.shape
        if split == "no_transpose":
            q, k, v = (ref.W_q(x).view(B, H, T, Dh), ref.W_k(x).view(B, H, T, Dh), ref.W_v(x).view(B, H, T, Dh))
        elif split == "swapped":  # H heads of width Dh read as Dh heads of width H
            q, k, v = (W(x).view(B, T, Dh, H).transpose(1, 2) for W in (ref.W_q, ref.W_k, ref.W_v))
        else:
            q, k, v = heads(x, ref.W_q), heads(x, ref.W_k), heads(x, ref.W_v)
        s = q @ k.transpose(-2, -1) * (Dh**-0.5 if scale is None else scale)  # (B, H, T, T)
        if causal:
            ones = torch.ones(T, T, dtype=torch.bool)
            allowed = ones.triu() if future else ones.tril()  # upside down: j >= t instead of j <= t
            s = s.masked_fill(~allowed, fill)
        w = torch.softmax(s, dim=dim)
        out = (w @ v).transpose(1, 2).reshape(B, T, D)
        return ref.W_o(out) if project else out

    mistakes = [
        Mistake(
            "the mask is missing: position t can see the future. Fill the scores above the diagonal "
            "with -inf before the softmax (e.g. with torch.ones(T, T).tril().bool() as 'may attend').",
            lambda x: attend(x, causal=False),
        ),
        Mistake(
            "the mask is upside down: position t may attend to j <= t (the lower triangle, tril), not to j >= t.",
            lambda x: attend(x, future=True),
        ),
        Mistake(
            "the scores are not scaled: divide q @ k^T by sqrt(Dh), the width of one head "
            "(d_model / n_heads), not of the whole model.",
            lambda x: attend(x, scale=1.0),
        ),
        Mistake(
            "the scores are divided by sqrt(d_model); each head has width Dh = d_model / n_heads, "
            "so divide by sqrt(Dh).",
            lambda x: attend(x, scale=d_model**-0.5),
        ),
        Mistake(
            "the softmax is over the wrong axis: each query's weights over the keys must sum to 1 (dim=-1).",
            lambda x: attend(x, dim=-2),
        ),
        Mistake(
            "the heads are split with view(B, H, T, Dh), which mixes positions and features; use "
            "view(B, T, H, Dh).transpose(1, 2).",
            lambda x: attend(x, split="no_transpose"),
        ),
        Mistake(
            "the heads are concatenated but not projected: apply W_o at the end.", lambda x: attend(x, project=False)
        ),
        Mistake(
            f"the number of heads and their width are swapped: with d_model = {d_model} and {H} heads, the split "
            f"is view(B, T, n_heads, d_model // n_heads) = view(B, T, {H}, {Dh}), {H} heads of width {Dh}.",
            lambda x: attend(x, split="swapped"),
        ),
        Mistake(
            "the future's scores are set to a finite number (-1e4): where the allowed scores are lower still "
            "(here they reach -1e6), the future gets the weight. Use float('-inf').",
            lambda x: attend(x, fill=-1e4),
        ),
    ]
    cases = inputs(d_model, [(2, 5), (1, 8), (3, 1)])
    options = {"exercise": exercise, "reference": lambda x: ref(x, is_causal=True), "mistakes": mistakes}
    check_function(module, cases=cases, gradients=True, **options)  # the lab trains it: its gradient counts
    # large activations, scores near +-1e6: their values only, since float32's gradients there are noise
    return check_function(module, cases=[(cases[0][0] * 1000,)], first_case=len(cases) + 1, **options)


# --- 2. the block ---------------------------------------------------------------------------------


def check_block(cls, d_model: int = 16, n_heads: int = 4, activation: str = "relu") -> Result:
    """``cls(d_model, n_heads)``: the pre-norm GPT block, x + attn(norm_1(x)), then + W_2(act(W_1(norm_2(.)))),
    with W_1 of width 4 d_model."""
    exercise = "the transformer block"
    module = build(exercise, lambda: cls(d_model, n_heads))
    if module is None:
        return Result(exercise, False, NOT_ATTEMPTED)
    w1 = linear_layer(exercise, module, "W_1", d_model, 4 * d_model)
    with seeded(1):
        ref = EncoderBlock(
            d_model, n_heads, w1.out_features, mlp=activation, norm_position="pre", bias=has_bias(w1)
        ).eval()
    copy_block(exercise, module, ref, d_model, w1.out_features, torch.Generator().manual_seed(2))
    act = {"relu": F.relu, "gelu": F.gelu}[activation]
    other = {"relu": F.gelu, "gelu": F.relu}[activation]
    attn = lambda h: ref.self_attn(h, is_causal=True)  # noqa: E731
    ffn = lambda h, a=act: ref.ffn.W_2(a(ref.ffn.W_1(h)))  # noqa: E731
    n1, n2 = ref.norm_1, ref.norm_2
    mistakes = [
        Mistake(
            "this is the post-norm (2017) block; the lab's GPT normalises at the entrance of each branch: "
            "x = x + attn(norm_1(x)), then x = x + ffn(norm_2(x)).",
            lambda x: (lambda z: n2(z + ffn(z)))(n1(x + attn(x))),
        ),
        Mistake(
            "a residual connection is missing: each sub-layer adds its output to its input, x = x + ....",
            lambda x: (lambda z: ffn(n2(z)))(x + attn(n1(x))),
        ),
        Mistake(
            "the attention's residual connection is missing: x = x + attn(norm_1(x)).",
            lambda x: (lambda z: z + ffn(n2(z)))(attn(n1(x))),
        ),
        Mistake(
            "the norms are swapped: norm_1 goes with the attention, norm_2 with the feed-forward network.",
            lambda x: (lambda z: z + ffn(n1(z)))(x + attn(n2(x))),
        ),
        Mistake(
            f"the feed-forward network uses the wrong non-linearity: this lab's model uses {activation}.",
            lambda x: (lambda z: z + ffn(n2(z), other))(x + attn(n1(x))),
        ),
        Mistake(
            "the attention in the block is not causal: pass the causal mask (or use your "
            "CausalSelfAttention, checked above).",
            lambda x: (lambda z: z + ffn(n2(z)))(x + ref.self_attn(n1(x))),
        ),
    ]
    return check_function(
        module,
        exercise=exercise,
        reference=lambda x: ref(x, is_causal=True),
        cases=inputs(d_model, [(2, 5), (1, 7)]),
        mistakes=mistakes,
        gradients=True,  # the lab trains it: its gradient must reach the input
    )


# --- 3. the model ---------------------------------------------------------------------------------


def check_mini_gpt(cls, activation: str = "relu") -> Result:
    """``cls(vocab_size, block_size, d_model, n_heads, n_layers)``: logits (B, T, V) of a pre-norm GPT."""
    exercise = "the GPT model"
    V, T, D, H, L = 13, 8, 16, 4, 2
    module = build(exercise, lambda: cls(V, T, D, H, L))
    if module is None:
        return Result(exercise, False, NOT_ATTEMPTED)
    for name, rows in (("tok_emb", V), ("pos_emb", T)):
        emb = getattr(module, name, None)
        if not isinstance(emb, nn.Embedding) or tuple(emb.weight.shape) != (rows, D):
            raise ExerciseFailed(exercise, f"your model needs `{name}` = nn.Embedding({rows}, {D}).")
    blocks = getattr(module, "blocks", None)
    if not isinstance(blocks, nn.ModuleList) or len(blocks) != L:
        raise ExerciseFailed(
            exercise, f"your model needs `blocks` = nn.ModuleList of {L} Blocks (got {type(blocks).__name__})."
        )
    head = linear_layer(exercise, module, "lm_head", D, V)
    if head.weight is not module.tok_emb.weight:
        raise ExerciseFailed(
            exercise,
            "lm_head's weight must be tied to the token embedding's (weight tying, as the task asks): "
            "self.lm_head.weight = self.tok_emb.weight, one V x D matrix for both.",
        )
    if has_bias(head):
        raise ExerciseFailed(exercise, f"lm_head has no bias: nn.Linear({D}, {V}, bias=False).")
    w1 = linear_layer(exercise, blocks[0], "W_1", D, 4 * D)
    config = TransformerConfig(
        vocab_size=V,
        block_size=T,
        n_layers=L,
        n_heads=H,
        d_model=D,
        d_ff=w1.out_features,
        mlp=activation,
        bias=has_bias(w1),
        tie_weights=False,
    )
    with seeded(1):
        ref = GPT(config).eval()
    weights = torch.Generator().manual_seed(2)
    with torch.no_grad():  # all four before copying any: a tied lm_head and tok_emb share one weight
        randomise(weights, module.tok_emb, module.pos_emb, norm_layer(exercise, module, "norm_f", D), head)
        ref.embed.token.load_state_dict(module.tok_emb.state_dict())
        ref.embed.position.table.load_state_dict(module.pos_emb.state_dict())
        ref.lm_head.weight.copy_(head.weight)
        ref.norm_f.load_state_dict(module.norm_f.state_dict())
        for ours, theirs in zip(ref.blocks, blocks):  # one after the other: one Block repeated keeps the last
            copy_block(exercise, theirs, ours, D, w1.out_features, weights)

    def variant(idx, *, positions=True, final_norm=True, repeated=False):
        x = ref.embed.token(idx) + (ref.embed.position(idx.shape[1]) if positions else 0.0)
        for block in ref.blocks:
            x = (ref.blocks[-1] if repeated else block)(x, is_causal=True)
        return ref.lm_head(ref.norm_f(x) if final_norm else x)

    g = torch.Generator().manual_seed(5)
    cases = [(torch.randint(V, (2, T), generator=g),), (torch.randint(V, (1, 3), generator=g),)]
    mistakes = [
        Mistake(
            "the position embeddings are not added: x = tok_emb(idx) + pos_emb(torch.arange(T)).",
            lambda idx: variant(idx, positions=False),
        ),
        Mistake(
            "the final LayerNorm is missing: logits = lm_head(norm_f(x)).", lambda idx: variant(idx, final_norm=False)
        ),
        Mistake(
            "every layer is the same Block: nn.ModuleList([Block(...)] * n_layers) repeats one module "
            "(and its weights); build a new Block for each layer, nn.ModuleList(Block(...) for _ in "
            "range(n_layers)).",
            lambda idx: variant(idx, repeated=True),
        ),
    ]
    with torch.no_grad():
        result = check_function(
            module,
            exercise=exercise,
            reference=ref,
            cases=cases,
            mistakes=mistakes,
            error_hints=[
                (
                    "index out of range",
                    "the position embedding is indexed with torch.arange(T), the length of this input, not block_size.",
                )
            ],
        )
    with torch.enable_grad():  # the lab trains it: its logits must depend on its weights through autograd
        logits = module(cases[0][0])
    if isinstance(logits, torch.Tensor) and not logits.requires_grad:
        raise ExerciseFailed(
            exercise,
            "your logits carry no gradient: training could not update the model's weights. Remove the "
            "torch.no_grad() (or the .detach()) from forward; generation needs no_grad, the model does not.",
            "gradient",
        )
    return result
