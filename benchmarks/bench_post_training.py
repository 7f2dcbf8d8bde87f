"""From a model of text to an assistant: the seeds and the longer runs behind the chapter's numbers, and the
instruction-tuned lab GPT the library ships.

Part 1, instruction tuning (``sft``). The chapter's recipe (``post_training.SFTRecipe()``) from the lab's GPT
on three seeds, and two variants of it on the same seeds: without the loss mask (the loss on every token of
the turn) and without the template (the bare instruction, a space, the answer). Each model is tested on the
chapter's three test sets (``post_training.evaluation_sets``): exact-match, "starts with the answer" and
"ends the turn", per kind. Seed 0 of the recipe is written in float16 to
``lib/attnbook/data_files/assistant/sft.pt`` (``post_training.load_assistant``); one longer run (seed 0) of the
recipe and one of the variant without the loss mask show what more steps change.

Part 2, DPO (``dpo``). From the shipped assistant: preference pairs by the rule "a right answer beats a wrong
one" from eight answers sampled per training prompt (reversing a word), then DPO at four betas, and DPO+NLL
(the chosen answer's negative log-likelihood per token added, Pang et al. 2024) at the same betas, and the
control of DPO+NLL, the NLL term alone (instruction tuning on the chosen answers), on three seeds (each seed
samples its own pairs and orders its own batches). For each run, on held-out words: the win
rate against the reference, the implicit reward margin and the two log-ratios on held-out pairs, the KL from
the reference, and greedy exact-match on reversing and on every kind.

Part 3, GRPO (``grpo``). From the shipped assistant, on reversing a word: the exact-match reward on three
seeds (the reward curve, exact-match before and after), and a gameable reward that checks only the answer's
first letter, without and with a KL penalty, on the same seeds (the proxy reward, the true exact-match, the
answer length).

    python benchmarks/bench_post_training.py              # every part: results/post_training.json, the checkpoint
    python benchmarks/bench_post_training.py --part dpo   # one part (the others' results are kept)
    python benchmarks/bench_post_training.py --part dpo --loss "NLL alone" --seed 0  # one run replaced
    python benchmarks/bench_post_training.py --smoke      # a few steps of everything, nothing written

Writes benchmarks/results/post_training.json, the assistant's checkpoint and the bench_post_training section of
benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
from _common import cpu_name, loadavg, write_section  # noqa: E402  (benchmarks/_common.py)
from attnbook import chat, data, post_training
from attnbook.data import instructions as tasks
from attnbook.interpret import LAB_GPT

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "post_training.json"
CHECKPOINT = data.packaged_dir() / post_training.ASSISTANT
START, END = "<!-- bench_post_training:start -->", "<!-- bench_post_training:end -->"
SEEDS = [0, 1, 2]


def base_id() -> str:
    """The first 12 hex digits of the SHA-256 of the lab GPT's file every run starts from: each run records
    it, so that runs made from an earlier lab GPT are told apart."""
    return hashlib.sha256((data.packaged_dir() / LAB_GPT).read_bytes()).hexdigest()[:12]


LONG_STEPS = 1200
LONG = {"full": "long", "no loss mask": "long, no loss mask"}  # the variants run longer (seed 0), and their keys
VARIANTS = {
    "full": {},
    "no loss mask": {"mask_prompt": False},
    "no template": {"template": False},
}
TASK = "reverse"  # the kind DPO and GRPO work on
BETAS = [0.01, 0.1, 1.0, 10.0]
LOSSES = {  # name: (the DPO term, the NLL weight); the NLL term alone is trained once, not per beta
    "DPO": (True, 0.0),
    "DPO+NLL": (True, 1.0),
    "NLL alone": (False, 1.0),
}
NLL_ALONE_BETA = 1.0  # the beta its reward margin is measured with (training does not use it)
DPO_PROMPTS, DPO_SAMPLES, DPO_HELD = 2000, 8, 400  # training prompts, answers sampled per prompt, held-out prompts
WIN_SAMPLES = 2  # answers of each model per held-out prompt in the win rate and the KL
GRPO_RUNS = {  # name: (reward, KL coefficient beta)
    "exact, beta 0.04": ("exact", 0.04),
    "first letter, beta 0": ("first letter", 0.0),
    "first letter, beta 0.5": ("first letter", 0.5),
}


def dpo_data(model, tok, words, test_words, seed: int):
    """The chapter's pairs: training prompts (seed 10) with answers sampled with ``seed``, and the held-out
    prompts (seed 11) and their pairs (answers sampled with seed 1), the same for every run."""
    train = tasks.instructions(DPO_PROMPTS, words, kinds=[TASK], seed=10)
    held = tasks.instructions(DPO_HELD, test_words, kinds=[TASK], seed=11)
    pairs = post_training.preference_pairs(
        model, tok, train, samples=DPO_SAMPLES, generator=torch.Generator().manual_seed(seed)
    )
    held_pairs = post_training.preference_pairs(
        model, tok, held, samples=DPO_SAMPLES, generator=torch.Generator().manual_seed(1)
    )
    return pairs, held, held_pairs


def dpo_measures(policy, reference, tok, held, held_pairs, tests, beta) -> dict:
    """What the chapter reports for a DPO run (post_training.preference_measures, as the page computes it),
    and greedy exact-match on every kind."""
    measures = post_training.preference_measures(policy, reference, tok, held, held_pairs, beta, samples=WIN_SAMPLES)
    return {**measures, "exact-match, every kind": post_training.accuracy(policy, tok, tests["held-out words"])}


def grpo_prompts(words, steps, recipe):
    pool = tasks.instructions(steps * recipe.prompts, words, kinds=[TASK], seed=20)
    return lambda step: pool[step * recipe.prompts : (step + 1) * recipe.prompts]


def run_sft(smoke: bool, variants=tuple(VARIANTS), seeds=tuple(SEEDS), long=True, short=True) -> dict:
    words, test_words = tasks.instruction_words()
    tests = post_training.evaluation_sets(test_words)
    if smoke:
        tests = {k: v[:20] for k, v in tests.items()}
    recipe = post_training.SFTRecipe()
    runs = []
    shipped = None
    for name, change in VARIANTS.items():
        if name not in variants or not short:
            continue
        for seed in seeds[:1] if smoke else seeds:
            r = dataclasses.replace(recipe, **change, steps=5 if smoke else recipe.steps)
            model, tok = post_training.base_model()
            start = time.perf_counter()
            losses = post_training.train_sft(model, tok, words, r, seed=seed, quiet=True)
            seconds = time.perf_counter() - start
            results = {k: post_training.evaluate(model, tok, v, template=r.template) for k, v in tests.items()}
            runs.append(
                {
                    "variant": name,
                    "seed": seed,
                    "base": base_id(),
                    "train_seconds": seconds,
                    "loss": losses[::10],
                    "results": results,
                }
            )
            print(f"sft {name} seed {seed}: {seconds:.0f} s", flush=True)
            if name == "full" and seed == 0 and not smoke:
                before = None
                if CHECKPOINT.exists():
                    old, _, _ = post_training.load_assistant()
                    new = {k: v.half().float() for k, v in model.state_dict().items()}
                    before = max((new[k] - v).abs().max().item() for k, v in old.state_dict().items())
                CHECKPOINT.parent.mkdir(parents=True, exist_ok=True)
                post_training.save_assistant(model, CHECKPOINT, recipe=recipe, seed=0, results=results)
                shipped = {"file": str(CHECKPOINT.relative_to(HERE.parent)), "bytes": CHECKPOINT.stat().st_size,
                           "largest_weight_difference_from_the_file_that_was_there": before}  # fmt: skip
    out = {"recipe": recipe.to_dict(), "seeds": SEEDS, "runs": runs}
    if shipped is not None:
        out["shipped"] = shipped
    for name, key in LONG.items():
        if name not in variants or not long:
            continue
        long_recipe = dataclasses.replace(recipe, **VARIANTS[name], steps=10 if smoke else LONG_STEPS)
        model, tok = post_training.base_model()
        start = time.perf_counter()
        post_training.train_sft(model, tok, words, long_recipe, seed=0, quiet=True)
        out[key] = {
            "steps": long_recipe.steps,
            "base": base_id(),
            "train_seconds": time.perf_counter() - start,
            "results": {
                k: post_training.evaluate(model, tok, v, template=long_recipe.template) for k, v in tests.items()
            },
        }
        print(f"sft {name}, {long_recipe.steps} steps: {out[key]['train_seconds']:.0f} s", flush=True)
    return out


def merge(result: dict, part: str, new: dict) -> None:
    """Put a part's results into ``result``; the runs of variants (or GRPO runs) not run again are kept."""
    if part not in result:
        result[part] = new
        return
    key, order = {
        "sft": ("variant", list(VARIANTS)),
        "grpo": ("run", list(GRPO_RUNS)),
        "dpo": ("beta", [None, *BETAS]),
    }[part]

    def identity(r):
        return r[key], r["seed"], r.get("nll"), r.get("dpo", True)

    ran = {identity(r) for r in new["runs"]}
    old = result[part]
    old["runs"] = [r for r in old["runs"] if identity(r) not in ran] + new["runs"]
    old["runs"].sort(
        key=lambda r: (
            not r.get("dpo", True),
            r.get("nll") or 0.0,
            order.index(r[key]),
            r["seed"] if r["seed"] is not None else -1,
        )
    )
    old.update({k: v for k, v in new.items() if k != "runs"})


