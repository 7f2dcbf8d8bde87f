"""Transformer models built from the blocks: a frozen configuration, Encoder, Decoder, EncoderDecoder, GPT.

Everything a model is made of is named in :class:`TransformerConfig`, in the style of nanoGPT: widths,
depths, the norm and where it sits (``norm_position``), the MLP, the positional encoding, the
initialisation. New kinds (RMSNorm, SwiGLU, RoPE...) are added by registering them, not by new
signatures: see ``blocks.NORMS``, ``blocks.MLPS`` and ``POSITIONALS`` below.

Chapter: the transformer block (08: encoder-decoder, decoder-only language model, parameter counts);
the lab (12: the character-level GPT, generation); modern tweaks (11).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from . import _checks, positional
from .attention import GroupedQueryAttention, KVCache
from .blocks import MLPS, NORM_POSITIONS, NORMS, DecoderBlock, EncoderBlock, make_norm

__all__ = [
    "TransformerConfig",
    "POSITIONALS",
    "INITS",
    "Encoder",
    "Decoder",
    "EncoderDecoder",
    "GPT",
    "lm_loss",
    "lm_loss_sum",
    "evaluate_lm",
    "gpt2_config",
    "gpt2_from_hf",
]


class LearnedPositions(nn.Module):
    """A learned vector per position, added to the token embeddings (GPT-2, the lab).

    Shapes:
        return of forward(T): (T, D)
    """

    def __init__(self, block_size: int, d_model: int):
        super().__init__()
        self.table = positional.LearnedPositionalEmbedding(d_model, block_size)  # its weight: (block_size, D)

    def forward(self, T: int, offset: int = 0) -> torch.Tensor:
        return self.table.encoding(T, offset)  # (T, D)


class SinusoidalPositions(nn.Module):
    r"""The fixed encoding of the 2017 paper, ``positional.sinusoidal``: PE[p, 2i] = sin(p / 10000^{2i/D}),
    PE[p, 2i+1] = cos(same).

    Kept as a non-persistent buffer: not a parameter, not in the state dict.

    Shapes:
        return of forward(T): (T, D)
    """

    def __init__(self, block_size: int, d_model: int):
        super().__init__()
        self.register_buffer("table", positional.sinusoidal(block_size, d_model), persistent=False)  # (T, D)

    def forward(self, T: int, offset: int = 0) -> torch.Tensor:
        return self.table[offset : offset + T]  # (T, D)


class NoPositions(nn.Module):
    """No positional information at all (for experiments; a causal mask still leaks some)."""

    def __init__(self, block_size: int, d_model: int):
        super().__init__()
        self.d_model = d_model

    def forward(self, T: int, offset: int = 0) -> torch.Tensor:
        return torch.zeros(T, self.d_model)  # (T, D), broadcast-added


# name -> factory(block_size, d_model) returning a module whose forward(T) gives (T, D) to add to the embeddings
POSITIONALS: dict[str, Callable[[int, int], nn.Module]] = {
    "learned": LearnedPositions,
    "sinusoidal": SinusoidalPositions,
    "none": NoPositions,
    "rope": NoPositions,  # nothing is added: the attention layers rotate queries and keys (modern tweaks)
}


def _init_gpt2(model: nn.Module, n_layers: int) -> None:
    """GPT-2's initialisation: N(0, 0.02) weights, zero biases, residual projections scaled by 1/sqrt(2L)."""
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            std = 0.02 / math.sqrt(2 * n_layers) if name.endswith(("W_o.weight", "ffn.W_2.weight")) else 0.02
            nn.init.normal_(p, mean=0.0, std=std)
        elif name.endswith("bias") and "norm" not in name:
            nn.init.zeros_(p)


def _init_xavier(model: nn.Module, n_layers: int) -> None:
    """Glorot-uniform weight matrices (the PyTorch and Annotated Transformer choice for the 2017 model)."""
    for p in model.parameters():
        if p.dim() >= 2:
            nn.init.xavier_uniform_(p)


