"""A small SVG drawing kit for the book's diagrams: boxes, circles, arrows, grids of cells, and labels with
TeX-like math, all coloured by the roles of ``attnbook.style``.

Every diagram is drawn at the size it is shown (one SVG unit is one CSS pixel; it scrolls sideways on a
narrow screen rather than shrinking its text). Colours are CSS custom properties with the light values
inside the SVG (so the file reads on its own, in Jupyter for instance) and the dark values supplied by the
book's stylesheet in dark mode. Layout is checked while drawing: a label that does not fit its box, text
outside the canvas, two labels that overlap, or a line drawn across a label raises ``LayoutError``.

The visual grammar (the README's "Writing a chapter" explains it to authors):

- activations are ``tensor`` boxes (square corners) or grids of cells, filled with their role's colour;
- learned layers (anything with parameters) are ``layer`` boxes (round corners, brown);
- normalisation layers are ``norm`` boxes (round corners, olive);
- operations without parameters (softmax, tanh, sum, product) are white ``op`` pills and circles;
- arrows carry data forwards; red dashed arrows carry gradients; the thick line is the residual path;
- masked-out cells are grey and hatched; attention weights are blue, darker for larger weights;
- shapes are written in muted text, ``(B, T, D)``, with the letters of book/notation.md.
"""

from __future__ import annotations

import functools
import html
import math
import re
from dataclasses import dataclass, field

from attnbook import style

SIZE = 15.5  # the size of labels
SMALL = 14.0  # the smallest text of a diagram (shapes, notes): the book's small text
SCRIPT = 0.76  # sub- and superscripts, relative to their text
FONT_STACK = (
    'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", "Liberation Sans", sans-serif'
)
SHAPES = ("tensor", "layer", "norm", "op", "panel", "plain", "frame")
LINE_ROLES = ("line", *style.ROLES)


class LayoutError(ValueError):
    """A diagram whose labels do not fit, overlap, leave the canvas or are crossed by a line."""


# --- text with a little TeX -----------------------------------------------------------------------------

GREEK = {
    name: chr(code)
    for name, code in [
        ("alpha", 0x3B1),
        ("beta", 0x3B2),
        ("gamma", 0x3B3),
        ("delta", 0x3B4),
        ("epsilon", 0x3B5),
        ("eta", 0x3B7),
        ("theta", 0x3B8),
        ("lambda", 0x3BB),
        ("mu", 0x3BC),
        ("pi", 0x3C0),
        ("rho", 0x3C1),
        ("sigma", 0x3C3),
        ("tau", 0x3C4),
        ("phi", 0x3C6),
        ("omega", 0x3C9),
        ("Delta", 0x394),
        ("Sigma", 0x3A3),
        ("Omega", 0x3A9),
    ]
}
SYMBOLS = {
    "odot": "\u2299",
    "oplus": "\u2295",
    "otimes": "\u2297",
    "times": "\u00d7",
    "cdot": "\u00b7",
    "top": "\u22a4",
    "to": "\u2192",
    "rightarrow": "\u2192",
    "leftarrow": "\u2190",
    "infty": "\u221e",
    "ell": "\u2113",
    "le": "\u2264",
    "ge": "\u2265",
    "ll": "\u226a",
    "sum": "\u03a3",
    "in": "\u2208",
    "partial": "\u2202",
    "approx": "\u2248",
    "ldots": "\u2026",
    "dots": "\u2026",
    "lfloor": "\u230a",
    "rfloor": "\u230b",
    "mid": "|",
    "sqrt": "\u221a",
    ",": "\u2009",
    "&": "&",
    ";": " ",
    " ": " ",
    "{": "{",
    "}": "}",
    "prime": "\u2032",
}
ACCENTS = {"tilde": "\u0303", "hat": "\u0302", "bar": "\u0304"}
UPRIGHT_CMDS = {"mathrm", "text", "operatorname"}
BINARY = set("=+-<>|") | {
    "\u2299",
    "\u2295",
    "\u2297",
    "\u00d7",
    "\u2192",
    "\u2190",
    "\u2248",
    "\u2264",
    "\u2265",
    "\u2208",
    "\u226a",
}
MEDIUM_SPACE = "\u2005"  # spacing around binary operators and relations, as TeX sets them
FUNCTIONS = {"tanh", "exp", "log", "max", "min", "sin", "cos"}
CALLIGRAPHIC = {"B": "\u212c", "L": "\u2112", "M": "\u2133", "T": "\U0001d4af"}
SIZING = {"big", "Big", "bigl", "bigr", "Bigl", "Bigr", "left", "right"}  # delimiters keep their size here
ARG_CMDS = UPRIGHT_CMDS | set(ACCENTS) | {"mathbf", "mathcal", "sqrt"}


