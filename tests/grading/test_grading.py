"""Grading learners' notebooks: the exercises come from the book, the outcomes from the grader alone.

The notebooks graded here are the exercise section of chapter 04 (its real exercises, stubs, solutions and
check cells, after a short setup cell): the solutions, the student version, honest wrong answers, and two
notebooks that try to forge their grades, each exercise in a different way.
"""

import csv
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
import torch
from attnbook.exercises import catalog, grade, replay

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "book" / "_ext"))

from attnbook_book import notebooks  # noqa: E402

CHAPTER = "04_queries_keys_values"
BOOK = catalog.load()[CHAPTER]
SETUP = "import math\nimport torch\nfrom attnbook.exercises import queries_keys_values as ex"
NOT_ATTEMPTED = "not attempted yet: replace the `raise NotImplementedError` with your code."


# --- the packaged list of exercises is the book's ---------------------------------------------------------


def test_the_installed_list_of_exercises_is_what_the_chapters_say():
    assert catalog.MANIFEST.read_text(encoding="utf-8") == notebooks.exercise_manifest(), (
        "lib/attnbook/exercises/chapters.json is out of date: run `make sync`"
    )
    chapters = catalog.load()
    assert list(chapters) == [p.stem for p in notebooks.chapter_sources()]
    per_chapter = {}  # a chapter in several pages has its exercises on its pages, three at least in all
    for name, chapter in chapters.items():
        per_chapter[name[:2]] = per_chapter.get(name[:2], 0) + len(chapter.exercises)
    assert all(n >= 3 for n in per_chapter.values()), per_chapter
    for name, chapter in chapters.items():
        nb = notebooks.to_ipynb(REPO / "chapters" / f"{name}.md")
        code = [c.source for c in nb.cells if c.cell_type == "code"]
        for e in chapter.exercises:
            module = __import__(f"attnbook.exercises.{chapter.module}", fromlist=["x"])
            assert callable(getattr(module, e.checker)), (name, e.checker)
            assert code.count(e.check) == 1, (name, e.check)
            stub = code[code.index(e.check) - 2]  # the stub cell, then the solution cell, then the check
            assert e.answer in stub, (name, e.answer)


def test_a_check_cell_must_call_its_checker_on_one_name():
    cells = [
        ("code", "from attnbook.exercises import masking as ex", []),
        ("markdown", "```{exercise} A\n:label: ex-a\n\ntext\n```", []),
        ("code", "ex.check_causal_mask(lambda T: None)", []),
    ]
    with pytest.raises(ValueError, match="single call ex.check_<name>"):
        catalog.parse_cells(cells)


# --- which chapter a notebook is ---------------------------------------------------------------------------


def test_the_chapter_comes_from_the_name_then_the_content():
    chapters = catalog.load()
    empty = nbformat.v4.new_notebook()
    for name in (
        "04_queries_keys_values.ipynb",
        "Copy of 04_queries_keys_values.ipynb",
        "alice-04_queries_keys_values (2).ipynb",
    ):
        assert grade.identify_chapter(empty, Path(name), chapters).chapter == CHAPTER
    importing = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("from attnbook.exercises import masking as ex")]
    )
    assert grade.identify_chapter(importing, Path("lab.ipynb"), chapters).chapter == "06_masking"
    checks = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(e.check) for e in chapters["11_modern_tweaks"].exercises]
    )
    assert grade.identify_chapter(checks, Path("homework.ipynb"), chapters).chapter == "11_modern_tweaks"
    assert grade.identify_chapter(empty, Path("x.ipynb"), chapters, chapter="06_masking").chapter == "06_masking"
    with pytest.raises(grade.ChapterUnknown, match="cannot tell which chapter homework.ipynb is"):
        grade.identify_chapter(empty, Path("homework.ipynb"), chapters)


def test_a_notebook_that_is_no_chapter_is_reported_not_graded(tmp_path):
    path = tmp_path / "homework.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")]), path)
    [row] = grade.grade_notebook(path)
    assert row.status == "failed" and row.message.startswith("not graded: cannot tell which chapter")


