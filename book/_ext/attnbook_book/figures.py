"""The book's diagrams as numbered figures, drawn inline so that they follow the page's colour mode.

A chapter shows a diagram with Markdown that Jupyter displays as it is: an image, then its caption,

    ![Alt text: what the diagram shows, in words.](../book/images/diagrams/lstm_cell.svg)

    **Figure.** The LSTM cell ...

In the HTML book this becomes a numbered figure labelled ``fig-lstm-cell`` (prose refers to it with
{numref}), with the caption, and with the SVG written into the page, where the stylesheet below gives it the
dark colours in dark mode (an <img> could not see the page's mode).
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes
from sphinx.transforms import SphinxTransform
from sphinx.util import logging

logger = logging.getLogger(__name__)

DIAGRAMS = "book/images/diagrams"  # relative to the book's source folder
CAPTION_MARK = "Figure."
_FILE = re.compile(r"(?:^|/)images/diagrams/([a-z0-9_]+)\.svg$")
_SVG_OPEN = re.compile(r"<svg\b[^>]*>")


def diagram_name(uri: str) -> str | None:
    """The diagram an image URI shows (a path ending in ``images/diagrams/<name>.svg``), or None."""
    match = _FILE.search(uri.replace("\\", "/"))
    return match.group(1) if match else None


def label(name: str) -> str:
    """The figure label of diagram ``name``, for {numref}."""
    return "fig-" + name.replace("_", "-")


MIN_SCALE = 0.93  # a diagram may shrink this much to fit the text column; below that it scrolls sideways


def inline_svg(svg: str, alt: str) -> str:
    """The SVG for the page: without an XML prolog, labelled for screen readers with the alt text, and sized
    to the text column between MIN_SCALE and its own size."""
    svg = svg[svg.index("<svg") :]
    opening = _SVG_OPEN.match(svg).group(0)
    width = float(re.search(r'viewBox="0 0 ([0-9.]+) ', opening).group(1))
    escaped = alt.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
    size = f"min-width:{MIN_SCALE * width:.0f}px;max-width:{width:.0f}px"
    return svg.replace(opening, opening[:-1] + f' aria-label="{escaped}" style="{size}">', 1)


def _content(para: nodes.paragraph) -> list[nodes.Node]:
    """The children of a paragraph without the empty text nodes that the parser leaves at its start."""
    children = list(para.children)
    while children and isinstance(children[0], nodes.Text) and not children[0].astext().strip():
        children.pop(0)
    return children


class DiagramFigures(SphinxTransform):
    """An image of a diagram followed by a "**Figure.** ..." paragraph becomes a numbered figure."""

    default_priority = 199  # before Sphinx numbers figures (AutoNumbering, 210)

    def apply(self, **kwargs) -> None:
        for image in list(self.document.findall(nodes.image)):
            name = diagram_name(image.get("uri", ""))
            if name is None:
                continue
            para = image.parent
            where = (self.env.docname, image.line or para.line)
            if not isinstance(para, nodes.paragraph) or len(para.children) != 1:
                logger.warning(f"diagram {name}: its image must be a paragraph of its own", location=where)
                continue
            alt = (image.get("alt") or "").strip()
            if len(alt.split()) < 8:
                logger.warning(
                    f"diagram {name}: the alt text must say in words what the diagram shows "
                    f"(at least 8 words), got {alt!r}",
                    location=where,
                )
            caption_para = para.next_node(nodes.paragraph, siblings=True, descend=False)
            lead = _content(caption_para) if caption_para is not None else []
            if (
                caption_para is None
                or para.parent.index(caption_para) != para.parent.index(para) + 1
                or not lead
                or not isinstance(lead[0], nodes.strong)
                or lead[0].astext().strip() != CAPTION_MARK
            ):
                logger.warning(
                    f"diagram {name}: the image must be followed by its caption, a paragraph that "
                    f"starts with **{CAPTION_MARK}**",
                    location=where,
                )
                continue
            path = Path(self.env.srcdir) / DIAGRAMS / f"{name}.svg"
            if not path.is_file():
                logger.warning(f"diagram {name}: {path} does not exist (run `make diagrams`)", location=where)
                continue
            caption = nodes.caption()
            children = lead[1:]
            if children and isinstance(children[0], nodes.Text):
                children[0] = nodes.Text(children[0].astext().lstrip())
            caption.extend(children)
            figure = nodes.figure(classes=["attnbook-diagram-figure"])
            html = f'<div class="attnbook-diagram">{inline_svg(path.read_text(), alt)}</div>'
            figure += nodes.raw("", html, format="html")
            figure += caption
            figure["names"].append(label(name))
            self.document.note_explicit_target(figure, figure)
            figure.source, figure.line = para.source, para.line
            para.parent.replace(para, figure)
            caption_para.parent.remove(caption_para)
