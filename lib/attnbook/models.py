"""Transformer models built from the blocks: a frozen configuration, Encoder, Decoder, EncoderDecoder, GPT.

Everything a model is made of is named in :class:`~attnbook.config.TransformerConfig` (exported here too),
in the style of nanoGPT: widths, depths, the norm and where it sits (``norm_position``), the MLP, the
positional encoding, the initialisation. New kinds (RMSNorm, SwiGLU, RoPE...) are added by registering
them, not by new signatures: see ``blocks.NORMS``, ``blocks.MLPS``, ``positional.POSITIONALS`` and ``INITS``.

A model checks its arguments once, in its ``forward``; its layers then skip their own checks. Loading
Hugging Face's GPT-2 weights is in :mod:`attnbook.gpt2` (``GPT.from_hf``).

Chapter: the transformer block (08: encoder-decoder, decoder-only language model, parameter counts);
the lab (12: the character-level GPT, generation); modern tweaks (11).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint as recompute

from . import _checks
from ._attention_checks import check_cache
from ._checks import checked_by
from .attention import KVCache
from .blocks import DecoderBlock, EncoderBlock, make_norm
from .config import INITS, TransformerConfig
from .positional import POSITIONALS

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
]


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


def _final_norm(config: TransformerConfig) -> nn.Module:
    """The norm after the last block: pre-norm stacks need one (post-norm blocks end on a norm already)."""
    return (
        make_norm(config.norm, config.d_model, eps=config.eps, bias=config.bias)
        if config.norm_position == "pre"
        else nn.Identity()
    )


def _add_output_layers(model: nn.Module, config: TransformerConfig) -> None:
    """A decoder's last layers: ``norm_f`` (pre-norm stacks only) and ``lm_head``, tied to the embedding if asked."""
    model.norm_f = _final_norm(config)
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
        self.norm_f = _final_norm(config)

    @checked_by("_check_encoder")
    def forward(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
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

    @checked_by("_check_decoder")
    def forward(self, tgt: torch.Tensor, memory: torch.Tensor, memory_mask=None, *, return_weights: bool = False):
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

    @checked_by("_check_encoder_decoder")
    def forward(self, src: torch.Tensor, tgt: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.decoder(tgt, self.encoder(src, src_mask), src_mask)  # (B, T, V)

    @torch.no_grad()
    @checked_by("_check_greedy_decode")
    def greedy_decode(
        self, src: torch.Tensor, *, bos: int, eos: int, max_len: int, src_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Generate targets one token at a time, each time feeding back the most likely token.

        Returns (B, L) ids without the begin token, L <= max_len; after a sequence's end token, the rest of
        its row is filled with ``eos``.
        """
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
            if bool(done.all()):  # one host synchronisation per generated token
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

    @checked_by("_check_gpt")
    def forward(
        self, idx: torch.Tensor, *, return_weights: bool = False, caches: list | None = None, checkpoint: bool = False
    ):
        """Logits for ``idx``; with ``caches`` (one :class:`~attnbook.attention.KVCache` per layer, see
        :meth:`new_caches`) ``idx`` holds only the new tokens, which follow the ones already cached.

        ``checkpoint=True`` runs each block under ``torch.utils.checkpoint``: the forward pass keeps only
        the blocks' inputs, and the backward pass recomputes each block's activations (activation
        checkpointing, chapter on scaling and practice). It is for training; it changes nothing else."""
        offset = 0 if caches is None else caches[0].length  # the new tokens follow those cached
        x = self.embed(idx, offset)  # (B, T, D)
        weights = []
        for i, block in enumerate(self.blocks):
            cache = None if caches is None else caches[i]
            if return_weights:
                x, w = block(x, is_causal=True, return_weights=True, cache=cache)
                weights.append(w)  # (B, H, T, T)
            elif checkpoint and caches is None and torch.is_grad_enabled():
                x = recompute(block, x, is_causal=True, use_reentrant=False)  # (B, T, D), recomputed in backward
            else:
                x = block(x, is_causal=True, cache=cache)  # (B, T, D)
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
        """A GPT holding the weights of a Hugging Face GPT-2 (see :func:`attnbook.gpt2.from_hf`).

        ``source`` is a ``transformers.GPT2LMHeadModel`` (or ``GPT2Model``), its state dict (then give
        ``n_heads``, which the shapes do not tell, and ``eps`` if not 1e-5), or a checkpoint name such as
        ``"gpt2"`` (downloaded by ``transformers``, so it needs the network the first time).

        Chapter: from text to tokens, and pretraining (from the book's GPT to GPT-2).
        """
        from .gpt2 import from_hf  # the loader builds on this module

        return from_hf(source, n_heads=n_heads, eps=eps, cls=cls)

    @torch.no_grad()
    @checked_by("_check_generate")
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
        cropped context, so the tokens are the same as without the cache.
        """
        idx = idx.unsqueeze(0) if idx.dim() == 1 else idx  # (B, T): a (T,) sequence is a batch of one
        top_k = None if top_k is None else min(top_k, self.config.vocab_size)
        was_training = self.training
        self.eval()
        T_max, caches = self.config.block_size, None
        for _ in range(max_new_tokens):
            if not use_cache:
                logits = self(idx[:, -T_max:])[:, -1, :]  # (B, V): the context cropped to block_size
            elif caches is None or caches[0].length >= T_max:  # (re)fill the cache
                caches = self.new_caches()
                logits = self(idx[:, -T_max:], caches=caches)[:, -1, :]  # (B, V)
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


@checked_by("_check_lm_loss")
def lm_loss(logits: torch.Tensor, targets: torch.Tensor, *, ignore_index: int = -100) -> torch.Tensor:
    """Mean cross-entropy over every position: logits (B, T, V), targets (B, T) -> scalar (nats per token)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=ignore_index)


@torch.no_grad()
@checked_by("_check_lm_loss_sum")
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
    block_size = model.config.block_size if block_size is None else block_size
    rank, world_size = shard
    device = next(model.parameters()).device
    starts = list(range(0, ids.numel() - 1, block_size))[rank::world_size]
    full = [s for s in starts if s + block_size + 1 <= ids.numel()]
    offsets = torch.arange(block_size + 1)  # (T + 1,)
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(full), batch_size):  # the model's checks are skipped: the windows come from checked ids
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


# --- input checks -----------------------------------------------------------------------------------------
# A forward names its checks with @checked_by: they run at the boundary only, so that the layers inside a model
# do not check again what the model checked; a constructor calls its own.


def _check_config(config) -> TransformerConfig:
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be an attnbook.models.TransformerConfig, got {type(config).__name__}")
    return config


def _check_ids(name: str, ids, vocab_size: int, block_size: int) -> torch.Tensor:
    """Token ids (B, T): integers in [0, vocab_size), 1 <= T <= block_size (one host synchronisation)."""
    _checks.token_ids(name, ids, vocab_size, ndim=2, values=False)
    B, T = ids.shape
    if T == 0 or B == 0:
        raise ValueError(f"{name} is empty: shape {_checks.shape_str(ids.shape)}")
    if T > block_size:
        raise ValueError(
            f"{name} has length T={T}, longer than the model's block_size={block_size}; "
            f"keep the last {block_size} tokens (generate() crops the context for you)"
        )
    exporting = getattr(torch.compiler, "is_exporting", lambda: False)()  # traced ids (torch.onnx) have no values
    return _checks.token_ids(name, ids, vocab_size, values=not exporting)


def _check_mask(config: TransformerConfig, name: str, mask, ids: torch.Tensor, t_k: int) -> None:
    """A boolean attention mask (True = may attend) for queries ``ids`` (B, T) and ``t_k`` keys, under the
    caller's name."""
    if mask is not None:
        _checks.attention_mask(name, mask, (ids.shape[0], config.n_heads, ids.shape[1], t_k), device=ids.device)


def _check_encoder(self, src, src_mask, **_) -> None:
    _check_ids("src", src, self.vocab_size, self.config.block_size)
    _check_mask(self.config, "src_mask", src_mask, src, src.shape[1])


def _check_decoder(self, tgt, memory, memory_mask, **_) -> None:
    _check_ids("tgt", tgt, self.config.vocab_size, self.config.block_size)
    _checks.sequence("memory", memory, self.config.d_model, module=self)
    _checks.same_size("batch size B", slice(0, 1), ("tgt", tgt), ("memory", memory))
    _check_mask(self.config, "memory_mask", memory_mask, tgt, memory.shape[1])


def _check_encoder_decoder(self, src, tgt, src_mask, **_) -> None:
    _check_ids("src", src, self.encoder.vocab_size, self.config.block_size)
    _check_ids("tgt", tgt, self.config.vocab_size, self.config.block_size)
    _checks.same_size("batch size B", slice(0, 1), ("src", src), ("tgt", tgt))
    _check_mask(self.config, "src_mask", src_mask, src, src.shape[1])  # the encoder's self-attention
    _check_mask(self.config, "src_mask", src_mask, tgt, src.shape[1])  # the decoder's cross-attention


def _check_greedy_decode(self, src, bos, eos, max_len, src_mask, **_) -> None:
    _checks.positive_int("max_len", max_len)
    _check_ids("src", src, self.encoder.vocab_size, self.config.block_size)
    for name, token in (("bos", bos), ("eos", eos)):
        if _checks.positive_int(name, token, minimum=0) >= self.config.vocab_size:
            raise ValueError(f"{name} must be a token id in [0, {self.config.vocab_size}), got {token}")
    _check_mask(self.config, "src_mask", src_mask, src, src.shape[1])  # the encoder's self-attention
    _check_mask(self.config, "src_mask", src_mask, src[:, :1], src.shape[1])  # the decoder's, one query a step


def _check_gpt(self, idx, caches, **_) -> None:
    _check_ids("idx", idx, self.config.vocab_size, self.config.block_size)
    if caches is None:
        return
    if not isinstance(caches, (list, tuple)) or len(caches) != len(self.blocks):
        raise ValueError(
            f"caches must be a list of {len(self.blocks)} KVCache (one per layer), "
            f"got {type(caches).__name__} of length {len(caches) if hasattr(caches, '__len__') else '?'}"
        )
    for i, (cache, block) in enumerate(zip(caches, self.blocks)):
        check_cache(f"caches[{i}]", cache, block.self_attn, idx.shape[0])
    if caches[0].length + idx.shape[1] > self.config.block_size:
        raise ValueError(
            f"the cache holds {caches[0].length} positions and idx adds {idx.shape[1]}: more than "
            f"block_size={self.config.block_size}"
        )


def _check_generate(self, idx, max_new_tokens, temperature, top_k, **_) -> None:
    if isinstance(idx, torch.Tensor) and idx.dim() == 1:
        idx = idx.unsqueeze(0)  # (1, T)
    _checks.tensor("idx", idx, ndim=2)
    _check_ids("idx", idx[:, -self.config.block_size :], self.config.vocab_size, self.config.block_size)
    _checks.positive_int("max_new_tokens", max_new_tokens, minimum=0)
    _checks.positive_float("temperature", temperature, allow_zero=True)
    if top_k is not None:
        _checks.positive_int("top_k", top_k)


def _check_lm_loss(logits, targets, ignore_index, **_) -> None:
    _checks.tensor("logits", logits, ndim=3, floating=True)
    _checks.tensor("targets", targets, ndim=2)
    if logits.shape[:2] != targets.shape:
        raise ValueError(
            f"logits (B, T, V) and targets (B, T) disagree: {_checks.shape_str(logits.shape)} "
            f"and {_checks.shape_str(targets.shape)}"
        )
    _checks.token_ids("targets", targets, logits.shape[-1], ignore_index=ignore_index)


def _check_lm_loss_sum(model, ids, block_size, batch_size, **_) -> None:
    if not isinstance(model, nn.Module) or not isinstance(getattr(model, "config", None), TransformerConfig):
        raise TypeError(f"model must be a language model of attnbook.models (e.g. GPT), got {type(model).__name__}")
    _checks.tensor("ids", ids, ndim=1)
    _checks.token_ids("ids", ids, model.config.vocab_size)
    if block_size is not None and _checks.positive_int("block_size", block_size) > model.config.block_size:
        raise ValueError(
            f"block_size must be at most the model's block_size={model.config.block_size}, got {block_size}"
        )
    _checks.positive_int("batch_size", batch_size)
    if ids.numel() < 2:
        raise ValueError(f"ids must hold at least 2 tokens to predict one, got {ids.numel()}")
