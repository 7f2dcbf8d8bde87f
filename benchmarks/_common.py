"""What every benchmark script shares: the machine's description and the README section it rewrites."""

from __future__ import annotations

import os
import platform
import statistics
from pathlib import Path

README = Path(__file__).resolve().parent / "README.md"
README_HEADER = (
    "# Benchmarks\n\nScripts that measure speed, memory and training quality; each writes JSON to "
    "`results/` and its section below.\n"
)


def cpu_name() -> str:
    """The processor's model name (Linux), else what the platform module knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded (empty where the system has none)."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


def markers(name: str) -> tuple[str, str]:
    """The comments that delimit the section ``name`` of the README."""
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def write_section(name: str, section: str, path: Path = README) -> None:
    """Replace the README's section ``name`` (``section`` includes its markers), or append it if missing."""
    start, end = markers(name)
    text = path.read_text() if path.exists() else README_HEADER
    if start in text and end in text:
        before, rest = text.split(start, 1)
        text = before + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


def summary(values: list[float]) -> str:
    """Accuracies over seeds as "mean (lowest to highest)", in percent; one value alone as itself."""
    if len(values) == 1:
        return f"{values[0]:.1%}"
    return f"{statistics.mean(values):.1%} ({min(values):.1%} to {max(values):.1%})"
