"""Cross-references point at the page that holds what the text names.

A chapter whose story splits into pages keeps its label on its first page (``NN_name.md``); its sections
(``NN_K_name.md``) have labels of their own. A ``{ref}`` to a chapter's label links to its first page, so a
sentence that sends the reader there for something that lives on one of its sections sends them to the
wrong page. For every ``{ref}``/``{numref}`` to a page of a chapter in several pages, and every "chapter N"
of the prose (which sends the reader to chapter N's first page), the clause around it
(the sentence, or the part of it between semicolons; in a table, the clause of the cell and the row's
first cell) is checked against the other pages of the same chapter. It is flagged when it

- names an equation or a figure (``{eq}``, ``{numref}``) whose label is defined on another page of that
  chapter;
- quotes a heading of another page of that chapter ("section X of chapter N" with X on ``NN_K``);
- uses a word that belongs to another page of that chapter (its title, its headings, the names of its
  equations and figures) and to none of the referenced page's headings and labels, while it uses no word
  that is the referenced page's own in the same sense.

A chapter's first title names the whole chapter, so it does not count as that page's own. The few
references this flags although they are right are listed in ALLOWED, each with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from attnbook_book import notebooks

REPO = notebooks.REPO

# (referring page, label, the word that matched): why the reference is right.
ALLOWED = {
    ("04_queries_keys_values", "ch-bahdanau", "keys"): (
        "the annotations h_i are those of the Bahdanau model, built on the chapter's first page"
    ),
    ("14_scaling_and_practice", "ch-flash", "backwa"): (
        "measure.flop_count is introduced on the first page; the forward and backward pass are the lab's"
    ),
    ("16_2_attention_as_explanation", "ch-gpt-heads", "head"): (
        "the loss increase without each of the lab GPT's heads is measured on 16.1, the page referenced"
    ),
}

PAGE_LABEL = re.compile(r"^\(([\w-]+)\)=\s*$", re.M)
OPTION_LABEL = re.compile(r"^:label:\s*([\w-]+)\s*$", re.M)
ROLE = re.compile(r"\{(ref|numref|eq)\}`(?:[^`<]*<)?([\w-]+)>?`")
HEADING = re.compile(r"^#{1,3} (.+)$", re.M)
CHAPTER_N = re.compile(r"\b[Cc]hapter (\d{1,2})(?![.\d])")  # "chapter 6", not "chapter 6.1"
NOT_PROSE = re.compile(
    r"^```\{(?:code-cell|math)\}.*?^```\s*$|\A---\n.*?^---\s*$|^:(?:label|class|tags|name):[^\n]*$", re.M | re.S
)
CLAUSE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z({*$])|;\s")
# words too common to say which page a clause is about
STOP = set(
    """about above after again against also because been before being below between both could does doing
    down during each every from further have having here into itself just more most much must only other
    over same should some such than that their them then there these they this those through under until
    very what when where which while with without would whose your page pages chapter chapters section
    sections book figure equation summary exercises check understanding experiment experiments model models
    attention transformer transformers step steps small large first second third last next previous
    together measure measured measuring""".split()
)


def stems(text: str) -> set[str]:
    """The words of ``text`` that can say what it is about, reduced to a common stem (a crude one)."""
    found = set()
    for word in re.findall(r"[A-Za-z][A-Za-z-]+", text):
        for part in word.lower().split("-"):
            if len(part) < 4 or part in STOP:
                continue
            if len(part) > 5:
                part = re.sub(r"(ings?|ed|es|s|ally|al|ly)$", "", part)
            found.add(part[:6])
    return found


def prose(text: str) -> str:
    """The text of a page without its code cells, display math, front matter and directive options
    (blanked line by line, so that line numbers stay)."""
    return NOT_PROSE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


@dataclass
class Book:
    pages: dict[str, str]  # page name -> its prose
    defined: dict[str, str]  # label -> the page that defines it
    top: dict[str, str]  # a page's own label -> the page
    chapter_of: dict[str, list[str]] = field(default_factory=dict)  # page -> the pages of its chapter
    topic: dict[str, set[str]] = field(default_factory=dict)  # page -> the stems of its title, headings, labels
    headings: dict[str, list[str]] = field(default_factory=dict)


def read_book(repo: Path) -> Book:
    sources = sorted((repo / "chapters").glob("[0-9][0-9]_*.md")) + sorted((repo / "book").glob("*.md"))
    texts = {p.stem: p.read_text() for p in sources}
    book = Book({name: prose(t) for name, t in texts.items()}, {}, {})
    for name, text in texts.items():
        labels = PAGE_LABEL.findall(text)
        if labels and name[:2].isdigit():
            book.top[labels[0]] = name
        for label in labels + OPTION_LABEL.findall(text):
            book.defined[label] = name
    for first, sections in notebooks.toc_chapters(repo):
        names = [Path(first).name] + [Path(s).name for s in sections]
        if len(names) < 2:
            continue
        for name in names:
            book.chapter_of[name] = names
            heads = HEADING.findall(book.pages[name])
            book.headings[name] = heads[1:]
            if name == names[0]:
                heads = heads[1:]  # the chapter's title covers all its pages
            labels = [x.split("-", 1)[1] for x in OPTION_LABEL.findall(texts[name]) if x.startswith(("eq-", "fig-"))]
            book.topic[name] = stems(" ".join(heads + labels))
    return book


def clause_around(text: str, start: int, end: int) -> str:
    """The clause of ``text`` that holds the span [start, end)."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line = text[line_start : line_end if line_end >= 0 else len(text)]
    if line.lstrip().startswith("|"):  # a table row: the clause of the cell, and the row's subject
        cells, at = line.split("|"), line_start
        for cell in cells:
            if at <= start < at + len(cell) + 1:
                break
            at += len(cell) + 1
        parts = re.split(r";\s", cell)
        offset, clause = start - at, parts[-1]
        for part in parts:
            if offset <= len(part):
                clause = part
                break
            offset -= len(part) + 2
        return cells[1] + " | " + clause
    para_start = max(text.rfind("\n\n", 0, start), 0)
    para_end = text.find("\n\n", end)
    para = text[para_start : para_end if para_end >= 0 else len(text)]
    bounds = [0] + [m.end() for m in CLAUSE_END.finditer(para)] + [len(para) + 1]
    offset = start - para_start
    return next(para[a:b] for a, b in zip(bounds, bounds[1:]) if a <= offset < b)


