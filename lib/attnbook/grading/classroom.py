"""Grading a class: many notebooks in parallel, each result kept in a folder, the CSV and feedback from it.

- **Results**: one JSON file per notebook in the output folder, ``results/<chapter>/<sha256>.json``, named
  by the SHA-256 of the notebook's bytes (and the chapter it was graded as) and holding the version of the
  checkers that graded it (:func:`checkers_version`: the code of the checkers and the grader, the list of
  exercises with their points, and the limits). A rerun grades only the notebooks whose file is missing or
  of another version; ``regrade`` grades them all again. A file is written whole or not at all (written
  aside, then renamed), so an interrupted run leaves no half result.
- **In parallel**: ``jobs`` notebooks at a time, each in its own kernel, each worker with its own recording
  server, with a progress bar. Ctrl-C (or SIGTERM) stops every kernel and recording process at once; what
  was finished is kept.
- **From the folder**: the CSV (one row per notebook and exercise, with the points and the notebook's
  total) and the learners' feedback (:mod:`attnbook.grading.feedback`) are written from the result files
  of exactly the notebooks asked for, so none is lost or counted twice.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import threading
import uuid
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import catalog, sandbox
from .grade import PASSED, ChapterUnknown, Graded, Outcome, grade_submission, identify_chapter
from .kernel import DEFAULT_LIMITS, Limits

__all__ = [
    "Submission",
    "Interrupted",
    "checkers_version",
    "submissions",
    "grade_class",
    "write_csv",
    "summary",
    "cores",
    "FORMAT",
]

FORMAT = 1
CSV_COLUMNS = ["notebook", "chapter", "exercise", "status", "message", "flag", "points", "max_points"]
CSV_COLUMNS += ["total", "max_total"]


class Interrupted(Exception):
    """Grading was interrupted (Ctrl-C or SIGTERM); the results finished before are kept."""


@dataclass
class Submission:
    """A notebook to grade: its path, the name it is shown under, its content's hash, its chapter."""

    path: Path
    name: str
    sha256: str
    chapter: str  # "" when it is not a notebook of the book's chapters
    result: dict | None = field(default=None, repr=False)  # the stored result, once there is one

    def result_file(self, out: Path) -> Path:
        return out / "results" / (self.chapter or "not-graded") / f"{self.sha256}.json"

    def outcomes(self) -> list[Outcome]:
        fields = ("exercise", "status", "message", "flag", "points", "max_points")
        return [Outcome(self.name, self.result["chapter"], *(e[k] for k in fields)) for e in self.result["exercises"]]


def checkers_version(chapters: dict[str, catalog.ChapterExercises], limits: Limits, chapter: str | None) -> str:
    """A digest of what decides a grade besides the notebook: the code of the checkers and of the grader,
    the exercises and their points, the limits, and the chapter forced with ``--chapter``."""
    import torch

    import attnbook

    package = Path(attnbook.__file__).resolve().parent
    digest = hashlib.sha256(f"{attnbook.__version__} {torch.__version__} {FORMAT}".encode())
    for folder in ("exercises", "grading"):
        for path in sorted((package / folder).glob("*.py")):
            digest.update(f"{folder}/{path.name}".encode() + b"\0" + path.read_bytes())
    listed = {name: [asdict(e) for e in c.exercises] + [c.module] for name, c in sorted(chapters.items())}
    digest.update(json.dumps([listed, asdict(limits), chapter], sort_keys=True).encode())
    return digest.hexdigest()[:16]


def _names(paths: list[Path]) -> list[str]:
    """How each notebook is shown: its path relative to the folder that holds them all (file names when
    they share one folder; ``alice/04.ipynb`` and ``bob/04.ipynb`` when they do not)."""
    resolved = [p.resolve() for p in paths]
    root = Path(os.path.commonpath([p.parent for p in resolved])) if resolved else Path()
    return [p.relative_to(root).as_posix() for p in resolved]


def submissions(paths: list[Path], chapters: dict[str, catalog.ChapterExercises], chapter: str | None) -> list:
    """The notebooks at ``paths`` (each once, in the order given) with their hashes and chapters."""
    import nbformat

    unique = list(dict.fromkeys(Path(p) for p in paths))
    missing = [str(p) for p in unique if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"no notebook at {', '.join(missing)}")
    found = []
    for path, name in zip(unique, _names(unique)):
        data = path.read_bytes()
        try:
            nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        except Exception:  # noqa: BLE001 - not a notebook: its chapter, if any, from its name (as grade does)
            nb = nbformat.v4.new_notebook()
        try:
            chapter_of = identify_chapter(nb, path, chapters, chapter).chapter
        except ChapterUnknown:
            chapter_of = ""
        found.append(Submission(path, name, hashlib.sha256(data).hexdigest(), chapter_of))
    return found


