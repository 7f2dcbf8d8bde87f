"""The chapter's experiments on a tiny model: instruction tuning lowers the loss on the answers, the pairs
follow their rule, DPO widens the margin it is trained on, GRPO trains the policy and never the reference,
the rewards, and the shipped assistant's file."""

import math

import pytest
import torch
from attnbook import chat, data, models, post_training
from attnbook.data import instructions as tasks

WORDS = ["oak", "ash", "elm", "yew", "fir", "bay"]


@pytest.fixture()
def tiny():
    chars = data.CharTokenizer(sorted(set("abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ:,?")))
    tok = chat.ChatTokenizer(chars)
    torch.manual_seed(0)
    config = models.TransformerConfig(vocab_size=tok.vocab_size, block_size=64, n_layers=1, n_heads=2, d_model=32)
    return models.GPT(config), tok


def test_instruction_tuning_lowers_the_loss_on_the_answers(tiny):
    model, tok = tiny
    recipe = post_training.SFTRecipe(steps=40, batch_size=16, warmup_steps=5)
    losses = post_training.train_sft(model, tok, WORDS, recipe, seed=0, quiet=True)
    assert len(losses) == 40 and sum(losses[-5:]) < 0.75 * sum(losses[:5])
    scores = post_training.evaluate(model, tok, tasks.instructions(10, WORDS, seed=1))
    kinds = {k.rsplit(" ", 1)[0].replace(" starts", "") for k in scores}
    assert all(0.0 <= v <= 1.0 for v in scores.values()) and kinds <= set(tasks.SEEN_KINDS) | {
        f"{k} starts" for k in tasks.SEEN_KINDS
    }


def test_preference_pairs_follow_the_rule(tiny):
    model, tok = tiny
    tests = tasks.instructions(30, WORDS, kinds=["capitals"], seed=2)
    with torch.no_grad():  # a model that writes capitals often, and stops, so that both kinds of answer occur
        for c in "OAKSHELMYWFIRB":
            model.lm_head.weight[tok.encode(c)[0]] += 0.5
    pairs = post_training.preference_pairs(model, tok, tests, samples=8, generator=torch.Generator().manual_seed(0))
    by_prompt = {tuple(chat.render(tok, t.prompt)[0]): t.answer for t in tests}
    for prompt, chosen, rejected in pairs:
        answer = by_prompt[tuple(prompt)]
        assert chosen[-1] == tok.end and tok.decode(chosen[:-1]) == answer
        assert not (rejected and rejected[-1] == tok.end and tok.decode(rejected[:-1]) == answer)


def test_dpo_widens_the_margin_and_leaves_the_reference_alone(tiny):
    model, tok = tiny
    reference = post_training.frozen_copy(model)
    prompt = chat.render(tok, "capitals: oak")[0]
    pairs = [(prompt, [*tok.encode("OAK"), tok.end], [*tok.encode("oak"), tok.end])] * 4
    before = {k: v.clone() for k, v in reference.state_dict().items()}
    recipe = post_training.DPORecipe(beta=0.5, epochs=20, batch_size=2, lr=1e-3)
    history = post_training.train_dpo(model, reference, pairs, recipe, pad=tok.end, quiet=True)
    assert len(history) == 40  # 20 passes over 4 pairs in batches of 2
    first, last = history[0], history[-1]
    assert first["margin"] == pytest.approx(0.0, abs=1e-5) and first["loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert last["margin"] > 0.5 and last["ranked right"] == 1.0
    assert last["margin"] == pytest.approx(0.5 * (last["log-ratio, chosen"] - last["log-ratio, rejected"]), rel=1e-5)
    assert all(torch.equal(before[k], v) for k, v in reference.state_dict().items())


def test_the_nll_term_keeps_the_chosen_answer_likely(tiny):
    """Near-miss pairs (the same letters, one order right), the same seed and batches: with the NLL term
    (DPO+NLL) the chosen answers end more likely than with DPO alone, both ranking the pairs right."""
    model, tok = tiny
    pairs = [
        (chat.render(tok, f"reverse {w}")[0], [*tok.encode(w[::-1]), tok.end], [*tok.encode(w[1:] + w[0]), tok.end])
        for w in WORDS
    ]
    runs = {}
    for nll in (0.0, 1.0):
        torch.manual_seed(0)
        policy = models.GPT(model.config)
        policy.load_state_dict(model.state_dict())
        reference = post_training.frozen_copy(policy)
        recipe = post_training.DPORecipe(beta=0.05, epochs=40, batch_size=6, lr=3e-3, nll=nll)
        runs[nll] = post_training.train_dpo(policy, reference, pairs, recipe, pad=tok.end, quiet=True)[-1]
    assert runs[0.0]["margin"] > 0 and runs[1.0]["margin"] > 0
    assert runs[1.0]["log-ratio, chosen"] > runs[0.0]["log-ratio, chosen"] + 1.0


def test_the_nll_term_alone_is_instruction_tuning_on_the_chosen_answers(tiny):
    """DPORecipe(dpo=False): the loss is the chosen answers' NLL per token alone, whatever beta; the rejected
    answers do not enter it."""
    model, tok = tiny
    reference = post_training.frozen_copy(model)
    pairs = [
        (chat.render(tok, f"reverse {w}")[0], [*tok.encode(w[::-1]), tok.end], [*tok.encode(w[1:] + w[0]), tok.end])
        for w in WORDS
    ]
    chosen, _ = post_training.pair_logps(reference, pairs, tok.end)
    lengths = torch.tensor([float(len(c)) for _, c, _ in pairs])
    for beta in (0.1, 10.0):
        policy = post_training.frozen_copy(model).requires_grad_(True)
        recipe = post_training.DPORecipe(beta=beta, epochs=1, batch_size=len(pairs), nll=2.0, dpo=False)
        first = post_training.train_dpo(policy, reference, pairs, recipe, pad=tok.end, quiet=True)[0]
        assert first["loss"] == pytest.approx(-2.0 * (chosen / lengths).mean().item(), rel=1e-5)
    with pytest.raises(ValueError, match="nll must be > 0"):
        post_training.DPORecipe(dpo=False)


def test_the_win_rate_counts_a_tie_as_half(tiny):
    model, tok = tiny
    other = post_training.frozen_copy(model)
    with torch.no_grad():  # another model, so that the two answer differently
        other.lm_head.weight[tok.end] += 3.0
    tests = tasks.instructions(12, WORDS, kinds=["repeat"], seed=4)

    def measured(f):
        return f(model, other, tok, tests, samples=2, generator=torch.Generator().manual_seed(5))

    shares = measured(post_training.comparisons)
    assert set(shares) == {"wins", "ties", "losses"} and sum(shares.values()) == pytest.approx(1.0)
    assert all(24 * v == pytest.approx(round(24 * v), abs=1e-4) for v in shares.values())  # shares of 24
    assert measured(post_training.win_rate) == pytest.approx(shares["wins"] + 0.5 * shares["ties"])


def test_grpo_trains_the_policy_on_groups_and_records_its_measures(tiny):
    model, tok = tiny
    reference = post_training.frozen_copy(model)
    pool = tasks.instructions(8, WORDS, kinds=["reverse"], seed=3)
    recipe = post_training.GRPORecipe(steps=2, prompts=4, group=4, max_new_tokens=6)

    # an untrained model's answers are random letters: a reward for a first letter before "n" differs within a
    # group, so the advantages are not all 0 and the policy must move (first_letter_reward is 0 on every answer)
    def early_letter(answer, expected):
        return float(answer[:1] < "n")

    history = post_training.train_grpo(
        model, reference, tok, lambda s: pool[4 * s : 4 * s + 4], early_letter, recipe, quiet=True
    )
    assert [h["step"] for h in history] == [1, 2]
    assert 0 < history[0]["reward"] < 1
    assert all(0 <= h["reward"] <= 1 and h["length"] >= 0 and h["kl"] >= 0 for h in history)
    assert history[0]["kl"] == pytest.approx(0.0, abs=1e-5)  # the first group is sampled from the reference itself
    assert any(not torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters()))


