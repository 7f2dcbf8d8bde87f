"""Bounded grading: a notebook's time, output and memory are limited, a dead kernel is noticed at once,
everything a notebook starts is stopped, and a notebook that stops early is graded with the answers taken
before the stop. The limits are short so that these tests take seconds."""

import csv
import os
import signal
import threading
import time
from contextlib import redirect_stdout
from io import StringIO

import cloudpickle
import psutil
import pytest
from attnbook.grading import grade
from attnbook.grading.kernel import Cell, Limits, run_cells
from submissions import CHAPTER, after_check, solutions, write

SHORT = Limits(cell_timeout=3, notebook_timeout=60, max_output=2**20, max_memory=2**30)


def answer(run, index):
    """The value an answer cell took out of the kernel."""
    taken = run.answers[index]
    assert taken["status"] == "ok", taken
    return cloudpickle.loads(taken["pickle"])


# --- the kernel, without the checks ---------------------------------------------------------------------------


def test_output_is_read_up_to_the_limit_and_the_graders_memory_stays_flat(tmp_path):
    cells = [
        Cell("import time\nfor _ in range(60):\n    print('y' * 50_000)\n    time.sleep(0.02)", 1),  # 3 MB in pieces
        Cell("print('x' * 40_000_000)", 2),  # 40 MB in one message
        Cell("time.sleep(1)\nprint('\u2713 a tick displayed after it')", 3),  # read again
        Cell("x = 42", 4),
        Cell(answer="x"),
    ]
    me = psutil.Process()
    base, peak, done = me.memory_info().rss, [], threading.Event()

    def watch():
        while not done.is_set():
            peak.append(me.memory_info().rss)
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        run = run_cells(cells, tmp_path, SHORT)
    finally:
        done.set()
        watcher.join()
    assert run.stopped == ""
    assert answer(run, 4) == 42
    assert run.notes == [
        "code cell 1 printed more than 1 MB; the rest of its output was not read",
        "a message of more than 1 MB was refused while code cell 2 ran; it was not read",
    ]
    assert run.ticks == {2}
    assert max(peak) - base < 20 * 2**20, f"the grader grew by {(max(peak) - base) / 2**20:.0f} MB"


def test_memory_over_the_limit_fails_the_cell_and_the_notebook_goes_on(tmp_path):
    cells = [
        Cell("big = bytearray(3 * 2**30)", 1),
        Cell("import numpy\narray = numpy.ones(2**29)", 2),  # 4 GB of float64
        Cell("x = 'still here'", 3),
        Cell(answer="x"),
    ]
    run = run_cells(cells, tmp_path, SHORT)
    assert run.stopped == ""
    assert run.notes == [
        "code cell 1 ran out of memory (the limit is 1 GB)",
        "code cell 2 ran out of memory (the limit is 1 GB)",
    ]
    assert answer(run, 3) == "still here"


