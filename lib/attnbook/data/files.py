"""Named data files: where each lives, its checksum and source, and ``fetch``, which finds a verified copy.

``fetch(name)`` looks in this order:

1. the folder named by the environment variable ``ATTNBOOK_DATA``, when it is set (an optional override);
2. the copy that ships inside the package (``attnbook/data_files/``, with its sources and licences);
3. the cache folder (``ATTNBOOK_CACHE``, default ``~/.cache/attnbook``), from an earlier download;
4. a download from the dataset's public source, checked against its sha256, then cached: only a fallback
   for an installation that lacks the packaged copy.

Every file is checked against its sha256 before it is returned.

Chapter: every chapter that trains on real text (03, 12).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
import urllib.request
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import _checks

__all__ = ["DATASETS", "Dataset", "DataNotAvailableError", "fetch", "cache_dir", "packaged_dir", "sha256_of"]


class DataNotAvailableError(FileNotFoundError):
    """A dataset is neither in ``ATTNBOOK_DATA``, the package nor the cache, and could not be downloaded."""


@dataclass(frozen=True)
class Dataset:
    """A named data file: where it lives relative to a data folder, where to download it, its checksum."""

    name: str
    path: str  # relative to ATTNBOOK_DATA, the packaged data folder or the cache folder
    url: str
    sha256: str
    size: int
    source: str  # who made it, and under which licence
    extract: Callable[[bytes], bytes] | None = None  # turns the downloaded bytes into the file's bytes


def _first_lines_of_zip_member(member: str, n_lines: int) -> Callable[[bytes], bytes]:
    def extract(payload: bytes) -> bytes:
        with zipfile.ZipFile(io.BytesIO(payload)) as archive:
            with archive.open(member) as handle:
                lines = handle.read().splitlines(keepends=True)
        return b"".join(lines[:n_lines])

    return extract


DATASETS: dict[str, Dataset] = {
    d.name: d
    for d in [
        Dataset(
            name="tinyshakespeare",
            path="tinyshakespeare/input.txt",
            url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
            sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
            size=1_115_394,
            source="Tiny Shakespeare, collected by Andrej Karpathy for char-rnn (public-domain text).",
        ),
        Dataset(
            name="eng-fra",
            path="eng-fra/eng-fra.txt",
            url="https://www.manythings.org/anki/fra-eng.zip",
            sha256="d952b56a181da5270b7bb4ded3f3bbe61e67a9b1de0e0fbc1d46438c71fb55a7",
            size=562_864,
            source=(
                "English-French sentence pairs from the Tatoeba Project (tatoeba.org), as packaged by "
                "manythings.org/anki; licensed CC-BY 2.0 (France). Each line carries its attribution."
            ),
            extract=_first_lines_of_zip_member("fra.txt", 5000),
        ),
    ]
}


def packaged_dir() -> Path:
    """The folder of the data files that ship inside the package (see its README.md for sources and licences)."""
    return Path(__file__).resolve().parents[1] / "data_files"


def cache_dir() -> Path:
    """The folder where downloads are kept: ``ATTNBOOK_CACHE`` or ``~/.cache/attnbook``."""
    return Path(os.environ.get("ATTNBOOK_CACHE") or Path.home() / ".cache" / "attnbook")


def sha256_of(path: Path) -> str:
    """The hex sha256 digest of a file."""
    path = _checks.file("path", path)
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download(url: str, timeout: float) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "attnbook (Attention, Step by Step)"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


def fetch(name: str, *, download: bool = True, timeout: float = 30.0) -> Path:
    """Return the path of a local, verified copy of dataset ``name`` (see the module docstring for the order)."""
    _checks.text("name", name)
    if name not in DATASETS:
        raise ValueError(f"name must be a known dataset ({', '.join(sorted(DATASETS))}), got {name!r}")
    timeout = _checks.positive_float("timeout", timeout)
    spec = DATASETS[name]

    offline = os.environ.get("ATTNBOOK_DATA")
    if offline:
        candidate = Path(offline) / spec.path
        if candidate.is_file():
            digest = sha256_of(candidate)
            if digest != spec.sha256:
                raise ValueError(
                    f"{candidate} (from ATTNBOOK_DATA) has sha256 {digest}, expected {spec.sha256}: "
                    "the file is not the one the book uses"
                )
            return candidate

    packaged = packaged_dir() / spec.path
    if packaged.is_file():
        digest = sha256_of(packaged)
        if digest == spec.sha256:
            return packaged
        warnings.warn(
            f"the packaged copy {packaged} has sha256 {digest}, expected {spec.sha256}; it is not used "
            "(reinstall attnbook to repair it)",
            RuntimeWarning,
            stacklevel=2,
        )

    cached = cache_dir() / spec.path
    if cached.is_file() and sha256_of(cached) == spec.sha256:
        return cached

    how_to = (
        f"To use an offline copy, put the file at <folder>/{spec.path} and set the environment "
        f"variable ATTNBOOK_DATA=<folder>, or download {spec.url} yourself"
        + (" and keep its described part" if spec.extract else "")
        + f" as {cached}."
    )
    if not download:
        raise DataNotAvailableError(
            f"dataset {name!r} ({spec.path}) is not available offline: it is neither in "
            f"the package's data folder ({packaged_dir()}) nor in the cache. {how_to}"
        )
    try:
        payload = _download(spec.url, timeout)
    except OSError as error:  # URLError, timeouts, refused connections
        raise DataNotAvailableError(
            f"dataset {name!r} ({spec.path}) is not available offline and the download from {spec.url} "
            f"failed ({error}). {how_to}"
        ) from None
    content = spec.extract(payload) if spec.extract else payload
    digest = hashlib.sha256(content).hexdigest()
    if digest != spec.sha256:
        raise ValueError(
            f"the download of {name!r} from {spec.url} has sha256 {digest}, expected "
            f"{spec.sha256}; it was not saved. {how_to}"
        )
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=cached.parent, delete=False) as handle:
        handle.write(content)
    shutil.move(handle.name, cached)
    return cached


# The results the benchmarks commit (benchmarks/results/<name>.json), at the book's release of this library.
RESULTS_URL = (
    "https://raw.githubusercontent.com/attention-step-by-step/attention-step-by-step/v{version}/benchmarks/results/"
    "{name}.json"
)


def benchmark_results(name: str, *, timeout: float = 30.0) -> dict:
    """The committed results of a benchmark, ``benchmarks/results/<name>.json``, that a chapter reads.

    Read from the repository beside the notebook (``../benchmarks/results``, where the chapters run); for a
    notebook opened alone (in Colab), downloaded from the book's release of this library's version."""
    _checks.text("name", name)
    timeout = _checks.positive_float("timeout", timeout)
    local = Path("..") / "benchmarks" / "results" / f"{name}.json"
    if local.is_file():
        return json.loads(local.read_text(encoding="utf-8"))
    from .. import __version__

    url = RESULTS_URL.format(version=__version__, name=name)
    try:
        return json.loads(_download(url, timeout))
    except OSError as error:
        raise DataNotAvailableError(
            f"benchmarks/results/{name}.json is not beside this notebook ({local.resolve()}) and {url} could not "
            f"be read ({error}): run the notebook from a clone of the book's repository"
        ) from error
