"""How fast the book's pages open on a phone: Lighthouse over the built book, served compressed.

    python -m attnbook_book.lighthouse _build/html                      # every page, once
    python -m attnbook_book.lighthouse _build/html chapters/04_queries_keys_values.html --runs 3
    python -m attnbook_book.lighthouse _build/html --json _build/reports/lighthouse.json

Lighthouse (npm, pinned in package.json) drives Debian's Chromium (no browser is downloaded) with its default
mobile settings: a phone's screen, a slow 4G network and a CPU four times slower than this one, both
simulated from one unthrottled load of the page. The site is served by ``serve`` (npm, pinned) with gzip, as
a static host serves it. Each page's score and metrics are checked against ``LIMITS``: the thresholds that
Lighthouse and Core Web Vitals call good.

Lighthouse simulates the slow CPU by multiplying the time the page's scripts took here: a machine busy with
other work makes every page look slower. Every result records the load average while it ran, and a page
that misses a limit is measured again (``retries``); where it passes once, the page can meet the limit and
a busy machine made it miss it the other times.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from .chromium import CHROMIUM, CHROMIUM_ARGS, toc_pages

REPO = Path(__file__).resolve().parents[3]
NODE_BIN = REPO / "node_modules" / ".bin"

# The limits of every page: Lighthouse's performance score (0 to 1) at least, each metric at most.
LIMITS = {
    "performance": 0.90,
    "first-contentful-paint": 1800.0,  # ms
    "largest-contentful-paint": 2500.0,  # ms
    "total-blocking-time": 200.0,  # ms
    "cumulative-layout-shift": 0.1,
}
METRICS = [
    "first-contentful-paint",
    "largest-contentful-paint",
    "total-blocking-time",
    "cumulative-layout-shift",
    "speed-index",
]
# What a static host serves compressed and what it does not (the images and fonts are compressed already).


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_compressed(folder: Path) -> Iterator[str]:
    """Serve ``folder`` with gzip on 127.0.0.1 with ``serve`` (npm) while the block runs; yields the base URL.

    ``x.html`` is served at its own address (``cleanUrls`` off), as the book's links name it."""
    binary = NODE_BIN / "serve"
    if not binary.exists():
        raise FileNotFoundError(f"{binary} is missing: run `make setup` (npm ci)")
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "serve.json"
        config.write_text(json.dumps({"cleanUrls": False, "directoryListing": False}))
        env = {**os.environ, "NO_UPDATE_CHECK": "1", "NODE_ENV": "production"}
        process = subprocess.Popen(
            [
                str(binary),
                "-L",
                "-n",
                "--no-port-switching",
                "-c",
                str(config),
                "-l",
                f"tcp://127.0.0.1:{port}",
                str(Path(folder).resolve()),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"serve did not start: {process.stderr.read().decode()[-2000:]}")
                time.sleep(0.1)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def run(url: str, *, timeout: float = 240) -> dict:
    """One Lighthouse run (mobile, simulated throttling) of ``url``: the score, metrics and bytes."""
    binary = NODE_BIN / "lighthouse"
    if not binary.exists():
        raise FileNotFoundError(f"{binary} is missing: run `make setup` (npm ci)")
    flags = ["--headless=new" if a == "--headless" else a for a in CHROMIUM_ARGS]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        env = {**os.environ, "CHROME_PATH": CHROMIUM}
        start = time.perf_counter()
        done = subprocess.run(
            [
                str(binary),
                url,
                "--quiet",
                "--output=json",
                f"--output-path={out}",
                "--only-categories=performance",
                "--disable-full-page-screenshot",
                f"--chrome-flags={' '.join(flags)}",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        seconds = time.perf_counter() - start
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"lighthouse failed on {url}: {done.stderr[-3000:]}")
        report = json.loads(out.read_text())
    return summarise(report) | {
        "seconds": round(seconds, 1),
        "load": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def summarise(report: dict) -> dict:
    """What the book keeps of a Lighthouse report: score, metrics, bytes, the requests and the machine."""
    audits = report["audits"]
    requests = audits["network-requests"]["details"]["items"]
    runtime_error = report.get("runtimeError") or {}
    return {
        "performance": report["categories"]["performance"]["score"],
        **{m: round(audits[m]["numericValue"], 3) for m in METRICS},
        "bytes": int(sum(r.get("transferSize", 0) for r in requests)),
        "bytes_uncompressed": int(sum(r.get("resourceSize", 0) for r in requests)),
        "requests": len(requests),
        "largest": sorted(
            ([r["url"].split("/", 3)[-1], int(r.get("transferSize", 0))] for r in requests),
            key=lambda x: -x[1],
        )[:5],
        "lcp_element": _lcp_element(audits),
        # what delays the first paint whatever the machine: scripts and stylesheets the page waits for
        "render_blocking": [
            i["url"].split("/", 3)[-1] for i in audits["render-blocking-resources"].get("details", {}).get("items", [])
        ],
        "benchmark_index": report.get("environment", {}).get("benchmarkIndex"),
        "warnings": report.get("runWarnings", []) + ([runtime_error.get("message")] if runtime_error else []),
    }


def _lcp_element(audits: dict) -> str:
    with contextlib.suppress(Exception):
        items = audits["largest-contentful-paint-element"]["details"]["items"][0]["items"]
        return items[0]["node"]["snippet"][:120]
    return ""


def misses(result: dict, limits: dict = LIMITS) -> list[str]:
    """The limits a result misses, in words (empty: the page meets them all)."""
    found = []
    for key, limit in limits.items():
        value = result[key]
        if key == "performance" and value < limit:
            found.append(f"performance {value * 100:.0f} < {limit * 100:.0f}")
        elif key != "performance" and value > limit:
            found.append(f"{key} {value:.3g} > {limit:.3g}")
    return found


def measure(base: str, page: str, *, runs: int = 1, retries: int = 0, log=None) -> dict:
    """``runs`` Lighthouse runs of ``page``, and up to ``retries`` more while every run misses a limit.

    Returns the runs, their medians, and the best run (the highest score) with the limits it misses."""
    results = []
    while len(results) < runs or (len(results) < runs + retries and all(misses(r) for r in results)):
        results.append(run(f"{base}/{page}"))
        if log:
            r = results[-1]
            log(
                f"{page}: {r['performance'] * 100:.0f}, FCP {r['first-contentful-paint']:.0f} ms, LCP "
                f"{r['largest-contentful-paint']:.0f} ms, TBT {r['total-blocking-time']:.0f} ms, CLS "
                f"{r['cumulative-layout-shift']:.3f}, {r['bytes'] / 1e6:.2f} MB ({r['seconds']:.0f} s, load "
                f"{r['load'][0]})"
            )
    best = max(results, key=lambda r: (r["performance"], -r["total-blocking-time"]))
    keys = ["performance", *METRICS, "bytes", "bytes_uncompressed", "seconds"]
    median = {k: statistics.median(r[k] for r in results) for k in keys}
    return {"page": page, "runs": results, "median": median, "best": best, "misses": misses(best)}


def measure_site(html: Path, pages: list[str], *, runs: int = 1, retries: int = 0, log=None) -> dict:
    """Every page of ``pages`` in the site ``html``, served compressed: ``{"pages": {page: ...}, ...}``."""
    found = {}
    start = time.perf_counter()
    load_start = list(os.getloadavg())
    with serve_compressed(html) as base:
        for page in pages:
            found[page] = measure(base, page, runs=runs, retries=retries, log=log)
    return {
        "lighthouse": _version("lighthouse"),
        "chromium": CHROMIUM,
        "limits": LIMITS,
        "load_average": {"start": [round(x, 2) for x in load_start], "end": [round(x, 2) for x in os.getloadavg()]},
        "cpus": os.cpu_count(),
        "seconds": round(time.perf_counter() - start, 1),
        "pages": found,
    }


def _version(package: str) -> str:
    with contextlib.suppress(Exception):
        return json.loads((REPO / "node_modules" / package / "package.json").read_text())["version"]
    return "unknown"


def write_report(result: dict, path: Path) -> None:
    """Merge ``result``'s pages into the report at ``path`` (the site tests measure pages on two workers)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    old = {}
    with contextlib.suppress(Exception):
        old = json.loads(path.read_text())
    pages = {**old.get("pages", {}), **result["pages"]}
    path.write_text(json.dumps({**result, "pages": pages}, indent=1))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("html", type=Path, help="the built site (_build/html)")
    parser.add_argument("pages", nargs="*", help="pages to measure (default: every page of _toc.yml)")
    parser.add_argument("--runs", type=int, default=1, help="runs of each page (the medians are reported)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    pages = args.pages or toc_pages(args.html)
    result = measure_site(args.html, pages, runs=args.runs, log=lambda s: print(s, file=sys.stderr))
    if args.json:
        write_report(result, args.json)
    failing = 0
    for page, found in result["pages"].items():
        m = found["median"]
        miss = misses({**found["best"], **{k: m[k] for k in LIMITS}})
        failing += bool(miss)
        print(
            f"{page:60} {m['performance'] * 100:4.0f} FCP {m['first-contentful-paint']:6.0f} LCP "
            f"{m['largest-contentful-paint']:6.0f} TBT {m['total-blocking-time']:5.0f} CLS "
            f"{m['cumulative-layout-shift']:.3f} {m['bytes'] / 1e6:5.2f} MB {m['bytes_uncompressed'] / 1e6:6.2f} MB"
            + (f"  misses: {'; '.join(miss)}" if miss else "")
        )
    print(f"{len(result['pages']) - failing} of {len(result['pages'])} pages meet every limit (medians)")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
