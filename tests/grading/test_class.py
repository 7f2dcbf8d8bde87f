"""Grading a class: results kept per notebook in a folder (by content hash and checkers' version), a rerun
grades only what is missing or out of date, the CSV and the feedback come from the folder, points come from
the exercise blocks or the instructor's overrides, and Ctrl-C leaves no process behind."""

import csv
import json
import shutil
import signal
import subprocess
import sys
import time
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

import nbformat
import psutil
import pytest
from attnbook.grading import catalog, grade
from attnbook.grading.catalog import ChapterExercises, Exercise
from submissions import BOOK, CHAPTER, NOT_SCALED, REPO, after_check, solution_lines, solutions, write

# --- points ----------------------------------------------------------------------------------------------------------


def test_an_exercise_block_sets_its_points_with_an_option_the_book_accepts():
    block = "```{exercise} Masks\n:class: dropdown points-3\n:label: ex-masks\n\nWrite it.\n```"
    colon = ":::{exercise} Heads\n:label: ex-heads\n:::"
    cells = [("code", "from attnbook.exercises import masking as ex", []), ("markdown", block + "\n\n" + colon, [])]
    cells += [("code", "ex.check_causal_mask(my_mask)", []), ("code", "ex.check_padding_mask(my_padding)", [])]
    _, exercises = catalog.parse_cells(cells)
    assert [(e.title, e.label, e.points, e.answer) for e in exercises] == [
        ("Masks", "ex-masks", 3.0, "my_mask"),
        ("Heads", "ex-heads", 1.0, "my_padding"),
    ]
    # that the book's build accepts the option: tests/book/test_chapter_map.py
    assert '"points"' not in catalog.dumps([ChapterExercises("06_masking", "masking", (exercises[1],))])
    assert '"points": 3.0' in catalog.dumps([ChapterExercises("06_masking", "masking", (exercises[0],))])


def test_the_instructor_overrides_points_by_label(tmp_path):
    chapters = grade.load_chapters(points={"ex-qkv-attention": 2.5})
    assert [e.points for e in chapters[CHAPTER].exercises] == [2.5, 1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="no exercise has the label ex-nowhere"):
        grade.load_chapters(points={"ex-nowhere": 1})
    (tmp_path / "points.json").write_text('{"ex-qkv-std": 0.5}')
    printed = StringIO()
    with redirect_stdout(printed):
        assert grade.main(["exercises", CHAPTER, "--points", str(tmp_path / "points.json")]) == 0
    lines = printed.getvalue().splitlines()
    assert lines[0] == CHAPTER and len(lines) == 1 + len(BOOK.exercises)
    assert lines[1].split() == ["ex-qkv-attention", "1", "point", "Scaled", "dot-product", "attention"]
    assert lines[4].split()[:3] == ["ex-qkv-std", "0.5", "points"]


def test_the_old_command_is_an_alias_for_one_release():
    run = subprocess.run(
        [sys.executable, "-m", "attnbook.exercises.grade", "exercises", CHAPTER], capture_output=True, text=True
    )
    assert run.returncode == 0 and run.stdout.splitlines()[1].split()[0] == "ex-qkv-attention"
    assert "python -m attnbook.exercises.grade is now python -m attnbook.grading" in run.stderr


# --- which page of a chapter ----------------------------------------------------------------------------------------


