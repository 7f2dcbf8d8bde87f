"""The chat template and the loss mask: how a model of text is given turns, and what instruction tuning trains.

A conversation turn is written with three tokens that no typed text can produce, added to the character
vocabulary of the lab's GPT::

    <|user|> the user's text <|end|> <|assistant|> the answer <|end|>

:func:`render` turns an instruction and its answer into token ids with the *loss mask*, True on the tokens
the model is trained to predict (the answer and its closing ``<|end|>``, never the user's text);
:func:`sft_batch` pads examples into a batch whose targets are ``-100`` (ignored by the cross-entropy)
where the mask is False. :func:`add_tokens` gives a trained GPT rows for the new tokens; :func:`answer`
generates until ``<|end|>``; :func:`sequence_logprobs` is the log-probability of the answer tokens, which
preference tuning and the policy gradient both need.

Shapes:
    ids, targets, mask: (B, T)
    logits:             (B, T, V)
    sequence_logprobs:  (B,)

Chapter: from a model of text to an assistant (17).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import _checks
from .data.text import CharTokenizer
from .models import GPT

__all__ = [
    "SPECIAL",
    "ChatTokenizer",
    "add_tokens",
    "render",
    "sft_batch",
    "pad_answers",
    "sequence_logprobs",
    "answer",
    "exact_match",
]

SPECIAL = ("<|user|>", "<|assistant|>", "<|end|>")
IGNORE = -100  # the target of a position the loss skips (F.cross_entropy's ignore_index)
MAX_NEW_TOKENS = 24  # the longest answer :func:`answer` writes, unless told


@dataclass(frozen=True)
class ChatTokenizer:
    """A character tokenizer with the three tokens of the template after its characters.

    ``user``, ``assistant`` and ``end`` are their ids (V, V + 1 and V + 2 for V characters); ``encode``
    reads typed text, which can only ever give character ids.
    """

    chars: CharTokenizer

    def __post_init__(self):
        _checks.instance("chars", self.chars, CharTokenizer, "an attnbook.data.CharTokenizer")

    @property
    def user(self) -> int:
        return self.chars.vocab_size

    @property
    def assistant(self) -> int:
        return self.chars.vocab_size + 1

    @property
    def end(self) -> int:
        return self.chars.vocab_size + 2

    @property
    def vocab_size(self) -> int:
        return self.chars.vocab_size + len(SPECIAL)

    def encode(self, text: str) -> list[int]:
        return self.chars.encode(text).tolist()

    def decode(self, ids) -> str:
        """The text of ``ids``, the template's tokens written by name."""
        V = self.chars.vocab_size
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return "".join(SPECIAL[i - V] if i >= V else self.chars.chars[i] for i in ids)


def add_tokens(model: GPT, n: int = len(SPECIAL)) -> GPT:
    """A copy of ``model`` with ``n`` more tokens: their embedding rows start at the mean of the others.

    The output layer shares the embedding (tied weights), so the new tokens are predicted from the same
    rows. Starting at the mean, a new token looks to the model like an average character.
    """
    _checks.module("model", model, GPT, "an attnbook.models.GPT")
    _checks.positive_int("n", n)
    if not model.config.tie_weights:
        raise ValueError("model must tie its output layer to its embedding (config.tie_weights=True)")
    new = GPT(model.config.replace(vocab_size=model.config.vocab_size + n))
    state = model.state_dict()
    E = state["embed.token.weight"]  # (V, D)
    state["embed.token.weight"] = state["lm_head.weight"] = torch.cat([E, E.mean(0).expand(n, -1)])  # (V + n, D)
    new.load_state_dict(state)
    return new.to(E.device)


