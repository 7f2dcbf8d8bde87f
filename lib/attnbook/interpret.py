"""What attention learns: induction heads, heads that matter, and whether attention weights explain.

The chapter's tools, each short enough to read next to its equation:

- a model: :class:`AttentionOnly`, a transformer of attention layers only (no MLP), in which a two-layer
  circuit copies a repeated sequence (the induction heads of Elhage et al., 2021; Olsson et al., 2022);
- data and scores: :func:`repeated_tokens` (a random first half, then the same tokens again),
  :func:`repeat_losses` (the loss on the tokens no model can know, and on the tokens a copy predicts),
  :func:`prefix_matching_score` (the weight from a token to the token after its earlier occurrence) and
  :func:`previous_token_score` (the weight on the token just before);
- interventions: :func:`ablate_heads` (remove heads by replacing their slice of the input of ``W_o`` with
  zero, or with its mean from :func:`mean_heads`, with a hook) and :func:`edit_attention` (run a layer with
  one head's weights replaced: permuted, uniform, adversarial), on the layers :func:`attention_layers` finds;
- reading the circuit from the weights (QK and OV circuits, composition, direct logit attribution) is in
  :mod:`attnbook.circuits`;
- attributions, which input positions a prediction depends on, are in :mod:`attnbook.attribution`;
- :func:`load_lab_gpt`: the lab's character-level GPT, trained by ``benchmarks/bench_interpret.py`` with the
  lab's recipe and shipped with the library.

They work on the library's models through their public parts: the attention layers
(``attention.MultiHeadAttention`` or ``GroupedQueryAttention``: ``W_v``, ``W_o``, ``n_heads``, ``d_head``),
their ``return_weights=True`` and the token embedding. Hooks are removed when a ``with`` block ends.

Shapes:
    ids:     (B, T) token ids
    weights: (B, H, T, T), one layer; a model gives a list of n_layers of them
    scores:  (H,) per head

Chapter: what attention learns (16).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import _checks
from .attention import GroupedQueryAttention, MultiHeadAttention
from .data import CharTokenizer, packaged_dir
from .models import GPT, TransformerConfig

__all__ = [
    "AttentionOnlyConfig",
    "AttentionOnly",
    "repeated_tokens",
    "repeat_losses",
    "prefix_matching_score",
    "previous_token_score",
    "attention_layers",
    "mean_heads",
    "ablate_heads",
    "edit_attention",
    "load_lab_gpt",
]


# --- the attention-only transformer -------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionOnlyConfig:
    """The sizes of an :class:`AttentionOnly` model (frozen, like ``models.TransformerConfig``)."""

    vocab_size: int
    block_size: int  # the longest input (positions 0 .. block_size - 1)
    n_layers: int = 2
    n_heads: int = 2
    d_model: int = 64

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layers", "n_heads", "d_model"):
            _checks.positive_int(name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model must be divisible by n_heads, got d_model={self.d_model} and n_heads={self.n_heads}"
            )

    def replace(self, **changes) -> AttentionOnlyConfig:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class AttentionOnly(nn.Module):
    r"""A decoder-only transformer with attention layers and no MLP: the model of the induction-head papers.

    .. math::

        x_0 = E[\text{ids}] + P, \qquad x_{l+1} = x_l + \mathrm{Attn}_l(\mathrm{LN}_l(x_l)), \qquad
        \text{logits} = \mathrm{LN}_f(x_L)\, W_U

    Every layer is the library's ``MultiHeadAttention`` (no biases) under the causal mask, on a pre-norm
    residual stream, as in the lab's GPT with the feed-forward networks taken out.

    Shapes:
        idx:    (B, T) token ids, 1 <= T <= block_size
        return: logits (B, T, V); with ``return_weights=True`` also a list of n_layers weights (B, H, T, T)

    Chapter: what attention learns.
    """

    def __init__(self, config: AttentionOnlyConfig):
        super().__init__()
        self.config = _checks.instance("config", config, AttentionOnlyConfig, "an interpret.AttentionOnlyConfig")
        V, T, D = config.vocab_size, config.block_size, config.d_model
        self.embed = nn.Embedding(V, D)  # E: (V, D)
        self.positions = nn.Embedding(T, D)  # P: (block_size, D)
        self.norms = nn.ModuleList(nn.LayerNorm(D) for _ in range(config.n_layers))
        self.attns = nn.ModuleList(MultiHeadAttention(D, config.n_heads, bias=False) for _ in range(config.n_layers))
        self.norm_f = nn.LayerNorm(D)
        self.unembed = nn.Linear(D, V, bias=False)  # W_U

    def forward(self, idx: torch.Tensor, *, return_weights: bool = False):
        _check_ids("idx", idx, self.config.vocab_size, self.config.block_size)
        T = idx.shape[1]
        x = self.embed(idx) + self.positions.weight[:T]  # (B, T, D)
        weights = []
        for norm, attn in zip(self.norms, self.attns):
            if return_weights:
                out, w = attn(norm(x), is_causal=True, return_weights=True)  # (B, T, D), (B, H, T, T)
                weights.append(w)
            else:
                out = attn(norm(x), is_causal=True)  # (B, T, D)
            x = x + out  # (B, T, D): the residual stream
        logits = self.unembed(self.norm_f(x))  # (B, T, V)
        return (logits, weights) if return_weights else logits


# --- data and scores ------------------------------------------------------------------------------------


def repeated_tokens(
    n: int, half: int, vocab_size: int, *, distinct: bool = False, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``n`` sequences of ``half`` random tokens followed by the same ``half`` tokens again.

    The first half is drawn uniformly with replacement, so nothing in it can be predicted; with
    ``distinct=True`` its tokens are all different (``half <= vocab_size``), so that every token of the
    second half has exactly one earlier occurrence (as in the prefix-matching test of Olsson et al.).

    Shapes:
        return: (n, 2 * half) token ids
    """
    _check_sizes(n, half, vocab_size, distinct, generator)
    if distinct:
        first = torch.rand(n, vocab_size, generator=generator).argsort(dim=-1)[:, :half]  # (n, half)
    else:
        first = torch.randint(vocab_size, (n, half), generator=generator)  # (n, half)
    return torch.cat([first, first], dim=1)  # (n, 2 * half)


