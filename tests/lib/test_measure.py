"""Tests of attnbook.measure: timing, peak tensor memory, FLOP and parameter counts, power-law fits."""

from __future__ import annotations

import math
import time

import pytest
import torch
from attnbook import attention, costs, measure, train
from hypothesis import given, settings
from hypothesis import strategies as st

DEVICE = train.pick_device()


# --- time ---------------------------------------------------------------------------------------------


def test_time_fn_times_every_repeat_after_the_warmup():
    calls = []

    def work():
        calls.append(1)
        time.sleep(0.01)

    timing = measure.time_fn(work, repeats=3, warmup=2, device=DEVICE)
    assert len(calls) == 5 and len(timing.times) == 3
    assert 0.01 <= timing.best <= timing.median < 1.0
    assert "median" in repr(timing)


@pytest.mark.skipif(DEVICE.type != "cpu", reason="the thread's CPU time is a CPU clock")
def test_the_thread_clock_counts_the_work_on_one_thread_not_the_waiting():
    threads_seen = []

    def wait():  # sleeping takes wall time but no CPU time
        threads_seen.append(torch.get_num_threads())
        time.sleep(0.05)

    before = torch.get_num_threads()
    wall = measure.time_fn(wait, repeats=2, warmup=0)
    thread = measure.time_fn(wait, repeats=2, warmup=0, clock="thread")
    assert wall.clock == "wall" and thread.clock == "thread"
    assert wall.best >= 0.05 and thread.best < 0.01
    assert threads_seen[2:] == [1, 1] and torch.get_num_threads() == before

    def work():
        return sum(i * i for i in range(200_000))

    busy = measure.time_fn(work, repeats=3, warmup=0, clock="thread")
    assert busy.best > 0.001 and "clock='thread'" in repr(busy)


def test_time_fn_bad_input():
    with pytest.raises(TypeError, match="fn must be a function of no arguments"):
        measure.time_fn(3)
    with pytest.raises(ValueError, match="repeats must be an integer >= 1, got 0"):
        measure.time_fn(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="warmup must be an integer >= 0, got -1"):
        measure.time_fn(lambda: None, warmup=-1)
    with pytest.raises(ValueError, match="device must name a device"):
        measure.time_fn(lambda: None, device="gpu please")
    with pytest.raises(ValueError, match="clock must be one of 'wall', 'thread', got 'cpu'"):
        measure.time_fn(lambda: None, clock="cpu")


# --- memory -------------------------------------------------------------------------------------------


def test_peak_memory_of_one_tensor():
    peak = measure.peak_memory(lambda: torch.empty(1000, device=DEVICE), device=DEVICE)
    if DEVICE.type == "cpu":
        assert peak == 4000
    else:  # the caching allocator rounds blocks up to 512 bytes
        assert 4000 <= peak <= 4096


@pytest.mark.skipif(DEVICE.type != "cpu", reason="exact byte counts of the CPU tensor tracker")
def test_the_tracker_adds_new_tensors_and_subtracts_freed_ones():
    def chain():
        a = torch.ones(1000)  # 4000 bytes
        b = a * 2  # 8000 held
        del a  # 4000
        c = b + 1  # 8000 again: the peak stays 8000
        del b
        return c * 3  # 8000

    assert measure.peak_memory(chain) == 8000
    with measure.TensorMemoryTracker() as tracker:
        x = torch.ones(250)
        y = torch.ones(250)
        del x, y
    assert tracker.peak == 2000 and tracker.current == 0


@pytest.mark.skipif(DEVICE.type != "cpu", reason="exact byte counts of the CPU tensor tracker")
def test_views_and_in_place_results_cost_nothing():
    x = torch.randn(100, 100)

    def views():
        y = x.t()[10:20]
        z = x.view(10_000)
        x.mul_(1.0)
        return y, z, x.detach()

    assert measure.peak_memory(views) == 0
    assert measure.peak_memory(lambda: x.t().contiguous()) == 40_000


@pytest.mark.skipif(DEVICE.type != "cpu", reason="exact byte counts of the CPU tensor tracker")
def test_tensors_saved_for_the_backward_pass_are_counted():
    x = torch.randn(1000, requires_grad=True)
    with measure.TensorMemoryTracker() as tracker:
        y = torch.exp(x * 2)  # x * 2 is freed (exp saves its output), y is kept
        held = tracker.current
    assert held == 4000  # only y: exp saves its result, which is y itself
    with measure.TensorMemoryTracker() as tracker:
        z = torch.sin(x * 2)  # sin saves its input x * 2: it stays alive inside the graph
        held = tracker.current
    assert held == 8000
    del y, z


@pytest.mark.skipif(DEVICE.type != "cpu", reason="exact byte counts of the CPU tensor tracker")
@settings(max_examples=min(15, settings.default.max_examples), deadline=None)
@given(n=st.integers(8, 200), d=st.integers(1, 32))
def test_naive_attention_holds_the_scores_and_the_weights(n, d):
    q, k, v = torch.randn(n, d), torch.randn(n, d), torch.randn(n, d)
    with torch.no_grad():
        peak = measure.peak_memory(lambda: attention.scaled_dot_product_attention(q, k, v))
    assert peak == 4 * (2 * n * n + n * d)  # scores, weights and output at the moment of the last product