@dataclass
class Run:
    text: str
    italic: bool = False
    bold: bool = False
    level: int = 0  # -1 subscript, +1 superscript


def _group(s: str, i: int) -> tuple[str, int]:
    """The argument starting at s[i]: a {braced group}, a \\command or one character; and the index after it."""
    while i < len(s) - 1 and s[i] == " ":
        i += 1
    if i >= len(s):
        raise LayoutError(f"a command or script lacks its argument in {s!r} (write E_{{\\mathrm{{pos}}}})")
    if s[i] == "{":
        depth = 0
        for j in range(i, len(s)):
            depth += {"{": 1, "}": -1}.get(s[j], 0)
            if depth == 0:
                return s[i + 1 : j], j + 1
        raise LayoutError(f"unbalanced braces in {s!r}")
    if s[i] == "\\":
        m = re.match(r"\\([A-Za-z]+|.)", s[i:])
        end = i + len(m.group(0))
        if m.group(1) in ARG_CMDS:  # a command with an argument, as in E_\mathrm{pos}: take both
            _, end = _group(s, end)
        return s[i:end], end
    return s[i], i + 1


def _operator(ch: str, before: list[Run], bold: bool, level: int) -> Run:
    """A symbol; binary operators and relations get space around them (not in scripts, not when unary)."""
    text = {"-": "\u2212", "'": "\u2032", "*": "\u2217", ",": ",\u2009" if level == 0 else ","}.get(ch, ch)
    if ch in BINARY and level == 0 and before and before[-1].text[-1:] not in "([{,=\u2005":
        text = MEDIUM_SPACE + text + MEDIUM_SPACE
    return Run(text, False, bold, level)


def _math(s: str, level: int = 0, bold: bool = False) -> list[Run]:
    runs: list[Run] = []
    i = 0
    while i < len(s):
        ch = s[i]
        if ch == "\\":
            m = re.match(r"\\([A-Za-z]+|.)", s[i:])
            name, i = m.group(1), i + len(m.group(0))
            if name in UPRIGHT_CMDS or name == "mathbf":
                arg, i = _group(s, i)
                runs.append(Run(arg, False, bold or name == "mathbf", level))
            elif name in ACCENTS:
                arg, i = _group(s, i)
                inner = _math(arg, level, bold)
                inner[-1].text += ACCENTS[name]
                runs += inner
            elif name == "sqrt":
                arg, i = _group(s, i)
                runs.append(Run("\u221a", False, bold, level))
                runs += _math(arg, level, bold)
            elif name == "mathcal":
                arg, i = _group(s, i)
                runs.append(Run("".join(CALLIGRAPHIC.get(ch, ch) for ch in arg), False, bold, level))
            elif name in SIZING:
                pass
            elif name in FUNCTIONS:
                rest = s[i:].lstrip()
                runs.append(Run(name + ("" if not rest or rest[0] in "(^_" else "\u2009"), False, bold, level))
            elif name in GREEK:
                runs.append(Run(GREEK[name], name[0].islower(), bold, level))
            elif name in SYMBOLS:
                runs.append(_operator(SYMBOLS[name], runs, bold, level))
            else:
                raise LayoutError(f"unknown command \\{name} in {s!r}")
        elif ch in "_^":
            if level:
                raise LayoutError(f"nested sub- or superscripts are not supported: {s!r}")
            arg, i = _group(s, i + 1)
            runs += _math(arg, -1 if ch == "_" else 1, bold)
        elif ch == " ":
            i += 1
        elif ch.isalpha():
            runs.append(Run(ch, True, bold, level))
            i += 1
        else:
            runs.append(_operator(ch, runs, bold, level))
            i += 1
    merged: list[Run] = []
    for run in runs:  # join neighbours of the same style
        if merged and (merged[-1].italic, merged[-1].bold, merged[-1].level) == (run.italic, run.bold, run.level):
            merged[-1].text += run.text
        else:
            merged.append(run)
    return merged


