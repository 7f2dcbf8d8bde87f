"""The glossary: every term is used somewhere in the book, and every {term} reference names a term."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GLOSSARY = REPO / "book" / "glossary.md"
TERM_ROLE = re.compile(r"\{term\}`([^`]+)`")


def glossary_terms() -> set[str]:
    text = GLOSSARY.read_text()
    block = re.search(r"^```\{glossary\}[^\n]*\n(.*?)^```\s*$", text, re.S | re.M)
    assert block, "book/glossary.md has no {glossary} directive"
    terms = set()
    for line in block.group(1).splitlines():
        if line.strip() and not line.startswith((" ", "\t", ":")):
            terms.add(line.strip().lower())
    return terms


def references() -> dict[str, set[str]]:
    """term (lower case) -> the files that reference it with {term}."""
    found: dict[str, set[str]] = {}
    for path in sorted((REPO / "chapters").glob("*.md")) + sorted((REPO / "book").glob("*.md")):
        for match in TERM_ROLE.finditer(path.read_text()):
            target = match.group(1)
            explicit = re.match(r".*<([^>]+)>$", target, re.S)
            term = (explicit.group(1) if explicit else target).strip().lower()
            found.setdefault(term, set()).add(path.name)
    return found


def test_every_reference_names_a_glossary_term():
    terms, refs = glossary_terms(), references()
    unknown = {t: sorted(files) for t, files in refs.items() if t not in terms}
    assert not unknown, f"{{term}} references to terms the glossary does not define: {unknown}"


def test_every_glossary_term_is_used():
    terms, refs = glossary_terms(), references()
    unused = sorted(t for t in terms if t not in refs)
    assert not unused, f"glossary terms no page links to with {{term}}: {unused}"


def test_every_term_has_a_definition_and_a_chinese_term():
    text = GLOSSARY.read_text()
    block = re.search(r"^```\{glossary\}[^\n]*\n(.*?)^```\s*$", text, re.S | re.M).group(1)
    entries = re.split(r"\n(?=\S)", block.strip())
    assert len(entries) >= 30
    for entry in entries:
        head, _, body = entry.partition("\n")
        assert body.strip(), f"{head}: no definition"
        assert re.search(r"Chinese: [\u4e00-\u9fff]", body), f"{head}: no Chinese term"
