"""Where learners run the book: Colab's published environment, and what a chapter's setup cell does to it.

Colab publishes the packages of its runtime (github.com/googlecolab/backend-info, ``pip-freeze.txt``); a copy
of that list is committed next to this file as a pip constraints file (``colab_constraints.txt``, with its
date and source in its header). From it:

- :func:`setup_requirements` reads the requirement strings a chapter's setup cell gives pip in Colab, by
  running the cell's ``if "google.colab" in sys.modules:`` block with pip's call recorded;
- :func:`colab_like_environment` makes an environment that holds Colab's packages as pip sees them (their
  metadata only, in a virtual environment of Colab's Python), and :func:`would_change` asks pip, with
  ``pip install --dry-run --report``, which of them an install would remove, upgrade or downgrade;
- ``make test-colab`` builds a real environment of Colab's versions and executes every chapter there.

Run as a program:

    python -m attnbook_book.colab constraints PIP_FREEZE --source TEXT > colab_constraints.txt
    python -m attnbook_book.colab python [3.X]                  # Colab's Python (or 3.X) on this machine
    python colab.py install CHAPTER.ipynb... --local DIR        # install as the setup cells do, changing nothing
    python colab.py changed PYTHON [--ignore NAME,...]          # Colab's packages this environment changed
    python -m attnbook_book.colab times COLAB.json HERE.json    # execution times there against here

Only the standard library: ``install`` and ``changed`` run inside the Colab-shaped environment.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types
import unittest.mock
from pathlib import Path

CONSTRAINTS = Path(__file__).with_name("colab_constraints.txt")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)\s*$")
_WHEEL = re.compile(r"/([A-Za-z0-9_.]+)-([0-9][^-/]*?)(?:%2B|\+)[^-/]*-cp\d+")  # torch-2.11.0%2Bcpu-cp313
_PYTHON = re.compile(r"^# Python (\d+\.\d+)(?:\.\d+)?\b", re.M)


def canonical(name: str) -> str:
    """A project name as pip compares them (PEP 503): lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


# --- the constraints file ---------------------------------------------------------------------------------


def constraints_from_freeze(freeze: str, header: str) -> str:
    """Colab's ``pip freeze`` as a constraints file: ``name==version`` lines as they are; a package installed
    from a wheel's URL (torch and its family, built for the CPU or for CUDA) as ``name==version`` of that wheel
    without its local label (the registry's build of the same release); other URLs (google-colab, Colab's own
    kernel gateway, a spaCy model) dropped, since the registry does not have them. ``header`` goes first, as
    comment lines."""
    kept, rewritten, dropped = [], [], []
    for line in freeze.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if _PIN.match(line):
            kept.append(line)
            continue
        name = line.split("@")[0].strip()
        wheel = _WHEEL.search(line)
        if "@" in line and wheel and canonical(wheel.group(1)) == canonical(name):
            kept.append(f"{name}=={wheel.group(2)}")
            rewritten.append(name)
        else:
            dropped.append(name)
    notes = [
        *header.strip().splitlines(),
        "Installed from a wheel's URL, written here as the registry's release: " + ", ".join(rewritten) + ".",
        "Installed from elsewhere, left out: " + ", ".join(dropped) + ".",
    ]
    lines = ["# " + note if note else "#" for note in notes]
    return "\n".join(lines + sorted(kept, key=lambda pin: canonical(pin.split("==")[0]))) + "\n"


def read_constraints(path: Path = CONSTRAINTS) -> dict[str, str]:
    """Colab's packages: canonical name -> version."""
    pins = {}
    for line in path.read_text().splitlines():
        match = _PIN.match(line.strip())
        if match:
            pins[canonical(match.group(1))] = match.group(2)
    return pins


def python_version(path: Path = CONSTRAINTS) -> str:
    """Colab's Python (``3.13``), from the constraints file's header."""
    match = _PYTHON.search(path.read_text())
    if match is None:
        raise ValueError(f"{path} does not say which Python Colab has (a '# Python 3.X' line)")
    return match.group(1)