def parse(s: str, bold: bool = False) -> list[Run]:
    """Runs of styled text for a label: plain text, with math between dollar signs ($h_{t-1}$, $W_Q$)."""
    runs: list[Run] = []
    for k, part in enumerate(s.split("$")):
        if not part:
            continue
        runs += _math(part, 0, bold) if k % 2 else [Run(part, False, bold, 0)]
    return runs


@functools.cache
def _width(text: str, size: float, italic: bool, bold: bool) -> float:
    """The advance width of ``text`` in DejaVu Sans, a wide font: boxes sized by it fit the usual fonts."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    prop = FontProperties(
        family="DejaVu Sans", style="oblique" if italic else "normal", weight="bold" if bold else "normal", size=size
    )
    return TextToPath().get_text_width_height_descent(text, prop, ismath=False)[0]


def _layout(runs: list[Run], size: float) -> list[tuple[Run, float, float]]:
    """Each run with its width and the horizontal shift before it: a superscript right after a subscript
    (or the other way round) is set above it, as TeX does, and the text after them continues after the wider."""
    out, prev = [], None
    for run in runs:
        w = _width(run.text, size * (SCRIPT if run.level else 1), run.italic, run.bold)
        shift = 0.0
        if prev is not None and run.level and prev[0].level == -run.level:
            shift = -prev[1]
        elif prev is not None and prev[2] < 0:  # the run after a stacked pair
            shift = max(0.0, -prev[2] - prev[1])
        out.append((run, w, shift))
        prev = (run, w, shift)
    return out


def measure(s: str, size: float = SIZE, bold: bool = False) -> float:
    """The width of a label, in SVG units."""
    laid = _layout(parse(s, bold), size)
    total = sum(w + shift for _, w, shift in laid)
    if laid and laid[-1][2] < 0:  # ends with a stacked pair
        total += max(0.0, -laid[-1][2] - laid[-1][1])
    return total


def _tspans(runs: list[Run], size: float) -> str:
    out, level_shift = [], 0.0
    for run, _, dx in _layout(runs, size):
        target = {0: 0.0, -1: 0.28 * size, 1: -0.42 * size}[run.level]
        attrs = []
        if abs(dx) > 0.01:
            attrs.append(f'dx="{_n(dx)}"')
        if target != level_shift:
            attrs.append(f'dy="{_n(target - level_shift)}"')
            level_shift = target
        if run.level:
            attrs.append(f'font-size="{_n(size * SCRIPT)}"')
        if run.italic:
            attrs.append('font-style="italic"')
        if run.bold:
            attrs.append('font-weight="bold"')
        text = html.escape(run.text, quote=False)
        out.append(f"<tspan {' '.join(attrs)}>{text}</tspan>" if attrs else text)
    return "".join(out)


def _n(v: float) -> str:
    """A number for the SVG source: at most two decimals, no trailing zeros."""
    s = f"{v:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


# --- geometry --------------------------------------------------------------------------------------------


@dataclass
class Box:
    """A rectangle on the canvas, with the points where lines attach."""

    x: float
    y: float
    w: float
    h: float

    @property
    def cx(self) -> float:
        return self.x + self.w / 2

    @property
    def cy(self) -> float:
        return self.y + self.h / 2

    @property
    def top(self) -> tuple[float, float]:
        return (self.cx, self.y)

    @property
    def bottom(self) -> tuple[float, float]:
        return (self.cx, self.y + self.h)

    @property
    def left(self) -> tuple[float, float]:
        return (self.x, self.cy)

    @property
    def right(self) -> tuple[float, float]:
        return (self.x + self.w, self.cy)

    @property
    def x1(self) -> float:
        return self.x + self.w

    @property
    def y1(self) -> float:
        return self.y + self.h

    def at(self, fx: float, fy: float) -> tuple[float, float]:
        """The point at fractions (fx, fy) of the width and height."""
        return (self.x + fx * self.w, self.y + fy * self.h)

    def overlaps(self, other: Box, margin: float = 0.0) -> bool:
        return (
            self.x < other.x1 - margin
            and other.x < self.x1 - margin
            and self.y < other.y1 - margin
            and other.y < self.y1 - margin
        )


@dataclass
class _Text:
    box: Box
    label: str
    owner: object = None  # the shape a label belongs to (lines into that shape may touch it)


def _segment_hits(p: tuple[float, float], q: tuple[float, float], b: Box) -> bool:
    """Whether the segment p-q passes through the inside of box b (Liang-Barsky clipping)."""
    (x0, y0), (x1, y1) = p, q
    dx, dy = x1 - x0, y1 - y0
    t0, t1 = 0.0, 1.0
    for pk, qk in ((-dx, x0 - b.x), (dx, b.x1 - x0), (-dy, y0 - b.y), (dy, b.y1 - y0)):
        if pk == 0:
            if qk <= 0:
                return False
        else:
            t = qk / pk
            if pk < 0:
                t0 = max(t0, t)
            else:
                t1 = min(t1, t)
            if t0 >= t1:
                return False
    return t1 - t0 > 1e-9


# --- the canvas --------------------------------------------------------------------------------------------


@dataclass
class Diagram:
    """A canvas of ``width`` x ``height`` SVG units for the diagram ``name``; ``title`` names it in the SVG."""

    name: str
    width: float
    height: float
    title: str
    _body: list[str] = field(default_factory=list)
    _texts: list[_Text] = field(default_factory=list)
    _segments: list[tuple[tuple[float, float], tuple[float, float], object]] = field(default_factory=list)
    _markers: set[tuple[str, bool]] = field(default_factory=set)
    _shapes: list[Box] = field(default_factory=list)
    _hatch: bool = False

    # text ---------------------------------------------------------------------------------------------
    def text(
        self,
        x: float,
        y: float,
        s: str,
        *,
        size: float = SIZE,
        anchor: str = "middle",
        role: str | None = None,
        muted: bool = False,
        bold: bool = False,
        owner: object = None,
        cls: str = "",
    ) -> Box:
        """A label centred vertically on y; ``anchor`` is start, middle or end. Returns its extent."""
        if size < SMALL:
            raise LayoutError(f"{self.name}: text {s!r} at size {size} is smaller than the smallest size {SMALL}")
        if role is not None and role not in style.ROLES:
            raise LayoutError(f"{self.name}: unknown role {role!r}")
        w = measure(s, size, bold)
        x0 = {"start": x, "middle": x - w / 2, "end": x - w}[anchor]
        has_sup = any(r.level == 1 for r in parse(s))
        has_sub = any(r.level == -1 for r in parse(s))
        box = Box(
            x0,
            y - (0.78 if has_sup else 0.5) * size,
            w,
            (1.28 if has_sup else 1.0) * size + (0.25 * size if has_sub else 0.0),
        )
        self._texts.append(_Text(box, s, owner))
        classes = " ".join(c for c in ("muted" if muted else "", f"t-{role}" if role else "", cls) if c)
        attrs = [f'x="{_n(x)}"', f'y="{_n(y)}"']
        if anchor != "middle":
            attrs.append(f'text-anchor="{anchor}"')
        if size != SIZE:
            attrs.append(f'font-size="{_n(size)}"')
        if bold:
            attrs.append('font-weight="bold"')
        if classes:
            attrs.append(f'class="{classes}"')
        self._body.append(f"<text {' '.join(attrs)}>{_tspans(parse(s, bold), size)}</text>")
        return box

    def _label(
        self, box: Box, label, size: float, owner: object, role: str | None = None, pad: float = 6.0, cls: str = ""
    ) -> None:
        """Lines of text centred in ``box``; a line is a string or a (string, size) pair."""
        lines = [label] if isinstance(label, str) else list(label)
        lines = [(line, size) if isinstance(line, str) else line for line in lines if line]
        heights = [s_ * 1.25 for _, s_ in lines]
        y = box.cy - sum(heights) / 2
        for (line, s_), step in zip(lines, heights):
            t = self.text(box.cx, y + step / 2, line, size=s_, owner=owner, role=role, cls=cls)
            y += step
            if t.w > box.w - 2 * pad + 0.01 or sum(heights) > box.h + 2:
                raise LayoutError(
                    f"{self.name}: label {line!r} ({t.w:.0f} wide, {len(lines)} line(s)) does not fit "
                    f"its box of {box.w:.0f} x {box.h:.0f}"
                )

    # shapes -------------------------------------------------------------------------------------------
    def box(
        self,
        x: float,
        y: float,
        w: float,
        h: float,
        label: str | list[str] = "",
        *,
        shape: str = "tensor",
        role: str | None = None,
        size: float = SIZE,
        dashed: bool = False,
        label_role: str | None = None,
    ) -> Box:
        """A rectangle: ``shape`` is tensor (an activation), layer (learned), norm, op (no parameters), panel
        (a group of shapes) or plain; ``role`` colours it (layers default to param, norms to norm)."""
        if shape not in SHAPES:
            raise LayoutError(f"{self.name}: shape must be one of {SHAPES}, got {shape!r}")
        role = role or {"layer": "param", "norm": "norm"}.get(shape)
        fill = {"op": "op", "panel": "panel", "plain": "data", "frame": "frame"}.get(shape, role or "data")
        rx = {"tensor": 3, "layer": 9, "norm": 9, "op": min(h / 2, 14), "panel": 12, "plain": 3, "frame": 2}[shape]
        cls = (
            (f"f-{fill}" if shape != "frame" else f"frame s-{role or 'line'}")
            + (" dash" if dashed else "")
            + (" thick" if shape in ("layer", "norm") else "")
        )
        self._body.append(
            f'<rect x="{_n(x)}" y="{_n(y)}" width="{_n(w)}" height="{_n(h)}" rx="{_n(rx)}" class="{cls}"/>'
        )
        b = Box(x, y, w, h)
        self._shapes.append(b)
        if label:
            self._label(b, label, size, b, role=label_role)
        return b

    def circle(self, cx: float, cy: float, r: float = 11.0, symbol: str = "+", *, role: str | None = None) -> Box:
        """A small operation node: symbol is + (sum), x (product), . (element-wise product, odot) or a label."""
        cls = f"f-{role}" if role else "f-op"
        self._body.append(f'<circle cx="{_n(cx)}" cy="{_n(cy)}" r="{_n(r)}" class="{cls}"/>')
        b = Box(cx - r, cy - r, 2 * r, 2 * r)
        self._shapes.append(b)
        k = r * 0.55
        if symbol == "+":
            self._body.append(
                f'<path d="M{_n(cx - k)},{_n(cy)}H{_n(cx + k)}M{_n(cx)},{_n(cy - k)}V{_n(cy + k)}" class="glyph"/>'
            )
        elif symbol == "x":
            k *= 0.8
            self._body.append(
                f'<path d="M{_n(cx - k)},{_n(cy - k)}L{_n(cx + k)},{_n(cy + k)}M{_n(cx - k)},{_n(cy + k)}'
                f'L{_n(cx + k)},{_n(cy - k)}" class="glyph"/>'
            )
        elif symbol == ".":
            self._body.append(f'<circle cx="{_n(cx)}" cy="{_n(cy)}" r="{_n(r * 0.22)}" class="dot"/>')
        elif symbol:
            self._label(b, symbol, SIZE if r >= 14 else SMALL, b, pad=1)
        return b

    def dot(self, x: float, y: float, role: str = "line", r: float = 3.5) -> None:
        """A junction: where a line branches, a dot in the line's colour."""
        self._body.append(f'<circle cx="{_n(x)}" cy="{_n(y)}" r="{_n(r)}" class="t-{role}"/>')

    def grid(
        self,
        x: float,
        y: float,
        rows: int,
        cols: int,
        cell: float | tuple[float, float],
        *,
        role: str = "data",
        values=None,
        blocked=None,
        labels=None,
        size: float = SMALL,
    ) -> Box:
        """A tensor drawn as cells. ``values`` (rows x cols, in [0, 1]) shades the cells with the role's colour
        (attention weights); ``blocked`` marks masked-out cells (grey, hatched); ``labels`` writes in them."""
        cw, ch = (cell, cell) if isinstance(cell, (int, float)) else cell
        for r in range(rows):
            for c in range(cols):
                cx, cy = x + c * cw, y + r * ch
                if blocked is not None and blocked[r][c]:
                    self._hatch = True
                    self._body.append(
                        f'<rect x="{_n(cx)}" y="{_n(cy)}" width="{_n(cw)}" height="{_n(ch)}" class="f-mask"/>'
                        f'<rect x="{_n(cx)}" y="{_n(cy)}" width="{_n(cw)}" height="{_n(ch)}" '
                        f'fill="url(#{self.name}-hatch)" class="cellline"/>'
                    )
                elif values is not None:
                    v = max(0.0, min(1.0, float(values[r][c])))
                    self._body.append(
                        f'<rect x="{_n(cx)}" y="{_n(cy)}" width="{_n(cw)}" height="{_n(ch)}" class="f-data"/>'
                        f'<rect x="{_n(cx)}" y="{_n(cy)}" width="{_n(cw)}" height="{_n(ch)}" '
                        f'class="s-{role} t-{role} cellline" fill-opacity="{_n(v)}"/>'
                    )
                else:
                    self._body.append(
                        f'<rect x="{_n(cx)}" y="{_n(cy)}" width="{_n(cw)}" height="{_n(ch)}" class="f-{role}"/>'
                    )
                if labels is not None and labels[r][c] != "":
                    strong = (
                        values is not None
                        and not (blocked is not None and blocked[r][c])
                        and float(values[r][c]) > 0.55
                    )
                    b = Box(cx, cy, cw, ch)
                    self._label(b, str(labels[r][c]), size, b, pad=1, cls="on-strong" if strong else "")
        return Box(x, y, cols * cw, rows * ch)

    def stack(
        self,
        x: float,
        y: float,
        w: float,
        h: float,
        n: int,
        label: str = "",
        *,
        role: str | None = None,
        shape: str = "tensor",
        offset: float = 6.0,
        size: float = SIZE,
    ) -> Box:
        """``n`` boxes stacked like cards (the heads of a tensor), the front one at (x, y) with the label."""
        for k in range(n - 1, 0, -1):
            self.box(x + k * offset, y - k * offset, w, h, shape=shape, role=role)
            self._shapes.pop()  # hidden behind the front card: labels on the front may cover its edges
        return self.box(x, y, w, h, label, shape=shape, role=role, size=size)

    def path(
        self, d: str, *, role: str = "line", width: float = 1.6, dashed: bool = False, fill: str | None = None
    ) -> None:
        """A free path (curves, braces); not checked against labels."""
        cls = f"ln s-{role}" + (" dash" if dashed else "")
        style_fill = f' class="f-{fill} {cls}" style="fill:var(--{fill}-f)"' if fill else f' class="{cls}"'
        self._body.append(f'<path d="{d}"{style_fill} stroke-width="{_n(width)}"/>')

    # lines ----------------------------------------------------------------------------------------------
    def _marker(self, role: str, big: bool) -> str:
        self._markers.add((role, big))
        return f"{self.name}-ah-{role}{'-big' if big else ''}"

    def arrow(
        self,
        points: list[tuple[float, float]],
        *,
        role: str = "line",
        width: float = 1.6,
        dashed: bool = False,
        head: bool = True,
        tail: bool = False,
        radius: float = 8.0,
        residual: bool = False,
        touches: tuple = (),
    ) -> None:
        """A polyline through ``points`` with rounded corners and an arrowhead at the end (``tail``: also at the
        start). ``residual`` draws the thick residual path. ``touches``: labels it may cross (by their owner)."""
        if role not in LINE_ROLES:
            raise LayoutError(f"{self.name}: line role must be one of {LINE_ROLES}, got {role!r}")
        if residual:
            width = 3.4
        pts = [tuple(map(float, p)) for p in points]
        for p, q in zip(pts, pts[1:]):
            self._segments.append((p, q, touches))
        big = width > 2.5
        back = 8.0 if big else 6.0  # the line stops inside the arrowhead, whose tip is the end point

        def shorten(a, b, by):
            length = math.dist(a, b)
            if length <= by:
                return b
            return (b[0] + (a[0] - b[0]) * by / length, b[1] + (a[1] - b[1]) * by / length)

        if head:
            pts[-1] = shorten(pts[-2], pts[-1], back)
        if tail:
            pts[0] = shorten(pts[1], pts[0], back)
        d = [f"M{_n(pts[0][0])},{_n(pts[0][1])}"]
        for k in range(1, len(pts)):
            if k < len(pts) - 1 and radius > 0:
                a, b, c = pts[k - 1], pts[k], pts[k + 1]
                r = min(radius, math.dist(a, b) / 2, math.dist(b, c) / 2)
                p1, p2 = shorten(a, b, r), shorten(c, b, r)
                d.append(f"L{_n(p1[0])},{_n(p1[1])}Q{_n(b[0])},{_n(b[1])} {_n(p2[0])},{_n(p2[1])}")
            else:
                d.append(f"L{_n(pts[k][0])},{_n(pts[k][1])}")
        cls = f"ln s-{role}" + (" dash" if dashed else "") + (" res" if residual else "")
        attrs = [f'd="{"".join(d)}"', f'class="{cls}"']
        if width != 1.6 and not residual:
            attrs.append(f'stroke-width="{_n(width)}"')
        if head:
            attrs.append(f'marker-end="url(#{self._marker(role, big)})"')
        if tail:
            attrs.append(f'marker-start="url(#{self._marker(role, big)})"')
        self._body.append(f"<path {' '.join(attrs)}/>")

    def line(self, points, **kwargs) -> None:
        """A polyline without arrowheads."""
        self.arrow(points, head=False, **kwargs)

    def brace(
        self,
        x0: float,
        y0: float,
        x1: float,
        y1: float,
        label: str,
        *,
        side: float = 1.0,
        size: float = SMALL,
        gap: float = 5.0,
    ) -> Box:
        """A dimension line from (x0, y0) to (x1, y1) with end ticks and a muted label beside it (shapes)."""
        horizontal = abs(y1 - y0) < abs(x1 - x0)
        t = 4.0
        if horizontal:
            d = f"M{_n(x0)},{_n(y0 - t)}V{_n(y0 + t)}M{_n(x0)},{_n(y0)}H{_n(x1)}M{_n(x1)},{_n(y1 - t)}V{_n(y1 + t)}"
            self._body.append(f'<path d="{d}" class="ln dim"/>')
            return self.text((x0 + x1) / 2, y0 + side * (gap + size * 0.5 + t), label, size=size, muted=True)
        d = f"M{_n(x0 - t)},{_n(y0)}H{_n(x0 + t)}M{_n(x0)},{_n(y0)}V{_n(y1)}M{_n(x1 - t)},{_n(y1)}H{_n(x1 + t)}"
        self._body.append(f'<path d="{d}" class="ln dim"/>')
        anchor = "start" if side > 0 else "end"
        return self.text(x0 + side * (gap + t), (y0 + y1) / 2, label, size=size, muted=True, anchor=anchor)

    def legend(
        self, x: float, y: float, items: list[tuple[dict, str]], *, gap: float = 26.0, size: float = SMALL
    ) -> float:
        """A row of line samples, each ``(arrow options, text)``, starting at (x, y); returns its right end."""
        for opts, label in items:
            self.arrow([(x, y), (x + 30, y)], **opts)
            t = self.text(x + 38, y, label, size=size, anchor="start", muted=True)
            x = t.x1 + gap
        return x - gap

    # output ---------------------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise LayoutError if a label leaves the canvas, two labels overlap, or a line crosses a label."""
        canvas = Box(0, 0, self.width, self.height)
        problems = []
        for t in self._texts:
            b = t.box
            if b.x < -0.5 or b.y < -0.5 or b.x1 > canvas.x1 + 0.5 or b.y1 > canvas.y1 + 0.5:
                problems.append(f"label {t.label!r} leaves the canvas ({b.x:.0f}, {b.y:.0f}, {b.x1:.0f}, {b.y1:.0f})")
        for i, a in enumerate(self._texts):
            for b in self._texts[i + 1 :]:
                if a.box.overlaps(b.box, margin=1.0):
                    problems.append(f"labels {a.label!r} and {b.label!r} overlap")
        for t in self._texts:
            inner = Box(t.box.x + 1.5, t.box.y + 2.5, t.box.w - 3, t.box.h - 5)
            for b in self._shapes:
                inside = b.x <= inner.x and inner.x1 <= b.x1 and b.y <= inner.y and inner.y1 <= b.y1
                if b is not t.owner and inner.overlaps(b) and not inside:
                    problems.append(
                        f"label {t.label!r} crosses the edge of a shape at ({b.x:.0f}, {b.y:.0f}, "
                        f"{b.x1:.0f}, {b.y1:.0f})"
                    )
        for p, q, touches in self._segments:
            for t in self._texts:
                if t.owner is not None and t.owner in touches:
                    continue
                inner = Box(t.box.x + 1.5, t.box.y + 2.5, t.box.w - 3, t.box.h - 5)
                if inner.w > 0 and inner.h > 0 and _segment_hits(p, q, inner):
                    problems.append(
                        f"a line from {tuple(round(v) for v in p)} to {tuple(round(v) for v in q)} "
                        f"crosses the label {t.label!r}"
                    )
        if problems:
            raise LayoutError(f"diagram {self.name}: " + "; ".join(problems))

    def svg(self) -> str:
        """The SVG document (checked first)."""
        self.check()
        defs = []
        for role, big in sorted(self._markers):
            length, half = (13.0, 5.5) if big else (10.0, 4.0)
            mid = f"{self.name}-ah-{role}{'-big' if big else ''}"
            ref = length - (8.0 if big else 6.0)
            defs.append(
                f'<marker id="{mid}" viewBox="0 0 {_n(length)} {_n(2 * half)}" refX="{_n(ref)}" refY="{_n(half)}" '
                f'markerWidth="{_n(length)}" markerHeight="{_n(2 * half)}" markerUnits="userSpaceOnUse" '
                f'orient="auto-start-reverse"><path d="M0,0L{_n(length)},{_n(half)}L0,{_n(2 * half)}z" '
                f'class="t-{role}"/></marker>'
            )
        if self._hatch:
            defs.append(
                f'<pattern id="{self.name}-hatch" patternUnits="userSpaceOnUse" width="6" height="6" '
                f'patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="6" class="hatch"/></pattern>'
            )
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_n(self.width)} {_n(self.height)}" '
            f'width="{_n(self.width)}" height="{_n(self.height)}" class="abd" role="img" '
            f'data-diagram="{self.name}">'
        )
        parts = [head, f"<title>{html.escape(self.title)}</title>", f"<style>{stylesheet()}</style>"]
        if defs:
            parts.append("<defs>" + "".join(defs) + "</defs>")
        parts.append('<rect width="100%" height="100%" class="bg"/>')
        parts += self._body
        parts.append("</svg>")
        return "\n".join(parts) + "\n"


