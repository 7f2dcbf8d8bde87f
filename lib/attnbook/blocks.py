"""Transformer blocks: the position-wise feed-forward network, normalisation, encoder and decoder blocks.

A block is the unit a transformer stacks. Self-attention is the only place where positions interact;
the normalisation layers and the feed-forward network act on each position on its own. Each sub-layer
sits on a residual path, with its normalisation either after the sum ("post", the 2017 paper, and the
default of ``torch.nn.TransformerEncoderLayer``) or at the entrance of the branch ("pre", GPT-2 and
later)::

    post:  x = norm(x + sublayer(x))        pre:  x = x + sublayer(norm(x))

Choices are named by strings so that new kinds can be registered without changing any signature:
``NORMS`` (normalisation layers), ``MLPS`` (feed-forward networks), ``NORM_POSITIONS``.

Chapter: the transformer block (08). Modern tweaks (11) adds other norms and MLPs; the Vision
Transformer (10) reuses the encoder block.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from . import _checks
from .attention import GroupedQueryAttention, KVCache, MultiHeadAttention, _work_dtype

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
]

NORM_POSITIONS = ("post", "pre")

# name -> factory(d_model, *, eps, bias) returning a module that normalises the last dimension
NORMS: dict[str, Callable[..., nn.Module]] = {
    "layernorm": lambda d_model, *, eps, bias: nn.LayerNorm(d_model, eps=eps, bias=bias),
}

_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    # GPT-2's GELU, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))): a close approximation of the exact one
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


def _choice(name: str, value, options) -> str:
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(repr(o) for o in options)}, got {value!r}")
    return value


def _dropout(value) -> float:
    p = _checks.positive_float("dropout", value, allow_zero=True)
    if p >= 1:
        raise ValueError(f"dropout must be in [0, 1), got {value}")
    return p


def make_norm(kind: str, d_model: int, *, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    """The normalisation layer named ``kind`` (a key of ``NORMS``) for vectors of width ``d_model``.

    Shapes:
        input and output: (..., D)

    Chapter: the transformer block (LayerNorm); modern tweaks (RMSNorm).
    """
    _choice("kind", kind, tuple(NORMS))
    return NORMS[kind](_checks.positive_int("d_model", d_model), eps=_checks.positive_float("eps", eps), bias=bias)


class FeedForward(nn.Module):
    r"""The position-wise feed-forward network FFN(x) = act(x W_1 + b_1) W_2 + b_2, applied to each position.

    ``activation`` is ``"relu"`` (the 2017 paper), ``"gelu"`` or ``"gelu_tanh"`` (GPT-2's tanh approximation
    of the GELU, chapter 13). The dropout after the activation
    is the one of ``torch.nn.TransformerEncoderLayer``.

    Shapes:
        x:      (..., D)
        return: (..., D), with a hidden width F = d_ff in between

    Chapter: the transformer block.
    """

    def __init__(self, d_model: int, d_ff: int, *, activation: str = "relu", dropout: float = 0.0, bias: bool = True):
        super().__init__()
        _checks.positive_int("d_model", d_model)
        _checks.positive_int("d_ff", d_ff)
        self.activation = _choice("activation", activation, tuple(_ACTIVATIONS))
        self.W_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.W_2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(_dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _checks.features("x", x, self.W_1.in_features, module=self)
        h = _ACTIVATIONS[self.activation](self.W_1(x))  # (..., F)
        return self.W_2(self.dropout(h))  # (..., D)


class ConvFeedForward(nn.Module):
    """The same feed-forward network written as two 1x1 convolutions over the sequence (channels = features).

    ``ConvFeedForward.from_linear(ffn)`` shares the weights of a :class:`FeedForward`: a ``Linear`` weight
    (out, in) is a ``Conv1d`` kernel (out, in, 1).

    Shapes:
        x:      (B, T, D)
        return: (B, T, D)

    Chapter: the transformer block (the FFN is a 1x1 convolution).
    """

    def __init__(self, d_model: int, d_ff: int, *, activation: str = "relu", bias: bool = True):
        super().__init__()
        _checks.positive_int("d_model", d_model)
        _checks.positive_int("d_ff", d_ff)
        self.activation = _choice("activation", activation, tuple(_ACTIVATIONS))
        self.conv_1 = nn.Conv1d(d_model, d_ff, kernel_size=1, bias=bias)
        self.conv_2 = nn.Conv1d(d_ff, d_model, kernel_size=1, bias=bias)

    @classmethod
    def from_linear(cls, ffn: FeedForward) -> ConvFeedForward:
        """A ConvFeedForward whose kernels are the (shared, not copied) weights of ``ffn``, viewed as (out, in, 1)."""
        d_ff, d_model = ffn.W_1.weight.shape
        conv = cls(d_model, d_ff, activation=ffn.activation, bias=ffn.W_1.bias is not None)
        for linear, layer in ((ffn.W_1, conv.conv_1), (ffn.W_2, conv.conv_2)):
            del layer.weight
            layer.weight = linear.weight.unsqueeze(-1)  # (out, in, 1): a view of the same storage
            if linear.bias is not None:
                layer.bias = linear.bias
        return conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _checks.sequence("x", x, self.conv_1.in_channels, module=self)
        h = x.transpose(1, 2)  # (B, D, T): Conv1d wants channels first
        h = _ACTIVATIONS[self.activation](self.conv_1(h))  # (B, F, T)
        return self.conv_2(h).transpose(1, 2)  # (B, T, D)


# name -> factory(d_model, d_ff, *, dropout, bias) returning a position-wise module (..., D) -> (..., D)
MLPS: dict[str, Callable[..., nn.Module]] = {
    "relu": lambda d_model, d_ff, *, dropout, bias: FeedForward(
        d_model, d_ff, activation="relu", dropout=dropout, bias=bias
    ),
    "gelu": lambda d_model, d_ff, *, dropout, bias: FeedForward(
        d_model, d_ff, activation="gelu", dropout=dropout, bias=bias
    ),
    "gelu_tanh": lambda d_model, d_ff, *, dropout, bias: FeedForward(
        d_model, d_ff, activation="gelu_tanh", dropout=dropout, bias=bias
    ),
}


def make_mlp(kind: str, d_model: int, d_ff: int, *, dropout: float = 0.0, bias: bool = True) -> nn.Module:
    """The position-wise network named ``kind`` (a key of ``MLPS``): D -> F -> D.

    Chapter: the transformer block (ReLU, GELU); modern tweaks (SwiGLU, mixture of experts).
    """
    _choice("kind", kind, tuple(MLPS))
    return MLPS[kind](d_model, d_ff, dropout=_dropout(dropout), bias=bias)


class _Block(nn.Module):
    """What encoder and decoder blocks share: argument checks, the FFN, and the residual wiring."""

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
        _checks.positive_int("d_model", d_model)
        _checks.positive_int("n_heads", n_heads)
        d_ff = 4 * d_model if d_ff is None else _checks.positive_int("d_ff", d_ff)
        self.norm_position = _choice("norm_position", norm_position, NORM_POSITIONS)
        _choice("norm", norm, tuple(NORMS))
        _choice("mlp", mlp, tuple(MLPS))
        dropout = _dropout(dropout)
        self.d_model, self.n_heads, self.d_ff = d_model, n_heads, d_ff
        if n_kv_heads is None and not rope and not qk_norm:
            self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, bias=bias)
        else:  # modern tweaks: fewer key/value heads, rotary positions, a KV cache
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

    def _check_mask(self, name, mask, t_q, t_k, x):
        """A boolean mask (True = may attend) against the scores (B, H, t_q, t_k), under the caller's name."""
        if mask is not None:
            _checks.attention_mask(name, mask, (x.shape[0], self.n_heads, t_q, t_k), device=x.device)


