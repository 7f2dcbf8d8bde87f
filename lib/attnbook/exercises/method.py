"""How an answer computes, for the exercises that prescribe a method as well as a result: the PyTorch
operations it runs (``F.unfold`` runs ``im2col``) and the most memory its tensors hold at once (a T x T
matrix at a large T). Values alone cannot tell these answers from the asked-for ones.

These checks guide the learner in the notebook; they do not count in a grade. The grader replays the
recorded results of the learner's calls (:mod:`attnbook.grading.replay`), and a replayed call runs none of
the learner's operations, so there they see nothing to reject."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

from .. import measure
from .compare import clone_args

__all__ = ["operations", "peak_bytes"]


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.overloadpacket.__name__)  # e.g. "im2col", "mm", "cumsum"
        return func(*args, **(kwargs or {}))


def operations(fn: Callable, args: Sequence[Any]) -> set[str]:
    """The names of the ATen operations that ``fn(*args)`` runs (on copies of the arguments); an empty set
    if it raises (the value checks report errors)."""
    with _Recorder() as recorder:
        try:
            fn(*clone_args(args))
        except Exception:  # noqa: BLE001 - reported by the value checks, not here
            return set()
    return recorder.names


def peak_bytes(fn: Callable, args: Sequence[Any]) -> int:
    """The most bytes that the tensors created by ``fn(*args)`` hold at one moment (0 if it raises)."""
    args = clone_args(args)

    def call():
        try:
            return fn(*args)
        except Exception:  # noqa: BLE001 - reported by the value checks, not here
            return None

    return measure.peak_memory(call)
