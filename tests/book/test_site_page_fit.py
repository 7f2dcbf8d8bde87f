"""Every chapter page reads in at most 45 minutes, and no code cell scrolls sideways at a laptop's width.

Reading time is measured on the built page (:mod:`attnbook_book.reading`): visible prose words at 200 a
minute plus 6 s per code line the page shows. Code cells are opened in Chromium at 1280 px in both colour
modes, folded cells and solutions unfolded: none may be wider than its box (the page's code column holds 81
characters; the chapters' code is at most 79 columns, `chapters/ruff.toml`).
"""

from __future__ import annotations

import pytest
from attnbook_book import reading
from site_helpers import HTML, LAPTOP, built_toc, open_page

pytestmark = pytest.mark.site

CHAPTER_PAGES = [e for e in built_toc() if e.startswith("chapters/")]


@pytest.mark.parametrize("entry", CHAPTER_PAGES)
def test_a_chapter_page_reads_in_at_most_45_minutes(entry):
    r = reading.measure((HTML / f"{entry}.html").read_text(encoding="utf-8"))
    assert r.minutes <= reading.LIMIT_MINUTES, (
        f"{entry}: {r.minutes:.1f} minutes to read ({r.words} words, {r.code_lines} code lines); "
        f"the limit is {reading.LIMIT_MINUTES}"
    )


# every code cell's input, folded ones opened: [nearest id, first line, scroll width, box width]
WIDE_CODE = """() => {
  document.querySelectorAll('details').forEach(d => d.open = true);
  document.querySelectorAll('.toggle-hidden, .toggle-details__container')
    .forEach(e => e.classList.remove('toggle-hidden'));
  return [...document.querySelectorAll('article .cell_input pre')]
    .filter(p => p.scrollWidth > p.clientWidth + 1)
    .map(p => [(p.closest('[id]') || {}).id, p.textContent.split('\\n')[0].slice(0, 60), p.scrollWidth, p.clientWidth]);
}"""


@pytest.mark.parametrize("mode", ["light", "dark"])
@pytest.mark.parametrize("entry", CHAPTER_PAGES)
def test_no_code_cell_scrolls_sideways_at_a_laptops_width(server, browser, entry, mode):
    page, _, _ = open_page(browser, f"{server}/{entry}.html", mode=mode, viewport=LAPTOP)
    try:
        assert page.locator("article .cell_input pre").count(), f"{entry}: no code cell found"
        wide = page.evaluate(WIDE_CODE)
        assert not wide, f"{entry} ({mode}): code cells wider than the column: {wide}"
    finally:
        page.close()
