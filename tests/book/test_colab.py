"""Where learners run the book: every chapter's setup cell installs the book's release, and in Colab's
environment (its published package list, ``colab_constraints.txt``) that install changes none of Colab's
packages, for the plain install and for every extra a page installs.

The install check asks pip itself (``pip install --dry-run --report``) in an environment of Colab's Python
that holds Colab's packages as pip sees them; it needs the package registry (as ``make setup`` does).
``make test-colab`` goes further: it builds Colab's environment for real and executes every chapter there.
"""

from __future__ import annotations

import calendar
import concurrent.futures
import re
import shutil
import sys

import attnbook
import pytest
import tomllib
import yaml
from attnbook_book import colab, notebooks

REPO = notebooks.REPO
SOURCES = notebooks.chapter_sources()  # every chapter page, by glob: a new chapter is covered as it is added
IDS = [p.stem for p in SOURCES]
URL = yaml.safe_load((REPO / "_config.yml").read_text())["repository"]["url"]
OPTIONAL = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
COLAB = colab.read_constraints()


def installs_of(md) -> list[list[str]]:
    """What the setup cell of page ``md`` asks pip to install in Colab (Colab's versions where it asks)."""
    setup = next(c.source for c in notebooks.read_md(md).cells if c.cell_type == "code")
    return colab.setup_requirements(setup, COLAB)


def test_the_constraints_say_where_and_when_they_come_from():
    header = [line for line in colab.CONSTRAINTS.read_text().splitlines() if line.startswith("#")]
    text = "\n".join(header)
    assert "github.com/googlecolab/backend-info" in text and "pip-freeze.txt" in text
    assert re.search(r"\b20\d\d-\d\d-\d\d\b", text), "the date of Colab's list"
    assert re.search(r"commit [0-9a-f]{12}", text), "the commit of Colab's list"
    assert colab.python_version() == "3.13"
    # the packages the book runs on are there, torch as the registry's release of Colab's wheel
    for name in ("torch", "numpy", "ipywidgets", "ipykernel", "protobuf", "plotly", "tqdm"):
        assert name in COLAB, name
    assert "+" not in COLAB["torch"] and all("@" not in line for line in colab.CONSTRAINTS.read_text().splitlines()
                                             if not line.startswith("#"))  # fmt: skip


def test_the_library_version_is_written_once():
    assert attnbook.__version__ == notebooks.book_version() and notebooks.release_tag() == f"v{attnbook.__version__}"


@pytest.mark.parametrize("md", SOURCES, ids=IDS)
def test_the_setup_cell_installs_the_books_release(md):
    """Every page's notebook installs the library at this book's release (``git+REPO@vX.Y.Z``, the version of
    pyproject.toml), with extras the package has, so that a notebook and its library always agree."""
    installs = installs_of(md)
    books = [colab.book_requirement(r) for args in installs for r in args if r.startswith("attnbook")]
    assert len(books) == 1, f"{md.name}: the setup cell must install attnbook once: {installs}"
    assert books[0] is not None, f"{md.name} installs the repository's head, not a release: run `make pin`"
    name, url, ref = books[0]
    assert url == URL, f"{md.name} installs from {url}, not the book's repository {URL}"
    assert ref == notebooks.release_tag(), (
        f"{md.name} installs {ref}, but the book is {notebooks.release_tag()}: run `make pin`"
    )
    extras = re.findall(r"[a-z]+", name[len("attnbook") :])
    assert set(extras) <= OPTIONAL, f"{md.name} asks for extras {extras}; pyproject.toml has {sorted(OPTIONAL)}"


def test_pin_points_every_setup_cell_at_a_release(tmp_path):
    for md in SOURCES[:2]:
        shutil.copy2(md, tmp_path / md.name)
    # a page written before the setup cells were pinned (a new chapter from an older branch)
    unpinned = tmp_path / SOURCES[0].name
    unpinned.write_text(re.sub(r"(git\+\{REPO\})@v[0-9.]+", r"\1", unpinned.read_text()))
    assert 'git+{REPO}"' in unpinned.read_text()
    changed = notebooks.pin(tmp_path, "v9.8.7")
    assert sorted(p.name for p in changed) == sorted(p.name for p in SOURCES[:2])
    for md in changed:
        (ref,) = {colab.book_requirement(r)[2] for args in installs_of(md) for r in args if r.startswith("attnbook")}
        assert ref == "v9.8.7"
    assert notebooks.pin(tmp_path, "v9.8.7") == []


