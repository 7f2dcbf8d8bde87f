"""Measuring what computations cost: wall time, peak tensor memory, FLOPs and parameters.

- :func:`time_fn` times a function (several runs after warm-up, synchronising CUDA), by the wall clock or
  by the CPU time of the one thread doing the work, which time spent on other programs does not inflate.
- :func:`peak_memory` is the most memory the tensors created by a function held at any one moment.
  On CUDA it reads the caching allocator's peak statistics. On the CPU, PyTorch keeps no such
  statistics, so :class:`TensorMemoryTracker` watches every tensor that a PyTorch operation creates
  (a ``TorchDispatchMode``), adds its storage's bytes when it appears and subtracts them once the
  storage is freed (a weak reference tells when).
- :func:`flop_count` counts floating-point operations with PyTorch's ``FlopCounterMode``
  (matrix products: 2 per multiply-add; element-wise work such as softmax is not counted).
- :func:`count_operations` counts the PyTorch operations a function runs (a Python loop over positions
  runs operations in proportion to the length; a matrix product runs one).
- :func:`count_parameters` and :func:`fit_power_law` (the slope of a log-log plot) complete the set.
- :func:`saved_tensor_bytes` measures what autograd keeps for the backward pass (the activations).
- :func:`attention_entropy` measures how spread out each head's attention is (a diagnostic of training).

The cost models of a whole transformer (FLOPs per token, activation bytes of a block), which these
instruments check, are in :mod:`attnbook.costs`.

Chapter: the cost of attention and flash attention (chapter 09); scaling and practice (FLOPs and memory
of a whole model).
"""

from __future__ import annotations

import math
import numbers
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from . import _checks
from .positional import LearnedPositionalEmbedding

__all__ = [
    "Timing",
    "time_fn",
    "TensorMemoryTracker",
    "peak_memory",
    "flop_count",
    "count_operations",
    "count_parameters",
    "fit_power_law",
    "format_bytes",
    "saved_tensor_bytes",
    "attention_entropy",
]


def _check_callable(name: str, fn) -> None:
    if not callable(fn):
        raise TypeError(f"{name} must be a function of no arguments (e.g. a lambda), got {type(fn).__name__}")


def _device(device) -> torch.device:
    if isinstance(device, torch.device):
        return device
    if isinstance(device, str):
        try:
            return torch.device(device)
        except RuntimeError:
            raise ValueError(f"device must name a device such as 'cpu' or 'cuda', got {device!r}") from None
    raise TypeError(f"device must be a torch.device or a string such as 'cpu', got {type(device).__name__}")


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class Timing:
    """Times of repeated runs, in seconds, by ``clock``: ``"wall"`` or ``"thread"`` (see :func:`time_fn`)."""

    times: tuple[float, ...]
    clock: str = "wall"

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def best(self) -> float:
        return min(self.times)

    def __repr__(self) -> str:
        return (
            f"Timing(median={self.median:.4g} s, best={self.best:.4g} s, runs={len(self.times)}, clock={self.clock!r})"
        )


def time_fn(fn: Callable[[], Any], *, repeats: int = 5, warmup: int = 1, device="cpu", clock: str = "wall") -> Timing:
    """Time ``fn()``: ``warmup`` untimed runs, then ``repeats`` timed ones.

    ``clock="wall"`` measures elapsed time (``time.perf_counter``). On a machine busy with other programs
    that time includes theirs, and more so for long calls than for short ones. ``clock="thread"`` measures
    the CPU time of the calling thread (``time.thread_time``), with PyTorch held to that one thread while
    ``fn`` runs: the time the work itself takes on one core, which waiting for the core does not inflate
    (the caches other programs evict still can, so the best of several runs is the surest). On CUDA the
    work is the GPU's, not the thread's: the device is synchronised before and after each run and the
    time is the wall clock's whichever clock is asked for (``Timing.clock`` says which was used).

    Chapter: the cost of attention and flash attention.
    """
    _check_callable("fn", fn)
    repeats = _checks.positive_int("repeats", repeats)
    warmup = _checks.positive_int("warmup", warmup, minimum=0)
    device = _device(device)
    clock = _checks.choice("clock", clock, ("wall", "thread"))
    if device.type == "cuda":
        clock = "wall"
    now = time.thread_time if clock == "thread" else time.perf_counter
    threads = torch.get_num_threads()
    if clock == "thread":
        torch.set_num_threads(1)
    try:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeats):
            _synchronize(device)
            start = now()
            fn()
            _synchronize(device)
            times.append(now() - start)
    finally:
        torch.set_num_threads(threads)
    return Timing(tuple(times), clock)


