"""Checkers for the lab: the pieces of a character-level GPT, each compared with the library on copied weights.

The learner's modules name their parameters as the book does (``W_q``, ``W_k``, ``W_v``, ``W_o``; ``norm_1``,
``attn``, ``norm_2``, ``W_1``, ``W_2``; ``tok_emb``, ``pos_emb``, ``blocks``, ``norm_f``, ``lm_head``); a checker
builds the library's version, gives it the learner's weights, and compares the outputs. Before copying, it
overwrites each of those weights with seeded random values (:func:`_randomise`), so that the learner's own
initialisation (zeros, a constant, the identity) cannot make a wrong forward agree with the reference.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import MultiHeadAttention
from ..blocks import EncoderBlock
from ..models import GPT, TransformerConfig
from . import ExerciseFailed, Mistake, Result, check_function

__all__ = ["check_causal_self_attention", "check_block", "check_mini_gpt", "check_next_token_probs", "check_generate"]

_NOT_ATTEMPTED = "not attempted yet: replace the `raise NotImplementedError` with your code."


def _seeded(seed: int):
    """Seed PyTorch's global generator inside a ``with`` block, leaving the learner's random state untouched."""
    from contextlib import contextmanager

    @contextmanager
    def block():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield

    return block()


def _build(exercise: str, make):
    """Construct the learner's module with seed 0, in eval mode; None when it is still the stub."""
    try:
        with _seeded(0):
            module = make()
    except NotImplementedError:
        return None
    except Exception as error:  # noqa: BLE001 - say what went wrong, without a traceback from inside torch
        message = f"{type(error).__name__}: {error}".splitlines()[0]
        raise ExerciseFailed(exercise, f"building your module raised {message}.") from None
    if not isinstance(module, nn.Module):
        raise ExerciseFailed(exercise, f"expected an nn.Module, got {type(module).__name__}")
    return module.eval()


def _linear(exercise: str, module, name: str, d_in: int, d_out: int) -> nn.Linear:
    layer = getattr(module, name, None)
    if not isinstance(layer, nn.Linear):
        raise ExerciseFailed(
            exercise,
            f"your module needs an attribute `{name}` = nn.Linear({d_in}, {d_out}); "
            f"the checker copies weights by these names.",
        )
    if (layer.in_features, layer.out_features) != (d_in, d_out):
        raise ExerciseFailed(
            exercise,
            f"`{name}` must map {d_in} features to {d_out}, got nn.Linear({layer.in_features}, {layer.out_features}).",
        )
    return layer


def _norm(exercise: str, module, name: str, d: int) -> nn.LayerNorm:
    layer = getattr(module, name, None)
    if not isinstance(layer, nn.LayerNorm) or tuple(layer.normalized_shape) != (d,):
        raise ExerciseFailed(exercise, f"your module needs an attribute `{name}` = nn.LayerNorm({d}).")
    return layer


def _has_bias(layer: nn.Linear) -> bool:
    return layer.bias is not None


def _separate(exercise: str, module, names: tuple[str, ...]) -> None:
    """The layers ``names`` of ``module`` are distinct modules with weights of their own: one layer assigned
    to two names (``self.W_k = self.W_q``) would pass a comparison on copied weights, since the reference
    then gets the shared weights twice."""
    seen: dict[int, str] = {}
    for name in names:
        layer = getattr(module, name)
        for p in layer.parameters():
            if p.data_ptr() in seen:
                raise ExerciseFailed(
                    exercise,
                    f"`{name}` shares its weights with `{seen[p.data_ptr()]}`: each needs a layer of its own "
                    f"(a new nn.{type(layer).__name__}), or the model computes, say, keys equal to its queries.",
                )
        for p in layer.parameters():
            seen[p.data_ptr()] = name


