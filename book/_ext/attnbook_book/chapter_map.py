"""The chapter map: which chapter builds on which, drawn as an SVG, and the chapters' execution times.

Both are derived from the book itself at build time: the chapters come from _toc.yml (order, parts,
numbers), their titles from their first heading, and the arrows from each chapter's "Builds on" line,
which links to earlier chapters with ``{ref}`` roles. The times come from the execution-time report
that the notebook execution writes, one row per page: a chapter in several pages (its ``sections:`` in
_toc.yml, numbered 9.1, 9.2, ...) is one box of the map and one row per page in the tables.
"""

from __future__ import annotations

import html
import json
import math
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from attnbook.exercises import catalog

LABEL = re.compile(r"^\((ch-[A-Za-z0-9_-]+)\)=\s*$", re.M)
TITLE = re.compile(r"^# (.+)$", re.M)
BUILDS_ON = re.compile(r"\*\*?Builds on\*?\*?:?\*?\*?\s*(.+)", re.I)
REF = re.compile(r"\{ref\}`(ch-[A-Za-z0-9_-]+)`")


@dataclass
class Chapter:
    docname: str  # e.g. chapters/04_queries_keys_values
    number: int
    part: str
    title: str = ""
    label: str = ""
    builds_on: list[str] = field(default_factory=list)  # labels
    sections: list[str] = field(default_factory=list)  # docnames of its further pages, e.g. chapters/09_1_x


@dataclass
class Page:
    """One page of a chapter: the chapter's own (number "9") or one of its sections (number "9.1")."""

    docname: str
    number: str
    title: str
    chapter: Chapter


def _source_of(srcdir: Path, docname: str) -> Path:
    return next(p for p in (srcdir / f"{docname}.ipynb", srcdir / f"{docname}.md") if p.exists())


def _markdown_of(path: Path) -> str:
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text())
        return "\n\n".join(
            "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in nb["cells"]
            if c["cell_type"] == "markdown"
        )
    return path.read_text()


def chapters(srcdir: Path) -> list[Chapter]:
    """The numbered chapters of the book in ``srcdir``, with their titles, labels and dependencies."""
    toc = yaml.safe_load((srcdir / "_toc.yml").read_text())
    found: list[Chapter] = []
    for part in toc.get("parts", []):
        if not part.get("numbered"):
            continue
        for entry in part.get("chapters", []):
            docname = entry["file"]
            sections = [s["file"] for s in entry.get("sections", [])]
            found.append(Chapter(docname, len(found) + 1, part.get("caption", ""), sections=sections))
    for chapter in found:
        text = _markdown_of(_source_of(srcdir, chapter.docname))
        label, title = LABEL.search(text), TITLE.search(text)
        chapter.label = label.group(1) if label else ""
        chapter.title = title.group(1).strip() if title else chapter.docname
        line = BUILDS_ON.search(text)
        chapter.builds_on = REF.findall(line.group(1)) if line else []
    return found


def pages(srcdir: Path) -> list[Page]:
    """Every page of the numbered chapters, in book order: each chapter's own page, then its sections."""
    found = []
    for chapter in chapters(srcdir):
        found.append(Page(chapter.docname, str(chapter.number), chapter.title, chapter))
        for k, docname in enumerate(chapter.sections, start=1):
            title = TITLE.search(_markdown_of(_source_of(srcdir, docname)))
            found.append(Page(docname, f"{chapter.number}.{k}", title.group(1).strip() if title else docname, chapter))
    return found


def reduced_dependencies(book: list[Chapter]) -> dict[str, list[str]]:
    """Each chapter's "Builds on" labels without those implied through another one (a transitive reduction).

    If 8 builds on 6 and 7 and 7 builds on 6, the map draws 6 -> 7 -> 8 and no arrow 6 -> 8.
    """
    needs = {c.label: set(c.builds_on) for c in book}

    def reachable(start: str) -> set[str]:
        seen, stack = set(), [start]
        while stack:
            for label in needs.get(stack.pop(), ()):
                if label not in seen:
                    seen.add(label)
                    stack.append(label)
        return seen

    return {
        c.label: [a for a in c.builds_on if not any(a in reachable(b) for b in c.builds_on if b != a)] for c in book
    }


