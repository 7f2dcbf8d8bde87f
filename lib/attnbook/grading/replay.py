"""Checking an answer without trusting the process that ran it: record the learner's calls, replay them.

A checker calls the learner's answer (a function, a class, or reads a number) and compares what comes
back with the library's reference. When grading, those two halves run in different processes:

1. **Record**, in a throw-away process that runs the learner's code: the real checker is run on the
   learner's answer, and every call the checker makes into the learner's code is written down, as data
   only: a digest of the arguments and what came back (numbers, tensors, a module's structure and
   weights, or the exception raised). Nothing in this process is believed. Each exercise gets its own
   such process, forked by a server that has imported the checkers and never runs the learner's code
   (:mod:`attnbook.grading.sandbox`); the answer reaches it through a pipe and the record comes back
   through a pipe of its own, so one exercise's code cannot touch another exercise's record.
2. **Replay**, in the grader's own process, which never runs the learner's code: the same checker runs
   again on a stand-in that returns the recorded results instead of calling anything. The verdict (the
   :class:`~attnbook.exercises.Result` or :class:`~attnbook.exercises.ExerciseFailed`) is this run's.

This module is the data model of the record and the two halves that use it; the processes and pipes are
:mod:`attnbook.grading.sandbox`'s.

The record is read with ``torch.load(weights_only=True)``, which rebuilds tensors and plain containers and
refuses any other object, so reading it runs no code of the learner. Whatever the learner's code did in
the first process (patching a checker, ``Result``, ``torch.allclose``, printing a tick, exiting), the
replayed checker compares the recorded outputs with its own reference on its own test cases; the only way
to pass is outputs equal to the reference's. A record that does not match the calls the checker makes
(other arguments, more or fewer calls) is reported as tampering.

What a stand-in supports: calling a function, calling a class (the result, an ``nn.Module``, is rebuilt
with its submodules and weights, its own ``forward`` replayed), and plain values (numbers, tensors,
``...``). Learner-defined submodules are rebuilt as empty shells with their weights; calling one of them
from the checker is reported as a mismatch, since the record does not hold it.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import sys
from collections import deque
from typing import Any

import torch
from torch import nn

from . import effects

__all__ = [
    "Recorder",
    "Replayer",
    "RecordMismatch",
    "LearnerExit",
    "record_exercise",
    "load_record",
    "MAX_RECORD_BYTES",
]

FORMAT = 1
MAX_RECORD_BYTES = 256 * 2**20  # a record larger than this is refused, not read
_MAX_DEPTH = 12
_MAX_ITEMS = 10_000
_MAX_TEXT = 400
_MODULE_INTERNALS = frozenset(vars(nn.Module()))  # _parameters, _buffers, _modules, hooks, training, ...


class RecordMismatch(BaseException):
    """The record does not match what the checker asks for: the recording process was tampered with.

    A ``BaseException``, so that a checker's ``except Exception`` (meant for the learner's errors) lets it through.
    """


class LearnerExit(BaseException):
    """The learner's code raised ``SystemExit``, ``KeyboardInterrupt`` or similar while it was being checked."""


# --- the record: data only -------------------------------------------------------------------------------


def _fixed_repr(text: str):
    """A ``__repr__`` that returns ``text``."""
    return lambda self: text


def _text(value: Any) -> str:
    try:
        return str(value)[:_MAX_TEXT]
    except BaseException:  # noqa: BLE001 - a learner's __str__ may raise anything
        return "<unprintable>"


def _repr(value: Any) -> str:
    try:
        return repr(value)[:_MAX_TEXT]
    except BaseException:  # noqa: BLE001
        return f"<{type(value).__name__} object>"


def _plain_tensor(x: torch.Tensor) -> torch.Tensor:
    """A plain, detached CPU copy (tensor subclasses and their overridden operations do not survive)."""
    x = torch.Tensor._make_subclass(torch.Tensor, x.detach()) if type(x) is not torch.Tensor else x.detach()
    return x.cpu().clone()


