"""Render plotly figures (``application/vnd.plotly.v1+json`` outputs) as a div, its text alternative and a
call that draws it.

Notebooks keep plotly's default renderer, so Jupyter and Colab show figures as usual; in the HTML book
the figure's JSON, slider steps included, is drawn by the plotly.js that the ``sphinx`` extension of
this package copies into the site and adds to the pages that contain a figure, through
``attnbookPlotly.newPlot`` (``static/plotly-book.js``): the colour mode, the phone layout, the keyboard and
the description for screen readers, which the page writes from the figure's data into the element after
the figure (here it holds the figure's title until then).
"""

from __future__ import annotations

import hashlib
import json

from docutils import nodes

PLOTLY_MIME = "application/vnd.plotly.v1+json"
PLOTLY_JS = "vendor/plotly/plotly.min.js"  # relative to the site's _static folder
PLOTLY_BOOK_JS = "attnbook/plotly-book.js"  # modes, phone layout, keyboard, text (sphinx.write_theme_assets)


class PlotlyRenderer:
    """myst-nb mime renderer plugin (entry point group ``myst_nb.mime_renderers``)."""

    mime_priority_overrides = [(b, PLOTLY_MIME, 5) for b in ("html", "dirhtml", "singlehtml", "readthedocs")]

    @staticmethod
    def handle_mime(renderer, data, inline):
        if inline or data.mime_type != PLOTLY_MIME:
            return None
        figure = data.content if isinstance(data.content, dict) else json.loads(data.string)
        config = {"responsive": True, "displaylogo": False, **figure.get("config", {})}
        payload = json.dumps([figure.get("data", []), figure.get("layout", {}), config], separators=(",", ":"))
        payload = payload.replace("</", "<\\/")  # keep "</script>" inside strings from closing the tag
        source = renderer.source
        div_id = "plotly-" + hashlib.sha1(f"{source}:{data.cell_index}:{data.output_index}".encode()).hexdigest()[:12]
        height = int(figure.get("layout", {}).get("height") or 450)
        title = _plain(figure.get("layout", {}).get("title"))
        html = (
            f'<div id="{div_id}" class="attnbook-plotly" style="width:100%;height:{height}px"></div>\n'
            f'<p id="{div_id}-alt" class="attnbook-sr-only">Interactive figure{": " + title if title else ""}.</p>\n'
            f"<script>document.addEventListener('DOMContentLoaded', function () {{"
            f" var f = {payload}; attnbookPlotly.newPlot({json.dumps(div_id)}, f[0], f[1], f[2]); }});</script>"
        )
        env = getattr(renderer.renderer, "sphinx_env", None)
        if env is not None:
            from myst_nb.sphinx_ import NbMetadataCollector

            NbMetadataCollector.add_js_file(env, env.docname, "plotly", PLOTLY_JS, {})
            NbMetadataCollector.add_js_file(env, env.docname, "plotly-book", PLOTLY_BOOK_JS, {})
        return [nodes.raw("", html, format="html")]


def _plain(title) -> str:
    """A plotly title (a string or ``{"text": ...}``) as plain, escaped text."""
    import html
    import re

    text = title.get("text", "") if isinstance(title, dict) else (title or "")
    text = re.sub(r"<[^>]+>", " ", str(text)).replace("\u200b", "")
    return html.escape(" ".join(text.split()))