def test_the_colab_buttons_open_the_release_the_setup_cells_install():
    """The chapters' Colab buttons open each notebook at the tag its setup cell installs the library at (the
    version of pyproject.toml), not at a moving branch: the notebook and the library come from one tree."""
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert notebooks.launch_branch() == notebooks.release_tag() == f"v{version}", (
        f"the Colab buttons open {notebooks.launch_branch()}, the setup cells install v{version}: run `make pin`"
    )


def test_pin_points_the_colab_buttons_at_the_release(tmp_path):
    config = tmp_path / "_config.yml"
    before = (REPO / "_config.yml").read_text().replace(f"branch: {notebooks.launch_branch()}", "branch: main")
    config.write_text(before)
    assert notebooks.launch_branch(config) == "main"
    assert notebooks.pin_launch_buttons(config, "v9.8.7") and notebooks.launch_branch(config) == "v9.8.7"
    assert config.read_text() == before.replace("branch: main", "branch: v9.8.7")  # nothing else changed
    assert not notebooks.pin_launch_buttons(config, "v9.8.7")


def test_setup_requirements_runs_the_cells_colab_branch():
    cell = (
        "import subprocess\nimport sys\n\n"
        'if "google.colab" in sys.modules:\n'
        "    from importlib.metadata import version\n\n"
        '    REPO = "https://example.org/r"\n'
        '    subprocess.run([sys.executable, "-m", "pip", "install", "-q",\n'
        '                    f"attnbook[export] @ git+{REPO}@v1.2.3",\n'
        "                    f\"protobuf=={version('protobuf')}\"], check=True)\n"
        "import definitely_not_a_module\n"  # after the Colab branch: never run
    )
    assert colab.setup_requirements(cell, {"protobuf": "5.29.6"}) == [
        ["attnbook[export] @ git+https://example.org/r@v1.2.3", "protobuf==5.29.6"]
    ]
    with pytest.raises(ValueError, match="one `if"):
        colab.setup_requirements("import sys\n")


def test_would_change_reads_pips_report():
    report = {
        "install": [
            {"metadata": {"name": "ipywidgets", "version": "8.1.9"}},
            {"metadata": {"name": "Protobuf", "version": "5.29.6"}},
            {"metadata": {"name": "attnbook", "version": "0.2.0"}},
        ]
    }
    installed = {"ipywidgets": "7.7.1", "protobuf": "5.29.6"}
    assert colab.would_change(report, installed) == [("ipywidgets", "7.7.1", "8.1.9")]


def test_the_constraints_file_is_made_from_colabs_freeze():
    freeze = (
        "# a comment\nNumPy==2.1.3\n"
        "torch @ https://download.pytorch.org/whl/cpu/torch-2.11.0%2Bcpu-cp313-cp313-manylinux_2_28_x86_64.whl\n"
        "google-colab @ file:///colabtools/dist/google_colab-1.0.0.tar.gz\nabsl-py==1.4.0\n"
    )
    text = colab.constraints_from_freeze(freeze, "From somewhere, 2026-08-19.")
    pins = [line for line in text.splitlines() if not line.startswith("#")]
    assert pins == ["absl-py==1.4.0", "NumPy==2.1.3", "torch==2.11.0"]
    assert "# From somewhere, 2026-08-19." in text and "google-colab" in text.split("absl-py")[0]


@pytest.fixture(scope="module")
def colab_environment(tmp_path_factory):
    """An environment of Colab's Python holding Colab's packages (their metadata), and a copy of the package."""
    root = tmp_path_factory.mktemp("colab")
    python = colab.find_python(colab.python_version())
    options: tuple[str, ...] = ()
    if python is None:  # no Colab's Python here: pip resolves for it by name (markers then read this Python)
        python, options = sys.executable, ("--python-version", colab.python_version())
    interpreter = colab.colab_like_environment(root / "venv", COLAB, python)
    source = root / "attnbook"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "lib", source / "lib", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return interpreter, source, options