def test_pages_that_share_a_checker_module_are_told_apart():
    def page(name, titles):
        exercises = tuple(Exercise(t, f"ex-{t}", f"check_{t}", f"my_{t}", f"ex.check_{t}(my_{t})") for t in titles)
        return ChapterExercises(name, "masking", exercises)

    chapters = {"06_1_causal": page("06_1_causal", ["causal", "leak"]), "06_2_padding": page("06_2_padding", ["pad"])}
    chapters["06_masking"] = ChapterExercises("06_masking", "", ())  # the chapter's first page, without exercises
    code = nbformat.v4.new_code_cell
    importing = [code("from attnbook.exercises import masking as ex")]
    by_checks = nbformat.v4.new_notebook(cells=importing + [code("ex.check_pad(my_pad)")])
    by_title = nbformat.v4.new_notebook(cells=importing + [nbformat.v4.new_markdown_cell("```{exercise} leak\n```")])
    assert grade.identify_chapter(by_checks, Path("homework.ipynb"), chapters).chapter == "06_2_padding"
    assert grade.identify_chapter(by_title, Path("homework.ipynb"), chapters).chapter == "06_1_causal"
    empty = nbformat.v4.new_notebook()
    assert grade.identify_chapter(empty, Path("Copy of 06_2_padding.ipynb"), chapters).chapter == "06_2_padding"
    with pytest.raises(grade.ChapterUnknown, match="cannot tell which chapter"):
        grade.identify_chapter(nbformat.v4.new_notebook(cells=importing), Path("homework.ipynb"), chapters)
    with pytest.raises(grade.ChapterUnknown, match="06_masking.ipynb is 06_masking, which has no exercises"):
        grade.identify_chapter(by_checks, Path("06_masking.ipynb"), chapters)


# --- a class in a results folder --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """Three learners' notebooks of the same name in folders of their own (carol's is a copy of alice's),
    and the chapter's exercises from a folder in which the first exercise is worth 3 points."""
    root = tmp_path_factory.mktemp("course")
    book = solutions()
    block = next(c for c in book.cells if c.cell_type == "markdown" and "{exercise} Scaled" in c.source)
    block.source = block.source.replace(":label: ex-qkv-attention", ":label: ex-qkv-attention\n:class: points-3")
    write(root / "book", CHAPTER, book)
    paths = [
        write(root / "alice", CHAPTER, solutions()),
        write(root / "bob", CHAPTER, after_check(solutions(), 0, NOT_SCALED, before=True)),
        root / "carol" / f"{CHAPTER}.ipynb",
    ]
    paths[2].parent.mkdir()
    shutil.copyfile(paths[0], paths[2])
    return root, paths


def grade_course(course, *extra):
    root, paths = course
    command = [*map(str, paths), "--chapters", str(root / "book"), "--csv", str(root / "grades.csv")]
    command += ["-o", str(root / "out"), "--jobs", "2", "--timeout", "120", "--no-progress", *extra]
    printed = StringIO()
    with redirect_stdout(printed):
        assert grade.main(command) == 0
    return list(csv.DictReader((root / "grades.csv").open())), printed.getvalue()


def by_notebook(rows):
    return {name: [r for r in rows if r["notebook"] == name] for name in dict.fromkeys(r["notebook"] for r in rows)}


def result_files(root):
    return sorted((root / "out" / "results" / CHAPTER).glob("*.json"))


def test_a_class_is_graded_once_into_the_folder_and_reported_from_it(course):
    root, paths = course
    rows, printed = grade_course(course)
    notebooks = by_notebook(rows)
    assert list(notebooks) == [f"{name}/{CHAPTER}.ipynb" for name in ("alice", "bob", "carol")]
    for mine in notebooks.values():  # every notebook once, every exercise once
        assert [r["exercise"] for r in mine] == [e.title for e in BOOK.exercises]
    alice, bob, carol = notebooks.values()
    assert [(r["points"], r["max_points"]) for r in alice] == [("3", "3"), ("1", "1"), ("1", "1"), ("1", "1")]
    assert {(r["total"], r["max_total"]) for r in alice} == {("6", "6")}
    assert [r["status"] for r in bob] == ["failed", "passed", "passed", "passed"]
    assert "not scaled" in bob[0]["message"] and {r["total"] for r in bob} == {"3"}
    assert [{k: v for k, v in r.items() if k != "notebook"} for r in carol] == [
        {k: v for k, v in r.items() if k != "notebook"} for r in alice
    ]
    assert len(result_files(root)) == 2  # alice's and carol's notebooks are the same bytes
    assert f"bob/{CHAPTER}.ipynb: 3 of 4 exercises passed\n  3 of 6 points\n" in printed
    # one feedback page per learner, with outcomes, points and hints, and no line of the solutions
    pages = {name: (root / "out" / "feedback" / name / f"{CHAPTER}.md").read_text() for name in ("alice", "bob")}
    assert "**3 of 6 points**, 3 of 4 exercises passed" in pages["bob"]
    assert "| 1 | Scaled dot-product attention | failed | 0 of 3 |" in pages["bob"]
    assert "The scores are not scaled" in pages["bob"]
    assert "**6 of 6 points**" in pages["alice"] and (root / "out" / "feedback" / "carol").is_dir()
    leaked = [line for line in solution_lines() for page in pages.values() if line in page]
    assert not leaked


