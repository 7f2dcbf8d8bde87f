"""Specs of the post-training modules (chapter 17): the chat template (chat), DPO (preference), GRPO (grpo),
the chapter's experiments (post_training) and the synthetic instructions (data.instructions).

The losses are compared with a direct evaluation of their formulas; the template, the batches and the
instructions with themselves in float64 (they hold ids and texts); the training loops, sampling and the
measures, whose values no reference can give beforehand, with what they must satisfy (finite losses, one row
per step, shares in [0, 1], a KL of 0 and a margin of 0 for a policy equal to its reference, pairs that
follow their rule, a frozen copy equal to its model).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from attnbook import chat, data, grpo, models, post_training, preference
from attnbook.data import instructions as tasks
from harness import (
    FILES,
    Choice,
    Const,
    FilePath,
    Gen,
    Ids,
    Int,
    IntLists,
    Mask,
    Num,
    Obj,
    Tensor,
    Text,
    Texts,
    _module,
    spec,
)
from specs_tools import _garbage_file

CHARS = data.CharTokenizer(sorted(set("abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ:")))
TOK = chat.ChatTokenizer(CHARS)
V = TOK.vocab_size
WORDS = ["oak", "ash", "elm", "yew", "fir"]
LETTERS = "abcdefghijklmnopqrstuvwxyz :"
SEED_INT = ("negative", "float", "bool", "str")  # a seed may be 0


def _tiny(vocab: int = V):
    """A GPT of one layer for the template's vocabulary (seeded, eval mode)."""
    config = models.TransformerConfig(vocab_size=vocab, block_size=48, n_layers=1, n_heads=2, d_model=16)
    return _module(lambda: models.GPT(config))


def _tests(n: int = 4, kinds=("reverse", "capitals")):
    return tasks.instructions(n, WORDS, kinds=list(kinds), seed=5)


def _pairs(n: int):
    """(prompt, chosen, rejected) ids: the reversed word against the word itself."""
    out = []
    for word in (WORDS * n)[:n]:
        prompt = chat.render(TOK, f"reverse {word}")[0]
        out.append((prompt, [*TOK.encode(word[::-1]), TOK.end], [*TOK.encode(word), TOK.end]))
    return out


class AnswerMask(Mask):
    """The mask of a batch's answer tokens: never the first token (nothing before it predicts it)."""

    def make(self, g):
        m = super().make(g)
        m[..., 0] = False
        return m


# --- chat -------------------------------------------------------------------------------------------------


def _check_tokenizer(out, args):
    user, assistant, end, size, text = out
    n = len(args["chars"].chars)
    assert (user, assistant, end, size) == (n, n + 1, n + 2, n + 3)
    assert text == "<|user|>ab<|end|>"


@spec("chat.ChatTokenizer", chat.ChatTokenizer, {}, check=_check_tokenizer, half=False, examples=4)
def _(s):
    def made(chars):
        t = chat.ChatTokenizer(chars)
        return t.user, t.assistant, t.end, t.vocab_size, t.decode([t.user, *t.encode("ab"), t.end])

    return made, dict(chars=Obj(CHARS))


def _added_rows(call, model, n):
    E = model.embed.token.weight
    return torch.cat([E, E.mean(0, keepdim=True).expand(n, -1)])


@spec("chat.add_tokens", chat.add_tokens, dict(n=(1, 4)), reference=_added_rows, examples=8)
def _(s):
    return (lambda model, n: chat.add_tokens(model, n).embed.token.weight), dict(model=Obj(_tiny(V - 3)), n=Int(s.n))


def _rendered(call, tokenizer, prompt, answer, template):
    if not template:
        ids = tokenizer.encode(prompt + " ")
        reply = [] if answer is None else tokenizer.encode(answer)
    else:
        ids = [tokenizer.user, *tokenizer.encode(prompt), tokenizer.end, tokenizer.assistant]
        reply = [] if answer is None else [*tokenizer.encode(answer), tokenizer.end]
    return ids + reply, [False] * len(ids) + [True] * len(reply)


