"""The Gradescope autograder: the bundle's layout, and its run_autograder, run in folders laid out like
Gradescope's (``source/``, ``submission/``, ``results/``), on an honest, a wrong and a tampered notebook.

The format checked is Gradescope's documented one (https://gradescope-autograders.readthedocs.io/en/latest/specs/,
"Output format"): a top-level ``score`` and ``tests``, each test with ``name``, ``number``, ``score``,
``max_score``, ``status`` ("passed" or "failed"), ``output`` and ``visibility``."""

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

import pytest
from attnbook.grading import grade
from submissions import BOOK, CHAPTER, NOT_SCALED, after_check, solutions, write


def _toml(text: str) -> dict:
    """A TOML file read with tomllib (Python 3.11 and later; the library's tests run at Python 3.10 too)."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11's")
    return tomllib.loads(text)


TOP_LEVEL = {"score", "execution_time", "output", "output_format", "test_output_format", "test_name_format"}
TOP_LEVEL |= {"visibility", "stdout_visibility", "extra_data", "tests", "leaderboard"}
TEST = {"score", "max_score", "status", "name", "name_format", "number", "output", "output_format", "tags"}
TEST |= {"visibility", "extra_data"}
VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}

FORGE = """\
import json, os, time
results = os.environ.get("AUTOGRADER_ROOT", "/autograder") + "/results/results.json"
forged = json.dumps({"score": 100, "tests": []})
open(results, "w").write(forged)
if os.fork() == 0:  # a daemon that writes the forged results again once the grader is done
    os.setsid()
    if os.fork() == 0:
        time.sleep(3)
        open(results, "w").write(forged)
    os._exit(0)
import attnbook.exercises as E
predicted_std = 64
ex.check_score_std = lambda answer: E.Result("standard deviation", True, "correct.")
print("\\u2713 scaled dot-product attention: correct on every test case.")
"""


def check_format(report: dict) -> None:
    """``report`` is a results.json as Gradescope documents it, its score the sum of its tests'."""
    assert set(report) <= TOP_LEVEL, set(report) - TOP_LEVEL
    assert isinstance(report["score"], (int, float)) and isinstance(report["output"], str)
    assert report["visibility"] in VISIBILITY and report["stdout_visibility"] in VISIBILITY
    for test in report["tests"]:
        assert set(test) <= TEST, set(test) - TEST
        assert isinstance(test["name"], str) and isinstance(test["number"], str)
        assert all(isinstance(test[k], (int, float)) for k in ("score", "max_score"))
        assert test["status"] in ("passed", "failed") and isinstance(test["output"], str)
        assert test["visibility"] in VISIBILITY
    assert report["score"] == sum(t["score"] for t in report["tests"])


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("autograder")
    with redirect_stdout(StringIO()):
        assert grade.main(["autograder", CHAPTER, "-o", str(out), "--timeout", "60", "--notebook-timeout", "120"]) == 0
    return out


def test_the_bundle_has_gradescopes_layout(bundle):
    with zipfile.ZipFile(bundle / "autograder.zip") as zf:
        names = zf.namelist()
        modes = {i.filename: i.external_attr >> 16 for i in zf.infolist()}
        settings = json.loads(zf.read("autograder.json"))
        pyproject = _toml(zf.read("attnbook/pyproject.toml").decode())
        setup = zf.read("setup.sh").decode()
    assert {"setup.sh", "run_autograder", "autograder.json"} <= set(names)  # at the root of the zip
    assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111
    for path in ("grading/gradescope.py", "exercises/queries_keys_values.py", "exercises/chapters.json"):
        assert f"attnbook/lib/attnbook/{path}" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".zip")]
    assert settings["chapter"] == CHAPTER and settings["limits"]["cell_timeout"] == 60
    assert pyproject["project"]["name"] == "attnbook"
    assert any(d.startswith("torch") for d in pyproject["project"]["dependencies"])
    assert any(d.startswith("cloudpickle") for d in pyproject["project"]["optional-dependencies"]["grade"])
    assert 'pip install "./attnbook[grade]"' in setup and "download.pytorch.org/whl/cpu" in setup


def test_run_autograder_writes_gradescopes_results(bundle, tmp_path):
    submissions = {
        "honest": solutions(),
        "wrong": after_check(
            after_check(solutions(), 0, NOT_SCALED, before=True), 3, "predicted_std = 64", before=True
        ),
        "tampered": after_check(after_check(solutions(), 0, NOT_SCALED, before=True), 3, FORGE, before=True),
    }
    runs = {}
    for name, nb in submissions.items():
        root = tmp_path / name
        with zipfile.ZipFile(bundle / "autograder.zip") as zf:
            zf.extractall(root / "source")
        shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
        (root / "run_autograder").chmod(0o755)
        write(root / "submission", f"Copy of my {name} work", nb)  # graded as the bundle's chapter
        (root / "results").mkdir()
        env = dict(os.environ, AUTOGRADER_ROOT=str(root), PYTHONPATH=str(root / "source" / "attnbook" / "lib"))
        env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # python3 with the grade extra
        runs[name] = subprocess.Popen([str(root / "run_autograder")], env=env, stdout=subprocess.PIPE, cwd="/")
    for run in runs.values():
        stdout, _ = run.communicate(timeout=600)
        assert run.returncode == 0, stdout.decode()[-2000:]
    time.sleep(4)  # the tampered notebook's daemon would have written by now
    reports = {name: json.loads((tmp_path / name / "results" / "results.json").read_text()) for name in submissions}
    for report in reports.values():
        check_format(report)
        assert [t["name"] for t in report["tests"]] == [e.title for e in BOOK.exercises]
        assert [t["max_score"] for t in report["tests"]] == [1.0] * 4
    honest, wrong, tampered = reports.values()
    assert honest["score"] == 4 and {t["status"] for t in honest["tests"]} == {"passed"}
    assert honest["output"] == "Graded notebook: Copy of my honest work.ipynb"
    assert wrong["score"] == 2 and [t["score"] for t in wrong["tests"]] == [0, 1, 1, 0]
    assert "not scaled" in wrong["tests"][0]["output"] and "variance" in wrong["tests"][3]["output"]
    assert tampered["score"] == 2 and [t["status"] for t in tampered["tests"]][::3] == ["failed", "failed"]
    assert "Noticed by the grader: the notebook displays a tick" in tampered["tests"][3]["output"]
