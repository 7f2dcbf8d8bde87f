"""Decoding a sequence-to-sequence model: greedy decoding, beam search, the score of a given output, and
translating a tokenised sentence; a table of probabilities to try the decoders on.

The decoders need only what :class:`attnbook.seq2seq.Seq2Seq` offers: ``encode`` (the source, once),
``start`` (the first decoder state) and ``step`` (one token more), with the ids ``bos_id`` and ``eos_id``.
:class:`PrefixTable` offers the same with hand-made probabilities, where the best output is known. The
input checks are at the end of the module.

Chapter: sequence-to-sequence and Bahdanau attention (decoding).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from . import _checks
from .seq2seq import Memory, Seq2Seq

__all__ = ["Translation", "greedy_decode", "beam_search", "score_sequence", "translate", "PrefixTable"]


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


@torch.no_grad()
def greedy_decode(model, src: torch.Tensor, src_lengths=None, *, max_len: int) -> list[Translation]:
    """Pick the most probable token at every step, for a batch of sources; stops at <eos> or ``max_len``.

    A source of length 0 gives an empty translation (no tokens, score 0).

    Shapes:
        src: (B, Ts) ids (or (Ts,) for one sentence), src_lengths: (B,)
        return: B :class:`Translation` objects
    """
    _check_greedy_decode(model, max_len)
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
    _check_beam_search(model, src, beam_width, max_len)
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
    tokens = _check_score_sequence(model, src, tokens)  # a list of ints
    src = src.reshape(1, -1)
    was_training = model.training
    model.eval()
    try:
        memory = model.encode(src)
        s = model.start(memory)
        y_prev, total = model.bos_id, 0.0
        for token in tokens + ([model.eos_id] if finished else []):
            logits, s, _ = model.step(torch.tensor([y_prev], device=src.device), s, memory)  # (1, V)
            _check_token(token, logits.shape[-1])  # the vocabulary size V is the model's output width
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
    _check_translate(model, tokens, src_vocab, tgt_vocab)
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
        rows = _check_table(table)  # {prefix: probabilities (V,) float64}
        self.V = len(next(iter(rows.values())))
        self.table = {prefix: probs.clamp_min(1e-12).log() for prefix, probs in rows.items()}
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


# --- input checks ------------------------------------------------------------------------------------


def _check_model(model) -> None:
    """``model`` must be something the decoders can run: encode, start, step and the special ids."""
    if not all(hasattr(model, a) for a in ("encode", "start", "step", "bos_id", "eos_id", "train")):
        raise TypeError(
            f"model must be a Seq2Seq (or a PrefixTable): something with encode, start and step, "
            f"got {type(model).__name__}"
        )


def _check_one_sentence(src, what: str) -> None:
    _checks.tensor("src", src, min_ndim=1)
    if src.dim() == 2 and src.shape[0] != 1 or src.dim() > 2:
        raise ValueError(f"{what} one sentence: src must be (Ts,) or (1, Ts), got {_checks.shape_str(src.shape)}")


def _check_greedy_decode(model, max_len) -> None:
    _check_model(model)
    _checks.positive_int("max_len", max_len, minimum=0)


def _check_beam_search(model, src, beam_width, max_len) -> None:
    _check_model(model)
    _checks.positive_int("beam_width", beam_width)
    _checks.positive_int("max_len", max_len, minimum=0)
    _check_one_sentence(src, "beam_search decodes")


def _check_score_sequence(model, src, tokens) -> list[int]:
    _check_model(model)
    _check_one_sentence(src, "score_sequence scores")
    tokens = _checks.as_integers("tokens", tokens, what="a list of token ids")
    if tokens.dim() != 1:
        raise ValueError(f"tokens must be a flat list of token ids, got shape {_checks.shape_str(tokens.shape)}")
    return tokens.tolist()


def _check_token(token: int, vocab_size: int) -> None:
    if not 0 <= token < vocab_size:
        raise ValueError(f"tokens must be ids in [0, {vocab_size}) (the target vocabulary), got {token}")


def _check_translate(model, tokens, src_vocab, tgt_vocab) -> None:
    if isinstance(tokens, str):
        raise TypeError("translate expects a list of tokens, got a str: tokenize it first")
    _check_model(model)
    for name, vocab in (("src_vocab", src_vocab), ("tgt_vocab", tgt_vocab)):
        if not (hasattr(vocab, "encode") and hasattr(vocab, "itos")):
            raise TypeError(f"{name} must be an attnbook.data.Vocab, got {type(vocab).__name__}")


def _check_table(table) -> dict[tuple[int, ...], torch.Tensor]:
    """Rows of probabilities of one length V, each summing to 1; returns them as float64 tensors."""
    sizes = {len(p) for p in table.values()}
    if len(sizes) != 1:
        raise ValueError(f"every row of the table must have the same length V, got lengths {sorted(sizes)}")
    rows = {}
    for prefix, probs in table.items():
        probs = torch.as_tensor(probs, dtype=torch.float64)
        if torch.any(probs < 0) or not math.isclose(float(probs.sum()), 1.0, abs_tol=1e-6):
            raise ValueError(f"the row for prefix {prefix} must be probabilities summing to 1, got {probs.tolist()}")
        rows[tuple(prefix)] = probs
    return rows
