"""What the lab's checkers share: building the learner's modules and giving their weights to the library's.

The learner's modules name their parameters as the book does (``W_q``, ``W_k``, ``W_v``, ``W_o``; ``norm_1``,
``attn``, ``norm_2``, ``W_1``, ``W_2``; ``tok_emb``, ``pos_emb``, ``blocks``, ``norm_f``, ``lm_head``); a checker
builds the library's version, gives it the learner's weights, and compares the outputs. Before copying, it
overwrites each of those weights with seeded random values (:func:`randomise`), so that the learner's own
initialisation (zeros, a constant, the identity) cannot make a wrong forward agree with the reference.
"""

from __future__ import annotations

import torch
from torch import nn

from ..attention import MultiHeadAttention
from ..blocks import EncoderBlock
from . import ExerciseFailed

NOT_ATTEMPTED = "not attempted yet: replace the `raise NotImplementedError` with your code."


def seeded(seed: int):
    """Seed PyTorch's global generator inside a ``with`` block, leaving the learner's random state untouched."""
    from contextlib import contextmanager

    @contextmanager
    def block():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield

    return block()


def build(exercise: str, make):
    """Construct the learner's module with seed 0, in eval mode; None when it is still the stub."""
    try:
        with seeded(0):
            module = make()
    except NotImplementedError:
        return None
    except Exception as error:  # noqa: BLE001 - say what went wrong, without a traceback from inside torch
        message = f"{type(error).__name__}: {error}".splitlines()[0]
        raise ExerciseFailed(exercise, f"building your module raised {message}.") from None
    if not isinstance(module, nn.Module):
        raise ExerciseFailed(exercise, f"expected an nn.Module, got {type(module).__name__}")
    return module.eval()


def linear_layer(exercise: str, module, name: str, d_in: int, d_out: int) -> nn.Linear:
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


def norm_layer(exercise: str, module, name: str, d: int) -> nn.LayerNorm:
    layer = getattr(module, name, None)
    if not isinstance(layer, nn.LayerNorm) or tuple(layer.normalized_shape) != (d,):
        raise ExerciseFailed(exercise, f"your module needs an attribute `{name}` = nn.LayerNorm({d}).")
    return layer


def has_bias(layer: nn.Linear) -> bool:
    return layer.bias is not None


def separate(exercise: str, module, names: tuple[str, ...]) -> None:
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
def randomise(g: torch.Generator, *layers: nn.Module) -> None:
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
def copy_attention(exercise: str, learner, target: MultiHeadAttention, d: int, g: torch.Generator) -> None:
    layers = [linear_layer(exercise, learner, name, d, d) for name in ("W_q", "W_k", "W_v", "W_o")]
    separate(exercise, learner, ("W_q", "W_k", "W_v", "W_o"))
    randomise(g, *layers)
    for name, src in zip(("W_q", "W_k", "W_v", "W_o"), layers):
        getattr(target, name).load_state_dict(src.state_dict())


def inputs(d: int, shapes):
    g = torch.Generator().manual_seed(11)
    return [(torch.randn(B, T, d, generator=g),) for B, T in shapes]


@torch.no_grad()
def copy_block(exercise: str, learner, target: EncoderBlock, d: int, d_ff: int, g: torch.Generator) -> None:
    attn = getattr(learner, "attn", None)
    if not isinstance(attn, nn.Module):
        raise ExerciseFailed(exercise, "your block needs an attribute `attn`, its CausalSelfAttention.")
    copy_attention(exercise, attn, target.self_attn, d, g)
    pairs = [
        (norm_layer(exercise, learner, "norm_1", d), target.norm_1),
        (norm_layer(exercise, learner, "norm_2", d), target.norm_2),
        (linear_layer(exercise, learner, "W_1", d, d_ff), target.ffn.W_1),
        (linear_layer(exercise, learner, "W_2", d_ff, d), target.ffn.W_2),
    ]
    separate(exercise, learner, ("norm_1", "norm_2"))
    randomise(g, *(src for src, _ in pairs))
    for src, dst in pairs:
        dst.load_state_dict(src.state_dict())
