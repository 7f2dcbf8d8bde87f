"""``data.files.benchmark_results``: a chapter's benchmark results, beside the notebook or from the release."""

from __future__ import annotations

import json

import attnbook
import pytest
from attnbook.data import files


def test_read_beside_the_notebook(tmp_path, monkeypatch):
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "lab.json").write_text(json.dumps({"runs": [1, 2]}))
    (tmp_path / "chapters").mkdir()
    monkeypatch.chdir(tmp_path / "chapters")
    monkeypatch.setattr(files, "_download", lambda url, timeout: pytest.fail("downloaded a file it has"))
    assert files.benchmark_results("lab") == {"runs": [1, 2]}


def test_a_notebook_alone_downloads_them_from_the_release(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    asked = []

    def download(url, timeout):
        asked.append((url, timeout))
        return b'{"sft": {}}'

    monkeypatch.setattr(files, "_download", download)
    assert files.benchmark_results("post_training", timeout=5.0) == {"sft": {}}
    url = asked[0][0]
    assert f"/v{attnbook.__version__}/benchmarks/results/post_training.json" in url and asked[0][1] == 5.0


def test_without_a_network_the_error_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def offline(url, timeout):
        raise OSError("no network")

    monkeypatch.setattr(files, "_download", offline)
    with pytest.raises(files.DataNotAvailableError, match="clone of the book's repository"):
        files.benchmark_results("interpret")
    with pytest.raises(ValueError, match="timeout"):
        files.benchmark_results("interpret", timeout=-1.0)


def test_every_results_file_the_chapters_read_is_committed():
    import re

    from attnbook_book import notebooks

    names = set()
    for md in notebooks.chapter_sources():
        names |= set(re.findall(r'benchmark_results\("(\w+)"\)', md.read_text()))
    assert names >= {"interpret", "post_training"}
    for name in names:
        assert (notebooks.REPO / "benchmarks" / "results" / f"{name}.json").is_file(), name