def test_peak_memory_bad_input():
    with pytest.raises(TypeError, match="fn must be a function of no arguments"):
        measure.peak_memory(torch.randn(3))
    with pytest.raises(TypeError, match="device must be a torch.device or a string"):
        measure.peak_memory(lambda: None, device=3)


# --- FLOPs and parameters -----------------------------------------------------------------------------


@settings(max_examples=min(20, settings.default.max_examples), deadline=None)
@given(m=st.integers(1, 40), k=st.integers(1, 40), n=st.integers(1, 40))
def test_flop_count_of_a_matrix_product(m, k, n):
    a, b = torch.randn(m, k), torch.randn(k, n)
    assert measure.flop_count(lambda: a @ b) == 2 * m * k * n


def test_flop_count_of_attention_and_its_backward():
    n, d = 64, 16
    q = torch.randn(n, d, requires_grad=True)
    k, v = torch.randn(n, d), torch.randn(n, d)
    assert measure.flop_count(lambda: attention.scaled_dot_product_attention(q, k, v)) == 4 * n * n * d
    both = measure.flop_count(lambda: attention.scaled_dot_product_attention(q, k, v).sum().backward())
    assert both > 4 * n * n * d  # the backward pass has its own products


def test_count_operations_grows_with_a_python_loop_only():
    x = torch.randn(50, 8)
    W = torch.randn(8, 8)

    def loop(x):
        h = torch.zeros(8)
        for x_t in x:  # indexing and the step: a fixed number of operations per position
            h = torch.tanh(x_t @ W + h)
        return h

    assert measure.count_operations(lambda: x @ W) == 1
    assert measure.count_operations(lambda: torch.softmax(x @ x.T, dim=-1) @ x) == 4  # x.T is an operation too
    counts = [measure.count_operations(lambda: loop(x[:n])) for n in (10, 20, 30)]
    assert counts[1] - counts[0] == counts[2] - counts[1] > 10  # the same number of operations per position
    with pytest.raises(TypeError, match="fn must be a function of no arguments"):
        measure.count_operations(None)


def test_count_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2, bias=False))
    assert measure.count_parameters(model) == 3 * 4 + 4 + 4 * 2
    model[0].weight.requires_grad_(False)
    assert measure.count_parameters(model, trainable_only=True) == 4 + 4 * 2
    shared = torch.nn.Sequential(model[1], model[1])
    assert measure.count_parameters(shared) == 8
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got int"):
        measure.count_parameters(3)


# --- fits and formats ---------------------------------------------------------------------------------


@settings(max_examples=min(30, settings.default.max_examples), deadline=None)
@given(k=st.floats(-3, 3), c=st.floats(0.01, 100))
def test_fit_power_law_recovers_the_exponent(k, c):
    xs = [1, 2, 4, 8, 16]
    slope, coefficient = measure.fit_power_law(xs, [c * x**k for x in xs])
    assert math.isclose(slope, k, abs_tol=1e-9)
    assert math.isclose(coefficient, c, rel_tol=1e-9)


def test_fit_power_law_bad_input():
    with pytest.raises(ValueError, match="same length"):
        measure.fit_power_law([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="two distinct x"):
        measure.fit_power_law([2, 2], [1, 2])
    with pytest.raises(ValueError, match="finite and positive"):
        measure.fit_power_law([1, 2], [0, 2])


def test_format_bytes():
    assert measure.format_bytes(512) == "512 B"
    assert measure.format_bytes(3 * 2**20) == "3.0 MiB"
    assert measure.format_bytes(1.5 * 2**30) == "1.5 GiB"
    with pytest.raises(ValueError, match="n must be a finite number of bytes"):
        measure.format_bytes(-1)


# --- a whole transformer: parameters, FLOPs per token, activation memory --------------------------------


def _gpt(**changes):
    from attnbook import models

    values = dict(vocab_size=65, block_size=32, n_layers=2, n_heads=4, d_model=32, bias=False, mlp="relu")
    values.update(changes)
    torch.manual_seed(0)
    return models.GPT(models.TransformerConfig(**values))


def test_non_embedding_parameters_leave_out_the_tables_and_the_tied_output_layer():
    model = _gpt()
    L, D, V, T = 2, 32, 65, 32
    norms = (2 * L + 1) * D  # gains of the LayerNorms (no biases)
    assert measure.count_parameters(model, non_embedding=True) == 12 * L * D * D + norms
    assert measure.count_parameters(model) == 12 * L * D * D + norms + V * D + T * D
    untied = _gpt(tie_weights=False)  # an output layer of its own is not a lookup table: it counts
    assert measure.count_parameters(untied, non_embedding=True) == 12 * L * D * D + norms + V * D


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"mlp": "gelu", "n_layers": 3},
        {"d_model": 48, "n_heads": 3},
        {"mlp": "swiglu", "d_ff": 80},
        {"n_kv_heads": 2},
    ],
)
def test_transformer_flops_equal_the_flops_pytorch_counts(changes):
    model = _gpt(**changes)
    B, T = 3, 24
    x = torch.randint(0, 65, (B, T))
    flops = costs.transformer_flops(model, T)
    # the explicit attention path: Q K^T and A V are matrix products FlopCounterMode sees
    forward = measure.flop_count(lambda: model(x, return_weights=True))
    assert forward == B * T * flops.forward
    training = measure.flop_count(lambda: model(x, return_weights=True)[0].sum().backward())
    assert training == B * T * flops.training == 3 * forward
    D, L = model.config.d_model, model.config.n_layers
    assert flops.attention == 4 * L * T * D and flops.deembedding == 2 * D * 65
    if not changes:
        assert flops.n == 12 * L * D * D and flops.six_n == 72 * L * D * D
        assert flops.kaplan_forward == 2 * flops.n + 2 * L * T * D


