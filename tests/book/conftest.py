"""Fixtures of the site tests: the built book on a local web server, and headless Chromium."""

from __future__ import annotations

import pytest
from site_helpers import HTML


@pytest.fixture(scope="session")
def server():
    from attnbook_book.chromium import serve

    if not (HTML / "index.html").exists():
        pytest.fail(f"{HTML} has no built book: run `make html` (or `make book`) first")
    with serve(HTML) as base:
        yield base


@pytest.fixture(scope="session")
def browser():
    from attnbook_book.chromium import launch

    with launch() as browser:
        yield browser