def loss_name(run: dict) -> str:
    """The loss a DPO-part run trained with (runs without a "dpo" key are from before the NLL-alone control)."""
    if not run.get("dpo", True):
        return "NLL alone"
    return "DPO+NLL" if run["nll"] else "DPO"


def run_dpo(smoke: bool, betas=tuple(BETAS), seeds=tuple(SEEDS), losses=tuple(LOSSES)) -> dict:
    words, test_words = tasks.instruction_words()
    tests = post_training.evaluation_sets(test_words)
    reference, tok, _ = post_training.load_assistant()
    runs = []
    for seed in seeds[:1] if smoke else seeds:
        pairs, held, held_pairs = dpo_data(reference, tok, words, test_words, seed)
        if smoke:
            held, tests = held[:20], {k: v[:20] for k, v in tests.items()}
        if seed == SEEDS[0] and set(losses) - {"NLL alone"}:
            runs.append({"beta": None, "nll": None, "seed": None, "base": base_id(), "pairs": len(pairs),
                         **dpo_measures(reference, reference, tok, held, held_pairs, tests, 1.0)})  # fmt: skip
        for name in losses:
            dpo, nll = LOSSES[name]
            for beta in betas if dpo else [None]:
                epochs = 1 if smoke else post_training.DPORecipe().epochs
                recipe = post_training.DPORecipe(beta=beta or NLL_ALONE_BETA, nll=nll, epochs=epochs, dpo=dpo)
                policy = post_training.frozen_copy(reference).requires_grad_(True)
                start = time.perf_counter()
                history = post_training.train_dpo(policy, reference, pairs, recipe, pad=tok.end, seed=seed, quiet=True)
                seconds = time.perf_counter() - start
                measures = dpo_measures(policy, reference, tok, held, held_pairs, tests, recipe.beta)
                runs.append({"beta": beta, "nll": nll, "dpo": dpo, "seed": seed, "base": base_id(),
                             "pairs": len(pairs), "train_seconds": seconds,
                             "history": history[::2], **measures})  # fmt: skip
                print(f"dpo {name} beta {beta} seed {seed}: {seconds:.0f} s {measures}", flush=True)
    return {"recipe": post_training.DPORecipe().to_dict(), "task": TASK, "held_out_pairs": len(held_pairs),
            "prompts": DPO_PROMPTS, "samples": DPO_SAMPLES, "held_out_prompts": DPO_HELD,
            "win_samples": WIN_SAMPLES, "runs": runs}  # fmt: skip


