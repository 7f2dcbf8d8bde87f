"""The diagrams: drawn from their sources, used by the chapters with alt text and a caption, legible in both
colour modes, and turned into numbered inline figures by the book."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from attnbook import style
from attnbook_book import diagrams, figures, notebooks
from attnbook_book.diagrams import svg

REPO = notebooks.REPO
CHAPTERS = notebooks.chapter_sources()
PAGES = CHAPTERS + sorted((REPO / "book").glob("*.md"))  # every page that may show a diagram
IMAGE = re.compile(r"^!\[(?P<alt>[^\]]*)\]\((?P<src>[^)]*images/diagrams/(?P<name>[a-z0-9_]+)\.svg)\)[ \t]*$", re.M)
NS = {"svg": "http://www.w3.org/2000/svg"}


def uses() -> list[tuple[Path, re.Match]]:
    return [(md, m) for md in PAGES for m in IMAGE.finditer(md.read_text())]


# --- the files are the sources' output ---------------------------------------------------------------------


def test_every_diagram_file_is_drawn_from_its_source():
    assert diagrams.REGISTRY, "no diagrams registered"
    assert diagrams.problems() == [], "run `make diagrams` (and `make sync`)"


def test_stale_missing_and_orphaned_files_are_found(tmp_path):
    diagrams.write(tmp_path, pngs=False)  # the PNGs: test_diagrams_png.py
    assert diagrams.problems(tmp_path, pngs=False) == []
    name = sorted(diagrams.REGISTRY)[0]
    (tmp_path / f"{name}.svg").write_text(diagrams.render(name).replace("</svg>", "<rect/></svg>"))
    (tmp_path / "no_such_diagram.svg").write_text("<svg/>")
    (tmp_path / f"{sorted(diagrams.REGISTRY)[1]}.svg").unlink()
    found = diagrams.problems(tmp_path, pngs=False)
    assert any("stale" in p and name in p for p in found)
    assert any("no_such_diagram.svg has no source" in p for p in found)
    assert any("missing" in p for p in found)
    changed = diagrams.write(tmp_path, pngs=False)
    assert len(changed) == 3 and diagrams.problems(tmp_path, pngs=False) == []


@pytest.mark.parametrize("name", sorted(diagrams.REGISTRY))
def test_svg_is_well_formed_and_self_contained(name):
    text = (diagrams.OUT / f"{name}.svg").read_text()
    root = ET.fromstring(text)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert root.get("role") == "img" and root.get("data-diagram") == name and "abd" in root.get("class")
    w, h = (float(v) for v in root.get("viewBox").split()[2:])
    assert 200 <= w <= 720 and 100 <= h <= 720, "a diagram fits the text column (it scrolls on a phone)"
    assert root.find("svg:title", NS).text.strip()
    assert root.find("svg:style", NS) is not None, "the light colours travel with the file (Jupyter, Colab)"
    ids = [e.get("id") for e in root.iter() if e.get("id")]
    assert all(i.startswith(f"{name}-") for i in ids), "ids must be unique when several diagrams share a page"
    for e in root.iter("{http://www.w3.org/2000/svg}text"):
        size = float(e.get("font-size", svg.SIZE))
        assert size >= svg.SMALL, f"{name}: text {''.join(e.itertext())!r} at {size}px"
    assert not re.search(r'(fill|stroke)="#', text), "colours come from the palette's classes, not literals"


# --- the drawing kit refuses bad layouts ---------------------------------------------------------------------


def test_layout_errors_are_caught():
    d = svg.Diagram("t", 200, 100, "test")
    with pytest.raises(svg.LayoutError, match="does not fit"):
        d.box(10, 10, 30, 20, "a long label")
    d = svg.Diagram("t", 200, 100, "test")
    d.text(190, 50, "outside", anchor="start")
    with pytest.raises(svg.LayoutError, match="leaves the canvas"):
        d.svg()
    d = svg.Diagram("t", 200, 100, "test")
    d.text(100, 50, "one")
    d.text(104, 52, "two")
    with pytest.raises(svg.LayoutError, match="overlap"):
        d.svg()
    d = svg.Diagram("t", 200, 100, "test")
    d.text(100, 50, "label")
    d.arrow([(60, 50), (140, 50)])
    with pytest.raises(svg.LayoutError, match="crosses the label"):
        d.svg()
    d = svg.Diagram("t", 200, 100, "test")
    d.box(20, 20, 100, 40)
    d.text(120, 40, "half in")
    with pytest.raises(svg.LayoutError, match="crosses the edge of a shape"):
        d.svg()
    with pytest.raises(svg.LayoutError, match="smaller than the smallest size"):
        svg.Diagram("t", 200, 100, "test").text(50, 50, "tiny", size=svg.SMALL - 1)


def test_math_labels():
    runs = svg.parse("$W_{hh} h_{t-1}$ and $\\tanh(x)$")
    assert [(r.text, r.italic, r.level) for r in runs[:4]] == [
        ("W", True, 0),
        ("hh", True, -1),
        ("h", True, 0),
        ("t", True, -1),
    ]
    assert any(r.text == "\u22121" and r.level == -1 for r in runs), "an upright minus sign in the subscript"
    assert any(r.text.startswith("tanh") and not r.italic for r in runs), "function names are upright"
    assert svg.measure("$K_h^\\top$") < svg.measure("$K_h$") + svg.measure("$^\\top$"), "scripts are stacked"
    with pytest.raises(svg.LayoutError, match="unknown command"):
        svg.parse("$\\nosuchcommand$")
    with pytest.raises(svg.LayoutError, match="nested"):
        svg.parse("$e^{x_i}$")


# --- the palette: the same meaning, legible in both modes ---------------------------------------------------


def _luminance(hex_colour: str) -> float:
    def channel(c):
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(int(hex_colour[i : i + 2], 16) / 255) for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_text_is_legible_on_every_fill(mode):
    t = style.theme(mode)
    for role in (*style.ROLES, "data", "op", "panel"):
        assert contrast(t["ink"], t[f"{role}-f"]) >= 7, f"{mode}: text on a {role} box"
    for role in style.ROLES:
        assert contrast(t[f"{role}-s"], t["paper"]) >= 4.5, f"{mode}: {role} lines and labels on the page"
    assert contrast(t["muted"], t["paper"]) >= 4.5


def test_plot_colours_are_the_palette():
    assert style.COLORWAY[:4] == [style.color("weight"), style.color("key"), style.color("value"), style.color("grad")]
    for role in style.ROLES:  # a plot colour reads on white and on the dark page
        assert contrast(style.color(role), "#ffffff") >= 2 and contrast(style.color(role), "#14181e") >= 3, role
    with pytest.raises(ValueError, match="role must be one of"):
        style.color("queries")


# --- the chapters use every diagram once, with alt text, a caption and a reference -------------------------


def test_every_diagram_is_used_once():
    used = [m["name"] for _, m in uses()]
    assert sorted(used) == sorted(set(used)), "a diagram appears twice: refer to the first figure instead"
    assert set(used) == set(diagrams.REGISTRY), f"unused: {sorted(set(diagrams.REGISTRY) - set(used))}"


@pytest.mark.parametrize("md", PAGES, ids=[p.stem for p in PAGES])
def test_diagrams_have_alt_text_caption_and_a_reference(md):
    text = md.read_text()
    prefix = "images/diagrams" if md.parent.name == "book" else "../book/images/diagrams"
    for m in IMAGE.finditer(text):
        name, alt = m["name"], m["alt"]
        assert m["src"] == f"{prefix}/{name}.svg", f"{name}: use the path relative to {md.name}"
        assert (diagrams.OUT / f"{name}.svg").is_file()
        assert len(alt.split()) >= 25, f"{name}: the alt text should describe the structure in words"
        before, after = text[: m.start()], text[m.end() :]
        assert before.endswith("\n\n"), f"{name}: the image is a paragraph of its own"
        assert re.match(r"\n\n\*\*Figure\.\*\* \S", after), (
            f"{name}: the image is followed by **Figure.** and its caption"
        )
        assert f"{{numref}}`{figures.label(name)}`" in text, f"{name}: the prose refers to {figures.label(name)}"
        svg_text = " ".join(ET.fromstring((diagrams.OUT / f"{name}.svg").read_text()).itertext())
        for number in re.findall(r"(?<![\w.])\d+\.\d+", alt):  # numbers quoted in the alt text are in the picture
            assert number in svg_text, f"{name}: the alt text says {number}, the diagram does not"


# --- the book turns them into numbered inline figures -----------------------------------------------------


def test_diagram_names_and_inline_svg():
    name = sorted(diagrams.REGISTRY)[0]
    assert figures.diagram_name(f"../book/images/diagrams/{name}.svg") == name
    assert figures.diagram_name("../book/images/favicon.svg") is None
    inline = figures.inline_svg((diagrams.OUT / f"{name}.svg").read_text(), 'A "quoted" <alt>')
    assert 'aria-label="A &quot;quoted&quot; &lt;alt>"' in inline and "min-width" in inline


def _build(tmp_path: Path, body: str) -> tuple[str, str]:
    """Build a one-chapter book with the figure transform and return the chapter's HTML and the warnings."""
    from io import StringIO

    from sphinx.application import Sphinx

    src = tmp_path / "src"
    (src / "book" / "images" / "diagrams").mkdir(parents=True)
    name = sorted(diagrams.REGISTRY)[0]
    (src / "book" / "images" / "diagrams" / f"{name}.svg").write_text(diagrams.render(name))
    (src / "chapters").mkdir()
    (src / "conf.py").write_text(
        "from attnbook_book.figures import DiagramFigures\n"
        "extensions = ['myst_parser']\nnumfig = True\nmyst_enable_extensions = ['dollarmath']\n"
        "def setup(app):\n    app.add_transform(DiagramFigures)\n"
    )
    (src / "index.md").write_text("# Book\n\n```{toctree}\nchapters/one\n```\n")
    (src / "chapters" / "one.md").write_text(body.replace("NAME", name))
    warnings = StringIO()
    app = Sphinx(
        str(src),
        str(src),
        str(tmp_path / "out"),
        str(tmp_path / "doctrees"),
        "html",
        status=None,
        warning=warnings,
        freshenv=True,
    )
    app.build()
    return (tmp_path / "out" / "chapters" / "one.html").read_text(), warnings.getvalue()