@_checks.checked_by("_check_render")
def render(
    tokenizer: ChatTokenizer, prompt: str, answer: str | None = None, *, template: bool = True
) -> tuple[list[int], list[bool]]:
    """The template's ids for one turn, and the loss mask (True on the answer and its closing <|end|>).

    Without ``answer``: the ids a model is given to answer ``prompt``, ending with ``<|assistant|>``.
    ``template=False`` writes the bare text instead, the prompt, a space and the answer: nothing marks
    whose turn it is or where the answer ends.
    """
    if not template:
        ids = tokenizer.encode(prompt + " ")
        reply = [] if answer is None else tokenizer.encode(answer)
    else:
        ids = [tokenizer.user, *tokenizer.encode(prompt), tokenizer.end, tokenizer.assistant]
        reply = [] if answer is None else [*tokenizer.encode(answer), tokenizer.end]
    return ids + reply, [False] * len(ids) + [True] * len(reply)


@_checks.checked_by("_check_sft_batch")
def sft_batch(
    examples: Sequence[tuple[list[int], list[bool]]], *, mask_prompt: bool = True, pad: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets for instruction tuning from rendered ``(ids, mask)`` examples, right-padded.

    The target at t is the token t + 1; it is ``-100`` (skipped by the loss) on padding and, with
    ``mask_prompt``, wherever the mask of token t + 1 is False: the model learns to answer, not to write
    the user's text.

    Shapes:
        return: x (B, T), y (B, T), T = the longest example's length - 1
    """
    T = max(len(ids) for ids, _ in examples) - 1
    x = torch.full((len(examples), T), pad, dtype=torch.long)  # (B, T)
    y = torch.full((len(examples), T), IGNORE, dtype=torch.long)  # (B, T)
    for b, (ids, mask) in enumerate(examples):
        seq, keep = torch.tensor(ids), torch.tensor(mask)
        x[b, : len(ids) - 1] = seq[:-1]
        target = seq[1:].clone()
        if mask_prompt:
            target[~keep[1:]] = IGNORE
        y[b, : len(ids) - 1] = target
    return x, y


@_checks.checked_by("_check_pad_answers")
def pad_answers(
    prompts: Sequence[list[int]], answers: Sequence[list[int]], *, pad: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts followed by their answers, right-padded, and the mask of the answer tokens.

    Shapes:
        return: ids (B, T), answer mask (B, T), T = the longest prompt + answer
    """
    T = max(len(p) + len(a) for p, a in zip(prompts, answers))
    ids = torch.full((len(prompts), T), pad, dtype=torch.long)  # (B, T)
    mask = torch.zeros(len(prompts), T, dtype=torch.bool)  # (B, T)
    for b, (p, a) in enumerate(zip(prompts, answers)):
        ids[b, : len(p) + len(a)] = torch.tensor(p + a, dtype=torch.long)
        mask[b, len(p) : len(p) + len(a)] = True
    return ids, mask


@_checks.checked_by("_check_logprobs")
def token_logprobs(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """log p(token t | tokens < t) for t = 1 .. T - 1, put at position t (position 0 holds 0).

    Shapes:
        ids: (B, T) -> (B, T)
    """
    logits = model(ids[:, :-1])  # (B, T - 1, V)
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # (B, T - 1)
    return F.pad(logp, (1, 0))  # (B, T): token t's log-probability at position t


@_checks.checked_by("_check_logprobs")
def sequence_logprobs(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""log pi(answer | prompt) = sum over the answer tokens of log pi(token | the tokens before it).

    Shapes:
        ids:  (B, T) a prompt and its answer, right-padded
        mask: (B, T) True on the answer tokens (the first token is never one)
        return: (B,)
    """
    return (token_logprobs(model, ids) * mask).sum(dim=-1)  # (B,)


@torch.no_grad()
@_checks.checked_by("_check_answer")
def answer(
    model: GPT,
    tokenizer: ChatTokenizer,
    prompts: Sequence[str],
    *,
    max_new_tokens: int = MAX_NEW_TOKENS,
    temperature: float = 0.0,
    template: bool = True,
    keep_end: bool = False,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """The model's answer to each prompt: the ids it generates until ``<|end|>`` (kept with ``keep_end``,
    to score the decision to stop) or ``max_new_tokens``. ``temperature=0`` is greedy decoding;
    ``template=False`` gives the bare prompt and a space (a model tuned without the template: nothing tells
    it where to stop).

    Prompts of one length run as one batch; an answer leaves the batch when it ends.
    """
    was_training = model.training
    model.eval()
    starts = [render(tokenizer, p, template=template)[0] for p in prompts]
    out: list[list[int]] = [[] for _ in prompts]
    for length in sorted({len(s) for s in starts}):
        rows = [i for i, s in enumerate(starts) if len(s) == length]  # the answers still being written
        ids = torch.tensor([starts[i] for i in rows], device=next(model.parameters()).device)  # (B, T)
        for _ in range(max_new_tokens):
            logits = model(ids[:, -model.config.block_size :])[:, -1].float()  # (B, V)
            if temperature == 0:
                nxt = logits.argmax(-1)  # (B,)
            else:
                nxt = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator)[:, 0]
            ids = torch.cat([ids, nxt[:, None]], dim=1)  # (B, T + 1)
            ended = (nxt == tokenizer.end).tolist()
            if any(ended):  # finished answers leave the batch
                for row, seq, stop in zip(rows, ids[:, length:].tolist(), ended):
                    if stop:
                        out[row] = seq[: len(seq) - 1 + keep_end]
                rows = [row for row, stop in zip(rows, ended) if not stop]
                ids = ids[~torch.tensor(ended, device=ids.device)]
                if not rows:
                    break
        for row, seq in zip(rows, ids[:, length:].tolist()):  # no <|end|> within max_new_tokens
            out[row] = seq
    model.train(was_training)
    return out


@_checks.checked_by("_check_exact_match")
def exact_match(tokenizer: ChatTokenizer, answers: Sequence[list[int]], expected: Sequence[str]) -> torch.Tensor:
    """1.0 where an answer is exactly the expected text, else 0.0: a (B,) tensor."""
    return torch.tensor([float(tokenizer.decode(a) == e) for a, e in zip(answers, expected)])


# --- checks --------------------------------------------------------------------------------------------------


def _check_tokenizer(tokenizer) -> None:
    _checks.instance("tokenizer", tokenizer, ChatTokenizer, "an attnbook.chat.ChatTokenizer")


def _check_model(model, tokenizer=None) -> None:
    _checks.module("model", model, GPT, "an attnbook.models.GPT")
    if tokenizer is not None and model.config.vocab_size != tokenizer.vocab_size:
        raise ValueError(
            f"model must have the tokenizer's {tokenizer.vocab_size} tokens (its characters and the template's "
            f"3; chat.add_tokens adds them), got a vocabulary of {model.config.vocab_size}"
        )


def _check_render(tokenizer, prompt, answer, template, **_) -> None:
    _check_tokenizer(tokenizer)
    _checks.text("prompt", prompt)
    if answer is not None:
        _checks.text("answer", answer)
    _checks.instance("template", template, bool, "True or False")


def _check_examples(name: str, examples) -> None:
    if isinstance(examples, (str, bytes)) or not isinstance(examples, (list, tuple)):
        raise TypeError(f"{name} must be a list of (ids, mask) pairs from chat.render, got {type(examples).__name__}")
    if not examples:
        raise ValueError(f"{name} must hold at least one (ids, mask) pair")
    for i, pair in enumerate(examples):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
            raise TypeError(f"{name}[{i}] must be a pair (ids, mask) as chat.render returns, got {pair!r:.60}")
        ids, mask = pair
        ids = _checks.as_integers(f"{name}[{i}]'s ids", ids)
        if not isinstance(mask, (list, tuple)) or not all(isinstance(m, bool) for m in mask):
            raise TypeError(f"{name}[{i}]'s mask must be a list of bools, got {mask!r:.60}")
        if ids.dim() != 1 or len(ids) != len(mask) or len(ids) < 2:
            raise ValueError(
                f"{name}[{i}] must be ids and a mask of one length of at least 2, got {ids.numel()} ids and "
                f"{len(mask)} mask values"
            )
        if bool((ids < 0).any()):
            raise ValueError(f"{name}[{i}]'s ids must be >= 0, got {ids.min().item()}")


def _check_sft_batch(examples, mask_prompt, pad, **_) -> None:
    _check_examples("examples", examples)
    _checks.instance("mask_prompt", mask_prompt, bool, "True or False")
    _checks.positive_int("pad", pad, minimum=0)


def _check_id_lists(name: str, lists, *, nonempty: bool) -> None:
    if isinstance(lists, (str, bytes)) or not isinstance(lists, (list, tuple)):
        raise TypeError(f"{name} must be a list of lists of token ids, got {type(lists).__name__}")
    for i, ids in enumerate(lists):
        ids = _checks.as_integers(f"{name}[{i}]", ids)
        if ids.dim() != 1 or (nonempty and not len(ids)) or bool((ids < 0).any()):
            what = "a non-empty list" if nonempty else "a list"
            raise ValueError(f"{name}[{i}] must be {what} of token ids >= 0, got {ids.tolist()!r:.60}")


def _check_pad_answers(prompts, answers, pad, **_) -> None:
    _check_id_lists("prompts", prompts, nonempty=True)
    _check_id_lists("answers", answers, nonempty=True)
    if not prompts or len(prompts) != len(answers):
        raise ValueError(
            f"prompts and answers must be as many (one answer per prompt, at least one), got {len(prompts)} "
            f"and {len(answers)}"
        )
    _checks.positive_int("pad", pad, minimum=0)


def _check_logprobs(model, ids, mask=None, **_) -> None:
    _checks.module("model", model)
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    _checks.token_ids("ids", ids, vocab, ndim=2)
    if ids.shape[1] < 2:
        raise ValueError(f"ids must hold at least 2 tokens per row (B, T >= 2), got {_checks.shape_str(ids.shape)}")
    block = getattr(getattr(model, "config", None), "block_size", None)
    if block is not None and ids.shape[1] - 1 > block:
        raise ValueError(
            f"ids must fit the model's context: T - 1 <= block_size = {block}, got {_checks.shape_str(ids.shape)}"
        )
    if mask is not None:
        _checks.tensor("mask", mask, ndim=2, dtype=torch.bool)
        if mask.shape != ids.shape:
            raise ValueError(
                f"mask must have the shape of ids {_checks.shape_str(ids.shape)}, got {_checks.shape_str(mask.shape)}"
            )
        if bool(mask[:, 0].any()):
            raise ValueError("mask must be False on the first token (nothing before it predicts it)")


def _check_answer(model, tokenizer, prompts, max_new_tokens, temperature, template, keep_end, generator, **_):
    _check_tokenizer(tokenizer)
    _check_model(model, tokenizer)
    _checks.texts("prompts", prompts)
    unknown = sorted({c for p in prompts for c in p if c not in tokenizer.chars.stoi})
    if unknown:
        raise ValueError(f"prompts hold characters outside the vocabulary: {', '.join(map(repr, unknown[:10]))}")
    _checks.positive_int("max_new_tokens", max_new_tokens)
    _checks.positive_float("temperature", temperature, allow_zero=True)
    _checks.instance("template", template, bool, "True or False")
    _checks.instance("keep_end", keep_end, bool, "True or False")
    _checks.generator("generator", generator)


def _check_exact_match(tokenizer, answers, expected, **_) -> None:
    _check_tokenizer(tokenizer)
    _check_id_lists("answers", answers, nonempty=False)
    _checks.texts("expected", expected)
    if len(answers) != len(expected):
        raise ValueError(f"answers and expected must be as many, got {len(answers)} and {len(expected)}")
    for i, ids in enumerate(answers):
        if ids and max(ids) >= tokenizer.vocab_size:
            raise ValueError(f"answers[{i}] must hold ids < {tokenizer.vocab_size}, got {max(ids)}")
