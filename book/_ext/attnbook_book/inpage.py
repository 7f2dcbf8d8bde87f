"""The model in the page: render ``attnbook.export`` outputs as a widget that runs the model in the browser.

A chapter cell that displays ``attnbook.export.to_onnx(...)`` has an output of type
``application/vnd.attnbook.inpage+json`` naming the exported model. In Jupyter and Colab it shows as text;
in the HTML book this myst-nb mime renderer replaces it with ``<div class="attnbook-inpage">``, which
``static/inpage.js`` (added to that page only) turns into the text box, the bars and the heatmap.

The exported files come from the chapter's execution: the build sets ``ATTNBOOK_EXPORT_DIR`` to
``BUILD/executed/exported``, ``notebooks.stage`` copies that folder into the sources as ``exported/``, and
the ``sphinx`` extension copies its ``.onnx`` and ``.json`` files to ``_static/models/``; onnxruntime-web
(npm) goes to ``_static/vendor/onnxruntime/``. The page loads none of them until the widget is used.
"""

from __future__ import annotations

import hashlib
import html
import json
import shutil
from pathlib import Path

from docutils import nodes
from sphinx.util import logging

logger = logging.getLogger(__name__)

INPAGE_MIME = "application/vnd.attnbook.inpage+json"
INPAGE_JS = "vendor/inpage/inpage.js"  # relative to the site's _static folder
EXPORTED = "exported"  # the folder of exported models inside the staged sources
STATIC = Path(__file__).parent / "static"  # inpage.js and inpage.css


class InPageRenderer:
    """myst-nb mime renderer plugin (entry point group ``myst_nb.mime_renderers``)."""

    mime_priority_overrides = [(b, INPAGE_MIME, 4) for b in ("html", "dirhtml", "singlehtml", "readthedocs")]

    @staticmethod
    def handle_mime(renderer, data, inline):
        if inline or data.mime_type != INPAGE_MIME:
            return None
        spec = data.content if isinstance(data.content, dict) else json.loads(data.string)
        name = spec["name"]
        env = getattr(renderer.renderer, "sphinx_env", None)
        if env is not None:
            _check_files(Path(env.srcdir) / EXPORTED, spec, (env.docname, data.cell_index))
            from myst_nb.sphinx_ import NbMetadataCollector

            NbMetadataCollector.add_js_file(env, env.docname, "attnbook-inpage", INPAGE_JS, {})
        title = html.escape(spec.get("title") or name)
        prompt = html.escape(spec.get("prompt", ""), quote=True).replace("\n", "&#10;")
        kind = html.escape(spec.get("kind", "lm"), quote=True)
        markup = (
            f'<div class="attnbook-inpage" data-model="{html.escape(name, quote=True)}" data-kind="{kind}" '
            f'data-prompt="{prompt}" aria-label="{title}, running in this page">'
            f"<p>{title}: this part of the page runs the model in your browser, with JavaScript.</p></div>"
        )
        return [nodes.raw("", markup, format="html")]


def _check_files(folder: Path, spec: dict, location) -> None:
    """Warn (an error under -W) when the exported files are missing or are not the ones the notebook showed."""
    meta_path = folder / f"{spec['name']}.json"
    onnx_path = folder / spec["onnx"]
    if not meta_path.exists() or not onnx_path.exists():
        logger.warning(
            f"the exported model {spec['name']!r} is not in {folder}: execute the chapter that "
            "exports it with the book's build (it sets ATTNBOOK_EXPORT_DIR)",
            location=location,
        )
        return
    if hashlib.sha256(onnx_path.read_bytes()).hexdigest() != spec["sha256"]:
        logger.warning(
            f"{onnx_path} is not the model the executed notebook exported (its sha256 differs): "
            "execute the chapter again",
            location=location,
        )


def copy_models(srcdir: Path, outdir: Path) -> list[Path]:
    """Copy the exported models (``.onnx`` and ``.json``) and the widget's script and style into the site."""
    copied = []
    models = Path(outdir) / "_static" / "models"
    for path in sorted((Path(srcdir) / EXPORTED).glob("*")):
        if path.suffix in (".onnx", ".json"):
            models.mkdir(parents=True, exist_ok=True)
            copied.append(Path(shutil.copy2(path, models / path.name)))
    target = Path(outdir) / "_static" / "vendor" / "inpage"
    target.mkdir(parents=True, exist_ok=True)
    for path in STATIC.glob("inpage.*"):
        copied.append(Path(shutil.copy2(path, target / path.name)))
    return copied
