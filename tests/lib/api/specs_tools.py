"""API property specs: measuring, data, training and export (the harness is in harness.py)."""

import collections
import functools
import hashlib
import json
import math
import os
import pathlib
import random
import re
import unicodedata

import pytest
import torch
import torch.nn.functional as F
from attnbook import attention, blocks, data, export, measure, models, train, train_lm
from harness import (
    FILES,
    Arg,
    Choice,
    Const,
    FilePath,
    FloatList,
    Gen,
    Ids,
    Int,
    IntList,
    IntPair,
    Num,
    Obj,
    Tensor,
    Text,
    Texts,
    _module,
    spec,
)
from specs_models import MODEL_VARIANTS, _config
from torch import nn

# measure --------------------------------------------------------------------------------------------------


def _check_timing(out, args):
    assert isinstance(out, measure.Timing) and len(out.times) == args["repeats"]
    assert all(math.isfinite(t) and t >= 0 for t in out.times)


@spec("measure.time_fn", measure.time_fn, dict(n=(1, 3), r=(1, 3)), check=_check_timing)
def _(s):
    return measure.time_fn, dict(fn=Obj(lambda: torch.ones(s.n).sum()), repeats=Int(s.r), warmup=Int(s.n - 1))


def _matmul(m, k, n):
    """A function that multiplies an (m, k) by a (k, n) matrix: 2 m k n flops, an (m, n) float32 result."""
    a, b = torch.ones(m, k), torch.ones(k, n)
    product = lambda: a @ b  # noqa: E731
    product.flops, product.bytes = 2 * m * k * n, 4 * m * n
    return product


@spec(
    "measure.peak_memory", measure.peak_memory, dict(m=(1, 8), k=(1, 8), n=(1, 8)), reference=lambda call, fn: fn.bytes
)
def _(s):
    return measure.peak_memory, dict(fn=Obj(_matmul(s.m, s.k, s.n)))


@spec("measure.flop_count", measure.flop_count, dict(m=(1, 8), k=(1, 8), n=(1, 8)), reference=lambda call, fn: fn.flops)
def _(s):
    return measure.flop_count, dict(fn=Obj(_matmul(s.m, s.k, s.n)))


@spec("measure.count_operations", measure.count_operations, dict(n=(1, 5)), reference=lambda call, fn: fn.n + 1)
def _(s):
    def ops():
        x = torch.zeros(3)
        for _ in range(s.n):
            x = x + 1  # one operation each
        return x

    ops.n = s.n
    return measure.count_operations, dict(fn=Obj(ops))


@spec(
    "measure.count_parameters",
    measure.count_parameters,
    dict(D=(1, 5), F=(1, 5)),
    reference=lambda call, model: sum(p.numel() for p in model.parameters()),
)
def _(s):
    return measure.count_parameters, dict(model=Obj(blocks.FeedForward(s.D, s.F)))


@spec(
    "measure.fit_power_law",
    measure.fit_power_law,
    dict(n=(2, 6), k=(1, 3)),
    reference=lambda call, x, y: (
        float(torch.tensor(y).log().diff()[0] / torch.tensor(x).log().diff()[0]),
        float(y[0] / x[0] ** (torch.tensor(y).log().diff()[0] / torch.tensor(x).log().diff()[0])),
    ),
)
def _(s):
    x = [2.0**i for i in range(1, s.n + 1)]
    return measure.fit_power_law, dict(x=FloatList(x), y=FloatList([3.0 * v**s.k for v in x]))


@spec(
    "measure.format_bytes",
    measure.format_bytes,
    dict(e=(0, 4)),
    reference=lambda call, n: (
        f"{n / 1024 ** min(3, int(math.log(max(n, 1), 1024))):.1f} "
        f"{['B', 'KiB', 'MiB', 'GiB'][min(3, int(math.log(max(n, 1), 1024)))]}".replace(".0 B", " B")
        if n >= 1024
        else f"{n:.0f} B"
    ),
)
def _(s):
    return measure.format_bytes, dict(n=Num(3.0 * 1024**s.e))


def _gpt_for_counting(s):
    config = models.TransformerConfig(
        vocab_size=11, block_size=8, n_layers=s.L, n_heads=2, d_model=8 * s.D, bias=False, mlp="relu"
    )
    return models.GPT(config)


@spec(
    "measure.transformer_flops",
    measure.transformer_flops,
    dict(L=(1, 3), D=(1, 3), T=(1, 8)),
    half=False,
    reference=lambda call, model, seq_len: measure.TransformerFlops(
        n=12 * model.config.n_layers * model.config.d_model**2,
        n_layers=model.config.n_layers,
        seq_len=seq_len,
        d_attn=model.config.d_model,
        dense=24 * model.config.n_layers * model.config.d_model**2,
        attention=4 * model.config.n_layers * seq_len * model.config.d_model,
        deembedding=2 * model.config.d_model * 11,
    ),
)
def _(s):
    return measure.transformer_flops, dict(model=Obj(_gpt_for_counting(s)), seq_len=Int(s.T))


def _activation_bytes_reference(call, config, batch_size, seq_len, attention, bytes_per_element):
    D, F, H = config.d_model, config.d_ff, config.n_heads
    hidden = 1 if config.mlp == "relu" else 2
    if attention == "explicit":
        return batch_size * seq_len * ((8 * D + hidden * F + 2 * H * seq_len) * bytes_per_element + 16)
    return batch_size * seq_len * ((8 * D + hidden * F) * bytes_per_element + 4 * (H + 4))


