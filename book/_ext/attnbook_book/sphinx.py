"""Sphinx extension: the HTML book works with no network.

- copies MathJax 3, require.js, the Jupyter widget manager (from the npm packages that ``make setup``
  installs into node_modules/) and plotly.js (from the installed plotly package) into ``_static/vendor/``;
- points MathJax and the widget manager at those copies (see _config.yml) and adds a small script that
  lets the widget manager find its fonts locally and call MathJax 3 through the MathJax 2 API it expects;
- copies onnxruntime-web (npm) and the models the chapters exported into the site, for the model in the
  page (see ``inpage``);
- removes duplicated script tags (Sphinx 7.4 emits inline scripts added after the builder starts twice);
- turns the chapters' diagram images into numbered inline figures (``figures``) and writes the stylesheet
  and script that let diagrams and plotly figures follow the theme's light and dark modes;
- numbers the pages of a chapter in several pages 9.1, 9.2, ... (``number_section_pages``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.errors import ConfigError
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from . import chapter_map, inpage
from .figures import DiagramFigures

logger = logging.getLogger(__name__)
TIMES_REPORT = "book/_data/execution_times.json"  # where `stage` puts the report inside the sources

REPO = Path(__file__).resolve().parents[3]

# (source relative to node_modules, destination relative to _static/vendor)
NPM_ASSETS = [
    ("mathjax/es5/tex-chtml.js", "mathjax/tex-chtml.js"),
    ("mathjax/es5/output/chtml/fonts", "mathjax/output/chtml/fonts"),
    ("mathjax/es5/input/tex/extensions", "mathjax/input/tex/extensions"),
    ("mathjax/es5/ui", "mathjax/ui"),
    ("mathjax/es5/a11y", "mathjax/a11y"),
    ("mathjax/es5/adaptors", "mathjax/adaptors"),
    ("mathjax/es5/sre", "mathjax/sre"),
    ("requirejs/require.js", "require/require.js"),
    ("@jupyter-widgets/html-manager/dist", "html-manager"),
    # onnxruntime-web, WebAssembly only, for the model in the page (inpage.py); loaded only when used
    ("onnxruntime-web/dist/ort.wasm.min.js", "onnxruntime/ort.wasm.min.js"),
    ("onnxruntime-web/dist/ort-wasm-simd-threaded.mjs", "onnxruntime/ort-wasm-simd-threaded.mjs"),
    ("onnxruntime-web/dist/ort-wasm-simd-threaded.wasm", "onnxruntime/ort-wasm-simd-threaded.wasm"),
]

WIDGETS_SHIM = """\
// Local paths for the Jupyter widget manager, and the MathJax 2 call it makes, served by MathJax 3.
(function () {
  var root = document.documentElement.dataset.content_root || "./";
  if (window.require && window.require.config) {
    var local = root + "_static/vendor/html-manager";
    window.require.config({paths: {"@jupyter-widgets/html-manager/dist": local, "@jupyter-widgets": local}});
  }
  var hub = {Queue: function () {
    for (var i = 0; i < arguments.length; i++) {
      var job = arguments[i], el = Array.isArray(job) ? job[2] : undefined;
      if (window.MathJax && window.MathJax.typesetPromise) {
        window.MathJax.startup.promise.then(function () {
          return window.MathJax.typesetPromise(el ? [el] : undefined);
        });
      }
    }
  }};
  function install() { if (window.MathJax && !window.MathJax.Hub) { window.MathJax.Hub = hub; } }
  install();
  document.addEventListener("DOMContentLoaded", install);
})();
"""


def _node_modules(app) -> Path:
    return Path(app.config.attnbook_node_modules)


def check_assets(app) -> None:
    missing = [src for src, _ in NPM_ASSETS if not (_node_modules(app) / src).exists()]
    if missing:
        raise ConfigError(
            f"the book's JavaScript assets are missing from {_node_modules(app)}: {', '.join(missing)}. "
            "Run `make setup` (it runs `npm ci`) before building."
        )


def copy_assets(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    import plotly

    vendor = Path(app.outdir) / "_static" / "vendor"
    for src, dst in NPM_ASSETS:
        source, target = _node_modules(app) / src, vendor / dst
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copy2(source, target)
    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    (vendor / "plotly").mkdir(parents=True, exist_ok=True)
    shutil.copy2(plotly_js, vendor / "plotly" / "plotly.min.js")
    (vendor / "widgets-shim.js").write_text(WIDGETS_SHIM)
    inpage.copy_models(Path(app.srcdir), Path(app.outdir))


THEME_CSS = "attnbook/theme.css"  # relative to _static: on every page
PLOTLY_THEME_JS = "attnbook/plotly-theme.js"  # relative to _static: on pages with a plotly figure

PLOTLY_THEME = """\
// Plotly figures follow the book's colour mode: in dark mode the layout gets the colours of
// attnbook.style.PLOTLY_DARK (written here by the build); switching back restores the figure's own.
(function () {
  var DARK = %(dark)s;
  function isDark() { return document.documentElement.dataset.theme === "dark"; }
  function get(obj, path) {
    var parts = path.replace(/\\[(\\d+)\\]/g, ".$1").split(".");
    for (var i = 0; i < parts.length; i++) { if (obj == null) return null; obj = obj[parts[i]]; }
    return obj === undefined ? null : obj;
  }
  function changes(gd) {
    var u = {paper_bgcolor: DARK.paper_bgcolor, plot_bgcolor: DARK.plot_bgcolor, "font.color": DARK.font_color,
             "legend.bgcolor": DARK.legend_bgcolor};
    Object.keys(gd._fullLayout || {}).forEach(function (k) {
      if (/^[xy]axis[0-9]*$/.test(k)) { for (var p in DARK.axis) { u[k + "." + p] = DARK.axis[p]; } }
    });
    (gd.layout.sliders || []).forEach(function (s, i) {
      for (var p in DARK.slider) { u["sliders[" + i + "]." + p] = DARK.slider[p]; }
      u["sliders[" + i + "].font.color"] = DARK.font_color;
      u["sliders[" + i + "].currentvalue.font.color"] = DARK.font_color;
    });
    return u;
  }
  function apply(gd) {
    var want = isDark() ? "dark" : "light";
    if ((gd.dataset.attnbookTheme || "light") === want) { return; }
    if (want === "dark") {
      var u = changes(gd), saved = {};
      for (var k in u) { saved[k] = get(gd.layout, k); }
      gd._attnbookLight = saved;
      Plotly.relayout(gd, u);
    } else {
      Plotly.relayout(gd, gd._attnbookLight || {});
    }
    gd.dataset.attnbookTheme = want;
  }
  window.attnbookPlotlyTheme = apply;
  new MutationObserver(function () {
    document.querySelectorAll("div.attnbook-plotly").forEach(function (gd) { if (gd._fullLayout) { apply(gd); } });
  }).observe(document.documentElement, {attributes: true, attributeFilter: ["data-theme"]});
})();
"""


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
                "/* The chapter map of the introduction in dark mode. */",
                f"{dark} .attnbook-chapter-map rect{{fill:#1e242c;stroke:#8a97a6}}",
                f"{dark} .attnbook-chapter-map text{{fill:#e4e9ef}}",
                f"{dark} .attnbook-chapter-map path{{stroke:#b8c2cc}}",
                f"{dark} .attnbook-chapter-map marker path{{fill:#b8c2cc}}",
            ]
        )
        + "\n"
    )


def write_theme_assets(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    import json

    from attnbook import style

    folder = Path(app.outdir) / "_static" / "attnbook"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "theme.css").write_text(theme_css())
    (folder / "plotly-theme.js").write_text(PLOTLY_THEME % {"dark": json.dumps(style.PLOTLY_DARK)})


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
    app.connect("html-page-context", dedupe_scripts, priority=900)
    app.connect("env-get-updated", number_section_pages, priority=900)  # after Sphinx numbers the sections
    app.connect("build-finished", copy_assets)
    app.connect("build-finished", write_theme_assets)
    app.add_css_file(THEME_CSS)
    app.add_transform(DiagramFigures)
    app.add_directive("chapter-map", ChapterMapDirective)
    app.add_directive("chapter-times", ChapterTimesDirective)
    app.add_directive("exercise-table", ExerciseTableDirective)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
