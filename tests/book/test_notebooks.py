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
    assert chapters == sorted(chapters, key=notebooks.page_key), (
        "chapters must appear in the toc in file-number order, each followed by its pages NN_1, NN_2, ..."
    )
    for entry in toc:
        assert any((REPO / f"{entry}{suffix}").is_file() for suffix in (".md", ".ipynb")), f"{entry} does not exist"


def test_a_chapters_further_pages_are_its_sections_in_order():
    for chapter, sections in notebooks.toc_chapters():
        number, k, _ = notebooks.page_key(chapter)
        assert k == 0, f"{chapter}: a chapter's own file is NN_slug; NN_K_slug names one of its further pages"
        keys = [notebooks.page_key(s) for s in sections]
        assert [key[:2] for key in keys] == [(number, i) for i in range(1, len(sections) + 1)], (
            f"the sections of {chapter} must be its pages {number:02d}_1_..., {number:02d}_2_..., in order: {sections}"
        )


def test_pages_sort_after_their_chapter():
    names = ["10_vision_transformer", "09_2_io_model", "09_flash_attention", "09_1_online_softmax", "08_block"]
    assert sorted(names, key=notebooks.page_key) == [
        "08_block",
        "09_flash_attention",
        "09_1_online_softmax",
        "09_2_io_model",
        "10_vision_transformer",
    ]
    assert notebooks.is_section_page("09_1_online_softmax") and not notebooks.is_section_page("09_flash_attention")
    with pytest.raises(ValueError, match="not a chapter page"):
        notebooks.page_key("intro")


def test_partial_staging_drops_the_pages_that_were_not_executed(tmp_path):
    repo, executed = tmp_path / "repo", tmp_path / "executed"
    (repo / "book").mkdir(parents=True)
    (repo / "_config.yml").write_text("title: t\n")
    toc = {
        "format": "jb-book",
        "root": "book/intro",
        "parts": [
            {
                "caption": "A",
                "numbered": True,
                "chapters": [
                    {"file": "chapters/01_a", "sections": [{"file": "chapters/01_1_b"}, {"file": "chapters/01_2_c"}]},
                    {"file": "chapters/02_d", "sections": [{"file": "chapters/02_1_e"}]},
                    {"file": "chapters/03_f"},
                ],
            }
        ],
    }
    (repo / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
    (executed / "chapters").mkdir(parents=True)
    for name in ("01_a", "01_2_c", "02_1_e"):
        nbformat.write(nbformat.v4.new_notebook(), executed / "chapters" / f"{name}.ipynb")
    with pytest.raises(FileNotFoundError, match="01_1_b"):
        notebooks.stage(executed, tmp_path / "src", repo)
    notebooks.stage(executed, tmp_path / "src", repo, partial=True)
    staged = yaml.safe_load((tmp_path / "src" / "_toc.yml").read_text())
    assert staged["parts"][0]["chapters"] == [
        {"file": "chapters/01_a", "sections": [{"file": "chapters/01_2_c"}]},
        {"file": "chapters/02_1_e"},  # its chapter's page was not executed: it stands in the chapter's place
    ]
    assert sorted(p.name for p in (tmp_path / "src" / "chapters").iterdir()) == [
        "01_2_c.ipynb",
        "01_a.ipynb",
        "02_1_e.ipynb",
    ]


@pytest.mark.parametrize("md", SOURCES, ids=IDS)
def test_paired_notebook_is_in_sync_and_has_no_outputs(md):
    ipynb = md.with_suffix(".ipynb")
    assert ipynb.is_file(), f"{ipynb.name} is missing: run `make sync`"
    paired = nbformat.read(ipynb, as_version=4)
    assert notebooks.cell_signature(paired) == notebooks.cell_signature(notebooks.to_ipynb(md)), (
        f"{ipynb.name} differs from {md.name}: run `make sync`"
    )
    assert all(not c.get("outputs") for c in paired.cells if c.cell_type == "code")


def chapter_pages(md):
    """The sources of the chapter whose own file is ``md``: ``md`` and its further pages NN_K_slug."""
    number = notebooks.page_key(md)[0]
    return [p for p in SOURCES if notebooks.page_key(p)[0] == number]


@pytest.mark.parametrize("md", SOURCES, ids=IDS)
def test_chapter_shape(md):
    """Every page is a notebook of its own: setup cell, label and title, learning goals, asserts, and a solution
    for each exercise. A chapter (its pages together) has at least 3 exercises and 3 asserts."""
    nb = notebooks.read_md(md)
    text = md.read_text()
    code = [c for c in nb.cells if c.cell_type == "code"]
    setup = code[0].source
    url = yaml.safe_load((REPO / "_config.yml").read_text())["repository"]["url"]
    # extras allowed (attnbook[export]); the address written out, or held in REPO so that the cell fits 79 columns;
    # the release it installs is checked by test_colab.py
    package = r"attnbook(\[[a-z,]+\])? @ git\+"
    installs = re.search(package + re.escape(url) + "@", setup) or (
        re.search(rf'^\s*REPO = "{re.escape(url)}"$', setup, re.M) and re.search(rf'f"{package}\{{REPO\}}@', setup)
    )
    assert '"google.colab" in sys.modules' in setup and installs, (
        "the first code cell must be the setup cell that installs the package in Colab"
    )
    assert re.search(r"^\(ch-[a-z0-9-]+\)=\n# ", text, re.M), "a page starts with a (ch-...)= label and its title"
    assert "Learning goals" in text
    assert not re.search(r"^[!%]pip", text, re.M) and "filterwarnings" not in text
    assert any("assert" in c.source for c in code), f"{md.name} checks none of its computations with an assert"
    exercises = re.findall(r"^```\{exercise\}", text, re.M)
    assert len(re.findall(r"^```\{solution-start\}", text, re.M)) == len(exercises)
    if notebooks.is_section_page(md):
        return
    pages = chapter_pages(md)
    n_exercises = sum(len(re.findall(r"^```\{exercise\}", p.read_text(), re.M)) for p in pages)
    assert n_exercises >= 3, f"{md.name} has {n_exercises} exercises over its pages, at least 3 are needed"
    n_asserts = sum("assert" in c.source for p in pages for c in notebooks.read_md(p).cells if c.cell_type == "code")
    assert n_asserts >= 3, "a chapter checks its computations with asserts"


def test_a_further_page_belongs_to_a_chapter_and_uses_its_checkers():
    for md in [p for p in SOURCES if notebooks.is_section_page(p)]:
        number = notebooks.page_key(md)[0]
        pages = chapter_pages(md)
        assert sum(not notebooks.is_section_page(p) for p in pages) == 1, f"{md.name}: no chapter {number:02d}_slug.md"
        modules = {notebooks.catalog.parse_notebook(notebooks.to_ipynb(p), p.stem).module for p in pages}
        assert len(modules - {""}) <= 1, f"the pages of chapter {number} use different checker modules: {modules}"


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
    if "```{exercise}" in md.read_text():  # a further page of a chapter may have no exercise
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
