"""Checkers for the exercises of the chapter on sequence-to-sequence and Bahdanau attention."""

from __future__ import annotations

import math

import torch

from ..attention import AdditiveAttention
from . import Mistake, Result, check_function, check_number

__all__ = ["check_bahdanau_attention", "check_beam_step", "check_shift_targets", "check_bottleneck_bits"]


# --- one step of Bahdanau attention -------------------------------------------------------------------


def _attention_reference(s_prev, H, mask, W_1, W_2, v):
    """The library's AdditiveAttention with the given weights copied in."""
    attention = AdditiveAttention(W_1.shape[1], W_2.shape[1], W_1.shape[0]).to(H.dtype)
    with torch.no_grad():
        attention.score.W_1.weight.copy_(W_1)
        attention.score.W_2.weight.copy_(W_2)
        attention.score.v.weight.copy_(v.unsqueeze(0))
        context, weights = attention(s_prev.unsqueeze(1), H, H, mask.unsqueeze(1), return_weights=True)
    return context.squeeze(1), weights.squeeze(1)  # (B, d_enc), (B, Ts)


def _scores(s_prev, H, W_1, W_2, v, squash=torch.tanh):
    return squash((s_prev @ W_1.T).unsqueeze(1) + H @ W_2.T) @ v  # (B, Ts)


def _finish(scores, H, mask, fill=float("-inf"), dim=-1):
    weights = torch.softmax(scores.masked_fill(~mask, fill), dim=dim)  # (B, Ts)
    return (weights.unsqueeze(1) @ H).squeeze(1), weights


def _attention_cases():
    g = torch.Generator().manual_seed(3)

    def case(B, T, D, d_enc, A, lengths):
        r = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731
        mask = torch.arange(T).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)  # (B, Ts)
        return (r(B, D), r(B, T, d_enc), mask, r(A, D) / math.sqrt(D), r(A, d_enc) / math.sqrt(d_enc), r(A))

    return [
        case(2, 4, 3, 5, 6, [4, 4]),
        case(3, 6, 4, 8, 5, [6, 3, 1]),
        case(4, 7, 6, 4, 3, [7, 2, 5, 4]),
        case(1, 3, 1, 1, 2, [2]),  # a batch of one, one feature: a squeeze() without its dim drops them
    ]


def check_bahdanau_attention(fn) -> Result:
    """``fn(s_prev, H, mask, W_1, W_2, v)`` returns (context (B, d_enc), weights (B, Ts)) of Bahdanau attention."""
    mistakes = [
        Mistake(
            "the scores skip the tanh: e = v^T tanh(W_1 s + W_2 h); without it the scoring network is "
            "linear, and the part that depends on s adds the same number to every position.",
            lambda s, H, m, W1, W2, v: _finish(_scores(s, H, W1, W2, v, squash=lambda x: x), H, m),
        ),
        Mistake(
            "the padding mask is ignored: padded positions get weight. Set their scores to -inf before the softmax.",
            lambda s, H, m, W1, W2, v: _finish(_scores(s, H, W1, W2, v), H, torch.ones_like(m)),
        ),
        Mistake(
            "padded scores are set to 0, but exp(0) = 1 still gives them weight; use -inf.",
            lambda s, H, m, W1, W2, v: _finish(_scores(s, H, W1, W2, v), H, m, fill=0.0),
        ),
        Mistake(
            "the softmax runs over the batch: each decoder state's weights are a distribution over the "
            "source positions, so take the softmax over the last dimension.",
            lambda s, H, m, W1, W2, v: _finish(_scores(s, H, W1, W2, v), H, m, dim=0),
        ),
        Mistake(
            "the context averages the annotations with the raw scores; use the softmax weights a_{t,i}.",
            lambda s, H, m, W1, W2, v: (
                lambda e: (
                    (e.masked_fill(~m, 0.0).unsqueeze(1) @ H).squeeze(1),
                    torch.softmax(e.masked_fill(~m, float("-inf")), -1),
                )
            )(_scores(s, H, W1, W2, v)),
        ),
    ]
    return check_function(
        fn,
        exercise="Bahdanau attention",
        reference=_attention_reference,
        cases=_attention_cases(),
        mistakes=mistakes,
        error_hints=[
            (
                "shapes cannot be multiplied",
                "check the shapes: W_1 is (A, D), so W_1 s is s @ W_1.T; "
                "W_2 h_i for every i is H @ W_2.T, of shape (B, Ts, A).",
            )
        ],
        gradients=True,
    )


# --- one step of beam search --------------------------------------------------------------------------


def _beam_reference(scores, log_probs, k):
    total = scores.unsqueeze(1) + log_probs  # (n, V)
    best, index = total.flatten().topk(k)  # (k,)
    return index // log_probs.shape[1], index % log_probs.shape[1], best


def _beam_cases():
    g = torch.Generator().manual_seed(5)
    cases = []
    for n, V, k in [(1, 6, 3), (3, 5, 3), (4, 7, 2), (2, 4, 5)]:
        scores = -torch.rand(n, generator=g, dtype=torch.float64) * 4  # (n,)
        log_probs = torch.log_softmax(torch.randn(n, V, generator=g, dtype=torch.float64) * 2, dim=-1)
        cases.append((scores, log_probs, k))
    return cases