@spec(
    "measure.activation_bytes",
    measure.activation_bytes,
    dict(B=(1, 3), T=(1, 6), D=(1, 3), e=(0, 1)),
    half=False,
    reference=_activation_bytes_reference,
)
def _(s):
    config = models.TransformerConfig(vocab_size=11, n_heads=2, d_model=8 * s.D, bias=False, mlp=("relu", "gelu")[s.e])
    return measure.activation_bytes, dict(
        config=Obj(config),
        batch_size=Int(s.B),
        seq_len=Int(s.T),
        attention=Choice(("fused", "explicit")[s.e]),
        bytes_per_element=Int(2 + 2 * s.e),
    )


def _exp_of(n):
    """A function whose graph keeps one tensor of n float32 numbers for the backward pass (exp keeps its output)."""
    x = torch.ones(n, requires_grad=True)
    forward = lambda: torch.exp(x)  # noqa: E731
    forward.bytes = 4 * n
    return forward


@spec(
    "measure.saved_tensor_bytes",
    measure.saved_tensor_bytes,
    dict(n=(1, 16)),
    half=False,
    reference=lambda call, fn, exclude: fn.bytes,
)
def _(s):
    return measure.saved_tensor_bytes, dict(fn=Obj(_exp_of(s.n)), exclude=Const(()))


def _entropy_reference(call, weights, start):
    w = weights[:, :, start:].double()
    return -(w * w.clamp_min(1e-30).log()).sum(-1).mean(dim=(0, 2))


@spec(
    "measure.attention_entropy",
    measure.attention_entropy,
    dict(B=(1, 3), H=(1, 3), T=(2, 6)),
    reference=_entropy_reference,
)
def _(s):
    return measure.attention_entropy, dict(
        weights=Tensor(s.B, s.H, s.T, s.T, seq=2, positive=True, scale=0.3), start=Int(1)
    )


def _garbage_file() -> pathlib.Path:
    """A file of bytes that are neither UTF-8 nor JSON."""
    path = FILES / "garbage.bin"
    path.write_bytes(bytes(range(256)) * 3)
    return path


# data -----------------------------------------------------------------------------------------------------


def _check_fetched(out, args):
    """The path of a file with the dataset's sha256 (the packaged copy: no download)."""
    dataset = data.DATASETS[args["name"]]
    assert out.is_file() and str(out).endswith(dataset.path)
    assert hashlib.sha256(out.read_bytes()).hexdigest() == dataset.sha256 and out.stat().st_size == dataset.size


@spec("data.fetch", data.fetch, dict(which=(0, 1)), check=_check_fetched, half=False, examples=6)
def _(s):
    return data.fetch, dict(name=Choice(sorted(data.DATASETS)[s.which]), download=Const(False), timeout=Num(1.0))


@spec(
    "data.cache_dir",
    data.cache_dir,
    {},
    half=False,
    examples=1,
    reference=lambda call: pathlib.Path(
        os.environ.get("ATTNBOOK_CACHE") or pathlib.Path.home() / ".cache" / "attnbook"
    ),
)
def _(s):
    return data.cache_dir, {}


@spec(
    "data.packaged_dir",
    data.packaged_dir,
    {},
    half=False,
    examples=1,
    reference=lambda call: pathlib.Path(data.__file__).resolve().parent / "data_files",
)
def _(s):
    return data.packaged_dir, {}


@spec(
    "data.sha256_of",
    data.sha256_of,
    {},
    half=False,
    examples=6,
    reference=lambda call, path: hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest(),
)
def _(s):
    return data.sha256_of, dict(path=FilePath(_garbage_file()))


SENTENCE = "Jʼai  vu\u00a0l'homme, n'est-ce pas ? I'm “fine”. Café \u2009!"


def _normalized(call, text):
    """NFC, typographic apostrophes as ', every run of Unicode white space as one space (str.split), trimmed."""
    return " ".join(unicodedata.normalize("NFC", text).replace("\u2019", "'").replace("\u2018", "'").split())


@spec("data.normalize_text", data.normalize_text, dict(n=(0, 40)), reference=_normalized, half=False)
def _(s):
    return data.normalize_text, dict(text=Text(length=s.n, alphabet=SENTENCE + "\u2019\u2018\t\n"))


def _check_tokens(out, args):
    """Nothing lost or invented: the tokens joined are the normalized (lower-cased) text without its spaces;
    every token a run of word characters (with its clitic apostrophe: before it in English, after it in
    French) or one other character; characters for "chars"."""
    text = data.normalize_text(args["text"])
    text = text.lower() if args["lower"] else text
    if args["lang"] == "chars":
        assert out == list(text)
        return
    assert all(isinstance(t, str) and t and not t.isspace() for t in out)
    assert "".join(out) == "".join(text.split())
    for t in out:
        word = t.lstrip("'") if args["lang"] == "en" else t.rstrip("'")
        assert (len(t) == 1 and not t.isalnum() and t != "_") or re.fullmatch(r"\w+", word), t


@spec("data.tokenize", data.tokenize, dict(n=(0, 40), lang=(0, 2), lower=(0, 1)), check=_check_tokens, half=False)
def _(s):
    return data.tokenize, dict(
        text=Text(length=s.n, alphabet=SENTENCE), lang=Choice(["en", "fr", "chars"][s.lang]), lower=Const(bool(s.lower))
    )


@spec(
    "data.detokenize",
    data.detokenize,
    dict(n=(0, 40), lang=(0, 2)),
    half=False,
    reference=lambda call, tokens, lang: tokens,
)
def _(s):
    lang = ["en", "fr", "chars"][s.lang]
    text = "".join(SENTENCE[(i * 7 + s.n) % len(SENTENCE)] for i in range(s.n))
    return (lambda tokens, lang: data.tokenize(data.detokenize(tokens, lang), lang)), dict(
        tokens=Texts(data.tokenize(text, lang), corruptions=("one str", "numbers", "nested")), lang=Choice(lang)
    )


