"""API property specs: recurrent networks, sequence to sequence and decoding (the harness is in harness.py)."""

import torch
from attnbook import bptt, decoding, rnn, seq2seq
from attnbook.data import Vocab
from harness import Choice, Const, Ids, Int, IntList, Num, Obj, Pair, Tensor, _module, spec

# rnn ------------------------------------------------------------------------------------------------------

RNN = dict(B=(1, 3), T=(1, 4), D=(1, 4), H=(1, 4), kind=(0, 2))
CELLS = [lambda D, H: rnn.RNNCell(D, H), lambda D, H: rnn.LSTMCell(D, H), lambda D, H: rnn.GRUCell(D, H)]


def _state(cell, *batch, g=None):
    """A (drawn) state for ``cell``: h, or (h, c) for an LSTM."""
    H = cell.hidden_size
    return (Tensor(*batch, H), Tensor(*batch, H)) if isinstance(cell, rnn.LSTMCell) else Tensor(*batch, H)


@spec("rnn.RNNCell", rnn.RNNCell, RNN)
def _(s):
    return _module(lambda: rnn.RNNCell(s.D, s.H)), dict(x=Tensor(s.B, s.D), h=Tensor(s.B, s.H))


@spec("rnn.LSTMCell", rnn.LSTMCell, RNN)
def _(s):
    cell = _module(lambda: rnn.LSTMCell(s.D, s.H))
    return cell, dict(x=Tensor(s.B, s.D), state=Pair(Tensor(s.B, s.H), Tensor(s.B, s.H)), return_gates=Const(True))


@spec("rnn.GRUCell", rnn.GRUCell, RNN)
def _(s):
    return _module(lambda: rnn.GRUCell(s.D, s.H)), dict(
        x=Tensor(s.B, s.D), h=Tensor(s.B, s.H), return_gates=Const(True)
    )


@spec("rnn.Recurrent", rnn.Recurrent, RNN)
def _(s):
    return _module(lambda: rnn.Recurrent(CELLS[s.kind](s.D, s.H))), dict(x=Tensor(s.B, s.T, s.D, seq=1))


@spec("rnn.SequenceRegressor", rnn.SequenceRegressor, RNN)
def _(s):
    return _module(lambda: rnn.SequenceRegressor(["rnn", "lstm", "gru"][s.kind], s.D, s.H)), dict(
        x=Tensor(s.B, s.T, s.D, seq=1)
    )


@spec("rnn.set_forget_bias", rnn.set_forget_bias, RNN)
def _(s):
    def set_forget_bias(module, value):
        return rnn.set_forget_bias(module, value).b[module.hidden_size : 2 * module.hidden_size]  # the forget gate

    return set_forget_bias, dict(module=Obj(_module(lambda: rnn.LSTMCell(s.D, s.H))), value=Num(1.0))


@spec("bptt.flatten_state", bptt.flatten_state, RNN)
def _(s):
    return bptt.flatten_state, dict(state=Pair(Tensor(s.B, s.H), Tensor(s.B, s.H)))


@spec("bptt.unflatten_state", bptt.unflatten_state, RNN)
def _(s):
    return bptt.unflatten_state, dict(
        cell=Obj(_module(lambda: CELLS[s.kind](s.D, s.H))), s=Tensor(s.B, s.H * (2 if s.kind == 1 else 1))
    )


@spec("bptt.state_jacobians", bptt.state_jacobians, RNN)
def _(s):
    return bptt.state_jacobians, dict(
        cell=Obj(_module(lambda: CELLS[s.kind](s.D, s.H))), x=Tensor(s.T, s.D, seq=0, batch=None)
    )


@spec("bptt.jacobian_chain", bptt.jacobian_chain, RNN)
def _(s):
    return bptt.jacobian_chain, dict(jacobians=Tensor(s.T, s.H, s.H, seq=0, batch=None))


