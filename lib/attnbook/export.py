"""The model in the page: export a trained model to ONNX, with every head's attention weights.

:func:`to_onnx` exports a language model (``GPT``, or the attention-only model of ``interpret``), or
an instruction-tuned one with its chat template; :func:`tagger_to_onnx` a model that labels every position
for several jobs. Each writes into a folder (``ATTNBOOK_EXPORT_DIR``, else ``./exported``):

- ``NAME.onnx``: the model, input ``ids`` (1, T) for any 1 <= T <= block_size, outputs ``logits``
  (1, T, V) and ``weights`` (1, n_layers, H, T, T), the attention weights of every layer and head;
- ``NAME.json``: what a program needs to use it (vocabulary, context, the empty-prompt rule, sampling
  defaults, the model's configuration), so that nothing is written twice by hand;
- ``NAME.pt`` (language models): the PyTorch weights, to rebuild the model with :func:`load_torch`.

The HTML book runs ``NAME.onnx`` in the reader's browser with onnxruntime-web; in Python,
:func:`run_onnx` runs it with onnxruntime. :func:`prompt_ids` is the rule that turns typed text into
the model's input, the same in the page and here.

Shapes:
    ids:     (1, T), 1 <= T <= block_size
    logits:  (1, T, V)
    weights: (1, n_layers, H, T, T)

Chapter: the lab (12: the model in the page); multi-head attention (07: the three-jobs model); what
attention learns (16: the induction heads); from a model of text to an assistant (17: the assistant).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from . import _checks
from .interpret import AttentionOnly, AttentionOnlyConfig
from .measure import format_bytes
from .models import GPT, TransformerConfig

__all__ = [
    "FORMAT",
    "MIME_TYPE",
    "Exported",
    "Prompt",
    "export_dir",
    "to_onnx",
    "tagger_to_onnx",
    "load_meta",
    "load_torch",
    "onnx_session",
    "run_onnx",
    "prompt_ids",
]

FORMAT = "attnbook.inpage/1"
MIME_TYPE = "application/vnd.attnbook.inpage+json"  # the HTML book renders this output as the widget
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


def export_dir() -> Path:
    """Where exported models go: the folder named by ``ATTNBOOK_EXPORT_DIR`` (the book's build sets it),
    else ``exported`` in the current folder (next to the notebook in Jupyter or Colab)."""
    return Path(os.environ.get("ATTNBOOK_EXPORT_DIR") or "exported")


# the language models to_onnx exports, by the name written in NAME.json: (model class, its configuration class)
ARCHITECTURES = {"GPT": (GPT, TransformerConfig), "AttentionOnly": (AttentionOnly, AttentionOnlyConfig)}


class _LogitsAndWeights(nn.Module):
    """A language model whose forward returns the logits and every layer's attention weights in one tensor."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor):
        logits, weights = self.model(ids, return_weights=True)  # (1, T, V), L x (1, H, T, T)
        return logits, torch.stack(weights, dim=1)  # (1, T, V), (1, n_layers, H, T, T)


@dataclass(frozen=True)
class Exported:
    """The files that :func:`to_onnx` wrote, and their description (``meta``, the JSON file's content).

    In a notebook it shows where the files are; the HTML book shows it as a text box that runs the model.
    """

    onnx_path: Path
    meta_path: Path
    weights_path: Path | None  # the PyTorch weights (language models only)
    meta: dict = field(repr=False)

    def _repr_mimebundle_(self, include=None, exclude=None):
        size = format_bytes(self.onnx_path.stat().st_size)
        files = ", ".join(p.name for p in (self.meta_path, self.weights_path) if p is not None)
        text = (
            f"Exported {self.meta['name']}: {self.onnx_path} ({size}) and {files}. "
            "The HTML book runs this model in the page."
        )
        return {
            "text/plain": text,
            MIME_TYPE: {key: self.meta[key] for key in ("format", "name", "kind", "title", "onnx", "sha256", "prompt")},
        }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextlib.contextmanager
def _quiet_exporter():
    """Silence the exporter's notes that say nothing about this model (missing torchvision operators,
    an internal deprecation inside torch.export); errors still propagate."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*LeafSpec.*", category=FutureWarning)
            yield
    finally:
        logger.setLevel(level)


def _check_common(name, vocab, n_vocab, title, prompt, start, opset) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"name must be lower-case letters, digits, '_' or '-' (a file name), got {name!r}")
    if not isinstance(vocab, str) or len(vocab) != n_vocab or len(set(vocab)) != len(vocab):
        raise ValueError(
            f"vocab must be a string of the model's {n_vocab} distinct characters in id order, got {vocab!r:.80}"
        )
    if not isinstance(title, str) or not isinstance(prompt, str):
        raise TypeError(f"title and prompt must be str, got {type(title).__name__} and {type(prompt).__name__}")
    if not isinstance(start, str) or not start or any(c not in vocab for c in start):
        raise ValueError(f"start must be a non-empty string of characters of vocab, got {start!r}")
    _checks.positive_int("opset", opset)


def _export(
    wrapper: nn.Module, folder, name: str, *, max_len: int, output_names: list[str], opset: int, meta: dict
) -> tuple[Path, Path, dict]:
    """Export ``wrapper`` (ids (1, T) -> tensors) with a dynamic 1 <= T <= max_len; write NAME.onnx and NAME.json."""
    folder = export_dir() if folder is None else Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    onnx_path, meta_path = folder / f"{name}.onnx", folder / f"{name}.json"
    example = (torch.zeros(1, min(max_len, 8), dtype=torch.long),)  # (1, T)
    dynamic = ({1: torch.export.Dim("T", min=1, max=max_len)},) if max_len > 1 else None
    with _quiet_exporter(), torch.no_grad():
        torch.onnx.export(
            wrapper.eval(),
            example,
            str(onnx_path),
            dynamo=True,
            input_names=["ids"],
            output_names=output_names,
            dynamic_shapes=dynamic,
            opset_version=opset,
            verbose=False,
            report=False,
            external_data=False,
        )
    meta = {
        "format": FORMAT,
        "name": name,
        "onnx": onnx_path.name,
        "sha256": _sha256(onnx_path),
        "bytes": onnx_path.stat().st_size,
        **meta,
    }
    meta_path.write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return onnx_path, meta_path, meta


def to_onnx(
    model: GPT | AttentionOnly,
    name: str,
    *,
    vocab: str,
    title: str = "",
    prompt: str = "",
    start: str = "\n",
    temperature: float = 0.8,
    top_k: int | None = None,
    max_new_tokens: int = 200,
    head: tuple[int, int] | None = None,
    template: tuple[str, str, str] | None = None,
    directory: str | Path | None = None,
    opset: int = 18,
) -> Exported:
    """Export a language model ``model`` to ``NAME.onnx`` with its attention weights, plus ``NAME.json`` and
    ``NAME.pt``.

    ``vocab`` is the string of the model's characters in id order (``CharTokenizer.chars``); ``title``
    and ``prompt`` are the page's name for the model and the text its box starts with; ``start`` is the
    text the model is given for an empty prompt (it must be in ``vocab``). ``temperature``,
    ``top_k`` and ``max_new_tokens`` are the page's starting values for sampling, with the meaning of
    :meth:`GPT.generate`. ``head`` = (layer, head), counted from 0, is the head whose weights the page
    shows first (default: the first). ``template`` names a chat template's three tokens (user, assistant,
    end: :data:`attnbook.chat.SPECIAL`), whose ids follow ``vocab``'s characters: the page then takes an
    instruction, writes the turn with them and answers greedily until the end token or ``max_new_tokens``,
    as :func:`attnbook.chat.answer` does. The model is copied to the CPU in float32 and in eval mode; ``model``
    itself is not changed. Needs the ``onnx`` and ``onnxscript`` packages.

    Shapes:
        the ONNX model: ids (1, T) int64, 1 <= T <= block_size -> logits (1, T, V), weights (1, n_layers, H, T, T)
    """
    architecture = next((k for k, (cls, _) in ARCHITECTURES.items() if type(model) is cls), None)
    if architecture is None:
        raise TypeError(
            f"model must be an attnbook.models.GPT or an attnbook.interpret.AttentionOnly, got {type(model).__name__}"
        )
    config = model.config
    special = () if template is None else _checks.texts("template", template, nonempty=True)
    if template is not None and (len(special) != 3 or len(set(special)) != 3):
        raise ValueError(f"template must name three distinct tokens (user, assistant, end), got {template!r}")
    _check_common(name, vocab, config.vocab_size - len(special), title, prompt, start, opset)
    temperature = _checks.positive_float("temperature", temperature, allow_zero=True)
    if top_k is not None:
        _checks.positive_int("top_k", top_k)
    _checks.positive_int("max_new_tokens", max_new_tokens)
    layer, shown = (0, 0) if head is None else _checks.int_pair("head", head, what="(layer, head)", minimum=0)
    if layer >= config.n_layers or shown >= config.n_heads:
        raise ValueError(
            f"head must name a head of the model's {config.n_layers} layers of {config.n_heads} heads "
            f"(counted from 0), got {head!r}"
        )

    cpu_model = copy.deepcopy(model).to("cpu", torch.float32).eval()
    onnx_path, meta_path, meta = _export(
        _LogitsAndWeights(cpu_model),
        directory,
        name,
        max_len=config.block_size,
        output_names=["logits", "weights"],
        opset=opset,
        meta={
            # next-token probabilities, sampling, causal attention; or a chat: an instruction answered greedily
            "kind": "chat" if special else "lm",
            "architecture": architecture,  # a key of ARCHITECTURES: what load_torch rebuilds
            "title": title or name,
            "vocab": vocab,
            "block_size": config.block_size,
            "n_layers": config.n_layers,
            "n_heads": config.n_heads,
            "causal": True,
            "start": start,
            "prompt": prompt,
            "heatmap": {"layer": layer, "head": shown},  # the head the page shows first
            # the template's tokens by name, ids len(vocab) + 0, 1, 2: <user> text <end> <assistant> answer <end>
            **({"template": dict(zip(("user", "assistant", "end"), special))} if special else {}),
            "inputs": {"ids": "int64 (1, T), 1 <= T <= block_size"},
            "outputs": {"logits": "float32 (1, T, V)", "weights": "float32 (1, n_layers, n_heads, T, T)"},
            # the meaning of attnbook.models.GPT.generate: logits / temperature (0: the most likely token), then
            # only the top_k largest logits (null: all), softmax, draw one
            "sampling": {"temperature": temperature, "top_k": top_k, "max_new_tokens": max_new_tokens},
            "config": config.to_dict(),
        },
    )
    weights_path = meta_path.with_suffix(".pt")
    torch.save(cpu_model.state_dict(), weights_path)
    return Exported(onnx_path, meta_path, weights_path, meta)


class _JobsAndWeights(nn.Module):
    """A model returning ({job: logits (1, T, C)}, weights (1, H, T, T)), as a tuple of tensors in job order."""

    def __init__(self, model: nn.Module, jobs: list[str]):
        super().__init__()
        self.model, self.jobs = model, jobs

    def forward(self, ids: torch.Tensor):
        logits, weights = self.model(ids)  # {job: (1, T, C_job)}, (1, H, T, T)
        return (*(logits[job] for job in self.jobs), weights.unsqueeze(1))  # ..., (1, 1, H, T, T)


def tagger_to_onnx(
    model: nn.Module,
    name: str,
    *,
    vocab: str,
    jobs: dict[str, str],
    max_len: int,
    title: str = "",
    prompt: str = "",
    start: str | None = None,
    directory: str | Path | None = None,
    opset: int = 18,
) -> Exported:
    """Export a model that labels every position for several jobs, with one attention layer's weights.

    ``model(ids)`` must return ``({job: logits (1, T, C_job)}, weights (1, H, T, T))`` (as chapter 07's
    three-jobs model does); ``jobs`` maps each job to the string of its ``C_job`` labels, in class order;
    ``max_len`` is the longest input. The page shows, under each typed character, every job's most
    likely label, and the heads' weights (not causal). ``start`` (default: the first character of
    ``vocab``) is the input for an empty prompt. No ``NAME.pt`` is written: the class is the caller's.

    Shapes:
        the ONNX model: ids (1, T) int64, 1 <= T <= max_len -> one (1, T, C_job) per job, weights (1, 1, H, T, T)
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if (
        not isinstance(jobs, dict)
        or not jobs
        or not all(isinstance(j, str) and isinstance(l, str) and l for j, l in jobs.items())
    ):
        raise ValueError(f"jobs must map each job's name to the string of its labels, got {jobs!r:.80}")
    _checks.positive_int("max_len", max_len)
    start = vocab[:1] if start is None and isinstance(vocab, str) else start
    _check_common(name, vocab, len(vocab) if isinstance(vocab, str) else -1, title, prompt, start, opset)
    cpu_model = copy.deepcopy(model).to("cpu", torch.float32).eval()
    with torch.no_grad():
        probe = torch.zeros(1, min(max_len, 4), dtype=torch.long)  # (1, T)
        out = cpu_model(probe)
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], dict) and set(out[0]) == set(jobs)):
        raise ValueError(f"model(ids) must return ({{job: logits}}, weights) with the jobs {sorted(jobs)}")
    for job, labels in jobs.items():
        if out[0][job].shape != (1, probe.shape[1], len(labels)):
            raise ValueError(
                f"jobs[{job!r}] has {len(labels)} labels but the model gives logits of shape "
                f"{_checks.shape_str(out[0][job].shape)} for ids of shape {_checks.shape_str(probe.shape)}"
            )
    _checks.tensor("the weights model(ids) returns", out[1], ndim=4)
    names = list(jobs)
    onnx_path, meta_path, meta = _export(
        _JobsAndWeights(cpu_model, names),
        directory,
        name,
        max_len=max_len,
        output_names=[f"logits_{i}" for i in range(len(names))] + ["weights"],
        opset=opset,
        meta={
            "kind": "tagger",  # every job's label at every position, attention over the whole input
            "title": title or name,
            "vocab": vocab,
            "block_size": max_len,
            "n_layers": 1,
            "n_heads": out[1].shape[1],
            "causal": False,
            "start": start,
            "prompt": prompt,
            "jobs": [{"name": job, "labels": jobs[job], "output": f"logits_{i}"} for i, job in enumerate(names)],
            "inputs": {"ids": "int64 (1, T), 1 <= T <= block_size"},
            "outputs": {
                **{f"logits_{i}": f"float32 (1, T, {len(jobs[j])}): {j}" for i, j in enumerate(names)},
                "weights": "float32 (1, 1, n_heads, T, T)",
            },
        },
    )
    return Exported(onnx_path, meta_path, None, meta)