class EncoderBlock(_Block):
    r"""A transformer encoder block: multi-head self-attention, then the FFN, each on a residual path.

    Post-norm (``norm_position="post"``, the 2017 paper)::

        x = norm_1(x + Dropout(SelfAttention(x)))
        x = norm_2(x + Dropout(FFN(x)))

    Pre-norm (``"pre"``): ``x = x + Dropout(SelfAttention(norm_1(x)))``, then ``x = x + Dropout(FFN(norm_2(x)))``.
    With ``is_causal=True`` it is the block of a decoder-only language model (GPT). With the same weights it
    equals ``torch.nn.TransformerEncoderLayer(d_model, n_heads, d_ff, batch_first=True,
    norm_first=(norm_position == "pre"))``; :meth:`from_torch` copies one.

    ``score_bias`` is added to the attention scores (see ``attention.scaled_dot_product_attention``).

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
            d_model,
            n_heads,
            d_ff,
            dropout,
            mlp,
            norm,
            norm_position,
            bias,
            eps,
            n_norms=2,
            n_kv_heads=n_kv_heads,
            rope=rope,
            qk_norm=qk_norm,
        )

    @property
    def norm_1(self) -> nn.Module:
        return self.norms[0]

    @property
    def norm_2(self) -> nn.Module:
        return self.norms[1]

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
        _checks.sequence("x", x, self.d_model, module=self)
        weights = []
        extra = {} if score_bias is None else {"score_bias": score_bias}
        if cache is not None:  # generation with a KV cache (modern tweaks)
            if not isinstance(self.self_attn, GroupedQueryAttention):
                raise TypeError(
                    "cache needs a block built with n_kv_heads or rope (GroupedQueryAttention); "
                    "n_kv_heads=n_heads gives multi-head attention that supports a KV cache"
                )
            if not isinstance(cache, KVCache):
                raise TypeError(f"cache must be an attnbook.attention.KVCache, got {type(cache).__name__}")
            extra["cache"] = cache
        self._check_mask("mask", mask, x.shape[1], x.shape[1] + (0 if cache is None else cache.length), x)

        def attend(h):
            out = self.self_attn(h, mask=mask, is_causal=is_causal, return_weights=return_weights, **extra)
            if return_weights:
                out, w = out
                weights.append(w)
            return out  # (B, T, D)

        x = self._sublayer(x, 0, attend)  # (B, T, D)
        x = self._sublayer(x, 1, self.ffn)  # (B, T, D)
        return (x, weights[0]) if return_weights else x

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> EncoderBlock:
        """An EncoderBlock with the configuration and a copy of the weights of a ``TransformerEncoderLayer``."""
        return _from_torch(cls, layer, nn.TransformerEncoderLayer, [("self_attn", "self_attn")])


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
            d_model,
            n_heads,
            d_ff,
            dropout,
            mlp,
            norm,
            norm_position,
            bias,
            eps,
            n_norms=3,
            n_kv_heads=n_kv_heads,
            rope=rope,
            qk_norm=qk_norm,
        )
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=float(self.dropout.p), bias=bias)

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
        _checks.sequence("x", x, self.d_model, module=self)
        _checks.sequence("memory", memory, self.d_model, module=self)
        _checks.same_size("batch size B", slice(0, 1), ("x", x), ("memory", memory))
        self._check_mask("mask", mask, x.shape[1], x.shape[1], x)
        self._check_mask("memory_mask", memory_mask, x.shape[1], memory.shape[1], x)
        weights = []

        def keep(out):
            if return_weights:
                out, w = out
                weights.append(w)
            return out  # (B, T, D)

        x = self._sublayer(
            x, 0, lambda h: keep(self.self_attn(h, mask=mask, is_causal=is_causal, return_weights=return_weights))
        )
        x = self._sublayer(
            x, 1, lambda h: keep(self.cross_attn(h, memory, memory, mask=memory_mask, return_weights=return_weights))
        )
        x = self._sublayer(x, 2, self.ffn)  # (B, T, D)
        return (x, tuple(weights)) if return_weights else x

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> DecoderBlock:
        """A DecoderBlock with the configuration and a copy of the weights of a ``TransformerDecoderLayer``."""
        return _from_torch(
            cls, layer, nn.TransformerDecoderLayer, [("self_attn", "self_attn"), ("cross_attn", "multihead_attn")]
        )


def _torch_activation(layer) -> str:
    act = layer.activation
    for name, fn in (("relu", F.relu), ("gelu", F.gelu)):
        if act is fn or isinstance(act, {"relu": nn.ReLU, "gelu": nn.GELU}[name]):
            return name
    raise ValueError(f"the layer's activation {act!r} has no counterpart here (relu or gelu)")


@torch.no_grad()
def _from_torch(cls, layer: nn.Module, torch_cls: type, attentions: list[tuple[str, str]]):
    """A block of class ``cls`` with the configuration and a copy of the weights of the PyTorch ``layer``."""
    if not isinstance(layer, torch_cls):
        raise TypeError(f"layer must be a torch.nn.{torch_cls.__name__}, got {type(layer).__name__}")
    block = cls(
        layer.linear1.in_features,
        layer.self_attn.num_heads,
        layer.linear1.out_features,
        dropout=float(layer.dropout.p),
        mlp=_torch_activation(layer),
        norm_position="pre" if layer.norm_first else "post",
        bias=layer.linear1.bias is not None,
        eps=layer.norm1.eps,
    )
    block.to(layer.linear1.weight)  # the layer's dtype and device, so that nothing is rounded
    _copy_torch(block, layer, attentions)
    return block


def _copy_torch(block: _Block, layer: nn.Module, attentions: list[tuple[str, str]]) -> None:
    """Copy the weights of a torch encoder/decoder layer into ``block`` (same configuration)."""
    for ours, theirs in attentions:
        mha, ref = getattr(block, ours), getattr(layer, theirs)
        for W, w, b in zip(
            (mha.W_q, mha.W_k, mha.W_v),
            ref.in_proj_weight.chunk(3),
            (ref.in_proj_bias.chunk(3) if ref.in_proj_bias is not None else (None,) * 3),
        ):
            W.weight.copy_(w)
            if b is not None:
                W.bias.copy_(b)
        mha.W_o.load_state_dict(ref.out_proj.state_dict())
    block.ffn.W_1.load_state_dict(layer.linear1.state_dict())
    block.ffn.W_2.load_state_dict(layer.linear2.state_dict())
    for i, norm in enumerate(block.norms, start=1):
        norm.load_state_dict(getattr(layer, f"norm{i}").state_dict())


# --- Modern tweaks: RMSNorm, SwiGLU, mixture of experts ----------------------------------------------------
# Chapter: modern tweaks (11).


class RMSNorm(nn.Module):
    r"""Root-mean-square normalisation: y = x / sqrt(mean(x^2) + eps) * gamma (no mean subtracted, no bias).

    Equals ``torch.nn.RMSNorm(d_model, eps=eps)`` (Zhang and Sennrich, 2019).

    Shapes:
        x:      (..., D)
        return: (..., D)

    Chapter: modern tweaks.
    """

    def __init__(self, d_model: int, *, eps: float = 1e-5):
        super().__init__()
        self.d_model = _checks.positive_int("d_model", d_model)
        self.eps = _checks.positive_float("eps", eps)
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _checks.features("x", x, self.d_model, module=self)
        h = x.to(_work_dtype(x.dtype))  # half precision: the square would overflow, so compute in float32
        inv_rms = torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        return (h * inv_rms * self.weight).to(x.dtype)  # (..., D)

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps:g}"


class SwiGLU(nn.Module):
    r"""The gated feed-forward network SwiGLU(x) = (SiLU(x W_1) * (x W_2)) W_3 (Shazeer, 2020).

    The gate SiLU(z) = z sigmoid(z) (Swish with beta = 1) multiplies a second linear map of x element by
    element. Three matrices instead of two: a hidden width F = 8D/3 has the parameters of a D -> 4D -> D MLP.

    Shapes:
        x:      (..., D)
        return: (..., D), with a hidden width F = d_ff in between

    Chapter: modern tweaks.
    """

    def __init__(self, d_model: int, d_ff: int, *, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        _checks.positive_int("d_model", d_model)
        _checks.positive_int("d_ff", d_ff)
        self.W_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.W_2 = nn.Linear(d_model, d_ff, bias=bias)
        self.W_3 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(_dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _checks.features("x", x, self.W_1.in_features, module=self)
        h = F.silu(self.W_1(x)) * self.W_2(x)  # (..., F)
        return self.W_3(self.dropout(h))  # (..., D)


class MixtureOfExperts(nn.Module):
    r"""A mixture-of-experts feed-forward layer: E expert MLPs, each token sent to its top-A experts.

    A router (a linear map D -> E, then a softmax) gives each token the probabilities p_e; the token goes
    to the A experts with the largest p_e, and the output is sum over those of p_e * expert_e(x). The
    load-balancing loss of the Switch Transformer (Fedus et al., 2022), E * sum_e f_e P_e with f_e the
    fraction of routed assignments that went to expert e and P_e the mean router probability of e, is 1
    for a perfectly even split and up to E when every token goes to one expert.

    After each forward, ``last_aux_loss`` (a scalar tensor in the graph, to be added to the training loss
    with a small weight, see :func:`moe_aux_loss`) and ``last_counts`` (the tokens per expert, (E,)) hold
    the routing statistics of that call.

    Shapes:
        x:      (..., D)
        return: (..., D)

    Chapter: modern tweaks.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        n_experts: int = 4,
        top_k: int = 1,
        expert: str = "relu",
        dropout: float = 0.0,
        bias: bool = True,
    ):
        super().__init__()
        _checks.positive_int("d_model", d_model)
        _checks.positive_int("d_ff", d_ff)
        self.n_experts = _checks.positive_int("n_experts", n_experts)
        self.top_k = _checks.positive_int("top_k", top_k)
        if top_k > n_experts:
            raise ValueError(
                f"top_k must be at most n_experts (each token picks top_k of the experts), "
                f"got top_k={top_k} and n_experts={n_experts}"
            )
        if expert not in MLPS or expert.startswith("moe"):
            raise ValueError(f"expert must be a dense MLP kind of MLPS such as 'relu' or 'swiglu', got {expert!r}")
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList(
            make_mlp(expert, d_model, d_ff, dropout=dropout, bias=bias) for _ in range(n_experts)
        )
        self.last_aux_loss: torch.Tensor | None = None
        self.last_counts: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _checks.features("x", x, self.router.in_features, module=self)
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])  # (N, D), N = all positions
        probs = torch.softmax(self.router(tokens), dim=-1)  # (N, E)
        gate, chosen = probs.topk(self.top_k, dim=-1)  # (N, A), (N, A)
        out = torch.zeros_like(tokens)  # (N, D)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.nonzero(chosen == e, as_tuple=True)  # the tokens routed to e, and in which slot
            if rows.numel():
                out.index_add_(0, rows, gate[rows, slot, None] * expert(tokens[rows]))  # (n_e, D) into (N, D)
        counts = torch.bincount(chosen.flatten(), minlength=self.n_experts)  # (E,)
        f = counts.to(probs.dtype) / chosen.numel()  # (E,): share of assignments
        self.last_aux_loss = self.n_experts * (f * probs.mean(dim=0)).sum()
        self.last_counts = counts.detach()
        return out.reshape(shape)  # (..., D)


