"""The bibliography: every {cite} key is in book/references.bib, and every entry there is cited somewhere."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CITE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]+)`")


def bib_keys() -> list[str]:
    return re.findall(r"^@\w+\{([^,\s]+),", (REPO / "book" / "references.bib").read_text(), re.M)


def cited_keys() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted((REPO / "chapters").glob("*.md")) + sorted((REPO / "book").glob("*.md")):
        for match in CITE.finditer(path.read_text()):
            for key in match.group(1).split(","):
                found.setdefault(key.strip(), set()).add(path.name)
    return found


def test_bibliography_keys_are_unique():
    keys = bib_keys()
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


def test_every_citation_has_an_entry_and_every_entry_is_cited():
    keys, cited = set(bib_keys()), cited_keys()
    assert not {k: sorted(f) for k, f in cited.items() if k not in keys}, "cited but not in references.bib"
    assert not sorted(keys - set(cited)), "entries of references.bib that no page cites"


def test_the_papers_the_book_relies_on_are_cited():
    cited = cited_keys()
    for prefix in (
        "bengio1994",
        "pascanu2013",
        "hochreiter1997",
        "cho2014",
        "bahdanau2015",
        "vaswani2017",
        "phuong2022",
        "dao2022",
        "dosovitskiy2021",
        "xiong2020",
        "zhang2019",
        "shazeer2020",
        "yun2020",
        "radford2019",
        "brown2020",
        "kitaev2020",
        "wang2020",
        "choromanski2021",
    ):
        assert any(key.startswith(prefix) for key in cited), f"no page cites {prefix}..."


def test_no_entry_holds_latex_math():
    """The bibliography is rendered by pybtex, which prints ``$O(n^2)$`` as it stands: write math in Unicode."""
    bib = (REPO / "book" / "references.bib").read_text()
    entries = re.split(r"^(?=@)", bib, flags=re.M)
    with_math = [e.split(",")[0] for e in entries if re.search(r"\$|\\\(|\\\[|\^\{?\d", e)]
    assert not with_math, f"entries with LaTeX math, which the bibliography page shows raw: {with_math}"
