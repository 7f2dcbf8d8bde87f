"""The exercises and their solutions, read from the chapters: what the mutation run mutates.

Every exercise of ``attnbook/exercises/chapters.json`` (written by ``make sync`` from the chapters) has a
checker and an answer name; its solution is the chapter's code cell tagged ``solution`` that defines that
name (a function, a class or a number). A solution runs in the chapter's namespace: the chapter's imports
and the solutions of the chapter's earlier exercises (a lab's ``Block`` uses its ``CausalSelfAttention``).
A new chapter with exercises is picked up from the manifest without any change here.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from attnbook.grading import catalog

REPO = Path(__file__).resolve().parents[4]
CHAPTERS = REPO / "chapters"
SOLUTION_TAG = "solution"


@dataclass
class Exercise:
    """One exercise: where it is, its checker, and its solution cell's source."""

    chapter: str  # the notebook's stem, e.g. "04_queries_keys_values"
    module: str  # its checker module in attnbook.exercises
    checker: str  # e.g. "check_softmax_temperature"
    answer: str  # the name the solution defines, e.g. "my_softmax"
    source: str  # the solution cell
    kind: str  # "function", "class" or "number"
    imports: list[str] = field(default_factory=list)  # the chapter's import statements
    before: list[str] = field(default_factory=list)  # the chapter's earlier solution cells

    @property
    def key(self) -> str:
        return f"{self.chapter}:{self.checker}"

    def check(self):
        """The checker function."""
        return getattr(importlib.import_module(f"attnbook.exercises.{self.module}"), self.checker)

    def digest(self) -> str:
        """A hash of what decides the exercise's mutants and verdicts: its solution and its checker module."""
        h = hashlib.sha256(self.source.encode())
        for text in self.before:
            h.update(text.encode())
        for path in checker_files(self.module):
            h.update(path.read_bytes())
        return h.hexdigest()


def checker_files(module: str) -> list[Path]:
    import attnbook.exercises as package

    folder = Path(package.__file__).parent
    return [folder / "__init__.py", folder / f"{module}.py"]


def _cells(chapter: str) -> list[tuple[str, str, list[str]]]:
    nb = json.loads((CHAPTERS / f"{chapter}.ipynb").read_text(encoding="utf-8"))
    out = []
    for cell in nb["cells"]:
        src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        out.append((cell["cell_type"], src, list(cell.get("metadata", {}).get("tags", []))))
    return out


def _defines(source: str) -> dict[str, str]:
    """The names a cell defines at top level, with their kind."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    names = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names[node.name] = "function"
        elif isinstance(node, ast.ClassDef):
            names[node.name] = "class"
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = "number"
    return names


def _imports(cells) -> list[str]:
    found: list[str] = []
    for kind, src, _ in cells:
        if kind != "code":
            continue
        try:
            tree = ast.parse(src)
        except SyntaxError:  # a cell with IPython magics
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                text = ast.unparse(node)
                if text not in found:
                    found.append(text)
    return found


def exercises(manifest: Path | str = catalog.MANIFEST) -> list[Exercise]:
    """Every exercise of the manifest with a checker, with its solution cell, in book order."""
    found = []
    for chapter, entry in catalog.load(manifest).items():
        cells = _cells(chapter)
        solutions = [src for kind, src, tags in cells if kind == "code" and SOLUTION_TAG in tags]
        imports = _imports(cells)
        for exercise in entry.exercises:
            if not exercise.checker:
                continue
            index = next((i for i, s in enumerate(solutions) if exercise.answer in _defines(s)), None)
            if index is None:
                raise LookupError(f"{chapter}: no solution cell defines {exercise.answer!r}")
            source = solutions[index]
            found.append(
                Exercise(
                    chapter,
                    entry.module,
                    exercise.checker,
                    exercise.answer,
                    source,
                    _defines(source)[exercise.answer],
                    imports,
                    solutions[:index],
                )
            )
    return found


_NAMESPACES: dict[str, dict] = {}


def namespace(exercise: Exercise) -> dict:
    """A fresh namespace with the chapter's imports and its earlier solutions (imports cached per chapter)."""
    key = exercise.chapter
    if key not in _NAMESPACES:
        ns: dict = {"__name__": f"solution_{key}"}
        for statement in exercise.imports:
            with contextlib.suppress(Exception):
                exec(statement, ns)  # noqa: S102 - the book's own import lines
        _NAMESPACES[key] = ns
    ns = dict(_NAMESPACES[key])
    with contextlib.redirect_stdout(io.StringIO()):
        for source in exercise.before:
            exec(compile(source, f"<{key} earlier solution>", "exec"), ns)  # noqa: S102
    return ns


def load(exercise: Exercise, source: str | None = None, name: str = "<solution>"):
    """The answer that ``source`` (by default the solution cell) defines, run in the chapter's namespace."""
    ns = namespace(exercise)
    code = compile(source if source is not None else exercise.source, name, "exec")
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, ns)  # noqa: S102 - the book's solution, or a mutant of it
    return ns[exercise.answer]
