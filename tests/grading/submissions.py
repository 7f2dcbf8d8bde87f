"""Learners' notebooks of chapter 04 for the grading tests: the chapter's exercise section (its real
exercises, stubs, solutions and check cells, after a short setup cell), and ways to change it."""

import sys
import textwrap
from pathlib import Path

import nbformat
from attnbook.grading import catalog

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "book" / "_ext"))

from attnbook_book import notebooks  # noqa: E402

CHAPTER = "04_queries_keys_values"
BOOK = catalog.load()[CHAPTER]
SETUP = "import math\nimport torch\nfrom attnbook.exercises import queries_keys_values as ex"
NOT_SCALED = "def my_attention(q, k, v):\n    return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v"


def solutions() -> nbformat.NotebookNode:
    """Chapter 04 from its "Exercises" heading on, after a setup cell, with the solutions."""
    nb = notebooks.to_ipynb(REPO / "chapters" / f"{CHAPTER}.md")
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and "## Exercises" in c.source)
    nb.cells = [nbformat.v4.new_code_cell(SETUP)] + nb.cells[start:]
    return nb


def student() -> nbformat.NotebookNode:
    return notebooks.student_version(solutions())


def solution_lines() -> set[str]:
    """Every non-trivial line of the solutions' code (none may reach a learner's feedback)."""
    cells = [c for c in solutions().cells if notebooks.is_solution_cell(c)]
    return {line.strip() for c in cells for line in c.source.splitlines() if len(line.strip()) > 12}


def set_answer(nb, exercise: int, source: str) -> nbformat.NotebookNode:
    """Replace the answer of an exercise (the first code cell after its text) with ``source``."""
    title = BOOK.exercises[exercise].title
    block = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and f"{{exercise}} {title}" in c.source)
    answer = next(i for i in range(block + 1, len(nb.cells)) if nb.cells[i].cell_type == "code")
    nb.cells[answer].source = textwrap.dedent(source).strip()
    return nb


def after_check(nb, exercise: int, *sources: str, before: bool = False) -> nbformat.NotebookNode:
    """Insert code cells right after (or ``before``) the check cell of an exercise."""
    check = BOOK.exercises[exercise].check
    i = next(k for k, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip() == check)
    for offset, source in enumerate(sources, start=0 if before else 1):
        nb.cells.insert(i + offset, nbformat.v4.new_code_cell(textwrap.dedent(source).strip()))
    return nb


def write(folder: Path, name: str, nb) -> Path:
    path = folder / f"{name}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path
