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
benchmarks/README.md. A checkpoint already in place is compared with the one trained again: the largest
difference of a weight is recorded, and the run fails (exit status 1, after writing) unless it is 0, that is
unless the shipped file is reproduced.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
from _common import cpu_name, loadavg, write_section  # noqa: E402  (benchmarks/_common.py)
from attnbook import attention, attribution, circuits, data, interpret, interpret_experiment, models, train_lm

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "interpret.json"
CHECKPOINT = data.packaged_dir() / interpret.LAB_GPT
START, END = "<!-- bench_interpret:start -->", "<!-- bench_interpret:end -->"

RECIPE = interpret_experiment.RECIPE  # the chapter's recipe for the induction-head models
INDUCTION_SEEDS = [0, 1, 2, 3, 4]
LAB_SEEDS = [1337, 1338, 1339]
MARGIN = 0.05  # nats: how much the validation loss may rise while heads are removed


# --- part 1: induction heads -----------------------------------------------------------------------------


def train_induction(n_layers: int, seed: int, recipe: dict, steps: int | None = None):
    return interpret_experiment.train(n_layers, seed, recipe, steps=steps, quiet=True)


@torch.no_grad()
def induction_ablations(model, probes: dict, means: list | None = None) -> dict:
    """The loss on the repeat with each head removed, and with both heads of the second layer removed: by zero
    (``means`` None) or by each head's mean (mean-ablation)."""
    out = {}
    n_layers, n_heads = model.config.n_layers, model.config.n_heads
    choices = {f"L{l + 1}H{h + 1}": [(l, h)] for l in range(n_layers) for h in range(n_heads)}
    if n_layers > 1:
        choices["both heads of layer 2"] = [(1, h) for h in range(n_heads)]
    for name, heads in choices.items():
        with interpret.ablate_heads(model, heads, means=means):
            out[name] = interpret_experiment.measure(model, probes)["repeat"]
    return out


ATTRIBUTION_SEEDS = (1001, 1002)  # the sequences, and the letters put in: generators no training run reads


def attribution_agreement(model, recipe: dict) -> dict:
    """Where each method's highest-scoring inputs are, against the three inputs a copy depends on by
    construction (the chapter's test): the answer s = t - M + 1 (whose letter is predicted), the current letter
    t (the query) and the earlier occurrence t - M (which the previous-token head writes into s's key).

    For each method: how often its top input is s ("answer"), how often it is one of the three ("one of the
    three"), and how often its three top inputs are the three ("top 3").
    """
    V, M = recipe["vocab_size"], 12
    g = torch.Generator().manual_seed(ATTRIBUTION_SEEDS[0])
    ids = interpret.repeated_tokens(64, M, V, distinct=True, generator=g)
    x, y = ids[:, :-1], ids[:, 1:]  # (B, 2M - 1): position t predicts token t + 1
    t = torch.arange(M, 2 * M - 1)  # predictions inside the repeat
    source = t - M + 1  # the earlier copy of the token to predict
    truth = torch.stack([source - 1, source, t], dim=-1)  # (P, 3), in increasing order
    other = (x + torch.randint(1, V, x.shape, generator=torch.Generator().manual_seed(ATTRIBUTION_SEEDS[1]))) % V
    with torch.no_grad():
        _, weights = model(x, return_weights=True)
    maps = {f"attention, layer {l + 1}": w.mean(dim=1) for l, w in enumerate(weights)}
    maps["attention rollout"] = attribution.attention_rollout(weights)
    maps["gradient x input"] = attribution.gradient_x_input(model, x, y).abs()
    maps["token ablation"] = attribution.token_ablation(model, x, y, other)
    out = {"answer": {}, "one of the three": {}, "top 3": {}}
    for name, m in maps.items():
        rows = m[:, t]  # (B, P, T)
        top = rows.argmax(-1)  # (B, P)
        top3 = rows.topk(3, dim=-1).indices.sort(dim=-1).values  # (B, P, 3)
        out["answer"][name] = (top == source).float().mean().item()
        out["one of the three"][name] = (top[..., None] == truth).any(-1).float().mean().item()
        out["top 3"][name] = (top3 == truth).all(-1).float().mean().item()
    return out


