"""Sequence-to-sequence RNNs: an encoder, a decoder with or without Bahdanau attention, batches and the loss.

The encoder reads the source x_1 ... x_Ts into annotations h_1 ... h_Ts (a bidirectional GRU, so
h_i = [h->_i ; h<-_i] sees the whole sentence). The decoder writes y_1, y_2, ... one token at a time:

    without attention (Cho et al., 2014):    c_t = c = [h->_Ts ; h<-_1]      the same vector at every step
    with attention (Bahdanau et al., 2015):  e_{t,i} = v^T tanh(W_1 s_{t-1} + W_2 h_i)
                                             a_{t,i} = softmax_i(e_{t,i}),   c_t = sum_i a_{t,i} h_i
    both:                                    s_0 = tanh(W_init c)
                                             s_t = GRU([E y_{t-1} ; c_t], s_{t-1})
                                             p(y_t | y_<t, x) = softmax(W_out [s_t ; c_t ; E y_{t-1}])

The two decoders differ only in c_t, so a comparison between them measures the bottleneck and nothing else.
Token ids follow :class:`attnbook.data.Vocab`: <pad> = 0, <unk> = 1, <bos> = 2, <eos> = 3 by default.

Each public ``forward`` checks its input once (the checks are at the end of the module) and runs
``_forward``; :class:`Seq2Seq` checks once and calls the encoder's and decoder's ``_forward``. Greedy and
beam decoding are in :mod:`attnbook.decoding`.

Chapter: sequence-to-sequence and Bahdanau attention.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from . import _checks
from .attention import AdditiveAttention

__all__ = ["Encoder", "Decoder", "Memory", "Seq2Seq", "Batch", "make_batch", "sequence_loss"]


class Encoder(nn.Module):
    """Embeddings and a (bidirectional) GRU: token ids to one annotation h_i per source position.

    Padded positions (i >= lengths[b]) get zero annotations; a sequence of length 0 gets zeros everywhere.

    Shapes:
        src:     (B, Ts) token ids
        lengths: (B,) true lengths, in [0, Ts]
        return:  annotations H (B, Ts, d_out) and summary c = [h->_last ; h<-_first] (B, d_out),
                 with d_out = 2 * d_hidden when bidirectional, else d_hidden

    Chapter: sequence-to-sequence and Bahdanau attention.
    """

    def __init__(self, vocab_size: int, d_embed: int, d_hidden: int, *, bidirectional: bool = True, pad_id: int = 0):
        super().__init__()
        _check_sizes(vocab_size=vocab_size, d_embed=d_embed, d_hidden=d_hidden)
        self.vocab_size = vocab_size
        self.embed = nn.Embedding(vocab_size, d_embed, padding_idx=pad_id)
        self.rnn = nn.GRU(d_embed, d_hidden, batch_first=True, bidirectional=bidirectional)
        self.d_out = d_hidden * (2 if bidirectional else 1)

    def forward(self, src: torch.Tensor, lengths) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = _check_source(src, lengths, self.vocab_size, "lengths")  # (B,) long tensor
        return self._forward(src, lengths)

    def _forward(self, src: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, T_s = src.shape
        if T_s == 0:  # nothing to read: zero annotations of length 0, zero summary
            zeros = self.embed.weight.new_zeros(B, 0, self.d_out)  # (B, 0, d_out)
            return zeros, self.embed.weight.new_zeros(B, self.d_out)
        x = self.embed(src)  # (B, Ts, E)
        # pack so that the backward direction starts at each sequence's own last token, not at the padding
        packed = pack_padded_sequence(x, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
        out, h_n = self.rnn(packed)  # h_n: (directions, B, Dh)
        H, _ = pad_packed_sequence(out, batch_first=True, total_length=T_s)  # (B, Ts, d_out)
        summary = h_n.transpose(0, 1).reshape(B, self.d_out)  # (B, d_out)
        empty = (lengths == 0).unsqueeze(-1)  # (B, 1): sequences of length 0 read nothing
        return H.masked_fill(empty.unsqueeze(1), 0.0), summary.masked_fill(empty, 0.0)


class Memory(NamedTuple):
    """What the decoder reads from the encoder: annotations, summary, mask, and W_2 h precomputed.

    Shapes: annotations (B, Ts, d_enc), summary (B, d_enc), mask (B, 1, Ts) bool (True = a real token; None
    when no sequence is padded), keys (B, Ts, d_attn) or None (no attention), lengths (B,).
    """

    annotations: torch.Tensor
    summary: torch.Tensor
    mask: torch.Tensor
    keys: torch.Tensor | None
    lengths: torch.Tensor

    def expand(self, k: int) -> Memory:
        """The memory of a single sentence (B = 1) repeated for k hypotheses (a beam), without copying."""
        return Memory(*(None if x is None else x.expand(k, *x.shape[1:]) for x in self))


class Decoder(nn.Module):
    """A GRU decoder that reads the source through a fixed context c or through Bahdanau attention.

    One call of :meth:`step` is one decoding step:
    (y_{t-1}, s_{t-1}) -> (logits of y_t, s_t, attention weights a_t or None).

    Shapes:
        y_prev: (B,) the previous token ids
        s_prev: (B, d_hidden)
        memory: a :class:`Memory` with annotations (B, Ts, d_enc)
        return: logits (B, V), s (B, d_hidden), weights (B, Ts) or None without attention

    Chapter: sequence-to-sequence and Bahdanau attention.
    """

    def __init__(
        self,
        vocab_size: int,
        d_embed: int,
        d_enc: int,
        d_hidden: int,
        *,
        d_attn: int | None = None,
        attention: bool = True,
        pad_id: int = 0,
    ):
        super().__init__()
        _check_sizes(vocab_size=vocab_size, d_embed=d_embed, d_enc=d_enc, d_hidden=d_hidden)
        self.vocab_size, self.d_hidden = vocab_size, d_hidden
        self.embed = nn.Embedding(vocab_size, d_embed, padding_idx=pad_id)
        self.W_init = nn.Linear(d_enc, d_hidden)
        self.attention = AdditiveAttention(d_hidden, d_enc, d_attn or d_hidden) if attention else None
        self.cell = nn.GRUCell(d_embed + d_enc, d_hidden)
        self.W_out = nn.Linear(d_hidden + d_enc + d_embed, vocab_size)

    def start(self, memory: Memory) -> torch.Tensor:
        """s_0 = tanh(W_init c), from the encoder's summary c. Shapes: return (B, d_hidden)."""
        return torch.tanh(self.W_init(memory.summary))  # (B, D)

    def project_keys(self, annotations: torch.Tensor) -> torch.Tensor | None:
        """W_2 h_i for every source position (computed once per sentence), or None without attention."""
        return None if self.attention is None else self.attention.score.project_keys(annotations)

    def context(self, s_prev: torch.Tensor, memory: Memory):
        """c_t and a_t for the decoder state s_{t-1}. Shapes: s_prev (B, D) -> (B, d_enc), (B, Ts) or None."""
        if self.attention is None:
            return memory.summary, None  # (B, d_enc): the same c at every step
        context, weights = self.attention(
            s_prev.unsqueeze(1),
            memory.annotations,
            memory.annotations,
            memory.mask,
            return_weights=True,
            projected_keys=memory.keys,
        )  # (B, 1, d_enc), (B, 1, Ts)
        return context.squeeze(1), weights.squeeze(1)  # (B, d_enc), (B, Ts)

    def step(self, y_prev: torch.Tensor, s_prev: torch.Tensor, memory: Memory):
        emb = self.embed(y_prev)  # (B, E)
        context, weights = self.context(s_prev, memory)  # (B, d_enc), (B, Ts)
        s = self.cell(torch.cat([emb, context], dim=-1), s_prev)  # (B, D)
        logits = self.W_out(torch.cat([s, context, emb], dim=-1))  # (B, V)
        return logits, s, weights

    def forward(self, tgt_in: torch.Tensor, memory: Memory):
        """Teacher forcing over a whole target: the same computation as calling :meth:`step` Tt times.

        The embeddings and the output layer do not depend on the recurrence, so they run once for all
        steps; only the attention and the GRU cell run step by step.

        Shapes: tgt_in (B, Tt) -> logits (B, Tt, V), weights (B, Tt, Ts) or None
        """
        _check_target(tgt_in, memory, self.vocab_size)
        return self._forward(tgt_in, memory)

    def _forward(self, tgt_in: torch.Tensor, memory: Memory):
        emb = self.embed(tgt_in)  # (B, Tt, E)
        s = self.start(memory)  # (B, D)
        states, contexts, weights = [], [], []
        for emb_t in emb.unbind(1):  # unbind, not emb[:, t]: its backward is one stack, not Tt zero-filled copies
            context, w = self.context(s, memory)  # (B, d_enc), (B, Ts)
            s = self.cell(torch.cat([emb_t, context], dim=-1), s)  # (B, D)
            states.append(s)
            contexts.append(context)
            weights.append(w)
        S, C = torch.stack(states, dim=1), torch.stack(contexts, dim=1)  # (B, Tt, D), (B, Tt, d_enc)
        logits = self.W_out(torch.cat([S, C, emb], dim=-1))  # (B, Tt, V)
        return logits, (None if self.attention is None else torch.stack(weights, dim=1))  # (B, Tt, Ts)


