"""Chapter notebooks: pairing .md and .ipynb, the student version, and the staged tree the book is built from.

A chapter is one page, ``chapters/NN_slug.md``, or several: the chapter's file keeps its label and first part,
and each further page is ``chapters/NN_K_slug.md`` (K = 1, 2, ...), listed under the chapter in _toc.yml with
``sections:`` (numbered NN.1, NN.2 in the book). Every page is a notebook of its own.

The paired ``.ipynb`` carries the chapter's diagrams (the PNG drawn from each SVG, written into its markdown cell
as a data URL), so that a notebook opened alone (in Colab, or downloaded) shows them; the ``.md`` points at
``book/images/diagrams/``, and the staged notebooks the book is built from point there again, at the SVG, for
the book's inline, dark-mode-aware figures.

Run as a program:

    python -m attnbook_book.notebooks sync              # write chapters/*.ipynb from chapters/*.md, and
                                                        # the grader's list of exercises from them
    python -m attnbook_book.notebooks pin               # the setup cells install the version of pyproject.toml,
                                                        # and the Colab buttons open the notebooks at its tag
    python -m attnbook_book.notebooks embed FOLDER      # the diagrams written into the notebooks of FOLDER
    python -m attnbook_book.notebooks student OUT        # student notebooks (solutions removed) into OUT
    python -m attnbook_book.notebooks stage EXECUTED SRC # the book's sources with executed chapters into SRC
"""

from __future__ import annotations

import argparse
import ast
import base64
import copy
import json
import re
import shutil
import sys
from pathlib import Path

import jupytext
import nbformat
import yaml
from attnbook.grading import catalog

from .diagrams import raster

REPO = Path(__file__).resolve().parents[3]
CHAPTERS = REPO / "chapters"
SOLUTION_TAG = "solution"
_DIRECTIVE = re.compile(r"^\s*(`{3,}|:{3,})\{solution-(start|end)\}")
_FENCE_CLOSE = re.compile(r"^\s*(`{3,}|:{3,})\s*$")
PAGE_NAME = re.compile(r"^(\d\d)_(?:(\d+)_)?[A-Za-z]")  # NN_slug (a chapter) or NN_K_slug (its page K)


def page_key(name: str | Path) -> tuple[int, int, str]:
    """Where a page sorts: (chapter number, page number within the chapter, 0 for the chapter's own file, name).

    ``09_flash_attention`` -> (9, 0, ...), ``09_1_online_softmax`` -> (9, 1, ...): a chapter's further pages
    follow it, in the order of K.
    """
    stem = Path(name).stem
    match = PAGE_NAME.match(stem)
    if match is None:
        raise ValueError(f"{stem!r} is not a chapter page's name (NN_slug or NN_K_slug)")
    return int(match.group(1)), int(match.group(2) or 0), stem


def is_section_page(name: str | Path) -> bool:
    """Whether a chapter page is a further page ``NN_K_slug`` of its chapter (not the chapter's own file)."""
    return page_key(name)[1] > 0


def chapter_sources(root: Path = CHAPTERS) -> list[Path]:
    """The MyST sources of every chapter page, in book order: each chapter, then its pages NN_1, NN_2, ..."""
    return sorted(root.glob("[0-9][0-9]_*.md"), key=page_key)


