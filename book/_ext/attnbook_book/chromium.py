"""The built book served on localhost and opened in Debian's Chromium, driven by Playwright.

One place for what the site tests, the accessibility audit (``a11y``) and the PDF edition (``pdf``) share:
where Chromium is, the flags that keep it off the network, a quiet local web server for a folder, and the
pages of the book in the order of its ``_toc.yml``. Playwright never downloads a browser here.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

CHROMIUM = os.environ.get("CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve ``folder`` on 127.0.0.1 (a free port) while the block runs; yields the base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextlib.contextmanager
def launch():
    """Headless Chromium (Debian's package) under Playwright; yields the browser."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        raise FileNotFoundError(f"Chromium not found at {CHROMIUM}: `make setup` installs Debian's chromium")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def toc_pages(html: Path) -> list[str]:
    """The pages of the book built into ``html``, in reading order (from the ``_toc.yml`` it was built from:
    the staged sources beside it, else the repository's)."""
    from .notebooks import toc_files

    staged = Path(html).parent / "src"
    repo = Path(__file__).resolve().parents[3]
    return [f"{entry}.html" for entry in toc_files(staged if (staged / "_toc.yml").exists() else repo)]


# Every stylesheet a page fetches after its first paint (attnbook_book.critical) has arrived and applies.
STYLED = "() => [...document.querySelectorAll('link[data-attnbook-href]')].every(l => l.sheet && l.media === 'all')"


def wait_styled(page, timeout: float = 60_000) -> None:
    """Wait until ``page`` has every stylesheet it fetches after its first paint (critical.mjs)."""
    page.wait_for_function(STYLED, timeout=timeout)


def set_mode(page, mode: str) -> None:
    """Make ``page`` open in the theme's colour mode ``mode`` ("light" or "dark"), as the toggle stores it."""
    page.add_init_script(f"localStorage.setItem('mode', '{mode}'); localStorage.setItem('theme', '{mode}');")
