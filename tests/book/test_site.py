"""The built HTML book, opened in headless Chromium (Debian's package, driven by Playwright).

Every page is opened twice. At a laptop's width in light mode: no console errors, no request leaves the local
server, math is typeset (when the book was built) and drawn, every image has alt text, every display equation,
table and code cell (folded or not, in either colour mode) fits the text column, every plotly figure renders
in its own (desktop) layout with a text alternative written from its data, and moving a slider changes the
figure and its description; widgets render; every diagram is drawn, numbered, captioned and labelled for
screen readers. At a phone's width in dark mode: diagrams and plots take the dark colours, widgets keep
legible text on the theme's light card, every plotly figure keeps about two thirds of its width for the plot
with no text running into other text or out of the figure. In both, axe-core finds no critical or serious WCAG
2.0/2.1 A or AA violation (``attnbook_book.a11y``; no rule is disabled). Every Colab link points at a notebook
that exists in the repository. No chapter page shows a code cell that only glues numbers into the prose.

The keyboard, the screen-reader texts and the phone layout's undo are tested in test_site_keyboard.py; the
models in the page in test_site_inpage.py.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from site_helpers import (
    HTML,
    INPAGE_ASSETS,
    LAPTOP,
    PHONE,
    REPO,
    WIDE_CODE,
    built_toc,
    content_pages,
    contrast,
    figures_drawn,
    open_page,
)

pytestmark = pytest.mark.site

# Display equations (MathJax scrolls one that is too wide) and tables of the text (not cell outputs) that are
# wider than the text column: [kind, the nearest id, width in px, the column's width].
TOO_WIDE = """() => {
  const column = document.querySelector('article.bd-article');
  if (!column) return [];
  const width = column.getBoundingClientRect().width, id = el => (el.closest('[id]') || {}).id;
  const equations = [...column.querySelectorAll('mjx-container[display="true"]')]
    .filter(m => m.scrollWidth > m.clientWidth + 1).map(m => ['equation', id(m), m.scrollWidth, m.clientWidth]);
  const tables = [...column.querySelectorAll('table')].filter(t => !t.closest('.cell_output'))
    .map(t => ['table', id(t), Math.round(t.getBoundingClientRect().width), Math.round(width)])
    .filter(([, , w]) => w > width + 1);
  return equations.concat(tables);
}"""


@pytest.mark.parametrize("path", content_pages())
def test_page(server, browser, path):
    assert (HTML / path).exists(), f"{path} was not built"
    requested: list[str] = []
    page, errors, outside = open_page(browser, f"{server}/{path}", requested=requested, viewport=LAPTOP)
    try:
        # Math: every math element typeset by MathJax when the book was built, none with an error, each
        # drawn (an SVG with a size, its glyphs on the page) and read to screen readers as MathML.
        n_math = page.locator(".math").count()
        if n_math:
            rendered = page.locator(".math mjx-container[jax='SVG'] > svg").count()
            assert rendered == n_math, f"{path}: {rendered} of {n_math} math elements typeset by MathJax"
            assert page.locator("[data-mjx-error], mjx-merror").count() == 0, f"{path}: MathJax reported an error"
            assert page.locator(".math mjx-assistive-mml math").count() == n_math, f"{path}: math without MathML"
            broken = page.evaluate(MATH_DRAWN)
            assert broken == [], f"{path}: formulas not drawn or glyphs missing: {broken}"
        # Nothing of the text is cut at the column's edge on a laptop: split a long equation over aligned
        # lines, give a table narrower cells (a phone's width may scroll both sideways).
        wide = page.evaluate(TOO_WIDE)
        assert wide == [], f"{path}: wider than the text column at {LAPTOP['width']} px: {wide}"

        # Plotly: every figure is drawn in its own layout, with a text alternative from its data; moving each
        # slider changes the figure and what the text alternative says.
        figures = figures_drawn(page)
        for i in range(figures.count()):
            figure = figures.nth(i)
            figure.scroll_into_view_if_needed()
            info = figure.evaluate(FIGURE_INFO)
            assert info["mode"] == "desktop-light", f"{path}: figure {i} is not in the laptop's light layout: {info}"
            assert info["changed"] == [], f"{path}: figure {i} is not drawn in its own layout: {info}"
            check_description(path, i, info)
            sliders = figure.locator("g.slider-container")
            if sliders.count() == 0:
                continue
            state = lambda: figure.evaluate("el => JSON.stringify(el.data)")  # noqa: E731
            before = state()
            rail = figure.locator("rect.slider-rail-rect").first
            box = rail.bounding_box()
            assert box is not None, f"{path}: slider {i} has no visible rail"
            active = figure.evaluate("el => el.layout.sliders[0].active || 0")
            n_steps = figure.evaluate("el => el.layout.sliders[0].steps.length")
            target = 0.05 if active > n_steps / 2 else 0.95  # move far from where it starts
            page.mouse.click(box["x"] + target * box["width"], box["y"] + box["height"] / 2)
            page.wait_for_timeout(300)
            assert state() != before, f"{path}: moving the slider of figure {i} did not change the figure"
            moved = figure.evaluate(FIGURE_INFO)
            check_description(path, i, moved)
            assert moved["alt"] != info["alt"], f"{path}: figure {i}'s description did not follow its slider"

        # Widgets: saved widget state is rendered by the local widget manager (loaded when a widget comes near
        # the screen: here at once).
        views = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
        if views:
            page.evaluate("() => attnbookWidgets.load()")
            page.locator(".jupyter-widgets").first.wait_for(state="attached", timeout=15_000)
            page.wait_for_function("() => attnbookWidgets.settled()", timeout=15_000)
            assert page.locator(".jupyter-widgets").count() >= views
            assert "Error rendering" not in page.content()

        check_diagrams(page, path)
        # Images, static and drawn by widgets: each says what it shows (not empty, not a file name).
        images = page.evaluate("() => [...document.images].map(i => [i.getAttribute('alt'), i.src.slice(0, 80)])")
        no_alt = [src for alt, src in images if not alt or not alt.strip() or re.search(r"\.(png|svg|jpe?g|gif)$", alt)]
        assert no_alt == [], f"{path}: {len(no_alt)} of {len(images)} images without alt text: {no_alt}"

        # The model in the page: only a page with the widget may load onnxruntime or a model.
        if page.locator("div.attnbook-inpage").count() == 0:
            heavy = [u for u in requested if INPAGE_ASSETS.search(u)]
            assert heavy == [], f"{path} has no model in the page but loaded {heavy}"

        audit(page, path, "light")
        # Code: no code cell scrolls sideways, folded cells and solutions opened, in either colour mode.
        for mode in ("light", "dark"):
            page.evaluate(f"() => {{ document.documentElement.dataset.theme = '{mode}'; }}")
            wide_code = page.evaluate(WIDE_CODE)
            assert wide_code == [], f"{path} ({mode}): code cells wider than the column: {wide_code}"
        assert errors == [], f"{path}: console errors: {errors}"
        assert outside == [], f"{path}: requests left the local server: {outside}"
    finally:
        page.close()


def audit(page, path: str, mode: str) -> None:
    """axe-core: no critical or serious violation of WCAG 2.0/2.1 A and AA on the page as it is now."""
    from attnbook_book import a11y

    found = a11y.blocking(a11y.audit(page))
    assert found == [], f"{path} in {mode} mode: {len(found)} accessibility violations:\n" + "\n".join(found)


# Formulas that are not drawn: an SVG of no size, or a glyph it uses that the page does not hold.
MATH_DRAWN = """() => {
  const bad = [];
  document.querySelectorAll('.math mjx-container > svg').forEach((svg, i) => {
    const box = svg.getBoundingClientRect();
    const missing = [...svg.querySelectorAll('use')].map(u => u.getAttribute('xlink:href') || u.getAttribute('href'))
      .filter(h => !document.getElementById(h.slice(1)));
    if (box.width < 1 || box.height < 1 || missing.length) bad.push([i, Math.round(box.width), missing.slice(0, 3)]);
  });
  return bad.slice(0, 10);
}"""


# A plotly figure as the page drew it: its mode, the layout the book changed (nothing on a laptop in light
# mode), its title, sliders and text alternative.
FIGURE_INFO = """gd => {
  const title = gd.layout.title && (gd.layout.title.text !== undefined ? gd.layout.title.text : gd.layout.title);
  const saved = gd._attnbookSaved;
  return {mode: gd.dataset.attnbookMode, changed: saved ? Object.keys(saved.layout).concat(saved.traces) : [],
          title: String(title || ''), role: gd.getAttribute('role'), label: gd.getAttribute('aria-label') || '',
          sliders: (gd.layout.sliders || []).map(s => [(s.active || 0) + 1, s.steps.length]),
          alt: (document.getElementById(gd.getAttribute('aria-describedby') || '') || {}).textContent || ''};
}"""


def check_description(path: str, i: int, info: dict) -> None:
    """The figure is a labelled figure whose description says what it shows: its kind, its title, its
    slider's current step; more than the title alone."""
    where = f"{path}: figure {i}"
    assert info["role"] == "figure" and info["label"].startswith("Figure"), f"{where} is not a labelled figure: {info}"
    alt = info["alt"]
    assert alt.startswith("Interactive figure ("), f"{where}: no description written from its data: {alt!r}"
    title = " ".join(re.sub(r"<[^>]+>", " ", info["title"]).replace("\u200b", "").split())
    assert title in alt, f"{where}: the description does not give the title {title!r}: {alt!r}"
    for step, n in info["sliders"]:
        assert f"step {step} of {n}" in alt, f"{where}: the description does not say the slider's step: {alt!r}"
    assert len(alt.split()) >= len(title.split()) + 8, f"{where}: the description says little: {alt!r}"