def _vocab_of(tokens, ids):
    """The vocabulary built from tokens, then the encoding of tokens and the decoding of ids."""
    vocab = data.Vocab(tokens)
    return vocab.itos, vocab.encode(tokens + ["never seen"]), vocab.decode(ids)


def _vocab_reference(call, tokens, ids):
    """<pad> <unk> <bos> <eos>, then each new token in order; unknown tokens -> 1; decoding up to <eos>, without
    <pad> and <bos>."""
    itos = ["<pad>", "<unk>", "<bos>", "<eos>"] + [
        t for t in dict.fromkeys(tokens) if t not in ("<pad>", "<unk>", "<bos>", "<eos>")
    ]
    ids = list(ids)
    ids = ids[: ids.index(3)] if 3 in ids else ids
    return (
        itos,
        [itos.index(t) if t in itos else 1 for t in tokens + ["never seen"]],
        [itos[i] for i in ids if i not in (0, 2)],
    )


@spec("data.Vocab", data.Vocab, dict(n=(0, 8), m=(0, 6)), reference=_vocab_reference, half=False)
def _(s):
    words = ["le", "chat", "<eos>", "est", "le", "noir"][: s.n] + ["un"] * (s.n > 6)
    return _vocab_of, dict(
        tokens=Texts(words, corruptions=("one str", "numbers", "nested")),
        ids=IntList([(i * 3) % len(data.Vocab(words)) for i in range(s.m)], high=3),
    )


def _built(sequences, min_freq):
    return data.Vocab.build(sequences, min_freq=min_freq).itos


def _built_reference(call, sequences, min_freq):
    counts = collections.Counter(t for seq in sequences for t in seq)
    kept = sorted((t for t in counts if counts[t] >= min_freq), key=lambda t: (-counts[t], t))
    return ["<pad>", "<unk>", "<bos>", "<eos>"] + [t for t in kept if t not in ("<pad>", "<unk>", "<bos>", "<eos>")]


class Sentences(Arg):
    """Tokenized sentences (lists of str); changed, sentences as plain strings, numbers among the tokens, none."""

    corruptions = ("strings", "numbers", "one list")

    def __init__(self, sentences):
        self.sentences = [list(x) for x in sentences]

    def make(self, g):
        return [list(x) for x in self.sentences]

    def corrupt(self, v, how, g):
        return {"strings": [" ".join(x) for x in v], "numbers": [[1, 2]] + v, "one list": [t for x in v for t in x]}[
            how
        ]


@spec("data.Vocab.build", data.Vocab.build, dict(n=(0, 5), f=(1, 3)), reference=_built_reference, half=False)
def _(s):
    sentences = [["le", "chat"], ["le", "chien", "<pad>"], ["un", "chat"], ["le"], ["a", "b"]][: s.n]
    return _built, dict(sequences=Sentences(sentences), min_freq=Int(s.f))


def _check_pairs_file(out, args):
    """Every non-empty line of the file as a pair, in order, with its attribution."""
    lines = [line for line in pathlib.Path(args["path"]).read_text(encoding="utf-8").splitlines() if line.strip()]
    assert [(p.source, p.target, p.attribution) for p in out] == [
        tuple((line.split("\t") + [""])[:3]) for line in lines
    ]


@spec("data.load_eng_fra", data.load_eng_fra, {}, check=_check_pairs_file, half=False, examples=6)
def _(s):
    path = FILES / "pairs.txt"
    path.write_text("Go.\tVa !\tCC-BY 2.0 (France) Attribution: tatoeba.org\n\nHi.\tSalut.\n", encoding="utf-8")
    bad = FILES / "pairs-bad.txt"
    bad.write_text("Go.\tVa !\none field only\n", encoding="utf-8")
    return data.load_eng_fra, dict(path=FilePath(path, wrong=bad))


def _check_split(out, args):
    """A partition of the pairs, no source sentence (normalized, lower case) on both sides, the test side
    max(1, round(test_fraction x distinct sources)) of them."""
    train_set, test_set = out
    key = lambda p: data.normalize_text(p.source if isinstance(p, data.SentencePair) else p[0]).lower()  # noqa: E731
    assert sorted(map(repr, train_set + test_set)) == sorted(map(repr, args["pairs"]))
    assert not {key(p) for p in train_set} & {key(p) for p in test_set}
    sources = {key(p) for p in args["pairs"]}
    assert len({key(p) for p in test_set}) == (max(1, round(args["test_fraction"] * len(sources))) if sources else 0)


class PairList(Arg):
    """Sentence pairs (SentencePair or (source, target) tuples); changed, strings, or pairs of numbers."""

    corruptions = ("strings", "numbers")

    def __init__(self, pairs):
        self.pairs = list(pairs)

    def make(self, g):
        return list(self.pairs)

    def corrupt(self, v, how, g):
        return ["Go."] + v if how == "strings" else [(1, 2)] + v


@spec(
    "data.split_by_source",
    data.split_by_source,
    dict(n=(0, 8), f=(1, 8), tuples=(0, 1)),
    check=_check_split,
    half=False,
)
def _(s):
    sources = ["Go.", "go.", "Hi.", "Run!", "Wow!", "Hi.", "Fire!", "Help!"][: s.n]
    pairs = [(x, f"fr {i}") if s.tuples else data.SentencePair(x, f"fr {i}") for i, x in enumerate(sources)]
    return data.split_by_source, dict(pairs=PairList(pairs), test_fraction=Num(s.f / 10), seed=Int(s.n))


def _check_digit_pairs(out, args):
    """n pairs of digit strings of min_len..max_len digits, each target the task's transformation of its source."""
    transform = {
        "copy": lambda x: x,
        "reverse": lambda x: x[::-1],
        "add1": lambda x: "".join("1234567890"[int(c)] for c in x),
    }[args["task"]]
    assert len(out) == args["n"]
    for source, target in out:
        assert source.isdigit() and args["min_len"] <= len(source) <= args["max_len"] and target == transform(source)