def test_a_kernel_killed_from_outside_is_noticed_at_once(tmp_path):
    pid_file = tmp_path / "pid"
    cells = [
        Cell("x = 1", 1),
        Cell(answer="x"),
        Cell(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(100)", 2),
        Cell("y = 2", 3),
        Cell(answer="y"),
    ]
    killed = []

    def kill_when_sleeping():
        while not pid_file.exists() or not pid_file.read_text():
            time.sleep(0.05)
        time.sleep(0.5)
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        killed.append(time.monotonic())

    killer = threading.Thread(target=kill_when_sleeping)
    killer.start()
    run = run_cells(cells, tmp_path, Limits(cell_timeout=60, notebook_timeout=120))
    noticed = time.monotonic()
    killer.join()
    assert noticed - killed[0] < 2.0, f"noticed {noticed - killed[0]:.1f} s after the kill"
    assert run.stopped.startswith("the kernel died at code cell 2 after ") and "SIGKILL" in run.stopped
    assert run.stopped_at == 2
    assert answer(run, 1) == 1 and 4 not in run.answers


STARTS_PROCESSES = """\
import os, signal, subprocess, time
child = subprocess.Popen(["sleep", "1000"])  # in the kernel's process group
if os.fork() == 0:  # a daemon that leaves the group and its parent
    os.setsid()
    if os.fork() == 0:
        open({daemon!r}, "w").write(str(os.getpid()))
        time.sleep(1000)
    os._exit(0)
open({pids!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:
    pass
"""


def test_a_cell_that_ignores_interrupts_is_killed_with_everything_it_started(tmp_path):
    pids, daemon = tmp_path / "pids", tmp_path / "daemon"
    cells = [
        Cell("while True:\n    pass", 1),  # interrupted: the notebook goes on
        Cell(STARTS_PROCESSES.format(pids=str(pids), daemon=str(daemon)), 2),
        Cell("x = 1", 3),
    ]
    start = time.monotonic()
    run = run_cells(cells, tmp_path, Limits(cell_timeout=2, notebook_timeout=60))
    assert time.monotonic() - start < 30
    assert run.notes == ["code cell 1 ran longer than the 2 s allowed for a cell and was interrupted"]
    assert run.stopped.startswith("the notebook stopped at code cell 2 after ")
    assert run.stopped.endswith("the cell ran longer than the 2 s allowed for a cell and did not stop when interrupted")
    started = [*map(int, pids.read_text().split()), int(daemon.read_text())]  # kernel, its child, the daemon
    assert len(started) == 3
    time.sleep(0.2)
    for pid in started:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid


def test_only_regular_files_of_bounded_size_are_read_as_answers(tmp_path):
    from attnbook.grading import kernel

    def status(name, text='{"status": "ok"}'):
        (tmp_path / f"{name}.json").write_text(text)
        return tmp_path / name

    (tmp_path / "fine.pkl").write_bytes(cloudpickle.dumps(42))
    assert cloudpickle.loads(kernel._read_answer(status("fine"))["pickle"]) == 42
    os.mkfifo(tmp_path / "pipe.pkl")  # reading it would wait for a writer forever
    (tmp_path / "link.pkl").symlink_to("/dev/zero")  # reading it would never end
    with open(tmp_path / "huge.pkl", "wb") as handle:
        handle.truncate(kernel.MAX_ANSWER_BYTES + 1)
    for name in ("pipe", "link", "huge"):
        answer = kernel._read_answer(status(name))
        assert answer["status"] == "error" and "pickle" not in answer, (name, answer)
    assert kernel._read_answer(status("forged", '{"status": "passed"}'))["status"] == "error"
    assert kernel._read_answer(tmp_path / "never-written") == {}


# --- a class with every kind of stop, graded in parallel ------------------------------------------------------------

ENDLESS = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"


@pytest.fixture(scope="module")
def stopped_early(tmp_path_factory):
    """Chapter 04 notebooks that stop or misbehave after an exercise, graded by the command line two at a
    time, with a whole-notebook limit shorter than the per-cell one: {name: rows of the CSV}, seconds."""
    folder = tmp_path_factory.mktemp("class")
    made = {
        "endless": after_check(solutions(), 1, ENDLESS),
        "dies": after_check(solutions(), 0, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"),
        "prints": after_check(solutions(), 0, "print('x' * 40_000_000)"),
        "memory": after_check(solutions(), 2, "hoard = bytearray(3 * 2**30)"),
    }
    paths = [write(folder, f"{name} {CHAPTER}", nb) for name, nb in made.items()]
    (folder / f"broken {CHAPTER}.ipynb").write_text('{"cells": [')  # a notebook cut short
    paths.append(folder / f"broken {CHAPTER}.ipynb")
    report = folder / "grades.csv"
    limits = ["--timeout", "60", "--notebook-timeout", "25", "--max-output", "1", "--max-memory", "1.5"]
    start = time.monotonic()
    with redirect_stdout(StringIO()):
        assert grade.main([*map(str, paths), "--csv", str(report), "--jobs", "2", "--no-progress", *limits]) == 0
    seconds = time.monotonic() - start
    rows = list(csv.DictReader(report.open()))
    return {
        name: [r for r in rows if r["notebook"] == f"{name} {CHAPTER}.ipynb"] for name in [*made, "broken"]
    }, seconds


def statuses(rows):
    return [r["status"] for r in rows]


def test_an_endless_loop_is_killed_and_the_answers_before_it_are_graded(stopped_early):
    rows, seconds = stopped_early
    assert statuses(rows["endless"]) == ["passed", "passed", "failed", "failed"]
    message = rows["endless"][2]["message"]
    assert message.startswith("not reached: the notebook stopped at code cell ")
    assert message.endswith("it reached the limit of 25 s for the whole notebook")
    assert [r["points"] for r in rows["endless"]] == ["1", "1", "0", "0"] and rows["endless"][0]["total"] == "2"
    assert seconds < 90


def test_a_dead_kernel_stops_the_notebook_not_the_class(stopped_early):
    rows, _ = stopped_early
    assert statuses(rows["dies"]) == ["passed", "failed", "failed", "failed"]
    assert rows["dies"][1]["message"].startswith("not reached: the kernel died at code cell ")
    assert "SIGKILL" in rows["dies"][1]["message"]


def test_a_huge_print_and_a_memory_hog_are_bounded_and_graded(stopped_early):
    rows, _ = stopped_early
    assert statuses(rows["prints"]) == ["passed"] * 4
    assert statuses(rows["memory"]) == ["passed"] * 4


def test_a_file_that_is_not_a_notebook_fails_every_exercise_of_its_chapter(stopped_early):
    rows, _ = stopped_early
    assert statuses(rows["broken"]) == ["failed"] * 4
    assert all(r["message"].startswith("not graded: the file is not a notebook") for r in rows["broken"])
    assert rows["broken"][0]["max_total"] == "4"