def check_diagrams(page, path: str) -> int:
    """Every diagram is an inline SVG with a size, alt text and a numbered caption, shown at least at
    MIN_SCALE of its own size (narrower screens scroll it); returns how many there are."""
    from attnbook_book.figures import MIN_SCALE

    figures = page.locator("figure.attnbook-diagram-figure")
    source = REPO / Path(path).with_suffix(".md")
    if source.is_file():  # every diagram the chapter shows became a figure
        expected = len(re.findall(r"^!\[[^\]]*\]\([^)]*images/diagrams/[a-z0-9_]+\.svg\)", source.read_text(), re.M))
        assert figures.count() == expected, f"{path}: {figures.count()} diagram figures, the chapter has {expected}"
    for i in range(figures.count()):
        figure = figures.nth(i)
        figure.scroll_into_view_if_needed()
        info = figure.evaluate("""f => { const s = f.querySelector('svg.abd'), b = s.getBoundingClientRect();
            return {w: b.width, h: b.height, view: s.viewBox.baseVal.width, alt: s.getAttribute('aria-label') || '',
                    caption: (f.querySelector('figcaption') || {}).textContent || '', id: f.id}; }""")
        name = info["id"] or f"diagram {i}"
        assert info["w"] > 0 and info["h"] > 0, f"{path}: {name} is not drawn"
        assert info["w"] >= MIN_SCALE * info["view"] - 1, f"{path}: {name} is shrunk below {MIN_SCALE} of its size"
        assert len(info["alt"].split()) >= 8, f"{path}: {name} has no alt text"
        assert re.match(r"\s*Fig\. \d+(\.\d+)*\s+\S", info["caption"]), f"{path}: {name} has no numbered caption"
    return figures.count()