@torch.no_grad()
def circuit_measures(model, probes: dict) -> dict:
    """The circuit read from the weights (``attnbook.circuits``), as the chapter reads it for seed 0.

    - "OV top-1" and "OV copying": every head's full OV circuit, the share of letters whose own logit it
      raises most and Elhage et al.'s eigenvalue copying score;
    - "QK direct top-1": for each layer-2 head, the share of query letters whose largest score is on a key
      holding the same letter; "QK through LlHh top-1": on a key into which that layer-1 head wrote the letter;
    - "composition": the Q-, K- and V-composition score of every (layer-1 head, layer-2 head) pair;
    - "DLA lift" and "DLA top-1": on the repeats of the distinct probes, how far each part's direct
      contribution lifts the right letter's logit above the mean letter's, and how often it ranks it first.
    """
    L, H = model.config.n_layers, model.config.n_heads
    heads = [(l, h) for l in range(L) for h in range(H)]
    name = lambda l, h: f"L{l + 1}H{h + 1}"  # noqa: E731
    out = {"OV top-1": {}, "OV copying": {}, "QK direct top-1": {}, "composition": {}}
    for l, h in heads:
        ov = circuits.ov_circuit(model, l, h)
        out["OV top-1"][name(l, h)] = circuits.diagonal_top1(ov).item()
        out["OV copying"][name(l, h)] = circuits.copying_score(ov).item()
    for h in range(H):
        out["QK direct top-1"][name(1, h)] = circuits.diagonal_top1(circuits.qk_circuit(model, 1, h)).item()
        for h1 in range(H):
            through = circuits.qk_circuit(model, 1, h, keys_through=(0, h1))
            out.setdefault(f"QK through {name(0, h1)} top-1", {})[name(1, h)] = circuits.diagonal_top1(through).item()
            pair = f"{name(0, h1)} -> {name(1, h)}"
            out["composition"][pair] = {
                k: v.item() for k, v in circuits.composition_scores(model, (0, h1), (1, h)).items()
            }
    lift, top1 = {}, {}
    for M, (_, distinct) in probes.items():
        parts, names = circuits.direct_logit_attribution(model, distinct[:, :-1])  # (B, 2M - 1, C, V)
        t = torch.arange(M, 2 * M - 1)  # predictions of the repeat's letters after its first
        right = distinct[:, t + 1]  # (B, P): the letter to predict
        p = parts[:, t]  # (B, P, C, V)
        on_right = p.gather(-1, right[:, :, None, None].expand(-1, -1, p.shape[2], 1))[..., 0]  # (B, P, C)
        for c, part in enumerate(names):
            lift[part] = lift.get(part, 0.0) + (on_right[..., c] - p[..., c, :].mean(-1)).mean().item() / len(probes)
            hit = (p[..., c, :].argmax(-1) == right).float().mean().item()
            top1[part] = top1.get(part, 0.0) + hit / len(probes)
    out["DLA lift"], out["DLA top-1"] = lift, top1
    return out