def misplaced(book: Book, page: str, label: str, clause: str) -> dict[str, list[str]]:
    """The other pages of the referenced page's chapter that ``clause`` names, each with what named it."""
    target = book.top.get(label)
    if target is None or target not in book.chapter_of:
        return {}
    siblings = [p for p in book.chapter_of[target] if p not in (target, page)]
    found: dict[str, list[str]] = {}
    for role, other in ROLE.findall(clause):
        if role != "ref" and book.defined.get(other) in siblings:
            found.setdefault(book.defined[other], []).append(other)
    lowered = " ".join(clause.lower().split())
    words = stems(ROLE.sub(" ", clause))
    for sibling in siblings:
        for heading in book.headings[sibling]:
            if len(heading.split()) > 1 and heading.lower() in lowered:
                found.setdefault(sibling, []).append(heading)
        others = [p for p in book.chapter_of[target] if p != sibling]
        theirs = words & book.topic[sibling] - set().union(*(book.topic[p] for p in others))
        own = words & book.topic[target] - book.topic[sibling]
        if theirs and not own:
            found.setdefault(sibling, []).extend(sorted(theirs))
    return found


def references(book: Book, text: str):
    """(match, label) for every reference to a page in ``text``: a ``{ref}``/``{numref}``, or "chapter N" in
    the prose, which sends the reader to chapter N's first page."""
    firsts = {name[:2]: label for label, name in book.top.items() if not notebooks.is_section_page(name)}
    for match in ROLE.finditer(text):
        if match.group(1) != "eq":
            yield match, match.group(2)
    for match in CHAPTER_N.finditer(text):
        label = firsts.get(f"{int(match.group(1)):02d}")
        if label:
            yield match, label


def stale_references(book: Book) -> list[tuple[str, int, str, str, list[str]]]:
    """(page, line, label, the page it should point at, what named it) for every flagged reference."""
    flagged = []
    for page, text in book.pages.items():
        for match, label in references(book, text):
            clause = clause_around(text, match.start(), match.end())
            if "Builds on" in clause:
                continue  # the chapters a page needs, not what it names
            for sibling, why in misplaced(book, page, label, clause).items():
                if any((page, label, w) in ALLOWED for w in why):
                    continue
                flagged.append((page, text.count("\n", 0, match.start()) + 1, label, sibling, why))
    return flagged


BOOK = read_book(REPO)


def test_references_point_at_the_page_that_holds_what_the_text_names():
    flagged = stale_references(BOOK)
    assert not flagged, "references to a page whose text names another page of its chapter:\n" + "\n".join(
        f"  {page}.md:{line}: {{ref}}`{label}` should point at {sibling} ({', '.join(why)})"
        for page, line, label, sibling, why in flagged
    )


def test_every_allowed_reference_is_still_in_the_book():
    """An entry of ALLOWED whose reference was rewritten would excuse the next one: it must still match."""
    used = set()
    for page, text in BOOK.pages.items():
        for match, label in references(BOOK, text):
            clause = clause_around(text, match.start(), match.end())
            for why in misplaced(BOOK, page, label, clause).values():
                used |= {(page, label, w) for w in why}
    assert not set(ALLOWED) - used, f"ALLOWED entries that match no reference any more: {set(ALLOWED) - used}"