# name -> function(model, n_layers) that initialises the parameters in place
INITS: dict[str, Callable[[nn.Module, int], None]] = {
    "gpt2": _init_gpt2,
    "xavier": _init_xavier,
    "torch": lambda model, n_layers: None,  # keep PyTorch's defaults
}


@dataclass(frozen=True)
class TransformerConfig:
    """Everything that defines a transformer model; frozen, so a config can be shared and saved safely.

    Change a field with ``dataclasses.replace(config, n_layers=6)`` (or ``config.replace(...)``).
    ``d_ff`` defaults to 4 * d_model. For an encoder-decoder, ``src_vocab_size`` defaults to ``vocab_size``
    and ``n_encoder_layers`` to ``n_layers``.

    Chapter: the transformer block; the lab; modern tweaks.
    """

    vocab_size: int
    block_size: int = 256  # the longest context the model accepts (positions 0 .. block_size - 1)
    n_layers: int = 4
    n_heads: int = 4
    d_model: int = 128
    d_ff: int | None = None
    dropout: float = 0.0
    bias: bool = True
    norm: str = "layernorm"  # a key of blocks.NORMS
    norm_position: str = "pre"  # "post" (2017) or "pre" (GPT-2 and later)
    mlp: str = "gelu"  # a key of blocks.MLPS
    positional: str = "learned"  # a key of POSITIONALS
    tie_weights: bool = True  # the output projection shares the token embedding matrix
    scale_embeddings: bool = False  # multiply token embeddings by sqrt(d_model), as the 2017 paper does
    init: str = "gpt2"  # a key of INITS
    eps: float = 1e-5
    src_vocab_size: int | None = None
    n_encoder_layers: int | None = None
    n_kv_heads: int | None = None  # key/value heads of grouped-query attention (None: multi-head attention)
    qk_norm: bool = False  # LayerNorm on each head's queries and keys (scaling and practice)

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layers", "n_heads", "d_model"):
            _checks.positive_int(name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model must be divisible by n_heads, got d_model={self.d_model} and n_heads={self.n_heads}"
            )
        object.__setattr__(
            self, "d_ff", 4 * self.d_model if self.d_ff is None else _checks.positive_int("d_ff", self.d_ff)
        )
        if self.n_kv_heads is not None and self.n_heads % _checks.positive_int("n_kv_heads", self.n_kv_heads):
            raise ValueError(
                f"n_heads must be divisible by n_kv_heads, got n_heads={self.n_heads} and n_kv_heads={self.n_kv_heads}"
            )
        for name in ("src_vocab_size", "n_encoder_layers"):
            if getattr(self, name) is not None:
                _checks.positive_int(name, getattr(self, name))
        p = _checks.positive_float("dropout", self.dropout, allow_zero=True)
        if p >= 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        for name, options in (
            ("norm", NORMS),
            ("norm_position", NORM_POSITIONS),
            ("mlp", MLPS),
            ("positional", POSITIONALS),
            ("init", INITS),
        ):
            if getattr(self, name) not in options:
                raise ValueError(
                    f"{name} must be one of {', '.join(repr(o) for o in options)}, got {getattr(self, name)!r}"
                )
        _checks.positive_float("eps", self.eps)

    def replace(self, **changes) -> TransformerConfig:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def block_kwargs(self) -> dict:
        """The keyword arguments of ``EncoderBlock`` / ``DecoderBlock`` that this config sets."""
        return dict(
            d_model=self.d_model,
            n_heads=self.n_heads,
            d_ff=self.d_ff,
            dropout=self.dropout,
            mlp=self.mlp,
            norm=self.norm,
            norm_position=self.norm_position,
            bias=self.bias,
            eps=self.eps,
            n_kv_heads=self.n_kv_heads,
            rope=self.positional == "rope",
            qk_norm=self.qk_norm,
        )


