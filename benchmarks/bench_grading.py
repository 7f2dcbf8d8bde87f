"""Benchmark: grading a class of 120 chapter 04 notebooks with ``python -m attnbook.grading --jobs 2``.

The class is generated from the chapter's exercise section (its real exercises, stubs, solutions and check
cells, after a setup cell), every notebook different (a comment with the learner's number):

- honest notebooks with every exercise right;
- each usual wrong answer of each exercise (the mistakes the checkers recognise), the rest right;
- untouched student versions (stubs) and half-done ones;
- forged ticks and checks: a printed tick in place of a check cell, checkers patched in the kernel, an
  answer that patches the checker where it is recorded, an answer that exits;
- endless loops (one that an interrupt stops, two that ignore interrupts), a cell printing 40 MB, a file
  that is not a notebook, a kernel that dies.

Then the whole class is graded as an instructor would, ``python -m attnbook.grading NOTEBOOKS --csv ...
--jobs 2`` with the limits the instructor guide suggests, and timed (wall clock). Checked: every notebook
has exactly one row per exercise of its chapter in the CSV, and, unless ``--no-alone``, the same outcome
(status, points, flag and message, the seconds in "after N s" aside) as when it is graded alone, one
notebook at a time, with ``attnbook.grading.grade.grade_submission``.

Target (issue "Grading a class"): the whole class in at most 15 minutes on the 2-core machine, nothing lost.

Writes benchmarks/results/grading.json and its section of benchmarks/README.md.

    .venv/bin/python benchmarks/bench_grading.py              # the class, then each notebook alone (long)
    .venv/bin/python benchmarks/bench_grading.py --no-alone   # the class only
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

import nbformat
import torch
from _common import cpu_name, loadavg, write_section  # noqa: E402  (benchmarks/_common.py)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "book" / "_ext"))

from attnbook.grading import catalog  # noqa: E402
from attnbook_book import notebooks  # noqa: E402

CHAPTER = "04_queries_keys_values"
BOOK = catalog.load()[CHAPTER]
SETUP = "import math\nimport torch\nfrom attnbook.exercises import queries_keys_values as ex"
LIMITS = ["--timeout", "60", "--notebook-timeout", "300"]  # the instructor guide's suggestion for chapter 04

# the usual wrong answers, by exercise: the mistakes the chapter's checkers recognise
SCORES = "q @ k.transpose(-2, -1)"
WRONG = {
    0: [
        f"def my_attention(q, k, v):\n    return torch.softmax({SCORES}, dim=-1) @ v",
        f"def my_attention(q, k, v):\n    return torch.softmax({SCORES} / q.shape[-1], dim=-1) @ v",
        f"def my_attention(q, k, v):\n    return torch.softmax({SCORES} / math.sqrt(q.shape[-1]), dim=-2) @ v",
        "def my_attention(q, k, v):\n    return torch.softmax(q @ k / math.sqrt(q.shape[-1]), dim=-1) @ v",
        f"def my_attention(q, k, v):\n    return ({SCORES} / math.sqrt(q.shape[-1])) @ v",
    ],
    1: [
        f"def my_masked_attention(q, k, v, mask):\n    return torch.softmax({SCORES} / math.sqrt(q.shape[-1]), -1) @ v",
        "def my_masked_attention(q, k, v, mask):\n"
        f"    s = ({SCORES} / math.sqrt(q.shape[-1])).masked_fill(mask, float('-inf'))\n"
        "    return torch.softmax(s, -1) @ v",
        "def my_masked_attention(q, k, v, mask):\n"
        f"    s = ({SCORES} / math.sqrt(q.shape[-1])).masked_fill(~mask, 0.0)\n"
        "    return torch.softmax(s, -1) @ v",
        "def my_masked_attention(q, k, v, mask):\n"
        f"    w = torch.softmax({SCORES} / math.sqrt(q.shape[-1]), -1).masked_fill(~mask, 0.0)\n"
        "    return w @ v",
    ],
    2: [
        "def my_softmax(scores, temperature):\n    return torch.softmax(scores * temperature, dim=-1)",
        "def my_softmax(scores, temperature):\n    return torch.softmax(scores / temperature, dim=0)",
        "def my_softmax(scores, temperature):\n"
        "    e = torch.exp(scores / temperature)\n"
        "    return e / e.sum(-1, keepdim=True)",
    ],
    3: ["predicted_std = 64", "predicted_std = 1"],
}

TICK_PRINT = 'print("\\u2713 scaled dot-product attention: correct on every test case.")'
PATCH_IN_KERNEL = """\
import attnbook.exercises as E
ex.check_score_std = lambda answer: E.Result("standard deviation", True, "correct.")
E.check_number = lambda *a, **k: E.Result("standard deviation", True, "correct.")
predicted_std = 64"""
PATCH_IN_CHECKER = f"""\
def my_attention(q, k, v):
    import attnbook.exercises as E
    from attnbook.exercises import queries_keys_values as Q
    passed = lambda *a, **k: E.Result("scaled dot-product attention", True, "correct on every test case.")
    E.check_function = Q.check_function = passed
    return torch.softmax({SCORES}, dim=-1) @ v"""
EXITS = "def my_masked_attention(q, k, v, mask):\n    import sys\n    sys.exit(0)"
ENDLESS = "while True:\n    pass"
STUBBORN = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
PRINTS = "print('x' * 40_000_000)"
DIES = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"


def solutions() -> nbformat.NotebookNode:
    nb = notebooks.to_ipynb(REPO / "chapters" / f"{CHAPTER}.md")
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and "## Exercises" in c.source)
    nb.cells = [nbformat.v4.new_code_cell(SETUP)] + nb.cells[start:]
    return nb


def check_index(nb, exercise: int) -> int:
    check = BOOK.exercises[exercise].check
    return next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip() == check)


def before_check(nb, exercise: int, source: str):
    nb.cells.insert(check_index(nb, exercise), nbformat.v4.new_code_cell(textwrap.dedent(source).strip()))
    return nb


def after_check(nb, exercise: int, source: str):
    nb.cells.insert(check_index(nb, exercise) + 1, nbformat.v4.new_code_cell(source))
    return nb


def generate(folder: Path) -> dict[str, str]:
    """Write the class into ``folder``: {file name: kind}."""
    base = solutions()
    stub = notebooks.student_version(base)
    made: list[tuple[str, object]] = []

    def copy(nb):
        return nbformat.from_dict(json.loads(json.dumps(nb)))

    for _ in range(54):
        made.append(("honest", copy(base)))
    for exercise, answers in WRONG.items():
        for n, source in enumerate(answers):
            for _ in range(2):
                made.append((f"wrong answer {exercise + 1}.{n + 1}", before_check(copy(base), exercise, source)))
    for _ in range(10):
        made.append(("stub", copy(stub)))
    for _ in range(10):
        half = copy(base)
        for exercise in (2, 3):  # the last two exercises: the stubs again
            stub_again = "def my_softmax(scores, temperature):\n    raise NotImplementedError"
            before_check(half, exercise, stub_again if exercise == 2 else "predicted_std = ...")
        made.append(("half done", half))
    for _ in range(2):
        forged = before_check(copy(base), 0, WRONG[0][0])
        forged.cells[check_index(forged, 0)].source = TICK_PRINT
        made.append(("forged tick", forged))
        made.append(("checker patched in the kernel", before_check(copy(base), 3, PATCH_IN_KERNEL)))
        made.append(("answer patches the checker", before_check(copy(base), 0, PATCH_IN_CHECKER)))
        made.append(("answer exits", before_check(copy(base), 1, EXITS)))
    made.append(("endless loop, interrupted", after_check(copy(base), 1, ENDLESS)))
    for _ in range(2):
        made.append(("endless loop, ignores interrupts", after_check(copy(base), 1, STUBBORN)))
    for _ in range(3):
        made.append(("prints 40 MB", after_check(copy(base), 0, PRINTS)))
    for _ in range(2):
        made.append(("kernel dies", after_check(copy(base), 2, DIES)))
    kinds = {}
    for number, (kind, nb) in enumerate(made, start=1):
        nb.cells.insert(0, nbformat.v4.new_code_cell(f"# learner {number}: {kind}"))  # every notebook different
        name = f"learner{number:03d}_{CHAPTER}.ipynb"
        nbformat.write(nb, folder / name)
        kinds[name] = kind
    for number in range(len(made) + 1, len(made) + 3):
        name = f"learner{number:03d}_{CHAPTER}.ipynb"
        (folder / name).write_text(f"learner {number}: a notebook saved as text, not a notebook\n")
        kinds[name] = "not a notebook"
    return kinds


def _same(message: str) -> str:
    return re.sub(r"after \d+ s", "after N s", message)


def alone(paths: list[Path], limits: list[str]) -> dict[str, list[tuple]]:
    """Each notebook graded alone, one at a time, with its own recording server: {name: outcomes}."""
    from attnbook.grading.grade import grade_submission
    from attnbook.grading.kernel import Limits

    values = dict(zip(limits[::2], map(float, limits[1::2])))
    lim = Limits(cell_timeout=values["--timeout"], notebook_timeout=values["--notebook-timeout"])
    found = {}
    for i, path in enumerate(paths, start=1):
        graded = grade_submission(path, limits=lim)
        found[path.name] = [(o.exercise, o.status, o.points, o.flag, _same(o.message)) for o in graded.outcomes]
        print(f"alone {i}/{len(paths)}: {path.name}", flush=True)
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--no-alone", action="store_true", help="skip grading each notebook alone")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "grading.json")
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument("--sample", type=int, help="grade every n-th generated notebook only (a quick look)")
    args = parser.parse_args(argv)
    environment = {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "load_before": loadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        folder = Path(tmp) / "class"
        folder.mkdir()
        kinds = generate(folder)
        if args.sample:
            for name in sorted(kinds)[::1][1:]:
                if int(name[7:10]) % args.sample:
                    (folder / name).unlink()
                    del kinds[name]
        paths = sorted(folder.iterdir())
        report = Path(tmp) / "grades.csv"
        command = [sys.executable, "-m", "attnbook.grading", *map(str, paths), "--csv", str(report)]
        command += ["-o", str(Path(tmp) / "out"), "--jobs", str(args.jobs), *LIMITS]
        start = time.monotonic()
        run = subprocess.run(command, capture_output=True, text=True)
        wall = time.monotonic() - start
        environment["load_after_class"] = loadavg()
        if run.returncode != 0:
            print(run.stdout[-3000:], run.stderr[-3000:])
            return 1
        rows = list(csv.DictReader(report.open()))
        by_notebook: dict[str, list[dict]] = {}
        for row in rows:
            by_notebook.setdefault(row["notebook"], []).append(row)
        titles = [e.title for e in BOOK.exercises]
        one_row_each = sorted(by_notebook) == sorted(kinds) and all(
            [r["exercise"] for r in mine] == titles for mine in by_notebook.values()
        )
        outcomes = {
            name: [(r["exercise"], r["status"], float(r["points"]), r["flag"], _same(r["message"])) for r in mine]
            for name, mine in by_notebook.items()
        }
        disagree = []
        if not args.no_alone:
            single = alone(paths, LIMITS)
            environment["load_after_alone"] = loadavg()
            disagree = [name for name in kinds if single.get(name) != outcomes.get(name)]
    per_kind: dict[str, Counter] = {}
    points: dict[str, list[float]] = {}
    for name, kind in kinds.items():
        per_kind.setdefault(kind, Counter()).update(s for _, s, *_ in outcomes.get(name, []))
        points.setdefault(kind, []).append(sum(p for _, _, p, *_ in outcomes.get(name, [])))
    result = {
        "environment": environment,
        "jobs": args.jobs,
        "limits": LIMITS,
        "notebooks": len(kinds),
        "wall_seconds": round(wall, 1),
        "notebooks_per_minute": round(len(kinds) / (wall / 60), 2),
        "rows": len(rows),
        "one_row_per_exercise_each": one_row_each,
        "compared_alone": not args.no_alone,
        "disagree_with_alone": disagree,
        "kinds": {
            kind: {
                "notebooks": len(points[kind]),
                "statuses": dict(per_kind[kind]),
                "points": sorted(set(points[kind])),
            }
            for kind in dict.fromkeys(kinds.values())
        },
        "target_seconds": 15 * 60,
        "target_met": wall <= 15 * 60 and one_row_each and not disagree,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "kinds"}, indent=1))
    if not args.no_readme:
        write_section("bench_grading", readme_section(result))
    return 0 if result["target_met"] else 1


def readme_section(result: dict) -> str:
    env = result["environment"]
    differing = result["disagree_with_alone"]
    same = result["notebooks"] - len(differing)
    alone = "not compared with grading each notebook alone in this run"
    if result["compared_alone"]:
        alone = f"each notebook then graded alone gave the same outcome for **{same} of {result['notebooks']}**"
        alone += f" (differing: {', '.join(differing)})" if differing else ""
    lines = [
        "<!-- bench_grading:start -->",
        "## Grading a class (`bench_grading.py`)",
        "",
        f"{result['notebooks']} generated chapter 04 notebooks of every kind, graded with `python -m attnbook.grading "
        f"--jobs {result['jobs']} {' '.join(result['limits'])}`; one run. Measured {env['date']} on {env['cpu']} "
        f"({env['cores']} cores), PyTorch {env['torch']}; load average {env['load_before']} before and "
        f"{env['load_after_class']} after the class. The machine is shared, so the time is pessimistic.",
        "",
        f"**{result['wall_seconds'] / 60:.1f} minutes** for the class ({result['notebooks_per_minute']:.1f} notebooks "
        f"a minute); {result['rows']} rows, one per notebook and exercise: "
        f"**{'every notebook once' if result['one_row_per_exercise_each'] else 'NOT every notebook once'}**; {alone}. "
        f"Target: at most 15 minutes, nothing lost: **{'met' if result['target_met'] else 'not met'}**.",
        "",
        "| kind | notebooks | passed | not attempted | failed | points |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for kind, k in result["kinds"].items():
        s = k["statuses"]
        lines.append(
            f"| {kind} | {k['notebooks']} | {s.get('passed', 0)} | {s.get('not attempted', 0)} | {s.get('failed', 0)} "
            f"| {', '.join(f'{p:g}' for p in k['points'])} |"
        )
    lines.append("<!-- bench_grading:end -->")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
