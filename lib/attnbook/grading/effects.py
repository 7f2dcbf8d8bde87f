"""What a call of the learner's code does besides returning: arguments changed in place, and gradients.

A checker calls the learner's function on its own tensors and fails an answer that changes them; where an
exercise's gradients matter, it backpropagates a fixed weighted sum of the result
(:func:`attnbook.exercises.weighted_gradients`). When grading, the recorded call must carry both, so that the
replayed checker sees what the direct one saw:

- :func:`snapshot` and :func:`changes` record the new value of every argument tensor the call changed, and
  :func:`apply_changes` writes those values into the replayed call's arguments;
- :func:`record_gradients` computes, right after the call, the gradients the checker will ask for (or the
  error the backward pass raises), and :func:`replay_gradients` gives the replayed result a backward pass
  that returns them (or raises that error), checking that it is asked for the same weighted sum.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["snapshot", "changes", "apply_changes", "record_gradients", "replay_gradients"]


def _flat(x: Any, depth: int = 0) -> list[torch.Tensor]:
    if depth > 12:
        return []
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _flat(v, depth + 1)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _flat(v, depth + 1)]
    return []


def snapshot(args: Any) -> list[torch.Tensor]:
    """Copies of the argument tensors, before the call."""
    return [t.detach().clone() for t in _flat(args)]


def changes(before: list[torch.Tensor], args: Any) -> list[list]:
    """[index, new value] for every argument tensor the call changed in place."""
    out = []
    for i, (b, t) in enumerate(zip(before, _flat(args))):
        if b.shape != t.shape or b.dtype != t.dtype or not torch.equal(b.nan_to_num(0.5), t.detach().nan_to_num(0.5)):
            out.append([i, t.detach().cpu().clone()])
    return out


def apply_changes(args: Any, changed: Any, mismatch) -> None:
    """Write the recorded changes into the replayed call's argument tensors."""
    tensors = _flat(args)
    if type(changed) is not list:
        raise mismatch("changes of the wrong form")
    for item in changed:
        if not (type(item) is list and len(item) == 2 and type(item[0]) is int and type(item[1]) is torch.Tensor):
            raise mismatch("a change of the wrong form")
        i, value = item
        if not 0 <= i < len(tensors) or tensors[i].shape != value.shape:
            raise mismatch("a change of an argument the call does not have")
        with torch.no_grad():
            tensors[i].copy_(value)


def _wants_gradients(args: Any) -> list[torch.Tensor]:
    return [t for t in _flat(args) if t.is_floating_point() and t.requires_grad]


def record_gradients(args: Any, result: Any) -> dict | None:
    """The gradients the checker's weighted sum of ``result`` will have (or the backward pass's error)."""
    from attnbook.exercises import gradient_weights

    leaves = _wants_gradients(args)
    if not leaves:
        return None
    flat = _flat(result)
    positions = [i for i, o in enumerate(flat) if o.is_floating_point() and o.requires_grad]
    if not positions:
        return {"positions": []}
    try:
        total = sum((gradient_weights(flat[i]) * flat[i]).sum() for i in positions)
        grads = torch.autograd.grad(total, leaves, allow_unused=True, retain_graph=True)
    except Exception as error:  # noqa: BLE001 - the backward pass's error is the learner's, to replay
        return {"positions": positions, "error": [type(error).__name__, str(error)[:400]]}
    return {
        "positions": positions,
        "grads": [torch.zeros_like(x) if g is None else g.detach() for x, g in zip(leaves, grads)],
    }


class _Recorded(torch.autograd.Function):
    """Outputs whose backward pass returns the recorded gradients of the leaves (or raises the recorded error)."""

    @staticmethod
    def forward(ctx, payload, *leaves):
        ctx.payload = payload
        return tuple(o.detach().clone() for o in payload["outputs"])

    @staticmethod
    def backward(ctx, *grad_outputs):
        from attnbook.exercises import gradient_weights

        payload = ctx.payload
        for g, o in zip(grad_outputs, payload["outputs"]):
            if g is None or not torch.equal(g, gradient_weights(o)):
                raise payload["mismatch"]("the checker asked for other gradients than the record holds")
        if "error" in payload:
            raise payload["error"]
        return (None, *payload["grads"])


def replay_gradients(args: Any, result: Any, info: Any, mismatch, error_type) -> Any:
    """``result`` with the recorded gradients attached to its float tensors (a new tensor, tuple or list)."""
    if info is None:
        return result
    leaves = _wants_gradients(args)
    flat = _flat(result)
    positions = info.get("positions") if type(info) is dict else None
    if type(positions) is not list or not all(type(i) is int and 0 <= i < len(flat) for i in positions):
        raise mismatch("gradients of the wrong form")
    if not positions or not leaves:
        return result
    payload: dict = {"outputs": [flat[i] for i in positions], "mismatch": mismatch}
    if "error" in info:
        name, message = info["error"]
        payload["error"] = error_type(name)(message)
    else:
        grads = info.get("grads")
        if type(grads) is not list or len(grads) != len(leaves):
            raise mismatch("gradients of the wrong form")
        payload["grads"] = grads
    outputs = iter(_Recorded.apply(payload, *leaves))
    replaced = {i: next(outputs) for i in positions}
    counter = iter(range(len(flat)))

    def rebuild(x, depth=0):
        if isinstance(x, torch.Tensor):
            i = next(counter)
            return replaced.get(i, x)
        if isinstance(x, (tuple, list)) and depth <= 12:
            return type(x)(rebuild(v, depth + 1) for v in x)
        return x

    return rebuild(result)