def test_transformer_flops_bad_input():
    with pytest.raises(TypeError, match="model must be a GPT-like model"):
        costs.transformer_flops(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="seq_len must be an integer >= 1, got 0"):
        costs.transformer_flops(_gpt(), 0)


@pytest.mark.parametrize("mlp", ["relu", "gelu"])
@pytest.mark.parametrize("attention", ["fused", "explicit"])
@pytest.mark.parametrize("shape", [(4, 32, 32), (2, 48, 17), (3, 24, 5)])
def test_activation_bytes_equal_what_autograd_saves(mlp, attention, shape):
    H, D, T = shape
    model = _gpt(mlp=mlp, n_heads=H, d_model=D, n_layers=1)
    block = model.blocks[0]
    saved = []
    for B in (1, 2):  # what grows with the batch is the activations (weights and masks do not)
        x = torch.randn(B, T, D, requires_grad=True)
        saved.append(
            measure.saved_tensor_bytes(
                lambda: block(x, is_causal=True, return_weights=attention == "explicit"),
                exclude=list(block.parameters()),
            )
        )
    assert saved[1] - saved[0] == costs.activation_bytes(model.config, 1, T, attention=attention)
    assert costs.activation_bytes(model.config, 5, T, attention=attention) == 5 * costs.activation_bytes(
        model.config, 1, T, attention=attention
    )


def test_saved_tensor_bytes_counts_a_storage_once():
    x = torch.randn(1000, requires_grad=True)
    assert measure.saved_tensor_bytes(lambda: torch.exp(x)) == 4000  # exp saves its output
    assert measure.saved_tensor_bytes(lambda: torch.exp(x), exclude=[]) == 4000
    assert measure.saved_tensor_bytes(lambda: x * x, exclude=[x]) == 0  # x is saved twice, excluded
    with torch.no_grad():
        assert measure.saved_tensor_bytes(lambda: torch.exp(x)) == 0  # no graph, nothing saved
    with pytest.raises(TypeError, match="fn must be a function of no arguments"):
        measure.saved_tensor_bytes(3)


def test_activation_bytes_bad_input():
    from attnbook import models

    config = models.TransformerConfig(vocab_size=65, bias=False)
    with pytest.raises(TypeError, match="config must be an attnbook.models.TransformerConfig"):
        costs.activation_bytes({}, 1, 8)
    with pytest.raises(ValueError, match="attention must be 'fused' or 'explicit', got 'flash'"):
        costs.activation_bytes(config, 1, 8, attention="flash")
    with pytest.raises(ValueError, match="activation_bytes knows the library's pre-norm LayerNorm block"):
        costs.activation_bytes(config.replace(mlp="swiglu"), 1, 8)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        costs.activation_bytes(config, 0, 8)


def test_attention_entropy_of_uniform_and_one_hot_heads():
    T = 6
    uniform = torch.full((2, 1, T, T), 1 / T)
    one_hot = torch.eye(T).expand(2, 1, T, T)
    causal = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]  # row t: uniform over t + 1 keys
    weights = torch.cat([uniform, one_hot, causal.expand(2, 1, T, T)], dim=1)  # (2, 3, T, T)
    h = measure.attention_entropy(weights)
    assert h.shape == (3,)
    torch.testing.assert_close(h[:2], torch.tensor([math.log(T), 0.0]))
    torch.testing.assert_close(h[2], torch.log(torch.arange(1.0, T + 1)).mean())
    torch.testing.assert_close(measure.attention_entropy(weights, start=T - 1)[2], torch.tensor(math.log(T)))
    with pytest.raises(ValueError, match=r"start must be smaller than the number of queries of weights, Tq=6 .*got 6"):
        measure.attention_entropy(weights, start=T)
    with pytest.raises(ValueError, match="weights must have 4 dimensions"):
        measure.attention_entropy(weights[0])
