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


@dataclass(frozen=True)
class ChatTokenizer:
    """A character tokenizer with the three tokens of the template after its characters.

    ``user``, ``assistant`` and ``end`` are their ids (V, V + 1 and V + 2 for V characters); ``encode``
    reads typed text, which can only ever give character ids.
    """

    chars: CharTokenizer

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


def token_logprobs(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """log p(token t | tokens < t) for t = 1 .. T - 1, put at position t (position 0 holds 0).

    Shapes:
        ids: (B, T) -> (B, T)
    """
    logits = model(ids[:, :-1])  # (B, T - 1, V)
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # (B, T - 1)
    return F.pad(logp, (1, 0))  # (B, T): token t's log-probability at position t


def sequence_logprobs(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""log pi(answer | prompt) = sum over the answer tokens of log pi(token | the tokens before it).

    Shapes:
        ids:  (B, T) a prompt and its answer, right-padded
        mask: (B, T) True on the answer tokens (the first token is never one)
        return: (B,)
    """
    return (token_logprobs(model, ids) * mask).sum(dim=-1)  # (B,)


@torch.no_grad()
def answer(
    model: GPT,
    tokenizer: ChatTokenizer,
    prompts: Sequence[str],
    *,
    max_new_tokens: int = 24,
    temperature: float = 0.0,
    template: bool = True,
    keep_end: bool = False,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """The model's answer to each prompt: the ids it generates until ``<|end|>`` (kept with ``keep_end``,
    to score the decision to stop) or ``max_new_tokens``. ``temperature=0`` is greedy decoding;
    ``template=False`` gives the bare prompt and a space (a model tuned without the template: nothing tells
    it where to stop).

    Prompts of one length run as one batch.
    """
    was_training = model.training
    model.eval()
    starts = [render(tokenizer, p, template=template)[0] for p in prompts]
    out: list[list[int]] = [[] for _ in prompts]
    for length in sorted({len(s) for s in starts}):
        rows = [i for i, s in enumerate(starts) if len(s) == length]
        ids = torch.tensor([starts[i] for i in rows], device=next(model.parameters()).device)  # (B, T)
        done = torch.zeros(len(rows), dtype=torch.bool, device=ids.device)  # (B,)
        for _ in range(max_new_tokens):
            logits = model(ids[:, -model.config.block_size :])[:, -1].float()  # (B, V)
            if temperature == 0:
                nxt = logits.argmax(-1)  # (B,)
            else:
                nxt = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator)[:, 0]
            done |= nxt == tokenizer.end
            nxt = nxt.masked_fill(done, tokenizer.end)  # a finished answer only pads itself
            ids = torch.cat([ids, nxt[:, None]], dim=1)  # (B, T + 1)
            if done.all():
                break
        for row, generated in zip(rows, ids[:, length:].tolist()):
            if tokenizer.end in generated:
                generated = generated[: generated.index(tokenizer.end) + keep_end]
            out[row] = generated
    model.train(was_training)
    return out


def exact_match(tokenizer: ChatTokenizer, answers: Sequence[list[int]], expected: Sequence[str]) -> torch.Tensor:
    """1.0 where an answer is exactly the expected text, else 0.0: a (B,) tensor."""
    return torch.tensor([float(tokenizer.decode(a) == e) for a, e in zip(answers, expected)])
