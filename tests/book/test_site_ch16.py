"""The induction-head model in the page of chapter 16, opened in headless Chromium.

The page's next-letter probabilities and every head's weights equal PyTorch's (the exported model rebuilt from
its saved weights) and ONNX Runtime's on the served file; the heatmap starts at the head the chapter chose;
and the behaviour the page promises holds: typing a random string and then repeating it makes the
prediction confident, and the induction head's row points at the letter after the earlier occurrence.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pytest

pytestmark = pytest.mark.site

REPO = Path(__file__).resolve().parents[2]
HTML = Path(os.environ.get("ATTNBOOK_HTML") or REPO / "_build" / "html").resolve()
PAGE = "chapters/16_what_attention_learns.html"


@pytest.fixture(scope="module")
def model():
    """The exported model as the site serves it (ONNX Runtime) and as PyTorch (its saved weights)."""
    from attnbook import export
    from attnbook_book.notebooks import toc_files

    staged = HTML.parent / "src"
    if PAGE.removesuffix(".html") not in toc_files(staged if (staged / "_toc.yml").exists() else REPO):
        pytest.skip("chapter 16 is not in this build (a partial build of other chapters)")
    assert (HTML / PAGE).exists(), f"{PAGE} is in the table of contents but was not built"
    served = HTML / "_static" / "models" / "induction.onnx"
    meta_path = HTML.parent / "executed" / "exported" / "induction.json"
    assert served.is_file() and meta_path.is_file(), f"build chapter 16 first ({served}, {meta_path})"
    meta = export.load_meta(meta_path)
    assert export.load_meta(served.with_suffix(".json")) == meta, "the site serves another description"
    assert hashlib.sha256(served.read_bytes()).hexdigest() == meta["sha256"]
    return meta, export.onnx_session(served), export.load_torch(meta_path)


def reference(model, text: str):
    """The prompt rule, then ONNX Runtime and PyTorch on it: (prompt, next-letter probabilities, weights)."""
    import torch
    from attnbook import export

    meta, session, torch_model = model
    prompt = export.prompt_ids(text, meta["vocab"], meta["block_size"], meta["start"])
    logits, weights = export.run_onnx(session, prompt.ids)
    with torch.no_grad():
        ref_logits, ref_weights = torch_model(torch.tensor([prompt.ids]), return_weights=True)
    np.testing.assert_allclose(logits, ref_logits.numpy(), atol=1e-5)
    np.testing.assert_allclose(weights, torch.stack(ref_weights, dim=1).numpy(), atol=1e-5)
    return prompt, torch.softmax(ref_logits[0, -1].double(), dim=-1).numpy(), weights[0]


@pytest.fixture(scope="module")
def page(model, server, browser):
    """The page with its model loaded, opened in the session's Chromium (conftest.py) on the local server."""
    local = urlparse(server).netloc
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    tab.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: problems.append(f"uncaught: {e}"))
    tab.on("request", lambda r: problems.append(r.url) if urlparse(r.url).netloc not in (local, "") else None)
    from attnbook_book.chromium import wait_styled

    tab.goto(f"{server}/{PAGE}", wait_until="load", timeout=120_000)
    wait_styled(tab)
    root = tab.locator("div.attnbook-inpage[data-model=induction]")
    assert root.count() == 1, "the page has no induction-head model"
    root.scroll_into_view_if_needed()
    tab.wait_for_function(
        "el => ['ready', 'error'].includes(el.dataset.state)", arg=root.element_handle(), timeout=60_000
    )
    assert root.evaluate("el => el.dataset.state") == "ready", root.inner_text()
    yield tab, root, problems
    tab.close()


def type_and_wait(tab, root, text: str, context: str) -> None:
    box = root.locator("textarea")
    box.fill("")
    box.type(text)
    tab.wait_for_function(
        "([el, c]) => el.dataset.context === c && !el.attnbookWidget.busy", arg=[root.element_handle(), context]
    )


def heatmap(root, layer: int, head: int) -> np.ndarray:
    root.locator("select[aria-label=layer]").select_option(index=layer)
    root.locator("select[aria-label=head]").select_option(index=head)
    canvas = root.locator("canvas")
    assert canvas.evaluate("c => [c.dataset.layer, c.dataset.head]") == [str(layer), str(head)]
    return np.array(canvas.evaluate("c => JSON.parse(c.dataset.weights)"))


def test_the_heatmap_starts_at_the_chapters_induction_head(page, model):
    _, root, problems = page
    meta = model[0]
    canvas = root.locator("canvas")
    shown = canvas.evaluate("c => [c.dataset.layer, c.dataset.head]")
    assert shown == [str(meta["heatmap"]["layer"]), str(meta["heatmap"]["head"])] and meta["heatmap"]["layer"] == 1
    assert problems == []


@pytest.mark.parametrize(
    "text", ["qxwjzkvbmtqxwj", "Hello, World! abc", "abcdefghijklmnopqrstuvwxyz" * 2], ids=["prompt", "dropped", "long"]
)
def test_the_page_equals_pytorch(page, model, text):
    tab, root, problems = page
    prompt, probs, weights = reference(model, text)
    type_and_wait(tab, root, text, prompt.text)
    np.testing.assert_allclose(np.array(json.loads(root.evaluate("el => el.dataset.probs"))), probs, atol=1e-4)
    meta = model[0]
    for layer in range(meta["n_layers"]):
        for head in range(meta["n_heads"]):
            np.testing.assert_allclose(heatmap(root, layer, head), weights[layer, head], atol=1e-4)
    notes = root.locator(".attnbook-inpage-notes").inner_text()
    assert ("left out" in notes) == bool(prompt.dropped or prompt.cropped), notes
    assert problems == []


def test_repeating_a_random_string_makes_the_prediction_confident(page, model):
    """While the first half is typed the next letter is a guess; from the second letter of the repeat the
    right letter is the most likely one, far above any guess of the first half, and the induction head
    looks where the chapter says."""
    tab, root, problems = page
    meta = model[0]
    first = "kqzvbmxwtj"  # ten different letters
    vocab = meta["vocab"]
    guesses, right = [], []
    for n in range(3, len(first) + 1):
        type_and_wait(tab, root, first[:n], first[:n])
        guesses.append(max(json.loads(root.evaluate("el => el.dataset.probs"))))
    for n in range(2, len(first)):
        text = first + first[:n]
        type_and_wait(tab, root, text, text)
        probs = np.array(json.loads(root.evaluate("el => el.dataset.probs")))
        assert probs.argmax() == vocab.index(first[n]), f"after {text!r} the most likely letter is not {first[n]!r}"
        right.append(probs[vocab.index(first[n])])  # the letter the repeat continues with
    print(
        f"\nlargest probability in the first half: {max(guesses):.2f}; right letter in the repeat: "
        f"{min(right):.2f} to {max(right):.2f}"
    )
    assert min(right) > 2 * max(guesses)
    layer, head = meta["heatmap"]["layer"], meta["heatmap"]["head"]
    rows = heatmap(root, layer, head)  # the last text: first + first[:L - 1]
    L = len(first)
    for t in range(L, rows.shape[0]):
        assert rows[t].argmax() == t - L + 1, f"query {t} looks at {rows[t].argmax()}, not {t - L + 1}"
    assert problems == []
