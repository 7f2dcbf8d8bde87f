"""Transformer blocks: encoder and decoder blocks, and a stack of encoder blocks over any tokens.

A block is the unit a transformer stacks. Self-attention is the only place where positions interact;
the normalisation layers and the feed-forward network act on each position on its own. Each sub-layer
sits on a residual path, with its normalisation either after the sum ("post", the 2017 paper, and the
default of ``torch.nn.TransformerEncoderLayer``) or at the entrance of the branch ("pre", GPT-2 and
later)::

    post:  x = norm(x + sublayer(x))        pre:  x = x + sublayer(norm(x))

The attention of every block is :class:`~attnbook.attention.GroupedQueryAttention` (with ``n_kv_heads`` left
out it is multi-head attention). The position-wise layers are in :mod:`attnbook.positionwise` and exported
here too (``blocks.FeedForward``, ``blocks.RMSNorm``, the registries ``NORMS`` and ``MLPS``...); choices are
named by strings so that new kinds can be registered without changing any signature.

Chapter: the transformer block (08). Modern tweaks (11) adds other norms and MLPs; the Vision
Transformer (10) reuses the encoder block; beyond text (15) stacks encoder blocks over any tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import _checks
from ._checks import checked_by
from .attention import GroupedQueryAttention, KVCache, check_layer_inputs
from .positionwise import (
    MLPS,
    NORMS,
    ConvFeedForward,
    FeedForward,
    MixtureOfExperts,
    RMSNorm,
    SwiGLU,
    make_mlp,
    make_norm,
    moe_aux_loss,
    register_moe,
)

__all__ = [
    "NORMS",
    "MLPS",
    "NORM_POSITIONS",
    "make_norm",
    "make_mlp",
    "FeedForward",
    "ConvFeedForward",
    "EncoderBlock",
    "DecoderBlock",
    "RMSNorm",
    "SwiGLU",
    "MixtureOfExperts",
    "register_moe",
    "moe_aux_loss",
    "EncoderStack",
    "masked_mean",
]

NORM_POSITIONS = ("post", "pre")


class _Block(nn.Module):
    """What encoder and decoder blocks share: self-attention, the FFN, the norms and the residual wiring."""

    def __init__(
        self,
        d_model,
        n_heads,
        d_ff,
        dropout,
        mlp,
        norm,
        norm_position,
        bias,
        eps,
        n_norms,
        n_kv_heads=None,
        rope=False,
        qk_norm=False,
    ):
        super().__init__()
        d_ff, dropout = _check_block_options(d_model, n_heads, d_ff, dropout, mlp, norm, norm_position, eps)
        self.d_model, self.n_heads, self.d_ff, self.norm_position = d_model, n_heads, d_ff, norm_position
        self.self_attn = GroupedQueryAttention(
            d_model, n_heads, n_kv_heads, dropout=dropout, bias=bias, rope=rope, qk_norm=qk_norm
        )
        self.ffn = make_mlp(mlp, d_model, d_ff, dropout=dropout, bias=bias)
        self.norms = nn.ModuleList(make_norm(norm, d_model, eps=eps, bias=bias) for _ in range(n_norms))
        self.dropout = nn.Dropout(dropout)

    def _sublayer(self, x, i, fn):
        """One residual sub-layer: norm(x + f(x)) (post) or x + f(norm(x)) (pre)."""
        if self.norm_position == "post":
            return self.norms[i](x + self.dropout(fn(x)))  # (B, T, D)
        return x + self.dropout(fn(self.norms[i](x)))  # (B, T, D)


class EncoderBlock(_Block):
    r"""A transformer encoder block: multi-head self-attention, then the FFN, each on a residual path.

    Post-norm (``norm_position="post"``, the 2017 paper)::

        x = norm_1(x + Dropout(SelfAttention(x)))
        x = norm_2(x + Dropout(FFN(x)))

    Pre-norm (``"pre"``): ``x = x + Dropout(SelfAttention(norm_1(x)))``, then ``x = x + Dropout(FFN(norm_2(x)))``.
    With ``is_causal=True`` it is the block of a decoder-only language model (GPT). With the same weights it
    equals ``torch.nn.TransformerEncoderLayer(d_model, n_heads, d_ff, batch_first=True,
    norm_first=(norm_position == "pre"))``; :meth:`from_torch` copies one.

    ``score_bias`` is added to the attention scores (see ``attention.scaled_dot_product_attention``); ``cache``
    is a :class:`~attnbook.attention.KVCache` for generating (modern tweaks).

    Shapes:
        x:      (B, T, D)
        mask:   boolean, True = may attend: (T, T), (B, T, T) or (B, 1, T) from ``attention.padding_mask``
        score_bias: floating point, (T, T), (B, T, T) or (B, H, T, T)
        return: (B, T, D); with ``return_weights=True`` also the attention weights (B, H, T, T)

    Chapter: the transformer block.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        *,
        dropout: float = 0.0,
        mlp: str = "relu",
        norm: str = "layernorm",
        norm_position: str = "post",
        bias: bool = True,
        eps: float = 1e-5,
        n_kv_heads: int | None = None,
        rope: bool = False,
        qk_norm: bool = False,
    ):
        super().__init__(
            d_model, n_heads, d_ff, dropout, mlp, norm, norm_position, bias, eps, 2, n_kv_heads, rope, qk_norm
        )

    @property
    def norm_1(self) -> nn.Module:
        return self.norms[0]

    @property
    def norm_2(self) -> nn.Module:
        return self.norms[1]

    @checked_by("_check_encoder_block")
    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        is_causal: bool = False,
        return_weights: bool = False,
        cache: KVCache | None = None,
        score_bias: torch.Tensor | None = None,
    ):
        weights = []  # the attention weights, when asked for

        def attend(h):  # (B, T, D) -> (B, T, D)
            out = self.self_attn(
                h, mask=mask, is_causal=is_causal, return_weights=return_weights, cache=cache, score_bias=score_bias
            )
            return _keep_weights(out, weights) if return_weights else out

        x = self._sublayer(x, 0, attend)  # (B, T, D)
        x = self._sublayer(x, 1, self.ffn)  # (B, T, D)
        return (x, weights[0]) if return_weights else x

    @classmethod
    @checked_by("_check_from_torch")
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> EncoderBlock:
        """An EncoderBlock with the configuration and a copy of the weights of a ``TransformerEncoderLayer``."""
        return _from_torch(cls, layer, [("self_attn", "self_attn")])


