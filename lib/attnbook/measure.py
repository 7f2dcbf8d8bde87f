"""Measuring what computations cost: wall time, peak tensor memory, FLOPs and parameters.

- :func:`time_fn` times a function (median of several runs after warm-up, synchronising CUDA).
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
- For a whole transformer: :func:`transformer_flops` predicts the FLOPs per token of a GPT (the 6N rule
  and the terms it leaves out), :func:`activation_bytes` predicts the bytes one block keeps for the
  backward pass, and :func:`saved_tensor_bytes` measures what autograd actually keeps.
- :func:`attention_entropy` measures how spread out each head's attention is (a diagnostic of training).

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
    "TransformerFlops",
    "transformer_flops",
    "activation_bytes",
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
    """Wall-clock times of repeated runs, in seconds."""

    times: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def best(self) -> float:
        return min(self.times)

    def __repr__(self) -> str:
        return f"Timing(median={self.median:.4g} s, best={self.best:.4g} s, runs={len(self.times)})"


def time_fn(fn: Callable[[], Any], *, repeats: int = 5, warmup: int = 1, device="cpu") -> Timing:
    """Time ``fn()``: ``warmup`` untimed runs, then ``repeats`` timed ones.

    On CUDA the device is synchronised before and after each run, so that the time covers the work
    and not only its launch.

    Chapter: the cost of attention and flash attention.
    """
    _check_callable("fn", fn)
    repeats = _checks.positive_int("repeats", repeats)
    warmup = _checks.positive_int("warmup", warmup, minimum=0)
    device = _device(device)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        _synchronize(device)
        start = time.perf_counter()
        fn()
        _synchronize(device)
        times.append(time.perf_counter() - start)
    return Timing(tuple(times))


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
    from .positional import LearnedPositionalEmbedding

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


# --- A whole transformer: FLOPs per token and activation memory -------------------------------------
# Chapter: scaling and practice.


@dataclass(frozen=True)
class TransformerFlops:
    """Floating-point operations per token of a decoder-only transformer, forward pass, by term.

    ``dense`` is 2 per weight of the blocks' matrices (a multiply and an add), ``attention`` the two
    products Q K^T and A V over the full T x T matrix (4 T D per layer; a causal model that skipped the
    masked half would need half), ``deembedding`` the output layer (2 D V). ``n`` is Kaplan et al.'s N,
    the number of weights in the blocks' matrices.
    """

    n: int
    n_layers: int
    seq_len: int
    d_attn: int
    dense: int
    attention: int
    deembedding: int

    @property
    def forward(self) -> int:
        """All matrix products of a forward pass, per token."""
        return self.dense + self.attention + self.deembedding

    @property
    def training(self) -> int:
        """Forward and backward, per token: each product is computed once forward and twice backward."""
        return 3 * self.forward

    @property
    def six_n(self) -> int:
        """The rule of thumb C = 6N per training token (Kaplan et al., 2020, section 2.1)."""
        return 6 * self.n

    @property
    def kaplan_forward(self) -> int:
        """Kaplan et al.'s forward estimate, C_forward = 2N + 2 n_layer n_ctx d_attn (their Table 1)."""
        return 2 * self.n + 2 * self.n_layers * self.seq_len * self.d_attn