def run_grpo(smoke: bool, names=tuple(GRPO_RUNS), seeds=tuple(SEEDS)) -> dict:
    words, test_words = tasks.instruction_words()
    held = tasks.instructions(200, test_words, kinds=[TASK], seed=11)
    if smoke:
        held = held[:20]
    rewards = {"exact": post_training.exact_reward, "first letter": post_training.first_letter_reward}
    runs = []
    for name, (reward, beta) in GRPO_RUNS.items():
        if name not in names:
            continue
        for seed in seeds[:1] if smoke else seeds:
            policy, tok, _ = post_training.load_assistant()
            reference = post_training.frozen_copy(policy)
            recipe = post_training.GRPORecipe(beta=beta, steps=2 if smoke else post_training.GRPORecipe().steps)
            before = post_training.accuracy(policy, tok, held)
            start = time.perf_counter()
            history = post_training.train_grpo(
                policy, reference, tok, grpo_prompts(words, recipe.steps, recipe), rewards[reward], recipe,
                seed=seed, quiet=True,
            )  # fmt: skip
            seconds = time.perf_counter() - start
            answers = chat.answer(policy, tok, [t.prompt for t in held])
            texts = [tok.decode(a) for a in answers]
            runs.append({
                "run": name, "reward": reward, "beta": beta, "seed": seed, "base": base_id(), "train_seconds": seconds,
                "history": history, "accuracy_before": before,
                "accuracy_after": post_training.accuracy(policy, tok, held),
                "proxy_after": sum(rewards[reward](a, t.answer) for a, t in zip(texts, held)) / len(held),
                "length_after": sum(len(a) for a in texts) / len(texts),
                "examples": [[t.prompt, t.answer, a] for t, a in zip(held[:6], texts)],
            })  # fmt: skip
            print(
                f"grpo {name} seed {seed}: {seconds:.0f} s, {before:.2f} -> {runs[-1]['accuracy_after']:.2f}",
                flush=True,
            )
    return {"recipe": post_training.GRPORecipe().to_dict(), "task": TASK, "runs": runs}