def _check_config(config) -> TransformerConfig:
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be an attnbook.models.TransformerConfig, got {type(config).__name__}")
    return config


def _is_exporting() -> bool:
    """True while ``torch.export`` (which ``torch.onnx.export(..., dynamo=True)`` uses) traces a model."""
    is_exporting = getattr(torch.compiler, "is_exporting", None)
    return bool(is_exporting and is_exporting())


def _check_ids(name: str, ids, vocab_size: int, block_size: int) -> torch.Tensor:
    """Token ids (B, T): integers in [0, vocab_size), 1 <= T <= block_size."""
    _checks.token_ids(name, ids, vocab_size, ndim=2, values=False)
    B, T = ids.shape
    if T == 0 or B == 0:
        raise ValueError(f"{name} is empty: shape {_checks.shape_str(ids.shape)}")
    if T > block_size:
        raise ValueError(
            f"{name} has length T={T}, longer than the model's block_size={block_size}; "
            f"keep the last {block_size} tokens (generate() crops the context for you)"
        )
    # traced ids have no values to check (torch.export, torch.onnx)
    return _checks.token_ids(name, ids, vocab_size, values=not _is_exporting())


def _check_mask(config: TransformerConfig, name: str, mask, ids: torch.Tensor, t_k: int) -> None:
    """A boolean attention mask (True = may attend) for queries ``ids`` (B, T) and ``t_k`` keys, under the
    caller's name."""
    if mask is not None:
        _checks.attention_mask(name, mask, (ids.shape[0], config.n_heads, ids.shape[1], t_k), device=ids.device)


class _Embed(nn.Module):
    """Token embedding plus positional encoding, then dropout."""

    def __init__(self, vocab_size: int, config: TransformerConfig):
        super().__init__()
        self.token = nn.Embedding(vocab_size, config.d_model)
        self.position = POSITIONALS[config.positional](config.block_size, config.d_model)
        self.scale = math.sqrt(config.d_model) if config.scale_embeddings else 1.0
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        x = self.token(ids) * self.scale  # (B, T, D)
        pos = self.position(ids.shape[1], offset).to(x.device, x.dtype)  # (T, D)
        return self.dropout(x + pos)  # (B, T, D)


def _add_output_layers(model: nn.Module, config: TransformerConfig) -> None:
    """A decoder's last layers: ``norm_f`` (pre-norm stacks only) and ``lm_head``, tied to the embedding if asked."""
    model.norm_f = (
        make_norm(config.norm, config.d_model, eps=config.eps, bias=config.bias)
        if config.norm_position == "pre"
        else nn.Identity()
    )
    model.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
    if config.tie_weights:
        model.lm_head.weight = model.embed.token.weight


