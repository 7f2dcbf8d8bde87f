"""The chapter's experiments in post-training, shared by its pages and its benchmark: instruction tuning of
the lab's GPT, preference pairs and DPO, and GRPO with a reward a program computes.

Each recipe is a frozen dataclass; each ``train_*`` function trains in place and returns its history. The
methods themselves are in :mod:`attnbook.chat` (template, loss mask, generation), :mod:`attnbook.preference`
(DPO) and :mod:`attnbook.grpo` (group advantages, the clipped objective).

Chapter: from a model of text to an assistant (17).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from . import _checks, chat, grpo, preference
from ._post_training_checks import (  # noqa: F401 (the checkers checked_by names)
    _check_accuracy,
    _check_evaluate,
    _check_kl,
    _check_measures,
    _check_pair_logps,
    _check_preference_pairs,
    _check_recipe,
    _check_reward_texts,
    _check_save,
    _check_train_dpo,
    _check_train_grpo,
    _check_train_sft,
    _check_win_rate,
    _check_words,
)
from .data.files import packaged_dir
from .data.instructions import SEEN_KINDS, UNSEEN_KINDS, Instruction, instructions
from .interpret import load_lab_gpt
from .models import GPT, TransformerConfig
from .train import cosine_schedule, progress, seed_everything

__all__ = [
    "SFTRecipe",
    "DPORecipe",
    "GRPORecipe",
    "base_model",
    "train_sft",
    "evaluate",
    "evaluation_sets",
    "preference_pairs",
    "train_dpo",
    "pair_logps",
    "accuracy",
    "win_rate",
    "comparisons",
    "kl_from_reference",
    "preference_measures",
    "exact_reward",
    "first_letter_reward",
    "train_grpo",
    "save_assistant",
    "load_assistant",
    "frozen_copy",
    "ASSISTANT",
]

ASSISTANT = "assistant/sft.pt"  # in the package's data folder; written by benchmarks/bench_post_training.py
ASSISTANT_FORMAT = "attnbook.assistant/1"


@dataclass(frozen=True)
class SFTRecipe:
    """Instruction tuning: AdamW on batches of fresh instructions, warm-up then cosine decay."""

    steps: int = 400
    batch_size: int = 32
    lr: float = 3e-3
    warmup_steps: int = 50
    mask_prompt: bool = True  # the loss on the answer only
    template: bool = True  # the chat template (False: the bare prompt, a space, the answer)

    def __post_init__(self):
        _check_recipe(self, ints=("steps", "batch_size"), floats=("lr",), flags=("mask_prompt", "template"))
        _checks.positive_int("warmup_steps", self.warmup_steps, minimum=0)
        if self.warmup_steps >= self.steps:
            raise ValueError(f"warmup_steps must be smaller than steps, got {self.warmup_steps} and {self.steps}")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class DPORecipe:
    """DPO on fixed pairs: ``epochs`` passes over them in shuffled batches, AdamW at a constant rate; the
    reference's log-probabilities computed once. ``nll`` > 0 adds that weight times the chosen answers'
    negative log-likelihood per token (DPO+NLL, Pang et al. 2024; 0: DPO alone); ``dpo=False`` drops the DPO
    term and keeps the NLL term alone (instruction tuning on the chosen answers, the control of DPO+NLL)."""

    beta: float = 1.0
    epochs: int = 4
    batch_size: int = 32
    lr: float = 1e-4
    nll: float = 0.0
    dpo: bool = True

    def __post_init__(self):
        _check_recipe(self, ints=("epochs", "batch_size"), floats=("beta", "lr"), flags=("dpo",))
        _checks.positive_float("nll", self.nll, allow_zero=True)
        if not self.dpo and not self.nll:
            raise ValueError("without the DPO term (dpo=False) nll must be > 0, got nll=0.0: there is no loss")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GRPORecipe:
    """GRPO: ``prompts`` prompts per step, ``group`` answers each at temperature 1, ``updates`` gradient steps
    on each group (Shao et al.'s mu; with 1 the ratio is 1 in value and only its gradient counts)."""

    steps: int = 60
    prompts: int = 8
    group: int = 8
    lr: float = 5e-4
    clip: float = 0.2
    beta: float = 0.04
    max_new_tokens: int = 24
    updates: int = 2

    def __post_init__(self):
        _check_recipe(self, ints=("steps", "prompts", "group", "max_new_tokens", "updates"), floats=("lr", "clip"))
        if self.group < 2:
            raise ValueError(f"group must be at least 2 (advantages compare answers in a group), got {self.group}")
        _checks.positive_float("beta", self.beta, allow_zero=True)

    def to_dict(self) -> dict:
        return asdict(self)


def base_model() -> tuple[GPT, chat.ChatTokenizer]:
    """The lab's GPT (trained on Tiny Shakespeare) with the template's three tokens added, and its tokenizer."""
    lab, tokenizer = load_lab_gpt()
    return chat.add_tokens(lab), chat.ChatTokenizer(tokenizer)


@_checks.checked_by("_check_train_sft")
def train_sft(
    model: GPT,
    tokenizer: chat.ChatTokenizer,
    words: Sequence[str],
    recipe: SFTRecipe = SFTRecipe(),
    *,
    seed: int = 0,
    kinds: Sequence[str] = SEEN_KINDS,
    quiet: bool = False,
) -> list[float]:
    """Instruction-tune ``model`` in place on fresh instructions about ``words``; returns the loss per step."""
    seed_everything(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=0.0)
    factor = cosine_schedule(recipe.steps, warmup_steps=recipe.warmup_steps)
    data = instructions(recipe.steps * recipe.batch_size, words, kinds=kinds, seed=seed)
    device = next(model.parameters()).device
    model.train()
    losses = []
    for step in progress(range(recipe.steps), desc="instruction tuning", disable=quiet):
        batch = data[step * recipe.batch_size : (step + 1) * recipe.batch_size]
        examples = [chat.render(tokenizer, i.prompt, i.answer, template=recipe.template) for i in batch]
        x, y = chat.sft_batch(examples, mask_prompt=recipe.mask_prompt, pad=tokenizer.end)
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=chat.IGNORE)
        for group in optimizer.param_groups:
            group["lr"] = recipe.lr * factor(step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


@_checks.checked_by("_check_evaluate")
def evaluate(
    model: GPT, tokenizer: chat.ChatTokenizer, tests: Sequence[Instruction], *, template: bool = True
) -> dict[str, float]:
    """Greedy answers to ``tests``: per kind, the share answered exactly (``exact``), the share whose answer
    starts with the right one (``starts right``) and the share that ended with <|end|> (``stopped``)."""
    answers = chat.answer(model, tokenizer, [t.prompt for t in tests], template=template, keep_end=True)
    out: dict[str, dict[str, list[float]]] = {}
    for t, a in zip(tests, answers):
        stopped = bool(a) and a[-1] == tokenizer.end
        text = tokenizer.decode(a[:-1] if stopped else a)
        scores = out.setdefault(t.kind, {"exact": [], "starts right": [], "stopped": []})
        scores["exact"].append(float(stopped and text == t.answer) if template else float(text == t.answer))
        scores["starts right"].append(float(text.startswith(t.answer)))
        scores["stopped"].append(float(stopped))
    return {f"{kind} {name}": sum(v) / len(v) for kind, s in out.items() for name, v in s.items()}


@_checks.checked_by("_check_words")
def evaluation_sets(words: Sequence[str]) -> dict[str, list[Instruction]]:
    """The chapter's tests, all about ``words`` (the held-out words): 300 instructions of the kinds and
    phrasings of training, 200 in the phrasing each kind held out, 100 of the kinds training never shows."""
    return {
        "held-out words": instructions(300, words, seed=1),
        "held-out phrasings": instructions(200, words, phrasing="held out", seed=2),
        "unseen kinds": instructions(100, words, kinds=UNSEEN_KINDS, seed=3),
    }


# --- preference pairs and DPO ----------------------------------------------------------------------------------


@_checks.checked_by("_check_preference_pairs")
def preference_pairs(
    model: GPT,
    tokenizer: chat.ChatTokenizer,
    tests: Sequence[Instruction],
    *,
    samples: int = 4,
    generator: torch.Generator | None = None,
) -> list[tuple[list[int], list[int], list[int]]]:
    """Pairs (prompt ids, chosen answer ids, rejected answer ids) by the rule: a correct answer is preferred to
    a wrong one. ``samples`` answers are drawn per prompt at temperature 1; a prompt with no correct or no
    wrong answer among them gives no pair. Answers keep their closing <|end|>."""
    prompts = [t.prompt for t in tests for _ in range(samples)]
    answers = chat.answer(model, tokenizer, prompts, temperature=1.0, keep_end=True, generator=generator)
    pairs = []
    for i, t in enumerate(tests):
        group = answers[i * samples : (i + 1) * samples]
        right = [a for a in group if a and a[-1] == tokenizer.end and tokenizer.decode(a[:-1]) == t.answer]
        wrong = [a for a in group if not (a and a[-1] == tokenizer.end and tokenizer.decode(a[:-1]) == t.answer)]
        if right and wrong:
            pairs.append((chat.render(tokenizer, t.prompt)[0], right[0], wrong[0]))
    return pairs


def _pair_batch(pairs, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Chosen answers then rejected ones, each after its prompt: ids (2B, T), answer mask (2B, T)."""
    prompts = [p for p, _, _ in pairs] * 2
    answers = [c for _, c, _ in pairs] + [r for _, _, r in pairs]
    return chat.pad_answers(prompts, answers, pad=pad)


@torch.no_grad()
@_checks.checked_by("_check_pair_logps")
def pair_logps(model: GPT, pairs, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(chosen | prompt) and log pi(rejected | prompt) for every pair: two (B,) tensors."""
    ids, mask = _pair_batch(pairs, pad)
    logps = chat.sequence_logprobs(model.eval(), ids, mask)  # (2B,)
    return logps[: len(pairs)], logps[len(pairs) :]


@_checks.checked_by("_check_train_dpo")
def train_dpo(
    policy: GPT,
    reference: GPT,
    pairs: Sequence[tuple[list[int], list[int], list[int]]],
    recipe: DPORecipe = DPORecipe(),
    *,
    pad: int = 0,
    seed: int = 0,
    quiet: bool = False,
) -> list[dict[str, float]]:
    """DPO (DPO+NLL if ``recipe.nll``, the NLL term alone if not ``recipe.dpo``): train ``policy`` in place on
    ``pairs`` against the frozen ``reference``, ``recipe.epochs`` passes in shuffled batches. Per step: the loss,
    the implicit reward margin, the share of pairs it ranks right, and the mean log-ratios log pi / pi_ref of the
    chosen and of the rejected answers."""
    seed_everything(seed)
    ref_chosen, ref_rejected = pair_logps(reference, pairs, pad)  # the frozen reference: computed once
    optimizer = torch.optim.AdamW(policy.parameters(), lr=recipe.lr, weight_decay=0.0)
    order, batches = random.Random(seed), []
    for _ in range(recipe.epochs):
        shuffled = order.sample(range(len(pairs)), len(pairs))
        batches += [shuffled[i : i + recipe.batch_size] for i in range(0, len(pairs), recipe.batch_size)]
    history = []
    for step, index in enumerate(progress(batches, desc=f"DPO, beta {recipe.beta:g}", disable=quiet)):
        ids, mask = _pair_batch([pairs[i] for i in index], pad)
        policy.train()
        logps = chat.sequence_logprobs(policy, ids, mask)  # (2B,)
        chosen, rejected = logps[: len(index)], logps[len(index) :]
        rc, rr = ref_chosen[index], ref_rejected[index]
        lengths = mask[: len(index)].sum(-1)  # (B,) tokens of each chosen answer
        if not recipe.dpo:  # the NLL term alone
            loss = recipe.nll * preference.chosen_nll(chosen, lengths)
        elif recipe.nll:
            loss = preference.dpo_nll_loss(chosen, rejected, rc, rr, lengths, recipe.beta, recipe.nll)
        else:
            loss = preference.dpo_loss(chosen, rejected, rc, rr, recipe.beta)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            d_chosen, d_rejected = chosen - rc, rejected - rr  # (B,) log-ratios
            margin = recipe.beta * (d_chosen - d_rejected)  # (B,) the implicit reward margin
        history.append(
            {
                "step": step + 1,
                "loss": loss.item(),
                "margin": margin.mean().item(),
                "ranked right": (margin > 0).float().mean().item(),
                "log-ratio, chosen": d_chosen.mean().item(),
                "log-ratio, rejected": d_rejected.mean().item(),
            }
        )
    policy.eval()
    return history


@_checks.checked_by("_check_accuracy")
def accuracy(model: GPT, tokenizer: chat.ChatTokenizer, tests: Sequence[Instruction]) -> float:
    """The share of ``tests`` the model answers exactly, greedy."""
    answers = chat.answer(model, tokenizer, [t.prompt for t in tests])
    return chat.exact_match(tokenizer, answers, [t.answer for t in tests]).mean().item()


@_checks.checked_by("_check_win_rate")
def win_rate(
    policy: GPT,
    reference: GPT,
    tokenizer: chat.ChatTokenizer,
    tests: Sequence[Instruction],
    *,
    samples: int = 1,
    generator: torch.Generator | None = None,
) -> float:
    """How often the rule prefers the policy's answer to the reference's, ``samples`` answers of each at
    temperature 1 per prompt compared in turn: 1 for a right answer against a wrong one, 0 the other way,
    1/2 for a tie (both right or both wrong); :func:`comparisons` gives the three shares."""
    shares = comparisons(policy, reference, tokenizer, tests, samples=samples, generator=generator)
    return shares["wins"] + 0.5 * shares["ties"]


@_checks.checked_by("_check_win_rate")
def comparisons(
    policy: GPT,
    reference: GPT,
    tokenizer: chat.ChatTokenizer,
    tests: Sequence[Instruction],
    *,
    samples: int = 1,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """The shares of the comparisons of :func:`win_rate` the policy wins (right against wrong), ties and
    loses."""
    prompts = [t.prompt for t in tests for _ in range(samples)]
    expected = [t.answer for t in tests for _ in range(samples)]
    mine = chat.exact_match(
        tokenizer, chat.answer(policy, tokenizer, prompts, temperature=1.0, generator=generator), expected
    )
    theirs = chat.exact_match(
        tokenizer, chat.answer(reference, tokenizer, prompts, temperature=1.0, generator=generator), expected
    )
    return {name: share.float().mean().item() for name, share in
            (("wins", mine > theirs), ("ties", mine == theirs), ("losses", mine < theirs))}  # fmt: skip


@torch.no_grad()
@_checks.checked_by("_check_kl")
def kl_from_reference(
    policy: GPT,
    reference: GPT,
    tokenizer: chat.ChatTokenizer,
    tests: Sequence[Instruction],
    *,
    samples: int = 1,
    generator: torch.Generator | None = None,
) -> float:
    """KL(policy || reference) in nats per answer, estimated on ``samples`` answers per prompt sampled from
    the policy."""
    prompts = [t.prompt for t in tests for _ in range(samples)]
    answers = chat.answer(policy, tokenizer, prompts, temperature=1.0, keep_end=True, generator=generator)
    starts = [chat.render(tokenizer, p)[0] for p in prompts]
    ids, mask = chat.pad_answers(starts, [a or [tokenizer.end] for a in answers], pad=tokenizer.end)
    mine, theirs = chat.sequence_logprobs(policy.eval(), ids, mask), chat.sequence_logprobs(reference, ids, mask)
    return preference.sequence_kl(mine, theirs).item()


@_checks.checked_by("_check_measures")
def preference_measures(
    policy: GPT,
    reference: GPT,
    tokenizer: chat.ChatTokenizer,
    tests: Sequence[Instruction],
    pairs: Sequence[tuple[list[int], list[int], list[int]]],
    beta: float,
    *,
    samples: int = 1,
    seed: int = 0,
) -> dict[str, float]:
    """What the chapter measures of a policy tuned on preferences, on held-out ``tests`` and ``pairs``: the
    win rate against the reference (and the shares of the comparisons won and lost), the implicit reward
    margin and the two log-ratios on the pairs, the KL from the reference, and greedy exact-match."""
    pc, pr = pair_logps(policy, pairs, tokenizer.end)
    rc, rr = pair_logps(reference, pairs, tokenizer.end)
    generator = torch.Generator().manual_seed(seed)
    shares = comparisons(policy, reference, tokenizer, tests, samples=samples, generator=generator)
    return {
        "win rate": shares["wins"] + 0.5 * shares["ties"],
        "wins": shares["wins"],
        "losses": shares["losses"],
        "reward margin": (beta * ((pc - rc) - (pr - rr))).mean().item(),
        "log-ratio, chosen": (pc - rc).mean().item(),
        "log-ratio, rejected": (pr - rr).mean().item(),
        "KL (nats)": kl_from_reference(
            policy, reference, tokenizer, tests, samples=samples, generator=torch.Generator().manual_seed(seed + 1)
        ),
        "exact-match": accuracy(policy, tokenizer, tests),
    }


# --- GRPO ------------------------------------------------------------------------------------------------------


@_checks.checked_by("_check_reward_texts")
def exact_reward(answer: str, expected: str) -> float:
    """1 when the answer is exactly the expected one, else 0: the verifier."""
    return float(answer == expected)


@_checks.checked_by("_check_reward_texts")
def first_letter_reward(answer: str, expected: str) -> float:
    """1 when the answer starts with the right letter: a lazy verifier that checks one character, and a
    gameable one."""
    return float(answer[:1] == expected[:1])


@_checks.checked_by("_check_train_grpo")
def train_grpo(
    policy: GPT,
    reference: GPT,
    tokenizer: chat.ChatTokenizer,
    prompts: Callable[[int], Sequence[Instruction]],
    reward: Callable[[str, str], float] = exact_reward,
    recipe: GRPORecipe = GRPORecipe(),
    *,
    seed: int = 0,
    quiet: bool = False,
) -> list[dict[str, float]]:
    """GRPO: train ``policy`` in place; ``prompts(step)`` gives the step's instructions. Per step: the mean
    reward of the groups, the mean answer length, the KL from the reference, the loss, and the share of the
    answer tokens the clip acted on at the last update on the group (0 with one update)."""
    seed_everything(seed)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=recipe.lr, weight_decay=0.0)
    reference.eval()
    history = []
    for step in progress(range(recipe.steps), desc="GRPO", disable=quiet):
        tests = list(prompts(step))[: recipe.prompts]
        starts = [chat.render(tokenizer, t.prompt)[0] for t in tests for _ in range(recipe.group)]
        answers = chat.answer(
            policy, tokenizer, [t.prompt for t in tests for _ in range(recipe.group)], temperature=1.0,
            keep_end=True, max_new_tokens=recipe.max_new_tokens, generator=generator,
        )  # fmt: skip
        texts = [tokenizer.decode(a[:-1] if a and a[-1] == tokenizer.end else a) for a in answers]
        expected = [t.answer for t in tests for _ in range(recipe.group)]
        rewards = torch.tensor([reward(a, e) for a, e in zip(texts, expected)]).view(len(tests), recipe.group)
        advantages = grpo.group_advantages(rewards).flatten()  # (N,)
        ids, mask = chat.pad_answers(starts, [a or [tokenizer.end] for a in answers], pad=tokenizer.end)
        with torch.no_grad():
            ref = chat.token_logprobs(reference, ids)  # (N, T)
        policy.train()
        old = None
        for _ in range(recipe.updates):  # mu updates on one group; the first one has ratio 1
            logps = chat.token_logprobs(policy, ids)  # (N, T)
            old = logps.detach() if old is None else old  # the policy that sampled the group
            loss = grpo.grpo_loss(logps, old, ref, advantages, mask, clip=recipe.clip, beta=recipe.beta)
            clipped = grpo.clipped_share(logps, old, ref, advantages, mask, clip=recipe.clip, beta=recipe.beta)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            kl = ((grpo.kl_per_token(old, ref) * mask).sum(-1)).mean()  # per answer, summed over its tokens
        history.append(
            {
                "step": step + 1,
                "reward": rewards.mean().item(),
                "length": sum(len(t) for t in texts) / len(texts),
                "kl": kl.item(),
                "loss": loss.item(),
                "clipped": clipped.item(),  # at the last update on the group
            }
        )
    policy.eval()
    return history


# --- the assistant the library ships ---------------------------------------------------------------------------


@_checks.checked_by("_check_save")
def save_assistant(model: GPT, path, *, recipe: SFTRecipe, seed: int, results: dict) -> None:
    """Write ``model`` in float16 with its configuration, its recipe and what it scored."""
    torch.save(
        {
            "format": ASSISTANT_FORMAT,
            "model": {k: v.half() for k, v in model.state_dict().items()},
            "model_config": model.config.to_dict(),
            "recipe": recipe.to_dict(),
            "seed": seed,
            "results": results,
        },
        path,
    )


def load_assistant(path=None) -> tuple[GPT, chat.ChatTokenizer, dict]:
    """The instruction-tuned lab GPT the book ships (eval mode, float32), its tokenizer and what it was saved
    with (recipe, seed, results)."""
    path = packaged_dir() / ASSISTANT if path is None else _checks.file("path", path)
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated files, other pickles, random bytes: all refused the same way
        raise ValueError(f"path {str(path)!r} is not a saved assistant: {str(error).splitlines()[0]:.100}") from None
    if not isinstance(saved, dict) or saved.get("format") != ASSISTANT_FORMAT:
        raise ValueError(f"path {str(path)!r} is not a saved assistant (format {ASSISTANT_FORMAT!r})")
    model = GPT(TransformerConfig(**saved["model_config"]))
    model.load_state_dict({k: v.float() for k, v in saved["model"].items()})
    _, tokenizer = load_lab_gpt()
    info = {k: saved[k] for k in ("recipe", "seed", "results")}
    return model.eval(), chat.ChatTokenizer(tokenizer), info


def frozen_copy(model: GPT) -> GPT:
    """A copy of ``model`` that no optimiser will change: the reference of DPO and GRPO."""
    _checks.module("model", model, GPT, "an attnbook.models.GPT")
    reference = copy.deepcopy(model).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    return reference
