"""attnbook.export: the exported ONNX model computes what the PyTorch model computes, and the files say how
to use it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from attnbook import export, interpret, models
from hypothesis import given, settings
from hypothesis import strategies as st

VOCAB = "\n abcdefg"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A small random GPT (GELU, biases, 2 layers of 3 heads) and its export; one export per module: it takes
    seconds.
    """
    torch.manual_seed(0)
    config = models.TransformerConfig(
        vocab_size=len(VOCAB), block_size=12, n_layers=2, n_heads=3, d_model=24, mlp="gelu", bias=True
    )
    model = models.GPT(config).train()  # exporting must not need eval mode, nor change the model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    folder = tmp_path_factory.mktemp("exported")
    exported = export.to_onnx(
        model,
        "tiny",
        vocab=VOCAB,
        title="A tiny GPT",
        prompt="abc",
        directory=folder,
        temperature=0.5,
        top_k=3,
        max_new_tokens=20,
    )
    assert model.training, "to_onnx exports a copy in eval mode and leaves the model in training mode"
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    return model, exported


def reference(model, ids):
    model.eval()
    with torch.no_grad():
        logits, weights = model(ids, return_weights=True)
    return logits.numpy(), torch.stack(weights, dim=1).numpy()  # (1, T, V), (1, L, H, T, T)


@pytest.mark.parametrize("T", [1, 2, 7, 12])
def test_onnx_runtime_equals_pytorch(small, T):
    model, exported = small
    session = export.onnx_session(exported.onnx_path)
    ids = torch.randint(0, len(VOCAB), (1, T), generator=torch.Generator().manual_seed(T))
    logits, weights = export.run_onnx(session, ids)
    ref_logits, ref_weights = reference(model, ids)
    assert logits.shape == (1, T, len(VOCAB)) and weights.shape == (1, 2, 3, T, T)
    np.testing.assert_allclose(logits, ref_logits, atol=1e-5, rtol=0)
    np.testing.assert_allclose(weights, ref_weights, atol=1e-5, rtol=0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)  # every query's weights sum to 1
    assert np.all(np.triu(weights[0, :, :], k=1) == 0)  # causal: no weight on later characters


def test_description_file(small):
    model, exported = small
    meta = json.loads(exported.meta_path.read_text(encoding="utf-8"))
    assert meta == exported.meta == export.load_meta(exported.meta_path)
    assert meta["vocab"] == VOCAB and meta["block_size"] == 12 and meta["n_layers"] == 2 and meta["n_heads"] == 3
    assert meta["start"] == "\n" and meta["prompt"] == "abc" and meta["title"] == "A tiny GPT"
    assert meta["sampling"] == {"temperature": 0.5, "top_k": 3, "max_new_tokens": 20}
    assert meta["onnx"] == "tiny.onnx" and meta["bytes"] == exported.onnx_path.stat().st_size
    import hashlib

    assert meta["sha256"] == hashlib.sha256(exported.onnx_path.read_bytes()).hexdigest()
    assert models.TransformerConfig(**meta["config"]) == model.config


def test_load_torch_rebuilds_the_exported_model(small):
    model, exported = small
    rebuilt = export.load_torch(exported.meta_path)
    ids = torch.tensor([[1, 2, 3, 0, 4]])
    for a, b in zip(reference(model, ids), reference(rebuilt, ids)):
        np.testing.assert_array_equal(a, b)


def test_notebook_output_is_text_and_the_widget(small):
    _, exported = small
    bundle = exported._repr_mimebundle_()
    assert "tiny.onnx" in bundle["text/plain"]
    widget = bundle[export.MIME_TYPE]
    assert widget == {
        "format": export.FORMAT,
        "name": "tiny",
        "kind": "lm",
        "title": "A tiny GPT",
        "onnx": "tiny.onnx",
        "sha256": exported.meta["sha256"],
        "prompt": "abc",
    }


def test_export_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNBOOK_EXPORT_DIR", str(tmp_path))
    assert export.export_dir() == tmp_path
    monkeypatch.delenv("ATTNBOOK_EXPORT_DIR")
    assert export.export_dir().name == "exported"


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        (dict(name="Bad Name"), "name"),
        (dict(vocab="abc"), "vocab"),
        (dict(vocab="\n abcdefa"), "vocab"),  # a repeated character
        (dict(start="z"), "start"),
        (dict(temperature=-1.0), "temperature"),
        (dict(top_k=0), "top_k"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(head=(2, 0)), "head"),  # the model has 2 layers (0 and 1)
        (dict(head=(0, 3)), "head"),  # of 3 heads
        (dict(head=1), "head"),
    ],
)
def test_bad_arguments_are_named(small, tmp_path, kwargs, argument):
    model, _ = small
    args = dict(name="x", vocab=VOCAB, directory=tmp_path) | kwargs
    with pytest.raises((ValueError, TypeError), match=argument):
        export.to_onnx(model, args.pop("name"), **args)
    assert not list(tmp_path.iterdir()), "nothing is written when an argument is wrong"


