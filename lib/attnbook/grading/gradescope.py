"""A Gradescope autograder for one chapter notebook: the bundle, and what its ``run_autograder`` runs.

Gradescope's documented layout (https://gradescope-autograders.readthedocs.io/en/latest/specs/): a zip with
``setup.sh`` (run once, as root, when Gradescope builds the autograder's Ubuntu image) and
``run_autograder`` (run for every submission, in ``/autograder``) at its root. Gradescope unpacks the zip
into ``/autograder/source``, puts the learner's files in ``/autograder/submission`` and reads
``/autograder/results/results.json``: a top-level ``score`` and a list of ``tests``, each with ``name``,
``score``, ``max_score``, ``status``, ``output`` and ``visibility``.

The bundle written by :func:`write_bundle`:

- ``setup.sh``: Python from apt, a virtual environment in ``/autograder/venv``, PyTorch's CPU build, this
  package with its ``grade`` extra from the copy in the bundle (so the checkers are exactly the ones the
  bundle was made with), and a user ``learner`` with no rights of its own, to run the learners' code;
- ``run_autograder``: ``python -m attnbook.grading gradescope`` on the root named by ``$AUTOGRADER_ROOT``
  (default ``/autograder``), so that a test can run it in a folder laid out like Gradescope's;
- ``autograder.json``: the chapter, the limits, the points and the visibility of the results;
- ``attnbook/``: the package's source (``pyproject.toml`` and ``lib/attnbook``);
- ``autograder.zip``: all of the above, the file to upload.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import zipfile
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from . import catalog
from .feedback import VISIBILITY, gradescope_results
from .grade import Graded, Outcome, grade_submission, load_chapters
from .kernel import DEFAULT_LIMITS, Limits
from .sandbox import CheckServer

__all__ = ["write_bundle", "run", "SETTINGS", "LEARNER"]

SETTINGS = "autograder.json"
LEARNER = "learner"  # the user setup.sh creates to run the learners' code

SETUP = """\
#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu; apt-get update is done).
set -euxo pipefail
cd /autograder/source
apt-get install -y python3 python3-venv python3-pip
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install --upgrade pip
# PyTorch's CPU build: grading needs no GPU, and the default build brings several GB of CUDA libraries
/autograder/venv/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu
/autograder/venv/bin/pip install "./attnbook[grade]"
# the learners' code runs as this user, who can write neither the results nor the Python environment
id -u {learner} >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin {learner}
"""

RUN = """\
#!/usr/bin/env bash
# Gradescope runs this for every submission; $AUTOGRADER_ROOT names another root than /autograder (tests).
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PYTHON="$ROOT/venv/bin/python"
[ -x "$PYTHON" ] || PYTHON="$(command -v python3)"
cd "$ROOT" && exec "$PYTHON" -m attnbook.grading gradescope "$ROOT"
"""


def _pyproject() -> str:
    """A pyproject.toml for the copy of the package: its version and dependencies as installed."""
    import attnbook

    requires = metadata.requires("attnbook") or []
    base = [r for r in requires if "extra ==" not in r]
    grade = [r.split(";")[0].strip() for r in requires if 'extra == "grade"' in r.replace("'", '"')]
    return "\n".join(
        [
            "[build-system]",
            'requires = ["setuptools>=68"]',
            'build-backend = "setuptools.build_meta"',
            "",
            "[project]",
            'name = "attnbook"',
            f'version = "{attnbook.__version__}"',
            'requires-python = ">=3.10"',
            f"dependencies = {json.dumps(base)}",
            "",
            "[project.optional-dependencies]",
            f"grade = {json.dumps(grade)}",
            "",
            "[tool.setuptools.packages.find]",
            'where = ["lib"]',
            "",
            "[tool.setuptools.package-data]",
            'attnbook = ["data_files/README.md", "data_files/*/*", "exercises/chapters.json"]',
            "",
        ]
    )


def write_bundle(
    chapter: str,
    out: Path,
    *,
    limits: Limits = DEFAULT_LIMITS,
    points: dict[str, float] | None = None,
    visibility: str = "visible",
    chapters: dict[str, catalog.ChapterExercises] | None = None,
) -> Path:
    """Write the autograder for the chapter notebook ``chapter`` into the folder ``out``; the zip's path."""
    import attnbook

    chapters = load_chapters(points=points) if chapters is None else chapters
    if chapter not in chapters:
        raise ValueError(f"{chapter!r} is not a chapter notebook with exercises; known: {', '.join(chapters)}")
    if visibility not in VISIBILITY:
        raise ValueError(f"visibility must be one of {', '.join(VISIBILITY)}, got {visibility!r}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "setup.sh").write_text(SETUP.format(learner=LEARNER))
    (out / "run_autograder").write_text(RUN)
    for script in ("setup.sh", "run_autograder"):
        (out / script).chmod(0o755)
    settings = {"chapter": chapter, "limits": asdict(limits), "points": points or {}, "visibility": visibility}
    settings["user"] = LEARNER
    (out / SETTINGS).write_text(json.dumps(settings, indent=1) + "\n")
    source = out / "attnbook"
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(
        Path(attnbook.__file__).resolve().parent,
        source / "lib" / "attnbook",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    (source / "pyproject.toml").write_text(_pyproject())
    bundle = out / "autograder.zip"
    with zipfile.ZipFile(bundle.with_suffix(".tmp"), "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(out.rglob("*")):
            if not path.is_file() or path == bundle or path.suffix == ".tmp":
                continue
            info = zipfile.ZipInfo(path.relative_to(out).as_posix())
            info.external_attr = (0o755 if os.access(path, os.X_OK) else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes())
    os.replace(bundle.with_suffix(".tmp"), bundle)
    return bundle


def _notebook(folder: Path, chapter: str) -> tuple[Path | None, str]:
    """The submitted notebook: the only one, or the only one named like the chapter; else (None, why)."""
    found = sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    if len(found) > 1:
        found = [p for p in found if chapter in p.stem] or found
    if len(found) == 1:
        return found[0], ""
    if not found:
        return None, "no notebook (.ipynb) was submitted"
    return None, f"{len(found)} notebooks were submitted ({', '.join(p.name for p in found)}): submit one"


def _user(name: str | None) -> tuple[int, int] | None:
    """(uid, gid) of ``name`` when this process is root and the user exists, else None."""
    if not name or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    import pwd

    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def run(root: Path) -> int:
    """Grade the notebook in ``root/submission`` and write ``root/results/results.json`` (always, even
    when grading fails: then with a score of 0 and the reason)."""
    results = root / "results"
    results.mkdir(parents=True, exist_ok=True)
    target = results / "results.json"
    try:
        settings = json.loads((root / "source" / SETTINGS).read_text())
        chapter, visibility = settings["chapter"], settings.get("visibility", "visible")
        limits = Limits(**settings.get("limits", {}))
        user = _user(settings.get("user"))
        if user is not None:
            results.chmod(0o700)  # the learners' code runs as another user: it cannot reach the results
        chapters = load_chapters(points=settings.get("points") or None)
        path, why = _notebook(root / "submission", chapter)
        if path is None:
            worth = sum(e.points for e in chapters[chapter].exercises)
            outcome = Outcome("", chapter, "", "failed", f"not graded: {why}", "", 0.0, worth)
            graded, name = Graded("", chapter, [outcome]), ""
        else:
            name = path.relative_to(root / "submission").as_posix()
            with CheckServer(memory=limits.max_memory, user=user) as server:  # graded as the bundle's chapter
                graded = grade_submission(
                    path, chapters=chapters, chapter=chapter, limits=limits, server=server, name=name, user=user
                )
        keep = ("exercise", "status", "message", "flag", "points", "max_points")
        result = {"chapter": graded.chapter, "stopped": graded.stopped, "notes": graded.notes}
        result.update(seconds=graded.seconds, exercises=[{k: getattr(o, k) for k in keep} for o in graded.outcomes])
        report = gradescope_results(name, result, visibility)
        status = 0
    except Exception as error:  # noqa: BLE001 - Gradescope must get a results.json whatever happened
        report = {
            "score": 0,
            "output": f"The autograder could not grade this submission ({type(error).__name__}: "
            f"{error}). Please tell your instructor.",
            "stdout_visibility": "hidden",
        }
        status = 1
    target.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "tests"}, ensure_ascii=False))
    for test in report.get("tests", []):
        print(f"{test['number']}. {test['name']}: {test['score']:g} of {test['max_score']:g} ({test['status']})")
    return status


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1])))