@spec("chat.render", chat.render, dict(n=(0, 12), m=(0, 6), t=(0, 1)), reference=_rendered, half=False)
def _(s):
    return chat.render, dict(
        tokenizer=Obj(TOK),
        prompt=Text(length=s.n, alphabet=LETTERS),
        answer=Text(length=s.m, alphabet=LETTERS),
        template=Const(bool(s.t)),
    )


def _sft_reference(call, examples, mask_prompt, pad):
    """Each example on its own: inputs ids[:-1], targets ids[1:] with -100 where not learnt, then padding."""
    T = max(len(ids) for ids, _ in examples) - 1
    xs, ys = [], []
    for ids, mask in examples:
        x = list(ids[:-1]) + [pad] * (T - len(ids) + 1)
        y = [t if (m or not mask_prompt) else -100 for t, m in zip(ids[1:], mask[1:])] + [-100] * (T - len(ids) + 1)
        xs.append(x)
        ys.append(y)
    return torch.tensor(xs), torch.tensor(ys)


@spec("chat.sft_batch", chat.sft_batch, dict(B=(1, 3), m=(0, 1)), reference=_sft_reference, half=False)
def _(s):
    examples = [chat.render(TOK, p, a) for p, a in [("reverse oak", "kao"), ("shout ay", "AY"), ("count: a b", "two")]]
    return chat.sft_batch, dict(examples=Obj(examples[: s.B]), mask_prompt=Const(bool(s.m)), pad=Int(TOK.end))


def _padded(call, prompts, answers, pad):
    T = max(len(p) + len(a) for p, a in zip(prompts, answers))
    ids = torch.tensor([p + a + [pad] * (T - len(p) - len(a)) for p, a in zip(prompts, answers)])
    mask = torch.tensor([[len(p) <= t < len(p) + len(a) for t in range(T)] for p, a in zip(prompts, answers)])
    return ids, mask


@spec("chat.pad_answers", chat.pad_answers, dict(B=(1, 3)), reference=_padded, half=False)
def _(s):
    return chat.pad_answers, dict(
        prompts=IntLists([3, 5, 2][: s.B], high=V), answers=IntLists([2, 1, 4][: s.B], high=V), pad=Int(TOK.end)
    )


def _logprobs(call, model, ids, mask):
    logp = torch.log_softmax(model(ids[:, :-1]), -1).gather(-1, ids[:, 1:, None])[..., 0]  # (B, T - 1)
    return (logp * mask[:, 1:]).sum(-1)


@spec("chat.sequence_logprobs", chat.sequence_logprobs, dict(B=(1, 3), T=(2, 8)), reference=_logprobs, examples=12)
def _(s):
    return chat.sequence_logprobs, dict(model=Obj(_tiny()), ids=Ids(s.B, s.T, vocab=V), mask=AnswerMask(s.B, s.T))


def _check_answers(out, args):
    prompts, n = args["prompts"], args["max_new_tokens"]
    assert isinstance(out, list) and len(out) == len(prompts)
    for ids in out:
        assert all(isinstance(i, int) and 0 <= i < V for i in ids) and len(ids) <= n
        assert TOK.end not in ids[:-1] and (args["keep_end"] or TOK.end not in ids)
    again = chat.answer(args["model"], TOK, prompts, max_new_tokens=n, keep_end=args["keep_end"])
    assert again == out  # greedy: the same answers every time


@spec("chat.answer", chat.answer, dict(n=(1, 6), k=(0, 1)), check=_check_answers, half=False, examples=10)
def _(s):
    return chat.answer, dict(
        model=Obj(_tiny()),
        tokenizer=Obj(TOK),
        prompts=Texts(["reverse oak", "shout ay", "count: a b"]),
        max_new_tokens=Int(s.n),
        temperature=Num(0.0, corruptions=("negative", "not a number", "infinite", "str")),
        template=Const(True),
        keep_end=Const(bool(s.k)),
        generator=Gen(),
    )