def check_beam_step(fn) -> Result:
    """``fn(scores, log_probs, k)`` returns (rows, tokens, new_scores) of the k best extensions, best first."""

    def per_row_best(scores, log_probs, k):
        total = scores.unsqueeze(1) + log_probs
        best, tokens = total.max(dim=1)
        order = best.argsort(descending=True)[:k]
        return order, tokens[order], best[order]

    def without_history(scores, log_probs, k):
        best, index = log_probs.flatten().topk(k)
        return index // log_probs.shape[1], index % log_probs.shape[1], best + scores[index // log_probs.shape[1]]

    def multiplied(scores, log_probs, k):
        best, index = (scores.unsqueeze(1) * log_probs).flatten().topk(k)
        rows, tokens = index // log_probs.shape[1], index % log_probs.shape[1]
        return rows, tokens, scores[rows] + log_probs[rows, tokens]

    def swapped(scores, log_probs, k):
        rows, tokens, best = _beam_reference(scores, log_probs, k)
        return tokens, rows, best

    mistakes = [
        Mistake(
            "a prefix's score is the sum of the log-probabilities of all its tokens: rank the candidates by "
            "scores[:, None] + log_probs, not by the new token's log-probability alone.",
            without_history,
        ),
        Mistake(
            "only each hypothesis's single best token is considered: a hypothesis may contribute several "
            "of the k best extensions (rank all n x V candidates together).",
            per_row_best,
        ),
        Mistake(
            "log-probabilities add (probabilities multiply); the candidates are ranked by scores[:, None] + log_probs.",
            multiplied,
        ),
        Mistake(
            "rows and tokens are swapped: for a flat index i into the (n, V) table, the row is i // V and "
            "the token is i % V.",
            swapped,
        ),
    ]
    return check_function(
        fn, exercise="one step of beam search", reference=_beam_reference, cases=_beam_cases(), mistakes=mistakes
    )


# --- teacher forcing: decoder inputs and targets ------------------------------------------------------


def _shift_reference(targets, lengths, bos_id=2, eos_id=3, pad_id=0):
    B, T = targets.shape
    tgt_in = torch.full((B, T + 1), pad_id, dtype=targets.dtype)
    tgt_out = torch.full((B, T + 1), pad_id, dtype=targets.dtype)
    for b, n in enumerate(lengths.tolist()):
        tgt_in[b, 0] = bos_id
        tgt_in[b, 1 : n + 1] = targets[b, :n]
        tgt_out[b, :n] = targets[b, :n]
        tgt_out[b, n] = eos_id
    return tgt_in, tgt_out


def _shift_cases():
    g = torch.Generator().manual_seed(7)
    cases = []
    for lengths in ([3, 3], [4, 2, 1], [5, 5, 3, 2]):
        T = max(lengths)
        targets = torch.randint(4, 20, (len(lengths), T), generator=g)
        for b, n in enumerate(lengths):
            targets[b, n:] = 0  # padding
        cases.append((targets, torch.tensor(lengths)))
    return cases


def check_shift_targets(fn) -> Result:
    """``fn(targets, lengths)`` returns (tgt_in, tgt_out): <bos> y_1 ... y_n and y_1 ... y_n <eos>, padded."""

    def eos_at_the_end(targets, lengths):
        tgt_in, tgt_out = _shift_reference(targets, lengths)
        tgt_out = torch.cat([targets, torch.full_like(targets[:, :1], 3)], dim=1)
        return tgt_in, tgt_out

    def swapped(targets, lengths):
        tgt_in, tgt_out = _shift_reference(targets, lengths)
        return tgt_out, tgt_in

    def no_bos(targets, lengths):
        tgt_in, tgt_out = _shift_reference(targets, lengths)
        return torch.cat([targets, torch.zeros_like(targets[:, :1])], dim=1), tgt_out

    mistakes = [
        Mistake(
            "<eos> goes right after each sentence's last real token (position lengths[b]), not after the "
            "padding at the end of the row.",
            eos_at_the_end,
        ),
        Mistake(
            "input and target are swapped: the decoder reads <bos> y_1 ... y_n and must predict y_1 ... y_n <eos>.",
            swapped,
        ),
        Mistake(
            "the decoder input must start with <bos>: at step t it reads y_{t-1}, and at t = 1 there is no "
            "y_0, so <bos> stands in for it.",
            no_bos,
        ),
    ]
    return check_function(
        fn,
        exercise="teacher forcing inputs and targets",
        reference=_shift_reference,
        cases=_shift_cases(),
        mistakes=mistakes,
    )


# --- the size of the bottleneck -----------------------------------------------------------------------


def check_bottleneck_bits(answer, length: int = 40) -> Result:
    """The bits a fixed context must hold to tell apart every digit string of the given length."""
    return check_number(
        answer,
        exercise=f"bits in a string of {length} digits",
        expected=length * math.log2(10),
        rel_tol=0.01,
        mistakes=[
            (f"10^{length} is the number of strings; the number of bits is its base-2 logarithm.", 10.0**length),
            ("one bit per digit cannot tell ten digits apart: each digit carries log2(10) bits.", float(length)),
            (
                "4 bits per digit is what a binary-coded-decimal encoding uses, more than necessary: the minimum is "
                "log2(10), about 3.32 bits per digit.",
                4.0 * length,
            ),
            ("that is the count in nats (natural logarithm); bits use log base 2.", length * math.log(10)),
        ],
    )