def test_the_setup_cells_change_none_of_colabs_packages(colab_environment):
    """For every distinct install of the chapters' setup cells (the plain install and each extra a page asks
    for, with what the cell computes from Colab's versions), pip in Colab's environment installs what is
    missing and removes, upgrades or downgrades none of Colab's packages."""
    interpreter, source, options = colab_environment
    installs = []
    for md in SOURCES:
        for args in installs_of(md):
            if args not in installs:
                installs.append(args)
    assert any(args == [f"attnbook @ git+{URL}@{notebooks.release_tag()}"] for args in installs), "the plain install"
    local = colab.local_requirements(installs, source)
    with concurrent.futures.ThreadPoolExecutor(len(local)) as pool:
        reports = list(pool.map(lambda args: colab.dry_run(interpreter, args, options=options), local))
    problems = []
    for args, report in zip(installs, reports):
        names = {colab.canonical(i["metadata"]["name"]) for i in report["install"]}
        assert "attnbook" in names, f"pip would not install the library for {args}"
        name = colab.book_requirement(next(a for a in args if a.startswith("attnbook")))[0]
        if "export" in name:  # the extra is installed, not dropped: the model in the page runs in Colab
            assert {"onnx", "onnxruntime", "onnxscript"} <= names | set(COLAB), names
        for package, old, new in colab.would_change(report, COLAB):
            problems.append(f"{' '.join(args)}: {package} {old} -> {new}")
    assert not problems, "the setup cell would change Colab's packages:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", ["how_to_use.md", "instructor_guide.md"])
def test_the_pages_say_what_was_tested_where(page):
    """The how-to and instructor pages name the Colab list the tests use (its date), Colab's versions of the
    packages that matter, the book's own and the lowest versions the library declares, and the release the
    setup cells install: what they say is what the tests use."""
    text = " ".join((REPO / "book" / page).read_text().split())
    date = re.search(r"\b(20\d\d)-(\d\d)-(\d\d)\b", colab.CONSTRAINTS.read_text()).groups()
    assert f"{int(date[2])} {calendar.month_name[int(date[1])]} {date[0]}" in text, "the date of Colab's list"
    assert f"Python {colab.python_version()}" in text
    assert f"PyTorch {'.'.join(COLAB['torch'].split('.')[:2])}" in text
    assert f"ipywidgets {COLAB['ipywidgets']}" in text
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    python_floor = re.fullmatch(r">=(\d+\.\d+)", project["requires-python"]).group(1)

    def torch_floor(requirements):
        return next(re.fullmatch(r"torch>=(\d+\.\d+)", r).group(1) for r in requirements if r.startswith("torch"))

    floors = f"Python {python_floor}, PyTorch {torch_floor(project['dependencies'])}"
    assert f"{floors} ({torch_floor(project['optional-dependencies']['export'])} for the export" in text
    book_torch = re.search(r"^torch==(\d+\.\d+)", (REPO / "requirements.txt").read_text(), re.M).group(1)
    assert f"PyTorch {book_torch}" in text
    assert notebooks.release_tag() in text


FROM_PYPI = re.compile(r"""pip install (?:-\w+ )*["']?attnbook(?:\[[a-z,]+\])?(?! @ git\+)["'\s]""")


def test_no_page_installs_the_library_by_a_name_pypi_does_not_have():
    """``attnbook`` is not on PyPI: an install by its name alone fails (or, were the name taken, installs another
    package). Every install the README, the pages, the chapters and the library's help give names the book's
    repository (``attnbook @ git+...``) or a clone (``pip install -e .``)."""
    assert FROM_PYPI.search('pip install "attnbook[grade]"') and FROM_PYPI.search("pip install attnbook\n")
    assert not FROM_PYPI.search(f'pip install "attnbook[hf] @ git+{URL}@v1.0.0"')
    files = [REPO / "README.md", *(REPO / "book").glob("*.md"), *SOURCES, *(REPO / "lib").rglob("*.py")]
    found = [
        f"{path.relative_to(REPO)}: {m.group(0)!r}" for path in files for m in FROM_PYPI.finditer(path.read_text())
    ]
    assert not found, found


def test_the_setup_cells_print_what_the_how_to_page_says():
    """How to use: the setup cell "prints the version of PyTorch it runs with and, on most pages, the device"."""
    setups = {md.name: next(c.source for c in notebooks.read_md(md).cells if c.cell_type == "code") for md in SOURCES}
    without_version = [name for name, cell in setups.items() if 'print(f"PyTorch {torch.__version__}' not in cell]
    assert not without_version, f"these setup cells print no PyTorch version: {without_version}"
    with_device = [name for name, cell in setups.items() if re.search(r"running on (\{device\}|the CPU)", cell)]
    assert len(with_device) > len(setups) / 2, f"{len(with_device)} of {len(setups)} print the device"
    page = " ".join((REPO / "book" / "how_to_use.md").read_text().split())
    assert "prints the version of PyTorch it runs with and, on most pages, the device it will use" in page