# --- the stylesheet ----------------------------------------------------------------------------------------


def variables(mode: str) -> str:
    """The CSS custom properties of ``mode``, e.g. ``--query-f:#efe8f8;``."""
    return "".join(f"--{key}:{value};" for key, value in style.theme(mode).items())


def stylesheet() -> str:
    """The CSS inside every diagram: the light colours, and the rules that use them."""
    rules = [
        f"svg.abd{{{variables('light')}--bg:#fff;font-family:var(--pst-font-family-base,{FONT_STACK});font-size:{_n(SIZE)}px}}",
        ".abd .bg{fill:var(--bg)}",
        ".abd text{fill:var(--ink);dominant-baseline:central;text-anchor:middle}",
        ".abd text[text-anchor=start]{text-anchor:start}.abd text[text-anchor=end]{text-anchor:end}",
        ".abd .muted{fill:var(--muted)}.abd .on-strong{fill:var(--on-strong)}",
        ".abd rect,.abd circle{stroke-width:1.4}.abd .thick{stroke-width:1.8}",
        ".abd .dash{stroke-dasharray:6 4}",
        ".abd .ln{fill:none;stroke-width:1.6;stroke-linejoin:round}.abd .res{stroke-width:3.4}",
        ".abd .dim{stroke:var(--muted);stroke-width:1}",
        ".abd .glyph{stroke:var(--op-s);stroke-width:1.8;fill:none}.abd .dot{fill:var(--op-s)}",
        ".abd .hatch{stroke:var(--hatch);stroke-width:2}.abd .cellline{stroke:var(--data-s);stroke-width:.8}",
        ".abd .s-line{stroke:var(--line)}.abd .t-line{fill:var(--line)}.abd circle[class^=t-]{stroke:none}",
        ".abd .f-data{fill:var(--data-f);stroke:var(--data-s)}.abd .f-op{fill:var(--op-f);stroke:var(--op-s)}",
        ".abd .f-panel{fill:var(--panel-f);stroke:var(--panel-s)}.abd .frame{fill:none;stroke-width:2.4}",
    ]
    for role in style.ROLES:
        rules.append(
            f".abd .f-{role}{{fill:var(--{role}-f);stroke:var(--{role}-s)}}"
            f".abd .s-{role}{{stroke:var(--{role}-s)}}.abd .t-{role}{{fill:var(--{role}-s)}}"
        )
    return "".join(rules)


def dark_stylesheet(selector: str = 'html[data-theme="dark"]') -> str:
    """The book's CSS that gives inline diagrams their dark colours when the page is in dark mode."""
    return f"{selector} svg.abd{{{variables('dark')}}}"