def _opaque(value: Any) -> dict:
    return {"~": "opaque", "type": type(value).__name__[:_MAX_TEXT], "repr": _repr(value)}


def _primitive(value: Any) -> bool:
    if value is None or type(value) in (bool, int, float, str):
        return True
    return type(value) is tuple and len(value) < 64 and all(_primitive(v) for v in value)


def digest(value: Any) -> str:
    """A fingerprint of the arguments of a call: tensors by their values, containers by their items,
    numbers and strings by their repr, other objects (modules, functions) by their type's name only."""
    h = hashlib.sha256()

    def walk(x, depth):
        if depth > _MAX_DEPTH:
            h.update(b"<deep>")
        elif isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous().reshape(-1)
            h.update(f"T{tuple(x.shape)}{x.dtype}".encode())
            t = t.to(torch.uint8) if t.dtype == torch.bool else t.view(torch.uint8)
            h.update(t.numpy().tobytes())
        elif x is None or type(x) in (bool, int, float, str):
            h.update(f"{type(x).__name__}:{x!r};".encode())
        elif isinstance(x, (tuple, list)):
            h.update(b"(")
            for item in x:
                walk(item, depth + 1)
            h.update(b")")
        elif isinstance(x, dict):
            h.update(b"{")
            for key in sorted(x, key=repr):
                walk(key, depth + 1)
                walk(x[key], depth + 1)
            h.update(b"}")
        else:
            h.update(f"<{type(x).__name__}>".encode())

    walk(value, 0)
    return h.hexdigest()


# --- recording (in the process that runs the learner's code) ---------------------------------------------


