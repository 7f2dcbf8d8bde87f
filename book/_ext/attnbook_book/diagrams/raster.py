"""PNG copies of the diagrams, for the notebooks: ``book/images/diagrams/<name>.png`` next to each SVG.

A notebook opened alone carries its diagrams as data URLs in its markdown cells, and Colab's markdown draws no
SVG data URL (googlecolab/colabtools#2092) but does draw PNG ones; the HTML book keeps the SVG. Chromium draws
each SVG (its colours are CSS custom properties, which only a browser resolves) in its light colours at twice
its size, and the PNG is reduced to a 256-colour palette. Each PNG records, in ``tEXt`` chunks, the diagram's
name and the sha256 of the SVG it was drawn from, so that freshness is checked without a browser.
"""

from __future__ import annotations

import hashlib
import io
import struct
from pathlib import Path

SCALE = 2  # device pixels per CSS pixel: sharp on a phone or a high-density screen
NAME_KEY, SHA_KEY = "diagram", "svg-sha256"
_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def svg_sha256(svg: bytes | str) -> str:
    """The sha256 of an SVG's text, as a PNG drawn from it records it."""
    return hashlib.sha256(svg.encode("utf-8") if isinstance(svg, str) else svg).hexdigest()


def png_text(png: bytes) -> dict[str, str]:
    """The ``tEXt`` chunks of a PNG, read without an image library."""
    if not png.startswith(_SIGNATURE):
        raise ValueError("not a PNG file (its signature is missing)")
    found, at = {}, len(_SIGNATURE)
    while at + 8 <= len(png):
        length, kind = struct.unpack(">I4s", png[at : at + 8])
        if kind == b"tEXt":
            key, _, value = png[at + 8 : at + 8 + length].partition(b"\0")
            found[key.decode("latin-1")] = value.decode("latin-1")
        if kind == b"IEND":
            break
        at += 12 + length
    return found


def problems(out: Path, names: list[str]) -> list[str]:
    """What is out of date among the PNGs of ``out``: missing, drawn from another SVG, or with no SVG."""
    found = []
    for name in names:
        svg, png = out / f"{name}.svg", out / f"{name}.png"
        if not png.exists():
            found.append(f"{png.name} is missing")
        elif svg.exists() and png_text(png.read_bytes()).get(SHA_KEY) != svg_sha256(svg.read_bytes()):
            found.append(f"{png.name} is stale (drawn from another {svg.name})")
    for png in sorted(out.glob("*.png")) if out.exists() else []:
        if png.stem not in names:
            found.append(f"{png.name} has no source in attnbook_book.diagrams")
    return found


def _palette_png(screenshot: bytes, name: str, sha: str) -> bytes:
    """The screenshot as a palette PNG, optimised, with the diagram's name and its SVG's sha256."""
    from PIL import Image, PngImagePlugin

    image = Image.open(io.BytesIO(screenshot)).convert("RGB")
    image = image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    info = PngImagePlugin.PngInfo()
    info.add_text(NAME_KEY, name)
    info.add_text(SHA_KEY, sha)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True, pnginfo=info)
    return buffer.getvalue()


def draw(out: Path, names: list[str]) -> list[Path]:
    """Draw the PNG of every diagram in ``names`` that is missing or stale, and remove PNGs without a source;
    return the files that changed. Chromium starts only when a PNG must be drawn."""
    stale = [n for n in names if any(p.startswith(f"{n}.png ") for p in problems(out, [n]))]
    changed = []
    if stale:
        from ..chromium import launch

        with launch() as browser:
            for name in stale:
                svg = (out / f"{name}.svg").read_text()
                page = browser.new_page(device_scale_factor=SCALE, color_scheme="light")
                try:
                    page.set_content(f'<!doctype html><body style="margin:0;background:#fff">{svg}</body>')
                    shot = page.locator("svg").first.screenshot(animations="disabled")
                finally:
                    page.close()
                path = out / f"{name}.png"
                path.write_bytes(_palette_png(shot, name, svg_sha256(svg)))
                changed.append(path)
    for png in out.glob("*.png"):
        if png.stem not in names:
            png.unlink()
            changed.append(png)
    return changed
