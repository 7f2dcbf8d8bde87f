"""The text first: what a page loads before a reader sees its words, and what it loads only when needed.

In every built page's ``<head>``, nothing heavy stands before the text: the only script that runs before the
page is parsed is Sphinx's few lines of options; no MathJax (the build typesets the math), no plotly.js, no
widget manager, no Font Awesome script and, but on the search page, no search index. Figures and widgets
load when they come near the screen and only on the pages that have them: opened at a phone's size, a page
fetches no plotly.js, figure, widget manager or font until the reader scrolls to a figure, which is then drawn.
plotly.js is npm's partial bundle of the trace types the book draws: it has every one of them, and every figure
of the book uses only those. How fast the pages open on a phone is measured in test_site_lighthouse.py.
"""

from __future__ import annotations

import re

import pytest
from site_helpers import HTML, LAPTOP, PHONE, built_toc, content_pages, open_page

pytestmark = pytest.mark.site

# What may never stand in a page before its text: the big scripts, and a stylesheet that imports another.
HEAVY = re.compile(
    r"mathjax|tex-chtml|plotly(?!-book\.js)|require\.js|embed-amd|html-manager|fontawesome|onnxruntime", re.I
)
BLOCKING_SCRIPTS = {"documentation_options.js"}  # Sphinx's options, read by the inline scripts after it
MAX_HTML_KB = 600  # a page's own HTML, uncompressed: its text, code, outputs and math, and no figure data
MAX_STYLE_KB = 120  # the rules it carries for its first screen (attnbook_book.critical) and its math's


def head_of(page: str) -> str:
    text = (HTML / page).read_text()
    return text[: text.index("</head>")]


@pytest.mark.parametrize("page", content_pages())
def test_nothing_heavy_before_the_text(page):
    head = head_of(page)
    scripts = re.findall(r"<script\b([^>]*)>", head)
    external = [a for a in scripts if "src=" in a]
    blocking = [
        re.search(r'src="([^"]+)"', a)[1]
        for a in external
        if not re.search(r"\b(defer|async)\b", a) and not any(name in a for name in BLOCKING_SCRIPTS)
    ]
    if page != "search.html":  # the search page runs Sphinx's search in front of its results
        assert blocking == [], f"{page}: scripts that run before the text: {blocking}"
    heavy = [re.search(r'src="([^"]+)"', a)[1] for a in external if HEAVY.search(a)]
    assert heavy == [], f"{page}: loads {heavy} with the page"
    if page != "search.html":
        assert "searchindex.js" not in head, f"{page}: loads the search index with the page"
    assert "window.MathJax" not in head, f"{page}: sets up MathJax"
    assert "styles/theme.css" not in head, f"{page}: links the theme stylesheet that only imports another"
    text = (HTML / page).read_text()
    assert "Plotly.newPlot" not in text and "attnbookPlotly.figure(" not in text, f"{page}: figure data inline"
    own = re.sub(r"<style\b[^>]*>.*?</style>", "", text, flags=re.S)  # its first screen's rules: a budget below
    assert len(own.encode()) <= MAX_HTML_KB * 1024, f"{page}: {len(own.encode()) // 1024} KB of HTML"
    rules = len(text.encode()) - len(own.encode())
    assert rules <= MAX_STYLE_KB * 1024, f"{page}: {rules // 1024} KB of <style> rules in the page"


def test_search_page_has_its_index():
    head = (HTML / "search.html").read_text()
    assert "searchtools.js" in head, "the search page does not load Sphinx's search"


def first_page_with_figures_and_widgets() -> str:
    for entry in built_toc():
        text = (HTML / f"{entry}.html").read_text() if entry.startswith("chapters/") else ""
        if 'class="attnbook-plotly"' in text and "application/vnd.jupyter.widget-view+json" in text:
            return f"{entry}.html"
    pytest.fail("no chapter page has both plotly figures and widgets")


LAZY = re.compile(r"/_static/(vendor/(plotly|require|html-manager)/|figures/)|\.woff2?$|\.ttf$")