class Seq2Seq(nn.Module):
    """An encoder-decoder for translation, with Bahdanau attention (``attention=True``) or a fixed context.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes V_src, V
        d_embed: embedding width of both sides; d_hidden: width of the encoder (per direction) and decoder
        d_attn: width of the attention's scoring layer (default d_hidden)

    Shapes:
        src: (B, Ts) ids, src_lengths: (B,), tgt_in: (B, Tt) ids starting with <bos>
        return: logits (B, Tt, V), and weights (B, Tt, Ts) when ``return_weights=True`` (attention only)

    Chapter: sequence-to-sequence and Bahdanau attention.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        *,
        d_embed: int = 64,
        d_hidden: int = 128,
        d_attn: int | None = None,
        attention: bool = True,
        bidirectional: bool = True,
        pad_id: int = 0,
        bos_id: int = 2,
        eos_id: int = 3,
    ):
        super().__init__()
        _check_special_ids(tgt_vocab_size, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id)
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.uses_attention = bool(attention)
        self.encoder = Encoder(src_vocab_size, d_embed, d_hidden, bidirectional=bidirectional, pad_id=pad_id)
        self.decoder = Decoder(
            tgt_vocab_size, d_embed, self.encoder.d_out, d_hidden, d_attn=d_attn, attention=attention, pad_id=pad_id
        )

    def encode(self, src: torch.Tensor, src_lengths=None) -> Memory:
        """Run the encoder once; ``src_lengths`` defaults to the full width (no padding)."""
        lengths = _check_source(src, src_lengths, self.encoder.vocab_size, "src_lengths", optional=True)  # (B,)
        return self._encode(src, lengths)

    def _encode(self, src: torch.Tensor, lengths: torch.Tensor) -> Memory:
        H, summary = self.encoder._forward(src, lengths)  # (B, Ts, d_enc), (B, d_enc)
        if H.shape[1] == 0:  # an empty source: one padded position that nobody may attend to
            H = H.new_zeros(H.shape[0], 1, H.shape[2])  # (B, 1, d_enc)
        mask = (torch.arange(H.shape[1], device=H.device) < lengths.unsqueeze(1)).unsqueeze(1)  # (B, 1, Ts)
        if bool((lengths == H.shape[1]).all()):
            mask = None  # no padding anywhere: every position may be attended (and the softmax is cheaper)
        return Memory(H, summary, mask, self.decoder.project_keys(H), lengths)

    def start(self, memory: Memory) -> torch.Tensor:
        return self.decoder.start(memory)

    def step(self, y_prev: torch.Tensor, s_prev: torch.Tensor, memory: Memory):
        return self.decoder.step(y_prev, s_prev, memory)

    def forward(self, src, src_lengths, tgt_in, *, return_weights: bool = False):
        """Teacher forcing: the decoder's input at step t is the true y_{t-1}, not its own guess."""
        lengths = _check_forward(self, src, src_lengths, tgt_in, return_weights)  # (B,) long
        logits, weights = self.decoder._forward(tgt_in, self._encode(src, lengths))  # (B, Tt, V), (B, Tt, Ts)
        return (logits, weights) if return_weights else logits


