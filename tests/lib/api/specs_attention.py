"""API property specs: attention, positional encodings and flash attention (the harness is in harness.py)."""

import math
from types import SimpleNamespace

import torch
from attnbook import attention, flash, positional
from harness import (
    Const,
    Int,
    IntList,
    Mask,
    Num,
    Tensor,
    _module,
    _naive_attention,
    _naive_heads,
    _naive_softmax,
    _rows,
    _sdpa_reference,
    spec,
)

# attention ------------------------------------------------------------------------------------------------

SEQ = dict(B=(1, 3), Tq=(1, 5), Tk=(1, 5), D=(1, 6))


@spec("attention.check_qkv", attention.check_qkv, SEQ)
def _(s):
    return attention.check_qkv, dict(
        q=Tensor(s.B, s.Tq, s.D, seq=1),
        k=Tensor(s.B, s.Tk, s.D, seq=1),
        v=Tensor(s.B, s.Tk, s.D + 1, seq=1),
        mask=Mask(s.B, s.Tq, s.Tk),
    )


@spec(
    "attention.masked_softmax",
    attention.masked_softmax,
    SEQ,
    reference=lambda call, scores, mask: _naive_softmax(scores, mask),
)
def _(s):
    return attention.masked_softmax, dict(scores=Tensor(s.B, s.Tq, s.Tk, seq=-1), mask=Mask(s.B, s.Tq, s.Tk))


@spec(
    "attention.softmax_with_temperature",
    attention.softmax_with_temperature,
    SEQ,
    reference=lambda call, scores, temperature: torch.softmax(scores / temperature, -1),
)
def _(s):
    return attention.softmax_with_temperature, dict(scores=Tensor(s.B, s.Tk, seq=-1), temperature=Num(0.7))


@spec(
    "attention.scaled_dot_product_attention",
    attention.scaled_dot_product_attention,
    {**SEQ, "bias": (0, 1)},
    reference=_sdpa_reference,
    nan_spreads=True,
)
def _(s):
    return attention.scaled_dot_product_attention, dict(
        q=Tensor(s.B, 2, s.Tq, s.D, seq=2),
        k=Tensor(s.B, 2, s.Tk, s.D, seq=2),
        v=Tensor(s.B, 2, s.Tk, 3, seq=2),
        mask=Mask(s.B, 1, s.Tq, s.Tk),
        score_bias=Tensor(s.Tq, s.Tk, seq=1, batch=None) if s.bias else Const(None),
    )


@spec(
    "attention.causal_mask",
    attention.causal_mask,
    dict(Tq=(1, 6), Tk=(1, 6), offset=(-2, 2)),
    reference=lambda call, t_q, t_k, offset: torch.ones(t_q, t_k, dtype=torch.bool).tril(offset),
)
def _(s):
    return attention.causal_mask, dict(t_q=Int(s.Tq), t_k=Int(s.Tk), offset=Int(s.offset))


@spec(
    "attention.padding_mask",
    attention.padding_mask,
    dict(B=(1, 4), Tk=(3, 6)),
    reference=lambda call, lengths, t_k: torch.tensor([[[j < n for j in range(t_k)]] for n in lengths]),
)
def _(s):
    return attention.padding_mask, dict(
        lengths=IntList([min(s.Tk, 1 + b) for b in range(s.B)], high=s.Tk), t_k=Int(s.Tk)
    )


@spec("attention.AdditiveScore", attention.AdditiveScore, SEQ)
def _(s):
    return _module(lambda: attention.AdditiveScore(s.D, s.D + 1, 4)), dict(
        query=Tensor(s.B, s.Tq, s.D, seq=1), keys=Tensor(s.B, s.Tk, s.D + 1, seq=1)
    )


@spec("attention.AdditiveAttention", attention.AdditiveAttention, SEQ, nan_spreads=True)
def _(s):
    return _module(lambda: attention.AdditiveAttention(s.D, s.D + 1, 4)), dict(
        query=Tensor(s.B, s.Tq, s.D, seq=1),
        keys=Tensor(s.B, s.Tk, s.D + 1, seq=1),
        values=Tensor(s.B, s.Tk, 3, seq=1),
        mask=Mask(s.B, 1, s.Tk),
    )


MHA_SIZES = dict(B=(1, 3), Tq=(1, 5), Tk=(1, 5), H=(1, 3), Dh=(1, 3), causal=(0, 1), bias=(0, 1))