class Encoder(nn.Module):
    """Token embedding + positions, a stack of :class:`~attnbook.blocks.EncoderBlock`, a final norm if pre-norm.

    Shapes:
        src:      (B, S) token ids
        src_mask: boolean, True = may attend; (B, 1, S) from ``attention.padding_mask(lengths)``
        return:   (B, S, D)

    Chapter: the transformer block.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = _check_config(config)
        self.vocab_size = config.src_vocab_size or config.vocab_size
        self.embed = _Embed(self.vocab_size, config)
        n = config.n_encoder_layers or config.n_layers
        self.blocks = nn.ModuleList(EncoderBlock(**config.block_kwargs()) for _ in range(n))
        self.norm_f = (
            make_norm(config.norm, config.d_model, eps=config.eps, bias=config.bias)
            if config.norm_position == "pre"
            else nn.Identity()
        )

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        _check_ids("src", src, self.vocab_size, self.config.block_size)
        _check_mask(self.config, "src_mask", src_mask, src, src.shape[1])
        x = self.embed(src)  # (B, S, D)
        for block in self.blocks:
            x = block(x, src_mask)  # (B, S, D)
        return self.norm_f(x)  # (B, S, D)


class Decoder(nn.Module):
    """Token embedding + positions, a stack of :class:`~attnbook.blocks.DecoderBlock`, a final norm, the output layer.

    Shapes:
        tgt:         (B, T) token ids (the target shifted right: it starts with a begin token)
        memory:      (B, S, D), the encoder's output
        memory_mask: boolean, True = may attend, (B, 1, S)
        return:      logits (B, T, V)

    Chapter: the transformer block.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = _check_config(config)
        self.embed = _Embed(config.vocab_size, config)
        self.blocks = nn.ModuleList(DecoderBlock(**config.block_kwargs()) for _ in range(config.n_layers))
        _add_output_layers(self, config)

    def forward(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | None = None,
        *,
        return_weights: bool = False,
    ):
        _check_ids("tgt", tgt, self.config.vocab_size, self.config.block_size)
        _checks.sequence("memory", memory, self.config.d_model, module=self)
        _checks.same_size("batch size B", slice(0, 1), ("tgt", tgt), ("memory", memory))
        _check_mask(self.config, "memory_mask", memory_mask, tgt, memory.shape[1])
        x = self.embed(tgt)  # (B, T, D)
        cross = []
        for block in self.blocks:
            if return_weights:
                x, (_, w) = block(x, memory, memory_mask=memory_mask, return_weights=True)
                cross.append(w)  # (B, H, T, S)
            else:
                x = block(x, memory, memory_mask=memory_mask)  # (B, T, D)
        logits = self.lm_head(self.norm_f(x))  # (B, T, V)
        return (logits, cross) if return_weights else logits


class EncoderDecoder(nn.Module):
    """The 2017 transformer: an :class:`Encoder` reads the source, a :class:`Decoder` writes the target.

    Shapes:
        src:      (B, S) source ids
        tgt:      (B, T) target ids, shifted right (teacher forcing)
        src_mask: boolean, True = may attend, (B, 1, S) (padding)
        return:   logits (B, T, V)

    Chapter: the transformer block.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = _check_config(config)
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        INITS[config.init](self, config.n_layers)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        _check_ids("src", src, self.encoder.vocab_size, self.config.block_size)
        _check_ids("tgt", tgt, self.config.vocab_size, self.config.block_size)
        _checks.same_size("batch size B", slice(0, 1), ("src", src), ("tgt", tgt))
        _check_mask(self.config, "src_mask", src_mask, tgt, src.shape[1])  # the decoder's cross-attention
        return self.decoder(tgt, self.encoder(src, src_mask), src_mask)  # (B, T, V)

    @torch.no_grad()
    def greedy_decode(
        self, src: torch.Tensor, *, bos: int, eos: int, max_len: int, src_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Generate targets one token at a time, each time feeding back the most likely token.

        Returns (B, L) ids without the begin token, L <= max_len; after a sequence's end token, the rest of
        its row is filled with ``eos``.
        """
        _checks.positive_int("max_len", max_len)
        was_training = self.training
        self.eval()
        memory = self.encoder(src, src_mask)  # (B, S, D)
        ys = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)  # (B, 1)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        for _ in range(min(max_len, self.config.block_size)):
            logits = self.decoder(ys, memory, src_mask)[:, -1]  # (B, V)
            nxt = logits.argmax(dim=-1).masked_fill(done, eos)  # (B,)
            ys = torch.cat([ys, nxt[:, None]], dim=1)  # (B, t + 1)
            done |= nxt == eos
            if bool(done.all()):
                break
        self.train(was_training)
        return ys[:, 1:]


