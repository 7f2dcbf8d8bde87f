"""attnbook.grading.effects: a recorded call carries the arguments it changed in place and its gradients."""

import io

import pytest
import torch
from attnbook.exercises import weighted_gradients
from attnbook.grading import replay


def _replayer(recorder: replay.Recorder, answer) -> replay.Replayer:
    record = {"format": replay.FORMAT, "answer": recorder.answer_info(answer), "calls": recorder.calls, "ended": ""}
    buffer = io.BytesIO()
    torch.save(record, buffer)
    return replay.Replayer(replay.load_record(buffer.getvalue()))


def test_a_change_of_an_argument_in_place_is_replayed():
    def halves_its_input(x, xs):
        x.mul_(0.5)
        xs[1].zero_()
        return x.sum()

    recorder = replay.Recorder()
    x, xs = torch.ones(3), [torch.ones(2), torch.ones(2)]
    recorder.wrap(halves_its_input)(x, xs)
    y, ys = torch.ones(3), [torch.ones(2), torch.ones(2)]
    out = _replayer(recorder, halves_its_input).answer()(y, ys)
    assert torch.equal(y, x) and torch.equal(ys[1], torch.zeros(2)) and torch.equal(ys[0], torch.ones(2))
    assert out.item() == 1.5


def _softmax(x):
    return torch.softmax(x, dim=-1)


def _zeroed_in_place(x):
    w = torch.softmax(x, dim=-1)
    w[w < 0.2] = 0.0  # autograd needs the softmax's output: backward raises
    return w


@pytest.mark.parametrize("answer", [_softmax, _zeroed_in_place])
def test_gradients_and_errors_in_backward_are_replayed(answer):
    def outcome(fn):
        x = torch.linspace(-1.0, 2.0, 6, dtype=torch.float64).reshape(2, 3).requires_grad_(True)
        try:
            return weighted_gradients(fn(x), [x])[0]
        except Exception as error:  # replayed, the error is one of the grader's classes, named as the learner's
            return f"{type(error).__name__}: {error}"

    recorder = replay.Recorder()
    direct = outcome(recorder.wrap(answer))
    replayed = outcome(_replayer(recorder, answer).answer())
    if isinstance(direct, str):
        assert replayed == direct and "inplace operation" in direct
    else:
        assert torch.equal(replayed, direct) and torch.equal(direct, outcome(answer))


def test_a_replayed_backward_with_other_weights_is_a_mismatch():
    recorder = replay.Recorder()
    x = torch.randn(2, 3, requires_grad=True)
    recorder.wrap(_softmax)(x)
    out = _replayer(recorder, _softmax).answer()(x.detach().clone().requires_grad_(True))
    with pytest.raises(replay.RecordMismatch, match="other gradients"):
        out.sum().backward()