@spec(
    "chat.exact_match",
    chat.exact_match,
    dict(B=(1, 3)),
    reference=lambda call, tokenizer, answers, expected: torch.tensor(
        [float(tokenizer.decode(a) == e) for a, e in zip(answers, expected)]
    ),
    half=False,
)
def _(s):
    answers = [TOK.encode(w) for w in ["kao", "hsa", "mle"]][: s.B]
    return chat.exact_match, dict(
        tokenizer=Obj(TOK),
        answers=IntLists([len(a) for a in answers], high=V),
        expected=Texts(["kao", "hsa", "elm"][: s.B]),
    )


# --- preference -------------------------------------------------------------------------------------------


def _direct_dpo(call, policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    margin = beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))
    return F.softplus(-margin).mean()


LOGPS = dict(B=(1, 6))


@spec(
    "preference.implicit_reward",
    preference.implicit_reward,
    LOGPS,
    reference=lambda call, policy_logps, ref_logps, beta: beta * (policy_logps - ref_logps),
)
def _(s):
    return preference.implicit_reward, dict(policy_logps=Tensor(s.B), ref_logps=Tensor(s.B), beta=Num(0.1))


@spec("preference.dpo_loss", preference.dpo_loss, LOGPS, reference=_direct_dpo)
def _(s):
    return preference.dpo_loss, dict(
        policy_chosen=Tensor(s.B), policy_rejected=Tensor(s.B), ref_chosen=Tensor(s.B), ref_rejected=Tensor(s.B),
        beta=Num(0.5),
    )  # fmt: skip


@spec(
    "preference.dpo_nll_loss",
    preference.dpo_nll_loss,
    LOGPS,
    reference=lambda call, policy_chosen, policy_rejected, ref_chosen, ref_rejected, chosen_lengths, beta, alpha: (
        _direct_dpo(None, policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta)
        - alpha * (policy_chosen / chosen_lengths).mean()
    ),
)
def _(s):
    return preference.dpo_nll_loss, dict(
        policy_chosen=Tensor(s.B), policy_rejected=Tensor(s.B), ref_chosen=Tensor(s.B), ref_rejected=Tensor(s.B),
        chosen_lengths=Tensor(s.B, positive=True, scale=3.0), beta=Num(0.5),
        alpha=Num(1.0, corruptions=("negative", "not a number", "infinite", "str")),
    )  # fmt: skip


@spec(
    "preference.chosen_nll",
    preference.chosen_nll,
    LOGPS,
    reference=lambda call, policy_chosen, chosen_lengths: (
        -sum(p / n for p, n in zip(policy_chosen, chosen_lengths)) / len(policy_chosen)
    ),
)
def _(s):
    return preference.chosen_nll, dict(
        policy_chosen=Tensor(s.B), chosen_lengths=Tensor(s.B, positive=True, scale=3.0)
    )  # fmt: skip


@spec(
    "preference.sequence_kl",
    preference.sequence_kl,
    LOGPS,
    reference=lambda call, policy_logps, ref_logps, beta: beta * (policy_logps - ref_logps).mean(),
)
def _(s):
    return preference.sequence_kl, dict(policy_logps=Tensor(s.B), ref_logps=Tensor(s.B), beta=Num(2.0))


# --- grpo ---------------------------------------------------------------------------------------------------


def _advantages(call, rewards, eps):
    out = torch.zeros_like(rewards)
    for b in range(rewards.shape[0]):  # one group at a time, the sample std written out
        r = rewards[b]
        mean = r.sum() / len(r)
        std = torch.sqrt(((r - mean) ** 2).sum() / (len(r) - 1))
        out[b] = (r - mean) / (std + eps)
    return out


@spec("grpo.group_advantages", grpo.group_advantages, dict(B=(1, 3), G=(2, 6)), reference=_advantages)
def _(s):
    return grpo.group_advantages, dict(
        rewards=Tensor(s.B, s.G, seq=1), eps=Num(1e-4, corruptions=("negative", "not a number", "infinite", "str"))
    )


