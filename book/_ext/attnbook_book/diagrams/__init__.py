"""The book's diagrams: each is a function here that draws it with ``svg.Diagram``; the build writes them to
``book/images/diagrams/<name>.svg``, where the chapters (and Jupyter) find them, and a PNG drawn from each SVG
(``raster``), which the paired notebooks carry.

    python -m attnbook_book.diagrams write   # (re)write every diagram and its PNG, remove files without a source
    python -m attnbook_book.diagrams check   # fail if a file is stale, missing or has no source

A chapter shows diagram ``name`` with a Markdown image followed by its caption paragraph,

    ![What the diagram shows, in words (the alt text).](../book/images/diagrams/name.svg)

    **Figure.** The caption, which the prose refers to as {numref}`fig-name`.

which Jupyter displays as it is and the book turns into a numbered figure (``attnbook_book.figures``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from . import raster
from .svg import Diagram

REPO = Path(__file__).resolve().parents[4]
OUT = REPO / "book" / "images" / "diagrams"
REGISTRY: dict[str, Callable[[], Diagram]] = {}


def diagram(fn: Callable[[], Diagram]) -> Callable[[], Diagram]:
    """Register a function that draws the diagram of the same name."""
    if fn.__name__ in REGISTRY:
        raise ValueError(f"two diagrams are named {fn.__name__!r}")
    REGISTRY[fn.__name__] = fn
    return fn


def label(name: str) -> str:
    """The figure label of a diagram, for {numref}: ``fig-`` and the name with hyphens."""
    return "fig-" + name.replace("_", "-")


def render(name: str) -> str:
    """The SVG text of diagram ``name``."""
    if name not in REGISTRY:
        raise KeyError(f"no diagram named {name!r}; there are {sorted(REGISTRY)}")
    d = REGISTRY[name]()
    if d.name != name:
        raise ValueError(f"the function {name} draws a diagram named {d.name!r}")
    return d.svg()


def problems(out: Path = OUT, pngs: bool = True) -> list[str]:
    """What is out of date in ``out``: stale or missing files, and files that no diagram produces (the PNGs
    too, unless ``pngs`` is false)."""
    found = []
    for name in sorted(REGISTRY):
        path = out / f"{name}.svg"
        if not path.exists():
            found.append(f"{path.name} is missing")
        elif path.read_text() != render(name):
            found.append(f"{path.name} is stale (its source changed)")
    for path in sorted(out.glob("*.svg")) if out.exists() else []:
        if path.stem not in REGISTRY:
            found.append(f"{path.name} has no source in attnbook_book.diagrams")
    return found + (raster.problems(out, sorted(REGISTRY)) if pngs else [])


def write(out: Path = OUT, pngs: bool = True) -> list[Path]:
    """Write every diagram into ``out`` (and, unless ``pngs`` is false, draw the PNG of each one that changed)
    and remove files without a source; return the files that changed."""
    out.mkdir(parents=True, exist_ok=True)
    changed = []
    for name in sorted(REGISTRY):
        path, text = out / f"{name}.svg", render(name)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(path)
    for path in out.glob("*.svg"):
        if path.stem not in REGISTRY:
            path.unlink()
            changed.append(path)
    return changed + (raster.draw(out, sorted(REGISTRY)) if pngs else [])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["write"]:
        for path in write():
            print(f"wrote {path.relative_to(REPO)}" if path.exists() else f"removed {path.relative_to(REPO)}")
        return 0
    if args == ["check"]:
        found = problems()
        for line in found:
            print(line)
        if found:
            print("run `make diagrams`")
        return 1 if found else 0
    print("usage: python -m attnbook_book.diagrams write|check", file=sys.stderr)
    return 2


# the modules register their diagrams when imported
from . import (  # noqa: E402,F401
    ch01,
    ch02,
    ch03,
    ch04,
    ch05,
    ch06,
    ch07,
    ch08,
    ch09,
    ch10,
    ch11,
    ch12,
    ch13,
    ch14,
    ch15,
    ch16,
    ch17,
    legend,
)