@spec(
    "data.digit_pairs",
    data.digit_pairs,
    dict(n=(0, 5), lo=(1, 4), more=(0, 3), task=(0, 2)),
    check=_check_digit_pairs,
    half=False,
)
def _(s):
    return data.digit_pairs, dict(
        n=Int(s.n),
        min_len=Int(s.lo),
        max_len=Int(s.lo + s.more),
        task=Choice(["copy", "reverse", "add1"][s.task]),
        seed=Int(s.lo),
    )


def _check_date_pairs(out, args):
    """n pairs: a date written in one of the formats, and the same date in ISO form, within the years."""
    import datetime

    patterns = {"long": "%B %d, %Y", "day_first": "%d %B %Y", "numeric": "%d.%m.%Y"}
    assert len(out) == args["n"]
    for source, target in out:
        day = datetime.date.fromisoformat(target)
        assert args["years"][0] <= day.year <= args["years"][1]
        assert any(
            datetime.datetime.strptime(source, patterns[f]).date() == day
            for f in args["formats"]
            if _parses(source, patterns[f])
        )


def _parses(text, pattern):
    import datetime

    try:
        datetime.datetime.strptime(text, pattern)
        return True
    except ValueError:
        return False


@spec(
    "data.date_pairs",
    data.date_pairs,
    dict(n=(0, 5), formats=(1, 3), y=(1900, 2000), span=(0, 50)),
    check=_check_date_pairs,
    half=False,
)
def _(s):
    formats = ["long", "day_first", "numeric"][: s.formats]
    return data.date_pairs, dict(
        n=Int(s.n),
        formats=Texts(formats, corruptions=("one str", "numbers", "empty")),
        years=IntPair(s.y, s.y + s.span),
        seed=Int(s.span),
    )


@spec(
    "data.CharTokenizer",
    data.CharTokenizer,
    dict(n=(1, 20)),
    half=False,
    reference=lambda call, text: "".join(sorted(set(text))),
)
def _(s):
    text = "".join(SENTENCE[(i * 7 + s.n) % len(SENTENCE)] for i in range(s.n))
    return (lambda text: data.CharTokenizer.from_text(text).chars), dict(
        text=Text(text, corruptions=("bytes", "number", "list", "none", "empty"))
    )


CHARS = data.CharTokenizer(SENTENCE)


@spec(
    "data.CharTokenizer.encode",
    data.CharTokenizer.encode,
    dict(n=(0, 20)),
    half=False,
    reference=lambda call, text: torch.tensor([CHARS.chars.index(c) for c in text], dtype=torch.long),
)
def _(s):
    return CHARS.encode, dict(text=Text(length=s.n, alphabet=SENTENCE, corruptions=("bytes", "number", "unknown")))


@spec(
    "data.CharTokenizer.decode",
    data.CharTokenizer.decode,
    dict(n=(0, 20), as_list=(0, 1)),
    half=False,
    reference=lambda call, ids: "".join(CHARS.chars[i] for i in ids),
)
def _(s):
    V = len(CHARS)
    ids = [(i * 5 + s.n) % V for i in range(s.n)]
    return CHARS.decode, dict(ids=IntList(ids, high=V - 1) if s.as_list else Ids(s.n, vocab=V, seq=0, batch=None))


def _check_shakespeare(out, args):
    """Its 65 characters; the training ids then the validation ids are the whole text, cut at (1 - val_fraction)."""
    text = data.fetch("tinyshakespeare").read_text(encoding="utf-8")
    assert out.tokenizer.chars == "".join(sorted(set(text))) and len(out.tokenizer.chars) == 65
    n_train = int(len(text) * (1 - args["val_fraction"]))
    assert len(out.train) == n_train and len(out.val) == len(text) - n_train
    assert out.tokenizer.decode(out.train[:200]) == text[:200] and out.tokenizer.decode(out.val[-200:]) == text[-200:]


@spec("data.load_shakespeare", data.load_shakespeare, {}, check=_check_shakespeare, half=False, examples=3)
def _(s):
    return data.load_shakespeare, dict(val_fraction=Num(0.1), download=Const(False))


def _check_windows(out, args):
    """batch_size windows of block_size ids of the sequence, each target window the same one shifted by one."""
    x, y = out
    ids, B, T = args["ids"], args["batch_size"], args["block_size"]
    assert x.shape == y.shape == (B, T) and x.dtype == y.dtype == ids.dtype
    for row_x, row_y in zip(x, y):
        starts = [
            i
            for i in range(len(ids) - T)
            if torch.equal(ids[i : i + T], row_x) and torch.equal(ids[i + 1 : i + T + 1], row_y)
        ]
        assert starts, (row_x, row_y)


@spec("data.lm_batch", data.lm_batch, dict(N=(2, 12), B=(1, 3), T=(1, 4)), check=_check_windows, half=False)
def _(s):
    return data.lm_batch, dict(
        ids=Ids(max(s.N, s.T + 1), vocab=5, seq=0, batch=None),
        batch_size=Int(s.B),
        block_size=Int(s.T),
        generator=Gen(),
    )


