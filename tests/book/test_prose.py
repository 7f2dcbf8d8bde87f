"""The text of the chapters: clean sources, balanced math, numbers from the cells, no plumbing on the page.

- No chapter source (.md, or a cell of the .ipynb) holds a control character other than tab and newline,
  and in every formula the closing delimiters match the opening ones: a Python string that swallowed a
  backslash turns ``\\rfloor`` into a carriage return (or a line break) followed by ``floor``, ``\\frac`` into
  a form feed, ``\\beta`` into a backspace, ``\\text`` into a tab.
- A number in the prose next to words such as "steps", "images", "accuracy" or "measured" comes from an
  executed cell through ``{glue:text}``; the few that may be typed (constants, numbers of a paper, the
  statement of an exercise) are listed in ALLOWED with the reason.
- A code cell that only glues numbers into the prose carries the tag ``remove-input``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from attnbook_book import notebooks

REPO = notebooks.REPO
SOURCES = notebooks.chapter_sources()
IDS = [p.stem for p in SOURCES]
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


# --- Control characters and formulas ----------------------------------------------------------------


@pytest.mark.parametrize("md", SOURCES, ids=IDS)
def test_no_control_characters_in_the_sources(md):
    for path in (md, md.with_suffix(".ipynb")):
        if path.suffix == ".ipynb":
            texts = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]
        else:
            texts = [path.read_text()]
        for text in texts:
            for match in CONTROL.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                pytest.fail(f"{path.name}: control character {match.group()!r} in {text.splitlines()[line - 1]!r}")


def math_blocks(text: str) -> list[str]:
    """The formulas of a MyST page: ```{math} blocks, $$ ... $$ and $ ... $."""
    blocks = re.findall(r"^```\{math\}\n(.*?)^```", text, re.M | re.S)
    text = re.sub(r"^```\{math\}\n.*?^```", "", text, flags=re.M | re.S)
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # code cells hold no formulas
    blocks += re.findall(r"\$\$(.+?)\$\$", text, re.S)
    text = re.sub(r"\$\$.+?\$\$", "", text, flags=re.S)
    blocks += re.findall(r"(?<![\\$])\$([^$\n]+)\$", text)
    return ["\n".join(line for line in b.splitlines() if not line.startswith(":")) for b in blocks]


PAIRS = [
    (r"\\left(?![a-zA-Z])", r"\\right(?![a-zA-Z])"),
    (r"\\lfloor", r"\\rfloor"),
    (r"\\lceil", r"\\rceil"),
    (r"\\langle", r"\\rangle"),
    (r"\\lVert", r"\\rVert"),
    (r"\\lvert", r"\\rvert"),
    (r"\\begin\{", r"\\end\{"),
    (r"(?<!\\)\{", r"(?<!\\)\}"),
]
# what is left of a command after its backslash and first letter became a control character or a line break
REMNANT = re.compile(r"^\s*(floor|ceil|angle|ight(arrow)?|rac|ext(bf|rm)?|eta|ilde|imes|heta|abla|otin|olimits)\b")


def math_problems(text: str) -> list[str]:
    problems = []
    for block in math_blocks(text):
        for opening, closing in PAIRS:
            if len(re.findall(opening, block)) != len(re.findall(closing, block)):
                problems.append(f"unbalanced {opening} ... {closing} in {block.strip()!r}")
        for line in block.splitlines()[1:]:
            if REMNANT.match(line):
                problems.append(f"a line starts with what looks like the rest of a command: {line.strip()!r}")
    return problems


@pytest.mark.parametrize("page", SOURCES + sorted((REPO / "book").glob("*.md")), ids=lambda p: p.stem)
def test_formulas_are_whole(page):
    assert not math_problems(page.read_text())


def test_the_formula_check_finds_a_swallowed_backslash():
    broken = "```{math}\n:label: eq\ng(h) = \\lfloor h / 2 \nfloor .\n```\n"
    assert len(math_problems(broken)) == 2  # the unbalanced floor, and the remnant at the start of a line
    assert math_problems("$\\left( x \\right)$ and $\\lfloor x \\rfloor$") == []
    assert math_problems("$\\left( x \right)$")  # "\r" became a carriage return
    assert CONTROL.search("\\alpha \x0crac{1}{2}") and not CONTROL.search("tab\there\nnewline")


# --- Numbers in the prose -----------------------------------------------------------------------------

NUMBER = r"\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?"
# a count, a time or a score: the number is followed by one of these words (within two words) ...
UNITS = (
    r"steps?|images?|examples?|sequences|sentences|pairs|windows|strings|passes|epochs?|seconds|minutes|runs|seeds"
    r"|scores\s+per"
)
# ... or directly by a percent sign, or it comes shortly after one of these words
MEASURED = (
    r"measured|measures|reaches|reached|accuracy|scores?|scored|loss(?:es)? of|takes|took|needs|needed"
    r"|agreed?|agrees"
)
# ... or it is a setting of the machine or the model written into the text: "a 2-core machine", "context 64",
# "a batch of 64"
SETTING = rf"(?P<k>{NUMBER})-cores?\b|\bcontext\s+(?P<c>{NUMBER})\b|\bbatch(?:es)?\s+of\s+(?P<b>{NUMBER})\b"
FLAG = re.compile(
    rf"(?<![\w.,/^_\-])(?P<n>{NUMBER})(?![\w.,]\d)(?:\s*%|(?=(?:\s+[\w\-']+){{0,1}}\s+(?:{UNITS})\b))"
    rf"|(?:\b(?:{MEASURED})\b(?:\s+[\w\-']+){{0,2}}\s+(?:of\s+)?(?:about\s+)?)(?P<m>{NUMBER})\b(?![.,]\d)"
    rf"|{SETTING}"
)

# Typed numbers that may stay, by chapter: the words around the number (a substring of its sentence) and why.
# Everything else that FLAG finds must be glued from a cell. A sentence with a citation is exempt: its
# numbers are the cited paper's.
EXERCISE = "the statement of an exercise (and its worked solution), which the exercise's checker fixes"
THOUGHT_EXPERIMENT = "the numbers of a thought experiment, set in the prose and then computed with in the next cell"
ALLOWED: dict[str, dict[str, str]] = {
    "01": {
        "so after 100 steps to": "arithmetic: 0.9 and 1.1 raised to the 100th power, worked out in the same sentence",
        "grows by 10% per step": "the meaning of a spectral radius of 1.1: a factor of 1.1 per step",
        "keeps 99% of the gradient per step": THOUGHT_EXPERIMENT,
        "A factor of 0.99 per step leaves": THOUGHT_EXPERIMENT,
        "To deliver even 1% of it": THOUGHT_EXPERIMENT,
    },
    "02": {
        "keep exactly half of its cell after 100 steps": EXERCISE,
        "After 100 steps the cell is multiplied by": EXERCISE,
    },
    "04": {
        'does not mean "22% animal"': "a misreading of the output, quoted to correct it",
    },
    "05": {
        "it must score exactly 50%": "arithmetic: a model that cannot tell twins apart gets one of each pair right",
        "Each of the 64 pairs contributes": EXERCISE,
    },
    "07": {
        "Between steps 1 and 2": "the numbers of the steps in the table above, not a count",
        "between steps 2 and 3": "the numbers of the steps in the table above, not a count",
    },
    "08": {
        "4,000 warmup steps": "the setting of the 2017 paper, whose schedule the section reproduces",
    },
    "09": {
        "A model runs a batch of 8 sequences of 4096 tokens": EXERCISE,
        "a batch of 16 makes it": THOUGHT_EXPERIMENT,
    },
    "10": {
        "at least 97% accuracy": "the accuracy the training cell asserts (`assert vit_accuracy >= 0.97`), a promise",
        "pre-trained on 90 million images and more": "the ViT paper's result, cited in the section it recalls",
    },
    "13": {
        "Masked language modelling hides 15% of the tokens": "BERT's masking recipe, quoted in the summary",
    },
    "14": {
        "Such checklists often come with default hyperparameters": "common defaults, quoted to say which of them "
        "are the 2017 model's (the next sentence, with its citation, gives the model's own)",
    },
    "15": {
        "50% accuracy, by construction": "arithmetic: equal logits for the two answers give one of each pair right",
        "CLIP learned from 400 million pairs": "the CLIP paper's training set, batch size and temperature",
    },
}


def prose_sentences(md: Path) -> list[str]:
    """The sentences of a chapter's prose: no code, no formulas, no roles (glued numbers are roles)."""
    text = "\n\n".join(c.source for c in notebooks.read_md(md).cells if c.cell_type == "markdown")
    kept, directives, skip_to = [], 0, None
    for line in text.splitlines():
        if skip_to is not None:  # inside a code or math block
            if line.strip() == skip_to:
                skip_to = None
            continue
        fence = re.match(r"^\s*(`{3,}|:{3,})(.*)$", line)
        if fence:
            marks, info = fence.group(1), fence.group(2).strip()
            if info.startswith("{") and not info.startswith(("{math}", "{code")):
                directives += 1  # a directive (admonition, exercise, ...): its content is prose
            elif info == "" and directives:
                directives -= 1  # the end of a directive
            else:
                skip_to = marks  # a code block, a formula, or a cell
            continue
        if re.match(r"^\s*:\w[\w-]*:", line):
            continue  # a directive option
        kept.append(line)
    text = "\n".join(kept)
    # a diagram's alt text describes the picture, whose numbers tests/book/test_diagrams.py checks against it
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", " DIAGRAM ", text)
    text = re.sub(r"\$\$.*?\$\$|\$[^$\n]+\$", " FORMULA ", text, flags=re.S)
    text = re.sub(r"\{cite(?::\w+)?\}`[^`]*`", " CITATION ", text)
    text = re.sub(r"\{[\w:-]+\}`[^`]*`|`[^`]*`|\(\S+\)=", " ROLE ", text)
    sentences = []
    for paragraph in re.split(r"\n\s*\n", text):
        flat = " ".join(paragraph.split())
        sentences += re.split(r"(?<=[.;:!?])\s+(?=[A-Z*(\-])|\s+-\s+", flat)
    return sentences