# --- a record is data, never code ---------------------------------------------------------------------------


def test_a_record_that_is_not_plain_data_is_refused():
    class Payload:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    buffer = io.BytesIO()
    torch.save({"format": replay.FORMAT, "answer": Payload(), "calls": [], "ended": ""}, buffer)
    with pytest.raises(replay.RecordMismatch, match="could not be read as plain data"):
        replay.load_record(buffer.getvalue())
    for record, what in [
        (
            {
                "format": replay.FORMAT,
                "answer": {"kind": "value", "value": {"~": "module", "tree": {"class": "os:system"}, "parameters": []}},
                "calls": [],
                "ended": "",
            },
            "outside torch.nn",
        ),
        (
            {"format": replay.FORMAT, "answer": {"kind": "value", "value": [1.0]}, "calls": [], "ended": ""},
            "an object of type list",
        ),
    ]:
        with pytest.raises(replay.RecordMismatch, match=what):
            replay.Replayer(record).answer()


# --- grading real exercises in kernels -----------------------------------------------------------------------


def exercise_section() -> nbformat.NotebookNode:
    """Chapter 04 from its "Exercises" heading on, after a setup cell: a short but real chapter notebook."""
    nb = notebooks.to_ipynb(REPO / "chapters" / f"{CHAPTER}.md")
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and "## Exercises" in c.source)
    nb.cells = [nbformat.v4.new_code_cell(SETUP)] + nb.cells[start:]
    return nb


def code_index(nb, predicate) -> int:
    return next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and predicate(c.source))


def set_answer(nb, exercise: int, source: str) -> None:
    """Replace the stub (the first code cell after the exercise's text) with ``source``."""
    title = BOOK.exercises[exercise].title
    block = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and f"{{exercise}} {title}" in c.source)
    stub = next(i for i in range(block + 1, len(nb.cells)) if nb.cells[i].cell_type == "code")
    nb.cells[stub].source = textwrap.dedent(source).strip()


def set_check(nb, exercise: int, source: str | None) -> None:
    """Replace the book's check cell of an exercise with ``source``, or delete it (None)."""
    i = code_index(nb, lambda s: s.strip() == BOOK.exercises[exercise].check)
    if source is None:
        del nb.cells[i]
    else:
        nb.cells[i].source = textwrap.dedent(source).strip()


def insert_before_check(nb, exercise: int, source: str) -> None:
    i = code_index(nb, lambda s: s.strip() == BOOK.exercises[exercise].check)
    nb.cells.insert(i, nbformat.v4.new_code_cell(textwrap.dedent(source).strip()))


NOT_SCALED = "def my_attention(q, k, v):\n    return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v"
TIMES_T = "def my_softmax(scores, temperature):\n    return torch.softmax(scores * temperature, dim=-1)"


def forging_in_the_kernel(nb, report: Path):
    """Each exercise forges its grade in the learner's kernel in a different way (``report``: the
    instructor's grade file, as if the learner had guessed where it goes)."""
    # 1. a wrong answer, and its check cell replaced by a printed tick
    set_answer(nb, 0, NOT_SCALED)
    set_check(nb, 0, 'print("\u2713 scaled dot-product attention: correct on every test case.")')
    # 2. not attempted; its check cell edited to check the library's function instead, and to display
    #    an object whose repr is the tick
    set_check(
        nb,
        1,
        """
        from attnbook.attention import scaled_dot_product_attention as right
        ex.check_masked_attention(right)
        class Tick:
            def __repr__(self):
                return "\u2713 masked attention: correct on every test case."
        Tick()""",
    )
    # 3. a wrong answer whose check cell is deleted
    set_answer(nb, 2, TIMES_T)
    set_check(nb, 2, None)
    # 4. a wrong answer; before its (unchanged) check cell, the checkers, Result and check_number are
    #    replaced, and fake grade and result files are written
    set_answer(nb, 3, "predicted_std = 64")
    insert_before_check(
        nb,
        3,
        f"""
        import json, pathlib
        import attnbook.exercises as E
        ex.check_score_std = lambda answer: E.Result("standard deviation", True, "correct.")
        E.check_number = lambda *a, **k: E.Result("standard deviation", True, "correct.")
        E.Result.__bool__ = lambda self: True
        for name in ("grades.csv", {str(report)!r}):
            pathlib.Path(name).write_text("notebook,chapter,exercise,status,message,flag\\nforged,,all,passed,,\\n")
        pathlib.Path("results.json").write_text(json.dumps({{"passed": 4}}))""",
    )
    return nb