class Batch(NamedTuple):
    """A padded batch for teacher forcing: tgt_in = <bos> y_1 ... y_n, tgt_out = y_1 ... y_n <eos>.

    Shapes: src (B, Ts), src_lengths (B,), tgt_in (B, Tt), tgt_out (B, Tt); padding is <pad>.
    """

    src: torch.Tensor
    src_lengths: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor


def _pad(sequences: Sequence[Sequence[int]], pad_id: int, device) -> torch.Tensor:
    width = max((len(s) for s in sequences), default=0)
    out = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    for i, s in enumerate(sequences):
        out[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return out.to(device)


def make_batch(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    pad_id: int = 0,
    bos_id: int = 2,
    eos_id: int = 3,
    device=None,
) -> Batch:
    """Pad a list of (source ids, target ids) pairs into a :class:`Batch`."""
    sources, targets = _check_pairs(pairs, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id)  # lists of int lists
    return Batch(
        _pad(sources, pad_id, device),
        torch.tensor([len(s) for s in sources], device=device),
        _pad([[bos_id] + t for t in targets], pad_id, device),
        _pad([t + [eos_id] for t in targets], pad_id, device),
    )


def sequence_loss(model: Seq2Seq, batch: Batch) -> torch.Tensor:
    """Mean cross-entropy of the next target token under teacher forcing, padding excluded."""
    _check_loss_args(model, batch)
    logits = model(batch.src, batch.src_lengths, batch.tgt_in)  # (B, Tt, V)
    return F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=model.pad_id)


# --- input checks ------------------------------------------------------------------------------------


def _check_sizes(**sizes) -> None:
    for name, value in sizes.items():
        _checks.positive_int(name, value)


