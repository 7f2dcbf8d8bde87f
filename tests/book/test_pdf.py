"""The PDF edition (``make pdf``): what a reader who takes the book along gets.

Every page of _toc.yml is in it: each chapter's title is in its text (pdftotext), as a bookmark, and in the
printed contents with the page it starts on. Its fonts are embedded and every character of the printed text
is there (no missing glyph); no word of text, code or table runs past the side margins; no page is blank;
links between pages of the book are links inside the PDF, none points at the local server the book was
printed from; it has a sensible number of pages and size. The HTML book links to it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from site_helpers import HTML, REPO, built_toc

pytestmark = pytest.mark.pdf

PDF = Path(os.environ.get("ATTNBOOK_PDF") or REPO / "_build" / "pdf" / "attention-step-by-step.pdf").resolve()
MARGIN_PT = 17 / 25.4 * 72  # the side margins (attnbook_book.pdf.MARGIN), in points
MAX_MIB = 80


@pytest.fixture(scope="module")
def pdf():
    if not PDF.is_file():
        pytest.fail(f"{PDF} is missing: run `make pdf` first")
    return PDF


@pytest.fixture(scope="module")
def text(pdf):
    return subprocess.run(
        ["pdftotext", "-enc", "UTF-8", str(pdf), "-"], check=True, capture_output=True, text=True
    ).stdout


def squash(s: str) -> str:
    return " ".join(s.split())


def page_titles() -> dict[str, str]:
    """The title (first heading) of every page of the book, read from the built HTML."""
    titles = {}
    for entry in built_toc():
        page = (HTML / f"{entry}.html").read_text()
        heading = re.search(r"<h1>(.*?)</h1>", page, re.S).group(1)
        titles[entry] = squash(re.sub(r"<[^>]+>", "", re.sub(r'<a class="headerlink".*?</a>', "", heading)))
    return titles


def test_every_page_of_the_book_is_in_the_pdf(text):
    squashed = squash(text)
    missing = [t for t in page_titles().values() if squash(t) not in squashed]
    assert missing == [], f"titles not in the PDF's text: {missing}"


def test_pages_size_and_fonts(pdf):
    info = subprocess.run(["pdfinfo", str(pdf)], check=True, capture_output=True, text=True).stdout
    pages = int(re.search(r"Pages:\s+(\d+)", info).group(1))
    manifest = json.loads((pdf.parent / "MANIFEST.json").read_text())
    chapters = [e for e in built_toc() if e.startswith("chapters/")]
    print(f"\nPDF: {pages} pages, {pdf.stat().st_size / 2**20:.1f} MiB, printed in {manifest['seconds']} s")
    assert pages == manifest["pages"]
    assert 8 * len(chapters) <= pages <= 80 * len(built_toc()), f"{pages} pages for {len(chapters)} chapters"
    assert pdf.stat().st_size <= MAX_MIB * 2**20, f"the PDF is {pdf.stat().st_size / 2**20:.0f} MiB"
    fonts = subprocess.run(["pdffonts", str(pdf)], check=True, capture_output=True, text=True).stdout.splitlines()[2:]
    not_embedded = [line for line in fonts if line.split()[-5] != "yes"]
    assert fonts and not_embedded == [], f"fonts not embedded: {not_embedded}"


def test_no_missing_glyphs(pdf, text):
    """Every character of the printed document's text is in the PDF's text: a character no font has would be
    drawn as an empty box that carries no text."""
    manifest = json.loads((pdf.parent / "MANIFEST.json").read_text())
    have = set(text)
    missing = sorted(c for c in manifest["chars"] if c not in have)
    assert missing == [], f"characters of the book missing from the PDF: {missing} ({[hex(ord(c)) for c in missing]})"
    assert "\ufffd" not in text


def test_nothing_runs_past_the_margins(pdf, tmp_path):
    """No word (of prose, code, tables or figures' text) lies beyond the side margins, on any page."""
    out = tmp_path / "bbox.html"
    subprocess.run(["pdftotext", "-bbox", str(pdf), str(out)], check=True)
    root = ET.fromstring(
        re.sub(r"<!DOCTYPE[^>]*>", "", out.read_text()).replace('xmlns="http://www.w3.org/1999/xhtml"', "")
    )
    beyond = []
    for number, page in enumerate(root.iter("page"), start=1):
        width = float(page.get("width"))
        for word in page.iter("word"):
            x0, x1 = float(word.get("xMin")), float(word.get("xMax"))
            if re.fullmatch(r"[\ue000-\uf8ff]+", word.text or ""):
                continue  # pieces of MathJax's stretched brackets and icons: pdftotext cannot size their boxes
            if x0 < MARGIN_PT - 2 or x1 > width - MARGIN_PT + 2:
                beyond.append(f"page {number}: {word.text!r} at {x0:.0f}-{x1:.0f} pt of {width:.0f}")
    assert beyond == [], f"{len(beyond)} words beyond the margins: {beyond[:20]}"


def test_no_blank_page(pdf, tmp_path):
    from PIL import Image

    subprocess.run(["pdftoppm", "-r", "12", "-gray", "-png", str(pdf), str(tmp_path / "p")], check=True)
    blank = []
    for image in sorted(tmp_path.glob("p-*.png")):
        lo, _ = Image.open(image).convert("L").getextrema()
        if lo > 200:  # nothing darker than a light grey on the whole page
            blank.append(image.stem)
    assert blank == [], f"blank pages: {blank}"


def test_bookmarks_contents_and_links(pdf):
    from pypdf import PdfReader

    reader = PdfReader(str(pdf))

    def flat(outline, depth=0):
        for item in outline:
            if isinstance(item, list):
                yield from flat(item, depth + 1)
            else:
                yield depth, squash(item.title), reader.get_destination_page_number(item) + 1

    marks = list(flat(reader.outline))
    titles = page_titles()
    by_title = {re.sub(r"^\d+(\.\d+)*\.\s+", "", title): page for _, title, page in marks}  # without its number
    missing = [t for t in titles.values() if squash(t) not in by_title]
    assert missing == [], f"pages without a bookmark: {missing}"
    parts = [t for depth, t, _ in marks if depth == 0]
    assert "Contents" in parts and len(parts) >= 3, f"the top bookmarks are not the parts: {parts}"

    # the printed contents: each chapter with the page its bookmark points at
    first_part = min(page for depth, _, page in marks if depth == 0 and page > 2)  # the contents end before it
    command = ["pdftotext", "-enc", "UTF-8", "-f", "2", "-l", str(first_part - 1), str(pdf), "-"]
    contents = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    for entry, title in titles.items():
        if entry.startswith("chapters/"):
            found = re.search(re.escape(title) + r"[\s.]*?(\d+)\s", squash(contents) + " ")
            assert found, f"{title!r} is not in the printed contents"
            assert int(found.group(1)) == by_title[title], f"{title!r}: contents say {found.group(1)}"

    internal, local = 0, []
    for page in reader.pages:
        for annot in page.get("/Annots") or []:
            a = annot.get_object()
            if a.get("/Subtype") != "/Link":
                continue
            action = a.get("/A")
            uri = action.get_object().get("/URI") if action is not None else None
            if a.get("/Dest") is not None or (action is not None and action.get_object().get("/S") == "/GoTo"):
                internal += 1
            elif uri and re.match(r"https?://(127\.0\.0\.1|localhost)", str(uri)):
                local.append(str(uri))
    assert local == [], f"links to the server the book was printed from: {local[:5]}"
    assert internal >= 10 * len(titles), f"only {internal} links inside the PDF"
    named = reader.named_destinations
    assert named, "no named destinations"


def test_the_html_book_links_to_the_pdf(pdf):
    site_copy = HTML / pdf.name
    assert site_copy.is_file() and site_copy.read_bytes() == pdf.read_bytes(), f"{site_copy} is not this PDF"
    for entry in built_toc():
        page = HTML / f"{entry}.html"
        links = re.findall(r'href="([^"]*' + re.escape(pdf.name) + ')"', page.read_text())
        assert links, f"{entry}.html does not link to the PDF"
        assert all((page.parent / link).resolve() == site_copy.resolve() for link in links), links