def register_moe(n_experts: int, top_k: int, *, expert: str = "relu") -> str:
    """Register a mixture of experts with these settings in ``MLPS`` and return its name (for configs).

    Each expert has the hidden width d_ff given to the factory.

    Chapter: modern tweaks.
    """
    name = f"moe-{n_experts}x{expert}-top{top_k}"
    MixtureOfExperts(4, 4, n_experts=n_experts, top_k=top_k, expert=expert)  # validate the settings now
    MLPS[name] = lambda d_model, d_ff, *, dropout, bias: MixtureOfExperts(
        d_model, d_ff, n_experts=n_experts, top_k=top_k, expert=expert, dropout=dropout, bias=bias
    )
    return name


def moe_aux_loss(model: nn.Module) -> torch.Tensor:
    """The sum of the load-balancing losses of every :class:`MixtureOfExperts` in ``model`` (0 if none ran)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    losses = [
        m.last_aux_loss for m in model.modules() if isinstance(m, MixtureOfExperts) and m.last_aux_loss is not None
    ]
    return torch.stack(losses).sum() if losses else torch.zeros(())


NORMS["rmsnorm"] = lambda d_model, *, eps, bias: RMSNorm(d_model, eps=eps)
MLPS["swiglu"] = lambda d_model, d_ff, *, dropout, bias: SwiGLU(d_model, d_ff, dropout=dropout, bias=bias)
MLPS["moe"] = lambda d_model, d_ff, *, dropout, bias: MixtureOfExperts(
    d_model, d_ff, n_experts=4, top_k=1, dropout=dropout, bias=bias
)


# --- Any tokens: a stack of encoder blocks and a pooled summary -------------------------------------------
# Chapter: beyond text (15): sets, graphs, sound and several modalities all go through this stack.

__all__ += ["EncoderStack", "masked_mean"]


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
        self.blocks = nn.ModuleList(
            EncoderBlock(
                d_model,
                n_heads,
                d_ff,
                dropout=dropout,
                mlp=mlp,
                norm=norm,
                norm_position=norm_position,
                bias=bias,
                eps=eps,
            )
            for _ in range(n_layers)
        )
        self.norm_f = make_norm(norm, d_model, eps=eps, bias=bias) if norm_position == "pre" else nn.Identity()

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
    _checks.tensor("x", x, ndim=3, floating=True)
    if keep is None:
        return x.mean(dim=1)  # (B, D)
    _checks.tensor("keep", keep, ndim=2, dtype=torch.bool)
    if tuple(keep.shape) != tuple(x.shape[:2]):
        raise ValueError(
            f"keep must have shape (B, T) = {_checks.shape_str(x.shape[:2])}, got {_checks.shape_str(keep.shape)}"
        )
    w = keep.to(x.dtype).unsqueeze(-1)  # (B, T, 1)
    kept = torch.where(keep.unsqueeze(-1), x, 0.0)  # (B, T, D): a NaN in a token not kept reaches nothing
    return kept.sum(dim=1) / w.sum(dim=1).clamp(min=1.0)  # (B, D)
