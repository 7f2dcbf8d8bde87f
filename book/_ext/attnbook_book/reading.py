"""How long a built chapter page takes to read: visible prose words at 200 a minute, plus 6 s per visible code line.

Measured on the built HTML, as a reader meets it:

- prose: the words of the page's article (text, admonitions, exercises, captions, tables of the text), without
  the code cells (their input and their outputs: printed text, tables, plots, widgets), without math and
  without the diagrams' own labels;
- code: every line of every code cell whose input the page shows, folded ones (``hide-input``) and the
  solutions in dropdowns included, blank lines included.

Run as a program:

    python -m attnbook_book.reading _build/html      # a table of every chapter page
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from bs4 import BeautifulSoup

WORDS_PER_MINUTE = 200
SECONDS_PER_CODE_LINE = 6
LIMIT_MINUTES = 45


@dataclass(frozen=True)
class Reading:
    words: int
    code_lines: int

    @property
    def minutes(self) -> float:
        return self.words / WORDS_PER_MINUTE + self.code_lines * SECONDS_PER_CODE_LINE / 60


def measure(html: str) -> Reading:
    """The visible prose words and code lines of a built page."""
    article = BeautifulSoup(html, "html.parser").find("article")
    if article is None:
        raise ValueError("the page has no <article>: has the page layout changed?")
    for tag in article.find_all(["script", "style", "svg", "noscript", "template"]):
        tag.decompose()
    code_lines = 0
    for cell in article.select("div.cell"):
        source = cell.select_one("div.cell_input")
        if source is not None:
            code_lines += len(source.get_text().rstrip("\n").split("\n"))
        cell.decompose()
    for tag in article.select(".math, .headerlink"):
        tag.decompose()
    return Reading(len(re.findall(r"\S+", article.get_text(" "))), code_lines)


def chapter_pages(html_root: Path) -> list[Path]:
    """The chapter pages of a built book."""
    return sorted((html_root / "chapters").glob("*.html"))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0] if args else "_build/html")
    print(f"{'page':48s} {'words':>6s} {'code':>5s} {'minutes':>7s}")
    over = 0
    for page in chapter_pages(root):
        r = measure(page.read_text(encoding="utf-8"))
        over += r.minutes > LIMIT_MINUTES
        flag = "  over the limit" if r.minutes > LIMIT_MINUTES else ""
        print(f"{page.stem:48s} {r.words:6d} {r.code_lines:5d} {r.minutes:7.1f}{flag}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