def find_python(version: str) -> str | None:
    """An interpreter of ``version`` (``3.13``): ``pythonX.Y`` on the PATH, else pyenv's newest of that series."""
    candidates = [shutil.which(f"python{version}")]
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=True).stdout.strip()
        candidates += sorted(
            Path(root, "versions").glob(f"{version}.*/bin/python{version}"),
            key=lambda p: [int(part) for part in re.findall(r"\d+", p.parents[1].name)],
            reverse=True,
        )
    except (OSError, subprocess.CalledProcessError):
        pass
    check = "import sys; print('%d.%d' % sys.version_info[:2])"
    for candidate in filter(None, candidates):  # a pyenv shim of a version not selected does not run
        run = subprocess.run([str(candidate), "-c", check], capture_output=True, text=True)
        if run.returncode == 0 and run.stdout.strip() == version:
            return str(candidate)
    return None


# --- what a setup cell installs ---------------------------------------------------------------------------


def _is_colab_test(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) == "'google.colab' in sys.modules"


def setup_cell(nb: dict) -> str:
    """The source of a notebook's first code cell (a chapter's setup cell)."""
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            source = cell["source"]
            return source if isinstance(source, str) else "".join(source)
    raise ValueError("the notebook has no code cell")


def setup_requirements(source: str, installed: dict[str, str] | None = None) -> list[list[str]]:
    """What the setup cell ``source`` asks pip to install in Colab: the arguments after ``pip install`` of
    each call, options (``-q``) left out.

    The cell's ``if "google.colab" in sys.modules:`` block runs with ``subprocess.run`` recorded instead of
    run; ``importlib.metadata.version`` answers from ``installed`` (name -> version, Colab's packages) when it
    is given, so that a requirement the cell computes from what Colab has is computed as in Colab.
    """
    blocks = [node for node in ast.parse(source).body if _is_colab_test(node)]
    if len(blocks) != 1:
        raise ValueError('the setup cell must have one `if "google.colab" in sys.modules:` block')
    calls = []

    def run(args, *unused, **kwargs):
        calls.append([str(a) for a in args])
        return subprocess.CompletedProcess(args, 0, "", "")

    fake_sys = types.SimpleNamespace(modules={"google.colab": types.ModuleType("google.colab")}, executable="python")
    fake_subprocess = types.SimpleNamespace(run=run, check_call=run, PIPE=subprocess.PIPE)
    namespace = {"sys": fake_sys, "subprocess": fake_subprocess, "__name__": "__setup__"}
    code = compile(ast.Module(body=blocks, type_ignores=[]), "<setup cell>", "exec")
    if installed is None:
        exec(code, namespace)
    else:
        lookup = {canonical(k): v for k, v in installed.items()}

        def version(name: str) -> str:
            from importlib.metadata import PackageNotFoundError

            if canonical(name) not in lookup:
                raise PackageNotFoundError(name)
            return lookup[canonical(name)]

        with unittest.mock.patch("importlib.metadata.version", version):
            exec(code, namespace)
    installs = []
    for args in calls:
        if args[1:4] != ["-m", "pip", "install"]:
            raise ValueError(f"the setup cell runs {args!r}, not `python -m pip install`")
        installs.append([a for a in args[4:] if not a.startswith("-")])
    return installs


_GIT = re.compile(r"^(?P<name>attnbook(?:\[[a-z,]+\])?) @ git\+(?P<url>\S+?)@(?P<ref>[^@\s]+)$")


def book_requirement(requirement: str) -> tuple[str, str, str] | None:
    """``attnbook[extra] @ git+URL@REF`` -> (``attnbook[extra]``, URL, REF); None for another requirement."""
    match = _GIT.match(requirement)
    return (match["name"], match["url"], match["ref"]) if match else None


def local_requirements(installs: list[list[str]], source: Path) -> list[list[str]]:
    """The setup cell's installs with the library taken from ``source`` (a copy of this checkout) instead of
    the repository's release: the same name and extras, the same other requirements."""
    out = []
    for args in installs:
        fixed = []
        for requirement in args:
            book = book_requirement(requirement)
            fixed.append(f"{book[0]} @ {source.resolve().as_uri()}" if book else requirement)
        out.append(fixed)
    return out


