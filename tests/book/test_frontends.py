"""A chapter run in a real Jupyter front end, driven in Chromium: every diagram the notebook carries and every
explorer (``attnbook.widgets``) and progress bar (``attnbook.train.progress``) the kernel displays is drawn,
moving an explorer's slider redraws its picture, and the browser logs no error.

Two front ends, one per environment (``ATTNBOOK_JUPYTER_UI``, with the server's Python in
``ATTNBOOK_JUPYTER_PYTHON``):

- ``lab``: JupyterLab 4 with ipywidgets 8, the book's own environment (``make test-jupyter``, in ``make test``);
- ``classic``: the classic Notebook (6.5) with ipywidgets 7.7.1, the widget protocol Colab's front end draws,
  in the Colab-shaped environment (``make test-colab``).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import nbformat
import pytest
from attnbook_book import notebooks

pytestmark = pytest.mark.jupyter

UI = os.environ.get("ATTNBOOK_JUPYTER_UI", "lab")
PYTHON = os.environ.get("ATTNBOOK_JUPYTER_PYTHON", sys.executable)
# a page with an explorer (a slider and its picture) and training runs with progress bars, among the quickest
CHAPTER = notebooks.CHAPTERS / "01_vanishing_gradients.ipynb"
WIDGET = "application/vnd.jupyter.widget-view+json"
RUN_TIMEOUT = 600  # seconds for the whole page; it executes in about 40 s here under nbval

# How each front end shows a widget the kernel displayed, and how its slider is moved from the keyboard.
SELECTORS = {
    "lab": {"output": ".jp-OutputArea-output", "handle": ".noUi-handle", "markdown": ".jp-MarkdownOutput"},
    "classic": {"output": ".output_subarea", "handle": ".ui-slider-handle", "markdown": ".text_cell_render"},
}
DRAWN_WIDGET = ":has(> .jupyter-widgets)"  # an output area holding a widget view the manager drew


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A Jupyter server of ``PYTHON``'s environment, its root a folder holding only the chapter's notebook."""
    tmp = tmp_path_factory.mktemp("jupyter")
    root, home = tmp / "root", tmp / "home"
    root.mkdir()
    home.mkdir()
    # the kernel's name as this server shows it: the classic Notebook starts its session again when the
    # notebook's differs ("Python 3" here, "Python 3 (ipykernel)" there), a race in which it may drop every
    # widget view at once; Colab and JupyterLab do not look at it
    specs = json.loads(
        subprocess.run(
            [PYTHON, "-m", "jupyter", "kernelspec", "list", "--json"], capture_output=True, text=True, check=True
        ).stdout  # fmt: skip
    )["kernelspecs"]
    nb = nbformat.read(CHAPTER, as_version=4)
    nb.metadata.kernelspec.display_name = specs[nb.metadata.kernelspec.name]["spec"]["display_name"]
    nbformat.write(nb, root / CHAPTER.name)
    port = _free_port()
    if UI == "lab":
        settings = home / "lab-settings" / "@jupyterlab" / "notebook-extension"
        settings.mkdir(parents=True)
        # every cell kept in the page (no windowing), so that every output can be looked at
        (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
        args = ["lab", "--ServerApp.token=", "--ServerApp.password=", f"--ServerApp.root_dir={root}",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]  # fmt: skip
    else:
        args = ["notebook", "--NotebookApp.token=", "--NotebookApp.password=", f"--NotebookApp.notebook_dir={root}"]
    env = {
        **os.environ,
        "HOME": str(home),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "lab-settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "lab-workspaces"),
        "ATTNBOOK_EXPORT_DIR": str(tmp / "exported"),
        "OMP_NUM_THREADS": "1",
    }
    log = open(tmp / "server.log", "w")  # noqa: SIM115
    process = subprocess.Popen(
        [PYTHON, "-m", "jupyter", *args, "--no-browser", "--ip=127.0.0.1", f"--port={port}"]
        + (["--allow-root"] if os.geteuid() == 0 else []),
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(base + "/api", timeout=2)
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                log.close()
                pytest.fail(f"the Jupyter server did not start:\n{(tmp / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
    yield base, root
    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()


@pytest.fixture(scope="module")
def page():
    from attnbook_book.chromium import launch

    with launch() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.route(
            "**/*",
            lambda route: route.continue_() if route.request.url.startswith(("http://127.0.0.1", "data:", "blob:"))
            else route.abort(),
        )  # fmt: skip
        errors = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" and not _known(m) else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.errors = errors
        yield page


# What the classic Notebook itself logs on any MyST page, whatever the book does: it looks for a highlighter named
# after each fenced block's info string ("{admonition} Learning goals", "{math}") and finds none; its MathJax 2 comes
# without the OTF fonts it asks for, and probes a font at about:blank.
CLASSIC_NOISE = ("/static/components/codemirror/mode/", "/static/components/MathJax/fonts/", "about:blank")


def _known(message) -> bool:
    where = message.text + " " + (message.location or {}).get("url", "")
    return UI == "classic" and any(noise in where for noise in CLASSIC_NOISE)


def _run_all_lab(page, base):
    page.goto(f"{base}/lab/tree/{CHAPTER.name}", wait_until="domcontentloaded", timeout=120_000)
    page.wait_for_function(
        """n => document.querySelectorAll(".jp-Notebook .jp-CodeCell").length === n
            && [...document.querySelectorAll(".jp-StatusBar-TextItem")]
                .some(e => /\\| Idle$/.test(e.textContent.trim()))""",
        arg=len(_code_cells()),
        timeout=180_000,
    )
    page.click('.lm-MenuBar-itemLabel:text-is("Run")')
    page.click('.lm-Menu-itemLabel:text-is("Run All Cells")')
    page.wait_for_function(
        """() => [...document.querySelectorAll(".jp-Notebook .jp-CodeCell .jp-InputPrompt")]
            .every(e => /^\\[\\d+\\]:$/.test(e.textContent.trim()))""",
        timeout=RUN_TIMEOUT * 1000,
        polling=1000,
    )
    page.keyboard.press("Control+s")
    page.wait_for_function("() => !document.querySelector('.jp-mod-dirty')", timeout=30_000)


def _run_all_classic(page, base):
    # The widget manager first asks the kernel for the widgets it already has (ipywidgets 7 answers on the comms'
    # list, after a warning that its newer channel is absent). Cells run before that question would be answered
    # first, and the late answer would replace every widget drawn meanwhile: wait for the question to be asked.
    with page.expect_console_message(lambda m: "jupyter.widget.control" in m.text, timeout=180_000):
        page.goto(f"{base}/notebooks/{CHAPTER.name}", wait_until="domcontentloaded", timeout=120_000)
    page.wait_for_function(
        """n => window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel && Jupyter.notebook.kernel.is_connected()
            && Jupyter.notebook.get_cells().filter(c => c.cell_type === "code").length === n""",
        arg=len(_code_cells()),
        timeout=180_000,
    )
    page.evaluate("() => Jupyter.notebook.execute_all_cells()")
    page.wait_for_function(
        """() => Jupyter.notebook.get_cells().filter(c => c.cell_type === "code")
            .every(c => typeof c.input_prompt_number === "number")""",
        timeout=RUN_TIMEOUT * 1000,
        polling=1000,
    )
    page.evaluate("() => Jupyter.notebook.save_notebook()")
    page.wait_for_function("() => !Jupyter.notebook.dirty", timeout=30_000)


def _code_cells():
    return [c for c in nbformat.read(CHAPTER, as_version=4).cells if c.cell_type == "code"]


def _kind(output) -> str:
    """What a widget the kernel displayed is, from its plain-text form: a progress bar (tqdm's widget, whose text
    is the bar's, "desc: 100%|###| 300/300 [00:02<00:00, ...]"), an explorer (a slider or a text box with its
    picture), or another widget."""
    text = output["data"].get("text/plain", "")
    if re.search(r"\|\s*\d+/\d+ \[", text):
        return "bar"
    if "Slider(" in text or "Text(" in text:
        return "explorer"
    return "other"


# Each widget output of the page as the front end drew it: its size, whether it holds a progress bar, a slider
# or a text box, and its pictures (drawn or not).
DRAWN = """els => els.map(el => ({
    height: el.getBoundingClientRect().height,
    bar: !!el.querySelector(".widget-hprogress"),
    slider: !!el.querySelector(".widget-slider, .widget-hslider"),
    text: !!el.querySelector(".widget-text input"),
    pictures: [...el.querySelectorAll("img")].map(img => img.complete && img.naturalWidth > 0),
}))"""


def test_explorers_and_progress_bars_are_drawn_and_move(server, page):
    base, root = server
    (_run_all_lab if UI == "lab" else _run_all_classic)(page, base)
    saved = nbformat.read(root / CHAPTER.name, as_version=4)
    errors_in_cells = [o for c in saved.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors_in_cells, [o.get("ename", "") + ": " + o.get("evalue", "") for o in errors_in_cells]
    displayed = [
        _kind(o) for c in saved.cells if c.cell_type == "code" for o in c.outputs if WIDGET in o.get("data", {})
    ]
    assert displayed.count("bar") >= 2 and displayed.count("explorer") >= 1, displayed

    selectors = SELECTORS[UI]
    # the diagrams, which the notebook carries
    diagrams = page.eval_on_selector_all(
        selectors["markdown"] + " img[src^='data:image/png']", "els => els.map(e => e.complete && e.naturalWidth)"
    )
    expected = len(notebooks._DIAGRAM_IMAGE.findall(CHAPTER.with_suffix(".md").read_text()))
    assert len(diagrams) == expected >= 1 and all(diagrams), f"{expected} diagrams, drawn: {diagrams}"

    drawn = page.eval_on_selector_all(selectors["output"] + DRAWN_WIDGET, DRAWN)
    assert len(drawn) == len(displayed), f"{len(displayed)} widgets displayed by the kernel, {len(drawn)} drawn"
    for kind, view in zip(displayed, drawn):
        assert view["height"] > 10, f"a {kind} is not drawn: {view}"
        if kind == "bar":
            assert view["bar"], f"a progress bar is drawn without its bar: {view}"
        if kind == "explorer":
            assert view["slider"] or view["text"], f"an explorer is drawn without its control: {view}"
            assert view["pictures"] and all(view["pictures"]), f"an explorer's picture is not drawn: {view}"

    # move the first explorer's slider from the keyboard: the kernel redraws its picture
    index = next(i for i, (kind, view) in enumerate(zip(displayed, drawn)) if kind == "explorer" and view["slider"])
    explorer = page.query_selector_all(selectors["output"] + DRAWN_WIDGET)[index]
    before = explorer.eval_on_selector("img", "img => img.getAttribute('src')")
    handle = explorer.query_selector(selectors["handle"])
    handle.scroll_into_view_if_needed()
    handle.focus()
    for _ in range(20):
        page.keyboard.press("ArrowRight")
    # the HTML widget writes a new <img> when the kernel sends the new picture
    page.wait_for_function(
        "([el, old]) => { const img = el.querySelector('img'); return img && img.getAttribute('src') !== old; }",
        arg=[explorer, before],
        timeout=120_000,
    )
    page.wait_for_timeout(1000)  # a redraw's messages, and any error they bring, arrive
    assert not page.errors, f"the browser logged errors: {page.errors}"
