"""Position-wise layers: the normalisations and feed-forward networks that act on each position on its own.

A transformer block is self-attention (where positions interact) and these. Kinds are named by strings and
registered, so that a new one needs no new signature: ``NORMS`` (normalisation layers) and ``MLPS``
(feed-forward networks), built by :func:`make_norm` and :func:`make_mlp`. ``attnbook.blocks`` exports them
all, as the chapters use them (``blocks.FeedForward``, ``blocks.RMSNorm``...).

Chapter: the transformer block (08: the FFN, LayerNorm); modern tweaks (11: RMSNorm, SwiGLU, mixture of experts).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from . import _checks
from ._checks import checked_by
from ._numerics import work_dtype

__all__ = [
    "NORMS",
    "MLPS",
    "make_norm",
    "make_mlp",
    "FeedForward",
    "ConvFeedForward",
    "RMSNorm",
    "SwiGLU",
    "MixtureOfExperts",
    "register_moe",
    "moe_aux_loss",
]

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


@checked_by("_check_make_norm")
def make_norm(kind: str, d_model: int, *, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    """The normalisation layer named ``kind`` (a key of ``NORMS``) for vectors of width ``d_model``.

    Shapes:
        input and output: (..., D)

    Chapter: the transformer block (LayerNorm); modern tweaks (RMSNorm).
    """
    return NORMS[kind](d_model, eps=float(eps), bias=bias)


class FeedForward(nn.Module):
    r"""The position-wise feed-forward network FFN(x) = act(x W_1 + b_1) W_2 + b_2, applied to each position.

    ``activation`` is ``"relu"`` (the 2017 paper), ``"gelu"`` or ``"gelu_tanh"`` (GPT-2's tanh approximation
    of the GELU, chapter 13). The dropout after the activation is the one of ``torch.nn.TransformerEncoderLayer``.

    Shapes:
        x:      (..., D)
        return: (..., D), with a hidden width F = d_ff in between

    Chapter: the transformer block.
    """

    def __init__(self, d_model: int, d_ff: int, *, activation: str = "relu", dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.activation = _check_ffn(d_model, d_ff, activation)
        self.W_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.W_2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(_check_dropout(dropout))

    @checked_by("_check_features")
    def forward(self, x: torch.Tensor) -> torch.Tensor:
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
        self.activation = _check_ffn(d_model, d_ff, activation)
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

    @checked_by("_check_sequence")
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.transpose(1, 2)  # (B, D, T): Conv1d wants channels first
        h = _ACTIVATIONS[self.activation](self.conv_1(h))  # (B, F, T)
        return self.conv_2(h).transpose(1, 2)  # (B, T, D)


# name -> factory(d_model, d_ff, *, dropout, bias) returning a position-wise module (..., D) -> (..., D)
MLPS: dict[str, Callable[..., nn.Module]] = {
    kind: functools.partial(FeedForward, activation=kind) for kind in ("relu", "gelu", "gelu_tanh")
}


@checked_by("_check_make_mlp")
def make_mlp(kind: str, d_model: int, d_ff: int, *, dropout: float = 0.0, bias: bool = True) -> nn.Module:
    """The position-wise network named ``kind`` (a key of ``MLPS``): D -> F -> D.

    Chapter: the transformer block (ReLU, GELU); modern tweaks (SwiGLU, mixture of experts).
    """
    return MLPS[kind](d_model, d_ff, dropout=float(dropout), bias=bias)


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
        self.d_model, self.eps = _check_rmsnorm(d_model, eps)
        self.weight = nn.Parameter(torch.ones(d_model))

    @checked_by("_check_features")
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(work_dtype(x.dtype))  # half precision: the square would overflow, so compute in float32
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
        _check_widths(d_model, d_ff)
        self.W_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.W_2 = nn.Linear(d_model, d_ff, bias=bias)
        self.W_3 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(_check_dropout(dropout))

    @checked_by("_check_features")
    def forward(self, x: torch.Tensor) -> torch.Tensor:
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
        self.n_experts, self.top_k = _check_moe(d_model, d_ff, n_experts, top_k, expert)
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList(
            make_mlp(expert, d_model, d_ff, dropout=dropout, bias=bias) for _ in range(n_experts)
        )
        self.last_aux_loss: torch.Tensor | None = None
        self.last_counts: torch.Tensor | None = None

    @checked_by("_check_features")
    def forward(self, x: torch.Tensor) -> torch.Tensor:
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


@checked_by("_check_model")
def moe_aux_loss(model: nn.Module) -> torch.Tensor:
    """The sum of the load-balancing losses of every :class:`MixtureOfExperts` in ``model`` (0 if none ran)."""
    losses = [
        m.last_aux_loss for m in model.modules() if isinstance(m, MixtureOfExperts) and m.last_aux_loss is not None
    ]
    return torch.stack(losses).sum() if losses else torch.zeros(())


NORMS["rmsnorm"] = lambda d_model, *, eps, bias: RMSNorm(d_model, eps=eps)
MLPS["swiglu"] = lambda d_model, d_ff, *, dropout, bias: SwiGLU(d_model, d_ff, dropout=dropout, bias=bias)
MLPS["moe"] = lambda d_model, d_ff, *, dropout, bias: MixtureOfExperts(
    d_model, d_ff, n_experts=4, top_k=1, dropout=dropout, bias=bias
)


# --- input checks -----------------------------------------------------------------------------------------
# A function or forward names its checks with @checked_by: they run at the boundary only (a block checks for its
# FFN); a constructor calls its own.


def _check_dropout(value) -> float:
    return _checks.dropout("dropout", value)


def _check_rmsnorm(d_model, eps) -> tuple[int, float]:
    return _checks.positive_int("d_model", d_model), _checks.positive_float("eps", eps)


def _check_widths(d_model, d_ff) -> None:
    _checks.positive_int("d_model", d_model)
    _checks.positive_int("d_ff", d_ff)


def _check_ffn(d_model, d_ff, activation) -> str:
    _check_widths(d_model, d_ff)
    return _checks.choice("activation", activation, tuple(_ACTIVATIONS))


def _check_make_norm(kind, d_model, eps, **_) -> None:
    _checks.choice("kind", kind, tuple(NORMS))
    _checks.positive_int("d_model", d_model)
    _checks.positive_float("eps", eps)


def _check_make_mlp(kind, dropout, **_) -> None:
    _checks.choice("kind", kind, tuple(MLPS))
    _check_dropout(dropout)


def _check_moe(d_model, d_ff, n_experts, top_k, expert) -> tuple[int, int]:
    _check_widths(d_model, d_ff)
    _checks.positive_int("n_experts", n_experts)
    _checks.positive_int("top_k", top_k)
    if top_k > n_experts:
        raise ValueError(
            f"top_k must be at most n_experts (each token picks top_k of the experts), "
            f"got top_k={top_k} and n_experts={n_experts}"
        )
    if expert not in MLPS or expert.startswith("moe"):
        raise ValueError(f"expert must be a dense MLP kind of MLPS such as 'relu' or 'swiglu', got {expert!r}")
    return n_experts, top_k


def _check_features(self, x, **_) -> None:
    """x (..., D), in the dtype and on the device of the layer's parameters."""
    _checks.features("x", x, _width(self), module=self)


def _check_sequence(self, x, **_) -> None:
    _checks.sequence("x", x, self.conv_1.in_channels, module=self)


def _width(layer: nn.Module) -> int:
    """The width D a position-wise layer reads: RMSNorm's own, else the input width of its first linear map."""
    if isinstance(layer, RMSNorm):
        return layer.d_model
    return (layer.router if isinstance(layer, MixtureOfExperts) else layer.W_1).in_features


def _check_model(model, **_) -> None:
    _checks.module("model", model)
