"""attnbook.data.fetch: offline folder, packaged copies, verified cache, verified download, clear errors."""

import functools
import hashlib
import http.server
import io
import threading
import zipfile
from pathlib import Path

import pytest
from attnbook import data


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """No ATTNBOOK_DATA, an empty cache, and an empty folder in place of the packaged data files."""
    monkeypatch.delenv("ATTNBOOK_DATA", raising=False)
    monkeypatch.setenv("ATTNBOOK_CACHE", str(tmp_path / "cache"))
    (tmp_path / "packaged").mkdir()
    monkeypatch.setattr(data.files, "packaged_dir", lambda: tmp_path / "packaged")
    return tmp_path


@pytest.fixture
def no_download(monkeypatch):
    def refuse(url, timeout):
        raise AssertionError(f"fetch tried to download {url}")

    monkeypatch.setattr(data.files, "_download", refuse)


def test_the_packaged_copies_are_used_without_any_download(monkeypatch, tmp_path, no_download):
    monkeypatch.delenv("ATTNBOOK_DATA", raising=False)
    monkeypatch.setenv("ATTNBOOK_CACHE", str(tmp_path / "cache"))
    for name, spec in data.DATASETS.items():
        path = data.fetch(name)
        assert path == data.packaged_dir() / spec.path
        assert data.sha256_of(path) == spec.sha256 and path.stat().st_size == spec.size
    assert not (tmp_path / "cache").exists()
    licence = (data.packaged_dir() / "eng-fra" / "LICENSE").read_text()
    assert "Creative Commons Attribution 2.0 France" in licence and "tatoeba.org" in licence
    readme = (data.packaged_dir() / "README.md").read_text()
    assert all(spec.sha256 in readme and spec.path in readme for spec in data.DATASETS.values())


def test_attnbook_data_still_overrides_the_packaged_copy(monkeypatch, tmp_path, no_download):
    folder = tmp_path / "mine"
    (folder / "tinyshakespeare").mkdir(parents=True)
    (folder / "tinyshakespeare" / "input.txt").write_bytes(
        (data.packaged_dir() / "tinyshakespeare" / "input.txt").read_bytes()
    )
    monkeypatch.setenv("ATTNBOOK_DATA", str(folder))
    assert data.fetch("tinyshakespeare") == folder / "tinyshakespeare" / "input.txt"
    assert data.fetch("eng-fra") == data.packaged_dir() / "eng-fra" / "eng-fra.txt"  # not in the folder


def test_a_damaged_packaged_copy_is_not_used(isolated, monkeypatch):
    content = b"the right text\n"
    (isolated / "packaged" / "doc").mkdir()
    (isolated / "packaged" / "doc" / "doc.txt").write_bytes(b"damaged")
    monkeypatch.setitem(
        data.DATASETS,
        "doc",
        data.Dataset(
            "doc",
            "doc/doc.txt",
            "http://127.0.0.1:9/doc.txt",
            hashlib.sha256(content).hexdigest(),
            len(content),
            "test",
        ),
    )
    monkeypatch.setattr(data.files, "_download", lambda url, timeout: content)
    with pytest.warns(RuntimeWarning, match="packaged copy .* has sha256 .* it is not used"):
        path = data.fetch("doc")
    assert path == isolated / "cache" / "doc" / "doc.txt" and path.read_bytes() == content


def serve(folder: Path):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


def test_registry_matches_the_shared_data_readme():
    assert data.DATASETS["tinyshakespeare"].sha256 == "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
    assert data.DATASETS["eng-fra"].sha256 == "d952b56a181da5270b7bb4ded3f3bbe61e67a9b1de0e0fbc1d46438c71fb55a7"