@torch.no_grad()
def _randomise(g: torch.Generator, *layers: nn.Module) -> None:
    """Overwrite, in place, the weights of the learner's layers that a checker copies by name with random values
    drawn from ``g`` (never from the learner's random state).

    A zero W_o or W_v silences the attention, zero W_q and W_k make every score equal, an identity W_o hides a
    missing projection, a zero position table hides missing positions, and LayerNorm's initial gain 1 and shift 0
    make two norms interchangeable; random values leave none of these blind spots. Linear layers get nn.Linear's
    own scale, U(-1/sqrt(in), 1/sqrt(in)); embeddings N(0, 1); norms gains in [0.5, 1.5] and shifts N(0, 0.2).
    Weights shared between layers (a tied lm_head) stay shared: they take the last value written.
    """
    for layer in layers:
        if isinstance(layer, nn.LayerNorm):
            weight, bias = layer.weight, layer.bias
            if weight is not None:
                weight.uniform_(0.5, 1.5, generator=g)
            if bias is not None:
                bias.normal_(0.0, 0.2, generator=g)
        elif isinstance(layer, nn.Linear):
            bound = layer.in_features**-0.5
            for p in (layer.weight, layer.bias):
                if p is not None:
                    p.uniform_(-bound, bound, generator=g)
        elif isinstance(layer, nn.Embedding):
            layer.weight.normal_(0.0, 1.0, generator=g)
        else:
            raise TypeError(f"cannot randomise a {type(layer).__name__}")


@torch.no_grad()
def _copy_attention(exercise: str, learner, target: MultiHeadAttention, d: int, g: torch.Generator) -> None:
    layers = [_linear(exercise, learner, name, d, d) for name in ("W_q", "W_k", "W_v", "W_o")]
    _separate(exercise, learner, ("W_q", "W_k", "W_v", "W_o"))
    _randomise(g, *layers)
    for name, src in zip(("W_q", "W_k", "W_v", "W_o"), layers):
        getattr(target, name).load_state_dict(src.state_dict())


def _inputs(d: int, shapes):
    g = torch.Generator().manual_seed(11)
    return [(torch.randn(B, T, d, generator=g),) for B, T in shapes]


# --- 1. causal self-attention ---------------------------------------------------------------------


def check_causal_self_attention(cls, d_model: int = 16, n_heads: int = 4) -> Result:
    """``cls(d_model, n_heads)`` is causal multi-head self-attention with W_q, W_k, W_v, W_o (nn.Linear)."""
    exercise = "causal self-attention"
    module = _build(exercise, lambda: cls(d_model, n_heads))
    if module is None:
        return Result(exercise, False, _NOT_ATTEMPTED)
    bias = _has_bias(_linear(exercise, module, "W_q", d_model, d_model))
    with _seeded(1):
        ref = MultiHeadAttention(d_model, n_heads, bias=bias).eval()
    _copy_attention(exercise, module, ref, d_model, torch.Generator().manual_seed(2))
    H, Dh = n_heads, d_model // n_heads

    def heads(x, W):
        B, T, _ = x.shape
        return W(x).view(B, T, H, Dh).transpose(1, 2)  # (B, H, T, Dh)

    def attend(x, *, causal=True, scale=None, dim=-1, split=None, project=True, future=False):
        B, T, D = x.shape
        if split == "no_transpose":
            q, k, v = (ref.W_q(x).view(B, H, T, Dh), ref.W_k(x).view(B, H, T, Dh), ref.W_v(x).view(B, H, T, Dh))
        else:
            q, k, v = heads(x, ref.W_q), heads(x, ref.W_k), heads(x, ref.W_v)
        s = q @ k.transpose(-2, -1) * (Dh**-0.5 if scale is None else scale)  # (B, H, T, T)
        if causal:
            ones = torch.ones(T, T, dtype=torch.bool)
            allowed = ones.triu() if future else ones.tril()  # upside down: j >= t instead of j <= t
            s = s.masked_fill(~allowed, float("-inf"))
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
    ]
    with torch.no_grad():
        return check_function(
            module,
            exercise=exercise,
            reference=lambda x: ref(x, is_causal=True),
            cases=_inputs(d_model, [(2, 5), (1, 8), (3, 1)]),
            mistakes=mistakes,
        )


# --- 2. the block ---------------------------------------------------------------------------------


@torch.no_grad()
def _copy_block(exercise: str, learner, target: EncoderBlock, d: int, d_ff: int, g: torch.Generator) -> None:
    attn = getattr(learner, "attn", None)
    if not isinstance(attn, nn.Module):
        raise ExerciseFailed(exercise, "your block needs an attribute `attn`, its CausalSelfAttention.")
    _copy_attention(exercise, attn, target.self_attn, d, g)
    pairs = [
        (_norm(exercise, learner, "norm_1", d), target.norm_1),
        (_norm(exercise, learner, "norm_2", d), target.norm_2),
        (_linear(exercise, learner, "W_1", d, d_ff), target.ffn.W_1),
        (_linear(exercise, learner, "W_2", d_ff, d), target.ffn.W_2),
    ]
    _separate(exercise, learner, ("norm_1", "norm_2"))
    _randomise(g, *(src for src, _ in pairs))
    for src, dst in pairs:
        dst.load_state_dict(src.state_dict())