class GPT(nn.Module):
    r"""A decoder-only transformer language model: predicts each next token from the ones before it.

    Token embedding + positions, ``n_layers`` causal :class:`~attnbook.blocks.EncoderBlock` (an encoder
    block with a causal mask is exactly GPT's block), a final norm (pre-norm), and an output layer that
    shares the embedding matrix when ``tie_weights``.

    Shapes:
        idx:    (B, T) token ids, T <= block_size
        return: logits (B, T, V); with ``return_weights=True`` also a list of n_layers weights (B, H, T, T)

    Chapter: the transformer block (decoder-only language model); the lab (the character-level GPT).
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = _check_config(config)
        self.embed = _Embed(config.vocab_size, config)
        self.blocks = nn.ModuleList(EncoderBlock(**config.block_kwargs()) for _ in range(config.n_layers))
        _add_output_layers(self, config)
        INITS[config.init](self, config.n_layers)

    def forward(
        self, idx: torch.Tensor, *, return_weights: bool = False, caches: list | None = None, checkpoint: bool = False
    ):
        """Logits for ``idx``; with ``caches`` (one :class:`~attnbook.attention.KVCache` per layer, see
        :meth:`new_caches`) ``idx`` holds only the new tokens, which follow the ones already cached.

        ``checkpoint=True`` runs each block under ``torch.utils.checkpoint``: the forward pass keeps only
        the blocks' inputs, and the backward pass recomputes each block's activations (activation
        checkpointing, chapter on scaling and practice). It is for training; it changes nothing else."""
        _check_ids("idx", idx, self.config.vocab_size, self.config.block_size)
        offset = 0
        if caches is not None:
            if not isinstance(caches, (list, tuple)) or len(caches) != len(self.blocks):
                raise ValueError(
                    f"caches must be a list of {len(self.blocks)} KVCache (one per layer), "
                    f"got {type(caches).__name__} of length {len(caches) if hasattr(caches, '__len__') else '?'}"
                )
            offset = caches[0].length
            if offset + idx.shape[1] > self.config.block_size:
                raise ValueError(
                    f"the cache holds {offset} positions and idx adds {idx.shape[1]}: more than "
                    f"block_size={self.config.block_size}"
                )
        x = self.embed(idx, offset)  # (B, T, D)
        weights = []
        for i, block in enumerate(self.blocks):
            if return_weights:
                x, w = block(x, is_causal=True, return_weights=True, cache=None if caches is None else caches[i])
                weights.append(w)  # (B, H, T, T)
            elif checkpoint and caches is None and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(block, x, is_causal=True, use_reentrant=False)  # (B, T, D)
            else:
                x = block(x, is_causal=True, cache=None if caches is None else caches[i])  # (B, T, D)
        logits = self.lm_head(self.norm_f(x))  # (B, T, V)
        return (logits, weights) if return_weights else logits

    def new_caches(self) -> list:
        """Empty KV caches, one per layer, for :meth:`forward` and ``generate(use_cache=True)``."""
        return [KVCache() for _ in self.blocks]

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of predicting ``targets`` (B, T) (the inputs shifted by one) from ``idx`` (B, T)."""
        return lm_loss(self(idx), targets)

    @classmethod
    def from_hf(cls, source, *, n_heads: int | None = None, eps: float = 1e-5) -> GPT:
        """A GPT holding the weights of a Hugging Face GPT-2 (see :func:`gpt2_from_hf`).

        ``source`` is a ``transformers.GPT2LMHeadModel`` (or ``GPT2Model``), its state dict (then give
        ``n_heads``, which the shapes do not tell, and ``eps`` if not 1e-5), or a checkpoint name such as
        ``"gpt2"`` (downloaded by ``transformers``, so it needs the network the first time).

        Chapter: from text to tokens, and pretraining (from the book's GPT to GPT-2).
        """
        return gpt2_from_hf(source, n_heads=n_heads, eps=eps, cls=cls)

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        use_cache: bool = False,
    ) -> torch.Tensor:
        """Append ``max_new_tokens`` sampled tokens to ``idx`` (B, T); returns (B, T + max_new_tokens).

        Each step sees at most the last ``block_size`` tokens (longer contexts are cropped, not an error).
        ``temperature=0`` picks the most likely token (greedy); ``top_k`` samples among the k most likely.
        ``use_cache=True`` keeps each layer's keys and values (a KV cache, modern tweaks) so each step
        computes only the newest position; once the context is full it falls back to recomputing the
        cropped context, so the tokens are the same as without the cache. It needs attention layers that
        take a cache (``n_kv_heads`` set or ``positional="rope"``).
        """
        if isinstance(idx, torch.Tensor) and idx.dim() == 1:
            idx = idx.unsqueeze(0)  # (1, T)
        _checks.tensor("idx", idx, ndim=2)
        _check_ids("idx", idx[:, -self.config.block_size :], self.config.vocab_size, self.config.block_size)
        _checks.positive_int("max_new_tokens", max_new_tokens, minimum=0)
        temperature = _checks.positive_float("temperature", temperature, allow_zero=True)
        if top_k is not None:
            top_k = min(_checks.positive_int("top_k", top_k), self.config.vocab_size)
        was_training = self.training
        self.eval()
        if use_cache and not all(isinstance(b.self_attn, GroupedQueryAttention) for b in self.blocks):
            raise TypeError(
                "use_cache=True needs attention layers that take a KV cache: build the model with "
                "n_kv_heads (n_kv_heads=n_heads is multi-head attention) or positional='rope'"
            )
        caches = None
        for _ in range(max_new_tokens):
            if not use_cache:
                context = idx[:, -self.config.block_size :]  # (B, <= block_size)
                logits = self(context)[:, -1, :]  # (B, V)
            elif caches is None or caches[0].length >= self.config.block_size:  # (re)fill the cache
                caches = self.new_caches()
                logits = self(idx[:, -self.config.block_size :], caches=caches)[:, -1, :]  # (B, V)
            else:
                logits = self(idx[:, -1:], caches=caches)[:, -1, :]  # (B, V): only the newest token
            if temperature == 0:
                nxt = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
            else:
                logits = logits / temperature
                if top_k is not None:
                    kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                probs = torch.softmax(logits, dim=-1)  # (B, V)
                nxt = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
            idx = torch.cat([idx, nxt], dim=1)  # (B, T + 1)
        self.train(was_training)
        return idx


