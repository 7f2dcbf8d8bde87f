"""The theme's icons with no script and no font to download: Font Awesome's glyphs that the book uses, inline.

The theme writes each icon as ``<i class="fa-solid fa-sun"></i>``, draws the icons of admonitions, links and
buttons with Font Awesome glyphs in its stylesheet, and loads Font Awesome's script (1.5 MB), which replaces
each ``<i>`` with an SVG. Without the script the theme's own stylesheet draws every icon from Font Awesome's web
fonts; but a page that shows one icon then downloads the whole font (the solid one is 156 kB), at the
highest priority, before it paints its text. So the book keeps the theme's stylesheet and gives it, in the
book's stylesheet (``sphinx.theme_css``), fonts of the same names holding only the glyphs the site uses: the
icons of the built pages' elements and every glyph the stylesheets draw themselves, a few kilobytes written
into the stylesheet (``data:`` URLs). The browser then has no Font Awesome file to fetch.
"""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

# The theme's Font Awesome fonts: (family, weight) -> the TrueType file in the built site's _static folder.
FONTS = {
    ("Font Awesome 6 Free", 900): "vendor/fontawesome/webfonts/fa-solid-900.ttf",
    ("Font Awesome 6 Free", 400): "vendor/fontawesome/webfonts/fa-regular-400.ttf",
    ("Font Awesome 6 Brands", 400): "vendor/fontawesome/webfonts/fa-brands-400.ttf",
}
THEME_CSS = "styles/pydata-sphinx-theme.css"  # the theme's stylesheet, with Font Awesome's, in _static
# Icons that the theme's scripts write into a page after it loads (pydata-sphinx-theme: a banner's close button)
ADDED_BY_SCRIPTS = {"xmark"}
CLASSES = re.compile(r'class="([^"]*)"')
RULE = re.compile(r"([^{}]+)\{([^{}]*)\}")
ICON_RULE = re.compile(r"^\s*(?:\.fa-[a-z0-9-]+:{1,2}before\s*,?\s*)+$")  # .fa-x:before,.fa-y:before{content:...}
ESCAPED = re.compile(r"\\([0-9a-fA-F]{1,6})\s?")
PRIVATE_USE = re.compile(r"[\ue000-\uf8ff]")


def _characters(css_value: str) -> set[int]:
    """The private-use code points (where Font Awesome's glyphs are) that a piece of CSS writes."""
    text = ESCAPED.sub(lambda m: chr(int(m[1], 16)), css_value)
    return {ord(c) for c in PRIVATE_USE.findall(text)}


def used_classes(pages) -> set[str]:
    """The icon names of the ``fa-...`` classes on the elements of ``pages`` (HTML), and those scripts add."""
    used = set(ADDED_BY_SCRIPTS)
    for text in pages:
        for classes in CLASSES.findall(text):
            used |= {c[3:] for c in classes.split() if c.startswith("fa-")}
    return used


def prune_theme_css(path: Path, pages) -> int:
    """Take out of the theme's stylesheet the rules of the Font Awesome icons no page uses (1,900 rules, a
    fifth of the stylesheet, that the browser would parse and match on every page); returns how many."""
    used = used_classes(pages)
    css = Path(path).read_text()
    removed = 0

    def keep(m: re.Match) -> str:
        nonlocal removed
        names = re.findall(r"\.fa-([a-z0-9-]+):", m[1])
        if any(n in used for n in names):
            return m[0]
        removed += 1
        return ""

    pruned = re.sub(r"(?<=[}\n])([^{}@]+)\{[^{}]*\}", lambda m: keep(m) if ICON_RULE.match(m[1]) else m[0], css)
    Path(path).write_text(pruned)
    return removed


def needed(stylesheets: list[str], pages) -> set[int]:
    """The code points of every Font Awesome glyph the site draws: those the stylesheets write themselves (the
    icons of admonitions, links, buttons) and those of the icon classes on the elements of ``pages`` (HTML)."""
    by_class: dict[str, set[int]] = {}
    found: set[int] = set()
    for css in stylesheets:
        for selector, body in RULE.findall(css):
            if ICON_RULE.match(selector):
                for name in re.findall(r"\.fa-([a-z0-9-]+):", selector):
                    by_class.setdefault(name, set()).update(_characters(body))
            else:
                found |= _characters(body)
    for name in used_classes(pages):
        found |= by_class.get(name, set())
    return found


def subset(font: Path, characters: set[int]) -> bytes | None:
    """``font`` cut down to the glyphs of ``characters``, as WOFF; None when it has none of them."""
    from fontTools import subset as fts
    from fontTools.ttLib import TTFont

    tt = TTFont(str(font))
    have = set(tt.getBestCmap()) & characters
    if not have:
        return None
    options = fts.Options()
    options.flavor = "woff"
    options.layout_features = ["*"]
    options.hinting = False  # drawn at text sizes: hinting instructions are bytes no reader sees
    subsetter = fts.Subsetter(options)
    subsetter.populate(unicodes=sorted(have))
    subsetter.subset(tt)
    out = io.BytesIO()
    tt.flavor = "woff"
    tt.save(out)
    return out.getvalue()


def stylesheet(static: Path, pages) -> str:
    """``@font-face`` rules that give the theme's Font Awesome families the glyphs the site uses, inline.

    ``static`` is the built site's ``_static`` folder (its stylesheets and the theme's fonts); ``pages`` the
    text of its HTML pages."""
    sheets = [p.read_text(errors="replace") for p in sorted(Path(static).rglob("*.css")) if "vendor" not in p.parts]
    characters = needed(sheets, pages)
    rules = ["/* Font Awesome's glyphs that the site draws, inline (attnbook_book.icons): no font to download. */"]
    for (family, weight), path in FONTS.items():
        font = Path(static) / path
        data = subset(font, characters) if font.exists() else None
        if data:
            rules.append(
                f'@font-face{{font-family:"{family}";font-style:normal;font-weight:{weight};font-display:block;'
                f'src:url(data:font/woff;base64,{base64.b64encode(data).decode()}) format("woff")}}'
            )
    return "\n".join(rules) + "\n"