ALT = "A picture that says in words what the structure is, with enough words for a reader who cannot see it."


def test_book_figure_is_numbered_inline_and_referenced(tmp_path):
    html, warnings = _build(
        tmp_path,
        f"# One\n\nAs {{numref}}`fig-NAME` shows:\n\n"
        f"![{ALT}](../book/images/diagrams/NAME.svg)\n\n**Figure.** The caption, with $x$.\n",
    )
    assert "diagram" not in warnings, warnings
    name = sorted(diagrams.REGISTRY)[0]
    assert f'id="{figures.label(name)}"' in html
    assert re.search(r'<div class="attnbook-diagram"><svg [^>]*aria-label="A picture', html)
    assert "Fig. 1" in html and "The caption, with" in html and "**Figure.**" not in html
    assert 'href="#' + figures.label(name) in html, "the {numref} resolves to the figure"
    assert "_images" not in html, "the SVG is inline, not a separate request"


def test_book_warns_about_a_diagram_without_caption(tmp_path):
    _, warnings = _build(tmp_path, f"# One\n\n![{ALT}](../book/images/diagrams/NAME.svg)\n\nNo caption here.\n")
    assert "must be followed by its caption" in warnings
    _, warnings = _build(tmp_path / "b", "# One\n\n![short alt](../book/images/diagrams/NAME.svg)\n\n**Figure.** A.\n")
    assert "the alt text must say in words what the diagram shows" in warnings


def test_diagram_of_the_lab_uses_the_vocabulary_of_the_data():
    from attnbook import data
    from attnbook_book.diagrams import ch12

    text = data.fetch("tinyshakespeare", download=False).read_text(encoding="utf-8")
    assert len(set(text)) == ch12.VOCAB
