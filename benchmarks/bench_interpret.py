"""What attention learns: the seeds behind the chapter's numbers, and the lab's GPT the library ships.

Part 1, induction heads. The chapter's attention-only transformers (two layers, and one layer with the same
steps, data and width) are trained with the chapter's recipe (``RECIPE``, which the chapter checks against
its own) on five seeds. For each run: the losses on the first half and on the repeat every 25 steps, the
step of the phase change (the first evaluation at which the loss on the repeat is below ln(V) / 2), every
head's prefix-matching and previous-token scores at the end, the loss on the repeat with each head removed,
and how often each attribution method points at the token the prediction copies.

Part 2, the lab's GPT. ``train_lm``'s book recipe (the lab's) trained with three seeds. Seed 1337's weights
are written in float16 to ``lib/attnbook/data_files/lab_gpt/lab_gpt.pt``, the model ``interpret.load_lab_gpt``
loads and the chapter analyses; every seed is analysed from its float16 weights, as the chapter does:
prefix-matching and previous-token scores on repeated random characters, the validation loss with each head
removed and with the least useful heads removed together, the weight on the first position and on line
breaks, and how much the output moves when a head's weights are permuted or made uniform.

    python benchmarks/bench_interpret.py                  # both parts: results/interpret.json, the checkpoint
    python benchmarks/bench_interpret.py --part lab       # one part (the other's results are kept)
    python benchmarks/bench_interpret.py --smoke          # a few steps of everything, nothing written

Writes benchmarks/results/interpret.json, the lab's checkpoint and the bench_interpret section of
benchmarks/README.md. A checkpoint already in place is compared with the one trained again (the largest
difference of a weight is recorded): the shipped file is reproduced when that difference is 0.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path

import torch
from _common import cpu_name, loadavg, write_section  # noqa: E402  (benchmarks/_common.py)
from attnbook import attention, attribution, data, interpret, models, train, train_lm

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "interpret.json"
CHECKPOINT = data.packaged_dir() / interpret.LAB_GPT
START, END = "<!-- bench_interpret:start -->", "<!-- bench_interpret:end -->"

# The chapter's recipe for the induction-head models (chapters/16_what_attention_learns.md checks it is its own).
RECIPE = {
    "vocab_size": 26,  # the letters a to z
    "halves": [6, 24],  # each batch: a first half of 6 to 24 random letters, then its repeat
    "batch_size": 32,
    "steps": 400,
    "lr": 3e-3,
    "n_heads": 2,
    "d_model": 64,
    "eval_every": 25,
    "probe_size": 64,  # evaluation: 64 sequences of each of these half lengths (seed 1)
    "probe_halves": [8, 12, 16, 20],
}
INDUCTION_SEEDS = [0, 1, 2, 3, 4]
LAB_SEEDS = [1337, 1338, 1339]
MARGIN = 0.05  # nats: how much the validation loss may rise while heads are removed


# --- part 1: induction heads -----------------------------------------------------------------------------


def induction_probes(recipe: dict) -> dict:
    """{half: (sequences drawn as in training, sequences with a first half of distinct letters)}, seed 1."""
    g = torch.Generator().manual_seed(1)
    n, V = recipe["probe_size"], recipe["vocab_size"]
    return {
        half: (
            interpret.repeated_tokens(n, half, V, generator=g),
            interpret.repeated_tokens(n, half, V, distinct=True, generator=g),
        )
        for half in recipe["probe_halves"]
    }


@torch.no_grad()
def measure_induction(model, probes: dict) -> dict:
    """The losses on the probes, and every head's scores on their distinct twins, averaged over the lengths."""
    out = {}
    for ids, distinct in probes.values():
        first, repeat = interpret.repeat_losses(model(ids), ids)
        _, weights = model(distinct, return_weights=True)
        scores = {"first half": first, "repeat": repeat}
        for layer, w in enumerate(weights):
            for head, score in enumerate(interpret.prefix_matching_score(w)):
                scores[f"prefix L{layer + 1}H{head + 1}"] = score
        for head, score in enumerate(interpret.previous_token_score(weights[0])):
            scores[f"previous L1H{head + 1}"] = score
        for k, v in scores.items():
            out[k] = out.get(k, 0.0) + v.item() / len(probes)
    return out


