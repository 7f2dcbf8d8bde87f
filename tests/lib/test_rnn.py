"""attnbook.rnn: the cells and the recurrent layer equal PyTorch's on copied weights, a sequence is checked
once (not at every step), and bad input gets clear errors."""

from __future__ import annotations

import math

import pytest
import torch
from attnbook import rnn
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

DT = torch.float64


def _g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=_g(seed), dtype=DT)


# --- equality with PyTorch on copied weights --------------------------------------------------------


@settings(max_examples=min(15, settings.default.max_examples), deadline=None)
@given(
    B=st.integers(1, 4),
    D=st.integers(1, 5),
    H=st.integers(1, 6),
    seed=st.integers(0, 1000),
    nonlinearity=st.sampled_from(["tanh", "relu"]),
)
def test_rnn_cell_equals_torch(B, D, H, seed, nonlinearity):
    torch.manual_seed(seed)
    ref = nn.RNNCell(D, H, nonlinearity=nonlinearity).double()
    cell = rnn.RNNCell.from_torch(ref)
    x, h = _randn(B, D, seed=seed), _randn(B, H, seed=seed + 1)
    torch.testing.assert_close(cell(x, h), ref(x, h))
    torch.testing.assert_close(cell(x), ref(x))  # zero initial state


@settings(max_examples=min(15, settings.default.max_examples), deadline=None)
@given(B=st.integers(1, 4), D=st.integers(1, 5), H=st.integers(1, 6), seed=st.integers(0, 1000))
def test_lstm_cell_equals_torch(B, D, H, seed):
    torch.manual_seed(seed)
    ref = nn.LSTMCell(D, H).double()
    cell = rnn.LSTMCell.from_torch(ref)
    x, h, c = _randn(B, D, seed=seed), _randn(B, H, seed=seed + 1), _randn(B, H, seed=seed + 2)
    got, want = cell(x, (h, c)), ref(x, (h, c))
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])


@settings(max_examples=min(15, settings.default.max_examples), deadline=None)
@given(B=st.integers(1, 4), D=st.integers(1, 5), H=st.integers(1, 6), seed=st.integers(0, 1000))
def test_gru_cell_equals_torch(B, D, H, seed):
    torch.manual_seed(seed)
    ref = nn.GRUCell(D, H).double()
    cell = rnn.GRUCell.from_torch(ref)
    x, h = _randn(B, D, seed=seed), _randn(B, H, seed=seed + 1)
    torch.testing.assert_close(cell(x, h), ref(x, h))


def test_gru_reset_before_differs_from_reset_after():
    torch.manual_seed(0)
    cell = rnn.GRUCell.from_torch(nn.GRUCell(3, 4).double())
    original = rnn.GRUCell(3, 4, reset_after=False).double()
    original.load_state_dict(cell.state_dict())
    x, h = _randn(5, 3), _randn(5, 4, seed=1)
    assert not torch.allclose(cell(x, h), original(x, h))
    # with the reset gate forced open (r = 1) the two formulations agree
    with torch.no_grad():
        for m in (cell, original):
            m.b_x[:4] = 50.0
    torch.testing.assert_close(cell(x, h), original(x, h))
    # reset_after=False is Cho et al.'s formula, written out
    W_x, W_h, b_x, b_h = original.W_x, original.W_h, original.b_x, original.b_h
    r = torch.sigmoid(x @ W_x[:4].T + b_x[:4] + h @ W_h[:4].T + b_h[:4])
    z = torch.sigmoid(x @ W_x[4:8].T + b_x[4:8] + h @ W_h[4:8].T + b_h[4:8])
    n = torch.tanh(x @ W_x[8:].T + b_x[8:] + (r * h) @ W_h[8:].T + b_h[8:])
    torch.testing.assert_close(original(x, h), (1 - z) * n + z * h)


@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
def test_recurrent_equals_fused_torch_layer(kind):
    torch.manual_seed(1)
    layer = {"rnn": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}[kind](3, 5, batch_first=True).double()
    cell = {"rnn": rnn.RNNCell, "lstm": rnn.LSTMCell, "gru": rnn.GRUCell}[kind].from_torch(layer)
    x = _randn(2, 9, 3)
    out, final = rnn.Recurrent(cell)(x)
    ref_out, ref_final = layer(x)
    torch.testing.assert_close(out, ref_out)
    if kind == "lstm":
        torch.testing.assert_close(final[0], ref_final[0][0])
        torch.testing.assert_close(final[1], ref_final[1][0])
    else:
        torch.testing.assert_close(final, ref_final[0])


