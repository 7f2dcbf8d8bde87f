"""Chapter 13, tokens and pretraining: byte-pair encoding, the three families of transformers, masked
language modelling, and low-rank adapters."""

from __future__ import annotations

from . import diagram
from .svg import SMALL, Diagram


@diagram
def bpe_merges() -> Diagram:
    d = Diagram("bpe_merges", 720, 300, "Byte-pair encoding merges a word's pieces step by step")
    steps = [
        ("the word's bytes", ["\u0120", "t", "h", "e"], None),
        ("merge \u0120 + t", ["\u0120t", "h", "e"], 0),
        ("merge h + e", ["\u0120t", "he"], 1),
        ("merge \u0120t + he", ["\u0120the"], 0),
    ]
    x0, y0, step_h, cw = 250, 46, 54, 38
    d.text(x0, 18, "tokens of \u201c the\u201d", anchor="start", bold=True, size=SMALL)
    for k, (label, tokens, new) in enumerate(steps):
        y = y0 + k * step_h
        d.text(230, y + 17, label, anchor="end", size=SMALL, muted=k == 0)
        x = x0
        for i, tok in enumerate(tokens):
            w = cw * len(tok) if len(tok) > 1 else cw
            d.box(x, y, w, 34, tok, role="weight" if i == new else None, size=SMALL)
            x += w + 6
        d.text(
            560, y + 17, f"{len(tokens)} token{'s' if len(tokens) > 1 else ''}", anchor="start", size=SMALL, muted=True
        )
        if k:
            d.arrow([(x0 - 8, y - step_h + 34), (x0 - 8, y)], head=True)
    d.text(
        360,
        262,
        "\u0120 stands for the space before the word. Each step merges the most frequent adjacent",
        size=SMALL,
        muted=True,
    )
    d.text(
        360,
        282,
        "pair, counted over every word of the text; the new token (blue) joins the vocabulary.",
        size=SMALL,
        muted=True,
    )
    return d


def _pattern(d: Diagram, x: float, y: float, kind: str = "full", n: int = 4, c: float = 12):
    """A small grid of who may attend to whom: full, or causal."""
    blocked = [[kind == "causal" and j > i for j in range(n)] for i in range(n)]
    return d.grid(x, y, n, n, c, role="weight", values=[[0.35] * n for _ in range(n)], blocked=blocked)


@diagram
def three_families() -> Diagram:
    d = Diagram("three_families", 720, 330, "Encoder-only, decoder-only and encoder-decoder transformers")
    panels = [(20, "encoder-only (BERT)"), (260, "decoder-only (GPT)"), (500, "encoder-decoder (T5)")]
    for x, title in panels:
        d.text(x + 100, 20, title, bold=True, size=SMALL)
    # encoder-only: every position sees every position, one vector per token out; decoder-only: causal
    for x0, kind, name, outs, note in [
        (30, "full", ["encoder", ("bidirectional", SMALL)], [""] * 4, "a vector per token, in context"),
        (
            270,
            "causal",
            ["decoder", ("causal", SMALL)],
            [f"$x_{i + 2}$" for i in range(4)],
            "the next token, at every position",
        ),
    ]:
        toks = [d.box(x0 + i * 36, 270, 30, 28, f"$x_{i + 1}$", size=SMALL) for i in range(4)]
        stack = d.box(x0, 150, 138, 60, name, shape="layer")
        for t in toks:
            d.arrow([t.top, (t.cx, stack.y1)])
        for i, label in enumerate(outs):
            o = d.box(x0 + i * 36, 60, 30, 28, label, role="value", size=SMALL)
            d.arrow([(o.cx, stack.y), o.bottom])
        d.text(x0 + 89, 46, note, size=SMALL, muted=True)
        _pattern(d, x0 + 150, 156, kind)
        d.text(x0 + 174, 222, "who sees", size=SMALL, muted=True)
        d.text(x0 + 174, 240, "whom", size=SMALL, muted=True)
    # encoder-decoder: the decoder reads the whole source through cross-attention
    src = [d.box(510 + i * 30, 270, 26, 28, "", size=SMALL) for i in range(3)]
    enc = d.box(510, 196, 86, 44, "encoder", shape="layer", size=SMALL)
    for t in src:
        d.arrow([t.top, (t.cx, enc.y1)])
    dec = d.box(614, 120, 86, 44, "decoder", shape="layer", size=SMALL)
    d.arrow([enc.top, (enc.cx, dec.cy), dec.left], role="key", radius=8)
    d.text(553, 126, "keys, values", size=SMALL, role="key")
    tgt = [d.box(620 + i * 28, 196, 24, 28, "", size=SMALL) for i in range(3)]
    for t in tgt:
        d.arrow([t.top, (t.cx, dec.y1)])
    d.text(657, 248, "target so far", size=SMALL, muted=True)
    d.text(553, 312, "source", size=SMALL, muted=True)
    outs = [d.box(620 + i * 28, 60, 24, 28, "", role="value", size=SMALL) for i in range(3)]
    for o in outs:
        d.arrow([(o.cx, dec.y), o.bottom])
    d.text(600, 46, "a new sequence", size=SMALL, muted=True)
    return d