def train_induction(n_layers: int, seed: int, recipe: dict, steps: int | None = None):
    V, (low, high) = recipe["vocab_size"], recipe["halves"]
    config = interpret.AttentionOnlyConfig(
        vocab_size=V, block_size=2 * high - 1, n_layers=n_layers, n_heads=recipe["n_heads"], d_model=recipe["d_model"]
    )
    probes = induction_probes(recipe)
    train.seed_everything(seed)
    model = interpret.AttentionOnly(config)
    data_gen = torch.Generator().manual_seed(seed)

    def batch(step):
        half = int(torch.randint(low, high + 1, (1,), generator=data_gen))
        return interpret.repeated_tokens(recipe["batch_size"], half, V, generator=data_gen)

    def loss_fn(model, ids):
        return models.lm_loss(model(ids[:, :-1]), ids[:, 1:])

    def measure(model):
        return measure_induction(model, probes)

    start = measure(model)
    history = train.fit(
        model,
        batch,
        loss_fn,
        steps=steps or recipe["steps"],
        lr=recipe["lr"],
        evaluate=measure,
        eval_every=recipe["eval_every"],
        quiet=True,
    )
    curve = {k: [start[k]] + v for k, v in history.evals.items()}
    return model.eval(), [0] + history.eval_step, curve, history.seconds


def phase_change_step(steps: list[int], repeat: list[float], vocab_size: int) -> int | None:
    """The first evaluated step at which the loss on the repeat is below ln(V) / 2."""
    return next((s for s, v in zip(steps, repeat) if v < math.log(vocab_size) / 2), None)


@torch.no_grad()
def induction_ablations(model, probes: dict) -> dict:
    """The loss on the repeat with each head removed, and with both heads of the second layer removed."""
    out = {}
    n_layers, n_heads = model.config.n_layers, model.config.n_heads
    choices = {f"L{l + 1}H{h + 1}": [(l, h)] for l in range(n_layers) for h in range(n_heads)}
    if n_layers > 1:
        choices["both heads of layer 2"] = [(1, h) for h in range(n_heads)]
    for name, heads in choices.items():
        with interpret.ablate_heads(model, heads):
            out[name] = measure_induction(model, probes)["repeat"]
    return out


def attribution_agreement(model, recipe: dict) -> dict:
    """How often each method's highest-scoring input is the token the prediction copies (the chapter's test)."""
    V, half = recipe["vocab_size"], 12
    g = torch.Generator().manual_seed(2)
    ids = interpret.repeated_tokens(64, half, V, distinct=True, generator=g)
    x, y = ids[:, :-1], ids[:, 1:]  # (B, 2L - 1): position t predicts token t + 1
    t = torch.arange(half, 2 * half - 1)  # predictions inside the repeat
    source = t - half + 1  # the earlier copy of the token to predict
    other = (x + torch.randint(1, V, x.shape, generator=torch.Generator().manual_seed(3))) % V
    with torch.no_grad():
        _, weights = model(x, return_weights=True)
    maps = {f"attention, layer {l + 1}": w.mean(dim=1) for l, w in enumerate(weights)}
    maps["attention rollout"] = attribution.attention_rollout(weights)
    maps["gradient x input"] = attribution.gradient_x_input(model, x, y).abs()
    maps["token ablation"] = attribution.token_ablation(model, x, y, other)
    return {name: (m[:, t].argmax(-1) == source).float().mean().item() for name, m in maps.items()}


