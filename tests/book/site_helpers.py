"""What the site tests share: where the built book is, its pages, and a page opened in Chromium.

The server and the browser are fixtures (``conftest.py``); Chromium, its flags and the local server come
from ``attnbook_book.chromium``, which the accessibility audit and the PDF edition use too.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parents[2]
HTML = Path(os.environ.get("ATTNBOOK_HTML") or REPO / "_build" / "html").resolve()
INPAGE_ASSETS = re.compile(r"/_static/(vendor/onnxruntime|models)/")  # what the model in the page loads
LAPTOP = {"width": 1280, "height": 720}  # a laptop's screen, with the theme's two sidebars beside the text
PHONE = {"width": 390, "height": 900}  # a phone's screen


def built_toc() -> list[str]:
    """The pages named in the _toc.yml the site was built from (the whole book unless built with PARTIAL=1)."""
    from attnbook_book.chromium import toc_pages

    return [page.removesuffix(".html") for page in toc_pages(HTML)]


def content_pages() -> list[str]:
    """Every page of the book, plus the generated index and search pages."""
    return [f"{entry}.html" for entry in built_toc()] + ["genindex.html", "search.html"]


def open_page(browser, url: str, *, requested: list[str] | None = None, mode: str | None = None, **page_options):
    """Open ``url``; return the page, its console errors and the requests that left the local server.

    ``requested``, when given, collects the URL of every request the page makes; ``mode`` ("light" or
    "dark") is the colour mode the theme's toggle would have stored; ``page_options`` go to
    ``browser.new_page`` (a phone's viewport, for example).
    """
    from attnbook_book.chromium import set_mode, wait_styled

    page = browser.new_page(**page_options)
    if mode:
        set_mode(page, mode)
    errors: list[str] = []
    outside: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    local = urlparse(url).netloc

    def on_request(request):
        if requested is not None:
            requested.append(request.url)
        parsed = urlparse(request.url)
        if parsed.scheme in ("data", "blob", "about"):
            return
        if parsed.netloc != local:
            outside.append(request.url)

    page.on("request", on_request)
    page.on("response", lambda r: errors.append(f"HTTP {r.status} for {r.url}") if r.status >= 400 else None)
    page.goto(url, wait_until="load", timeout=120_000)
    page.wait_for_load_state("networkidle", timeout=120_000)
    wait_styled(page)
    return page, errors, outside


def figures_drawn(page, timeout: float = 15_000):
    """Every plotly figure of the page, scrolled into view once and drawn in its final layout."""
    figures = page.locator("div.attnbook-plotly")
    for i in range(figures.count()):
        figure = figures.nth(i)
        figure.scroll_into_view_if_needed()
        figure.locator(".main-svg").first.wait_for(state="attached", timeout=timeout)
        page.wait_for_function(
            "el => el.dataset.attnbookMode && !el._attnbookBusy", arg=figure.element_handle(), timeout=timeout
        )
    return figures


def contrast(a: str, b: str) -> float:
    """The WCAG contrast ratio of two CSS colours written as rgb(...) or rgba(...)."""

    def luminance(css):
        r, g, b = (float(v) / 255 for v in re.findall(r"[\d.]+", css)[:3])
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


# Where the keyboard focus is drawn: the focused element's outline, or (plotly's SVG controls) the stroke
# of the shapes the book's stylesheet rings. Returns [what, width in px, colour] or null without focus.
FOCUS_RING = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const s = getComputedStyle(el);
  if (s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) > 0)
    return ['outline', parseFloat(s.outlineWidth), s.outlineColor];
  if (s.boxShadow && s.boxShadow !== 'none') return ['box-shadow', 2, s.boxShadow];
  const shape = el.querySelector && el.querySelector('.slider-grip-rect, rect');
  if (shape) { const r = getComputedStyle(shape); return ['stroke', parseFloat(r.strokeWidth), r.stroke]; }
  return ['none', 0, ''];
}"""


# Every code cell's input, folded cells and solutions opened, that is wider than its box: [nearest id, first
# line, scroll width, box width]. The chapters' code is at most 79 columns (chapters/ruff.toml); at 1280 px
# the page's code column holds 84 characters, 81 in a solution's dropdown.
WIDE_CODE = """() => {
  document.querySelectorAll('details').forEach(d => d.open = true);
  document.querySelectorAll('.toggle-hidden, .toggle-details__container')
    .forEach(e => e.classList.remove('toggle-hidden'));
  return [...document.querySelectorAll('article .cell_input pre')]
    .filter(p => p.scrollWidth > p.clientWidth + 1)
    .map(p => [(p.closest('[id]') || {}).id, p.textContent.split('\\n')[0].slice(0, 60), p.scrollWidth, p.clientWidth]);
}"""
