"""The built HTML book, opened in headless Chromium (Debian's package, driven by Playwright).

On every page: no console errors, no request leaves the local server, math is rendered, and every image
has alt text. On pages with plotly figures: every figure renders, and moving a slider changes its figure.
On pages with widgets: the widgets render. Every Colab link points at a notebook that exists in the
repository. No chapter page shows a code cell that only glues numbers into the prose.
"""
from __future__ import annotations

import functools
import html
import http.server
import json
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

pytestmark = pytest.mark.site

REPO = Path(__file__).resolve().parents[1]
HTML = Path(os.environ.get("ATTNBOOK_HTML") or REPO / "_build" / "html").resolve()
CHROMIUM = os.environ.get("CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def built_toc() -> list[str]:
    """The pages named in the _toc.yml the site was built from (the whole book unless built with PARTIAL=1)."""
    from attnbook_book.notebooks import toc_files

    staged = HTML.parent / "src"
    return toc_files(staged if (staged / "_toc.yml").exists() else REPO)


def content_pages() -> list[str]:
    """Every page of the book, plus the generated index and search pages."""
    return [f"{entry}.html" for entry in built_toc()] + ["genindex.html", "search.html"]


@pytest.fixture(scope="module")
def server():
    if not (HTML / "index.html").exists():
        pytest.fail(f"{HTML} has no built book: run `make html` (or `make book`) first")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(HTML)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"Chromium not found at {CHROMIUM}: `make setup` installs Debian's chromium"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def open_page(browser, url: str):
    """Open ``url``; return the page, its console errors and the requests that left the local server."""
    page = browser.new_page()
    errors: list[str] = []
    outside: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    local = urlparse(url).netloc

    def on_request(request):
        parsed = urlparse(request.url)
        if parsed.scheme in ("data", "blob", "about"):
            return
        if parsed.netloc != local:
            outside.append(request.url)

    page.on("request", on_request)
    page.on("response", lambda r: errors.append(f"HTTP {r.status} for {r.url}") if r.status >= 400 else None)
    page.goto(url, wait_until="load", timeout=120_000)
    page.wait_for_load_state("networkidle", timeout=120_000)
    return page, errors, outside


@pytest.mark.parametrize("path", content_pages())
def test_page(server, browser, path):
    assert (HTML / path).exists(), f"{path} was not built"
    page, errors, outside = open_page(browser, f"{server}/{path}")
    try:
        # Math: every math element is typeset by MathJax, none with an error.
        n_math = page.locator(".math").count()
        if n_math:
            page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.document")
            page.evaluate("() => MathJax.startup.promise")
            rendered = page.locator(".math mjx-container").count()
            assert rendered >= n_math, f"{path}: {rendered} of {n_math} math elements rendered by MathJax"
            assert page.locator("mjx-merror").count() == 0, f"{path}: MathJax reported an error"

        # Plotly: every figure is drawn; moving each slider changes its figure.
        figures = page.locator("div.attnbook-plotly")
        for i in range(figures.count()):
            figure = figures.nth(i)
            figure.scroll_into_view_if_needed()
            figure.locator(".main-svg").first.wait_for(state="attached", timeout=15_000)
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

        # Widgets: saved widget state is rendered by the local widget manager.
        views = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
        if views:
            page.locator(".jupyter-widgets").first.wait_for(state="attached", timeout=15_000)
            assert page.locator(".jupyter-widgets").count() >= views
            assert "Error rendering" not in page.content()

        # Images, static and drawn by widgets: each says what it shows (not empty, not a file name).
        images = page.evaluate("() => [...document.images].map(i => [i.getAttribute('alt'), i.src.slice(0, 80)])")
        no_alt = [src for alt, src in images if not alt or not alt.strip() or re.search(r"\.(png|svg|jpe?g|gif)$", alt)]
        assert no_alt == [], f"{path}: {len(no_alt)} of {len(images)} images without alt text: {no_alt}"

        assert errors == [], f"{path}: console errors: {errors}"
        assert outside == [], f"{path}: requests left the local server: {outside}"
    finally:
        page.close()


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
            target = REPO / link[len(prefix):]
            assert target.suffix == ".ipynb" and target.is_file(), f"{entry}.html: {link} names no notebook in the repo"


CELL_INPUT = re.compile(r'<div class="cell_input docutils container">\s*<div class="highlight-[\w-]+ notranslate">'
                        r'<div class="highlight"><pre>(.*?)</pre>', re.S)


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
    page = ('<div class="cell_input docutils container">\n<div class="highlight-ipython3 notranslate"><div class='
            '"highlight"><pre><span></span><span class="n">viz</span><span class="o">.</span><span class="n">glue'
            '</span><span class="p">(</span><span class="s2">&quot;a&quot;</span><span class="p">,</span> '
            '<span class="mi">1</span><span class="p">)</span>\n</pre></div>')
    assert visible_code_cells(page) == ['viz.glue("a", 1)\n']


def test_every_chapter_has_an_execution_time():
    report = json.loads((HTML.parent / "reports" / "execution_times.json").read_text())
    for entry in built_toc():
        if entry.startswith("chapters/"):
            name = Path(entry).name
            assert name in report and report[name]["passed"], f"{name}: no passing execution in the report"