def typed_numbers(md: Path) -> list[str]:
    found = []
    for sentence in prose_sentences(md):
        if "CITATION" in sentence:
            continue
        for match in FLAG.finditer(sentence):
            found.append((sentence, match.group(match.lastgroup)))
    return found


@pytest.mark.parametrize("md", SOURCES, ids=IDS)
def test_numbers_in_the_prose_come_from_the_cells(md):
    allowed = ALLOWED.get(md.stem[:2], {})  # by chapter: for all its pages
    unexplained = [
        f"{number!r} in: {sentence}"
        for sentence, number in typed_numbers(md)
        if not any(snippet in sentence for snippet in allowed)
    ]
    assert not unexplained, (
        "typed numbers that depend on data or configuration; glue them from the cell that computes them "
        "(glue and {glue:text}), or, for a constant, a paper's number or an exercise's statement, add "
        "them to ALLOWED with the reason:\n" + "\n".join(unexplained)
    )
    if notebooks.is_section_page(md):
        return  # the chapter's own page checks the chapter's entries, over all its pages
    pages = [p for p in SOURCES if notebooks.page_key(p)[0] == notebooks.page_key(md)[0]]
    sentences = " ".join(s for page in pages for s in prose_sentences(page))
    stale = [snippet for snippet in allowed if snippet not in sentences]
    assert not stale, f"ALLOWED entries that match nothing in chapter {md.stem[:2]} any more: {stale}"