def run_induction(seeds: list[int], recipe: dict, smoke: bool) -> dict:
    steps = 20 if smoke else None
    runs = []
    for seed in seeds:
        for n_layers in (2, 1):
            t0 = time.perf_counter()
            model, eval_steps, curve, seconds = train_induction(n_layers, seed, recipe, steps)
            run = {
                "seed": seed,
                "n_layers": n_layers,
                "train_seconds": round(seconds, 2),
                "steps": eval_steps,
                "curve": {k: [round(v, 5) for v in vals] for k, vals in curve.items()},
                "phase_change_step": phase_change_step(eval_steps, curve["repeat"], recipe["vocab_size"]),
                "final": {k: round(v[-1], 5) for k, v in curve.items()},
                "ablation_repeat_loss": {
                    k: round(v, 5) for k, v in induction_ablations(model, induction_probes(recipe)).items()
                },
            }
            if n_layers == 2:
                run["attribution_agreement"] = {k: round(v, 5) for k, v in attribution_agreement(model, recipe).items()}
            runs.append(run)
            print(
                f"induction seed {seed}, {n_layers} layer(s): repeat {run['final']['repeat']:.3f}, phase change at "
                f"{run['phase_change_step']} ({time.perf_counter() - t0:.1f} s)",
                flush=True,
            )
    return {"recipe": recipe, "runs": runs}


# --- part 2: the lab's GPT --------------------------------------------------------------------------------


def train_lab(seed: int, smoke: bool):
    config = train_lm.RECIPES["book"].replace(seed=seed, threads=None)
    if smoke:
        config = config.replace(steps=5, warmup_steps=1)
    trainer = train_lm.Trainer(config)
    while trainer.step < config.steps:
        trainer.train_step()
    half = {k: v.half() for k, v in trainer.model.state_dict().items()}  # what the library ships
    model = models.GPT(trainer.model_config)
    model.load_state_dict({k: v.float() for k, v in half.items()})
    return model.eval(), half, trainer, config


@torch.no_grad()
def analyse_lab(model, val: torch.Tensor, vocab: str) -> dict:
    """The chapter's measurements on the lab's GPT (the same data, seeds and definitions)."""
    V = len(vocab)
    L, H = model.config.n_layers, model.config.n_heads
    heads = [(l, h) for l in range(L) for h in range(H)]
    out = {"val_loss": models.evaluate_lm(model, val)}
    subset = val[: 128 * 64 + 1]  # 128 windows of the validation split
    base = models.evaluate_lm(model, subset)
    out["subset_loss"] = base
    # induction: random characters, all different in the first half, then repeated
    probe = interpret.repeated_tokens(128, 32, V, distinct=True, generator=torch.Generator().manual_seed(0))
    logits, weights = model(probe, return_weights=True)
    first, repeat = interpret.repeat_losses(logits, probe)
    out["repeat_losses"] = [first.item(), repeat.item()]
    out["prefix"] = torch.stack([interpret.prefix_matching_score(w) for w in weights]).tolist()
    out["previous"] = torch.stack([interpret.previous_token_score(w) for w in weights]).tolist()
    # which heads matter: one at a time, then the least useful ones together
    delta = {}
    for head in heads:
        with interpret.ablate_heads(model, [head]):
            delta[head] = models.evaluate_lm(model, subset) - base
    out["ablation_delta"] = [[delta[(l, h)] for h in range(H)] for l in range(L)]
    order = sorted(heads, key=lambda head: delta[head])
    pruned = []
    for k in range(1, len(order) + 1):
        with interpret.ablate_heads(model, order[:k]):
            pruned.append(models.evaluate_lm(model, subset) - base)
    out["pruning_order"] = [list(h) for h in order]
    out["pruning_delta"] = pruned
    out["removable_within_margin"] = max([k + 1 for k, d in enumerate(pruned) if d <= MARGIN], default=0)
    # attention sinks: the weight on the first position and on line breaks, queries 8 .. 63
    windows = val[: 64 * 64].view(64, 64)
    _, weights = model(windows, return_weights=True)
    t = torch.arange(8, 64)
    newline = (windows == vocab.index("\n")).float()  # (B, T)
    keys_seen = torch.arange(1, 65)
    out["first_position"] = torch.stack([w[:, :, t, 0].mean(dim=(0, 2)) for w in weights]).tolist()
    out["uniform_first_position"] = (1 / (t + 1).float()).mean().item()
    out["on_newlines"] = torch.stack(
        [(w[:, :, t] * newline[:, None, None]).sum(-1).mean(dim=(0, 2)) for w in weights]
    ).tolist()
    out["newline_share_of_keys"] = (newline.cumsum(-1) / keys_seen)[:, t].mean().item()
    # Jain and Wallace: permute each head's weights over the keys it may see, or make them uniform
    probs = torch.softmax(model(windows), dim=-1)
    allowed = attention.causal_mask(64)
    shuffle_gen = torch.Generator().manual_seed(0)

    def permuted(w):
        keys = torch.rand(w.shape, generator=shuffle_gen)
        return w.gather(-1, keys.masked_fill(~allowed, 2.0).argsort(dim=-1))

    def uniform(w):
        return (allowed / allowed.sum(-1, keepdim=True)).expand_as(w)

    def tvd(p, q):
        return 0.5 * (p - q).abs().sum(-1)[:, 8:].mean().item()

    for name in ("permuted", "uniform"):
        out[f"attention_change_{name}"] = [[0.0] * H for _ in range(L)]
        out[f"output_change_{name}"] = [[0.0] * H for _ in range(L)]
    for l, h in heads:
        for name, edit in (("permuted", permuted), ("uniform", uniform)):
            with interpret.edit_attention(model, l, h, edit):
                logits, edited = model(windows, return_weights=True)
            out[f"attention_change_{name}"][l][h] = tvd(edited[l][:, h], weights[l][:, h])
            out[f"output_change_{name}"][l][h] = tvd(torch.softmax(logits, dim=-1), probs)
    return out


