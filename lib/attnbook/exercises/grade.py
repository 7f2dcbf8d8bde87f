"""Grade learners' notebooks with the book's checkers, believing only outcomes the grader computes itself.

    python -m attnbook.exercises.grade submissions/*.ipynb --csv grades.csv

For each notebook:

1. **Which chapter**: ``--chapter``, else the file name (``Copy of 04_queries_keys_values.ipynb``), else the
   checker module the notebook imports, else the check cells it contains.
2. **Which exercises**: the chapter's exercises, answers and check cells come from the book
   (:mod:`attnbook.exercises.catalog`, installed with the package), not from the notebook. Every one of
   them is graded: a check cell that is missing or edited is reported, and the book's check runs anyway.
3. **The learner's code runs** in a fresh Jupyter kernel in an empty folder, with the book's check cells
   taken out. In place of each check cell the grader takes the answer it would have checked (a function,
   a class or a value, found by name) out of the kernel with cloudpickle, through that cell's output.
   What the notebook prints or displays is never read as an outcome; a tick it displays is reported.
4. **The checks are recorded** in separate processes, one per exercise, forked by a server that has
   imported the checkers and never runs the learner's code (:mod:`attnbook.exercises.replay`): each loads
   its answer and runs the book's checker on it, and every call into the learner's code is written down
   as data. These processes run the learner's code, so nothing in them is believed.
5. **The outcome** comes from this process, which never runs the learner's code: each checker runs again
   on a stand-in that replays the recorded results, and compares them with its own reference on its own
   test cases. A record that does not match the checker's calls is reported as tampering and fails.

Running a notebook runs its author's code with your permissions: grade in a container or a throw-away
virtual machine, as a user who cannot write to this Python environment. See the instructor guide.
"""

from __future__ import annotations

import argparse
import base64
import csv
import importlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import ExerciseFailed, Result, catalog, replay

__all__ = ["Outcome", "grade_notebook", "identify_chapter", "load_chapters", "main"]

PASSED, NOT_ATTEMPTED, FAILED = "passed", "not attempted", "failed"
TICK = "\u2713"

EDITED = "check cell edited: the book's check was run instead"
MISSING = "check cell missing: the book's check was run instead"
FORGED = f"the notebook displays a tick ({TICK}) that the grader did not produce"


@dataclass(frozen=True)
class Outcome:
    """One exercise of one notebook: its status, the checker's message, and what the grader noticed."""

    notebook: str
    chapter: str
    exercise: str
    status: str  # "passed", "not attempted" or "failed"
    message: str
    flag: str = ""  # e.g. "check cell missing: ...", "tampering: ..."; empty when nothing was noticed


class ChapterUnknown(ValueError):
    """The grader cannot tell which chapter a notebook is."""


# --- which chapter, which exercises ---------------------------------------------------------------------


def load_chapters(source: Path | str | None = None) -> dict[str, catalog.ChapterExercises]:
    """The chapters' exercises: the installed list by default, or a ``chapters.json`` file, or a folder of
    chapter notebooks (``NN_name.ipynb``) read with the book's own parser."""
    if source is None:
        return catalog.load()
    source = Path(source)
    if source.is_dir():
        import nbformat

        return {
            p.stem: catalog.parse_notebook(nbformat.read(p, as_version=4), p.stem)
            for p in sorted(source.glob("[0-9][0-9]_*.ipynb"))
        }
    return catalog.load(source)


