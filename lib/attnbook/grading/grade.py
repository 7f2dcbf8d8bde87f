"""Grade one learner's notebook with the book's checkers, believing only outcomes the grader computes itself.

For each notebook:

1. **Which chapter** (a chapter here is one notebook of the book, named by its file stem: a chapter split
   into pages has one per page): ``--chapter``, else the file name (``Copy of
   04_queries_keys_values.ipynb``), else the exercise blocks and check cells it contains, else the checker
   module it imports.
2. **Which exercises**: the chapter's exercises, answers, check cells and points come from the book
   (:mod:`attnbook.grading.catalog`, installed with the package), not from the notebook. Every one of
   them is graded: a check cell that is missing or edited is reported, and the book's check runs anyway.
3. **The learner's code runs** in a fresh Jupyter kernel in an empty folder, with the book's check cells
   taken out, within time, output and memory limits (:mod:`attnbook.grading.kernel`). In place of each
   check cell the grader takes the answer it would have checked (a function, a class or a value, found by
   name) out of the kernel with cloudpickle. What the notebook prints or displays is never read as an
   outcome; a tick it displays is reported. When the run stops early, the answers taken before the stop
   are graded and the others are "not reached".
4. **The checks are recorded** in separate processes, one per exercise, forked by a server that has
   imported the checkers and never runs the learner's code (:mod:`attnbook.grading.sandbox`): each loads
   its answer and runs the book's checker on it, and every call into the learner's code is written down
   as data (:mod:`attnbook.grading.replay`). These processes run the learner's code, so nothing in them
   is believed.
5. **The outcome** comes from this process, which never runs the learner's code: each checker runs again
   on a stand-in that replays the recorded results, and compares them with its own reference on its own
   test cases. A record that does not match the checker's calls is reported as tampering and fails. A
   passed exercise earns its points, any other none.

Running a notebook runs its author's code with your permissions: grade in a container or a throw-away
virtual machine, as a user who cannot write to this Python environment. See the instructor guide.
"""

from __future__ import annotations

import importlib
import re
import tempfile
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

from attnbook.exercises import ExerciseFailed, Result

from . import catalog, replay
from .kernel import DEFAULT_LIMITS, TICK, Cell, Limits, run_cells
from .sandbox import CheckServer

__all__ = [
    "Outcome",
    "Graded",
    "ChapterUnknown",
    "grade_notebook",
    "grade_submission",
    "identify_chapter",
    "load_chapters",
    "main",
]

PASSED, NOT_ATTEMPTED, FAILED = "passed", "not attempted", "failed"

EDITED = "check cell edited: the book's check was run instead"
MISSING = "check cell missing: the book's check was run instead"
FORGED = f"the notebook displays a tick ({TICK}) that the grader did not produce"


@dataclass(frozen=True)
class Outcome:
    """One exercise of one notebook: its status, the checker's message, what the grader noticed, and the
    points earned out of those the exercise is worth."""

    notebook: str
    chapter: str
    exercise: str
    status: str  # "passed", "not attempted" or "failed"
    message: str
    flag: str = ""  # e.g. "check cell missing: ...", "tampering: ..."; empty when nothing was noticed
    points: float = 0.0
    max_points: float = 0.0


@dataclass
class Graded:
    """A notebook's outcomes, and how its run went: ``stopped`` says why it ended early (empty when every
    cell ran), ``notes`` what happened on the way (a cell interrupted, output not read, memory)."""

    notebook: str
    chapter: str
    outcomes: list[Outcome]
    stopped: str = ""
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    unfinished: bool = False  # the kernel did not start, or grading was interrupted: grade it again


class ChapterUnknown(ValueError):
    """The grader cannot tell which chapter a notebook is."""


# --- which chapter, which exercises ---------------------------------------------------------------------