@pytest.mark.parametrize("path", content_pages())
def test_page_in_dark_mode_on_a_phone(server, browser, path):
    from attnbook import style

    page, errors, outside = open_page(browser, f"{server}/{path}", mode="dark", viewport=PHONE)
    try:
        assert page.evaluate("document.documentElement.dataset.theme") == "dark"
        n = check_diagrams(page, path)
        if n:  # the diagrams take the dark colours of the palette
            ink = page.evaluate("getComputedStyle(document.querySelector('svg.abd')).getPropertyValue('--ink')")
            assert ink.strip() == style.theme("dark")["ink"], f"{path}: diagrams keep their light colours"
        figures = figures_drawn(page)
        for i in range(figures.count()):
            figure = figures.nth(i)
            assert figure.evaluate("el => el.dataset.attnbookMode") == "phone-dark", f"{path}: figure {i}"
            font = figure.evaluate("el => el._fullLayout.font.color")
            assert font == style.PLOTLY_DARK["font_color"], f"{path}: plotly figure {i} keeps dark text on a dark page"
            check_phone_layout(path, i, figure.evaluate(PHONE_LAYOUT))
        if page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count():
            # widgets do not follow the mode: the theme shows them on a light card; their text must stay dark
            page.evaluate("() => attnbookWidgets.load()")
            page.locator(".jupyter-widgets").first.wait_for(state="attached", timeout=15_000)
            page.wait_for_function("() => attnbookWidgets.settled()", timeout=15_000)
            colours = page.evaluate("""() => Array.from(document.querySelectorAll('.widget-subarea .widget-label'))
                .map(e => [getComputedStyle(e).color,
                           getComputedStyle(e.closest('.widget-subarea')).backgroundColor])""")
            for text, card in colours:
                assert contrast(text, card) >= 4.5, f"{path}: widget text {text} on {card}"
        audit(page, path, "dark")
        assert errors == [], f"{path}: console errors in dark mode: {errors}"
        assert outside == [], f"{path}: requests left the local server: {outside}"
    finally:
        page.close()


