"""The accessibility audit of the built book: axe-core over its pages, in light and dark mode.

axe-core (npm, pinned in package.json) is the engine of the browsers' own accessibility audits. It is
injected into a page from ``node_modules`` (the site does not serve it to readers) and run with the rules of
WCAG 2.0 and 2.1, levels A and AA. The site tests ask for no critical and no serious violation on any page
in either colour mode; this module is also a program that counts violations by rule, for a report:

    python -m attnbook_book.a11y _build/html            # every page of the book, light and dark
    python -m attnbook_book.a11y _build/html --json out.json chapters/04_queries_keys_values.html

No rule is disabled (``DISABLED`` would list one with the reason a reader would accept).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
AXE_JS = REPO / "node_modules" / "axe-core" / "axe.min.js"
WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
# rule id -> why it is off (a reason a reader would accept); empty: every rule of the tags above runs
DISABLED: dict[str, str] = {}
BLOCKING = ("critical", "serious")


def audit(page, axe_js: Path = AXE_JS) -> list[dict]:
    """The WCAG 2.0/2.1 A and AA violations axe-core finds on the open ``page``.

    Each is ``{"id", "impact", "help", "nodes": [{"target", "summary", "html"}]}``.
    """
    if not axe_js.is_file():
        raise FileNotFoundError(f"axe-core is missing ({axe_js}): run `make setup` (npm ci)")
    if not page.evaluate("() => !!window.axe"):
        page.add_script_tag(path=str(axe_js))
    # the whole page laid out, as a reader who scrolls through it sees it (a page lays out its sections when
    # they come near the screen: sphinx.RENDER_CSS)
    page.evaluate(
        "() => { document.documentElement.classList.add('attnbook-render-all');"
        " if (window.attnbookScroll) attnbookScroll.markAll(); }"
    )
    options = {
        "runOnly": {"type": "tag", "values": WCAG_TAGS},
        "resultTypes": ["violations"],
        "rules": {rule: {"enabled": False} for rule in DISABLED},
    }
    return page.evaluate(
        """async (options) => {
            const result = await axe.run(document, options);
            return result.violations.map(v => ({
                id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.map(n => ({target: n.target.join(' '), summary: n.failureSummary,
                                          html: n.html.slice(0, 200)})),
            }));
        }""",
        options,
    )


def blocking(violations: list[dict]) -> list[str]:
    """The critical and serious violations as lines a reader of a failing test can act on."""
    return [
        f"{v['id']} ({v['impact']}): {v['help']}; {n['target']}: {n['summary'].splitlines()[-1].strip()}"
        for v in violations
        if v["impact"] in BLOCKING
        for n in v["nodes"]
    ]


def settle(page) -> None:
    """Draw and wait for what a page draws only when it comes near the screen: its plotly figures and its
    widgets, all of them (the math is typeset when the book is built)."""
    figures = page.locator("div.attnbook-plotly")
    if figures.count():
        page.evaluate("() => attnbookPlotly.drawAll()")
        for i in range(figures.count()):
            figures.nth(i).locator(".main-svg").first.wait_for(state="attached", timeout=30_000)
    if page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count():
        page.evaluate("() => attnbookWidgets.load()")
        page.locator(".jupyter-widgets").first.wait_for(state="attached", timeout=30_000)
    page.wait_for_timeout(200)


def audit_site(html: Path, pages: list[str], modes=("light", "dark"), axe_js: Path = AXE_JS) -> dict:
    """Violations on each page in each mode: ``{mode: {page: [violation, ...]}}``."""
    from .chromium import launch, serve, set_mode, wait_styled

    found: dict[str, dict[str, list[dict]]] = {mode: {} for mode in modes}
    with serve(html) as base, launch() as browser:
        for mode in modes:
            for path in pages:
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                set_mode(page, mode)
                page.goto(f"{base}/{path}", wait_until="load", timeout=120_000)
                page.wait_for_load_state("networkidle", timeout=120_000)
                wait_styled(page)
                settle(page)
                found[mode][path] = audit(page, axe_js)
                page.close()
                print(f"{mode:5} {path}: {sum(len(v['nodes']) for v in found[mode][path])} elements", file=sys.stderr)
    return found


def by_rule(found: dict) -> list[tuple[str, str, dict[str, int]]]:
    """(rule, impact, {mode: elements}) for every rule violated somewhere, most elements first."""
    counts: dict[tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
    for mode, pages in found.items():
        for violations in pages.values():
            for v in violations:
                counts[(v["id"], v["impact"])][mode] += len(v["nodes"])
    return sorted(((r, i, dict(c)) for (r, i), c in counts.items()), key=lambda x: -sum(x[2].values()))


def main(argv=None) -> int:
    from .chromium import toc_pages

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("html", type=Path, help="the built site (_build/html)")
    parser.add_argument("pages", nargs="*", help="pages to audit (default: every page of _toc.yml, index, search)")
    parser.add_argument("--modes", nargs="+", default=["light", "dark"])
    parser.add_argument("--axe", type=Path, default=AXE_JS, help="axe.min.js to use")
    parser.add_argument("--json", type=Path, help="write every violation found here")
    args = parser.parse_args(argv)
    pages = args.pages or toc_pages(args.html) + ["genindex.html", "search.html"]
    found = audit_site(args.html, pages, args.modes, args.axe)
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))
    rows = by_rule(found)
    print(f"{'rule':32} {'impact':9} " + " ".join(f"{m:>6}" for m in args.modes))
    for rule, impact, counts in rows:
        print(f"{rule:32} {impact:9} " + " ".join(f"{counts.get(m, 0):6d}" for m in args.modes))
    for level in ("critical", "serious", "moderate", "minor"):
        total = {m: sum(c.get(m, 0) for _, i, c in rows if i == level) for m in args.modes}
        print(f"{'all ' + level:42} " + " ".join(f"{total[m]:6d}" for m in args.modes))
    return 1 if any(i in BLOCKING for _, i, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
