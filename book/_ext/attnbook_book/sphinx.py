"""Sphinx extension: the HTML book works with no network, and its pages open fast on a phone.

- copies require.js, the Jupyter widget manager (from the npm packages that ``make setup`` installs into
  node_modules/) and plotly.js (npm's partial bundle of the trace types the book draws) into
  ``_static/vendor/``;
- typesets the math when the book is built (``mathjax``): the pages carry MathJax's SVG output and its
  stylesheet, and load no MathJax;
- the text first (``textfirst``): nothing but the theme's stylesheets and Sphinx's options stand before the
  text; the theme's and extensions' scripts run after it; each block of the text is laid out when it comes
  near the screen; plotly figures and widgets are drawn then too, on the pages that have them
  (``static/plotly-book.js``, ``static/widgets.js``); the theme's Font Awesome script (1.5 MB, which turns icons
  into SVG) gives way to the theme's stylesheet with the glyphs the site uses inline (``icons``); the theme's
  search scripts and index stay on the search page (``templates/layout.html``);
- copies onnxruntime-web (npm) and the models the chapters exported into the site, for the model in the
  page (see ``inpage``);
- removes duplicated script tags (Sphinx 7.4 emits inline scripts added after the builder starts twice);
- turns the chapters' diagram images into numbered inline figures (``figures``) and writes the stylesheet
  and script that let diagrams and plotly figures follow the theme's light and dark modes; the script
  (``static/plotly-book.js``) also lays plotly figures out for phones and gives them a text alternative and
  keyboard control;
- for readers of every kind (WCAG 2.1 AA, checked by ``a11y`` in the site tests): replaces the theme's search
  field and colour-mode button (``templates/``), names the widgets' slider handles and the toggles of folded
  code, gives the bibliography list items, and makes links, focus and captions visible in both colour modes.
- numbers the pages of a chapter in several pages 9.1, 9.2, ... (``number_section_pages``).
"""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.errors import ConfigError
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from . import chapter_map, critical, icons, inpage, mathjax, plotly_renderer, textfirst
from .figures import DiagramFigures

logger = logging.getLogger(__name__)
TIMES_REPORT = "book/_data/execution_times.json"  # where `stage` puts the report inside the sources

REPO = Path(__file__).resolve().parents[3]

# (source relative to node_modules, destination relative to _static/vendor)
NPM_ASSETS = [
    ("requirejs/require.js", "require/require.js"),
    ("@jupyter-widgets/html-manager/dist", "html-manager"),
    (plotly_renderer.PLOTLY_BUNDLE, "plotly/plotly-cartesian.min.js"),
    # onnxruntime-web, WebAssembly only, for the model in the page (inpage.py); loaded only when used
    ("onnxruntime-web/dist/ort.wasm.min.js", "onnxruntime/ort.wasm.min.js"),
    ("onnxruntime-web/dist/ort-wasm-simd-threaded.mjs", "onnxruntime/ort-wasm-simd-threaded.mjs"),
    ("onnxruntime-web/dist/ort-wasm-simd-threaded.wasm", "onnxruntime/ort-wasm-simd-threaded.wasm"),
]


def _node_modules(app) -> Path:
    return Path(app.config.attnbook_node_modules)


def check_assets(app) -> None:
    needed = [src for src, _ in NPM_ASSETS] + ["mathjax-full/js/mathjax.js", "beasties/dist/index.mjs"]
    missing = [src for src in needed if not (_node_modules(app) / src).exists()]
    if missing:
        raise ConfigError(
            f"the book's JavaScript assets are missing from {_node_modules(app)}: {', '.join(missing)}. "
            "Run `make setup` (it runs `npm ci`) before building."
        )


