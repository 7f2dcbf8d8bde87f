"""The book's math, typeset when the book is built: no MathJax runs in the reader's browser.

Sphinx writes each formula as TeX between ``\\(...\\)`` or ``\\[...\\]`` in an element of class ``math``, and
MathJax used to find and typeset them in the browser after the page loaded: a megabyte of script and, on a
phone, a long pause of the page before it answers, with the text moving as the formulas took their size. Now
MathJax 3 (npm's ``mathjax-full``, the same version the browser ran) typesets them once, in Node
(``tex2svg.js``), when the build has written the pages. Each formula becomes MathJax's SVG output
(``<mjx-container>``, with the MathML that screen readers read); the shape of each glyph is written once per
page, in a hidden SVG at the start of the page's article (MathJax's global font cache), and MathJax's
stylesheet goes into the page's ``<head>``. SVG rather than MathJax's HTML output: that output needs
MathJax's web fonts, which the browser fetches, at the highest priority, before it paints the text. The PDF
edition prints the same pages.

``typeset_site`` runs at the end of the build (``sphinx.py``); ``drop_mathjax_scripts`` keeps Sphinx's
MathJax script off the pages.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
from pathlib import Path

from sphinx.errors import ExtensionError

SCRIPT = Path(__file__).with_name("tex2svg.js")
# An element Sphinx writes for a formula, and the TeX inside it (HTML-escaped) between its delimiters.
MATH = re.compile(
    r'(?P<open><(?P<tag>span|div) class="math notranslate nohighlight[^"]*"[^>]*>)(?P<inner>.*?)(?P<close></(?P=tag)>)',
    re.S,
)
TEX = re.compile(r"\\\((?P<inline>.*?)\\\)|\\\[(?P<display>.*?)\\\]", re.S)
STYLE_ID = "attnbook-math-css"
GLYPHS_CLASS = "attnbook-math-glyphs"
ARTICLE = re.compile(r'<article class="bd-article"[^>]*>')


def _formulas(inner: str) -> list[tuple[re.Match, str, bool]]:
    return [
        (m, html.unescape(m["inline"] if m["inline"] is not None else m["display"]), m["display"] is not None)
        for m in TEX.finditer(inner)
    ]


def typeset(pages: list[list[tuple[str, bool]]], node_modules: Path) -> list[dict]:
    """Typeset every page's formulas (``(tex, display)``) with MathJax in Node; per page
    ``{html: [...], glyphs, css, errors}``."""
    request = {"pages": [[{"tex": t, "display": d} for t, d in p] for p in pages]}
    env = {**os.environ, "ATTNBOOK_NODE_MODULES": str(node_modules)}
    done = subprocess.run(
        ["node", str(SCRIPT)], input=json.dumps(request), capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise ExtensionError(f"MathJax (node {SCRIPT.name}) failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout)["pages"]


def typeset_site(outdir: Path, node_modules: Path) -> dict[str, int]:
    """Replace the TeX of every page under ``outdir`` by MathJax's SVG; returns the formulas per page."""
    files = [p for p in sorted(Path(outdir).rglob("*.html")) if 'class="math notranslate' in p.read_text()]
    texts = [p.read_text() for p in files]
    found = [[f for m in MATH.finditer(text) for f in _formulas(m["inner"])] for text in texts]
    results = typeset([[(tex, display) for _, tex, display in page] for page in found], node_modules)
    counts = {}
    for path, text, formulas, result in zip(files, texts, found, results, strict=True):
        page = path.relative_to(outdir).as_posix()
        if result["errors"]:
            raise ExtensionError(f"{page}: MathJax could not typeset: {result['errors']}")
        if not ARTICLE.search(text):
            raise ExtensionError(f'{page}: no <article class="bd-article"> for the math\'s glyphs')
        rendered = iter(result["html"])

        def replace(m: re.Match, rendered=rendered) -> str:
            inner = TEX.sub(lambda _: next(rendered), m["inner"])
            return m["open"] + inner + m["close"]

        text = MATH.sub(replace, text)
        glyphs = f'<svg class="{GLYPHS_CLASS}" style="display:none" aria-hidden="true">{result["glyphs"]}</svg>'
        text = ARTICLE.sub(lambda m: m[0] + glyphs, text, count=1)
        css = re.sub(r"\n\s*", "", result["css"])
        text = text.replace("</head>", f'<style id="{STYLE_ID}">{css}</style>\n</head>', 1)
        path.write_text(text)
        counts[page] = len(formulas)
    return counts


def drop_mathjax_scripts(app, pagename, templatename, context, doctree) -> None:
    """No MathJax in the browser: Sphinx's script and its settings leave the page (the build typesets)."""
    scripts = context.get("script_files")
    if not scripts:
        return
    path = app.config.mathjax_path
    scripts[:] = [
        s
        for s in scripts
        if str(s.filename or "") != path and not str(s.attributes.get("body", "")).startswith("window.MathJax")
    ]
