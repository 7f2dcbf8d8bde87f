"""The input checks of :mod:`attnbook.post_training`: recipes, models and their tokenizer, instructions,
preference pairs. Each error names the argument, what was expected and what was given.
"""

from __future__ import annotations

import os

from . import _checks, chat
from .data.instructions import Instruction
from .models import GPT

TWO_MODELS = "policy and reference must be two models (post_training.frozen_copy(policy) for the reference)"


def _check_recipe(recipe, *, ints=(), floats=(), flags=()) -> None:
    for name in ints:
        _checks.positive_int(name, getattr(recipe, name))
    for name in floats:
        _checks.positive_float(name, getattr(recipe, name))
    for name in flags:
        _checks.instance(name, getattr(recipe, name), bool, "True or False")


def _check_models(tokenizer, **models) -> None:
    for name, model in models.items():
        _checks.module(name, model, GPT, "an attnbook.models.GPT")
    if tokenizer is not None:
        _checks.instance("tokenizer", tokenizer, chat.ChatTokenizer, "an attnbook.chat.ChatTokenizer")
        for name, model in models.items():
            if model.config.vocab_size != tokenizer.vocab_size:
                raise ValueError(
                    f"{name} must have the tokenizer's {tokenizer.vocab_size} tokens (chat.add_tokens adds the "
                    f"template's), got a vocabulary of {model.config.vocab_size}"
                )


def _check_tests(name: str, tests, tokenizer) -> None:
    if isinstance(tests, (str, bytes)) or not isinstance(tests, (list, tuple)) or not tests:
        raise TypeError(f"{name} must be a non-empty list of Instruction (data.instructions), got {tests!r:.60}")
    for i, t in enumerate(tests):
        _checks.instance(f"{name}[{i}]", t, Instruction, "an attnbook.data.instructions.Instruction")
        unknown = sorted({c for c in t.prompt + t.answer if c not in tokenizer.chars.stoi})
        if unknown:
            raise ValueError(f"{name}[{i}] holds characters outside the vocabulary: {', '.join(map(repr, unknown))}")


def _check_pairs(name: str, pairs, model) -> None:
    vocab_size, block = model.config.vocab_size, model.config.block_size
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, (list, tuple)) or not pairs:
        raise TypeError(f"{name} must be a non-empty list of (prompt, chosen, rejected) id lists, got {pairs!r:.60}")
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 3):
            raise TypeError(f"{name}[{i}] must be (prompt ids, chosen ids, rejected ids), got {pair!r:.60}")
        for part, ids in zip(("prompt", "chosen", "rejected"), pair):
            if (
                not isinstance(ids, (list, tuple))
                or not ids
                or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < vocab_size for x in ids)
            ):
                raise ValueError(
                    f"{name}[{i}]'s {part} must be a non-empty list of ids in [0, {vocab_size}), got {ids!r:.60}"
                )
        if len(pair[0]) + max(len(pair[1]), len(pair[2])) - 1 > block:
            raise ValueError(f"{name}[{i}] must fit the model's context of {block} tokens (prompt and answer)")


def _check_words(words, **_) -> None:
    _checks.texts("words", words, nonempty=True)


def _check_train_sft(model, tokenizer, words, recipe, seed, kinds, quiet, **_) -> None:
    _check_models(tokenizer, model=model)
    _check_words(words)
    _checks.instance("recipe", recipe, _recipes().SFTRecipe, "a post_training.SFTRecipe")
    _checks.positive_int("seed", seed, minimum=0)
    _checks.texts("kinds", kinds, nonempty=True)


def _check_evaluate(model, tokenizer, tests, template, **_) -> None:
    _check_models(tokenizer, model=model)
    _check_tests("tests", tests, tokenizer)
    _checks.instance("template", template, bool, "True or False")


def _check_accuracy(model, tokenizer, tests, **_) -> None:
    _check_evaluate(model, tokenizer, tests, True)


def _check_preference_pairs(model, tokenizer, tests, samples, generator, **_) -> None:
    _check_evaluate(model, tokenizer, tests, True)
    _checks.positive_int("samples", samples)
    _checks.generator("generator", generator)


def _check_pair_logps(model, pairs, pad, **_) -> None:
    _check_models(None, model=model)
    _check_pairs("pairs", pairs, model)
    _checks.positive_int("pad", pad, minimum=0)


def _check_train_dpo(policy, reference, pairs, recipe, pad, seed, quiet, **_) -> None:
    _check_models(None, policy=policy, reference=reference)
    if policy is reference:
        raise ValueError(TWO_MODELS)
    _check_pairs("pairs", pairs, policy)
    _checks.instance("recipe", recipe, _recipes().DPORecipe, "a post_training.DPORecipe")
    _checks.positive_int("pad", pad, minimum=0)
    _checks.positive_int("seed", seed, minimum=0)


def _check_win_rate(policy, reference, tokenizer, tests, samples, generator, **_) -> None:
    _check_models(tokenizer, policy=policy, reference=reference)
    _check_tests("tests", tests, tokenizer)
    _checks.positive_int("samples", samples)
    _checks.generator("generator", generator)


def _check_kl(policy, reference, tokenizer, tests, samples, generator, **_) -> None:
    _check_win_rate(policy, reference, tokenizer, tests, samples, generator)
    longest = max(len(t.prompt) for t in tests) + 3 + chat.MAX_NEW_TOKENS  # the turn and the longest answer
    if longest - 1 > policy.config.block_size:
        raise ValueError(
            f"tests must leave room in the model's context ({policy.config.block_size} tokens) for a turn and an "
            f"answer of {chat.MAX_NEW_TOKENS} tokens: its longest prompt has {longest - 3 - chat.MAX_NEW_TOKENS} "
            "characters"
        )


def _check_measures(policy, reference, tokenizer, tests, pairs, beta, samples, seed, **_) -> None:
    _check_kl(policy, reference, tokenizer, tests, samples, None)
    _check_pairs("pairs", pairs, policy)
    _checks.positive_float("beta", beta)
    _checks.positive_int("seed", seed, minimum=0)


def _check_reward_texts(answer, expected, **_) -> None:
    _checks.text("answer", answer)
    _checks.text("expected", expected)


def _check_train_grpo(policy, reference, tokenizer, prompts, reward, recipe, seed, quiet, **_) -> None:
    _check_models(tokenizer, policy=policy, reference=reference)
    if policy is reference:
        raise ValueError(TWO_MODELS)
    _checks.function("prompts", prompts)
    _checks.function("reward", reward)
    _checks.instance("recipe", recipe, _recipes().GRPORecipe, "a post_training.GRPORecipe")
    _checks.positive_int("seed", seed, minimum=0)


def _check_save(model, path, recipe, seed, results, **_) -> None:
    _check_models(None, model=model)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a path (a str or a pathlib.Path), got {type(path).__name__}")
    _checks.instance("recipe", recipe, _recipes().SFTRecipe, "a post_training.SFTRecipe")
    _checks.positive_int("seed", seed, minimum=0)
    _checks.instance("results", results, dict, "a dict of what the model scored")


def _recipes():
    from . import post_training  # the recipes' classes (post_training imports this module)

    return post_training