@diagram
def masked_lm() -> Diagram:
    d = Diagram("masked_lm", 720, 340, "Masked language modelling with BERT's 80/10/10 rule")
    words = ["the", "cat", "sat", "on", "the", "mat"]
    chosen = {1: ("[MASK]", "80%: [MASK]"), 3: ("on", "10%: unchanged"), 5: ("pear", "10%: random")}
    w, gap, x0 = 86, 10, 70
    xs = [x0 + k * (w + gap) for k in range(len(words))]
    d.text(20, 300, "$x$", anchor="start")
    d.text(20, 246, "$\\tilde x$", anchor="start")
    for k, (x, word) in enumerate(zip(xs, words)):
        d.box(x, 286, w, 28, word, size=SMALL)
        shown, _ = chosen.get(k, (word, ""))
        if shown == "[MASK]":
            d.grid(x, 232, 1, 1, (w, 28), blocked=[[True]])
            d.box(x, 232, w, 28, "[MASK]", shape="frame", role="line", size=SMALL)
        else:
            d.box(x, 232, w, 28, shown, size=SMALL)
            if k in chosen:
                d.box(x, 232, w, 28, shape="frame", role="line")
        d.arrow([(x + w / 2, 286), (x + w / 2, 260)])
    enc = d.box(x0, 150, xs[-1] + w - x0, 44, ["encoder", ("every position sees every position", SMALL)], shape="layer")
    for x in xs:
        d.arrow([(x + w / 2, 232), (x + w / 2, enc.y1)])
    for k, x in enumerate(xs):
        if k in chosen:
            p = d.box(x, 76, w, 30, f"$p(x_{{{k + 1}}} \\mid \\tilde x)$", role="value", size=SMALL)
            d.arrow([(x + w / 2, enc.y), p.bottom])
            d.text(x + w / 2, 56, chosen[k][1], size=SMALL, muted=True)
        else:
            d.line([(x + w / 2, enc.y), (x + w / 2, enc.y - 20)], dashed=True)
    d.text(360, 22, "the loss: cross-entropy at the chosen positions only (a random 15%)", size=SMALL)
    return d


@diagram
def lora() -> Diagram:
    d = Diagram("lora", 720, 310, "A low-rank adapter beside a frozen weight matrix")
    x = d.box(60, 250, 200, 30, "$x$: width $d_{in}$", shape="tensor", size=SMALL)
    W = d.box(40, 110, 240, 100, ["$W$", ("$d_{out} \\times d_{in}$, frozen", SMALL)], shape="layer", dashed=True)
    A = d.box(
        380,
        170,
        200,
        32,
        [
            "$A$",
        ],
        shape="layer",
    )
    B = d.box(455, 100, 50, 40, "$B$", shape="layer")
    d.text(590, 186, "$r \\times d_{in}$, trained", anchor="start", size=SMALL)
    d.text(515, 120, "$d_{out} \\times r$, trained, starts at 0", anchor="start", size=SMALL)
    d.arrow([x.top, W.bottom])
    d.dot(160, 232)
    d.arrow([(160, 232), (480, 232), A.bottom], radius=8)
    d.arrow([A.top, B.bottom])
    add = d.circle(160, 56, 12, "+")
    d.arrow([W.top, add.bottom])
    d.arrow([B.top, (480, add.cy), add.right], radius=8)
    d.text(360, 44, "$\\times \\alpha / r$", size=SMALL)
    d.arrow([add.left, (40, add.cy)])
    d.text(34, 34, "$h = xW^\\top + (\\alpha / r)\\, x A^\\top B^\\top$", anchor="start", size=SMALL)
    d.text(360, 296, "rank $r \\ll d$: only $r(d_{in} + d_{out})$ numbers are trained", size=SMALL, muted=True)
    return d