def test_figures_and_widgets_load_when_near_the_screen(server, browser):
    page_path = first_page_with_figures_and_widgets()
    requested: list[str] = []
    page, errors, outside = open_page(browser, f"{server}/{page_path}", requested=requested, viewport=PHONE)
    try:
        early = [u for u in requested if LAZY.search(u)]
        assert early == [], f"{page_path} loaded before the reader scrolled: {early}"
        figure = page.locator("div.attnbook-plotly").first
        assert figure.locator(".main-svg").count() == 0, "a figure far down the page was drawn at once"
        height = figure.evaluate("el => el.getBoundingClientRect().height")
        figure.scroll_into_view_if_needed()
        figure.locator(".main-svg").first.wait_for(state="attached", timeout=30_000)
        loaded = [u for u in requested if LAZY.search(u)]
        assert any("/vendor/plotly/plotly-cartesian" in u for u in loaded), f"plotly.js not loaded: {loaded}"
        assert any("/_static/figures/" in u for u in loaded), f"the figure's data not loaded: {loaded}"
        # the box kept its place: the figure drawn into it does not move the text below
        page.wait_for_function("el => el.dataset.attnbookMode && !el._attnbookBusy", arg=figure.element_handle())
        drawn = figure.evaluate("el => el.getBoundingClientRect().height")
        assert abs(drawn - height) <= 1 or figure.evaluate("el => !!el.layout.width"), (
            f"the figure's box was {height:.0f} px high, the figure {drawn:.0f} px"
        )
        assert not any("require.js" in u for u in requested), "the widget manager loaded with a figure"
        view = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').first
        view.evaluate("v => v.parentElement.scrollIntoView({block: 'center'})")
        page.locator(".jupyter-widgets").first.wait_for(state="attached", timeout=30_000)
        assert any(u.endswith("embed-amd.js") for u in requested)
        assert errors == [] and outside == []
    finally:
        page.close()


def test_pages_without_widgets_or_figures_load_neither(server, browser):
    for entry in built_toc():
        text = (HTML / f"{entry}.html").read_text()
        if "attnbook-plotly" in text or "widget-view+json" in text:
            continue
        requested: list[str] = []
        page, errors, outside = open_page(browser, f"{server}/{entry}.html", requested=requested)
        try:
            page.evaluate("() => window.scrollTo(0, document.body.scrollHeight)")
            page.wait_for_timeout(500)
            loaded = [u for u in requested if LAZY.search(u) or "widgets.js" in u or "plotly-book.js" in u]
            assert loaded == [], f"{entry} has no figure or widget but loaded {loaded}"
            assert errors == [] and outside == []
        finally:
            page.close()
        return
    pytest.fail("every page has a figure or a widget")


def test_the_plotly_bundle_draws_every_trace_type_of_the_book(server, browser):
    """The partial bundle registers every trace type the build accepts, and every figure of the book uses only
    those (the build refuses another; this reads the figures the site serves)."""
    import json

    from attnbook_book.plotly_renderer import TRACE_TYPES, trace_types

    used = set()
    for script in sorted((HTML / "_static" / "figures").glob("*.js")):
        text = script.read_text()
        data, layout, _ = json.loads(text[text.index(",") + 1 : text.rindex(")")])
        used |= trace_types({"data": data, "layout": layout})
    assert used, "no figure in _static/figures"
    assert used <= TRACE_TYPES, f"figures use trace types the bundle lacks: {used - TRACE_TYPES}"
    page, errors, _ = open_page(browser, f"{server}/{first_page_with_figures_and_widgets()}")
    try:
        page.evaluate("() => attnbookPlotly.draw(document.querySelector('div.attnbook-plotly'))")
        registered = set(page.evaluate("() => Object.keys(Plotly.PlotSchema.get().traces)"))
        assert TRACE_TYPES <= registered, f"the bundle lacks {TRACE_TYPES - registered}"
        print(f"\nthe book's figures use {sorted(used)}; the bundle draws {sorted(registered)}")
        assert errors == []
    finally:
        page.close()


# --- the first screen styled by the page itself (attnbook_book.critical) --------------------------------------

STYLESHEET = re.compile(r"\.css(\?|$)")
# What is compared of each element on the first screen: where it is, how big, and how it is drawn.
FIRST_SCREEN = """() => {
  const props = ['display', 'visibility', 'position', 'font-size', 'font-weight', 'font-family', 'line-height',
                 'color', 'background-color', 'border-top-color', 'border-top-width', 'padding-left',
                 'margin-top', 'opacity', 'text-decoration-line', 'text-decoration-color', 'fill', 'box-shadow',
                 'outline-style', 'border-top-left-radius', 'transform'];
  const before = ['content', 'font-family', 'color', 'width'];  // icons and markers drawn by ::before
  const seen = {};
  const all = [document.documentElement, document.body, ...document.querySelectorAll('body *')];
  all.forEach((e, i) => {
    const r = e.getBoundingClientRect();
    if (r.bottom <= 0 || r.top >= innerHeight || r.right <= 0 || r.left >= innerWidth) return;
    if (r.width === 0 && r.height === 0) return;
    const c = getComputedStyle(e), b = getComputedStyle(e, '::before');
    const name = e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') +
      (typeof e.className === 'string' && e.className.trim() ? '.' + e.className.trim().split(/\\s+/).join('.') : '');
    seen[i] = [name, [r.x, r.y, r.width, r.height].map(Math.round).join(' '), ...props.map(p => `${p}: ${c[p]}`),
               ...before.map(p => `::before ${p}: ${b[p]}`)];
  });
  return seen;
}"""