def test_lstm_gates_are_returned_and_in_range():
    cell = rnn.LSTMCell(3, 4).double()
    (h, c), gates = cell(_randn(6, 3), return_gates=True)
    assert set(gates) == {"i", "f", "g", "o"}
    for name in "ifo":
        assert ((gates[name] > 0) & (gates[name] < 1)).all()
    assert (gates["g"].abs() < 1).all()
    torch.testing.assert_close(c, gates["i"] * gates["g"])  # c_0 = 0
    torch.testing.assert_close(h, gates["o"] * torch.tanh(c))


def test_linear_rnn_is_affine():
    cell = rnn.RNNCell(2, 3, nonlinearity="linear").double()
    x, h = _randn(4, 2), _randn(4, 3, seed=1)
    torch.testing.assert_close(cell(x, h), x @ cell.W_xh.T + h @ cell.W_hh.T + cell.b_h)


# --- forget-gate bias and the regressor -------------------------------------------------------------


def test_set_forget_bias_on_every_kind_of_lstm():
    torch.manual_seed(0)
    H = 4
    ours = rnn.LSTMCell(2, H, forget_bias=1.5)
    assert torch.all(ours.b[H : 2 * H] == 1.5)
    for module, layers in ((nn.LSTMCell(2, H), [""]), (nn.LSTM(2, H, num_layers=2), ["_l0", "_l1"])):
        before = {name: p.detach().clone() for name, p in module.named_parameters()}
        rnn.set_forget_bias(module, 2.0)
        for layer in layers:
            b = getattr(module, f"bias_ih{layer}") + getattr(module, f"bias_hh{layer}")
            torch.testing.assert_close(b[H : 2 * H], torch.full((H,), 2.0))
        for name, p in module.named_parameters():  # nothing but the forget gate's biases changed
            keep = torch.ones_like(p, dtype=torch.bool)
            if name.startswith("bias"):
                keep[H : 2 * H] = False
            assert torch.equal(p[keep], before[name][keep])
    cell = rnn.LSTMCell.from_torch(rnn.set_forget_bias(nn.LSTMCell(2, H), 3.0))
    _, gates = cell(torch.zeros(1, 2), return_gates=True)
    torch.testing.assert_close(gates["f"], torch.full((1, H), 1 / (1 + math.exp(-3.0))))


def test_set_forget_bias_rejects_non_lstm():
    with pytest.raises(TypeError, match="module must be an LSTM"):
        rnn.set_forget_bias(nn.GRU(2, 3), 1.0)
    with pytest.raises(TypeError, match="value must be a finite number"):
        rnn.set_forget_bias(nn.LSTM(2, 3), float("nan"))


@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
def test_sequence_regressor_reads_the_last_state(kind):
    torch.manual_seed(0)
    model = rnn.SequenceRegressor(kind, 2, 6, forget_bias=1.0 if kind == "lstm" else None).double()
    x = _randn(3, 7, 2)
    cell = {"rnn": rnn.RNNCell, "lstm": rnn.LSTMCell, "gru": rnn.GRUCell}[kind].from_torch(model.layer)
    outputs, _ = rnn.Recurrent(cell)(x)
    torch.testing.assert_close(model(x), model.readout(outputs[:, -1]).squeeze(-1))
    assert model(x).shape == (3,)


def test_sequence_regressor_errors():
    with pytest.raises(ValueError, match="kind must be one of"):
        rnn.SequenceRegressor("transformer", 2, 4)
    with pytest.raises(ValueError, match="forget_bias applies to kind='lstm' only"):
        rnn.SequenceRegressor("gru", 2, 4, forget_bias=1.0)
    model = rnn.SequenceRegressor("gru", 2, 4)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, input_size\) = \(B, T, 2\).*got \(3, 5, 1\)"):
        model(torch.zeros(3, 5, 1))
    with pytest.raises(ValueError, match="x must have 3 dimensions"):
        model(torch.zeros(5, 2))


# --- bad input ---------------------------------------------------------------------------------------


