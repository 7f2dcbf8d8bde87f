"""Grade learners' notebooks with the exercise checkers.

Each check cell of a chapter either displays a result (a tick, or "not attempted yet") or raises
:class:`attnbook.exercises.ExerciseFailed` with a hint. This module runs a notebook (or reads one that
was already run) and collects those outcomes, one row per checked exercise::

    python -m attnbook.exercises.grade submissions/*.ipynb --csv grades.csv

Running a learner's notebook runs the learner's code: do it in a sandbox you trust.
"""
from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Outcome", "grade_notebook", "main"]

PASSED, NOT_ATTEMPTED, FAILED = "passed", "not attempted", "failed"


@dataclass(frozen=True)
class Outcome:
    """One checked exercise in one notebook."""

    notebook: str
    exercise: str
    status: str  # "passed", "not attempted" or "failed"
    message: str


def _text(output) -> str:
    data = output.get("data", {})
    text = data.get("text/plain", "")
    return "".join(text) if isinstance(text, list) else text


def outcomes(nb, name: str) -> list[Outcome]:
    """The outcomes of the check cells of an executed notebook."""
    found = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" and output.get("ename") == "ExerciseFailed":
                exercise, _, hint = output.get("evalue", "").partition(": ")
                found.append(Outcome(name, exercise, FAILED, hint))
            elif output.get("output_type") == "execute_result":
                text = _text(output)
                for mark, status in (("\u2713 ", PASSED), ("\u2026 ", NOT_ATTEMPTED)):
                    if text.startswith(mark) and ": " in text:
                        exercise, _, message = text[len(mark):].partition(": ")
                        found.append(Outcome(name, exercise, status, message))
    return found


def grade_notebook(path: str | Path, *, execute: bool = True, timeout: int = 900) -> list[Outcome]:
    """Run the notebook at ``path`` (unless ``execute=False``) and return its exercises' outcomes.

    Cells that fail go on to the next cell, so one wrong answer does not hide the others.
    """
    import nbformat

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no notebook at {path}")
    nb = nbformat.read(path, as_version=4)
    if execute:
        from nbclient import NotebookClient

        NotebookClient(nb, timeout=timeout, allow_errors=True, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    return outcomes(nb, path.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnbook.exercises.grade", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--no-execute", action="store_true", help="read the saved outputs instead of running")
    parser.add_argument("--csv", type=Path, help="also write the outcomes to this CSV file")
    parser.add_argument("--timeout", type=int, default=900, help="seconds allowed per cell")
    args = parser.parse_args(argv)
    rows = []
    for path in args.notebooks:
        rows.extend(grade_notebook(path, execute=not args.no_execute, timeout=args.timeout))
    for row in rows:
        print(f"{row.notebook}\t{row.exercise}\t{row.status}\t{row.message}")
    for notebook in dict.fromkeys(r.notebook for r in rows):
        mine = [r for r in rows if r.notebook == notebook]
        print(f"{notebook}: {sum(r.status == PASSED for r in mine)} of {len(mine)} exercises passed")
    if args.csv:
        with open(args.csv, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["notebook", "exercise", "status", "message"])
            writer.writerows([r.notebook, r.exercise, r.status, r.message] for r in rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