def _code_sources(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def identify_chapter(
    nb, path: Path, chapters: dict[str, catalog.ChapterExercises], chapter: str | None = None
) -> catalog.ChapterExercises:
    """The chapter of notebook ``nb`` read from ``path`` (see the module docstring for the order)."""
    if chapter is not None:
        if chapter not in chapters:
            raise ChapterUnknown(f"--chapter {chapter!r} is not a chapter with exercises; known: {', '.join(chapters)}")
        return chapters[chapter]
    by_name = [name for name in chapters if name in path.stem]
    if by_name:
        return chapters[max(by_name, key=len)]
    sources = _code_sources(nb)
    imported = {m.group(1) for s in sources for m in catalog.CHECKER_MODULE.finditer(s)}
    by_module = [c for c in chapters.values() if c.module in imported]
    if len(by_module) == 1:
        return by_module[0]
    stripped = {s.strip() for s in sources}
    scores = {name: sum(e.check in stripped for e in c.exercises) for name, c in chapters.items()}
    best = max(scores.values(), default=0)
    if best and list(scores.values()).count(best) == 1:
        return chapters[max(scores, key=scores.get)]
    raise ChapterUnknown(
        f"cannot tell which chapter {path.name} is: name it like the chapter's notebook "
        f"(e.g. {next(iter(chapters), '04_queries_keys_values')}.ipynb) or pass --chapter"
    )


# --- the learner's program ------------------------------------------------------------------------------

ANSWER_MIME = "application/x-attnbook-answer+json"

_EXTRACT = """\
def __attnbook_take_answer(name):
    import base64, builtins, cloudpickle
    from IPython.display import publish_display_data
    namespace = builtins.globals()
    if name not in namespace:
        answer = {{"status": "missing"}}
    else:
        try:
            answer = {{"status": "ok", "pickle": base64.b64encode(cloudpickle.dumps(namespace[name])).decode()}}
        except BaseException as error:
            message = builtins.type(error).__name__ + ": " + builtins.str(error)
            answer = {{"status": "error", "message": message[:400]}}
    publish_display_data({{"{mime}": answer}})
__attnbook_take_answer({name!r})
del __attnbook_take_answer
"""


@dataclass
class _Plan:
    cells: list = field(default_factory=list)  # (source, exercise index of its region or None, is_extraction)
    flags: dict = field(default_factory=dict)  # exercise index -> list of flags


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
    extraction = {i: _EXTRACT.format(name=e.answer, mime=ANSWER_MIME) for i, e in enumerate(exercises)}
    for position, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        i = checks.get(cell.source.strip())
        if i is None:
            plan.cells.append((cell.source, regions[position], False))
        elif not any(extracted and r == i for _, r, extracted in plan.cells):  # a repeated check cell is dropped
            plan.cells.append((extraction[i], i, True))
    sources = _code_sources(nb)
    for i, e in enumerate(exercises):
        if any(extracted and r == i for _, r, extracted in plan.cells):
            continue
        edited = any(re.search(rf"\b{re.escape(e.checker)}\b", s) for s in sources)
        plan.flags[i].append(EDITED if edited else MISSING)
        later = [
            k
            for k, (_, r, _) in enumerate(plan.cells)
            if i in anchors and r is not None and r in anchors and anchors[r] > anchors[i]
        ]
        plan.cells.insert(later[0] if later else len(plan.cells), (extraction[i], i, True))
    return plan


def _texts(output) -> list[str]:
    if output.get("output_type") == "stream":
        return [output.get("text", "")]
    data = output.get("data", {})
    return ["".join(v) if isinstance(v, list) else str(v) for k, v in data.items() if k.startswith("text/")]


def _run_in_kernel(plan: _Plan, workdir: Path, timeout: int) -> tuple[dict[int, dict], str]:
    """Run the plan's cells in a fresh kernel in ``workdir``: the answers taken (exercise -> what the
    extraction reported) and '' or why the run stopped early. Flags the exercises whose part displays a tick."""
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source, _, _ in plan.cells]
    stopped = ""
    try:
        with tempfile.TemporaryDirectory(prefix="attnbook-kernel-") as sockets:
            # local sockets rather than TCP ports, in a folder of their own
            manager = KernelManager(kernel_name="python3", transport="ipc", ip=str(Path(sockets) / "kernel"))
            try:
                NotebookClient(
                    nb,
                    km=manager,
                    timeout=timeout,
                    allow_errors=True,
                    interrupt_on_timeout=True,
                    resources={"metadata": {"path": str(workdir)}},
                ).execute()
            finally:
                if manager.has_kernel:  # the kernel and the processes of its group
                    manager.shutdown_kernel(now=True)
    except DeadKernelError:
        stopped = "the notebook's kernel died before the answer could be taken"
    except Exception as error:  # noqa: BLE001 - e.g. the kernel did not start; the answers tell the rest
        stopped = f"the notebook could not be run to the end ({type(error).__name__}: {error})"
    answers: dict[int, dict] = {}
    for cell, (_, region, extraction) in zip(nb.cells, plan.cells):
        outputs = cell.get("outputs", [])
        if extraction:
            found = [
                o["data"][ANSWER_MIME]
                for o in outputs
                if o.get("output_type") == "display_data" and ANSWER_MIME in o.get("data", {})
            ]
            if found and isinstance(found[0], dict) and region not in answers:
                answers[region] = found[0]
        elif any(TICK in text for output in outputs for text in _texts(output)):
            for i in [region] if region is not None else plan.flags:
                if FORGED not in plan.flags[i]:
                    plan.flags[i].append(FORGED)
    return answers, stopped