def _attention_call(s, layer, **extra):
    D = s.H * s.Dh
    bias = Tensor(s.B, s.H, s.Tq, s.Tk, seq=2) if s.bias else Const(None)  # one bias per head
    return layer, dict(
        query=Tensor(s.B, s.Tq, D, seq=1),
        key=Tensor(s.B, s.Tk, D, seq=1),
        value=Tensor(s.B, s.Tk, D, seq=1),
        mask=Mask(s.B, s.Tq, s.Tk),
        is_causal=Const(bool(s.causal)),
        score_bias=bias,
        **{k: Const(v) for k, v in extra.items()},
    )


@spec(
    "attention.MultiHeadAttention (fast path)",
    attention.MultiHeadAttention,
    MHA_SIZES,
    reference=_naive_heads,
    nan_spreads=True,
)
def _(s):
    return _attention_call(s, _module(lambda: attention.MultiHeadAttention(s.H * s.Dh, s.H)))


@spec(
    "attention.MultiHeadAttention (explicit path)",
    attention.MultiHeadAttention,
    MHA_SIZES,
    reference=_naive_heads,
    nan_spreads=True,
)
def _(s):
    return _attention_call(s, _module(lambda: attention.MultiHeadAttention(s.H * s.Dh, s.H)), return_weights=True)


@spec(
    "attention.GroupedQueryAttention",
    attention.GroupedQueryAttention,
    {**MHA_SIZES, "kv": (0, 1), "rope": (0, 1), "weights": (0, 1)},
    reference=_naive_heads,
    nan_spreads=True,
)
def _(s):
    s = SimpleNamespace(**{**vars(s), "H": s.H * 2, "Dh": s.Dh * 2})  # H divisible by H_kv, Dh even for RoPE
    layer = _module(lambda: attention.GroupedQueryAttention(s.H * s.Dh, s.H, 2 if s.kv else 1, rope=bool(s.rope)))
    return _attention_call(s, layer, return_weights=bool(s.weights))


# positional -----------------------------------------------------------------------------------------------

POS = dict(B=(1, 3), T=(1, 5), half_D=(1, 4), offset=(0, 3))


@spec(
    "positional.frequencies",
    positional.frequencies,
    POS,
    reference=lambda call, d_model, base: base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model),
)
def _(s):
    return positional.frequencies, dict(d_model=Int(2 * s.half_D), base=Num(100.0))


@spec("positional.angles", positional.angles, POS)
def _(s):
    return positional.angles, dict(
        positions=IntList(range(s.offset, s.offset + s.T), high=100), d_model=Int(2 * s.half_D)
    )


@spec("positional.sinusoidal", positional.sinusoidal, POS)
def _(s):
    return positional.sinusoidal, dict(n_positions=Int(s.T), d_model=Int(2 * s.half_D), offset=Int(s.offset))


@spec("positional.sinusoidal_2d", positional.sinusoidal_2d, dict(h=(1, 3), w=(1, 3), quarter_D=(1, 3)))
def _(s):
    return positional.sinusoidal_2d, dict(height=Int(s.h), width=Int(s.w), d_model=Int(4 * s.quarter_D))


@spec("positional.SinusoidalPositionalEncoding", positional.SinusoidalPositionalEncoding, POS)
def _(s):
    return _module(lambda: positional.SinusoidalPositionalEncoding(2 * s.half_D, max_len=6)), dict(
        x=Tensor(s.B, s.T, 2 * s.half_D, seq=1), offset=Int(s.offset)
    )


@spec("positional.LearnedPositionalEmbedding", positional.LearnedPositionalEmbedding, POS)
def _(s):
    return _module(lambda: positional.LearnedPositionalEmbedding(2 * s.half_D, max_len=8)), dict(
        x=Tensor(s.B, s.T, 2 * s.half_D, seq=1), offset=Int(s.offset)
    )


@spec(
    "positional.SinusoidalPositionalEncoding2D",
    positional.SinusoidalPositionalEncoding2D,
    dict(B=(1, 3), h=(1, 3), w=(1, 3), quarter_D=(1, 3)),
)
def _(s):
    return _module(lambda: positional.SinusoidalPositionalEncoding2D(4 * s.quarter_D, s.h, s.w)), dict(
        x=Tensor(s.B, s.h * s.w, 4 * s.quarter_D, seq=1)
    )


