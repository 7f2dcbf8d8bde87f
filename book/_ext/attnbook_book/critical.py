"""Each page styled first by rules it carries itself, so that no stylesheet stands between a reader and the
text (critical CSS).

A page links eleven stylesheets (the theme's, Sphinx's, the extensions', the book's): 476 kB, 80 kB
compressed, that a phone used to fetch over a slow network before it painted a word. At the end of the build
Beasties (npm, in Node: ``critical.mjs``) writes into each page the rules of those stylesheets that match the
page's own elements, in both colour modes (about a fifth of them: about 90 kB, 23 kB compressed, with
the icons' fonts), and has the stylesheets fetched once the text is painted. The whole stylesheets then apply
as before: what the page's scripts add later (figures, widgets, tooltips, the words a search highlights) is
styled by them. ``tests/book/test_site_speed.py`` checks that the first screen of a page is laid out and
coloured the same before the stylesheets arrive as after.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from sphinx.errors import ExtensionError

SCRIPT = Path(__file__).with_name("critical.mjs")


def pages_of(outdir: Path) -> list[str]:
    """The site's pages: every HTML file but those under its ``_static``, ``_sources`` and ``_images``."""
    return [
        p.relative_to(outdir).as_posix()
        for p in sorted(outdir.rglob("*.html"))
        if not p.relative_to(outdir).parts[0].startswith("_")
    ]


def inline_site(outdir: Path, node_modules: Path) -> dict[str, int]:
    """Write each page's critical CSS into it; returns the characters of CSS in each page's ``<style>``s."""
    env = {**os.environ, "ATTNBOOK_NODE_MODULES": str(node_modules)}
    done = subprocess.run(
        ["node", str(SCRIPT), str(outdir), *pages_of(outdir)], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise ExtensionError(f"critical CSS (node {SCRIPT.name}) failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout)
