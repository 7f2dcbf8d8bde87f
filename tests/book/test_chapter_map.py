"""The chapter map on the front page: chapters from _toc.yml, dependencies from each chapter's "Builds on" line."""

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "book" / "_ext"))

from attnbook_book import chapter_map  # noqa: E402


def test_chapters_are_numbered_in_toc_order_with_their_labels_and_titles():
    book = chapter_map.chapters(REPO)
    assert [c.number for c in book] == list(range(1, len(book) + 1))
    numbers = [int(Path(c.docname).name[:2]) for c in book]
    assert numbers == sorted(numbers), "the chapter files' numbers must follow the order of _toc.yml"
    for c in book:
        assert c.label.startswith("ch-") and c.title, c.docname


def test_every_chapter_builds_only_on_earlier_chapters():
    book = chapter_map.chapters(REPO)
    seen: set[str] = set()
    for c in book:
        later_or_unknown = [label for label in c.builds_on if label not in seen]
        assert not later_or_unknown, f"{c.docname} builds on {later_or_unknown}, which are not earlier chapters"
        if c.number > 1:
            assert c.builds_on, f"{c.docname} has no 'Builds on' line linking the chapters it needs"
        seen.add(c.label)


def test_the_map_links_every_chapter_and_draws_one_arrow_per_dependency():
    book = chapter_map.chapters(REPO)
    svg = chapter_map.render_svg(book, lambda c: f"{c.docname}.html")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    for c in book:
        assert f'href="{c.docname}.html"' in svg
    direct = chapter_map.reduced_dependencies(book)
    assert len(re.findall(r"<path d=", svg)) == sum(len(v) for v in direct.values()) + 1  # + the arrow-head marker


def test_the_reduction_keeps_every_dependency_reachable_and_drops_only_implied_arrows():
    a, b, c, d = (chapter_map.Chapter(f"chapters/0{i}_x", i, "part", f"t{i}", f"ch-{i}") for i in range(1, 5))
    b.builds_on, c.builds_on, d.builds_on = ["ch-1"], ["ch-1", "ch-2"], ["ch-1", "ch-3"]
    direct = chapter_map.reduced_dependencies([a, b, c, d])
    assert direct == {"ch-1": [], "ch-2": ["ch-1"], "ch-3": ["ch-2"], "ch-4": ["ch-3"]}
    book = chapter_map.chapters(REPO)
    full = {ch.label: set(ch.builds_on) for ch in book}
    reduced = {label: set(v) for label, v in chapter_map.reduced_dependencies(book).items()}

    def closure(graph, start):
        seen, stack = set(), [start]
        while stack:
            for x in graph[stack.pop()]:
                if x not in seen:
                    seen.add(x)
                    stack.append(x)
        return seen

    for ch in book:
        assert closure(full, ch.label) == closure(reduced, ch.label)