def _check_lengths(name: str, lengths, batch: int, max_len: int, device) -> torch.Tensor:
    """One length per sequence, in [0, max_len], as a long tensor on ``device``."""
    lengths = _checks.as_integers(name, lengths, what="one integer length per sequence", device=device)
    if lengths.dim() != 1 or lengths.numel() != batch:
        raise ValueError(
            f"{name} must hold one integer length per sequence, shape ({batch},) (the rows of src), got "
            f"{lengths.dtype} of shape {_checks.shape_str(lengths.shape)}"
        )
    if batch and (int(lengths.min()) < 0 or int(lengths.max()) > max_len):
        raise ValueError(f"{name} must lie in [0, {max_len}] (the padded length of src), got {lengths.tolist()}")
    return lengths.long()


def _check_source(src, lengths, vocab_size: int, lengths_name: str, *, optional: bool = False) -> torch.Tensor:
    """src (B, Ts) token ids in [0, vocab_size) and their lengths; returns the lengths as a long tensor (with
    ``optional``, None stands for the full width Ts)."""
    _checks.tensor("src", src, ndim=2)
    B, T_s = src.shape
    if optional and lengths is None:
        lengths = torch.full((B,), T_s, dtype=torch.long)
    lengths = _check_lengths(lengths_name, lengths, B, T_s, src.device)
    _checks.token_ids("src", src, vocab_size, ndim=2)
    return lengths


def _check_target(tgt_in, memory, vocab_size: int) -> None:
    if not isinstance(memory, Memory):
        raise TypeError(f"memory must be a seq2seq.Memory (what Seq2Seq.encode returns), got {type(memory).__name__}")
    _checks.token_ids("tgt_in", tgt_in, vocab_size, ndim=2)
    if tgt_in.shape[1] == 0 or tgt_in.shape[0] != memory.summary.shape[0]:
        raise ValueError(
            f"tgt_in must have shape (B, Tt) with B = {memory.summary.shape[0]} (the memory's batch) "
            f"and Tt >= 1, got {_checks.shape_str(tgt_in.shape)}"
        )


def _check_forward(model: Seq2Seq, src, src_lengths, tgt_in, return_weights) -> torch.Tensor:
    """The source, its lengths and the decoder's input tgt_in (B, Tt) of one batch; returns the lengths."""
    _checks.tensor("src", src, ndim=2)
    _checks.token_ids("tgt_in", tgt_in, model.decoder.vocab_size, ndim=2)
    if tgt_in.shape[0] != src.shape[0]:
        raise ValueError(
            f"src and tgt_in must have the same batch size, got src {_checks.shape_str(src.shape)} "
            f"and tgt_in {_checks.shape_str(tgt_in.shape)}"
        )
    if return_weights and not model.uses_attention:
        raise ValueError("return_weights=True needs a model with attention (attention=True)")
    lengths = _check_source(src, src_lengths, model.encoder.vocab_size, "src_lengths", optional=True)
    if tgt_in.shape[1] == 0:
        raise ValueError(
            f"tgt_in must have shape (B, Tt) with B = {src.shape[0]} (the memory's batch) "
            f"and Tt >= 1, got {_checks.shape_str(tgt_in.shape)}"
        )
    return lengths


def _check_special_ids(tgt_vocab_size, **ids) -> None:
    for name, value in ids.items():
        _checks.positive_int(name, value, minimum=0)
        if value >= tgt_vocab_size:
            raise ValueError(f"{name}={value} is outside the target vocabulary of size {tgt_vocab_size}")


def _check_pairs(pairs, **ids) -> tuple[list[list[int]], list[list[int]]]:
    """A non-empty list of (source ids, target ids) pairs; returns the sources and the targets as int lists."""
    if isinstance(pairs, (str, bytes)) or not hasattr(pairs, "__len__"):
        raise TypeError(f"pairs must be a list of (source ids, target ids) pairs, got {type(pairs).__name__}")
    if len(pairs) == 0:
        raise ValueError("pairs is empty: a batch needs at least one (source, target) pair")
    for name, value in ids.items():
        _checks.positive_int(name, value, minimum=0)
    try:
        return [[int(i) for i in s] for s, _ in pairs], [[int(i) for i in t] for _, t in pairs]
    except (TypeError, ValueError):
        raise TypeError(f"pairs must be a list of (source ids, target ids) pairs of integers, got {pairs!r}") from None


def _check_loss_args(model, batch) -> None:
    if not isinstance(model, Seq2Seq):
        raise TypeError(f"model must be an attnbook.seq2seq.Seq2Seq, got {type(model).__name__}")
    if not isinstance(batch, Batch):
        raise TypeError(f"batch must be an attnbook.seq2seq.Batch (see make_batch), got {type(batch).__name__}")