# "About two thirds": most figures keep two thirds or more at 390 px; a few heatmaps whose rows are named by
# long labels and whose colour bar has a title keep less (the lowest, chapter 16's comparison of attributions,
# 59%): those labels and that title are the figure's content.
MIN_PLOT_SHARE = 0.58
# How a plotly figure uses a phone's width: the share of its width that its plot areas span, and the texts
# (tick labels, titles, annotations, legend entries, colour bars, slider labels) that run into each other or
# out of the figure. Tick labels of one axis that plotly turned to fit are not compared with each other (their
# boxes are tilted).
PHONE_LAYOUT = r"""gd => {
  const box = gd.getBoundingClientRect();
  const plots = [...gd.querySelectorAll('.draglayer .nsewdrag')].map(r => r.getBoundingClientRect());
  const share = plots.length ? (Math.max(...plots.map(b => b.right)) - Math.min(...plots.map(b => b.left))) / box.width
                             : null;
  const kinds = {tick: 'g.xtick text, g.ytick text', annotation: 'g.annotation text', title: '.g-gtitle text',
                 'axis title': '[class^="g-x"][class$="title"] text, [class^="g-y"][class$="title"] text',
                 legend: '.legend text.legendtext', 'colour bar': '.colorbar text', slider: '.slider-container text'};
  const items = [];
  for (const [kind, selector] of Object.entries(kinds)) {
    gd.querySelectorAll(selector).forEach(t => {
      const b = t.getBoundingClientRect();
      if (!t.textContent.trim() || b.width < 1 || b.height < 1) return;
      const turns = (t.getAttribute('transform') || '') + (t.parentNode.getAttribute('transform') || '');
      const turned = /rotate\((?!0)/.test(turns);
      const axis = t.closest('[class*="axislayer"]');
      items.push({kind, text: t.textContent.trim().slice(0, 40), b, turned,
                  group: axis ? [...axis.parentNode.children].indexOf(axis) + axis.getAttribute('class') : kind});
    });
  }
  const clash = [], outside = [];
  items.forEach((a, i) => {
    if (a.b.left < box.left - 2 || a.b.right > box.right + 2 || a.b.top < box.top - 2 || a.b.bottom > box.bottom + 2)
      outside.push(`${a.kind} "${a.text}"`);
    items.slice(i + 1).forEach(c => {
      if (a.kind === 'tick' && c.kind === 'tick' && a.group === c.group && (a.turned || c.turned)) return;
      const w = Math.min(a.b.right, c.b.right) - Math.max(a.b.left, c.b.left);
      const h = Math.min(a.b.bottom, c.b.bottom) - Math.max(a.b.top, c.b.top);
      if (w > 1 && h > 1) clash.push(`${a.kind} "${a.text}" / ${c.kind} "${c.text}"`);
    });
  });
  const title = gd.layout.title && (gd.layout.title.text !== undefined ? gd.layout.title.text : gd.layout.title);
  return {title: String(title || '').slice(0, 60), width: box.width, share, clash, outside};
}"""