def render_svg(book: list[Chapter], href) -> str:
    """An SVG of the chapters in rows by part, with an arrow from each chapter to the ones built on it
    directly (arrows implied by a path through other chapters are left out).

    ``href(chapter)`` gives the link of a chapter's page.
    """
    by_label = {c.label: c for c in book}
    parts: list[str] = []
    for c in book:
        if c.part not in parts:
            parts.append(c.part)
    # three chapters per row, so that the picture keeps a readable size in the page's text column;
    # each part starts with its name on a line of its own
    box_w, box_h, gap_x, row_h, margin, cols, caption_h = 190, 58, 34, 100, 12, 3, 30
    pos, captions, y = {}, [], 10
    for part in parts:
        members = [c for c in book if c.part == part]
        captions.append((part, y + 18))
        y += caption_h
        for i, c in enumerate(members):
            r, col = divmod(i, cols)
            pos[c.label] = (margin + col * (box_w + gap_x), y + r * row_h)
        y += math.ceil(len(members) / cols) * row_h
    width, height = 2 * margin + cols * (box_w + gap_x) - gap_x, y
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" class="attnbook-chapter-map" '
        f'role="img" aria-label="Which chapter builds on which">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#5b6b7b"/></marker></defs>',
    ]
    for part, y_text in captions:
        out.append(
            f'<text x="{margin}" y="{y_text}" font-size="15" font-weight="bold" fill="#1f4e79">'
            f"{html.escape(part)}</text>"
        )
    direct = reduced_dependencies(book)
    for c in book:
        for label in direct[c.label]:
            if label not in by_label or label not in pos:
                continue
            (x1, y1), (x2, y2) = pos[label], pos[c.label]
            if y1 == y2 and x2 - x1 <= box_w + gap_x + 1:  # neighbours in a row: a straight arrow
                path = f"M{x1 + box_w},{y1 + box_h / 2} L{x2},{y2 + box_h / 2}"
            elif y1 == y2:  # further along the row: an arc over the chapters in between
                a, b = x1 + box_w / 2, x2 + box_w / 2
                path = f"M{a},{y1} C{a},{y1 - 32} {b},{y2 - 32} {b},{y2}"
            elif x1 == x2 and any(x == x1 and y1 < y < y2 for x, y in pos.values()):
                # down the same column past other chapters: around their right side, not through them
                sy, ey, bend = y1 + box_h / 2, y2 + box_h / 2, x1 + box_w + gap_x * 0.8
                path = f"M{x1 + box_w},{sy} C{bend},{sy} {bend},{ey} {x2 + box_w},{ey}"
            else:  # from the bottom of the earlier chapter to the top of the later one
                sx, sy, ex, ey = x1 + box_w / 2, y1 + box_h, x2 + box_w / 2, y2
                mid = (sy + ey) / 2
                path = f"M{sx},{sy} C{sx},{mid} {ex},{mid} {ex},{ey}"
            out.append(f'<path d="{path}" fill="none" stroke="#5b6b7b" stroke-width="1.4" marker-end="url(#arrow)"/>')
    for c in book:
        x, y = pos[c.label]
        lines = textwrap.wrap(f"{c.number}. {c.title}", 26)[:3]
        out.append(
            f'<a href="{html.escape(href(c))}"><rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="8" '
            f'fill="#eaf1f8" stroke="#1f4e79" stroke-width="1.2"/>'
        )
        start = y + box_h / 2 - 8 * (len(lines) - 1) + 5
        for i, line in enumerate(lines):
            out.append(
                f'<text x="{x + box_w / 2}" y="{start + 16 * i}" font-size="13" text-anchor="middle" '
                f'fill="#10243a">{html.escape(line)}</text>'
            )
        out.append("</a>")
    out.append("</svg>")
    return "\n".join(out)


@dataclass
class Exercise:
    page: Page
    title: str
    label: str
    checker: str  # "module.function" of attnbook.exercises, or "" when no check follows


def exercises(srcdir: Path) -> list[Exercise]:
    """Every exercise of the numbered chapters' pages, with the checker its check cell calls.

    The pages are read by :func:`attnbook.exercises.catalog.parse_notebook`, the parser the grader's
    list of exercises comes from.
    """
    found = []
    for page in pages(srcdir):
        path = srcdir / f"{page.docname}.ipynb"
        if not path.exists():
            continue
        parsed = catalog.parse_notebook(json.loads(path.read_text()), path.stem)
        found += [
            Exercise(page, e.title, e.label, f"{parsed.module}.{e.checker}" if e.checker else "")
            for e in parsed.exercises
        ]
    return found


def execution_times(report: Path) -> dict[str, dict]:
    """The execution-time report: page file stem -> {"seconds": ..., ...}."""
    return json.loads(report.read_text())