@diagram
def gpt2_c_attn() -> Diagram:
    d = Diagram("gpt2_c_attn", 720, 300, "GPT-2's c_attn matrix split into the book's W_q, W_k and W_v")
    side, x0, y0 = 110, 90, 70  # D numbers in the picture; the matrix's corner
    d.text(20, 18, "GPT-2's c_attn.weight, stored (in, out)", anchor="start", bold=True, size=SMALL)
    d.brace(x0, y0 - 10, x0 + 3 * side, y0 - 10, "out: $3D$", side=-1)
    d.brace(x0 - 10, y0, x0 - 10, y0 + side, "in: $D$", side=-1)
    roles = (("query", "$q$", "$W_q$"), ("key", "$k$", "$W_k$"), ("value", "$v$", "$W_v$"))
    for i, (role, name, label) in enumerate(roles):
        part = d.box(x0 + i * side, y0, side, side, ["columns", (f"for {name}", SMALL)], role=role, size=SMALL)
        target = d.box(part.x + 10, 222, side - 20, 40, label, shape="layer")
        d.arrow([part.bottom, target.top], role=role)
    d.text(x0 + side / 2 - 8, 201, "each transposed", anchor="end", size=SMALL, muted=True)
    d.text(
        x0 + 1.5 * side,
        284,
        "the book's nn.Linear layers, $D \\times D$ each, stored (out, in)",
        size=SMALL,
        muted=True,
    )
    notes = [
        "GPT-2's Conv1D computes $xW + b$",
        "with $W$ stored (in, out);",
        "",
        "nn.Linear computes $xW^\\top + b$",
        "with $W$ stored (out, in).",
        "",
        "So: split the $3D$ columns in three",
        "and transpose each block; the bias,",
        "$3D$ numbers, splits the same way.",
    ]
    for k, line in enumerate(notes):
        if line:
            d.text(446, 80 + 22 * k, line, anchor="start", size=SMALL)
    return d


@diagram
def pretrain_finetune() -> Diagram:
    d = Diagram(
        "pretrain_finetune", 720, 392, "Pretraining an encoder, then fine-tuning it, against training from scratch"
    )

    def letters(y, word, masked=None):
        """One box per letter from x = 20, its middle at y; returns the right end."""
        for i, ch in enumerate(word):
            d.box(
                20 + i * 30,
                y - 14,
                26,
                28,
                "M" if i == masked else ch,
                size=SMALL,
                role="mask" if i == masked else None,
            )
        return 20 + len(word) * 30 - 4

    lanes = [(44, "pretraining: no labels"), (176, "fine-tuning: few labels"), (300, "from scratch: the same labels")]
    encoders = []
    for k, (top, title) in enumerate(lanes):
        d.text(20, top - 20, title, anchor="start", bold=True, size=SMALL)
        y = top + 30
        end = letters(y, "master" if k == 0 else "tsemar", masked=2 if k == 0 else None)
        enc = d.box(
            226,
            y - 22,
            150,
            44,
            ["encoder", ("copied" if k == 1 else "fresh weights" if k == 2 else "bidirectional", SMALL)],
            shape="layer",
            size=SMALL,
        )
        encoders.append(enc)
        d.arrow([(end, y), enc.left])
        if k == 0:
            head = d.box(410, y - 18, 110, 36, "MLM head", shape="layer", size=SMALL)
            d.arrow([enc.right, head.left])
            out = d.box(550, y - 14, 26, 28, "s", role="value", size=SMALL)
            d.arrow([head.right, out.left])
            d.text(586, y, "the masked letter", anchor="start", size=SMALL, muted=True)
        else:
            mean = d.box(410, y - 16, 90, 32, "mean", shape="op", size=SMALL)
            head = d.box(530, y - 18, 80, 36, "head", shape="layer", size=SMALL)
            d.arrow([enc.right, mean.left])
            d.arrow([mean.right, head.left])
            d.arrow([head.right, (640, y)])
            d.text(648, y - 10, "real or", anchor="start", size=SMALL)
            d.text(648, y + 10, "shuffled", anchor="start", size=SMALL)
    d.arrow([encoders[0].bottom, encoders[1].top], dashed=True)
    d.text(encoders[0].cx + 10, 132, "copy its weights", anchor="start", size=SMALL, muted=True)
    d.text(
        360,
        376,
        "The same labelled examples and recipe for both; only the encoder's starting weights differ.",
        size=SMALL,
        muted=True,
    )
    return d