def _check_targets(name: str, targets: torch.Tensor, vocab_size: int, ignore_index: int | None = None) -> None:
    """Token ids to predict: integers in [0, vocab_size) (or ``ignore_index``)."""
    _checks.token_ids(name, targets, vocab_size, ignore_index=ignore_index)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor, *, ignore_index: int = -100) -> torch.Tensor:
    """Mean cross-entropy over every position: logits (B, T, V), targets (B, T) -> scalar (nats per token)."""
    _checks.tensor("logits", logits, ndim=3, floating=True)
    _checks.tensor("targets", targets, ndim=2)
    if logits.shape[:2] != targets.shape:
        raise ValueError(
            f"logits (B, T, V) and targets (B, T) disagree: {_checks.shape_str(logits.shape)} "
            f"and {_checks.shape_str(targets.shape)}"
        )
    _check_targets("targets", targets, logits.shape[-1], ignore_index)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=ignore_index)


@torch.no_grad()
def lm_loss_sum(
    model: nn.Module,
    ids: torch.Tensor,
    *,
    block_size: int | None = None,
    batch_size: int = 64,
    shard: tuple[int, int] = (0, 1),
) -> tuple[float, int]:
    """The summed next-token cross-entropy over a token sequence, and the number of predicted tokens.

    The sequence is cut into consecutive windows of ``block_size`` tokens (the model's by default); every
    token after the first is predicted exactly once, from the tokens before it in its window. With
    ``shard=(rank, world_size)`` only every world_size-th window is evaluated (for several processes).

    Shapes:
        ids: (N,) token ids
    """
    if not isinstance(model, nn.Module) or not isinstance(getattr(model, "config", None), TransformerConfig):
        raise TypeError(f"model must be a language model of attnbook.models (e.g. GPT), got {type(model).__name__}")
    _checks.tensor("ids", ids, ndim=1)
    _check_targets("ids", ids, model.config.vocab_size)
    block_size = model.config.block_size if block_size is None else _checks.positive_int("block_size", block_size)
    _checks.positive_int("batch_size", batch_size)
    rank, world_size = shard
    if ids.numel() < 2:
        raise ValueError(f"ids must hold at least 2 tokens to predict one, got {ids.numel()}")
    device = next(model.parameters()).device
    starts = list(range(0, ids.numel() - 1, block_size))[rank::world_size]
    full = [s for s in starts if s + block_size + 1 <= ids.numel()]
    offsets = torch.arange(block_size + 1)  # (T + 1,)
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(full), batch_size):
        windows = ids[torch.tensor(full[i : i + batch_size])[:, None] + offsets].to(device)  # (b, T + 1)
        logits = model(windows[:, :-1])  # (b, T, V)
        total += F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten(), reduction="sum").item()
        count += windows.shape[0] * block_size
    for s in starts[len(full) :]:  # the last, shorter window
        window = ids[s:].unsqueeze(0).to(device)  # (1, t + 1)
        logits = model(window[:, :-1])  # (1, t, V)
        total += F.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten(), reduction="sum").item()
        count += window.shape[1] - 1
    model.train(was_training)
    return total, count


