"""No page ships a placeholder for a fact still to be written: an upper-case token such as ``COLAB_TIME``,
``CI_NOTE`` or ``(2.4... FLOORS)`` in the README or a page of the book, outside code (where upper-case names
such as ``OMP_NUM_THREADS`` are real)."""

from __future__ import annotations

import re

import pytest
from attnbook_book import notebooks

REPO = notebooks.REPO
PAGES = [REPO / "README.md", *sorted((REPO / "book").glob("*.md"))]
# math, code blocks and code spans, where upper-case names with underscores are real (W_Q, OMP_NUM_THREADS)
MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.S)
CODE = re.compile(r"^(`{3,}|:{3,}|~{3,}).*?^\1[ \t]*$|`[^`\n]+`", re.M | re.S)
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b|\.\.\.\s*[A-Z]{3,}\b")
# in code blocks too: such a name alone in parentheses, a note to fill in (not a Make variable, $(NAME))
NOTE = re.compile(r"(?<!\$)\(([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\)")


def placeholders(text: str) -> list[str]:
    """The placeholder tokens of a markdown text: outside its math and code, and as notes in its code."""
    text = MATH.sub("", text)
    return list(dict.fromkeys(PLACEHOLDER.findall(CODE.sub("", text)) + NOTE.findall(text)))


def test_placeholders_are_found_and_code_is_not_one():
    text = "It takes COLAB_TIME of disk (CI_NOTE), with torch 2.4... FLOORS.\n`OMP_NUM_THREADS=1`, $W_Q$\n"
    assert placeholders(text) == ["COLAB_TIME", "CI_NOTE", "... FLOORS"]
    assert placeholders("```\n.ci/run    runs `make test` (CI_RUN)\n```\n") == ["CI_RUN"]
    code = "```bash\nATTNBOOK_HTML=x make test-site\n$(COLAB_PY) -m pytest\n```\nThe PDF and HTML, on CUDA.\n"
    assert placeholders(code) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_placeholder_is_left(page):
    assert placeholders(page.read_text()) == [], f"{page.name}: write the fact in place of the placeholder"