def toc_files(repo: Path = REPO) -> list[str]:
    """Every file named in _toc.yml (without suffix), in order: a chapter's sections follow it."""
    toc = yaml.safe_load((repo / "_toc.yml").read_text())
    found = [toc["root"]]

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                found.append(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk({k: v for k, v in toc.items() if k != "root"})
    return found


def toc_chapters(repo: Path = REPO) -> list[tuple[str, list[str]]]:
    """The chapters of _toc.yml (files under ``chapters/``) in order, each with the files of its sections."""
    toc = yaml.safe_load((repo / "_toc.yml").read_text())
    found = []
    for part in toc.get("parts", []):
        for entry in part.get("chapters", []):
            if entry.get("file", "").startswith("chapters/"):
                found.append((entry["file"], [s["file"] for s in entry.get("sections", [])]))
    return found


def read_md(path: Path) -> nbformat.NotebookNode:
    """A chapter's .md source as a notebook."""
    return jupytext.read(path, fmt="md:myst")


DIAGRAMS = REPO / "book" / "images" / "diagrams"
DIAGRAM_PATH = "../book/images/diagrams/"  # how a chapter's .md points at a diagram
PNG_DATA = "data:image/png;base64,"
_DIAGRAM_IMAGE = re.compile(r"(!\[[^\]]*\]\()" + re.escape(DIAGRAM_PATH) + r"([a-z0-9_]+)\.svg\)")
_EMBEDDED_IMAGE = re.compile(r"(!\[[^\]]*\]\()" + re.escape(PNG_DATA) + r"([A-Za-z0-9+/=]+)\)")


def embed_diagrams(source: str, diagrams: Path = DIAGRAMS) -> str:
    """A markdown cell's diagrams written into it: ``![alt](data:image/png;base64,...)``, the PNG drawn from
    each SVG (``make diagrams``), so that a notebook opened alone shows them. Colab, JupyterLab, the classic
    Notebook, VS Code and nbconvert all draw such an image. Not the SVG: Colab's markdown draws no SVG data URL
    (googlecolab/colabtools#2092); and not cell attachments: JupyterLab draws no SVG attachment
    (jupyterlab/jupyterlab#10464)."""

    def embed(match: re.Match) -> str:
        name = match.group(2)
        png = (diagrams / f"{name}.png").read_bytes()
        if raster.png_text(png).get(raster.SHA_KEY) != raster.svg_sha256((diagrams / f"{name}.svg").read_bytes()):
            raise RuntimeError(f"{name}.png is not drawn from {name}.svg: run `make diagrams`")
        return f"{match.group(1)}{PNG_DATA}{base64.b64encode(png).decode('ascii')})"

    return _DIAGRAM_IMAGE.sub(embed, source)


def unembed_diagrams(source: str) -> str:
    """The reverse of :func:`embed_diagrams`, for the book's build: each diagram points at its SVG file again
    (the book draws it inline from there, in the page's colour mode). The PNG names its diagram (a ``tEXt``
    chunk)."""

    def point(match: re.Match) -> str:
        name = raster.png_text(base64.b64decode(match.group(2)))[raster.NAME_KEY]
        return f"{match.group(1)}{DIAGRAM_PATH}{name}.svg)"

    return _EMBEDDED_IMAGE.sub(point, source)


def unembed_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """:func:`unembed_diagrams` for every markdown cell of ``nb``."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = unembed_diagrams(cell.source)
    return nb


def embed_folder(folder: Path, diagrams: Path = DIAGRAMS) -> list[Path]:
    """:func:`embed_diagrams` in every notebook of ``folder`` (the executed notebooks the built site offers for
    download, outputs kept); return those that changed."""
    changed = []
    for path in sorted(folder.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        before = [c.source for c in nb.cells]
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                cell.source = embed_diagrams(cell.source, diagrams)
        if [c.source for c in nb.cells] != before:
            nbformat.write(nb, path)
            changed.append(path)
    return changed


def to_ipynb(md_path: Path) -> nbformat.NotebookNode:
    """The paired notebook for a .md source: same cells, no outputs, the diagrams written into it."""
    nb = read_md(md_path)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        elif cell.cell_type == "markdown":
            cell.source = embed_diagrams(cell.source)
    return nb


def cell_signature(nb: nbformat.NotebookNode) -> list[tuple[str, str, tuple[str, ...], str]]:
    """What must agree between the .md and the .ipynb: each cell's type, source (with its diagrams), tags and
    myst-nb options (the ``mystnb`` metadata, which carries an image output's alt text)."""
    return [
        (
            c.cell_type,
            c.source,
            tuple(c.get("metadata", {}).get("tags", [])),
            json.dumps(c.get("metadata", {}).get("mystnb", {}), sort_keys=True),
        )
        for c in nb.cells
    ]


def sync(root: Path = CHAPTERS) -> list[Path]:
    """Write every chapters/NN_slug.ipynb from its .md; return the notebooks that changed."""
    changed = []
    for md in chapter_sources(root):
        ipynb = md.with_suffix(".ipynb")
        fresh = to_ipynb(md)
        if ipynb.exists() and cell_signature(nbformat.read(ipynb, as_version=4)) == cell_signature(fresh):
            continue
        jupytext.write(fresh, ipynb, fmt="ipynb")
        changed.append(ipynb)
    return changed


_VERSION = re.compile(r'^version = "([^"]+)"$', re.M)
# in a setup cell: f"attnbook @ git+{REPO}@v0.2.0" (or, not pinned yet, f"attnbook @ git+{REPO}")
_SETUP_TAG = re.compile(r'(git\+\{REPO\})(?:@v[0-9][0-9A-Za-z.]*)?"')


def book_version(repo: Path = REPO) -> str:
    """The book's release, ``version`` of the library's ``pyproject.toml`` (the one place it is written)."""
    return _VERSION.search((repo / "pyproject.toml").read_text()).group(1)


def release_tag(repo: Path = REPO) -> str:
    """The git tag of the book's release (``v0.2.0``), which every chapter's setup cell installs in Colab."""
    return "v" + book_version(repo)


def pin(root: Path = CHAPTERS, tag: str | None = None) -> list[Path]:
    """Point every chapter's setup cell at the release ``tag`` (default: pyproject.toml's version); return the
    .md sources that changed. Run `make sync` afterwards."""
    tag = tag or release_tag()
    changed = []
    for md in chapter_sources(root):
        text = md.read_text()
        fresh = _SETUP_TAG.sub(lambda m: f'{m.group(1)}@{tag}"', text)
        if fresh != text:
            md.write_text(fresh)
            changed.append(md)
    return changed


_LAUNCH_BRANCH = re.compile(r"^(repository:\n(?:  .*\n)*?  branch: )(\S+)$", re.M)


def launch_branch(config: Path = REPO / "_config.yml") -> str:
    """The git ref the book's Colab buttons open the chapters' notebooks at (``repository.branch``)."""
    return yaml.safe_load(config.read_text())["repository"]["branch"]


def pin_launch_buttons(config: Path = REPO / "_config.yml", tag: str | None = None) -> bool:
    """Point the book's Colab buttons at the release ``tag`` (default: pyproject.toml's version), the tag the
    setup cells install, so that a learner's notebook and its library come from the same tree; True when
    ``config`` changed."""
    tag = tag or release_tag()
    text = config.read_text()
    if _LAUNCH_BRANCH.search(text) is None:
        raise ValueError(f"{config} has no `branch:` under `repository:`")
    fresh = _LAUNCH_BRANCH.sub(lambda m: m.group(1) + tag, text)
    if fresh != text:
        config.write_text(fresh)
    return fresh != text


def exercise_manifest(root: Path = CHAPTERS) -> str:
    """The text of the grader's list of every chapter's exercises (``attnbook/exercises/chapters.json``), by page:
    one entry per page with exercises (a further page of a chapter may have none, and has nothing to grade)."""
    pages = [catalog.parse_notebook(to_ipynb(md), md.stem) for md in chapter_sources(root)]
    return catalog.dumps([page for page in pages if page.exercises])


def write_exercise_manifest(root: Path = CHAPTERS, target: Path = catalog.MANIFEST) -> bool:
    """Rewrite the grader's list of exercises from the chapters; True when it changed."""
    text = exercise_manifest(root)
    if target.exists() and target.read_text(encoding="utf-8") == text:
        return False
    target.write_text(text, encoding="utf-8")
    return True


def _strip_solution_text(text: str, inside: bool) -> tuple[str, bool]:
    """Remove the solution-start ... solution-end directives (and all between) from markdown text."""
    kept, closing_end = [], False
    for line in text.splitlines():
        match = _DIRECTIVE.match(line)
        if match and match.group(2) == "start":
            inside = True
            continue
        if match and match.group(2) == "end":
            inside, closing_end = False, True
            continue
        if closing_end:
            closing_end = False
            if _FENCE_CLOSE.match(line):
                continue
        if not inside:
            kept.append(line)
    return "\n".join(kept).strip("\n"), inside


def is_solution_cell(cell) -> bool:
    return SOLUTION_TAG in cell.get("metadata", {}).get("tags", [])


def student_version(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``nb`` without exercise solutions: no solution blocks, no cells tagged ``solution``."""
    out = copy.deepcopy(nb)
    cells, inside = [], False
    for cell in out.cells:
        if cell.cell_type == "markdown":
            text, inside = _strip_solution_text(cell.source, inside)
            if text.strip():
                cell.source = text
                cells.append(cell)
        elif not inside and not is_solution_cell(cell):
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
            cells.append(cell)
    if inside:
        raise ValueError("a {solution-start} block is never closed by {solution-end}")
    out.cells = cells
    return out


def _is_glue_call(node) -> bool:
    call = node.value if isinstance(node, ast.Expr) else None
    if not isinstance(call, ast.Call):
        return False
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    return name == "glue"


def is_glue_only(source: str) -> bool:
    """Whether a code cell only glues numbers into the prose: ``glue(...)`` calls, and at most the assignments,
    imports and small functions that compute what is glued. Such a cell is plumbing: the HTML page hides it."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    plumbing = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.FunctionDef, ast.Import, ast.ImportFrom)
    return any(_is_glue_call(node) for node in tree.body) and all(
        _is_glue_call(node) or isinstance(node, plumbing) for node in tree.body
    )


def solution_only_lines(nb: nbformat.NotebookNode) -> set[str]:
    """Lines of code that appear in solution cells and nowhere else in the notebook."""
    solution, elsewhere = set(), set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        lines = {line.strip() for line in cell.source.splitlines() if line.strip()}
        (solution if is_solution_cell(cell) else elsewhere).update(lines)
    return {line for line in solution - elsewhere if not line.startswith("#")}


def write_student(out_dir: Path, root: Path = CHAPTERS) -> list[Path]:
    """Write the student version of every chapter notebook into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for md in chapter_sources(root):
        target = out_dir / md.with_suffix(".ipynb").name
        nbformat.write(student_version(to_ipynb(md)), target)
        written.append(target)
    return written


def stage(executed: Path, src: Path, repo: Path = REPO, *, partial: bool = False) -> None:
    """Assemble the book's sources in ``src``: config, front and back matter, and the executed chapters.

    With ``partial``, chapter pages that were not executed are left out of the staged _toc.yml instead of
    being an error (for building one chapter, or one page of it, while working on it).
    """
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy2(repo / name, src / name)
    shutil.copytree(repo / "book", src / "book", ignore=shutil.ignore_patterns("_ext", "__pycache__"))
    missing = []
    for entry in toc_files(repo):
        if not entry.startswith("chapters/"):
            continue
        name = Path(entry).name + ".ipynb"
        executed_nb = executed / "chapters" / name
        if not executed_nb.exists():
            missing.append(str(executed_nb))
            continue
        (src / "chapters").mkdir(exist_ok=True)
        nbformat.write(unembed_notebook(nbformat.read(executed_nb, as_version=4)), src / "chapters" / name)
    exported = executed / "exported"  # models the chapters exported (attnbook.export), for the pages that run them
    if exported.is_dir():
        shutil.copytree(exported, src / "exported", ignore=shutil.ignore_patterns("*.pt"))
    report = executed.parent / "reports" / "execution_times.json"
    if report.exists():  # for the table of execution times in the introduction
        (src / "book" / "_data").mkdir(parents=True, exist_ok=True)
        shutil.copy2(report, src / "book" / "_data" / "execution_times.json")
    if missing and not partial:
        raise FileNotFoundError("these chapters have not been executed (run `make execute`): " + ", ".join(missing))
    if missing:
        toc = yaml.safe_load((repo / "_toc.yml").read_text())
        for part in toc.get("parts", []):
            part["chapters"] = _executed_entries(part.get("chapters", []), {Path(m).stem for m in missing})
        toc["parts"] = [p for p in toc.get("parts", []) if p["chapters"]]
        (src / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))


def _executed_entries(entries: list[dict], absent: set[str]) -> list[dict]:
    """The toc entries without the pages in ``absent``: a chapter keeps its executed sections; a chapter that was
    not executed leaves its executed sections in its place, as chapters of the part."""
    kept = []
    for entry in entries:
        entry = dict(entry)
        if "sections" in entry:
            entry["sections"] = _executed_entries(entry["sections"], absent)
            if not entry["sections"]:
                del entry["sections"]
        if Path(entry.get("file", "")).name not in absent:
            kept.append(entry)
        else:
            kept += entry.get("sections", [])
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnbook_book.notebooks")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("sync")
    sub.add_parser("pin", help="point the setup cells and Colab buttons at the release of pyproject.toml")
    embedding = sub.add_parser("embed", help="write the diagrams into every notebook of a folder")
    embedding.add_argument("folder", type=Path)
    student = sub.add_parser("student")
    student.add_argument("out", type=Path)
    staging = sub.add_parser("stage")
    staging.add_argument("executed", type=Path)
    staging.add_argument("src", type=Path)
    staging.add_argument("--partial", action="store_true", help="leave chapters that were not executed out")
    args = parser.parse_args(argv)
    if args.command == "sync":
        for path in sync():
            print(f"wrote {path.relative_to(REPO)}")
        if write_exercise_manifest():
            print(f"wrote {catalog.MANIFEST}")
    elif args.command == "pin":
        for path in pin():
            print(f"wrote {path.relative_to(REPO)}")
        if pin_launch_buttons():
            print("wrote _config.yml")
        for path in sync():
            print(f"wrote {path.relative_to(REPO)}")
    elif args.command == "embed":
        for path in embed_folder(args.folder):
            print(f"wrote {path}")
    elif args.command == "student":
        for path in write_student(args.out):
            print(f"wrote {path}")
    else:
        stage(args.executed, args.src, partial=args.partial)
    return 0


if __name__ == "__main__":
    sys.exit(main())