def _k3(call, logps, ref_logps):
    r = ref_logps - logps
    return torch.exp(r) - r - 1


@spec("grpo.kl_per_token", grpo.kl_per_token, dict(N=(1, 3), T=(1, 5)), reference=_k3)
def _(s):
    return grpo.kl_per_token, dict(logps=Tensor(s.N, s.T, seq=1), ref_logps=Tensor(s.N, s.T, seq=1))


def _objective(call, logps, old_logps, ref_logps, advantages, mask, clip, beta):
    """Shao et al.'s eq. 3 one answer and one token at a time."""
    total = torch.zeros((), dtype=logps.dtype)  # an answer with no token adds 0
    for i in range(logps.shape[0]):
        terms = []
        for t in range(logps.shape[1]):
            if mask[i, t]:
                rho = torch.exp(logps[i, t] - old_logps[i, t])
                a = advantages[i]
                clipped = torch.min(rho * a, torch.clamp(rho, 1 - clip, 1 + clip) * a)
                terms.append(clipped - beta * _k3(None, logps[i, t], ref_logps[i, t]))
        total = total + (sum(terms) / len(terms) if terms else 0.0)
    return -total / logps.shape[0]


@spec("grpo.grpo_loss", grpo.grpo_loss, dict(N=(1, 3), T=(1, 5)), reference=_objective)
def _(s):
    return grpo.grpo_loss, dict(
        logps=Tensor(s.N, s.T, seq=1, scale=0.5), old_logps=Tensor(s.N, s.T, seq=1, scale=0.5),
        ref_logps=Tensor(s.N, s.T, seq=1, scale=0.5), advantages=Tensor(s.N), mask=Mask(s.N, s.T),
        clip=Num(0.2), beta=Num(0.04, corruptions=("negative", "not a number", "infinite", "str")),
    )  # fmt: skip


def _clipped_share(call, logps, old_logps, ref_logps, advantages, mask, clip, beta):
    """The answer tokens whose clipped surrogate is flat, counted one at a time."""
    cut = n = 0
    for i in range(logps.shape[0]):
        for t in range(logps.shape[1]):
            if mask[i, t]:
                rho, a = torch.exp(logps[i, t] - old_logps[i, t]), advantages[i]
                cut += bool((a > 0 and rho > 1 + clip) or (a < 0 and rho < 1 - clip))
                n += 1
    return torch.tensor(cut / max(n, 1), dtype=logps.dtype)


@spec("grpo.clipped_share", grpo.clipped_share, dict(N=(1, 3), T=(1, 5)), reference=_clipped_share)
def _(s):
    return grpo.clipped_share, dict(
        logps=Tensor(s.N, s.T, seq=1, scale=0.5), old_logps=Tensor(s.N, s.T, seq=1, scale=0.5),
        ref_logps=Tensor(s.N, s.T, seq=1, scale=0.5), advantages=Tensor(s.N), mask=Mask(s.N, s.T),
        clip=Num(0.2), beta=Num(0.04, corruptions=("negative", "not a number", "infinite", "str")),
    )  # fmt: skip


# --- post_training: recipes ----------------------------------------------------------------------------------

POSITIVE = ("zero", "negative", "not a number", "infinite", "str")


@spec("post_training.SFTRecipe", post_training.SFTRecipe, {}, half=False, examples=8)
def _(s):
    return post_training.SFTRecipe, dict(
        steps=Int(20), batch_size=Int(4), lr=Num(1e-3, corruptions=POSITIVE),
        warmup_steps=Int(5, corruptions=("negative", "float", "bool", "str")),
    )  # fmt: skip


@spec("post_training.DPORecipe", post_training.DPORecipe, {}, half=False, examples=8)
def _(s):
    return post_training.DPORecipe, dict(
        beta=Num(0.5, corruptions=POSITIVE), epochs=Int(2), batch_size=Int(4), lr=Num(1e-3, corruptions=POSITIVE),
        nll=Num(1.0, corruptions=("negative", "not a number", "infinite", "str")),
    )  # fmt: skip