def repeat_losses(logits: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean next-token loss on the tokens no model can know, and on the tokens a copy predicts.

    For ``ids`` = a first half of M random tokens and its repeat (:func:`repeated_tokens`), the prediction
    at position t is of token t + 1. Tokens 1 .. M (the rest of the first half, and the first token of the
    repeat, which nothing announces) cannot be known: their loss is at best ln V. Tokens M + 1 .. 2M - 1
    repeat the token after an earlier occurrence of the current one: a copy predicts them.

    Shapes:
        logits: (B, 2M, V), ids: (B, 2M); returns two scalars (nats)
    """
    M = _check_repeats(logits, ids)
    nll = F.cross_entropy(_wide(logits[:, :-1]).transpose(1, 2), ids[:, 1:], reduction="none")  # (B, 2M - 1)
    return nll[:, :M].mean(), nll[:, M:].mean()  # targets 1 .. M, targets M + 1 .. 2M - 1


def prefix_matching_score(weights: torch.Tensor) -> torch.Tensor:
    """Each head's mean weight from a token of the repeat to the token after its earlier occurrence.

    On a first half of M tokens and its repeat, query t >= M holds the token of position t - M, which was
    followed by token t - M + 1: an induction head attends there (Olsson et al., 2022). A head that does so
    always scores 1; a head with uniform causal weights scores about ln(2) / M.

    Shapes:
        weights: (B, H, 2M, 2M), one layer's; return: (H,)
    """
    M = _check_weights("weights", weights, repeats=True)
    t = torch.arange(M, 2 * M, device=weights.device)  # the queries of the repeat
    return weights[:, :, t, t - M + 1].mean(dim=(0, 2))  # (H,)


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Each head's mean weight from a token to the token just before it (queries 1 .. T - 1).

    Shapes:
        weights: (B, H, T, T), one layer's, T >= 2; return: (H,)
    """
    _check_weights("weights", weights)
    t = torch.arange(1, weights.shape[-1], device=weights.device)
    return weights[:, :, t, t - 1].mean(dim=(0, 2))  # (H,)


# --- interventions ----------------------------------------------------------------------------------------


def attention_layers(model: nn.Module) -> list[nn.Module]:
    """The attention layers of ``model``, first layer first (``GPT``, :class:`AttentionOnly`...): its
    ``attention.MultiHeadAttention`` and ``attention.GroupedQueryAttention`` modules."""
    _checks.module("model", model)
    return [m for m in model.modules() if isinstance(m, (MultiHeadAttention, GroupedQueryAttention))]


@torch.no_grad()
def mean_heads(model: nn.Module, ids: torch.Tensor) -> list[torch.Tensor]:
    """Each attention layer's heads (the input of its ``W_o``, the heads side by side) averaged over the
    batch and the positions of ``ids``: what mean-ablation puts in place of a head (:func:`ablate_heads`).

    Shapes:
        ids: (B, T) token ids; return: a list of n_layers (H * Dh,), first layer first
    """
    layers = _check_model_ids(model, ids)
    heads = []
    hooks = [layer.W_o.register_forward_pre_hook(lambda m, args: heads.append(args[0])) for layer in layers]
    try:
        model(ids)
    finally:
        for hook in hooks:
            hook.remove()
    return [z.flatten(0, -2).mean(dim=0) for z in heads]  # (H * Dh,) per layer


@contextlib.contextmanager
def ablate_heads(model: nn.Module, heads: Iterable[tuple[int, int]], *, means: list[torch.Tensor] | None = None):
    """Within the ``with`` block, ``model`` runs without the heads ``heads`` = [(layer, head), ...].

    Head h of a layer reaches the output only through its slice h*Dh .. (h+1)*Dh - 1 of the input of
    ``W_o``; a forward pre-hook on ``W_o`` replaces that slice, without touching the weights. Without
    ``means`` it is replaced by zero (zero-ablation, the same as zeroing those columns of ``W_o``); with
    ``means``, each layer's mean heads from :func:`mean_heads`, by its mean (mean-ablation: the head still
    writes what it writes on average, and no longer anything that depends on the input). Layers and heads
    count from 0.
    """
    layers, chosen = _check_heads("heads", heads, model)
    _check_means(means, layers)
    hooks = []
    try:
        for i, layer in enumerate(layers):
            gone = [h for l, h in chosen if l == i]
            if gone:
                keep = torch.ones(layer.n_heads)  # (H,)
                keep[gone] = 0.0
                mean = None if means is None else means[i]
                hooks.append(layer.W_o.register_forward_pre_hook(_replace_heads(keep, layer.d_head, mean)))
        yield model
    finally:
        for hook in hooks:
            hook.remove()


def _replace_heads(keep: torch.Tensor, d_head: int, mean: torch.Tensor | None):
    def hook(module, args):
        x = args[0]  # (B, T, H * Dh): the heads side by side
        gate = keep.repeat_interleave(d_head).to(x.device, x.dtype)  # (H * Dh,): 1 kept, 0 removed
        out = x * gate if mean is None else x * gate + mean.to(x.device, x.dtype) * (1 - gate)
        return (out, *args[1:])

    return hook


@contextlib.contextmanager
def edit_attention(model: nn.Module, layer: int, head: int, edit: Callable[[torch.Tensor], torch.Tensor]):
    """Within the ``with`` block, head ``head`` of layer ``layer`` uses ``edit(weights)`` as its weights.

    The layer's output becomes out = W_o [A_1 V_1, ..., A'_h V_h, ..., A_H V_H] with A'_h = edit(A_h): the
    other heads and everything before the layer are untouched, everything after it sees the change. ``edit``
    takes the head's weights (B, Tq, Tk) and returns weights of the same shape (each row should still sum to
    1): a permutation of the keys, uniform weights, an adversarial distribution (Jain and Wallace, 2019).
    The layer must be self-attention called without a KV cache or a score bias. Layers and heads count from 0.
    """
    layers, ((layer, head),) = _check_heads("layer and head", [(layer, head)], model)
    _checks.function("edit", edit)
    hook = layers[layer].register_forward_hook(_edited_output(head, edit), with_kwargs=True)
    try:
        yield model
    finally:
        hook.remove()


def _edited_output(head: int, edit):
    inside = []  # the hook runs the layer once more to read its weights: that inner call is left alone

    def hook(module, args, kwargs, output):
        if inside:
            return None
        x = args[0] if args else kwargs["query"]  # (B, T, D)
        if len(args) > 1 or any(kwargs.get(k) is not None for k in ("key", "value", "cache", "score_bias")):
            raise ValueError("edit_attention needs a self-attention layer called without key, cache or score_bias")
        inside.append(True)
        try:
            _, weights = module(*args, **{**kwargs, "return_weights": True})  # (B, H, T, T)
        finally:
            inside.pop()
        new = edit(weights[:, head])
        if not isinstance(new, torch.Tensor) or new.shape != weights[:, head].shape:
            got = _checks.shape_str(new.shape) if isinstance(new, torch.Tensor) else type(new).__name__
            raise ValueError(
                f"edit must return the head's weights, shape (B, Tq, Tk) = "
                f"{_checks.shape_str(weights[:, head].shape)}, got {got}"
            )
        B, T, D = x.shape
        H, Dh = module.n_heads, module.d_head
        v = module.W_v(x).view(B, T, -1, Dh).transpose(1, 2)  # (B, H_kv, T, Dh)
        v = v.repeat_interleave(H // v.shape[1], dim=1)  # (B, H, T, Dh): grouped-query layers share values
        weights = torch.cat([weights[:, :head], new[:, None].to(v.dtype), weights[:, head + 1 :]], dim=1)
        heads = weights @ v  # (B, H, T, Dh)
        out = module.W_o(heads.transpose(1, 2).reshape(B, T, D))  # (B, T, D)
        return (out, weights) if isinstance(output, tuple) else out

    return hook


# --- the lab's GPT ----------------------------------------------------------------------------------------

LAB_GPT = "lab_gpt/lab_gpt.pt"  # in the package's data folder; written by benchmarks/bench_interpret.py
LAB_GPT_FORMAT = "attnbook.lab_gpt/1"


def load_lab_gpt(path=None) -> tuple[GPT, CharTokenizer]:
    """The lab's character-level GPT (eval mode, float32) and its tokenizer.

    The book ships one trained with the lab's recipe (``train_lm.RECIPES["book"]``, its seed) by
    ``benchmarks/bench_interpret.py``, which writes the weights in float16 with the configuration and the
    validation loss it measured; ``path`` reads another file of that kind.
    """
    path = packaged_dir() / LAB_GPT if path is None else _checks.file("path", path)
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated files, other pickles, random bytes: all refused the same way
        raise ValueError(f"path {str(path)!r} is not a saved lab GPT: {str(error).splitlines()[0]:.100}") from None
    if not isinstance(saved, dict) or saved.get("format") != LAB_GPT_FORMAT:
        raise ValueError(f"path {str(path)!r} is not a saved lab GPT (format {LAB_GPT_FORMAT!r})")
    model = GPT(TransformerConfig(**saved["model_config"]))
    model.load_state_dict({k: v.float() for k, v in saved["model"].items()})
    return model.eval(), CharTokenizer(saved["chars"])


def _wide(x: torch.Tensor) -> torch.Tensor:
    """Half-precision logits in float32 for a log-softmax; other dtypes as they are."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


# --- checks ----------------------------------------------------------------------------------------------


def _is_exporting() -> bool:
    """True while ``torch.export`` (``torch.onnx.export(..., dynamo=True)``) traces a model."""
    is_exporting = getattr(torch.compiler, "is_exporting", None)
    return bool(is_exporting and is_exporting())


def _check_ids(name: str, ids, vocab_size: int, block_size: int) -> torch.Tensor:
    """Token ids (B, T) in [0, vocab_size) with 1 <= T <= block_size."""
    _checks.token_ids(name, ids, vocab_size, ndim=2, values=False)
    if ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(f"{name} is empty: shape {_checks.shape_str(ids.shape)}")
    if ids.shape[1] > block_size:
        raise ValueError(f"{name} has length T={ids.shape[1]}, longer than the model's block_size={block_size}")
    return _checks.token_ids(name, ids, vocab_size, values=not _is_exporting())


def _check_sizes(n, half, vocab_size, distinct, generator) -> None:
    """The arguments of :func:`repeated_tokens`."""
    _checks.positive_int("n", n)
    _checks.positive_int("half", half)
    _checks.positive_int("vocab_size", vocab_size)
    _checks.generator("generator", generator)
    if distinct and half > vocab_size:
        raise ValueError(f"half must be at most vocab_size={vocab_size} for distinct tokens, got half={half}")


def _check_repeats(logits, ids) -> int:
    """Logits (B, 2M, V) and ids (B, 2M) of sequences of even length 2M >= 2 (a half and its repeat); returns M."""
    _checks.tensor("ids", ids, ndim=2)
    if ids.shape[0] == 0 or ids.shape[1] < 2 or ids.shape[1] % 2:
        raise ValueError(
            f"ids must be a batch of sequences of even length 2M >= 2 (a half and its repeat), "
            f"got shape {_checks.shape_str(ids.shape)}"
        )
    _checks.tensor("logits", logits, ndim=3, floating=True)
    if logits.shape[:2] != ids.shape:
        raise ValueError(
            f"logits (B, T, V) and ids (B, T) disagree: {_checks.shape_str(logits.shape)} and "
            f"{_checks.shape_str(ids.shape)}"
        )
    _checks.token_ids("ids", ids, logits.shape[-1])
    return ids.shape[1] // 2


def _check_weights(name: str, weights, *, repeats: bool = False, shortest: int = 2) -> int:
    """One layer's attention weights (B, H, T, T), T >= ``shortest`` (even for a half and its repeat); returns
    T // 2."""
    _checks.tensor(name, weights, ndim=4, floating=True)
    B, H, Tq, Tk = weights.shape
    if Tq != Tk or Tq < shortest or B == 0 or H == 0 or (repeats and Tq % 2):
        kind = "T = 2M, a half and its repeat" if repeats else f"T >= {shortest}"
        raise ValueError(
            f"{name} must be self-attention weights (B, H, T, T) with B, H >= 1 and {kind}, "
            f"got shape {_checks.shape_str(weights.shape)}"
        )
    return Tq // 2


def _check_heads(name: str, heads, model) -> tuple[list[nn.Module], list[tuple[int, int]]]:
    """The attention layers of ``model`` and the (layer, head) pairs ``heads``, which must exist in them."""
    layers = attention_layers(model)
    if not layers:
        raise ValueError("model has no attention layer (attention.MultiHeadAttention or GroupedQueryAttention)")
    if isinstance(heads, (str, bytes, torch.Tensor)) or not isinstance(heads, Iterable):
        raise TypeError(f"{name} must be a list of (layer, head) pairs, got {type(heads).__name__}")
    chosen = []
    for pair in heads:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"{name} must be a list of (layer, head) pairs, got an element {pair!r}")
        layer = _checks.positive_int(f"{name}: layer", pair[0], minimum=0)
        head = _checks.positive_int(f"{name}: head", pair[1], minimum=0)
        if layer >= len(layers) or head >= layers[layer].n_heads:
            raise ValueError(
                f"{name} names layer {layer}, head {head}, but the model has {len(layers)} layers of "
                f"{layers[min(layer, len(layers) - 1)].n_heads} heads (counted from 0)"
            )
        chosen.append((layer, head))
    return layers, chosen


def _check_model_ids(model, ids) -> list[nn.Module]:
    """A GPT or an AttentionOnly model and token ids (B, T) it can read; returns its attention layers."""
    _, vocab_size, block_size = _language_model("model", model)
    _check_ids("ids", ids, vocab_size, block_size)
    return attention_layers(model)


def _check_means(means, layers) -> None:
    """None, or one floating (H * Dh,) tensor per attention layer (from mean_heads)."""
    if means is None:
        return
    if isinstance(means, torch.Tensor) or not isinstance(means, (list, tuple)) or len(means) != len(layers):
        raise TypeError(
            f"means must be a list of {len(layers)} tensors, one per attention layer (from mean_heads), "
            f"got {type(means).__name__}{f' of length {len(means)}' if isinstance(means, (list, tuple)) else ''}"
        )
    for i, (mean, layer) in enumerate(zip(means, layers)):
        _checks.tensor(f"means[{i}]", mean, ndim=1, floating=True)
        if mean.shape[0] != layer.n_heads * layer.d_head:
            raise ValueError(
                f"means[{i}] must have H * Dh = {layer.n_heads * layer.d_head} entries (the heads of layer {i}), "
                f"got shape {_checks.shape_str(mean.shape)}"
            )


def _language_model(name: str, model) -> tuple[nn.Embedding, int, int]:
    """The token embedding, vocabulary size and block size of a ``GPT`` or an :class:`AttentionOnly`."""
    if isinstance(model, GPT):
        return model.embed.token, model.config.vocab_size, model.config.block_size
    if isinstance(model, AttentionOnly):
        return model.embed, model.config.vocab_size, model.config.block_size
    raise TypeError(f"{name} must be an attnbook.models.GPT or an interpret.AttentionOnly, got {type(model).__name__}")