def run_induction(seeds: list[int], recipe: dict, smoke: bool) -> dict:
    steps = 20 if smoke else None
    probes = interpret_experiment.probes(recipe)
    runs = []
    for seed in seeds:
        for n_layers in (2, 1):
            t0 = time.perf_counter()
            model, eval_steps, curve, seconds = train_induction(n_layers, seed, recipe, steps)
            means = interpret.mean_heads(model, probes[max(probes)][0])  # over the longest probes
            run = {
                "seed": seed,
                "n_layers": n_layers,
                "train_seconds": round(seconds, 2),
                "steps": eval_steps,
                "curve": {k: [round(v, 5) for v in vals] for k, vals in curve.items()},
                "phase_change_step": interpret_experiment.phase_change_step(
                    eval_steps, curve["repeat"], recipe["vocab_size"]
                ),
                "final": {k: round(v[-1], 5) for k, v in curve.items()},
                "ablation_repeat_loss": {k: round(v, 5) for k, v in induction_ablations(model, probes).items()},
                "mean_ablation_repeat_loss": {
                    k: round(v, 5) for k, v in induction_ablations(model, probes, means).items()
                },
            }
            if n_layers == 2:
                run["attribution_agreement"] = _rounded(attribution_agreement(model, recipe))
                run["circuits"] = _rounded(circuit_measures(model, probes))
            runs.append(run)
            print(
                f"induction seed {seed}, {n_layers} layer(s): repeat {run['final']['repeat']:.3f}, phase change at "
                f"{run['phase_change_step']} ({time.perf_counter() - t0:.1f} s)",
                flush=True,
            )
    g = torch.Generator().manual_seed(0)
    baseline = circuits.random_composition_score(recipe["d_model"], recipe["d_model"] // recipe["n_heads"], generator=g)
    return {"recipe": recipe, "random_composition_score": round(baseline.item(), 5), "runs": runs}


def _rounded(tree):
    """Floats rounded to 5 decimals, in nested dictionaries."""
    return {k: _rounded(v) if isinstance(v, dict) else round(v, 5) for k, v in tree.items()}


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
    # the same on the text it was trained on: 128 stretches of 32 characters of the validation split, repeated
    stretches = val[: 128 * 32].view(128, 32)
    natural = torch.cat([stretches, stretches], dim=1)  # (128, 64)
    logits, weights = model(natural, return_weights=True)
    first, repeat = interpret.repeat_losses(logits, natural)
    out["natural_repeat_losses"] = [first.item(), repeat.item()]
    out["natural_prefix"] = torch.stack([interpret.prefix_matching_score(w) for w in weights]).tolist()
    # which heads matter: one at a time (by zero and by the head's mean), then the least useful ones together
    means = interpret.mean_heads(model, subset[:-1].view(128, 64))
    delta, delta_mean = {}, {}
    for head in heads:
        with interpret.ablate_heads(model, [head]):
            delta[head] = models.evaluate_lm(model, subset) - base
        with interpret.ablate_heads(model, [head], means=means):
            delta_mean[head] = models.evaluate_lm(model, subset) - base
    out["ablation_delta"] = [[delta[(l, h)] for h in range(H)] for l in range(L)]
    out["ablation_delta_mean"] = [[delta_mean[(l, h)] for h in range(H)] for l in range(L)]
    last_layer = [(L - 1, h) for h in range(H)]
    out["last_layer_delta"] = {}
    for kind, fill in (("zero", None), ("mean", means)):
        with interpret.ablate_heads(model, last_layer, means=fill):
            out["last_layer_delta"][kind] = models.evaluate_lm(model, subset) - base
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
        kinds = list(two[0]["attribution_agreement"])
        methods = list(two[0]["attribution_agreement"][kinds[0]])
        rows += [
            "",
            "Attribution against the three inputs a copy depends on (two-layer models): the top input is the answer "
            "s, the top input is one of s, t and t - M, the three top inputs are those three:",
            "",
            "| method | " + " | ".join(kinds) + " |",
            "|---|" + "---|" * len(kinds),
        ]
        for m in methods:
            rows.append(
                f"| {m} | " + " | ".join(spread([r["attribution_agreement"][k][m] for r in two]) for k in kinds) + " |"
            )
        rows += [
            "",
            "The circuit in the weights (two-layer models; layer-2 heads): OV circuit top-1 = own letter "
            f"{spread([v for r in two for k, v in r['circuits']['OV top-1'].items() if k.startswith('L2')])}, "
            "eigenvalue copying score "
            f"{spread([v for r in two for k, v in r['circuits']['OV copying'].items() if k.startswith('L2')])}; "
            "K-composition with the previous-token head "
            f"{spread([v['K'] for r in two for k, v in r['circuits']['composition'].items()])} (every pair) against "
            f"{ind['random_composition_score']:.3g} for random matrices.",
        ]
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
    difference = result.get("lab", {}).get("largest_weight_difference_from_the_shipped_file")
    if difference:
        print(f"the lab's GPT trained again differs from the shipped file (largest weight difference {difference})")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
