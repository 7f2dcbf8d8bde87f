"""The built HTML book, opened in headless Chromium (Debian's package, driven by Playwright).

On every page: no console errors, no request leaves the local server, math is rendered. On pages with
plotly figures: every figure renders, and moving a slider changes its figure. On pages with widgets:
the widgets render. Every diagram is drawn, numbered, captioned and labelled for screen readers. Every
page is opened again in dark mode at a phone's width: diagrams, plots and widgets take the dark colours,
still with no console error. Every Colab link points at a notebook that exists in the repository.
"""
from __future__ import annotations

import functools
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


def open_page(browser, url: str, *, mode: str | None = None, width: int | None = None):
    """Open ``url`` (in colour ``mode`` and at viewport ``width`` if given); return the page, its console
    errors and the requests that left the local server."""
    page = browser.new_page(viewport={"width": width, "height": 900} if width else None)
    if mode:  # what the theme's toggle stores
        page.add_init_script(f"localStorage.setItem('mode', '{mode}'); localStorage.setItem('theme', '{mode}');")
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

        check_diagrams(page, path)
        assert errors == [], f"{path}: console errors: {errors}"
        assert outside == [], f"{path}: requests left the local server: {outside}"
    finally:
        page.close()


def contrast(a: str, b: str) -> float:
    """The WCAG contrast ratio of two CSS colours written as rgb(...) or rgba(...)."""
    def luminance(css):
        r, g, b = (float(v) / 255 for v in re.findall(r"[\d.]+", css)[:3])
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


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

    page, errors, outside = open_page(browser, f"{server}/{path}", mode="dark", width=390)
    try:
        assert page.evaluate("document.documentElement.dataset.theme") == "dark"
        n = check_diagrams(page, path)
        if n:  # the diagrams take the dark colours of the palette
            ink = page.evaluate("getComputedStyle(document.querySelector('svg.abd')).getPropertyValue('--ink')")
            assert ink.strip() == style.theme("dark")["ink"], f"{path}: diagrams keep their light colours"
        figures = page.locator("div.attnbook-plotly")
        for i in range(figures.count()):
            figure = figures.nth(i)
            figure.scroll_into_view_if_needed()
            figure.locator(".main-svg").first.wait_for(state="attached", timeout=15_000)
            page.wait_for_function("el => el.dataset.attnbookTheme === 'dark'", arg=figure.element_handle(),
                                   timeout=15_000)
            font = figure.evaluate("el => el._fullLayout.font.color")
            assert font == style.PLOTLY_DARK["font_color"], f"{path}: plotly figure {i} keeps dark text on a dark page"
        if page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count():
            # widgets do not follow the mode: the theme shows them on a light card; their text must stay dark
            page.locator(".jupyter-widgets").first.wait_for(state="attached", timeout=15_000)
            colours = page.evaluate("""() => Array.from(document.querySelectorAll('.widget-subarea .widget-label'))
                .map(e => [getComputedStyle(e).color, getComputedStyle(e.closest('.widget-subarea')).backgroundColor])""")
            for text, card in colours:
                assert contrast(text, card) >= 4.5, f"{path}: widget text {text} on {card}"
        assert errors == [], f"{path}: console errors in dark mode: {errors}"
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


def test_every_chapter_has_an_execution_time():
    report = json.loads((HTML.parent / "reports" / "execution_times.json").read_text())
    for entry in built_toc():
        if entry.startswith("chapters/"):
            name = Path(entry).name
            assert name in report and report[name]["passed"], f"{name}: no passing execution in the report"