def check_block(cls, d_model: int = 16, n_heads: int = 4, activation: str = "relu") -> Result:
    """``cls(d_model, n_heads)``: the pre-norm GPT block, x + attn(norm_1(x)), then + W_2(act(W_1(norm_2(.)))),
    with W_1 of width 4 d_model."""
    exercise = "the transformer block"
    module = _build(exercise, lambda: cls(d_model, n_heads))
    if module is None:
        return Result(exercise, False, _NOT_ATTEMPTED)
    w1 = _linear(exercise, module, "W_1", d_model, 4 * d_model)
    with _seeded(1):
        ref = EncoderBlock(
            d_model, n_heads, w1.out_features, mlp=activation, norm_position="pre", bias=_has_bias(w1)
        ).eval()
    _copy_block(exercise, module, ref, d_model, w1.out_features, torch.Generator().manual_seed(2))
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
    with torch.no_grad():
        return check_function(
            module,
            exercise=exercise,
            reference=lambda x: ref(x, is_causal=True),
            cases=_inputs(d_model, [(2, 5), (1, 7)]),
            mistakes=mistakes,
        )


# --- 3. the model ---------------------------------------------------------------------------------


def check_mini_gpt(cls, activation: str = "relu") -> Result:
    """``cls(vocab_size, block_size, d_model, n_heads, n_layers)``: logits (B, T, V) of a pre-norm GPT."""
    exercise = "the GPT model"
    V, T, D, H, L = 13, 8, 16, 4, 2
    module = _build(exercise, lambda: cls(V, T, D, H, L))
    if module is None:
        return Result(exercise, False, _NOT_ATTEMPTED)
    for name, rows in (("tok_emb", V), ("pos_emb", T)):
        emb = getattr(module, name, None)
        if not isinstance(emb, nn.Embedding) or tuple(emb.weight.shape) != (rows, D):
            raise ExerciseFailed(exercise, f"your model needs `{name}` = nn.Embedding({rows}, {D}).")
    blocks = getattr(module, "blocks", None)
    if not isinstance(blocks, nn.ModuleList) or len(blocks) != L:
        raise ExerciseFailed(
            exercise, f"your model needs `blocks` = nn.ModuleList of {L} Blocks (got {type(blocks).__name__})."
        )
    head = _linear(exercise, module, "lm_head", D, V)
    if head.weight is not module.tok_emb.weight:
        raise ExerciseFailed(
            exercise,
            "lm_head's weight must be tied to the token embedding's (weight tying, as the task asks): "
            "self.lm_head.weight = self.tok_emb.weight, one V x D matrix for both.",
        )
    if _has_bias(head):
        raise ExerciseFailed(exercise, f"lm_head has no bias: nn.Linear({D}, {V}, bias=False).")
    w1 = _linear(exercise, blocks[0], "W_1", D, 4 * D)
    config = TransformerConfig(
        vocab_size=V,
        block_size=T,
        n_layers=L,
        n_heads=H,
        d_model=D,
        d_ff=w1.out_features,
        mlp=activation,
        bias=_has_bias(w1),
        tie_weights=False,
    )
    with _seeded(1):
        ref = GPT(config).eval()
    weights = torch.Generator().manual_seed(2)
    with torch.no_grad():  # all four before copying any: a tied lm_head and tok_emb share one weight
        _randomise(weights, module.tok_emb, module.pos_emb, _norm(exercise, module, "norm_f", D), head)
        ref.embed.token.load_state_dict(module.tok_emb.state_dict())
        ref.embed.position.table.load_state_dict(module.pos_emb.state_dict())
        ref.lm_head.weight.copy_(head.weight)
        ref.norm_f.load_state_dict(module.norm_f.state_dict())
        for ours, theirs in zip(ref.blocks, blocks):  # one after the other: one Block repeated keeps the last
            _copy_block(exercise, theirs, ours, D, w1.out_features, weights)

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
    return result


# --- 4. sampling ----------------------------------------------------------------------------------


def _probs(logits, temperature=1.0, top_k=None):
    if top_k is not None:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.softmax(logits / temperature, dim=-1)


