"""The oracle's inputs: a battery for each exercise, made from a short declaration of its arguments.

A declaration lists the answer's arguments, one per ``;``, as ``name: type``:

- ``f[*b, n, d]``: a float tensor of that shape; ``*b`` is the batch (none, one, or several dims);
  suffixes: ``large`` (may hold values in the thousands), ``pos`` (positive), ``prob`` (rows that sum to 1,
  over the last dim), ``small`` (close to 0);
- ``mask[*b, n, m]``: booleans, every row (last dim) with a True; ``mask0[...]`` may have rows of none;
- ``long[n] < v``: integers in [0, v);
- ``int(n)``: the size ``n`` as a Python int (``int(n*h)`` for a product); ``float(0.5, 2.0)``: one of these
  numbers; ``value(a, b)``: any of these Python values; ``lengths[b] <= t``: a list of lengths, one of them t.

Sizes come from profiles: distinct sizes, a batch of one, no batch, a square input (every size equal),
a wider batch, and size-one dims; each in float32 and float64, and with large or tiny values where the
declaration allows them. Each input is made by a seeded generator, so the battery is the same every run.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import torch

__all__ = ["battery", "PROFILES", "Input"]

# (name, batch dims, sizes given to the symbols in order of first appearance)
PROFILES = [
    ("distinct", (2,), (3, 5, 4, 6, 7, 2, 9, 8)),
    ("batch of one", (1,), (4, 3, 5, 2, 6, 7, 8, 9)),
    ("no batch", (), (5, 4, 6, 3, 2, 7, 8, 9)),
    ("square", (2,), (4, 4, 4, 4, 4, 4, 4, 4)),
    ("wide batch", (3, 2), (6, 9, 8, 5, 4, 3, 7, 10)),
    ("size one", (2,), (1, 1, 2, 1, 3, 1, 2, 1)),
]
_ARG = re.compile(r"^\s*(\w+)\s*:\s*(.+?)\s*$")
_TENSOR = re.compile(r"^(f|mask0|mask|long)\[(.*?)\]\s*(.*)$")


@dataclass
class Input:
    """One input of the battery: the arguments, and how they were made (for the report)."""

    args: tuple
    label: str


def _size(expr: str, sizes: dict[str, int]) -> int:
    return int(eval(expr, {"__builtins__": {}}, dict(sizes)))  # noqa: S307 - "n*h", "d//2": the declaration's own


def _shape(dims: str, sizes: dict[str, int], batch: tuple[int, ...]) -> tuple[int, ...]:
    out: list[int] = []
    for dim in (d.strip() for d in dims.split(",") if d.strip()):
        out.extend(batch if dim == "*b" else (_size(dim, sizes),))
    return tuple(out)


def _tensor(kind: str, shape, flags: str, dtype, g: torch.Generator, regime: str):
    if kind == "f":
        x = torch.randn(shape, generator=g, dtype=torch.float64)
        if "pos" in flags:
            x = x.abs() + 0.1
        if "small" in flags:
            x = x * 0.3
        if "prob0" in flags:  # rows with exact zeros: a causal pattern, and one one-hot row
            x = torch.softmax(2 * x, dim=-1) * (torch.rand(shape, generator=g) > 0.3)
            x[..., 0] += 1e-3
            x = x / x.sum(-1, keepdim=True)
            if x.dim() >= 2:
                x[..., 0, :] = 0.0
                x[..., 0, 0] = 1.0
        elif "prob" in flags:
            x = torch.softmax(2 * x, dim=-1)
        elif regime == "large" and "large" in flags:
            x = x * 1000.0
        elif regime == "tiny":
            x = x * 1e-3
        return x.to(dtype)
    if kind in ("mask", "mask0"):
        m = torch.rand(shape, generator=g) > 0.45
        if m.dim() and m.shape[-1]:
            first = torch.randint(shape[-1], shape[:-1] + (1,), generator=g)
            m.scatter_(-1, first, True)  # every row allows a key
            if kind == "mask0" and m.dim() >= 2 and m.shape[-2] > 1:
                m[..., 0, :] = False  # a row that allows none
        return m
    high = int(flags.split("<", 1)[1]) if "<" in flags else 10
    return torch.randint(high, shape, generator=g)


def _arguments(declaration: str, sizes, batch, dtype, g, regime, pick: int):
    args = []
    for part in (p for p in declaration.split(";") if p.strip()):
        name, spec = _ARG.match(part).groups()
        tensor = _TENSOR.match(spec)
        if tensor:
            kind, dims, flags = tensor.groups()
            if kind == "long" and "<" in flags:
                flags = "<" + str(_size(flags.split("<", 1)[1].strip(), sizes))
            args.append(_tensor(kind, _shape(dims, sizes, batch), flags, dtype, g, regime))
        elif spec.startswith("int("):
            args.append(_size(spec[4:-1], sizes))
        elif spec.startswith(("float(", "value(")):
            values = eval(f"({spec[spec.index('(') + 1 : -1]},)", {"__builtins__": {}})  # noqa: S307
            args.append(values[pick % len(values)])
        elif spec.startswith("lengths["):
            n = _size(spec[8 : spec.index("]")], sizes)
            t = _size(spec.split("<=", 1)[1].strip(), sizes)
            lengths = torch.randint(1, t + 1, (n,), generator=g).tolist()
            lengths[pick % n] = t
            args.append(lengths)
        else:
            raise ValueError(f"cannot read the argument declaration {part!r}")
    return tuple(args)


def battery(
    declaration: str,
    *,
    even: tuple[str, ...] = (),
    at_least: dict | None = None,
    fixed: dict | None = None,
    dtypes=(torch.float32, torch.float64),
    seeds: int = 2,
) -> list[Input]:
    """The inputs for a declaration: every profile, dtype, value regime and seed."""
    symbols = [s for s in dict.fromkeys(re.findall(r"[a-zA-Z_]\w*", _dims_text(declaration)))]
    regimes = ["normal", "tiny"] + (["large"] if "large" in declaration else [])
    out = []
    for (profile, batch, sizes), dtype, regime, seed in itertools.product(PROFILES, dtypes, regimes, range(seeds)):
        if regime != "normal" and (seed or profile not in ("distinct", "batch of one")):
            continue  # the edge values on two profiles; the shapes on all
        assigned = dict(zip(symbols, sizes))
        for s in even:
            assigned[s] = max(2, assigned[s] + assigned[s] % 2)
        for s, low in (at_least or {}).items():
            assigned[s] = max(low, assigned[s])
        assigned.update(fixed or {})
        g = torch.Generator().manual_seed(1000 * seed + len(out))
        try:
            args = _arguments(declaration, assigned, batch, dtype, g, regime, seed)
        except (RuntimeError, ValueError):  # a profile this declaration cannot take (e.g. an empty batch)
            continue
        label = f"{profile}, {str(dtype).removeprefix('torch.')}, {regime} values, sizes {assigned}"
        out.append(Input(args, label))
    return out


def _dims_text(declaration: str) -> str:
    """The size symbols a declaration uses, in order: inside [...], int(...) and after < or <=."""
    parts = re.findall(r"\[(.*?)\]|int\((.*?)\)|<=?\s*([\w*+/ ]+)", declaration)
    text = " ".join(" ".join(p) for p in parts).replace("*b", " ")
    return " ".join(w for w in re.findall(r"[a-zA-Z_]\w*", text) if w not in ("large", "pos", "prob", "small"))