class Recorder:
    """Wraps a learner's answer so that every call the checker makes into it is written down."""

    def __init__(self):
        self.calls: list[dict] = []
        self._depth = 0  # calls made from inside the learner's own code are not the checker's: not recorded

    def answer_info(self, answer: Any) -> dict:
        if callable(answer):
            return {"kind": "callable", "type": type(answer).__name__[:_MAX_TEXT], "repr": _repr(answer)}
        return {"kind": "value", "value": self.encode(answer)}

    def wrap(self, answer: Any) -> Any:
        """What the checker is given: the answer itself for a value, a recording wrapper for a callable."""
        if not callable(answer):
            return answer
        from attnbook.exercises import _where_it_raised

        return self._recording(answer, lambda error: _where_it_raised(answer, error))

    def _recording(self, target, where):
        def call(*args, **kwargs):
            if self._depth:
                return target(*args, **kwargs)
            entry = {"digest": digest((args, kwargs))}
            before = effects.snapshot((args, kwargs))
            self._depth += 1
            try:
                result = target(*args, **kwargs)
            except BaseException as error:
                entry["error"] = {
                    "type": type(error).__name__[:_MAX_TEXT],
                    "message": _text(error),
                    "where": where(error) if isinstance(error, Exception) else "",
                    "exit": not isinstance(error, Exception),
                }
                self.calls.append(entry)
                raise
            finally:
                self._depth -= 1
            entry["result"] = self.encode(result)
            entry["changed"] = effects.changes(before, (args, kwargs))  # arguments changed in place
            entry["gradients"] = effects.record_gradients((args, kwargs), result)
            self.calls.append(entry)
            return result

        return call

    def encode(self, value: Any, depth: int = 0) -> Any:
        """``value`` as tensors, numbers, strings and tagged dicts; a module is also wrapped for recording."""
        try:
            return self._encode(value, depth)
        except RecursionError:
            return _opaque(value)
        except Exception:  # noqa: BLE001 - a learner's object that cannot be described is opaque
            return _opaque(value)

    def _encode(self, value: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            return _opaque(value)
        if value is None or type(value) in (bool, int, float):
            return value
        if type(value) is str:
            return value[:_MAX_TEXT]
        if value is ...:
            return {"~": "ellipsis"}
        if isinstance(value, float):  # a subclass (numpy.float64, or one that overrides __eq__): its value
            return float.__float__(value)
        if isinstance(value, int):  # likewise: the integer it holds, whatever its methods claim
            return int.__int__(value)
        if isinstance(value, torch.Tensor):
            if value.layout != torch.strided or value.is_quantized:
                return _opaque(value)
            return _plain_tensor(value)
        if isinstance(value, (tuple, list)) and len(value) <= _MAX_ITEMS:
            return {
                "~": "tuple" if isinstance(value, tuple) else "list",
                "items": [self.encode(v, depth + 1) for v in value],
            }
        if isinstance(value, dict) and len(value) <= _MAX_ITEMS:
            return {
                "~": "dict",
                "items": [[self.encode(k, depth + 1), self.encode(v, depth + 1)] for k, v in value.items()],
            }
        if isinstance(value, nn.Module):
            return self._encode_module(value)
        return _opaque(value)

    def _encode_module(self, module: nn.Module) -> dict:
        parameters: list[torch.Tensor] = []
        index: dict[int, int] = {}

        def node(m: nn.Module, depth: int) -> dict:
            if depth > _MAX_DEPTH:
                raise RecursionError("modules nested too deeply")
            base = next(c for c in type(m).__mro__ if c.__module__.startswith("torch.nn.modules.") or c is nn.Module)
            params = {}
            for name, p in m._parameters.items():
                if p is not None and id(p) not in index:
                    index[id(p)] = len(parameters)
                    parameters.append(_plain_tensor(p))
                params[name] = None if p is None else [index[id(p)], bool(p.requires_grad)]
            return {
                "class": f"{base.__module__}:{base.__qualname__}",
                "type": type(m).__name__[:_MAX_TEXT],
                "training": bool(m.training),
                "attrs": {
                    k: v
                    for k, v in vars(m).items()
                    if type(k) is str and k not in _MODULE_INTERNALS and not hasattr(base, k) and _primitive(v)
                },
                "params": params,
                "buffers": {k: None if b is None else _plain_tensor(b) for k, b in m._buffers.items()},
                "non_persistent": sorted(m._non_persistent_buffers_set),
                "children": {k: None if c is None else node(c, depth + 1) for k, c in m._modules.items()},
            }

        tree = node(module, 0)
        # the checker may call the module next: its forward is recorded like a function (no line of the
        # learner's code is quoted for a module, as in a notebook)
        module.__dict__["forward"] = self._recording(module.forward, lambda error: "")
        return {"~": "module", "tree": tree, "parameters": parameters, "repr": _repr(module)}


def record_exercise(module: str, checker: str, answer: bytes) -> dict:
    """Run ``attnbook.exercises.<module>.<checker>`` on the answer pickled in ``answer``, recording its calls."""
    torch.set_default_dtype(torch.float32)
    torch.set_grad_enabled(True)
    record = {"format": FORMAT, "answer": None, "calls": [], "ended": ""}
    recorder = Recorder()
    try:
        import cloudpickle

        check = getattr(importlib.import_module(f"attnbook.exercises.{module}"), checker)
        value = cloudpickle.loads(answer)  # the learner's code may run from here on
        record["answer"] = recorder.answer_info(value)
        wrapped = recorder.wrap(value)
    except BaseException as error:  # noqa: BLE001 - a broken answer is a result to report
        record["ended"] = f"the answer could not be loaded: {type(error).__name__}: {_text(error)}"
        return record
    try:
        check(wrapped)
    except BaseException:  # noqa: BLE001 - the verdict is the replay's; only the calls matter here
        pass
    record["calls"] = recorder.calls
    return record


# --- replaying (in the grader's process; no code of the learner runs here) ------------------------------


def load_record(data: bytes) -> dict:
    """A record, read as data only; a record that is too large or not of the expected form is refused."""
    if len(data) > MAX_RECORD_BYTES:
        raise RecordMismatch(f"the record is larger than {MAX_RECORD_BYTES} bytes")
    try:
        record = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as error:  # noqa: BLE001 - anything that is not plain data
        raise RecordMismatch(f"the record could not be read as plain data ({type(error).__name__})") from None
    if (
        type(record) is not dict
        or record.get("format") != FORMAT
        or type(record.get("calls")) is not list
        or type(record.get("ended")) is not str
    ):
        raise RecordMismatch("the record is not in the grader's format")
    return record


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise RecordMismatch(f"the record holds {what}")


def _named(base: type, name: Any, namespace: dict | None = None) -> type:
    """A subclass of ``base`` named as the learner's type was (error messages name it)."""
    _check(type(name) is str and name.isprintable(), "a type name that is not a printable string")
    return type(name or base.__name__, (base,), dict(namespace or {}))


class _Opaque:
    """Stands for an object of the learner's that is neither a number, a tensor nor a container."""


class _ReplayCall:
    """Stands for the learner's function or class: calling it returns the next recorded result."""

    def __call__(self, *args, **kwargs):
        return self._replayer.next(args, kwargs)


def _torch_module_class(path: Any) -> type:
    _check(type(path) is str and ":" in path, "a module class that is not a name")
    module_name, qualname = path.split(":", 1)
    if module_name == "torch.nn.modules.module" and qualname == "Module":
        return nn.Module
    _check(
        module_name.startswith("torch.nn.modules.") and module_name in sys.modules,
        f"a module class outside torch.nn ({path})",
    )
    cls = sys.modules[module_name]
    for part in qualname.split("."):
        cls = getattr(cls, part, None)
    _check(isinstance(cls, type) and issubclass(cls, nn.Module), f"an unknown module class ({path})")
    return cls


def _not_recorded(self, *args, **kwargs):
    raise RecordMismatch(
        f"the checker called a part of your module ({type(self).__name__}) that the record does not hold"
    )


class Replayer:
    """Replays a record: :meth:`answer` is what the checker is given in place of the learner's answer."""

    def __init__(self, record: dict):
        self.record = record
        self.calls = deque(record["calls"])

    def answer(self) -> Any:
        info = self.record.get("answer")
        _check(type(info) is dict and info.get("kind") in ("callable", "value"), "no answer")
        if info["kind"] == "value":
            return self.decode(info.get("value"))
        cls = _named(_ReplayCall, info.get("type"), {"__repr__": _fixed_repr(_text(info.get("repr")))})
        stand_in = cls()
        stand_in._replayer = self
        return stand_in

    def next(self, args, kwargs) -> Any:
        if not self.calls:
            raise RecordMismatch("the checker called your code more often than the record shows")
        entry = self.calls.popleft()
        _check(type(entry) is dict and type(entry.get("digest")) is str, "a call of the wrong form")
        if entry["digest"] != digest((args, kwargs)):
            raise RecordMismatch("your code was called with other arguments than the checker's")
        if "error" in entry:
            raise self._error(entry["error"])
        _check("result" in entry, "a call without a result")
        effects.apply_changes((args, kwargs), entry.get("changed", []), RecordMismatch)
        result = self.decode(entry["result"])
        return effects.replay_gradients(
            (args, kwargs), result, entry.get("gradients"), RecordMismatch, lambda name: _named(Exception, name)
        )

    def _error(self, info: Any) -> BaseException:
        _check(
            type(info) is dict and all(type(info.get(k)) is str for k in ("type", "message", "where")),
            "an error of the wrong form",
        )
        if info.get("exit"):
            return LearnerExit(f"{info['type']}: {info['message']}".rstrip(": "))
        if info["type"] == "NotImplementedError":
            error = NotImplementedError(info["message"])
        else:
            error = _named(Exception, info["type"])(info["message"])
        error._attnbook_where = info["where"]  # the line of the learner's code that raised, as recorded
        return error

    def decode(self, data: Any, depth: int = 0) -> Any:
        _check(depth <= _MAX_DEPTH + 1, "data nested too deeply")
        if data is None or type(data) in (bool, int, float, str):
            return data
        if type(data) is torch.Tensor:
            _check(data.layout == torch.strided, "a tensor that is not a dense tensor")
            return data
        _check(type(data) is dict and type(data.get("~")) is str, f"an object of type {type(data).__name__}")
        tag = data["~"]
        if tag == "ellipsis":
            return ...
        if tag in ("tuple", "list"):
            _check(type(data.get("items")) is list, "a container without items")
            items = [self.decode(v, depth + 1) for v in data["items"]]
            return tuple(items) if tag == "tuple" else items
        if tag == "dict":
            _check(type(data.get("items")) is list, "a dict without items")
            out = {}
            for pair in data["items"]:
                _check(type(pair) is list and len(pair) == 2, "a dict item of the wrong form")
                key = self.decode(pair[0], depth + 1)
                _check(key is None or type(key) in (bool, int, float, str, tuple), "a dict key of the wrong form")
                out[key] = self.decode(pair[1], depth + 1)
            return out
        if tag == "opaque":
            return _named(_Opaque, data.get("type"), {"__repr__": _fixed_repr(_text(data.get("repr")))})()
        if tag == "module":
            return self._module(data)
        raise RecordMismatch(f"the record holds an unknown tag {tag!r}")

    def _module(self, data: dict) -> nn.Module:
        parameters = data.get("parameters")
        _check(type(parameters) is list and all(type(p) is torch.Tensor for p in parameters), "bad parameters")
        shared: dict[int, nn.Parameter] = {}

        def build(node: Any, top: bool, depth: int) -> nn.Module:
            _check(depth <= _MAX_DEPTH and type(node) is dict, "a module of the wrong form")
            base = _torch_module_class(node.get("class"))
            namespace = {}
            if top:  # the module the checker was given: calling it replays the recorded calls
                text = _text(data.get("repr"))
                namespace = {"forward": lambda self, *a, **k: replayer.next(a, k), "__repr__": lambda self: text}
            elif base is nn.Module:  # a learner-defined part: its weights are here, not its code
                namespace = {"forward": _not_recorded}
            cls = _named(base, node.get("type"), namespace) if namespace or node.get("type") != base.__name__ else base
            module = cls.__new__(cls)
            nn.Module.__init__(module)
            attrs = node.get("attrs")
            _check(
                type(attrs) is dict
                and all(
                    type(k) is str and k not in _MODULE_INTERNALS and not hasattr(base, k) and _primitive(v)
                    for k, v in attrs.items()
                ),
                "bad module attributes",
            )
            module.__dict__.update(attrs)
            module.training = bool(node.get("training"))
            params, buffers, children = node.get("params"), node.get("buffers"), node.get("children")
            _check(all(type(x) is dict for x in (params, buffers, children)), "a module of the wrong form")
            for name, ref in params.items():
                _check(type(name) is str, "a parameter name that is not a string")
                if ref is None:
                    module._parameters[name] = None
                    continue
                _check(
                    type(ref) is list and len(ref) == 2 and type(ref[0]) is int and 0 <= ref[0] < len(parameters),
                    "a parameter of the wrong form",
                )
                if ref[0] not in shared:
                    shared[ref[0]] = nn.Parameter(parameters[ref[0]], requires_grad=bool(ref[1]))
                module._parameters[name] = shared[ref[0]]
            for name, buffer in buffers.items():
                _check(type(name) is str and (buffer is None or type(buffer) is torch.Tensor), "a bad buffer")
                module._buffers[name] = buffer
            non_persistent = node.get("non_persistent")
            _check(type(non_persistent) is list and all(type(n) is str for n in non_persistent), "bad buffer names")
            module._non_persistent_buffers_set = set(non_persistent)
            for name, child in children.items():
                _check(type(name) is str, "a submodule name that is not a string")
                module._modules[name] = None if child is None else build(child, False, depth + 1)
            return module

        replayer = self
        return build(data.get("tree"), True, 0)
