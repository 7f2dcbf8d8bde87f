"""Coloured tables in the HTML book keep their text legible.

pandas' ``Styler.background_gradient`` writes each cell's background and picks the text colour from the
background's luminance with a fixed threshold, which leaves light text (#f1f1f1) on mid blues at a contrast
near 3:1 (WCAG AA asks for 4.5:1). This myst-nb mime renderer keeps the chapter's table and its colours,
and gives each cell whose text does not read on its background the text colour that does (black or white,
whichever contrasts more). Other HTML outputs are left to myst-nb.
"""

from __future__ import annotations

import dataclasses
import re

MIN_CONTRAST = 4.5  # WCAG 2.1 AA, normal text
_RULE = re.compile(r"(?P<head>#T_\w+[^{}]*\{)(?P<body>[^{}]*)\}")
_BACKGROUND = re.compile(r"background-color:\s*(#[0-9a-fA-F]{6})")
_COLOUR = re.compile(r"(?<![-\w])color:\s*(#[0-9a-fA-F]{6})")


def luminance(hex_colour: str) -> float:
    """The WCAG relative luminance of a #rrggbb colour."""
    channels = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """The WCAG contrast ratio of two #rrggbb colours."""
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def legible(css: str) -> str:
    """``css`` with every Styler cell rule's text colour made legible on its background."""

    def fix(match: re.Match) -> str:
        body = match.group("body")
        background, colour = _BACKGROUND.search(body), _COLOUR.search(body)
        if not background or not colour or contrast(background.group(1), colour.group(1)) >= MIN_CONTRAST:
            return match.group(0)
        best = max(("#000000", "#ffffff"), key=lambda c: contrast(background.group(1), c))
        body = body[: colour.start(1)] + best + body[colour.end(1) :]
        return match.group("head") + body + "}"

    return _RULE.sub(fix, css)


class LegibleTables:
    """myst-nb mime renderer plugin (entry point group ``myst_nb.mime_renderers``)."""

    @staticmethod
    def handle_mime(renderer, data, inline):
        if inline or data.mime_type != "text/html" or "#T_" not in data.string:
            return None
        fixed = legible(data.string)
        if fixed == data.string:
            return None
        return renderer.render_text_html(dataclasses.replace(data, content=fixed))
