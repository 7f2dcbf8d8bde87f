"""pytest plugin on top of nbval: execute each chapter once and keep what the execution produced.

Use with ``pytest -p attnbook_book.pytest_plugin --nbval-lax --nbval-current-env chapters/*.ipynb``.

- ``--executed-dir DIR``: write each executed notebook, with its outputs and its widget state, to
  ``DIR/chapters/NAME.ipynb``; the book is built from these (no second execution).
- ``--times-report FILE``: write each chapter's execution time (seconds) to a JSON file.
- With pytest-xdist (``-n 2 --dist loadfile``) each notebook runs whole on one worker; every worker adds its
  chapters' times to the report.
- ``--student``: also execute each chapter's student version (solutions removed). The student notebook
  is the full notebook minus its solution cells, so both share every cell before the first solution;
  the student's remaining cells run in the same kernel right there, before the full notebook goes on.
  That is exactly a fresh run of the student notebook, at the cost of its exercise cells only.
"""

from __future__ import annotations

import copy
import fcntl
import json
import time
from pathlib import Path
from queue import Empty

import nbformat
import pytest

from . import notebooks

_WIDGET_STATE_CODE = """\
import json as _json, sys as _sys
if "ipywidgets" in _sys.modules:
    print(_json.dumps(_sys.modules["ipywidgets"].Widget.get_manager_state(drop_defaults=True)))
"""
WIDGET_STATE_MIME = "application/vnd.jupyter.widget-state+json"


def pytest_addoption(parser):
    group = parser.getgroup("attnbook", "attnbook notebook execution")
    group.addoption("--executed-dir", default=None, help="write executed notebooks under this folder")
    group.addoption("--times-report", default=None, help="write chapter execution times to this JSON file")
    group.addoption("--student", action="store_true", help="also execute the student version of each notebook")


def _is_cell(item) -> bool:
    return type(item).__name__ == "IPyNbCell"


def _record(item) -> dict:
    stats = item.config._attnbook_stats  # type: ignore[attr-defined]
    return stats.setdefault(item.parent.path, {"seconds": 0.0, "student_seconds": 0.0, "cells": 0, "failed": False})


def pytest_configure(config):
    config._attnbook_stats = {}
    config._attnbook_started = time.strftime("%Y-%m-%d %H:%M:%S")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    if not config.getoption("--student"):
        return
    from collections import defaultdict

    from nbval.plugin import IPyNbCell, find_comment_markers, find_metadata_tags

    out, by_parent = [], {}
    for item in items:
        if _is_cell(item):
            by_parent.setdefault(item.parent, []).append(item)
    done = set()
    for item in items:
        parent = getattr(item, "parent", None)
        if not _is_cell(item) or parent in done:
            out.append(item)
            continue
        cells = by_parent[parent]
        first_solution = next((i for i in cells if notebooks.is_solution_cell(i.cell)), None)
        if first_solution is None or item is not first_solution:
            out.append(item)
            continue
        # the student's cells from this point on, executed before the full notebook's solution cells
        student = notebooks.student_version(parent.nb)
        student_code = [c for c in student.cells if c.cell_type == "code"]
        shared = cells.index(first_solution)  # code cells before the first solution are the same in both
        for offset, cell in enumerate(student_code[shared:]):
            number = shared + offset
            options = defaultdict(bool, find_metadata_tags(cell.metadata))
            options.update(dict(find_comment_markers(cell.source)))
            options.setdefault("check", False)
            out.append(
                IPyNbCell.from_parent(
                    parent,
                    name=f"student version, Cell {number}",
                    cell_num=number,
                    cell=copy.deepcopy(cell),
                    options=options,
                )
            )
            out[-1]._attnbook_student = True
        out.append(item)
        done.add(parent)
    items[:] = out


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    start = time.perf_counter()  # the first cell's setup starts the kernel: part of the chapter's time
    yield
    if _is_cell(item) and not getattr(item, "_attnbook_student", False):
        _record(item)["seconds"] += time.perf_counter() - start


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    start = time.perf_counter()
    outcome = yield
    if not _is_cell(item):
        return
    record = _record(item)
    elapsed = time.perf_counter() - start
    if getattr(item, "_attnbook_student", False):
        record["student_seconds"] += elapsed
        return
    record["seconds"] += elapsed
    record["cells"] += 1
    if outcome.excinfo is not None:
        record["failed"] = True
    item.cell.outputs = [nbformat.from_dict(dict(o)) for o in (item.test_outputs or [])]
    record["count"] = record.get("count", 0) + 1
    item.cell.execution_count = record["count"]


def _kernel_stdout(kernel, code: str, timeout: float = 60.0) -> str:
    msg_id = kernel.execute_cell_input(code, allow_stdin=False)
    text = []
    while True:
        try:
            msg = kernel.get_message(stream="iopub", timeout=timeout)
        except Empty:
            break
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
            text.append(msg["content"]["text"])
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    return "".join(text)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    """After a notebook's last cell, and before nbval stops its kernel: save the executed notebook."""
    if not _is_cell(item) or (nextitem is not None and getattr(nextitem, "parent", None) is item.parent):
        return
    executed_dir = item.config.getoption("--executed-dir")
    if not executed_dir:
        return
    nb = item.parent.nb
    kernel = item.parent.kernel
    if kernel is not None and kernel.is_alive():
        state = _kernel_stdout(kernel, _WIDGET_STATE_CODE).strip()
        if state:
            nb.metadata["widgets"] = {WIDGET_STATE_MIME: json.loads(state)}
    target = Path(executed_dir) / "chapters" / item.parent.path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)


def pytest_sessionfinish(session, exitstatus):
    report = session.config.getoption("--times-report")
    stats = session.config._attnbook_stats
    if not report or not stats:
        return
    path = Path(report)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:  # parallel workers add their chapters one at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        previous = json.loads(path.read_text()) if path.exists() else {}
        for nb_path, record in stats.items():
            previous[nb_path.stem] = {
                "seconds": round(record["seconds"], 2),
                "student_seconds": round(record["student_seconds"], 2),
                "cells": record["cells"],
                "passed": not record["failed"],
                "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
            }
        path.write_text(json.dumps(dict(sorted(previous.items())), indent=2) + "\n")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    rows = {p.stem: r for p, r in config._attnbook_stats.items()}
    report = config.getoption("--times-report")
    if not rows and report and Path(report).exists() and config.getoption("numprocesses", None):
        # the workers ran the notebooks and wrote the report: this run's rows
        rows = {
            name: {**r, "failed": not r["passed"]}
            for name, r in json.loads(Path(report).read_text()).items()
            if r["measured"] >= config._attnbook_started
        }
    if not rows:
        return
    terminalreporter.section("chapter execution times")
    for name, record in sorted(rows.items()):
        status = "ok" if not record["failed"] else "FAILED"
        terminalreporter.write_line(
            f"{name:45s} {record['seconds']:7.1f} s  ({record['cells']} cells, {status}; "
            f"student version's own cells {record['student_seconds']:.1f} s)"
        )
