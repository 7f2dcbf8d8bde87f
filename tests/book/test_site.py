"""The built HTML book, opened in headless Chromium (Debian's package, driven by Playwright).

On every page: no console errors, no request leaves the local server, math is rendered, and every image
has alt text. On pages with plotly figures: every figure renders, and moving a slider changes its figure.
On pages with widgets: the widgets render. At a laptop's width every display equation and every table of
the text fits the text column. Every diagram is drawn, numbered, captioned and labelled for
screen readers. Every page is opened again in dark mode at a phone's width: diagrams and plots take the
dark colours, widgets keep legible text on the theme's light card, still with no console error. Every
Colab link points at a notebook that exists in the repository. No chapter page shows a code cell that
only glues numbers into the prose.
"""

from __future__ import annotations

import functools
import html
import http.server
import json
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

pytestmark = pytest.mark.site

REPO = Path(__file__).resolve().parents[2]
INPAGE_ASSETS = re.compile(r"/_static/(vendor/onnxruntime|models)/")  # what the model in the page loads
HTML = Path(os.environ.get("ATTNBOOK_HTML") or REPO / "_build" / "html").resolve()
CHROMIUM = os.environ.get("CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def built_toc() -> list[str]:
    """The pages named in the _toc.yml the site was built from (the whole book unless built with PARTIAL=1)."""
    from attnbook_book.notebooks import toc_files

    staged = HTML.parent / "src"
    return toc_files(staged if (staged / "_toc.yml").exists() else REPO)


def content_pages() -> list[str]:
    """Every page of the book, plus the generated index and search pages."""
    return [f"{entry}.html" for entry in built_toc()] + ["genindex.html", "search.html"]


@pytest.fixture(scope="module")
def server():
    if not (HTML / "index.html").exists():
        pytest.fail(f"{HTML} has no built book: run `make html` (or `make book`) first")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(HTML)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"Chromium not found at {CHROMIUM}: `make setup` installs Debian's chromium"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def open_page(browser, url: str, *, requested: list[str] | None = None, mode: str | None = None, **page_options):
    """Open ``url``; return the page, its console errors and the requests that left the local server.

    ``requested``, when given, collects the URL of every request the page makes; ``mode`` ("light" or
    "dark") is the colour mode the theme's toggle would have stored; ``page_options`` go to
    ``browser.new_page`` (a phone's viewport, for example).
    """
    page = browser.new_page(**page_options)
    if mode:
        page.add_init_script(f"localStorage.setItem('mode', '{mode}'); localStorage.setItem('theme', '{mode}');")
    errors: list[str] = []
    outside: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    local = urlparse(url).netloc

    def on_request(request):
        if requested is not None:
            requested.append(request.url)
        parsed = urlparse(request.url)
        if parsed.scheme in ("data", "blob", "about"):
            return
        if parsed.netloc != local:
            outside.append(request.url)

    page.on("request", on_request)
    page.on("response", lambda r: errors.append(f"HTTP {r.status} for {r.url}") if r.status >= 400 else None)
    page.goto(url, wait_until="load", timeout=120_000)
    page.wait_for_load_state("networkidle", timeout=120_000)
    return page, errors, outside


LAPTOP = {"width": 1280, "height": 720}  # a laptop's screen, with the theme's two sidebars beside the text
# Display equations (MathJax scrolls one that is too wide) and tables of the text (not cell outputs) that are
# wider than the text column: [kind, the nearest id, width in px, the column's width].
TOO_WIDE = """() => {
  const column = document.querySelector('article.bd-article');
  if (!column) return [];
  const width = column.getBoundingClientRect().width, id = el => (el.closest('[id]') || {}).id;
  const equations = [...column.querySelectorAll('mjx-container[display="true"]')]
    .filter(m => m.scrollWidth > m.clientWidth + 1).map(m => ['equation', id(m), m.scrollWidth, m.clientWidth]);
  const tables = [...column.querySelectorAll('table')].filter(t => !t.closest('.cell_output'))
    .map(t => ['table', id(t), Math.round(t.getBoundingClientRect().width), Math.round(width)])
    .filter(([, , w]) => w > width + 1);
  return equations.concat(tables);
}"""


@pytest.mark.parametrize("path", content_pages())
def test_page(server, browser, path):
    assert (HTML / path).exists(), f"{path} was not built"
    requested: list[str] = []
    page, errors, outside = open_page(browser, f"{server}/{path}", requested=requested, viewport=LAPTOP)
    try:
        # Math: every math element is typeset by MathJax, none with an error.
        n_math = page.locator(".math").count()
        if n_math:
            page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.document")
            page.evaluate("() => MathJax.startup.promise")
            rendered = page.locator(".math mjx-container").count()
            assert rendered >= n_math, f"{path}: {rendered} of {n_math} math elements rendered by MathJax"
            assert page.locator("mjx-merror").count() == 0, f"{path}: MathJax reported an error"
        # Nothing of the text is cut at the column's edge on a laptop: split a long equation over aligned
        # lines, give a table narrower cells (a phone's width may scroll both sideways).
        wide = page.evaluate(TOO_WIDE)
        assert wide == [], f"{path}: wider than the text column at {LAPTOP['width']} px: {wide}"

        # Plotly: every figure is drawn; moving each slider changes its figure.
        figures = page.locator("div.attnbook-plotly")
        for i in range(figures.count()):
            figure = figures.nth(i)
            figure.scroll_into_view_if_needed()
            figure.locator(".main-svg").first.wait_for(state="attached", timeout=15_000)
            sliders = figure.locator("g.slider-container")
            if sliders.count() == 0:
                continue
            state = lambda: figure.evaluate("el => JSON.stringify(el.data)")  # noqa: E731
            before = state()
            rail = figure.locator("rect.slider-rail-rect").first
            box = rail.bounding_box()
            assert box is not None, f"{path}: slider {i} has no visible rail"
            active = figure.evaluate("el => el.layout.sliders[0].active || 0")
            n_steps = figure.evaluate("el => el.layout.sliders[0].steps.length")
            target = 0.05 if active > n_steps / 2 else 0.95  # move far from where it starts
            page.mouse.click(box["x"] + target * box["width"], box["y"] + box["height"] / 2)
            page.wait_for_timeout(300)
            assert state() != before, f"{path}: moving the slider of figure {i} did not change the figure"

        # Widgets: saved widget state is rendered by the local widget manager.
        views = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
        if views:
            page.locator(".jupyter-widgets").first.wait_for(state="attached", timeout=15_000)
            assert page.locator(".jupyter-widgets").count() >= views
            assert "Error rendering" not in page.content()

        check_diagrams(page, path)
        # Images, static and drawn by widgets: each says what it shows (not empty, not a file name).
        images = page.evaluate("() => [...document.images].map(i => [i.getAttribute('alt'), i.src.slice(0, 80)])")
        no_alt = [src for alt, src in images if not alt or not alt.strip() or re.search(r"\.(png|svg|jpe?g|gif)$", alt)]
        assert no_alt == [], f"{path}: {len(no_alt)} of {len(images)} images without alt text: {no_alt}"

        # The model in the page: only a page with the widget may load onnxruntime or a model.
        if page.locator("div.attnbook-inpage").count() == 0:
            heavy = [u for u in requested if INPAGE_ASSETS.search(u)]
            assert heavy == [], f"{path} has no model in the page but loaded {heavy}"

        assert errors == [], f"{path}: console errors: {errors}"
        assert outside == [], f"{path}: requests left the local server: {outside}"
    finally:
        page.close()


def contrast(a: str, b: str) -> float:
    """The WCAG contrast ratio of two CSS colours written as rgb(...) or rgba(...)."""

    def luminance(css):
        r, g, b = (float(v) / 255 for v in re.findall(r"[\d.]+", css)[:3])
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def check_diagrams(page, path: str) -> int:
    """Every diagram is an inline SVG with a size, alt text and a numbered caption, shown at least at
    MIN_SCALE of its own size (narrower screens scroll it); returns how many there are."""
    from attnbook_book.figures import MIN_SCALE

    figures = page.locator("figure.attnbook-diagram-figure")
    source = REPO / Path(path).with_suffix(".md")
    if source.is_file():  # every diagram the chapter shows became a figure
        expected = len(re.findall(r"^!\[[^\]]*\]\([^)]*images/diagrams/[a-z0-9_]+\.svg\)", source.read_text(), re.M))
        assert figures.count() == expected, f"{path}: {figures.count()} diagram figures, the chapter has {expected}"
    for i in range(figures.count()):
        figure = figures.nth(i)
        figure.scroll_into_view_if_needed()
        info = figure.evaluate("""f => { const s = f.querySelector('svg.abd'), b = s.getBoundingClientRect();
            return {w: b.width, h: b.height, view: s.viewBox.baseVal.width, alt: s.getAttribute('aria-label') || '',
                    caption: (f.querySelector('figcaption') || {}).textContent || '', id: f.id}; }""")
        name = info["id"] or f"diagram {i}"
        assert info["w"] > 0 and info["h"] > 0, f"{path}: {name} is not drawn"
        assert info["w"] >= MIN_SCALE * info["view"] - 1, f"{path}: {name} is shrunk below {MIN_SCALE} of its size"
        assert len(info["alt"].split()) >= 8, f"{path}: {name} has no alt text"
        assert re.match(r"\s*Fig\. \d+(\.\d+)*\s+\S", info["caption"]), f"{path}: {name} has no numbered caption"
    return figures.count()


@pytest.mark.parametrize("path", content_pages())
def test_page_in_dark_mode_on_a_phone(server, browser, path):
    from attnbook import style

    page, errors, outside = open_page(browser, f"{server}/{path}", mode="dark", viewport={"width": 390, "height": 900})
    try:
        assert page.evaluate("document.documentElement.dataset.theme") == "dark"
        n = check_diagrams(page, path)
        if n:  # the diagrams take the dark colours of the palette
            ink = page.evaluate("getComputedStyle(document.querySelector('svg.abd')).getPropertyValue('--ink')")
            assert ink.strip() == style.theme("dark")["ink"], f"{path}: diagrams keep their light colours"
        figures = page.locator("div.attnbook-plotly")
        for i in range(figures.count()):
            figure = figures.nth(i)
            figure.scroll_into_view_if_needed()
            figure.locator(".main-svg").first.wait_for(state="attached", timeout=15_000)
            page.wait_for_function(
                "el => el.dataset.attnbookTheme === 'dark'", arg=figure.element_handle(), timeout=15_000
            )
            font = figure.evaluate("el => el._fullLayout.font.color")
            assert font == style.PLOTLY_DARK["font_color"], f"{path}: plotly figure {i} keeps dark text on a dark page"
        if page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count():
            # widgets do not follow the mode: the theme shows them on a light card; their text must stay dark
            page.locator(".jupyter-widgets").first.wait_for(state="attached", timeout=15_000)
            colours = page.evaluate("""() => Array.from(document.querySelectorAll('.widget-subarea .widget-label'))
                .map(e => [getComputedStyle(e).color,
                           getComputedStyle(e.closest('.widget-subarea')).backgroundColor])""")
            for text, card in colours:
                assert contrast(text, card) >= 4.5, f"{path}: widget text {text} on {card}"
        assert errors == [], f"{path}: console errors in dark mode: {errors}"
        assert outside == [], f"{path}: requests left the local server: {outside}"
    finally:
        page.close()


def test_colab_links_point_at_notebooks_in_the_repo():
    config = yaml.safe_load((REPO / "_config.yml").read_text())
    repo_path = urlparse(config["repository"]["url"]).path.strip("/")
    prefix = f"https://colab.research.google.com/github/{repo_path}/blob/{config['repository']['branch']}/"
    chapters = [e for e in built_toc() if e.startswith("chapters/")]
    assert chapters, "no chapter in _toc.yml"
    for entry in chapters:
        html = (HTML / f"{entry}.html").read_text()
        links = set(re.findall(r'href="(https://colab\.research\.google\.com/[^"]+)"', html))
        assert links, f"{entry}.html has no Colab link"
        for link in links:
            assert link.startswith(prefix), f"{entry}.html: Colab link {link} does not start with {prefix}"
            target = REPO / link[len(prefix) :]
            assert target.suffix == ".ipynb" and target.is_file(), f"{entry}.html: {link} names no notebook in the repo"


CELL_INPUT = re.compile(
    r'<div class="cell_input docutils container">\s*<div class="highlight-[\w-]+ notranslate">'
    r'<div class="highlight"><pre>(.*?)</pre>',
    re.S,
)


def visible_code_cells(page_html: str) -> list[str]:
    """The source of every code cell whose input a built page contains (shown, or folded behind a toggle)."""
    return [html.unescape(re.sub(r"<[^>]+>", "", block)) for block in CELL_INPUT.findall(page_html)]


def test_no_page_shows_a_cell_that_only_glues():
    from attnbook_book.notebooks import is_glue_only

    chapters = [e for e in built_toc() if e.startswith("chapters/")]
    assert chapters, "no chapter in _toc.yml"
    for entry in chapters:
        cells = visible_code_cells((HTML / f"{entry}.html").read_text())
        assert cells, f"{entry}.html: no code cell found; has the page layout changed?"
        glue_only = [c for c in cells if is_glue_only(c)]
        assert not glue_only, f"{entry}.html shows cells that only glue numbers (tag them remove-input): {glue_only}"


def test_visible_code_cells_are_read_from_the_page():
    page = (
        '<div class="cell_input docutils container">\n<div class="highlight-ipython3 notranslate"><div class='
        '"highlight"><pre><span></span><span class="n">viz</span><span class="o">.</span><span class="n">glue'
        '</span><span class="p">(</span><span class="s2">&quot;a&quot;</span><span class="p">,</span> '
        '<span class="mi">1</span><span class="p">)</span>\n</pre></div>'
    )
    assert visible_code_cells(page) == ['viz.glue("a", 1)\n']


def test_every_chapter_has_an_execution_time():
    report = json.loads((HTML.parent / "reports" / "execution_times.json").read_text())
    for entry in built_toc():
        if entry.startswith("chapters/"):
            name = Path(entry).name
            assert name in report and report[name]["passed"], f"{name}: no passing execution in the report"


# --- the model in the page ------------------------------------------------------------------------------


def inpage_pages() -> list[str]:
    """The built pages with a model in the page (chapter 12's lab at least, when it was built)."""
    pages = [
        f"{e}.html"
        for e in built_toc()
        if (HTML / f"{e}.html").exists() and 'class="attnbook-inpage"' in (HTML / f"{e}.html").read_text()
    ]
    return pages


INPAGE_MODELS = {"chapters/12_lab_mini_gpt": "lab_gpt", "chapters/07_multi_head_attention": "three_jobs"}


@pytest.mark.parametrize("entry, model", INPAGE_MODELS.items(), ids=list(INPAGE_MODELS.values()))
def test_pages_have_their_models(entry, model):
    if entry in built_toc():
        assert f"{entry}.html" in inpage_pages(), f"{entry}.html has no model in the page"
        assert (HTML / "_static" / "models" / f"{model}.onnx").is_file()
        assert (HTML / "_static" / "vendor" / "onnxruntime" / "ort-wasm-simd-threaded.wasm").is_file()


class InPage:
    """One widget on an open page: type, wait for the model, read what it shows."""

    def __init__(self, page, index: int = 0):
        self.page = page
        self.root = page.locator("div.attnbook-inpage").nth(index)
        self.handle = self.root.element_handle()

    def data(self, key: str):
        return self.root.evaluate(f"el => el.dataset[{key!r}]")

    def wait_ready(self, timeout: float = 30_000):
        self.page.wait_for_function(
            "el => el.dataset.state === 'ready' || el.dataset.state === 'error'", arg=self.handle, timeout=timeout
        )
        assert self.data("state") == "ready", f"the model did not load: {self.root.inner_text()}"

    def wait_context(self, context: str, timeout: float = 10_000):
        self.page.wait_for_function(
            "([el, c]) => el.dataset.context === c && !el.attnbookWidget.busy",
            arg=[self.handle, context],
            timeout=timeout,
        )

    def probs(self):
        import numpy as np

        return np.array(json.loads(self.data("probs")))

    def weights(self, layer: int, head: int):
        import numpy as np

        layers = self.root.locator("select[aria-label=layer]")
        if layers.locator("option").count() > 1:  # one layer: no choice to make (the picker is hidden)
            layers.select_option(index=layer)
        self.root.locator("select[aria-label=head]").select_option(index=head)
        canvas = self.root.locator("canvas")
        assert canvas.evaluate("c => [c.dataset.layer, c.dataset.head]") == [str(layer), str(head)]
        return np.array(canvas.evaluate("c => JSON.parse(c.dataset.weights)"))


@pytest.fixture(scope="module")
def lab_model():
    """The lab's exported model as the site serves it (ONNX Runtime) and as PyTorch (the saved weights)."""
    from attnbook import export

    served = HTML / "_static" / "models" / "lab_gpt.onnx"
    meta_path = HTML.parent / "executed" / "exported" / "lab_gpt.json"
    assert served.is_file() and meta_path.is_file(), f"build the lab's chapter first ({served}, {meta_path})"
    meta = export.load_meta(meta_path)
    served_meta = export.load_meta(served.with_suffix(".json"))
    assert served_meta == meta, "the site serves another description than the one the chapter exported"
    import hashlib

    assert hashlib.sha256(served.read_bytes()).hexdigest() == meta["sha256"]
    return meta, export.onnx_session(served), export.load_torch(meta_path)


def lab_reference(lab_model, text: str):
    """What the page must show for ``text``: the prompt rule, then ONNX Runtime on the served file and PyTorch."""
    import numpy as np
    import torch
    from attnbook import export

    meta, session, model = lab_model
    prompt = export.prompt_ids(text, meta["vocab"], meta["block_size"], meta["start"])
    logits, weights = export.run_onnx(session, prompt.ids)
    with torch.no_grad():
        ref_logits, ref_weights = model(torch.tensor([prompt.ids]), return_weights=True)
    ref_weights = torch.stack(ref_weights, dim=1).numpy()
    np.testing.assert_allclose(logits, ref_logits.numpy(), atol=1e-5)
    np.testing.assert_allclose(weights, ref_weights, atol=1e-5)
    probs = torch.softmax(ref_logits[0, -1].double(), dim=-1).numpy()
    return prompt, probs, weights[0]


@pytest.fixture(scope="module")
def lab_page(server, browser):
    if "chapters/12_lab_mini_gpt.html" not in inpage_pages():
        pytest.fail("the lab's page with its model was not built")
    requested: list[str] = []
    page, errors, outside = open_page(browser, f"{server}/chapters/12_lab_mini_gpt.html", requested=requested)
    yield page, errors, outside, requested
    page.close()


def test_inpage_loads_nothing_until_in_view_then_answers_within_2_s(lab_page, lab_model, browser):
    import time

    page, errors, outside, requested = lab_page
    widget = InPage(page)
    assert widget.data("state") == "idle"
    assert [u for u in requested if INPAGE_ASSETS.search(u)] == [], "the model loaded before it was in view"

    def first_use(page, widget):
        if page.locator(".math").count():  # let the page finish typesetting first: it shares the main thread
            page.evaluate("() => MathJax.startup.promise")
        start = time.perf_counter()
        widget.root.scroll_into_view_if_needed()
        widget.wait_ready()
        print(
            f"\nmodel in the page: first distribution {widget.data('firstMs')} ms after coming into view "
            f"({time.perf_counter() - start:.2f} s seen from the test; {widget.data('loadTimes')})"
        )
        return float(widget.data("firstMs"))

    first_ms = [first_use(page, widget)]
    if first_ms[0] > 2000:  # a busy moment on a shared machine: one more cold start, in a fresh browser context
        again, *_ = open_page(browser, page.url)
        first_ms.append(first_use(again, InPage(again)))
        again.close()
    sizes = {
        Path(urlparse(u).path).name: (HTML / urlparse(u).path.lstrip("/")).stat().st_size
        for u in requested
        if INPAGE_ASSETS.search(u) or u.endswith("inpage.js") or u.endswith("inpage.css")
    }
    print(f"model in the page: bytes on first use {sum(sizes.values()):,}: {sizes}")
    assert min(first_ms) <= 2000, f"the first distribution took {first_ms} ms after the widget came into view"
    widget.wait_context(lab_model[0]["prompt"])
    assert errors == [] and outside == []


PROMPTS = [
    "To be, or not to be",  # plain
    "Se\u00f1or Romeo, 1 (or 2)",  # characters outside the vocabulary: dropped, and the page says which
    "",  # empty: the model reads the start text
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.",  # longer than 64
]


@pytest.mark.parametrize("text", PROMPTS, ids=["plain", "outside-vocabulary", "empty", "longer-than-context"])
def test_inpage_equals_pytorch(lab_page, lab_model, text):
    import numpy as np

    page, errors, outside, _ = lab_page
    widget = InPage(page)
    widget.root.scroll_into_view_if_needed()
    widget.wait_ready()
    prompt, probs, weights = lab_reference(lab_model, text)
    box = widget.root.locator("textarea")
    box.fill("")
    box.type(text) if text and len(text) < 30 else box.fill(text)  # keystrokes, and a paste
    widget.wait_context(prompt.text)
    np.testing.assert_allclose(widget.probs(), probs, atol=1e-4)
    meta = lab_model[0]
    heads = [(l, h) for l in range(meta["n_layers"]) for h in range(meta["n_heads"])]
    for layer, head in heads if text == PROMPTS[0] else heads[-1:]:
        np.testing.assert_allclose(widget.weights(layer, head), weights[layer, head], atol=1e-4)
    notes = widget.root.locator(".attnbook-inpage-notes").inner_text()
    for c in prompt.dropped:
        assert f"\u201c{c}\u201d" in notes or c == " ", f"the page does not say that {c!r} was left out: {notes}"
    assert ("Empty prompt" in notes) == prompt.empty
    assert (f"{prompt.cropped} earlier character" in notes) == bool(prompt.cropped), notes
    bars = widget.root.locator(".attnbook-inpage-bar")
    assert bars.count() == 10
    top = np.argsort(-probs)[:10]
    shown = [float(bars.nth(i).locator(".attnbook-inpage-p").inner_text()) for i in range(10)]
    np.testing.assert_allclose(shown, probs[top], atol=1e-3)
    assert errors == [] and outside == []


def test_inpage_sampling_rule_is_generates(lab_page):
    """The page's sampling distribution is GPT.generate's: logits / temperature, top-k (ties kept), softmax."""
    import numpy as np
    import torch

    page, _, _, _ = lab_page
    rng = np.random.default_rng(0)
    for temperature, top_k in [(1.0, None), (0.5, 3), (2.0, 1), (0.8, 10), (1.3, 65)]:
        logits = rng.normal(size=65).round(1)  # rounding makes ties
        got = np.array(
            page.evaluate(
                "([l, t, k]) => Array.from(window.attnbookInpage.sampleProbs(l, t, k))",
                [logits.tolist(), temperature, top_k],
            )
        )
        z = torch.tensor(logits) / temperature  # the lines of models.GPT.generate
        if top_k is not None:
            kth = torch.topk(z, top_k).values[-1]
            z = z.masked_fill(z < kth, float("-inf"))
        np.testing.assert_allclose(got, torch.softmax(z, dim=-1).numpy(), atol=1e-12)
    greedy = page.evaluate("() => Array.from(window.attnbookInpage.sampleProbs([1, 3, 2], 0, null))")
    assert greedy == [0, 1, 0]


def test_inpage_continue_greedy_follows_the_model(lab_page, lab_model):
    """Temperature 0: every character "continue" appends is the most likely one under PyTorch."""

    page, errors, outside, _ = lab_page
    widget = InPage(page)
    widget.wait_ready()
    box = widget.root.locator("textarea")
    box.fill("ROMEO:\n")
    widget.wait_context("ROMEO:\n")
    widget.root.locator("input[type=range]").evaluate("el => { el.value = '0'; el.dispatchEvent(new Event('input')); }")
    widget.root.locator("input[type=number]").fill("12")
    widget.root.locator("button", has_text="Continue").click()
    page.wait_for_function(
        "el => el.value.length >= 19 && !el.closest('.attnbook-inpage').attnbookWidget.generating",
        arg=box.element_handle(),
        timeout=20_000,
    )
    text = box.input_value()
    assert text.startswith("ROMEO:\n") and len(text) == 19
    for n in range(7, 19):
        _, probs, _ = lab_reference(lab_model, text[:n])
        chosen = lab_model[0]["vocab"].index(text[n])
        assert probs[chosen] >= probs.max() - 1e-4, f"character {n} ({text[n]!r}) is not the most likely one"
    assert errors == [] and outside == []


def test_inpage_keystroke_time_at_64_characters(lab_page, lab_model):
    """Time from a keystroke to the updated bars and heatmap, with 64 characters in the box."""
    import statistics

    page, errors, _, _ = lab_page
    widget = InPage(page)
    widget.wait_ready()
    box = widget.root.locator("textarea")
    text = "KING RICHARD III:\nNow is the winter of our discontent made glorious summer by"
    box.fill(text[:54])
    widget.wait_context(text[:54])
    times = []
    for i in range(54, 64):
        box.press(text[i] if text[i] != " " else "Space")
        widget.wait_context(text[: i + 1])
        times.append(float(widget.data("updateMs")))
    median = statistics.median(times)
    print(
        f"\nmodel in the page: update after a keystroke at {len(text[:64])} characters: median {median:.1f} ms, "
        f"max {max(times):.1f} ms (shared machine)"
    )
    assert median <= 250, f"a keystroke takes {median:.0f} ms to update the page (goal 100 ms)"
    assert errors == []


def test_inpage_on_a_phone(server, browser, lab_model):
    """At a phone's width the widget fits the screen and works."""
    if "chapters/12_lab_mini_gpt.html" not in inpage_pages():
        pytest.fail("the lab's page with its model was not built")
    page, errors, outside = open_page(
        browser,
        f"{server}/chapters/12_lab_mini_gpt.html",
        viewport={"width": 390, "height": 844},
        device_scale_factor=2,
        is_mobile=True,
        has_touch=True,
    )
    try:
        widget = InPage(page)
        widget.root.scroll_into_view_if_needed()
        widget.wait_ready()
        text = "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\nDeny thy father and refuse thy name"
        widget.root.locator("textarea").fill(text)
        widget.wait_context(lab_reference(lab_model, text)[0].text)
        box = widget.root.bounding_box()
        canvas = widget.root.locator("canvas").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390 + 1, f"the widget is wider than the phone: {box}"
        assert canvas["x"] + canvas["width"] <= box["x"] + box["width"] + 1, f"the heatmap overflows: {canvas}"
        assert widget.root.evaluate("el => el.scrollWidth <= el.clientWidth + 1")
        assert errors == [] and outside == []
    finally:
        page.close()


def test_three_jobs_in_the_page_equals_onnx_runtime(server, browser):
    """Chapter 07's three-head model: the page's answers and head weights are ONNX Runtime's on the served file.

    (The chapter's cell checks that file against PyTorch; the model's class lives in the chapter, so no
    PyTorch checkpoint is exported for it.)
    """
    import numpy as np
    from attnbook import export

    if "chapters/07_multi_head_attention.html" not in inpage_pages():
        pytest.fail("chapter 07's page with its model was not built")
    served = HTML / "_static" / "models" / "three_jobs.onnx"
    meta = export.load_meta(served.with_suffix(".json"))
    session = export.onnx_session(served)
    page, errors, outside = open_page(browser, f"{server}/chapters/07_multi_head_attention.html")
    try:
        widget = InPage(page)
        assert widget.data("state") == "idle" and widget.data("kind") == "tagger"
        widget.root.scroll_into_view_if_needed()
        widget.wait_ready()
        box = widget.root.locator("textarea")
        for text in ["abcdefghBjklmnop", "aaCbb", "x", "abcdefghijklmnopqrsDA"]:
            prompt = export.prompt_ids(text, meta["vocab"], meta["block_size"], meta["start"])
            box.fill(text)
            widget.wait_context(prompt.text)
            *logits, weights = export.run_onnx(session, prompt.ids)
            answers = json.loads(widget.data("answers"))
            for job, out in zip(meta["jobs"], logits):
                z = out[0] - out[0].max(-1, keepdims=True)
                probs = np.exp(z) / np.exp(z).sum(-1, keepdims=True)  # (T, C)
                np.testing.assert_allclose(np.array(answers[job["name"]]), probs, atol=1e-4)
            for head in range(meta["n_heads"]):
                np.testing.assert_allclose(widget.weights(0, head), weights[0, 0, head], atol=1e-4)
            cells = widget.root.locator("table tbody tr").first.locator("td")
            assert cells.count() == len(prompt.ids)
            notes = widget.root.locator(".attnbook-inpage-notes").inner_text()
            assert ("left out" in notes) == bool(prompt.dropped or prompt.cropped), notes
        assert errors == [] and outside == []
    finally:
        page.close()


def test_diagram_files_render_on_their_own(browser):
    """What Jupyter shows: each diagram file, loaded as an image outside the book, has a size."""
    import base64

    page = browser.new_page()
    try:
        for path in sorted((REPO / "book" / "images" / "diagrams").glob("*.svg")):
            data = base64.b64encode(path.read_bytes()).decode()
            page.set_content(f'<img id="d" src="data:image/svg+xml;base64,{data}">')
            page.wait_for_function("document.getElementById('d').complete")
            width = page.evaluate("document.getElementById('d').naturalWidth")
            assert width > 0, f"{path.name} does not render as an image"
    finally:
        page.close()
