"""How fast the book's pages open on a phone: Lighthouse's mobile audit (``attnbook_book.lighthouse``).

Lighthouse 12 (npm, pinned) drives Debian's Chromium with its default mobile settings (a slow 4G network and a
CPU four times slower, simulated) over the built book served with gzip by ``serve`` (npm, pinned), as a static
host serves it. The pages: the home page and the six largest pages of the book (the most text, code, outputs
and math to lay out, where a page is likeliest to miss); ``python -m attnbook_book.lighthouse _build/html``
measures every page.

What a page is made of does not depend on the machine, and is checked here: nothing blocks its first paint
(no script or stylesheet Lighthouse finds render-blocking), its layout does not shift as figures and widgets
arrive (cumulative layout shift within 0.1, Core Web Vitals' "good"), and what it transfers as it opens stays
within a budget. Its first and largest contentful paint must be within Lighthouse's "good" (1.8 s and 2.5 s)
in at least one of up to three runs: Lighthouse simulates them from the network and from the time the page
took on this machine, which other work on the machine lengthens. The score and the total blocking time, which
rise and fall most with that work, are recorded with the load average in ``reports/lighthouse.json`` and
judged against Lighthouse's thresholds on a quiet machine (``python -m attnbook_book.lighthouse``, the
benchmarks' README), not here.
"""

from __future__ import annotations

import os

import pytest
from site_helpers import HTML, built_toc

pytestmark = [pytest.mark.site, pytest.mark.lighthouse]

REPORT = HTML.parent / "reports" / "lighthouse.json"
# Transferred (compressed) as the page opens, before any figure, widget or model comes into view: the theme,
# the text and its math, the page's own scripts (about 150 kB for a plain page, 230 kB for the heaviest).
BUDGET = 400_000  # bytes


LARGEST = 6


def pages_to_measure() -> list[str]:
    """The home page (the first page of _toc.yml) and the largest pages of the book."""
    entries = built_toc()
    if not entries:
        return []
    size = lambda e: (HTML / f"{e}.html").stat().st_size if (HTML / f"{e}.html").exists() else 0  # noqa: E731
    largest = sorted((e for e in entries[1:] if e.startswith("chapters/")), key=size, reverse=True)[:LARGEST]
    return [f"{e}.html" for e in [entries[0], *largest]]


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

    found = lighthouse.measure(compressed, page, runs=1, retries=2, log=print)
    lighthouse.write_report(
        {
            "lighthouse": lighthouse._version("lighthouse"),
            "limits": lighthouse.LIMITS,
            "cpus": os.cpu_count(),
            "pages": {page: found},
        },
        REPORT,
    )
    paints = {k: lighthouse.LIMITS[k] for k in ("first-contentful-paint", "largest-contentful-paint")}
    timely = [r for r in found["runs"] if not lighthouse.misses(r, paints)]
    assert timely, f"{page}: no run paints within the limits: {[lighthouse.misses(r, paints) for r in found['runs']]}"
    run = found["runs"][0]
    assert run["render_blocking"] == [], f"{page}: its first paint waits for {run['render_blocking']}"
    assert run["cumulative-layout-shift"] <= lighthouse.LIMITS["cumulative-layout-shift"], (
        f"{page}: layout shift {run['cumulative-layout-shift']:.3f} (LCP element {run['lcp_element']})"
    )
    assert run["bytes"] <= BUDGET, f"{page}: {run['bytes']} bytes as it opens; the largest: {run['largest']}"
