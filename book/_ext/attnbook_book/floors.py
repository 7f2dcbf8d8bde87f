"""The lowest versions the package promises: every ``name>=version`` of ``pyproject.toml`` (its dependencies
and the extras asked for) as ``name==version``, one a line, for ``make test-compat``.

    python book/_ext/attnbook_book/floors.py pyproject.toml --extras test,hf,export,grade --skip torch \
        --float onnxruntime
    python book/_ext/attnbook_book/floors.py pyproject.toml --extras export --floor torch   # 2.6

Only the standard library: it runs in the fresh environment it helps to fill. A floor written with fewer
parts than the release has (``numpy>=1.24``) pins the release it names (``numpy==1.24`` is 1.24.0); a
requirement without a floor, or with an upper bound, is refused, since it has no lowest version to test.
A name given to ``--float`` keeps its ``>=`` (for a floor that cannot be installed with the others). A name with
a floor in the dependencies and a higher one in an extra (the export's torch) gets the higher.
Python 3.11 or later (``tomllib``).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import tomllib

_FLOOR = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*>=\s*([0-9][0-9A-Za-z.]*)\s*$")


def floors(pyproject: Path, extras: list[str], skip: set[str], float_: set[str] = frozenset()) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(f"unknown extras {unknown}; {pyproject} has {sorted(optional)}")
    lowest: dict[str, tuple[str, str]] = {}  # name -> (name as written, floor)
    for requirement in project["dependencies"] + [r for e in extras for r in optional[e]]:
        match = _FLOOR.match(requirement)
        if match is None:
            raise SystemExit(f"{requirement!r} is not of the form name>=version: it has no lowest version to test")
        name, version = match.groups()
        # an extra may raise a floor of the package's (the export's torch): the higher floor holds
        previous = lowest.get(name.lower())
        if previous is None or _key(version) > _key(previous[1]):
            lowest[name.lower()] = (name, version)
    pins = []
    for key, (name, version) in lowest.items():
        if key in float_:
            pins.append(f"{name}>={version}")
        elif key not in skip:
            pins.append(f"{name}=={version}")
    return pins


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pyproject", type=Path)
    parser.add_argument("--extras", default="", help="comma-separated extras whose floors to add")
    parser.add_argument("--skip", default="", help="comma-separated names to leave out (e.g. torch)")
    parser.add_argument("--float", default="", help="comma-separated names to keep at >= their floor")
    parser.add_argument("--floor", default="", help="print only this name's lowest version (e.g. torch)")
    args = parser.parse_args(argv)
    extras = [e for e in args.extras.split(",") if e]
    skip = {s.lower() for s in args.skip.split(",") if s}
    float_ = {s.lower() for s in args.float.split(",") if s}
    pins = floors(args.pyproject, extras, skip, float_)
    if args.floor:
        found = [pin.split("==")[1] for pin in pins if pin.split("==")[0].lower() == args.floor.lower()]
        if not found:
            raise SystemExit(f"{args.floor} has no floor in {args.pyproject} (extras {extras})")
        print(found[0])
        return 0
    print("\n".join(pins))
    return 0


if __name__ == "__main__":
    sys.exit(main())