# --- what pip would change --------------------------------------------------------------------------------


def colab_like_environment(target: Path, packages: dict[str, str], python: str) -> Path:
    """A virtual environment of ``python`` (no pip in it) that holds ``packages`` as pip sees installed ones:
    a ``.dist-info`` folder with each one's name and version. Returns its interpreter.

    pip decides what to install from the metadata of what is installed; the packages' code is not needed to
    find what an install would change (their own requirements are met in Colab, as pip's check there says)."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(target)], check=True)
    interpreter = target / "bin" / "python"
    site = subprocess.run(
        [str(interpreter), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for name, version in packages.items():
        info = Path(site) / f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "INSTALLER").write_text("colab\n")
        (info / "RECORD").write_text("")
    return interpreter


def installed_versions(python: str | Path) -> dict[str, str]:
    """What is installed for ``python``: canonical name -> version (``importlib.metadata``, as pip sees it)."""
    code = (
        "import importlib.metadata as m, json\n"
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}))"
    )
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout
    return {canonical(name): version for name, version in json.loads(out).items()}


def dry_run(python: str | Path, requirements: list[str], *, options: tuple[str, ...] = ()) -> dict:
    """pip's report (``pip install --dry-run --report``) of installing ``requirements`` for ``python``'s
    environment: a dict with ``install``, each entry one distribution pip would install."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        run = subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(python), "install", "--dry-run", "--quiet",
             "--disable-pip-version-check", "--only-binary=:all:", "--report", str(report), *options,
             *requirements],
            capture_output=True,
            text=True,
            env={**os.environ, "PIP_NO_INPUT": "1"},
        )  # fmt: skip
        if run.returncode != 0:
            raise RuntimeError(f"pip could not resolve {requirements}:\n{run.stderr[-3000:]}")
        return json.loads(report.read_text())


def would_change(report: dict, installed: dict[str, str]) -> list[tuple[str, str, str]]:
    """From a pip report: the installed packages an install would replace, as (name, installed, new)."""
    changes = []
    for item in report.get("install", []):
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        if canonical(name) in installed and installed[canonical(name)] != version:
            changes.append((name, installed[canonical(name)], version))
    return sorted(changes)


def changed(installed: dict[str, str], colab: dict[str, str]) -> list[tuple[str, str, str]]:
    """Colab's packages installed here at another version, as (name, Colab's, installed); a local label
    (``2.11.0+cu130``, the registry's CUDA build of Colab's ``2.11.0+cpu``) does not count."""
    return sorted(
        (name, version, installed[name])
        for name, version in colab.items()
        if name in installed and installed[name].split("+")[0] != version.split("+")[0]
    )


def install_as_setup_cells(
    notebooks: list[Path], source: Path, constraints: Path, python: str = sys.executable
) -> list[str]:
    """Run, for ``python``'s environment, every distinct install of the notebooks' setup cells (their pip
    arguments, what they compute read from this environment, the library taken from ``source``), and return
    what each changed among the packages installed before it: "install: name old -> new" lines.

    First, every package of Colab's (``constraints``) that these installs need is installed at Colab's version
    (as Colab has it before the setup cell runs); then the installs run as in Colab, without constraints."""
    installs = []
    for path in notebooks:
        cell = setup_requirements(setup_cell(json.loads(path.read_text())), installed_versions(python))
        installs += [args for args in local_requirements(cell, source) if args not in installs]
    colab = read_constraints(constraints)
    needed = set()
    for args in installs:
        report = dry_run(python, args, options=("-c", str(constraints)))
        needed |= {canonical(item["metadata"]["name"]) for item in report["install"]} & set(colab)
    if needed:
        print("Colab's packages these installs use: " + ", ".join(sorted(needed)), flush=True)
        pins = [f"{name}=={colab[name]}" for name in sorted(needed)]
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-c", str(constraints), *pins], check=True)
    problems = []
    for args in installs:
        before = installed_versions(python)
        print("pip install -q " + " ".join(args), flush=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *args], check=True)
        after = installed_versions(python)
        problems += [f"{' '.join(args)}: {name} {old} -> {new}" for name, old, new in changed(after, before)]
        problems += [f"{' '.join(args)}: {name} {before[name]} removed" for name in before if name not in after]
    return problems