def load_chapters(
    source: Path | str | None = None, points: dict[str, float] | None = None
) -> dict[str, catalog.ChapterExercises]:
    """The chapters' exercises that have a check cell: the installed list by default, or a ``chapters.json``
    file, or a folder of chapter notebooks (``NN_name.ipynb``) read with the book's own parser. ``points``
    overrides what exercises are worth, by label (``{"ex-qkv-attention": 2}``); a label no chapter has is an
    error."""
    if source is None:
        chapters = catalog.load()
    elif Path(source).is_dir():
        import nbformat

        chapters = {
            p.stem: catalog.parse_notebook(nbformat.read(p, as_version=4), p.stem)
            for p in sorted(Path(source).glob("[0-9][0-9]_*.ipynb"))
        }
    else:
        chapters = catalog.load(source)
    for name, c in chapters.items():  # an exercise without a check cell is left to the instructor
        chapters[name] = replace(c, exercises=tuple(e for e in c.exercises if e.checker))
    if points:
        labels = {e.label for c in chapters.values() for e in c.exercises}
        unknown = sorted(set(points) - labels)
        if unknown:
            raise ValueError(f"points: no exercise has the label {', '.join(unknown)}")
        for name, c in chapters.items():
            exercises = tuple(replace(e, points=float(points.get(e.label, e.points))) for e in c.exercises)
            chapters[name] = replace(c, exercises=exercises)
    return chapters


