"""A chapter's notebook opened alone (in Colab, or downloaded) shows its diagrams: the paired ``.ipynb`` carries
each one, written into its markdown cell (a PNG data URL: Colab's markdown draws no SVG one). Each notebook is
rendered from a folder holding only that file (nbconvert, as Jupyter would show it) and opened in Chromium with
the network shut, and every diagram must be drawn, in its light colours (the PNG is drawn from the SVG in the
SVG's light colours; an ``<img>`` cannot see a page's dark mode). ``test_frontends.py`` looks at them in
JupyterLab and the classic Notebook too."""

from __future__ import annotations

import shutil

import nbformat
import pytest
from attnbook_book import notebooks

SOURCES = notebooks.chapter_sources()
DIAGRAMS = {md: len(notebooks._DIAGRAM_IMAGE.findall(md.read_text())) for md in SOURCES}


def test_every_diagram_of_the_chapters_travels_in_their_notebooks():
    carried = 0
    for md in SOURCES:
        text = "".join(c.source for c in nbformat.read(md.with_suffix(".ipynb"), as_version=4).cells)
        embedded = notebooks._EMBEDDED_IMAGE.findall(text)
        assert len(embedded) == DIAGRAMS[md], f"{md.name}: {len(embedded)} diagrams carried, {DIAGRAMS[md]} in the .md"
        assert "../book/images" not in text, f"{md.name} points outside itself"
        carried += len(embedded)
    assert carried == sum(DIAGRAMS.values()) and carried >= 40


def test_a_chapter_reads_the_benchmarks_through_the_library():
    """A chapter opened alone has no ``../benchmarks`` beside it: it reads a benchmark's results with
    ``data.files.benchmark_results``, which downloads them from the book's release there, never by path."""
    import re

    outside = re.compile(r"""["'](?:\.\./)?benchmarks/results|raw\.githubusercontent""")
    readers = 0
    for md in SOURCES:
        code = "".join(c.source for c in notebooks.read_md(md).cells if c.cell_type == "code")
        assert not outside.search(code), f"{md.name} reads benchmark results by path"
        readers += "benchmark_results(" in code
    assert readers >= 14, f"only {readers} chapters read benchmark results"


def test_the_book_is_built_from_the_diagrams_files_again():
    """The staged notebook (what the HTML book is built from) has the .md's markdown: each diagram's file."""
    for md in SOURCES:
        staged = notebooks.unembed_notebook(notebooks.to_ipynb(md))
        assert [c.source for c in staged.cells] == [c.source for c in notebooks.read_md(md).cells], md.name


def _render(md, folder):
    """The paired notebook of ``md`` alone in ``folder``, rendered to HTML as JupyterLab shows it (nbconvert's
    lab template; the code cells' input left out, which only makes the rendering faster)."""
    from nbconvert import HTMLExporter

    lone = folder / md.with_suffix(".ipynb").name
    shutil.copy2(md.with_suffix(".ipynb"), lone)
    exporter = HTMLExporter(template_name="lab", exclude_input=True)
    html, _ = exporter.from_notebook_node(nbformat.read(lone, as_version=4))
    page = lone.with_suffix(".html")
    page.write_text(html, encoding="utf-8")
    assert sorted(p.name for p in folder.iterdir()) == sorted([lone.name, page.name])
    return page


# Each image of the page as Chromium drew it: its first characters of address, whether it was drawn, and for a
# diagram the share of dark pixels and of coloured ones (the fills), read back from a canvas.
IMAGES = """els => els.map(img => {
    const drawn = img.complete && img.naturalWidth > 0, src = img.getAttribute("src") || "";
    let dark = null, coloured = null;
    if (drawn && src.startsWith("data:image/png")) {
        const canvas = document.createElement("canvas");
        canvas.width = img.naturalWidth;
        canvas.height = img.naturalHeight;
        const context = canvas.getContext("2d");
        context.drawImage(img, 0, 0);
        const d = context.getImageData(0, 0, canvas.width, canvas.height).data;
        dark = 0; coloured = 0;
        for (let i = 0; i < d.length; i += 4) {
            if (d[i + 3] === 0) continue;
            if (d[i] + d[i + 1] + d[i + 2] < 180) dark++;
            if (Math.max(d[i], d[i + 1], d[i + 2]) - Math.min(d[i], d[i + 1], d[i + 2]) > 12) coloured++;
        }
        dark /= d.length / 4; coloured /= d.length / 4;
    }
    return {src: src.slice(0, 40), drawn, dark, coloured, alt: img.alt.slice(0, 60)};
})"""


@pytest.fixture(scope="module")
def chromium():
    from attnbook_book.chromium import launch

    with launch() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        # nothing but the file itself: a notebook that needed this machine's folders or network would show it
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(("file:", "data:"))
                   else route.abort())  # fmt: skip
        yield page


@pytest.mark.parametrize("md", [md for md in SOURCES if DIAGRAMS[md]], ids=lambda p: p.stem)
def test_a_lone_notebook_draws_every_diagram(md, tmp_path, chromium):
    chromium.goto(_render(md, tmp_path).as_uri(), wait_until="load")
    images = chromium.eval_on_selector_all(".jp-MarkdownOutput img", IMAGES)
    diagrams = [i for i in images if i["src"].startswith("data:image/png")]
    assert len(diagrams) == DIAGRAMS[md], f"{md.name}: {len(diagrams)} diagrams in the page, {DIAGRAMS[md]} in the .md"
    broken = [i["alt"] for i in images if not i["drawn"]]
    assert not broken, f"{md.name}: images not drawn: {broken}"
    for k, image in enumerate(diagrams):
        # light colours: a white paper with coloured fills, not black shapes on an unstyled canvas
        assert image["dark"] < 0.25 and image["coloured"] > 0.01, (
            f"{md.name}, diagram {k + 1} ({image['alt']}): {image['dark']:.0%} dark, {image['coloured']:.0%} coloured"
        )


@pytest.mark.site
def test_the_notebooks_the_site_offers_for_download_carry_their_diagrams():
    """Each chapter page's download button gives its executed notebook: with its diagrams written in."""
    from site_helpers import HTML, built_toc

    pages = [entry for entry in built_toc() if entry.startswith("chapters/")]
    assert pages, f"no chapter in the book built in {HTML}"
    for entry in pages:
        md = notebooks.REPO / f"{entry}.md"
        text = "".join(c.source for c in nbformat.read(HTML / "_sources" / f"{entry}.ipynb", as_version=4).cells)
        assert len(notebooks._EMBEDDED_IMAGE.findall(text)) == DIAGRAMS[md] and "../book/images" not in text, entry
