"""``python -m attnbook_book.mutation [--out DIR] [--cache DIR] [--jobs N] [--sample N] [--only NAME ...]``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import report, solutions


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnbook_book.mutation", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("_build/reports"))
    parser.add_argument("--cache", type=Path, default=Path("_build/cache/mutation"))
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--sample", type=int, default=None, help="at most N generated mutants per exercise")
    parser.add_argument("--only", nargs="*", default=None, help="checker names (check_...) or chapters (04)")
    args = parser.parse_args(argv)
    exercises = solutions.exercises()
    if args.only:
        exercises = [e for e in exercises if e.checker in args.only or e.chapter[:2] in args.only]
    start = time.perf_counter()
    results = report.analyse_all(
        exercises, cache=None if args.no_cache else args.cache, jobs=args.jobs, sample=args.sample
    )
    data = report.report(results, time.perf_counter() - start, args.sample)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "mutation.json").write_text(json.dumps(data, indent=1))
    (args.out / "mutation.md").write_text(report.markdown(data))
    total = data["total"]
    print(
        f"{len(exercises)} exercises, {total['made']} mutants, {total['killable']} killable, "
        f"{total['rejected']} rejected ({total['score']}%), {total['survivors']} surviving; {data['seconds']} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