@spec("positional.apply_rope", positional.apply_rope, POS)
def _(s):
    return positional.apply_rope, dict(x=Tensor(s.B, 2, s.T, 2 * s.half_D, seq=2), offset=Int(s.offset))


# flash ----------------------------------------------------------------------------------------------------

FLASH = dict(B=(1, 2), Tq=(1, 6), Tk=(1, 6), D=(1, 4), bq=(1, 4), bk=(1, 4), causal=(0, 1), offset=(-1, 2))


def _flash_args(s):
    return dict(
        q=Tensor(s.B, s.Tq, s.D, seq=1),
        k=Tensor(s.B, s.Tk, s.D, seq=1),
        v=Tensor(s.B, s.Tk, 3, seq=1),
        causal=Const(bool(s.causal)),
        offset=Int(s.offset) if s.causal else Const(None),
        block_q=Int(s.bq),
        block_k=Int(s.bk),
    )


def _flash_allowed(q, k, causal, offset):
    return (
        attention.causal_mask(q.shape[-2], k.shape[-2], offset=offset or 0)
        if causal
        else torch.ones(1, 1, dtype=torch.bool)
    )


def _flash_reference(call, q, k, v, causal, offset, block_q, block_k):
    return _naive_attention(q, k, v, _flash_allowed(q, k, causal, offset))[0]


def _flash_forward_reference(call, q, k, v, causal, offset, block_q, block_k):
    """The output and the log-sum-exp of each query's allowed scores (-inf for a query with none)."""
    out = _naive_attention(q, k, v, _flash_allowed(q, k, causal, offset))[0]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    allowed = _flash_allowed(q, k, causal, offset).expand_as(scores)
    lse = torch.full(scores.shape[:-1], -math.inf, dtype=torch.float64)
    for index, i, keys in _rows(allowed):
        if len(keys):
            lse[index][i] = torch.logsumexp(scores[index][i, keys], 0)
    return out, lse


@spec("flash.online_softmax_update", flash.online_softmax_update, dict(R=(1, 4), n=(1, 5)))
def _(s):
    return flash.online_softmax_update, dict(
        m=Tensor(s.R, batch=None), l=Tensor(s.R, batch=None, positive=True), x=Tensor(s.R, s.n, seq=1, batch=None)
    )


@spec(
    "flash.online_softmax",
    flash.online_softmax,
    dict(R=(1, 4), n=(1, 6), block=(1, 4)),
    reference=lambda call, x, block_size: torch.softmax(x, -1),
)
def _(s):
    return flash.online_softmax, dict(x=Tensor(s.R, s.n, seq=1), block_size=Int(s.block))


@spec("flash.flash_attention", flash.flash_attention, FLASH, reference=_flash_reference, nan_spreads=True)
def _(s):
    return flash.flash_attention, _flash_args(s)


@spec(
    "flash.flash_attention_forward",
    flash.flash_attention_forward,
    FLASH,
    reference=_flash_forward_reference,
    nan_spreads=True,
)
def _(s):
    return flash.flash_attention_forward, _flash_args(s)


@spec("flash.flash_attention_backward", flash.flash_attention_backward, FLASH)
def _(s):
    args = _flash_args(s)
    g = torch.Generator().manual_seed(0)
    q, k, v = (args[n].make(g) for n in "qkv")
    out, lse = flash.flash_attention_forward(q, k, v, causal=bool(s.causal), offset=args["offset"].make(g))
    return flash.flash_attention_backward, dict(
        grad_out=Tensor(*out.shape, seq=1),
        q=Const(q),
        k=Const(k),
        v=Const(v),
        out=Const(out),
        lse=Const(lse),
        **{n: a for n, a in args.items() if n not in "qkv"},
    )


IO = dict(n=(1, 40), d=(1, 8), capacity=(8, 12))  # 2^8 bytes hold the smallest tiles for d <= 8


@spec("flash.standard_attention_io", flash.standard_attention_io, IO)
def _(s):
    return flash.standard_attention_io, dict(n=Int(s.n), d=Int(s.d), capacity=Int(2**s.capacity))


@spec("flash.flash_attention_block_sizes", flash.flash_attention_block_sizes, IO)
def _(s):
    return flash.flash_attention_block_sizes, dict(d=Int(s.d), capacity=Int(2**s.capacity))


@spec("flash.flash_attention_io", flash.flash_attention_io, IO)
def _(s):
    return flash.flash_attention_io, dict(n=Int(s.n), d=Int(s.d), capacity=Int(2**s.capacity))