def compare_times(colab_report: dict, here_report: dict) -> str:
    """A table of each page's execution time in the Colab-shaped environment against here (seconds)."""
    rows = ["| page | Colab-shaped (s) | here (s) | ratio |", "|---|---:|---:|---:|"]
    total_colab = total_here = 0.0
    for name in sorted(colab_report):
        there = colab_report[name]["seconds"]
        here = here_report.get(name, {}).get("seconds")
        status = "" if colab_report[name].get("passed", True) else " (failed)"
        if here:
            total_colab, total_here = total_colab + there, total_here + here
        ratio = f"{there / here:.2f}" if here else ""
        rows.append(f"| {name}{status} | {there:.1f} | {'' if here is None else f'{here:.1f}'} | {ratio} |")
    if total_here:
        rows.append(f"| all | {total_colab:.1f} | {total_here:.1f} | {total_colab / total_here:.2f} |")
    return "\n".join(rows)


# --- the command line -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnbook_book.colab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("constraints", help="Colab's pip freeze as a constraints file")
    make.add_argument("freeze", type=Path)
    make.add_argument("--source", required=True, help="header lines: where the list comes from, its date")
    reqs = sub.add_parser("requirements", help="the distinct installs of the chapters' setup cells, one a line")
    reqs.add_argument("notebooks", nargs="+", type=Path)
    reqs.add_argument("--local", type=Path, help="take the library from this folder instead of the repository")
    which = sub.add_parser("python", help="an interpreter of Colab's Python (or of VERSION) on this machine")
    which.add_argument("version", nargs="?", help="a Python version, 3.X (default: Colab's)")
    setup = sub.add_parser("install", help="install as the chapters' setup cells do; fail if that changes anything")
    setup.add_argument("notebooks", nargs="+", type=Path)
    setup.add_argument("--local", type=Path, required=True, help="the library's source (a copy of this checkout)")
    setup.add_argument("--constraints", type=Path, default=CONSTRAINTS, help="Colab's packages")
    check = sub.add_parser("changed", help="Colab's packages that the environment of PYTHON has at other versions")
    check.add_argument("python")
    check.add_argument("--ignore", default="", help="comma-separated names not to compare")
    times = sub.add_parser("times", help="execution times in the Colab-shaped environment against here")
    times.add_argument("colab", type=Path)
    times.add_argument("here", type=Path)
    args = parser.parse_args(argv)
    if args.command == "constraints":
        sys.stdout.write(constraints_from_freeze(args.freeze.read_text(), args.source.replace("\\n", "\n")))
    elif args.command == "requirements":
        seen = []
        for path in args.notebooks:
            installs = setup_requirements(setup_cell(json.loads(path.read_text())), installed_versions(sys.executable))
            if args.local is not None:
                installs = local_requirements(installs, args.local)
            for install in installs:
                if install not in seen:
                    seen.append(install)
        for install in seen:
            print(json.dumps(install))
    elif args.command == "python":
        version = args.version or python_version()
        found = find_python(version)
        if found is None:
            raise SystemExit(f"no Python {version} here: install it, e.g. `pyenv install {version}`")
        print(found)
    elif args.command == "install":
        problems = install_as_setup_cells(args.notebooks, args.local, args.constraints)
        for line in problems:
            print("changed: " + line)
        return 1 if problems else 0
    elif args.command == "changed":
        ignore = {canonical(name) for name in args.ignore.split(",") if name}
        colab = {name: v for name, v in read_constraints().items() if name not in ignore}
        differences = changed(installed_versions(args.python), colab)
        for name, colab_version, now in differences:
            print(f"{name}: Colab has {colab_version}, the environment has {now}")
        return 1 if differences else 0
    else:
        print(compare_times(json.loads(args.colab.read_text()), json.loads(args.here.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