def test_rewards():
    assert post_training.exact_reward("kao", "kao") == 1.0 and post_training.exact_reward("kao ", "kao") == 0.0
    assert post_training.first_letter_reward("kxx", "kao") == 1.0
    assert post_training.first_letter_reward("", "kao") == 0.0


def test_the_assistant_file_round_trips_and_the_shipped_one_loads(tiny, tmp_path):
    model, tok = tiny
    path = tmp_path / "a.pt"
    post_training.save_assistant(model, path, recipe=post_training.SFTRecipe(), seed=3, results={"x": 1.0})
    loaded, _, saved = post_training.load_assistant(path)
    assert saved == {"recipe": post_training.SFTRecipe().to_dict(), "seed": 3, "results": {"x": 1.0}}
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        torch.testing.assert_close(b, a.half().float(), msg=name)  # stored in float16
    shipped, tok, info = post_training.load_assistant()
    assert shipped.config.vocab_size == 68 and tok.vocab_size == 68 and not shipped.training
    assert info["recipe"] == post_training.SFTRecipe().to_dict() and info["seed"] == 0
    assert set(info["results"]) == {"held-out words", "held-out phrasings", "unseen kinds"}
    bad = tmp_path / "bad.pt"
    torch.save({"format": "something else"}, bad)
    with pytest.raises(ValueError, match="not a saved assistant"):
        post_training.load_assistant(bad)


def test_the_benchmark_results_come_from_the_shipped_lab_gpt():
    """Every run in benchmarks/results/post_training.json (which the chapter's pages read) started from the
    lab GPT the library ships: when chapter 16's lab GPT is trained again, the assistant and the results must
    be made again from it (benchmarks/bench_post_training.py)."""
    import hashlib
    import json
    from pathlib import Path

    from attnbook.interpret import LAB_GPT

    results = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "post_training.json"
    if not results.is_file():
        pytest.skip("no benchmark results in this checkout")
    bench = json.loads(results.read_text())
    shipped = hashlib.sha256((data.packaged_dir() / LAB_GPT).read_bytes()).hexdigest()[:12]
    runs = [(part, r) for part in ("sft", "dpo", "grpo") for r in bench[part]["runs"]]
    assert len(runs) == 9 + 28 + 9  # DPO: the reference, 8 losses and betas and NLL alone, 3 seeds
    stale = [(part, r.get("variant") or r.get("run") or r.get("beta"), r["seed"]) for part, r in runs
             if r.get("base") != shipped]  # fmt: skip
    assert not stale, f"runs made from another lab GPT than the shipped one ({shipped}): {stale}"
    assert bench["sft"]["long"]["base"] == shipped
    assert all("nll" in r for r in bench["dpo"]["runs"])  # no run of the part's earlier version
