"""The PNG beside each diagram's SVG, which the paired notebooks carry (Colab's markdown draws no SVG data URL):
drawn from the SVG as it is now (its sha256, recorded in the PNG, checked here without a browser), at twice the
SVG's size, as a small palette image; a stale, missing or orphaned PNG is found."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
from attnbook_book import diagrams
from attnbook_book.diagrams import raster
from PIL import Image

OUT = diagrams.OUT
NAMES = sorted(diagrams.REGISTRY)


@pytest.mark.parametrize("name", NAMES)
def test_each_png_is_drawn_from_its_svg_as_it_is_now(name):
    svg, png = OUT / f"{name}.svg", OUT / f"{name}.png"
    assert png.exists(), f"{png.name} is missing: run `make diagrams`"
    text = raster.png_text(png.read_bytes())
    assert text[raster.NAME_KEY] == name
    assert text[raster.SHA_KEY] == raster.svg_sha256(svg.read_bytes()), f"{png.name} is stale: run `make diagrams`"
    width, height = (int(v) for v in re.search(r'width="(\d+)" height="(\d+)"', svg.read_text()).groups())
    with Image.open(png) as image:
        assert image.size == (raster.SCALE * width, raster.SCALE * height), (image.size, width, height)
        assert image.mode == "P", f"{png.name} is {image.mode}, not a palette image"
        assert image.text[raster.SHA_KEY] == text[raster.SHA_KEY]  # what Pillow reads agrees with png_text


def test_the_pngs_are_small():
    sizes = {p.name: p.stat().st_size for p in OUT.glob("*.png")}
    assert sorted(p[: -len(".png")] for p in sizes) == NAMES
    largest = sorted(sizes.items(), key=lambda item: -item[1])[:3]
    assert max(sizes.values()) < 100_000 and sum(sizes.values()) < 2_500_000, largest


def test_stale_missing_and_orphaned_pngs_are_found(tmp_path):
    first, second = NAMES[:2]
    for name in (first, second):
        for suffix in (".svg", ".png"):
            shutil.copy2(OUT / f"{name}{suffix}", tmp_path)
    assert raster.problems(tmp_path, [first, second]) == []
    (tmp_path / f"{first}.svg").write_text(diagrams.render(first).replace("</svg>", "<rect/></svg>"))
    (tmp_path / f"{second}.png").unlink()
    (tmp_path / "no_such_diagram.png").write_bytes((OUT / f"{first}.png").read_bytes())
    found = raster.problems(tmp_path, [first, second])
    assert f"{first}.png is stale (drawn from another {first}.svg)" in found
    assert f"{second}.png is missing" in found
    assert "no_such_diagram.png has no source in attnbook_book.diagrams" in found
    assert len(found) == 3


def test_a_damaged_file_is_not_read_as_a_png():
    with pytest.raises(ValueError, match="not a PNG"):
        raster.png_text(b"<svg/>")


def test_draw_makes_a_fresh_light_png_of_a_changed_svg_in_chromium(tmp_path):
    name = "causal_mask"
    (tmp_path / f"{name}.svg").write_text(diagrams.render(name))
    (tmp_path / "no_such_diagram.png").write_bytes((OUT / f"{name}.png").read_bytes())
    changed = raster.draw(tmp_path, [name])
    assert sorted(p.name for p in changed) == [f"{name}.png", "no_such_diagram.png"]
    assert raster.problems(tmp_path, [name]) == [] and raster.draw(tmp_path, [name]) == []  # nothing to redraw
    with Image.open(tmp_path / f"{name}.png") as image:
        pixels = np.asarray(image.convert("RGB")).reshape(-1, 3).astype(int)
    white = (pixels == 255).all(axis=1).mean()
    coloured = (pixels.max(axis=1) - pixels.min(axis=1) > 12).mean()
    dark = (pixels.sum(axis=1) < 180).mean()
    assert white > 0.4 and coloured > 0.05 and 0.005 < dark < 0.25, (white, coloured, dark)