@spec("bptt.gradient_norms", bptt.gradient_norms, {**RNN, "part": (0, 2)})
def _(s):
    cell = _module(lambda: rnn.LSTMCell(s.D, s.H))
    return bptt.gradient_norms, dict(
        cell=Obj(cell), x=Tensor(s.T, s.D, seq=0, batch=None), part=Choice(["state", "h", "c"][s.part])
    )


# seq2seq --------------------------------------------------------------------------------------------------

S2S = dict(B=(1, 3), Ts=(1, 5), Tt=(1, 4), attention=(0, 1))


def _seq2seq(s):
    return _module(lambda: seq2seq.Seq2Seq(9, 8, d_embed=4, d_hidden=4, attention=bool(s.attention)))


def _lengths(s):
    return IntList([max(1, s.Ts - b) for b in range(s.B)], high=s.Ts)


@spec("seq2seq.Encoder", seq2seq.Encoder, S2S)
def _(s):
    return _module(lambda: seq2seq.Encoder(9, 4, 3)), dict(src=Ids(s.B, s.Ts, vocab=9), lengths=_lengths(s))


@spec("seq2seq.Decoder", seq2seq.Decoder, S2S)
def _(s):
    model = _seq2seq(s)
    with torch.no_grad():
        memory = model.encode(torch.randint(9, (s.B, s.Ts)))
    return model.decoder, dict(tgt_in=Ids(s.B, s.Tt, vocab=8), memory=Const(memory))


@spec("seq2seq.Seq2Seq", seq2seq.Seq2Seq, S2S)
def _(s):
    return _seq2seq(s), dict(src=Ids(s.B, s.Ts, vocab=9), src_lengths=_lengths(s), tgt_in=Ids(s.B, s.Tt, vocab=8))


@spec("seq2seq.make_batch", seq2seq.make_batch, S2S)
def _(s):
    pairs = [([4 + (b + t) % 5 for t in range(s.Ts - b % s.Ts)], [4] * s.Tt) for b in range(s.B)]
    return seq2seq.make_batch, dict(pairs=Obj(pairs), pad_id=Int(0))


@spec("seq2seq.sequence_loss", seq2seq.sequence_loss, S2S)
def _(s):
    g = torch.Generator().manual_seed(1)
    pairs = [
        (
            torch.randint(4, 9, (s.Ts - b % s.Ts,), generator=g).tolist(),
            torch.randint(4, 8, (s.Tt,), generator=g).tolist(),
        )
        for b in range(s.B)
    ]
    return seq2seq.sequence_loss, dict(model=Obj(_seq2seq(s)), batch=Const(seq2seq.make_batch(pairs)))


@spec("decoding.greedy_decode", decoding.greedy_decode, S2S, half=False)
def _(s):
    return decoding.greedy_decode, dict(
        model=Obj(_seq2seq(s)), src=Ids(s.B, s.Ts, vocab=9), src_lengths=_lengths(s), max_len=Int(s.Tt)
    )


@spec("decoding.beam_search", decoding.beam_search, S2S, half=False)
def _(s):
    return decoding.beam_search, dict(
        model=Obj(_seq2seq(s)), src=Ids(s.Ts, vocab=9, batch=None), beam_width=Int(s.B), max_len=Int(s.Tt)
    )


@spec("decoding.score_sequence", decoding.score_sequence, S2S)
def _(s):
    return decoding.score_sequence, dict(
        model=Obj(_seq2seq(s)),
        src=Ids(s.Ts, vocab=9, batch=None),
        tokens=IntList([4 + t % 4 for t in range(s.Tt)], high=7),
    )


@spec("decoding.translate", decoding.translate, S2S, half=False)
def _(s):
    words = ["le", "chat", "est", "noir", "un"]
    src_vocab, tgt_vocab = Vocab(words), Vocab(["the", "cat", "is", "black"])
    return decoding.translate, dict(
        model=Obj(_seq2seq(s)),
        tokens=Const(words[: s.Ts]),
        src_vocab=Obj(src_vocab),
        tgt_vocab=Obj(tgt_vocab),
        beam_width=Int(s.B),
        max_len=Int(s.Tt),
    )