def test_the_attention_only_model_exports_and_rebuilds(tmp_path):
    """interpret.AttentionOnly goes through the same export: ONNX Runtime equals PyTorch, load_torch rebuilds it,
    and the page is told which head to show first."""
    torch.manual_seed(0)
    model = interpret.AttentionOnly(interpret.AttentionOnlyConfig(len(VOCAB), 10, n_layers=2, n_heads=2, d_model=16))
    exported = export.to_onnx(model, "copy", vocab=VOCAB, start="a", head=(1, 1), directory=tmp_path)
    meta = export.load_meta(exported.meta_path)
    assert meta["architecture"] == "AttentionOnly" and meta["heatmap"] == {"layer": 1, "head": 1}
    assert interpret.AttentionOnlyConfig(**meta["config"]) == model.config
    session = export.onnx_session(exported.onnx_path)
    rebuilt = export.load_torch(exported.meta_path)
    assert type(rebuilt) is interpret.AttentionOnly
    for T in (1, 6, 10):
        ids = torch.randint(0, len(VOCAB), (1, T), generator=torch.Generator().manual_seed(T))
        logits, weights = export.run_onnx(session, ids)
        ref_logits, ref_weights = reference(model, ids)
        np.testing.assert_allclose(logits, ref_logits, atol=1e-5, rtol=0)
        np.testing.assert_allclose(weights, ref_weights, atol=1e-5, rtol=0)
        for a, b in zip(reference(rebuilt, ids), (ref_logits, ref_weights)):
            np.testing.assert_array_equal(a, b)


def test_the_first_head_is_shown_by_default(small):
    _, exported = small
    assert exported.meta["heatmap"] == {"layer": 0, "head": 0} and exported.meta["architecture"] == "GPT"


def test_load_torch_refuses_an_unknown_architecture(small, tmp_path):
    _, exported = small
    meta = dict(exported.meta, architecture="Mystery")
    path = tmp_path / "mystery.json"
    path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="architecture 'Mystery'"):
        export.load_torch(path)


def test_only_gpt_models():
    with pytest.raises(TypeError, match="model must be an attnbook.models.GPT"):
        export.to_onnx(torch.nn.Linear(2, 2), "x", vocab=VOCAB)


def test_load_meta_refuses_other_json(tmp_path):
    path = tmp_path / "other.json"
    path.write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not the description of an exported model"):
        export.load_meta(path)


def test_prompt_rules():
    p = export.prompt_ids("xxab\u00e9c", VOCAB, block_size=12)
    assert p.text == "abc" and p.ids == [2, 3, 4] and p.dropped == ["x", "\u00e9"] and not p.cropped and not p.empty
    p = export.prompt_ids("", VOCAB, block_size=12)
    assert p.text == "\n" and p.ids == [0] and p.empty
    p = export.prompt_ids("\u00e9\u00e9", VOCAB, block_size=12, start=" ")
    assert p.text == " " and p.empty and p.dropped == ["\u00e9"]
    p = export.prompt_ids("abcdefg", VOCAB, block_size=3)
    assert p.text == "efg" and p.cropped == 4
    with pytest.raises(TypeError, match="text must be a str"):
        export.prompt_ids(None, VOCAB, 3)


@settings(max_examples=min(60, settings.default.max_examples), deadline=None)
@given(st.text(alphabet=VOCAB + "xyz\u00e9\U0001f600", max_size=30), st.integers(1, 12))
def test_prompt_is_always_a_valid_input(text, block_size):
    p = export.prompt_ids(text, VOCAB, block_size)
    kept = "".join(c for c in text if c in VOCAB) or "\n"
    assert 1 <= len(p.ids) <= block_size and all(0 <= i < len(VOCAB) for i in p.ids)
    assert p.text == kept[-block_size:] and "".join(VOCAB[i] for i in p.ids) == p.text
    assert p.cropped == len(kept) - len(p.text) and set(p.dropped) == set(text) - set(VOCAB)


class TwoJobs(torch.nn.Module):
    """Like chapter 07's three-jobs model: embedding + positions, one multi-head attention layer, a read-out per job."""

    def __init__(self, vocab_size=6, d_model=12, n_heads=2, max_len=10):
        super().__init__()
        from attnbook import attention, positional

        self.embed = torch.nn.Embedding(vocab_size, d_model)
        self.positions = positional.SinusoidalPositionalEncoding(d_model, max_len=max_len)
        self.attn = attention.MultiHeadAttention(d_model, n_heads, bias=False)
        self.readout = torch.nn.ModuleDict(
            {"same": torch.nn.Linear(d_model, vocab_size), "kind": torch.nn.Linear(d_model, 2)}
        )

    def forward(self, ids):  # (B, T) -> {job: (B, T, C)}, (B, H, T, T)
        mixed, weights = self.attn(self.positions(self.embed(ids)), return_weights=True)
        return {job: layer(mixed) for job, layer in self.readout.items()}, weights