# The references the turn-4 review of chapters 09 to 15 found pointing at a chapter's first page: the
# clause as it stood, the page it was on, the label it used and the page that holds what it names.
REVIEWED = [
    (
        "13_tokens_and_pretraining",
        "| sound | a frame of a spectrogram, or a patch of one | {ref}`ch-beyond-text` |",
        "ch-beyond-text",
        "15_2_sound_and_modalities",
    ),
    ("13_tokens_and_pretraining", "| graphs | a node | {ref}`ch-beyond-text` |", "ch-beyond-text", "15_1_graphs"),
    (
        "12_1_lab_build",
        "Trained that way, the model copies the answer from its input: the training loss falls far lower than "
        "it should, and the model is useless for generation, where the next character does not exist yet "
        "({ref}`ch-masking` measures it).",
        "ch-masking",
        "06_1_masking_experiments",
    ),
    (
        "14_2_what_goes_wrong",
        "| poor performance | positional encoding, masking | verify masks, try learned positions | a missing "
        "causal mask shows as a training loss that is too good ({ref}`ch-masking`) |",
        "ch-masking",
        "06_1_masking_experiments",
    ),
    (
        "14_2_what_goes_wrong",
        "| poor performance | positional encoding, masking | verify masks, try learned positions | learned "
        "positions and RoPE are compared on this text in {ref}`ch-modern-tweaks` |",
        "ch-modern-tweaks",
        "11_1_modern_attention",
    ),
    (
        "15_1_graphs",
        "On a ring they are sinusoids of the position, like the sinusoidal encoding of {ref}`ch-self-attention` "
        "but with frequencies that fit the ring.",
        "ch-self-attention",
        "05_1_positional_encoding",
    ),
]


@pytest.mark.parametrize("page,text,label,expected", REVIEWED, ids=[f"{r[0]}-{r[2]}" for r in REVIEWED])
def test_the_check_finds_the_references_the_review_found(page, text, label, expected):
    start = text.index("{ref}")
    clause = clause_around(text, start, text.index("`", text.index("`", start) + 1) + 1)
    assert expected in misplaced(BOOK, page, label, clause)
    right = BOOK.pages[expected]
    new_label = PAGE_LABEL.search(right)
    assert new_label and not misplaced(BOOK, page, new_label.group(1), clause), "the right page is not flagged"


def _mini_book(tmp_path: Path, referring: str) -> Book:
    """A book of two chapters: 01 on one page, 02 on two pages; ``referring`` is the prose of chapter 01."""
    (tmp_path / "chapters").mkdir()
    (tmp_path / "book").mkdir()
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nparts:\n  - caption: A\n    numbered: true\n    chapters:\n"
        "      - file: chapters/01_one\n      - file: chapters/02_two\n        sections:\n"
        "          - file: chapters/02_1_positions\n"
    )
    (tmp_path / "book" / "intro.md").write_text("# Intro\n")
    (tmp_path / "chapters" / "01_one.md").write_text(f"(ch-one)=\n# One\n\n{referring}\n")
    (tmp_path / "chapters" / "02_two.md").write_text(
        "(ch-two)=\n# Self-attention and positions\n\n## Self-attention does not see the order\n\n"
        "```{math}\n:label: eq-equivariance\nf(PX) = P f(X)\n```\n"
    )
    (tmp_path / "chapters" / "02_1_positions.md").write_text(
        "(ch-two-positions)=\n# Positional encodings\n\n## The sinusoidal encoding\n\n"
        "```{math}\n:label: eq-sinusoidal\np_t = \\sin(t)\n```\n\n## Learned positional embeddings\n"
    )
    return read_book(tmp_path)


@pytest.mark.parametrize(
    "referring,stale",
    [
        ("Like the sinusoidal encoding of {ref}`ch-two`, but on a ring.", True),
        ("Like the sinusoidal encoding of {ref}`ch-two-positions`, but on a ring.", False),
        ("Equation {eq}`eq-sinusoidal` of {ref}`ch-two` gives each position a vector.", True),
        ('See the section "Learned positional embeddings" of {ref}`ch-two`.', True),
        ("As {ref}`ch-two` showed, self-attention does not see the order.", False),
        ("Equation {eq}`eq-equivariance` of {ref}`ch-two` says so.", False),
        ("Self-attention is permutation equivariant ({ref}`ch-two`); learned embeddings are a table.", False),
        ("| sinusoidal | a fixed table | {ref}`ch-two` |", True),
        ("The sinusoidal encoding of chapter 2 gives each position a vector.", True),
        ("Chapter 2 showed that self-attention does not see the order.", False),
    ],
)
def test_the_check_flags_a_reference_to_a_chapters_first_page_for_what_its_section_holds(tmp_path, referring, stale):
    book = _mini_book(tmp_path, referring)
    assert bool(stale_references(book)) == stale, stale_references(book)