def _read_meta(name: str, path) -> tuple[Path, dict]:
    path = _checks.file(name, path)
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{name} {str(path)!r} is not a JSON file ({error})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"{name} {str(path)!r} is not the description of an exported model (format {FORMAT!r})")
    return path, meta


def load_meta(path: str | Path) -> dict:
    """The description of an exported model (``NAME.json``), checked to be one that :func:`to_onnx` wrote."""
    return _read_meta("path", path)[1]


def load_torch(meta_path: str | Path) -> GPT | AttentionOnly:
    """The PyTorch model that was exported, rebuilt from ``NAME.json`` and the weights in ``NAME.pt``."""
    meta_path, meta = _read_meta("meta_path", meta_path)
    if meta.get("kind", "lm") not in ("lm", "chat") or not isinstance(meta.get("config"), dict) or "onnx" not in meta:
        raise ValueError(
            f"meta_path {str(meta_path)!r} does not describe an exported language model (to_onnx's): "
            f"it has no model configuration"
        )
    architecture = meta.get("architecture", "GPT")  # files written before there was a choice hold a GPT
    if architecture not in ARCHITECTURES:
        raise ValueError(
            f"meta_path {str(meta_path)!r} describes a model of architecture {architecture!r}; "
            f"load_torch rebuilds {', '.join(ARCHITECTURES)}"
        )
    weights = meta_path.with_name(Path(meta["onnx"]).stem + ".pt")
    if not weights.is_file():
        raise FileNotFoundError(
            f"meta_path {str(meta_path)!r} names the weights {weights.name}, which are not beside it"
        )
    model_class, config_class = ARCHITECTURES[architecture]
    model = model_class(config_class(**meta["config"]))
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    return model.eval()


