"""The chapter map on the front page: chapters from _toc.yml, dependencies from each chapter's "Builds on" line."""

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "book" / "_ext"))

from attnbook_book import chapter_map, notebooks  # noqa: E402


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


def test_a_chapter_in_several_pages_is_one_box_and_one_row_per_page(tmp_path):
    (tmp_path / "chapters").mkdir()
    pages = {
        "01_a": "(ch-a)=\n# First\n",
        "02_b": "(ch-b)=\n# Second\n\n**Builds on:** {ref}`ch-a`.\n",
        "02_1_c": "(ch-c)=\n# Second, a further page\n",
        "02_2_d": "(ch-d)=\n# Second, another page\n",
        "03_e": "(ch-e)=\n# Third\n\n**Builds on:** {ref}`ch-b`.\n",
    }
    for name, text in pages.items():
        (tmp_path / "chapters" / f"{name}.md").write_text(text)
    toc = (
        "format: jb-book\nroot: intro\nparts:\n  - caption: P\n    numbered: true\n    chapters:\n"
        "      - file: chapters/01_a\n      - file: chapters/02_b\n        sections:\n"
        "          - file: chapters/02_1_c\n          - file: chapters/02_2_d\n      - file: chapters/03_e\n"
    )
    (tmp_path / "_toc.yml").write_text(toc)
    book = chapter_map.chapters(tmp_path)
    assert [(c.number, c.label, c.sections) for c in book] == [
        (1, "ch-a", []),
        (2, "ch-b", ["chapters/02_1_c", "chapters/02_2_d"]),
        (3, "ch-e", []),
    ]
    svg = chapter_map.render_svg(book, lambda c: f"{c.docname}.html")
    assert svg.count("<rect") == 3 and "02_1_c" not in svg
    assert [(p.number, p.title, p.chapter.label) for p in chapter_map.pages(tmp_path)] == [
        ("1", "First", "ch-a"),
        ("2", "Second", "ch-b"),
        ("2.1", "Second, a further page", "ch-b"),
        ("2.2", "Second, another page", "ch-b"),
        ("3", "Third", "ch-e"),
    ]


def test_every_page_of_the_book_is_listed_once_in_book_order():
    listed = [p.docname for p in chapter_map.pages(REPO)]
    toc = [e for e in notebooks.toc_files(REPO) if e.startswith("chapters/")]
    assert listed == toc
    assert [p.number for p in chapter_map.pages(REPO) if "." not in p.number] == [
        str(c.number) for c in chapter_map.chapters(REPO)
    ]


def test_the_pages_of_a_chapter_are_numbered_after_it_and_its_own_headings_are_not():
    """What Sphinx assigns (the chapter's headings 2.1, 2.2, its pages after them, 2.3) becomes pages 2.1, 2.2."""
    from types import SimpleNamespace

    from attnbook_book.sphinx import number_section_pages
    from docutils import nodes

    assigned = {
        "chapters/01_a": {"": (1,), "#x": (1, 1)},
        "chapters/02_b": {"": (2,), "#intro": (2, 1), "#more": (2, 2)},
        "chapters/02_1_c": {"": (2, 3), "#first": (2, 3, 1)},
        "chapters/02_2_d": {"": (2, 4)},
    }

    def toc(docname):
        return nodes.bullet_list(
            "",
            *(nodes.reference("", a or docname, anchorname=a, secnumber=list(n)) for a, n in assigned[docname].items()),
        )

    env = SimpleNamespace(
        toctree_includes={
            "book/intro": ["chapters/01_a", "chapters/02_b"],
            "chapters/02_b": ["chapters/02_1_c", "chapters/02_2_d"],
        },
        toc_secnumbers={d: dict(n) for d, n in assigned.items()},
        tocs={d: toc(d) for d in assigned},
        titles={d: nodes.title("", d, secnumber=list(assigned[d][""])) for d in assigned},
    )
    changed = number_section_pages(None, env)
    assert sorted(changed) == ["chapters/02_1_c", "chapters/02_2_d", "chapters/02_b"]
    assert env.toc_secnumbers["chapters/01_a"] == assigned["chapters/01_a"]
    assert env.toc_secnumbers["chapters/02_b"] == {"": (2,), "#intro": None, "#more": None}
    assert env.toc_secnumbers["chapters/02_1_c"] == {"": (2, 1), "#first": (2, 1, 1)}
    assert env.toc_secnumbers["chapters/02_2_d"] == {"": (2, 2)}
    shown = {r["anchorname"]: r["secnumber"] for r in env.tocs["chapters/02_1_c"].findall(nodes.reference)}
    assert shown == {"": [2, 1], "#first": [2, 1, 1]}
    assert [r["secnumber"] for r in env.tocs["chapters/02_b"].findall(nodes.reference)] == [[2], None, None]
    assert env.titles["chapters/02_2_d"]["secnumber"] == [2, 2]


def test_the_book_accepts_an_exercises_points_as_a_class():
    """An exercise block's points (``:class: points-3``, read by attnbook.grading.catalog) pass the build."""
    from docutils.parsers.rst import directives
    from sphinx_exercise.directive import ExerciseDirective

    assert "class" in ExerciseDirective.option_spec  # sphinx-exercise rejects options it does not know
    assert ExerciseDirective.option_spec["class"]("dropdown points-3") == ["dropdown", "points-3"]
    assert directives.class_option("points-3") == ["points-3"]
