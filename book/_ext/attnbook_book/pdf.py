"""The PDF edition: the built HTML book printed by Chromium into one file, with no network.

    python -m attnbook_book.pdf _build/html _build/pdf/attention-step-by-step.pdf

Why Chromium rather than Sphinx's LaTeX builder: the pages the readers see are already built from this
run's executed notebooks, with everything that makes them the book (diagrams drawn inline in the book's
colours, plotly figures, numbers glued into the prose, MathJax's equations, the chapter map, the tables
the build writes); printing them keeps all of it, with nothing more to install than the Chromium the site
tests use. The LaTeX builder would need a TeX installation of several hundred megabytes, SVG converters and
a static export of every plotly figure, and would drop the HTML the book writes itself.

How: every page of ``_toc.yml`` is opened and drawn (its plotly figures and widgets, which a page draws only
when they come near the screen, all at once; the math is typeset when the book is built); each plotly figure
becomes a static
SVG image of its default state (a vector), widgets and the models in the page become a line that says where
to try them, folded solutions are unfolded and the code hidden behind a toggle stays hidden. The articles are
put one after another in one document, under a title page, a contents page and a page for each part, with
their ids and links made unique and internal (a link to another page of the book becomes a link inside the
PDF). Chromium prints it on A4 with page numbers and the headings as bookmarks; a second print fills in the
contents page's page numbers, read from the first (named destinations). ``MANIFEST`` beside the PDF says what
went in, for the tests (tests/book/test_pdf.py).
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .chromium import launch, serve, wait_styled

PDF_NAME = "attention-step-by-step.pdf"
MARGIN = {"top": "16mm", "bottom": "18mm", "left": "17mm", "right": "17mm"}
PAGE_WIDTH_PX = 680  # A4's 210 mm less the side margins, in CSS pixels (96 per inch): what figures are drawn at

# Run in each page of the book once it is drawn: returns the article made ready for print.
PREPARE = r"""async ({pageId, pageUrl, width}) => {
  const article = document.querySelector('article.bd-article');
  // plotly figures: a static SVG image of the figure as it is drawn (its default state), at the print width
  for (const gd of [...article.querySelectorAll('div.attnbook-plotly')]) {
    const height = gd._fullLayout.height;
    const svg = await Plotly.toImage(gd, {format: 'svg', width: width, height: height});
    const alt = (document.getElementById(gd.id + '-alt') || {}).textContent || 'A figure';
    const img = document.createElement('img');
    img.src = svg; img.alt = alt; img.className = 'attnbook-pdf-plot'; img.width = width; img.height = height;
    gd.replaceWith(img);
  }
  // what runs only in a browser or a kernel: a line that says where to try it
  const note = (text) => { const p = document.createElement('p'); p.className = 'attnbook-pdf-note';
                           p.textContent = text; return p; };
  article.querySelectorAll('div.attnbook-inpage').forEach(el => el.replaceWith(note(
    'A model runs here in the HTML book: try it at ' + pageUrl + ' (type into its box).')));
  // each widget (drawn just before its saved view): a progress bar becomes its text, any other widget a note
  article.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]').forEach(script => {
    const view = script.previousElementSibling && script.previousElementSibling.matches('.widget-subarea')
      ? script.previousElementSibling : null;
    let replacement;
    if (view && view.querySelector('.widget-progress, progress, .progress')) {
      replacement = document.createElement('pre');
      replacement.textContent = view.innerText.replace(/\s+/g, ' ').trim();
    } else {
      replacement = note('A live explorer (Jupyter widgets) is here: move its sliders in the chapter\'s ' +
        'notebook, in Colab or Jupyter; the interactive figures of the HTML book are at ' + pageUrl + '.');
    }
    if (view) view.remove();
    script.replaceWith(replacement);
  });
  article.querySelectorAll('.attnbook-sr-only, .headerlink, .copybtn, .toggle-button, button, script, ' +
    'details.hide.above-input, .cell.tag_remove-input > .cell_input').forEach(el => el.remove());
  article.querySelectorAll('.dropdown, .toggle-hidden, .toggle-details__container')
    .forEach(el => { el.classList.remove('toggle-hidden'); el.hidden = false; el.style.display = ''; });
  article.querySelectorAll('details').forEach(d => d.open = true);
  // images and links: absolute, so that the one document finds them
  article.querySelectorAll('img[src]').forEach(img => { if (!img.src.startsWith('data:')) img.src = img.src; });
  article.querySelectorAll('a[href]').forEach(a => a.setAttribute('href', a.href));
  // ids unique across the book; not the glyphs of the math (MathJax's "MJX-TEX-..." ids name the same shape on
  // every page, and the formulas point at them)
  article.querySelectorAll('[id]:not([id^="MJX-"])').forEach(el => { el.id = pageId + '--' + el.id; });
  article.querySelectorAll('[aria-describedby], [aria-labelledby], label[for]').forEach(el => {
    for (const attr of ['aria-describedby', 'aria-labelledby', 'for']) {
      if (el.hasAttribute(attr)) el.setAttribute(attr, pageId + '--' + el.getAttribute(attr));
    }
  });
  const styles = [...document.querySelectorAll('style#attnbook-math-css')].map(s => s.textContent);
  return {html: article.innerHTML, styles: styles,
          title: (article.querySelector('h1') || {}).textContent || document.title};
}"""

# In the one document: links to pages of the book become links inside it; other local links lose their href.
LINKS = r"""({origin, pages}) => {
  const ids = new Set([...document.querySelectorAll('[id]')].map(e => e.id));
  document.querySelectorAll('a[href]').forEach(a => {
    const href = a.getAttribute('href');
    if (href.startsWith('#')) return;
    let url;
    try { url = new URL(href, location.href); } catch (e) { a.removeAttribute('href'); return; }
    if (url.origin !== origin) return;
    const page = pages[url.pathname.replace(/^\//, '')];
    if (page === undefined) { a.removeAttribute('href'); return; }
    const target = url.hash ? page + '--' + decodeURIComponent(url.hash.slice(1)) : page;
    a.setAttribute('href', '#' + (ids.has(target) ? target : page));
  });
  return document.querySelectorAll('a[href^="#"]').length;
}"""

PRINT_CSS = """
@page { size: A4; }
html, body { background: #fff !important; }
body { font-size: 10.5pt; }
.bd-article { max-width: none; padding: 0; }
.attnbook-pdf-title { break-after: page; text-align: center; padding-top: 30%; }
.attnbook-pdf-title h1 { font-size: 30pt; margin-bottom: 1em; }
.attnbook-pdf-contents { break-after: page; }
.attnbook-pdf-contents ol { list-style: none; padding-left: 0; }
.attnbook-pdf-contents li { margin: 0.15em 0; }
.attnbook-pdf-contents li.part { font-weight: bold; margin-top: 0.8em; }
.attnbook-pdf-contents li.section { padding-left: 1.8em; font-size: 9.5pt; }
.attnbook-pdf-contents a { display: flex; color: inherit; text-decoration: none; }
.attnbook-pdf-contents .dots { flex: 1; border-bottom: 1px dotted #999; margin: 0 0.4em 0.3em; }
.attnbook-pdf-contents .pg { min-width: 2.2em; text-align: right; }
.attnbook-pdf-part { break-before: page; break-after: page; padding-top: 35%; text-align: center; }
.attnbook-pdf-page { break-before: page; }
h1, h2, h3, h4, h5, h6 { break-after: avoid; }
figure, img, .attnbook-pdf-plot, table, .attnbook-diagram { break-inside: avoid; }
pre, .highlight pre { white-space: pre-wrap !important; overflow-wrap: anywhere; overflow: visible !important;
  font-size: 8.3pt; line-height: 1.3; }
.cell_output, .output, .highlight, div.cell { overflow: visible !important; max-height: none !important; }
table { font-size: 8.5pt; max-width: 100%; }
td, th { overflow-wrap: anywhere; }
img, .attnbook-pdf-plot { max-width: 100%; height: auto; }
.attnbook-diagram svg.abd { min-width: 0 !important; max-width: 100% !important; }
.attnbook-diagram { overflow: visible !important; }
mjx-container[display="true"] { overflow: visible !important; }
.attnbook-pdf-note { font-style: italic; border-left: 3px solid #999; padding-left: 0.6em; }
a { color: #1565d8; }
"""

FOOTER = (
    '<div style="font-size:8pt;width:100%;text-align:center;color:#555;font-family:sans-serif">'
    '<span class="pageNumber"></span></div>'
)


def page_id(page: str) -> str:
    """A page's id in the one document: its path without ``.html``, slashes as hyphens."""
    return page.removesuffix(".html").replace("/", "-")


def _toc_parts(html_dir: Path) -> list[tuple[str | None, list[str]]]:
    """(part caption or None, [page, ...]) in reading order, from the ``_toc.yml`` the site was built from."""
    import yaml

    staged = html_dir.parent / "src"
    repo = Path(__file__).resolve().parents[3]
    toc = yaml.safe_load(((staged if (staged / "_toc.yml").exists() else repo) / "_toc.yml").read_text())

    def files(node) -> list[str]:
        found = []
        if isinstance(node, dict):
            if "file" in node:
                found.append(f"{node['file']}.html")
            for key in ("sections", "chapters"):
                found += files(node.get(key, []))
        elif isinstance(node, list):
            for item in node:
                found += files(item)
        return found

    parts = [(None, [f"{toc['root']}.html"])]
    for part in toc.get("parts", []):
        parts.append((part.get("caption"), files(part.get("chapters", []))))
    return parts


def _headings(fragment: str) -> list[tuple[int, str, str]]:
    """(level, id, text) of the h1 and h2 headings of an article's HTML, in order."""
    found = []
    for m in re.finditer(r"<h([12])[^>]*>(.*?)</h\1>", fragment, re.S):
        sections = re.findall(r'<section[^>]*\bid="([^"]+)"', fragment[: m.start()])  # the heading's section
        text = html.unescape(re.sub(r"<[^>]+>", "", m.group(2))).strip()
        found.append((int(m.group(1)), sections[-1] if sections else "", " ".join(text.split())))
    return found


def _demote(fragment: str) -> str:
    """Headings one level down (h1 becomes h2, ...), so that the parts are the top level of the bookmarks."""
    return re.sub(r"<(/?)h([1-5])\b", lambda m: f"<{m.group(1)}h{int(m.group(2)) + 1}", fragment)


def _git_commit(repo: Path) -> str:
    with contextlib.suppress(Exception):
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True)
        return out.stdout.strip()
    return ""


def contents_entries(articles: dict[str, dict], parts) -> list[tuple[str, str, str]]:
    """(kind, target id, text) of the contents, in order: parts, pages (chapters) and their sections."""
    entries = []
    for i, (caption, pages) in enumerate(parts):
        if caption:
            entries.append(("part", f"part-{i}", caption))
        for page in pages:
            if page not in articles:
                continue
            heads = _headings(articles[page]["html"])
            first = heads[0] if heads else (1, "", articles[page]["title"])
            entries.append(("chapter", page_id(page), first[2]))
            entries += [("section", ident, text) for level, ident, text in heads[1:] if level == 2]
    return entries


def write_outline(pdf: Path, entries: list[tuple[str, str, str]]) -> int:
    """Bookmarks of ``pdf`` from the contents: parts, chapters under them, sections under those, each at its
    heading (the named destination Chromium made for the contents' link to it). Returns how many."""
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import Fit

    reader = PdfReader(str(pdf))
    writer = PdfWriter(clone_from=reader)
    writer._root_object.pop("/Outlines", None)
    dests = {name.removeprefix("/"): dest for name, dest in reader.named_destinations.items()}
    writer.add_outline_item(title="Contents", page_number=1, fit=Fit.fit())  # the page after the title page
    part = chapter = None
    count = 1
    for kind, target, text in entries:
        dest = dests.get(target)
        if dest is None:
            continue
        top = dest.get("/Top")
        fit = Fit.xyz(top=float(top)) if top is not None else Fit.fit()
        parent = None if kind == "part" else part if kind == "chapter" else chapter
        page = reader.get_destination_page_number(dest)
        item = writer.add_outline_item(title=text, page_number=page, parent=parent, fit=fit)
        if kind == "part":
            part, chapter = item, None
        elif kind == "chapter":
            chapter = item
        count += 1
    writer.page_mode = "/UseOutlines"
    with open(pdf, "wb") as f:
        writer.write(f)
    return count


def document(articles: dict[str, dict], parts, styles: list[str], head: str, numbers: dict[str, int]) -> str:
    """The one HTML document: title page, contents (with ``numbers``: page of each target id), parts, pages."""
    repo = Path(__file__).resolve().parents[3]
    import yaml

    config = yaml.safe_load((repo / "_config.yml").read_text())
    title, author = config.get("title", "The book"), config.get("author", "")
    commit = _git_commit(repo)
    made = time.strftime("%Y-%m-%d")
    body = [
        '<section class="attnbook-pdf-title">',
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{html.escape(author)}</p>",
        f"<p>PDF edition, printed from the HTML book on {made}"
        + (f" (commit {html.escape(commit)})" if commit else "")
        + ".</p>",
        "<p>The HTML book has what paper cannot: interactive figures, live explorers and models that run in "
        "the page.</p>",
        "</section>",
    ]

    def entry(cls: str, target: str, text: str) -> str:
        page = numbers.get(target)
        shown = str(page) if page else "\u2007\u2007\u2007"  # figure spaces keep the width for the number
        return (
            f'<li class="{cls}"><a href="#{target}"><span>{html.escape(text)}</span><span class="dots"></span>'
            f'<span class="pg">{shown}</span></a></li>'
        )

    contents = ['<section class="attnbook-pdf-contents"><h1 id="contents">Contents</h1><ol>']
    for kind, target, text in contents_entries(articles, parts):
        contents.append(entry(kind, target, text))
    contents.append("</ol></section>")
    body += contents
    for i, (caption, pages) in enumerate(parts):
        if caption:
            body.append(f'<section class="attnbook-pdf-part" id="part-{i}"><h1>{html.escape(caption)}</h1></section>')
        for page in pages:
            if page in articles:
                body.append(
                    f'<div class="attnbook-pdf-page" id="{page_id(page)}">{_demote(articles[page]["html"])}</div>'
                )
    style = "\n".join(f"<style>{s}</style>" for s in styles)
    return (
        f'<!DOCTYPE html><html lang="en" data-theme="light" data-mode="light"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title>{head}{style}<style>{PRINT_CSS}</style></head>"
        f'<body><main class="bd-main"><article class="bd-article">{"".join(body)}</article></main></body></html>'
    )


def _named_pages(pdf: Path) -> dict[str, int]:
    """The page (from 1) of every named destination of ``pdf`` (Chromium makes one for each link target)."""
    from pypdf import PdfReader

    reader = PdfReader(str(pdf))
    return {
        name.removeprefix("/"): reader.get_destination_page_number(dest) + 1
        for name, dest in reader.named_destinations.items()
    }


def build(html_dir: Path, out: Path, *, log=print) -> dict:
    """Print the book in ``html_dir`` to ``out``; returns the manifest (also written next to ``out``)."""
    start = time.perf_counter()
    html_dir, out = Path(html_dir).resolve(), Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    parts = _toc_parts(html_dir)
    pages = [p for _, ps in parts for p in ps if (html_dir / p).exists()]
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp, launch() as browser:
        root = Path(tmp)
        for child in html_dir.iterdir():  # the site, and the one document beside it (same origin for fonts)
            os.symlink(child, root / child.name)
        with serve(root) as base:
            articles, styles, head = collect(browser, base, pages, log)
            book = root / "_attnbook_print.html"
            links = print_pdf(browser, base, book, out, articles, parts, styles, head, pages, log)
    from pypdf import PdfReader

    titles = [articles[p]["title"].strip().rstrip("#").strip() for p in pages]
    manifest = {
        "pdf": out.name,
        "pages": len(PdfReader(str(out)).pages),
        "bytes": out.stat().st_size,
        "seconds": round(time.perf_counter() - start, 1),
        "titles": titles,
        "internal_links": links["links"],
        "chars": links["chars"],
    }
    (out.parent / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False))
    return manifest


def collect(browser, base: str, pages: list[str], log) -> tuple[dict, list[str], str]:
    """Each page's article made ready for print, the math's styles, and the pages' stylesheets."""
    from .a11y import settle

    articles, styles, head = {}, [], ""
    for page in pages:
        tab = browser.new_page(viewport={"width": PAGE_WIDTH_PX + 340, "height": 1000})
        tab.add_init_script("localStorage.setItem('mode', 'light'); localStorage.setItem('theme', 'light');")
        tab.goto(f"{base}/{page}", wait_until="load", timeout=300_000)
        tab.wait_for_load_state("networkidle", timeout=300_000)
        wait_styled(tab)  # the stylesheets it fetches after its first paint
        settle(tab)  # every figure and widget drawn
        if tab.locator("div.attnbook-plotly").count():
            tab.wait_for_function(
                "() => [...document.querySelectorAll('div.attnbook-plotly')]"
                ".every(g => g.dataset.attnbookMode && !g._attnbookBusy)",
                timeout=60_000,
            )
        if not head:
            head = "".join(
                tab.evaluate(
                    "() => [...document.querySelectorAll('link[rel=stylesheet][href]')]"
                    '.map(l => `<link rel="stylesheet" href="${l.href}">`)'
                )
            )
        got = tab.evaluate(PREPARE, {"pageId": page_id(page), "pageUrl": page, "width": PAGE_WIDTH_PX})
        articles[page] = got
        styles += [s for s in got["styles"] if s not in styles]
        tab.close()
        log(f"  {page}")
    return articles, styles, head


def print_pdf(browser, base, book: Path, out: Path, articles, parts, styles, head, pages, log) -> dict:
    """Write the one document to ``book`` (served at ``base``) and print it to ``out``, twice: the second
    print knows the page of every contents entry. Returns the number of internal links and the characters
    of the printed text."""
    numbers: dict[str, int] = {}
    tab = browser.new_page(viewport={"width": PAGE_WIDTH_PX, "height": 1000})
    for attempt in range(2):
        book.write_text(document(articles, parts, styles, head, numbers))
        tab.goto(f"{base}/{book.name}", wait_until="load", timeout=600_000)  # a long document on a busy machine
        tab.evaluate("() => document.fonts.ready.then(() => true)")
        links = tab.evaluate(LINKS, {"origin": base, "pages": {p: page_id(p) for p in pages}})
        tab.emulate_media(media="print")
        text = tab.evaluate(
            "() => { const c = document.body.cloneNode(true);"
            " c.querySelectorAll('mjx-container, .attnbook-sr-only').forEach(e => e.remove());"
            " return c.textContent; }"
        )
        tab.pdf(
            path=str(out),
            format="A4",
            margin=MARGIN,
            print_background=True,
            display_header_footer=True,
            header_template="<span></span>",
            footer_template=FOOTER,
            tagged=True,
        )
        numbers = _named_pages(out)
        log(f"  printed ({'contents numbered' if attempt else 'first pass'}): {out.stat().st_size:,} bytes")
    tab.close()
    marks = write_outline(out, contents_entries(articles, parts))
    log(f"  {marks} bookmarks")
    return {"links": links, "chars": "".join(sorted(set(re.sub(r"\s", "", text))))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Print the built HTML book into one PDF (Chromium, offline).")
    parser.add_argument("html", type=Path, help="the built site (_build/html)")
    parser.add_argument("out", type=Path, help=f"the PDF to write (_build/pdf/{PDF_NAME})")
    parser.add_argument("--copy-into-site", action="store_true", help="also put the PDF at the site's root")
    args = parser.parse_args(argv)
    manifest = build(args.html, args.out, log=lambda s: print(s, file=sys.stderr))
    if args.copy_into_site:
        import shutil

        shutil.copy2(args.out, args.html / PDF_NAME)
    print(
        f"{args.out}: {manifest['pages']} pages, {manifest['bytes'] / 2**20:.1f} MiB, {manifest['seconds']:.0f} s, "
        f"{manifest['internal_links']} internal links"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