def onnx_session(path: str | Path):
    """An onnxruntime inference session on one CPU thread for an exported ``.onnx`` file."""
    import onnxruntime

    path = _checks.file("path", path)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 4  # failures come back as exceptions (and are named below), not as log lines
    try:
        return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime's own exception types: a file that is no ONNX model
        raise ValueError(
            f"path {str(path)!r} is not an ONNX model onnxruntime can run: {str(error).splitlines()[0]}"
        ) from None


def run_onnx(session, ids) -> tuple[np.ndarray, np.ndarray]:
    """Run an exported model (a session from :func:`onnx_session`, or a path) on token ids: its outputs in order.

    Shapes:
        ids:    (1, T) or (T,) integers
        return: float32 NumPy arrays; for :func:`to_onnx`'s language model logits (1, T, V) and weights
                (1, n_layers, H, T, T); for :func:`tagger_to_onnx`, one (1, T, C_job) per job, then weights
    """
    if isinstance(session, (str, os.PathLike)):
        session = onnx_session(session)
    if not callable(getattr(session, "run", None)):
        raise TypeError(
            f"session must be an onnxruntime session (see onnx_session) or a path, got {type(session).__name__}"
        )
    ids = _checks.as_integers("ids", ids.detach().cpu() if isinstance(ids, torch.Tensor) else ids)
    if not (ids.dim() == 1 or (ids.dim() == 2 and ids.shape[0] == 1)) or ids.numel() == 0:
        raise ValueError(
            f"ids must have shape (1, T) or (T,) with T >= 1 (one sequence), got {_checks.shape_str(ids.shape)}"
        )
    import onnxruntime

    run_options = onnxruntime.RunOptions()
    run_options.log_severity_level = 4  # a refused input comes back as the exception below, not as a log line
    try:
        return tuple(session.run(None, {"ids": ids.long().reshape(1, -1).numpy()}, run_options))  # ids (1, T)
    except Exception as error:  # onnxruntime's own exception types: ids outside the vocabulary, T > block_size
        raise ValueError(
            f"ids were refused by the model (ids outside the vocabulary, or longer than its block "
            f"size?): {str(error).splitlines()[0]}"
        ) from None