def forging_in_the_checker(nb):
    """Each answer forges its grade from inside the process that runs the checker on it."""
    # 1. wrong; when called, it replaces check_function, Result, _difference and torch.allclose there
    set_answer(
        nb,
        0,
        """
        def my_attention(q, k, v):
            import torch
            import attnbook.exercises as E
            from attnbook.exercises import queries_keys_values as Q
            passed = lambda *a, **k: E.Result("scaled dot-product attention", True, "correct on every test case.")
            E.check_function = Q.check_function = passed
            E.Result.__bool__ = lambda self: True
            E._difference = lambda *a, **k: None
            torch.allclose = lambda *a, **k: True
            return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v""",
    )
    # 2. ends the checking "successfully" with sys.exit(0)
    set_answer(
        nb,
        1,
        """
        def my_masked_attention(q, k, v, mask):
            import sys
            print("\u2713 masked attention: correct on every test case.")
            sys.exit(0)""",
    )
    # 3. writes a forged record to every descriptor it has, then leaves with os._exit(0)
    set_answer(
        nb,
        2,
        """
        def my_softmax(scores, temperature):
            import io, os, torch
            forged = {"format": 1, "answer": {"kind": "callable", "type": "function", "repr": "f"},
                      "calls": [{"digest": "0" * 64, "result": torch.zeros(1)}], "ended": ""}
            buffer = io.BytesIO()
            torch.save(forged, buffer)
            for fd in range(3, 64):
                try:
                    os.write(fd, buffer.getvalue())
                except OSError:
                    pass
            os._exit(0)""",
    )
    # 4. a number that claims to equal anything, and to be 8
    set_answer(
        nb,
        3,
        """
        class Eight(float):
            def __eq__(self, other):
                return True
            def __float__(self):
                return 8.0
            def __repr__(self):
                return "8"
        predicted_std = Eight(64.0)""",
    )
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Every test notebook graded once by the command line, as an instructor would: {name: [rows]}."""
    folder = tmp_path_factory.mktemp("submissions")
    report = folder / "grades.csv"
    solutions = exercise_section()
    student = notebooks.student_version(solutions)
    wrong = notebooks.student_version(solutions)
    set_answer(wrong, 0, NOT_SCALED)
    set_answer(wrong, 3, "predicted_std = 64")
    made = {
        "solutions": solutions,
        "student": student,
        "wrong": wrong,
        "forging in the kernel": forging_in_the_kernel(notebooks.student_version(solutions), report),
        "forging in the checker": forging_in_the_checker(notebooks.student_version(solutions)),
    }
    paths = []
    for name, nb in made.items():
        paths.append(folder / f"{name} {CHAPTER}.ipynb")
        nbformat.write(nb, paths[-1])
    out = io.StringIO()
    from contextlib import redirect_stdout

    with redirect_stdout(out):
        assert grade.main([*map(str, paths), "--csv", str(report), "--timeout", "120"]) == 0
    rows = list(csv.DictReader(report.open()))
    by_name = {name: [r for r in rows if r["notebook"] == f"{name} {CHAPTER}.ipynb"] for name in made}
    assert len(rows) == sum(len(v) for v in by_name.values()) == 4 * len(made)  # no forged row in the report
    return by_name, out.getvalue()


def statuses(rows):
    return [r["status"] for r in rows]


def test_the_solutions_pass_every_exercise(graded):
    rows, printed = graded
    assert [r["exercise"] for r in rows["solutions"]] == [e.title for e in BOOK.exercises]
    assert statuses(rows["solutions"]) == ["passed"] * 4
    assert [r["message"] for r in rows["solutions"]] == ["correct on every test case."] * 3 + [
        "8 is right (expected 8)."
    ]
    assert not any(r["flag"] for r in rows["solutions"])
    assert f"solutions {CHAPTER}.ipynb: 4 of 4 exercises passed\n" in printed


def test_the_student_version_is_not_attempted(graded):
    rows, _ = graded
    assert statuses(rows["student"]) == ["not attempted"] * 4
    assert [r["message"] for r in rows["student"]] == [NOT_ATTEMPTED] * 3 + [
        "not attempted yet: replace the `...` with your answer."
    ]
    assert not any(r["flag"] for r in rows["student"])


def test_wrong_answers_fail_with_their_hints(graded):
    rows, _ = graded
    assert statuses(rows["wrong"]) == ["failed", "not attempted", "not attempted", "failed"]
    assert "the scores are not scaled" in rows["wrong"][0]["message"]
    assert "variance" in rows["wrong"][3]["message"]
    assert not any(r["flag"] for r in rows["wrong"])


def test_forging_in_the_kernel_is_failed_and_flagged(graded):
    rows, printed = graded
    tick, missing = grade.FORGED, grade.MISSING
    first, second, third, fourth = rows["forging in the kernel"]
    # 1. printed tick: the wrong answer is graded as wrong, the tick and the missing check are reported
    assert first["status"] == "failed" and "not scaled" in first["message"]
    assert tick in first["flag"] and missing in first["flag"]
    # 2. the check cell edited to check another function and to display a fake tick: not attempted, reported
    assert second["status"] == "not attempted" and tick in second["flag"] and grade.EDITED in second["flag"]
    # 3. deleted check cell: the exercise is still counted and graded
    assert third["status"] == "failed" and "divide" in third["message"] and third["flag"] == missing
    # 4. checkers, Result and check_number replaced, fake files written: graded as wrong
    assert fourth["status"] == "failed" and "variance" in fourth["message"] and fourth["flag"] == ""
    assert f"forging in the kernel {CHAPTER}.ipynb: 0 of 4 exercises passed, 3 flagged\n" in printed


def test_forging_in_the_checker_fails(graded):
    rows, printed = graded
    first, second, third, fourth = rows["forging in the checker"]
    # 1. check_function, Result, _difference and torch.allclose replaced where the checker ran it
    assert first["status"] == "failed" and "not scaled" in first["message"]
    assert first["flag"] == "tampering: the record holds calls the checker did not make"
    # 2. sys.exit(0) from inside the check
    assert second["status"] == "failed" and "your code raised SystemExit" in second["message"]
    # 3. a forged record written to every descriptor, then os._exit(0): the forgery does not match
    assert third["status"] == "failed" and third["flag"].startswith("tampering:")
    # 4. a float subclass whose __eq__ and __float__ lie is graded by the value it holds
    assert fourth["status"] == "failed" and "variance" in fourth["message"]
    assert f"forging in the checker {CHAPTER}.ipynb: 0 of 4 exercises passed" in printed


# --- the replayed checks equal the direct ones ---------------------------------------------------------------


def test_replayed_checks_give_the_checkers_own_outcomes_and_hints():
    """The checkers' own tests, with every check also recorded and replayed (tests/exercises/conftest.py): right
    answers, stubs and the usual wrong answers of functions, numbers, masks and classes."""
    files = [f"tests/exercises/test_exercises_{m}.py" for m in ("queries_keys_values", "masking", "lab_mini_gpt")]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files],
        cwd=REPO,
        env={**os.environ, "ATTNBOOK_REPLAY_CHECKS": "1"},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