def transformer_flops(model: torch.nn.Module, seq_len: int | None = None) -> TransformerFlops:
    """The FLOPs per token of a GPT-like model (:class:`attnbook.models.GPT`) on windows of ``seq_len`` tokens.

    N counts the weights of the matrices inside ``model.blocks`` (attention projections, feed-forward
    layers), not the norms' gains: per token, each weight is one multiply and one add. ``seq_len`` defaults
    to the model's context (``model.config.block_size``). A mixture-of-experts layer uses only some of its
    weights per token, so it is refused.

    Shapes:
        return: counts per token of a window of seq_len tokens (the attention term depends on seq_len)

    Chapter: scaling and practice.
    """
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "blocks") or not hasattr(model, "config"):
        raise TypeError(
            f"model must be a GPT-like model with .blocks and .config (attnbook.models.GPT), got {type(model).__name__}"
        )
    from .blocks import MixtureOfExperts

    if any(isinstance(m, MixtureOfExperts) for m in model.modules()):
        raise ValueError(
            "model has mixture-of-experts layers, whose FLOPs per token depend on the routing; "
            "transformer_flops counts dense models only"
        )
    config = model.config
    seq_len = config.block_size if seq_len is None else _checks.positive_int("seq_len", seq_len)
    n = sum(
        m.weight.numel()
        for block in model.blocks
        for m in block.modules()
        if isinstance(m, (torch.nn.Linear, torch.nn.Conv1d))
    )
    d_attn = config.d_model  # the width of queries and keys: H heads of Dh = D / H
    return TransformerFlops(
        n=n,
        n_layers=config.n_layers,
        seq_len=seq_len,
        d_attn=d_attn,
        dense=2 * n,
        attention=config.n_layers * 4 * seq_len * d_attn,
        deembedding=2 * config.d_model * config.vocab_size,
    )


def activation_bytes(
    config, batch_size: int, seq_len: int, *, attention: str = "fused", bytes_per_element: int = 4
) -> int:
    """The bytes one pre-norm block of the library keeps for the backward pass (its activations).

    Per token, in elements, for width D, feed-forward width F and H heads:

    - the block's input and the first norm's output, D + D (the norm and the projection keep their inputs);
    - the queries, keys and values, 3D, and the attention's output, D (kept by the output projection);
    - the second norm's input and output, D + D;
    - the feed-forward hidden layer: F with ReLU (its output is both what ReLU and W_2 keep), 2F with
      GELU (GELU keeps its input, W_2 its output);
    - small change: each norm's mean and reciprocal standard deviation (4 numbers), and with
      ``attention="fused"`` the fused kernel's log-sum-exp per head (H numbers);
    - with ``attention="explicit"`` (the path that returns weights) the T x T softmax output and the
      masked weights of every head, 2 H T per token, instead of the log-sum-exp.

    Norms' statistics and the log-sum-exp are kept in float32 whatever ``bytes_per_element`` says.

    Shapes:
        return: bytes for a batch of batch_size windows of seq_len tokens, one block

    Chapter: scaling and practice.
    """
    from .models import TransformerConfig

    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be an attnbook.models.TransformerConfig, got {type(config).__name__}")
    batch_size = _checks.positive_int("batch_size", batch_size)
    seq_len = _checks.positive_int("seq_len", seq_len)
    bytes_per_element = _checks.positive_int("bytes_per_element", bytes_per_element)
    if attention not in ("fused", "explicit"):
        raise ValueError(f"attention must be 'fused' or 'explicit', got {attention!r}")
    hidden = {"relu": 1, "gelu": 2}.get(config.mlp)
    if (
        hidden is None
        or config.norm_position != "pre"
        or config.norm != "layernorm"
        or config.dropout
        or config.n_kv_heads is not None
        or config.positional == "rope"
        or config.bias
    ):
        raise ValueError(
            "activation_bytes knows the library's pre-norm LayerNorm block without biases, dropout, "
            "RoPE or grouped-query attention, with a 'relu' or 'gelu' feed-forward layer; got "
            f"mlp={config.mlp!r}, norm={config.norm!r}, norm_position={config.norm_position!r}, "
            f"bias={config.bias}, dropout={config.dropout}, positional={config.positional!r}, "
            f"n_kv_heads={config.n_kv_heads}"
        )
    D, F, H = config.d_model, config.d_ff, config.n_heads
    elements = 8 * D + hidden * F  # per token, at bytes_per_element
    small = 4 + (H if attention == "fused" else 0)  # per token, float32
    scores = 2 * H * seq_len if attention == "explicit" else 0  # per token, at bytes_per_element
    return batch_size * seq_len * ((elements + scores) * bytes_per_element + 4 * small)


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