class TensorMemoryTracker(TorchDispatchMode):
    """Counts the bytes held by tensors created inside the ``with`` block, and their peak.

    Every PyTorch operation inside the block passes through :meth:`__torch_dispatch__`. A result whose
    storage is new (not the storage of one of the operation's inputs: views and in-place results share
    their input's storage) is added to ``current``; a weak reference to the storage tells when it is
    freed, and its bytes are then subtracted. ``peak`` is the largest ``current`` seen.

    What it sees: tensors made by PyTorch operations in the block, forward and backward, including those
    autograd saves for the backward pass. What it does not see: tensors that existed before the block,
    scratch memory inside a single operation's kernel, and memory that is not a tensor.

    Chapter: the cost of attention and flash attention.
    """

    def __init__(self):
        super().__init__()
        self._current = 0
        self.peak = 0
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}  # storage address -> (weak ref, bytes)

    @property
    def current(self) -> int:
        """The bytes held now by the tensors created in the block that are still alive."""
        self._forget_freed()
        return self._current

    def _forget_freed(self) -> None:
        for key in [key for key, (ref, _) in self._live.items() if ref.expired()]:
            self._current -= self._live.pop(key)[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self._forget_freed()
        inputs = {
            t.untyped_storage()._cdata
            for t in tree_leaves((args, kwargs))
            if isinstance(t, torch.Tensor) and t.layout == torch.strided
        }
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            if key in inputs or key in self._live:
                continue
            self._live[key] = (StorageWeakRef(storage), storage.nbytes())
            self._current += storage.nbytes()
        self.peak = max(self.peak, self._current)
        return out

    def __exit__(self, *exc):
        self._forget_freed()
        return super().__exit__(*exc)


def peak_memory(fn: Callable[[], Any], *, device="cpu") -> int:
    """The peak extra memory, in bytes, that the tensors created by ``fn()`` hold at any one moment.

    "Extra" means over what was allocated before the call: inputs made beforehand are not counted, the
    results ``fn`` returns are (until it returns). On CUDA this is the caching allocator's peak
    (``torch.cuda.max_memory_allocated``) minus what was allocated before; elsewhere it is
    :class:`TensorMemoryTracker`'s peak.

    Chapter: the cost of attention and flash attention.
    """
    _check_callable("fn", fn)
    device = _device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        result = fn()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        del result
        return int(peak)
    with TensorMemoryTracker() as tracker:
        result = fn()
        del result
    return int(tracker.peak)


def flop_count(fn: Callable[[], Any]) -> int:
    """The floating-point operations of ``fn()`` as PyTorch's ``FlopCounterMode`` counts them.

    A matrix product of (m, k) by (k, n) counts 2 m k n (a multiply and an add per term); element-wise
    operations (softmax, exp, additions) are not counted. If ``fn`` calls ``backward``, the backward
    pass is counted too.

    Chapter: the cost of attention and flash attention.
    """
    from torch.utils.flop_counter import FlopCounterMode

    _check_callable("fn", fn)
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


class _OperationCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def count_operations(fn: Callable[[], Any]) -> int:
    """The number of PyTorch operations (ATen operators, views included) that ``fn()`` runs.

    A loop in Python over N positions runs a number of operations proportional to N, one after another;
    a matrix product over all positions at once is one operation, however large.

    Chapter: the cost of attention and flash attention (three ways to process sequences).
    """
    _check_callable("fn", fn)
    with _OperationCounter() as counter:
        fn()
    return counter.count


def _embedding_parameters(model: torch.nn.Module) -> set[int]:
    """The ids of the parameters that are lookup tables: token embeddings and learned positions."""
    return {
        id(p)
        for module in model.modules()
        if isinstance(module, (torch.nn.Embedding, LearnedPositionalEmbedding))
        for p in module.parameters(recurse=False)
    }


def count_parameters(model: torch.nn.Module, *, trainable_only: bool = False, non_embedding: bool = False) -> int:
    """The number of parameters (numbers, not tensors) of ``model``; shared parameters count once.

    ``non_embedding=True`` leaves out the lookup tables (``nn.Embedding`` and learned positions) and any
    parameter tied to them, such as a tied output layer: the "N" of the scaling laws (Kaplan et al., 2020).

    Chapter: the cost of attention and flash attention; used by every chapter that sizes a model;
    scaling and practice (non-embedding parameters).
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    skip = _embedding_parameters(model) if non_embedding else set()
    return sum(p.numel() for p in model.parameters() if (p.requires_grad or not trainable_only) and id(p) not in skip)


def _numbers(name: str, values) -> list[float]:
    """A sequence of real numbers (a list, a tuple, an array or a 1-D tensor) as a list of floats."""
    try:
        return [float(v) for v in (values.tolist() if hasattr(values, "tolist") else values)]
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a sequence of numbers, got {values!r}") from None


def fit_power_law(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Fit y = c * x**k by least squares on log-log axes; return (k, c). k is the slope of the log-log plot.

    Shapes:
        x, y: (n,) positive numbers, n >= 2, at least two distinct x

    Chapter: the cost of attention and flash attention.
    """
    xs, ys = _numbers("x", x), _numbers("y", y)
    if len(xs) != len(ys):
        raise ValueError(f"x and y must have the same length, got {len(xs)} and {len(ys)}")
    if len(xs) < 2 or len(set(xs)) < 2:
        raise ValueError(f"fit_power_law needs at least two distinct x values, got x = {xs}")
    if any(not (v > 0 and math.isfinite(v)) for v in xs + ys):
        raise ValueError("x and y must be finite and positive for a fit on log-log axes")
    lx, ly = [math.log(v) for v in xs], [math.log(v) for v in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    k = sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)
    return k, math.exp(my - k * mx)


def format_bytes(n: float) -> str:
    """A byte count in binary units: ``format_bytes(3 * 2**20) == '3.0 MiB'``."""
    if isinstance(n, bool) or not isinstance(n, numbers.Real) or not math.isfinite(n) or n < 0:
        raise ValueError(f"n must be a finite number of bytes >= 0, got {n!r}")
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


# --- What autograd keeps, and where attention looks -------------------------------------------------------
# Chapter: scaling and practice.


def saved_tensor_bytes(fn: Callable[[], Any], *, exclude: Sequence[torch.Tensor] = ()) -> int:
    """The bytes of the tensors that autograd keeps for the backward pass while ``fn()`` runs.

    Every tensor an operation saves for its backward passes through a ``saved_tensors_hooks`` pack hook;
    storages are counted once, however many views of them are saved. Tensors in ``exclude`` (typically
    the model's parameters, which exist anyway) are not counted. What it measures is the activation
    memory of the graph ``fn`` builds, not the whole footprint: not the parameters, the gradients, the
    optimiser's state, or scratch space that an operation frees before it returns.

    Chapter: scaling and practice.
    """
    _check_callable("fn", fn)
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = fn()
    del result
    return sum(seen.values())


def attention_entropy(weights: torch.Tensor, *, start: int = 0) -> torch.Tensor:
    """The mean entropy, in nats, of each head's attention distributions: 0 for a head that looks at one key.

    The entropy of one query's weights a_j is -sum_j a_j ln a_j; it is averaged over the batch and over the
    queries from position ``start`` on. Under a causal mask query t sees t + 1 keys, so its entropy is at
    most ln(t + 1): skipping the first queries keeps the average from being dominated by them.

    Shapes:
        weights: (B, H, Tq, Tk), rows summing to 1 (e.g. from ``model(x, return_weights=True)``)
        return:  (H,)

    Chapter: the lab (what heads attend to); scaling and practice (entropy collapse).
    """
    _checks.tensor("weights", weights, ndim=4, floating=True)
    start = _checks.positive_int("start", start, minimum=0)
    if weights.numel() == 0:
        raise ValueError(
            f"weights is empty: shape {_checks.shape_str(weights.shape)}; expected (B, H, Tq, Tk) "
            "with at least one batch entry, head, query and key"
        )
    if start >= weights.shape[2]:
        raise ValueError(
            f"start must be smaller than the number of queries of weights, Tq={weights.shape[2]} "
            f"(shape {_checks.shape_str(weights.shape)}), got {start}"
        )
    w = weights[:, :, start:]  # (B, H, Tq - start, Tk)
    if w.dtype in (torch.float16, torch.bfloat16):
        w = w.float()  # the logarithm and the sum in float32
    entropy = -(w * w.clamp_min(1e-30).log()).sum(-1)  # (B, H, Tq - start)
    return entropy.mean(dim=(0, 2))  # (H,)