def _check_adding(out, args):
    """n sequences (length, 2): values in [0, 1), exactly one marker in each half; targets the marked sums."""
    x, y = out
    n, T = args["n"], args["length"]
    assert x.shape == (n, T, 2) and y.shape == (n,)
    values, markers = x[..., 0], x[..., 1]
    assert ((values >= 0) & (values < 1)).all() and set(markers.unique().tolist()) <= {0.0, 1.0}
    assert (markers[:, : T // 2].sum(1) == 1).all() and (markers[:, T // 2 :].sum(1) == 1).all()
    torch.testing.assert_close(y.double(), (values.double() * markers.double()).sum(1), atol=1e-6, rtol=0)


@spec("data.adding_problem", data.adding_problem, dict(n=(1, 4), T=(2, 8)), check=_check_adding, half=False)
def _(s):
    return data.adding_problem, dict(n=Int(s.n), length=Int(s.T), generator=Gen())


def _check_digits(out, args):
    """scikit-learn's 1,797 digits / 16, split stratified: every image of the set once, each class in both halves
    in proportion."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.cat([out.x_train, out.x_test])  # (N, 1, 8, 8)
    assert images.shape == (1797, 1, 8, 8) and out.classes == tuple(map(str, range(10)))
    expected = sorted(map(tuple, (torch.tensor(digits.images, dtype=torch.float32) / 16).reshape(-1, 64).tolist()))
    assert sorted(map(tuple, images.reshape(-1, 64).tolist())) == expected
    share = torch.bincount(out.y_test, minlength=10) / torch.bincount(torch.cat([out.y_train, out.y_test]))
    assert (share - args["test_fraction"]).abs().max() < 0.05


@spec("data.load_digits", data.load_digits, dict(f=(1, 5), seed=(0, 3)), check=_check_digits, half=False, examples=3)
def _(s):
    return data.load_digits, dict(test_fraction=Num(s.f / 10), seed=Int(s.seed))


def _check_subset(out, args):
    """n distinct indices, as many of each class as the classes allow (counts differ by at most one among the
    classes not used up); nested: the first n of a larger subset."""
    labels, n = args["labels"], args["n"]
    assert out.dtype == torch.long and out.shape == (n,) and len(set(out.tolist())) == n
    counts = collections.Counter(labels[out].tolist())
    sizes = collections.Counter(labels.tolist())
    open_classes = [c for c in sizes if counts[c] < sizes[c]]
    assert all(counts[c] >= max(counts.values(), default=0) - 1 for c in open_classes)
    if n < len(labels):
        assert torch.equal(data.balanced_subset(labels, n + 1, seed=args["seed"])[:n], out)


@spec(
    "data.balanced_subset", data.balanced_subset, dict(N=(1, 10), C=(1, 4), n=(1, 10)), check=_check_subset, half=False
)
def _(s):
    return data.balanced_subset, dict(
        labels=Ids(s.N, vocab=s.C, seq=0, batch=None), n=Int(min(s.n, s.N)), seed=Int(s.C)
    )


# train ----------------------------------------------------------------------------------------------------


def _seeded_draws(seed):
    """What the generators give after seed_everything(seed): Python's, NumPy's and PyTorch's next draws."""
    import numpy as np

    out = train.seed_everything(seed)
    return out, random.random(), float(np.random.rand()), torch.rand(2, dtype=torch.float64)


def _seeded_reference(call, seed):
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return seed, random.random(), float(np.random.rand()), torch.rand(2, dtype=torch.float64)


@spec(
    "train.seed_everything",
    train.seed_everything,
    dict(seed=(0, 99)),
    reference=_seeded_reference,
    half=False,
    examples=8,
)
def _(s):
    return _seeded_draws, dict(seed=Int(s.seed))


@spec(
    "train.pick_device",
    train.pick_device,
    {},
    reference=lambda call, prefer: torch.device("cpu"),
    half=False,
    examples=4,
)
def _(s):
    return train.pick_device, dict(prefer=Choice("cpu"))


@spec(
    "train.progress",
    train.progress,
    dict(n=(0, 5)),
    half=False,
    examples=8,
    reference=lambda call, iterable, total, desc, disable: list(iterable),
)
def _(s):
    return (
        lambda iterable, total, desc, disable: list(train.progress(iterable, total=total, desc=desc, disable=disable))
    ), dict(iterable=Const(range(s.n)), total=Int(max(s.n, 1)), desc=Text("steps"), disable=Const(True))


def _smoothed(loss, window):
    return train.History(loss=list(loss)).smoothed_loss(window)


def _trailing_means(call, loss, window):
    import numpy as np

    x = np.asarray(loss, dtype=np.float64)
    return [float(x[max(0, i - window + 1) : i + 1].mean()) for i in range(len(x))]


@spec("train.History", train.History, dict(n=(0, 8), w=(1, 4)), reference=_trailing_means, half=False)
def _(s):
    return _smoothed, dict(loss=FloatList([float((3 * i) % 5) for i in range(s.n)]), window=Int(s.w))


def _check_fit(out, args):
    """steps finite losses, the learning rates of the schedule, an evaluation every eval_every steps and at the end."""
    steps, lr, every = args["steps"], args["lr"], args["eval_every"]
    assert isinstance(out, train.History) and out.step == list(range(steps)) and not out.diverged
    assert len(out.loss) == steps and all(map(math.isfinite, out.loss))
    assert out.lr == pytest.approx([lr * (0.5**i) for i in range(steps)])
    assert out.eval_step == [s for s in range(1, steps) if every and s % every == 0] + [steps]
    assert all(map(math.isfinite, out.evals["mse"]))


@spec("train.fit", train.fit, dict(steps=(1, 4), every=(0, 2), clip=(0, 1)), check=_check_fit, half=False)
def _(s):
    torch.manual_seed(0)
    x, y = torch.randn(8, 2), torch.randn(8, 1)
    return train.fit, dict(
        model=Obj(nn.Linear(2, 1)),
        batches=Const(lambda step: (x, y)),
        loss_fn=Obj(lambda model, batch: F.mse_loss(model(batch[0]), batch[1])),
        steps=Int(s.steps),
        lr=Num(0.01),
        schedule=Obj(lambda step: 0.5**step),
        grad_clip=Num(1.0) if s.clip else Const(None),
        evaluate=Obj(lambda model: {"mse": float(F.mse_loss(model(x), y))}),
        eval_every=Int(s.every),
        quiet=Const(True),
    )


@spec(
    "train.inverse_sqrt_schedule",
    train.inverse_sqrt_schedule,
    dict(d=(1, 64), w=(1, 6), n=(1, 12)),
    half=False,
    reference=lambda call, d_model, warmup_steps, n: [
        d_model**-0.5 * min((k + 1) ** -0.5, (k + 1) * warmup_steps**-1.5) for k in range(n)
    ],
)
def _(s):
    return (
        lambda d_model, warmup_steps, n: list(map(train.inverse_sqrt_schedule(d_model, warmup_steps), range(n)))
    ), dict(d_model=Int(s.d), warmup_steps=Int(s.w), n=Const(s.n))


def _cosine_reference(call, total_steps, warmup_steps, min_factor, n):
    def factor(k):
        if k < warmup_steps:
            return (k + 1) / (warmup_steps + 1)
        progress = min(1.0, (k - warmup_steps) / (total_steps - warmup_steps))
        return min_factor + (1 - min_factor) * (1 + math.cos(math.pi * progress)) / 2

    return [factor(k) for k in range(n)]


@spec(
    "train.cosine_schedule",
    train.cosine_schedule,
    dict(total=(2, 10), w=(0, 4), m=(0, 5), n=(1, 14)),
    reference=_cosine_reference,
    half=False,
)
def _(s):
    return (
        lambda total_steps, warmup_steps, min_factor, n: list(
            map(train.cosine_schedule(total_steps, warmup_steps=warmup_steps, min_factor=min_factor), range(n))
        )
    ), dict(total_steps=Int(s.total), warmup_steps=Int(min(s.w, s.total - 1)), min_factor=Num(s.m / 5), n=Const(s.n))


# train_lm -------------------------------------------------------------------------------------------------

TINY_RUN = dict(n_layers=1, n_heads=2, d_model=8, block_size=8, batch_size=2, steps=3, warmup_steps=1)


def _check_train_config(out, args):
    """The fields as given; the model's configuration from them."""
    assert isinstance(out, train_lm.TrainConfig)
    assert all(getattr(out, k) == v for k, v in args.items())
    model = out.model_config(65)
    assert (model.n_layers, model.d_model, model.block_size, model.mlp) == (
        out.n_layers,
        out.d_model,
        out.block_size,
        out.mlp,
    )


@spec(
    "train_lm.TrainConfig",
    train_lm.TrainConfig,
    dict(L=(1, 3), H=(1, 3), Dh=(1, 3), steps=(2, 9), w=(0, 1), mlp=(0, 1)),
    check=_check_train_config,
    half=False,
)
def _(s):
    return train_lm.TrainConfig, dict(
        n_layers=Int(s.L),
        n_heads=Int(s.H),
        d_model=Int(s.H * s.Dh),
        block_size=Int(8),
        steps=Int(s.steps),
        warmup_steps=Int(s.w),
        lr=Num(1e-3),
        dropout=Num(0.1),
        val_fraction=Num(0.1),
        beta2=Num(0.99),
        mlp=Choice(["gelu", "relu"][s.mlp]),
    )


@spec(
    "train_lm.scaling_lr",
    train_lm.scaling_lr,
    dict(D=(1, 128)),
    half=False,
    reference=lambda call, d_model: 0.03 * (16 / d_model) ** 0.75,
)
def _(s):
    return train_lm.scaling_lr, dict(d_model=Int(s.D))


def _check_scaling_recipe(out, args):
    """The shape and seed as given; steps from the token budget; warmup 5% (at least 5); the width's learning rate."""
    assert isinstance(out, train_lm.TrainConfig)
    steps = args["tokens"] // (args["batch_size"] * args["block_size"])
    assert (out.n_layers, out.d_model, out.n_heads, out.seed) == (
        args["n_layers"],
        args["d_model"],
        args["n_heads"],
        args["seed"],
    )
    assert (out.steps, out.warmup_steps, out.batch_size, out.block_size) == (
        steps,
        max(5, steps // 20),
        args["batch_size"],
        args["block_size"],
    )
    assert out.lr == train_lm.scaling_lr(args["d_model"]) and out.min_lr_factor == 0.1


@spec(
    "train_lm.scaling_recipe",
    train_lm.scaling_recipe,
    dict(L=(1, 4), H=(1, 3), Dh=(4, 16), k=(10, 400), B=(1, 16), T=(1, 64), seed=(0, 3)),
    check=_check_scaling_recipe,
    half=False,
)
def _(s):
    return train_lm.scaling_recipe, dict(
        n_layers=Int(s.L),
        d_model=Int(s.H * s.Dh),
        n_heads=Int(s.H),
        tokens=Int(s.k * s.B * s.T),
        seed=Int(s.seed, corruptions=("negative", "float", "str")),
        batch_size=Int(s.B),
        block_size=Int(s.T),
    )


def _check_optimizer(out, args):
    """AdamW: weight decay on the matrices (dim >= 2) only, every trainable parameter once, the config's settings."""
    model, config = args["model"], args["config"]
    assert isinstance(out, torch.optim.AdamW)
    decay, no_decay = out.param_groups
    params = {id(p): p for p in model.parameters() if p.requires_grad}
    assert {id(p) for p in decay["params"]} == {i for i, p in params.items() if p.dim() >= 2}
    assert {id(p) for p in no_decay["params"]} == {i for i, p in params.items() if p.dim() < 2}
    assert decay["weight_decay"] == config.weight_decay and no_decay["weight_decay"] == 0.0
    assert all(g["lr"] == config.lr and g["betas"] == (config.beta1, config.beta2) for g in out.param_groups)


@spec(
    "train_lm.make_optimizer",
    train_lm.make_optimizer,
    dict(variant=(0, 2)),
    check=_check_optimizer,
    half=False,
    examples=6,
)
def _(s):
    model = models.GPT(_config(**MODEL_VARIANTS[s.variant]))
    return train_lm.make_optimizer, dict(model=Obj(model), config=Obj(train_lm.TrainConfig(**TINY_RUN)))


@functools.cache
def _checkpoint() -> pathlib.Path:
    """The checkpoint of a tiny run before its first step (the trainer reads Tiny Shakespeare: made once)."""
    path = FILES / "ckpt.pt"
    train_lm.Trainer(train_lm.TrainConfig(**TINY_RUN), device="cpu").save(path)
    return path


def _wrong_checkpoint() -> pathlib.Path:
    path = FILES / "not-a-checkpoint.pt"
    torch.save({"format": "something else"}, path)
    return path


@spec(
    "train_lm.load_checkpoint",
    train_lm.load_checkpoint,
    {},
    half=False,
    examples=6,
    reference=lambda call, path, map_location: torch.load(path, map_location=map_location, weights_only=True),
)
def _(s):
    return train_lm.load_checkpoint, dict(
        path=FilePath(_checkpoint(), wrong=_wrong_checkpoint()), map_location=Const("cpu")
    )


def _loaded_model(path, device):
    """The rebuilt model's logits on a few ids, and its characters."""
    model, tokenizer = train_lm.load_model(path, device=device)
    return model(torch.tensor([[0, 5, 9, 1]])), tokenizer.chars


def _loaded_reference(call, path, device):
    """A GPT of the saved configuration with the saved weights (float64), and the saved characters."""
    ckpt = torch.load(path, weights_only=True)
    model = models.GPT(models.TransformerConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    return model.double().eval()(torch.tensor([[0, 5, 9, 1]])), ckpt["chars"]


@spec("train_lm.load_model", train_lm.load_model, {}, reference=_loaded_reference, half=False, examples=6)
def _(s):
    return _loaded_model, dict(path=FilePath(_checkpoint(), wrong=_wrong_checkpoint()), device=Const("cpu"))


# export ---------------------------------------------------------------------------------------------------

EXPORT_VOCAB = "\nabcdefgh"


@spec(
    "export.export_dir",
    export.export_dir,
    {},
    half=False,
    examples=1,
    reference=lambda call: pathlib.Path(os.environ.get("ATTNBOOK_EXPORT_DIR") or "exported"),
)
def _(s):
    return export.export_dir, {}


@functools.cache
def _tiny_gpt():
    return _module(lambda: models.GPT(_config(vocab_size=len(EXPORT_VOCAB))))


def _check_exported(out, args):
    """The ONNX model run by onnxruntime gives the PyTorch model's logits and weights; the description says so."""
    import numpy as np

    model = args["model"]
    ids = torch.tensor([[1, 2, 0, 3]])
    with torch.no_grad():
        logits, weights = model.eval()(ids, return_weights=True)
    got = export.run_onnx(out.onnx_path, ids)
    np.testing.assert_allclose(got[0], logits.numpy(), atol=1e-5)
    np.testing.assert_allclose(got[1], torch.stack(weights, 1).numpy(), atol=1e-5)
    assert out.meta == export.load_meta(out.meta_path) and out.meta["vocab"] == args["vocab"]


WRONG_TEXT = ("bytes", "number", "none")


@spec(
    "export.to_onnx",
    export.to_onnx,
    {},
    check=_check_exported,
    half=False,
    examples=5,
    valid_call_in="tests/lib/test_export.py (an export takes seconds)",
)
def _(s):
    return export.to_onnx, dict(
        model=Obj(_tiny_gpt()),
        name=Text("tiny", corruptions=("number", "unknown", "empty")),
        vocab=Text(EXPORT_VOCAB, corruptions=("number", "list", "empty")),
        title=Text("A tiny GPT", corruptions=WRONG_TEXT),
        prompt=Text("ab", corruptions=WRONG_TEXT),
        start=Text("\n", corruptions=("number", "empty", "unknown")),
        temperature=Num(0.8, corruptions=("negative", "not a number", "infinite", "str")),
        top_k=Int(3),
        max_new_tokens=Int(20),
        head=IntPair(0, 1),
        directory=Const(FILES / "exported"),
        opset=Int(18),
    )


class Tagger(nn.Module):
    """Chapter 07's kind of model: per position, logits for each job, and one attention layer's weights."""

    def __init__(self, V: int, jobs: dict[str, int]):
        super().__init__()
        self.embed = nn.Embedding(V, 8)
        self.attention = attention.MultiHeadAttention(8, 2)
        self.heads = nn.ModuleDict({job: nn.Linear(8, n) for job, n in jobs.items()})

    def forward(self, ids):
        h, weights = self.attention(self.embed(ids), return_weights=True)  # (1, T, 8), (1, H, T, T)
        return {job: head(h) for job, head in self.heads.items()}, weights


class Jobs(Arg):
    """The jobs of a tagger {job: its labels as a string}; changed, no job, a job unknown to the model, labels of
    the wrong count, a list."""

    corruptions = ("none", "unknown job", "wrong count", "list")

    def __init__(self, jobs):
        self.jobs = dict(jobs)

    def make(self, g):
        return dict(self.jobs)

    def corrupt(self, v, how, g):
        first = next(iter(v))
        return {
            "none": {},
            "unknown job": {**v, "other": "xy"},
            "wrong count": {**v, first: v[first] + "z"},
            "list": list(v.values()),
        }[how]


def _check_tagged(out, args):
    """onnxruntime's outputs equal the tagger's logits for each job and its weights."""
    import numpy as np

    model, jobs = args["model"], args["jobs"]
    ids = torch.tensor([[1, 2, 0]])
    with torch.no_grad():
        logits, weights = model.eval()(ids)
    got = export.run_onnx(out.onnx_path, ids)
    for i, job in enumerate(jobs):
        np.testing.assert_allclose(got[i], logits[job].numpy(), atol=1e-5)
    np.testing.assert_allclose(got[-1], weights.unsqueeze(1).numpy(), atol=1e-5)


@spec(
    "export.tagger_to_onnx",
    export.tagger_to_onnx,
    {},
    check=_check_tagged,
    half=False,
    examples=5,
    valid_call_in="tests/lib/test_export.py (an export takes seconds)",
)
def _(s):
    jobs = {"vowel": "nv", "case": "lus"}
    return export.tagger_to_onnx, dict(
        model=Obj(_module(lambda: Tagger(len(EXPORT_VOCAB), {j: len(l) for j, l in jobs.items()}))),
        name=Text("tagger", corruptions=("number", "unknown", "empty")),
        vocab=Text(EXPORT_VOCAB, corruptions=("number", "list", "empty")),
        jobs=Jobs(jobs),
        max_len=Int(6),
        title=Text("Tags", corruptions=WRONG_TEXT),
        directory=Const(FILES / "exported"),
        opset=Int(18),
    )


@functools.cache
def _described() -> pathlib.Path:
    """A description NAME.json and weights NAME.pt as to_onnx writes them (without the seconds of the ONNX export)."""
    model = _tiny_gpt()
    meta = {
        "format": export.FORMAT,
        "name": "tiny",
        "onnx": "tiny.onnx",
        "vocab": EXPORT_VOCAB,
        "config": model.config.to_dict(),
    }
    path = FILES / "tiny.json"
    path.write_text(json.dumps(meta), encoding="utf-8")
    torch.save(model.state_dict(), FILES / "tiny.pt")
    return path


def _other_json() -> pathlib.Path:
    path = FILES / "other.json"
    path.write_text(json.dumps({"format": "something else"}), encoding="utf-8")
    return path


@spec(
    "export.load_meta",
    export.load_meta,
    {},
    half=False,
    examples=6,
    reference=lambda call, path: json.loads(pathlib.Path(path).read_text(encoding="utf-8")),
)
def _(s):
    return export.load_meta, dict(path=FilePath(_described(), wrong=_other_json()))


@spec(
    "export.load_torch",
    export.load_torch,
    {},
    half=False,
    examples=6,
    reference=lambda call, meta_path: _tiny_gpt().double()(torch.tensor([[1, 2, 0, 3]])),
)
def _(s):
    return (lambda meta_path: export.load_torch(meta_path)(torch.tensor([[1, 2, 0, 3]]))), dict(
        meta_path=FilePath(_described(), wrong=_other_json())
    )


ONNX_TABLE = torch.randn(9, 5, generator=torch.Generator().manual_seed(0))  # (V, C)


@functools.cache
def _onnx_file() -> pathlib.Path:
    """A small ONNX model written with onnx.helper: ids (1, T) -> logits = table[ids] (1, T, 5), and their squares."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids"], ["logits"]),
            helper.make_node("Mul", ["logits", "logits"], ["weights"]),
        ],
        "lookup",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "T"])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, "T", 5]) for n in ("logits", "weights")],
        [numpy_helper.from_array(ONNX_TABLE.numpy(), "table")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    path = FILES / "lookup.onnx"
    onnx.save(model, str(path))
    return path


@spec(
    "export.onnx_session",
    export.onnx_session,
    {},
    half=False,
    examples=6,
    reference=lambda call, path: (["ids"], ["logits", "weights"]),
)
def _(s):
    return (
        lambda path: (
            [i.name for i in export.onnx_session(path).get_inputs()],
            [o.name for o in export.onnx_session(path).get_outputs()],
        )
    ), dict(path=FilePath(_onnx_file(), wrong=_garbage_file()))


def _lookup_reference(call, session, ids):
    ids = torch.as_tensor(ids).reshape(1, -1)
    table = ONNX_TABLE.double()
    return table[ids], table[ids] ** 2


@spec("export.run_onnx", export.run_onnx, dict(T=(1, 5), flat=(0, 1)), half=False, reference=_lookup_reference)
def _(s):
    session = export.onnx_session(_onnx_file())
    return (lambda session, ids: tuple(torch.from_numpy(x) for x in export.run_onnx(session, ids))), dict(
        session=Obj(session),
        ids=Ids(s.T, vocab=9, seq=0, batch=None, list_ok=True)
        if s.flat
        else Ids(1, s.T, vocab=9, batch=None, list_ok=True),
    )


def _prompt_reference(call, text, vocab, block_size, start):
    """Characters of vocab kept, others listed once; start for nothing kept; the last block_size characters."""
    kept = [c for c in text if c in vocab]
    dropped = list(dict.fromkeys(c for c in text if c not in vocab))
    chosen = kept or list(start)
    return export.Prompt(
        [vocab.index(c) for c in chosen[-block_size:]],
        "".join(chosen[-block_size:]),
        dropped,
        max(0, len(chosen) - block_size),
        not kept,
    )


@spec("export.prompt_ids", export.prompt_ids, dict(n=(0, 12), block=(1, 6)), reference=_prompt_reference, half=False)
def _(s):
    return export.prompt_ids, dict(
        text=Text(length=s.n, alphabet=EXPORT_VOCAB + "XY"),
        vocab=Text(EXPORT_VOCAB, corruptions=("number", "list", "empty")),
        block_size=Int(s.block),
        start=Text("\n", corruptions=("number", "empty", "unknown")),
    )