@spec("post_training.GRPORecipe", post_training.GRPORecipe, {}, half=False, examples=8)
def _(s):
    return post_training.GRPORecipe, dict(
        steps=Int(3), prompts=Int(2), group=Int(4), lr=Num(1e-3, corruptions=POSITIVE),
        clip=Num(0.2, corruptions=POSITIVE), beta=Num(0.04, corruptions=("negative", "not a number", "str")),
        max_new_tokens=Int(6), updates=Int(2),
    )  # fmt: skip


# --- post_training: training and measuring -----------------------------------------------------------------


def _check_base(out, args):
    model, tok = out
    assert model.config.vocab_size == tok.vocab_size == 68 and tok.decode([tok.end]) == "<|end|>"


@spec("post_training.base_model", post_training.base_model, {}, check=_check_base, half=False, examples=2)
def _(s):
    return post_training.base_model, {}


def _check_losses(out, args):
    assert len(out) == args["recipe"].steps and all(math.isfinite(x) and x > 0 for x in out)


@spec("post_training.train_sft", post_training.train_sft, {}, check=_check_losses, half=False, examples=8)
def _(s):
    return post_training.train_sft, dict(
        model=Obj(_tiny()), tokenizer=Obj(TOK), words=Texts(WORDS),
        recipe=Obj(post_training.SFTRecipe(steps=2, batch_size=2, warmup_steps=1)), seed=Int(0, corruptions=SEED_INT),
        kinds=Texts(["reverse", "capitals"]), quiet=Const(True),
    )  # fmt: skip


def _check_scores(out, args):
    assert out and all(0.0 <= v <= 1.0 for v in out.values())
    assert {k.rsplit(" ", 1)[0] for k in out} <= set(tasks.KINDS) | {f"{k} starts" for k in tasks.KINDS}


@spec("post_training.evaluate", post_training.evaluate, dict(n=(1, 4)), check=_check_scores, half=False, examples=8)
def _(s):
    return post_training.evaluate, dict(model=Obj(_tiny()), tokenizer=Obj(TOK), tests=Obj(_tests(s.n)),
                                        template=Const(True))  # fmt: skip


def _check_sets(out, args):
    sizes = {"held-out words": 300, "held-out phrasings": 200, "unseen kinds": 100}
    assert {k: len(v) for k, v in out.items()} == sizes
    assert {i.kind for i in out["unseen kinds"]} <= set(tasks.UNSEEN_KINDS)


@spec("post_training.evaluation_sets", post_training.evaluation_sets, {}, check=_check_sets, half=False, examples=4)
def _(s):
    return post_training.evaluation_sets, dict(words=Texts(WORDS))


def _check_pairs(out, args):
    answers = {tuple(chat.render(TOK, t.prompt)[0]): t.answer for t in args["tests"]}
    for prompt, chosen, rejected in out:
        assert TOK.decode(chosen[:-1]) == answers[tuple(prompt)] and chosen[-1] == TOK.end
        assert not (rejected and rejected[-1] == TOK.end and TOK.decode(rejected[:-1]) == answers[tuple(prompt)])


@spec("post_training.preference_pairs", post_training.preference_pairs, {}, check=_check_pairs, half=False, examples=6)
def _(s):
    return post_training.preference_pairs, dict(
        model=Obj(_tiny()), tokenizer=Obj(TOK), tests=Obj(_tests(3)), samples=Int(2), generator=Gen()
    )


@spec("post_training.pair_logps", post_training.pair_logps, dict(n=(1, 3)), half=False, examples=8)
def _(s):
    return post_training.pair_logps, dict(model=Obj(_tiny()), pairs=Obj(_pairs(s.n)), pad=Int(TOK.end))


def _check_history(out, args):
    n, recipe = len(args["pairs"]), args["recipe"]
    assert len(out) == recipe.epochs * math.ceil(n / recipe.batch_size)
    assert all(math.isfinite(v) for row in out for v in row.values())
    assert out[0]["margin"] == 0.0 or abs(out[0]["margin"]) < 1e-5  # the first step starts at the reference


