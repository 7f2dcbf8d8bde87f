"""The chapters' exercises, read from the chapters themselves: title, label, points, checker, answer, check cell.

A chapter's exercise is an ``{exercise}`` block; the stub cell after it defines the answer, a
``{solution-start}`` block holds the solution, and the first code cell after it that calls
``ex.check_<name>(<answer>)`` (``ex`` being the chapter's ``attnbook.exercises`` submodule) checks it.
An exercise is worth one point unless its block says otherwise with the class option, which the book's
build accepts (``:class: points-3`` for three points; whole points only). :func:`parse_cells` reads
all that from a notebook's cells. The book's build uses it for the instructor guide's table; ``make
sync`` writes what it finds for every chapter to ``attnbook/exercises/chapters.json``, so that the
grader (:mod:`attnbook.grading`) knows every chapter's exercises and check cells from an installed
package, without the book's sources; a test checks that the file equals what the chapters say.

A "chapter" here is one notebook, named by its file stem: a chapter whose pages are notebooks of their
own (``05_1_...``, ``05_2_...``) has one entry per page, and pages may share a checker module.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path

__all__ = [
    "Exercise",
    "ChapterExercises",
    "block_exercise",
    "parse_cells",
    "parse_notebook",
    "load",
    "dumps",
    "MANIFEST",
]

MANIFEST = Path(__file__).resolve().parents[1] / "exercises" / "chapters.json"

# an exercise block's first line (backtick or colon fence), then its options, one ``:name: value`` a line
EXERCISE = re.compile(r"^(?:`{3,}|:{3,})\{exercise\}[ \t]*(.*?)[ \t]*\n((?:[ \t]*:[\w-]+:.*(?:\n|$))*)", re.M)
_OPTION = re.compile(r"^[ \t]*:([\w-]+):[ \t]*(.*?)[ \t]*$", re.M)
_POINTS = re.compile(r"^points-(\d+)$")
CHECK_CALL = re.compile(r"\bex\.(check_\w+)\(")
CHECKER_MODULE = re.compile(r"from attnbook\.exercises import (\w+) as ex")


@dataclass(frozen=True)
class Exercise:
    """One exercise of a chapter; ``checker`` and ``answer`` are empty when no check cell follows it."""

    title: str
    label: str
    checker: str = ""  # the function of the chapter's checker module, e.g. "check_attention"
    answer: str = ""  # the name the check cell passes to it, e.g. "my_attention"
    check: str = ""  # the check cell's source, e.g. "ex.check_attention(my_attention)"
    points: float = 1.0  # what the exercise is worth when passed; 0 when failed or not attempted


@dataclass(frozen=True)
class ChapterExercises:
    """A chapter's exercises in order; ``module`` is its submodule of ``attnbook.exercises``."""

    chapter: str  # the notebook's file name without suffix, e.g. "04_queries_keys_values"
    module: str
    exercises: tuple[Exercise, ...]


def _answer_of(source: str) -> str:
    """The name a check cell passes to its checker: the cell must be one call ``ex.check_x(name)``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        tree = None
    body = tree.body if tree else []
    call = body[0].value if len(body) == 1 and isinstance(body[0], ast.Expr) else None
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and len(call.args) == 1
        and isinstance(call.args[0], ast.Name)
        and not call.keywords
    ):
        return call.args[0].id
    raise ValueError(f"a check cell must be a single call ex.check_<name>(<answer>) on one name, got {source!r}")


def block_exercise(match: re.Match) -> Exercise:
    """The exercise an ``{exercise}`` block (a match of :data:`EXERCISE`) states: title, label and points."""
    options = dict(_OPTION.findall(match.group(2)))
    points = [int(m.group(1)) for c in options.get("class", "").split() for m in [_POINTS.match(c)] if m]
    return Exercise(match.group(1).strip(), options.get("label", ""), points=float(points[0]) if points else 1.0)


def parse_cells(cells) -> tuple[str, list[Exercise]]:
    """The checker module and the exercises of a chapter, from its cells as ``(cell_type, source, tags)``."""
    module = next(
        (m.group(1) for kind, src, _ in cells if kind == "code" for m in [CHECKER_MODULE.search(src)] if m), ""
    )
    found: list[Exercise] = []
    pending: list[Exercise] = []
    for kind, src, tags in cells:
        if kind == "markdown":
            pending += [block_exercise(m) for m in EXERCISE.finditer(src)]
        elif pending and "solution" not in tags:
            call = CHECK_CALL.search(src)
            if call and module:
                first = pending.pop(0)
                found.append(replace(first, checker=call.group(1), answer=_answer_of(src), check=src.strip()))
    return module, found + pending


def _source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def parse_notebook(nb, chapter: str) -> ChapterExercises:
    """The exercises of a chapter notebook (a dict or ``nbformat`` node) whose file stem is ``chapter``."""
    cells = [(c["cell_type"], _source(c), list(c.get("metadata", {}).get("tags", []))) for c in nb["cells"]]
    module, exercises = parse_cells(cells)
    return ChapterExercises(chapter, module, tuple(exercises))


def _entry(exercise: Exercise) -> dict:
    entry = asdict(exercise)
    if entry["points"] == 1.0:  # the default is left out
        del entry["points"]
    return entry


def dumps(chapters: list[ChapterExercises]) -> str:
    """The manifest's JSON text for these chapters."""
    return (
        json.dumps(
            {c.chapter: {"module": c.module, "exercises": [_entry(e) for e in c.exercises]} for c in chapters},
            indent=1,
            ensure_ascii=False,
        )
        + "\n"
    )


def load(path: Path | str = MANIFEST) -> dict[str, ChapterExercises]:
    """Every chapter's exercises from the manifest (by default the one installed with this package)."""
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    return {
        name: ChapterExercises(name, entry["module"], tuple(Exercise(**e) for e in entry["exercises"]))
        for name, entry in raw.items()
    }