def _code_sources(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def identify_chapter(
    nb, path: Path, chapters: dict[str, catalog.ChapterExercises], chapter: str | None = None
) -> catalog.ChapterExercises:
    """The chapter of notebook ``nb`` read from ``path`` (see the module docstring for the order); a page
    without exercises is named but not returned."""
    if chapter is not None:
        if not chapters.get(chapter, catalog.ChapterExercises("", "", ())).exercises:
            known = ", ".join(name for name, c in chapters.items() if c.exercises)
            raise ChapterUnknown(f"--chapter {chapter!r} is not a chapter notebook with exercises; known: {known}")
        return chapters[chapter]
    by_name = [name for name in chapters if name in path.stem]
    if by_name:
        found = chapters[max(by_name, key=len)]
        if not found.exercises:
            raise ChapterUnknown(f"{path.name} is {found.chapter}, which has no exercises to grade")
        return found
    sources = _code_sources(nb)
    stripped = {s.strip() for s in sources}
    titles = {
        m.group(1).strip() for c in nb.cells if c.cell_type == "markdown" for m in catalog.EXERCISE.finditer(c.source)
    }
    scores = {
        name: sum((e.check in stripped) + (e.title in titles) for e in c.exercises) for name, c in chapters.items()
    }
    best = max(scores.values(), default=0)
    if best and list(scores.values()).count(best) == 1:
        return chapters[max(scores, key=scores.get)]
    imported = {m.group(1) for s in sources for m in catalog.CHECKER_MODULE.finditer(s)}
    by_module = [c for c in chapters.values() if c.module in imported]
    if len(by_module) == 1:
        return by_module[0]
    raise ChapterUnknown(
        f"cannot tell which chapter {path.name} is: name it like the chapter's notebook "
        f"(e.g. {next(iter(chapters), '04_queries_keys_values')}.ipynb) or pass --chapter"
    )


# --- the learner's program ------------------------------------------------------------------------------


@dataclass
class _Plan:
    cells: list = field(default_factory=list)  # (kernel.Cell, exercise index of its region or None)
    flags: dict = field(default_factory=dict)  # exercise index -> list of flags

    def taking(self, i: int) -> int | None:
        """The index of the cell that takes exercise ``i``'s answer."""
        return next((k for k, (cell, r) in enumerate(self.cells) if cell.answer and r == i), None)


def _plan(nb, chapter: catalog.ChapterExercises) -> _Plan:
    """The cells to run: the learner's code cells, with each book check cell replaced by taking the answer.

    A check cell that is missing or edited is flagged, and its answer is taken where its exercise ends
    (before the first cell of a later exercise), or at the end when the exercise's text is gone too.
    """
    exercises = chapter.exercises
    titles = {e.title: i for i, e in enumerate(exercises)}
    checks = {e.check: i for i, e in enumerate(exercises)}
    anchors: dict[int, int] = {}  # exercise -> position of its {exercise} block in nb.cells
    region, regions = None, []  # the exercise each cell of nb comes after
    for position, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            for match in catalog.EXERCISE.finditer(cell.source):
                i = titles.get(match.group(1).strip())
                if i is not None and i not in anchors:
                    anchors[i], region = position, i
        regions.append(region)
    plan = _Plan(flags={i: [] for i in range(len(exercises))})
    number = 0
    for position, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        number += 1
        i = checks.get(cell.source.strip())
        if i is None:
            plan.cells.append((Cell(cell.source, number), regions[position]))
        elif plan.taking(i) is None:  # a repeated check cell is dropped
            plan.cells.append((Cell(answer=exercises[i].answer), i))
    sources = _code_sources(nb)
    for i, e in enumerate(exercises):
        if plan.taking(i) is not None:
            continue
        edited = any(re.search(rf"\b{re.escape(e.checker)}\b", s) for s in sources)
        plan.flags[i].append(EDITED if edited else MISSING)
        later = [
            k
            for k, (_, r) in enumerate(plan.cells)
            if i in anchors and r is not None and r in anchors and anchors[r] > anchors[i]
        ]
        plan.cells.insert(later[0] if later else len(plan.cells), (Cell(answer=e.answer), i))
    return plan


# --- the verdict ------------------------------------------------------------------------------------------------

# Checkers may seed PyTorch's global generator (inside torch.random.fork_rng): notebooks graded in parallel
# threads replay their checks one at a time, so that every replay draws what its recording drew.
_ONE_AT_A_TIME = threading.Lock()

_WHY = {
    "timeout": "the check did not finish within {timeout:.0f} s",
    "ended": "your code ended the process that checked it (for example with os._exit, or a crash)",
    "too large": "what your code returned is too large to check",
}


def _verdict(module: str, checker: str, record: dict) -> tuple[str, str, str]:
    """(status, message, flag) from replaying ``record`` through the book's checker in this process."""
    check = getattr(importlib.import_module(f"attnbook.exercises.{module}"), checker)
    replayer = replay.Replayer(record)
    if record["ended"]:
        return FAILED, record["ended"], ""
    try:
        result = check(replayer.answer())
    except ExerciseFailed as failed:
        status, message = FAILED, failed.hint
    except replay.RecordMismatch as mismatch:
        return FAILED, "the check could not be reproduced", f"tampering: {mismatch}"
    except replay.LearnerExit as exit_:
        return FAILED, f"your code raised {exit_} while it was being checked", ""
    except Exception as error:  # noqa: BLE001 - the checker could not make sense of what came back
        return FAILED, f"the checker could not use your answer ({type(error).__name__}: {error})", ""
    else:
        if type(result) is not Result:
            return FAILED, "the checker returned no result", ""
        status, message = (PASSED if result.passed else NOT_ATTEMPTED), result.message
    if replayer.calls:  # the recording went on after the checker's verdict here: it was tampered with
        flag = "tampering: the record holds calls the checker did not make"
        return (status, message, flag) if status == FAILED else (FAILED, "the check could not be reproduced", flag)
    return status, message, ""


def _check(module: str, e: catalog.Exercise, answer: dict, stopped: str, server: CheckServer, timeout: float, stop):
    """(status, message, flag) for one exercise from the answer taken out of the kernel."""
    if answer.get("status") == "missing":
        return FAILED, f"`{e.answer}` is not defined in the notebook", ""
    if answer.get("status") == "error":
        return FAILED, f"`{e.answer}` could not be taken out of the notebook ({str(answer.get('message'))[:300]})", ""
    if answer.get("status") != "ok" or not isinstance(answer.get("pickle"), bytes):
        return FAILED, (f"not reached: {stopped}" if stopped else f"`{e.answer}` could not be taken out"), ""
    record, why = server.record(module, e.checker, answer["pickle"], timeout, stop)
    if why:
        return FAILED, _WHY.get(why, why).format(timeout=timeout), ""
    try:
        with _ONE_AT_A_TIME:
            return _verdict(module, e.checker, replay.load_record(record))
    except replay.RecordMismatch as mismatch:
        return FAILED, "the check could not be reproduced", f"tampering: {mismatch}"


def grade_submission(
    path: str | Path,
    *,
    chapters: dict[str, catalog.ChapterExercises] | None = None,
    chapter: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    server: CheckServer | None = None,
    name: str | None = None,
    stop_event: threading.Event | None = None,
    user: tuple[int, int] | None = None,
    threads: int | None = None,
) -> Graded:
    """Grade the notebook at ``path`` (shown as ``name``, by default its file name): a :class:`Graded`
    with one :class:`Outcome` per exercise of its chapter, in the book's order.

    ``server`` may be shared by several calls; by default each call starts its own. ``stop_event`` ends
    the run early; ``user`` (uid, gid) runs the learner's code as that user (the grader must be root).
    """
    import nbformat

    path = Path(path)
    name = name or path.name
    if not path.is_file():
        raise FileNotFoundError(f"no notebook at {path}")
    chapters = load_chapters() if chapters is None else chapters
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as error:  # noqa: BLE001 - not a notebook: every exercise of its chapter fails
        nb, unread = None, f"not graded: the file is not a notebook ({type(error).__name__}: {str(error)[:200]})"
    try:
        found = identify_chapter(nb or nbformat.v4.new_notebook(), path, chapters, chapter)
    except ChapterUnknown as error:
        return Graded(name, "", [Outcome(name, "", "", FAILED, unread if nb is None else f"not graded: {error}")])
    if nb is None:
        return Graded(
            name,
            found.chapter,
            [Outcome(name, found.chapter, e.title, FAILED, unread, "", 0.0, e.points) for e in found.exercises],
        )
    for module in {c.module for c in chapters.values() if c.module}:  # every checker, before any learner code runs
        importlib.import_module(f"attnbook.exercises.{module}")
    plan = _plan(nb, found)
    with tempfile.TemporaryDirectory(prefix="attnbook-grade-") as folder:
        cells = [cell for cell, _ in plan.cells]
        run = run_cells(cells, Path(folder), limits, stop_event=stop_event, user=user, threads=threads)
    for index in run.ticks:
        region = plan.cells[index][1]
        for i in [region] if region is not None else plan.flags:
            if FORGED not in plan.flags[i]:
                plan.flags[i].append(FORGED)
    own_server = server is None
    server = CheckServer(memory=limits.max_memory, user=user) if own_server else server
    outcomes = []
    try:
        for i, e in enumerate(found.exercises):
            answer = run.answers.get(plan.taking(i), {})
            if stop_event is not None and stop_event.is_set():
                return Graded(name, found.chapter, [], "grading was interrupted", unfinished=True)
            status, message, flag = _check(
                found.module, e, answer, run.stopped, server, limits.cell_timeout, stop_event
            )
            flags = "; ".join(plan.flags[i] + ([flag] if flag else []))
            points = e.points if status == PASSED else 0.0
            outcomes.append(Outcome(name, found.chapter, e.title, status, message, flags, points, e.points))
    finally:
        if own_server:
            server.close()
    if stop_event is not None and stop_event.is_set():
        return Graded(name, found.chapter, [], "grading was interrupted", unfinished=True)
    return Graded(name, found.chapter, outcomes, run.stopped, run.notes, run.seconds, run.unfinished)


def grade_notebook(
    path: str | Path,
    *,
    chapters: dict[str, catalog.ChapterExercises] | None = None,
    chapter: str | None = None,
    timeout: float = Limits.cell_timeout,
    server: CheckServer | None = None,
    limits: Limits | None = None,
) -> list[Outcome]:
    """The outcomes of the notebook at ``path`` (see :func:`grade_submission`); ``timeout`` is the limit
    per cell and per check when no ``limits`` are given."""
    limits = limits or Limits(cell_timeout=timeout)
    return grade_submission(path, chapters=chapters, chapter=chapter, limits=limits, server=server).outcomes


def main(argv: list[str] | None = None) -> int:
    """The instructor's command, ``python -m attnbook.grading`` (see :mod:`attnbook.grading.cli`)."""
    from .cli import main as cli_main

    return cli_main(argv)