@spec("post_training.train_dpo", post_training.train_dpo, dict(n=(1, 4)), check=_check_history, half=False, examples=8)
def _(s):
    model = _tiny()
    return post_training.train_dpo, dict(
        policy=Obj(model), reference=Obj(post_training.frozen_copy(model)), pairs=Obj(_pairs(s.n)),
        recipe=Obj(post_training.DPORecipe(epochs=2, batch_size=2, nll=1.0)), pad=Int(TOK.end),
        seed=Int(0, corruptions=SEED_INT), quiet=Const(True),
    )  # fmt: skip


def _check_accuracy(out, args):
    answers = chat.answer(args["model"], TOK, [t.prompt for t in args["tests"]])
    expected = sum(TOK.decode(a) == t.answer for a, t in zip(answers, args["tests"])) / len(answers)
    assert math.isclose(out, expected, rel_tol=1e-6)


@spec("post_training.accuracy", post_training.accuracy, dict(n=(1, 4)), check=_check_accuracy, half=False)
def _(s):
    return post_training.accuracy, dict(model=Obj(_tiny()), tokenizer=Obj(TOK), tests=Obj(_tests(s.n)))


def _two(s):
    """A policy and its reference with the same weights."""
    model = _tiny()
    return dict(policy=Obj(model), reference=Obj(post_training.frozen_copy(model)), tokenizer=Obj(TOK),
                tests=Obj(_tests(3)))  # fmt: skip


@spec(
    "post_training.win_rate", post_training.win_rate, {}, check=lambda out, args: 0 <= out <= 1, half=False, examples=6
)
def _(s):
    return post_training.win_rate, dict(**_two(s), samples=Int(2), generator=Gen())


@spec(
    "post_training.kl_from_reference",
    post_training.kl_from_reference,
    {},
    check=lambda out, args: out == 0.0,  # a policy equal to its reference
    half=False,
    examples=6,
)
def _(s):
    return post_training.kl_from_reference, dict(**_two(s), samples=Int(2), generator=Gen())


@spec(
    "post_training.comparisons",
    post_training.comparisons,
    {},
    check=lambda out, args: set(out) == {"wins", "ties", "losses"} and abs(sum(out.values()) - 1) < 1e-6,
    half=False,
    examples=6,
)
def _(s):
    return post_training.comparisons, dict(**_two(s), samples=Int(2), generator=Gen())


def _check_measures(out, args):
    assert set(out) == {"win rate", "wins", "losses", "reward margin", "log-ratio, chosen", "log-ratio, rejected",
                        "KL (nats)", "exact-match"}  # fmt: skip
    assert out["reward margin"] == out["log-ratio, chosen"] == out["log-ratio, rejected"] == out["KL (nats)"] == 0.0
    assert 0 <= out["win rate"] <= 1 and 0 <= out["exact-match"] <= 1


@spec(
    "post_training.preference_measures",
    post_training.preference_measures,
    {},
    check=_check_measures,
    half=False,
    examples=6,
)
def _(s):
    return post_training.preference_measures, dict(
        **_two(s), pairs=Obj(_pairs(2)), beta=Num(0.5), samples=Int(1), seed=Int(0, corruptions=SEED_INT)
    )


@spec(
    "post_training.exact_reward",
    post_training.exact_reward,
    dict(n=(0, 4)),
    reference=lambda call, answer, expected: float(answer == expected),
    half=False,
)
def _(s):
    return post_training.exact_reward, dict(answer=Text(length=s.n, alphabet="ab"), expected=Text("ab"))


@spec(
    "post_training.first_letter_reward",
    post_training.first_letter_reward,
    dict(n=(0, 4)),
    reference=lambda call, answer, expected: float(answer[:1] == expected[:1]),
    half=False,
)
def _(s):
    return post_training.first_letter_reward, dict(answer=Text(length=s.n, alphabet="ab"), expected=Text("ab"))


