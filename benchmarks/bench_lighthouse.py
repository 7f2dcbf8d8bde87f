"""How fast each page of the built book opens on a phone, before and after a change: Lighthouse's mobile audit.

    python benchmarks/bench_lighthouse.py --after _build/html --before OTHER_BUILD/html --runs 3
    python benchmarks/bench_lighthouse.py --compare BEFORE.json AFTER.json --note "..."

Lighthouse 12 (npm, pinned) on Debian's Chromium, its default mobile settings (simulated slow 4G, a CPU four
times slower), over each built site served with gzip (``attnbook_book.lighthouse``). For every page of the
book (or the pages named with ``--pages``): the performance score, first and largest contentful paint, total
blocking time, cumulative layout shift, and the bytes transferred (compressed) and the same resources
uncompressed; the medians of ``--runs`` runs, before and after, the two sites' runs interleaved page by page
so that a machine busy with other work weighs on both alike. One row compares a plain page of the book (no
figure, widget, model or math: the floor of what the theme itself costs). Writes
``results/lighthouse.json`` and the section of the README.

``--compare`` writes the README's section of every page from two results of ``python -m
attnbook_book.lighthouse SITE --json FILE`` (each site measured alone, on a quiet machine): the build before a
change and after it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import cpu_name, loadavg, write_section

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

from attnbook_book import lighthouse  # noqa: E402
from attnbook_book.chromium import toc_pages  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "lighthouse.json"
TIMEOUT_S = 600  # one Lighthouse run; a page that keeps the CPU busy for half a minute takes minutes here
KEYS = ["performance", *lighthouse.METRICS, "bytes", "bytes_uncompressed"]


def plain_page(html: Path, pages: list[str]) -> str | None:
    """The smallest page of the book with no figure, widget, model in the page or formula."""
    plain = []
    for page in pages:
        text = (html / page).read_text()
        if not any(k in text for k in ("attnbook-plotly", "widget-view+json", "attnbook-inpage", 'class="math')):
            plain.append((len(text), page))
    return min(plain)[1] if plain else None


def measure(sites: dict[str, Path], pages: list[str], runs: dict[str, int], log, found=None, save=None) -> dict:
    """``runs[site]`` runs of every page of every site, interleaved: {site: {page: {"runs", "median"}}}. Pages
    already in ``found`` are kept; ``save(found)`` is called after each page."""
    found = found or {name: {} for name in sites}
    with lighthouse.serve_compressed(sites["after"]) as after, lighthouse.serve_compressed(sites["before"]) as before:
        bases = {"after": after, "before": before}
        for page in pages:
            if all(page in found.get(name, {}) for name in sites):
                continue
            for name in sites:
                found.setdefault(name, {})[page] = {"runs": []}
            for i in range(max(runs.values())):
                for name in sites:
                    if i < runs[name] and (sites[name] / page).exists():
                        try:
                            r = lighthouse.run(f"{bases[name]}/{page}", timeout=TIMEOUT_S)
                        except (RuntimeError, subprocess.TimeoutExpired) as e:  # a page of minutes of script
                            log(f"{name:6} {page}: no result ({str(e)[-200:]})")
                            continue
                        found[name][page]["runs"].append(r)
                        log(
                            f"{name:6} {page}: {r['performance'] * 100:.0f}, FCP {r['first-contentful-paint']:.0f}, "
                            f"LCP {r['largest-contentful-paint']:.0f}, TBT {r['total-blocking-time']:.0f}, "
                            f"CLS {r['cumulative-layout-shift']:.3f} ({r['seconds']:.0f} s, load {r['load'][0]})"
                        )
            for name in sites:
                got = found[name][page]["runs"]
                found[name][page]["median"] = {k: statistics.median(r[k] for r in got) for k in KEYS} if got else None
            if save:
                save(found)
    return found


def cell(m: dict | None, key: str) -> str:
    if m is None:
        return "-"
    v = m[key]
    if key == "performance":
        return f"{v * 100:.0f}"
    if key == "cumulative-layout-shift":
        return f"{v:.3f}"
    if key.startswith("bytes"):
        return f"{v / 1e6:.2f} MB"
    return f"{v / 1000:.1f} s" if key != "total-blocking-time" else f"{v:,.0f} ms"


def table(found: dict, pages: list[str], plain: str | None) -> str:
    head = [
        "| page | performance | FCP | LCP | TBT | CLS | transferred (compressed) | uncompressed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = []
    for page in pages:
        b, a = found["before"][page]["median"], found["after"][page]["median"]
        name = page.removesuffix(".html") + (" (plain page)" if page == plain else "")
        rows.append(
            f"| {name} | "
            + " | ".join(f"{cell(b, k)} → {cell(a, k)}" for k in ["performance", *lighthouse.METRICS[:4]])
            + f" | {cell(b, 'bytes')} → {cell(a, 'bytes')} | {cell(b, 'bytes_uncompressed')} → "
            f"{cell(a, 'bytes_uncompressed')} |"
        )
    return "\n".join(head + rows)


def _ranges(pages: dict, key: str, scale: float, unit: str, digits: int) -> str:
    values = [p["median"][key] * scale for p in pages.values()]
    return f"{min(values):.{digits}f} to {max(values):.{digits}f}{unit}"


def compare_section(before: dict, after: dict, before_path: Path, after_path: Path, note: str) -> str:
    """The README's section of every page: before -> after, from two results of ``attnbook_book.lighthouse``."""
    pages = list(after["pages"])
    a = after["pages"]
    meets = {
        key: sum(not lighthouse.misses(p["median"], {key: limit}) for p in a.values())
        for key, limit in lighthouse.LIMITS.items()
    }
    every = sum(not lighthouse.misses(p["median"]) for p in a.values())
    rows = [
        "| page | performance | FCP | LCP | TBT | CLS | transferred | uncompressed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for page in pages:
        b = before["pages"].get(page, {}).get("median")
        m = a[page]["median"]
        rows.append(
            f"| {page.removesuffix('.html')} | "
            + " | ".join(f"{cell(b, k)} → {cell(m, k)}" for k in ["performance", *lighthouse.METRICS[:4]])
            + f" | {cell(b, 'bytes')} → {cell(m, 'bytes')} | {cell(b, 'bytes_uncompressed')} → "
            f"{cell(m, 'bytes_uncompressed')} |"
        )

    def load(r):
        return f"{r['load_average']['start'][0]:.2f} at the start, {r['load_average']['end'][0]:.2f} at the end"

    return "\n".join(
        [
            "<!-- lighthouse_every_page:start -->",
            "## Every page on a quiet machine (`python -m attnbook_book.lighthouse`)",
            "",
            f"Lighthouse {after['lighthouse']}, mobile defaults, {len(a[pages[0]]['runs'])} run(s) per page (medians), "
            f"each site served with gzip and measured alone on this {after['cpus']}-core machine with nothing "
            f"else running (load average before: {load(before)}; after: {load(after)}). {note}",
            "",
            f"After, {len(pages)} pages: performance {_ranges(a, 'performance', 100, '', 0)} "
            f"({meets['performance']} pages at least 90); first contentful paint "
            f"{_ranges(a, 'first-contentful-paint', 1e-3, ' s', 2)} ({meets['first-contentful-paint']} within "
            f"1.8 s); largest contentful paint {_ranges(a, 'largest-contentful-paint', 1e-3, ' s', 2)} "
            f"({meets['largest-contentful-paint']} within 2.5 s); total blocking time "
            f"{_ranges(a, 'total-blocking-time', 1, ' ms', 0)} ({meets['total-blocking-time']} within 200 ms); "
            f"layout shift {_ranges(a, 'cumulative-layout-shift', 1, '', 3)} "
            f"({meets['cumulative-layout-shift']} within 0.1). {every} of {len(pages)} pages meet every limit. "
            f"Results: `results/{before_path.name}` (before), `results/{after_path.name}` (after).",
            "",
            *rows,
            "<!-- lighthouse_every_page:end -->",
        ]
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--after", type=Path, default=ROOT / "_build" / "html", help="the built site to measure")
    parser.add_argument("--before", type=Path, help="the built site to compare it with")
    parser.add_argument(
        "--compare",
        type=Path,
        nargs=2,
        metavar=("BEFORE", "AFTER"),
        help="write the section of every page from two results of attnbook_book.lighthouse",
    )
    parser.add_argument("--runs", type=int, default=3, help="runs of each page on each site (medians reported)")
    parser.add_argument("--before-runs", type=int, help="runs on the site before (default: --runs)")
    parser.add_argument("--pages", nargs="*", help="pages (default: every page of the book)")
    parser.add_argument("--note", default="", help="a sentence on what 'before' and 'after' are")
    parser.add_argument("--resume", action="store_true", help="keep the pages already in results/lighthouse.json")
    parser.add_argument("--table-only", action="store_true", help="only write the README's table from the results")
    args = parser.parse_args(argv)
    if args.compare:
        before, after = (json.loads(p.read_text()) for p in args.compare)
        section = compare_section(before, after, *args.compare, args.note)
        write_section("lighthouse_every_page", section)
        print(section)
        return 0
    if args.before is None:
        parser.error("--before is needed (or --compare)")
    pages = args.pages or toc_pages(args.after)
    plain = plain_page(args.after, pages)
    start, load_start = time.strftime("%Y-%m-%d %H:%M"), loadavg()
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    sites = {"before": args.before.resolve(), "after": args.after.resolve()}
    runs = {"before": args.runs if args.before_runs is None else args.before_runs, "after": args.runs}
    previous = json.loads(RESULTS.read_text()) if (args.resume or args.table_only) and RESULTS.exists() else {}
    found = previous.get("pages")
    if previous:
        start, load_start = previous["date"], previous["load_average"]["start"]
        runs = previous["runs"] if args.table_only else runs

    def save(found):
        RESULTS.parent.mkdir(exist_ok=True)
        record = {
            "date": start,
            "cpu": cpu_name(),
            "load_average": {"start": load_start, "end": loadavg()},
            "lighthouse": lighthouse._version("lighthouse"),
            "limits": lighthouse.LIMITS,
            "plain_page": plain,
            "sites": {k: str(v) for k, v in sites.items()},
            "note": args.note,
            "runs": runs,
            "pages": found,
        }
        RESULTS.write_text(json.dumps(record, indent=1))

    if not args.table_only:
        found = measure(sites, pages, runs, log, found=found, save=save)
    pages = [p for p in pages if p in found["after"] and p in found["before"]]
    load_end = previous.get("load_average", {}).get("end") if args.table_only else loadavg()
    all_runs = [r for site in found.values() for p in site.values() for r in p["runs"]]
    after = [found["after"][p]["median"] for p in pages if found["after"][p]["median"]]
    meeting = sum(not lighthouse.misses(m) for m in after)
    loads = [r["load"][0] for r in all_runs]
    section = "\n".join(
        [
            "<!-- bench_lighthouse:start -->",
            "## Pages on a phone: Lighthouse's mobile audit (`bench_lighthouse.py`)",
            "",
            "Lighthouse " + lighthouse._version("lighthouse") + " (npm) on Debian's Chromium with its default mobile "
            "settings (simulated slow 4G, a CPU four times slower than this one), each built site served with "
            "gzip by `serve` (npm) as a static host serves it. Per page, before → after: the performance score, "
            "first contentful paint (FCP), largest contentful paint (LCP), total blocking time (TBT), cumulative "
            "layout shift (CLS), the bytes transferred while the page loads (compressed) and the same resources "
            f"uncompressed; medians of {runs['after']} run(s) after and {runs['before']} before, the two sites' "
            "runs interleaved. Limits of the site tests: performance at least 90, FCP at most "
            "1.8 s, LCP at most 2.5 s, TBT at most 200 ms, CLS at most 0.1." + (f" {args.note}" if args.note else ""),
            "",
            f"Run on {start}: {cpu_name()}, load average (1, 5, 15 min) {load_start} at the start and {load_end} "
            f"at the end (1-minute load during the runs: median {statistics.median(loads):.1f}, from "
            f"{min(loads):.1f} to {max(loads):.1f}). Lighthouse multiplies the CPU time it observes: on this "
            "shared machine the numbers are pessimistic, and a page's score varies by several points from run "
            "to run.",
            "",
            table(found, pages, plain),
            "",
            f"After: {meeting} of {len(after)} pages meet every limit (medians)."
            + (
                f" The plain page ({plain.removesuffix('.html')}: no figure, widget, model or formula) is the "
                "floor of what the theme itself costs."
                if plain
                else ""
            ),
            "<!-- bench_lighthouse:end -->",
        ]
    )
    write_section("bench_lighthouse", section)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