def test_offline_folder_first(isolated, monkeypatch):
    folder = isolated / "offline"
    content = b"hello shakespeare\n"
    (folder / "tinyshakespeare").mkdir(parents=True)
    (folder / "tinyshakespeare" / "input.txt").write_bytes(content)
    spec = data.Dataset(
        "tiny",
        "tinyshakespeare/input.txt",
        "http://127.0.0.1:9/none",
        hashlib.sha256(content).hexdigest(),
        len(content),
        "test",
    )
    monkeypatch.setitem(data.DATASETS, "tiny", spec)
    monkeypatch.setenv("ATTNBOOK_DATA", str(folder))
    assert data.fetch("tiny") == folder / "tinyshakespeare" / "input.txt"
    (folder / "tinyshakespeare" / "input.txt").write_bytes(b"tampered")
    with pytest.raises(ValueError, match=r"from ATTNBOOK_DATA\) has sha256 .* expected"):
        data.fetch("tiny")


def test_download_verified_and_cached_then_offline(isolated, monkeypatch):
    content = b"To be, or not to be\n" * 10
    (isolated / "srv").mkdir()
    (isolated / "srv" / "input.txt").write_bytes(content)
    httpd, url = serve(isolated / "srv")
    try:
        spec = data.Dataset(
            "plays", "plays/input.txt", f"{url}/input.txt", hashlib.sha256(content).hexdigest(), len(content), "test"
        )
        monkeypatch.setitem(data.DATASETS, "plays", spec)
        path = data.fetch("plays")
        assert path == isolated / "cache" / "plays" / "input.txt" and path.read_bytes() == content
    finally:
        httpd.shutdown()
    assert data.fetch("plays", download=False) == path  # from the cache, with the server gone


def test_download_with_extraction_and_bad_checksum(isolated, monkeypatch):
    lines = [f"Go {i}.\tVa {i} !\tCC-BY 2.0 (France) Attribution: tatoeba.org\n".encode() for i in range(10)]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("fra.txt", b"".join(lines))
    (isolated / "srv").mkdir()
    (isolated / "srv" / "fra-eng.zip").write_bytes(buffer.getvalue())
    httpd, url = serve(isolated / "srv")
    try:
        first_five = b"".join(lines[:5])
        extract = data.files._first_lines_of_zip_member("fra.txt", 5)
        good = data.Dataset(
            "pairs",
            "pairs/pairs.txt",
            f"{url}/fra-eng.zip",
            hashlib.sha256(first_five).hexdigest(),
            len(first_five),
            "test",
            extract,
        )
        monkeypatch.setitem(data.DATASETS, "pairs", good)
        assert data.fetch("pairs").read_bytes() == first_five
        bad = data.Dataset("wrong", "wrong/pairs.txt", f"{url}/fra-eng.zip", "0" * 64, 1, "test", extract)
        monkeypatch.setitem(data.DATASETS, "wrong", bad)
        with pytest.raises(ValueError, match=r"has sha256 .* expected 0{64}; it was not saved"):
            data.fetch("wrong")
        assert not (isolated / "cache" / "wrong" / "pairs.txt").exists()
    finally:
        httpd.shutdown()


def test_offline_without_a_copy_says_what_is_missing(isolated):
    with pytest.raises(
        data.DataNotAvailableError,
        match=r"'tinyshakespeare' \(tinyshakespeare/input.txt\) is not available offline.*ATTNBOOK_DATA",
    ):
        data.fetch("tinyshakespeare", download=False)


def test_failed_download_says_how_to_provide_the_file(isolated, monkeypatch):
    spec = data.Dataset("gone", "gone/x.txt", "http://127.0.0.1:9/x.txt", "0" * 64, 1, "test")
    monkeypatch.setitem(data.DATASETS, "gone", spec)
    with pytest.raises(
        data.DataNotAvailableError,
        match=r"download from http://127.0.0.1:9/x.txt failed.*put the file at <folder>/gone/x.txt",
    ):
        data.fetch("gone", timeout=2)


def test_unknown_name():
    with pytest.raises(ValueError, match=r"name must be a known dataset \(eng-fra, tinyshakespeare\), got 'nope'"):
        data.fetch("nope")