class DecoderBlock(_Block):
    r"""A transformer decoder block: masked self-attention, cross-attention to the encoder's output, the FFN.

    Post-norm::

        x = norm_1(x + Dropout(SelfAttention(x, causal)))
        x = norm_2(x + Dropout(CrossAttention(queries=x, keys=values=memory)))
        x = norm_3(x + Dropout(FFN(x)))

    Pre-norm normalises at the entrance of each branch instead (the memory is used as it comes).
    With the same weights it equals ``torch.nn.TransformerDecoderLayer(..., batch_first=True)`` with a
    causal target mask; :meth:`from_torch` copies one.

    Shapes:
        x:           (B, T, D), the target side
        memory:      (B, S, D), the encoder's output
        mask:        extra boolean self-attention mask, True = may attend, (T, T) or (B, T, T)
        memory_mask: boolean, True = may attend, (B, 1, S) from ``attention.padding_mask``, (T, S) or (B, T, S)
        return:      (B, T, D); with ``return_weights=True`` also (self-attention weights (B, H, T, T),
                     cross-attention weights (B, H, T, S))

    Chapter: the transformer block.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        *,
        dropout: float = 0.0,
        mlp: str = "relu",
        norm: str = "layernorm",
        norm_position: str = "post",
        bias: bool = True,
        eps: float = 1e-5,
        n_kv_heads: int | None = None,
        rope: bool = False,
        qk_norm: bool = False,
    ):
        super().__init__(
            d_model, n_heads, d_ff, dropout, mlp, norm, norm_position, bias, eps, 3, n_kv_heads, rope, qk_norm
        )
        self.cross_attn = GroupedQueryAttention(d_model, n_heads, dropout=float(self.dropout.p), bias=bias)

    @checked_by("_check_decoder_block")
    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        is_causal: bool = True,
        return_weights: bool = False,
    ):
        weights = []  # the self-attention and cross-attention weights, when asked for

        def attend(h):  # (B, T, D) -> (B, T, D): masked self-attention
            out = self.self_attn(h, mask=mask, is_causal=is_causal, return_weights=return_weights)
            return _keep_weights(out, weights) if return_weights else out

        def cross_attend(h):  # (B, T, D) -> (B, T, D): queries from h, keys and values from the memory
            out = self.cross_attn(h, memory, memory, mask=memory_mask, return_weights=return_weights)
            return _keep_weights(out, weights) if return_weights else out

        x = self._sublayer(x, 0, attend)  # (B, T, D)
        x = self._sublayer(x, 1, cross_attend)  # (B, T, D)
        x = self._sublayer(x, 2, self.ffn)  # (B, T, D)
        return (x, tuple(weights)) if return_weights else x

    @classmethod
    @checked_by("_check_from_torch")
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> DecoderBlock:
        """A DecoderBlock with the configuration and a copy of the weights of a ``TransformerDecoderLayer``."""
        return _from_torch(cls, layer, [("self_attn", "self_attn"), ("cross_attn", "multihead_attn")])


def _keep_weights(out, weights: list) -> torch.Tensor:
    """An attention layer's (output, weights): keep the weights in ``weights``, return the output."""
    out, w = out
    weights.append(w)
    return out


