"""The assistant in the page of chapter 17, opened in headless Chromium.

The page writes the reader's instruction in the chat template and decodes greedily until <|end|>: for a few
instructions (one of each kind the model was tuned on, one of a kind it never saw, one with characters
outside its vocabulary, one so long that the turn outgrows the context) it gives the answer PyTorch gives
(``chat.answer`` on the exported model rebuilt from its saved weights) token for token, with each token's
probability, and ONNX Runtime on the served file gives it too. Nothing loads before the box is in view; the
turn is shown in the template, the template's tokens by name; at a phone's width the widget fits.
"""

from __future__ import annotations

import hashlib
import json
from urllib.parse import urlparse

import numpy as np
import pytest
from site_helpers import HTML, INPAGE_ASSETS, PHONE, built_toc, open_page

pytestmark = pytest.mark.site

PAGE = "chapters/17_text_to_assistant"
INSTRUCTIONS = [
    "reverse oak",
    "capitals: thee",
    "how many words: my good lord",
    "second word of: when shall we",
    "echo: fair is foul",
    "the first letters of: to be or not",  # a kind the tuning never showed
    "reverse se\u00f1or 42",  # characters outside the vocabulary: left out, and the page says which
    "repeat: " + " ".join(["now is the winter of our discontent"] * 2),  # the turn outgrows the context
]


@pytest.fixture(scope="module")
def model():
    """The exported assistant as the site serves it (ONNX Runtime) and as PyTorch (its saved weights)."""
    from attnbook import chat, export
    from attnbook.data import CharTokenizer

    if PAGE not in built_toc():
        pytest.skip("chapter 17 is not in this build (a partial build of other chapters)")
    assert (HTML / f"{PAGE}.html").exists(), f"{PAGE}.html is in the table of contents but was not built"
    served = HTML / "_static" / "models" / "assistant.onnx"
    meta_path = HTML.parent / "executed" / "exported" / "assistant.json"
    assert served.is_file() and meta_path.is_file(), f"build chapter 17 first ({served}, {meta_path})"
    meta = export.load_meta(meta_path)
    assert export.load_meta(served.with_suffix(".json")) == meta, "the site serves another description"
    assert hashlib.sha256(served.read_bytes()).hexdigest() == meta["sha256"]
    assert meta["kind"] == "chat" and list(meta["template"].values()) == list(chat.SPECIAL)
    tokenizer = chat.ChatTokenizer(CharTokenizer(meta["vocab"]))
    assert tokenizer.chars.chars == meta["vocab"], "the vocabulary is not in id order"
    return meta, export.onnx_session(served), export.load_torch(meta_path), tokenizer


def reference(model, text: str):
    """What the page must show for ``text``: the characters it keeps, and PyTorch's greedy answer (ids with
    the closing <|end|> if any, each token's probability), which ONNX Runtime's must equal."""
    import torch
    from attnbook import chat, export

    meta, session, torch_model, tok = model
    kept = "".join(c for c in text if c in meta["vocab"])
    n = meta["sampling"]["max_new_tokens"]
    ids = chat.answer(torch_model, tok, [kept], max_new_tokens=n, keep_end=True)[0]
    turn = chat.render(tok, kept)[0]
    with torch.no_grad():
        full = torch.tensor([turn + ids])
        probs = [
            torch.softmax(torch_model(full[:, max(0, t - meta["block_size"]) : t])[0, -1].double(), -1)[full[0, t]]
            for t in range(len(turn), full.shape[1])
        ]
    onnx_ids = list(turn)
    for _ in range(len(ids)):  # greedy decoding with ONNX Runtime on the served file
        logits, _ = export.run_onnx(session, onnx_ids[-meta["block_size"] :])
        onnx_ids.append(int(logits[0, -1].argmax()))
    assert onnx_ids[len(turn) :] == ids, "ONNX Runtime answers otherwise than PyTorch"
    return kept, turn, ids, np.array([float(p) for p in probs])