def check_next_token_probs(fn) -> Result:
    """``fn(logits, temperature, top_k)``: softmax(logits / τ) restricted to the k largest (top_k=None: all)."""
    g = torch.Generator().manual_seed(2)
    cases = [
        (torch.randn(2, 7, generator=g), 1.0, None),
        (torch.randn(3, 10, generator=g) * 2, 0.5, None),
        (torch.randn(2, 10, generator=g), 1.0, 3),
        (torch.randn(4, 6, generator=g), 2.0, 2),
        (torch.randn(2, 5, generator=g, dtype=torch.float64), 0.7, 2),  # float64 logits stay float64
    ]
    mistakes = [
        Mistake(
            "the logits are multiplied by the temperature; divide them: softmax(logits / τ).",
            lambda z, t, k: _probs(z * t * t, t, k),
        ),
        Mistake(
            "top_k is ignored: keep the k largest logits and set the others to -inf before the softmax.",
            lambda z, t, k: _probs(z, t, None),
        ),
        Mistake(
            "the k largest are kept after the softmax without renormalising: mask the logits (-inf) "
            "before the softmax so the kept probabilities sum to 1.",
            lambda z, t, k: (
                _probs(z, t, None)
                if k is None
                else _probs(z, t, None).masked_fill(z < torch.topk(z, k, -1).values[..., -1:], 0.0)
            ),
        ),
        Mistake(
            "the softmax is over the wrong axis: the probabilities of the V tokens must sum to 1 (dim=-1).",
            lambda z, t, k: torch.softmax(torch.log(_probs(z, 1.0, k)) / t, dim=0),
        ),
    ]
    return check_function(
        fn, exercise="next-token probabilities", reference=_probs, cases=cases, mistakes=mistakes, gradients=True
    )


def check_generate(fn, model: GPT | None = None) -> Result:
    """``fn(model, idx, max_new_tokens, block_size, temperature, top_k, generator)`` must append sampled tokens
    one at a time, cropping the context to block_size; with a seeded generator its draws are the reference's.
    """
    exercise = "generation"
    if model is None:
        with _seeded(3):
            model = GPT(TransformerConfig(vocab_size=13, block_size=6, n_layers=1, n_heads=2, d_model=16)).eval()
    T = model.config.block_size
    g = torch.Generator().manual_seed(4)
    cases = [  # (prompt, new tokens, temperature, top_k, the generator's seed)
        (torch.randint(13, (1, 3), generator=g), 5, 1.0, 1, 0),  # top_k=1: the most likely token
        (torch.randint(13, (2, T + 4), generator=g), 4, 1.0, None, 1),  # a prompt longer than block_size
        (torch.randint(13, (3, 2), generator=g), 6, 1.0, None, 2),  # sampled from every token
        (torch.randint(13, (2, 4), generator=g), 6, 2.0, 4, 3),  # a high temperature among the top 4
        (torch.randint(13, (2, 3), generator=g), 5, 0.5, None, 4),
    ]

    def run(idx, n, temperature, top_k, seed):
        generator = torch.Generator().manual_seed(seed)
        return fn(model, idx.clone(), n, T, temperature=temperature, top_k=top_k, generator=generator)

    run.__wrapped__ = fn  # so that an error's hint quotes the learner's line, not this one

    def sample(case, **changes):
        idx, n, temperature, top_k, seed = case
        options = {"temperature": temperature, "top_k": top_k, "generator": torch.Generator().manual_seed(seed)}
        return model.generate(idx, n, **(options | changes))

    def reference(*case):
        return sample(case)

    return check_function(
        run,
        exercise=exercise,
        reference=reference,
        cases=cases,
        mistakes=[
            Mistake(
                "only the new tokens are returned; return the prompt followed by them.",
                lambda *case: sample(case)[:, case[0].shape[1] :],
            ),
            Mistake(
                "your function always takes the most likely token: sample the next token with "
                "torch.multinomial(probs, 1, generator=generator), probs from next_token_probs(logits, "
                "temperature, top_k).",
                lambda *case: sample(case, temperature=0),
            ),
            Mistake(
                "the temperature is ignored: divide the logits by it (next_token_probs(logits, temperature, top_k)).",
                lambda *case: sample(case, temperature=1.0),
            ),
            Mistake(
                "top_k is ignored: keep only the k most likely tokens before sampling.",
                lambda *case: sample(case, top_k=None),
            ),
        ],
        error_hints=[
            (
                "longer than the model's block_size",
                "the context grows past block_size: feed the model only the last "
                "block_size tokens, idx[:, -block_size:].",
            )
        ],
    )