def test_a_rerun_grades_only_what_has_no_result_and_the_csv_comes_from_the_folder(course):
    root, _ = course
    alice_file, bob_file = sorted(result_files(root), key=lambda p: "not scaled" in p.read_text())
    assert "not scaled" in bob_file.read_text()
    bob_file.unlink()  # as if grading had been interrupted before bob's notebook
    stored = json.loads(alice_file.read_text())
    stored["exercises"][1]["message"] = "as stored in the folder"
    alice_file.write_text(json.dumps(stored))
    before = alice_file.stat().st_mtime_ns
    rows, _ = grade_course(course)
    assert bob_file.exists() and alice_file.stat().st_mtime_ns == before
    notebooks = by_notebook(rows)
    assert notebooks[f"alice/{CHAPTER}.ipynb"][1]["message"] == "as stored in the folder"
    assert notebooks[f"carol/{CHAPTER}.ipynb"][1]["message"] == "as stored in the folder"
    assert "not scaled" in notebooks[f"bob/{CHAPTER}.ipynb"][0]["message"]
    # --regrade grades every notebook again
    rows, _ = grade_course(course, "--regrade")
    assert alice_file.stat().st_mtime_ns > before
    assert by_notebook(rows)[f"alice/{CHAPTER}.ipynb"][1]["message"] == "correct on every test case."


def test_other_checkers_or_points_grade_again(course):
    root, _ = course
    (root / "points.json").write_text(json.dumps({"ex-qkv-mask": 2}))
    versions = {json.loads(p.read_text())["version"] for p in result_files(root)}
    rows, _ = grade_course(course, "--points", str(root / "points.json"))
    assert {r["max_total"] for r in rows} == {"7"}
    assert {json.loads(p.read_text())["version"] for p in result_files(root)}.isdisjoint(versions)


# --- Ctrl-C -----------------------------------------------------------------------------------------------------------

SPINS = "def my_attention(q, k, v):\n    while True:\n        pass"


def command_line(process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # ended meanwhile
        return ""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_class_leaves_no_process_behind_and_no_half_result(tmp_path, signum):
    """One notebook spins in its kernel, the other in the process that checks it; the grader is stopped
    while both spin."""
    paths = [
        write(tmp_path, f"kernel {CHAPTER}", after_check(solutions(), 0, "while True:\n    pass")),
        write(tmp_path, f"check {CHAPTER}", after_check(solutions(), 0, SPINS, before=True)),
    ]
    command = [sys.executable, "-m", "attnbook.grading", *map(str, paths), "-o", str(tmp_path / "out")]
    grader = subprocess.Popen([*command, "--timeout", "300", "--no-progress"], cwd=REPO, stderr=subprocess.PIPE)
    me = psutil.Process(grader.pid)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # a kernel, the recording server and its forked check, all at once
        running = me.children(recursive=True)
        kernels = [p for p in running if "ipykernel_launcher" in command_line(p)]
        checks = [p for p in running if "attnbook.grading.sandbox" in command_line(p) and p.ppid() != grader.pid]
        if kernels and checks:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the grader never ran a kernel and a check at once")
    running = me.children(recursive=True)
    time.sleep(0.5)
    grader.send_signal(signum)
    stopped = time.monotonic()
    _, stderr = grader.communicate(timeout=30)
    assert time.monotonic() - stopped < 10
    assert grader.returncode == 130
    assert b"interrupted: 0 of 2 notebooks have a result" in stderr
    time.sleep(0.2)
    left = [command_line(p) for p in running if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.*"))
