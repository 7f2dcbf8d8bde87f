"""Every chapter page reads in at most 45 minutes.

Reading time is measured on the built page (:mod:`attnbook_book.reading`): visible prose words at 200 a
minute plus 6 s per code line the page shows (folded cells and solutions count). That no code cell scrolls
sideways at a laptop's width is checked on every page by ``test_site.test_page``.
"""

from __future__ import annotations

import pytest
from attnbook_book import reading
from site_helpers import HTML, built_toc

pytestmark = pytest.mark.site

CHAPTER_PAGES = [e for e in built_toc() if e.startswith("chapters/")]


@pytest.mark.parametrize("entry", CHAPTER_PAGES)
def test_a_chapter_page_reads_in_at_most_45_minutes(entry):
    r = reading.measure((HTML / f"{entry}.html").read_text(encoding="utf-8"))
    assert r.minutes <= reading.LIMIT_MINUTES, (
        f"{entry}: {r.minutes:.1f} minutes to read ({r.words} words, {r.code_lines} code lines); "
        f"the limit is {reading.LIMIT_MINUTES}"
    )
