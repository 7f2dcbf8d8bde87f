"""The chapter sources: paired notebooks in sync, the shape of a chapter, and the student version."""

import re

import nbformat
import pytest
import yaml
from attnbook_book import notebooks

REPO = notebooks.REPO
SOURCES = notebooks.chapter_sources()
IDS = [p.stem for p in SOURCES]


def test_every_chapter_is_in_the_toc_and_every_toc_file_exists():
    toc = notebooks.toc_files()
    chapters = [e for e in toc if e.startswith("chapters/")]
    assert sorted(chapters) == sorted(f"chapters/{p.stem}" for p in SOURCES)
    assert chapters == sorted(chapters), "chapters must appear in the toc in file-number order"
    for entry in toc:
        assert any((REPO / f"{entry}{suffix}").is_file() for suffix in (".md", ".ipynb")), f"{entry} does not exist"


@pytest.mark.parametrize("md", SOURCES, ids=IDS)
def test_paired_notebook_is_in_sync_and_has_no_outputs(md):
    ipynb = md.with_suffix(".ipynb")
    assert ipynb.is_file(), f"{ipynb.name} is missing: run `make sync`"
    paired = nbformat.read(ipynb, as_version=4)
    assert notebooks.cell_signature(paired) == notebooks.cell_signature(notebooks.to_ipynb(md)), (
        f"{ipynb.name} differs from {md.name}: run `make sync`"
    )
    assert all(not c.get("outputs") for c in paired.cells if c.cell_type == "code")


@pytest.mark.parametrize("md", SOURCES, ids=IDS)
def test_chapter_shape(md):
    nb = notebooks.read_md(md)
    text = md.read_text()
    code = [c for c in nb.cells if c.cell_type == "code"]
    setup = code[0].source
    url = yaml.safe_load((REPO / "_config.yml").read_text())["repository"]["url"]
    # extras allowed (attnbook[export]); the address written out, or held in REPO so that the cell fits 79 columns
    package = r"attnbook(\[[a-z,]+\])? @ git\+"
    installs = re.search(package + re.escape(url), setup) or (
        re.search(rf'^\s*REPO = "{re.escape(url)}"$', setup, re.M) and re.search(rf'f"{package}\{{REPO\}}"', setup)
    )
    assert '"google.colab" in sys.modules' in setup and installs, (
        "the first code cell must be the setup cell that installs the package in Colab"
    )
    assert re.search(r"^\(ch-[a-z0-9-]+\)=\n# ", text, re.M), "a chapter starts with a (ch-...)= label and its title"
    assert "Learning goals" in text
    assert not re.search(r"^[!%]pip", text, re.M) and "filterwarnings" not in text
    assert sum("assert" in c.source for c in code) >= 3, "a chapter checks its computations with asserts"
    exercises = re.findall(r"^```\{exercise\}", text, re.M)
    assert len(exercises) >= 3, f"{md.name} has {len(exercises)} exercises, at least 3 are needed"
    assert len(re.findall(r"^```\{solution-start\}", text, re.M)) == len(exercises)


@pytest.mark.parametrize("md", SOURCES, ids=IDS)
def test_numbers_in_prose_are_glued_from_cells(md):
    nb = notebooks.read_md(md)
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    used = set(re.findall(r"\{glue:(?:text|md|)\}`([A-Za-z0-9_]+)", prose))
    defined = set(re.findall(r"glue\(\s*[\"']([A-Za-z0-9_]+)[\"']", code))
    assert used <= defined, f"glued names used but never glued: {sorted(used - defined)}"


@pytest.mark.parametrize("md", SOURCES, ids=IDS)
def test_student_version_has_no_solutions(md):
    full = notebooks.to_ipynb(md)
    student = notebooks.student_version(full)
    text = "\n".join(c.source for c in student.cells)
    assert "{solution-start}" not in text and "{solution-end}" not in text
    assert not any(notebooks.is_solution_cell(c) for c in student.cells)
    solution_lines = notebooks.solution_only_lines(full)
    assert solution_lines, "the solutions should contain code of their own"
    student_lines = {line.strip() for c in student.cells if c.cell_type == "code" for line in c.source.splitlines()}
    assert not solution_lines & student_lines
    n_solution_cells = sum(notebooks.is_solution_cell(c) for c in full.cells)
    n_code = lambda nb: sum(c.cell_type == "code" for c in nb.cells)  # noqa: E731
    assert n_code(student) == n_code(full) - n_solution_cells
    assert text.count("{exercise}") == md.read_text().count("```{exercise}")


def test_student_version_of_a_synthetic_notebook():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            "Intro\n\n```{exercise} E\n:label: e1\nDo it.\n```\n\n```{solution-start} e1\n:class: dropdown\n```"
        ),
        nbformat.v4.new_code_cell("x = 42", metadata={"tags": ["solution"]}),
        nbformat.v4.new_markdown_cell("Because.\n\n```{solution-end}\n```\n\nAfter the solution."),
        nbformat.v4.new_code_cell("check(x)"),
    ]
    student = notebooks.student_version(nb)
    assert [c.source for c in student.cells] == [
        "Intro\n\n```{exercise} E\n:label: e1\nDo it.\n```",
        "After the solution.",
        "check(x)",
    ]
    nb.cells = nb.cells[:2]
    with pytest.raises(ValueError, match="never closed"):
        notebooks.student_version(nb)


def test_written_student_notebooks(tmp_path):
    written = notebooks.write_student(tmp_path)
    assert [p.stem for p in written] == IDS
    for path in written:
        nb = nbformat.read(path, as_version=4)
        assert not any(notebooks.is_solution_cell(c) for c in nb.cells)