@pytest.fixture(scope="module")
def page(model, server, browser):
    """The page opened in the session's Chromium; the model not loaded until its box is in view."""
    requested: list[str] = []
    tab, errors, outside = open_page(browser, f"{server}/{PAGE}.html", requested=requested)
    root = tab.locator("div.attnbook-inpage[data-model=assistant]")
    assert root.count() == 1, "the page has no assistant in the page"
    assert root.evaluate("el => el.dataset.state") == "idle"
    assert [u for u in requested if INPAGE_ASSETS.search(u)] == [], "the model loaded before it was in view"
    root.scroll_into_view_if_needed()
    tab.wait_for_function(
        "el => ['ready', 'error'].includes(el.dataset.state)", arg=root.element_handle(), timeout=60_000
    )
    assert root.evaluate("el => el.dataset.state") == "ready", root.inner_text()
    yield tab, root, errors, outside
    tab.close()


def ask(tab, root, text: str, kept: str) -> dict:
    box = root.locator("textarea")
    box.fill("")
    box.type(text) if len(text) < 30 else box.fill(text)  # keystrokes, and a paste
    tab.wait_for_function(
        "([el, c]) => el.dataset.context === c && !el.attnbookWidget.busy", arg=[root.element_handle(), kept]
    )
    return root.evaluate("el => ({...el.dataset})")


@pytest.mark.parametrize("text", INSTRUCTIONS)
def test_the_page_answers_as_pytorch(page, model, text):
    tab, root, errors, outside = page
    meta, tok = model[0], model[3]
    kept, turn, ids, probs = reference(model, text)
    shown = ask(tab, root, text, kept)
    assert json.loads(shown["answerIds"]) == ids, f"{text!r}: the page answers {shown['answer']!r}"
    np.testing.assert_allclose(json.loads(shown["answerProbs"]), probs, atol=1e-4)
    stopped = ids[-1] == tok.end
    assert shown["stopped"] == str(stopped).lower()
    assert shown["answer"] == tok.decode(ids[:-1] if stopped else ids)
    reply = root.locator(".attnbook-inpage-reply").inner_text()
    assert f"\u201c{shown['answer']}\u201d" in reply or not shown["answer"], reply
    tokens = root.locator(".attnbook-inpage-turn .attnbook-inpage-token")
    assert tokens.count() == len(turn) + len(ids)
    assert tokens.first.inner_text() == "<|user|>" and tokens.nth(len(turn) - 1).inner_text() == "<|assistant|>"
    assert root.locator(".attnbook-inpage-turn .attnbook-inpage-answer").count() == len(ids)
    notes = root.locator(".attnbook-inpage-notes").inner_text()
    for c in dict.fromkeys(c for c in text if c not in meta["vocab"]):
        assert f"\u201c{c}\u201d" in notes, f"the page does not say that {c!r} was left out: {notes}"
    assert ("left out" in notes) == (kept != text or len(turn) + len(ids) - 1 > meta["block_size"]), notes
    weights = np.array(root.locator("canvas").evaluate("c => JSON.parse(c.dataset.weights)"))
    assert weights.shape[0] == min(len(turn) + len(ids) - 1, meta["block_size"])  # the last step's input
    assert errors == [] and outside == []


def test_the_template_is_applied_by_the_page(page, model):
    """The page's rule for the turn is chat.render's: <|user|>, the kept characters, <|end|>, <|assistant|>."""
    from attnbook import chat

    tab, _, _, _ = page
    meta, tok = model[0], model[3]
    for text in ["reverse oak", "", "caf\u00e9 au lait"]:
        kept = "".join(c for c in text if c in meta["vocab"])
        got = tab.evaluate("([t, m]) => window.attnbookInpage.chatIds(t, m)", [text, meta])
        assert got["ids"] == chat.render(tok, kept)[0] and got["text"] == kept


def test_the_assistant_on_a_phone(server, browser, model):
    tab, errors, outside = open_page(
        browser, f"{server}/{PAGE}.html", viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True
    )
    try:
        root = tab.locator("div.attnbook-inpage[data-model=assistant]")
        root.scroll_into_view_if_needed()
        tab.wait_for_function("el => el.dataset.state === 'ready'", arg=root.element_handle(), timeout=60_000)
        text = INSTRUCTIONS[-1]
        kept = reference(model, text)[0]
        ask(tab, root, text, kept)
        box = root.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"] + 1, f"wider than the phone: {box}"
        assert root.evaluate("el => el.scrollWidth <= el.clientWidth + 1")
        assert urlparse(tab.url).path.endswith(".html")
        assert errors == [] and outside == []
    finally:
        tab.close()
