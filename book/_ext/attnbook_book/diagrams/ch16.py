"""Chapter 16, what attention learns: the induction circuit, a previous-token head and an induction head."""

from __future__ import annotations

from . import diagram
from .svg import SMALL, Diagram

TOKENS = ["a", "b", "c", "d", "a", "b", "c"]  # a first half, then the start of its repeat


@diagram
def induction_circuit() -> Diagram:
    d = Diagram("induction_circuit", 720, 420, "The induction circuit: a previous-token head, then an induction head")
    x0, step, w = 196, 70, 60  # the columns of the positions
    cx = [x0 + i * step + w / 2 for i in range(len(TOKENS))]
    last = len(TOKENS) - 1

    # row labels
    d.text(16, 372, "tokens", anchor="start")
    d.text(16, 404, "position", anchor="start", size=SMALL, muted=True)
    d.text(16, 252, "layer 1", anchor="start")
    d.text(16, 272, "previous-token head:", anchor="start", size=SMALL, muted=True)
    d.text(16, 290, "copies the token before", anchor="start", size=SMALL, muted=True)
    d.text(16, 120, "layer 2", anchor="start")
    d.text(16, 140, "induction head", anchor="start", size=SMALL, muted=True)

    # the tokens and their positions
    toks = []
    for i, c in enumerate(TOKENS):
        toks.append(d.box(cx[i] - w / 2, 356, w, 34, f"${c}$", shape="tensor"))
        d.text(cx[i], 404, str(i), size=SMALL, muted=True)

    # layer 1: every position also records its predecessor (what the induction head's keys read)
    prev = []
    for i, c in enumerate(TOKENS):
        label = [f"${c}$", ("after " + (f"${TOKENS[i - 1]}$" if i else "\u2013"), SMALL)]
        prev.append(d.box(cx[i] - w / 2, 240, w, 52, label, shape="tensor", role="key" if i else None))
        d.line([toks[i].top, prev[i].bottom], width=1.2)
        if i:
            d.arrow([(cx[i - 1] + 10, toks[i - 1].y), (cx[i] - 14, prev[i].y1)], role="weight", width=1.4)

    # layer 2: the last position's query asks for the token that came after c; the key of position 3 matches
    query = d.box(cx[last] - 46, 104, 92, 52, ["query", ("after $c$?", SMALL)], shape="tensor", role="query")
    d.line([prev[last].top, query.bottom], width=1.2)
    d.arrow(
        [prev[3].top, (cx[3], 196), (cx[last] - 62, 196), (cx[last] - 62, 130), query.left],
        role="weight",
        width=3.0,
        radius=10,
    )
    d.text(cx[3] - 12, 178, "the key of position 3", anchor="end", size=SMALL, role="weight")
    d.text(cx[3] - 12, 196, "matches: attend there", anchor="end", size=SMALL, role="weight")
    out = d.box(cx[last] - 70, 20, 140, 44, ["copies $d$:", ("the next token", SMALL)], role="value")
    d.arrow([query.top, out.bottom], role="value")
    d.text(cx[0] - w / 2, 42, "$[A][B] \\dots [A] \\to [B]$", anchor="start", size=SMALL, muted=True)
    return d


@diagram
def circuit_in_the_weights() -> Diagram:
    d = Diagram(
        "circuit_in_the_weights",
        720,
        410,
        "The induction circuit in the weights: the OV path of copying and the QK path of K-composition",
    )
    # left: the OV circuit, from the letter attended to up to the logits it raises
    cx = 160
    d.text(cx, 18, "OV circuit: what the head writes")
    logits = d.box(cx - 75, 40, 150, 40, "logits", role="value")
    unembed = d.box(cx - 60, 112, 120, 40, "$W_U$", shape="layer")
    ov = d.box(cx - 95, 196, 190, 52, ["$W_{OV}$", ("of the induction head", SMALL)], shape="layer")
    attended = d.box(cx - 75, 300, 150, 52, ["$E$", ("letter attended to", SMALL)], role="value")
    for a, b in ((attended, ov), (ov, unembed), (unembed, logits)):
        d.arrow([a.top, b.bottom], role="value")
    d.text(cx, 386, "$E W_{OV} W_U$: its diagonal is copying", size=SMALL, muted=True)

    # right: the QK circuit, the query's letter against the letter written into the key
    qx, kx = 430, 620
    d.text(530, 18, "QK circuit: where the head looks")
    score = d.box(460, 40, 140, 40, "score", role="weight")
    qk = d.box(400, 120, 260, 52, ["$W_{QK}$", ("of the induction head", SMALL)], shape="layer")
    d.arrow([qk.top, score.bottom], role="weight")
    query = d.box(qx - 75, 300, 150, 52, ["$E$", ("query's letter", SMALL)], role="query")
    d.arrow([query.top, (qx, qk.y1)], role="query")
    key = d.box(kx - 85, 300, 170, 52, ["$E$", ("key's predecessor", SMALL)], role="key")
    prev = d.box(kx - 85, 210, 170, 52, ["$W_{OV}$", ("previous-token head", SMALL)], shape="layer")
    d.arrow([key.top, prev.bottom], role="key")
    d.arrow([prev.top, (kx, qk.y1)], role="key")
    d.text(kx - 12, 191, "writes it into the key", anchor="end", size=SMALL, role="key")
    d.text(530, 386, "$E W_{QK} (E W_{OV})^{\\top}$: its diagonal is K-composition", size=SMALL, muted=True)
    return d