def test_the_number_check_flags_counts_and_scores_and_spares_the_rest(tmp_path):
    page = tmp_path / "99_example.md"
    page.write_text(
        "---\njupytext:\n  text_representation:\n    format_name: myst\n---\n\n"
        "The model reaches 97.5% after 1,000 steps on 360 test images. Its accuracy of 0.93 was "
        "measured at about 12 ms.\n\nA ROLE: {glue:text}`acc` after {glue:text}`n` steps, "
        "$T = 100$ steps in a formula, `steps=300` in code. The paper trains for 65,536 steps "
        "{cite}`someone2020`. Two layers, chapter 3, in 2017, and 4 of the 8 heads, 12 tokens.\n\n"
        "The logits hold 65 scores per character; a context 64 on a 2-core machine, in a batch of 24. "
        "The context of experiment 1 scores well; a model that predicts 1 scores that. Both losses agree at "
        "2.26.\n\n"
        "```{code-cell} ipython3\nfit(steps=800)  # 800 steps\n```\n"
    )
    assert sorted(n for _, n in typed_numbers(page)) == sorted(
        ["97.5", "1,000", "360", "0.93", "12", "65", "64", "2", "24", "2.26"]
    )


# --- Plumbing -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("md", SOURCES, ids=IDS)
def test_cells_that_only_glue_are_hidden(md):
    for cell in notebooks.read_md(md).cells:
        if cell.cell_type == "code" and notebooks.is_glue_only(cell.source):
            assert "remove-input" in cell.metadata.get("tags", []), (
                f"{md.name}: a cell that only glues numbers into the prose needs the tag remove-input:\n{cell.source}"
            )


def test_glue_only_cells_are_recognised():
    assert notebooks.is_glue_only('glue("a", 1)\nglue("b", f"{x:.2f}")')
    assert notebooks.is_glue_only('best = max(runs)\nglue("best", best)')
    assert not notebooks.is_glue_only('glue("a", 1)\nassert a > 0')  # a check is teaching
    assert not notebooks.is_glue_only("x = 1\nprint(x)")
    assert not notebooks.is_glue_only("x = (")