def _check_grpo(out, args):
    assert [h["step"] for h in out] == list(range(1, args["recipe"].steps + 1))
    assert all(0 <= h["reward"] <= 1 and h["kl"] >= 0 and math.isfinite(h["loss"]) for h in out)


@spec("post_training.train_grpo", post_training.train_grpo, {}, check=_check_grpo, half=False, examples=6)
def _(s):
    model = _tiny()
    pool = _tests(4)
    return post_training.train_grpo, dict(
        policy=Obj(model), reference=Obj(post_training.frozen_copy(model)), tokenizer=Obj(TOK),
        prompts=Obj(lambda step: pool[2 * step : 2 * step + 2]), reward=Obj(post_training.first_letter_reward),
        recipe=Obj(post_training.GRPORecipe(steps=2, prompts=2, group=2, max_new_tokens=4, updates=1)),
        seed=Int(0, corruptions=SEED_INT), quiet=Const(True),
    )  # fmt: skip


def _check_saved(out, args):
    model, _, info = post_training.load_assistant(args["path"])
    assert out is None and info["seed"] == args["seed"] and info["results"] == args["results"]
    for a, b in zip(args["model"].state_dict().values(), model.state_dict().values()):
        torch.testing.assert_close(b, a.half().float())


@spec("post_training.save_assistant", post_training.save_assistant, {}, check=_check_saved, half=False, examples=6)
def _(s):
    return post_training.save_assistant, dict(
        model=Obj(_tiny()), path=Obj(FILES / "assistant.pt"), recipe=Obj(post_training.SFTRecipe()),
        seed=Int(3, corruptions=SEED_INT), results=Obj({"held-out words": {"reverse exact": 0.5}}),
    )  # fmt: skip


def _check_loaded(out, args):
    model, tok, info = out
    assert model.config.vocab_size == tok.vocab_size == 68 and not model.training
    assert info["recipe"] == post_training.SFTRecipe().to_dict()


@spec("post_training.load_assistant", post_training.load_assistant, {}, check=_check_loaded, half=False, examples=5)
def _(s):
    return post_training.load_assistant, dict(
        path=FilePath(data.packaged_dir() / post_training.ASSISTANT, wrong=_garbage_file())
    )


def _check_frozen(out, args):
    assert all(not p.requires_grad for p in out.parameters()) and not out.training
    for a, b in zip(args["model"].state_dict().values(), out.state_dict().values()):
        assert torch.equal(a, b)


@spec("post_training.frozen_copy", post_training.frozen_copy, {}, check=_check_frozen, half=False, examples=4)
def _(s):
    return post_training.frozen_copy, dict(model=Obj(_tiny()))


# --- data.instructions ----------------------------------------------------------------------------------------


def _check_words(out, args):
    train, held = out
    assert train == sorted(train) and held == sorted(held) and not set(train) & set(held)
    assert abs(len(held) / (len(train) + len(held)) - args["held_out"]) < 0.01


@spec("instructions.instruction_words", tasks.instruction_words, {}, check=_check_words, half=False, examples=5)
def _(s):
    return tasks.instruction_words, dict(
        held_out=Num(0.2, corruptions=("zero", "negative", "not a number", "str")), seed=Int(0, corruptions=SEED_INT)
    )


@spec("instructions.instructions", tasks.instructions, dict(n=(0, 6), k=(0, 1)), half=False)
def _(s):
    return tasks.instructions, dict(
        n=Int(s.n, corruptions=("negative", "float", "bool", "str")), words=Texts(WORDS),
        kinds=Texts(["reverse", "count"] if s.k else ["repeat"]), phrasing=Choice("train"),
        seed=Int(0, corruptions=SEED_INT),
    )  # fmt: skip


@spec(
    "instructions.answer_of",
    tasks.answer_of,
    dict(i=(0, 3)),
    reference=lambda call, kind, words, index: words[-1] if index == 3 else words[index],
    half=False,
)
def _(s):
    return tasks.answer_of, dict(
        kind=Choice("nth word"), words=Texts(["to", "be", "or", "not"]), index=Int(s.i, corruptions=SEED_INT)
    )