def first_screen(browser, url: str, *, stylesheets: bool, mode: str, viewport: dict) -> dict:
    from attnbook_book.chromium import set_mode, wait_styled

    page = browser.new_page(viewport=viewport)
    try:
        set_mode(page, mode)
        if not stylesheets:  # as a reader on a slow network sees the page before its stylesheets arrive
            page.route(STYLESHEET, lambda route: route.abort())
        page.goto(url, wait_until="load", timeout=120_000)
        page.wait_for_load_state("networkidle", timeout=120_000)
        if stylesheets:  # every one of them fetched and applied
            wait_styled(page)
        page.wait_for_timeout(300)  # the theme's scripts have set the mode and the sidebars
        return page.evaluate(FIRST_SCREEN)
    finally:
        page.close()


def _differences(before: dict, after: dict) -> list[str]:
    found = []
    for i in sorted(set(before) | set(after), key=int):
        a, b = before.get(i), after.get(i)
        if a is None or b is None:
            shown = a or b
            found.append(f"{shown[0]} at {shown[1]}: on the first screen only {'before' if a else 'after'}")
        elif a != b:
            changed = [f"{x} -> {y}" for x, y in zip(a[1:], b[1:]) if x != y]
            found.append(f"{a[0]}: {'; '.join(changed)}")
    return found


def _largest_chapter() -> str:
    pages = [p for p in content_pages() if p.startswith("chapters/")]
    return max(pages, key=lambda p: (HTML / p).stat().st_size)


# Every page at a phone's size (but the search page, whose results the scripts write: it keeps its stylesheets
# in front of its text), the home page and the largest chapter in both modes and at a laptop's size, and a
# page opened at its exercises (answers in boxes the scripts make foldable).
FIRST_SCREENS = (
    [(page, PHONE, "light") for page in content_pages() if page != "search.html"]
    + [
        (page, viewport, mode)
        for page in ("book/intro.html", "largest chapter")
        for viewport, mode in ((PHONE, "dark"), (LAPTOP, "light"), (LAPTOP, "dark"))
    ]
    + [("chapters/04_queries_keys_values.html#exercises", viewport, mode) for viewport, mode in
       ((PHONE, "dark"), (LAPTOP, "light"))]
)  # fmt: skip


@pytest.mark.parametrize(
    "page, viewport, mode", FIRST_SCREENS, ids=[f"{p}-{v['width']}-{m}" for p, v, m in FIRST_SCREENS]
)
def test_the_first_screen_is_drawn_before_the_stylesheets_arrive(server, browser, page, viewport, mode):
    """The rules each page carries (its critical CSS) lay out and colour its first screen as the whole
    stylesheets do: every element on it in the same place, at the same size, in the same font and colours,
    before the stylesheets arrive as after. So the text can be painted first, and nothing moves when they
    arrive."""
    page = _largest_chapter() if page == "largest chapter" else page
    head = head_of(page.split("#")[0])
    links = re.findall(r'<link\b[^>]*rel="stylesheet"[^>]*>', re.sub(r"<noscript>.*?</noscript>", "", head, flags=re.S))
    assert len(links) >= 10, f"{page}: {len(links)} stylesheets"
    waiting = [link for link in links if "data-attnbook-href=" not in link or re.search(r"(?<![\w-])href=", link)]
    assert waiting == [], f"{page}: stylesheets fetched with the page, before its first paint: {waiting}"
    url = f"{server}/{page}"
    before = first_screen(browser, url, stylesheets=False, mode=mode, viewport=viewport)
    after = first_screen(browser, url, stylesheets=True, mode=mode, viewport=viewport)
    assert len(after) > 10, f"{page}: only {len(after)} elements on the first screen"
    differences = _differences(before, after)
    assert differences == [], f"{page} ({viewport['width']} px, {mode}) changes when its stylesheets arrive:\n" + (
        "\n".join(differences[:25])
    )