class CheckServer:
    """The recording server (``python -m attnbook.exercises.replay``): one for many notebooks, since it
    never runs the learner's code; it forks a fresh process for each exercise."""

    def __init__(self):
        self._process = None
        self._folder = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _start(self):
        self._folder = tempfile.TemporaryDirectory(prefix="attnbook-check-")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "attnbook.exercises.replay"],
            cwd=self._folder.name,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def close(self):
        if self._process is not None:
            try:
                self._process.stdin.close()
                self._process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
            try:
                os.killpg(self._process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self._process.wait()
            self._process = None
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None

    def record(self, module: str, checker: str, answer: bytes, timeout: int) -> tuple[bytes, str]:
        """(the record, '') or (b'', why there is none) for one exercise."""
        if self._process is None or self._process.poll() is not None:
            self.close()
            self._start()
        process = self._process
        try:
            replay.write_frame(
                process.stdin, json.dumps({"module": module, "checker": checker, "timeout": timeout}).encode()
            )
            replay.write_frame(process.stdin, answer)
            process.stdin.flush()
            ready = select.select([process.stdout], [], [], timeout + 60)[0]
            reply = replay.read_frame(process.stdout) if ready else None
            record = replay.read_frame(process.stdout, limit=replay.MAX_RECORD_BYTES) if reply is not None else None
        except (OSError, ValueError):
            reply = record = None
        if reply is None or record is None:  # the server itself stopped: start a new one next time
            self.close()
            return b"", "ended"
        return record, json.loads(reply)["why"]


_WHY = {
    "timeout": "the check did not finish within {timeout} s",
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


def grade_notebook(
    path: str | Path,
    *,
    chapters: dict[str, catalog.ChapterExercises] | None = None,
    chapter: str | None = None,
    timeout: int = 900,
    server: CheckServer | None = None,
) -> list[Outcome]:
    """Grade the notebook at ``path``: one :class:`Outcome` per exercise of its chapter, in the book's order.

    ``server`` may be shared by several calls (``main`` does); by default each call starts its own.
    """
    import nbformat

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no notebook at {path}")
    chapters = load_chapters() if chapters is None else chapters
    try:
        nb = nbformat.read(path, as_version=4)
        found = identify_chapter(nb, path, chapters, chapter)
    except Exception as error:  # noqa: BLE001 - not a notebook, or not one of the book's chapters
        return [Outcome(path.name, "", "", FAILED, f"not graded: {error}", "")]
    # every checker is loaded before any learner code runs (a page without exercises names no module)
    for module in {c.module for c in chapters.values() if c.module}:
        importlib.import_module(f"attnbook.exercises.{module}")
    plan = _plan(nb, found)
    with tempfile.TemporaryDirectory(prefix="attnbook-grade-") as run:
        answers, stopped = _run_in_kernel(plan, Path(run), timeout)
    own_server = server is None
    server = CheckServer() if own_server else server
    outcomes = []
    try:
        for i, e in enumerate(found.exercises):
            flags = list(plan.flags[i])
            answer = answers.get(i, {})
            status, message = FAILED, ""
            if answer.get("status") == "missing":
                message = f"`{e.answer}` is not defined in the notebook"
            elif answer.get("status") == "error":
                message = f"`{e.answer}` could not be taken out of the notebook ({str(answer.get('message'))[:300]})"
            elif answer.get("status") != "ok" or not isinstance(answer.get("pickle"), str):
                message = stopped or f"the notebook never reached the place of `{e.answer}`'s check"
            else:
                try:
                    blob = base64.b64decode(answer["pickle"], validate=True)
                except ValueError:
                    blob = b""
                record, why = server.record(found.module, e.checker, blob, timeout)
                if why:
                    message = _WHY.get(why, why).format(timeout=timeout)
                else:
                    try:
                        status, message, flag = _verdict(found.module, e.checker, replay.load_record(record))
                    except replay.RecordMismatch as mismatch:
                        status, message, flag = FAILED, "the check could not be reproduced", f"tampering: {mismatch}"
                    if flag:
                        flags.append(flag)
            outcomes.append(Outcome(path.name, found.chapter, e.title, status, message, "; ".join(flags)))
    finally:
        if own_server:
            server.close()
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnbook.exercises.grade", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--csv", type=Path, help="also write the outcomes to this CSV file")
    parser.add_argument("--chapter", help="grade every notebook as this chapter (e.g. 04_queries_keys_values)")
    parser.add_argument(
        "--chapters",
        type=Path,
        help="a chapters.json, or a folder of chapter notebooks, to take "
        "the exercises from instead of the installed list",
    )
    parser.add_argument("--timeout", type=int, default=900, help="seconds allowed per cell and per check")
    args = parser.parse_args(argv)
    chapters = load_chapters(args.chapters)
    rows = []
    with CheckServer() as server:
        for path in args.notebooks:
            rows.extend(
                grade_notebook(path, chapters=chapters, chapter=args.chapter, timeout=args.timeout, server=server)
            )
    for row in rows:
        print("\t".join([row.notebook, row.exercise, row.status, row.message] + ([row.flag] if row.flag else [])))
    for notebook in dict.fromkeys(r.notebook for r in rows):
        mine = [r for r in rows if r.notebook == notebook]
        flagged = sum(bool(r.flag) for r in mine)
        print(
            f"{notebook}: {sum(r.status == PASSED for r in mine)} of {len(mine)} exercises passed"
            + (f", {flagged} flagged" if flagged else "")
        )
    if args.csv:
        with open(args.csv, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["notebook", "chapter", "exercise", "status", "message", "flag"])
            writer.writerows([r.notebook, r.chapter, r.exercise, r.status, r.message, r.flag] for r in rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
