"""Render plotly figures (``application/vnd.plotly.v1+json`` outputs) as an empty box of the figure's size,
its text alternative, and a script of the figure's data that the page loads when the box comes near the
screen.

Notebooks keep plotly's default renderer, so Jupyter and Colab show figures as usual. In the HTML book the
page holds no plotly.js and no figure data: ``static/plotly-book.js`` (deferred, on the pages with a figure)
loads plotly.js (npm's partial bundle ``plotly.js-cartesian-dist-min``, which holds every trace type the
book draws, ``TRACE_TYPES``) and the figure's script (``_static/figures/<id>.js``, written by
``write_figures`` at the end of the build) when the box comes within a screen of the screen, then draws the
figure with the colour mode, the phone layout, the keyboard and the description for screen readers, which
the page writes from the figure's data into the element after the figure (here it holds the figure's title
until then).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from docutils import nodes

PLOTLY_MIME = "application/vnd.plotly.v1+json"
# plotly.js: the partial bundle of the trace types below (relative to node_modules; the site's _static)
PLOTLY_BUNDLE = "plotly.js-cartesian-dist-min/plotly-cartesian.min.js"
PLOTLY_JS = "vendor/plotly/plotly-cartesian.min.js"
# Every trace type that bundle draws; a figure of another type fails the build (a larger bundle is needed).
TRACE_TYPES = {
    "bar",
    "box",
    "contour",
    "heatmap",
    "histogram",
    "histogram2d",
    "histogram2dcontour",
    "image",
    "pie",
    "scatter",
    "scatterternary",
    "violin",
}
PLOTLY_BOOK_JS = "attnbook/plotly-book.js"  # loading, modes, phone layout, keyboard, text (sphinx.write_theme_assets)
FIGURES = "figures"  # the figures' scripts, in the site's _static folder


class PlotlyRenderer:
    """myst-nb mime renderer plugin (entry point group ``myst_nb.mime_renderers``)."""

    mime_priority_overrides = [(b, PLOTLY_MIME, 5) for b in ("html", "dirhtml", "singlehtml", "readthedocs")]

    @staticmethod
    def handle_mime(renderer, data, inline):
        if inline or data.mime_type != PLOTLY_MIME:
            return None
        figure = data.content if isinstance(data.content, dict) else json.loads(data.string)
        config = {"responsive": True, "displaylogo": False, **figure.get("config", {})}
        source = renderer.source
        div_id = "plotly-" + hashlib.sha1(f"{source}:{data.cell_index}:{data.output_index}".encode()).hexdigest()[:12]
        unknown = trace_types(figure) - TRACE_TYPES
        if unknown:
            raise ValueError(
                f"{source}: a plotly figure uses trace types {sorted(unknown)}, which the book's plotly.js bundle "
                f"({PLOTLY_BUNDLE.split('/')[0]}) does not draw: use a bundle that does (plotly_renderer.py)"
            )
        payload = json.dumps([figure.get("data", []), figure.get("layout", {}), config], separators=(",", ":"))
        height = int(figure.get("layout", {}).get("height") or 450)
        title = _plain(figure.get("layout", {}).get("title"))
        env = getattr(renderer.renderer, "sphinx_env", None)
        root = "../" * env.docname.count("/") if env is not None else ""
        html = (
            f'<div id="{div_id}" class="attnbook-plotly" data-src="{root}_static/{FIGURES}/{div_id}.js" '
            f'style="width:100%;height:{height}px"></div>\n'
            f'<p id="{div_id}-alt" class="attnbook-sr-only">Interactive figure{": " + title if title else ""}.</p>\n'
        )
        if env is not None:
            from myst_nb.sphinx_ import NbMetadataCollector

            NbMetadataCollector.add_js_file(env, env.docname, "plotly-book", PLOTLY_BOOK_JS, {"defer": "defer"})
            figures = env.nb_metadata[env.docname].setdefault("attnbook_figures", {})  # merged and purged by myst-nb
            figures[div_id] = f"attnbookPlotly.figure({json.dumps(div_id)},{payload});\n"
        return [nodes.raw("", html, format="html")]


def trace_types(figure: dict) -> set[str]:
    """The trace types a figure draws: its traces', its frames' and its slider and menu steps' own."""
    found = {t.get("type", "scatter") for t in figure.get("data", [])}
    for frame in figure.get("frames") or []:
        found |= {t.get("type", "scatter") for t in frame.get("data", [])}
    layout = figure.get("layout", {})
    for control in (layout.get("sliders") or []) + (layout.get("updatemenus") or []):
        for step in control.get("steps", []) + control.get("buttons", []):
            for arg in step.get("args") or []:
                if isinstance(arg, dict) and isinstance(arg.get("type"), (str, list)):
                    kinds = arg["type"] if isinstance(arg["type"], list) else [arg["type"]]
                    found |= {k for k in kinds if isinstance(k, str)}
    return found


def write_figures(env, outdir: Path) -> int:
    """Write each figure's script into the site (``_static/figures/``); returns how many."""
    folder = Path(outdir) / "_static" / FIGURES
    folder.mkdir(parents=True, exist_ok=True)
    count = 0
    for data in getattr(env, "nb_metadata", {}).values():
        for div_id, script in data.get("attnbook_figures", {}).items():
            (folder / f"{div_id}.js").write_text(script)
            count += 1
    return count


def _plain(title) -> str:
    """A plotly title (a string or ``{"text": ...}``) as plain, escaped text."""
    import html
    import re

    text = title.get("text", "") if isinstance(title, dict) else (title or "")
    text = re.sub(r"<[^>]+>", " ", str(text)).replace("\u200b", "")
    return html.escape(" ".join(text.split()))
