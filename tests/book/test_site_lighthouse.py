"""How fast the book's pages open on a phone: Lighthouse's mobile audit (``attnbook_book.lighthouse``).

Lighthouse 12 (npm, pinned) drives Debian's Chromium with its default mobile settings (a slow 4G network and a
CPU four times slower, simulated) over the built book served with gzip by ``serve`` (npm, pinned), as a static
host serves it. Each page measured must score at least 90 for performance, with its first contentful paint
within 1.8 s, its largest contentful paint within 2.5 s, its total blocking time within 200 ms and its
cumulative layout shift within 0.1: the thresholds that Lighthouse and the Core Web Vitals call good.

The pages: the home page and the heaviest page of every chapter, its largest HTML (the most text, code,
outputs and math to lay out: what a page costs once its figures and widgets wait for the reader). Measuring
every page takes two to three times as long, past what ``make test`` can spend;
``python -m attnbook_book.lighthouse _build/html`` measures them all. Each run takes 10 to 30 s.

Lighthouse simulates the slow CPU from the time the page took here, so a machine busy with other work makes a
page look slower than it is: these tests run alone, after the other browser tests (``make test-site``), and a
page that misses a limit is measured twice more; it passes if one run meets every limit. Every run, with the
load average of the machine while it ran, goes to ``reports/lighthouse.json`` beside the execution times.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import pytest
from site_helpers import HTML, built_toc

pytestmark = [pytest.mark.site, pytest.mark.lighthouse]

REPORT = HTML.parent / "reports" / "lighthouse.json"
RETRIES = 2


def pages_to_measure() -> list[str]:
    """The home page (the first page of _toc.yml) and the largest page of each chapter."""
    entries = built_toc()
    if not entries:
        return []
    chapters: dict[str, list[str]] = defaultdict(list)
    for entry in entries:
        name = Path(entry).name
        if entry.startswith("chapters/") and name[:2].isdigit():
            chapters[name[:2]].append(entry)
    size = lambda e: (HTML / f"{e}.html").stat().st_size if (HTML / f"{e}.html").exists() else 0  # noqa: E731
    heaviest = [max(pages, key=size) for _, pages in sorted(chapters.items())]
    return [f"{e}.html" for e in [entries[0], *heaviest]]


@pytest.fixture(scope="module")
def compressed():
    from attnbook_book.lighthouse import serve_compressed

    if not (HTML / "index.html").exists():
        pytest.fail(f"{HTML} has no built book: run `make html` (or `make book`) first")
    with serve_compressed(HTML) as base:
        yield base


@pytest.mark.parametrize("page", pages_to_measure())
def test_page_opens_fast_on_a_phone(compressed, page):
    from attnbook_book import lighthouse

    found = lighthouse.measure(compressed, page, runs=1, retries=RETRIES, log=print)
    lighthouse.write_report(
        {
            "lighthouse": lighthouse._version("lighthouse"),
            "limits": lighthouse.LIMITS,
            "cpus": os.cpu_count(),
            "pages": {page: found},
        },
        REPORT,
    )
    best = found["best"]
    assert found["misses"] == [], (
        f"{page} misses {found['misses']} in each of {len(found['runs'])} runs (load average "
        f"{[r['load'] for r in found['runs']]}); its largest requests: {best['largest']}"
    )