def check_phone_layout(path: str, i: int, info: dict) -> None:
    where = f"{path}: figure {i} ({info['title']!r}) at {info['width']:.0f} px"
    if info["share"] is not None:
        assert info["share"] >= MIN_PLOT_SHARE, f"{where}: the plot spans {info['share']:.0%} of the width"
    assert info["clash"] == [], f"{where}: texts run into each other: {info['clash']}"
    assert info["outside"] == [], f"{where}: texts leave the figure: {info['outside']}"


def test_colab_links_point_at_notebooks_in_the_repo():
    config = yaml.safe_load((REPO / "_config.yml").read_text())
    repo_path = urlparse(config["repository"]["url"]).path.strip("/")
    prefix = f"https://colab.research.google.com/github/{repo_path}/blob/{config['repository']['branch']}/"
    chapters = [e for e in built_toc() if e.startswith("chapters/")]
    assert chapters, "no chapter in _toc.yml"
    for entry in chapters:
        html = (HTML / f"{entry}.html").read_text()
        links = set(re.findall(r'href="(https://colab\.research\.google\.com/[^"]+)"', html))
        assert links, f"{entry}.html has no Colab link"
        for link in links:
            assert link.startswith(prefix), f"{entry}.html: Colab link {link} does not start with {prefix}"
            target = REPO / link[len(prefix) :]
            assert target.suffix == ".ipynb" and target.is_file(), f"{entry}.html: {link} names no notebook in the repo"


CELL_INPUT = re.compile(
    r'<div class="cell_input docutils container">\s*<div class="highlight-[\w-]+ notranslate">'
    r'<div class="highlight"><pre>(.*?)</pre>',
    re.S,
)


def visible_code_cells(page_html: str) -> list[str]:
    """The source of every code cell whose input a built page contains (shown, or folded behind a toggle)."""
    return [html.unescape(re.sub(r"<[^>]+>", "", block)) for block in CELL_INPUT.findall(page_html)]


def test_no_page_shows_a_cell_that_only_glues():
    from attnbook_book.notebooks import is_glue_only

    chapters = [e for e in built_toc() if e.startswith("chapters/")]
    assert chapters, "no chapter in _toc.yml"
    for entry in chapters:
        cells = visible_code_cells((HTML / f"{entry}.html").read_text())
        assert cells, f"{entry}.html: no code cell found; has the page layout changed?"
        glue_only = [c for c in cells if is_glue_only(c)]
        assert not glue_only, f"{entry}.html shows cells that only glue numbers (tag them remove-input): {glue_only}"


def test_visible_code_cells_are_read_from_the_page():
    page = (
        '<div class="cell_input docutils container">\n<div class="highlight-ipython3 notranslate"><div class='
        '"highlight"><pre><span></span><span class="n">viz</span><span class="o">.</span><span class="n">glue'
        '</span><span class="p">(</span><span class="s2">&quot;a&quot;</span><span class="p">,</span> '
        '<span class="mi">1</span><span class="p">)</span>\n</pre></div>'
    )
    assert visible_code_cells(page) == ['viz.glue("a", 1)\n']


def test_every_chapter_has_an_execution_time():
    report = json.loads((HTML.parent / "reports" / "execution_times.json").read_text())
    for entry in built_toc():
        if entry.startswith("chapters/"):
            name = Path(entry).name
            assert name in report and report[name]["passed"], f"{name}: no passing execution in the report"


def test_diagram_files_render_on_their_own(browser):
    """What Jupyter shows: each diagram file, loaded as an image outside the book, has a size."""
    import base64

    page = browser.new_page()
    try:
        for path in sorted((REPO / "book" / "images" / "diagrams").glob("*.svg")):
            data = base64.b64encode(path.read_bytes()).decode()
            page.set_content(f'<img id="d" src="data:image/svg+xml;base64,{data}">')
            page.wait_for_function("document.getElementById('d').complete")
            width = page.evaluate("document.getElementById('d').naturalWidth")
            assert width > 0, f"{path.name} does not render as an image"
    finally:
        page.close()
