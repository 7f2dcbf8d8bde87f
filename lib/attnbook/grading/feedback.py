"""What a learner is told: a Markdown page per notebook, and the same in Gradescope's ``results.json`` format.

Both hold, for every exercise, its outcome, the points earned out of those it is worth, the checker's
message (the hint a wrong answer gets in the notebook, "not attempted yet", or why it could not be
checked) and what the grader noticed (a check cell missing or edited, a tick the notebook displays,
tampering), then how the notebook ran (where it stopped and why, a cell interrupted, output not read,
memory). Nothing else: no solution, no reference output beyond what the hints say, no record.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["markdown", "write_feedback", "gradescope_results", "VISIBILITY"]

VISIBILITY = ("visible", "hidden", "after_due_date", "after_published")  # Gradescope's visibility settings


def _number(x: float) -> str:
    return f"{x:g}"


def _points(earned: float, worth: float) -> str:
    return f"{_number(earned)} of {_number(worth)} point{'' if worth == 1 else 's'}"


def _cell(text: str) -> str:
    """Text for a cell of a Markdown table."""
    return text.replace("|", "\\|").replace("\n", " ")


def _sentence(text: str) -> str:
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?", ")")) else text + "."


def _run_lines(result: dict) -> list[str]:
    lines = []
    if result.get("stopped"):
        lines.append(f"The notebook did not run to the end: {result['stopped']}.")
    lines += [_sentence(note) for note in result.get("notes", [])]
    return lines


def markdown(name: str, result: dict) -> str:
    """The feedback page of notebook ``name`` from its stored result (see :mod:`attnbook.grading.classroom`)."""
    exercises = result["exercises"]
    earned, worth = sum(e["points"] for e in exercises), sum(e["max_points"] for e in exercises)
    passed = sum(e["status"] == "passed" for e in exercises)
    out = [f"# Feedback on `{name}`", ""]
    if not result.get("chapter"):
        message = exercises[0]["message"] if exercises else "not graded"
        return "\n".join(out + [_sentence(message), ""])
    out += [
        f"Chapter notebook `{result['chapter']}`: **{_points(earned, worth)}**, "
        f"{passed} of {len(exercises)} exercises passed.",
        "",
        "| | Exercise | Outcome | Points |",
        "|---|---|---|---|",
    ]
    out += [
        f"| {i} | {_cell(e['exercise'])} | {e['status']} | {_number(e['points'])} of {_number(e['max_points'])} |"
        for i, e in enumerate(exercises, start=1)
    ]
    for i, e in enumerate(exercises, start=1):
        out += [
            "",
            f"## {i}. {e['exercise']}",
            "",
            f"**{e['status'].capitalize()}**, {_points(e['points'], e['max_points'])}.",
        ]
        if e["message"]:
            out += ["", _sentence(e["message"])]
        if e["flag"]:
            out += ["", f"Noticed by the grader: {e['flag']}."]
    run = _run_lines(result)
    if run:
        out += ["", "## How the notebook ran", ""] + [f"- {line}" for line in run]
    out += [
        "",
        "Every exercise was checked by running your code apart from the checks: what your notebook printed "
        "or displayed did not count, only what the grader computed.",
        "",
    ]
    return "\n".join(out)


def write_feedback(folder: Path, graded) -> list[Path]:
    """One Markdown file per notebook under ``folder``, at the notebook's name with ``.md`` for its suffix
    (``alice/04_queries_keys_values.md``); the paths written."""
    written = []
    for submission in graded:
        path = folder / Path(submission.name).with_suffix(".md")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(markdown(submission.name, submission.result), encoding="utf-8")
        written.append(path)
    return written


def gradescope_results(name: str, result: dict, visibility: str = "visible") -> dict:
    """Gradescope's ``results.json`` for one notebook: a test per exercise (name, number, score, max_score,
    status, output, visibility) and the total as the top-level score."""
    exercises = result["exercises"]
    tests = []
    for i, e in enumerate(exercises, start=1):
        output = [e["message"]] if e["message"] else []
        output += [f"Noticed by the grader: {e['flag']}."] if e["flag"] else []
        test = {"name": e["exercise"] or "the notebook", "number": str(i), "score": e["points"]}
        test.update(max_score=e["max_points"], status="passed" if e["status"] == "passed" else "failed")
        test.update(output="\n\n".join(output), visibility=visibility)
        tests.append(test)
    summary = [f"Graded notebook: {name}"] + _run_lines(result)
    return {
        "score": sum(e["points"] for e in exercises),
        "execution_time": round(result.get("seconds", 0)),
        "output": "\n\n".join(summary),
        "visibility": visibility,
        "stdout_visibility": "hidden",
        "tests": tests,
    }