def _stored(graded: Graded, submission: Submission, version: str) -> dict:
    keep = ("exercise", "status", "message", "flag", "points", "max_points")
    return {
        "format": FORMAT,
        "version": version,
        "sha256": submission.sha256,
        "chapter": graded.chapter,
        "stopped": graded.stopped,
        "notes": graded.notes,
        "seconds": round(graded.seconds, 3),
        "exercises": [{k: getattr(o, k) for k in keep} for o in graded.outcomes],
    }


def _load(path: Path, version: str) -> dict | None:
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(result, dict) and result.get("format") == FORMAT and result.get("version") == version
    return result if ok else None


def _write(path: Path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    aside.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(aside, path)


def grade_class(
    paths: list[Path],
    out: Path,
    *,
    chapters: dict[str, catalog.ChapterExercises],
    chapter: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    jobs: int | None = None,
    regrade: bool = False,
    user: tuple[int, int] | None = None,
    progress: bool | None = None,
) -> list[Submission]:
    """Grade the notebooks at ``paths`` into the folder ``out``, ``jobs`` at a time (default: one per
    core); the submissions in the order given, each with its result. Raises :class:`Interrupted` on
    Ctrl-C, after stopping everything it started (the results finished by then are kept)."""
    from tqdm.auto import tqdm

    jobs = max(1, jobs or cores())
    version = checkers_version(chapters, limits, chapter)
    found = submissions(paths, chapters, chapter)
    todo: dict[Path, list[Submission]] = {}  # result file -> the submissions it is for (same bytes, same chapter)
    for submission in found:
        file = submission.result_file(out)
        submission.result = None if regrade else _load(file, version)
        if submission.result is None:
            todo.setdefault(file, []).append(submission)
    stop_event = threading.Event()
    servers: list[sandbox.CheckServer] = []
    local = threading.local()
    threads = max(1, cores() // jobs)

    def work(submission: Submission) -> Graded:
        if not hasattr(local, "server"):
            local.server = sandbox.CheckServer(memory=limits.max_memory, user=user)
            servers.append(local.server)
        return grade_submission(
            submission.path,
            chapters=chapters,
            chapter=chapter,
            limits=limits,
            server=local.server,
            name=submission.name,
            stop_event=stop_event,
            user=user,
            threads=threads,
        )

    def close() -> None:
        for server in servers:
            server.close()  # and every process it forked
        bar.close()

    bar = tqdm(total=len(todo), unit="notebook", disable=None if progress is None else not progress)
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="grade")
    try:
        pending = {pool.submit(work, same[0]): file for file, same in todo.items()}
        while pending:
            done, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in done:
                file = pending.pop(future)
                graded = future.result()
                result = _stored(graded, todo[file][0], version)
                if not graded.unfinished:  # a run that says nothing of the notebook is not kept: graded next time
                    _write(file, result)
                for submission in todo[file]:
                    submission.result = result
                bar.update(1)
    except BaseException as error:
        stop_event.set()  # every kernel sees it within a tenth of a second and is killed
        pool.shutdown(wait=True, cancel_futures=True)
        close()
        if isinstance(error, KeyboardInterrupt):
            finished = sum(s.result is not None for s in found)
            raise Interrupted(f"interrupted: {finished} of {len(found)} notebooks have a result") from None
        raise
    pool.shutdown(wait=True)
    close()
    return found


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def write_csv(path: Path, graded: list[Submission]) -> None:
    """The CSV of the outcomes: one row per notebook and exercise, with its points and the notebook's total."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for submission in graded:
            outcomes = submission.outcomes()
            total = sum(o.points for o in outcomes)
            max_total = sum(o.max_points for o in outcomes)
            for o in outcomes:
                writer.writerow(
                    [o.notebook, o.chapter, o.exercise, o.status, o.message, o.flag]
                    + [_number(o.points), _number(o.max_points), _number(total), _number(max_total)]
                )


def _number(x: float) -> str:
    return f"{x:g}"


def summary(submission: Submission) -> str:
    """'name: 3 of 4 exercises passed, 1 flagged' and the points, as the command prints it."""
    outcomes = submission.outcomes()
    flagged = sum(bool(o.flag) for o in outcomes)
    line = f"{submission.name}: {sum(o.status == PASSED for o in outcomes)} of {len(outcomes)} exercises passed"
    line += f", {flagged} flagged" if flagged else ""
    points = f"  {_number(sum(o.points for o in outcomes))} of {_number(sum(o.max_points for o in outcomes))} points"
    stopped = submission.result.get("stopped")
    return "\n".join([line, points] + ([f"  stopped: {stopped}"] if stopped else []))
