"""Render plotly figures (``application/vnd.plotly.v1+json`` outputs) as a div and a ``Plotly.newPlot`` call.

Notebooks keep plotly's default renderer, so Jupyter and Colab show figures as usual; in the HTML book
the figure's JSON, slider steps included, is drawn by the plotly.js that the ``sphinx`` extension of
this package copies into the site and adds to the pages that contain a figure.
"""

from __future__ import annotations

import hashlib
import json

from docutils import nodes

PLOTLY_MIME = "application/vnd.plotly.v1+json"
PLOTLY_JS = "vendor/plotly/plotly.min.js"  # relative to the site's _static folder
PLOTLY_THEME_JS = "attnbook/plotly-theme.js"  # the book's colour modes for plotly (sphinx.write_theme_assets)


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
        html = (
            f'<div id="{div_id}" class="attnbook-plotly" style="width:100%;height:{height}px"></div>\n'
            f"<script>document.addEventListener('DOMContentLoaded', function () {{"
            f" var f = {payload}; Plotly.newPlot({json.dumps(div_id)}, f[0], f[1], f[2]).then(function (gd) {{"
            f" if (window.attnbookPlotlyTheme) {{ window.attnbookPlotlyTheme(gd); }} }}); }});</script>"
        )
        env = getattr(renderer.renderer, "sphinx_env", None)
        if env is not None:
            from myst_nb.sphinx_ import NbMetadataCollector

            NbMetadataCollector.add_js_file(env, env.docname, "plotly", PLOTLY_JS, {})
            NbMetadataCollector.add_js_file(env, env.docname, "plotly-theme", PLOTLY_THEME_JS, {})
        return [nodes.raw("", html, format="html")]