def evaluate_lm(model: nn.Module, ids: torch.Tensor, *, block_size: int | None = None, batch_size: int = 64) -> float:
    """Mean next-token cross-entropy (nats per token) of ``model`` over a whole sequence, e.g. the validation split.

    Every token after the first is predicted exactly once (see :func:`lm_loss_sum`).

    Shapes:
        ids: (N,) token ids
    """
    total, count = lm_loss_sum(model, ids, block_size=block_size, batch_size=batch_size)
    return total / count


# --- Hugging Face GPT-2 weights in the book's GPT ------------------------------------------------------
# Chapter: from text to tokens, and pretraining (13).

_GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}


def gpt2_config(hf_config) -> TransformerConfig:
    """The :class:`TransformerConfig` of a Hugging Face ``GPT2Config``.

    GPT-2 is the library's GPT with: pre-norm LayerNorm (epsilon ``layer_norm_epsilon``), biases in every
    linear layer but the output one, the tanh approximation of GELU, learned positions, and an output layer
    tied to the token embedding. Options of GPT2Config that change the computation in other ways are refused.
    """
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
        mlp=_GPT2_ACTIVATIONS[activation],
        positional="learned",
        tie_weights=bool(getattr(hf_config, "tie_word_embeddings", True)),
        init="torch",
        eps=float(hf_config.layer_norm_epsilon),
    )


@torch.no_grad()
def gpt2_from_hf(source, *, n_heads: int | None = None, eps: float = 1e-5, cls: type | None = None) -> GPT:
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
    if isinstance(source, str):
        from transformers import GPT2LMHeadModel

        source = GPT2LMHeadModel.from_pretrained(source)
    if hasattr(source, "config") and hasattr(source, "state_dict"):
        config = gpt2_config(source.config)
        state = source.state_dict()
    elif isinstance(source, dict):
        state = source
        config = None
    else:
        raise TypeError(
            f"source must be a transformers GPT-2 model, its state dict or a checkpoint name, "
            f"got {type(source).__name__}"
        )
    state = {(k[len("transformer.") :] if k.startswith("transformer.") else k): v for k, v in state.items()}
    for key in ("wte.weight", "wpe.weight", "ln_f.weight"):
        if key not in state:
            raise ValueError(f"source is not a GPT-2 state dict: it has no {key!r} (keys such as {sorted(state)[:4]})")
    if config is None:
        if n_heads is None:
            raise ValueError("n_heads must be given with a state dict (the weights' shapes do not tell it)")
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