@torch.no_grad()
def _from_torch(cls, layer: nn.Module, attentions: list[tuple[str, str]]):
    """A block of class ``cls`` with the configuration and a copy of the weights of the PyTorch ``layer``."""
    mlp = "relu" if layer.activation is F.relu or isinstance(layer.activation, nn.ReLU) else "gelu"
    block = cls(
        layer.linear1.in_features,
        layer.self_attn.num_heads,
        layer.linear1.out_features,
        dropout=float(layer.dropout.p),
        mlp=mlp,
        norm_position="pre" if layer.norm_first else "post",
        bias=layer.linear1.bias is not None,
        eps=layer.norm1.eps,
    )
    block.to(layer.linear1.weight)  # the layer's dtype and device, so that nothing is rounded
    for ours, theirs in attentions:  # PyTorch keeps W_q, W_k, W_v stacked in in_proj_weight (3D, D)
        attn, ref = getattr(block, ours), getattr(layer, theirs)
        biases = (None,) * 3 if ref.in_proj_bias is None else ref.in_proj_bias.chunk(3)
        for W, w, b in zip((attn.W_q, attn.W_k, attn.W_v), ref.in_proj_weight.chunk(3), biases):
            W.weight.copy_(w)
            if b is not None:
                W.bias.copy_(b)
        attn.W_o.load_state_dict(ref.out_proj.state_dict())
    block.ffn.W_1.load_state_dict(layer.linear1.state_dict())
    block.ffn.W_2.load_state_dict(layer.linear2.state_dict())
    for i, norm in enumerate(block.norms, start=1):
        norm.load_state_dict(getattr(layer, f"norm{i}").state_dict())
    return block


# --- Any tokens: a stack of encoder blocks and a pooled summary -------------------------------------------
# Chapter: beyond text (15): sets, graphs, sound and several modalities all go through this stack.