def run_lab(seeds: list[int], smoke: bool) -> dict:
    splits = data.load_shakespeare()
    runs, reproduced = [], None
    for seed in seeds:
        t0 = time.perf_counter()
        model, half, trainer, config = train_lab(seed, smoke)
        train_seconds = trainer.train_seconds
        run = {
            "seed": seed,
            "train_seconds": round(train_seconds, 1),
            **analyse_lab(model, splits.val, splits.tokenizer.chars),
        }
        runs.append(run)
        if seed == LAB_SEEDS[0] and not smoke:
            if CHECKPOINT.exists():
                shipped = torch.load(CHECKPOINT, weights_only=True)["model"]
                reproduced = max((shipped[k].float() - half[k].float()).abs().max().item() for k in half)
            CHECKPOINT.parent.mkdir(parents=True, exist_ok=True)
            torch.save(
                {
                    "format": interpret.LAB_GPT_FORMAT,
                    "train_config": config.to_dict(),
                    "model_config": trainer.model_config.to_dict(),
                    "chars": splits.tokenizer.chars,
                    "model": half,
                    "val_loss": run["val_loss"],
                },
                CHECKPOINT,
            )
        print(
            f"lab seed {seed}: validation loss {run['val_loss']:.4f}, {run['removable_within_margin']} heads "
            f"removable within {MARGIN} ({time.perf_counter() - t0:.1f} s)",
            flush=True,
        )
    return {
        "recipe": train_lm.RECIPES["book"].to_dict(),
        "margin": MARGIN,
        "checkpoint": str(CHECKPOINT.relative_to(HERE.parent)),
        "checkpoint_bytes": CHECKPOINT.stat().st_size if CHECKPOINT.exists() else None,
        "largest_weight_difference_from_the_shipped_file": reproduced,
        "runs": runs,
    }


# --- the README table -------------------------------------------------------------------------------------


