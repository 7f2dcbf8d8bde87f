"""Sequence-to-sequence RNNs: an encoder, a decoder with or without Bahdanau attention, greedy and beam decoding.

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

Chapter: sequence-to-sequence and Bahdanau attention.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from . import _checks
from .attention import AdditiveAttention

__all__ = [
    "Encoder",
    "Decoder",
    "Memory",
    "Seq2Seq",
    "Batch",
    "make_batch",
    "sequence_loss",
    "Translation",
    "greedy_decode",
    "beam_search",
    "score_sequence",
    "translate",
    "PrefixTable",
]


def _lengths(name: str, lengths, batch: int, max_len: int, device) -> torch.Tensor:
    lengths = _checks.as_integers(name, lengths, what="one integer length per sequence", device=device)
    if lengths.dim() != 1 or lengths.numel() != batch:
        raise ValueError(
            f"{name} must hold one integer length per sequence, shape ({batch},) (the rows of src), got "
            f"{lengths.dtype} of shape {_checks.shape_str(lengths.shape)}"
        )
    if batch and (int(lengths.min()) < 0 or int(lengths.max()) > max_len):
        raise ValueError(f"{name} must lie in [0, {max_len}] (the padded length of src), got {lengths.tolist()}")
    return lengths.long()


def _check_decoder_model(model) -> None:
    """``model`` must be something the decoders can run: encode, start, step and the special ids."""
    if not all(hasattr(model, a) for a in ("encode", "start", "step", "bos_id", "eos_id", "train")):
        raise TypeError(
            f"model must be a Seq2Seq (or a PrefixTable): something with encode, start and step, "
            f"got {type(model).__name__}"
        )


def _token_ids(name: str, ids, vocab_size: int) -> torch.Tensor:
    return _checks.token_ids(name, ids, vocab_size, ndim=2)


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
        for name, value in (("vocab_size", vocab_size), ("d_embed", d_embed), ("d_hidden", d_hidden)):
            _checks.positive_int(name, value)
        self.vocab_size = vocab_size
        self.embed = nn.Embedding(vocab_size, d_embed, padding_idx=pad_id)
        self.rnn = nn.GRU(d_embed, d_hidden, batch_first=True, bidirectional=bidirectional)
        self.d_out = d_hidden * (2 if bidirectional else 1)

    def forward(self, src: torch.Tensor, lengths) -> tuple[torch.Tensor, torch.Tensor]:
        src = _token_ids("src", src, self.vocab_size)
        B, T_s = src.shape
        lengths = _lengths("lengths", lengths, B, T_s, src.device)
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
        for name, value in (("vocab_size", vocab_size), ("d_embed", d_embed), ("d_enc", d_enc), ("d_hidden", d_hidden)):
            _checks.positive_int(name, value)
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
        if not isinstance(memory, Memory):
            raise TypeError(
                f"memory must be a seq2seq.Memory (what Seq2Seq.encode returns), got {type(memory).__name__}"
            )
        tgt_in = _token_ids("tgt_in", tgt_in, self.vocab_size)
        if tgt_in.shape[1] == 0 or tgt_in.shape[0] != memory.summary.shape[0]:
            raise ValueError(
                f"tgt_in must have shape (B, Tt) with B = {memory.summary.shape[0]} (the memory's batch) "
                f"and Tt >= 1, got {_checks.shape_str(tgt_in.shape)}"
            )
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
        for name, value in (("pad_id", pad_id), ("bos_id", bos_id), ("eos_id", eos_id)):
            _checks.positive_int(name, value, minimum=0)
            if value >= tgt_vocab_size:
                raise ValueError(f"{name}={value} is outside the target vocabulary of size {tgt_vocab_size}")
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.uses_attention = bool(attention)
        self.encoder = Encoder(src_vocab_size, d_embed, d_hidden, bidirectional=bidirectional, pad_id=pad_id)
        self.decoder = Decoder(
            tgt_vocab_size, d_embed, self.encoder.d_out, d_hidden, d_attn=d_attn, attention=attention, pad_id=pad_id
        )

    def encode(self, src: torch.Tensor, src_lengths=None) -> Memory:
        """Run the encoder once; ``src_lengths`` defaults to the full width (no padding)."""
        _checks.tensor("src", src, ndim=2)
        if src_lengths is None:
            src_lengths = torch.full((src.shape[0],), src.shape[1], dtype=torch.long)
        lengths = _lengths("src_lengths", src_lengths, src.shape[0], src.shape[1], src.device)
        H, summary = self.encoder(src, lengths)  # (B, Ts, d_enc), (B, d_enc)
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
        _checks.tensor("src", src, ndim=2)
        tgt_in = _token_ids("tgt_in", tgt_in, self.decoder.vocab_size)
        if tgt_in.shape[0] != src.shape[0]:
            raise ValueError(
                f"src and tgt_in must have the same batch size, got src {_checks.shape_str(src.shape)} "
                f"and tgt_in {_checks.shape_str(tgt_in.shape)}"
            )
        if return_weights and not self.uses_attention:
            raise ValueError("return_weights=True needs a model with attention (attention=True)")
        logits, weights = self.decoder(tgt_in, self.encode(src, src_lengths))  # (B, Tt, V), (B, Tt, Ts)
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
    if isinstance(pairs, (str, bytes)) or not hasattr(pairs, "__len__"):
        raise TypeError(f"pairs must be a list of (source ids, target ids) pairs, got {type(pairs).__name__}")
    if len(pairs) == 0:
        raise ValueError("pairs is empty: a batch needs at least one (source, target) pair")
    for name, value in (("pad_id", pad_id), ("bos_id", bos_id), ("eos_id", eos_id)):
        _checks.positive_int(name, value, minimum=0)
    try:
        sources = [[int(i) for i in s] for s, _ in pairs]
        targets = [[int(i) for i in t] for _, t in pairs]
    except (TypeError, ValueError):
        raise TypeError(f"pairs must be a list of (source ids, target ids) pairs of integers, got {pairs!r}") from None
    return Batch(
        _pad(sources, pad_id, device),
        torch.tensor([len(s) for s in sources], device=device),
        _pad([[bos_id] + t for t in targets], pad_id, device),
        _pad([t + [eos_id] for t in targets], pad_id, device),
    )


def sequence_loss(model: Seq2Seq, batch: Batch) -> torch.Tensor:
    """Mean cross-entropy of the next target token under teacher forcing, padding excluded."""
    if not isinstance(model, Seq2Seq):
        raise TypeError(f"model must be an attnbook.seq2seq.Seq2Seq, got {type(model).__name__}")
    if not isinstance(batch, Batch):
        raise TypeError(f"batch must be an attnbook.seq2seq.Batch (see make_batch), got {type(batch).__name__}")
    logits = model(batch.src, batch.src_lengths, batch.tgt_in)  # (B, Tt, V)
    return F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=model.pad_id)


@dataclass
class Translation:
    """One decoded output: its tokens (without <eos>), whether it ended with <eos>, its log-probability.

    ``score`` = sum over the generated steps of log p(y_t | y_<t, x), the <eos> step included when
    ``finished``. ``weights`` has one row per step (len(tokens) + finished rows) and one column per source
    token, or is None for a model without attention.
    """

    tokens: list[int]
    score: float
    finished: bool
    weights: torch.Tensor | None


def _check_max_len(max_len) -> int:
    return _checks.positive_int("max_len", max_len, minimum=0)


@torch.no_grad()
def greedy_decode(model, src: torch.Tensor, src_lengths=None, *, max_len: int) -> list[Translation]:
    """Pick the most probable token at every step, for a batch of sources; stops at <eos> or ``max_len``.

    A source of length 0 gives an empty translation (no tokens, score 0).

    Shapes:
        src: (B, Ts) ids (or (Ts,) for one sentence), src_lengths: (B,)
        return: B :class:`Translation` objects
    """
    _check_decoder_model(model)
    max_len = _check_max_len(max_len)
    src = src.unsqueeze(0) if isinstance(src, torch.Tensor) and src.dim() == 1 else src
    was_training = model.training
    model.eval()
    try:
        memory = model.encode(src, src_lengths)
        B = src.shape[0]
        s = model.start(memory)  # (B, D)
        y = torch.full((B,), model.bos_id, dtype=torch.long, device=src.device)  # (B,)
        done = memory.lengths == 0  # (B,): an empty source has nothing to translate
        scores = torch.zeros(B, dtype=torch.float64, device=src.device)
        tokens, weights, steps = [], [], torch.zeros(B, dtype=torch.long, device=src.device)
        for _ in range(max_len):
            if bool(done.all()):
                break
            logits, s, w = model.step(y, s, memory)  # (B, V), (B, D), (B, Ts)
            log_p = torch.log_softmax(logits.double(), dim=-1)  # (B, V)
            y = log_p.argmax(dim=-1)  # (B,)
            scores += torch.where(done, 0.0, log_p.gather(1, y.unsqueeze(1)).squeeze(1))
            steps += (~done).long()
            tokens.append(torch.where(done, model.pad_id, y))
            weights.append(w)
            done = done | (y == model.eos_id)
    finally:
        model.train(was_training)
    out = []
    for b in range(B):
        seq = [int(t[b]) for t in tokens[: int(steps[b])]]
        finished = bool(seq) and seq[-1] == model.eos_id
        w = None
        if weights and weights[0] is not None:
            w = torch.stack([x[b] for x in weights[: int(steps[b])]]) if steps[b] else weights[0].new_zeros(0, 0)
            w = w[:, : int(memory.lengths[b])]  # (steps, Ts_b)
        elif getattr(model, "uses_attention", False):
            w = memory.annotations.new_zeros(0, int(memory.lengths[b]))
        out.append(Translation(seq[:-1] if finished else seq, float(scores[b]), finished, w))
    return out


@torch.no_grad()
def beam_search(model, src: torch.Tensor, *, beam_width: int, max_len: int) -> Translation:
    """Beam search for one source sentence: keep the ``beam_width`` most probable prefixes at every step.

    Hypotheses are ranked by their total log-probability (no length normalisation). At each step the
    ``beam_width`` best extensions that do not end the sentence stay in the beam; an extension by <eos> is
    kept as a finished hypothesis if it ranks among the ``beam_width`` best extensions of that step. The
    search stops when the best finished hypothesis scores at least as well as every prefix still in the
    beam (a prefix's score can only go down as it grows), or after ``max_len`` steps. With
    ``beam_width=1`` this is exactly greedy decoding. A wider beam usually, but not always, finds a more
    probable output than greedy decoding.

    Shapes:
        src: (Ts,) or (1, Ts) ids of one sentence
        return: a :class:`Translation`
    """
    _check_decoder_model(model)
    beam_width = _checks.positive_int("beam_width", beam_width)
    max_len = _check_max_len(max_len)
    _checks.tensor("src", src, min_ndim=1)
    if src.dim() == 2 and src.shape[0] != 1 or src.dim() > 2:
        raise ValueError(
            f"beam_search decodes one sentence: src must be (Ts,) or (1, Ts), got {_checks.shape_str(src.shape)}"
        )
    src = src.reshape(1, -1)  # (1, Ts)
    was_training = model.training
    model.eval()
    try:
        memory = model.encode(src)
        T_s = src.shape[1]
        uses_attention = getattr(model, "uses_attention", False)
        empty_w = memory.annotations.new_zeros(0, T_s) if uses_attention else None
        if T_s == 0 or max_len == 0:
            return Translation([], 0.0, False, empty_w)
        states = model.start(memory)  # (k, D), k = 1 at first
        prefixes: list[list[int]] = [[]]
        prefix_weights: list[list[torch.Tensor]] = [[]]
        scores = torch.zeros(1, dtype=torch.float64, device=src.device)  # (k,)
        finished: list[Translation] = []
        for _ in range(max_len):
            k = len(prefixes)
            y_prev = torch.tensor([p[-1] if p else model.bos_id for p in prefixes], device=src.device)  # (k,)
            logits, s, w = model.step(y_prev, states, memory.expand(k))  # (k, V), (k, D), (k, Ts)
            total = scores.unsqueeze(1) + torch.log_softmax(logits.double(), dim=-1)  # (k, V)
            V = total.shape[1]
            best, index = total.flatten().topk(min(2 * beam_width, total.numel()))  # (2 * beam,)
            alive_rows, alive_tokens, alive_scores = [], [], []
            for rank, (value, flat) in enumerate(zip(best.tolist(), index.tolist())):
                row, token = divmod(flat, V)
                if token == model.eos_id:
                    if rank < beam_width:
                        rows = prefix_weights[row] + ([w[row]] if w is not None else [])
                        finished.append(
                            Translation(list(prefixes[row]), value, True, torch.stack(rows) if rows else None)
                        )
                elif len(alive_rows) < beam_width:
                    alive_rows.append(row)
                    alive_tokens.append(token)
                    alive_scores.append(value)
            if not alive_rows:
                break
            prefixes = [prefixes[r] + [t] for r, t in zip(alive_rows, alive_tokens)]
            prefix_weights = [prefix_weights[r] + ([w[r]] if w is not None else []) for r in alive_rows]
            rows_t = torch.tensor(alive_rows, device=src.device)
            states = s.index_select(0, rows_t)  # (k', D)
            scores = torch.tensor(alive_scores, dtype=torch.float64, device=src.device)  # (k',)
            if finished and max(f.score for f in finished) >= float(scores.max()):
                break
    finally:
        model.train(was_training)
    if finished:
        return max(finished, key=lambda f: f.score)
    best = int(scores.argmax())  # nothing finished within max_len: the best unfinished prefix
    rows = prefix_weights[best]
    return Translation(prefixes[best], float(scores[best]), False, torch.stack(rows) if rows else empty_w)


@torch.no_grad()
def score_sequence(model, src: torch.Tensor, tokens: Sequence[int], *, finished: bool = True) -> float:
    """log p(tokens [+ <eos>] | src) under the model, by teacher forcing: the score decoders maximise.

    Shapes:
        src: (Ts,) or (1, Ts) ids of one sentence
    """
    _check_decoder_model(model)
    _checks.tensor("src", src, min_ndim=1)
    if src.dim() == 2 and src.shape[0] != 1 or src.dim() > 2:
        raise ValueError(
            f"score_sequence scores one sentence: src must be (Ts,) or (1, Ts), got {_checks.shape_str(src.shape)}"
        )
    tokens = _checks.as_integers("tokens", tokens, what="a list of token ids")
    if tokens.dim() != 1:
        raise ValueError(f"tokens must be a flat list of token ids, got shape {_checks.shape_str(tokens.shape)}")
    src = src.reshape(1, -1)
    was_training = model.training
    model.eval()
    try:
        memory = model.encode(src)
        s = model.start(memory)
        targets = tokens.tolist() + ([model.eos_id] if finished else [])
        y_prev, total = model.bos_id, 0.0
        for token in targets:
            logits, s, _ = model.step(torch.tensor([y_prev], device=src.device), s, memory)
            if not 0 <= token < logits.shape[-1]:
                raise ValueError(f"tokens must be ids in [0, {logits.shape[-1]}) (the target vocabulary), got {token}")
            total += float(torch.log_softmax(logits.double(), dim=-1)[0, token])
            y_prev = token
    finally:
        model.train(was_training)
    return total


def translate(
    model: Seq2Seq, tokens: Sequence[str], src_vocab, tgt_vocab, *, beam_width: int = 1, max_len: int = 20, device=None
):
    """Translate a tokenised sentence: unknown words become <unk>; an empty sentence gives an empty output.

    Returns (source tokens as the model saw them, output tokens, weights (len(output) + finished, Ts) or None).
    """
    if isinstance(tokens, str):
        raise TypeError("translate expects a list of tokens, got a str: tokenize it first")
    _check_decoder_model(model)
    for name, vocab in (("src_vocab", src_vocab), ("tgt_vocab", tgt_vocab)):
        if not (hasattr(vocab, "encode") and hasattr(vocab, "itos")):
            raise TypeError(f"{name} must be an attnbook.data.Vocab, got {type(vocab).__name__}")
    ids = src_vocab.encode(tokens)
    seen = [src_vocab.itos[i] for i in ids]  # what the model reads: unknown words as <unk>
    device = device if device is not None else next(model.parameters()).device
    src = torch.tensor(ids, dtype=torch.long, device=device)  # (Ts,)
    if beam_width == 1:
        result = greedy_decode(model, src, max_len=max_len)[0]
    else:
        result = beam_search(model, src, beam_width=beam_width, max_len=max_len)
    weights = None if result.weights is None else result.weights.detach().cpu()
    return seen, [tgt_vocab.itos[i] for i in result.tokens], weights


class PrefixTable:
    """A toy "model" whose next-token log-probabilities are read from a table indexed by the output so far.

    It has the interface the decoders use (``encode``, ``start``, ``step``), so greedy decoding and beam
    search can be run on hand-made distributions, where the best output is known. Prefixes missing from
    the table end the sentence. Token ids: <pad> = 0, <bos> = 1, <eos> = 2, then the words.

    Args:
        table: {prefix (a tuple of token ids): next-token probabilities (a list of length V)}

    Chapter: sequence-to-sequence and Bahdanau attention (decoding).
    """

    uses_attention = False
    pad_id, bos_id, eos_id = 0, 1, 2

    def __init__(self, table: dict[tuple[int, ...], Sequence[float]]):
        sizes = {len(p) for p in table.values()}
        if len(sizes) != 1:
            raise ValueError(f"every row of the table must have the same length V, got lengths {sorted(sizes)}")
        self.V = sizes.pop()
        self.table = {}
        for prefix, probs in table.items():
            probs = torch.as_tensor(probs, dtype=torch.float64)
            if torch.any(probs < 0) or not math.isclose(float(probs.sum()), 1.0, abs_tol=1e-6):
                raise ValueError(
                    f"the row for prefix {prefix} must be probabilities summing to 1, got {probs.tolist()}"
                )
            self.table[tuple(prefix)] = probs.clamp_min(1e-12).log()
        self.training = False
        self._prefixes: list[tuple[int, ...]] = []

    def train(self, mode: bool = True):
        self.training = mode
        return self

    def eval(self):
        return self.train(False)

    def encode(self, src: torch.Tensor, src_lengths=None) -> Memory:
        n = src.shape[-1]
        return Memory(torch.zeros(1, 1, 1), torch.zeros(1, 1), None, None, torch.tensor([n]))

    def start(self, memory: Memory) -> torch.Tensor:
        self._prefixes = [()]
        return torch.zeros(memory.summary.shape[0], 1)  # the "state" is an index into the prefixes seen

    def step(self, y_prev: torch.Tensor, s_prev: torch.Tensor, memory: Memory):
        end = torch.full((self.V,), -1e12, dtype=torch.float64)
        end[self.eos_id] = 0.0
        rows, states = [], []
        for y, state in zip(y_prev.tolist(), s_prev[:, 0].long().tolist()):
            prefix = self._prefixes[state] + (() if y == self.bos_id else (y,))
            self._prefixes.append(prefix)
            states.append(float(len(self._prefixes) - 1))
            rows.append(self.table.get(prefix, end))
        return torch.stack(rows), torch.tensor(states).unsqueeze(1), None
