"""attnbook.train: seeding, device choice, the progress bar and the training loop."""

import math
import time

import numpy as np
import pytest
import torch
from attnbook import train


def test_seed_everything_makes_runs_repeat():
    train.seed_everything(123)
    a = (torch.randn(5), np.random.rand(3))
    train.seed_everything(123)
    b = (torch.randn(5), np.random.rand(3))
    assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    with pytest.raises(ValueError, match="seed must be a non-negative integer, got -1"):
        train.seed_everything(-1)


def test_pick_device(monkeypatch):
    monkeypatch.delenv("ATTNBOOK_DEVICE", raising=False)
    expected = "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    assert train.pick_device().type == expected
    assert train.pick_device("cpu") == torch.device("cpu")
    monkeypatch.setenv("ATTNBOOK_DEVICE", "cpu")
    assert train.pick_device() == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device 'cuda' was asked for .* but is not available"):
            train.pick_device("cuda")


def test_progress_counts_and_can_be_hidden(monkeypatch):
    bar = train.progress(range(7), desc="x")
    assert list(bar) == list(range(7)) and bar.n == 7
    monkeypatch.setenv("ATTNBOOK_PROGRESS", "0")
    assert train.progress(range(3)).disable


def _regression(seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(256, 3, generator=g)
    w = torch.tensor([1.5, -2.0, 0.5])
    return X, X @ w + 0.3


def test_fit_learns_a_linear_map_and_records_history():
    train.seed_everything(0)
    X, y = _regression()
    model = torch.nn.Linear(3, 1)
    batches = [(X[i : i + 32], y[i : i + 32]) for i in range(0, 256, 32)]  # an iterable, restarted each epoch
    history = train.fit(
        model,
        batches,
        lambda m, b: ((m(b[0]).squeeze(-1) - b[1]) ** 2).mean(),
        steps=300,
        lr=0.05,
        evaluate=lambda m: {"mse": ((m(X).squeeze(-1) - y) ** 2).mean().item()},
        eval_every=100,
    )
    assert history.step == list(range(300)) and len(history.loss) == 300
    assert history.eval_step == [100, 200, 300]
    assert history.evals["mse"][-1] < 1e-3 < history.loss[0]
    torch.testing.assert_close(model.weight.data[0], torch.tensor([1.5, -2.0, 0.5]), atol=0.02, rtol=0)
    assert len(history.smoothed_loss(10)) == 300 and history.seconds > 0 and not history.diverged
    assert history.cpu_seconds > 0


def test_fit_counts_processor_time_apart_from_waiting():
    model = torch.nn.Linear(1, 1)

    def loss_fn(m, batch):  # a step that waits: wall-clock time, no processor time
        time.sleep(0.02)
        return m(batch).pow(2).mean()

    history = train.fit(model, lambda step: torch.ones(4, 1), loss_fn, steps=5, quiet=True)
    assert history.seconds >= 0.1 and history.cpu_seconds < history.seconds / 2


def test_fit_schedule_and_clipping_and_divergence():
    X, y = _regression()
    model = torch.nn.Linear(3, 1)
    history = train.fit(
        model,
        lambda step: (X, y),
        lambda m, b: ((m(b[0]).squeeze(-1) - b[1]) ** 2).mean(),
        steps=10,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        schedule=lambda step: 1.0 / (step + 1),
        grad_clip=1.0,
    )
    assert history.lr == pytest.approx([0.1 / (s + 1) for s in range(10)])
    # an enormous learning rate without clipping diverges, and fit stops at the first non-finite loss
    model = torch.nn.Linear(3, 1)
    history = train.fit(
        model,
        lambda step: (X * 1e3, y),
        lambda m, b: ((m(b[0]).squeeze(-1) - b[1]) ** 2).mean(),
        steps=500,
        optimizer=torch.optim.SGD(model.parameters(), lr=10.0),
    )
    assert history.diverged and not math.isfinite(history.loss[-1]) and len(history.loss) < 500


def test_fit_rejects_bad_arguments():
    model = torch.nn.Linear(1, 1)
    with pytest.raises(ValueError, match="steps must be an integer >= 1, got 0"):
        train.fit(model, [], lambda m, b: m(b).sum(), steps=0)
    with pytest.raises(ValueError, match="grad_clip must be > 0, got -1"):
        train.fit(model, [], lambda m, b: m(b).sum(), steps=1, grad_clip=-1)


def test_the_smoothed_loss_forgets_a_non_finite_step_once_it_leaves_the_window():
    history = train.History(loss=[math.nan, 1.0, 2.0, 3.0, 4.0])
    smoothed = history.smoothed_loss(2)
    assert all(math.isnan(v) for v in smoothed[:2]) and smoothed[2:] == [1.5, 2.5, 3.5]


def test_shuffled_batches_take_each_index_once_an_epoch_and_check_at_once():
    g = torch.Generator().manual_seed(0)
    batches = train.shuffled_batches(10, 3, generator=g)
    first = [next(batches) for _ in range(3)]  # one epoch: 9 of the 10 indices, the 10th dropped
    assert all(len(b) == 3 for b in first) and len({i for b in first for i in b}) == 9
    second = [next(batches) for _ in range(3)]  # a new order for the next epoch
    assert len({i for b in second for i in b}) == 9 and second != first
    again = train.shuffled_batches(10, 3, generator=torch.Generator().manual_seed(0))
    assert [next(again) for _ in range(6)] == first + second  # the seed fixes the order
    with pytest.raises(ValueError, match="batch_size must be at most n=4"):
        train.shuffled_batches(4, 5, generator=g)  # at the call, not at the first batch
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        train.shuffled_batches(4, 2, generator=0)


def test_accuracy_counts_the_largest_logit_in_eval_mode():
    logits = torch.tensor([[2.0, 1.0], [0.0, 3.0], [5.0, 4.0]])  # predicts 0, 1, 0
    model = torch.nn.Sequential(torch.nn.Identity(), torch.nn.Dropout(0.9))  # dropout would change them in training
    labels = torch.tensor([0, 0, 0])
    batches = [(logits[:2], labels[:2]), (logits[2:], labels[2:])]
    assert train.accuracy(model, batches) == pytest.approx(2 / 3) and model.training
    with pytest.raises(ValueError, match=r"labels must hold class indices in \[0, 2\), got values from 0 to 2"):
        train.accuracy(model, [(logits, torch.tensor([0, 1, 2]))])
    assert model.training  # restored after an error too