def spread(values) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{values[0]:.3g}"
    return f"{statistics.median(values):.3g} ({min(values):.3g} to {max(values):.3g})"


def markdown(result: dict) -> str:
    rows = []
    ind = result.get("induction")
    if ind:
        two = [r for r in ind["runs"] if r["n_layers"] == 2]
        one = [r for r in ind["runs"] if r["n_layers"] == 1]
        rows += [
            "Induction heads: median (lowest to highest) over seeds "
            + ", ".join(str(r["seed"]) for r in two)
            + f"; {ind['recipe']['steps']} steps each.",
            "",
            "| model | phase change (step) | loss on the first half | loss on the repeat | largest prefix-matching "
            "score | training time (s) |",
            "|---|---|---|---|---|---|",
        ]
        for name, runs in (("two layers", two), ("one layer", one)):
            prefix = [max(v for k, v in r["final"].items() if k.startswith("prefix")) for r in runs]
            first, repeat = [r["final"]["first half"] for r in runs], [r["final"]["repeat"] for r in runs]
            rows.append(
                f"| {name} | {spread([r['phase_change_step'] for r in runs])} | {spread(first)} | "
                f"{spread(repeat)} | {spread(prefix)} | {spread([r['train_seconds'] for r in runs])} |"
            )
        methods = list(two[0]["attribution_agreement"])
        rows += ["", "Top-ranked input = the token the prediction copies (two-layer models):", ""]
        rows += ["| method | agreement |", "|---|---|"]
        rows += [f"| {m} | {spread([r['attribution_agreement'][m] for r in two])} |" for m in methods]
    lab = result.get("lab")
    if lab:
        runs = lab["runs"]
        rows += [
            "",
            f"The lab's GPT, seeds {', '.join(str(r['seed']) for r in runs)} (checkpoint `{lab['checkpoint']}`, "
            f"{lab['checkpoint_bytes'] or 0:,} bytes; largest weight difference from the file that was there: "
            f"{lab['largest_weight_difference_from_the_shipped_file']}):",
            "",
            "| seed | validation loss | largest prefix-matching score | largest previous-token score | "
            f"heads removable within {lab['margin']} nats | weight on the first position (largest head) |",
            "|---|---|---|---|---|---|",
        ]
        for r in runs:
            rows.append(
                f"| {r['seed']} | {r['val_loss']:.4f} | {max(max(x) for x in r['prefix']):.3f} | "
                f"{max(max(x) for x in r['previous']):.3f} | {r['removable_within_margin']} | "
                f"{max(max(x) for x in r['first_position']):.3f} |"
            )
    m = result["machine"]
    rows += [
        "",
        f"Measured {result['date']} on {m['cpus']} CPUs ({m['processor']}), torch {m['torch']} with "
        f"{m['threads']} thread(s); load average {m['load_start']} at the start, {m['load_end']} at the end.",
    ]
    return "\n".join(rows) + "\n"


def write_readme(result: dict) -> None:
    write_section(
        "bench_interpret",
        f"{START}\n## What attention learns: induction heads and the lab's GPT (`bench_interpret.py`)\n\n"
        f"{markdown(result)}{END}",
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["induction", "lab", "both"], default="both")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--smoke", action="store_true", help="a few steps of everything; nothing is written")
    args = parser.parse_args(argv)
    os.environ.setdefault("ATTNBOOK_PROGRESS", "0")
    torch.set_num_threads(args.threads)
    load_start = loadavg()
    result = json.loads(args.out.read_text()) if args.out.exists() and not args.smoke else {}
    if args.part in ("induction", "both"):
        result["induction"] = run_induction(INDUCTION_SEEDS[:1] if args.smoke else INDUCTION_SEEDS, RECIPE, args.smoke)
    if args.part in ("lab", "both"):
        result["lab"] = run_lab(LAB_SEEDS[1:2] if args.smoke else LAB_SEEDS, args.smoke)
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
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    write_readme(result)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