class EncoderStack(nn.Module):
    r"""``n_layers`` encoder blocks over tokens that are already vectors, then a final norm (pre-norm stacks).

    A transformer without its tokenizer: it takes a set of T token vectors, a boolean mask (which token may
    attend to which) and a score bias (structure added to the scores), the same mask and bias in every
    layer. What a domain changes is how its input becomes these vectors, what position or structure is
    added to them, and the mask. No positions are added here: without them, the stack is permutation
    equivariant (permute the tokens, the mask and the bias together, and the outputs are permuted).

    Shapes:
        x:          (B, T, D)
        mask:       boolean, True = may attend: (T, T), (B, T, T), (B, 1, T) or (B, H, T, T)
        score_bias: floating point, (T, T), (B, T, T) or (B, H, T, T)
        return:     (B, T, D); with ``return_weights=True`` also a list of n_layers weights (B, H, T, T)

    Chapter: beyond text.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_layers: int,
        d_ff: int | None = None,
        *,
        dropout: float = 0.0,
        mlp: str = "gelu",
        norm: str = "layernorm",
        norm_position: str = "pre",
        bias: bool = True,
        eps: float = 1e-5,
    ):
        super().__init__()
        _checks.positive_int("n_layers", n_layers)
        options = dict(dropout=dropout, mlp=mlp, norm=norm, norm_position=norm_position, bias=bias, eps=eps)
        self.blocks = nn.ModuleList(EncoderBlock(d_model, n_heads, d_ff, **options) for _ in range(n_layers))
        self.norm_f = make_norm(norm, d_model, eps=eps, bias=bias) if norm_position == "pre" else nn.Identity()

    @checked_by("_check_stack")
    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        score_bias: torch.Tensor | None = None,
        return_weights: bool = False,
    ):
        weights = []
        for block in self.blocks:
            if return_weights:
                x, w = block(x, mask, score_bias=score_bias, return_weights=True)
                weights.append(w)  # (B, H, T, T)
            else:
                x = block(x, mask, score_bias=score_bias)  # (B, T, D)
        x = self.norm_f(x)  # (B, T, D)
        return (x, weights) if return_weights else x


@checked_by("_check_masked_mean")
def masked_mean(x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    """The mean of the token vectors of each sequence, over the tokens where ``keep`` is True (all if None).

    A permutation-invariant summary of a set of tokens: padding does not count (not even a NaN in it), and
    a sequence with no kept token gives zeros (not NaN).

    Shapes:
        x:      (B, T, D)
        keep:   boolean (B, T), True = a real token (e.g. ``padding_mask(lengths)[:, 0]``)
        return: (B, D)

    Chapter: beyond text (pooling a set).
    """
    if keep is None:
        return x.mean(dim=1)  # (B, D)
    w = keep.to(x.dtype).unsqueeze(-1)  # (B, T, 1)
    kept = torch.where(keep.unsqueeze(-1), x, 0.0)  # (B, T, D): a NaN in a token not kept reaches nothing
    return kept.sum(dim=1) / w.sum(dim=1).clamp(min=1.0)  # (B, D)


# --- input checks -----------------------------------------------------------------------------------------
# A forward names its checks with @checked_by: they run at the boundary only (a model checks for its blocks);
# a constructor calls its own.


def _check_block_options(d_model, n_heads, d_ff, dropout, mlp, norm, norm_position, eps) -> tuple[int, float]:
    """The checks of a block's constructor (the attention layer checks its own); return d_ff (4 D by default)
    and the dropout."""
    _checks.positive_int("d_model", d_model)
    _checks.positive_int("n_heads", n_heads)
    d_ff = 4 * d_model if d_ff is None else _checks.positive_int("d_ff", d_ff)
    _checks.choice("norm_position", norm_position, NORM_POSITIONS)
    _checks.choice("norm", norm, tuple(NORMS))
    _checks.choice("mlp", mlp, tuple(MLPS))
    _checks.positive_float("eps", eps)
    return d_ff, _checks.dropout("dropout", dropout)


def _check_encoder_block(self, x, mask, cache=None, score_bias=None, **_) -> None:
    """x (B, T, D), then the mask, the bias and the cache under the block's names (as its attention checks them)."""
    _checks.sequence("x", x, self.d_model, module=self)
    check_layer_inputs(self.self_attn, x, None, None, mask, score_bias, cache)


def _check_stack(self, x, mask, score_bias, **_) -> None:
    """The same x, mask and bias go to every block: checked as the first one checks them."""
    _check_encoder_block(self.blocks[0], x, mask, None, score_bias)


def _check_decoder_block(self, x, memory, mask, memory_mask, **_) -> None:
    _checks.sequence("x", x, self.d_model, module=self)
    _checks.sequence("memory", memory, self.d_model, module=self)
    _checks.same_size("batch size B", slice(0, 1), ("x", x), ("memory", memory))
    for name, m, t_k in (("mask", mask, x.shape[1]), ("memory_mask", memory_mask, memory.shape[1])):
        if m is not None:
            _checks.attention_mask(name, m, (x.shape[0], self.n_heads, x.shape[1], t_k), device=x.device)


def _check_from_torch(cls, layer, **_) -> None:
    """A ``torch.nn.Transformer{Encoder,Decoder}Layer`` (as ``cls`` is an encoder or a decoder block) with an
    activation the library has."""
    torch_cls = nn.TransformerDecoderLayer if issubclass(cls, DecoderBlock) else nn.TransformerEncoderLayer
    if not isinstance(layer, torch_cls):
        raise TypeError(f"layer must be a torch.nn.{torch_cls.__name__}, got {type(layer).__name__}")
    act = layer.activation
    if not (act in (F.relu, F.gelu) or isinstance(act, (nn.ReLU, nn.GELU))):
        raise ValueError(f"the layer's activation {act!r} has no counterpart here (relu or gelu)")


def _check_masked_mean(x, keep, **_) -> None:
    _checks.tensor("x", x, ndim=3, floating=True)
    if keep is not None:
        _checks.tensor("keep", keep, ndim=2, dtype=torch.bool)
        if tuple(keep.shape) != tuple(x.shape[:2]):
            raise ValueError(
                f"keep must have shape (B, T) = {_checks.shape_str(x.shape[:2])}, got {_checks.shape_str(keep.shape)}"
            )