@dataclass(frozen=True)
class Prompt:
    """What the model is given for a typed text (see :func:`prompt_ids`)."""

    ids: list[int]  # what the model reads: 1 to block_size ids
    text: str  # the same, as characters
    dropped: list[str]  # characters outside the vocabulary that were left out, each once, in order of appearance
    cropped: int  # how many characters were cut from the front to fit the context
    empty: bool  # True when nothing was left: the model reads the start text


def prompt_ids(text: str, vocab: str, block_size: int, start: str = "\n") -> Prompt:
    """The rule that turns typed text into the model's input, in the page and in Python.

    Characters outside ``vocab`` are left out (and listed in ``dropped``); an empty result becomes
    ``start`` (the model needs at least one token: ``GPT`` refuses an empty input); a longer result keeps
    its last ``block_size`` characters, as :meth:`GPT.generate` crops its context.
    """
    _checks.text("text", text)
    _checks.text("vocab", vocab, nonempty=True)
    if len(set(vocab)) != len(vocab):
        raise ValueError(f"vocab must be distinct characters (one per id), got {vocab!r:.80}")
    _checks.positive_int("block_size", block_size)
    if not _checks.text("start", start, nonempty=True) or any(c not in vocab for c in start):
        raise ValueError(f"start must be a non-empty string of characters of vocab, got {start!r}")
    index = {c: i for i, c in enumerate(vocab)}
    dropped = list(dict.fromkeys(c for c in text if c not in index))
    kept = "".join(c for c in text if c in index)
    empty = not kept
    if empty:
        kept = start
    cropped = max(0, len(kept) - block_size)
    kept = kept[cropped:]
    return Prompt([index[c] for c in kept], kept, dropped, cropped, empty)