def test_wrong_input_width_names_the_shapes():
    cell = rnn.RNNCell(3, 4)
    with pytest.raises(ValueError, match=r"x must have shape \(B, input_size\) = \(B, 3\), got \(2, 5\)"):
        cell(torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"x must have 2 dimensions, got shape \(2, 7, 3\)"):
        cell(torch.zeros(2, 7, 3))
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        cell([[0.0, 0.0, 0.0]])


@pytest.mark.parametrize("cls", [rnn.RNNCell, rnn.GRUCell])
def test_wrong_hidden_shape_names_the_shapes(cls):
    cell = cls(3, 4)
    with pytest.raises(ValueError, match=r"h must have shape \(B, hidden_size\) = \(2, 4\).*got \(2, 5\)"):
        cell(torch.zeros(2, 3), torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"h must have shape \(B, hidden_size\) = \(2, 4\).*got \(3, 4\)"):
        cell(torch.zeros(2, 3), torch.zeros(3, 4))


def test_lstm_state_errors():
    cell = rnn.LSTMCell(3, 4)
    x = torch.zeros(2, 3)
    with pytest.raises(TypeError, match=r"state must be a pair \(h, c\)"):
        cell(x, torch.zeros(2, 4))
    with pytest.raises(
        ValueError, match=r"state\[1\] \(c\) must have shape \(B, hidden_size\) = \(2, 4\).*got \(2, 3\)"
    ):
        cell(x, (torch.zeros(2, 4), torch.zeros(2, 3)))


def test_dtype_mismatch_is_explained():
    cell = rnn.GRUCell(3, 4)
    with pytest.raises(TypeError, match="x has dtype torch.float64 but the cell's parameters are torch.float32"):
        cell(torch.zeros(2, 3, dtype=DT))
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        cell(torch.zeros(2, 3, dtype=torch.long))


def test_sequence_errors():
    cell = rnn.LSTMCell(2, 3)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, 2\) with T >= 1, got \(4, 6, 3\)"):
        rnn.Recurrent(cell)(torch.zeros(4, 6, 3))
    with pytest.raises(TypeError, match="cell must be an attnbook.rnn RNNCell, LSTMCell or GRUCell.*from_torch"):
        rnn.Recurrent(nn.LSTMCell(2, 3))


def test_constructor_errors():
    with pytest.raises(ValueError, match="nonlinearity must be one of"):
        rnn.RNNCell(2, 3, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="hidden_size must be an integer >= 1, got 0"):
        rnn.LSTMCell(2, 0)
    with pytest.raises(TypeError, match="input_size must be an integer"):
        rnn.GRUCell(2.5, 3)


def test_from_torch_errors():
    with pytest.raises(ValueError, match="num_layers=1"):
        rnn.LSTMCell.from_torch(nn.LSTM(2, 3, num_layers=2))
    with pytest.raises(TypeError, match="module must be a torch.nn.GRUCell or a one-layer torch.nn.GRU"):
        rnn.GRUCell.from_torch(nn.LSTMCell(2, 3))
    with pytest.raises(ValueError, match="bias=True"):
        rnn.RNNCell.from_torch(nn.RNNCell(2, 3, bias=False))
    with pytest.raises(TypeError, match="module must be a torch.nn.LSTMCell or a one-layer torch.nn.LSTM, got GRU"):
        rnn.LSTMCell.from_torch(nn.GRU(2, 3))


@pytest.mark.parametrize("cls", [rnn.RNNCell, rnn.LSTMCell, rnn.GRUCell])
def test_a_sequence_is_checked_once_not_at_every_step(cls, monkeypatch):
    calls = []
    check_x = rnn._check_x
    monkeypatch.setattr(rnn, "_check_x", lambda cell, x: calls.append(x.shape) or check_x(cell, x))
    outputs, _ = rnn.Recurrent(cls(2, 3))(torch.randn(4, 7, 2))
    assert outputs.shape == (4, 7, 3) and calls == [(4, 2)]


def test_cells_run_on_the_test_device():
    from attnbook import train

    device = train.pick_device()
    for cls in (rnn.RNNCell, rnn.LSTMCell, rnn.GRUCell):
        cell = cls(2, 3).to(device)
        out, _ = rnn.Recurrent(cell)(torch.randn(4, 5, 2, device=device))
        assert out.shape == (4, 5, 3) and out.device.type == device.type