def spread(values, fmt="{:.0%}") -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.mean(values))} ({fmt.format(min(values))} to {fmt.format(max(values))})"


def markdown(result: dict) -> str:
    rows = []
    sft = result.get("sft")
    kinds = list(tasks.SEEN_KINDS)
    if sft:
        rows += [
            f"Instruction tuning: {sft['recipe']['steps']} steps, seeds {', '.join(map(str, sft['seeds']))}; "
            "exact-match on held-out words, mean over the five kinds (mean over seeds, lowest to highest).",
            "",
            "| variant | exact-match | starts with the answer | ends the turn | held-out phrasing | unseen kinds | "
            "training time (s) |",
            "|---|---|---|---|---|---|---|",
        ]
        for name in VARIANTS:
            runs = [r for r in sft["runs"] if r["variant"] == name]
            if not runs:
                continue

            def mean_of(r, metric, where="held-out words", names=kinds):
                return statistics.mean(r["results"][where][f"{k} {metric}"] for k in names)

            rows.append(
                f"| {name} | {spread([mean_of(r, 'exact') for r in runs])} | "
                f"{spread([mean_of(r, 'starts right') for r in runs])} | "
                f"{spread([mean_of(r, 'stopped') for r in runs])} | "
                f"{spread([mean_of(r, 'exact', 'held-out phrasings') for r in runs])} | "
                f"{spread([mean_of(r, 'exact', 'unseen kinds', tasks.UNSEEN_KINDS) for r in runs])} | "
                f"{spread([r['train_seconds'] for r in runs], '{:.0f}')} |"
            )
    if sft and "long" in sft and any(r["variant"] == "full" and r["seed"] == 0 for r in sft["runs"]):
        long = sft["long"]["results"]["held-out words"]
        rows += ["", f"Per kind, recipe (seed 0) and {sft['long']['steps']} steps (seed 0):", "",
                 "| kind | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]  # fmt: skip
        seed0 = next(r for r in sft["runs"] if r["variant"] == "full" and r["seed"] == 0)["results"]["held-out words"]
        rows.append(
            f"| {sft['recipe']['steps']} steps | " + " | ".join(f"{seed0[f'{k} exact']:.0%}" for k in kinds) + " |"
        )
        rows.append(
            f"| {sft['long']['steps']} steps | " + " | ".join(f"{long[f'{k} exact']:.0%}" for k in kinds) + " |"
        )
        if LONG["no loss mask"] in sft:
            other = sft[LONG["no loss mask"]]
            words = other["results"]["held-out words"]
            rows.append(
                f"| {other['steps']} steps, no loss mask | "
                + " | ".join(f"{words[f'{k} exact']:.0%}" for k in kinds)
                + " |"
            )
        if "shipped" in sft:
            s = sft["shipped"]
            rows += ["", f"Shipped: `{s['file']}` ({s['bytes']:,} bytes); largest weight difference from the file that "
                     f"was there: {s['largest_weight_difference_from_the_file_that_was_there']}."]  # fmt: skip
    dpo = result.get("dpo")
    if dpo and "nll" in dpo["runs"][-1]:  # (results of an older version of this part are not shown)
        ref = dpo["runs"][0]
        rows += [
            "",
            f"DPO on reversing a word: pairs from {dpo['prompts']} prompts, {dpo['samples']} answers sampled per "
            f"prompt ({spread([r['pairs'] for r in dpo['runs'][1:]], '{:.0f}')} pairs), {dpo['recipe']['epochs']} "
            f"passes in batches of {dpo['recipe']['batch_size']}, learning rate {dpo['recipe']['lr']}; measured on "
            f"{dpo['held_out_prompts']} prompts about held-out words ({dpo['held_out_pairs']} held-out pairs), mean "
            "(lowest to highest) over seeds:",
            "",
            "| loss | beta | win rate | reward margin | log-ratio, chosen | log-ratio, rejected | KL (nats) | "
            "exact-match, reverse | exact-match, every kind |",
            "|---|---|---|---|---|---|---|---|---|",
            f"| reference (against itself) | | {ref['win rate']:.0%} | 0 | 0 | 0 | 0 | {ref['exact-match']:.0%} | "
            f"{ref['exact-match, every kind']:.0%} |",
        ]
        for name in LOSSES:
            for beta in BETAS if LOSSES[name][0] else [None]:
                runs = [r for r in dpo["runs"][1:] if r["beta"] == beta and loss_name(r) == name]
                if not runs:
                    continue
                rows.append(
                    f"| {name} | {beta or ''} | {spread([r['win rate'] for r in runs])} | "
                    f"{spread([r['reward margin'] for r in runs], '{:.2f}')} | "
                    f"{spread([r['log-ratio, chosen'] for r in runs], '{:.2f}')} | "
                    f"{spread([r['log-ratio, rejected'] for r in runs], '{:.2f}')} | "
                    f"{spread([r['KL (nats)'] for r in runs], '{:.2f}')} | "
                    f"{spread([r['exact-match'] for r in runs])} | "
                    f"{spread([r['exact-match, every kind'] for r in runs])} |"
                )
    grpo = result.get("grpo")
    if grpo:
        rows += [
            "",
            f"GRPO on {grpo['task']}, {grpo['recipe']['steps']} steps of {grpo['recipe']['prompts']} prompts x "
            f"{grpo['recipe']['group']} answers; held-out words, mean (lowest to highest) over seeds:",
            "",
            "| run | reward, first 10 steps | reward, last 10 steps | exact-match before | exact-match after | "
            "answer length after | training time (s) |",
            "|---|---|---|---|---|---|---|",
        ]
        for name in GRPO_RUNS:
            runs = [r for r in grpo["runs"] if r["run"] == name]
            first = [statistics.mean(h["reward"] for h in r["history"][:10]) for r in runs]
            last = [statistics.mean(h["reward"] for h in r["history"][-10:]) for r in runs]
            rows.append(
                f"| {name} | {spread(first)} | {spread(last)} | {spread([r['accuracy_before'] for r in runs])} | "
                f"{spread([r['accuracy_after'] for r in runs])} | "
                f"{spread([r['length_after'] for r in runs], '{:.1f}')} | "
                f"{spread([r['train_seconds'] for r in runs], '{:.0f}')} |"
            )
    current = base_id()
    stale = [
        f"{part} {r.get('variant') or r.get('run') or 'beta ' + str(r.get('beta'))}"
        + ("" if r.get("nll") is None else f" nll {r['nll']:g}")
        + ("" if r.get("seed") is None else f" seed {r['seed']}")
        for part in ("sft", "dpo", "grpo")
        for r in (result.get(part) or {}).get("runs", [])
        if r.get("base") != current
    ]
    for key in LONG.values():
        if sft and key in sft and sft[key].get("base") != current:
            stale.append(f"sft {key}, {sft[key]['steps']} steps")
    if stale:
        rows += ["", f"Runs made from an earlier lab GPT (not the shipped `{LAB_GPT}`, SHA-256 {current}...): "
                 + ", ".join(stale) + "."]  # fmt: skip
    m = result["machine"]
    rows += [
        "",
        f"Measured {result['date']} on {m['cpus']} CPUs ({m['processor']}), torch {m['torch']} with "
        f"{m['threads']} thread(s); load average {m['load_start']} at the start, {m['load_end']} at the end "
        "(a shared machine: the times are pessimistic).",
    ]
    return "\n".join(rows) + "\n"


def write_readme(result: dict) -> None:
    write_section(
        "bench_post_training",
        f"{START}\n## From a model of text to an assistant (`bench_post_training.py`)\n\n{markdown(result)}{END}",
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["sft", "dpo", "grpo", "all"], default="all")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--smoke", action="store_true", help="a few steps of everything; nothing is written")
    parser.add_argument("--variant", choices=list(VARIANTS), action="append", help="instruction tuning: only these")
    parser.add_argument("--run", choices=list(GRPO_RUNS), action="append", help="GRPO: only these runs")
    parser.add_argument("--beta", type=float, choices=BETAS, action="append", help="DPO: only these betas")
    parser.add_argument("--loss", choices=list(LOSSES), action="append", help="DPO: only these losses")
    parser.add_argument("--seed", type=int, choices=SEEDS, action="append", help="only these seeds")
    parser.add_argument("--no-long", action="store_true", help="instruction tuning: not the longer runs")
    parser.add_argument("--long-only", action="store_true", help="instruction tuning: only the longer runs")
    args = parser.parse_args(argv)
    os.environ.setdefault("ATTNBOOK_PROGRESS", "0")
    torch.set_num_threads(args.threads)
    load_start = loadavg()
    result = {}
    for part, run in (("sft", run_sft), ("dpo", run_dpo), ("grpo", run_grpo)):
        if args.part in (part, "all"):
            only = {"sft": tuple(args.variant or VARIANTS), "grpo": tuple(args.run or GRPO_RUNS),
                    "dpo": tuple(args.beta or BETAS)}  # fmt: skip
            seeds = tuple(args.seed or SEEDS)
            extra = {
                "sft": {"long": not args.no_long, "short": not args.long_only},
                "dpo": {"losses": tuple(args.loss or LOSSES)},
            }.get(part, {})
            new = run(args.smoke, only[part], seeds=seeds, **extra)
            if args.smoke:
                result[part] = new
                continue
            # read the file again just before writing: parts may run at the same time in other processes
            result = json.loads(args.out.read_text()) if args.out.exists() else {}
            merge(result, part, new)
            args.out.write_text(json.dumps(result, indent=1) + "\n")
    result["date"] = time.strftime("%Y-%m-%d %H:%M")
    result["machine"] = {
        "cpus": os.cpu_count(),
        "processor": cpu_name(),
        "machine": platform.machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "load_start": load_start,
        "load_end": loadavg(),
    }
    if args.smoke:
        print(markdown(result))
        return 0
    result = {**json.loads(args.out.read_text()), "date": result["date"], "machine": result["machine"]}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    write_readme(result)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
