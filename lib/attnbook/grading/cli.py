"""The instructor's command, ``python -m attnbook.grading``.

    python -m attnbook.grading submissions/*.ipynb --csv grades.csv      # grade a class
    python -m attnbook.grading autograder 04_queries_keys_values -o gs/  # a Gradescope autograder
    python -m attnbook.grading gradescope /autograder                    # what the autograder runs
    python -m attnbook.grading exercises 04_queries_keys_values          # a chapter's exercises and points

Grading a class keeps one result per notebook in the output folder (``-o``, by default the CSV's name
without ``.csv``, else ``grades/``), grades only what has no result yet (``--regrade``: all again),
writes the CSV and one feedback page per notebook from that folder, and prints a line per exercise and a
summary per notebook.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

from .kernel import DEFAULT_LIMITS, Limits

__all__ = ["main"]

_DEFAULTS = DEFAULT_LIMITS


def _limit_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("limits")
    group.add_argument(
        "--timeout", type=float, default=_DEFAULTS.cell_timeout, help="seconds allowed per cell and per check"
    )
    group.add_argument(
        "--notebook-timeout",
        type=float,
        default=_DEFAULTS.notebook_timeout,
        help="seconds allowed for running the whole notebook",
    )
    group.add_argument(
        "--max-output", type=float, default=_DEFAULTS.max_output / 2**20, help="MB of a cell's output that are read"
    )
    group.add_argument(
        "--max-memory",
        type=float,
        default=_DEFAULTS.max_memory / 2**30,
        help="GB of memory for the notebook's kernel and each check (0: no limit)",
    )


def _limits(args) -> Limits:
    for name in ("timeout", "notebook_timeout", "max_output"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.max_memory < 0:
        raise SystemExit(f"--max-memory must be 0 (no limit) or positive, got {args.max_memory}")
    return Limits(args.timeout, args.notebook_timeout, int(args.max_output * 2**20), int(args.max_memory * 2**30))


def _points(path: Path | None) -> dict[str, float] | None:
    if path is None:
        return None
    points = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(points, dict) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in points.values()
    ):
        raise SystemExit(
            f'--points: {path} must hold a JSON object of exercise labels and points, e.g. {{"ex-qkv-attention": 2}}'
        )
    return {str(k): float(v) for k, v in points.items()}


def _user(name: str | None) -> tuple[int, int] | None:
    if name is None:
        return None
    import pwd

    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        raise SystemExit("--user needs the grader to run as root")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise SystemExit(f"--user: there is no user {name!r}") from None
    return entry.pw_uid, entry.pw_gid


def _grade(argv: list[str]) -> int:
    from . import classroom, feedback, grade

    parser = argparse.ArgumentParser(
        prog="python -m attnbook.grading",
        description="Grade learners' notebooks with the book's checkers, several at once, believing only outcomes "
        "the grader computes itself; results are kept in a folder, so a rerun grades only what is missing.",
        epilog="Other commands: python -m attnbook.grading autograder CHAPTER -o DIR (a Gradescope autograder); "
        "python -m attnbook.grading exercises [CHAPTER] (labels and points). See the book's instructor guide.",
    )
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--csv", type=Path, help="write the outcomes, points and totals to this CSV file")
    parser.add_argument("-o", "--out", type=Path, help="the results folder (default: the CSV's name, else grades/)")
    parser.add_argument("--feedback", type=Path, help="where the feedback pages go (default: OUT/feedback)")
    parser.add_argument("--jobs", "-j", type=int, help="notebooks graded at once (default: one per core)")
    parser.add_argument("--regrade", action="store_true", help="grade every notebook again, even with a result")
    parser.add_argument("--chapter", help="grade every notebook as this chapter (e.g. 04_queries_keys_values)")
    parser.add_argument(
        "--chapters",
        type=Path,
        help="a chapters.json, or a folder of chapter notebooks, with the exercises (default: the installed list)",
    )
    parser.add_argument("--points", type=Path, help='a JSON file of points by exercise label, {"ex-qkv-attention": 2}')
    parser.add_argument("--user", help="run the learners' code as this user (the grader must run as root)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    _limit_options(parser)
    args = parser.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    limits = _limits(args)
    chapters = grade.load_chapters(args.chapters, _points(args.points))
    out = args.out or (args.csv.with_suffix("") if args.csv else Path("grades"))
    try:
        graded = classroom.grade_class(
            args.notebooks,
            out,
            chapters=chapters,
            chapter=args.chapter,
            limits=limits,
            jobs=args.jobs,
            regrade=args.regrade,
            user=_user(args.user),
            progress=False if args.no_progress else None,
        )
    except classroom.Interrupted as stopped:
        print(f"{stopped}; run the same command again to grade the rest", file=sys.stderr)
        return 130
    for submission in graded:
        for o in submission.outcomes():
            points = f"{o.points:g}/{o.max_points:g}"
            print("\t".join([o.notebook, o.exercise, o.status, points, o.message] + ([o.flag] if o.flag else [])))
    for submission in graded:
        print(classroom.summary(submission))
    feedback.write_feedback(args.feedback or out / "feedback", graded)
    if args.csv:
        classroom.write_csv(args.csv, graded)
    print(
        f"results in {out}/, feedback in {args.feedback or out / 'feedback'}/"
        + (f", CSV {args.csv}" if args.csv else "")
    )
    return 0


def _autograder(argv: list[str]) -> int:
    from . import gradescope

    parser = argparse.ArgumentParser(
        prog="python -m attnbook.grading autograder",
        description="Write a Gradescope autograder for one chapter notebook.",
    )
    parser.add_argument("chapter", help="the chapter notebook's file stem, e.g. 04_queries_keys_values")
    parser.add_argument("-o", "--out", type=Path, required=True, help="the folder to write the bundle into")
    parser.add_argument("--points", type=Path, help='a JSON file of points by exercise label, {"ex-qkv-attention": 2}')
    parser.add_argument(
        "--visibility",
        default="visible",
        choices=["visible", "hidden", "after_due_date", "after_published"],
        help="when learners see their results on Gradescope",
    )
    _limit_options(parser)
    args = parser.parse_args(argv)
    try:
        bundle = gradescope.write_bundle(
            args.chapter, args.out, limits=_limits(args), points=_points(args.points), visibility=args.visibility
        )
    except ValueError as error:
        parser.error(str(error))
    print(f"wrote {bundle}: upload it on the assignment's Configure Autograder page")
    return 0


def _gradescope(argv: list[str]) -> int:
    from . import gradescope

    parser = argparse.ArgumentParser(
        prog="python -m attnbook.grading gradescope",
        description="Grade ROOT/submission and write ROOT/results/results.json (the autograder's run_autograder).",
    )
    parser.add_argument("root", type=Path, nargs="?", default=Path("/autograder"))
    return gradescope.run(parser.parse_args(argv).root)


def _exercises(argv: list[str]) -> int:
    from . import grade

    parser = argparse.ArgumentParser(
        prog="python -m attnbook.grading exercises", description="List the chapters' exercises: label, points, title."
    )
    parser.add_argument("chapters", nargs="*", help="chapter notebooks' file stems (default: all)")
    parser.add_argument("--points", type=Path, help="a JSON file of points by exercise label, as for grading")
    args = parser.parse_args(argv)
    chapters = grade.load_chapters(points=_points(args.points))
    unknown = [c for c in args.chapters if c not in chapters]
    if unknown:
        parser.error(f"not a chapter with exercises: {', '.join(unknown)}; known: {', '.join(chapters)}")
    for name in args.chapters or chapters:
        print(name)
        for e in chapters[name].exercises:
            print(f"  {e.label or '(no label)':<28} {e.points:g} point{'' if e.points == 1 else 's'}  {e.title}")
    return 0


def _interrupt_on_sigterm():
    """SIGTERM stops grading as Ctrl-C does (everything started is stopped); the previous handler."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        return signal.signal(signal.SIGTERM, handler)
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    commands = {"autograder": _autograder, "gradescope": _gradescope, "exercises": _exercises}
    command = commands.get(argv[0] if argv else "", _grade)
    if command is not _grade:
        argv = argv[1:]
    previous = _interrupt_on_sigterm()
    try:
        return command(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