def copy_assets(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    vendor = Path(app.outdir) / "_static" / "vendor"
    for src, dst in NPM_ASSETS:
        source, target = _node_modules(app) / src, vendor / dst
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copy2(source, target)
    plotly_renderer.write_figures(app.env, Path(app.outdir))
    inpage.copy_models(Path(app.srcdir), Path(app.outdir))


def typeset_math(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    counts = mathjax.typeset_site(Path(app.outdir), _node_modules(app))
    logger.info(f"typeset {sum(counts.values())} formulas on {len(counts)} pages (MathJax, Node)")


def inline_critical_css(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    sizes = critical.inline_site(Path(app.outdir), _node_modules(app))
    logger.info(f"critical CSS written into {len(sizes)} pages (Beasties, Node)")


THEME_CSS = "attnbook/theme.css"  # relative to _static: on every page
# The theme's "auto" colour mode (the reader's system's) resolved before the first paint: the theme resolves
# it in a deferred script, after the text is painted (critical.py), which would paint light on a dark system.
RESOLVE_MODE = (
    "if (document.documentElement.dataset.theme === 'auto') document.documentElement.dataset.theme = "
    "matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';"
)
PLOTLY_BOOK_JS = "attnbook/plotly-book.js"  # relative to _static: on pages with a plotly figure
STATIC = Path(__file__).parent / "static"
TEMPLATES = Path(__file__).parent / "templates"  # the theme's components that the book replaces


def theme_css() -> str:
    """The stylesheet of every page: numbers glued into the prose, the diagrams (layout, dark colours) and the
    chapter map in dark mode. (Widgets need nothing: in dark mode the theme shows them on a light card, with
    their own dark text.)"""
    from .diagrams import svg

    dark = 'html[data-theme="dark"]'
    return (
        "\n".join(
            [
                "/* Numbers glued from the cells read as the text around them (myst-nb sets them in bold). */",
                "html span.pasted-text{font-weight:inherit}",
                "/* Diagrams: drawn at their own size, scrolled sideways on narrow screens; page background. */",
                ".attnbook-diagram{overflow-x:auto;max-width:100%;margin:0 auto}",
                ".attnbook-diagram svg.abd{display:block;margin:0 auto;width:100%;height:auto}",
                "figure .attnbook-diagram svg.abd{--bg:transparent}",
                svg.dark_stylesheet(f"{dark} figure .attnbook-diagram"),
                "/* Code of 79 columns fits the text column at a laptop's width (1280 px), folded or not. */",
                "article div.cell_input pre,article div.cell_output pre{font-size:13px;"
                "padding-left:.75rem;padding-right:.75rem}",
                "/* ... in a solution's dropdown too: its code cells take the width its text is indented by. */",
                ".admonition p.admonition-title~section>div.cell{margin-left:-1.4rem;margin-right:-1.4rem}",
                "/* The chapter map of the introduction in dark mode. */",
                f"{dark} .attnbook-chapter-map rect{{fill:#1e242c;stroke:#8a97a6}}",
                f"{dark} .attnbook-chapter-map text{{fill:#e4e9ef}}",
                f"{dark} .attnbook-chapter-map path{{stroke:#b8c2cc}}",
                f"{dark} .attnbook-chapter-map marker path{{fill:#b8c2cc}}",
                *A11Y_CSS,
                *textfirst.RENDER_CSS,
            ]
        )
        + "\n"
    )


FOCUS = "var(--pst-color-accent, #c2185b)"  # the theme's focus colour
A11Y_CSS = [
    "/* Text for screen readers only (the description of each plotly figure, announcements). */",
    ".attnbook-sr-only{position:absolute!important;width:1px;height:1px;padding:0;margin:-1px;overflow:hidden;"
    "clip:rect(0,0,0,0);white-space:nowrap;border:0}",
    "/* Links and equation numbers read on the tinted background of an admonition (4.5:1 at least). */",
    'html[data-theme="light"]:root{--pst-color-primary:#1565d8;--pst-color-link:#1565d8}',
    "/* Captions of output tables, which the dark page shows on a light card. */",
    'html[data-theme="dark"] .cell_output .output.text_html caption{color:#3d4653}',
    "/* Where the keyboard is: plotly's sliders and menus, the links of the chapter map, the widgets. */",
    ".attnbook-plotly g[tabindex]:focus{outline:none}",
    f".attnbook-plotly g.slider-container:focus-visible .slider-rail-rect,"
    f".attnbook-plotly g.slider-container:focus-visible .slider-grip-rect,"
    f".attnbook-plotly g.updatemenu-header-group:focus-visible rect,"
    f".attnbook-plotly g.updatemenu-button:focus-visible rect,"
    f".attnbook-plotly g.updatemenu-dropdown-button:focus-visible rect"
    f"{{stroke:{FOCUS}!important;stroke-width:3px!important}}",
    f".attnbook-chapter-map a:focus{{outline:none}}.attnbook-chapter-map a:focus-visible rect{{stroke:{FOCUS};"
    "stroke-width:4px}",
    f".toggle-button:focus-visible,summary:focus-visible,.dropdown summary:focus-visible"
    f"{{outline:3px solid {FOCUS};outline-offset:2px}}",
    f".attnbook-diagram:focus-visible{{outline:3px solid {FOCUS};outline-offset:2px}}",
    f".jupyter-widgets .noUi-handle:focus-visible,.jupyter-widgets input:focus-visible,"
    f".jupyter-widgets select:focus-visible,.jupyter-widgets button:focus-visible,"
    f".jupyter-widgets .widget-readout:focus-visible{{outline:3px solid {FOCUS};outline-offset:2px}}",
]


SCROLL_JS = "attnbook/scroll.js"  # relative to _static: on every page
SCROLL = """\
// A diagram or a displayed formula wider than the screen scrolls sideways: then the keyboard can reach it (Tab,
// then the arrow keys), and a screen reader hears what a diagram is. Each is measured when it comes near the
// screen (measuring them all as the page opens would lay out the whole page at once), and again when the
// window changes size; attnbookScroll.markAll() measures them all now (the accessibility audit).
(function () {
  var SELECTOR = '.attnbook-diagram, mjx-container[display="true"]';
  var DIAGRAM = "Diagram, wider than the screen: scroll sideways";
  function mark(el) {
    var diagram = el.classList.contains("attnbook-diagram");
    if (el.scrollWidth > el.clientWidth + 1) {
      el.setAttribute("tabindex", "0");
      if (diagram) { el.setAttribute("role", "region"); el.setAttribute("aria-label", DIAGRAM); }
      el.dataset.attnbookScroll = "1";
    } else if (el.dataset.attnbookScroll) {
      ["tabindex", "role", "aria-label", "data-attnbook-scroll"].forEach(function (a) { el.removeAttribute(a); });
    }
  }
  function all() { return document.querySelectorAll(SELECTOR); }
  function markAll() { all().forEach(mark); }
  var near = "IntersectionObserver" in window ? new IntersectionObserver(function (entries) {
    entries.forEach(function (e) { if (e.isIntersecting) mark(e.target); });
  }, {rootMargin: "100% 0px"}) : null;
  function watch() {
    if (!near) { markAll(); return; }
    near.disconnect();
    all().forEach(function (el) { near.observe(el); });
  }
  var timer = null;
  window.addEventListener("resize", function () { clearTimeout(timer); timer = setTimeout(watch, 100); });
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", watch);
  else watch();
  window.attnbookScroll = {markAll: markAll};
})();
"""


def write_theme_assets(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    import json

    from attnbook import style

    folder = Path(app.outdir) / "_static" / "attnbook"
    folder.mkdir(parents=True, exist_ok=True)
    pages = [p.read_text() for p in Path(app.outdir).rglob("*.html")]
    static = Path(app.outdir) / "_static"
    (folder / "theme.css").write_text(theme_css() + icons.stylesheet(static, pages))
    icons.prune_theme_css(static / icons.THEME_CSS, pages)
    (folder / "scroll.js").write_text(SCROLL)
    settings = json.dumps({"dark": style.PLOTLY_DARK, "phone": style.PLOTLY_PHONE})
    (folder / "plotly-book.js").write_text(
        f"window.attnbookStyle = {settings}; // attnbook.style\n" + (STATIC / "plotly-book.js").read_text()
    )
    shutil.copy2(STATIC / "widgets.js", folder / "widgets.js")


def add_templates(app, config) -> None:
    """The theme components the book replaces (``templates/``), ahead of the theme's own."""
    config.templates_path = [str(TEMPLATES), *config.templates_path]


# Markup of docutils and myst-nb that screen readers get wrong, and what the book writes instead:
# - the bibliography's entries carry the deprecated ARIA role ``doc-biblioentry``, which is no list item,
#   inside a ``role="list"``: list items;
# - the toggle of a folded code cell is named "Toggle hidden content", not what it shows ("Show code cell
#   source"): named by what it shows.
MARKUP_FIXES = [
    ('role="doc-biblioentry"', 'role="listitem"'),
    ('<summary aria-label="Toggle hidden content">', "<summary>"),
]


def fix_markup(app, pagename, templatename, context, doctree) -> None:
    body = context.get("body")
    for old, new in MARKUP_FIXES:
        if body and old in body:
            body = body.replace(old, new)
    if body:
        context["body"] = body


# The sidebar's toggle that opens a chapter's pages is a <summary> holding only a chevron: named after the
# chapter it opens ("Pages of 9. The cost of attention").
NAMELESS_TOGGLE = re.compile(
    r'(<a class="[^"]*reference internal[^"]*" href="[^"]*">([^<]*)</a><details[^>]*>)<summary>'
)


def name_sidebar_toggles(app, pagename, templatename, context, doctree) -> None:
    generate = context.get("generate_toctree_html")
    if generate is None or getattr(generate, "names_toggles", False):
        return

    def generate_named(*args, **kwargs):
        return NAMELESS_TOGGLE.sub(
            lambda m: f'{m[1]}<summary aria-label="Pages of {html.escape(html.unescape(m[2]), quote=True)}">',
            str(generate(*args, **kwargs)),
        )

    generate_named.names_toggles = True
    context["generate_toctree_html"] = generate_named


def number_section_pages(app, env) -> list[str]:
    """A chapter in several pages numbers its pages 9.1, 9.2, ...; its own page's headings go unnumbered.

    Sphinx numbers the headings of a chapter's page (9.1, 9.2, ...) and then the pages listed under it in
    _toc.yml after them (9.7, 9.8, ...). Run after the numbers are assigned, this gives the numbers to the
    pages and to their headings (9.1.1, ...) and takes them from the headings of the chapter's own page.
    Returns the pages whose numbers it changed, to be written again.
    """
    changed = []
    for docname, pages in env.toctree_includes.items():
        numbers = env.toc_secnumbers.get(docname, {})
        own = numbers.get("")
        if not pages or not own or len(own) != 1:  # only a numbered chapter's page with pages of its own
            continue
        for anchor in numbers:
            if anchor:
                numbers[anchor] = None  # None, not absent: an absent heading would take the page's number
        _apply_numbers(env, docname)
        changed.append(docname)
        for k, page in enumerate(pages, start=1):
            page_numbers = env.toc_secnumbers.get(page, {})
            for anchor, number in page_numbers.items():
                if number:
                    page_numbers[anchor] = (own[0], k, *number[2:])
            _apply_numbers(env, page)
            changed.append(page)
    return changed


def _apply_numbers(env, docname: str) -> None:
    """Copy a page's numbers into its table of contents and its title (what the sidebar and the links show)."""
    numbers = env.toc_secnumbers.get(docname, {})
    for reference in env.tocs[docname].findall(nodes.reference):
        if "anchorname" in reference.attributes:
            number = numbers.get(reference["anchorname"])
            reference["secnumber"] = list(number) if number else None
    if docname in env.titles:
        number = numbers.get("")
        env.titles[docname]["secnumber"] = list(number) if number else None


def dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        key = (str(script.filename or ""), tuple(sorted((k, str(v)) for k, v in script.attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique


class ChapterMapDirective(SphinxDirective):
    """``{chapter-map}``: the chapters in rows by part, with an arrow from each chapter to those built on it."""

    def run(self):
        book = chapter_map.chapters(Path(self.env.srcdir))
        labels = {c.label for c in book}
        for chapter in book:
            for label in chapter.builds_on:
                if label not in labels:
                    logger.warning(
                        f"{chapter.docname}: its 'Builds on' line names {label!r}, which is no chapter",
                        location=(self.env.docname, self.lineno),
                    )
        builder = self.env.app.builder

        def href(chapter):
            return builder.get_relative_uri(self.env.docname, chapter.docname)

        svg = chapter_map.render_svg(book, href)
        return [nodes.raw("", f'<div class="attnbook-chapter-map">{svg}</div>', format="html")]


class ChapterTimesDirective(SphinxDirective):
    """``{chapter-times}``: a table of each chapter page's execution time, read from this build's report."""

    def run(self):
        report = Path(self.env.srcdir) / TIMES_REPORT
        if not report.exists():
            logger.warning(
                f"no execution-time report at {report}: execute the chapters first",
                location=(self.env.docname, self.lineno),
            )
            return []
        times = chapter_map.execution_times(report)
        rows, total = [], 0.0
        for page in chapter_map.pages(Path(self.env.srcdir)):  # a chapter in several pages: a row per page
            name = Path(page.docname).name
            if name not in times:
                logger.warning(
                    f"{name} is missing from the execution-time report", location=(self.env.docname, self.lineno)
                )
                continue
            seconds = times[name]["seconds"]
            total += seconds
            rows.append(
                [
                    _xref("doc", "/" + page.docname, f"{page.number}. {page.title}"),
                    f"{seconds:.0f} s",
                    times[name]["cells"],
                ]
            )
        rows.append(["All chapters", f"{total / 60:.1f} min", ""])
        return [_table((60, 20, 20), ["Chapter", "CPU time to run", "Code cells"], rows)]


def _table(widths, header, rows) -> nodes.table:
    """A docutils table; cells are strings or nodes."""
    table = nodes.table()
    group = nodes.tgroup(cols=len(widths))
    table += group
    for width in widths:
        group += nodes.colspec(colwidth=width)
    head, body = nodes.thead(), nodes.tbody()
    group += head
    group += body

    def row(cells):
        r = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            entry += cell if isinstance(cell, nodes.Node) else nodes.paragraph(text=str(cell))
            r += entry
        return r

    head += row(header)
    for cells in rows:
        body += row(cells)
    return table


def _with_literals(text: str) -> nodes.paragraph:
    """A paragraph of ``text`` in which the parts between double backquotes are set as code."""
    para = nodes.paragraph()
    for i, part in enumerate(text.split("``")):
        if part:
            para += nodes.literal(text=part) if i % 2 else nodes.Text(part)
    return para


def _xref(reftype: str, target: str, text: str) -> nodes.paragraph:
    ref = addnodes.pending_xref("", refdomain="std", reftype=reftype, reftarget=target, refexplicit=True, refwarn=True)
    ref += nodes.inline(text=text)
    para = nodes.paragraph()
    para += ref
    return para


class ExerciseTableDirective(SphinxDirective):
    """``{exercise-table}``: every exercise, what its checker tests, and its page's CPU time."""

    def run(self):
        import importlib

        report = Path(self.env.srcdir) / TIMES_REPORT
        times = chapter_map.execution_times(report) if report.exists() else {}
        rows = []
        for exercise in chapter_map.exercises(Path(self.env.srcdir)):
            page = exercise.page
            what = "(no automatic check)"
            if exercise.checker:
                module, name = exercise.checker.rsplit(".", 1)
                doc = getattr(importlib.import_module(f"attnbook.exercises.{module}"), name).__doc__ or ""
                what = " ".join(doc.strip().split("\n\n")[0].split())
            seconds = times.get(Path(page.docname).name, {}).get("seconds")
            rows.append(
                [
                    _xref("doc", "/" + page.docname, f"{page.number}. {page.title}"),
                    _xref("ref", exercise.label, exercise.title) if exercise.label else exercise.title,
                    _with_literals(what),
                    f"{seconds:.0f} s" if seconds is not None else "not measured",
                ]
            )
        if not rows:
            logger.warning("no exercises found in the chapters", location=(self.env.docname, self.lineno))
        return [_table((22, 22, 44, 12), ["Chapter", "Exercise", "What the checker tests", "Page CPU time"], rows)]


def setup(app):
    app.add_config_value("attnbook_node_modules", str(REPO / "node_modules"), "html")
    app.connect("builder-inited", check_assets)
    app.connect("config-inited", add_templates)
    app.connect("html-page-context", dedupe_scripts, priority=900)
    app.connect("html-page-context", fix_markup)
    app.connect("html-page-context", name_sidebar_toggles, priority=950)  # after the theme's toctree functions
    app.connect("env-get-updated", number_section_pages, priority=900)  # after Sphinx numbers the sections
    app.connect("build-finished", copy_assets)
    app.connect("build-finished", write_theme_assets)
    app.connect("build-finished", typeset_math)
    app.connect("build-finished", inline_critical_css, priority=990)  # last (after the theme rewrites pygments.css)
    app.connect("html-page-context", mathjax.drop_mathjax_scripts, priority=900)
    app.connect("html-page-context", textfirst.defer_scripts, priority=950)
    app.connect("html-page-context", textfirst.move_widget_state, priority=960)
    app.add_js_file(None, body=RESOLVE_MODE, priority=100)
    app.add_css_file(THEME_CSS)
    app.add_js_file(SCROLL_JS)
    app.add_transform(DiagramFigures)
    app.add_directive("chapter-map", ChapterMapDirective)
    app.add_directive("chapter-times", ChapterTimesDirective)
    app.add_directive("exercise-table", ExerciseTableDirective)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
