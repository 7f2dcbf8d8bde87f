"""attnbook.data.fetch: offline folder, verified cache, verified download, clear errors."""
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
    monkeypatch.delenv("ATTNBOOK_DATA", raising=False)
    monkeypatch.setenv("ATTNBOOK_CACHE", str(tmp_path / "cache"))
    return tmp_path


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
    spec = data.Dataset("tiny", "tinyshakespeare/input.txt", "http://127.0.0.1:9/none", hashlib.sha256(content).hexdigest(),
                        len(content), "test")
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
        spec = data.Dataset("plays", "plays/input.txt", f"{url}/input.txt", hashlib.sha256(content).hexdigest(),
                            len(content), "test")
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
        extract = data._first_lines_of_zip_member("fra.txt", 5)
        good = data.Dataset("pairs", "pairs/pairs.txt", f"{url}/fra-eng.zip", hashlib.sha256(first_five).hexdigest(),
                            len(first_five), "test", extract)
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
    with pytest.raises(data.DataNotAvailableError, match=r"'tinyshakespeare' \(tinyshakespeare/input.txt\) is not available offline.*ATTNBOOK_DATA"):
        data.fetch("tinyshakespeare", download=False)


def test_failed_download_says_how_to_provide_the_file(isolated, monkeypatch):
    spec = data.Dataset("gone", "gone/x.txt", "http://127.0.0.1:9/x.txt", "0" * 64, 1, "test")
    monkeypatch.setitem(data.DATASETS, "gone", spec)
    with pytest.raises(data.DataNotAvailableError, match=r"download from http://127.0.0.1:9/x.txt failed.*put the file at <folder>/gone/x.txt"):
        data.fetch("gone", timeout=2)


def test_unknown_name():
    with pytest.raises(KeyError, match=r"unknown dataset 'nope'; known datasets: .*eng-fra.*tinyshakespeare"):
        data.fetch("nope")