@pytest.fixture(scope="module")
def tagger(tmp_path_factory):
    torch.manual_seed(1)
    model = TwoJobs().eval()
    exported = export.tagger_to_onnx(
        model,
        "two_jobs",
        vocab="abcdXY",
        jobs={"same": "abcdXY", "kind": "lu"},
        max_len=10,
        prompt="abX",
        directory=tmp_path_factory.mktemp("tagger"),
    )
    return model, exported


@pytest.mark.parametrize("T", [1, 4, 10])
def test_tagger_onnx_runtime_equals_pytorch(tagger, T):
    model, exported = tagger
    ids = torch.randint(0, 6, (1, T), generator=torch.Generator().manual_seed(T))
    same, kind, weights = export.run_onnx(exported.onnx_path, ids)
    with torch.no_grad():
        ref, ref_weights = model(ids)
    np.testing.assert_allclose(same, ref["same"].numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(kind, ref["kind"].numpy(), atol=1e-5, rtol=0)
    assert weights.shape == (1, 1, 2, T, T)
    np.testing.assert_allclose(weights[:, 0], ref_weights.numpy(), atol=1e-5, rtol=0)


def test_tagger_description(tagger):
    _, exported = tagger
    meta = export.load_meta(exported.meta_path)
    assert meta["kind"] == "tagger" and meta["causal"] is False and meta["n_layers"] == 1 and meta["n_heads"] == 2
    assert meta["block_size"] == 10 and meta["start"] == "a" and meta["prompt"] == "abX"
    assert meta["jobs"] == [
        {"name": "same", "labels": "abcdXY", "output": "logits_0"},
        {"name": "kind", "labels": "lu", "output": "logits_1"},
    ]
    assert exported.weights_path is None and not exported.meta_path.with_suffix(".pt").exists()
    assert exported._repr_mimebundle_()[export.MIME_TYPE]["kind"] == "tagger"


@pytest.mark.parametrize(
    "jobs, message",
    [
        ({"same": "abcdXY"}, "jobs"),  # a job missing
        ({"same": "abc", "kind": "lu"}, "has 3 labels"),  # wrong number of labels
        ({}, "jobs must map"),
    ],
)
def test_tagger_checks_its_jobs(tagger, tmp_path, jobs, message):
    model, _ = tagger
    with pytest.raises(ValueError, match=message):
        export.tagger_to_onnx(model, "x", vocab="abcdXY", jobs=jobs, max_len=10, directory=tmp_path)


def test_an_assistant_exports_with_its_template(tmp_path):
    """A chat model's description names the template's three tokens after the characters; ONNX Runtime's
    greedy answer to a turn is chat.answer's, and the model rebuilds; a template that is not three distinct
    names, or a vocabulary that leaves no room for it, is refused."""
    from attnbook import chat, data

    tokenizer = chat.ChatTokenizer(data.CharTokenizer("abcd :"))
    torch.manual_seed(3)
    config = models.TransformerConfig(vocab_size=tokenizer.vocab_size, block_size=16, n_layers=1, n_heads=2, d_model=16)
    model = models.GPT(config).eval()
    with torch.no_grad():  # make <|end|> likely after a few tokens
        model.lm_head.weight[tokenizer.end] *= 3
    out = export.to_onnx(
        model, "assistant", vocab=tokenizer.chars.chars, template=chat.SPECIAL, start=" ", temperature=0.0,
        max_new_tokens=6,
        directory=tmp_path,
    )  # fmt: skip
    meta = export.load_meta(out.meta_path)
    assert meta["kind"] == "chat" and list(meta["template"]) == ["user", "assistant", "end"]
    assert list(meta["template"].values()) == list(chat.SPECIAL) and meta["vocab"] == tokenizer.chars.chars
    session = export.onnx_session(out.onnx_path)
    for prompt in ["ab", "dc a", ""]:
        ids = chat.render(tokenizer, prompt)[0]
        start = len(ids)
        for _ in range(6):  # greedy with ONNX Runtime, until <|end|>
            logits, _ = export.run_onnx(session, ids[-config.block_size :])
            ids.append(int(logits[0, -1].argmax()))
            if ids[-1] == tokenizer.end:
                break
        assert ids[start:] == chat.answer(model, tokenizer, [prompt], max_new_tokens=6, keep_end=True)[0]
    rebuilt = export.load_torch(out.meta_path)
    torch.testing.assert_close(rebuilt.lm_head.weight, model.lm_head.weight)
    with pytest.raises(ValueError, match="template"):
        export.to_onnx(
            model, "x", vocab=tokenizer.chars.chars, template=("<u>", "<u>", "<e>"), start=" ", directory=tmp_path
        )
    with pytest.raises(ValueError, match="vocab"):
        export.to_onnx(model, "x", vocab=tokenizer.chars.chars, start=" ", directory=tmp_path)  # 6 characters, 9 ids
